//! What a job's user asks of a running job so that it runs again:
//! `yscontrol requeue` (`scontrol requeue`) stops it (SIGTERM, SIGKILL
//! after `kill_wait`) and puts it back in the queue with its id and one
//! more restart; `yscontrol checkpoint`, run by the job after each save,
//! says it has saved its work now, so that preempting it loses only what
//! it did since. Handlers over the core.

use crate::model::job::{JobId, JobState};
use crate::proto::Reply;

use super::effects::Effects;
use super::error::DaemonError;
use super::reads::Reads;
use super::requester::Requester;
use super::state::Core;

/// Requeues the running jobs `ids` for `who`.
pub(super) fn on_requeue(
    core: &mut Core,
    reads: &dyn Reads,
    ids: &[JobId],
    (who, now): (&Requester, i64),
    fx: &mut Effects,
) -> Result<Reply, DaemonError> {
    core.each_job(reads, ids, who, |core, id| {
        let job = &core.jobs[&id];
        if job.state != JobState::Running {
            return Ok(Some(format!(
                "job {} is {}; only running jobs can be requeued",
                job.display_id(),
                job.state
            )));
        }
        if job.no_requeue {
            let why = if job.interactive {
                "is an interactive session: a shell cannot be run again"
            } else {
                "was submitted with --no-requeue"
            };
            return Ok(Some(format!("job {} {why}", job.display_id())));
        }
        let owner = job.user.clone();
        // Pending as the end state: requeued once it is gone.
        let detail = format!("requeued by {}", who.user);
        core.terminate(id, JobState::Pending, &detail, now, fx);
        if owner != who.user {
            let what = format!("requeued job {id} of {owner}");
            fx.audit((now, who.channel), who.user, "requeue", Some(id), &what);
        }
        Ok(None)
    })
}

/// Records that the running jobs `ids` saved a checkpoint now.
pub(super) fn on_checkpoint(
    core: &mut Core,
    reads: &dyn Reads,
    ids: &[JobId],
    (who, now): (&Requester, i64),
    fx: &mut Effects,
) -> Result<Reply, DaemonError> {
    core.each_job(reads, ids, who, |core, id| {
        let job = core.jobs.job_mut(&id).expect("each_job gives active jobs");
        if job.state != JobState::Running {
            return Ok(Some(format!(
                "job {} is {}; only a running job has checkpoints",
                job.display_id(),
                job.state
            )));
        }
        job.checkpoint_at = Some(now);
        let job = job.clone();
        fx.job(&job);
        fx.views_changed();
        tracing::debug!(target: "ysched::daemon", "job {id} reported a checkpoint");
        Ok(None)
    })
}

#[cfg(test)]
mod tests {
    use super::super::effects::{Out, Row};
    use super::super::testing::{core_with, requester, Archive};
    use super::*;
    use crate::exec::spec::StepCommand;

    fn job(id: JobId, state: JobState, no_requeue: bool) -> crate::model::job::Job {
        let mut job = crate::model::job::example_job(id);
        job.state = state;
        job.uid = 1000;
        job.user = "u1000".into();
        job.no_requeue = no_requeue;
        job.node = Some("gpu01".into());
        job
    }

    #[test]
    fn a_running_job_is_stopped_to_run_again_unless_it_asked_not_to_be() {
        let mut core = core_with(vec![
            job(1, JobState::Running, false),
            job(2, JobState::Running, true),
            job(3, JobState::Pending, false),
        ]);
        let (reads, alice) = (Archive::default(), requester(1000, "u1000", false));
        let mut fx = Effects::default();
        let reply = on_requeue(&mut core, &reads, &[1, 2, 3], (&alice, 50), &mut fx).unwrap();
        let Reply::Control { outcomes, .. } = reply else {
            panic!("{reply:?}")
        };
        let errors: Vec<Option<String>> = outcomes.into_iter().map(|o| o.error).collect();
        assert_eq!(
            errors,
            [
                None,
                Some("job 2 was submitted with --no-requeue".into()),
                Some("job 3 is PENDING; only running jobs can be requeued".into())
            ]
        );
        assert_eq!(core.jobs[&1].state, JobState::Completing);
        assert_eq!(core.jobs[&1].kill_reason, Some(JobState::Pending));
        assert!(matches!(
            fx.outs(),
            [Out::Command {
                command: StepCommand::Terminate { .. },
                ..
            }]
        ));
    }

    #[test]
    fn a_checkpoint_is_a_running_jobs_and_recorded_now() {
        let mut core = core_with(vec![
            job(1, JobState::Running, false),
            job(2, JobState::Pending, false),
        ]);
        let (reads, alice) = (Archive::default(), requester(1000, "u1000", false));
        let mut fx = Effects::default();
        let reply = on_checkpoint(&mut core, &reads, &[1, 2], (&alice, 77), &mut fx).unwrap();
        let Reply::Control { outcomes, .. } = reply else {
            panic!("{reply:?}")
        };
        assert_eq!(outcomes[0].error, None);
        assert!(outcomes[1]
            .error
            .as_deref()
            .unwrap()
            .contains("only a running job"));
        assert_eq!(core.jobs[&1].checkpoint_at, Some(77));
        assert!(matches!(fx.rows(), [Row::Job(j)] if j.id == 1));
    }
}
