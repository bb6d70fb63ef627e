//! The files in a job's directory (`SPOOL/jobs/<id>/`), shared by the daemon
//! and the job's supervisor:
//!
//! ```text
//! spec.json     0600 root  what to run, written by the daemon before launch
//! script        0500 user  the job script (the only file its user may read)
//! lock          0600 root  flock'ed by the daemon, then held by the supervisor for its life
//! control.sock       root  datagram socket the supervisor reads commands from
//! state.json    0600 root  the supervisor's and the job's pids (in a container, the supervisor's first)
//! exit.json     0600 root  how the job ended, written by the supervisor as it exits
//! ```

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::cgroup::{Limits, Placement, Usage};
use crate::model::job::{ExitStatus, JobId};

pub const SPEC: &str = "spec.json";
pub const SCRIPT: &str = "script";
pub const LOCK: &str = "lock";
pub const CONTROL: &str = "control.sock";
pub const STATE: &str = "state.json";
pub const EXIT: &str = "exit.json";

/// Everything the supervisor needs to run the job, resolved by the daemon.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaunchSpec {
    pub job_id: JobId,
    pub name: String,
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
    pub shell: PathBuf,
    pub account: String,
    pub qos: String,
    pub restart_count: u32,
    pub gpus: Vec<u32>,
    pub node_name: String,
    pub work_dir: PathBuf,
    pub submit_dir: PathBuf,
    pub stdout: PathBuf,
    /// `None`: stderr goes to the stdout file.
    pub stderr: Option<PathBuf>,
    pub open_append: bool,
    pub environment: Vec<(String, String)>,
    pub args: Vec<String>,
    pub cpus: u32,
    pub mem_mb: Option<u64>,
    pub time_limit: Option<u64>,
    pub submit_time: i64,
    /// Drop to `uid`/`gid` before running (false in personal mode, where the
    /// supervisor already is that user).
    pub switch_user: bool,
    /// The job's cgroup: where, and what it enforces.
    pub cgroup: Placement,
    pub limits: Limits,
    /// The cgroup confines the job to its GPUs, so CUDA numbers them from 0.
    pub gpus_confined: bool,
    /// Set for a task of a job array.
    #[serde(default)]
    pub array: Option<crate::model::job::ArrayTask>,
    /// Shard slots of its one GPU, for a `--gpus shard:N` job.
    #[serde(default)]
    pub shards: Option<u32>,
    /// On a pool's node: the node's lease (see `exec::lease`); the job is
    /// killed when it runs out.
    #[serde(default)]
    pub lease_file: Option<PathBuf>,
    /// It starts beyond its account's guarantee (elastic quotas): the
    /// first to be reclaimed (`YS_BORROWED=1`).
    #[serde(default)]
    pub borrowed: bool,
    /// Its place among the job's nodes (`None`: one node, one task).
    #[serde(default)]
    pub part: Option<crate::model::tasks::NodePart>,
    /// Run in a container image (`--container-image`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<super::container::ContainerLaunch>,
    /// Steps may run in container images (`srun --container-image`):
    /// this node has a runtime and runs jobs as their users.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_containers: Option<super::container::ContainerSite>,
}

/// What the supervisor records about itself, for re-adoption.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SupervisorState {
    pub supervisor_pid: i32,
    /// Set once the job's process exists; its process group has the same id.
    pub job_pid: Option<i32>,
}

/// How the job ended, as its supervisor saw it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExitRecord {
    pub exit: ExitStatus,
    pub end_time: i64,
    /// Why the script could not be started (then `exit` is 0:0 and meaningless).
    pub launch_error: Option<String>,
    /// The daemon asked for the job to be terminated before it ended.
    pub terminated: bool,
    /// What its cgroup measured (all empty without one).
    #[serde(default)]
    pub usage: Usage,
    /// Processes of the job that SIGKILL did not end (stuck in the
    /// kernel): the node should take no new job until someone looks.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stuck: usize,
    /// The image it ran in, for a job in a container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<crate::model::container::ImageRecord>,
    /// Why its node ended it for a fence (its lease ran out and it could
    /// not be frozen, or it stayed frozen past `frozen_limit`): the job
    /// ends NODE_FAIL, requeued unless it asked not to be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fenced: Option<String>,
    /// How long (seconds, by its node's count) it stood frozen for its
    /// node's lost lease when it ended, if it ended so frozen: a freeze
    /// no heartbeat can report any more, told with the end. Its agent
    /// adds it; the controller credits it, bounded by its own measure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence_frozen_secs: Option<u64>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Which of a job's processes a signal reaches (Slurm's `--signal` and
/// `scancel --batch`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignalTarget {
    /// Every process of the job.
    #[default]
    Job,
    /// The batch shell alone (`B:`).
    BatchShell,
    /// Every process but the batch shell: what the script started (the
    /// steps, in Slurm's words).
    Steps,
    /// One process of the job (a step's srun, which passes the signal on
    /// to its tasks); nothing if that process is not the job's.
    Process(u32),
    /// The processes of the job's step N (those started with its
    /// `SLURM_STEP_ID`): a step of an interactive allocation, whose srun
    /// runs outside the job.
    Step(u32),
}

impl SignalTarget {
    /// Where a job's `--signal` goes.
    pub fn of_warning(batch_only: bool) -> SignalTarget {
        if batch_only {
            SignalTarget::BatchShell
        } else {
            SignalTarget::Steps
        }
    }

    fn is_job(&self) -> bool {
        *self == SignalTarget::Job
    }
}

/// Commands the daemon sends to a supervisor's control socket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepCommand {
    /// SIGCONT to the whole job and SIGTERM (or `signal`, to `target`),
    /// SIGKILL to the whole job after `grace_secs`.
    Terminate {
        grace_secs: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        #[serde(default, skip_serializing_if = "SignalTarget::is_job")]
        target: SignalTarget,
    },
    /// Deliver one signal to the job's processes that `target` names.
    Signal {
        signal: i32,
        #[serde(default, skip_serializing_if = "SignalTarget::is_job")]
        target: SignalTarget,
    },
}
