//! For the handlers' tests: a core built from a small config and the jobs
//! a test names, on a manual clock, and what a handler may read kept in
//! maps. No database, no executor.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::AtomicI64;
use std::sync::Arc;

use crate::config::Config;
use crate::exec::spec::ExitRecord;
use crate::gpu::Inventory;
use crate::model::gpu::Gpu;
use crate::model::job::{Job, JobId, JobState};
use crate::model::step::Step;
use crate::sched::admission::Capacity;
use crate::token::{TokenError, TokenKey, TokenRecord};

use super::error::{DaemonError, Refusal};
use super::reads::Reads;
use super::requester::{Proven, Requester};
use super::state::{Clock, Core, Jobs, PolicyState};

/// A pool of one node, gpu01, with four A100s; one account everyone is in.
pub(super) const CONFIG: &str = "node_name = \"gpu01\"\n\
    allow_root_jobs = true\n\
    gpu_sample_secs = 0\n\
    [[gpus]]\ntype = \"a100\"\ncount = 4\nmemory = \"80G\"\n\
    [[accounts]]\nname = \"a\"\nshares = 1\nusers = [\"*\"]\n";

/// A core of [`CONFIG`] holding `jobs`, its clock at 0.
pub(super) fn core_with(jobs: Vec<Job>) -> Core {
    core_of("", jobs)
}

/// A core of [`CONFIG`] and `more` (keys of its account, or tables after
/// it) holding `jobs`, its clock at 0.
pub(super) fn core_of(more: &str, jobs: Vec<Job>) -> Core {
    let config =
        Config::parse(&format!("{CONFIG}{more}"), Path::new("test.toml")).expect("the test config");
    let mut active = Jobs::default();
    for job in jobs {
        active.insert(job);
    }
    Core {
        config,
        users: Default::default(),
        jobs: active,
        policy: PolicyState::default(),
        clock: Clock::Manual(Arc::new(AtomicI64::new(0))),
    }
}

/// `user` (uid `uid`) asking on the command line of the controller.
pub(super) fn requester(uid: u32, user: &str, admin: bool) -> Requester<'_> {
    Requester {
        uid,
        user,
        admin,
        proven: Proven::Kernel,
        channel: crate::proto::Channel::Cli,
        vouched_by: None,
    }
}

/// What a handler reads, kept in maps: jobs no longer active, the tasks
/// of arrays, where jobs were submitted; one node, gpu01, with four A100s,
/// 64 CPUs and 512 GiB.
pub(super) struct Archive {
    pub(super) jobs: HashMap<JobId, Job>,
    pub(super) tasks: HashMap<(JobId, u32), JobId>,
    pub(super) submitted: HashMap<JobId, String>,
    /// Why no node can freeze a job, if none can.
    pub(super) cannot_freeze: Option<String>,
    /// Whether the node can run containers.
    pub(super) containers: bool,
    /// The id the next job takes.
    pub(super) next_id: JobId,
    /// The pool's nodes on record, by name.
    pub(super) node_records: HashMap<String, crate::db::NodeRecord>,
    /// The steps on record.
    pub(super) steps: Vec<Step>,
    /// The tokens on record, by id.
    pub(super) token_records: HashMap<String, TokenRecord>,
    /// The host's accounts: name to uid.
    pub(super) uids: HashMap<String, u32>,
    /// The nodes recorded drained.
    pub(super) drained: std::collections::HashSet<String>,
    /// What the runs that ended recorded.
    pub(super) exits: HashMap<JobId, ExitRecord>,
    /// Runs stopped for another job, by job and restart: when, the kind
    /// of stop, its grace.
    pub(super) stops: HashMap<(JobId, u32), (i64, String, u64)>,
    /// What the runs that ended on other nodes than gpu01 recorded (the
    /// parts of jobs over several nodes), by job and node.
    pub(super) part_exits: HashMap<(JobId, String), ExitRecord>,
    /// The nodes not heard (down, or not heard since they were away).
    pub(super) unheard: std::collections::HashSet<String>,
    /// The parts of jobs lost on their node, by job and node.
    pub(super) lost_parts: std::collections::HashSet<(JobId, String)>,
    /// What the jobs that ended were billed: account, billing, end.
    pub(super) billed: Vec<(String, i64, i64)>,
    inventory: Inventory,
}

impl Default for Archive {
    fn default() -> Archive {
        let config = Config::parse(CONFIG, Path::new("test.toml")).expect("the test config");
        Archive {
            jobs: HashMap::new(),
            tasks: HashMap::new(),
            submitted: HashMap::new(),
            cannot_freeze: None,
            containers: false,
            next_id: 100,
            exits: HashMap::new(),
            drained: Default::default(),
            token_records: HashMap::new(),
            steps: Vec::new(),
            node_records: HashMap::new(),
            uids: HashMap::new(),
            stops: HashMap::new(),
            billed: Vec::new(),
            lost_parts: Default::default(),
            unheard: Default::default(),
            part_exits: HashMap::new(),
            inventory: Inventory::declared(&config),
        }
    }
}

impl Reads for Archive {
    fn ended_job(&self, id: JobId) -> Result<Option<Job>, DaemonError> {
        Ok(self.jobs.get(&id).cloned())
    }

    fn array_task(&self, array: JobId, task: u32) -> Result<Option<JobId>, DaemonError> {
        Ok(self.tasks.get(&(array, task)).copied())
    }

    fn submitted_on(&self, id: JobId) -> Result<Option<String>, DaemonError> {
        Ok(self.submitted.get(&id).cloned())
    }

    fn node_gpus(&self, _node: Option<&str>) -> Vec<Gpu> {
        self.inventory.gpus.clone()
    }

    fn checkpoint_file_time(&self, _job: &Job) -> Option<i64> {
        None
    }

    fn pool_gpus(&self) -> &[Gpu] {
        &self.inventory.gpus
    }

    fn capacities(&self) -> Vec<Capacity<'_>> {
        vec![Capacity {
            name: "gpu01",
            inventory: &self.inventory,
            cpus: 64,
            mem_mb: 512 << 10,
            tmp_mb: 100 << 10,
        }]
    }

    fn container_nodes(&self) -> Vec<String> {
        let gpu01 = self.containers.then(|| "gpu01".to_string());
        gpu01.into_iter().collect()
    }

    fn next_job_id(&self) -> Result<JobId, DaemonError> {
        Ok(self.next_id)
    }

    fn job_state(&self, id: JobId) -> Result<Option<JobState>, DaemonError> {
        Ok(self.jobs.get(&id).map(|j| j.state))
    }

    fn array_states(&self, id: JobId) -> Result<Vec<JobState>, DaemonError> {
        Ok(self
            .jobs
            .values()
            .filter(|j| j.array.as_ref().is_some_and(|a| a.job_id == id))
            .map(|j| j.state)
            .collect())
    }

    fn pending_stop(
        &self,
        id: JobId,
        restart: u32,
    ) -> Result<Option<(i64, String, u64)>, DaemonError> {
        Ok(self.stops.get(&(id, restart)).cloned())
    }

    fn node_name(&self, node: Option<&str>) -> Option<String> {
        Some(node.unwrap_or("gpu01").to_string()).filter(|n| n == "gpu01")
    }

    fn node_names(&self) -> Vec<String> {
        vec!["gpu01".into()]
    }

    fn single_server(&self) -> bool {
        true
    }

    fn node_drained(&self, name: &str) -> Result<bool, DaemonError> {
        Ok(self.drained.contains(name))
    }

    fn pool_join(&self) -> Option<(String, String)> {
        Some(("ctl:6820".into(), "SHA256:00".into()))
    }

    fn node_record(&self, name: &str) -> Result<Option<crate::db::NodeRecord>, DaemonError> {
        Ok(self.node_records.get(name).cloned())
    }

    fn node_address(&self, _name: &str) -> String {
        "127.0.0.1".into()
    }

    fn next_step(&self, job: JobId, restart: u32) -> Result<u32, DaemonError> {
        Ok(self
            .steps
            .iter()
            .filter(|s| s.job == job && s.restart == restart)
            .map(|s| s.step + 1)
            .max()
            .unwrap_or(0))
    }

    fn step_running(&self, (job, restart, step): (JobId, u32, u32)) -> Result<bool, DaemonError> {
        Ok(self
            .steps
            .iter()
            .any(|s| (s.job, s.restart, s.step) == (job, restart, step) && s.end.is_none()))
    }

    fn steps_of(&self, job: JobId) -> Result<Vec<Step>, DaemonError> {
        Ok(self
            .steps
            .iter()
            .filter(|s| s.job == job)
            .cloned()
            .collect())
    }

    fn token_key(&self) -> Result<TokenKey, TokenError> {
        Ok(TokenKey::of(b"the handlers' tests' signing key, 32+ bytes"))
    }

    fn token_record(&self, jti: &str) -> Result<Option<TokenRecord>, DaemonError> {
        Ok(self.token_records.get(jti).cloned())
    }

    fn tokens(&self, user: Option<&str>, since: i64) -> Result<Vec<TokenRecord>, DaemonError> {
        Ok(self
            .token_records
            .values()
            .filter(|t| user.is_none_or(|u| t.user == u) && t.expires >= since)
            .cloned()
            .collect())
    }

    fn revocable(
        &self,
        jti: Option<&str>,
        user: Option<&str>,
        now: i64,
    ) -> Result<crate::db::Revoked, DaemonError> {
        let valid = |t: &&TokenRecord| t.revoked.is_none() && t.expires > now;
        let named: Vec<&TokenRecord> = self
            .token_records
            .values()
            .filter(valid)
            .filter(|t| jti.is_none_or(|j| t.jti == j) && user.is_none_or(|u| t.user == u))
            .collect();
        let descendants = self
            .token_records
            .values()
            .filter(valid)
            .filter(|t| {
                named
                    .iter()
                    .any(|n| t.parent.as_deref() == Some(n.jti.as_str()))
            })
            .count();
        Ok(crate::db::Revoked {
            named: named.len(),
            descendants,
        })
    }

    fn uid_of(&self, name: &str) -> Option<u32> {
        self.uids.get(name).copied()
    }

    fn billing_since(&self, since: i64) -> Result<Vec<(String, i64)>, DaemonError> {
        let mut sums: std::collections::BTreeMap<String, i64> = Default::default();
        for (account, billing, _) in self.billed.iter().filter(|b| b.2 >= since) {
            *sums.entry(account.clone()).or_default() += billing;
        }
        Ok(sums.into_iter().collect())
    }

    fn node_heard(&self, name: &str) -> bool {
        !self.unheard.contains(name)
    }

    fn part_lost(&self, id: JobId, node: &str) -> Option<bool> {
        Some(self.lost_parts.contains(&(id, node.to_string())))
    }

    fn host_share(&self) -> (u32, u64) {
        (64, 512 * 1024)
    }

    fn exit_record(&self, id: JobId, node: Option<&str>) -> Option<ExitRecord> {
        match node {
            None | Some("gpu01") => self.exits.get(&id).cloned(),
            Some(other) => self.part_exits.get(&(id, other.to_string())).cloned(),
        }
    }

    fn confinement(&self, id: JobId, _node: &str) -> Option<String> {
        Some(format!("/sys/fs/cgroup/ysched/job_{id}"))
    }

    fn freezable(&self, _job: &Job) -> Result<(), Refusal> {
        self.cannot_freeze
            .clone()
            .map_or(Ok(()), |why| Err(Refusal(why)))
    }
}

/// What a run's supervisor records when it ends at `end_time` with exit
/// code `code` (no signal).
pub(super) fn exit_record(code: i32, end_time: i64) -> ExitRecord {
    ExitRecord {
        exit: crate::model::job::ExitStatus { code, signal: 0 },
        end_time,
        launch_error: None,
        terminated: false,
        usage: Default::default(),
        stuck: 0,
        image: None,
        fenced: None,
        fence_frozen_secs: None,
    }
}

/// Alice's job `id` (account a), running on `node`'s GPUs 0 and 1 since
/// 100.
pub(super) fn running_on(id: JobId, node: &str) -> Job {
    let mut job = crate::model::job::example_job(id);
    job.account = "a".into();
    job.state = JobState::Running;
    job.start_time = Some(100);
    job.gpus_alloc = vec![0, 1];
    job.node = Some(node.into());
    job
}
