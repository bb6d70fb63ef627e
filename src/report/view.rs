//! A job as the commands see it: the record with the queue's facts.

use serde::{Deserialize, Serialize};

use crate::model::job::Job;

/// A job as a command sees it. Another user's job comes `redacted`: its
/// paths, environment-derived fields and comment are blanked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    /// Shared with the daemon's state, not copied into each snapshot.
    #[serde(flatten)]
    pub job: std::sync::Arc<Job>,
    /// Why a pending job waits (Slurm's reason codes).
    pub pending_reason: Option<std::borrow::Cow<'static, str>>,
    pub priority: i64,
    /// A pending job's priority factors (`ysqueue --priority`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factors: Option<crate::sched::priority::Factors>,
    /// When a pending job with a reservation is expected to start
    /// (`ysqueue --start`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_start: Option<i64>,
    pub redacted: bool,
    /// A step of the job (`N.S` in accounting), when this view is one:
    /// its job, with the step's name, nodes, times, state and end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<StepOf>,
}

/// Which step of its job a view shows, its tasks, and what they used
/// (the view's job carries the step's peak memory and CPU time as the
/// job's own fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StepOf {
    pub id: crate::model::step::StepId,
    pub tasks: u32,
    /// As srun measured its tasks (none for the batch step, whose
    /// figures are its job cgroup's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::model::step::StepUsage>,
}

impl JobView {
    /// A job as the database has it: no queue facts (reason, priority,
    /// expected start), nothing redacted yet.
    pub fn stored(job: Job) -> JobView {
        JobView {
            job: std::sync::Arc::new(job),
            pending_reason: None,
            priority: 0,
            factors: None,
            expected_start: None,
            redacted: false,
            step: None,
        }
    }
}
