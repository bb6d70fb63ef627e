//! Job arrays through the real daemon: one task per index, each with its
//! index in the environment and the file names, at most `%N` at once,
//! named as `ID_TASK` by every command.

use std::time::Duration;

use crate::common::{stderr, stdout, wait_for, Cluster};

const LONG: Duration = Duration::from_secs(30);

/// One field of one job, named as users name it (`12_3`).
fn field(c: &Cluster, job: &str, name: &str) -> String {
    stdout(&c.run("ysacct", &["-j", job, "-n", "-P", "-o", name]))
        .trim()
        .to_string()
}

fn wait_done(c: &Cluster, job: &str) -> String {
    let mut state = String::new();
    wait_for(&format!("{job} to end"), LONG, || {
        state = field(c, job, "State");
        !state.is_empty() && !matches!(state.as_str(), "PENDING" | "RUNNING" | "COMPLETING")
    });
    state
}

fn lines(text: &str) -> Vec<String> {
    text.lines().map(|l| l.trim().to_string()).collect()
}

#[test]
fn tasks_run_with_their_index_and_no_more_than_the_limit_at_once() {
    let c = Cluster::started("");
    let id = c.submit(&[
        "--array=0-5%2",
        "-G",
        "1",
        "-o",
        "out-%A_%a.txt",
        "--wrap",
        "echo $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID $SLURM_ARRAY_TASK_COUNT $YS_ARRAY_TASK_MIN $YS_ARRAY_TASK_MAX $SLURM_ARRAY_TASK_STEP; \
         s=$(date +%s.%N); sleep 0.4; echo $s $(date +%s.%N) > span-$SLURM_ARRAY_TASK_ID",
    ]);
    for task in 0..6 {
        assert_eq!(wait_done(&c, &format!("{id}_{task}")), "COMPLETED");
    }
    let listed = stdout(&c.run(
        "ysacct",
        &[
            "-j",
            &id.to_string(),
            "-n",
            "-P",
            "-o",
            "JobID,JobIDRaw,State",
        ],
    ));
    let expected: Vec<String> = (0..6)
        .map(|t| format!("{id}_{t}|{}|COMPLETED", id + t))
        .collect();
    assert_eq!(lines(&listed), expected);
    for task in 0..6 {
        let out = std::fs::read_to_string(c.work.join(format!("out-{id}_{task}.txt"))).unwrap();
        assert_eq!(out, format!("{id} {task} 6 0 5 1\n"));
    }
    // Four GPUs are free, but no more than two tasks ever ran together.
    let spans: Vec<(f64, f64)> = (0..6)
        .map(|t| {
            let text = std::fs::read_to_string(c.work.join(format!("span-{t}"))).unwrap();
            let v: Vec<f64> = text
                .split_whitespace()
                .map(|x| x.parse().unwrap())
                .collect();
            (v[0], v[1])
        })
        .collect();
    for (start, _) in &spans {
        let overlapping = spans
            .iter()
            .filter(|(s, e)| s <= start && start < e)
            .count();
        assert!(
            overlapping <= 2,
            "{overlapping} tasks ran at once: {spans:?}"
        );
    }
}

#[test]
fn one_task_or_the_whole_array_is_cancelled_held_or_released() {
    let c = Cluster::started("");
    let id = c.submit(&["-H", "--array=0-3", "--wrap", "true"]);
    let queue = stdout(&c.run(
        "ysqueue",
        &["-h", "-j", &id.to_string(), "-o", "%i %F %K %A %r"],
    ));
    // Pending tasks fold into one line, as squeue shows them.
    assert_eq!(
        lines(&queue),
        vec![format!("{id}_[0-3] {id} [0-3] {id} JobHeldUser")]
    );

    let out = c.run("yscancel", &[&format!("{id}_1")]);
    assert!(out.status.success(), "{}", stderr(&out));
    // sacct's way: who cancelled it, by uid.
    assert_eq!(wait_done(&c, &format!("{id}_1")), "CANCELLED by 0");
    assert_eq!(field(&c, &format!("{id}_0"), "State"), "PENDING");
    // Tasks 0, 2 and 3 pending: 2-3 fold, 0 stands alone.
    let acct = stdout(&c.run(
        "ysacct",
        &["-j", &id.to_string(), "-n", "-P", "-o", "JobID,State"],
    ));
    assert_eq!(
        lines(&acct),
        [
            format!("{id}_0|PENDING"),
            format!("{id}_1|CANCELLED by 0"),
            format!("{id}_[2-3]|PENDING")
        ]
    );

    let out = c.run("yscontrol", &["release", &format!("{id}_[2-3]")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(wait_done(&c, &format!("{id}_2")), "COMPLETED");
    assert_eq!(wait_done(&c, &format!("{id}_3")), "COMPLETED");

    let shown = stdout(&c.run("yscontrol", &["show", "job", &format!("{id}_2")]));
    assert!(shown.starts_with(&format!("JobId={}", id + 2)), "{shown}");
    assert!(
        shown.contains(&format!("ArrayJobId={id} ArrayTaskId=2")),
        "{shown}"
    );

    // The array's id names what is left of it.
    let out = c.run("yscancel", &[&id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let states = field(&c, &id.to_string(), "State");
    assert_eq!(
        lines(&states),
        ["CANCELLED by 0", "CANCELLED by 0", "COMPLETED", "COMPLETED"]
    );

    let out = c.run("yscancel", &[&format!("{id}_9")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!("job {id}_9 does not exist")),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_dependency_on_an_array_waits_for_every_task() {
    let c = Cluster::started("");
    let id = c.submit(&[
        "--array=0-2",
        "--wrap",
        "sleep 0.3; test $SLURM_ARRAY_TASK_ID != 1",
    ]);
    let after_all = c.submit(&["-d", &format!("afterany:{id}"), "--wrap", "true"]);
    let after_ok = c.submit(&["-d", &format!("afterok:{id}"), "--wrap", "true"]);
    assert_eq!(c.wait_done(after_all, LONG), "COMPLETED");
    let ends = field(&c, &id.to_string(), "End");
    assert_eq!(lines(&ends).len(), 3);
    for end in lines(&ends) {
        assert!(c.field(after_all, "Start") >= end, "{end}");
    }
    assert_eq!(field(&c, &format!("{id}_1"), "State"), "FAILED");
    wait_for("afterok to be impossible", LONG, || {
        stdout(&c.run("ysqueue", &["-h", "-j", &after_ok.to_string(), "-o", "%r"])).trim()
            == "DependencyNeverSatisfied"
    });
}

#[test]
fn bad_arrays_are_refused_and_queue_nothing() {
    let c = Cluster::started("max_array_size = 100");
    let out = c.run("ysbatch", &["--array=5-1", "--wrap", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--array: range 5-1 goes backwards"),
        "{}",
        stderr(&out)
    );

    let out = c.run("ysbatch", &["--array=0-100", "--wrap", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out)
            .contains("index 100 is too large: indices go from 0 to 99 (max_array_size = 100)"),
        "{}",
        stderr(&out)
    );
    let queue = stdout(&c.run("ysqueue", &["-h"]));
    assert!(queue.trim().is_empty(), "{queue}");
}

#[test]
fn an_array_is_listed_by_its_id_after_its_first_task_ended() {
    let c = Cluster::started("");
    // One task at a time: task 0 ends at once, task 1 runs, task 2 waits.
    let id = c.submit(&[
        "--array=0-2%1",
        "--wrap",
        "[ $SLURM_ARRAY_TASK_ID = 0 ] || sleep 30",
    ]);
    let first = format!("{id}_0");
    assert_eq!(wait_done(&c, &first), "COMPLETED");
    wait_for("task 1 to run", LONG, || {
        field(&c, &format!("{id}_1"), "State") == "RUNNING"
    });
    // A change, so that the next query finds no snapshot of the queue made
    // yet; asking by the array's id (the ended first task's) must still
    // find the tasks that are left.
    c.submit(&["-H", "--wrap", "true"]);
    let out = c.run("ysqueue", &["-h", "-j", &id.to_string(), "-o", "%i %t"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        lines(&stdout(&out)),
        [format!("{id}_1 R"), format!("{id}_2 PD")]
    );
    let out = c.run("yscancel", &[&id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
}
