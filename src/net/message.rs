//! What the controller and a node's agent say to each other. Every frame
//! is an [`Envelope`]: the protocol version, the controller's epoch (new
//! at each `ysctld` start) and the agent's incarnation (new at each
//! `ysnoded` start), so that a message from a run that has since been
//! replaced is recognised and dropped.

use serde::{Deserialize, Serialize};

use crate::exec::executor::NodeFacts;
use crate::exec::spec::{ExitRecord, StepCommand};
use crate::model::job::{Job, JobId};

/// This release's protocol; controller and agents must speak the same.
pub const PROTOCOL: u32 = 3;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Envelope<T> {
    pub protocol: u32,
    /// The controller's run (0 on a node's first frame, before it knows).
    pub epoch: u64,
    /// The agent's run.
    pub incarnation: u64,
    pub body: T,
}

/// One run of one job: launches are idempotent on it, and a report about
/// an earlier run of a requeued job is told apart from the current one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RunKey {
    pub job: JobId,
    pub restart: u32,
}

impl RunKey {
    pub fn of(job: &Job) -> RunKey {
        RunKey {
            job: job.id,
            restart: job.restart_count,
        }
    }
}

impl std::fmt::Display for RunKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "job {} (run {})", self.job, self.restart)
    }
}

/// A job for a node to start: the record with its allocation (in the
/// node's numbers), and what runs. The node resolves the user itself
/// and refuses the launch if the name does not have the same uid there.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LaunchOrder {
    pub job: Job,
    pub script: String,
    pub args: Vec<String>,
    pub environment: Vec<(String, String)>,
    /// Its place among the job's nodes (`None`: one node, one task).
    #[serde(default)]
    pub part: Option<crate::model::tasks::NodePart>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum FromNode {
    /// On a connection without a certificate: join with a one-time token,
    /// asking for a certificate for this key (a PKCS #10 request).
    Join {
        node: String,
        token: String,
        request_pem: String,
    },
    /// First on a certified connection: what the node has, and every run
    /// it holds: running (with its supervisor's pid), ended and not yet
    /// forgotten (with how), or lost (its supervisor gone without a
    /// record). From this the controller settles each run it had there.
    Hello {
        facts: NodeFacts,
        running: Vec<(RunKey, i32)>,
        ended: Vec<(RunKey, ExitRecord)>,
        lost: Vec<RunKey>,
        version: String,
        /// The node's wall clock as it sends this (Unix seconds): the
        /// controller moves the node's times by the difference, so clocks
        /// minutes apart still give right end times.
        clock: i64,
        /// The runs it froze when its lease ran out, and for how long they
        /// have been frozen (seconds): the controller thaws those still
        /// its own, and stops the others.
        #[serde(default)]
        frozen: Vec<(RunKey, u64)>,
        /// Freezes for its lost lease that a suspension took over before
        /// the controller heard of them, and how long the fence had held
        /// each then (seconds): told in every hello and heartbeat until
        /// one is answered.
        #[serde(default)]
        taken_over: Vec<(RunKey, u64)>,
        /// The runs it holds frozen for the controller's suspension.
        #[serde(default)]
        suspended: Vec<RunKey>,
    },
    /// Every third of the lease: the runs it holds, whether it has fenced
    /// itself (its lease ran out: its jobs were frozen), the runs still
    /// frozen for that (as in `Hello`), and a number the controller's
    /// acknowledgement echoes.
    Heartbeat {
        seq: u64,
        running: Vec<RunKey>,
        fenced: bool,
        #[serde(default)]
        frozen: Vec<(RunKey, u64)>,
        /// The node's wall clock as it sends this (Unix seconds; 0 from an
        /// older agent): the controller learns the clocks' difference
        /// from the least delay it sees.
        #[serde(default)]
        clock: i64,
        /// As in `Hello`.
        #[serde(default)]
        taken_over: Vec<(RunKey, u64)>,
    },
    /// A run's processes started.
    Started { run: RunKey, supervisor_pid: i32 },
    /// How a run ended; told again at each reconnection (in `Hello`)
    /// until the controller says `Forget`. `clock` as in `Hello`.
    Exited {
        run: RunKey,
        record: ExitRecord,
        clock: i64,
    },
    /// A run whose supervisor is gone without recording its end.
    Lost { run: RunKey },
    /// A launch not carried out because the node is fenced (its lease ran
    /// out): nothing of it started, and the job may start elsewhere.
    NotStarted { run: RunKey, why: String },
    /// A certificate for a new key, before the current one expires.
    Renew { request_pem: String },
    /// The node's GPUs now, in its own GPU numbers: read every
    /// `every_secs` (its config's `gpu_sample_secs`) where a driver answers.
    Gpus {
        reading: crate::gpu::sampling::Reading,
        every_secs: u64,
    },
    /// A job submitted on the node (`ysbatch` there), by the user whose
    /// uid owns the request in the node's spool, under the request's
    /// unique name: sent again until answered, applied once.
    Submit {
        name: String,
        uid: u32,
        user: String,
        request: Box<crate::model::job::JobRequest>,
        /// The user's signed token: the node's word for who the user is
        /// is not enough (root there could claim anyone).
        #[serde(default)]
        token: Option<String>,
    },
    /// A query or a control request made on the node (`ysqueue`,
    /// `yscancel`, ... there), as `Submit` carries a submission: the
    /// sender as the node's kernel names them, and their token if they
    /// gave one. Answered by `Answer`, or a listing by `AnswerRows`.
    Forward {
        name: String,
        uid: u32,
        user: String,
        request: Box<crate::proto::Request>,
        #[serde(default)]
        token: Option<String>,
    },
    /// How making a container image present (`PullImage`) ended:
    /// `error` says why it could not be.
    Image {
        reference: String,
        error: Option<String>,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ToNode {
    /// The node's certificate and the authority's, after a join.
    Joined {
        certificate_pem: String,
        authority_pem: String,
        /// The users the controller knows, name and uid, for the node to
        /// check that each is the same user there.
        users: Vec<(String, u32)>,
    },
    /// After `Hello`: the node is in the pool; the lease it holds.
    Welcome {
        lease_ms: u64,
        /// The controller's `[pool] frozen_limit` (0 from an older
        /// controller): how long the node keeps runs frozen for its fence
        /// with no controller to claim them.
        #[serde(default)]
        frozen_limit_ms: u64,
        /// The leader's term (`[standby]`: its election's; 0 for a
        /// controller alone and from an older one). A node takes no
        /// orders from a controller of a term below the highest it has
        /// been welcomed in.
        #[serde(default)]
        term: u64,
    },
    /// The answer to a heartbeat: the node's lease runs from when it sent it.
    HeartbeatAck {
        seq: u64,
    },
    Launch(Box<LaunchOrder>),
    Command {
        run: RunKey,
        command: StepCommand,
    },
    Freeze {
        run: RunKey,
        frozen: bool,
    },
    /// Kill what is left of a run whose supervisor is gone.
    Clear {
        run: RunKey,
    },
    /// The run's end is recorded: the node may drop what it kept of it.
    Forget {
        run: RunKey,
    },
    Renewed {
        certificate_pem: String,
    },
    /// The connection is refused (then closed), and why.
    Refused {
        reason: String,
    },
    /// The controller's answer to a request forwarded from the node.
    Answer {
        name: String,
        reply: Box<crate::proto::Reply>,
    },
    /// Rows of the listing that answers a request forwarded from the
    /// node, in order, a part at a time; the last part has `end`.
    AnswerRows {
        name: String,
        now: i64,
        rows: Vec<Vec<String>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        end: Option<RowsEnd>,
    },
    /// Make container image `reference` present in the node's store (a
    /// job waits for it, or the site keeps it warm); answered by `Image`.
    PullImage {
        reference: String,
    },
}

/// How a streamed listing ended: every row sent, or why it stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowsEnd {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
