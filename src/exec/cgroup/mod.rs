//! One cgroup per job: device access, memory, CPU and process limits, every
//! process tracked, frozen, killed and measured. A leaf behind a trait with
//! a v1, a v2 and an "off" implementation, chosen once at start by looking
//! at the mounts. Only `exec` uses it.
//!
//! Errors carry the path and the value: "cannot write 2 to
//! /sys/fs/cgroup/pids/ysched/job_41/pids.max: Permission denied".

pub mod bpf;
mod v1;
mod v2;

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::job::JobId;

pub const DEFAULT_ROOT: &str = "/sys/fs/cgroup";
/// The group under each hierarchy that holds the jobs' groups, by default.
pub const DEFAULT_PARENT: &str = "ysched";

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

fn read_u64(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The value of `key` in a flat-keyed file (`memory.events`, `cpu.stat`).
fn keyed(path: &Path, key: &str) -> Option<u64> {
    let text = fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// What the config asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Setting {
    Auto,
    V1,
    V2,
    Off,
}

/// What is in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    V1,
    V2,
    Off,
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layout::V1 => "cgroup v1",
            Layout::V2 => "cgroup v2",
            Layout::Off => "off",
        })
    }
}

/// Where the jobs' cgroups go: chosen by the daemon, used by supervisors.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub layout: Layout,
    /// v1: the directory holding one mount per controller; v2: the cgroup2 mount.
    pub root: PathBuf,
    /// The group holding the jobs' groups: one per daemon on the host.
    pub parent: String,
}

impl Placement {
    pub fn off() -> Placement {
        Placement {
            layout: Layout::Off,
            root: PathBuf::new(),
            parent: String::new(),
        }
    }
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

/// The name of a job's group.
pub fn group_name(job: JobId) -> String {
    format!("job_{job}")
}

/// Creates the job's cgroup with its limits.
pub fn create(
    placement: &Placement,
    job: JobId,
    limits: &Limits,
) -> Result<Box<dyn JobCgroup>, CgroupError> {
    match placement.layout {
        Layout::V1 => Ok(Box::new(v1::JobGroup::create(
            &placement.root,
            &placement.parent,
            job,
            limits,
        )?)),
        Layout::V2 => Ok(Box::new(v2::JobGroup::create(
            &placement.root,
            &placement.parent,
            job,
            limits,
        )?)),
        Layout::Off => Err(CgroupError::Unavailable("cgroups are off".into())),
    }
}

/// The job's cgroup if it exists (after a restart, or to freeze it).
pub fn open(placement: &Placement, job: JobId) -> Option<Box<dyn JobCgroup>> {
    match placement.layout {
        Layout::V1 => v1::JobGroup::open(&placement.root, &placement.parent, job)
            .map(|g| Box::new(g) as Box<dyn JobCgroup>),
        Layout::V2 => v2::JobGroup::open(&placement.root, &placement.parent, job)
            .map(|g| Box::new(g) as Box<dyn JobCgroup>),
        Layout::Off => None,
    }
}

/// The ids of jobs that have a cgroup (to clean up leftovers at start).
pub fn existing_jobs(placement: &Placement) -> Vec<JobId> {
    let dir = match placement.layout {
        Layout::V1 => placement.root.join("pids").join(&placement.parent),
        Layout::V2 => placement.root.join(&placement.parent),
        Layout::Off => return Vec::new(),
    };
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("job_")?.parse().ok())
        .collect()
}

/// A daemon's claim on its subtree (the `cgroup_parent` group in each
/// hierarchy), held as a lock on the directories themselves, so that any
/// daemon on the host, whatever its spool or mount namespace, sees it.
/// Released when the daemon exits, however it exits; the supervisors do
/// not hold it (it is closed on exec).
#[derive(Debug)]
pub struct SubtreeLock {
    _held: Vec<fs::File>,
}

/// Claims the subtree for this daemon alone, or says which daemon has it.
pub fn lock_subtree(placement: &Placement) -> Result<SubtreeLock, CgroupError> {
    use std::os::fd::AsRawFd;
    let dirs: Vec<PathBuf> = match placement.layout {
        Layout::V1 => v1::CONTROLLERS
            .iter()
            .map(|c| placement.root.join(c).join(&placement.parent))
            .filter(|d| d.is_dir())
            .collect(),
        Layout::V2 => vec![placement.root.join(&placement.parent)],
        Layout::Off => Vec::new(),
    };
    let mut held = Vec::with_capacity(dirs.len());
    for dir in dirs {
        let file = fs::File::open(&dir).map_err(io_err("open", &dir))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let holder = lock_holder(&file)
                    .map(|pid| format!(" (pid {pid})"))
                    .unwrap_or_default();
                return Err(CgroupError::SubtreeInUse { path: dir, holder });
            }
            return Err(CgroupError::Io {
                action: "lock".into(),
                path: dir,
                source: e,
            });
        }
        held.push(file);
    }
    Ok(SubtreeLock { _held: held })
}

/// The process holding a lock on `file`, from /proc/locks.
fn lock_holder(file: &fs::File) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let inode = file.metadata().ok()?.ino();
    let locks = fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        // "1: FLOCK  ADVISORY  WRITE 1234 00:1b:5678 0 EOF"
        let words: Vec<&str> = line.split_whitespace().collect();
        let (pid, id) = (words.get(4)?, words.get(5)?);
        (id.rsplit(':').next()? == inode.to_string())
            .then(|| pid.parse().ok())
            .flatten()
    })
}

/// The outcome of looking at the host's cgroups.
#[derive(Clone, Debug)]
pub struct Detected {
    pub placement: Placement,
    /// What was found and chosen, for the log and `ysinfo`.
    pub description: String,
    /// Limits this layout cannot enforce here.
    pub missing: Vec<String>,
}

impl Detected {
    /// Whether jobs are confined to their devices (and so see their GPUs
    /// numbered from 0).
    pub fn confines_devices(&self) -> bool {
        self.placement.layout != Layout::Off
            && !self
                .missing
                .iter()
                .any(|m| m.starts_with("GPU device isolation"))
    }
}

impl Placement {
    /// Where a job's group is (v1: in each controller's hierarchy).
    pub fn job_path(&self, job: JobId) -> Option<String> {
        match self.layout {
            Layout::V1 => Some(format!(
                "{}/<controller>/{}/{}",
                self.root.display(),
                self.parent,
                group_name(job)
            )),
            Layout::V2 => Some(format!(
                "{}/{}/{}",
                self.root.display(),
                self.parent,
                group_name(job)
            )),
            Layout::Off => None,
        }
    }
}

const CGROUP2_MAGIC: i64 = 0x6367_7270;
const CGROUP1_MAGIC: i64 = 0x0027_e0eb;

// The magic's integer type differs between architectures.
#[allow(clippy::unnecessary_cast)]
fn fs_magic(path: &Path) -> Option<i64> {
    nix::sys::statfs::statfs(path)
        .ok()
        .map(|s| s.filesystem_type().0 as i64)
}

/// Where moving a process into a cgroup stalls job starts: the kernel
/// waits for an RCU grace period at each move (10 ms and more on a small
/// VM) unless a cgroup2 hierarchy is mounted with `favordynmods` (Linux
/// 6.0 and later; one lock serves v1 and v2). A cgroup2 mount point to
/// set it on, from /proc/mounts text; `None` when one has it, or there is
/// no cgroup2 mount.
pub fn slow_moves(mounts: &str) -> Option<String> {
    let cgroup2: Vec<(&str, &str)> = mounts
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.len() >= 4 && fields[2] == "cgroup2").then(|| (fields[1], fields[3]))
        })
        .collect();
    if cgroup2
        .iter()
        .any(|(_, options)| options.split(',').any(|o| o == "favordynmods"))
    {
        return None;
    }
    cgroup2.first().map(|(point, _)| point.to_string())
}

/// Finds the hierarchies under `root` and picks a layout: on a pure v2 host
/// v2; where v1 controllers are mounted (v1 or hybrid hosts) v1, which is
/// where the limits are; or what `setting` forces. Then makes sure this
/// process can create groups there; if it cannot (personal mode, a
/// container), isolation is off, with the reason.
pub fn detect(setting: Setting, root: &Path, parent: &str) -> Detected {
    let off = |why: String| Detected {
        placement: Placement::off(),
        description: format!("off: {why}"),
        missing: Vec::new(),
    };
    if setting == Setting::Off {
        return off("cgroups = \"off\" in the config".into());
    }
    let v2_root = if fs_magic(root) == Some(CGROUP2_MAGIC) {
        Some(root.to_path_buf())
    } else if fs_magic(&root.join("unified")) == Some(CGROUP2_MAGIC) {
        Some(root.join("unified"))
    } else {
        None
    };
    let has_v1 = fs_magic(&root.join("memory")) == Some(CGROUP1_MAGIC)
        || fs_magic(&root.join("devices")) == Some(CGROUP1_MAGIC);
    let chosen = match (setting, has_v1, v2_root) {
        (Setting::V1, true, _) | (Setting::Auto, true, _) => Placement {
            layout: Layout::V1,
            root: root.to_path_buf(),
            parent: parent.to_string(),
        },
        (Setting::V2, _, Some(v2)) | (Setting::Auto, false, Some(v2)) => Placement {
            layout: Layout::V2,
            root: v2,
            parent: parent.to_string(),
        },
        (Setting::V1, false, _) => {
            return off(format!(
                "cgroups = \"v1\" but no v1 controllers are mounted under {}",
                root.display()
            ))
        }
        (Setting::V2, _, None) => {
            return off(format!(
                "cgroups = \"v2\" but no cgroup2 mount at {} or {}/unified",
                root.display(),
                root.display()
            ))
        }
        (_, false, None) => {
            return off(format!(
                "no cgroup hierarchy found under {}",
                root.display()
            ))
        }
        (Setting::Off, ..) => unreachable!("handled above"),
    };
    let prepared = match chosen.layout {
        Layout::V1 => v1::prepare(&chosen.root, parent),
        Layout::V2 => v2::prepare(&chosen.root, parent),
        Layout::Off => Ok(Vec::new()),
    };
    match prepared {
        Ok(missing) => Detected {
            description: format!("{} at {}", chosen.layout, chosen.root.display()),
            placement: chosen,
            missing,
        },
        Err(e) => off(format!(
            "cannot create cgroups ({e}); jobs run without isolation"
        )),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cgroup_moves_are_slow_without_favordynmods() {
        let hybrid = "tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0\n\
                      cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n";
        assert_eq!(
            super::slow_moves(hybrid).as_deref(),
            Some("/sys/fs/cgroup/unified")
        );
        let tuned = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,favordynmods,memory_recursiveprot 0 0\n";
        assert_eq!(super::slow_moves(tuned), None);
        let v1_only = "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n";
        assert_eq!(super::slow_moves(v1_only), None, "nothing to remount");
    }

    use super::*;

    #[test]
    fn device_rules_read_as_v1_wants_them() {
        assert_eq!(DeviceRule::char(195, 2).to_string(), "c 195:2 rwm");
        assert_eq!(STANDARD_DEVICES[7].to_string(), "c 136:* rwm");
        let null = DeviceRule::of_file(Path::new("/dev/null")).unwrap();
        assert_eq!(null, DeviceRule::char(1, 3));
        assert!(DeviceRule::of_file(Path::new("/etc/hostname")).is_err());
    }

    #[test]
    fn keyed_files() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("memory.events");
        fs::write(&f, "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n").unwrap();
        assert_eq!(keyed(&f, "oom_kill"), Some(2));
        assert_eq!(keyed(&f, "oom"), Some(1));
        assert_eq!(keyed(&f, "absent"), None);
    }

    #[test]
    fn an_explicit_off_is_off() {
        let d = detect(Setting::Off, Path::new(DEFAULT_ROOT), DEFAULT_PARENT);
        assert_eq!(d.placement.layout, Layout::Off);
        assert!(d.description.contains("cgroups = \"off\""));
    }

    #[test]
    fn no_hierarchy_means_off_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let d = detect(Setting::Auto, dir.path(), DEFAULT_PARENT);
        assert_eq!(d.placement.layout, Layout::Off);
        assert!(
            d.description.contains("no cgroup hierarchy found"),
            "{}",
            d.description
        );
        let d = detect(Setting::V2, dir.path(), DEFAULT_PARENT);
        assert!(
            d.description.contains("no cgroup2 mount"),
            "{}",
            d.description
        );
    }
}
