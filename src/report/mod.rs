//! Formats for the views: the fields a job can show (with Slurm's squeue
//! `%` codes and sacct field names), aligned tables, `|`-separated parsable
//! output. Reads views; writes nothing.

use std::borrow::Cow;
use std::fmt::Write as _;

pub mod efficiency;
pub mod history;
pub mod html;
pub mod metrics;
pub mod node;
pub mod slurm_conf;
pub mod slurm_json;
pub mod squeue_long;
pub mod table;
pub mod usage;
pub mod view;

use serde::{Deserialize, Serialize};

use crate::model::job::JobState;
use crate::model::units;
use view::JobView;

/// One thing a row can show about a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Field {
    JobId,
    Name,
    User,
    Uid,
    Account,
    Qos,
    StateCompact,
    State,
    /// squeue's TIME: `M:SS`.
    TimeUsed,
    /// sacct's Elapsed: `HH:MM:SS`.
    Elapsed,
    ElapsedRaw,
    TimeLimit,
    TimeLeft,
    /// sacct's NTasks: a step's tasks (empty on a job's own row).
    NTasks,
    Nodes,
    NodeList,
    /// squeue's NODELIST(REASON): the node if running, `(Reason)` if pending.
    NodeListReason,
    /// squeue's `%B`: the node its batch script runs on (`n/a` before).
    BatchHost,
    /// Why it waits, or how its end came, in words (`cancelled by uid
    /// 1000 (alice)`); a pending job's reason code.
    Reason,
    /// The same as Slurm's one-word codes (`Priority`, `TimeLimit`,
    /// `NonZeroExitCode`, `None`): what Slurm's squeue `%r` and sacct's
    /// `Reason` print, for parsers that split on spaces.
    ReasonCode,
    /// The GPU request as a count, with the type when one was asked for.
    Gpus,
    TresPerNode,
    AllocTres,
    ReqTres,
    Cpus,
    ReqMem,
    Priority,
    /// A pending job's weighted priority components.
    PrioAge,
    PrioFairshare,
    PrioQos,
    PrioSize,
    Nice,
    Submit,
    Eligible,
    Start,
    End,
    ExitCode,
    Restarts,
    Preemptions,
    /// Whether a running job borrows beyond its account's guarantee.
    Borrowed,
    GpuUtil,
    GpuUtilMax,
    GpuMemMax,
    GpuLowTime,
    /// Hours its GPUs sat idle, each GPU counted on its own.
    GpuIdleHours,
    /// Each GPU: `NODE:INDEX=MEAN%/PEAK/idleIDLE%`.
    GpuEach,
    /// One line on how it used its GPUs (`2 of 4 GPUs idle 93 % of the time`).
    GpuVerdict,
    MaxRss,
    /// sacct's TRESUsageInTot: CPU time, peak memory, GPU memory and utilisation.
    TresUsage,
    /// `--mail-type`.
    MailType,
    /// sacct's State: `CANCELLED by UID` for a cancelled job.
    AcctState,
    TotalCpu,
    /// sacct's step figures: the mean of the tasks' peak memory, the
    /// task with the largest, CPU time in user and system mode, the mean
    /// CPU time of a task.
    AveRss,
    MaxRssTask,
    UserCpu,
    SystemCpu,
    AveCpu,
    /// Elapsed time times the CPUs allocated (`CPUTime`), and in seconds.
    CpuTime,
    CpuTimeRaw,
    /// Billing-seconds charged (GPU-seconds x billing weight x QoS factor).
    Billing,
    Cgroup,
    WorkDir,
    StdOut,
    StdErr,
    Comment,
    /// The job's own id, also for array tasks (which JobId shows as `12_3`).
    JobIdRaw,
    /// The array's id (the job's id outside arrays).
    ArrayJobId,
    /// The task index (`N/A` outside arrays).
    ArrayTaskId,
    /// `--dependency`, as given (canonical form).
    Dependency,
    Partition,
    /// The container image: as resolved by its run (`NAME@sha256:…`), or
    /// as asked for until it ran.
    ContainerImage,
    /// One of sacct's fields that ysched does not keep (`AveDiskRead`,
    /// `ConsumedEnergy`...): shown empty, as sacct shows a field with no
    /// value, under its own name ([`SACCT_NOT_KEPT`]).
    NotKept,
    /// One of squeue's letters for what ysched does not keep per job
    /// ([`SQUEUE_NOT_KEPT`]): shown `N/A`, as squeue shows a value it does
    /// not have.
    NotAvailable,
}

/// squeue's letters for what ysched does not keep per job: sockets,
/// cores and threads, features, licenses, temporary disk, the command,
/// the group, requested and excluded node lists, the reservation...
pub const SQUEUE_NOT_KEPT: &str = "GHIJOWXYcdfghnopsvwxz";

/// sacct 22.05's fields ysched does not keep: accepted in `--format` and
/// shown empty, so that a tool asking for them reads its other fields.
pub const SACCT_NOT_KEPT: &[&str] = &[
    "AdminComment",
    "AllocNodes",
    "AssocID",
    "AveCPUFreq",
    "AveDiskRead",
    "AveDiskWrite",
    "AvePages",
    "AveVMSize",
    "BlockID",
    "Cluster",
    "Constraints",
    "ConsumedEnergy",
    "ConsumedEnergyRaw",
    "Container",
    "DBIndex",
    "DerivedExitCode",
    "Flags",
    "GID",
    "Group",
    "Layout",
    "MaxDiskRead",
    "MaxDiskReadNode",
    "MaxDiskReadTask",
    "MaxDiskWrite",
    "MaxDiskWriteNode",
    "MaxDiskWriteTask",
    "MaxPages",
    "MaxPagesNode",
    "MaxPagesTask",
    "MaxRSSNode",
    "MaxVMSize",
    "MaxVMSizeNode",
    "MaxVMSizeTask",
    "McsLabel",
    "MinCPU",
    "MinCPUNode",
    "MinCPUTask",
    "NCPUS",
    "QOSRAW",
    "ReqCPUFreq",
    "ReqCPUFreqGov",
    "ReqCPUFreqMax",
    "ReqCPUFreqMin",
    "ReqNodes",
    "Reservation",
    "ReservationId",
    "Reserved",
    "ResvCPU",
    "ResvCPURAW",
    "SubmitLine",
    "Suspended",
    "SystemComment",
    "TRESUsageInAve",
    "TRESUsageInMax",
    "TRESUsageInMaxNode",
    "TRESUsageInMaxTask",
    "TRESUsageInMin",
    "TRESUsageInMinNode",
    "TRESUsageInMinTask",
    "TRESUsageOutAve",
    "TRESUsageOutMax",
    "TRESUsageOutMaxNode",
    "TRESUsageOutMaxTask",
    "TRESUsageOutMin",
    "TRESUsageOutMinNode",
    "TRESUsageOutMinTask",
    "TRESUsageOutTot",
    "TimelimitRaw",
    "WCKey",
    "WCKeyID",
];

impl Field {
    /// Whether the field shows a job's priority or its factors, which a
    /// listing computes only when one of its fields shows them.
    pub fn shows_priority(self) -> bool {
        matches!(
            self,
            Field::Priority
                | Field::PrioAge
                | Field::PrioFairshare
                | Field::PrioQos
                | Field::PrioSize
        )
    }

    pub fn header(self) -> &'static str {
        match self {
            Field::JobId => "JOBID",
            Field::Name => "NAME",
            Field::User => "USER",
            Field::Uid => "UID",
            Field::Account => "ACCOUNT",
            Field::Qos => "QOS",
            Field::StateCompact => "ST",
            Field::State => "STATE",
            Field::TimeUsed => "TIME",
            Field::Elapsed => "ELAPSED",
            Field::ElapsedRaw => "ELAPSED_RAW",
            Field::TimeLimit => "TIME_LIMIT",
            Field::TimeLeft => "TIME_LEFT",
            Field::Nodes => "NODES",
            Field::NTasks => "NTASKS",
            Field::NodeList => "NODELIST",
            Field::NodeListReason => "NODELIST(REASON)",
            Field::BatchHost => "EXEC_HOST",
            Field::Reason => "REASON",
            Field::ReasonCode => "REASON",
            Field::Gpus => "GPUS",
            Field::TresPerNode => "TRES_PER_NODE",
            Field::AllocTres => "ALLOCTRES",
            Field::ReqTres => "REQTRES",
            Field::Cpus => "CPUS",
            Field::ReqMem => "MIN_MEMORY",
            Field::Priority => "PRIORITY",
            Field::PrioAge => "AGE",
            Field::PrioFairshare => "FAIRSHARE",
            Field::PrioQos => "QOS_FACTOR",
            Field::PrioSize => "JOBSIZE",
            Field::Nice => "NICE",
            Field::Submit => "SUBMIT_TIME",
            Field::Eligible => "ELIGIBLE_TIME",
            Field::Start => "START_TIME",
            Field::End => "END_TIME",
            Field::ExitCode => "EXIT_CODE",
            Field::Restarts => "RESTARTS",
            Field::Preemptions => "PREEMPTIONS",
            Field::Borrowed => "BORROWED",
            Field::GpuUtil => "GPU_UTIL",
            Field::GpuUtilMax => "GPU_UTIL_MAX",
            Field::GpuMemMax => "GPU_MEM_MAX",
            Field::GpuLowTime => "GPU_LOW_TIME",
            Field::GpuIdleHours => "GPU_IDLE_HOURS",
            Field::GpuEach => "GPU_EACH",
            Field::GpuVerdict => "GPU_VERDICT",
            Field::MaxRss => "MAXRSS",
            Field::TresUsage => "TRESUSAGEINTOT",
            Field::MailType => "MAILTYPE",
            Field::AcctState => "STATE",
            Field::Billing => "BILLING",
            Field::TotalCpu => "TOTALCPU",
            Field::AveRss => "AVERSS",
            Field::MaxRssTask => "MAXRSSTASK",
            Field::UserCpu => "USERCPU",
            Field::SystemCpu => "SYSTEMCPU",
            Field::AveCpu => "AVECPU",
            Field::CpuTime => "CPUTIME",
            Field::CpuTimeRaw => "CPUTIMERAW",
            Field::Cgroup => "CGROUP",
            Field::WorkDir => "WORK_DIR",
            Field::StdOut => "STDOUT",
            Field::StdErr => "STDERR",
            Field::Comment => "COMMENT",
            Field::Dependency => "DEPENDENCY",
            // squeue's %A, as Slurm heads it.
            Field::JobIdRaw => "JOBID",
            Field::ArrayJobId => "ARRAY_JOB_ID",
            Field::ArrayTaskId => "ARRAY_TASK_ID",
            Field::Partition => "PARTITION",
            Field::ContainerImage => "CONTAINER_IMAGE",
            Field::NotKept => "",
            Field::NotAvailable => "N/A",
        }
    }

    /// squeue's `%` letter for this field.
    pub fn from_squeue_code(code: char) -> Option<Field> {
        Some(match code {
            'i' => Field::JobId,
            'A' => Field::JobIdRaw,
            'F' => Field::ArrayJobId,
            'K' => Field::ArrayTaskId,
            'j' => Field::Name,
            'u' => Field::User,
            'U' => Field::Uid,
            'a' => Field::Account,
            'q' => Field::Qos,
            't' => Field::StateCompact,
            'T' => Field::State,
            'M' => Field::TimeUsed,
            'l' => Field::TimeLimit,
            'L' => Field::TimeLeft,
            'D' => Field::Nodes,
            'N' => Field::NodeList,
            'R' => Field::NodeListReason,
            'B' => Field::BatchHost,
            'r' => Field::Reason,
            'b' => Field::TresPerNode,
            'C' => Field::Cpus,
            'm' => Field::ReqMem,
            'Q' => Field::Priority,
            'y' => Field::Nice,
            'V' => Field::Submit,
            'S' => Field::Start,
            'e' => Field::End,
            'Z' => Field::WorkDir,
            'k' => Field::Comment,
            'E' => Field::Dependency,
            'P' => Field::Partition,
            c if SQUEUE_NOT_KEPT.contains(c) => Field::NotAvailable,
            _ => return None,
        })
    }

    /// sacct's field names (case-insensitive), with sacct's headers.
    pub const SACCT: &'static [(&'static str, Field)] = &[
        ("JobID", Field::JobId),
        ("JobIDRaw", Field::JobIdRaw),
        ("ArrayJobID", Field::ArrayJobId),
        ("ArrayTaskID", Field::ArrayTaskId),
        ("JobName", Field::Name),
        ("User", Field::User),
        ("UID", Field::Uid),
        ("Account", Field::Account),
        ("QOS", Field::Qos),
        ("State", Field::AcctState),
        ("ExitCode", Field::ExitCode),
        ("Submit", Field::Submit),
        ("Eligible", Field::Eligible),
        ("Start", Field::Start),
        ("End", Field::End),
        ("Elapsed", Field::Elapsed),
        ("ElapsedRaw", Field::ElapsedRaw),
        ("Timelimit", Field::TimeLimit),
        ("AllocTRES", Field::AllocTres),
        ("ReqTRES", Field::ReqTres),
        ("AllocCPUS", Field::Cpus),
        ("ReqCPUS", Field::Cpus),
        ("ReqMem", Field::ReqMem),
        ("AllocGPUS", Field::Gpus),
        ("NodeList", Field::NodeList),
        ("NNodes", Field::Nodes),
        ("NTasks", Field::NTasks),
        ("Reason", Field::Reason),
        ("ReasonCode", Field::ReasonCode),
        ("ReasonText", Field::Reason),
        ("Restarts", Field::Restarts),
        ("Preemptions", Field::Preemptions),
        ("Preempted", Field::Preemptions),
        ("Borrowed", Field::Borrowed),
        ("GPUUtil", Field::GpuUtil),
        ("GPUUtilMax", Field::GpuUtilMax),
        ("GPUMemMax", Field::GpuMemMax),
        ("GPULowTime", Field::GpuLowTime),
        ("GPUIdleHours", Field::GpuIdleHours),
        ("GPUEach", Field::GpuEach),
        ("GPUVerdict", Field::GpuVerdict),
        ("MaxRSS", Field::MaxRss),
        ("TRESUsageInTot", Field::TresUsage),
        ("MailType", Field::MailType),
        ("Billing", Field::Billing),
        ("TotalCPU", Field::TotalCpu),
        ("AveRSS", Field::AveRss),
        ("MaxRSSTask", Field::MaxRssTask),
        ("UserCPU", Field::UserCpu),
        ("SystemCPU", Field::SystemCpu),
        ("AveCPU", Field::AveCpu),
        ("CPUTime", Field::CpuTime),
        ("CPUTimeRAW", Field::CpuTimeRaw),
        ("Cgroup", Field::Cgroup),
        ("WorkDir", Field::WorkDir),
        ("StdOut", Field::StdOut),
        ("StdErr", Field::StdErr),
        ("Comment", Field::Comment),
        ("Dependency", Field::Dependency),
        ("Priority", Field::Priority),
        ("Partition", Field::Partition),
        ("ContainerImage", Field::ContainerImage),
    ];

    pub fn from_sacct_name(name: &str) -> Option<(&'static str, Field)> {
        Field::SACCT
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .copied()
    }

    /// What only the job's user and admins may see.
    pub fn is_private(self) -> bool {
        matches!(
            self,
            Field::WorkDir | Field::StdOut | Field::StdErr | Field::Comment
        )
    }

    /// The value shown for `view` at time `now`.
    pub fn value(self, view: &JobView, now: i64) -> String {
        self.text(view, now).into_owned()
    }

    /// Appends the value shown for `view` at time `now` to `out`: `text`,
    /// without an allocation for the values that a listing shows on every
    /// row and that are not stored as shown.
    pub fn write_text(self, view: &JobView, now: i64, out: &mut String) {
        let job = &view.job;
        match self {
            Field::JobId => {
                job.write_display_id(out);
                if let Some(step) = &view.step {
                    use std::fmt::Write as _;
                    let _ = write!(out, ".{}", step.id);
                }
            }
            Field::TimeUsed => units::write_duration(out, job.elapsed(now)),
            Field::Gpus => write_gpus(out, job),
            Field::NodeListReason if job.state == JobState::Pending => {
                write_pending_reason(out, view)
            }
            _ => out.push_str(&self.text(view, now)),
        }
    }

    /// The value shown for `view` at time `now`, borrowed from the job
    /// where it is stored as shown: listings render tens of thousands of
    /// rows, and most of their cells need no allocation of their own.
    pub fn text(self, view: &JobView, now: i64) -> Cow<'_, str> {
        // Every field in exactly one group: the compiler checks that
        // none is left out.
        let text = match self {
            Field::NotKept => return Cow::Borrowed(""),
            Field::NotAvailable => return Cow::Borrowed("N/A"),
            Field::JobId
            | Field::JobIdRaw
            | Field::ArrayJobId
            | Field::ArrayTaskId
            | Field::Name
            | Field::User
            | Field::Uid
            | Field::Account
            | Field::Qos
            | Field::StateCompact
            | Field::State
            | Field::TimeUsed
            | Field::Elapsed
            | Field::ElapsedRaw
            | Field::TimeLimit
            | Field::TimeLeft
            | Field::Nodes
            | Field::NTasks
            | Field::NodeList
            | Field::NodeListReason
            | Field::BatchHost
            | Field::Reason
            | Field::ReasonCode => self.identity_text(view, now),
            Field::AveRss
            | Field::MaxRssTask
            | Field::UserCpu
            | Field::SystemCpu
            | Field::AveCpu
            | Field::CpuTime
            | Field::CpuTimeRaw => self.step_text(view, now),
            Field::Gpus
            | Field::TresPerNode
            | Field::AllocTres
            | Field::ReqTres
            | Field::Cpus
            | Field::ReqMem
            | Field::Priority
            | Field::PrioAge
            | Field::PrioFairshare
            | Field::PrioQos
            | Field::PrioSize
            | Field::Nice
            | Field::Submit
            | Field::Eligible
            | Field::Start
            | Field::End => self.resource_text(view, now),
            Field::GpuUtil
            | Field::GpuUtilMax
            | Field::GpuMemMax
            | Field::GpuLowTime
            | Field::GpuIdleHours
            | Field::GpuEach
            | Field::GpuVerdict => self.gpu_text(view),
            Field::ExitCode
            | Field::Restarts
            | Field::Preemptions
            | Field::Borrowed
            | Field::MaxRss
            | Field::TresUsage
            | Field::MailType
            | Field::AcctState
            | Field::Billing
            | Field::TotalCpu
            | Field::Cgroup
            | Field::WorkDir
            | Field::StdOut
            | Field::StdErr
            | Field::Comment
            | Field::Dependency
            | Field::Partition
            | Field::ContainerImage => self.usage_text(view),
        };
        text.unwrap_or(Cow::Borrowed(""))
    }

    /// Who and what the job is, its state and where it runs.
    fn identity_text(self, view: &JobView, now: i64) -> Option<Cow<'_, str>> {
        let job = &view.job;
        let pending = job.state == JobState::Pending;
        Some(match self {
            Field::JobId | Field::JobIdRaw => {
                let id = match self {
                    Field::JobId => job.display_id(),
                    _ => job.id.to_string(),
                };
                match &view.step {
                    Some(step) => format!("{id}.{}", step.id).into(),
                    None => id.into(),
                }
            }
            Field::ArrayJobId => job
                .array
                .as_ref()
                .map_or(job.id, |a| a.job_id)
                .to_string()
                .into(),
            Field::ArrayTaskId => job
                .array
                .as_ref()
                .map_or(Cow::Borrowed("N/A"), |a| a.task_id.to_string().into()),
            Field::Name => Cow::Borrowed(&job.name),
            Field::User => Cow::Borrowed(&job.user),
            Field::Uid => job.uid.to_string().into(),
            Field::Account => Cow::Borrowed(&job.account),
            Field::Qos => Cow::Borrowed(&job.qos),
            Field::StateCompact => job.state.compact().into(),
            Field::State => job.state.name().into(),
            Field::TimeUsed => units::format_duration(job.elapsed(now)).into(),
            Field::Elapsed => units::format_elapsed(job.elapsed(now)).into(),
            Field::ElapsedRaw => job.elapsed(now).to_string().into(),
            Field::TimeLimit => units::format_time_limit(job.time_limit).into(),
            Field::TimeLeft => match job.time_limit {
                None => "UNLIMITED".into(),
                Some(l) => units::format_duration(l.saturating_sub(job.elapsed(now))).into(),
            },
            Field::Nodes => job.node_count().to_string().into(),
            Field::NTasks => match &view.step {
                Some(step) => step.tasks.to_string().into(),
                None => Cow::Borrowed(""),
            },
            Field::NodeList => match &job.node {
                Some(_) if !job.peers.is_empty() => job.nodelist().into(),
                Some(node) => Cow::Borrowed(node),
                None if pending => Cow::Borrowed(""),
                None => Cow::Borrowed("None assigned"),
            },
            Field::NodeListReason => {
                if pending {
                    let mut text = String::new();
                    write_pending_reason(&mut text, view);
                    text.into()
                } else if !job.peers.is_empty() {
                    job.nodelist().into()
                } else {
                    Cow::Borrowed(job.node.as_deref().unwrap_or_default())
                }
            }
            Field::Reason => {
                let reason = if pending {
                    view.pending_reason.as_deref()
                } else if job.reason.is_none() && job.borrowed && job.state.holds_gpus() {
                    // Running on GPUs another account lends.
                    Some("Borrowed")
                } else {
                    job.reason.as_deref()
                };
                Cow::Borrowed(reason.unwrap_or("None"))
            }
            Field::ReasonCode => Cow::Borrowed(reason_code(view)),
            Field::BatchHost => match &job.node {
                Some(node) if !pending => Cow::Borrowed(node.as_str()),
                _ => Cow::Borrowed("n/a"),
            },
            _ => return None,
        })
    }

    /// What its GPUs did: utilisation, peak memory, idle time, each GPU.
    fn gpu_text(self, view: &JobView) -> Option<Cow<'_, str>> {
        let job = &view.job;
        let numbered = view
            .step
            .is_some_and(|s| matches!(s.id, crate::model::step::StepId::Numbered(_)));
        Some(match self {
            // No samples (no driver, or too short a run): not known.
            Field::GpuUtil => match job.gpu_usage.mean() {
                Some(m) => format!("{m:.1}%").into(),
                None => "n/a".into(),
            },
            // A srun step's share of the readings has no peaks of its own.
            Field::GpuUtilMax | Field::GpuMemMax | Field::GpuLowTime
                if job.gpu_usage.samples == 0 || numbered =>
            {
                "n/a".into()
            }
            Field::GpuUtilMax => format!("{}%", job.gpu_usage.utilization_max).into(),
            Field::GpuMemMax => units::format_memory_mb(job.gpu_usage.memory_max_mb).into(),
            Field::GpuLowTime => units::format_duration(job.gpu_usage.low_secs).into(),
            // Per GPU: the job's row, not its steps'.
            Field::GpuIdleHours | Field::GpuEach | Field::GpuVerdict
                if view.step.is_some() || job.gpus.count == 0 =>
            {
                Cow::Borrowed("")
            }
            Field::GpuIdleHours => format!("{:.2}", job.gpu_usage.idle_gpu_hours()).into(),
            Field::GpuEach => job
                .gpu_usage
                .devices
                .iter()
                .map(|d| {
                    format!(
                        "{}:{}={:.0}%/{}/idle{:.0}%",
                        d.node,
                        d.gpu,
                        d.mean().unwrap_or(0.0),
                        units::format_memory_mb(d.memory_max_mb),
                        d.idle_pct()
                    )
                })
                .collect::<Vec<_>>()
                .join(",")
                .into(),
            Field::GpuVerdict => job.gpu_usage.verdict(job.gpus.gpus_held()).into(),
            _ => return None,
        })
    }

    /// What a step's tasks used, as sacct shows it on a step's row (a
    /// job's own row leaves the per-task figures empty); CPU time
    /// allocated on every row.
    fn step_text(self, view: &JobView, now: i64) -> Option<Cow<'_, str>> {
        use crate::model::step::StepId;
        let job = &view.job;
        let measured = view.step.and_then(|s| s.usage);
        let batch = view.step.is_some_and(|s| s.id == StepId::Batch);
        let rss = |b: Option<u64>| b.map_or(Cow::Borrowed(""), |b| units::format_rss(b).into());
        let cpu =
            |u: Option<u64>| u.map_or(Cow::Borrowed(""), |u| units::format_cpu_time(u).into());
        // The batch step is one task: its figures are its cgroup's.
        let one_task = |v: Option<u64>| v.filter(|_| batch);
        Some(match self {
            Field::AveRss => rss(measured
                .map(|u| u.ave_rss_bytes())
                .or(one_task(job.max_rss_bytes))),
            Field::MaxRssTask => match (measured, batch) {
                (Some(u), _) => u.max_rss_task.to_string().into(),
                (None, true) => "0".into(),
                (None, false) => Cow::Borrowed(""),
            },
            Field::UserCpu => cpu(measured.map(|u| u.user_usec)),
            Field::SystemCpu => cpu(measured.map(|u| u.system_usec)),
            Field::AveCpu => cpu(measured
                .map(|u| u.ave_cpu_usec())
                .or(one_task(job.cpu_usec))),
            Field::CpuTime => {
                units::format_elapsed(job.elapsed(now).saturating_mul(u64::from(job.cpus))).into()
            }
            Field::CpuTimeRaw => job
                .elapsed(now)
                .saturating_mul(u64::from(job.cpus))
                .to_string()
                .into(),
            _ => return None,
        })
    }

    /// What it asked for and was given, its priority, its times.
    fn resource_text(self, view: &JobView, now: i64) -> Option<Cow<'_, str>> {
        let job = &view.job;
        let pending = job.state == JobState::Pending;
        let time = |t: Option<i64>| -> Cow<'_, str> {
            t.map_or(Cow::Borrowed("Unknown"), |t| {
                units::format_timestamp(t).into()
            })
        };
        Some(match self {
            Field::Gpus => {
                let mut text = String::new();
                write_gpus(&mut text, job);
                text.into()
            }
            Field::TresPerNode => {
                if job.gpus.count == 0 {
                    "N/A".into()
                } else {
                    format!("gres/{}", job.gpus).into()
                }
            }
            Field::AllocTres => {
                if job.start_time.is_none() {
                    Cow::Borrowed("")
                } else {
                    tres(view).into()
                }
            }
            Field::ReqTres => tres(view).into(),
            Field::Cpus => job.cpus.to_string().into(),
            Field::ReqMem => job
                .mem_mb
                .map_or(Cow::Borrowed("0"), |m| units::format_memory_mb(m).into()),
            Field::Priority => view.priority.to_string().into(),
            Field::PrioAge => view
                .factors
                .map_or(Cow::Borrowed(""), |f| f.weighted.age.to_string().into()),
            Field::PrioFairshare => view.factors.map_or(Cow::Borrowed(""), |f| {
                f.weighted.fairshare.to_string().into()
            }),
            Field::PrioQos => view
                .factors
                .map_or(Cow::Borrowed(""), |f| f.weighted.qos.to_string().into()),
            Field::PrioSize => view
                .factors
                .map_or(Cow::Borrowed(""), |f| f.weighted.size.to_string().into()),
            Field::Nice => view.job.nice.to_string().into(),
            Field::Submit => units::format_timestamp(job.submit_time).into(),
            Field::Eligible => units::format_timestamp(
                job.begin_time
                    .unwrap_or(job.submit_time)
                    .max(job.submit_time),
            )
            .into(),
            Field::Start => {
                if pending {
                    // A reservation's time, else a --begin time to come.
                    match view.expected_start.or(job.begin_time.filter(|&b| b > now)) {
                        Some(t) => units::format_timestamp(t).into(),
                        None => "N/A".into(),
                    }
                } else {
                    time(job.start_time)
                }
            }
            Field::End => {
                if job.state.is_active() {
                    "Unknown".into()
                } else {
                    time(job.end_time)
                }
            }
            _ => return None,
        })
    }

    /// How it ended and what it used; its paths and notes.
    fn usage_text(self, view: &JobView) -> Option<Cow<'_, str>> {
        let job = &view.job;
        let numbered = view
            .step
            .is_some_and(|s| matches!(s.id, crate::model::step::StepId::Numbered(_)));
        Some(match self {
            Field::ExitCode => job.exit.unwrap_or_default().to_string().into(),
            Field::Restarts => job.restart_count.to_string().into(),
            Field::Preemptions => job.preempt_count.to_string().into(),
            Field::Borrowed => if job.borrowed && job.state.holds_gpus() {
                "yes"
            } else {
                "no"
            }
            .into(),
            Field::MaxRss => job
                .max_rss_bytes
                .map_or(Cow::Borrowed(""), |b| units::format_rss(b).into()),
            Field::TresUsage => {
                // Slurm's order; GPU figures only where they were sampled.
                let mut parts = Vec::new();
                if let Some(cpu) = job.cpu_usec {
                    parts.push(format!("cpu={}", units::format_cpu_time(cpu)));
                }
                if let Some(rss) = job.max_rss_bytes {
                    parts.push(format!("mem={}", units::format_rss(rss)));
                }
                match job.gpu_usage.mean() {
                    Some(util) if numbered => parts.push(format!("gres/gpuutil={util:.0}")),
                    Some(util) => parts.push(format!(
                        "gres/gpumem={}M,gres/gpuutil={util:.0}",
                        job.gpu_usage.memory_max_mb
                    )),
                    None => {}
                }
                parts.join(",").into()
            }
            Field::MailType => job.mail_type.names().into(),
            Field::AcctState => match (job.state, job.reason.as_deref().and_then(canceller_uid)) {
                (JobState::Cancelled, Some(uid)) => format!("CANCELLED by {uid}").into(),
                (state, _) => state.name().into(),
            },
            Field::Billing => job
                .billing
                .map_or(Cow::Borrowed(""), |b| b.to_string().into()),
            Field::TotalCpu => job
                .cpu_usec
                .map_or(Cow::Borrowed(""), |u| units::format_cpu_time(u).into()),
            Field::Cgroup => Cow::Borrowed(job.cgroup.as_deref().unwrap_or_default()),
            Field::WorkDir => job.work_dir.to_string_lossy(),
            Field::StdOut => {
                if view.redacted {
                    Cow::Borrowed("")
                } else {
                    job.stdout_path().display().to_string().into()
                }
            }
            Field::StdErr => {
                if view.redacted {
                    Cow::Borrowed("")
                } else {
                    job.stderr_path()
                        .unwrap_or_else(|| job.stdout_path())
                        .display()
                        .to_string()
                        .into()
                }
            }
            Field::Comment => Cow::Borrowed(job.comment.as_deref().unwrap_or_default()),
            Field::Dependency => Cow::Borrowed(job.dependency.as_deref().unwrap_or("(null)")),
            Field::Partition => Cow::Borrowed("ysched"),
            Field::ContainerImage => match (&job.image, &job.container) {
                (Some(image), _) => image.to_string().into(),
                (None, Some(request)) => Cow::Borrowed(request.image.as_str()),
                (None, None) => Cow::Borrowed(""),
            },
            _ => return None,
        })
    }
}

/// Slurm's one-word code for why `view`'s job waits or how it ended.
fn reason_code(view: &JobView) -> &str {
    let job = &view.job;
    match job.state {
        JobState::Pending => view.pending_reason.as_deref().unwrap_or("None"),
        JobState::Failed if job.exit.is_some_and(|e| e.signal != 0) => "RaisedSignal",
        JobState::Failed => "NonZeroExitCode",
        JobState::Timeout => "TimeLimit",
        JobState::NodeFail => "NodeDown",
        JobState::OutOfMemory => "OutOfMemory",
        _ => "None",
    }
}

/// Each column of `columns` headed `Reason` shows Slurm's code instead of
/// the words, as Slurm's own commands do (`ReasonText` keeps the words).
pub fn with_reason_codes(columns: &mut [Column]) {
    for column in columns {
        if column.field == Field::Reason && column.header.eq_ignore_ascii_case("reason") {
            column.field = Field::ReasonCode;
        }
    }
}

/// `(Reason)`, as squeue shows a pending job in NODELIST(REASON).
fn write_pending_reason(out: &mut String, view: &JobView) {
    out.push('(');
    out.push_str(view.pending_reason.as_deref().unwrap_or("None"));
    out.push(')');
}

/// The GPUs a job asks for: `2`, `a100:2`, `shard:1`.
fn write_gpus(out: &mut String, job: &crate::model::job::Job) {
    if job.gpus.shard {
        out.push_str("shard:");
    }
    if let Some(t) = job.gpus.gpu_type.as_deref().filter(|_| job.gpus.count > 0) {
        out.push_str(t);
        out.push(':');
    }
    let _ = write!(out, "{}", job.gpus.count);
}

/// Slurm's TRES string: `cpu=4,gres/gpu:a100=2,gres/gpu=2,mem=8G,node=1`.
fn tres(view: &JobView) -> String {
    let job = &view.job;
    let mut parts = vec![format!("cpu={}", job.cpus)];
    if job.gpus.count > 0 {
        let kind = if job.gpus.shard { "shard" } else { "gpu" };
        if let Some(t) = &job.gpus.gpu_type {
            parts.push(format!("gres/{kind}:{t}={}", job.gpus.count));
        }
        parts.push(format!("gres/{kind}={}", job.gpus.count));
    }
    if let Some(m) = job.mem_mb {
        parts.push(format!("mem={}", units::format_memory_mb(m)));
    }
    parts.push("node=1".into());
    parts.join(",")
}

/// The cells of one row; private fields blank when `redact`.
pub fn cells(fields: &[Field], view: &JobView, now: i64, redact: bool) -> Vec<String> {
    folded_cells(fields, view, now, redact, None)
}

/// As `cells`, for a row that stands for pending tasks of an array:
/// `tasks` is their list (`[5-9%2]`), shown as Slurm shows it.
pub fn folded_cells(
    fields: &[Field],
    view: &JobView,
    now: i64,
    redact: bool,
    tasks: Option<&str>,
) -> Vec<String> {
    let mut cells = Vec::new();
    folded_cells_into(&mut cells, fields, view, now, redact, tasks);
    cells
}

/// As `folded_cells`, into `cells`, whose strings are reused: a listing
/// renders every row into the same buffers.
pub fn folded_cells_into(
    cells: &mut Vec<String>,
    fields: &[Field],
    view: &JobView,
    now: i64,
    redact: bool,
    tasks: Option<&str>,
) {
    cells.resize_with(fields.len(), String::new);
    for (cell, f) in cells.iter_mut().zip(fields) {
        cell.clear();
        match (f, tasks, &view.job.array) {
            (Field::JobId, Some(t), Some(a)) => {
                let _ = write!(cell, "{}_{t}", a.job_id);
            }
            (Field::ArrayTaskId, Some(t), _) => cell.push_str(t),
            _ if redact && f.is_private() => {}
            _ => f.write_text(view, now, cell),
        }
        if let Cow::Owned(escaped) = escape_controls(cell, false) {
            *cell = escaped;
        }
    }
}

/// `text` with its control characters (escape sequences, line breaks,
/// C1 codes) written as `\u{1b}`: what users typed is shown, never obeyed
/// by the terminal of whoever lists it. `keep_lines` lets line breaks and
/// tabs through, for text laid out in lines.
pub fn escape_controls(text: &str, keep_lines: bool) -> Cow<'_, str> {
    // A byte scan first: listings check every cell, and a whole listing
    // (megabytes) on its way out, whose line breaks pass here too. 0xC2
    // leads the encodings of U+0080..U+00BF, where the C1 controls are.
    let kept_byte = |b: u8| keep_lines && (b == b'\n' || b == b'\t');
    let suspect = |b: u8| (b < 0x20 && !kept_byte(b)) || b == 0x7f || b == 0xc2;
    if !text.bytes().any(suspect) {
        return Cow::Borrowed(text);
    }
    let kept = |c: char| keep_lines && (c == '\n' || c == '\t');
    if !text.chars().any(|c| c.is_control() && !kept(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() && !kept(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The uid in a reason `cancelled by NAME (uid N)`.
fn canceller_uid(reason: &str) -> Option<u32> {
    let rest = reason.strip_prefix("cancelled by ")?;
    let uid = rest.split("(uid ").nth(1)?.strip_suffix(')')?;
    uid.parse().ok()
}

/// Folds runs of pending tasks of one array into one row, as squeue and
/// sacct show them (`123_[5-9%2]`): fed views in order, it gives back rows
/// ready to print, each with the task list it stands for (if folded). It
/// keeps only the first view of a run and its task ids.
pub struct ArrayFolder<V> {
    first: Option<V>,
    tasks: Vec<u32>,
}

impl<V> Default for ArrayFolder<V> {
    fn default() -> Self {
        ArrayFolder {
            first: None,
            tasks: Vec::new(),
        }
    }
}

impl<V: std::borrow::Borrow<JobView>> ArrayFolder<V> {
    pub fn push(&mut self, view: V) -> Vec<(V, Option<String>)> {
        let job = &view.borrow().job;
        let task = match (&job.array, job.state) {
            (Some(a), JobState::Pending) => Some((a.job_id, a.task_id)),
            _ => None,
        };
        let same_run = match (&self.first, task) {
            (Some(first), Some((array, _))) => first
                .borrow()
                .job
                .array
                .as_ref()
                .is_some_and(|a| a.job_id == array),
            _ => false,
        };
        if let (true, Some((_, t))) = (same_run, task) {
            self.tasks.push(t);
            return Vec::new();
        }
        let mut out: Vec<(V, Option<String>)> = self.finish().into_iter().collect();
        match task {
            Some((_, t)) => {
                self.first = Some(view);
                self.tasks = vec![t];
            }
            None => out.push((view, None)),
        }
        out
    }

    /// The run held back, if any.
    pub fn finish(&mut self) -> Option<(V, Option<String>)> {
        let first = self.first.take()?;
        let tasks = std::mem::take(&mut self.tasks);
        if tasks.len() < 2 {
            return Some((first, None));
        }
        let throttle = first
            .borrow()
            .job
            .array
            .as_ref()
            .and_then(|a| a.spec.split_once('%').map(|(_, n)| format!("%{n}")))
            .unwrap_or_default();
        let mut tasks = tasks;
        tasks.sort_unstable();
        let list = crate::array::format_ranges(&tasks);
        Some((first, Some(format!("[{list}{throttle}]"))))
    }
}

/// How wide a column is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    /// As wide as its widest value (the default views).
    Auto,
    /// Exactly this wide: padded, or cut (Slurm's `%.10M`, sacct's `Name%10`).
    Exact(usize),
    /// As the value is, unpadded (a `%` code without a width).
    Natural,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    pub field: Field,
    pub header: String,
    pub width: Width,
    pub right: bool,
}

impl Column {
    pub fn auto(field: Field) -> Column {
        Column {
            field,
            header: field.header().to_string(),
            width: Width::Auto,
            right: false,
        }
    }
}

/// A parsed squeue `-o` format: literal text between columns is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqueueFormat {
    /// Literal text before each column, then the column.
    pub parts: Vec<(String, Column)>,
    pub trailer: String,
}

/// Parses Slurm's squeue format: `%[.][width]code`, `%%` for a percent sign.
/// Why a listing's format does not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("format '{0}' ends after '%'")]
    EndsAfterPercent(String),
    #[error("unknown format code %{code} in '{format}'")]
    UnknownCode { code: char, format: String },
    #[error("format '{0}' has no % field")]
    NoField(String),
    #[error("invalid width in '{0}'")]
    Width(String),
    #[error("unknown field '{name}' (known: {known})")]
    UnknownField { name: String, known: String },
    #[error("empty --format")]
    Empty,
    /// squeue's own words, which tools match.
    #[error("Invalid job format specification: {0}")]
    UnknownLongField(String),
}

pub fn parse_squeue_format(format: &str) -> Result<SqueueFormat, FormatError> {
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            literal.push(c);
            continue;
        }
        if chars.peek() == Some(&'%') {
            chars.next();
            literal.push('%');
            continue;
        }
        let right = chars.peek() == Some(&'.');
        if right {
            chars.next();
        }
        let mut digits = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            digits.push(*d);
            chars.next();
        }
        let code = chars
            .next()
            .ok_or_else(|| FormatError::EndsAfterPercent(format.to_string()))?;
        let field = Field::from_squeue_code(code).ok_or_else(|| FormatError::UnknownCode {
            code,
            format: format.to_string(),
        })?;
        let width = match digits.parse::<usize>() {
            Ok(w) if w > 0 => Width::Exact(w.min(1000)),
            _ => Width::Natural,
        };
        parts.push((
            std::mem::take(&mut literal),
            Column {
                field,
                header: field.header().to_string(),
                width,
                right,
            },
        ));
    }
    if parts.is_empty() {
        return Err(FormatError::NoField(format.to_string()));
    }
    Ok(SqueueFormat {
        parts,
        trailer: literal,
    })
}

/// One `--format` item as Slurm writes it: a field name and an optional
/// `%WIDTH` (`%-WIDTH` too, which asks for the same width), 1 to 1000.
pub fn split_width(item: &str) -> Result<(&str, Option<usize>), FormatError> {
    match item.split_once('%') {
        Some((name, w)) => {
            let w: usize = w
                .strip_prefix('-')
                .unwrap_or(w)
                .parse()
                .map_err(|_| FormatError::Width(item.to_string()))?;
            Ok((name, Some(w.clamp(1, 1000))))
        }
        None => Ok((item, None)),
    }
}

/// Parses sacct's `--format`: comma-separated field names, each with an
/// optional `%WIDTH`.
pub fn parse_sacct_format(format: &str) -> Result<Vec<Column>, FormatError> {
    let mut columns = Vec::new();
    for item in format.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, width) = split_width(item)?;
        let width = width.map_or(Width::Auto, Width::Exact);
        let not_kept = || {
            SACCT_NOT_KEPT
                .iter()
                .find(|n| n.eq_ignore_ascii_case(name))
                .map(|n| (*n, Field::NotKept))
        };
        let (canonical, field) =
            Field::from_sacct_name(name)
                .or_else(not_kept)
                .ok_or_else(|| {
                    let known: Vec<&str> = Field::SACCT.iter().map(|(n, _)| *n).collect();
                    FormatError::UnknownField {
                        name: name.to_string(),
                        known: known.join(", "),
                    }
                })?;
        columns.push(Column {
            field,
            header: canonical.to_string(),
            width,
            right: false,
        });
    }
    if columns.is_empty() {
        return Err(FormatError::Empty);
    }
    Ok(columns)
}

/// Characters in a cell (cells are mostly ASCII: no decoding then).
fn width_of(text: &str) -> usize {
    if text.is_ascii() {
        text.len()
    } else {
        text.chars().count()
    }
}

/// Appends `value` to `out` at its column's width: padded, or cut (with
/// `marker` as the last character when given).
fn fit_into(
    out: &mut String,
    value: &str,
    width: Width,
    column_width: usize,
    right: bool,
    marker: Option<char>,
) {
    let w = match width {
        Width::Natural => {
            out.push_str(value);
            return;
        }
        Width::Auto => column_width,
        Width::Exact(w) => w,
    };
    let len = width_of(value);
    if len > w {
        out.extend(
            value
                .chars()
                .take(w.saturating_sub(marker.is_some() as usize)),
        );
        if let Some(m) = marker {
            out.push(m);
        }
        return;
    }
    let pad = w - len;
    if right {
        push_spaces(out, pad);
        out.push_str(value);
    } else {
        out.push_str(value);
        push_spaces(out, pad);
    }
}

/// Appends `n` spaces, a slice at a time rather than a char at a time.
fn push_spaces(out: &mut String, mut n: usize) {
    const SPACES: &str = "                                                                ";
    while n > 0 {
        let take = n.min(SPACES.len());
        out.push_str(&SPACES[..take]);
        n -= take;
    }
}

/// A row of cells to lay out: owned strings, or a compact streamed row.
pub trait Cells {
    fn cell(&self, i: usize) -> &str;
}

impl Cells for Vec<String> {
    fn cell(&self, i: usize) -> &str {
        self.get(i).map_or("", String::as_str)
    }
}

impl Cells for table::RowRef<'_> {
    fn cell(&self, i: usize) -> &str {
        table::RowRef::cell(self, i)
    }
}

fn auto_widths<R: Cells>(columns: &[&Column], header: bool, rows: &[R]) -> Vec<usize> {
    let mut widths: Vec<usize> = columns
        .iter()
        .map(|c| if header { width_of(&c.header) } else { 0 })
        .collect();
    // Row by row, not column by column: each row is read from memory once
    // (a listing of 100,000 rows does not fit in the cache).
    for row in rows {
        for (i, width) in widths.iter_mut().enumerate() {
            *width = (*width).max(width_of(row.cell(i)));
        }
    }
    widths
}

impl SqueueFormat {
    pub fn fields(&self) -> Vec<Field> {
        self.parts.iter().map(|(_, c)| c.field).collect()
    }
}

pub fn fields_of(columns: &[Column]) -> Vec<Field> {
    columns.iter().map(|c| c.field).collect()
}

/// Renders rows (cells in the format's field order) in squeue's format,
/// literal text kept between columns.
pub fn render_squeue<R: Cells>(format: &SqueueFormat, rows: Vec<R>, header: bool) -> String {
    let columns: Vec<&Column> = format.parts.iter().map(|(_, c)| c).collect();
    let widths = auto_widths(&columns, header, &rows);
    let mut out = String::with_capacity(rows.len() * (widths.iter().sum::<usize>() + 16));
    fn line<'a>(
        out: &mut String,
        format: &SqueueFormat,
        widths: &[usize],
        cell: impl Fn(usize) -> &'a str,
    ) {
        let start = out.len();
        for (i, (literal, column)) in format.parts.iter().enumerate() {
            out.push_str(literal);
            fit_into(out, cell(i), column.width, widths[i], column.right, None);
        }
        out.push_str(&format.trailer);
        // No trailing blanks (the line's own; earlier lines end in '\n').
        let kept = start + out[start..].trim_end().len();
        out.truncate(kept);
        out.push('\n');
    }
    if header {
        line(&mut out, format, &widths, |i| columns[i].header.as_str());
    }
    for row in &rows {
        line(&mut out, format, &widths, |i| row.cell(i));
    }
    out
}

/// Renders an aligned table, columns separated by a space and headed by a
/// line of dashes, as sacct does.
pub fn render_table(columns: &[Column], rows: Vec<Vec<String>>, header: bool) -> String {
    render_table_fitted(columns, rows, header, None).0
}

/// A table in parts: the first part's rows fit the widths (returned), and
/// later parts reuse them, cutting longer cells with `+` as sacct does.
pub fn render_table_fitted(
    columns: &[Column],
    rows: Vec<Vec<String>>,
    header: bool,
    widths: Option<Vec<usize>>,
) -> (String, Vec<usize>) {
    let cols: Vec<&Column> = columns.iter().collect();
    let widths = widths.unwrap_or_else(|| auto_widths(&cols, header, &rows));
    let mut out = String::new();
    let mut line = |cells: Vec<String>| {
        let text: Vec<String> = cells
            .iter()
            .zip(columns)
            .enumerate()
            .map(|(i, (cell, c))| {
                let mut text = String::new();
                fit_into(&mut text, cell, c.width, widths[i], c.right, Some('+'));
                text
            })
            .collect();
        let _ = writeln!(out, "{}", text.join(" ").trim_end());
    };
    if header {
        line(columns.iter().map(|c| c.header.clone()).collect());
        line(
            columns
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let w = match c.width {
                        Width::Exact(w) => w,
                        _ => widths[i],
                    };
                    "-".repeat(w)
                })
                .collect(),
        );
    }
    for row in rows {
        line(row);
    }
    (out, widths)
}

/// `|`-separated rows: sacct's `--parsable2` (no trailing `|`) or
/// `--parsable` (trailing `|`).
pub fn render_parsable(
    columns: &[Column],
    rows: Vec<Vec<String>>,
    header: bool,
    trailing: bool,
) -> String {
    let mut out = String::new();
    let end = if trailing { "|" } else { "" };
    if header {
        let names: Vec<&str> = columns.iter().map(|c| c.header.as_str()).collect();
        let _ = writeln!(out, "{}{end}", names.join("|"));
    }
    for row in rows {
        let cells: Vec<String> = row.into_iter().map(|c| c.replace('|', " ")).collect();
        let _ = writeln!(out, "{}{end}", cells.join("|"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::job::Job;

    #[test]
    fn pending_tasks_of_an_array_fold_into_ranges() {
        let task = |id: u64, t: u32, state: JobState| {
            let mut v = view(id, state);
            std::sync::Arc::make_mut(&mut v.job).array = Some(crate::model::job::ArrayTask {
                job_id: 10,
                task_id: t,
                spec: "0-9%2".into(),
            });
            v
        };
        let views = vec![
            task(10, 0, JobState::Running),
            task(11, 1, JobState::Pending),
            task(12, 2, JobState::Pending),
            task(13, 3, JobState::Pending),
            task(15, 5, JobState::Pending),
            view(20, JobState::Pending),
        ];
        let mut folder = ArrayFolder::default();
        let mut rows: Vec<(u64, Option<String>)> = Vec::new();
        for v in &views {
            rows.extend(folder.push(v).into_iter().map(|(v, t)| (v.job.id, t)));
        }
        rows.extend(folder.finish().map(|(v, t)| (v.job.id, t)));
        assert_eq!(
            rows,
            vec![(10, None), (11, Some("[1-3,5%2]".into())), (20, None)]
        );
        let cells = folded_cells(
            &[Field::JobId, Field::ArrayTaskId],
            &views[1],
            0,
            false,
            Some("[1-3,5%2]"),
        );
        assert_eq!(cells, vec!["10_[1-3,5%2]", "[1-3,5%2]"]);
        assert_eq!(canceller_uid("cancelled by alice (uid 1000)"), Some(1000));
        assert_eq!(canceller_uid("preempted by job 4"), None);
    }

    fn view(id: u64, state: JobState) -> JobView {
        let running = state != JobState::Pending;
        JobView {
            job: std::sync::Arc::new(Job {
                state,
                submit_time: 0,
                start_time: running.then_some(100),
                gpus_alloc: vec![0, 1],
                node: running.then(|| "gpu01".into()),
                work_dir: "/w".into(),
                submit_dir: "/w".into(),
                comment: None,
                ..crate::model::job::example_job(id)
            }),
            pending_reason: (!running).then(|| "Resources".into()),
            priority: 100,
            factors: None,
            expected_start: None,
            redacted: false,
            step: None,
        }
    }

    #[test]
    fn squeue_codes_and_widths() {
        let f = parse_squeue_format("%.5i %3j|%t %M %l %b %R %%").unwrap();
        let rows = [view(17, JobState::Running), view(18, JobState::Pending)]
            .iter()
            .map(|v| cells(&f.fields(), v, 142, false))
            .collect();
        let out = render_squeue(&f, rows, true);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            "JOBID NAM|ST TIME TIME_LIMIT TRES_PER_NODE NODELIST(REASON) %"
        );
        assert_eq!(lines[1], "   17 tra|R 0:42 30:00 gres/gpu:a100:2 gpu01 %");
        assert_eq!(
            lines[2],
            "   18 tra|PD 0:00 30:00 gres/gpu:a100:2 (Resources) %"
        );
        assert!(parse_squeue_format("%$")
            .unwrap_err()
            .to_string()
            .contains("unknown format code %$"));
        assert!(parse_squeue_format("no codes").is_err());
    }

    #[test]
    fn sacct_fields_parsable_and_truncated() {
        let cols = parse_sacct_format("JobID,jobname%3,State,ExitCode,AllocTRES").unwrap();
        let rows = || {
            vec![cells(
                &fields_of(&cols),
                &view(17, JobState::Running),
                142,
                false,
            )]
        };
        let out = render_parsable(&cols, rows(), true, false);
        assert_eq!(out, "JobID|JobName|State|ExitCode|AllocTRES\n17|train|RUNNING|0:0|cpu=4,gres/gpu:a100=2,gres/gpu=2,mem=8G,node=1\n");
        let table = render_table(&cols, rows(), false);
        assert!(table.starts_with("17 tr+ RUNNING 0:0 cpu=4"), "{table}");
        assert!(parse_sacct_format("JobID,Bogus")
            .unwrap_err()
            .to_string()
            .contains("unknown field 'Bogus'"));
        let private = cells(
            &[Field::JobId, Field::WorkDir, Field::Comment],
            &view(17, JobState::Running),
            142,
            true,
        );
        assert_eq!(
            private,
            vec!["17".to_string(), String::new(), String::new()]
        );
    }

    #[test]
    fn control_characters_in_cells_are_shown_not_obeyed() {
        let mut v = view(1, JobState::Pending);
        std::sync::Arc::make_mut(&mut v.job).name = "a\x1b[2J\nb\u{9b}c é".into();
        let cells = cells(&[Field::Name], &v, 0, false);
        assert_eq!(cells[0], "a\\u{1b}[2J\\nb\\u{9b}c é");
        assert_eq!(escape_controls("x\ty\n", true), Cow::Borrowed("x\ty\n"));
        assert_eq!(escape_controls("a\n\x1bb\n", true), "a\n\\u{1b}b\n");
        assert_eq!(escape_controls("a\nb", false), "a\\nb");
        assert_eq!(escape_controls("plain", false), Cow::Borrowed("plain"));
    }

    #[test]
    fn reused_cells_carry_nothing_over_from_the_row_before() {
        let fields = [Field::JobId, Field::NodeList, Field::Reason, Field::Comment];
        let mut first = view(17, JobState::Running);
        std::sync::Arc::make_mut(&mut first.job).comment = Some("a long comment".into());
        let mut buffers = Vec::new();
        folded_cells_into(&mut buffers, &fields, &first, 142, false, None);
        assert_eq!(buffers, vec!["17", "gpu01", "None", "a long comment"]);
        let second = view(8, JobState::Pending);
        folded_cells_into(&mut buffers, &fields, &second, 142, false, None);
        assert_eq!(buffers, cells(&fields, &second, 142, false));
        assert_eq!(buffers, vec!["8", "", "Resources", ""]);
        // Fewer fields than the buffers hold: the row is cut to the fields.
        folded_cells_into(&mut buffers, &fields[..1], &second, 142, false, None);
        assert_eq!(buffers, vec!["8"]);
    }

    #[test]
    fn written_values_equal_the_values_for_every_field() {
        let mut fields: Vec<Field> = Field::SACCT.iter().map(|(_, f)| *f).collect();
        fields.extend(('A'..='z').filter_map(Field::from_squeue_code));
        let mut array_task = view(30, JobState::Pending);
        let job = std::sync::Arc::make_mut(&mut array_task.job);
        job.array = Some(crate::model::job::ArrayTask {
            job_id: 29,
            task_id: 4,
            spec: "0-9%2".into(),
        });
        job.gpus.shard = true;
        job.gpus.gpu_type = None;
        let mut untyped = view(31, JobState::Running);
        std::sync::Arc::make_mut(&mut untyped.job).gpus.gpu_type = None;
        let mut no_reason = view(32, JobState::Pending);
        no_reason.pending_reason = None;
        let long_run = 3 * 86_400 + 7;
        assert_eq!(Field::JobId.text(&array_task, 142), "29_4");
        assert_eq!(Field::Gpus.text(&array_task, 142), "shard:2");
        assert_eq!(Field::Gpus.text(&untyped, 142), "2");
        assert_eq!(Field::NodeListReason.text(&no_reason, 142), "(None)");
        for v in [
            view(17, JobState::Running),
            view(18, JobState::Pending),
            array_task,
            untyped,
            no_reason,
        ] {
            for &f in &fields {
                for now in [142, long_run] {
                    let mut written = String::from("kept|");
                    f.write_text(&v, now, &mut written);
                    assert_eq!(written, format!("kept|{}", f.text(&v, now)), "{f:?}");
                }
            }
        }
    }

    #[test]
    fn wide_columns_are_padded_in_full() {
        let f = parse_squeue_format("%100i|%.70j|").unwrap();
        let rows = vec![cells(&f.fields(), &view(17, JobState::Running), 142, false)];
        let out = render_squeue(&f, rows, false);
        assert_eq!(
            out,
            format!("17{}|{}train|\n", " ".repeat(98), " ".repeat(65))
        );
    }
}
