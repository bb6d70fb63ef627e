//! The executor of this host: the fork server and a `ysstepd` supervisor
//! per job, jobs confined in cgroups, the daemon's claim on its cgroup
//! subtree, exits watched through pidfds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::Config;
use crate::gpu::Inventory;
use crate::model::isolation::Layout;
use crate::model::job::JobId;
use crate::spool::{Ownership, Spool};

use super::cgroup::{self, SubtreeLock};
use super::container::pulls::Pulls;
use super::container::{ContainerLaunch, ContainerSite};
use super::error::ExecError;
use super::executor::{
    Adoption, Executor, ImageStatus, IsolationFacts, Launch, NodeFacts, Started,
};
use super::isolation::Isolation;
use super::launcher::{self, ExitWatcher, Launcher};
use super::spec::{ExitRecord, LaunchSpec, StepCommand};

/// How long leftover processes get to die after SIGKILL before their
/// group is left in place and logged.
const REMAINS_WAIT: Duration = Duration::from_secs(5);

pub struct LocalExecutor {
    node: NodeFacts,
    isolation: Isolation,
    ownership: Ownership,
    launcher: Launcher,
    exits: ExitWatcher,
    /// On a pool's node: the lease its jobs' supervisors watch.
    lease_file: Option<PathBuf>,
    /// `[containers]`: how `--container-image` jobs run here.
    containers: crate::config::Containers,
    /// Images pulled ahead of the jobs that need them.
    pulls: Pulls,
    /// Held for the daemon's life: leftover groups are ours only while
    /// the subtree is.
    _subtree: SubtreeLock,
}

impl LocalExecutor {
    /// Finds this host's GPUs, CPUs, memory and cgroups, claims the
    /// cgroup subtree, and watches supervisors: `on_exit` hears of each
    /// job's end once.
    pub fn start(
        config: &Config,
        spool: &Spool,
        ownership: Ownership,
        stepd: PathBuf,
        on_exit: impl Fn(JobId) + Send + 'static,
    ) -> Result<LocalExecutor, ExecError> {
        if !stepd.is_file() {
            return Err(ExecError::NoSupervisor(stepd));
        }
        let inventory = Inventory::discover(config);
        let isolation = Isolation::prepare(config, &inventory)?;
        let subtree = cgroup::lock_subtree(isolation.placement())?;
        log_isolation(&isolation);
        let node = NodeFacts {
            name: config.node_name.clone(),
            inventory,
            cpus: config.cpus.unwrap_or_else(host_cpus),
            mem_mb: config.memory_mb.unwrap_or_else(host_memory_mb),
            tmp_mb: tmp_disk_mb(),
            isolation: facts_of(&isolation),
            containers: config.containers.missing().is_none(),
        };
        let exits = ExitWatcher::start(on_exit).map_err(ExecError::Watch)?;
        Ok(LocalExecutor {
            node,
            isolation,
            ownership,
            launcher: Launcher::new(spool.clone(), stepd, ownership),
            exits,
            lease_file: None,
            containers: config.containers.clone(),
            pulls: Pulls::new(config.containers.clone(), spool.clone()),
            _subtree: subtree,
        })
    }

    /// Makes every job launched from now on watch the node's lease in
    /// `path` (see `exec::lease`).
    pub fn watch_lease(&mut self, path: PathBuf) {
        self.lease_file = Some(path);
    }

    /// The jobs this host has directories of, each with its run: what a
    /// node's agent finds when it starts.
    pub fn recorded_runs(&self) -> Vec<(JobId, u32)> {
        self.launcher.recorded()
    }

    /// What the supervisor needs: the job and what the daemon kept apart
    /// from it, with this host's confinement.
    fn spec_of(&self, launch: &Launch<'_>) -> LaunchSpec {
        let job = launch.job;
        LaunchSpec {
            job_id: job.id,
            name: job.name.clone(),
            user: job.user.clone(),
            uid: job.uid,
            gid: job.gid,
            home: launch.home.to_path_buf(),
            shell: launch.shell.to_path_buf(),
            account: job.account.clone(),
            qos: job.qos.clone(),
            restart_count: job.restart_count,
            gpus: job.gpus_alloc.clone(),
            node_name: self.node.name.clone(),
            work_dir: job.work_dir.clone(),
            submit_dir: job.submit_dir.clone(),
            stdout: job.stdout_path(),
            stderr: job.stderr_path(),
            open_append: job.open_append,
            environment: launch.environment.to_vec(),
            args: launch.args.to_vec(),
            cpus: job.cpus,
            mem_mb: job.mem_mb,
            time_limit: job.time_limit,
            submit_time: job.submit_time,
            switch_user: self.ownership == Ownership::System,
            cgroup: self.isolation.placement().clone(),
            limits: self.isolation.limits(job),
            gpus_confined: self.isolation.detected.confines_devices(),
            array: job.array.clone(),
            shards: job.gpus.shard.then_some(job.gpus.count),
            lease_file: self.lease_file.clone(),
            borrowed: job.borrowed,
            part: launch.part.cloned(),
            container: job.container.as_ref().map(|request| ContainerLaunch {
                request: request.clone(),
                site: self.containers.clone(),
                devices: self.isolation.container_devices(job),
                pull_locks: self.pulls.locks(),
            }),
            step_containers: (self.node.containers && self.ownership == Ownership::System).then(
                || ContainerSite {
                    site: self.containers.clone(),
                    devices: self.isolation.container_devices(job),
                    pull_locks: self.pulls.locks(),
                },
            ),
        }
    }
}

impl Executor for LocalExecutor {
    fn node(&self) -> &NodeFacts {
        &self.node
    }

    fn confinement_of(&self, job: JobId) -> Option<String> {
        self.isolation.placement().job_path(job)
    }

    fn launch(&mut self, launch: Launch<'_>) -> Result<Started, ExecError> {
        let id = launch.job.id;
        let supervisor = self
            .launcher
            .launch(&self.spec_of(&launch), launch.script)?;
        let supervisor_pid = supervisor.pid;
        self.exits.watch(id, supervisor).map_err(ExecError::Watch)?;
        Ok(Started { supervisor_pid })
    }

    fn command(&self, job: JobId, command: &StepCommand) -> Result<(), ExecError> {
        self.launcher.command(job, command)
    }

    fn set_frozen(&self, job: JobId, frozen: bool) -> Result<(), ExecError> {
        if !self.node.isolation.can_suspend {
            return Err(ExecError::CannotFreeze {
                job,
                why: "job isolation is off on this server, and suspending freezes the job's cgroup"
                    .into(),
            });
        }
        let group =
            cgroup::open(self.isolation.placement(), job).ok_or(ExecError::CannotFreeze {
                job,
                why: "it has no cgroup".into(),
            })?;
        group.set_frozen(frozen)?;
        Ok(())
    }

    fn exit_of(&self, job: JobId) -> Option<ExitRecord> {
        self.launcher.read_exit(job)
    }

    fn adopt(&mut self, job: JobId) -> Adoption {
        match self.launcher.adopt(job) {
            launcher::Adoption::Alive(supervisor) => {
                let supervisor_pid = supervisor.pid;
                match self.exits.watch(job, supervisor) {
                    Ok(()) => Adoption::Alive { supervisor_pid },
                    Err(e) => Adoption::Unreachable(format!("cannot watch its supervisor: {e}")),
                }
            }
            launcher::Adoption::Exited(record) => Adoption::Exited(record),
            launcher::Adoption::Lost => Adoption::Lost,
            launcher::Adoption::NeverStarted => Adoption::NeverStarted,
        }
    }

    fn clear_remains(&self, job: JobId) -> usize {
        let Some(group) = cgroup::open(self.isolation.placement(), job) else {
            return self.launcher.kill_orphans(job);
        };
        let found = group.pids().len();
        let stuck = group.kill_and_wait(REMAINS_WAIT);
        if stuck.is_empty() {
            if let Err(e) = group.remove() {
                tracing::warn!(target: "ysched::exec", "job {job}: {e}");
            }
        } else {
            tracing::error!(target: "ysched::exec", "job {job}: processes {stuck:?} survive SIGKILL; its cgroup {} stays", group.path());
        }
        found
    }

    fn forget(&self, job: JobId) {
        self.launcher.remove(job);
    }

    fn leftovers(&self) -> Vec<JobId> {
        cgroup::existing_jobs(self.isolation.placement())
    }

    fn ensure_image(&self, reference: &str) -> ImageStatus {
        self.pulls.ensure(reference)
    }
}

fn facts_of(isolation: &Isolation) -> IsolationFacts {
    let layout = isolation.placement().layout;
    IsolationFacts {
        description: isolation.detected.description.clone(),
        missing: isolation.detected.missing.clone(),
        confined: layout != Layout::Off,
        can_suspend: layout != Layout::Off,
    }
}

fn log_isolation(isolation: &Isolation) {
    if isolation.placement().layout == Layout::Off {
        tracing::warn!(
            target: "ysched::exec",
            "job isolation is OFF ({}): jobs are not confined to their GPUs, memory and CPUs",
            isolation.detected.description
        );
        return;
    }
    tracing::info!(target: "ysched::exec", "job isolation: {}", isolation.detected.description);
    for missing in &isolation.detected.missing {
        tracing::warn!(target: "ysched::exec", "not enforced on this host: {missing}");
    }
}

/// The CPUs this host has.
pub fn host_cpus() -> u32 {
    std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1)
}

/// This host's memory in MiB, from /proc/meminfo.
/// The size of the host's `/tmp` filesystem in MiB (0 when unreadable).
pub fn tmp_disk_mb() -> u64 {
    nix::sys::statvfs::statvfs("/tmp").map_or(0, |s| s.blocks() * s.fragment_size() / (1 << 20))
}

pub fn host_memory_mb() -> u64 {
    host_memory_mb_in(Path::new("/proc/meminfo")).unwrap_or(1024)
}

fn host_memory_mb_in(meminfo: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(meminfo).ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024)
}
