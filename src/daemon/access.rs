//! Who may act on which job: references expanded (arrays, tasks), and
//! why a request may not act on a job, if it may not (another user's,
//! ended, unknown, or beyond what a node's word alone reaches). Read by
//! every handler that acts on jobs; decides from the core and what it
//! reads, changes nothing.

use crate::array::JobRef;
use crate::model::job::JobId;
use crate::proto::{JobOutcome, Reply};

use super::error::DaemonError;
use super::reads::Reads;
use super::requester::Requester;
use super::state::Core;

/// The refusal a request gets that only admins may make (`what` they
/// may do), if `who` is not one.
pub(super) fn admins_only(who: &Requester, what: &str) -> Option<Reply> {
    (!who.admin).then(|| Reply::Rejected {
        error: format!("permission denied: only root and the config's admins may {what}"),
    })
}

/// Why a request may not act on a job.
pub(super) enum AccessRefusal {
    /// It is another user's.
    Denied(String),
    /// It has already ended.
    Ended(String),
    Missing(String),
}

impl AccessRefusal {
    pub(super) fn into_message(self) -> String {
        match self {
            AccessRefusal::Denied(m) | AccessRefusal::Ended(m) | AccessRefusal::Missing(m) => m,
        }
    }
}

impl Core {
    /// The jobs the references name: an array's id names its active tasks
    /// (or, when none is active, the id itself, for the "finished" answer);
    /// `12_3` the task. Tasks that never existed come back as outcomes.
    pub(super) fn expand(
        &self,
        reads: &dyn Reads,
        refs: &[JobRef],
    ) -> Result<(Vec<JobId>, Vec<JobOutcome>), DaemonError> {
        let mut ids = Vec::new();
        let mut unknown = Vec::new();
        for r in refs {
            let active: Vec<JobId> = self
                .jobs
                .all()
                .filter(|j| r.matches(j))
                .map(|j| j.id)
                .collect();
            if !active.is_empty() {
                ids.extend(active);
                continue;
            }
            match *r {
                JobRef::Id(id) => ids.push(id),
                JobRef::Task(array, task) => match reads.array_task(array, task)? {
                    Some(id) => ids.push(id),
                    None => unknown.push(JobOutcome::new(
                        array,
                        Some(format!("job {r} does not exist")),
                    )),
                },
            }
        }
        ids.dedup();
        Ok((ids, unknown))
    }

    /// Why `id` is not an active job `who` may act on, if it is not: it
    /// is another user's (and `who` no administrator), it has ended, it
    /// never existed, or `who` asks on a node's word alone and it neither
    /// runs on that node nor was submitted there.
    pub(super) fn refusal(
        &self,
        reads: &dyn Reads,
        id: JobId,
        who: &Requester,
    ) -> Result<Option<AccessRefusal>, DaemonError> {
        let denied = |user: &str| {
            AccessRefusal::Denied(format!("permission denied: job {id} belongs to {user}"))
        };
        match self.jobs.get(&id) {
            Some(job) if !self.within_vouch(reads, job, who) => {
                let (node, why) = who.vouched_by.unwrap_or_default();
                Ok(Some(AccessRefusal::Denied(format!(
                    "job {id} was neither submitted on nor runs on node {node}: without your token ({why}) {node} acts only on those; ystoken --save on the controller keeps one for the pool's nodes"
                ))))
            }
            Some(job) if job.uid == who.uid || who.admin => Ok(None),
            Some(job) => Ok(Some(denied(&job.user))),
            None => match reads.ended_job(id)? {
                Some(job) if job.uid != who.uid && !who.admin => Ok(Some(denied(&job.user))),
                Some(job) => Ok(Some(AccessRefusal::Ended(format!(
                    "job {id} has already finished ({})",
                    job.state
                )))),
                None => Ok(Some(AccessRefusal::Missing(format!(
                    "job {id} does not exist"
                )))),
            },
        }
    }

    /// Whether `job` is one the node that vouches for `who` (if one
    /// does) may act on: it runs there, or was submitted there.
    pub(super) fn within_vouch(
        &self,
        reads: &dyn Reads,
        job: &crate::model::job::Job,
        who: &Requester,
    ) -> bool {
        let Some((node, _)) = who.vouched_by else {
            return true;
        };
        if job.runs_on(node) {
            return true;
        }
        let submission = job.array.as_ref().map_or(job.id, |a| a.job_id);
        match reads.submitted_on(submission) {
            Ok(on) => on.as_deref() == Some(node),
            Err(e) => {
                tracing::error!(target: "ysched::daemon", "cannot read where job {} was submitted: {e}", job.id);
                false
            }
        }
    }

    /// Runs `act` on each of `ids` that `who` may act on; the reply gives
    /// each job's outcome (`Some`: why not).
    pub(super) fn each_job(
        &mut self,
        reads: &dyn Reads,
        ids: &[JobId],
        who: &Requester,
        mut act: impl FnMut(&mut Core, JobId) -> Result<Option<String>, DaemonError>,
    ) -> Result<crate::proto::Reply, DaemonError> {
        let mut outcomes = Vec::new();
        for &id in ids {
            let error = match self.refusal(reads, id, who)? {
                Some(refusal) => Some(refusal.into_message()),
                None => act(self, id)?,
            };
            outcomes.push(JobOutcome::new(id, error));
        }
        Ok(crate::proto::Reply::Control {
            outcomes,
            message: None,
        })
    }
}
