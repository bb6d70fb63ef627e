//! Reservations and backfill through the daemon: what `ysqueue --start`
//! promises, and which job may go ahead.

use std::time::Duration;

use crate::common::{stderr, stdout, Cluster};

const LONG: Duration = Duration::from_secs(20);

fn queue_json(c: &Cluster) -> serde_json::Value {
    serde_json::from_str(&stdout(&c.run("ysqueue", &["--json"]))).unwrap()
}

fn job_json(queue: &serde_json::Value, id: u64) -> serde_json::Value {
    queue["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("job {id} not in {queue}"))
}

#[test]
fn blocked_jobs_get_start_times_and_only_harmless_jobs_go_ahead() {
    let c = Cluster::started("");
    c.script("sleep.sh", "#!/bin/sh\nsleep 300\n");
    // 3 of 4 GPUs for 10 minutes.
    let busy = c.submit(&["--gpus", "3", "-t", "10", "sleep.sh"]);
    c.wait_state(busy, "RUNNING", LONG);
    // All 4 GPUs: must wait for `busy` to reach its limit.
    let all = c.submit(&["--gpus", "4", "-t", "5", "sleep.sh"]);
    // Fits on the free GPU now, but for longer than until `all` starts.
    let long = c.submit(&["--gpus", "1", "-t", "30", "sleep.sh"]);
    // Ends well before: backfilled.
    let short = c.submit(&["--gpus", "1", "-t", "2", "sleep.sh"]);
    c.wait_state(short, "RUNNING", LONG);

    let q = queue_json(&c);
    let started = job_json(&q, busy)["start_time"].as_i64().unwrap();
    let all_json = job_json(&q, all);
    assert_eq!(all_json["pending_reason"], "Resources");
    assert_eq!(all_json["expected_start"], started + 600, "{all_json}");
    let long_json = job_json(&q, long);
    assert_eq!(long_json["pending_reason"], "Priority");
    assert_eq!(
        long_json["expected_start"],
        started + 600 + 300,
        "after `all` ends: {long_json}"
    );

    let out = c.run("ysqueue", &["--start"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].contains("START_TIME"), "{text}");
    assert_eq!(lines.len(), 3, "pending jobs only: {text}");
    assert!(lines[1].starts_with(&format!("{all} ")), "{text}");
    assert!(lines[2].starts_with(&format!("{long} ")), "{text}");
    // A bad combination is refused by the command line.
    let both = c.run("ysqueue", &["--start", "--priority"]);
    assert_eq!(both.status.code(), Some(2));

    let out = c.run("yscancel", &["-u", "root"]);
    assert!(out.status.success(), "{}", stderr(&out));
}
