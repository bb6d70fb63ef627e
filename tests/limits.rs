//! Account limits through the real daemon: a team over its GPU limit waits
//! with the reason, and holds up nobody else; some requests are refused at
//! submit.

mod common;

use std::time::Duration;

use common::{stderr, stdout, Cluster};

const LONG: Duration = Duration::from_secs(30);

#[test]
fn a_team_at_its_limit_waits_and_others_go_ahead() {
    let me = ysched::cli::current_user_name();
    let c = Cluster::started(&format!(
        "cgroups = \"off\"\n[[accounts]]\nname = \"team\"\nusers = [\"{me}\"]\nmax_gpus = 2\nmax_gpus_per_job = 2\nmax_submitted_jobs = 4\n[[accounts]]\nname = \"solo\"\nusers = [\"{me}\"]\nmax_running_jobs_per_user = 1\n[[accounts]]\nname = \"other\"\nusers = [\"{me}\"]\n"
    ));
    let a = c.submit(&["-A", "team", "-G", "1", "--wrap", "sleep 3"]);
    let b = c.submit(&["-A", "team", "-G", "1", "--wrap", "sleep 3"]);
    let waits = c.submit(&["-A", "team", "-G", "1", "--wrap", "true"]);
    let later = c.submit(&["-A", "other", "-G", "1", "--wrap", "sleep 3"]);
    c.wait_state(a, "RUNNING", LONG);
    c.wait_state(b, "RUNNING", LONG);
    c.wait_state(later, "RUNNING", LONG);
    let reason = stdout(&c.run("ysqueue", &["-h", "-j", &waits.to_string(), "-o", "%t %r"]));
    assert_eq!(
        reason.trim(),
        "PD AssocGrpGRES",
        "a GPU is free, but team holds its 2"
    );

    // Refused at submit, with the numbers.
    let out = c.run("ysbatch", &["-A", "team", "-G", "3", "--wrap", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(
            "3 GPUs requested, but jobs of account 'team' may have at most 2 (max_gpus_per_job)"
        ),
        "{}",
        stderr(&out)
    );
    // Held, so that it is still pending when the next one comes.
    let fourth = c.submit(&["-A", "team", "-H", "--wrap", "true"]);
    let out = c.run("ysbatch", &["-A", "team", "--wrap", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("account 'team' already has 4 jobs pending or running, its limit (max_submitted_jobs = 4)"), "{}", stderr(&out));

    // Per user: one running job at a time in solo.
    let s1 = c.submit(&["-A", "solo", "--wrap", "sleep 2"]);
    let s2 = c.submit(&["-A", "solo", "--wrap", "true"]);
    c.wait_state(s1, "RUNNING", LONG);
    let reason = stdout(&c.run("ysqueue", &["-h", "-j", &s2.to_string(), "-o", "%r"]));
    assert_eq!(reason.trim(), "AssocMaxJobsLimit");

    assert!(c
        .run("yscontrol", &["release", &fourth.to_string()])
        .status
        .success());
    for id in [a, b, waits, later, fourth, s1, s2] {
        assert_eq!(c.wait_done(id, LONG), "COMPLETED", "job {id}");
    }
}
