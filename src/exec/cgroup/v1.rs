//! cgroup v1: a hierarchy per controller, a `ysched/job_<id>` group in each.

use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::group::{
    io_err, keyed, make_group, probe, read_u64, write, CgroupError, JobCgroup, Limits, Usage,
};
use crate::model::isolation::group_name;
use crate::model::job::JobId;

/// The controllers a job's groups are made in, when mounted. Not cpuset:
/// CPUs are limited by a quota, and every hierarchy joined costs a move
/// (the first of which waits for an RCU grace period). Not `cpuacct` on
/// its own: where it is mounted with `cpu` (the usual `cpu,cpuacct`) the
/// job's CPU time is read from that group; where it is a hierarchy of its
/// own, a group in it cost about 0.35 ms of CPU per job on the build VM
/// for a figure the supervisor has anyway, from its children's rusage.
pub(super) const CONTROLLERS: [&str; 5] = ["memory", "devices", "pids", "cpu", "freezer"];

/// The mounted controllers, one entry per distinct hierarchy with the
/// controllers it carries (`memory` and `cpu` could share a mount).
fn hierarchies(root: &Path) -> Vec<(Vec<&'static str>, PathBuf)> {
    let mut found: Vec<(Vec<&'static str>, PathBuf)> = Vec::new();
    for c in CONTROLLERS {
        let Ok(real) = fs::canonicalize(root.join(c)) else {
            continue;
        };
        if !real.join("cgroup.procs").exists() {
            continue;
        }
        match found.iter_mut().find(|(_, d)| *d == real) {
            Some((names, _)) => names.push(c),
            None => found.push((vec![c], real)),
        }
    }
    found
}

/// Creates `ysched/` in every hierarchy; returns what cannot be enforced.
pub(super) fn prepare(root: &Path, parent_name: &str) -> Result<Vec<String>, CgroupError> {
    let found = hierarchies(root);
    for (_, dir) in &found {
        let parent = dir.join(parent_name);
        make_group(&parent)?;
        probe(&parent)?;
    }
    let has = |c: &str| found.iter().any(|(names, _)| names.contains(&c));
    let mut missing = Vec::new();
    for (controller, what) in [
        ("devices", "GPU device isolation"),
        ("memory", "memory limits"),
        ("pids", "process limits"),
        ("cpu", "CPU quotas"),
        ("freezer", "suspend"),
    ] {
        if !has(controller) {
            missing.push(format!("{what} (no v1 {controller} controller)"));
        }
    }
    Ok(missing)
}

pub(super) struct JobGroup {
    /// (controllers, group directory) per hierarchy.
    dirs: Vec<(Vec<&'static str>, PathBuf)>,
}

impl JobGroup {
    pub(super) fn create(
        root: &Path,
        parent: &str,
        job: JobId,
        limits: &Limits,
    ) -> Result<JobGroup, CgroupError> {
        let mut dirs = Vec::new();
        for (controllers, hierarchy) in hierarchies(root) {
            let dir = hierarchy.join(parent).join(group_name(job));
            make_group(&dir)?;
            dirs.push((controllers, dir));
        }
        let group = JobGroup { dirs };
        group.apply(limits)?;
        Ok(group)
    }

    pub(super) fn open(root: &Path, parent: &str, job: JobId) -> Option<JobGroup> {
        let dirs: Vec<_> = hierarchies(root)
            .into_iter()
            .map(|(c, h)| (c, h.join(parent).join(group_name(job))))
            .filter(|(_, d)| d.is_dir())
            .collect();
        (!dirs.is_empty()).then_some(JobGroup { dirs })
    }

    fn dir(&self, controller: &str) -> Option<&Path> {
        self.dirs
            .iter()
            .find(|(c, _)| c.contains(&controller))
            .map(|(_, d)| d.as_path())
    }

    fn apply(&self, limits: &Limits) -> Result<(), CgroupError> {
        if let (Some(bytes), Some(dir)) = (limits.memory_bytes, self.dir("memory")) {
            write(&dir.join("memory.limit_in_bytes"), &bytes.to_string())?;
        }
        if let (Some(cpus), Some(dir)) = (limits.cpus, self.dir("cpu")) {
            write(&dir.join("cpu.cfs_period_us"), "100000")?;
            write(
                &dir.join("cpu.cfs_quota_us"),
                &(u64::from(cpus) * 100_000).to_string(),
            )?;
        }
        if let (Some(max), Some(dir)) = (limits.pids_max, self.dir("pids")) {
            write(&dir.join("pids.max"), &max.to_string())?;
        }
        if let Some(dir) = self.dir("devices") {
            // Allow-list: deny all, then allow each device. The kernel
            // takes one rule per write(2), so one open serves them all.
            write(&dir.join("devices.deny"), "a")?;
            let allow = dir.join("devices.allow");
            let mut file = fs::OpenOptions::new()
                .write(true)
                .open(&allow)
                .map_err(io_err("open", &allow))?;
            for rule in &limits.devices {
                let rule = rule.to_string();
                file.write_all(rule.as_bytes())
                    .map_err(io_err(format!("write {rule} to"), &allow))?;
            }
        }
        Ok(())
    }

    fn freezer(&self, state: &str) -> Result<(), CgroupError> {
        let Some(dir) = self.dir("freezer") else {
            return Err(CgroupError::Unavailable(
                "no v1 freezer controller is mounted".into(),
            ));
        };
        let file = dir.join("freezer.state");
        write(&file, state)?;
        // FREEZING becomes FROZEN once every task has stopped.
        let deadline = Instant::now() + Duration::from_secs(2);
        while fs::read_to_string(&file)
            .map(|s| s.trim() != state)
            .unwrap_or(false)
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(())
    }
}

impl JobCgroup for JobGroup {
    /// `/sys/fs/cgroup/{memory,devices,...}/ysched/job_7`.
    fn path(&self) -> String {
        let names: Vec<&str> = self
            .dirs
            .iter()
            .flat_map(|(c, _)| c.iter().copied())
            .collect();
        match self.dirs.first() {
            Some((_, dir)) => {
                let root = dir.ancestors().nth(3).unwrap_or(Path::new("/"));
                let group = dir
                    .strip_prefix(dir.ancestors().nth(2).unwrap_or(Path::new("/")))
                    .unwrap_or(dir);
                format!(
                    "{}/{{{}}}/{}",
                    root.display(),
                    names.join(","),
                    group.display()
                )
            }
            None => "(none)".into(),
        }
    }

    fn join(&self, pid: i32) -> Result<(), CgroupError> {
        for (_, dir) in &self.dirs {
            write(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    fn pids(&self) -> Vec<i32> {
        // Every job process is in every hierarchy; any one will do.
        let Some((_, dir)) = self.dirs.first() else {
            return Vec::new();
        };
        fs::read_to_string(dir.join("cgroup.procs"))
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    fn kill_all(&self) {
        // Frozen, nothing can fork between reading the list and the kill;
        // a frozen task takes its SIGKILL when thawed.
        let frozen = self.freezer("FROZEN").is_ok();
        self.signal_all(nix::sys::signal::Signal::SIGKILL);
        if frozen {
            let _ = self.freezer("THAWED");
        }
    }

    fn set_frozen(&self, frozen: bool) -> Result<(), CgroupError> {
        self.freezer(if frozen { "FROZEN" } else { "THAWED" })
    }

    fn usage(&self) -> Usage {
        let memory = self.dir("memory");
        Usage {
            max_rss_bytes: memory.and_then(|d| read_u64(&d.join("memory.max_usage_in_bytes"))),
            // Present where cpuacct shares the cpu hierarchy.
            cpu_usec: self
                .dir("cpu")
                .and_then(|d| read_u64(&d.join("cpuacct.usage")))
                .map(|ns| ns / 1_000),
            oom_kills: memory
                .and_then(|d| keyed(&d.join("memory.oom_control"), "oom_kill"))
                .unwrap_or(0),
            pids_refused: self
                .dir("pids")
                .and_then(|d| keyed(&d.join("pids.events"), "max"))
                .unwrap_or(0),
        }
    }

    fn remove(&self) -> Result<(), CgroupError> {
        for (_, dir) in &self.dirs {
            let mut tries = 0;
            loop {
                match fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == ErrorKind::NotFound => break,
                    // Busy for a moment after the last task exits.
                    Err(e) if tries < 50 && e.raw_os_error() == Some(libc::EBUSY) => {
                        tries += 1;
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(e) => return Err(io_err("remove", dir)(e)),
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hierarchy at `root/name` as cgroupfs lays it out, with job 7's
    /// group holding `files`.
    fn hierarchy(root: &Path, name: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir = root.join(name);
        let group = dir.join("ysched").join(group_name(7));
        fs::create_dir_all(&group).unwrap();
        fs::write(dir.join("cgroup.procs"), "").unwrap();
        for (file, text) in files {
            fs::write(group.join(file), text).unwrap();
        }
        group
    }

    fn memory(root: &Path) {
        hierarchy(
            root,
            "memory",
            &[
                ("memory.max_usage_in_bytes", "4096\n"),
                (
                    "memory.oom_control",
                    "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
                ),
            ],
        );
    }

    #[test]
    fn cpu_time_comes_from_cpuacct_where_it_shares_the_cpu_hierarchy() {
        let root = tempfile::tempdir().unwrap();
        memory(root.path());
        hierarchy(
            root.path(),
            "cpu,cpuacct",
            &[("cpuacct.usage", "5000000\n")],
        );
        for name in ["cpu", "cpuacct"] {
            std::os::unix::fs::symlink("cpu,cpuacct", root.path().join(name)).unwrap();
        }
        let group = JobGroup::open(root.path(), "ysched", 7).unwrap();
        assert_eq!(group.dirs.len(), 2, "memory and cpu,cpuacct");
        let usage = group.usage();
        assert_eq!(usage.cpu_usec, Some(5_000));
        assert_eq!(usage.max_rss_bytes, Some(4096));
    }

    #[test]
    fn a_cpuacct_hierarchy_of_its_own_gets_no_group_and_gives_no_cpu_time() {
        let root = tempfile::tempdir().unwrap();
        memory(root.path());
        hierarchy(root.path(), "cpu", &[]);
        hierarchy(root.path(), "cpuacct", &[("cpuacct.usage", "5000000\n")]);
        let group = JobGroup::open(root.path(), "ysched", 7).unwrap();
        assert!(
            !group.path().contains("cpuacct"),
            "only memory and cpu are the job's: {}",
            group.path()
        );
        // The supervisor takes its children's rusage instead.
        assert_eq!(group.usage().cpu_usec, None);
    }
}
