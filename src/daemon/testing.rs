//! For the handlers' tests: a core built from a small config and the jobs
//! a test names, on a manual clock, and what a handler may read kept in
//! maps. No database, no executor.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::AtomicI64;
use std::sync::Arc;

use crate::config::Config;
use crate::model::gpu::Gpu;
use crate::model::job::{Job, JobId};

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
    let config = Config::parse(CONFIG, Path::new("test.toml")).expect("the test config");
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
/// of arrays, where jobs were submitted; every node has four A100s.
#[derive(Default)]
pub(super) struct Archive {
    pub(super) jobs: HashMap<JobId, Job>,
    pub(super) tasks: HashMap<(JobId, u32), JobId>,
    pub(super) submitted: HashMap<JobId, String>,
    /// Why no node can freeze a job, if none can.
    pub(super) cannot_freeze: Option<String>,
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
        let config = Config::parse(CONFIG, Path::new("test.toml")).expect("the test config");
        crate::gpu::Inventory::declared(&config).gpus
    }

    fn checkpoint_file_time(&self, _job: &Job) -> Option<i64> {
        None
    }

    fn total_gpus(&self) -> u32 {
        4
    }

    fn freezable(&self, _job: &Job) -> Result<(), Refusal> {
        self.cannot_freeze
            .clone()
            .map_or(Ok(()), |why| Err(Refusal(why)))
    }
}
