//! What every cgroup layout shares: the errors, the limits a job's group
//! enforces and the usage it measures, the device rules, the `JobCgroup`
//! trait and the file helpers v1 and v2 write their groups with.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum CgroupError {
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: String,
        path: PathBuf,
        source: io::Error,
    },
    #[error("{0}")]
    Unavailable(String),
    #[error(
        "the cgroup subtree {path} belongs to another running ysctld{holder}; two daemons must not \
         share one (each would take the other's jobs for leftovers and kill them): give this one \
         its own cgroup_parent"
    )]
    SubtreeInUse { path: PathBuf, holder: String },
}

pub(crate) fn io_err(
    action: impl Into<String>,
    path: &Path,
) -> impl FnOnce(io::Error) -> CgroupError {
    let action = action.into();
    let path = path.to_path_buf();
    move |source| CgroupError::Io {
        action,
        path,
        source,
    }
}

/// Writes `value` to a cgroup control file, naming both on failure.
pub(crate) fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    fs::write(path, value).map_err(io_err(format!("write {} to", value.trim()), path))
}

pub(crate) fn read_u64(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The value of `key` in a flat-keyed file (`memory.events`, `cpu.stat`).
pub(crate) fn keyed(path: &Path, key: &str) -> Option<u64> {
    let text = fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// A device a job may open: a character (or block) device by major and
/// minor number, `None` for any minor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceRule {
    pub block: bool,
    pub major: u32,
    pub minor: Option<u32>,
}

impl DeviceRule {
    pub const fn char(major: u32, minor: u32) -> DeviceRule {
        DeviceRule {
            block: false,
            major,
            minor: Some(minor),
        }
    }

    /// The rule for the device file at `path`, if it is a device.
    pub fn of_file(path: &Path) -> io::Result<DeviceRule> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let meta = fs::metadata(path)?;
        let ft = meta.file_type();
        if !ft.is_char_device() && !ft.is_block_device() {
            return Err(io::Error::other(format!(
                "{} is not a device file",
                path.display()
            )));
        }
        let rdev = meta.rdev();
        Ok(DeviceRule {
            block: ft.is_block_device(),
            major: libc::major(rdev),
            minor: Some(libc::minor(rdev)),
        })
    }
}

impl fmt::Display for DeviceRule {
    /// As v1's `devices.allow` wants it: `c 195:0 rwm`, `c 136:* rwm`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.block { 'b' } else { 'c' };
        match self.minor {
            Some(m) => write!(f, "{kind} {}:{m} rwm", self.major),
            None => write!(f, "{kind} {}:* rwm", self.major),
        }
    }
}

/// The devices every job may use: null, zero, full, random, urandom, tty,
/// ptmx and the pseudo-terminals.
pub const STANDARD_DEVICES: [DeviceRule; 8] = [
    DeviceRule::char(1, 3),
    DeviceRule::char(1, 5),
    DeviceRule::char(1, 7),
    DeviceRule::char(1, 8),
    DeviceRule::char(1, 9),
    DeviceRule::char(5, 0),
    DeviceRule::char(5, 2),
    DeviceRule {
        block: false,
        major: 136,
        minor: None,
    },
];

/// NVIDIA's shared control devices, allowed when present.
pub const NVIDIA_CONTROL_DEVICES: [&str; 4] = [
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
];

/// What a job's cgroup enforces.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub memory_bytes: Option<u64>,
    /// A CPU quota, in whole CPUs.
    pub cpus: Option<u32>,
    pub pids_max: Option<u64>,
    /// The devices it may open; everything else is denied.
    pub devices: Vec<DeviceRule>,
}

/// What the cgroup measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub max_rss_bytes: Option<u64>,
    pub cpu_usec: Option<u64>,
    /// Processes the kernel's OOM killer killed in this cgroup.
    pub oom_kills: u64,
    /// Forks the process limit (`job_pids_max`) refused.
    #[serde(default)]
    pub pids_refused: u64,
}

/// A job's cgroup (in v1, one per controller hierarchy).
pub trait JobCgroup {
    /// Where it is, for messages and `yscontrol show job`.
    fn path(&self) -> String;
    /// Moves a process in; its descendants follow.
    fn join(&self, pid: i32) -> Result<(), CgroupError>;
    /// The processes in it.
    fn pids(&self) -> Vec<i32>;
    /// Kills every process in it (even frozen ones, and forks racing the kill).
    fn kill_all(&self);
    fn set_frozen(&self, frozen: bool) -> Result<(), CgroupError>;
    fn usage(&self) -> Usage;
    /// Removes it; it must be empty.
    fn remove(&self) -> Result<(), CgroupError>;

    fn is_empty(&self) -> bool {
        self.pids().is_empty()
    }

    /// Sends `signal` to every process in it.
    fn signal_all(&self, signal: nix::sys::signal::Signal) {
        for pid in self.pids() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
        }
    }

    /// Kills everything and waits until it is empty or `timeout` passes;
    /// returns the processes still there (stuck in the kernel).
    fn kill_and_wait(&self, timeout: Duration) -> Vec<i32> {
        let deadline = Instant::now() + timeout;
        reap_children();
        if self.is_empty() {
            return Vec::new();
        }
        loop {
            self.kill_all();
            std::thread::sleep(Duration::from_millis(10));
            reap_children();
            let left = self.pids();
            if left.is_empty() || Instant::now() > deadline {
                return left;
            }
        }
    }
}

/// Reaps whatever children of this process have ended (the supervisor is a
/// subreaper, so the job's orphans are its children).
fn reap_children() {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    while let Ok(status) = waitpid(nix::unistd::Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

/// Creates a group directory, or takes the one that is there.
pub(crate) fn make_group(dir: &Path) -> Result<(), CgroupError> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io_err("create", dir)(e)),
    }
}

/// Makes sure this process can create groups under `parent` (it may
/// exist and belong to someone else): creates and removes a probe group.
pub(crate) fn probe(parent: &Path) -> Result<(), CgroupError> {
    let probe = parent.join(format!("probe-{}", std::process::id()));
    fs::create_dir(&probe).map_err(io_err("create a group in", parent))?;
    fs::remove_dir(&probe).map_err(io_err("remove", &probe))
}
