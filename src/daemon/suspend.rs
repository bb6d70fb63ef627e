//! `yscontrol suspend|resume` (`scontrol suspend|resume`): an
//! administrator freezes a running job in place (it keeps its GPUs and
//! their memory; the time it stands frozen counts neither against its
//! time limit nor in its charge) and thaws it again. Handlers over the
//! core: the record changes in the turn, and the freeze or thaw reaches
//! the job's nodes only once that is committed, so a turn that fails
//! leaves no job frozen that its record says runs. A freeze a node then
//! cannot make is undone in the record (`Daemon::unfreezable`).

use crate::model::job::{JobId, JobState};
use crate::proto::Reply;

use super::effects::{Effects, Out};
use super::error::DaemonError;
use super::reads::Reads;
use super::requester::Requester;
use super::state::{Core, Daemon};

/// Suspends the running jobs `ids` for `who`, an administrator.
pub(super) fn on_suspend(
    core: &mut Core,
    reads: &dyn Reads,
    ids: &[JobId],
    (who, now): (&Requester, i64),
    fx: &mut Effects,
) -> Result<Reply, DaemonError> {
    if let Some(refused) = admins_only(who, "suspend") {
        return Ok(refused);
    }
    core.each_job(reads, ids, who, |core, id| {
        if let Some(why) = core.suspension_refused(reads, id) {
            return Ok(Some(why));
        }
        core.suspend(id, who.user, now, fx);
        let what = format!("suspended job {id}");
        fx.audit((now, who.channel), who.user, "suspend", Some(id), &what);
        Ok(None)
    })
}

/// Resumes the suspended jobs `ids` for `who`, an administrator.
pub(super) fn on_resume(
    core: &mut Core,
    reads: &dyn Reads,
    ids: &[JobId],
    (who, now): (&Requester, i64),
    fx: &mut Effects,
) -> Result<Reply, DaemonError> {
    if let Some(refused) = admins_only(who, "resume") {
        return Ok(refused);
    }
    core.each_job(reads, ids, who, |core, id| {
        let job = &core.jobs[&id];
        if job.state != JobState::Suspended {
            return Ok(Some(format!(
                "job {} is {}; only suspended jobs can be resumed",
                job.display_id(),
                job.state
            )));
        }
        core.thaw(id, who.user, now, fx);
        let what = format!("resumed job {id}");
        fx.audit((now, who.channel), who.user, "resume", Some(id), &what);
        Ok(None)
    })
}

/// The refusal of anyone but an administrator.
fn admins_only(who: &Requester, verb: &str) -> Option<Reply> {
    (!who.admin).then(|| Reply::Rejected {
        error: format!("permission denied: only root and the config's admins may {verb} jobs"),
    })
}

impl Core {
    /// Why active job `id` cannot be suspended now, if it cannot: it is
    /// not running, or one of its nodes cannot freeze it.
    pub(super) fn suspension_refused(&self, reads: &dyn Reads, id: JobId) -> Option<String> {
        let job = &self.jobs[&id];
        if job.state != JobState::Running {
            return Some(format!(
                "job {} is {}; only running jobs can be suspended",
                job.display_id(),
                job.state
            ));
        }
        reads
            .freezable(job)
            .err()
            .map(|why| format!("cannot suspend job {id}: {}", why.0))
    }

    /// Suspends running job `id` for `by`: recorded now, frozen on its
    /// nodes once the turn is committed; the time it stands so is counted
    /// out of its limit and its charge when it is resumed or ends.
    pub(super) fn suspend(&mut self, id: JobId, by: &str, now: i64, fx: &mut Effects) {
        let Some(job) = self
            .jobs
            .job_mut(&id)
            .filter(|j| j.state == JobState::Running)
        else {
            return;
        };
        job.state = JobState::Suspended;
        job.suspended_at = Some(now);
        let job = job.clone();
        let detail = format!("suspended by {by}");
        fx.job(&job);
        fx.event(id, now, JobState::Suspended, Some(&detail));
        fx.out(Out::Freeze {
            job: Box::new(job),
            frozen: true,
        });
        fx.queue_changed();
        tracing::info!(target: "ysched::daemon", "job {id} {detail}");
    }

    /// Resumes suspended job `id`, for `by`: its processes are thawed once
    /// the turn is committed (a thaw that fails there is logged; the
    /// supervisor of a job being stopped sends SIGCONT with SIGTERM), and
    /// the time it spent suspended is counted out of its limit.
    pub(super) fn thaw(&mut self, id: JobId, by: &str, now: i64, fx: &mut Effects) {
        let Some(job) = self
            .jobs
            .job_mut(&id)
            .filter(|j| j.state == JobState::Suspended)
        else {
            return;
        };
        job.state = JobState::Running;
        if let Some(at) = job.suspended_at.take() {
            job.suspended_secs += (now - at).max(0) as u64;
            self.policy.resumed.insert(id, (at, now));
        }
        let job = job.clone();
        let detail = format!("resumed by {by}");
        fx.out(super::effects::Out::Freeze {
            job: Box::new(job.clone()),
            frozen: false,
        });
        fx.job(&job);
        fx.event(id, now, JobState::Running, Some(&detail));
        fx.queue_changed();
        tracing::info!(target: "ysched::daemon", "job {id} {detail}");
    }

    /// The victims job `ended` suspended run on: each is thawed (once the
    /// turn is committed) and running again.
    pub(super) fn resume_suspended_by(&mut self, ended: JobId, now: i64, fx: &mut Effects) {
        let victims: Vec<JobId> = self
            .jobs
            .all()
            .filter(|j| j.state == JobState::Suspended && j.preempted_by == Some(ended))
            .map(|j| j.id)
            .collect();
        for id in victims {
            self.thaw(id, &format!("the end of job {ended}"), now, fx);
            let job = self.jobs.job_mut(&id).expect("active above");
            job.preempted_by = None;
            job.reason = None;
            let job = job.clone();
            fx.job(&job);
        }
    }
}

/// Node `name`, saying hello, holds runs `held` frozen for a suspension.
/// One that is the current run of a running job there missed its resume
/// (the thaw was lost with a link): it is thawed now, after the commit,
/// and on its batch node the time since that resume was suspension too
/// (found by the simulation of the pool, seed 297 over 2 hours: a resume
/// sent as the node's connection broke never reached it, and the job
/// stood frozen, charged, until its time limit).
pub(super) fn on_resume_missed(
    core: &mut Core,
    (name, held): (&str, &[crate::net::message::RunKey]),
    now: i64,
    fx: &mut Effects,
) {
    for &run in held {
        let Some(job) = super::node_loss::current_run(&core.jobs, run, name) else {
            continue;
        };
        if job.state != JobState::Running {
            continue;
        }
        let batch = job.node.as_deref() == Some(name);
        // Made again once: a node that says so again (its thaw lost
        // too, or a node that lies) is thawed, and gains nothing more.
        let resumed = core.policy.resumed.get(&run.job).copied();
        let again = |from: i64| core.policy.resumed_again.get(&run.job) == Some(&from);
        if let Some((from, to)) = resumed.filter(|&(from, to)| batch && to < now && !again(from)) {
            let job = core.jobs.job_mut(&run.job).expect("current above");
            job.suspended_secs += (now - to) as u64;
            let job = job.clone();
            core.policy.resumed.insert(run.job, (from, now));
            core.policy.resumed_again.insert(run.job, from);
            fx.job(&job);
            let detail = format!(
                "its resume did not reach {name} (lost with its link): resumed there only now, and suspended until then"
            );
            // A resumption: read back as this suspension's end.
            fx.event(run.job, now, JobState::Running, Some(&detail));
            tracing::warn!(target: "ysched::pool", "job {}: {detail}", run.job);
        }
        fx.frame(
            name,
            crate::net::message::ToNode::Freeze { run, frozen: false },
        );
    }
}

impl Daemon {
    /// Makes the jobs on this server's own executor frozen or not as
    /// their records say, at a start: a freeze or thaw committed but not
    /// sent before a crash is made now (freezing what is frozen, or
    /// thawing what runs, changes nothing). A pool's nodes are made so
    /// when each says hello (`refreeze_on`).
    pub(super) fn refreeze_local(&mut self) {
        let mut fx = Effects::default();
        for job in self.core.jobs.all() {
            let frozen = match job.state {
                JobState::Suspended => true,
                JobState::Running => false,
                _ => continue,
            };
            let here = self.nodes.named_or_local(job.node.as_deref());
            let local = here.is_some_and(|n| n.remote.is_none()) && job.peers.is_empty();
            if local && here.is_some_and(|n| n.facts().isolation.can_suspend) {
                fx.out(Out::Freeze {
                    job: Box::new(crate::model::job::Job::clone(job)),
                    frozen,
                });
            }
        }
        self.after_commit(fx);
    }

    /// The freeze of each job recorded suspended on node `name`, sent
    /// again once it says hello: it may have been ordered while the node
    /// was away, or lost with a controller that crashed before sending it.
    pub(super) fn refreeze_on(&mut self, name: &str) {
        let Some(remote) = self.nodes.named(name).and_then(|n| n.remote.as_ref()) else {
            return;
        };
        // Only what the node says still runs: an ended run's job ends.
        let running = remote.link.state().running.clone().unwrap_or_default();
        let mut fx = Effects::default();
        for job in self.core.jobs.all() {
            let alive = running
                .get(&job.id)
                .is_some_and(|&(restart, _)| restart == job.restart_count);
            if job.state == JobState::Suspended && job.runs_on(name) && alive {
                let run = crate::net::message::RunKey::of(job);
                fx.frame(
                    name,
                    crate::net::message::ToNode::Freeze { run, frozen: true },
                );
            }
        }
        self.after_commit(fx);
    }

    /// Jobs recorded suspended that their nodes could not freeze after
    /// all (a freezer that failed, a link lost since the check): the
    /// record says so and they run again, so that the time they run is
    /// charged.
    pub(super) fn unfreezable(&mut self, now: i64) -> Result<(), DaemonError> {
        for (id, why) in std::mem::take(&mut self.turn.unfreezable) {
            let by = format!("ysctld, since its node could not freeze it ({why})");
            self.handle_with(|core, _, fx| {
                core.thaw(id, &by, now, fx);
                Ok(())
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::effects::Row;
    use super::super::testing::{core_with, requester, Archive};
    use super::*;

    fn running(id: JobId) -> crate::model::job::Job {
        let mut job = crate::model::job::example_job(id);
        job.state = JobState::Running;
        job.uid = 1000;
        job.user = "u1000".into();
        job.node = Some("gpu01".into());
        job.start_time = Some(0);
        job
    }

    fn errors(reply: Reply) -> Vec<Option<String>> {
        match reply {
            Reply::Control { outcomes, .. } => outcomes.into_iter().map(|o| o.error).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_suspension_is_recorded_now_and_frozen_after_the_commit_and_its_time_is_not_charged() {
        let mut core = core_with(vec![running(1)]);
        let (reads, root) = (Archive::default(), requester(0, "root", true));
        let mut fx = Effects::default();
        let reply = on_suspend(&mut core, &reads, &[1], (&root, 100), &mut fx).unwrap();
        assert_eq!(errors(reply), [None]);
        assert_eq!(core.jobs[&1].state, JobState::Suspended);
        assert!(matches!(fx.outs(), [Out::Freeze { frozen: true, .. }]));
        assert!(fx
            .rows()
            .iter()
            .any(|r| matches!(r, Row::Event { name, .. } if name == "SUSPENDED")));

        let mut fx = Effects::default();
        let reply = on_resume(&mut core, &reads, &[1], (&root, 160), &mut fx).unwrap();
        assert_eq!(errors(reply), [None]);
        assert_eq!(core.jobs[&1].state, JobState::Running);
        assert_eq!(core.jobs[&1].suspended_secs, 60);
        assert!(matches!(fx.outs(), [Out::Freeze { frozen: false, .. }]));
    }

    /// Found by the simulation of the pool (seed 105 over 2 hours): a
    /// preemptor's end read after the controller stalled resumed its
    /// victim as of that end, and the time the victim stood frozen since,
    /// until the thaw left, was charged.
    #[test]
    fn a_victim_is_resumed_when_its_preemptors_end_is_read_not_as_of_it() {
        let mut victim = running(1);
        victim.state = JobState::Suspended;
        victim.suspended_at = Some(100);
        victim.preempted_by = Some(2);
        let mut preemptor = running(2);
        preemptor.preemptions_caused = 1;
        let mut core = core_with(vec![victim, preemptor]);
        if let super::super::state::Clock::Manual(t) = &core.clock {
            t.store(700, std::sync::atomic::Ordering::SeqCst);
        }
        let mut fx = Effects::default();
        let ended = (2, JobState::Completed, 400);
        core.finish(&Archive::default(), ended, None, None, &mut fx)
            .unwrap();
        let victim = &core.jobs[&1];
        assert_eq!(victim.state, JobState::Running);
        assert_eq!(victim.suspended_secs, 600, "suspended until the thaw left");
        assert!(fx
            .outs()
            .iter()
            .any(|o| matches!(o, Out::Freeze { frozen: false, .. })));
    }

    /// Found by the simulation of the pool (seed 297 over 2 hours): a
    /// resume sent as its node's connection broke never reached it, and
    /// the job stood frozen, charged, until its time limit. The node's
    /// hello says it holds the run suspended: it is thawed, and on its
    /// batch node the time since the resume is suspension too.
    #[test]
    fn a_resume_its_node_missed_is_made_at_its_hello_and_the_wait_not_charged() {
        let mut job = running(1);
        job.suspended_secs = 100;
        let mut core = core_with(vec![job]);
        core.policy.resumed.insert(1, (200, 300));
        let run = crate::net::message::RunKey::of(&core.jobs[&1]);
        let mut fx = Effects::default();
        on_resume_missed(&mut core, ("gpu01", &[run]), 340, &mut fx);
        assert_eq!(core.jobs[&1].suspended_secs, 140);
        assert_eq!(core.policy.resumed[&1], (200, 340));
        let thaw = |o: &Out| {
            matches!(o, Out::Frame { frame, .. }
                if matches!(**frame, crate::net::message::ToNode::Freeze { frozen: false, .. }))
        };
        assert!(fx.outs().iter().any(thaw));
        // Told again (its thaw lost too, or a node that lies): thawed,
        // and nothing more.
        let mut fx = Effects::default();
        on_resume_missed(&mut core, ("gpu01", &[run]), 900, &mut fx);
        assert_eq!(core.jobs[&1].suspended_secs, 140);
        assert!(fx.outs().iter().any(thaw));
    }

    #[test]
    fn only_an_administrator_suspends_and_only_what_can_be_frozen() {
        let mut pending = running(2);
        pending.state = JobState::Pending;
        let mut core = core_with(vec![running(1), pending]);
        let mut reads = Archive::default();
        let alice = requester(1000, "u1000", false);
        let mut fx = Effects::default();
        let reply = on_suspend(&mut core, &reads, &[1], (&alice, 5), &mut fx).unwrap();
        assert!(
            matches!(&reply, Reply::Rejected { error } if error.contains("only root and the config's admins may suspend")),
            "{reply:?}"
        );
        let root = requester(0, "root", true);
        reads.cannot_freeze = Some("node gpu01 cannot suspend jobs".into());
        let reply = on_suspend(&mut core, &reads, &[1, 2], (&root, 5), &mut fx).unwrap();
        assert_eq!(
            errors(reply),
            [
                Some("cannot suspend job 1: node gpu01 cannot suspend jobs".into()),
                Some("job 2 is PENDING; only running jobs can be suspended".into())
            ]
        );
        let reply = on_resume(&mut core, &reads, &[1], (&root, 5), &mut fx).unwrap();
        assert_eq!(
            errors(reply),
            [Some(
                "job 1 is RUNNING; only suspended jobs can be resumed".into()
            )]
        );
        assert!(fx.rows().is_empty() && fx.outs().is_empty());
        assert_eq!(core.jobs[&1].state, JobState::Running);
    }
}
