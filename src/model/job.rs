//! The job: what a user asked for (`JobRequest`), the record the daemon keeps
//! (`Job`), and the states a job moves through.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub type JobId = u64;

/// A map keyed by job id, hashed with rustc-hash's fast unkeyed hash: a
/// pass over 100,000 pending jobs keys several maps by every one of them,
/// and SipHash was a fifth of its time. Ids are the controller's own
/// counter, never chosen by a user, so there is no collision flood to
/// defend against here (maps keyed by what users send keep SipHash).
pub type IdMap<V> = rustc_hash::FxHashMap<JobId, V>;

/// What is wrong with a value of a job's request: a mail type, a
/// `--signal`, a `--constraint`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestValueError {
    #[error("unknown mail type '{0}' (allowed: NONE, BEGIN, END, FAIL, REQUEUE, TIME_LIMIT, ALL)")]
    MailType(String),
    #[error("'{0}' after @ is not a number of seconds (0 to 65535)")]
    WarnBefore(String),
    #[error(transparent)]
    Signal(#[from] crate::model::units::UnitError),
    #[error("--constraint '{0}': an empty term (write FEATURE&gpumem>=SIZE)")]
    EmptyTerm(String),
    #[error("--constraint '{text}': gpumem: {source}")]
    GpuMemory {
        text: String,
        source: crate::model::units::UnitError,
    },
    #[error("--constraint '{text}': '{term}' is not understood; ysched takes features joined by '&' and gpumem>=SIZE")]
    NotUnderstood { text: String, term: String },
    #[error("--constraint '{text}': '{term}' is not a feature name")]
    NotAFeature { text: String, term: String },
}

/// Job states, with Slurm's names and compact codes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    #[default]
    Pending,
    Running,
    /// Signalled (cancel or time limit) and waiting for its processes to end;
    /// it still holds its GPUs.
    Completing,
    Completed,
    Failed,
    Cancelled,
    Timeout,
    /// The job's supervisor was lost (killed, or the machine failed) after the
    /// script had started; what the script did is unknown.
    NodeFail,
    /// The kernel's OOM killer killed a process of the job: it used more
    /// memory than its limit.
    OutOfMemory,
    /// Frozen by an administrator (`yscontrol suspend`); it keeps its GPUs.
    Suspended,
    /// Stopped for a higher-priority job and not requeued (its QoS's
    /// preempt_mode is cancel, or it was submitted with --no-requeue).
    Preempted,
}

impl JobState {
    pub const ALL: [JobState; 11] = [
        JobState::Pending,
        JobState::Running,
        JobState::Completing,
        JobState::Completed,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Timeout,
        JobState::NodeFail,
        JobState::OutOfMemory,
        JobState::Suspended,
        JobState::Preempted,
    ];

    pub fn name(self) -> &'static str {
        match self {
            JobState::Pending => "PENDING",
            JobState::Running => "RUNNING",
            JobState::Completing => "COMPLETING",
            JobState::Completed => "COMPLETED",
            JobState::Failed => "FAILED",
            JobState::Cancelled => "CANCELLED",
            JobState::Timeout => "TIMEOUT",
            JobState::NodeFail => "NODE_FAIL",
            JobState::OutOfMemory => "OUT_OF_MEMORY",
            JobState::Suspended => "SUSPENDED",
            JobState::Preempted => "PREEMPTED",
        }
    }

    pub fn compact(self) -> &'static str {
        match self {
            JobState::Pending => "PD",
            JobState::Running => "R",
            JobState::Completing => "CG",
            JobState::Completed => "CD",
            JobState::Failed => "F",
            JobState::Cancelled => "CA",
            JobState::Timeout => "TO",
            JobState::NodeFail => "NF",
            JobState::OutOfMemory => "OOM",
            JobState::Suspended => "S",
            JobState::Preempted => "PR",
        }
    }

    /// Accepts a state's name or compact code, in any case (`-t R`, `-t running`).
    pub fn parse(text: &str) -> Option<JobState> {
        let t = text.trim().to_ascii_uppercase();
        JobState::ALL
            .into_iter()
            .find(|s| s.name() == t || s.compact() == t)
            .or(match t.as_str() {
                "CANCELED" => Some(JobState::Cancelled),
                _ => None,
            })
    }

    /// Still in the queue: pending, running, or finishing.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            JobState::Pending | JobState::Running | JobState::Completing | JobState::Suspended
        )
    }

    pub fn holds_gpus(self) -> bool {
        matches!(
            self,
            JobState::Running | JobState::Completing | JobState::Suspended
        )
    }

    pub fn can_cancel(self) -> bool {
        matches!(
            self,
            JobState::Pending | JobState::Running | JobState::Suspended
        )
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Who put a hold on a pending job; a user may release only their own hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hold {
    User,
    Admin,
    /// Waits for a coordinator of its account to approve it.
    Approval,
}

impl Hold {
    pub fn name(self) -> &'static str {
        match self {
            Hold::User => "user",
            Hold::Admin => "admin",
            Hold::Approval => "approval",
        }
    }

    pub fn parse(text: &str) -> Option<Hold> {
        match text {
            "user" => Some(Hold::User),
            "admin" => Some(Hold::Admin),
            "approval" => Some(Hold::Approval),
            _ => None,
        }
    }
}

/// GPUs a job asks for: a count, and optionally one type.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GpuRequest {
    pub count: u32,
    pub gpu_type: Option<String>,
    /// `--gpus shard:N`: `count` slots of one shareable GPU (Slurm's
    /// `shard`), not `count` whole GPUs.
    #[serde(default)]
    pub shard: bool,
    /// `--constraint`: what each of its GPUs must have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraint: Option<GpuConstraint>,
}

impl GpuRequest {
    /// Whole GPUs the job keeps from other jobs: a shard job keeps the one
    /// card it shares from whole-GPU jobs.
    /// The same request `nodes` times over (a job's, from a node's).
    pub fn times(&self, nodes: u32) -> GpuRequest {
        GpuRequest {
            count: self.count * nodes,
            ..self.clone()
        }
    }

    pub fn gpus_held(&self) -> u32 {
        if self.shard {
            u32::from(self.count > 0)
        } else {
            self.count
        }
    }

    /// Whether a GPU of `gpu`'s kind can serve this request.
    pub fn accepts(&self, gpu: &super::gpu::Gpu) -> bool {
        self.gpu_type.as_ref().is_none_or(|t| *t == gpu.gpu_type)
            && (!self.shard || gpu.shards > 0)
            && self.constraint.as_ref().is_none_or(|c| c.accepts(gpu))
    }
}

impl fmt::Display for GpuRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.shard { "shard" } else { "gpu" };
        match &self.gpu_type {
            Some(t) => write!(f, "{kind}:{t}:{}", self.count),
            None => write!(f, "{kind}:{}", self.count),
        }
    }
}

/// Slurm's `--mail-type`: the job events its user wants to hear of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MailTypes(u8);

impl rusqlite::ToSql for MailTypes {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(self.0.into())
    }
}

impl rusqlite::types::FromSql for MailTypes {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        let bits = value.as_i64()?;
        u8::try_from(bits)
            .ok()
            .filter(|b| b & !31 == 0)
            .map(MailTypes)
            .ok_or(rusqlite::types::FromSqlError::OutOfRange(bits))
    }
}

impl MailTypes {
    pub const BEGIN: MailTypes = MailTypes(1);
    pub const END: MailTypes = MailTypes(2);
    pub const FAIL: MailTypes = MailTypes(4);
    pub const REQUEUE: MailTypes = MailTypes(8);
    pub const TIME_LIMIT: MailTypes = MailTypes(16);
    const NAMES: [(&'static str, MailTypes); 5] = [
        ("BEGIN", MailTypes::BEGIN),
        ("END", MailTypes::END),
        ("FAIL", MailTypes::FAIL),
        ("REQUEUE", MailTypes::REQUEUE),
        ("TIME_LIMIT", MailTypes::TIME_LIMIT),
    ];

    /// `END,FAIL`, `ALL`, `NONE`, case-insensitive.
    pub fn parse(text: &str) -> Result<MailTypes, RequestValueError> {
        let mut types = MailTypes::default();
        for word in text.split(',').map(str::trim) {
            let upper = word.to_ascii_uppercase();
            match upper.as_str() {
                "NONE" => types = MailTypes::default(),
                "ALL" => types.0 |= 31,
                _ => match MailTypes::NAMES.iter().find(|(n, _)| *n == upper) {
                    Some((_, t)) => types.0 |= t.0,
                    None => return Err(RequestValueError::MailType(word.to_string())),
                },
            }
        }
        Ok(types)
    }

    pub fn is_empty(&self) -> bool {
        self.0 == 0
    }

    /// Raw bits, as a hand-written request may carry them.
    pub fn from_bits(bits: u8) -> MailTypes {
        MailTypes(bits)
    }

    /// Only the five known events' bits are set.
    pub fn is_valid(self) -> bool {
        self.0 & !31 == 0
    }

    pub fn contains(self, other: MailTypes) -> bool {
        self.0 & other.0 == other.0 && other.0 != 0
    }

    /// What `ysacct -o MailType` shows: `END,FAIL`, or `NONE`.
    pub fn names(self) -> String {
        let names: Vec<&str> = MailTypes::NAMES
            .iter()
            .filter(|(_, t)| self.contains(*t))
            .map(|(n, _)| *n)
            .collect();
        if names.is_empty() {
            "NONE".into()
        } else {
            names.join(",")
        }
    }
}

/// `--signal=[B:]SIG[@SECONDS]`: a signal the job gets SECONDS (default
/// 60) before its time limit, and at once when it is preempted, before
/// SIGTERM. As in Slurm, without `B:` it goes to the job's steps (every
/// process of the job but the batch shell), with `B:` to the batch shell
/// alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarnSignal {
    pub signal: i32,
    pub before_secs: u32,
    /// `B:`: the batch shell only.
    #[serde(default)]
    pub batch_only: bool,
}

impl WarnSignal {
    pub fn parse(text: &str) -> Result<WarnSignal, RequestValueError> {
        let t = text.trim();
        // Slurm's prefixes: B: the batch shell; R: (reservations) changes
        // nothing here.
        let (batch_only, t) = match t.split_once(':') {
            Some(("B" | "RB" | "BR", rest)) => (true, rest),
            Some(("R", rest)) => (false, rest),
            _ => (false, t),
        };
        let (sig, before) = match t.split_once('@') {
            Some((s, b)) => (
                s,
                b.trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|&b| b <= 65_535)
                    .ok_or_else(|| RequestValueError::WarnBefore(b.to_string()))?,
            ),
            None => (t, 60),
        };
        Ok(WarnSignal {
            signal: crate::model::units::parse_signal(sig)?,
            before_secs: before,
            batch_only,
        })
    }
}

impl fmt::Display for WarnSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}@{}",
            if self.batch_only { "B:" } else { "" },
            crate::model::units::signal_name(self.signal),
            self.before_secs
        )
    }
}

/// `--constraint` on GPUs: features every GPU must have (`nvlink`, names
/// from the config's `features`) and a least memory (`gpumem>=40G`),
/// joined by `&`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GpuConstraint {
    pub features: Vec<String>,
    pub min_memory_mb: Option<u64>,
}

impl GpuConstraint {
    pub fn parse(text: &str) -> Result<GpuConstraint, RequestValueError> {
        let mut c = GpuConstraint::default();
        for term in text.split('&').map(str::trim) {
            if term.is_empty() {
                return Err(RequestValueError::EmptyTerm(text.to_string()));
            }
            if let Some(size) = term.strip_prefix("gpumem>=") {
                let mb = crate::model::units::parse_memory_mb(size).map_err(|source| {
                    RequestValueError::GpuMemory {
                        text: text.to_string(),
                        source,
                    }
                })?;
                c.min_memory_mb = Some(c.min_memory_mb.map_or(mb, |m| m.max(mb)));
            } else if term.contains(['|', '=', '<', '>', '[', ']', '*', '(', ')']) {
                return Err(RequestValueError::NotUnderstood {
                    text: text.to_string(),
                    term: term.to_string(),
                });
            } else if term
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
            {
                if !c.features.iter().any(|f| f == term) {
                    c.features.push(term.to_string());
                }
            } else {
                return Err(RequestValueError::NotAFeature {
                    text: text.to_string(),
                    term: term.to_string(),
                });
            }
        }
        Ok(c)
    }

    pub fn accepts(&self, gpu: &super::gpu::Gpu) -> bool {
        self.min_memory_mb.is_none_or(|m| gpu.memory_mb >= m)
            && self.features.iter().all(|f| gpu.features.contains(f))
    }
}

impl fmt::Display for GpuConstraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut terms: Vec<String> = self.features.clone();
        if let Some(mb) = self.min_memory_mb {
            terms.push(format!(
                "gpumem>={}",
                crate::model::units::format_memory_mb(mb)
            ));
        }
        f.write_str(&terms.join("&"))
    }
}

/// A job that is one task of an array.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayTask {
    /// The array's id: the id of its first task.
    pub job_id: JobId,
    pub task_id: u32,
    /// The array's `--array`, in canonical form.
    pub spec: String,
}

/// Variables that set up ysched's own commands, not facts of a job: they
/// pass, so that `ysbatch` or `yscontrol` inside a job talk to the daemon
/// that runs it.
pub const CLIENT_SETTINGS: [&str; 3] = ["YS_CONF", "YS_TIMEOUT", "YS_LOG"];

/// Whether variable `key` of a submitter's environment is the
/// submitter's own, passed on to the job: not a fact or a secret of the
/// run it was submitted from (`SLURM_*`, `YS_*` such as that run's step
/// key, step ports and node addresses, `CUDA_VISIBLE_DEVICES`), which a
/// job gets anew from its own run, nor the submitter's token
/// (`SLURM_JWT`); ysched's client settings pass, and the submitter's
/// umask (`SLURM_UMASK`), which the job runs with.
pub fn passes_to_job(key: &str) -> bool {
    CLIENT_SETTINGS.contains(&key)
        || key == "SLURM_UMASK"
        || (!key.starts_with("SLURM_") && !key.starts_with("YS_") && key != "CUDA_VISIBLE_DEVICES")
}

/// Everything a submission carries, resolved by `ysbatch` from the script's
/// directives and its command line. Identity is not in here: the daemon takes
/// it from the spool file's owner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRequest {
    pub name: String,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub gpus: GpuRequest,
    pub cpus: u32,
    /// Memory in MiB; `None` when not asked for.
    pub mem_mb: Option<u64>,
    /// Seconds. Outer `None`: not given (the config's default applies);
    /// `Some(None)`: UNLIMITED asked for explicitly (on the wire, the
    /// string "UNLIMITED": JSON's null cannot tell the two apart).
    #[serde(default, with = "time_request")]
    pub time_limit: Option<Option<u64>>,
    /// Output file pattern (`%j` etc.), relative to `work_dir` unless absolute.
    pub output: Option<String>,
    pub error: Option<String>,
    pub open_append: bool,
    pub work_dir: PathBuf,
    pub submit_dir: PathBuf,
    pub environment: Vec<(String, String)>,
    pub hold: bool,
    pub begin_time: Option<i64>,
    pub comment: Option<String>,
    /// Lowers its priority by this much (negative: raises it; admins only).
    #[serde(default)]
    pub nice: i64,
    /// `--dependency`, in Slurm's syntax (checked by the daemon again).
    #[serde(default)]
    pub dependency: Option<String>,
    /// `--array`, in canonical form (checked by the daemon again).
    #[serde(default)]
    pub array: Option<String>,
    /// `--no-requeue`: cancel it, rather than requeue it, when preempted.
    #[serde(default)]
    pub no_requeue: bool,
    /// `--signal`.
    #[serde(default)]
    pub warn_signal: Option<WarnSignal>,
    /// `--checkpoint-file`.
    #[serde(default)]
    pub checkpoint_file: Option<String>,
    /// `--grace`: a shorter grace than its QoS's when preempted.
    #[serde(default)]
    pub grace: Option<u64>,
    /// `--mail-type`: which of its events are sent to `notify_command`.
    #[serde(default)]
    pub mail_type: MailTypes,
    /// `--mail-user`: who is told (default: the job's user).
    #[serde(default)]
    pub mail_user: Option<String>,
    /// `--exclusive`: the whole server (the daemon, which knows it, turns
    /// this into all its CPUs, memory and GPUs).
    #[serde(default)]
    pub exclusive: bool,
    /// `-w/--nodelist`: the node it must run on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodelist: Vec<String>,
    /// `-x/--exclude`: nodes it must not run on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// `--tmp`: MiB of temporary disk each node must have (its TmpDisk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp_mb: Option<u64>,
    /// `-N`, `--ntasks` and the like; GPUs, CPUs and memory are per node.
    #[serde(default)]
    pub tasks: super::tasks::TaskLayout,
    /// `--container-image` and the other `--container-*` options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<super::container::ContainerRequest>,
    pub script: String,
    pub args: Vec<String>,
    /// `--test-only`: judge it and say when it would start; store nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub test_only: bool,
    /// An interactive allocation (`salloc`, `srun` outside a job): no
    /// script runs; its nodes serve the steps its user starts.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interactive: bool,
}

impl JobRequest {
    /// Keeps of its environment what is the submitter's own
    /// ([`passes_to_job`]): nothing of the run it was submitted from is
    /// stored with the job, or seen by whoever may read it.
    pub fn keep_submitters_environment(&mut self) {
        self.environment.retain(|(k, _)| passes_to_job(k));
    }
}

/// How a job's process ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitStatus {
    pub code: i32,
    pub signal: i32,
}

impl ExitStatus {
    /// As a container runtime reports it: it exits with 128 + N when the
    /// container's process was killed by signal N (as a shell does).
    pub fn of_runtime(self) -> ExitStatus {
        match self.code {
            129..=192 if self.signal == 0 => ExitStatus {
                code: 0,
                signal: self.code - 128,
            },
            _ => self,
        }
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.code, self.signal)
    }
}

/// The record the daemon keeps of a job, one row of the `jobs` table.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    pub uid: u32,
    pub gid: u32,
    pub user: String,
    pub account: String,
    pub qos: String,
    pub name: String,
    pub state: JobState,
    pub hold: Option<Hold>,
    pub gpus: GpuRequest,
    pub cpus: u32,
    pub mem_mb: Option<u64>,
    pub time_limit: Option<u64>,
    pub submit_time: i64,
    pub begin_time: Option<i64>,
    pub start_time: Option<i64>,
    pub end_time: Option<i64>,
    /// Its GPUs while or after it ran, as its node numbers them.
    pub gpus_alloc: Vec<u32>,
    /// The node it runs or ran on; for a pending job that preempted
    /// others, the node of its claim.
    pub node: Option<String>,
    pub exit: Option<ExitStatus>,
    pub restart_count: u32,
    /// Measured by the job's cgroup, when it had one.
    pub max_rss_bytes: Option<u64>,
    pub cpu_usec: Option<u64>,
    /// The job's cgroup, as shown to its user.
    pub cgroup: Option<String>,
    /// Seconds spent suspended (not counted against the time limit), and
    /// since when it is suspended now.
    pub suspended_secs: u64,
    pub suspended_at: Option<i64>,
    /// Subtracted from its priority (`--nice`).
    pub nice: i64,
    /// Billing-seconds charged to its account when it ended.
    pub billing: Option<i64>,
    /// `--dependency`, in canonical form; kept after it is satisfied.
    pub dependency: Option<String>,
    /// Set on each task of a job array.
    pub array: Option<ArrayTask>,
    /// Who approved it, for a job that needed approval.
    pub approved_by: Option<String>,
    /// Why a finished job failed where the exit code does not say (a launch
    /// error, a lost supervisor), or what ended a completing one.
    pub reason: Option<String>,
    /// While COMPLETING: the state it will end in (CANCELLED or TIMEOUT).
    pub kill_reason: Option<JobState>,
    pub work_dir: PathBuf,
    pub submit_dir: PathBuf,
    pub std_out: String,
    pub std_err: Option<String>,
    pub open_append: bool,
    pub comment: Option<String>,
    /// Set while it is being preempted: the job that needs its resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_by: Option<JobId>,
    /// A pending job that preempted others: the GPUs kept for it while
    /// they stop, which no other job may take.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claim: Vec<u32>,
    /// How many times it was preempted.
    #[serde(default)]
    pub preempt_count: u32,
    /// `--no-requeue`: cancelled, not requeued, when preempted.
    #[serde(default)]
    pub no_requeue: bool,
    /// When the running job last reported a checkpoint (`yscontrol
    /// checkpoint`): preempting it loses only what it did since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_at: Option<i64>,
    /// A priority set with `yscontrol update priority=`, in place of the
    /// multifactor one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_override: Option<i64>,
    /// `--signal`: warned before its time limit and when preempted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warn_signal: Option<WarnSignal>,
    /// `--checkpoint-file`: the job rewrites it at each checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_file: Option<String>,
    /// `--grace`: seconds from SIGTERM to SIGKILL when preempted, if
    /// shorter than its QoS's grace_time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace: Option<u64>,
    /// GPU-seconds used over all its runs (a preempted job runs several).
    #[serde(default)]
    pub gpu_seconds: i64,
    /// Its GPUs' utilisation, sampled while it ran (none without a driver).
    #[serde(default)]
    pub gpu_usage: super::gpu::JobGpuUsage,
    /// How many running jobs it preempted to start.
    #[serde(default)]
    pub preemptions_caused: u32,
    /// `--mail-type`: which of its events are sent to `notify_command`.
    #[serde(default, skip_serializing_if = "MailTypes::is_empty")]
    pub mail_type: MailTypes,
    /// `--mail-user`: who is told (default: the job's user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mail_user: Option<String>,
    /// `-w/--nodelist`: the node it must run on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodelist: Vec<String>,
    /// `-x/--exclude`: nodes it must not run on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// While it runs: it takes its account beyond its guarantee, on GPUs
    /// other accounts lend (elastic quotas), and is the first to give
    /// them back.
    #[serde(default)]
    pub borrowed: bool,
    /// `-N`, `--ntasks` and the like; `gpus`, `cpus` and `mem_mb` are per
    /// node.
    #[serde(default)]
    pub tasks: super::tasks::TaskLayout,
    /// While it holds resources on several nodes: the nodes after the
    /// first (`node`, where its batch script runs), in order. Its
    /// `gpus_alloc` is each node's GPUs in turn, `gpus.count` per node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
    /// `--container-image` and the other `--container-*` options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<super::container::ContainerRequest>,
    /// The image its last run resolved `container` to, on its node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<super::container::ImageRecord>,
    /// An interactive allocation (`salloc`, `srun` outside a job): every
    /// node runs a task server for its user's steps, none a script.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interactive: bool,
    /// How many of its runs in a row were requeued within
    /// `QUICK_RUN_SECS` of their start (preemptions aside): each waits
    /// longer before it may run again, and too many hold the job.
    #[serde(default)]
    pub quick_requeues: u32,
}

impl Job {
    /// The nodes it holds (or held), the batch node first.
    pub fn node_names(&self) -> impl Iterator<Item = &str> {
        self.node
            .as_deref()
            .into_iter()
            .chain(self.peers.iter().map(String::as_str))
    }

    /// Whether it holds (or held) resources on node `name`.
    pub fn runs_on(&self, name: &str) -> bool {
        self.node_names().any(|n| n == name)
    }

    /// Its nodes in Slurm's compressed form (`gpu[01-03]`).
    pub fn nodelist(&self) -> String {
        super::hostlist::compress(&self.node_names().collect::<Vec<_>>())
    }

    /// How many nodes it holds, or will ask for at least.
    pub fn node_count(&self) -> u32 {
        match &self.node {
            Some(_) if self.state.holds_gpus() || self.start_time.is_some() => {
                1 + self.peers.len() as u32
            }
            _ => self.tasks.nodes_min,
        }
    }

    /// Each of its nodes with the GPUs it holds there (that node's own
    /// numbers), the batch node first.
    pub fn gpus_by_node(&self) -> Vec<(&str, &[u32])> {
        let nodes: Vec<&str> = self.node_names().collect();
        if nodes.len() <= 1 {
            return nodes
                .into_iter()
                .map(|n| (n, self.gpus_alloc.as_slice()))
                .collect();
        }
        let per_node = self.gpus_alloc.len() / nodes.len();
        nodes
            .into_iter()
            .enumerate()
            .map(|(i, n)| {
                let chunk = self.gpus_alloc.get(i * per_node..(i + 1) * per_node);
                (n, chunk.unwrap_or(&[]))
            })
            .collect()
    }

    /// Its part on its `index`th node: that node's name and GPUs in the
    /// record, and where the part stands among the job's nodes.
    pub fn part(&self, index: usize) -> Option<(Job, super::tasks::NodePart)> {
        let shares = self.gpus_by_node();
        let (name, gpus) = shares.get(index)?;
        let nodes: Vec<String> = shares.iter().map(|(n, _)| n.to_string()).collect();
        let mut share = self.clone();
        share.node = Some(name.to_string());
        share.gpus_alloc = gpus.to_vec();
        share.peers.clear();
        if index > 0 || self.interactive {
            // The task server writes nothing of its own; above all it must
            // not truncate the job's output file, which the nodes may
            // share (srun writes the tasks' output there).
            share.std_out = "/dev/null".into();
            share.std_err = None;
            share.open_append = true;
        }
        let part = super::tasks::NodePart {
            tasks_per_node: self.tasks.tasks_per_node(nodes.len() as u32),
            nodes,
            index: index as u32,
            gpus_per_task: self.tasks.gpus_per_task,
            addresses: Vec::new(),
            step_key: String::new(),
            ports: Default::default(),
            interactive: self.interactive,
        };
        Some((share, part))
    }

    /// Its part on node `name`, if it holds one there (itself, for a job
    /// on one node).
    pub fn share_on(&self, name: &str) -> Option<std::borrow::Cow<'_, Job>> {
        if self.peers.is_empty() {
            return (self.node.as_deref() == Some(name))
                .then_some(std::borrow::Cow::Borrowed(self));
        }
        let index = self.node_names().position(|n| n == name)?;
        self.part(index)
            .map(|(share, _)| std::borrow::Cow::Owned(share))
    }

    /// The GPUs it asks for over all its nodes (at the fewest nodes).
    pub fn gpus_wanted(&self) -> u32 {
        self.gpus.gpus_held() * self.tasks.nodes_min
    }

    /// Its GPU request for the whole job (per node times nodes).
    pub fn gpus_for_job(&self) -> GpuRequest {
        self.gpus.times(self.tasks.nodes_min)
    }

    /// The id users see: `12_3` for task 3 of array 12, else the id.
    pub fn display_id(&self) -> String {
        let mut id = String::new();
        self.write_display_id(&mut id);
        id
    }

    /// As `display_id`, appended to `out`.
    pub fn write_display_id(&self, out: &mut String) {
        use std::fmt::Write as _;
        // Writing to a String cannot fail.
        let _ = match &self.array {
            Some(a) => write!(out, "{}_{}", a.job_id, a.task_id),
            None => write!(out, "{}", self.id),
        };
    }

    /// When a running job reaches its time limit: its start, plus its
    /// limit, plus the time it spent suspended. `None` without a limit or
    /// while suspended.
    /// When a running job with `--signal` gets its warning.
    pub fn warn_at(&self) -> Option<i64> {
        if self.state != JobState::Running {
            return None;
        }
        Some(self.deadline()? - i64::from(self.warn_signal?.before_secs))
    }

    pub fn deadline(&self) -> Option<i64> {
        if self.state != JobState::Running {
            return None;
        }
        Some(self.start_time? + self.time_limit? as i64 + self.suspended_secs as i64)
    }

    /// Seconds the job has run (to `now` while it runs).
    pub fn elapsed(&self, now: i64) -> u64 {
        match self.start_time {
            Some(start) => (self.end_time.unwrap_or(now) - start).max(0) as u64,
            None => 0,
        }
    }

    /// The output file path with its `%` patterns expanded.
    pub fn stdout_path(&self) -> PathBuf {
        self.expand_path(&self.std_out)
    }

    /// The checkpoint file's path, patterns expanded.
    pub fn checkpoint_path(&self) -> Option<PathBuf> {
        self.checkpoint_file.as_deref().map(|p| self.expand_path(p))
    }

    /// The error file path; `None` when stderr goes with stdout.
    pub fn stderr_path(&self) -> Option<PathBuf> {
        self.std_err.as_deref().map(|p| self.expand_path(p))
    }

    fn expand_path(&self, pattern: &str) -> PathBuf {
        let expanded = expand_filename_pattern(
            pattern,
            self.id,
            self.array.as_ref().map(|a| (a.job_id, a.task_id)),
            &self.name,
            &self.user,
            self.node.as_deref(),
        );
        let path = PathBuf::from(expanded);
        if path.is_absolute() {
            path
        } else {
            self.work_dir.join(path)
        }
    }
}

/// Expands Slurm's filename patterns: `%j` job id, `%J` job id and step
/// (`42` for the batch script, `42.0` for a step), `%A` array id (the job
/// id outside arrays), `%a` task index (0 outside arrays), `%b` the task
/// index modulo 10, `%x` name, `%u` user, `%N` node, `%t` task and `%n`
/// node index (0: a job is one task on one node), `%s` step (`batch`, or
/// its number), `%%` a percent sign. An optional width between `%` and
/// the letter zero-pads numbers (`%5j` → `00042`, at most 10), and a
/// pattern with a backslash in it is taken as it is, backslashes
/// removed, as in Slurm.
pub fn expand_filename_pattern(
    pattern: &str,
    id: JobId,
    array: Option<(JobId, u32)>,
    name: &str,
    user: &str,
    node: Option<&str>,
) -> String {
    expand_step_pattern(pattern, id, None, array, name, user, node)
}

/// As [`expand_filename_pattern`], for step `step` of the job (`None`:
/// its batch script).
pub fn expand_step_pattern(
    pattern: &str,
    id: JobId,
    step: Option<u32>,
    array: Option<(JobId, u32)>,
    name: &str,
    user: &str,
    node: Option<&str>,
) -> String {
    let values = PatternValues {
        id,
        step,
        array,
        name,
        user,
        node,
        task: (0, 0),
    };
    expand_pattern(pattern, &values)
}

/// What a file name pattern's codes stand for.
pub struct PatternValues<'a> {
    pub id: JobId,
    pub step: Option<u32>,
    pub array: Option<(JobId, u32)>,
    pub name: &'a str,
    pub user: &'a str,
    pub node: Option<&'a str>,
    /// `%t` and `%n`: a step's task, and its node's index in the step.
    pub task: (u32, u32),
}

/// Whether `pattern` names a file per task or per node (`%t`, `%n`).
pub fn is_per_task_pattern(pattern: &str) -> bool {
    let probe = |task| PatternValues {
        id: 1,
        step: Some(0),
        array: None,
        name: "",
        user: "",
        node: None,
        task,
    };
    expand_pattern(pattern, &probe((0, 0))) != expand_pattern(pattern, &probe((1, 1)))
}

/// [`expand_step_pattern`] with every value given.
pub fn expand_pattern(pattern: &str, values: &PatternValues) -> String {
    let PatternValues {
        id,
        step,
        array,
        name,
        user,
        node,
        task: (task_id, node_index),
    } = *values;
    if pattern.contains('\\') {
        return pattern.replace('\\', "");
    }
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut width = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width.push(*d);
            chars.next();
        }
        let width: usize = width.parse().unwrap_or(0).min(10);
        let task = array.map_or(0, |a| a.1);
        match chars.next() {
            Some('%') => out.push('%'),
            Some('j') => out.push_str(&format!("{id:0width$}")),
            Some('J') => {
                out.push_str(&format!("{id:0width$}"));
                if let Some(s) = step {
                    out.push_str(&format!(".{s}"));
                }
            }
            Some('A') => out.push_str(&format!("{:0width$}", array.map_or(id, |a| a.0))),
            Some('a') => out.push_str(&format!("{task:0width$}")),
            Some('b') => out.push_str(&format!("{:0width$}", task % 10)),
            Some('x') => out.push_str(name),
            Some('u') => out.push_str(user),
            Some('N') => out.push_str(node.unwrap_or("")),
            Some('t') => out.push_str(&format!("{task_id:0width$}")),
            Some('n') => out.push_str(&format!("{node_index:0width$}")),
            Some('s') => match step {
                Some(s) => out.push_str(&format!("{s:0width$}")),
                None => out.push_str("batch"),
            },
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// A plain submission of one GPU, every field checked, for tests and the
/// controller's simulation to adapt.
pub(crate) fn example_request() -> JobRequest {
    JobRequest {
        name: "train".into(),
        account: None,
        qos: None,
        gpus: GpuRequest {
            count: 1,
            ..GpuRequest::default()
        },
        cpus: 1,
        mem_mb: None,
        time_limit: None,
        output: None,
        error: None,
        open_append: false,
        work_dir: "/tmp".into(),
        submit_dir: "/tmp".into(),
        environment: vec![("PATH".into(), "/bin".into())],
        hold: false,
        begin_time: None,
        comment: None,
        nice: 0,
        dependency: None,
        array: None,
        no_requeue: false,
        warn_signal: None,
        checkpoint_file: None,
        grace: None,
        mail_type: MailTypes::default(),
        mail_user: None,
        nodelist: Vec::new(),
        exclude: Vec::new(),
        tmp_mb: None,
        exclusive: false,
        tasks: super::tasks::TaskLayout::default(),
        container: None,
        script: "#!/bin/sh\ntrue\n".into(),
        args: Vec::new(),
        test_only: false,
        interactive: false,
    }
}

/// A pending job of alice's asking for two a100 GPUs, for tests to adapt.
#[cfg(test)]
pub(crate) fn example_job(id: JobId) -> Job {
    Job {
        id,
        uid: 1000,
        gid: 1000,
        user: "alice".into(),
        account: "vision".into(),
        qos: "medium".into(),
        name: "train".into(),
        gpus: GpuRequest {
            count: 2,
            gpu_type: Some("a100".into()),
            ..GpuRequest::default()
        },
        cpus: 4,
        mem_mb: Some(8192),
        time_limit: Some(1800),
        submit_time: 1_000,
        work_dir: "/home/alice".into(),
        submit_dir: "/home/alice".into(),
        std_out: "ys-%j.out".into(),
        comment: Some("first".into()),
        ..Job::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warn_signals_parse_as_slurm_writes_them() {
        let usr1 = libc::SIGUSR1;
        assert_eq!(
            WarnSignal::parse("B:USR1@120"),
            Ok(WarnSignal {
                signal: usr1,
                before_secs: 120,
                batch_only: true,
            })
        );
        assert_eq!(
            WarnSignal::parse("B:USR1@120").unwrap().to_string(),
            "B:USR1@120"
        );
        assert!(!WarnSignal::parse("USR2@90").unwrap().batch_only);
        assert!(!WarnSignal::parse("R:USR2@90").unwrap().batch_only);
        assert_eq!(WarnSignal::parse("10").unwrap().before_secs, 60);
        assert_eq!(
            WarnSignal::parse("SIGUSR1@0").unwrap().to_string(),
            "USR1@0"
        );
        assert!(WarnSignal::parse("USR1@soon")
            .unwrap_err()
            .to_string()
            .contains("'soon' after @"));
        assert!(WarnSignal::parse("NOPE").is_err());
    }

    #[test]
    fn a_job_over_several_nodes_is_cut_into_parts_that_leave_its_output_alone() {
        let mut job = example_job(9);
        job.node = Some("gpu01".into());
        job.peers = vec!["gpu02".into(), "gpu03".into()];
        job.gpus_alloc = vec![0, 1, 2, 3, 0, 1];
        job.state = JobState::Running;
        assert_eq!(job.nodelist(), "gpu[01-03]");
        assert_eq!(job.node_count(), 3);
        let (batch, part) = job.part(0).unwrap();
        assert_eq!(
            (batch.gpus_alloc, batch.std_out),
            (vec![0, 1], "ys-%j.out".to_string())
        );
        assert!(part.is_batch());
        let (peer, part) = job.part(2).unwrap();
        assert_eq!(peer.node.as_deref(), Some("gpu03"));
        assert_eq!(peer.gpus_alloc, vec![0, 1]);
        assert_eq!(
            (peer.std_out.as_str(), peer.open_append),
            ("/dev/null", true)
        );
        assert_eq!(part.index, 2);
        assert!(job.part(3).is_none());
        assert!(job.share_on("gpu02").is_some() && job.share_on("gpu09").is_none());
    }

    #[test]
    fn unlimited_survives_the_wire() {
        for limit in [None, Some(None), Some(Some(3_600))] {
            #[derive(Serialize, Deserialize)]
            struct T {
                #[serde(default, with = "time_request")]
                t: Option<Option<u64>>,
            }
            let json = serde_json::to_string(&T { t: limit }).unwrap();
            let back: T = serde_json::from_str(&json).unwrap();
            assert_eq!(back.t, limit, "{json}");
        }
        // What older clients wrote for "not given".
        #[derive(Deserialize)]
        struct T {
            #[serde(default, with = "time_request")]
            t: Option<Option<u64>>,
        }
        assert_eq!(serde_json::from_str::<T>(r#"{"t":null}"#).unwrap().t, None);
        assert_eq!(serde_json::from_str::<T>("{}").unwrap().t, None);
        assert!(serde_json::from_str::<T>(r#"{"t":"soon"}"#).is_err());
    }

    #[test]
    fn constraints_parse_and_print_back() {
        let c = GpuConstraint::parse("nvlink & gpumem>=40G&nvlink").unwrap();
        assert_eq!(c.features, vec!["nvlink".to_string()]);
        assert_eq!(c.min_memory_mb, Some(40_960));
        assert_eq!(GpuConstraint::parse(&c.to_string()).unwrap(), c);
        assert!(GpuConstraint::parse("a||b").is_err());
        assert!(GpuConstraint::parse("gpumem>=lots").is_err());
        assert!(GpuConstraint::parse("").is_err());
    }

    #[test]
    fn states_parse_by_name_and_code() {
        assert_eq!(JobState::parse("R"), Some(JobState::Running));
        assert_eq!(JobState::parse("pending"), Some(JobState::Pending));
        assert_eq!(JobState::parse("CA"), Some(JobState::Cancelled));
        assert_eq!(JobState::parse("canceled"), Some(JobState::Cancelled));
        assert_eq!(JobState::parse("BOGUS"), None);
    }

    #[test]
    fn filename_patterns() {
        let out = expand_filename_pattern(
            "logs/%x-%j-%u.%a.out",
            42,
            None,
            "yolo",
            "alice",
            Some("gpu01"),
        );
        assert_eq!(out, "logs/yolo-42-alice.0.out");
        assert_eq!(
            expand_filename_pattern("%5j_%%_%N", 42, None, "n", "u", Some("gpu01")),
            "00042_%_gpu01"
        );
        assert_eq!(
            expand_filename_pattern("x%q%", 1, None, "n", "u", None),
            "x%q%"
        );
        assert_eq!(
            expand_filename_pattern("%A_%a-%j-%3a", 45, Some((42, 3)), "n", "u", None),
            "42_3-45-003"
        );
        assert_eq!(
            expand_filename_pattern("w-%J-%b-%s.out", 7, Some((5, 13)), "n", "u", None),
            "w-7-3-batch.out",
            "dask-jobqueue's %J: one file per job"
        );
        assert_eq!(
            expand_step_pattern("%J_%s_%t", 7, Some(0), None, "n", "u", None),
            "7.0_0_0"
        );
        assert_eq!(
            expand_filename_pattern("raw\\%j.out", 7, None, "n", "u", None),
            "raw%j.out"
        );
    }
}

/// A time limit that may be absent, UNLIMITED, or seconds: `null` (or no
/// field), `"UNLIMITED"`, or a number on the wire.
pub mod time_request {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Wire {
        Seconds(u64),
        Word(String),
    }

    pub fn serialize<S: Serializer>(t: &Option<Option<u64>>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            None => s.serialize_none(),
            Some(None) => s.serialize_str("UNLIMITED"),
            Some(Some(secs)) => s.serialize_u64(*secs),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
        match Option::<Wire>::deserialize(d)? {
            None => Ok(None),
            Some(Wire::Seconds(secs)) => Ok(Some(Some(secs))),
            Some(Wire::Word(w)) if w == "UNLIMITED" => Ok(Some(None)),
            Some(Wire::Word(w)) => Err(serde::de::Error::custom(format!(
                "time limit '{w}': expected seconds or \"UNLIMITED\""
            ))),
        }
    }
}
