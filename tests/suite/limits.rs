//! Account limits through the real daemon: a team over its GPU limit waits
//! with the reason, and holds up nobody else; some requests are refused at
//! submit.

use crate::common;

use std::time::Duration;

use crate::common::{stderr, stdout, Cluster};

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

/// `ysbatch --parsable -A account -G 1 -t minutes -H --wrap true`.
fn submit_held(c: &Cluster, account: &str, minutes: &str) -> std::process::Output {
    c.run(
        "ysbatch",
        &[
            "--parsable",
            "-A",
            account,
            "-G",
            "1",
            "-t",
            minutes,
            "-H",
            "--wrap",
            "true",
        ],
    )
}

#[test]
fn a_budget_refuses_or_downgrades_with_the_numbers() {
    let me = ysched::cli::current_user_name();
    // 1 token = one a100-hour at weight 1. Budgets of 1 token a month.
    let c = Cluster::started(&format!(
        "cgroups = \"off\"\n[[accounts]]\nname = \"strict\"\nusers = [\"{me}\"]\nbudget = 1\n[[accounts]]\nname = \"lenient\"\nusers = [\"{me}\"]\nbudget = 1\nover_budget = \"lowest_qos\"\nbudget_warning = 0.5\n"
    ));
    // Half an hour on one GPU: fits, but holds half the budget.
    let out = submit_held(&c, "strict", "30");
    assert!(out.status.success(), "{}", stderr(&out));
    // An hour more does not fit.
    let out = c.run(
        "ysbatch",
        &["-A", "strict", "-G", "1", "-t", "60", "--wrap", "true"],
    );
    assert_eq!(out.status.code(), Some(1));
    let month = jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .strftime("%Y-%m")
        .to_string();
    assert_eq!(
        stderr(&out),
        format!("ysbatch: error: account 'strict' is over budget: the job may cost 1.0 tokens, but 0.5 of its 1.0 for {month} are left (0.0 spent, 0.5 held by its pending and running jobs)\n")
    );
    let out = c.run("ysbatch", &["-A", "strict", "-G", "1", "--wrap", "true"]);
    assert!(
        stderr(&out).contains("a job without a time limit has no bound on its cost"),
        "{}",
        stderr(&out)
    );

    // Lenient: a warning past half, then the lowest QoS instead of a refusal.
    let out = submit_held(&c, "lenient", "40");
    assert!(out.status.success());
    assert!(
        stderr(&out).contains("account 'lenient' has used or holds 67% of its 1.0-token budget"),
        "{}",
        stderr(&out)
    );
    let out = submit_held(&c, "lenient", "60");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains("admitted at the lowest QoS: it runs only when nobody else wants the GPUs"),
        "{}",
        stderr(&out)
    );
    let id: u64 = stdout(&out).trim().parse().unwrap();
    assert_eq!(c.field(id, "QOS"), "low");

    let shares = stdout(&c.run("ysshare", &["-P", "-A", "strict"]));
    assert!(
        shares
            .lines()
            .next()
            .unwrap()
            .ends_with("|Budget|BudgetLeft"),
        "{shares}"
    );
    assert!(
        shares.lines().nth(1).unwrap().ends_with("|1.0|0.5"),
        "{shares}"
    );
}

#[test]
fn what_jobs_were_charged_is_spent_from_the_budget_across_restarts() {
    let me = ysched::cli::current_user_name();
    // Weight 3600 makes one GPU-second one token.
    let mut c = Cluster::new(&format!(
        "cgroups = \"off\"\n[[accounts]]\nname = \"team\"\nusers = [\"{me}\"]\nbudget = 100\n[billing]\na100 = 3600\n"
    ));
    c.start();
    let id = c.submit(&["-A", "team", "-G", "1", "-t", "1", "--wrap", "sleep 2"]);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    let spent: f64 = c.field(id, "Billing").parse::<f64>().unwrap() / 3_600.0;
    assert!(spent >= 1.0, "{spent}");
    let left = |c: &Cluster| {
        let shares = stdout(&c.run("ysshare", &["-P", "-n", "-A", "team"]));
        shares
            .lines()
            .next()
            .unwrap()
            .rsplit('|')
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(left(&c), format!("{:.1}", 100.0 - spent));
    c.stop();
    c.start();
    assert_eq!(
        left(&c),
        format!("{:.1}", 100.0 - spent),
        "summed again from the database"
    );
}

#[test]
fn gpus_reserved_for_a_qos_wait_for_its_jobs() {
    let c = Cluster::started(
        "cgroups = \"off\"\n[[qos]]\nname = \"critical\"\npriority = 300\nreserve = 2\n[[qos]]\nname = \"medium\"\npriority = 100\n",
    );
    let first = c.submit(&["-G", "2", "--wrap", "sleep 30"]);
    c.wait_state(first, "RUNNING", LONG);
    let kept_out = c.submit(&["-G", "1", "--wrap", "true"]);
    let reason = || stdout(&c.run("ysqueue", &["-h", "-j", &kept_out.to_string(), "-o", "%r"]));
    common::wait_for("the reason", LONG, || reason().trim() == "ReservedForQOS");
    let urgent = c.submit(&["-q", "critical", "-G", "2", "--wrap", "true"]);
    assert_eq!(c.wait_done(urgent, LONG), "COMPLETED");
    assert_eq!(c.state(kept_out), "PENDING");
    c.run("yscancel", &[&first.to_string()]);
    assert_eq!(c.wait_done(kept_out, LONG), "COMPLETED");
}

#[test]
fn a_limit_window_that_holds_now_replaces_the_base_limit() {
    let me = ysched::cli::current_user_name();
    // A window over the whole week holds whenever the test runs.
    let c = Cluster::started(&format!(
        "cgroups = \"off\"\n[[accounts]]\nname = \"team\"\nusers = [\"{me}\"]\nmax_gpus = 1\nmax_gpus_windows = [{{ days = \"all\", hours = \"00:00-24:00\", max_gpus = 3 }}]\n"
    ));
    let jobs: Vec<u64> = (0..4)
        .map(|_| c.submit(&["-G", "1", "--wrap", "sleep 30"]))
        .collect();
    for id in &jobs[..3] {
        c.wait_state(*id, "RUNNING", LONG);
    }
    let reason = stdout(&c.run("ysqueue", &["-h", "-j", &jobs[3].to_string(), "-o", "%r"]));
    assert_eq!(
        reason.trim(),
        "AssocGrpGRES",
        "three held, as the window allows"
    );
    c.run("yscancel", &["-u", &me]);
}

#[test]
fn pending_jobs_a_lowered_budget_cannot_cover_wait_for_it() {
    let me = ysched::cli::current_user_name();
    let c = Cluster::started(&format!(
        "cgroups = \"off\"\n[[accounts]]\nname = \"vision\"\nusers = [\"{me}\"]\nbudget = 4\n"
    ));
    // Two held half-hour jobs: 1 token of 4 between them.
    let ids: Vec<u64> = (0..2)
        .map(|_| {
            c.submit(&[
                "-A",
                "vision",
                "-G",
                "1",
                "-t",
                "30",
                "-H",
                "--wrap",
                "sleep 300",
            ])
        })
        .collect();
    // The admin cuts the budget to 0.6 tokens: one half-hour job fits.
    let text = std::fs::read_to_string(&c.config).unwrap();
    std::fs::write(&c.config, text.replace("budget = 4", "budget = 0.6")).unwrap();
    let out = c.run("yscontrol", &["reload"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = c.run(
        "yscontrol",
        &["release", &ids[0].to_string(), &ids[1].to_string()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    c.wait_state(ids[0], "RUNNING", LONG);
    common::wait_for("the second job to wait for the budget", LONG, || {
        let reason = stdout(&c.run("ysqueue", &["-h", "-j", &ids[1].to_string(), "-o", "%r"]));
        reason.trim() == "AssocGrpBillingMinutes"
    });
    // What the first one does not use comes back when it ends.
    c.run("yscancel", &[&ids[0].to_string()]);
    c.wait_state(ids[1], "RUNNING", LONG);
    c.run("yscancel", &[&ids[1].to_string()]);
}
