//! Interactive work: `salloc` (an allocation, a command in it, steps
//! started from it), `srun` outside a job, and `srun --pty` driven from a
//! real pseudo-terminal (tests/suite/pty_drive.py), by a real user.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{self, bin_dir, stderr, stdout, Cluster, TestUser};

const LONG: Duration = Duration::from_secs(20);

/// A directory with Slurm's command names (the compat layer).
fn shims(c: &Cluster) -> String {
    let dir = c.dir.path().join("shims");
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["srun", "salloc", "sacct", "scancel", "squeue"] {
        let _ = std::os::unix::fs::symlink(bin_dir().join("ysched-slurm"), dir.join(name));
    }
    dir.display().to_string()
}

/// `command` run as `user` with the cluster's config and the shims first
/// in its PATH.
fn as_user(c: &Cluster, user: &str, command: &[&str]) -> Command {
    let mut cmd = Command::new("runuser");
    cmd.args(["-u", user, "--", "env"])
        .arg(format!("YS_CONF={}", c.config.display()))
        .arg(format!("PATH={}:/usr/local/bin:/usr/bin:/bin", shims(c)))
        .args(command)
        .current_dir(&c.work);
    cmd
}

/// `command` as `user` on a pseudo-terminal, through `steps` (see
/// pty_drive.py): what the terminal showed, ending in how it exited.
fn on_terminal(c: &Cluster, user: &str, steps: &[&str], command: &[&str]) -> String {
    on_terminal_with(as_user(c, user, command), steps)
}

/// `command` (a runuser line) on a pseudo-terminal, through `steps`.
pub(crate) fn on_terminal_with(command: Command, steps: &[&str]) -> String {
    let driver = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/suite/pty_drive.py");
    let mut line = vec![command.get_program().to_string_lossy().into_owned()];
    line.extend(command.get_args().map(|a| a.to_string_lossy().into_owned()));
    let mut driven = Command::new("python3");
    driven.arg(driver).args(steps).arg("--").args(&line);
    if let Some(dir) = command.get_current_dir() {
        driven.current_dir(dir);
    }
    let out = driven.output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
}

/// The rows `ysacct -j ID` lists for the job and its steps.
pub(crate) fn records(c: &Cluster, user: &str, id: u64, fields: &str) -> Vec<String> {
    let out = c.run_as(
        user,
        "ysacct",
        &["-j", &id.to_string(), "-n", "-P", "-o", fields],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out).lines().map(String::from).collect()
}

/// The allocation id salloc printed (`Granted job allocation N`), or srun
/// with `-v` (`jobid N: nodes(1):...`), as Slurm's say it.
pub(crate) fn granted(text: &str) -> u64 {
    let at = match text.find("Granted job allocation ") {
        Some(at) => at + 23,
        None => text.find("srun: jobid ").expect(text) + 12,
    };
    text[at..]
        .split(|ch: char| !ch.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn srun_pty_gives_the_user_a_shell_on_its_gpu_that_follows_the_terminal() {
    require_root!();
    let user = TestUser::create("pty");
    let c = Cluster::started("");
    let shown = on_terminal(
        &c,
        &user.name,
        &[
            "expect=$ ",
            "send=stty size; echo U=$(id -un) G=$CUDA_VISIBLE_DEVICES.; grep -c /job_ /proc/self/cgroup\\r",
            "expect=G=0.",
            "resize=40x120",
            "sleep=0.5",
            "send=stty size\\r",
            "expect=40 120",
            // Ctrl-C stops what runs in the shell, not the shell.
            "send=sleep 30; echo slept\\r",
            "sleep=1",
            "send=\\x03",
            "send=echo alive\\r",
            "expect=alive",
            "send=exit 7\\r",
            "wait",
        ],
        &["srun", "-v", "-G", "1", "-t", "5", "--pty", "/bin/sh", "-i"],
    );
    assert!(shown.ends_with("EXIT 7\n"), "{shown}");
    assert!(
        shown.contains("24 80"),
        "the terminal's first size: {shown}"
    );
    assert!(shown.contains(&format!("U={} G=0.", user.name)), "{shown}");
    assert!(
        !shown.contains("\nslept"),
        "Ctrl-C stopped the sleep: {shown}"
    );
    let id = granted(&shown);
    assert_eq!(c.wait_done(id, LONG), "FAILED");
    let rows = records(&c, &user.name, id, "JobID,JobName,State,ExitCode,NTasks");
    assert_eq!(
        rows,
        [
            format!("{id}|sh|FAILED|7:0|"),
            format!("{id}.0|sh|FAILED|7:0|1")
        ],
        "the shell's exit is the step's and the allocation's"
    );
}

#[test]
fn salloc_runs_its_command_with_steps_each_recorded_and_one_cancelled_alone() {
    require_root!();
    let user = TestUser::create("sal");
    let c = Cluster::started("");
    // The step is recorded a moment before its task starts on the node;
    // a signal sent in that moment finds no task (a known gap), so the
    // cancel waits a second after the step is listed.
    let script = c.script(
        "session.sh",
        "#!/bin/sh\n\
         srun -n 2 --label sh -c 'echo step=$SLURM_STEP_ID gpu=$CUDA_VISIBLE_DEVICES'\n\
         srun sleep 60 &\n\
         for i in $(seq 100); do squeue -s -h -o %i | grep -q \"^$SLURM_JOB_ID.1\" && break; sleep 0.2; done\n\
         sleep 1\n\
         scancel $SLURM_JOB_ID.1\n\
         wait\n\
         srun sh -c 'echo last=$SLURM_STEP_ID'\n\
         echo nodes=$SLURM_JOB_NODELIST\n",
    );
    let started = Instant::now();
    let out = as_user(
        &c,
        &user.name,
        // Values attached to their options, as Slurm's users write them.
        &["salloc", "-G2", "-t5", "sh", script.to_str().unwrap()],
    )
    .stdin(Stdio::null())
    .output()
    .unwrap();
    let (text, errors) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{text}{errors}");
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "the cancelled step did not hold the session"
    );
    assert!(
        text.contains("0: step=0 gpu=0,1") && text.contains("1: step=0 gpu=0,1"),
        "{text}"
    );
    assert!(
        text.contains("last=2\n") && text.contains("nodes=gpu01\n"),
        "{text}"
    );
    let id = granted(&errors);
    assert!(
        errors.contains(&format!("salloc: Relinquishing job allocation {id}")),
        "{errors}"
    );
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    let rows = records(&c, &user.name, id, "JobID,State,ExitCode,NTasks");
    assert_eq!(rows.len(), 4, "{rows:?}");
    assert_eq!(rows[0], format!("{id}|COMPLETED|0:0|"));
    assert_eq!(rows[1], format!("{id}.0|COMPLETED|0:0|2"));
    assert!(
        rows[2].starts_with(&format!("{id}.1|")) && !rows[2].contains("COMPLETED"),
        "{rows:?}"
    );
    assert_eq!(rows[3], format!("{id}.2|COMPLETED|0:0|1"));
}

/// Starts `salloc ARGS sleep 60` as `user` in the background; the
/// allocation's id once it runs.
fn session(c: &Cluster, user: &str, args: &[&str]) -> (std::process::Child, u64) {
    let mut command = vec!["salloc"];
    command.extend(args);
    command.extend(["sh", "-c", "echo started; exec sleep 60"]);
    let child = as_user(c, user, &command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut id = 0;
    common::wait_for("the allocation to run", LONG, || {
        let out = c.run("ysqueue", &["-h", "-u", user, "-t", "R", "-o", "%i"]);
        id = stdout(&out).trim().parse().unwrap_or(0);
        id > 0
    });
    (child, id)
}

/// How `child` exited (within `within`), and what it wrote on stderr.
fn ended(mut child: std::process::Child, within: Duration) -> (Option<i32>, String) {
    let deadline = Instant::now() + within;
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "salloc is still there");
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    (out.status.code(), stderr(&out))
}

#[test]
fn a_session_ends_at_its_time_limit_and_when_cancelled_from_another_terminal() {
    require_root!();
    let user = TestUser::create("sen");
    let c = Cluster::started("");
    let (child, id) = session(&c, &user.name, &["-G", "1", "-t", "0:03"]);
    let (code, errors) = ended(child, LONG);
    assert_eq!(code, Some(129), "the command was hung up: {errors}");
    assert!(
        errors.contains(&format!("Job allocation {id} reaches its time limit in")),
        "warned before: {errors}"
    );
    assert!(
        errors.contains(&format!("Job allocation {id} has been revoked: TIMEOUT")),
        "{errors}"
    );
    assert_eq!(c.wait_done(id, LONG), "TIMEOUT");

    let (child, id) = session(&c, &user.name, &["-G", "1", "-t", "5"]);
    let out = c.run("yscontrol", &["requeue", &id.to_string()]);
    assert!(
        !out.status.success() && stderr(&out).contains("is an interactive session"),
        "{}",
        stderr(&out)
    );
    let out = c.run_as(&user.name, "yscancel", &[&id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (code, errors) = ended(child, LONG);
    assert_eq!(code, Some(129), "{errors}");
    assert!(errors.contains("has been revoked: CANCELLED"), "{errors}");
    assert_eq!(c.wait_done(id, LONG), "CANCELLED");
}

#[test]
fn ctrl_c_while_waiting_withdraws_the_allocation() {
    require_root!();
    let user = TestUser::create("wai");
    let c = Cluster::started("");
    let busy = c.submit(&["-G", "4", "--wrap", "sleep 60"]);
    c.wait_state(busy, "RUNNING", LONG);
    // In a process group of its own, as a terminal's foreground job.
    let child = as_user(&c, &user.name, &["salloc", "-G", "1", "-t", "5", "true"])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut id = 0;
    common::wait_for("the allocation to wait", LONG, || {
        let out = c.run("ysqueue", &["-h", "-u", &user.name, "-t", "PD", "-o", "%i"]);
        id = stdout(&out).trim().parse().unwrap_or(0);
        id > 0
    });
    // Ctrl-C: SIGINT to the foreground process group.
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let (code, errors) = ended(child, LONG);
    assert_eq!(code, Some(1), "{errors}");
    assert!(
        errors.contains("queued and waiting for resources"),
        "{errors}"
    );
    assert!(
        errors.contains(&format!("Job allocation {id} has been revoked")),
        "{errors}"
    );
    assert_eq!(c.wait_done(id, LONG), "CANCELLED");
    let out = c.run("yscancel", &[&busy.to_string()]);
    assert!(out.status.success());
}

/// Runs `command` (a session with an interactive shell) as `user` on a
/// terminal, starts `marker` (a long `sleep`) in it, drops the terminal,
/// and checks that the session ended within 30 s with nothing of
/// `marker` left.
fn dropped_leaves_nothing(c: &Cluster, user: &TestUser, marker: &str, command: &[&str]) {
    let started = Instant::now();
    let shown = on_terminal(
        c,
        &user.name,
        &[
            "expect=$ ",
            &format!("send={marker} & {marker}\\r"),
            "sleep=1",
            "close",
            "wait",
        ],
        command,
    );
    assert!(
        !shown.contains("TIMEOUT"),
        "{command:?} ended with its terminal: {shown}"
    );
    let id = granted(&shown);
    let state = c.wait_done(id, LONG);
    assert!(started.elapsed() < Duration::from_secs(30), "{state}");
    assert!(state == "FAILED" || state == "COMPLETED", "{state}");
    let left = Command::new("pgrep")
        .args(["-u", &user.name, "-f", marker])
        .output()
        .unwrap();
    assert!(
        stdout(&left).trim().is_empty(),
        "left behind: {}",
        stdout(&left)
    );
}

#[test]
fn a_dropped_terminal_ends_the_session_and_leaves_no_process_behind() {
    require_root!();
    let user = TestUser::create("drp");
    let c = Cluster::started("");
    // The shell on the allocation's node, through srun.
    let pty = ["srun", "-v", "-G", "1", "-t", "5", "--pty", "/bin/sh", "-i"];
    dropped_leaves_nothing(&c, &user, "sleep 4242", &pty);
    // salloc's shell runs here: the terminal dropped under it ends it,
    // and the allocation with it, at once (not after unwatched_after).
    let salloc = ["salloc", "-G", "1", "-t", "5", "/bin/sh", "-i"];
    dropped_leaves_nothing(&c, &user, "sleep 4243", &salloc);
}

#[test]
fn pty_steps_and_batch_options_are_refused_where_they_cannot_work() {
    require_root!();
    let c = Cluster::started("");
    // Refused before anything is asked for: no allocation is made.
    let user = TestUser::create("ptr");
    let shown = on_terminal(
        &c,
        &user.name,
        &["wait"],
        &["srun", "-n", "2", "--pty", "true"],
    );
    assert!(
        shown.contains("--pty runs one task, on the terminal: --ntasks does not go with it")
            && shown.ends_with("EXIT 1\n")
            && !shown.contains("Pending job allocation"),
        "{shown}"
    );
    let out = c.run("ysalloc", &["--array", "0-3", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--array: an allocation is one session"),
        "{}",
        stderr(&out)
    );
    let script = c.script(
        "pty.sh",
        &format!("#!/bin/sh\n{}/srun --pty true\necho srun=$?\n", shims(&c)),
    );
    let id = c.submit(&[script.to_str().unwrap()]);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    let output = c.output_of(id);
    assert!(
        output.contains("--pty: a batch job has no terminal") && output.contains("srun=1"),
        "{output}"
    );
}

#[test]
fn session_limits_refuse_what_would_skip_the_queue_and_a_lost_salloc_gives_its_gpus_back() {
    require_root!();
    let user = TestUser::create("lim");
    let c = Cluster::started(
        "[interactive]\nmax_sessions_per_user = 1\nmax_gpus_per_user = 2\nmax_time = \"10:00\"\nqos = \"low\"\nunwatched_after = \"5s\"\n",
    );
    let refused = |args: &[&str], why: &str| {
        let mut command = vec!["salloc"];
        command.extend(args);
        command.push("true");
        let out = as_user(&c, &user.name, &command)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stderr(&out).contains(why), "{}", stderr(&out));
    };
    refused(&["-t", "20:00"], "[interactive] max_time");
    refused(&["-G", "3", "-t", "5"], "[interactive] max_gpus_per_user");
    let (child, id) = session(&c, &user.name, &["-G", "1", "-t", "5"]);
    assert_eq!(
        c.field(id, "QOS"),
        "low",
        "a session's QoS is [interactive]'s"
    );
    refused(
        &["-G", "1", "-t", "5"],
        &format!("you hold 1 interactive sessions (jobs {id})"),
    );
    // A salloc killed outright never ends its allocation: the controller
    // does, once nobody has looked at it for unwatched_after.
    let killed = Command::new("pkill")
        .args(["-KILL", "-u", &user.name, "-x", "salloc"])
        .status()
        .unwrap();
    assert!(killed.success());
    drop(child);
    assert_eq!(c.wait_done(id, LONG), "CANCELLED");
    let reason = c.field(id, "Reason");
    let _ = Command::new("pkill")
        .args(["-u", &user.name, "sleep"])
        .status();
    assert!(reason.contains("stopped answering"), "{reason}");
}

#[test]
fn an_allocations_step_key_is_its_users_alone() {
    require_root!();
    let (user, other) = (TestUser::create("key"), TestUser::create("kez"));
    let c = Cluster::started("");
    let (child, id) = session(&c, &user.name, &["-G", "1", "-t", "5"]);
    let attach = ysched::proto::Control::Attach { job_id: id };
    let theirs = crate::steps::forged(&c, &other, attach.clone());
    assert!(
        theirs["error"].as_str().unwrap_or("").contains(&format!(
            "permission denied: job {id} belongs to {}",
            user.name
        )),
        "{theirs}"
    );
    assert!(!theirs.to_string().contains("YS_STEP_KEY"), "{theirs}");
    let ended = crate::steps::forged(
        &c,
        &other,
        ysched::proto::Control::EndAllocation {
            job_id: id,
            exit_code: 0,
            signal: 0,
        },
    );
    assert!(
        ended["error"]
            .as_str()
            .unwrap_or("")
            .contains("permission denied"),
        "{ended}"
    );
    // The user's own look has it, and is not kept in the database.
    let mine = crate::steps::forged(&c, &user, attach);
    let key = mine["environment"]
        .as_array()
        .and_then(|vars| vars.iter().find(|v| v[0] == "YS_STEP_KEY"))
        .and_then(|v| v[1].as_str())
        .unwrap_or_else(|| panic!("{mine}"))
        .to_string();
    let db = std::fs::read(c.spool.join("ysched.db")).unwrap_or_default();
    let wal = std::fs::read(c.spool.join("ysched.db-wal")).unwrap_or_default();
    let kept = |bytes: &[u8]| bytes.windows(key.len()).any(|w| w == key.as_bytes());
    assert!(
        !kept(&db) && !kept(&wal),
        "the step key was written to the database"
    );
    // A batch job is no allocation to look at.
    let out = c.run_as(&user.name, "ysbatch", &["--parsable", "--wrap", "sleep 30"]);
    let batch: u64 = stdout(&out)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{}", stderr(&out)));
    let refused = crate::steps::forged(&c, &user, ysched::proto::Control::Attach { job_id: batch });
    assert!(
        refused["error"]
            .as_str()
            .unwrap_or("")
            .contains("is a batch job, not an interactive allocation"),
        "{refused}"
    );
    let out = c.run("yscancel", &[&batch.to_string(), &id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let _ = ended_within(child);
}

fn ended_within(child: std::process::Child) -> (Option<i32>, String) {
    ended(child, LONG)
}

#[test]
fn a_shell_from_srun_pty_in_salloc_returns_to_salloc_with_its_status() {
    require_root!();
    let user = TestUser::create("nst");
    let c = Cluster::started("");
    let shown = on_terminal(
        &c,
        &user.name,
        &[
            "expect=$ ",
            "send=srun --pty /bin/sh -i\\r",
            "sleep=1",
            "send=echo inner step=$SLURM_STEP_ID tty=$(tty | cut -c1-8).\\r",
            "expect=tty=/dev/pts.",
            "send=exit 3\\r",
            "sleep=2",
            "send=echo back=$?.\\r",
            "expect=back=3.",
            "send=exit\\r",
            "wait",
        ],
        &["salloc", "-G", "1", "-t", "5", "/bin/sh", "-i"],
    );
    assert!(shown.ends_with("EXIT 0\n"), "{shown}");
    assert!(shown.contains("inner step=0 tty=/dev/pts."), "{shown}");
    let id = granted(&shown);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    let rows = records(&c, &user.name, id, "JobID,State,ExitCode");
    assert_eq!(
        rows,
        [format!("{id}|COMPLETED|0:0"), format!("{id}.0|FAILED|3:0")]
    );
}
