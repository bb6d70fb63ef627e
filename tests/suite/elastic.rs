//! Elastic quotas through the real daemon: an account borrows GPUs that
//! another's guarantee leaves idle, and gives them back — its borrowing
//! jobs only, checkpointed and requeued — when the lender's job needs them;
//! borrow_limit and lend = false hold; ysreport tells how it went.

use std::time::Duration;

use crate::common::{stdout, wait_for, Cluster};

const LONG: Duration = Duration::from_secs(30);

/// Counts 100 steps of 0.1 s (long enough for the test to look at it on a
/// loaded machine); on SIGTERM saves its step and exits 0; a rerun resumes
/// from the saved step. Logs whether it borrowed.
const TRAINER: &str = r#"#!/bin/bash
log="$SLURM_SUBMIT_DIR/log-$SLURM_JOB_ID"
ckpt="$SLURM_SUBMIT_DIR/ckpt-$SLURM_JOB_ID"
step=$(cat "$ckpt" 2>/dev/null || echo 0)
trap 'echo $step > "$ckpt.tmp" && mv "$ckpt.tmp" "$ckpt"; echo "checkpoint step=$step" >> "$log"; exit 0' TERM
echo "start restart=$SLURM_RESTART_COUNT step=$step borrowed=${YS_BORROWED:-0}" >> "$log"
while [ "$step" -lt 100 ]; do sleep 0.1 & wait $!; step=$((step + 1)); done
echo "done step=$step" >> "$log"
"#;

fn accounts(a_extra: &str, b_extra: &str) -> String {
    let me = ysched::cli::current_user_name();
    format!(
        "cgroups = \"off\"\n\
         [[qos]]\nname = \"normal\"\npriority = 0\ngrace_time = \"0:05\"\n\
         [[accounts]]\nname = \"a\"\nusers = [\"{me}\"]\nmax_gpus = 2\n{a_extra}\n\
         [[accounts]]\nname = \"b\"\nusers = [\"{me}\"]\nmax_gpus = 2\n{b_extra}\n"
    )
}

fn log_of(c: &Cluster, id: u64) -> String {
    std::fs::read_to_string(c.work.join(format!("log-{id}"))).unwrap_or_default()
}

fn reason(c: &Cluster, id: u64) -> String {
    stdout(&c.run("ysqueue", &["-h", "-j", &id.to_string(), "-o", "%r"]))
        .trim()
        .to_string()
}

#[test]
fn a_lender_takes_its_guarantee_back_from_the_borrowing_jobs_only() {
    let mut c = Cluster::new(&accounts("borrow_limit = 2", ""));
    c.start();
    c.script("train.sh", TRAINER);
    // a floods 4 one-GPU jobs while b is idle: all 4 GPUs, 2 borrowed.
    let a: Vec<u64> = (0..4)
        .map(|_| c.submit(&["-A", "a", "-G", "1", "train.sh"]))
        .collect();
    for &id in &a {
        c.wait_state(id, "RUNNING", LONG);
    }
    wait_for("the trainers to start", LONG, || {
        a.iter().all(|&id| log_of(&c, id).contains("start"))
    });
    let borrowing: Vec<u64> = a
        .iter()
        .copied()
        .filter(|&id| reason(&c, id) == "Borrowed")
        .collect();
    assert_eq!(
        borrowing.len(),
        2,
        "two beyond the guarantee: {borrowing:?}"
    );
    for &id in &a {
        let told = log_of(&c, id).contains("borrowed=1");
        assert_eq!(told, borrowing.contains(&id), "YS_BORROWED of job {id}");
        assert_eq!(c.field(id, "Borrowed"), if told { "yes" } else { "no" });
    }

    // b wants its 2: the borrowing jobs, and only they, give them back.
    let b = c.submit(&["-A", "b", "-G", "2", "--wrap", "sleep 1"]);
    assert_eq!(c.wait_done(b, LONG), "COMPLETED");
    for &id in &a {
        assert_eq!(c.wait_done(id, LONG), "COMPLETED", "{}", log_of(&c, id));
        let (preempted, restarts) = if borrowing.contains(&id) {
            ("1", "1")
        } else {
            ("0", "0")
        };
        assert_eq!(c.field(id, "Preemptions"), preempted, "job {id}");
        assert_eq!(c.field(id, "Restarts"), restarts, "job {id}");
        assert!(
            log_of(&c, id).contains("done step=100"),
            "{}",
            log_of(&c, id)
        );
    }
    for &id in &borrowing {
        let log = log_of(&c, id);
        assert!(log.contains("checkpoint step="), "{log}");
        assert!(log.contains("start restart=1"), "resumed: {log}");
    }
    let events = stdout(&c.run("yscontrol", &["show", "audit"]));
    assert!(
        events.contains("reclaims its account's guarantee (b)"),
        "{events}"
    );

    // The report: two reclaims of a's jobs, both clean and resumed.
    let report = stdout(&c.run("ysreport", &["-S", "now-1hour"]));
    let line = report
        .lines()
        .skip_while(|l| !l.starts_with("Preemptions and checkpoints"))
        .find(|l| l.trim_start().starts_with("a "))
        .unwrap_or_else(|| panic!("no checkpoint line for a:\n{report}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cells[..6], ["a", "2", "2", "2", "2", "0"], "{report}");
    let page = c.work.join("report.html");
    let out = c.run(
        "ysreport",
        &["-S", "now-1hour", "--html", page.to_str().unwrap()],
    );
    assert!(out.status.success());
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains(
            "<td class=\"name\">a</td><td>2</td><td>2</td><td>2</td><td>2</td><td>0</td>"
        ),
        "{html}"
    );
}

#[test]
fn borrow_limit_and_lend_false_hold() {
    // a may borrow 1 beyond its 2: the fourth job waits.
    let c = Cluster::started(&accounts("borrow_limit = 1", ""));
    let jobs: Vec<u64> = (0..4)
        .map(|_| c.submit(&["-A", "a", "-G", "1", "--wrap", "sleep 30"]))
        .collect();
    for &id in &jobs[..3] {
        c.wait_state(id, "RUNNING", LONG);
    }
    wait_for("the fourth to wait for a's limit", LONG, || {
        reason(&c, jobs[3]) == "AssocGrpGRES"
    });
    c.run("yscancel", &["-A", "a"]);

    // b lends nothing: a runs on its own guarantee only.
    let c = Cluster::started(&accounts("borrow_limit = 2", "lend = false"));
    let jobs: Vec<u64> = (0..3)
        .map(|_| c.submit(&["-A", "a", "-G", "1", "--wrap", "sleep 30"]))
        .collect();
    for &id in &jobs[..2] {
        c.wait_state(id, "RUNNING", LONG);
    }
    wait_for("the third to wait: nothing is lent", LONG, || {
        reason(&c, jobs[2]) == "AssocGrpGRES"
    });
    // b's job runs at once on its guarantee; no job of a is touched.
    let b = c.submit(&["-A", "b", "-G", "2", "--wrap", "true"]);
    assert_eq!(c.wait_done(b, LONG), "COMPLETED");
    for &id in &jobs[..2] {
        assert_eq!(c.state(id), "RUNNING");
        assert_eq!(c.field(id, "Preemptions"), "0");
    }
    c.run("yscancel", &["-A", "a"]);
}

#[test]
fn test_only_foresees_the_start_and_submits_nothing() {
    let me = ysched::cli::current_user_name();
    let c = Cluster::started(&format!(
        "cgroups = \"off\"\n[[accounts]]\nname = \"team\"\nusers = [\"{me}\"]\nmax_gpus_per_job = 4\napproval_above_gpu_hours = 1\ncoordinators = [\"{me}\"]\n"
    ));
    // All 4 GPUs until its 4-second limit.
    let first = c.submit(&["-A", "team", "-G", "4", "-t", "0:04", "--wrap", "sleep 60"]);
    c.wait_state(first, "RUNNING", LONG);
    let ask = ["-A", "team", "-G", "2", "-t", "0:10", "--wrap", "true"];
    let out = c.run("ysbatch", &[&["--test-only", "--json"], &ask[..]].concat());
    assert!(out.status.success(), "{}", crate::common::stderr(&out));
    let answer: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(answer["job_id"], first + 1, "{answer}");
    assert_eq!(answer["node"], "gpu01");
    assert_eq!(answer["gpu_ids"].as_array().unwrap().len(), 2);
    assert_eq!(answer["approval"], serde_json::Value::Null);
    // 2 GPUs × 10 s at weight 1: 20 GPU-seconds.
    let tokens = answer["tokens"].as_f64().unwrap();
    assert!((tokens - 20.0 / 3600.0).abs() < 1e-6, "{answer}");
    let foreseen = answer["start"].as_i64().unwrap();
    let queue = stdout(&c.run("ysqueue", &["-h", "-o", "%i"]));
    assert_eq!(queue.trim(), first.to_string(), "nothing was submitted");

    // Submitted for real, it starts when foreseen: when the first job's
    // limit ends it (give or take the second or two it takes to go, more
    // on a loaded machine).
    let real = c.submit(&ask);
    assert_eq!(real, first + 1);
    assert_eq!(c.wait_done(real, LONG), "COMPLETED");
    let started = c.field(real, "Start");
    let near: Vec<String> = (-1..=6)
        .map(|d| ysched::model::units::format_timestamp(foreseen + d))
        .collect();
    assert!(
        near.contains(&started),
        "foreseen {near:?}, started {started}"
    );

    // The text form, approval, and the same refusal as a real submit.
    let out = c.run(
        "ysbatch",
        &[
            "--test-only",
            "-A",
            "team",
            "-G",
            "4",
            "-t",
            "1:00:00",
            "--wrap",
            "true",
        ],
    );
    let text = crate::common::stderr(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!("Job {} to start at", real + 1)),
        "{text}"
    );
    assert!(text.contains("held for approval"), "{text}");
    assert!(text.contains("nothing was submitted"), "{text}");
    let refused = |test_only: bool| {
        let mut args = vec!["-A", "team", "-G", "5", "--wrap", "true"];
        if test_only {
            args.insert(0, "--test-only");
        }
        let out = c.run("ysbatch", &args);
        assert_eq!(out.status.code(), Some(1));
        crate::common::stderr(&out)
    };
    assert_eq!(refused(true), refused(false));
    let why = refused(true);
    assert!(why.contains("5 GPUs"), "{why}");
}
