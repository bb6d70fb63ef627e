//! Fair-share through the real daemon: an account that used the GPUs yields
//! to one that did not, regains its place as its usage decays, and what is
//! charged adds up to what the jobs used.

use std::time::Duration;

use crate::common::{stderr, stdout, Cluster};

const LONG: Duration = Duration::from_secs(30);

/// One GPU, three accounts of equal shares; all of them the test's user's.
fn cluster(extra: &str) -> Cluster {
    let me = ysched::cli::current_user_name();
    Cluster::with_gpus(
        &format!("cgroups = \"off\"\n{extra}"),
        &format!(
            "[[gpus]]\ntype = \"a100\"\ncount = 1\nmemory = \"80GiB\"\n[[accounts]]\nname = \"heavy\"\nusers = [\"{me}\"]\n[[accounts]]\nname = \"fresh\"\nusers = [\"{me}\"]\n[[accounts]]\nname = \"other\"\nusers = [\"{me}\"]\n[billing]\na100 = 3\n"
        ),
    )
}

fn started(c: &Cluster, id: u64) -> f64 {
    c.output_of(id)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("job {id} wrote {:?}", c.output_of(id)))
}

/// Holds the GPU while `X` (from `first`) and `Y` (from `second`) are queued
/// in that order; returns (X, Y) once both ran.
fn race(c: &Cluster, first: &str, second: &str) -> (u64, u64) {
    let blocker = c.submit(&["-A", "other", "-G", "1", "--wrap", "sleep 1"]);
    c.wait_state(blocker, "RUNNING", LONG);
    let x = c.submit(&["-A", first, "-G", "1", "--wrap", "date +%s.%N"]);
    let y = c.submit(&["-A", second, "-G", "1", "--wrap", "date +%s.%N"]);
    let q = stdout(&c.run("ysqueue", &["-h", "-t", "PD", "-o", "%i"]));
    assert_eq!(q.lines().count(), 2, "both wait behind the blocker: {q}");
    for id in [blocker, x, y] {
        assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    }
    (x, y)
}

#[test]
fn an_account_that_used_the_gpus_yields_to_one_that_did_not() {
    let mut c = cluster("");
    c.start();
    let used = c.submit(&["-A", "heavy", "-G", "1", "--wrap", "sleep 2"]);
    assert_eq!(c.wait_done(used, LONG), "COMPLETED");
    let (heavy, fresh) = race(&c, "heavy", "fresh");
    assert!(
        started(&c, fresh) < started(&c, heavy),
        "the fresh account's job, submitted later, ran first"
    );
    // The queue showed why: the priority view has the fair-share part.
    let out = c.run("ysqueue", &["--priority"]);
    assert!(stdout(&out).starts_with("JOBID"), "{}", stderr(&out));
    assert!(stdout(&out).contains("FAIRSHARE"));
}

#[test]
fn usage_decays_and_an_account_regains_its_place() {
    // A half-life of one second: usage from a few seconds ago hardly counts.
    let mut c = cluster("[fairshare]\nhalf_life = \"0:01\"");
    c.start();
    let old = c.submit(&["-A", "heavy", "-G", "1", "--wrap", "sleep 2"]);
    let recent = c.submit(&["-A", "fresh", "-G", "1", "--wrap", "sleep 2"]);
    assert_eq!(c.wait_done(old, LONG), "COMPLETED");
    assert_eq!(c.wait_done(recent, LONG), "COMPLETED");
    // Both used the same; heavy's use is older and has decayed more.
    let (fresh, heavy) = race(&c, "fresh", "heavy");
    assert!(
        started(&c, heavy) < started(&c, fresh),
        "the account whose usage decayed ran first"
    );
}

#[test]
fn what_is_charged_is_what_the_jobs_used() {
    let mut c = cluster("");
    c.start();
    let a = c.submit(&["-A", "heavy", "-G", "1", "--wrap", "sleep 2"]);
    let b = c.submit(&["-A", "heavy", "-G", "1", "--wrap", "sleep 1"]);
    assert_eq!(c.wait_done(a, LONG), "COMPLETED");
    assert_eq!(c.wait_done(b, LONG), "COMPLETED");
    let billing = |id: u64| -> i64 { c.field(id, "Billing").parse().unwrap() };
    let elapsed = |id: u64| -> i64 { c.field(id, "ElapsedRaw").parse().unwrap() };
    for id in [a, b] {
        assert_eq!(
            billing(id),
            elapsed(id) * 3,
            "one a100 at weight 3 for its elapsed seconds"
        );
    }
    let shares = stdout(&c.run("ysshare", &["-P", "-n", "-A", "heavy"]));
    let user_row = shares
        .lines()
        .find(|l| !l.split('|').nth(1).unwrap_or("").is_empty())
        .unwrap();
    let raw: i64 = user_row.split('|').nth(4).unwrap().parse().unwrap();
    assert_eq!(
        raw,
        billing(a) + billing(b),
        "ysshare's RawUsage is the sum over jobs: {shares}"
    );
    // It survives a restart of the daemon.
    c.stop();
    c.start();
    let again = stdout(&c.run("ysshare", &["-P", "-n", "-A", "heavy"]));
    assert_eq!(again, shares);
}

#[test]
fn a_reload_that_changes_shares_shows_in_ysshare_at_once() {
    let mut c = cluster("");
    c.start();
    let raw_shares = |c: &Cluster| -> String {
        let out = c.run("ysshare", &["-P", "-n", "-A", "heavy"]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
            .lines()
            .find(|l| l.split('|').nth(1) == Some(""))
            .map(|l| l.split('|').nth(2).unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    assert_eq!(raw_shares(&c), "1");
    let text = std::fs::read_to_string(&c.config)
        .unwrap()
        .replace("name = \"heavy\"\n", "name = \"heavy\"\nshares = 5\n");
    std::fs::write(&c.config, text).unwrap();
    let out = c.run("yscontrol", &["reload"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(raw_shares(&c), "5", "the share view follows the reload");
    c.stop();
}

/// An account whose long job is still running weighs in now, not only
/// when the job ends; with usage alike, the earlier submission goes first
/// whatever the accounts are called.
#[test]
fn a_running_job_counts_against_its_account_while_it_runs() {
    let me = ysched::cli::current_user_name();
    let c = Cluster::with_gpus(
        "cgroups = \"off\"",
        &format!(
            "[[gpus]]\ntype = \"a100\"\ncount = 2\nmemory = \"80GiB\"\n[[accounts]]\nname = \"a-heavy\"\nusers = [\"{me}\"]\n[[accounts]]\nname = \"b-fresh\"\nusers = [\"{me}\"]\n[[accounts]]\nname = \"other\"\nusers = [\"{me}\"]\n"
        ),
    );
    let mut c = c;
    c.start();
    let long = c.submit(&["-A", "a-heavy", "-G", "1", "--wrap", "sleep 30"]);
    c.wait_state(long, "RUNNING", LONG);
    std::thread::sleep(Duration::from_secs(2));
    let (x, y) = race(&c, "a-heavy", "b-fresh");
    assert!(
        started(&c, y) < started(&c, x),
        "b-fresh's job, submitted later, ran first: a-heavy's running job counts"
    );
    let _ = c.run("yscancel", &[&long.to_string()]);

    // Usage alike (none yet): the earlier submission first, though its
    // account sorts after the other's by name.
    let c2 = cluster("");
    let mut c2 = c2;
    c2.start();
    let (first, second) = race(&c2, "heavy", "fresh");
    assert!(
        started(&c2, first) < started(&c2, second),
        "ties go to the earlier submission"
    );
}
