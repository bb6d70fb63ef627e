//! What a node's loss does to its jobs, and a launch a node did not
//! carry out: the node's link bookkeeping (leases, hellos, heartbeats)
//! is the edge's (`pool`); these decide over the core. A job on a lost
//! node ends NODE_FAIL, charged until the node froze it, and is requeued
//! unless it asked not to be; a run its node did not start goes back to
//! the queue. For a job over several nodes, its part there is lost, and
//! the edge takes that part's end in (`peers::on_part_end`).

use crate::model::job::{JobId, JobState};
use crate::net::message::RunKey;

use super::effects::Effects;
use super::error::DaemonError;
use super::reads::Reads;
use super::state::Core;

/// Node `name` is lost; the node froze its runs at `stopped` (a lease
/// after the last heartbeat it had answered). Its jobs over several
/// nodes, whose part there is lost, are returned for the edge to take
/// those parts' ends in.
pub(super) fn on_node_lost(
    core: &mut Core,
    reads: &dyn Reads,
    (name, stopped): (&str, i64),
    now: i64,
    fx: &mut Effects,
) -> Result<Vec<JobId>, DaemonError> {
    let lost: Vec<(JobId, bool, bool)> = core
        .jobs
        .all()
        .filter(|j| j.state.holds_gpus() && j.runs_on(name))
        .map(|j| (j.id, j.no_requeue, !j.peers.is_empty()))
        .collect();
    let mut parts = Vec::new();
    for (id, no_requeue, multi_node) in lost {
        if multi_node {
            // Its other parts stop first; then it ends or requeues.
            parts.push(id);
            continue;
        }
        let why = format!("its node {name} was lost (NODE_FAIL)");
        fx.named_event(id, now, "NODE_FAIL", Some(&why));
        if no_requeue {
            core.finish(
                reads,
                (id, JobState::NodeFail, stopped),
                None,
                Some(why),
                fx,
            )?;
        } else {
            let reason = Some(format!("requeued: {why}"));
            core.requeue_run(reads, (id, now, stopped, None), reason, false, fx);
        }
    }
    Ok(parts)
}

/// A launch node `name` did not carry out (it was fenced): nothing of
/// run `run` started, and its job waits for a node again. A job over
/// several nodes has lost its part there: returned for the edge to take
/// that part's end in.
pub(super) fn on_not_started(
    core: &mut Core,
    (name, run, why): (&str, RunKey, &str),
    now: i64,
    fx: &mut Effects,
) -> Option<JobId> {
    let job = core.jobs.get(&run.job).filter(|j| {
        j.state == JobState::Running && j.runs_on(name) && j.restart_count == run.restart
    })?;
    if !job.peers.is_empty() {
        let lost = (run.job, run.restart, name.to_string());
        core.policy.lost_parts.insert(lost);
        return Some(run.job);
    }
    let detail = format!("requeued: {name} did not start it ({why})");
    core.unlaunch(run.job, &detail, now, fx);
    None
}

#[cfg(test)]
mod tests {
    use super::super::effects::Row;
    use super::super::testing::{core_with, Archive};
    use super::*;
    use crate::model::job::Job;

    /// Alice's job `id` on `node`'s GPUs 0 and 1 since 100.
    fn running(id: JobId, node: &str) -> Job {
        let mut job = crate::model::job::example_job(id);
        job.account = "a".into();
        job.state = JobState::Running;
        job.start_time = Some(100);
        job.node = Some(node.into());
        job.gpus_alloc = vec![0, 1];
        job
    }

    fn ended(fx: &Effects, id: JobId) -> Option<JobState> {
        fx.rows().iter().rev().find_map(|r| match r {
            Row::Job(j) if j.id == id => Some(j.state),
            _ => None,
        })
    }

    #[test]
    fn the_jobs_of_a_lost_node_end_node_fail_charged_until_it_froze_them_and_are_requeued() {
        let mut kept = running(2, "gpu02");
        kept.no_requeue = true;
        let mut over_two = running(3, "gpu01");
        over_two.peers = vec!["gpu02".into()];
        let elsewhere = running(4, "gpu01");
        let jobs = vec![running(1, "gpu02"), kept, over_two, elsewhere];
        let (mut core, reads, mut fx) = (core_with(jobs), Archive::default(), Effects::default());
        let parts = on_node_lost(&mut core, &reads, ("gpu02", 400), 520, &mut fx).unwrap();
        assert_eq!(parts, [3], "its part there is the edge's to take in");
        let requeued = &core.jobs[&1];
        assert_eq!(
            (requeued.state, requeued.restart_count),
            (JobState::Pending, 1)
        );
        // Two GPUs from 100 to 400, not to 520.
        assert_eq!(requeued.gpu_seconds, 600);
        assert!(!core.jobs.contains_key(&2));
        assert_eq!(ended(&fx, 2), Some(JobState::NodeFail));
        assert!(fx.rows().iter().any(|r| matches!(
            r,
            Row::Job(j) if j.id == 2 && j.end_time == Some(400)
        )));
        assert_eq!(core.jobs[&3].state, JobState::Running);
        assert_eq!(core.jobs[&4].state, JobState::Running);
    }

    #[test]
    fn a_run_its_node_did_not_start_goes_back_to_the_queue_unless_it_is_no_longer_current() {
        let mut over_two = running(2, "gpu01");
        over_two.peers = vec!["gpu02".into()];
        let jobs = vec![running(1, "gpu02"), over_two];
        let (mut core, mut fx) = (core_with(jobs), Effects::default());
        let old = RunKey { job: 1, restart: 7 };
        assert_eq!(
            on_not_started(&mut core, ("gpu02", old, "fenced"), 200, &mut fx),
            None
        );
        assert!(fx.rows().is_empty(), "not its current run");
        let run = RunKey { job: 1, restart: 0 };
        assert_eq!(
            on_not_started(&mut core, ("gpu02", run, "fenced"), 200, &mut fx),
            None
        );
        let job = &core.jobs[&1];
        assert_eq!((job.state, job.node.as_deref()), (JobState::Pending, None));
        assert!(fx.reschedule);
        let part = RunKey { job: 2, restart: 0 };
        assert_eq!(
            on_not_started(&mut core, ("gpu02", part, "fenced"), 200, &mut fx),
            Some(2)
        );
        assert!(core
            .policy
            .lost_parts
            .contains(&(2, 0, "gpu02".to_string())));
    }
}
