//! Nothing lost: the daemon is killed with SIGKILL at awkward moments, and
//! every accepted job still runs exactly once and is accounted.

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use crate::common::{stderr, stdout, wait_for, Cluster};

/// Each job appends its id to runs.log; counts how often each id ran.
fn runs(c: &Cluster) -> HashMap<u64, usize> {
    let text = std::fs::read_to_string(c.work.join("runs.log")).unwrap_or_default();
    let mut counts = HashMap::new();
    for line in text.lines() {
        *counts
            .entry(line.trim().parse::<u64>().unwrap())
            .or_insert(0) += 1;
    }
    counts
}

fn all_jobs(c: &Cluster) -> Vec<(u64, String)> {
    let out = c.run(
        "ysacct",
        &["-a", "-S", "2000-01-01", "-n", "-P", "-o", "JobID,State"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
        .lines()
        .map(|l| {
            let (id, state) = l.split_once('|').unwrap();
            (id.parse().unwrap(), state.to_string())
        })
        .collect()
}

#[test]
fn killed_during_a_burst_of_submissions_every_job_runs_exactly_once() {
    let mut c = Cluster::started("");
    const SUBMITTERS: usize = 4;
    const EACH: usize = 50;
    let script = c.script("record.sh", "#!/bin/sh\necho $SLURM_JOB_ID >> runs.log\n");
    let submitters: Vec<_> = (0..SUBMITTERS)
        .map(|_| {
            let mut cmd = std::process::Command::new("sh");
            cmd.current_dir(&c.work)
                .env("YS_CONF", &c.config)
                .arg("-c")
                .arg(format!(
                    "for i in $(seq {EACH}); do {} --parsable -G 1 {}; done",
                    common::bin_dir().join("ysbatch").display(),
                    script.display()
                ));
            cmd.env("YS_TIMEOUT", "2")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // Let some submissions through, then crash the daemon mid-burst.
    wait_for("some jobs to be accepted", Duration::from_secs(30), || {
        runs(&c).len() >= 20
    });
    c.crash();
    std::thread::sleep(Duration::from_millis(300));
    c.start();
    let mut acknowledged = Vec::new();
    for s in submitters {
        let out = s.wait_with_output().unwrap();
        assert!(out.status.success(), "a submitter failed: {}", stderr(&out));
        // A submission made while the daemon was down has no id yet:
        // `--parsable` says "queued for the daemon: NAME" for it instead.
        for line in stdout(&out).lines() {
            match line.trim().parse::<u64>() {
                Ok(id) => acknowledged.push(id),
                Err(_) => assert!(
                    line.starts_with("queued for the daemon: "),
                    "a submitter printed neither an id nor a queued name: {line:?}"
                ),
            }
        }
    }
    // Every submission is accepted: acknowledged ones, and ones spooled or
    // in flight while the daemon was down.
    wait_for(
        "all 200 jobs to be in the database",
        Duration::from_secs(60),
        || all_jobs(&c).len() == SUBMITTERS * EACH,
    );
    wait_for("all jobs to finish", Duration::from_secs(120), || {
        all_jobs(&c).iter().all(|(_, s)| s == "COMPLETED")
    });
    let counts = runs(&c);
    let jobs = all_jobs(&c);
    assert_eq!(jobs.len(), SUBMITTERS * EACH);
    for (id, _) in &jobs {
        assert_eq!(
            counts.get(id),
            Some(&1),
            "job {id} ran {:?} times",
            counts.get(id)
        );
    }
    assert_eq!(
        counts.len(),
        jobs.len(),
        "a job ran that the database does not know"
    );
    for id in acknowledged {
        assert!(
            jobs.iter().any(|(j, _)| *j == id),
            "acknowledged job {id} was lost"
        );
    }
}

#[test]
fn killed_while_jobs_run_they_are_readopted_and_accounted() {
    let mut c = Cluster::started("");
    c.script(
        "sleepy.sh",
        "#!/bin/sh\nsleep $1\necho $SLURM_JOB_ID >> runs.log\n",
    );
    // Two end while the daemon is down, two outlive its absence, two wait.
    let ids: Vec<u64> = ["1", "1", "5", "5", "1", "1"]
        .iter()
        .map(|s| c.submit(&["-G", "1", "sleepy.sh", s]))
        .collect();
    wait_for("4 jobs to run", Duration::from_secs(20), || {
        stdout(&c.run("ysqueue", &["-h", "-t", "R", "-o", "%i"]))
            .lines()
            .count()
            == 4
    });
    c.crash();
    std::thread::sleep(Duration::from_millis(2000));
    c.start();
    assert!(
        c.log().contains("re-adopted"),
        "running jobs are re-adopted: {}",
        c.log()
    );
    for id in &ids {
        assert_eq!(
            c.wait_done(*id, Duration::from_secs(30)),
            "COMPLETED",
            "job {id}"
        );
    }
    let counts = runs(&c);
    for id in &ids {
        assert_eq!(
            counts.get(id),
            Some(&1),
            "job {id} ran {:?} times",
            counts.get(id)
        );
    }
    // A clean stop and start re-adopts running jobs too.
    let id = c.submit(&["--wrap", "sleep 2; echo done"]);
    c.wait_state(id, "RUNNING", Duration::from_secs(20));
    c.stop();
    c.start();
    assert!(
        c.log().contains(&format!("job {id} re-adopted")),
        "{}",
        c.log()
    );
    assert_eq!(c.wait_done(id, Duration::from_secs(30)), "COMPLETED");
    assert_eq!(c.output_of(id), "done\n");
}

#[test]
fn a_cancel_sent_before_a_crash_is_carried_out_after_it() {
    let mut c = Cluster::started("");
    let id = c.submit(&["--wrap", "trap '' TERM; sleep 60"]);
    c.wait_state(id, "RUNNING", Duration::from_secs(20));
    let out = c.run("yscancel", &[&id.to_string()]);
    assert!(out.status.success());
    c.crash();
    c.start();
    // SIGTERM is ignored, so the supervisor's SIGKILL after kill_wait ends it.
    assert_eq!(c.wait_done(id, Duration::from_secs(30)), "CANCELLED");
}

/// The parent pid and state letter of a process, from /proc; `None` once
/// it is gone.
fn parent_and_state(pid: i32) -> Option<(i32, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut after = stat.rsplit_once(')')?.1.split_whitespace();
    let state = after.next()?.chars().next()?;
    Some((after.next()?.parse().ok()?, state))
}

/// The daemon's supervisor fork server (`ysstepd --server`), if it has one.
fn fork_server_of(daemon: i32) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let is_server = cmdline.ends_with(b"ysstepd\0--server\0");
        let (parent, state) = parent_and_state(pid)?;
        (is_server && parent == daemon && state != 'Z').then_some(pid)
    })
}

/// capability(7)'s number for CAP_SYS_RESOURCE.
const CAP_SYS_RESOURCE: u32 = 24;

/// Whether this process has a capability in its effective set.
fn has_capability(cap: u32) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    effective & (1 << cap) != 0
}

fn supervisor_of(c: &Cluster, id: u64) -> i32 {
    let state = common::started_state(&c.spool, id);
    state["supervisor_pid"].as_i64().unwrap() as i32
}

#[test]
fn when_the_supervisor_fork_server_dies_jobs_go_on_and_new_ones_start() {
    let mut c = Cluster::started("");
    let first = c.submit(&["--wrap", "sleep 2; echo first"]);
    c.wait_state(first, "RUNNING", Duration::from_secs(20));
    let daemon = c.daemon_pid().as_raw();
    let server = fork_server_of(daemon).expect("the daemon runs a fork server");
    let supervisor = supervisor_of(&c, first);
    assert_eq!(
        parent_and_state(supervisor).map(|(parent, _)| parent),
        Some(server),
        "the job's supervisor was forked by the fork server"
    );
    // It shows in ps as an exec'd supervisor would, where the kernel lets
    // it (CAP_SYS_RESOURCE, which root has outside a restricted sandbox);
    // else with the server's command line.
    let cmdline = std::fs::read(format!("/proc/{supervisor}/cmdline")).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    let job_dir = c.spool.join(format!("jobs/{first}"));
    if has_capability(CAP_SYS_RESOURCE) {
        assert!(
            cmdline.ends_with(&format!("ysstepd {} ", job_dir.display())),
            "{cmdline}"
        );
    } else {
        assert!(cmdline.ends_with("ysstepd --server "), "{cmdline}");
    }

    // The server dies: the running job is not its concern.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_for("the fork server to die", Duration::from_secs(10), || {
        fork_server_of(daemon).is_none()
    });
    assert_eq!(c.wait_done(first, Duration::from_secs(30)), "COMPLETED");
    assert_eq!(c.output_of(first), "first\n");

    // The next job starts anyway (its supervisor exec'd directly), and the
    // one after it through a new fork server.
    for word in ["second", "third"] {
        let id = c.submit(&["--wrap", &format!("echo {word}")]);
        assert_eq!(c.wait_done(id, Duration::from_secs(30)), "COMPLETED");
        assert_eq!(c.output_of(id), format!("{word}\n"));
    }
    assert!(
        c.log().contains("starting its supervisor directly"),
        "{}",
        c.log()
    );
    let replacement = fork_server_of(daemon).expect("a new fork server");
    assert_ne!(replacement, server);

    // A crashed daemon's server goes with it; its jobs do not.
    let last = c.submit(&["--wrap", "sleep 2; echo last"]);
    c.wait_state(last, "RUNNING", Duration::from_secs(20));
    c.crash();
    wait_for(
        "the fork server to leave with its daemon",
        Duration::from_secs(10),
        || parent_and_state(replacement).is_none_or(|(_, state)| state == 'Z'),
    );
    c.start();
    assert_eq!(c.wait_done(last, Duration::from_secs(30)), "COMPLETED");
    assert_eq!(c.output_of(last), "last\n");
}

#[test]
fn a_job_sent_to_a_hung_fork_server_starts_once_after_all() {
    let c = Cluster::started("");
    // Two supervisors that end apart, with no job started after them: the
    // server reaps both without waiting for its next request.
    let short = c.submit(&["--wrap", "sleep 0.3"]);
    let long = c.submit(&["--wrap", "sleep 1.3"]);
    for id in [short, long] {
        assert_eq!(c.wait_done(id, Duration::from_secs(30)), "COMPLETED");
    }
    let daemon = c.daemon_pid().as_raw();
    let server = fork_server_of(daemon).expect("the daemon runs a fork server");
    let zombies = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|&pid| parent_and_state(pid) == Some((server, 'Z')))
            .count()
    };
    wait_for(
        "the fork server to reap its supervisors",
        Duration::from_secs(5),
        || zombies() == 0,
    );
    // Stopped, it takes the request and never answers.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    c.script(
        "once.sh",
        "#!/bin/sh\necho $SLURM_JOB_ID >> runs.log\necho ran\n",
    );
    let id = c.submit(&["once.sh"]);
    // The daemon gives up on the server after its answer timeout, finds
    // the job's lock free (nothing was forked), and starts it itself.
    assert_eq!(c.wait_done(id, Duration::from_secs(40)), "COMPLETED");
    assert_eq!(c.output_of(id), "ran\n");
    assert_eq!(runs(&c).get(&id), Some(&1));
    assert!(
        c.log()
            .contains(&format!("job {id}: no answer from the fork server")),
        "{}",
        c.log()
    );
    assert!(
        parent_and_state(server).is_none_or(|(parent, state)| parent != daemon || state == 'Z'),
        "the hung server was killed"
    );
    // The next job gets a new server.
    let next = c.submit(&["--wrap", "echo next"]);
    assert_eq!(c.wait_done(next, Duration::from_secs(30)), "COMPLETED");
    assert!(fork_server_of(daemon).is_some_and(|s| s != server));
}

#[test]
fn a_hung_daemon_is_a_down_daemon_to_the_commands() {
    let c = Cluster::started("");
    let id = c.submit(&["-H", "--wrap", "true"]);
    let pid = c.daemon_pid();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let run = |name: &str, args: &[&str]| {
        c.command(name)
            .args(args)
            .env("YS_TIMEOUT", "2")
            .output()
            .unwrap()
    };
    // Queries: answered from the database, saying why.
    let out = run("ysqueue", &["-h", "-o", "%i %t"]);
    assert!(out.status.success(), "{}", crate::common::stderr(&out));
    assert_eq!(crate::common::stdout(&out).trim(), format!("{id} PD"));
    assert!(
        crate::common::stderr(&out)
            .contains("ysctld does not answer (hung?); showing jobs as last recorded"),
        "{}",
        crate::common::stderr(&out)
    );
    let out = run(
        "ysacct",
        &["-n", "-P", "-j", &id.to_string(), "-o", "JobID,State"],
    );
    assert_eq!(crate::common::stdout(&out).trim(), format!("{id}|PENDING"));
    // Changes: refused in bounded time, kept to be applied, saying so.
    let out = run("yscancel", &[&id.to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        crate::common::stderr(&out).contains("did not answer in time; the request"),
        "{}",
        crate::common::stderr(&out)
    );
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    assert_eq!(
        c.wait_done(id, std::time::Duration::from_secs(30)),
        "CANCELLED"
    );
}

/// A clean stop lets the next start trust the database without reading
/// every page; after a crash, or a file changed while ysctld was stopped,
/// the start checks it first. `ysctld --check-db` checks it all on demand.
#[test]
fn the_database_is_checked_at_start_only_after_an_unclean_stop_or_a_change() {
    let mut c = Cluster::started("");
    let checks = |c: &Cluster| c.log().matches("quick_check found it sound").count();
    assert_eq!(checks(&c), 1, "a new database has no clean stop behind it");
    c.stop();
    c.start();
    assert_eq!(checks(&c), 1, "checked after a clean stop:\n{}", c.log());
    c.crash();
    c.start();
    assert_eq!(checks(&c), 2, "not checked after a crash:\n{}", c.log());
    c.stop();
    let database = c.spool.join("ysched.db");
    let file = std::fs::File::options()
        .write(true)
        .open(&database)
        .unwrap();
    file.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
        .unwrap();
    drop(file);
    c.start();
    assert_eq!(checks(&c), 3, "not checked after a change:\n{}", c.log());
    let out = c.run("ysctld", &["--check-db"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(": sound (integrity_check, "),
        "{}",
        stdout(&out)
    );
    // Damaged after a clean stop: the start finds it, and so does
    // --check-db.
    c.stop();
    let mut bytes = std::fs::read(&database).unwrap();
    for b in &mut bytes[4096..8192] {
        *b = 0xab;
    }
    std::fs::write(&database, bytes).unwrap();
    let config = c.config.to_str().unwrap().to_string();
    let out = c.run("ysctld", &["--foreground", "--config", &config]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let out = c.run("ysctld", &["--check-db"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("restore the database from a backup"),
        "{}",
        stderr(&out)
    );
}
