//! Why a pending job waits, as `ysqueue` shows it.

use std::fmt;

/// Why a pending job waits, with Slurm's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Not looked at yet (just submitted).
    None,
    /// It would fit, but the resources are kept for a higher-priority job.
    Priority,
    /// Not enough free GPUs, CPUs or memory.
    Resources,
    BeginTime,
    JobHeldUser,
    JobHeldAdmin,
    /// Its account (or one above it) holds as many GPUs as it may.
    AssocGrpGRES,
    /// Its account (or one above it) runs as many jobs as it may.
    AssocGrpJobsLimit,
    /// Its user holds as many GPUs in the account as they may.
    AssocMaxGRESPerUser,
    /// Its user runs as many jobs in the account as they may.
    AssocMaxJobsLimit,
    /// Waits for the jobs its `--dependency` names.
    Dependency,
    /// Its dependency can never be satisfied (an `afterok` job failed).
    DependencyNeverSatisfied,
    /// Its array already runs as many tasks as its `%N` allows.
    JobArrayTaskLimit,
    /// Held until a coordinator of its account approves it.
    PendingApproval,
    /// Starting it would eat into GPUs another QoS keeps for its own jobs.
    ReservedForQos,
    /// Its account's budget (or one above) cannot cover what it may cost.
    AssocGrpBillingMinutes,
    /// Its user holds as many GPUs with its QoS as the QoS allows.
    QosMaxGresPerUser,
    /// It preempted running jobs and waits for them to stop; their GPUs
    /// are kept for it.
    Preempting,
    /// Its place is found and its container image is being pulled there
    /// (it holds nothing and is charged nothing meanwhile).
    ImagePull,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::None => "None",
            Reason::Priority => "Priority",
            Reason::Resources => "Resources",
            Reason::BeginTime => "BeginTime",
            Reason::JobHeldUser => "JobHeldUser",
            Reason::JobHeldAdmin => "JobHeldAdmin",
            Reason::AssocGrpGRES => "AssocGrpGRES",
            Reason::AssocGrpJobsLimit => "AssocGrpJobsLimit",
            Reason::AssocMaxGRESPerUser => "AssocMaxGRESPerUser",
            Reason::AssocMaxJobsLimit => "AssocMaxJobsLimit",
            Reason::Dependency => "Dependency",
            Reason::DependencyNeverSatisfied => "DependencyNeverSatisfied",
            Reason::JobArrayTaskLimit => "JobArrayTaskLimit",
            Reason::PendingApproval => "PendingApproval",
            Reason::ReservedForQos => "ReservedForQOS",
            Reason::AssocGrpBillingMinutes => "AssocGrpBillingMinutes",
            Reason::QosMaxGresPerUser => "QOSMaxGRESPerUser",
            Reason::Preempting => "Preempting",
            Reason::ImagePull => "ImagePull",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
