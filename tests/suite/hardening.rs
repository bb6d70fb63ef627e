//! Defects found by trying ysched as a new user, an attacker and real
//! Slurm clients would: each test here failed before its fix.

use crate::common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::common::{stderr, stdout, Cluster};

const LONG: Duration = Duration::from_secs(20);

/// A submission's envelope as ysbatch writes it, as JSON to tamper with.
fn spooled_envelope(c: &mut Cluster, args: &[&str]) -> serde_json::Value {
    serde_json::from_slice(&common::spooled_submission(c, args)).unwrap()
}

/// Sends one request on the daemon's socket, as a hostile client would.
fn send(c: &Cluster, name: &str, envelope: &serde_json::Value) -> serde_json::Value {
    let mut s = UnixStream::connect(c.spool.join("ysctld.sock")).unwrap();
    s.set_read_timeout(Some(LONG)).unwrap();
    let message = format!("{name}\n{envelope}");
    s.write_all(message.as_bytes()).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    serde_json::from_slice(&answer).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&answer));
    })
}

fn name(n: u32) -> String {
    format!("job-1-18ecc5851ae8ee6b-{n:016x}")
}

#[test]
fn hostile_fields_are_refused_at_admission_and_a_bad_row_does_not_stop_a_start() {
    let mut c = Cluster::started("");
    let envelope = spooled_envelope(&mut c, &["-H", "-G", "1", "--wrap", "true"]);
    let tamper = |field: &str, value: serde_json::Value| {
        let mut e = envelope.clone();
        e["request"]["body"][field] = value;
        e
    };
    let hostile = [
        ("mail_type", serde_json::json!(255), "--mail-type"),
        (
            "gpus",
            serde_json::json!({"count": 1, "gpu_type": null, "constraint": {"features": [], "min_memory_mb": null}}),
            "--constraint",
        ),
        (
            "warn_signal",
            serde_json::json!({"signal": 99999, "before_secs": 60}),
            "--signal",
        ),
        (
            "name",
            serde_json::json!("x\u{1b}[2J\nforged line"),
            "--job-name",
        ),
        ("name", serde_json::json!("x".repeat(3 << 20)), "--job-name"),
        ("comment", serde_json::json!("a\nb"), "--comment"),
        (
            "mail_user",
            serde_json::json!("a@b\nBcc: eve@x"),
            "--mail-user",
        ),
        ("cpus", serde_json::json!(0), "--cpus-per-task"),
        (
            "script",
            serde_json::json!("#!/bin/sh\r\ntrue\r\n"),
            "DOS line breaks",
        ),
    ];
    for (i, (field, value, named)) in hostile.into_iter().enumerate() {
        let answer = send(&c, &name(i as u32), &tamper(field, value));
        assert_eq!(answer["kind"], "rejected", "{field}: {answer}");
        let error = answer["error"].as_str().unwrap();
        assert!(error.contains(named), "{field}: {error}");
    }
    assert!(
        !c.log().contains("forged line\n"),
        "the log shows what was refused on one line"
    );

    // A row written by an older release that did not check: the next start
    // sets it aside and starts.
    let good = c.submit(&["-H", "--wrap", "true"]);
    let bad = c.submit(&["-H", "--wrap", "true"]);
    c.stop();
    let db = rusqlite::Connection::open(c.spool.join("ysched.db")).unwrap();
    db.execute(
        "UPDATE jobs SET mail_type = 255, warn_signal = 'USR1@99999', gpu_constraint = '' WHERE id = ?1",
        [bad as i64],
    )
    .unwrap();
    drop(db);
    c.start();
    assert_eq!(c.state(bad), "FAILED");
    assert!(
        c.field(bad, "Reason").starts_with("quarantined at start"),
        "{}",
        c.field(bad, "Reason")
    );
    assert_eq!(c.state(good), "PENDING");
    assert!(c.log().contains(&format!("job {bad} quarantined")));
}

#[test]
fn unlimited_survives_every_hop() {
    let c = Cluster::started("");
    let id = c.submit(&["-H", "-t", "UNLIMITED", "--wrap", "true"]);
    assert_eq!(c.field(id, "Timelimit"), "UNLIMITED");
    let limited = c.submit(&["-H", "-t", "10", "--wrap", "true"]);
    let out = c.run(
        "yscontrol",
        &["update", &format!("JobId={limited}"), "TimeLimit=UNLIMITED"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(c.field(limited, "Timelimit"), "UNLIMITED");
}

#[test]
fn dos_line_breaks_and_nul_bytes_are_refused_at_submit() {
    let c = Cluster::started("");
    let crlf = c.script("crlf.sh", "#!/bin/bash\r\necho hi\r\n");
    let out = c.run("ysbatch", &[crlf.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("crlf.sh: line 1: DOS line breaks"),
        "{}",
        stderr(&out)
    );
    let nul = c.script("nul.sh", "#!/bin/sh\necho a\0b\n");
    let out = c.run("ysbatch", &[nul.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("nul.sh: line 2: a NUL byte"),
        "{}",
        stderr(&out)
    );
    let listed = stdout(&c.run("ysqueue", &["-h", "-t", "all"]));
    assert!(listed.trim().is_empty(), "nothing was submitted: {listed}");
}

#[test]
fn the_database_its_wal_and_the_log_are_private() {
    let mut c = Cluster::started("");
    c.submit(&["-H", "--wrap", "true"]);
    for file in ["ysched.db", "ysched.db-wal", "ysched.db-shm"] {
        let mode = std::fs::metadata(c.spool.join(file))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file}");
    }
    c.stop();
    // In the background, the daemon writes its own log.
    let out = c.run("ysctld", &["--config", c.config.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = c.spool.join("ysctld.log");
    let mode = std::fs::metadata(&log).unwrap().permissions().mode();
    let pid: i32 = std::fs::read_to_string(c.spool.join("ysctld.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    );
    common::wait_for("the daemon to stop", LONG, || {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
    });
    assert_eq!(mode & 0o777, 0o600, "{}", log.display());
}

#[test]
fn an_emptied_database_is_refused_not_started_afresh() {
    let mut c = Cluster::started("");
    c.submit(&["-H", "--wrap", "true"]);
    c.stop();
    for suffix in ["", "-wal", "-shm"] {
        let path = c.spool.join(format!("ysched.db{suffix}"));
        if suffix.is_empty() {
            std::fs::write(&path, "").unwrap();
        } else {
            let _ = std::fs::remove_file(path);
        }
    }
    let out = c.run(
        "ysctld",
        &["--foreground", "--config", c.config.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("empty (0 bytes)"), "{}", stderr(&out));
}

#[test]
fn a_second_daemon_on_the_same_cgroup_subtree_is_refused_and_kills_nothing() {
    require_root!();
    if !std::path::Path::new("/sys/fs/cgroup/pids").is_dir()
        && !std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
    {
        common::skip(module_path!(), "no cgroup hierarchy to share");
        return;
    }
    let first = Cluster::started("");
    let id = first.submit(&["--wrap", "sleep 300"]);
    first.wait_state(id, "RUNNING", LONG);
    // A second daemon, its own spool, the first one's cgroup_parent.
    let second = Cluster::new(&format!(
        "cgroup_parent = \"{}\"",
        common::cgroup_parent_of(first.dir.path())
    ));
    let text = std::fs::read_to_string(&second.config).unwrap();
    let own = format!(
        "cgroup_parent = \"{}\"\n",
        common::cgroup_parent_of(second.dir.path())
    );
    std::fs::write(&second.config, text.replacen(&own, "", 1)).unwrap();
    let out = second.run(
        "ysctld",
        &["--foreground", "--config", second.config.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("belongs to another running ysctld"),
        "{}",
        stderr(&out)
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(first.state(id), "RUNNING", "the first daemon's job lives");
}

#[test]
fn a_step_gets_the_warning_signal_and_the_batch_shell_does_not() {
    let c = Cluster::started("");
    let shims = c.dir.path().join("shims");
    std::fs::create_dir_all(&shims).unwrap();
    let _ = std::os::unix::fs::symlink(common::bin_dir().join("ysched-slurm"), shims.join("srun"));
    // A time limit of one minute and the warning 58 s before it: 2 s in.
    // A step is what srun started, as in Slurm.
    let script = c.script(
        "steps.sh",
        &format!(
            "#!/bin/bash\nexport PATH={}:$PATH\n\
             srun bash -c 'trap \"echo step-got-usr2; exit 0\" USR2; while :; do sleep 0.1; done'\n\
             echo batch-shell-alive\n",
            shims.display()
        ),
    );
    let id = c.submit(&["-t", "1", "--signal=USR2@58", script.to_str().unwrap()]);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    let out = c.output_of(id);
    assert!(out.contains("step-got-usr2\nbatch-shell-alive"), "{out}");

    let batch = c.script(
        "batch.sh",
        "#!/bin/bash\ntrap 'echo shell-got-usr1; exit 0' USR1\nwhile :; do sleep 0.1; done\n",
    );
    let id = c.submit(&["-t", "1", "--signal=B:USR1@58", batch.to_str().unwrap()]);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    assert!(c.output_of(id).contains("shell-got-usr1"));
}

#[test]
fn ysbatch_inside_a_job_talks_to_the_daemon_that_runs_it() {
    let c = Cluster::started("");
    let inner = format!(
        "echo conf=$YS_CONF; {} --parsable -H --wrap true",
        common::bin_dir().join("ysbatch").display()
    );
    let id = c.submit(&["--wrap", &inner]);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED", "{}", c.output_of(id));
    let out = c.output_of(id);
    assert!(
        out.contains(&format!("conf={}", c.config.display())),
        "{out}"
    );
    let inner: u64 = out.lines().last().unwrap().trim().parse().unwrap();
    assert_eq!(c.state(inner), "PENDING");
}

#[test]
fn parsable_with_the_daemon_down_says_the_job_is_queued() {
    let mut c = Cluster::started("");
    c.stop();
    let out = c.run("ysbatch", &["--parsable", "-H", "--wrap", "true"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout(&out).starts_with("queued for the daemon: job-"),
        "{}",
        stdout(&out)
    );
    assert!(stderr(&out).contains("ysctld is not running"));
    c.start();
    let listed = stdout(&c.run("ysqueue", &["-h", "-o", "%i"]));
    assert_eq!(listed.lines().count(), 1, "taken in at start: {listed}");
}

/// Unmounts (lazily: the daemon may still hold files there) when dropped.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .output();
    }
}

/// Fills the filesystem of `dir` with one file; returns its path.
fn fill(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let block = vec![b'x'; 64 << 10];
    while f.write_all(&block).is_ok() {}
    let _ = f.sync_all();
    path
}

#[test]
fn a_full_spool_filesystem_refuses_new_work_and_records_what_it_holds() {
    require_root!();
    let mut c = Cluster::new("spool_reserve = \"2MiB\"\nmax_spool_file = \"1MiB\"");
    std::fs::create_dir_all(&c.spool).unwrap();
    let out = std::process::Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            "size=24m",
            "ysched-test",
            c.spool.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    if !out.status.success() {
        common::skip(
            module_path!(),
            &format!("cannot mount a tmpfs: {}", stderr(&out)),
        );
        return;
    }
    let _mounted = Mounted(c.spool.clone());
    c.start();
    // Filled only once the job's process runs: a job marked running is
    // launched after the commit, and a launch into a full spool fails.
    let started = c.work.join("started");
    let script = format!("touch {}; sleep 2", started.display());
    let running = c.submit(&["--wrap", &script]);
    common::wait_for("the job's process to run", LONG, || started.exists());

    let filler = fill(&c.spool);
    let out = c.run("ysbatch", &["--wrap", "true"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let said = stderr(&out);
    assert!(
        said.contains("nearly full") || said.contains("not applied") || said.contains("No space"),
        "{said}"
    );
    // What it held is still recorded: the running job's end.
    assert_eq!(c.wait_done(running, LONG), "COMPLETED");
    assert!(c.log().contains("ysctld ready"));

    std::fs::remove_file(&filler).unwrap();
    common::wait_for("the reserve to be made again", LONG, || {
        c.spool.join("reserve").exists()
    });
    let id = c.submit(&["--wrap", "true"]);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
}

#[test]
fn one_user_cannot_fill_the_drop_box() {
    require_root!();
    let c = Cluster::started("max_spool_file = \"1MiB\"");
    let user = common::TestUser::create("fill");
    let incoming = c.spool.join("incoming");
    // An unfinished request larger than any request, and a flood of small ones.
    let big = incoming.join(".job-big.tmp");
    let script = format!(
        "head -c 3000000 /dev/zero > {big}; for i in $(seq 1 300); do : > {dir}/.flood-$i.tmp; done",
        big = big.display(),
        dir = incoming.display()
    );
    let out = std::process::Command::new("runuser")
        .args(["-u", &user.name, "--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    common::wait_for("the drop box to be policed", LONG, || {
        let left = std::fs::read_dir(&incoming).unwrap().count();
        !big.exists() && left <= 256
    });
    assert!(c.log().contains("over max_spool_file"), "{}", c.log());
    // Nor around the bounds: a name the daemon never reads, a directory
    // to fill, files in it.
    let script = format!(
        "head -c 3000000 /dev/zero > '{dir}/no request'; mkdir {dir}/.fill && head -c 3000000 /dev/zero > {dir}/.fill/data",
        dir = incoming.display()
    );
    let out = std::process::Command::new("runuser")
        .args(["-u", &user.name, "--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    common::wait_for("the drop box to be policed again", LONG, || {
        !incoming.join("no request").exists() && !incoming.join(".fill").exists()
    });
    // The daemon serves on.
    let id = c.submit(&["-H", "--wrap", "true"]);
    assert_eq!(c.state(id), "PENDING");
}

#[test]
fn mail_types_without_a_notifier_are_said_to_reach_nobody() {
    let c = Cluster::started("");
    let out = c.run("ysbatch", &["-H", "--mail-type=END", "--wrap", "true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains("--mail-type: nobody will be told: this server has no notify_command"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn array_limits_name_the_configured_maximum() {
    let c = Cluster::started("max_array_size = 100");
    let out = c.run("ysbatch", &["-H", "--array=0-4294967294", "--wrap", "true"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("(max_array_size = 100)"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("4294967295"), "{}", stderr(&out));
}
