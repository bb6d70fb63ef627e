//! What a node's loss does to its jobs, and a launch a node did not
//! carry out: the node's link bookkeeping (leases, hellos, heartbeats)
//! is the edge's (`pool`); these decide over the core. A job on a lost
//! node ends NODE_FAIL, charged until the node froze it, and is requeued
//! unless it asked not to be; a run a node froze when its lease ran out
//! is thawed once the time it stood is credited; a run its node did not
//! start goes back to the queue. For a job over several nodes, its part there is lost, and
//! the edge takes that part's end in (`peers::on_part_end`).

use crate::model::job::{JobId, JobState};
use crate::net::message::{RunKey, ToNode};

use super::effects::Effects;
use super::error::DaemonError;
use super::node_time::Credited;
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

/// Runs node `name` froze when its lease ran out (`frozen`, with how
/// long by its count), and what of each the controller credits
/// (`credits`, by its own measure: `node_time::Freezes`). Each still
/// the current run of a running job there goes on where it stopped
/// (thawed, after the commit), the time it was frozen not counted
/// against its time limit nor charged, as Slurm does with suspended
/// time; any other was run elsewhere since (or its job ended), and is
/// stopped and forgotten.
pub(super) fn on_frozen(
    core: &mut Core,
    (name, frozen, credits): (&str, &[(RunKey, u64)], &[Credited]),
    now: i64,
    fx: &mut Effects,
) {
    for &(run, secs) in frozen {
        let job = current_run(&core.jobs, run, name);
        match job.map(|j| j.state) {
            Some(JobState::Running | JobState::Completing) => {
                let credit = credits.iter().find(|c| c.run == run);
                // The batch node's part says how long the job stood
                // (each part of a job over several reports its own).
                let batch = job.and_then(|j| j.node.as_deref()) == Some(name);
                if let Some(credit) = credit.filter(|_| batch) {
                    credit_frozen(core, (name, secs, *credit), Thawed::Now, now, fx);
                }
                // Thawed once the credit is recorded.
                fx.frame(name, ToNode::Freeze { run, frozen: false });
            }
            // Suspended by an administrator: it stays frozen until resumed.
            Some(_) => {}
            None => stop_stale(name, run, true, fx),
        }
    }
}

/// Credits `credit` of a freeze node `name` reported (`secs` by its
/// count): not counted against its run's time limit, nor charged. One
/// event per freeze.
fn credit_frozen(
    core: &mut Core,
    (name, secs, credit): (&str, u64, Credited),
    thawed: Thawed,
    now: i64,
    fx: &mut Effects,
) {
    let id = credit.run.job;
    let Some(job) = core.jobs.job_mut(&id) else {
        return;
    };
    job.suspended_secs += credit.added;
    fx.job(job);
    if credit.first {
        let (event, until) = match thawed {
            Thawed::Now => ("THAWED", " so far); thawed"),
            Thawed::Never => ("FROZEN", "); it ended so"),
            Thawed::Suspended => ("FROZEN", "); then suspended"),
        };
        let detail = format!(
            "frozen on {name} while the controller could not be reached ({secs} s by its count, {} s credited{until}",
            credit.total
        );
        fx.named_event(id, now, event, Some(&detail));
        tracing::info!(target: "ysched::pool", "job {id} {detail}");
    } else {
        tracing::debug!(target: "ysched::pool", "job {id}: {} s more of its freeze on {name} credited ({} s in all)", credit.added, credit.total);
    }
}

/// Freezes of node `name`'s fence that a suspension took over before
/// the controller heard of them (`taken`, with how long by its count),
/// and what of each the controller credits (`credits`: by its own
/// measure, until the suspension began). The run stays as it is: the
/// suspension's, or resumed since.
pub(super) fn on_taken_over(
    core: &mut Core,
    (name, taken, credits): (&str, &[(RunKey, u64)], &[Credited]),
    now: i64,
    fx: &mut Effects,
) {
    for credit in credits {
        let Some(job) = current_run(&core.jobs, credit.run, name) else {
            continue;
        };
        let batch = job.node.as_deref() == Some(name);
        let held = matches!(
            job.state,
            JobState::Running | JobState::Completing | JobState::Suspended
        );
        let secs = taken.iter().find(|(r, _)| *r == credit.run).map(|t| t.1);
        if let Some(secs) = secs.filter(|_| batch && held) {
            credit_frozen(core, (name, secs, *credit), Thawed::Suspended, now, fx);
        }
    }
}

/// How a freeze the controller credits ended.
#[derive(Clone, Copy)]
enum Thawed {
    /// It is thawed now, after the commit.
    Now,
    /// Its run ended frozen.
    Never,
    /// A suspension took it over.
    Suspended,
}

/// The current run of a job ended on node `name`, its batch node, while
/// frozen there for its lost lease (`secs` by the node's count, which its
/// end told): what the controller credits of that freeze (`credit`, by
/// its own measure: `node_time::Freezes::ended`) is not charged. Taken in
/// before the end itself, in the same turn.
pub(super) fn on_frozen_end(
    core: &mut Core,
    (name, secs, credit): (&str, u64, Credited),
    now: i64,
    fx: &mut Effects,
) {
    let Some(job) = current_run(&core.jobs, credit.run, name) else {
        return;
    };
    let batch = job.node.as_deref() == Some(name);
    if batch && matches!(job.state, JobState::Running | JobState::Completing) {
        credit_frozen(core, (name, secs, credit), Thawed::Never, now, fx);
    }
}

/// Run `run` of a job, if it is the job's current run and holds GPUs on
/// node `name`.
pub(super) fn current_run<'a>(
    jobs: &'a super::state::Jobs,
    run: RunKey,
    name: &str,
) -> Option<&'a std::sync::Arc<crate::model::job::Job>> {
    jobs.get(&run.job)
        .filter(|j| j.state.holds_gpus() && j.runs_on(name) && j.restart_count == run.restart)
}

/// Run `run` that node `name` holds (`frozen` for its fence) is no job's
/// current run there: what is left of it is killed and forgotten, after
/// the commit.
pub(super) fn stop_stale(name: &str, run: RunKey, frozen: bool, fx: &mut Effects) {
    let held = if frozen { "frozen on" } else { "on" };
    tracing::info!(target: "ysched::pool", "{run} {held} {name} is not a current run: stopped and forgotten");
    fx.frame(name, ToNode::Clear { run });
    fx.frame(name, ToNode::Forget { run });
}

#[cfg(test)]
mod tests {
    use super::super::effects::Row;
    use super::super::testing::{core_with, Archive};
    use super::*;

    use super::super::testing::running_on as running;

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

    fn events(fx: &Effects) -> Vec<(String, String)> {
        fx.rows()
            .iter()
            .filter_map(|r| match r {
                Row::Event { name, detail, .. } => {
                    Some((name.clone(), detail.clone().unwrap_or_default()))
                }
                _ => None,
            })
            .collect()
    }

    fn credit(job: JobId, added: u64, first: bool) -> Credited {
        Credited {
            run: RunKey { job, restart: 0 },
            added,
            total: added,
            first,
        }
    }

    /// A run that ended frozen on its batch node is credited the freeze,
    /// told once (FROZEN); on another node of its job, or when it is no
    /// longer the job's current run, nothing.
    #[test]
    fn a_freeze_a_run_ended_in_is_credited_on_its_batch_node_only() {
        let jobs = vec![running(1, "gpu02"), running(2, "gpu02")];
        let (mut core, mut fx) = (core_with(jobs), Effects::default());
        on_frozen_end(&mut core, ("gpu02", 90, credit(1, 90, true)), 500, &mut fx);
        assert_eq!(core.jobs[&1].suspended_secs, 90);
        let told = events(&fx);
        assert_eq!(told.len(), 1);
        assert_eq!(told[0].0, "FROZEN");
        assert!(told[0].1.ends_with("it ended so"), "{told:?}");
        let mut fx = Effects::default();
        on_frozen_end(&mut core, ("gpu01", 90, credit(2, 90, true)), 500, &mut fx);
        let old = Credited {
            run: RunKey { job: 2, restart: 3 },
            ..credit(2, 90, true)
        };
        on_frozen_end(&mut core, ("gpu02", 90, old), 500, &mut fx);
        assert_eq!(core.jobs[&2].suspended_secs, 0);
        assert!(fx.rows().is_empty());
    }

    /// The fence's part of a freeze a suspension took over is credited to
    /// the job, suspended or resumed since, and never thawed here (the
    /// suspension holds the run).
    #[test]
    fn a_freeze_a_suspension_took_over_is_credited_and_nothing_thawed() {
        let mut suspended = running(1, "gpu02");
        suspended.state = JobState::Suspended;
        let (mut core, mut fx) = (core_with(vec![suspended]), Effects::default());
        let run = RunKey { job: 1, restart: 0 };
        let taken = [(run, 40)];
        on_taken_over(
            &mut core,
            ("gpu02", &taken, &[credit(1, 40, true)]),
            500,
            &mut fx,
        );
        assert_eq!(core.jobs[&1].suspended_secs, 40);
        assert!(events(&fx)[0].1.ends_with("then suspended"));
        assert!(fx.outs().is_empty(), "no thaw: {:?}", fx.outs());
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

    #[test]
    fn a_run_frozen_for_a_lost_lease_is_credited_once_told_then_thawed_and_a_stale_one_cleared() {
        let mut suspended = running(3, "gpu02");
        suspended.state = JobState::Suspended;
        let jobs = vec![running(1, "gpu02"), suspended];
        let (mut core, mut fx) = (core_with(jobs), Effects::default());
        let run = RunKey { job: 1, restart: 0 };
        let stale = RunKey { job: 2, restart: 0 };
        let admin = RunKey { job: 3, restart: 0 };
        let frozen = [(run, 40), (stale, 40), (admin, 40)];
        let credits = [Credited {
            run,
            added: 38,
            total: 38,
            first: true,
        }];
        on_frozen(&mut core, ("gpu02", &frozen, &credits), 300, &mut fx);
        assert_eq!(core.jobs[&1].suspended_secs, 38);
        assert!(fx.rows().iter().any(|r| matches!(
            r,
            Row::Event { job: 1, name, detail: Some(d), .. }
                if name == "THAWED" && d.contains("40 s by its count, 38 s credited so far")
        )));
        let frames: Vec<String> = fx
            .out
            .iter()
            .map(|o| match o {
                super::super::effects::Out::Frame { node, frame } => format!("{node} {frame:?}"),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(frames.len(), 3, "{frames:?}");
        assert!(frames[0].starts_with("gpu02 Freeze") && frames[0].contains("frozen: false"));
        assert!(frames[1].starts_with("gpu02 Clear") && frames[2].starts_with("gpu02 Forget"));
        // More of the same freeze: credited, told of once.
        let mut fx = Effects::default();
        let more = [Credited {
            run,
            added: 5,
            total: 43,
            first: false,
        }];
        on_frozen(&mut core, ("gpu02", &frozen[..1], &more), 305, &mut fx);
        assert_eq!(core.jobs[&1].suspended_secs, 43);
        assert!(!fx.rows().iter().any(|r| matches!(r, Row::Event { .. })));
    }

    /// Found by the simulation of the pool (seed 167 over 2 hours): a job
    /// suspended, then resumed after its node's lease had run out (the
    /// node kept it frozen), was charged until the lease ran out less the
    /// whole suspension, though only part of it stood in that time.
    #[test]
    fn a_job_resumed_after_its_node_froze_it_is_charged_what_it_ran_until_then() {
        let mut job = running(1, "gpu02");
        job.state = JobState::Suspended;
        job.suspended_at = Some(200);
        let (mut core, reads, mut fx) =
            (core_with(vec![job]), Archive::default(), Effects::default());
        core.thaw(1, "root", 1000, &mut fx);
        assert_eq!(core.jobs[&1].suspended_secs, 800);
        // Its lease ran out at 900, while it was suspended.
        on_node_lost(&mut core, &reads, ("gpu02", 900), 1100, &mut fx).unwrap();
        let job = &core.jobs[&1];
        assert_eq!(job.state, JobState::Pending);
        // It ran from 100 to 200 on two GPUs.
        assert_eq!(job.gpu_seconds, 200);
    }
}
