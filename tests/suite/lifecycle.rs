//! Stopping jobs and sharing GPUs: time limits, cancel, signals, process
//! clean-up, and no GPU given to two jobs at once.

use std::time::{Duration, Instant};

use crate::common::{stderr, stdout, wait_for, Cluster};

const LONG: Duration = Duration::from_secs(20);

fn pid_alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

#[test]
fn a_time_limit_ends_in_timeout_after_sigterm_and_the_grace() {
    let c = Cluster::started("");
    // Ignores SIGTERM (records it), so only SIGKILL after kill_wait ends it.
    let id = c.submit(&[
        "-t",
        "0:02",
        "--wrap",
        "trap 'echo got TERM' TERM; while true; do sleep 0.1; done",
    ]);
    c.wait_state(id, "RUNNING", LONG);
    let started = Instant::now();
    assert_eq!(c.wait_done(id, LONG), "TIMEOUT");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1500),
        "ended after {took:?}, before limit + grace"
    );
    // The whole process group gets SIGTERM: the shell's `sleep` dies of it.
    assert!(
        c.output_of(id).contains("got TERM\n"),
        "{}",
        c.output_of(id)
    );
    assert_eq!(c.field(id, "ExitCode"), "0:9");
    assert_eq!(c.field(id, "Reason"), "time limit reached");
    assert_eq!(c.field(id, "Timelimit"), "0:02");
}

#[test]
fn cancel_pending_and_running_jobs_and_their_children() {
    let c = Cluster::started("");
    let running = c.submit(&["-G", "4", "--wrap", "sleep 300 & echo $! > child.pid; wait"]);
    let pending = c.submit(&["-G", "1", "--wrap", "true"]);
    c.wait_state(running, "RUNNING", LONG);
    let pid_file = c.work.join("child.pid");
    wait_for("the background child to start", LONG, || {
        std::fs::read_to_string(&pid_file)
            .map(|s| !s.trim().is_empty())
            .unwrap_or(false)
    });
    let child: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(pid_alive(child));

    let out = c.run("yscancel", &[&pending.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        c.state(pending),
        "CANCELLED",
        "a pending job is cancelled at once"
    );
    assert_eq!(c.field(pending, "Start"), "Unknown", "it never started");

    let out = c.run("yscancel", &["-v", &running.to_string()]);
    assert!(out.status.success());
    assert_eq!(stderr(&out), format!("yscancel: job {running} cancelled\n"));
    assert_eq!(c.wait_done(running, LONG), "CANCELLED");
    wait_for("the job's background process to be killed", LONG, || {
        !pid_alive(child)
    });

    // Cancelling again, or a job that never existed: an error, exit 1.
    let out = c.run("yscancel", &[&running.to_string(), "999999"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!("yscancel: error: job {running} has already finished (CANCELLED)\nyscancel: error: job 999999 does not exist\n")
    );
    let out = c.run("yscancel", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no job identification provided"));
}

#[test]
fn cancel_by_filter_and_signal_without_cancelling() {
    let c = Cluster::started("");
    let a = c.submit(&["-J", "sweep", "-H", "--wrap", "true"]);
    let b = c.submit(&["-J", "sweep", "-H", "--wrap", "true"]);
    let keep = c.submit(&["-J", "other", "-H", "--wrap", "true"]);
    let out = c.run("yscancel", &["-n", "sweep", "-t", "PENDING"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(c.state(a), "CANCELLED");
    assert_eq!(c.state(b), "CANCELLED");
    assert_eq!(c.state(keep), "PENDING");

    let id = c.submit(&[
        "--wrap",
        "trap 'echo got USR1' USR1; for i in $(seq 200); do sleep 0.05; done; echo finished",
    ]);
    c.wait_state(id, "RUNNING", LONG);
    std::thread::sleep(Duration::from_millis(300)); // let the trap be installed
    let out = c.run("yscancel", &["--signal", "USR1", &id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        c.wait_done(id, LONG),
        "COMPLETED",
        "a signal does not cancel"
    );
    assert!(
        c.output_of(id).ends_with("got USR1\nfinished\n"),
        "{}",
        c.output_of(id)
    );

    let out = c.run("yscancel", &["--signal", "USR1", &keep.to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("is PENDING; only running jobs can be signalled"),
        "{}",
        stderr(&out)
    );
    let out = c.run("yscancel", &["--signal", "NOSUCH", &keep.to_string()]);
    assert_eq!(out.status.code(), Some(2));
}

/// Reads `start end gpus` lines that jobs wrote, one per job.
fn intervals(c: &Cluster, ids: &[u64]) -> Vec<(f64, f64, Vec<u32>)> {
    ids.iter()
        .map(|id| {
            let text = c.output_of(*id);
            let parts: Vec<&str> = text.split_whitespace().collect();
            assert_eq!(parts.len(), 3, "job {id} wrote {text:?}");
            let gpus = parts[2].split(',').map(|g| g.parse().unwrap()).collect();
            (parts[0].parse().unwrap(), parts[1].parse().unwrap(), gpus)
        })
        .collect()
}

#[test]
fn no_two_running_jobs_share_a_gpu() {
    let c = Cluster::started("");
    // SLURM_JOB_GPUS: the global indices (CUDA_VISIBLE_DEVICES counts from 0
    // inside a job confined to its GPUs).
    let script =
        "s=$(date +%s.%N); sleep 0.$((RANDOM % 4 + 2)); echo $s $(date +%s.%N) $SLURM_JOB_GPUS";
    let ids: Vec<u64> = (0..14)
        .map(|i| c.submit(&["-G", if i % 3 == 0 { "2" } else { "1" }, "--wrap", script]))
        .collect();
    for id in &ids {
        assert_eq!(c.wait_done(*id, Duration::from_secs(60)), "COMPLETED");
    }
    let jobs = intervals(&c, &ids);
    for (i, a) in jobs.iter().enumerate() {
        assert_eq!(a.2.len(), if i % 3 == 0 { 2 } else { 1 });
        for b in &jobs[i + 1..] {
            let overlap = a.0 < b.1 && b.0 < a.1;
            let shared = a.2.iter().any(|g| b.2.contains(g));
            assert!(
                !(overlap && shared),
                "jobs overlapped in time on a shared GPU: {a:?} {b:?}"
            );
        }
    }
    // The GPUs were used in parallel, not one job at a time.
    let concurrent = jobs
        .iter()
        .filter(|a| jobs.iter().any(|b| a != &b && a.0 < b.1 && b.0 < a.1))
        .count();
    assert!(concurrent > 0, "no two jobs ever ran together: {jobs:?}");
}

#[test]
fn a_freed_gpu_goes_to_the_next_job_at_once() {
    let c = Cluster::started("");
    let first = c.submit(&["-G", "4", "--wrap", "sleep 1; date +%s.%N"]);
    let second = c.submit(&["-G", "4", "--wrap", "date +%s.%N"]);
    assert_eq!(c.wait_done(second, LONG), "COMPLETED");
    let end: f64 = c.output_of(first).trim().parse().unwrap();
    let start: f64 = c.output_of(second).trim().parse().unwrap();
    let gap = start - end;
    assert!(
        (0.0..0.5).contains(&gap),
        "the next job started {gap:.3} s after the GPUs were freed"
    );
    let q = stdout(&c.run("ysqueue", &["-h"]));
    assert_eq!(q, "");
}

#[test]
fn ysqueue_lists_a_finished_job_for_min_job_age_when_asked_for_its_state() {
    let c = Cluster::started("min_job_age_secs = 2\n");
    let id = c.submit(&["--wrap", "true"]);
    assert_eq!(c.wait_done(id, Duration::from_secs(20)), "COMPLETED");
    let listed = |states: &str| {
        let out = c.run("ysqueue", &["-h", "-t", states, "-o", "%i %T"]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    assert_eq!(listed("all").trim(), format!("{id} COMPLETED"));
    assert_eq!(listed("CD").trim(), format!("{id} COMPLETED"));
    assert_eq!(listed("PD,R").trim(), "", "not asked for finished jobs");
    // Times are whole seconds: past 2 s plus the second the end fell in.
    std::thread::sleep(Duration::from_millis(3_200));
    assert_eq!(listed("all").trim(), "", "older than min_job_age_secs");
}

#[test]
fn jobs_named_right_after_a_change_show_as_in_the_whole_queue() {
    let c = Cluster::started("");
    let big = c.submit(&["-G", "4", "--wrap", "sleep 30"]);
    c.wait_state(big, "RUNNING", Duration::from_secs(20));
    let waiting = c.submit(&["-G", "1", "--wrap", "true"]);
    let held = c.submit(&["-H", "-G", "1", "--wrap", "true"]);
    let after = c.submit(&["-G", "1", "-d", &format!("afterok:{big}"), "--wrap", "true"]);
    let named = format!("{after},{held},{big},{waiting},999999");
    let show = |c: &Cluster| {
        let queue = c.run(
            "ysqueue",
            &["-h", "-j", &named, "-o", "%i|%t|%r|%u|%j|%b|%D"],
        );
        assert!(queue.status.success(), "{}", stderr(&queue));
        let job = c.run("yscontrol", &["show", "job", &held.to_string()]);
        assert!(job.status.success(), "{}", stderr(&job));
        (stdout(&queue), stdout(&job))
    };
    // Right after a change, so that these queries are answered from a
    // snapshot of the named jobs alone...
    c.submit(&["-H", "--wrap", "true"]);
    let (queue_named, job_named) = show(&c);
    // ...and the same once a listing of every job made the whole queue's.
    let all = c.run("ysqueue", &["-h"]);
    assert!(all.status.success(), "{}", stderr(&all));
    let (queue_whole, job_whole) = show(&c);
    assert_eq!(queue_named, queue_whole);
    assert_eq!(job_named, job_whole);
    // In queue order, each with its reason; the unknown id is not listed.
    let rows: Vec<&str> = queue_named.lines().collect();
    assert_eq!(rows.len(), 4, "{queue_named}");
    assert!(rows[0].starts_with(&format!("{big}|R|")), "{queue_named}");
    for (id, reason) in [
        (waiting, "Resources"),
        (held, "JobHeldUser"),
        (after, "Dependency"),
    ] {
        assert!(
            rows.iter()
                .any(|r| r.starts_with(&format!("{id}|PD|{reason}|"))),
            "{id} {reason}: {queue_named}"
        );
    }
    let out = c.run("yscancel", &["-u", "root"]);
    assert!(out.status.success(), "{}", stderr(&out));
}
