//! Approval: big jobs, or jobs on reserved GPU types, wait held until a
//! coordinator of their account approves them; who approved is recorded.

use crate::common;

use std::time::Duration;

use crate::common::{stderr, stdout, Cluster, TestUser};

const LONG: Duration = Duration::from_secs(20);

fn cluster(users: &[&str], coordinators: &[&str]) -> Cluster {
    let list = |names: &[&str]| {
        names
            .iter()
            .map(|n| format!("\"{n}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Cluster::started(&format!(
        "cgroups = \"off\"\n[[accounts]]\nname = \"vision\"\nusers = [{}]\ncoordinators = [{}]\napproval_above_gpu_hours = 2\n",
        list(users),
        list(coordinators)
    ))
}

fn reason(c: &Cluster, id: u64) -> String {
    stdout(&c.run("ysqueue", &["-h", "-j", &id.to_string(), "-o", "%r"]))
        .trim()
        .to_string()
}

#[test]
fn a_big_job_waits_for_approval_and_a_small_one_does_not() {
    let me = ysched::cli::current_user_name();
    // The submitter is its own account's coordinator here: no other user
    // is needed, so this runs without root too.
    let c = cluster(&[&me], &[&me]);
    let out = c.run(
        "ysbatch",
        &["--parsable", "-G", "4", "-t", "1:00:00", "--wrap", "true"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let big: u64 = stdout(&out).trim().parse().unwrap();
    assert!(
        stderr(&out).contains(&format!(
            "job {big} is held for approval: its 4.0 GPU-hours (GPUs x time limit) are more than account vision's approval_above_gpu_hours (2). A coordinator of account vision ({me}) or an administrator may let it run: yscontrol approve {big}"
        )),
        "{}",
        stderr(&out)
    );
    assert_eq!(reason(&c, big), "PendingApproval");

    let small = c.submit(&["-G", "1", "-t", "1:00:00", "--wrap", "true"]);
    assert_eq!(c.wait_done(small, LONG), "COMPLETED");
    assert_eq!(c.state(big), "PENDING", "still waits for approval");

    let out = c.run("yscontrol", &["approve", &big.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(c.wait_done(big, LONG), "COMPLETED");
    let shown = stdout(&c.run("yscontrol", &["show", "job", &big.to_string()]));
    assert!(shown.contains(&format!("ApprovedBy={me}")), "{shown}");

    // Approving what does not wait for it says so.
    let out = c.run("yscontrol", &["approve", &small.to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("has already finished"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn only_a_coordinator_or_an_admin_approves() {
    if !common::is_root() {
        common::skip(module_path!(), "needs root to create users");
        return;
    }
    let alice = TestUser::create("alice");
    let carol = TestUser::create("carol");
    let c = cluster(&[&alice.name, &carol.name], &[&carol.name]);
    let submit = |args: &[&str]| -> u64 {
        let out = c.run_as(&alice.name, "ysbatch", &[&["--parsable"], args].concat());
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out).trim().parse().unwrap()
    };
    let big = submit(&["-G", "3", "-t", "1:00:00", "--wrap", "true"]);
    assert_eq!(reason(&c, big), "PendingApproval");

    // Its own user can neither release nor re-hold it.
    let out = c.run_as(&alice.name, "yscontrol", &["release", &big.to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!(
            "permission denied: job {big} waits for approval by a coordinator of account vision ({})",
            carol.name
        )),
        "{}",
        stderr(&out)
    );
    let out = c.run_as(&alice.name, "yscontrol", &["hold", &big.to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("already held, waiting for approval"),
        "{}",
        stderr(&out)
    );
    assert_eq!(reason(&c, big), "PendingApproval");

    // The coordinator approves it, with release as with approve.
    let out = c.run_as(&carol.name, "yscontrol", &["release", &big.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(c.wait_done(big, LONG), "COMPLETED");
    let shown = stdout(&c.run("yscontrol", &["show", "job", &big.to_string()]));
    assert!(
        shown.contains(&format!("ApprovedBy={}", carol.name)),
        "{shown}"
    );

    // Root, an administrator, may approve any job.
    let second = submit(&["-G", "4", "-t", "1:00:00", "--wrap", "true"]);
    let out = c.run("yscontrol", &["approve", &second.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(c.wait_done(second, LONG), "COMPLETED");
}
