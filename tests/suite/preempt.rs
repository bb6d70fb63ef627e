//! Preemption through the real daemon: urgent jobs start by stopping the
//! fewest low-priority jobs, which checkpoint on SIGTERM, are requeued with
//! their ids, and resume from their checkpoints.

use crate::common;

use std::time::Duration;

use crate::common::{stderr, stdout, wait_for, Cluster};

const LONG: Duration = Duration::from_secs(30);

const QOS: &str = "default_qos = \"medium\"\n\
    [[qos]]\nname = \"critical\"\npriority = 300\n\
    [[qos]]\nname = \"medium\"\npriority = 100\n\
    [[qos]]\nname = \"low\"\npriority = 0\ngrace_time = \"0:02\"\n";

/// A trainer that counts 40 steps of 0.1 s, saves its step on SIGTERM
/// and exits 0, and resumes from the saved step.
const TRAINER: &str = r#"#!/bin/bash
log="$SLURM_SUBMIT_DIR/log-$SLURM_JOB_ID"
ckpt="$SLURM_SUBMIT_DIR/ckpt-$SLURM_JOB_ID"
step=$(cat "$ckpt" 2>/dev/null || echo 0)
trap 'echo $step > "$ckpt.tmp" && mv "$ckpt.tmp" "$ckpt"; echo "checkpoint step=$step" >> "$log"; exit 0' TERM
echo "start restart=$SLURM_RESTART_COUNT step=$step" >> "$log"
while [ "$step" -lt 40 ]; do sleep 0.1 & wait $!; step=$((step + 1)); done
echo "done step=$step" >> "$log"
"#;

fn log_of(c: &Cluster, id: u64) -> String {
    std::fs::read_to_string(c.work.join(format!("log-{id}"))).unwrap_or_default()
}

fn gpus_of(c: &Cluster, id: u64) -> String {
    stdout(&c.run("ysqueue", &["-h", "-j", &id.to_string(), "-o", "%b %N"]))
}

#[test]
fn a_critical_job_stops_two_low_jobs_which_resume_from_their_checkpoints() {
    let mut c = Cluster::new(QOS);
    c.start();
    c.script("train.sh", TRAINER);
    c.script(
        "urgent.sh",
        "#!/bin/sh\necho \"urgent on $SLURM_JOB_GPUS\"\nsleep 1\n",
    );
    let low: Vec<u64> = (0..4)
        .map(|_| c.submit(&["-q", "low", "--gpus", "1", "train.sh"]))
        .collect();
    for &id in &low {
        c.wait_state(id, "RUNNING", LONG);
    }
    wait_for("the trainers to start counting", LONG, || {
        low.iter().all(|&id| log_of(&c, id).contains("start"))
    });
    let urgent = c.submit(&["-q", "critical", "--gpus", "2", "urgent.sh"]);
    assert_eq!(
        c.wait_done(urgent, LONG),
        "COMPLETED",
        "{}",
        gpus_of(&c, urgent)
    );

    let victims: Vec<u64> = low
        .iter()
        .copied()
        .filter(|&id| log_of(&c, id).contains("checkpoint"))
        .collect();
    assert_eq!(victims.len(), 2, "exactly two stopped: {victims:?}");
    for &id in &low {
        assert_eq!(
            c.wait_done(id, LONG),
            "COMPLETED",
            "job {id}: {}",
            log_of(&c, id)
        );
        let log = log_of(&c, id);
        // Every job reaches the end an uninterrupted run reaches.
        assert!(log.trim_end().ends_with("done step=40"), "job {id}: {log}");
        let restarts = c.field(id, "Restarts");
        if victims.contains(&id) {
            assert_eq!(restarts, "1", "job {id}");
            let saved: u32 = log
                .lines()
                .find_map(|l| l.strip_prefix("checkpoint step="))
                .unwrap()
                .parse()
                .unwrap();
            assert!(
                log.contains(&format!("start restart=1 step={saved}")),
                "resumed where it stopped: {log}"
            );
        } else {
            assert_eq!(restarts, "0", "job {id}");
            assert_eq!(log.lines().count(), 2, "job {id}: {log}");
        }
    }
    // The urgent job ran on the victims' GPUs.
    let urgent_out = c.output_of(urgent);
    assert!(urgent_out.starts_with("urgent on "), "{urgent_out}");
    let log = c.log();
    assert!(
        log.contains(&format!("job {urgent} (critical, root) preempts job(s)")),
        "{log}"
    );
    let out = c.run("yscontrol", &["show", "audit"]);
    let audit = stdout(&out);
    let lines: Vec<&str> = audit.lines().collect();
    assert_eq!(lines.len(), 2, "{audit}{}", stderr(&out));
    assert!(
        lines[0].contains(&format!(
            "root use-qos job={urgent} job {urgent} submitted with QoS critical"
        )),
        "{audit}"
    );
    assert!(
        lines[1].contains(&format!(
            "ysctld preempt job={urgent} job {urgent} (critical, root) preempts job(s) {}, {}",
            victims[0], victims[1]
        )),
        "{audit}"
    );
}

#[test]
fn a_job_that_ignores_sigterm_is_killed_after_its_grace_and_still_requeued() {
    let mut c = Cluster::with_gpus(
        QOS,
        "[[gpus]]\ntype = \"a100\"\ncount = 1\nmemory = \"80GiB\"\n",
    );
    c.start();
    c.script(
        "stubborn.sh",
        "#!/bin/bash\ntrap '' TERM\necho \"start $SLURM_RESTART_COUNT\" >> \"$SLURM_SUBMIT_DIR/log-$SLURM_JOB_ID\"\nsleep 3\n",
    );
    c.script("urgent.sh", "#!/bin/sh\nsleep 0.5\n");
    let stubborn = c.submit(&["-q", "low", "--gpus", "1", "stubborn.sh"]);
    c.wait_state(stubborn, "RUNNING", LONG);
    wait_for("the stubborn job to start", LONG, || {
        log_of(&c, stubborn).contains("start")
    });
    let urgent = c.submit(&["-q", "critical", "--gpus", "1", "urgent.sh"]);
    wait_for("the stubborn job to be stopped", LONG, || {
        let q = stdout(&c.run("ysqueue", &["-h", "-j", &urgent.to_string(), "-o", "%r"]));
        q.trim() == "Preempting" || c.state(urgent) != "PENDING"
    });
    assert_eq!(c.wait_done(urgent, LONG), "COMPLETED");
    assert_eq!(c.wait_done(stubborn, LONG), "COMPLETED");
    assert_eq!(log_of(&c, stubborn), "start 0\nstart 1\n");
    assert_eq!(c.field(stubborn, "Restarts"), "1");

    // --no-requeue: preempted means ended.
    let once = c.submit(&["-q", "low", "--gpus", "1", "--no-requeue", "stubborn.sh"]);
    c.wait_state(once, "RUNNING", LONG);
    let urgent = c.submit(&["-q", "critical", "--gpus", "1", "urgent.sh"]);
    assert_eq!(c.wait_done(once, LONG), "PREEMPTED");
    assert_eq!(c.wait_done(urgent, LONG), "COMPLETED");
    assert_eq!(
        c.field(once, "Preemptions"),
        "1",
        "counted though not requeued"
    );
    let out = c.run(
        "ysacct",
        &["-j", &once.to_string(), "-n", "-P", "-o", "State,Reason"],
    );
    assert!(
        stdout(&out).contains(&format!("preempted by job {urgent}")),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
}

#[test]
fn a_job_younger_than_its_qos_min_run_time_is_not_preempted() {
    let mut c = Cluster::with_gpus(
        &QOS.replace(
            "grace_time = \"0:02\"",
            "grace_time = \"0:02\"\nmin_run_time = \"10:00\"",
        ),
        "[[gpus]]\ntype = \"a100\"\ncount = 1\nmemory = \"80GiB\"\n",
    );
    c.start();
    c.script("sleep.sh", "#!/bin/sh\nsleep 300\n");
    let young = c.submit(&["-q", "low", "--gpus", "1", "sleep.sh"]);
    c.wait_state(young, "RUNNING", LONG);
    let urgent = c.submit(&["-q", "critical", "--gpus", "1", "sleep.sh"]);
    // The low job ran less than its QoS's min_run_time: nothing is stopped.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(c.state(young), "RUNNING");
    let q = stdout(&c.run("ysqueue", &["-h", "-j", &urgent.to_string(), "-o", "%r"]));
    assert_eq!(q.trim(), "Resources");
    c.run("yscancel", &["-u", "root"]);
}

#[test]
fn a_preemption_cut_short_by_a_daemon_crash_completes_after_restart() {
    let mut c = Cluster::with_gpus(
        &QOS.replace("grace_time = \"0:02\"", "grace_time = \"0:05\""),
        "[[gpus]]\ntype = \"a100\"\ncount = 1\nmemory = \"80GiB\"\n",
    );
    c.start();
    // Takes a second to save its checkpoint once signalled.
    c.script(
        "train.sh",
        &TRAINER.replace("trap 'echo", "trap 'sleep 1; echo"),
    );
    c.script("urgent.sh", "#!/bin/sh\nsleep 0.5\n");
    let low = c.submit(&["-q", "low", "--gpus", "1", "train.sh"]);
    c.wait_state(low, "RUNNING", LONG);
    // Its trap is set once it has logged its start.
    wait_for("the trainer to start", LONG, || {
        log_of(&c, low).contains("start")
    });
    let urgent = c.submit(&["-q", "critical", "--gpus", "1", "urgent.sh"]);
    let began = std::time::Instant::now();
    loop {
        let q = stdout(&c.run("ysqueue", &["-h", "-j", &low.to_string(), "-o", "%T"]));
        if q.trim() == "COMPLETING" {
            break;
        }
        assert!(began.elapsed() < LONG, "no preemption: {q}\n{}", c.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Killed while the victim saves its checkpoint.
    c.crash();
    c.start();
    assert_eq!(c.wait_done(urgent, LONG), "COMPLETED");
    assert_eq!(c.wait_done(low, LONG), "COMPLETED", "{}", log_of(&c, low));
    let log = log_of(&c, low);
    assert_eq!(log.matches("checkpoint").count(), 1, "{log}");
    assert_eq!(log.matches("start restart=1").count(), 1, "{log}");
    assert!(log.trim_end().ends_with("done step=40"), "{log}");
    assert_eq!(c.field(low, "Restarts"), "1");
}

#[test]
fn two_urgent_jobs_never_take_the_same_victim() {
    let mut c = Cluster::with_gpus(
        QOS,
        "[[gpus]]\ntype = \"a100\"\ncount = 2\nmemory = \"80GiB\"\n",
    );
    c.start();
    c.script("train.sh", TRAINER);
    c.script("urgent.sh", "#!/bin/sh\nsleep 1\n");
    let low: Vec<u64> = (0..2)
        .map(|_| c.submit(&["-q", "low", "--gpus", "1", "train.sh"]))
        .collect();
    for &id in &low {
        c.wait_state(id, "RUNNING", LONG);
    }
    wait_for("the trainers to start", LONG, || {
        low.iter().all(|&id| log_of(&c, id).contains("start"))
    });
    let urgent: Vec<u64> = (0..3)
        .map(|_| c.submit(&["-q", "critical", "--gpus", "1", "urgent.sh"]))
        .collect();
    for &id in &urgent {
        assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    }
    for &id in &low {
        assert_eq!(c.wait_done(id, LONG), "COMPLETED");
        // Each low job stopped once; the third urgent job waited for a GPU.
        assert_eq!(c.field(id, "Restarts"), "1", "{}", log_of(&c, id));
    }
    let preemptions = c.log().matches("preempts job(s)").count();
    assert_eq!(preemptions, 2, "{}", c.log());
}

#[test]
fn the_contrib_trainer_preempted_ends_where_an_uninterrupted_run_does() {
    let mut c = Cluster::with_gpus(
        QOS,
        "[[gpus]]\ntype = \"a100\"\ncount = 1\nmemory = \"80GiB\"\n",
    );
    c.start();
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/examples");
    for file in ["tiny_trainer.py", "resumable-train.sh"] {
        let text = std::fs::read_to_string(examples.join(file)).unwrap();
        c.script(file, &text);
    }
    // The uninterrupted run, outside the scheduler.
    let alone = std::process::Command::new("python3")
        .arg(c.work.join("tiny_trainer.py"))
        .args(["--epochs", "60", "--dir"])
        .arg(c.work.join("alone"))
        .output()
        .unwrap();
    assert!(alone.status.success(), "{}", stderr(&alone));
    let expected = std::fs::read_to_string(c.work.join("alone/result.json")).unwrap();

    let train = c.submit(&["-q", "low", "resumable-train.sh"]);
    c.wait_state(train, "RUNNING", LONG);
    wait_for("a few epochs", LONG, || {
        c.output_of(train).contains("starting from scratch")
    });
    std::thread::sleep(Duration::from_millis(600));
    let urgent = c.submit(&["-q", "critical", "--gpus", "1", "--wrap", "sleep 0.5"]);
    assert_eq!(c.wait_done(urgent, LONG), "COMPLETED");
    assert_eq!(c.wait_done(train, LONG), "COMPLETED");
    let out = c.output_of(train);
    assert!(out.contains("checkpoint saved"), "{out}");
    assert!(
        out.contains("resuming at epoch") && out.contains("(restart 1)"),
        "{out}"
    );
    let result =
        std::fs::read_to_string(c.work.join(format!("runs/tiny-{train}/result.json"))).unwrap();
    assert_eq!(
        result, expected,
        "the same weights as the uninterrupted run"
    );
}

#[test]
fn yscontrol_requeue_runs_a_job_again_with_its_id() {
    let mut c = Cluster::with_gpus(
        QOS,
        "[[gpus]]\ntype = \"a100\"\ncount = 1\nmemory = \"80GiB\"\n",
    );
    c.start();
    c.script("train.sh", TRAINER);
    let id = c.submit(&["--gpus", "1", "train.sh"]);
    c.wait_state(id, "RUNNING", LONG);
    wait_for("the trainer to count", LONG, || {
        log_of(&c, id).contains("start")
    });
    let out = c.run("yscontrol", &["requeue", &id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    let log = log_of(&c, id);
    assert!(
        log.contains("checkpoint") && log.contains("start restart=1"),
        "{log}"
    );
    let fields = stdout(&c.run(
        "ysacct",
        &[
            "-j",
            &id.to_string(),
            "-n",
            "-P",
            "-o",
            "Restarts,Preemptions",
        ],
    ));
    assert_eq!(fields.trim(), "1|0", "a requeue is not a preemption");

    let once = c.submit(&["--gpus", "1", "--no-requeue", "train.sh"]);
    c.wait_state(once, "RUNNING", LONG);
    let out = c.run("yscontrol", &["requeue", &once.to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--no-requeue"), "{}", stderr(&out));
    let out = c.run("yscontrol", &["requeue", "999"]);
    assert_eq!(out.status.code(), Some(1));
    c.run("yscancel", &[&once.to_string()]);
}

#[test]
fn a_job_that_just_saved_a_checkpoint_is_the_cheaper_victim() {
    let mut c = Cluster::with_gpus(
        QOS,
        "[[gpus]]\ntype = \"a100\"\ncount = 2\nmemory = \"80GiB\"\n",
    );
    c.start();
    c.script("sleep.sh", "#!/bin/sh\nsleep 300\n");
    let older = c.submit(&["-q", "low", "--gpus", "1", "sleep.sh"]);
    c.wait_state(older, "RUNNING", LONG);
    std::thread::sleep(Duration::from_millis(2100));
    let younger = c.submit(&["-q", "low", "--gpus", "1", "sleep.sh"]);
    c.wait_state(younger, "RUNNING", LONG);
    std::thread::sleep(Duration::from_millis(1100));
    // The older job saved its work: stopping it loses the least.
    let out = c
        .command("yscontrol")
        .arg("checkpoint")
        .env("YS_JOB_ID", older.to_string())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let urgent = c.submit(&["-q", "critical", "--gpus", "1", "sleep.sh"]);
    c.wait_state(urgent, "RUNNING", LONG);
    assert_eq!(c.state(younger), "RUNNING");
    assert_eq!(c.field(older, "Preemptions"), "1");
    let out = c.run("yscontrol", &["checkpoint", &urgent.to_string(), "12345"]);
    assert_eq!(out.status.code(), Some(1), "an unknown job");
    c.run("yscancel", &["-u", "root"]);
}

#[test]
fn a_lent_reserve_runs_preemptible_jobs_until_its_qos_takes_it_back() {
    let lent = QOS.replace(
        "name = \"critical\"\npriority = 300\n",
        "name = \"critical\"\npriority = 300\nreserve = 1\nlend_reserve = true\n",
    );
    let mut c = Cluster::with_gpus(
        &lent,
        "[[gpus]]\ntype = \"a100\"\ncount = 2\nmemory = \"80GiB\"\n",
    );
    c.start();
    c.script("train.sh", TRAINER);
    // Both GPUs run low jobs: the reserved one is lent.
    let low: Vec<u64> = (0..2)
        .map(|_| c.submit(&["-q", "low", "--gpus", "1", "train.sh"]))
        .collect();
    for &id in &low {
        c.wait_state(id, "RUNNING", LONG);
    }
    let urgent = c.submit(&["-q", "critical", "--gpus", "1", "--wrap", "sleep 0.5"]);
    assert_eq!(c.wait_done(urgent, LONG), "COMPLETED");
    let preempted: u32 = low
        .iter()
        .map(|&id| c.field(id, "Preemptions").parse::<u32>().unwrap())
        .sum();
    assert_eq!(preempted, 1, "one borrower gave the GPU back");
    for &id in &low {
        assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    }

    // Not lent: the second low job waits for the reserve.
    let kept = QOS.replace(
        "name = \"critical\"\npriority = 300\n",
        "name = \"critical\"\npriority = 300\nreserve = 1\n",
    );
    let mut c = Cluster::with_gpus(
        &kept,
        "[[gpus]]\ntype = \"a100\"\ncount = 2\nmemory = \"80GiB\"\n",
    );
    c.start();
    c.script("sleep.sh", "#!/bin/sh\nsleep 300\n");
    let first = c.submit(&["-q", "low", "--gpus", "1", "sleep.sh"]);
    c.wait_state(first, "RUNNING", LONG);
    let second = c.submit(&["-q", "low", "--gpus", "1", "sleep.sh"]);
    wait_for("the reserve to be kept", LONG, || {
        let q = stdout(&c.run("ysqueue", &["-h", "-j", &second.to_string(), "-o", "%r"]));
        q.trim() == "ReservedForQOS"
    });
    c.run("yscancel", &["-u", "root"]);
}

#[test]
fn a_suspend_mode_victim_is_frozen_for_the_urgent_job_and_thawed_after() {
    let mut c = Cluster::new(&QOS.replace(
        "grace_time = \"0:02\"",
        "grace_time = \"0:02\"\npreempt_mode = \"suspend\"",
    ));
    c.start();
    // Counts tenths of a second, and takes every CPU.
    c.script(
        "count.sh",
        "#!/bin/bash\nfor i in $(seq 1 30); do echo $i >> \"$SLURM_SUBMIT_DIR/count-$SLURM_JOB_ID\"; sleep 0.1; done\n",
    );
    let low = c.submit(&["-q", "low", "-c", "16", "count.sh"]);
    c.wait_state(low, "RUNNING", LONG);
    let counted = |id: u64| {
        std::fs::read_to_string(c.work.join(format!("count-{id}")))
            .unwrap_or_default()
            .lines()
            .count()
    };
    wait_for("the counter to count", LONG, || counted(low) >= 3);
    let urgent = c.submit(&["-q", "critical", "-c", "4", "--wrap", "sleep 1"]);
    c.wait_state(urgent, "RUNNING", LONG);
    let state = stdout(&c.run("ysqueue", &["-h", "-j", &low.to_string(), "-o", "%T"]));
    assert_eq!(state.trim(), "SUSPENDED");
    // Frozen: it does not count while the urgent job runs.
    let frozen_at = counted(low);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(counted(low), frozen_at);
    assert_eq!(c.wait_done(urgent, LONG), "COMPLETED");
    // Thawed when the urgent job ends, it finishes its count, not requeued.
    assert_eq!(c.wait_done(low, LONG), "COMPLETED");
    assert_eq!(counted(low), 30);
    assert_eq!(c.field(low, "Restarts"), "0");
    assert_eq!(c.field(low, "Preemptions"), "1");
}

#[test]
fn the_jobs_signal_comes_before_its_limit_and_instead_of_sigterm_when_preempted() {
    let mut c = Cluster::with_gpus(
        QOS,
        "[[gpus]]\ntype = \"a100\"\ncount = 1\nmemory = \"80GiB\"\n",
    );
    c.start();
    c.script(
        "warned.sh",
        "#!/bin/bash\nlog=\"$SLURM_SUBMIT_DIR/log-$SLURM_JOB_ID\"\n\
         trap 'echo usr1 >> $log' USR1\ntrap 'echo term >> $log; exit 0' TERM\n\
         echo start >> $log\nwhile :; do sleep 0.1 & wait $!; done\n",
    );
    // A one-minute limit, warned 58 s before it: 2 s after the start.
    let near = c.submit(&[
        "-q",
        "low",
        "--gpus",
        "1",
        "-t",
        "1",
        "--signal",
        "B:USR1@58",
        "warned.sh",
    ]);
    c.wait_state(near, "RUNNING", LONG);
    wait_for("the warning before the limit", LONG, || {
        log_of(&c, near).contains("usr1")
    });
    assert_eq!(log_of(&c, near), "start\nusr1\n");
    let show = stdout(&c.run("yscontrol", &["show", "job", &near.to_string()]));
    c.run("yscancel", &[&near.to_string()]);
    assert_eq!(c.wait_done(near, LONG), "CANCELLED", "{show}");

    // Preempted: its --signal instead of SIGTERM, SIGKILL after the grace.
    // B: as the script traps it in the batch shell (without B: it would go
    // to the steps, as in Slurm).
    let victim = c.submit(&[
        "-q",
        "low",
        "--gpus",
        "1",
        "--signal",
        "B:USR1",
        "warned.sh",
    ]);
    c.wait_state(victim, "RUNNING", LONG);
    wait_for("the victim to start", LONG, || {
        log_of(&c, victim).contains("start")
    });
    let urgent = c.submit(&["-q", "critical", "--gpus", "1", "--wrap", "sleep 0.3"]);
    assert_eq!(c.wait_done(urgent, LONG), "COMPLETED");
    wait_for("the victim to run again", LONG, || {
        log_of(&c, victim).matches("start").count() == 2
    });
    assert!(
        log_of(&c, victim).starts_with("start\nusr1\nstart\n"),
        "{}",
        log_of(&c, victim)
    );
    c.run("yscancel", &[&victim.to_string()]);

    // A bad --signal is refused with the reason.
    let out = c.run("ysbatch", &["--signal", "NOPE@10", "warned.sh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--signal: invalid signal 'NOPE'"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_checkpoint_file_tells_how_much_work_a_job_would_lose() {
    let mut c = Cluster::with_gpus(
        QOS,
        "[[gpus]]\ntype = \"a100\"\ncount = 2\nmemory = \"80GiB\"\n",
    );
    c.start();
    c.script(
        "saves.sh",
        "#!/bin/sh\nsleep 3\necho saved > \"ck-$SLURM_JOB_ID\"\nsleep 300\n",
    );
    c.script("sleep.sh", "#!/bin/sh\nsleep 300\n");
    let older = c.submit(&[
        "-q",
        "low",
        "--gpus",
        "1",
        "--checkpoint-file",
        "ck-%j",
        "saves.sh",
    ]);
    c.wait_state(older, "RUNNING", LONG);
    std::thread::sleep(Duration::from_millis(1500));
    let younger = c.submit(&["-q", "low", "--gpus", "1", "sleep.sh"]);
    c.wait_state(younger, "RUNNING", LONG);
    wait_for("the older job's checkpoint", LONG, || {
        c.work.join(format!("ck-{older}")).exists()
    });
    std::thread::sleep(Duration::from_millis(1500));
    let urgent = c.submit(&["-q", "critical", "--gpus", "1", "sleep.sh"]);
    c.wait_state(urgent, "RUNNING", LONG);
    assert_eq!(c.state(younger), "RUNNING");
    assert_eq!(c.field(older, "Preemptions"), "1");
    c.run("yscancel", &["-u", "root"]);
}

#[test]
fn a_job_may_ask_for_a_shorter_grace_and_only_some_users_for_critical() {
    let mut c = Cluster::with_gpus(
        &QOS.replace("grace_time = \"0:02\"", "grace_time = \"0:30\""),
        "[[gpus]]\ntype = \"a100\"\ncount = 1\nmemory = \"80GiB\"\n",
    );
    c.start();
    c.script(
        "stubborn.sh",
        "#!/bin/bash\ntrap '' TERM\necho start >> \"$SLURM_SUBMIT_DIR/log-$SLURM_JOB_ID\"\nsleep 300\n",
    );
    let quick = c.submit(&["-q", "low", "--gpus", "1", "--grace", "1s", "stubborn.sh"]);
    c.wait_state(quick, "RUNNING", LONG);
    wait_for("the job to start", LONG, || {
        log_of(&c, quick).contains("start")
    });
    let urgent = c.submit(&["-q", "critical", "--gpus", "1", "--wrap", "sleep 0.2"]);
    // Killed 1 s after SIGTERM, not the QoS's 30 s.
    assert_eq!(c.wait_done(urgent, LONG), "COMPLETED");
    assert!(
        c.log().contains(&format!(
            "job {quick} preempted by job {urgent}; SIGTERM, SIGKILL after 1 s"
        )),
        "{}",
        c.log()
    );
    c.run("yscancel", &[&quick.to_string()]);
    let out = c.run("ysbatch", &["--grace", "soon", "stubborn.sh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--grace: 'soon'"), "{}", stderr(&out));

    if common::is_root() {
        let carol = common::TestUser::create("crit");
        let out = c.run_as(
            &carol.name,
            "ysbatch",
            &["-q", "critical", "--wrap", "true"],
        );
        assert_eq!(out.status.code(), Some(1));
        assert!(
            stderr(&out).contains(&format!(
                "user {} may not use QoS 'critical': it is for coordinators of account default (it has none), admins (root)",
                carol.name
            )),
            "{}",
            stderr(&out)
        );
        let out = c.run_as(&carol.name, "ysbatch", &["-q", "low", "--wrap", "true"]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
}

#[test]
fn an_urgent_job_starts_as_soon_as_its_victims_are_gone_not_when_their_grace_ends() {
    let mut c = Cluster::new(&QOS.replace("grace_time = \"0:02\"", "grace_time = \"0:30\""));
    // A kill_wait as long as the grace, as sites set it.
    let text = std::fs::read_to_string(&c.config).unwrap();
    std::fs::write(
        &c.config,
        text.replace("kill_wait = 1\n", "kill_wait = 30\n"),
    )
    .unwrap();
    c.start();
    // Each victim takes a second to save its work on SIGTERM, then exits;
    // a child of its (a data loader, a nohup'ed logger) ignores SIGTERM.
    // In Slurm the job is over when its batch script is: what it left is
    // killed at once, and the GPUs are free.
    c.script(
        "saves.sh",
        "#!/bin/sh\ntrap 'sleep 1; exit 0' TERM\n( trap '' TERM; exec sleep 300 ) &\necho $! > stray-$SLURM_JOB_ID-$SLURM_RESTART_COUNT\nsleep 300 &\nwait\n",
    );
    let low: Vec<u64> = (0..4)
        .map(|_| c.submit(&["-q", "low", "--gpus", "1", "saves.sh"]))
        .collect();
    for &id in &low {
        c.wait_state(id, "RUNNING", LONG);
    }
    let submitted = std::time::Instant::now();
    let urgent = c.submit(&["-q", "critical", "--gpus", "2", "--wrap", "true"]);
    assert_eq!(c.wait_done(urgent, LONG), "COMPLETED");
    // It ran as its victims ended, far inside their 30 s grace.
    let waited = submitted.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "the urgent job waited {waited:?}:\n{}",
        c.log()
    );
    // The strays of the two victims' first runs were killed with them.
    let victims: Vec<u64> = low
        .iter()
        .copied()
        .filter(|id| c.field(*id, "Preemptions") == "1")
        .collect();
    assert_eq!(victims.len(), 2, "{}", c.log());
    for id in victims {
        let pid = std::fs::read_to_string(c.work.join(format!("stray-{id}-0"))).unwrap();
        let alive = std::path::Path::new(&format!("/proc/{}", pid.trim())).exists();
        assert!(!alive, "job {id}'s stray child {} lives on", pid.trim());
    }
}

#[test]
fn a_job_that_requeues_or_cancels_itself_gets_the_answer_before_the_signal() {
    let mut c = Cluster::new(QOS);
    c.start();
    let bin = crate::common::bin_dir();
    let shims = c.dir.path().join("shims");
    std::fs::create_dir_all(&shims).unwrap();
    for name in ["scontrol", "scancel"] {
        let _ = std::os::unix::fs::symlink(bin.join("ysched-slurm"), shims.join(name));
    }
    // As a checkpointing tool does: it traps SIGTERM itself, asks for its
    // own requeue (or cancel) and must see the command succeed.
    c.script(
        "self.sh",
        &format!(
            "#!/bin/bash\nexport PATH={}:$PATH\nlog=$SLURM_SUBMIT_DIR/self-$SLURM_JOB_ID\n\
             trap 'echo \"term after rc=$?\" >> $log; exit 0' TERM\n\
             if [ \"$SLURM_RESTART_COUNT\" = 0 ]; then $1 $SLURM_JOB_ID; echo \"rc=$?\" >> $log; sleep 30 & wait; fi\n\
             echo again >> $log\n",
            shims.display()
        ),
    );
    // The stop's SIGTERM comes while the command still runs (bash runs
    // its trap once the command is done: $? is the command's) or after
    // it has exited with its answer (the trap then interrupts `wait`);
    // either way the command succeeded. Killed by the signal, it would
    // leave "term after rc=143" alone.
    let succeeded = |log: &str| log.starts_with("term after rc=0\n") || log.starts_with("rc=0\n");
    let requeued = c.submit(&["self.sh", "scontrol requeue"]);
    assert_eq!(c.wait_done(requeued, LONG), "COMPLETED");
    let log = std::fs::read_to_string(c.work.join(format!("self-{requeued}"))).unwrap();
    assert!(succeeded(&log), "scontrol requeue from inside: {log}");
    assert!(log.ends_with("again\n"), "requeued and run again: {log}");
    let cancelled = c.submit(&["self.sh", "scancel"]);
    assert_eq!(c.wait_done(cancelled, LONG), "CANCELLED");
    let log = std::fs::read_to_string(c.work.join(format!("self-{cancelled}"))).unwrap();
    assert!(succeeded(&log), "scancel from inside: {log}");
    assert!(!log.contains("again"), "cancelled, not run again: {log}");
}

#[test]
fn a_signal_without_b_reaches_only_the_tasks_srun_started() {
    let mut c = Cluster::new(QOS);
    c.start();
    let bin = crate::common::bin_dir();
    let shims = c.dir.path().join("shims");
    std::fs::create_dir_all(&shims).unwrap();
    let _ = std::os::unix::fs::symlink(bin.join("ysched-slurm"), shims.join("srun"));
    // The task saves and ends on USR1; tee, in the batch shell's pipeline,
    // must not get it (it would die of it, and the task of a broken pipe).
    c.script(
        "piped.sh",
        &format!(
            "#!/bin/bash\nexport PATH={}:$PATH\nlog=$SLURM_SUBMIT_DIR/piped-$SLURM_JOB_ID\n\
             srun sh -c \"trap 'echo task-usr1 >> $log; exit 0' USR1; echo started; while :; do sleep 0.1 & wait \\$!; done\" | tee $SLURM_SUBMIT_DIR/tee-$SLURM_JOB_ID\n\
             echo \"pipeline ${{PIPESTATUS[*]}}\" >> $log\n",
            shims.display()
        ),
    );
    let id = c.submit(&["-t", "1", "--signal", "USR1@58", "piped.sh"]);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED", "{}", log_of(&c, id));
    let log = std::fs::read_to_string(c.work.join(format!("piped-{id}"))).unwrap_or_default();
    assert_eq!(log, "task-usr1\npipeline 0 0\n");
}

/// A job that requeues itself as soon as it starts (as one whose node
/// cannot start it fails at once) waits longer before each run, and is
/// held, with the reason, after `max_quick_requeues` of them; released,
/// it runs again. (It ran a thousand times in 15 s before.)
#[test]
fn a_job_requeued_again_and_again_as_it_starts_waits_longer_each_time_and_is_held() {
    let mut c = Cluster::with_gpus(
        "requeue_delay = 1\nmax_quick_requeues = 3\n",
        "[[gpus]]\ntype = \"a100\"\ncount = 1\nmemory = \"80GiB\"\n",
    );
    c.start();
    let yscontrol = common::bin_dir().join("yscontrol");
    c.script(
        "again.sh",
        &format!(
            "#!/bin/sh\necho \"$SLURM_RESTART_COUNT $(date +%s.%N)\" >> runs-$SLURM_JOB_ID\n{} requeue $SLURM_JOB_ID\nsleep 30\n",
            yscontrol.display()
        ),
    );
    let id = c.submit(&["--gpus", "1", "again.sh"]);
    let runs = || {
        std::fs::read_to_string(c.work.join(format!("runs-{id}")))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let (n, at) = l.split_once(' ').unwrap();
                (n.parse::<u32>().unwrap(), at.parse::<f64>().unwrap())
            })
            .collect::<Vec<_>>()
    };
    let reason = || stdout(&c.run("ysqueue", &["-h", "-j", &id.to_string(), "-o", "%r"]));
    wait_for("the job to be held", LONG, || {
        reason().trim() == "JobHeldUser"
    });
    let ran = runs();
    assert_eq!(
        ran.iter().map(|r| r.0).collect::<Vec<_>>(),
        [0, 1, 2],
        "{}",
        c.log()
    );
    // Each waited longer than the one before (times are whole seconds:
    // a wait of 2 s is over 1 s).
    let waits = (ran[1].1 - ran[0].1, ran[2].1 - ran[1].1);
    assert!(waits.1 > waits.0 && waits.1 >= 1.0, "{ran:?}");
    assert_eq!(c.state(id), "PENDING");
    let why = stdout(&c.run("yscontrol", &["show", "job", &id.to_string()]));
    assert!(
        why.contains(
            "SystemComment=held: its last 3 runs were requeued within 60 s of their start"
        ),
        "{why}"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(runs().len(), 3, "held: it runs no more");
    // Released by its user, it runs again, at once.
    let out = c.run("yscontrol", &["release", &id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    wait_for("the released job to run again", LONG, || runs().len() == 4);
    c.run("yscancel", &[&id.to_string()]);
    assert_eq!(c.wait_done(id, LONG), "CANCELLED");
}
