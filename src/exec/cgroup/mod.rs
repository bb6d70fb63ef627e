//! One cgroup per job: device access, memory, CPU and process limits, every
//! process tracked, frozen, killed and measured. A leaf behind a trait with
//! a v1, a v2 and an "off" implementation, chosen once at start by looking
//! at the mounts. Only `exec` uses it.
//!
//! Errors carry the path and the value: "cannot write 2 to
//! /sys/fs/cgroup/pids/ysched/job_41/pids.max: Permission denied".

pub mod bpf;
pub(crate) mod group;
mod v1;
mod v2;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::model::isolation::{group_name, Layout, Setting};
#[cfg(test)]
use crate::model::isolation::{DEFAULT_PARENT, DEFAULT_ROOT};
use crate::model::job::JobId;
use group::io_err;
#[cfg(test)]
use group::keyed;
pub use group::{
    CgroupError, DeviceRule, JobCgroup, Limits, Usage, NVIDIA_CONTROL_DEVICES, STANDARD_DEVICES,
};

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
