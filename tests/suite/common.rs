//! Test harness: a real `ysctld` on a temporary spool with declared GPUs,
//! the real commands, and helpers to wait for what a user would see.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const BINARIES: [&str; 15] = [
    "ysctld",
    "ysstepd",
    "ysbatch",
    "ysalloc",
    "ysqueue",
    "yscancel",
    "ysacct",
    "yscontrol",
    "ysshare",
    "ysreport",
    "ysinfo",
    "ysched-slurm",
    "ysnoded",
    "ystoken",
    "yswebd",
];

/// The binaries, hard-linked (or copied) into a directory every user can
/// reach: the build directory may sit under a home no other user can enter.
pub fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        remove_stale_bin_dirs();
        let dir = std::env::temp_dir().join(format!("ysched-test-bin-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        for name in BINARIES {
            let built = built_binary(name);
            let target = dir.join(name);
            if std::fs::hard_link(&built, &target).is_err() {
                std::fs::copy(&built, &target).unwrap();
            }
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        dir
    })
}

/// The binary directories of test processes that have ended: each holds
/// its build's binaries (hard links keep them alive after a rebuild).
fn remove_stale_bin_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("ysched-test-bin-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn built_binary(name: &str) -> PathBuf {
    // Cargo sets CARGO_BIN_EXE_<name> for integration tests.
    let path = match name {
        "ysctld" => env!("CARGO_BIN_EXE_ysctld"),
        "ysstepd" => env!("CARGO_BIN_EXE_ysstepd"),
        "ysbatch" => env!("CARGO_BIN_EXE_ysbatch"),
        "ysalloc" => env!("CARGO_BIN_EXE_ysalloc"),
        "ysqueue" => env!("CARGO_BIN_EXE_ysqueue"),
        "yscancel" => env!("CARGO_BIN_EXE_yscancel"),
        "ysacct" => env!("CARGO_BIN_EXE_ysacct"),
        "yscontrol" => env!("CARGO_BIN_EXE_yscontrol"),
        "ysshare" => env!("CARGO_BIN_EXE_ysshare"),
        "ysreport" => env!("CARGO_BIN_EXE_ysreport"),
        "ysinfo" => env!("CARGO_BIN_EXE_ysinfo"),
        "ysched-slurm" => env!("CARGO_BIN_EXE_ysched-slurm"),
        "ysnoded" => env!("CARGO_BIN_EXE_ysnoded"),
        "ystoken" => env!("CARGO_BIN_EXE_ystoken"),
        "yswebd" => env!("CARGO_BIN_EXE_yswebd"),
        other => panic!("unknown binary {other}"),
    };
    PathBuf::from(path)
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Says that a test is skipped, and why, where `cargo test` shows it: on
/// the process's own standard error (what a test prints is captured and
/// shown only when it fails).
pub fn skip(test: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "note: {test} skipped: {reason}");
}

/// Skips the calling test (with the reason printed) unless running as root.
#[macro_export]
macro_rules! require_root {
    () => {
        if !common::is_root() {
            common::skip(
                module_path!(),
                "this test needs root (it creates users and runs jobs as them)",
            );
            return;
        }
    };
}

/// Polls `condition` every 20 ms until it holds or `timeout` passes.
/// Job `id`'s supervisor state (`state.json` in its directory) once it
/// names the job's process: a bare job's supervisor writes it once, right
/// after the job's process is started, a moment after the job shows
/// RUNNING.
pub fn started_state(spool: &Path, id: u64) -> serde_json::Value {
    let path = spool.join(format!("jobs/{id}/state.json"));
    let read = || {
        let text = std::fs::read(&path).ok()?;
        let state: serde_json::Value = serde_json::from_slice(&text).ok()?;
        state["job_pid"].is_i64().then_some(state)
    };
    wait_for(
        "the job's supervisor to record its process",
        Duration::from_secs(30),
        || read().is_some(),
    );
    read().expect("read just above")
}

/// Waits up to `timeout` for the process in `child` to exit by itself,
/// takes it, and says its status; `log` is shown if it does not.
pub fn wait_exit(
    child: &mut Option<Child>,
    timeout: Duration,
    log: impl Fn() -> String,
) -> std::process::ExitStatus {
    let process = child.as_mut().expect("process started");
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = process.try_wait().unwrap() {
            *child = None;
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "still running {timeout:?} on:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn wait_for(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub spool: PathBuf,
    /// A directory jobs run in and write their output to.
    pub work: PathBuf,
    daemon: Option<Child>,
    log: PathBuf,
}

impl Cluster {
    /// Four declared a100 GPUs and 16 CPUs; `extra` is added to the config's
    /// top level.
    pub fn new(extra: &str) -> Cluster {
        Cluster::with_gpus(
            extra,
            "[[gpus]]\ntype = \"a100\"\ncount = 4\nmemory = \"80GiB\"\n",
        )
    }

    pub fn with_gpus(extra: &str, gpus: &str) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("ysched-test-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let spool = dir.path().join("spool");
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let config = dir.path().join("ysched.toml");
        // Each cluster its own cgroup parent: clusters run side by side and
        // all number their jobs from 1.
        let cgroup_parent = cgroup_parent_of(dir.path());
        let text = format!(
            "spool_dir = \"{}\"\nnode_name = \"gpu01\"\nallow_root_jobs = true\nkill_wait = 1\ncpus = 16\nmemory = \"64GiB\"\ncgroup_parent = \"{cgroup_parent}\"\n{extra}\n{gpus}",
            spool.display()
        );
        std::fs::write(&config, text).unwrap();
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
        let log = dir.path().join("ysctld.log");
        Cluster {
            dir,
            config,
            spool,
            work,
            daemon: None,
            log,
        }
    }

    pub fn started(extra: &str) -> Cluster {
        let mut c = Cluster::new(extra);
        c.start();
        c
    }

    /// Starts `ysctld --foreground` and waits until it holds its lock.
    pub fn start(&mut self) {
        assert!(self.daemon.is_none(), "daemon already started");
        // Ready once it has recovered: re-adopted its jobs, cleaned up.
        let readies = self.log().matches("ysctld ready").count();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(bin_dir().join("ysctld"))
            .args(["--foreground", "--config"])
            .arg(&self.config)
            .env("YS_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.daemon = Some(child);
        wait_for("ysctld to be ready", Duration::from_secs(10), || {
            self.log().matches("ysctld ready").count() > readies
        });
    }

    /// Stops the daemon with SIGTERM, as an administrator would.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            // A daemon a test froze (SIGSTOP) takes the signal once it runs.
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT);
            let _ = child.wait();
        }
    }

    /// Kills the daemon with SIGKILL: a crash.
    pub fn crash(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits for the daemon to exit by itself; its status.
    pub fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let log = self.log.clone();
        wait_exit(&mut self.daemon, timeout, || {
            std::fs::read_to_string(&log).unwrap_or_default()
        })
    }

    pub fn daemon_pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(self.daemon.as_ref().expect("daemon running").id() as i32)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A command with the cluster's config, run in the work directory.
    pub fn command(&self, name: &str) -> Command {
        let mut c = Command::new(bin_dir().join(name));
        c.env("YS_CONF", &self.config)
            .env_remove("YS_TIMEOUT")
            .current_dir(&self.work);
        c
    }

    pub fn run(&self, name: &str, args: &[&str]) -> Output {
        self.command(name).args(args).output().unwrap()
    }

    /// The same, as another user (through runuser).
    pub fn run_as(&self, user: &str, name: &str, args: &[&str]) -> Output {
        Command::new("runuser")
            .args(["-u", user, "--", "env"])
            .arg(format!("YS_CONF={}", self.config.display()))
            .arg(bin_dir().join(name))
            .args(args)
            .current_dir(&self.work)
            .output()
            .unwrap()
    }

    /// Submits with `ysbatch --parsable` and returns the job id.
    pub fn submit(&self, args: &[&str]) -> u64 {
        let out = self.run("ysbatch", &[&["--parsable"], args].concat());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "ysbatch {args:?} failed: {}{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        );
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("ysbatch printed {text:?}"))
    }

    /// Writes a script into the work directory.
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        let path = self.work.join(name);
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// One field of one job, through ysacct.
    pub fn field(&self, id: u64, field: &str) -> String {
        let out = self.run(
            "ysacct",
            &["-j", &id.to_string(), "-X", "-n", "-P", "-o", field],
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The job's state, without sacct's ` by UID` after CANCELLED.
    pub fn state(&self, id: u64) -> String {
        let state = self.field(id, "State");
        state.split(" by ").next().unwrap_or_default().to_string()
    }

    /// Waits until the job is in a final state; returns it.
    pub fn wait_done(&self, id: u64, timeout: Duration) -> String {
        let mut state = String::new();
        wait_for(&format!("job {id} to finish"), timeout, || {
            state = self.state(id);
            !state.is_empty() && !matches!(state.as_str(), "PENDING" | "RUNNING" | "COMPLETING")
        });
        state
    }

    pub fn wait_state(&self, id: u64, wanted: &str, timeout: Duration) {
        wait_for(&format!("job {id} to be {wanted}"), timeout, || {
            self.state(id) == wanted
        });
    }

    pub fn output_of(&self, id: u64) -> String {
        std::fs::read_to_string(self.work.join(format!("ys-{id}.out"))).unwrap_or_default()
    }
}

/// A submission's envelope exactly as `ysbatch ARGS` writes it while the
/// daemon is down (taken out of `incoming/`); the daemon runs again after.
pub fn spooled_submission(c: &mut Cluster, args: &[&str]) -> Vec<u8> {
    c.stop();
    let out = c.run("ysbatch", args);
    assert!(out.status.success(), "{}", stderr(&out));
    let entry = std::fs::read_dir(c.spool.join("incoming"))
        .unwrap()
        .flatten()
        .find(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .expect("the spooled submission");
    let body = std::fs::read(entry.path()).unwrap();
    std::fs::remove_file(entry.path()).unwrap();
    c.start();
    body
}

/// The cgroup parent of the cluster in `dir`.
pub fn cgroup_parent_of(dir: &Path) -> String {
    format!("ysched-{}", dir.file_name().unwrap().to_string_lossy())
}

/// Removes a test's cgroups, killing what a test left running in them.
pub fn remove_cgroup_parents(parent: &str) {
    let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") else {
        return;
    };
    for h in hierarchies.flatten() {
        let dir = h.path().join(parent);
        let Ok(groups) = std::fs::read_dir(&dir) else {
            continue;
        };
        for g in groups.flatten().filter(|g| g.path().is_dir()) {
            for _ in 0..50 {
                let procs =
                    std::fs::read_to_string(g.path().join("cgroup.procs")).unwrap_or_default();
                if procs.trim().is_empty() {
                    break;
                }
                let _ = std::fs::write(g.path().join("freezer.state"), "THAWED");
                for pid in procs.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = std::fs::remove_dir(g.path());
        }
        let _ = std::fs::remove_dir(&dir);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Jobs outlive the daemon by design; a test must not leave them.
        self.stop();
        let jobs = self.spool.join("jobs");
        if let Ok(entries) = std::fs::read_dir(&jobs) {
            for e in entries.flatten() {
                if let Ok(state) = std::fs::read_to_string(e.path().join("state.json")) {
                    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&state) {
                        for key in ["job_pid", "supervisor_pid"] {
                            if let Some(pid) = v.get(key).and_then(|p| p.as_i64()) {
                                let _ = nix::sys::signal::killpg(
                                    nix::unistd::Pid::from_raw(pid as i32),
                                    nix::sys::signal::Signal::SIGKILL,
                                );
                                let _ = nix::sys::signal::kill(
                                    nix::unistd::Pid::from_raw(pid as i32),
                                    nix::sys::signal::Signal::SIGKILL,
                                );
                            }
                        }
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
        remove_cgroup_parents(&cgroup_parent_of(self.dir.path()));
    }
}

/// A user created for the test and deleted after it.
pub struct TestUser {
    pub name: String,
    pub uid: u32,
}

impl TestUser {
    pub fn create(tag: &str) -> TestUser {
        let name = format!("ys{tag}{}", std::process::id() % 100_000);
        let _ = Command::new("userdel").arg(&name).output();
        let out = Command::new("useradd")
            .args(["--no-create-home", "--shell", "/bin/sh", &name])
            .output()
            .unwrap();
        assert!(out.status.success(), "useradd {name}: {}", stderr(&out));
        let uid = nix::unistd::User::from_name(&name)
            .unwrap()
            .unwrap()
            .uid
            .as_raw();
        TestUser { name, uid }
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = Command::new("pkill")
            .args(["-KILL", "-u", &self.name])
            .output();
        let _ = Command::new("userdel").arg(&self.name).output();
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fake GPU device file: `DIR/nvidiaN`, character device 195:N (the
/// NVIDIA driver's numbers; with no driver, opening it fails ENXIO where
/// the cgroup allows it and EPERM where it does not).
pub fn fake_gpu_device(dir: &Path, n: u32) -> PathBuf {
    let path = dir.join(format!("nvidia{n}"));
    nix::sys::stat::mknod(
        &path,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(195, u64::from(n)),
    )
    .unwrap();
    path
}
