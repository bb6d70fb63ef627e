//! Holds, releases and approvals (`yscontrol hold|release|approve`,
//! `scontrol hold|release`): handlers over the core. A user holds their
//! own pending jobs (a user's hold), an administrator any (an
//! administrator's hold, which only an administrator releases). A job
//! waiting for approval is released by approving it: by a coordinator of
//! its account (or of one above it) or an administrator, never on a
//! node's word alone; who approved is kept, and audited. A release
//! forgives a job's quick requeues (`sched::requeue`).

use crate::model::job::{Hold, JobId, JobState};
use crate::proto::{JobOutcome, Reply};

use super::effects::Effects;
use super::error::{DaemonError, Refusal};
use super::reads::Reads;
use super::requester::Requester;
use super::state::Core;

/// Holds the pending jobs `ids` for `who`.
pub(super) fn on_hold(
    core: &mut Core,
    reads: &dyn Reads,
    ids: &[JobId],
    (who, now): (&Requester, i64),
    fx: &mut Effects,
) -> Result<Reply, DaemonError> {
    let hold = if who.admin { Hold::Admin } else { Hold::User };
    set_holds(
        core,
        reads,
        ids,
        (who, now),
        fx,
        |id, current| match current {
            // An administrator's hold replaces it; a user's would lose it.
            Ok(Some(Hold::Approval)) if !who.admin => {
                Err(format!("job {id} is already held, waiting for approval").into())
            }
            Ok(_) => Ok(Some(hold)),
            Err(state) => Err(format!("job {id} is {state}; only pending jobs can be held").into()),
        },
    )
}

/// Releases the held jobs `ids` for `who`; releasing a job held for
/// approval is approving it.
pub(super) fn on_release(
    core: &mut Core,
    reads: &dyn Reads,
    ids: &[JobId],
    (who, now): (&Requester, i64),
    fx: &mut Effects,
) -> Result<Reply, DaemonError> {
    let (approvals, holds): (Vec<JobId>, Vec<JobId>) = ids.iter().partition(|id| {
        core.jobs
            .get(id)
            .is_some_and(|j| j.hold == Some(Hold::Approval))
    });
    let approved = on_approve(core, reads, &approvals, (who, now), fx)?;
    let admin = who.admin;
    let released = set_holds(
        core,
        reads,
        &holds,
        (who, now),
        fx,
        |id, current| match current {
            Ok(Some(Hold::Admin)) if !admin => {
                Err(format!("job {id} is held by an administrator; ask one to release it").into())
            }
            Ok(None) => Err(format!("job {id} is not held").into()),
            Ok(Some(_)) => Ok(None),
            Err(state) => {
                Err(format!("job {id} is {state}; only pending jobs can be released").into())
            }
        },
    )?;
    Ok(released.with_outcomes(approved.into_outcomes()))
}

/// Lets the jobs `ids` held for approval run, for a coordinator of the
/// job's account (or one above it) or an administrator; who approved is
/// kept.
pub(super) fn on_approve(
    core: &mut Core,
    reads: &dyn Reads,
    ids: &[JobId],
    (who, now): (&Requester, i64),
    fx: &mut Effects,
) -> Result<Reply, DaemonError> {
    let policy = crate::sched::limits::Policy::new(&core.config);
    let mut outcomes = Vec::new();
    let mut approved = Vec::new();
    for &id in ids {
        let error = match core.jobs.get(&id) {
            None => Some(match reads.ended_job(id)? {
                Some(job) => format!(
                    "job {} has already finished ({})",
                    job.display_id(),
                    job.state
                ),
                None => format!("job {id} does not exist"),
            }),
            Some(job) if job.hold != Some(Hold::Approval) => Some(format!(
                "job {} is not waiting for approval",
                job.display_id()
            )),
            Some(job) if who.vouched_by.is_some() => Some(format!(
                "job {} waits for approval: approving from a node needs your token (ystoken --save on the controller)",
                job.display_id()
            )),
            Some(job)
                if !who.admin
                    && !crate::sched::approval::may_approve(&policy, &job.account, who.user) =>
            {
                let names = crate::sched::approval::coordinators(&policy, &job.account);
                Some(format!(
                    "permission denied: job {} waits for approval by a coordinator of account {} ({}) or an administrator",
                    job.display_id(),
                    job.account,
                    if names.is_empty() { "none named".to_string() } else { names.join(", ") }
                ))
            }
            Some(_) => None,
        };
        if error.is_none() {
            approved.push(id);
        }
        outcomes.push(JobOutcome::new(id, error));
    }
    for id in approved {
        let job = core.jobs.job_mut(&id).expect("active above");
        job.hold = None;
        job.approved_by = Some(who.user.to_string());
        let job = job.clone();
        let detail = format!("approved by {}", who.user);
        fx.job(&job);
        fx.event(id, now, JobState::Pending, Some(&detail));
        let what = format!("approved job {id} of {}", job.user);
        fx.audit((now, who.channel), who.user, "approve", Some(id), &what);
        fx.queue_changed();
        tracing::info!(target: "ysched::daemon", "job {id} {detail}");
    }
    Ok(Reply::Control {
        outcomes,
        message: None,
    })
}

/// Applies `decide` (from the current hold, or the state of a job that is
/// not pending, to the new hold or a refusal) to each of `ids` `who` may
/// act on.
fn set_holds(
    core: &mut Core,
    reads: &dyn Reads,
    ids: &[JobId],
    (who, now): (&Requester, i64),
    fx: &mut Effects,
    decide: impl Fn(JobId, Result<Option<Hold>, JobState>) -> Result<Option<Hold>, Refusal>,
) -> Result<Reply, DaemonError> {
    let mut outcomes = Vec::new();
    for &id in ids {
        if let Some(refusal) = core.refusal(reads, id, who)? {
            outcomes.push(JobOutcome::new(id, Some(refusal.into_message())));
            continue;
        }
        let job = &core.jobs[&id];
        let current = if job.state == JobState::Pending {
            Ok(job.hold)
        } else {
            Err(job.state)
        };
        let new = match decide(id, current) {
            Ok(h) => h,
            Err(Refusal(error)) => {
                outcomes.push(JobOutcome::new(id, Some(error)));
                continue;
            }
        };
        let job = core.jobs.job_mut(&id).expect("active above");
        job.hold = new;
        if new.is_none() {
            // Released: its quick requeues are forgiven.
            job.quick_requeues = 0;
        }
        let job = job.clone();
        let detail = match new {
            Some(h) => format!("held ({}) by {}", h.name(), who.user),
            None => format!("released by {}", who.user),
        };
        fx.job(&job);
        fx.event(id, now, JobState::Pending, Some(&detail));
        tracing::info!(target: "ysched::daemon", "job {id} {detail}");
        if who.admin && job.user != who.user {
            let action = if new.is_some() { "hold" } else { "release" };
            let what = format!("{detail} (job of {})", job.user);
            fx.audit((now, who.channel), who.user, action, Some(id), &what);
        }
        outcomes.push(JobOutcome::new(id, None));
    }
    fx.queue_changed();
    Ok(Reply::Control {
        outcomes,
        message: None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::effects::Row;
    use super::super::testing::{core_with, requester, Archive};
    use super::*;
    use crate::model::job::Job;

    fn pending(id: JobId, uid: u32, hold: Option<Hold>) -> Job {
        let mut job = crate::model::job::example_job(id);
        job.uid = uid;
        job.user = format!("u{uid}");
        job.account = "a".into();
        job.hold = hold;
        job
    }

    fn errors(reply: &Reply) -> Vec<Option<String>> {
        match reply {
            Reply::Control { outcomes, .. } => outcomes.iter().map(|o| o.error.clone()).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn users_hold_and_release_their_own_and_an_administrators_hold_is_theirs() {
        let mut core = core_with(vec![
            pending(1, 1000, None),
            pending(2, 1001, None),
            pending(3, 1000, Some(Hold::Admin)),
        ]);
        let (reads, alice) = (Archive::default(), requester(1000, "u1000", false));
        let mut fx = Effects::default();
        let held = on_hold(&mut core, &reads, &[1, 2], (&alice, 10), &mut fx).unwrap();
        assert_eq!(
            errors(&held),
            [
                None,
                Some("permission denied: job 2 belongs to u1001".into())
            ]
        );
        assert_eq!(core.jobs[&1].hold, Some(Hold::User));
        let released = on_release(&mut core, &reads, &[1, 3], (&alice, 20), &mut fx).unwrap();
        assert_eq!(
            errors(&released),
            [
                None,
                Some("job 3 is held by an administrator; ask one to release it".into())
            ]
        );
        assert_eq!(core.jobs[&1].hold, None);
        let root = requester(0, "root", true);
        on_release(&mut core, &reads, &[3], (&root, 30), &mut fx).unwrap();
        assert_eq!(core.jobs[&3].hold, None);
        assert!(fx
            .rows()
            .iter()
            .any(|r| matches!(r, Row::Audit { action, job: Some(3), .. } if action == "release")));
    }

    #[test]
    fn a_job_waiting_for_approval_is_released_by_approving_it_and_not_on_a_nodes_word() {
        let mut core = core_with(vec![pending(1, 1000, Some(Hold::Approval))]);
        let reads = Archive::default();
        let mut fx = Effects::default();
        let mut alice = requester(1000, "u1000", false);
        alice.vouched_by = Some(("gpu02", "no token was sent"));
        let refused = on_release(&mut core, &reads, &[1], (&alice, 10), &mut fx).unwrap();
        assert!(errors(&refused)[0]
            .as_deref()
            .is_some_and(|e| e.contains("approving from a node needs your token")));
        let root = requester(0, "root", true);
        let approved = on_release(&mut core, &reads, &[1], (&root, 20), &mut fx).unwrap();
        assert_eq!(errors(&approved), [None]);
        assert_eq!(core.jobs[&1].approved_by.as_deref(), Some("root"));
        assert_eq!(core.jobs[&1].hold, None);
    }

    #[test]
    fn a_release_forgives_quick_requeues_and_a_running_job_is_neither_held_nor_released() {
        let mut requeued = pending(1, 1000, Some(Hold::User));
        requeued.quick_requeues = 5;
        let mut running = pending(2, 1000, None);
        running.state = JobState::Running;
        let mut core = core_with(vec![requeued, running]);
        let (reads, alice) = (Archive::default(), requester(1000, "u1000", false));
        let mut fx = Effects::default();
        on_release(&mut core, &reads, &[1], (&alice, 10), &mut fx).unwrap();
        assert_eq!(core.jobs[&1].quick_requeues, 0);
        let refused = on_hold(&mut core, &reads, &[2], (&alice, 10), &mut fx).unwrap();
        assert_eq!(
            errors(&refused),
            [Some(
                "job 2 is RUNNING; only pending jobs can be held".into()
            )]
        );
    }
}
