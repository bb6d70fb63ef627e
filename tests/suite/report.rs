//! `ysreport` over a database filled by a real daemon run, and over
//! fixture rows for an older month whose figures are computed by hand.

use crate::common;

use std::time::Duration;

use crate::common::{stderr, stdout, Cluster};

const LONG: Duration = Duration::from_secs(20);

const ACCOUNTS: &str = "timezone = \"UTC\"\n[[accounts]]\nname = \"vision\"\nusers = [\"*\"]\n\
                        [[accounts]]\nname = \"nlp\"\nusers = [\"*\"]\n";

/// The same accounts, vision with a monthly budget of 100 tokens.
const BUDGETED: &str =
    "timezone = \"UTC\"\n[[accounts]]\nname = \"vision\"\nusers = [\"*\"]\nbudget = 100.0\n\
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
fn gpus_left_free_while_a_job_waits_are_recorded_as_idle() {
    let mut c = Cluster::started(ACCOUNTS);
    // Three of four GPUs busy for 3 s; a 2-GPU job waits, leaving one free.
    let big = c.submit(&["--gpus", "3", "--wrap", "sleep 3"]);
    c.wait_state(big, "RUNNING", LONG);
    let waiting = c.submit(&["--gpus", "2", "--wrap", "true"]);
    assert_eq!(c.wait_done(waiting, LONG), "COMPLETED");
    c.stop();
    let db = rusqlite::Connection::open(c.spool.join("ysched.db")).unwrap();
    let (gpus, idle): (i64, i64) = db
        .query_row(
            "SELECT count(DISTINCT gpu), sum(idle_waiting_secs) FROM gpu_hours WHERE idle_waiting_secs > 0",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(gpus, 1, "only the GPU the big job left free");
    assert!(
        (1..=5).contains(&idle),
        "{idle} s idle while the 2-GPU job waited"
    );
    drop(db);
    c.start();
    let r = report_json(&c, &["-S", "now-1hour"]);
    let hours = r["idle_waiting_gpu_hours"].as_f64().unwrap();
    assert!((hours - idle as f64 / 3600.0).abs() < 1e-9, "{hours}");
}

#[test]
fn an_older_month_from_fixture_rows_by_hand_and_bad_input() {
    let mut c = Cluster::started(BUDGETED);
    c.stop();
    fill_march_2025(&c);
    c.start();
    check_march_2025(&c);
}

#[test]
fn a_purged_month_is_reported_from_its_summary_with_the_same_figures() {
    let mut c = Cluster::started(&format!("purge_after_months = 1\n{BUDGETED}"));
    let recent = c.submit(&["-A", "nlp", "--wrap", "true"]);
    assert_eq!(c.wait_done(recent, LONG), "COMPLETED");
    c.stop();
    fill_march_2025(&c);
    c.start();
    let db = rusqlite::Connection::open(c.spool.join("ysched.db")).unwrap();
    let march = (1_740_787_200i64, 1_743_465_600i64);
    common::wait_for("March's job rows purged", LONG, || {
        db.query_row(
            "SELECT count(*) FROM jobs WHERE end_time >= ?1 AND end_time < ?2",
            march,
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
            == 0
    });
    let events: i64 = db
        .query_row(
            "SELECT count(*) FROM job_events WHERE job_id NOT IN (SELECT id FROM jobs)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(events, 0, "their events went with them");
    // This month's job stays.
    assert_eq!(c.field(recent, "State"), "COMPLETED");
    // The very figures computed by hand from the rows, now from the summary.
    check_march_2025(&c);
    let r = report_json(&c, &["--month", "2025-03"]);
    assert_eq!(r["summarised_months"][0], "2025-03");
    let text = stdout(&c.run("ysreport", &["--month", "2025-03"]));
    assert!(
        text.contains("From monthly summaries (job rows purged): 2025-03"),
        "{text}"
    );
    // Only whole purged months.
    let out = c.run("ysreport", &["-S", "2025-03-05", "-E", "2025-04-01"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("cuts through 2025-03, whose job rows were purged"),
        "{}",
        stderr(&out)
    );
    let out = c.run("yscontrol", &["show", "audit"]);
    assert!(
        stdout(&out).contains("5 jobs of 2025-03 summarised"),
        "{}",
        stdout(&out)
    );
}

/// March 2025 in the database by hand: jobs, and the GPUs' hours.
fn fill_march_2025(c: &Cluster) {
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
    // The nlp timeout preempted two jobs to start.
    db.execute(
        "UPDATE jobs SET preemptions_caused = 2 WHERE state = 'TIMEOUT'",
        [],
    )
    .unwrap();
    // Day 2: GPU 0 sampled at 50%, GPU 1 at 10%; GPUs 2 and 3 free for
    // half an hour each while jobs waited. Day 3: GPU 0 at 90%.
    for (hour, gpu, samples, util_sum, idle) in [
        (march + 86_400, 0, 10, 500, 0),
        (march + 86_400, 1, 10, 100, 0),
        (march + 86_400, 2, 0, 0, 1_800),
        (march + 86_400, 3, 0, 0, 1_800),
        (march + 2 * 86_400, 0, 10, 900, 0),
    ] {
        db.execute(
            "INSERT INTO gpu_hours (hour, gpu, samples, util_sum, idle_waiting_secs) VALUES (?1, ?2, ?3, ?4, ?5)",
            rusqlite::params![hour, gpu, samples, util_sum, idle],
        )
        .unwrap();
    }
}

fn check_march_2025(c: &Cluster) {
    let r = report_json(c, &["--month", "2025-03"]);
    assert_eq!(r["accounts"][0]["preemptions_caused"], 2);
    assert_eq!(r["total"]["preemptions_caused"], 2);
    assert_eq!(r["idle_waiting_gpu_hours"], 1.0);
    assert_eq!(r["gpus"][0]["util_mean"], 70.0);
    assert_eq!(r["gpus"][0]["util_by_day"][1], 50.0);
    assert_eq!(r["gpus"][0]["util_by_day"][2], 90.0);
    assert_eq!(r["gpus"][0]["util_by_day"][0], serde_json::Value::Null);
    assert_eq!(r["gpus"][1]["util_by_day"][1], 10.0);
    assert_eq!(r["period"]["days"].as_array().unwrap().len(), 31);
    // Each job's GPU-hours on the day it ran (all on March 2nd).
    assert_eq!(r["daily_gpu_hours"]["vision"][1], 7.0);
    assert_eq!(r["daily_gpu_hours"]["nlp"][1], 7.0);
    // Waits 0, 10 min, 30 min, 1 min, 0: buckets < 1 min, 1–10 min, 10–60 min.
    let buckets: Vec<u64> = r["wait_histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["jobs"].as_u64().unwrap())
        .collect();
    assert_eq!(buckets, vec![2, 1, 2, 0, 0, 0, 0]);
    assert_eq!(r["budgets"][0]["account"], "vision");
    assert_eq!(r["budgets"][0]["used"], 35.0);
    assert_eq!(r["budgets"][0]["left"], 65.0);
    let r = report_json(c, &["--month", "2025-03"]);
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
        text.contains(
            "vision           budget     100.00  used      35.00 (35.0%)  left      65.00"
        ),
        "{text}"
    );
    assert!(
        text.contains("GPUs idle while GPU jobs waited: 1.00 GPU-hours"),
        "{text}"
    );
    assert!(
        text.contains("nlp/root  2 GPU(s) idle 2:00:00  mean 10.0%  wasted 4.00 GPU-hours"),
        "{text}"
    );

    check_shortcuts_and_bad_input(c);
}

/// Headless Chromium, where installed: `.ci/run` installs Debian's and
/// sets YSCHED_REQUIRE_CHROMIUM, so there the test cannot skip.
fn chromium() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            std::process::Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if found.is_none() {
        assert!(
            std::env::var_os("YSCHED_REQUIRE_CHROMIUM").is_none(),
            "YSCHED_REQUIRE_CHROMIUM is set but no chromium runs"
        );
        common::skip(module_path!(), "no chromium to open the HTML report in");
    }
    found
}

#[test]
fn the_html_report_opens_in_headless_chromium_with_hostile_names_escaped() {
    let mut c = Cluster::started(BUDGETED);
    c.stop();
    fill_march_2025(&c);
    let hostile = format!("<script>alert(\"owned\")</script>'{}", "x".repeat(300));
    let db = rusqlite::Connection::open(c.spool.join("ysched.db")).unwrap();
    db.execute(
        "UPDATE jobs SET name = ?1 WHERE name = '<script>idle</script>'",
        [&hostile],
    )
    .unwrap();
    drop(db);
    c.start();
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    let out = c.run(
        "ysreport",
        &["--month", "2025-03", "--html", page.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("Usage for 2025-03"),
        "text still printed"
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        !html.contains("<script"),
        "no script element, escaped or not"
    );
    assert!(html.contains("&lt;script&gt;alert(&quot;owned&quot;)&lt;/script&gt;&#39;xxx"));
    for id in ["chart-daily", "chart-waits", "chart-gpus", "waste"] {
        assert!(html.contains(&format!("id=\"{id}\"")), "{id} missing");
    }

    let Some(browser) = chromium() else { return };
    let profile = dir.path().join("profile");
    let run = |extra: &[&str]| {
        std::process::Command::new(browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                &format!("--user-data-dir={}", profile.display()),
                "--window-size=1200,2400",
            ])
            .args(extra)
            .arg(format!("file://{}", page.display()))
            .output()
            .unwrap()
    };
    // The DOM as the browser built it: the charts are SVG elements with
    // their bars and cells, and the hostile name is text, not a script.
    let dom = run(&["--dump-dom"]);
    assert!(dom.status.success(), "{}", stderr(&dom));
    let dom = stdout(&dom);
    assert!(
        !dom.contains("<script"),
        "the browser found a script: {dom}"
    );
    assert!(dom.contains("&lt;script&gt;alert(\"owned\")&lt;/script&gt;"));
    for id in ["chart-daily", "chart-waits", "chart-gpus"] {
        assert!(
            dom.contains(&format!("<svg id=\"{id}\"")),
            "{id} not an SVG element"
        );
    }
    assert!(dom.matches("class=\"bar\"").count() >= 4, "{dom}");
    assert!(dom.matches("class=\"cell\"").count() >= 31, "{dom}");
    let shot = dir.path().join("report.png");
    let out = run(&[&format!("--screenshot={}", shot.display())]);
    assert!(out.status.success(), "{}", stderr(&out));
    let png = std::fs::read(&shot).expect("chromium wrote the screenshot");
    assert_eq!(&png[1..4], b"PNG");
    assert!(
        png.len() > 10_000,
        "a page with charts, not a blank one: {} bytes",
        png.len()
    );
}

#[test]
fn ysacct_streams_a_long_listing_whole_and_in_order() {
    let mut c = Cluster::started(ACCOUNTS);
    c.stop();
    let db = rusqlite::Connection::open(c.spool.join("ysched.db")).unwrap();
    db.execute_batch("BEGIN").unwrap();
    let jan = 1_735_689_600; // 2025-01-01T00:00:00Z
    for i in 0..5_000i64 {
        // The last job's name is longer than any before it.
        let name = if i == 4_999 {
            "a-much-longer-name".to_string()
        } else {
            format!("j{i}")
        };
        db.execute(
            "INSERT INTO jobs (uid, gid, user, account, qos, name, state, gpu_count, cpus, \
             submit_time, start_time, end_time, work_dir, submit_dir, std_out) \
             VALUES (0, 0, 'root', 'vision', 'medium', ?1, 'COMPLETED', 1, 1, ?2, ?2, ?3, '/', '/', 'o')",
            rusqlite::params![name, jan + i * 60, jan + i * 60 + 30],
        )
        .unwrap();
    }
    db.execute_batch("COMMIT").unwrap();
    drop(db);
    c.start();
    let out = c.run(
        "ysacct",
        &[
            "-a",
            "-S",
            "2025-01-01",
            "-E",
            "2025-02-01",
            "-P",
            "-n",
            "-o",
            "JobID,JobName,State",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5_000);
    assert_eq!(lines[0], "1|j0|COMPLETED");
    assert_eq!(lines[4_998], "4999|j4998|COMPLETED");
    assert_eq!(lines[4_999], "5000|a-much-longer-name|COMPLETED");
    // A table fits its widths to the first rows; a longer cell later is cut with '+'.
    let out = c.run(
        "ysacct",
        &[
            "-a",
            "-S",
            "2025-01-01",
            "-E",
            "2025-02-01",
            "-o",
            "JobID,JobName",
        ],
    );
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 + 5_000, "header, rule, rows");
    assert!(
        lines.last().unwrap().ends_with('+'),
        "{}",
        lines.last().unwrap()
    );
}

/// sreport's shortcuts over March 2025, an empty month, and bad input.
fn check_shortcuts_and_bad_input(c: &Cluster) {
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

/// What jobs run is stored once: an array's tasks and a script submitted
/// again as it was share one copy. With `keep_payloads_days`, a finished
/// job's copy goes once it is that old, its accounting row stays, and a
/// job that may still run keeps its own.
#[test]
fn scripts_are_stored_once_and_let_go_after_keep_payloads_days() {
    let mut c = Cluster::started("keep_payloads_days = 0\n");
    let array = c.submit(&["--hold", "-a", "1-5", "--wrap", "true"]);
    let again = c.submit(&["--hold", "--wrap", "true"]);
    let db = rusqlite::Connection::open(c.spool.join("ysched.db")).unwrap();
    let count = |sql: &str| db.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
    assert_eq!(count("SELECT count(*) FROM payloads"), 1);
    assert_eq!(count("SELECT count(*) FROM job_payload_refs"), 6);
    let done = c.submit(&["--wrap", "echo other"]);
    assert_eq!(c.wait_done(done, LONG), "COMPLETED");
    assert_eq!(count("SELECT count(*) FROM payloads"), 2);
    c.stop();
    c.start();
    common::wait_for("the finished job's script let go", LONG, || {
        count("SELECT count(*) FROM payloads") == 1
    });
    assert_eq!(count("SELECT count(*) FROM job_payload_refs"), 6);
    assert_eq!(c.field(done, "State"), "COMPLETED", "its row stays");
    // The held ones still run as they were submitted.
    let out = c.run("yscontrol", &["release", &again.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(c.wait_done(again, LONG), "COMPLETED");
    assert_eq!(c.state(array), "PENDING");
}
