//! The record of every run a preemption or a reclaim stopped, and how it
//! went: did the victim exit within its grace (it checkpointed), how much
//! GPU time it lost, and did its next run resume (`ysreport`'s checkpoint
//! success). A reclaimed run that lost work is not charged for it.

use crate::db;
use crate::model::job::{ExitStatus, Job, JobId};

use super::effects::{Effects, Row};
use super::error::DaemonError;
use super::reads::Reads;
use super::state::Core;

/// How a stopped run ended, as its requeue needs it.
pub(super) struct Settled {
    /// It was stopped by a reclaim of a lender's guarantee.
    pub reclaimed: bool,
    /// Charge the run up to here, not to its end: a reclaimed run is not
    /// charged for the work it lost.
    pub charged_until: Option<i64>,
}

/// Records that `job`'s run is being stopped for job `by`; `kind` is
/// `preempt` or `reclaim`.
pub(super) fn record_stop(
    job: &Job,
    by: JobId,
    (kind, grace): (&str, u64),
    now: i64,
    fx: &mut Effects,
) {
    fx.row(Row::Stopped(Box::new(db::preemptions::Stopped {
        job: job.id,
        restart: job.restart_count,
        at: now,
        kind: kind.to_string(),
        by,
        account: job.account.clone(),
        user: job.user.clone(),
        gpus: job.gpus_alloc.len() as u32,
        grace,
    })));
}

impl Core {
    /// A stopped run is gone at `end`: it exited cleanly if it did so by
    /// itself within its grace; otherwise what it did since its last
    /// checkpoint is lost.
    pub(super) fn settle_stop(
        &self,
        reads: &dyn Reads,
        (id, end, exit): (JobId, i64, Option<ExitStatus>),
        fx: &mut Effects,
    ) -> Result<Settled, DaemonError> {
        let none = Settled {
            reclaimed: false,
            charged_until: None,
        };
        let Some(job) = self.jobs.get(&id) else {
            return Ok(none);
        };
        let Some((at, kind, grace)) = reads.pending_stop(id, job.restart_count)? else {
            return Ok(none);
        };
        let killed = exit.is_some_and(|e| e.signal == libc::SIGKILL);
        let clean = !killed && end <= at + grace as i64 + 1;
        let start = job.start_time.unwrap_or(end);
        let saved = job
            .checkpoint_at
            .max(reads.checkpoint_file_time(job))
            .unwrap_or(start)
            .clamp(start, end);
        let lost = if clean {
            0
        } else {
            (end - saved) * job.gpus_alloc.len() as i64
        };
        let exit = db::preemptions::Exit {
            at: end,
            clean,
            lost_gpu_secs: lost,
        };
        fx.row(Row::StopSettled {
            job: id,
            restart: job.restart_count,
            exit,
        });
        let reclaimed = kind == "reclaim";
        Ok(Settled {
            reclaimed,
            charged_until: (reclaimed && lost > 0).then_some(saved),
        })
    }

    /// `job`'s run after a stopped one has ended (or the job ended before
    /// it ran again): it resumed if it exited 0 or saved a checkpoint. A
    /// job that ends for good (`last`) never resumes from a stop of its
    /// last run.
    pub(super) fn settle_rerun(
        &self,
        reads: &dyn Reads,
        job: &Job,
        exit: Option<ExitStatus>,
        last: bool,
        fx: &mut Effects,
    ) {
        if last {
            fx.row(Row::Resumed {
                job: job.id,
                stopped_restart: job.restart_count,
                resumed: false,
            });
        }
        if job.restart_count == 0 {
            return;
        }
        let saved = job.checkpoint_at.max(reads.checkpoint_file_time(job));
        let resumed = job.start_time.is_some()
            && (exit.is_some_and(|e| e.code == 0 && e.signal == 0) || saved.is_some());
        fx.row(Row::Resumed {
            job: job.id,
            stopped_restart: job.restart_count - 1,
            resumed,
        });
    }
}
