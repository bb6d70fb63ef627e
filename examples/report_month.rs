//! Times `ysreport`'s work for a month of finished jobs (default
//! 1,000,000) in a real SQLite file: the streamed query, the sums and the
//! text and the HTML page, against reading the same columns of the same rows and doing
//! nothing with them, in the same process.
//!
//! cargo run --release --example report_month -- [JOBS] [--keep DIR]

use std::time::Instant;

use ysched::db;
use ysched::report::usage::{self, Builder, Period};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let jobs: i64 = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    // `--keep DIR`: leave the database in DIR (bench/acct_stream.sh reads it
    // through a daemon) and stop there.
    let keep = args
        .iter()
        .position(|a| a == "--keep")
        .and_then(|i| args.get(i + 1))
        .map(std::path::PathBuf::from);
    let dir = tempfile::tempdir().unwrap();
    let path = match &keep {
        Some(d) => {
            std::fs::create_dir_all(d).unwrap();
            d.join("ysched.db")
        }
        None => dir.path().join("ysched.db"),
    };
    let conn = db::open(&path).unwrap();
    let month = 1_793_491_200; // 2026-11-01T00:00:00Z
    let t = Instant::now();
    conn.execute_batch("BEGIN").unwrap();
    {
        let mut insert = conn
            .prepare(
                "INSERT INTO jobs (uid, gid, user, account, qos, name, state, gpu_count, cpus, \
                 submit_time, start_time, end_time, work_dir, submit_dir, std_out, gpu_seconds, \
                 billing, preempt_count) \
                 VALUES (1000, 1000, ?1, ?2, 'medium', 'j', ?3, 1, 1, ?4, ?5, ?6, '/', '/', 'o', ?7, ?8, ?9)",
            )
            .unwrap();
        for i in 0..jobs {
            let submit = month + (i * 2_592_000 / jobs);
            let wait = i % 3_600;
            let run = 60 + i % 7_200;
            let state = ["COMPLETED", "COMPLETED", "FAILED", "TIMEOUT"][(i % 4) as usize];
            insert
                .execute(rusqlite::params![
                    format!("user{}", i % 200),
                    format!("acct{}", i % 50),
                    state,
                    submit,
                    submit + wait,
                    submit + wait + run,
                    run * (1 + i % 4),
                    run * (1 + i % 4) * 2,
                    (i % 10 == 0) as u32
                ])
                .unwrap();
        }
    }
    conn.execute_batch("COMMIT").unwrap();
    eprintln!("filled {jobs} jobs in {:.1} s", t.elapsed().as_secs_f64());
    if keep.is_some() {
        return;
    }
    let reader = db::open_readonly(&path).unwrap();
    let period = Period {
        from: month,
        to: month + 30 * 86_400 + 86_400 * 2,
        label: "2026-11".into(),
        days: (0..32).map(|d| month + d * 86_400).collect(),
    };
    let mut report_times = Vec::new();
    let mut scan_times = Vec::new();
    let mut fetch_times = Vec::new();
    let mut counted = 0;
    for _ in 0..3 {
        let t = Instant::now();
        let mut n = 0i64;
        let mut stmt = reader
            .prepare(
                "SELECT account, user, state, submit_time, begin_time, start_time, gpu_seconds, \
                 COALESCE(billing, 0), preempt_count FROM jobs \
                 WHERE end_time >= ?1 AND end_time < ?2 ORDER BY end_time",
            )
            .unwrap();
        let mut rows = stmt.query([period.from, period.to]).unwrap();
        while let Some(row) = rows.next().unwrap() {
            for c in 0..9 {
                if let rusqlite::types::ValueRef::Integer(v) = row.get_ref(c).unwrap() {
                    n = n.wrapping_add(v);
                }
            }
        }
        scan_times.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let mut fetched = 0u64;
        db::for_each_ended(&reader, period.from, period.to, |job| {
            fetched += job.gpu_seconds as u64
        })
        .unwrap();
        fetch_times.push(t.elapsed().as_secs_f64());
        assert!(fetched > 0);
        let t = Instant::now();
        let mut builder = Builder::new(period.clone(), 3_600);
        db::for_each_ended(&reader, period.from, period.to, |job| builder.add(&job)).unwrap();
        builder.add_gpu_hours(&db::gpu_hours(&reader, period.from, period.to).unwrap());
        let report = builder.finish();
        let text = usage::render_text(&report) + &ysched::report::html::render(&report, "bench");
        report_times.push(t.elapsed().as_secs_f64());
        counted = report.total.jobs;
        assert!(text.len() > 100 && n != 1);
    }
    report_times.sort_by(f64::total_cmp);
    scan_times.sort_by(f64::total_cmp);
    fetch_times.sort_by(f64::total_cmp);
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM"))
                .map(str::to_string)
        })
        .unwrap_or_default();
    println!(
        "{counted} jobs in the month: report {:.2} s, reading the same columns {:.2} s (median of 3), ratio {:.2}; \
         of the report, fetching the rows as jobs {:.2} s; {rss}",
        report_times[1],
        scan_times[1],
        report_times[1] / scan_times[1],
        fetch_times[1]
    );
}
