//! `ysreport` over a database filled by a real daemon run, and over
//! fixture rows for an older month whose figures are computed by hand.

mod common;

use std::time::Duration;

use common::{stderr, stdout, Cluster};

const LONG: Duration = Duration::from_secs(20);

const ACCOUNTS: &str = "timezone = \"UTC\"\n[[accounts]]\nname = \"vision\"\nusers = [\"*\"]\n\
                        [[accounts]]\nname = \"nlp\"\nusers = [\"*\"]\n";

fn report_json(c: &Cluster, args: &[&str]) -> serde_json::Value {
    let out = c.run("ysreport", &[&["--json"], args].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

#[test]
fn a_report_sums_what_the_daemon_ran() {
    let c = Cluster::started(ACCOUNTS);
    let a = c.submit(&["-A", "vision", "--gpus", "2", "--wrap", "sleep 1"]);
    let b = c.submit(&["-A", "vision", "--gpus", "2", "--wrap", "sleep 1"]);
    let f = c.submit(&["-A", "nlp", "--gpus", "1", "--wrap", "exit 3"]);
    for id in [a, b] {
        assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    }
    assert_eq!(c.wait_done(f, LONG), "FAILED");
    // GPU utilisation: a number where NVML answers, else honestly none.
    let util = c.field(a, "GPUUtil");
    if c.log().contains("GPU utilisation: none") {
        assert_eq!(util, "n/a");
        assert_eq!(c.field(a, "GPULowTime"), "n/a");
    } else {
        assert!(util == "n/a" || util.ends_with('%'), "{util}");
    }
    let elapsed = |id: u64| -> f64 { c.field(id, "ElapsedRaw").parse().unwrap() };
    let vision_hours = (elapsed(a) + elapsed(b)) * 2.0 / 3600.0;

    let r = report_json(&c, &["-S", "now-1hour"]);
    assert_eq!(r["total"]["jobs"], 3);
    let vision = &r["accounts"].as_array().unwrap()[1];
    assert_eq!(vision["account"], "vision");
    assert_eq!(vision["jobs"], 2);
    assert_eq!(vision["completed"], 2);
    assert!(
        (vision["gpu_hours"].as_f64().unwrap() - vision_hours).abs() < 1e-9,
        "{vision} vs {vision_hours}"
    );
    assert_eq!(r["accounts"][0]["failed"], 1);
    assert_eq!(r["users"].as_array().unwrap().len(), 2);

    // The same as text and CSV; one account only.
    let text = stdout(&c.run("ysreport", &["-S", "now-1hour", "-A", "nlp"]));
    assert!(text.contains("(jobs that ended in it: 1)"), "{text}");
    let csv = stdout(&c.run("ysreport", &["-S", "now-1hour", "--csv"]));
    assert_eq!(csv.lines().count(), 1 + 2 + 2 + 1, "{csv}");
}

#[test]
fn an_older_month_from_fixture_rows_by_hand_and_bad_input() {
    let mut c = Cluster::started(ACCOUNTS);
    c.stop();
    // March 2025: three vision jobs of 1, 2 and 4 GPU-hours that waited
    // 0, 10 and 30 minutes, one of them preempted twice; one nlp timeout.
    let db = rusqlite::Connection::open(c.spool.join("ysched.db")).unwrap();
    let march = 1_740_787_200; // 2025-03-01T00:00:00Z
    let row = |account: &str, state: &str, wait: i64, gpu_hours: i64, preempted: u32| {
        let submit = march + 86_400;
        db.execute(
            "INSERT INTO jobs (uid, gid, user, account, qos, name, state, gpu_count, cpus, \
             submit_time, start_time, end_time, work_dir, submit_dir, std_out, gpu_seconds, \
             billing, preempt_count) \
             VALUES (0, 0, 'root', ?1, 'medium', 'old', ?2, 1, 1, ?3, ?4, ?5, '/', '/', 'o', ?6, ?7, ?8)",
            rusqlite::params![
                account,
                state,
                submit,
                submit + wait,
                submit + wait + gpu_hours * 3_600,
                gpu_hours * 3_600,
                gpu_hours * 3_600 * 5,
                preempted
            ],
        )
        .unwrap();
    };
    row("vision", "COMPLETED", 0, 1, 0);
    row("vision", "COMPLETED", 600, 2, 2);
    row("vision", "COMPLETED", 1_800, 4, 0);
    row("nlp", "TIMEOUT", 60, 1, 0);
    // An nlp job that sat 2 h of its 3 h on two idle GPUs (sampled).
    db.execute(
        "INSERT INTO jobs (uid, gid, user, account, qos, name, state, gpu_count, cpus, \
         submit_time, start_time, end_time, work_dir, submit_dir, std_out, gpus_alloc, \
         gpu_seconds, billing, gpu_samples, gpu_util_sum, gpu_util_max, gpu_low_secs) \
         VALUES (0, 0, 'root', 'nlp', 'medium', '<script>idle</script>', 'COMPLETED', 2, 1, \
         ?1, ?1, ?2, '/', '/', 'o', '0,1', 21600, 21600, 360, 3600, 90, 7200)",
        rusqlite::params![march + 86_400, march + 86_400 + 10_800],
    )
    .unwrap();
    drop(db);
    c.start();
    let r = report_json(&c, &["--month", "2025-03"]);
    assert_eq!(r["period"]["label"], "2025-03");
    let vision = &r["accounts"][1];
    assert_eq!(vision["jobs"], 3);
    assert_eq!(vision["gpu_hours"], 7.0);
    assert_eq!(vision["tokens"], 35.0);
    assert_eq!(vision["share"], 7.0 / 14.0);
    assert_eq!(vision["wait_mean_s"], 800.0);
    assert_eq!(vision["wait_p50_s"], 600);
    assert_eq!(vision["wait_p95_s"], 1_800);
    assert_eq!(vision["preemptions"], 2);
    assert_eq!(r["accounts"][0]["timeout"], 1);
    assert_eq!(r["waste"].as_array().unwrap().len(), 1);
    assert_eq!(r["waste"][0]["wasted_gpu_hours"], 4.0);
    assert_eq!(r["waste"][0]["gpu_util_mean"], 10.0);
    assert_eq!(r["accounts"][0]["gpu_util_mean"], 10.0);
    let text = stdout(&c.run("ysreport", &["--month", "2025-03"]));
    assert!(
        text.contains("nlp/root  2 GPU(s) idle 2:00:00  mean 10.0%  wasted 4.00 GPU-hours"),
        "{text}"
    );

    // sreport's shortcuts: March has 744 hours on 4 GPUs.
    let out = stdout(&c.run(
        "ysreport",
        &["cluster", "utilization", "--month", "2025-03"],
    ));
    assert!(
        out.contains("GPUs 4, GPU-hours offered 2976.00, used 14.00 (0.5%), idle 2962.00"),
        "{out}"
    );
    let out = stdout(&c.run("ysreport", &["user", "top", "--month", "2025-03"]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[1].contains("1. root") && lines[1].contains("7.00 GPU-hours"),
        "{out}"
    );
    assert!(
        lines[2].contains("2. root") && lines[2].contains("50.0%"),
        "{out}"
    );
    let out = c.run("ysreport", &["cluster", "nonsense"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("knows 'cluster utilization' and 'user top'"));

    // An honest empty month.
    let out = c.run("ysreport", &["--month", "2025-04"]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("No job ended in this period."));

    // Bad input: the reason, exit 2, nothing else disturbed.
    for (args, why) in [
        (vec!["--month", "2026-13"], "month 13 does not exist"),
        (
            vec!["-S", "2026-11-10", "-E", "2026-11-01"],
            "is not after the start",
        ),
        (
            vec!["-A", "gold"],
            "unknown account 'gold' (known: vision, nlp)",
        ),
        (vec!["-u", "nosuchuser42"], "no user 'nosuchuser42'"),
    ] {
        let out = c.run("ysreport", &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stderr(&out).contains(why), "{args:?}: {}", stderr(&out));
    }
}
