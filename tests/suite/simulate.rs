//! `ysctld simulate`: a trace replayed in virtual time under either policy,
//! the report as text or JSON, and bad traces refused with file and line.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{stderr, stdout};

const FOUR_GPUS: &str = "[[gpus]]\ntype = \"a100\"\ncount = 4\nmemory = \"80GiB\"\n";

/// A 1-GPU job runs for 1000 s; a 4-GPU job then waits for it; a short
/// 1-GPU job behind it fits in the hole before the big one can start.
const HOLE: &str = "\
submit_s,run_s,gpus,req_time_s,user,group
0,1000,1,1000,ana,vision
1,100,4,100,bo,detect
2,500,1,500,cy,nlp
";

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn simulate(config: &Path, trace: &Path, args: &[&str]) -> Output {
    Command::new(common::bin_dir().join("ysctld"))
        .arg("simulate")
        .arg("-f")
        .arg(config)
        .arg("--trace")
        .arg(trace)
        .args(args)
        .output()
        .unwrap()
}

fn report(config: &Path, trace: &Path, policy: &str) -> serde_json::Value {
    let out = simulate(config, trace, &["--json", "--policy", policy]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

#[test]
fn backfill_runs_the_short_job_in_the_hole_fifo_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "sim.toml", FOUR_GPUS);
    let trace = write(dir.path(), "hole.csv", HOLE);

    let fifo = report(&config, &trace, "fifo");
    let ours = report(&config, &trace, "ysched");
    assert_eq!(fifo["policy"], "fifo");
    assert_eq!(ours["policy"], "ysched");
    for r in [&fifo, &ours] {
        assert_eq!(r["jobs"], 3);
        assert_eq!(r["gpus"], 4);
    }
    // FIFO: the big job starts at 1000, the short one at 1100 (waits 1098).
    assert_eq!(fifo["backfilled_jobs"], 0);
    assert_eq!(fifo["accounts"]["nlp"]["wait_mean_s"], 1098.0);
    // ysched: the short one starts at once and ends (502) before 1000.
    assert_eq!(ours["backfilled_jobs"], 1);
    assert_eq!(ours["accounts"]["nlp"]["wait_mean_s"], 0.0);
    // The big job is not delayed by it: it starts at 1000 under both.
    assert_eq!(fifo["accounts"]["detect"]["wait_mean_s"], 999.0);
    assert_eq!(ours["accounts"]["detect"]["wait_mean_s"], 999.0);

    // While the big job waited (999 s on 4 GPUs), FIFO kept 1 GPU busy and
    // then 4 for 100 s while the short one waited; ysched also ran the short
    // one for 500 s.
    let while_waiting = |r: &serde_json::Value| r["utilization_while_waiting"].as_f64().unwrap();
    assert!((while_waiting(&fifo) - 1399.0 / 4396.0).abs() < 1e-9);
    assert!((while_waiting(&ours) - 1499.0 / 3996.0).abs() < 1e-9);

    let text = simulate(&config, &trace, &[]);
    assert!(text.status.success(), "{}", stderr(&text));
    let text = stdout(&text);
    assert!(
        text.starts_with("policy ysched on 4 GPUs: 3 jobs"),
        "{text}"
    );
    assert!(text.contains("backfilled jobs        1"), "{text}");
}

#[test]
fn rows_that_never_ran_or_want_no_gpu_are_counted_not_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "sim.toml", FOUR_GPUS);
    let trace = write(
        dir.path(),
        "t.csv",
        "submit_s,duration_s,gpus,group\n0,10,1,a\n5,,1,a\n6,10,0,b\n",
    );
    let r = report(&config, &trace, "ysched");
    assert_eq!(r["jobs"], 1);
    assert_eq!(r["skipped_rows"]["no_run_time"], 1);
    assert_eq!(r["skipped_rows"]["no_gpus"], 1);
}

#[test]
fn a_bad_trace_is_refused_with_its_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "sim.toml", FOUR_GPUS);

    let trace = write(
        dir.path(),
        "bad.csv",
        "submit_s,run_s,gpus\n0,10,1\n7,ten,1\n",
    );
    let out = simulate(&config, &trace, &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("bad.csv: line 3: column run_s: 'ten' is not a number"),
        "{err}"
    );
    assert!(stdout(&out).is_empty());

    let trace = write(dir.path(), "cols.csv", "when,run_s,gpus\n0,10,1\n");
    let err = stderr(&simulate(&config, &trace, &[]));
    assert!(
        err.contains("cols.csv: line 1: no submit time column"),
        "{err}"
    );

    let out = simulate(&config, &dir.path().join("missing.csv"), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("cannot read"), "{}", stderr(&out));

    let trace = write(dir.path(), "ok.csv", HOLE);
    let out = simulate(&config, &trace, &["--arrival-scale", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--arrival-scale"));

    let no_gpus = write(dir.path(), "none.toml", "");
    let out = simulate(&no_gpus, &trace, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("declares no GPUs"),
        "{}",
        stderr(&out)
    );
}
