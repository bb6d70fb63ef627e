//! The messages that travel through the spool: one request type for
//! submissions, control requests and queries, and one reply type. Adding a
//! command means adding a variant here, and the compiler lists every place
//! that must handle it.

use serde::{Deserialize, Serialize};

use crate::array::JobRef;
use crate::model::job::{Job, JobId, JobRequest, JobState};
use crate::report::view::JobView;
use crate::report::Field;

/// Bumped when a message changes incompatibly; a daemon refuses other versions
/// with a message instead of misreading them.
pub const PROTOCOL_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub version: u32,
    pub request: Request,
    /// The sender's signed token (`SLURM_JWT`), where its identity must
    /// be proven beyond the kernel's word: on a pool's node, and for the
    /// web server, which asks on behalf of whoever the token names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The way the request came when not from a command (the audit log
    /// records it): `rest` or `portal`, with a token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<Channel>,
}

/// How a request reached the daemon, as the audit log names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// A command on this server (the socket or the spool).
    #[default]
    Cli,
    /// A command on a pool's node, passed on by its agent.
    Node,
    /// The JSON API of `yswebd`.
    Rest,
    /// The web portal of `yswebd`.
    Portal,
}

impl Channel {
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Cli => "cli",
            Channel::Node => "node",
            Channel::Rest => "rest",
            Channel::Portal => "portal",
        }
    }

    /// The channel a stored name stands for (`cli` for anything else:
    /// rows from before channels were recorded).
    pub fn from_name(name: &str) -> Channel {
        match name {
            "node" => Channel::Node,
            "rest" => Channel::Rest,
            "portal" => Channel::Portal,
            _ => Channel::Cli,
        }
    }
}

impl Envelope {
    pub fn new(request: Request) -> Envelope {
        Envelope {
            version: PROTOCOL_VERSION,
            request,
            token: None,
            channel: None,
        }
    }

    /// A request made on behalf of whoever `token` names, through `channel`.
    pub fn on_behalf(request: Request, token: String, channel: Channel) -> Envelope {
        Envelope {
            version: PROTOCOL_VERSION,
            request,
            token: Some(token),
            channel: Some(channel),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "body", rename_all = "snake_case")]
pub enum Request {
    Submit(Box<JobRequest>),
    Control(Control),
    Query(Query),
}

impl Request {
    pub fn kind(&self) -> &'static str {
        match self {
            Request::Submit(_) => "job",
            Request::Control(_) => "ctl",
            Request::Query(_) => "qry",
        }
    }
}

/// Which jobs a control request acts on. Ids, when given, name the jobs;
/// the other fields narrow them down (or, without ids, select them).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JobSelector {
    pub job_ids: Vec<JobRef>,
    pub user: Option<String>,
    pub account: Option<String>,
    pub name: Option<String>,
    pub states: Vec<JobState>,
}

impl JobSelector {
    pub fn is_empty(&self) -> bool {
        self.job_ids.is_empty()
            && self.user.is_none()
            && self.account.is_none()
            && self.name.is_none()
            && self.states.is_empty()
    }

    pub fn matches(&self, job: &Job) -> bool {
        (self.job_ids.is_empty() || self.job_ids.iter().any(|r| r.matches(job)))
            && self.user.as_ref().is_none_or(|u| *u == job.user)
            && self.account.as_ref().is_none_or(|a| *a == job.account)
            && self.name.as_ref().is_none_or(|n| *n == job.name)
            && (self.states.is_empty() || self.states.contains(&job.state))
    }
}

/// Which of a job's processes a signal (`scancel --signal`) goes to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignalTo {
    /// Every process of the job (ysched's `yscancel --signal`).
    #[default]
    Job,
    /// What the batch shell started, not the shell: Slurm's steps
    /// (`scancel --signal`).
    Steps,
    /// The batch shell alone (`scancel --batch`).
    BatchShell,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Control {
    /// Cancel the jobs, or with `signal`, send them that signal and let them run.
    Cancel {
        selector: JobSelector,
        signal: Option<i32>,
        /// Which of a job's processes the signal goes to (not a cancel).
        #[serde(default)]
        to: SignalTo,
    },
    Hold {
        job_ids: Vec<JobRef>,
    },
    Release {
        job_ids: Vec<JobRef>,
    },
    /// Let jobs held for approval run (their account's coordinators, admins).
    Approve {
        job_ids: Vec<JobRef>,
    },
    /// Change jobs (`yscontrol update`): a user may lower what their own
    /// jobs have; admins may also raise it.
    Update {
        job_ids: Vec<JobRef>,
        changes: JobUpdate,
    },
    /// A running job saved a checkpoint now (its user, admins): preempting
    /// it loses only what it does from here.
    Checkpoint {
        job_ids: Vec<JobRef>,
    },
    /// Stop running jobs and put them back in the queue with their ids
    /// (their users, admins).
    Requeue {
        job_ids: Vec<JobRef>,
    },
    /// Freeze running jobs in place (admins); they keep their GPUs.
    Suspend {
        job_ids: Vec<JobRef>,
    },
    Resume {
        job_ids: Vec<JobRef>,
    },
    /// Re-read the config file (admins only).
    Reload,
    /// Hand the lead to the standby controller (admins; `[standby]`):
    /// this controller stops after its last write and gives its lease up.
    Takeover,
    /// Take GPUs out of service (admins): no job starts on them; a job
    /// running there finishes first.
    Drain {
        gpus: Vec<u32>,
        reason: String,
        /// The node they are on (`None`: the controller's own server).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<String>,
    },
    /// Put drained GPUs back in service (admins).
    Undrain {
        gpus: Vec<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<String>,
    },
    /// Take a node out of service (admins): no job starts there; jobs
    /// running there finish first.
    NodeDrain {
        node: String,
        reason: String,
    },
    /// Put a drained node back in service (admins).
    NodeResume {
        node: String,
    },
    /// A signed token for the sender (`ystoken`, `scontrol token`), or
    /// for `user` (admins: service accounts), lasting `lifespan` seconds.
    Token {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lifespan: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
        /// What it is for, comma-separated (`rest`, `portal`, `node`,
        /// `node:NAME`); by default the web's (`rest,portal`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        audience: Option<String>,
    },
    /// A step begins in running job `job_id` (`srun` in it): its number
    /// is the answer ([`Reply::StepBegun`]).
    StepBegin {
        job_id: JobId,
        name: String,
        nodes: String,
        tasks: u32,
        /// The srun's process, on the job's batch node.
        #[serde(default)]
        pid: u32,
    },
    /// Signal (by default SIGTERM) the srun of running step `step` of
    /// job `job_id`, which passes it on to the step's tasks
    /// (`scancel N.S`).
    CancelStep {
        job_id: JobId,
        step: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
    },
    /// Step `step` of run `restart` of job `job_id` ended.
    StepEnd {
        job_id: JobId,
        restart: u32,
        step: u32,
        exit_code: i32,
        #[serde(default)]
        signal: i32,
        /// What its tasks used, as srun measured them (shown, never
        /// charged: charges are the controller's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<crate::model::step::StepUsage>,
    },
    /// How interactive allocation `job_id` stands; once it runs, the
    /// environment its user's commands and steps need (its step key
    /// among them: its user's, or an admin's, alone). `salloc` and
    /// `srun` outside a job ask until it runs, then while it runs.
    Attach {
        job_id: JobId,
    },
    /// The session of interactive allocation `job_id` ended with this
    /// status (`salloc`'s command, `srun`'s step): the allocation ends
    /// COMPLETED (0) or FAILED.
    EndAllocation {
        job_id: JobId,
        exit_code: i32,
        #[serde(default)]
        signal: i32,
    },
    /// The tokens made for the sender, for `user` or for everyone
    /// (admins), not long expired (`ystoken --list`).
    Tokens {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
        #[serde(default)]
        all_users: bool,
    },
    /// Revoke the sender's token `jti`, or all of them (`None`); admins
    /// any user's (`ystoken --revoke`).
    RevokeTokens {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        jti: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
    },
    /// Let a server join the pool (admins): the answer is the line to run
    /// there, with a one-time token.
    NodeAdd {
        node: String,
    },
    /// Take a node out of the pool; its certificate is refused from then
    /// on (admins).
    NodeRemove {
        node: String,
    },
    /// Make a container image present on `node`, or on every node that
    /// runs containers (admins); the answer says where it stands on each.
    ImagePull {
        image: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<String>,
    },
}

impl Control {
    /// What the audit log calls it.
    pub fn action(&self) -> &'static str {
        match self {
            Control::Cancel { signal: None, .. } => "cancel",
            Control::Cancel { .. } => "signal",
            Control::Hold { .. } => "hold",
            Control::Release { .. } => "release",
            Control::Approve { .. } => "approve",
            Control::Update { .. } => "update",
            Control::Checkpoint { .. } => "checkpoint",
            Control::Requeue { .. } => "requeue",
            Control::Suspend { .. } => "suspend",
            Control::Resume { .. } => "resume",
            Control::Reload => "reload",
            Control::Takeover => "takeover",
            Control::Drain { .. } => "drain",
            Control::Undrain { .. } => "undrain",
            Control::NodeDrain { .. } => "node drain",
            Control::NodeResume { .. } => "node resume",
            Control::Token { .. } => "token",
            Control::Tokens { .. } => "token list",
            Control::StepBegin { .. } => "step begin",
            Control::StepEnd { .. } => "step end",
            Control::CancelStep { .. } => "cancel step",
            Control::Attach { .. } => "attach",
            Control::EndAllocation { .. } => "end allocation",
            Control::RevokeTokens { .. } => "token revoke",
            Control::NodeAdd { .. } => "node add",
            Control::NodeRemove { .. } => "node remove",
            Control::ImagePull { .. } => "image pull",
        }
    }
}

/// Filters for the read-only views.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JobFilter {
    pub job_ids: Vec<JobRef>,
    pub users: Vec<String>,
    pub accounts: Vec<String>,
    pub names: Vec<String>,
    pub states: Vec<JobState>,
    /// Accounting window (Unix seconds): jobs active at some point in it.
    pub start: Option<i64>,
    pub end: Option<i64>,
    /// A page's cursor: only jobs with a greater id (the last job of the
    /// page before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<JobId>,
    /// A page's size: at most this many jobs (steps aside).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

impl JobFilter {
    pub fn matches(&self, job: &Job) -> bool {
        (self.job_ids.is_empty() || self.job_ids.iter().any(|r| r.matches(job)))
            && (self.users.is_empty() || self.users.contains(&job.user))
            && (self.accounts.is_empty() || self.accounts.contains(&job.account))
            && (self.names.is_empty() || self.names.contains(&job.name))
            && (self.states.is_empty() || self.states.contains(&job.state))
            && self.after.is_none_or(|after| job.id > after)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Query {
    /// Pending and running jobs (ysqueue). With `fields`, the answer is
    /// those cells, rendered where the jobs are ([`Reply::Rows`]); without,
    /// whole jobs ([`Reply::Jobs`]).
    Queue {
        filter: JobFilter,
        fields: Option<Vec<Field>>,
        /// A row for each pending task of an array (`squeue -r`), not one
        /// row for a run of them (`12_[3-9]`).
        #[serde(default)]
        unfolded: bool,
    },
    /// One page of the queue (the portal): the jobs the viewer sees, from
    /// the `offset`-th, at most `limit`, and how many there are.
    QueuePage {
        filter: JobFilter,
        offset: u32,
        limit: u32,
    },
    /// Jobs from the accounting database, finished or not (ysacct).
    Accounting {
        filter: JobFilter,
        fields: Option<Vec<Field>>,
        /// Each job's steps too, each after its job (`N.S`), as sacct
        /// lists them unless `-X`: a row each, or (without `fields`) a
        /// view each, with `step` set.
        #[serde(default)]
        steps: bool,
        /// With `steps`, each started job's batch and extern steps too
        /// (`N.batch`, `N.extern`), as Slurm's sacct and slurmdbd list
        /// them; ysacct lists the srun steps alone.
        #[serde(default)]
        batch_steps: bool,
    },
    /// One job in full (yscontrol show job).
    Job(JobRef),
    /// The fair-share tree (ysshare): the caller's associations and their
    /// accounts; with `all_users`, everyone in those accounts (admins: all).
    Shares {
        accounts: Vec<String>,
        users: Vec<String>,
        all_users: bool,
    },
    /// Usage of the jobs that ended in a period (ysreport); users other
    /// than admins get their own jobs only.
    Usage {
        period: crate::report::usage::Period,
        accounts: Vec<String>,
        users: Vec<String>,
        /// Jobs idle on their GPUs longer than this are ranked as waste.
        waste_after_secs: u64,
    },
    /// The audit log, newest last (admins): preemptions, uses of a
    /// restricted QoS, actions on others' jobs, reloads.
    Audit { limit: u32 },
    /// The server: its GPUs and who holds them (ysinfo, yscontrol show node).
    Node,
    /// The last `bytes` of a job's output file, read with the asker's
    /// rights (the portal's output tail).
    Output { job: JobRef, bytes: u32 },
}

/// What `yscontrol update` changes; `None`: leave it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobUpdate {
    pub qos: Option<String>,
    /// `Some(None)`: UNLIMITED.
    #[serde(default, with = "crate::model::job::time_request")]
    pub time_limit: Option<Option<u64>>,
    pub priority: Option<i64>,
}

/// One line of the audit log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditRow {
    pub time: i64,
    pub actor: String,
    pub action: String,
    pub job_id: Option<JobId>,
    pub detail: String,
    /// How the request that did it came (`cli` for rows from before).
    #[serde(default)]
    pub channel: Channel,
}

/// One association of the fair-share tree, as `ysshare` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShareRow {
    pub account: String,
    /// `None` for an account's own row.
    pub user: Option<String>,
    /// Levels below the root.
    pub depth: usize,
    pub raw_shares: f64,
    pub norm_shares: f64,
    /// Billing-seconds ever charged, undecayed.
    pub raw_usage: i64,
    /// Decayed usage now.
    pub usage: f64,
    pub norm_usage: f64,
    pub effective_usage: f64,
    /// `None`: infinite (no usage), which JSON cannot carry as a number.
    pub level_fs: Option<f64>,
    pub fairshare: f64,
    /// An account's budget for its current period and what is left of it
    /// (tokens), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_left: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobOutcome {
    pub job_id: JobId,
    /// `None` when the action succeeded for this job.
    pub error: Option<String>,
    /// The job had already ended (Slurm's scancel takes that as done).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub already_ended: bool,
}

/// What `ysbatch --test-only` learns: the job as it would be admitted,
/// when and where it would start, and what it would cost.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TestOnly {
    /// The id it would get now.
    pub job_id: JobId,
    pub account: String,
    /// The QoS it would run with (the lowest, when a budget demotes it).
    pub qos: String,
    pub gpus: u32,
    pub cpus: u32,
    pub time_limit: Option<u64>,
    /// When it would start, should every running job last its time limit
    /// (`None`: no estimate; `unknown` says why).
    pub start: Option<i64>,
    pub unknown: Option<String>,
    pub node: Option<String>,
    pub gpu_ids: Vec<u32>,
    /// It would borrow beyond its account's guarantee.
    pub borrowing: bool,
    /// The most it may cost, in tokens (`None`: no time limit).
    pub tokens: Option<f64>,
    /// Why it would wait for a coordinator's approval.
    pub approval: Option<String>,
    /// What a budget says: a warning, or why it would be demoted.
    pub warnings: Vec<String>,
}

impl JobOutcome {
    pub fn new(job_id: JobId, error: Option<String>) -> JobOutcome {
        JobOutcome {
            job_id,
            error,
            already_ended: false,
        }
    }
}

/// An interactive allocation as its `salloc` sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AllocationView {
    pub job_id: JobId,
    pub state: JobState,
    /// Why it waits, or why it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// While it runs: the variables its commands run with (`SLURM_JOB_ID`,
    /// its nodes, where their task servers listen and the step key).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub environment: Vec<(String, String)>,
    /// While it runs: seconds to its time limit (none: unlimited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_left: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reply {
    Submitted {
        job_id: JobId,
        /// Something its submitter should know (a budget nearly spent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        warning: Option<String>,
    },
    /// `ysbatch --test-only`: what would happen; nothing was stored.
    TestOnly(Box<TestOnly>),
    /// A signed token: who it names and until when.
    Token {
        token: String,
        user: String,
        expires: i64,
    },
    /// A step's number in the run it belongs to.
    StepBegun {
        step: u32,
        restart: u32,
    },
    /// How an interactive allocation stands ([`Control::Attach`]).
    Allocation(Box<AllocationView>),
    /// Tokens as recorded (`ystoken --list`).
    Tokens {
        tokens: Vec<crate::token::TokenRecord>,
        now: i64,
    },
    /// The request as a whole was refused.
    Rejected {
        error: String,
    },
    /// The token the request came with is not taken (expired, forged,
    /// or naming no user here): nothing was looked at.
    Unauthenticated {
        error: String,
    },
    /// Per-job results of a control request.
    Control {
        outcomes: Vec<JobOutcome>,
        message: Option<String>,
    },
    Jobs {
        jobs: Vec<JobView>,
        now: i64,
    },
    /// A page of the queue, and how many jobs the whole queue shows.
    JobPage {
        jobs: Vec<JobView>,
        total: u64,
        now: i64,
    },
    Shares {
        rows: Vec<ShareRow>,
    },
    Audit {
        rows: Vec<AuditRow>,
    },
    /// Every node of the pool (one on a single server), the
    /// controller's own first.
    Nodes {
        nodes: Vec<crate::report::node::NodeInfo>,
    },
    Usage {
        report: Box<crate::report::usage::UsageReport>,
    },
    /// The end of a job's output file.
    Output {
        job_id: JobId,
        path: String,
        /// Lossy UTF-8, control characters but newlines and tabs escaped.
        text: String,
        /// There was more before it.
        truncated: bool,
    },
    /// One row of rendered cells per job, for the fields asked for.
    Rows {
        rows: Vec<Vec<String>>,
        now: i64,
    },
    /// The rows follow in the reply file, a line each (`spool::RowStream`):
    /// a million jobs never sit in memory on either side.
    Streamed {
        now: i64,
    },
}

impl Reply {
    /// A control reply with `more` outcomes (jobs a reference named that
    /// the request could not act on); any other as it is.
    pub fn with_outcomes(self, more: Vec<JobOutcome>) -> Reply {
        match self {
            Reply::Control {
                mut outcomes,
                message,
            } => {
                outcomes.extend(more);
                Reply::Control { outcomes, message }
            }
            other => other,
        }
    }

    /// The outcomes of a control reply (none for another).
    pub fn into_outcomes(self) -> Vec<JobOutcome> {
        match self {
            Reply::Control { outcomes, .. } => outcomes,
            _ => Vec::new(),
        }
    }

    /// What is kept of this reply for a retry of its request: a secret
    /// (a node's join line, when `join_line`; a token) is shown once and
    /// kept nowhere.
    pub fn kept_for_retry(&self, join_line: bool) -> Reply {
        match self {
            Reply::Control { outcomes, .. } if join_line => Reply::Control {
                outcomes: outcomes.clone(),
                message: Some(
                    "the join line was shown once; yscontrol node add again for a new one".into(),
                ),
            },
            Reply::Token { .. } => Reply::Rejected {
                error: "the token was shown once; ask for a new one".into(),
            },
            _ => self.clone(),
        }
    }
}
