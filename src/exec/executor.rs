//! The seam between the daemon and everything that touches processes,
//! cgroups, devices and signals: "run this job on this node" is one call,
//! and so is each thing the daemon asks of a running job. The daemon owns
//! the decisions and the records; an executor carries them out and says
//! what happened.
//!
//! [`super::local::LocalExecutor`] runs jobs on this host (the fork
//! server, a `ysstepd` supervisor per job, cgroups);
//! [`super::fake::FakeExecutor`] runs nothing and ends jobs when a test
//! says so. A node agent on another server is a third implementation:
//! every call may fail with [`ExecError::Unreachable`], and a job whose
//! node does not answer is one the daemon cannot yet account, never one
//! it forgets.

use crate::gpu::Inventory;
use crate::model::job::{Job, JobId};

pub use super::container::pulls::ImageStatus;
use super::error::ExecError;
use super::spec::{ExitRecord, StepCommand};

/// What a node has and how it confines jobs.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NodeFacts {
    pub name: String,
    pub inventory: Inventory,
    pub cpus: u32,
    pub mem_mb: u64,
    /// The size of its temporary filesystem (`/tmp`), MiB: Slurm's
    /// TmpDisk, what `--tmp` is held against.
    #[serde(default)]
    pub tmp_mb: u64,
    pub isolation: IsolationFacts,
    /// Whether jobs can run in container images here (crun and podman
    /// are installed).
    #[serde(default)]
    pub containers: bool,
}

/// How a node confines its jobs.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IsolationFacts {
    /// In words, for the log and `ysinfo`: what was found and chosen.
    pub description: String,
    /// Limits this node cannot enforce.
    pub missing: Vec<String>,
    /// Whether jobs are confined at all (memory, CPUs, devices).
    pub confined: bool,
    /// Whether a running job can be suspended where it is (its group
    /// frozen, keeping its GPUs and their memory).
    pub can_suspend: bool,
}

/// One job to start: the record with its allocation, and what the daemon
/// keeps apart from it (the script and its arguments, the environment it
/// was submitted with, its user's home and shell).
#[derive(Clone, Copy, Debug)]
pub struct Launch<'a> {
    pub job: &'a Job,
    pub script: &'a str,
    pub args: &'a [String],
    pub environment: &'a [(String, String)],
    pub home: &'a std::path::Path,
    pub shell: &'a std::path::Path,
    /// Its place among the job's nodes (`None`: one node, one task).
    pub part: Option<&'a crate::model::tasks::NodePart>,
}

/// A job whose processes started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    /// The process that supervises it, for the log.
    pub supervisor_pid: i32,
}

/// What a restarted daemon finds of a job it had started.
#[derive(Debug, PartialEq)]
pub enum Adoption {
    /// Still running: its exit will be reported.
    Alive { supervisor_pid: i32 },
    /// It ended while the daemon was away; here is how.
    Exited(ExitRecord),
    /// It died without a record after its script started.
    Lost,
    /// Its script was never started (the daemon died while launching).
    NeverStarted,
    /// Its node did not answer: ask again later.
    Unreachable(String),
}

/// Carries out what the daemon decided. Exits are reported through the
/// callback each implementation is made with, once per job, as events of
/// the daemon's loop; the calls below never block for long.
pub trait Executor: Send {
    /// The node this executor runs jobs on.
    fn node(&self) -> &NodeFacts;

    /// Where the job's processes will be confined (its cgroup), recorded
    /// with the job when it is marked running.
    fn confinement_of(&self, job: JobId) -> Option<String>;

    /// Starts the job's processes. Nothing of it runs on `Err`.
    fn launch(&mut self, launch: Launch<'_>) -> Result<Started, ExecError>;

    /// Delivers a command to a running job: a signal, or terminate with a
    /// grace. `ExecError::Gone` when the job ended already (its exit is on
    /// the way).
    fn command(&self, job: JobId, command: &StepCommand) -> Result<(), ExecError>;

    /// Freezes a running job where it is, or thaws it.
    fn set_frozen(&self, job: JobId, frozen: bool) -> Result<(), ExecError>;

    /// How the job ended, once it has.
    fn exit_of(&self, job: JobId) -> Option<ExitRecord>;

    /// Finds a job again after a daemon restart.
    fn adopt(&mut self, job: JobId) -> Adoption;

    /// Ends whatever is left of a job whose supervisor is gone and
    /// releases its confinement; how many processes were left.
    fn clear_remains(&self, job: JobId) -> usize;

    /// Removes what the executor kept for a job whose end is recorded.
    fn forget(&self, job: JobId);

    /// Jobs that left confinement groups behind (to clear at start).
    fn leftovers(&self) -> Vec<JobId>;

    /// Where container image `reference` stands on this node; a pull
    /// starts in the background when it is needed. An executor that
    /// cannot pull ahead says ready: its runs pull when they start.
    fn ensure_image(&self, _reference: &str) -> ImageStatus {
        ImageStatus::Ready
    }
}

impl std::fmt::Debug for dyn Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Executor({})", self.node().name)
    }
}
