//! Cancelling jobs (`yscancel`, Slurm's `scancel`, the API's DELETE), or
//! signalling them (`--signal`): one handler over the core. A pending
//! job ends CANCELLED at once; a running one stops (COMPLETING, SIGTERM,
//! SIGKILL after `kill_wait`) and ends CANCELLED when its processes are
//! gone; a suspended one is thawed first, so that it can take the signal;
//! one stopping to be requeued ends cancelled instead, never to run
//! again. Users cancel their own jobs; administrators any, audited. What
//! leaves (the stop, the thaw, a signal) leaves after the commit.

use crate::exec::spec::StepCommand;
use crate::model::job::{JobId, JobState};
use crate::proto::{JobOutcome, JobSelector, Reply};

use super::access::AccessRefusal;
use super::effects::Effects;
use super::error::DaemonError;
use super::reads::Reads;
use super::requester::Requester;
use super::state::Core;

/// A cancel asked for: which jobs, and a signal instead of the stop.
pub(super) struct CancelAsk {
    pub(super) selector: JobSelector,
    pub(super) signal: Option<i32>,
    /// Which of the job's processes the signal goes to.
    pub(super) to: crate::proto::SignalTo,
}

/// Cancels (or signals) the jobs `ask` selects, for `who`: an outcome per
/// job, each refusal said.
pub(super) fn on_cancel(
    core: &mut Core,
    reads: &dyn Reads,
    ask: CancelAsk,
    who: &Requester,
    now: i64,
    fx: &mut Effects,
) -> Result<Reply, DaemonError> {
    let CancelAsk {
        selector,
        signal,
        to,
    } = ask;
    if selector.is_empty() {
        return Ok(Reply::Rejected {
            error: "no jobs selected: give job ids or a filter".into(),
        });
    }
    if let Some(u) = selector
        .user
        .as_ref()
        .filter(|_| selector.job_ids.is_empty())
    {
        if u != who.user && !who.admin {
            return Ok(Reply::Rejected {
                error: format!("permission denied: you may cancel only your own jobs, not {u}'s"),
            });
        }
    }
    let (targets, mut outcomes) = targets(core, reads, &selector, who)?;
    for id in targets {
        let error = match signal {
            Some(sig) => signal_job(core, id, (sig, to), fx),
            None => {
                cancel_job(core, reads, id, who, now, fx)?;
                None
            }
        };
        outcomes.push(JobOutcome::new(id, error));
    }
    outcomes.sort_by_key(|o| o.job_id);
    Ok(Reply::Control {
        outcomes,
        message: None,
    })
}

/// The active jobs `selector` names that `who` may cancel, and an outcome
/// for each it names that cannot be.
fn targets(
    core: &Core,
    reads: &dyn Reads,
    selector: &JobSelector,
    who: &Requester,
) -> Result<(Vec<JobId>, Vec<JobOutcome>), DaemonError> {
    let (expanded, mut outcomes) = core.expand(reads, &selector.job_ids)?;
    if selector.job_ids.is_empty() {
        let ids = core
            .jobs
            .all()
            .filter(|j| {
                selector.matches(j)
                    && (who.admin || j.uid == who.uid)
                    && core.within_vouch(reads, j, who)
            })
            .map(|j| j.id)
            .collect();
        return Ok((ids, outcomes));
    }
    let mut ids = Vec::new();
    for id in expanded {
        match core.refusal(reads, id, who)? {
            Some(refusal) => outcomes.push(JobOutcome {
                job_id: id,
                already_ended: matches!(refusal, AccessRefusal::Ended(_)),
                error: Some(refusal.into_message()),
            }),
            None if selector.matches(&core.jobs[&id]) => ids.push(id),
            None => {}
        }
    }
    Ok((ids, outcomes))
}

/// Cancels active job `id` for `who` (who may).
fn cancel_job(
    core: &mut Core,
    reads: &dyn Reads,
    id: JobId,
    who: &Requester,
    now: i64,
    fx: &mut Effects,
) -> Result<(), DaemonError> {
    let detail = format!("cancelled by {} (uid {})", who.user, who.uid);
    let owner = core.jobs[&id].user.clone();
    if owner != who.user {
        let what = format!("cancelled job {id} of {owner}");
        fx.audit((now, who.channel), who.user, "cancel", Some(id), &what);
    }
    // Thawed first, so that it can take SIGTERM and end.
    core.thaw(id, who.user, now, fx);
    match core.jobs[&id].state {
        JobState::Pending => {
            core.finish(
                reads,
                (id, JobState::Cancelled, now),
                None,
                Some(detail),
                fx,
            )?;
        }
        JobState::Running => core.terminate(id, JobState::Cancelled, &detail, now, fx),
        // Stopping to be requeued: it ends cancelled instead, never to run
        // again (its stop goes on as it was).
        JobState::Completing if core.jobs[&id].kill_reason == Some(JobState::Pending) => {
            let job = core.jobs.job_mut(&id).expect("active above");
            job.kill_reason = Some(JobState::Cancelled);
            job.reason = Some(detail.clone());
            let job = job.clone();
            fx.job(&job);
            fx.event(id, now, JobState::Completing, Some(&detail));
            fx.views_changed();
            tracing::info!(target: "ysched::daemon", "job {id} {detail} while it stopped to be requeued: it ends cancelled");
        }
        // Already stopping: cancelling again changes nothing.
        _ => {}
    }
    Ok(())
}

/// Sends `signal` to active job `id`'s processes (once the turn is
/// committed), or says why not.
fn signal_job(
    core: &Core,
    id: JobId,
    (signal, to): (i32, crate::proto::SignalTo),
    fx: &mut Effects,
) -> Option<String> {
    let job = &core.jobs[&id];
    if job.state != JobState::Running && job.state != JobState::Completing {
        return Some(format!(
            "job {id} is {}; only running jobs can be signalled",
            job.state
        ));
    }
    use crate::exec::spec::SignalTarget;
    let target = match to {
        crate::proto::SignalTo::Job => SignalTarget::Job,
        crate::proto::SignalTo::Steps => SignalTarget::Steps,
        crate::proto::SignalTo::BatchShell => SignalTarget::BatchShell,
    };
    let command = StepCommand::Signal { signal, target };
    fx.command(job, command);
    tracing::info!(target: "ysched::daemon", "job {id} sent signal {signal}");
    None
}

#[cfg(test)]
mod tests {
    use super::super::effects::{Out, Row};
    use super::super::testing::{core_with, requester, Archive};
    use super::*;
    use crate::array::JobRef;
    use crate::exec::spec::SignalTarget;
    use crate::model::job::{Hold, Job};

    fn job(id: JobId, state: JobState, uid: u32) -> Job {
        let mut job = crate::model::job::example_job(id);
        job.state = state;
        job.uid = uid;
        job.user = format!("u{uid}");
        if state != JobState::Pending {
            job.start_time = Some(100);
            job.node = Some("gpu01".into());
            job.gpus_alloc = vec![0];
        }
        job
    }

    fn ask(ids: &[JobId]) -> CancelAsk {
        CancelAsk {
            selector: JobSelector {
                job_ids: ids.iter().map(|&i| JobRef::Id(i)).collect(),
                ..Default::default()
            },
            signal: None,
            to: crate::proto::SignalTo::Job,
        }
    }

    fn states(fx: &Effects) -> Vec<(JobId, String)> {
        fx.rows()
            .iter()
            .filter_map(|r| match r {
                Row::Event { job, name, .. } => Some((*job, name.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_pending_job_ends_cancelled_and_a_running_one_stops_after_the_commit() {
        let mut core = core_with(vec![
            job(1, JobState::Pending, 1000),
            job(2, JobState::Running, 1000),
        ]);
        let mut fx = Effects::default();
        let reply = on_cancel(
            &mut core,
            &Archive::default(),
            ask(&[1, 2]),
            &requester(1000, "u1000", false),
            200,
            &mut fx,
        )
        .unwrap();
        let Reply::Control { outcomes, .. } = reply else {
            panic!("{reply:?}")
        };
        assert!(outcomes.iter().all(|o| o.error.is_none()), "{outcomes:?}");
        assert_eq!(
            states(&fx),
            [(1, "CANCELLED".to_string()), (2, "COMPLETING".to_string())]
        );
        assert!(!core.jobs.contains_key(&1), "ended, no longer active");
        assert_eq!(core.jobs[&2].state, JobState::Completing);
        assert_eq!(core.jobs[&2].kill_reason, Some(JobState::Cancelled));
        // Job 1's executor record goes, and job 2 is stopped: after the
        // commit, never in it.
        assert!(matches!(&fx.outs()[0], Out::Forget { job: 1, .. }));
        assert!(matches!(
            &fx.outs()[1],
            Out::Command {
                command: StepCommand::Terminate {
                    grace_secs: 30,
                    signal: None,
                    target: SignalTarget::Job
                },
                ..
            }
        ));
    }

    #[test]
    fn another_users_job_is_refused_and_an_administrators_cancel_is_audited() {
        let mut core = core_with(vec![job(1, JobState::Running, 1000)]);
        let mut ended = Archive::default();
        ended.jobs.insert(9, job(9, JobState::Completed, 1001));
        let mut fx = Effects::default();
        let bob = requester(1001, "u1001", false);
        let reply = on_cancel(&mut core, &ended, ask(&[1, 9, 77]), &bob, 200, &mut fx).unwrap();
        let Reply::Control { outcomes, .. } = reply else {
            panic!("{reply:?}")
        };
        let errors: Vec<String> = outcomes.iter().map(|o| o.error.clone().unwrap()).collect();
        assert_eq!(
            errors,
            [
                "permission denied: job 1 belongs to u1000",
                "job 9 has already finished (COMPLETED)",
                "job 77 does not exist"
            ]
        );
        assert!(outcomes[1].already_ended);
        assert!(
            fx.rows().is_empty() && fx.outs().is_empty(),
            "nothing changed"
        );
        let admin = requester(0, "root", true);
        on_cancel(&mut core, &ended, ask(&[1]), &admin, 200, &mut fx).unwrap();
        assert!(fx
            .rows()
            .iter()
            .any(|r| matches!(r, Row::Audit { action, job: Some(1), .. } if action == "cancel")));
    }

    #[test]
    fn a_suspended_job_is_thawed_before_its_stop_and_a_requeue_gives_way() {
        let mut stopping = job(2, JobState::Completing, 1000);
        stopping.kill_reason = Some(JobState::Pending);
        let mut core = core_with(vec![job(1, JobState::Suspended, 1000), stopping]);
        let mut fx = Effects::default();
        let alice = requester(1000, "u1000", false);
        on_cancel(
            &mut core,
            &Archive::default(),
            ask(&[1, 2]),
            &alice,
            200,
            &mut fx,
        )
        .unwrap();
        let kinds: Vec<&str> = fx
            .outs()
            .iter()
            .map(|o| match o {
                Out::Freeze { frozen: false, .. } => "thaw",
                Out::Command { .. } => "stop",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["thaw", "stop"], "thawed, then stopped");
        assert_eq!(core.jobs[&2].kill_reason, Some(JobState::Cancelled));
    }

    #[test]
    fn a_signal_goes_to_running_jobs_only_and_a_held_job_by_filter() {
        let mut held = job(3, JobState::Pending, 1000);
        held.hold = Some(Hold::User);
        let mut core = core_with(vec![job(1, JobState::Running, 1000), held]);
        let mut fx = Effects::default();
        let alice = requester(1000, "u1000", false);
        let mut signal = ask(&[1, 3]);
        signal.signal = Some(10);
        let reply =
            on_cancel(&mut core, &Archive::default(), signal, &alice, 200, &mut fx).unwrap();
        let Reply::Control { outcomes, .. } = reply else {
            panic!("{reply:?}")
        };
        assert_eq!(outcomes[0].error, None);
        assert_eq!(
            outcomes[1].error.as_deref(),
            Some("job 3 is PENDING; only running jobs can be signalled")
        );
        assert!(matches!(
            fx.outs(),
            [Out::Command {
                command: StepCommand::Signal { signal: 10, .. },
                ..
            }]
        ));
        // By filter: the user's own jobs only.
        let mut fx = Effects::default();
        let mine = CancelAsk {
            selector: JobSelector {
                user: Some("u1000".into()),
                ..Default::default()
            },
            signal: None,
            to: crate::proto::SignalTo::Job,
        };
        let bob = requester(1001, "u1001", false);
        let refused = on_cancel(&mut core, &Archive::default(), mine, &bob, 200, &mut fx).unwrap();
        assert!(
            matches!(refused, Reply::Rejected { ref error } if error.contains("only your own jobs")),
            "{refused:?}"
        );
    }
}
