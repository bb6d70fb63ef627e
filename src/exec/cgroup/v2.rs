//! cgroup v2: one unified hierarchy, a `ysched/job_<id>` group in it, and a
//! BPF program for devices (v2 has no devices controller).

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::bpf;
use super::group::{
    io_err, keyed, make_group, probe, read_u64, write, CgroupError, JobCgroup, Limits, Usage,
};
use crate::model::isolation::group_name;
use crate::model::job::JobId;

/// The controllers a job's limits need, and what each enforces.
const CONTROLLERS: [(&str, &str); 3] = [
    ("memory", "memory limits"),
    ("pids", "process limits"),
    ("cpu", "CPU quotas"),
];

/// Creates `ysched/` and delegates the controllers the host offers to it;
/// returns what cannot be enforced.
pub(super) fn prepare(root: &Path, parent_name: &str) -> Result<Vec<String>, CgroupError> {
    let parent = root.join(parent_name);
    make_group(&parent)?;
    probe(&parent)?;
    prepare_parent(root, &parent)
}

pub(super) fn prepare_parent(root: &Path, parent: &Path) -> Result<Vec<String>, CgroupError> {
    let available = fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
    let mut missing = Vec::new();
    for (controller, what) in CONTROLLERS {
        if !available.split_whitespace().any(|c| c == controller) {
            missing.push(format!(
                "{what} (the v2 {controller} controller is not available at {})",
                root.display()
            ));
            continue;
        }
        for dir in [root, parent] {
            let enabled =
                fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
            if !enabled.split_whitespace().any(|c| c == controller) {
                write(
                    &dir.join("cgroup.subtree_control"),
                    &format!("+{controller}"),
                )?;
            }
        }
    }
    Ok(missing)
}

pub(super) struct JobGroup {
    dir: PathBuf,
}

impl JobGroup {
    pub(super) fn create(
        root: &Path,
        parent: &str,
        job: JobId,
        limits: &Limits,
    ) -> Result<JobGroup, CgroupError> {
        JobGroup::create_in(&root.join(parent), job, limits, true)
    }

    /// `devices`: attach the device program (only a real cgroup2 mount can
    /// take one; tests of the limit files use a plain directory).
    pub(super) fn create_in(
        parent: &Path,
        job: JobId,
        limits: &Limits,
        devices: bool,
    ) -> Result<JobGroup, CgroupError> {
        let dir = parent.join(group_name(job));
        make_group(&dir)?;
        let group = JobGroup { dir };
        group.apply(limits)?;
        if devices {
            let handle = fs::File::open(&group.dir).map_err(io_err("open", &group.dir))?;
            bpf::attach(&handle, &limits.devices)
                .map_err(io_err("restrict devices of", &group.dir))?;
        }
        Ok(group)
    }

    pub(super) fn open(root: &Path, parent: &str, job: JobId) -> Option<JobGroup> {
        let dir = root.join(parent).join(group_name(job));
        dir.is_dir().then_some(JobGroup { dir })
    }

    /// Writes each limit whose controller is enabled here (the others were
    /// reported as missing when the daemon started).
    fn apply(&self, limits: &Limits) -> Result<(), CgroupError> {
        let file = |name: &str| Some(self.dir.join(name)).filter(|p| p.exists());
        if let (Some(bytes), Some(f)) = (limits.memory_bytes, file("memory.max")) {
            write(&f, &bytes.to_string())?;
            if let Some(swap) = file("memory.swap.max") {
                write(&swap, "0")?;
            }
        }
        if let (Some(max), Some(f)) = (limits.pids_max, file("pids.max")) {
            write(&f, &max.to_string())?;
        }
        if let (Some(cpus), Some(f)) = (limits.cpus, file("cpu.max")) {
            write(&f, &format!("{} 100000", u64::from(cpus) * 100_000))?;
        }
        Ok(())
    }

    fn frozen(&self) -> bool {
        keyed(&self.dir.join("cgroup.events"), "frozen") == Some(1)
    }
}

impl JobCgroup for JobGroup {
    fn path(&self) -> String {
        format!("{} (v2)", self.dir.display())
    }

    fn join(&self, pid: i32) -> Result<(), CgroupError> {
        write(&self.dir.join("cgroup.procs"), &pid.to_string())
    }

    fn pids(&self) -> Vec<i32> {
        fs::read_to_string(self.dir.join("cgroup.procs"))
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    fn kill_all(&self) {
        // cgroup.kill (Linux 5.14) kills everything, frozen or forking.
        if write(&self.dir.join("cgroup.kill"), "1").is_ok() {
            return;
        }
        let frozen = self.set_frozen(true).is_ok();
        self.signal_all(nix::sys::signal::Signal::SIGKILL);
        if frozen {
            let _ = self.set_frozen(false);
        }
    }

    fn set_frozen(&self, frozen: bool) -> Result<(), CgroupError> {
        write(
            &self.dir.join("cgroup.freeze"),
            if frozen { "1" } else { "0" },
        )?;
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.frozen() != frozen && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(())
    }

    fn usage(&self) -> Usage {
        Usage {
            max_rss_bytes: read_u64(&self.dir.join("memory.peak")),
            cpu_usec: keyed(&self.dir.join("cpu.stat"), "usage_usec"),
            oom_kills: keyed(&self.dir.join("memory.events"), "oom_kill").unwrap_or(0),
            pids_refused: keyed(&self.dir.join("pids.events"), "max").unwrap_or(0),
        }
    }

    fn remove(&self) -> Result<(), CgroupError> {
        let mut tries = 0;
        loop {
            match fs::remove_dir(&self.dir) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
                Err(e) if tries < 50 && e.raw_os_error() == Some(libc::EBUSY) => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(io_err("remove", &self.dir)(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::cgroup::group::DeviceRule;

    /// The limit files are written where a cgroupfs would have them; this
    /// host's v2 mount has no memory, pids or cpu controller, so the real
    /// kernel cannot take them here.
    #[test]
    fn limits_land_in_a_directory_laid_out_like_cgroupfs() {
        let root = tempfile::tempdir().unwrap();
        let group = root.path().join("job_7");
        fs::create_dir(&group).unwrap();
        for f in [
            "memory.max",
            "memory.swap.max",
            "pids.max",
            "cpu.max",
            "cgroup.procs",
        ] {
            fs::write(group.join(f), "max\n").unwrap();
        }
        let limits = Limits {
            memory_bytes: Some(8 << 30),
            cpus: Some(4),
            pids_max: Some(512),
            devices: vec![DeviceRule::char(195, 0)],
        };
        let g = JobGroup::create_in(root.path(), 7, &limits, false).unwrap();
        assert_eq!(
            fs::read_to_string(group.join("memory.max")).unwrap(),
            (8u64 << 30).to_string()
        );
        assert_eq!(
            fs::read_to_string(group.join("memory.swap.max")).unwrap(),
            "0"
        );
        assert_eq!(fs::read_to_string(group.join("pids.max")).unwrap(), "512");
        assert_eq!(
            fs::read_to_string(group.join("cpu.max")).unwrap(),
            "400000 100000"
        );
        fs::write(
            group.join("memory.events"),
            "low 0\nhigh 0\nmax 9\noom 2\noom_kill 1\n",
        )
        .unwrap();
        fs::write(group.join("memory.peak"), "123456\n").unwrap();
        fs::write(group.join("cpu.stat"), "usage_usec 777\nuser_usec 700\n").unwrap();
        fs::write(group.join("pids.events"), "max 5\n").unwrap();
        assert_eq!(
            g.usage(),
            Usage {
                max_rss_bytes: Some(123_456),
                cpu_usec: Some(777),
                oom_kills: 1,
                pids_refused: 5,
            }
        );
        fs::write(group.join("cgroup.procs"), "41\n42\n").unwrap();
        assert_eq!(g.pids(), vec![41, 42]);
    }

    #[test]
    fn controllers_are_delegated_where_the_host_offers_them() {
        let root = tempfile::tempdir().unwrap();
        let parent = root.path().join(crate::model::isolation::DEFAULT_PARENT);
        fs::create_dir(&parent).unwrap();
        fs::write(
            root.path().join("cgroup.controllers"),
            "cpuset cpu memory hugetlb\n",
        )
        .unwrap();
        fs::write(root.path().join("cgroup.subtree_control"), "").unwrap();
        fs::write(parent.join("cgroup.subtree_control"), "").unwrap();
        let missing = prepare_parent(root.path(), &parent).unwrap();
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert!(missing[0].starts_with("process limits"));
        // The last write wins in a plain file; cgroupfs would accumulate.
        assert_eq!(
            fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap(),
            "+cpu"
        );
    }
}
