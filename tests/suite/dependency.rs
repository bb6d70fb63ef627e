//! `--dependency`: jobs that wait for other jobs' outcomes, through the real
//! daemon; refused when impossible, kept across a daemon restart.

use std::time::Duration;

use crate::common::{stderr, stdout, wait_for, Cluster};

const LONG: Duration = Duration::from_secs(20);

fn reason(c: &Cluster, id: u64) -> String {
    stdout(&c.run("ysqueue", &["-h", "-j", &id.to_string(), "-o", "%r"]))
        .trim()
        .to_string()
}

fn start_time(c: &Cluster, id: u64) -> String {
    c.field(id, "Start")
}

#[test]
fn afterok_runs_after_success_and_survives_a_restart() {
    let mut c = Cluster::started("");
    let first = c.submit(&["-H", "--wrap", "echo made > made.txt"]);
    let ok = c.submit(&["-d", &format!("afterok:{first}"), "--wrap", "cat made.txt"]);
    let not_ok = c.submit(&[
        "--dependency",
        &format!("afternotok:{first}"),
        "--wrap",
        "true",
    ]);
    wait_for("the dependent job's reason", LONG, || {
        reason(&c, ok) == "Dependency"
    });
    assert_eq!(reason(&c, not_ok), "Dependency");
    let shown = stdout(&c.run("yscontrol", &["show", "job", &ok.to_string()]));
    assert!(
        shown.contains(&format!("Dependency=afterok:{first}")),
        "{shown}"
    );

    // The dependency is in the database: a restart keeps it.
    c.crash();
    c.start();
    assert_eq!(c.state(ok), "PENDING");
    c.run("yscontrol", &["release", &first.to_string()]);
    assert_eq!(c.wait_done(first, LONG), "COMPLETED");
    assert_eq!(c.wait_done(ok, LONG), "COMPLETED");
    assert_eq!(c.output_of(ok), "made\n");

    // afternotok on a job that succeeded: pending for good, until cancelled.
    wait_for("the reason to change", LONG, || {
        reason(&c, not_ok) == "DependencyNeverSatisfied"
    });
    assert_eq!(c.state(not_ok), "PENDING");
    let out = c.run("yscancel", &[&not_ok.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(c.wait_done(not_ok, LONG), "CANCELLED");
    assert_eq!(c.field(ok, "Dependency"), format!("afterok:{first}"));
}

#[test]
fn afternotok_runs_the_fallback_and_any_of_takes_one() {
    let c = Cluster::started("");
    let failing = c.submit(&["-H", "--wrap", "exit 3"]);
    let fallback = c.submit(&["-d", &format!("afternotok:{failing}"), "--wrap", "true"]);
    let either = c.submit(&[
        "-d",
        &format!("afterok:{failing}?afternotok:{failing}"),
        "--wrap",
        "true",
    ]);
    c.run("yscontrol", &["release", &failing.to_string()]);
    assert_eq!(c.wait_done(failing, LONG), "FAILED");
    assert_eq!(c.wait_done(fallback, LONG), "COMPLETED");
    assert_eq!(c.wait_done(either, LONG), "COMPLETED");
}

#[test]
fn after_starts_once_the_other_job_has_started() {
    let c = Cluster::started("");
    let long = c.submit(&["-H", "--wrap", "sleep 30"]);
    let follower = c.submit(&["-d", &format!("after:{long}"), "--wrap", "true"]);
    wait_for("the reason", LONG, || reason(&c, follower) == "Dependency");
    c.run("yscontrol", &["release", &long.to_string()]);
    // Started while the other still runs.
    assert_eq!(c.wait_done(follower, LONG), "COMPLETED");
    assert_eq!(c.state(long), "RUNNING");
    c.run("yscancel", &[&long.to_string()]);
}

#[test]
fn singleton_runs_one_job_of_a_name_at_a_time() {
    let c = Cluster::started("");
    let args = ["-J", "nightly", "-d", "singleton", "--wrap", "sleep 1"];
    let first = c.submit(&args);
    let second = c.submit(&args);
    c.wait_state(first, "RUNNING", LONG);
    assert_eq!(reason(&c, second), "Dependency");
    // Another name is not held back.
    let other = c.submit(&["-J", "other", "-d", "singleton", "--wrap", "true"]);
    assert_eq!(c.wait_done(other, LONG), "COMPLETED");
    assert_eq!(c.wait_done(second, LONG), "COMPLETED");
    assert!(start_time(&c, second) >= c.field(first, "End"));
}

#[test]
fn impossible_or_malformed_dependencies_are_refused() {
    let c = Cluster::started("");
    let failed = c.submit(&["--wrap", "exit 1"]);
    assert_eq!(c.wait_done(failed, LONG), "FAILED");

    let out = c.run(
        "ysbatch",
        &["-d", &format!("afterok:{failed}"), "--wrap", "true"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!(
            "--dependency afterok:{failed} can never be satisfied: job {failed} is FAILED"
        )),
        "{}",
        stderr(&out)
    );

    let out = c.run("ysbatch", &["-d", "afterok:999", "--wrap", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("job 999 does not exist"),
        "{}",
        stderr(&out)
    );

    // A bad option value is a usage error, as for every option.
    let out = c.run("ysbatch", &["-d", "afterwards:1", "--wrap", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unknown dependency type 'afterwards' (allowed: after, afterany"),
        "{}",
        stderr(&out)
    );

    let script = c.script(
        "job.sh",
        "#!/bin/sh\n#SBATCH --dependency=afterok:x\ntrue\n",
    );
    let out = c.run("ysbatch", &[script.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("line 2: --dependency: afterok: 'x' is not a job id"),
        "{}",
        stderr(&out)
    );
    // Nothing was queued by the refusals.
    let queue = stdout(&c.run("ysqueue", &["-h"]));
    assert!(queue.trim().is_empty(), "{queue}");
}

#[test]
fn kill_invalid_dependency_cancels_the_dependent_job() {
    let c = Cluster::started("kill_invalid_dependency = true");
    let first = c.submit(&["-H", "--wrap", "true"]);
    let dependent = c.submit(&["-d", &format!("afterok:{first}"), "--wrap", "true"]);
    c.run("yscancel", &[&first.to_string()]);
    assert_eq!(c.wait_done(dependent, LONG), "CANCELLED");
    assert_eq!(c.field(dependent, "Reason"), "DependencyNeverSatisfied");
    assert_eq!(c.field(dependent, "Start"), "Unknown");
}
