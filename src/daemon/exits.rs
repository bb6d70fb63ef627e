//! A batch script's end, read from what its executor recorded: the
//! state it ends in (COMPLETED, FAILED, OUT_OF_MEMORY, as stopped), its
//! use of memory and CPU, a requeue when it was stopped for another job,
//! or a fence's end (its node lost its lease). The edge reads the end
//! (`Daemon::batch_exited`: the executor's record, or, when there is
//! none, the run's remains cleared first) and hands it to the handler,
//! `on_batch_end`, over the core.

use crate::exec::spec::ExitRecord;
use crate::model::job::{ExitStatus, Job, JobId, JobState};
use crate::proto::Channel;
use crate::report::node::Drain;

use super::effects::{Effects, PoolRow, Row};
use super::error::DaemonError;
use super::reads::Reads;
use super::state::{Core, Daemon};

/// How a batch script's run ended, as the edge read it.
#[derive(Debug)]
pub(super) enum BatchEnd {
    /// As its supervisor recorded it.
    Recorded(Box<ExitRecord>),
    /// Its supervisor ended without a record; `left` processes of it
    /// were killed.
    Unrecorded { left: usize },
}

/// Job `id`'s batch script ended as `end` says: the job ends, is
/// requeued (stopped for another job, or by its node's fence), and is
/// charged.
pub(super) fn on_batch_end(
    core: &mut Core,
    reads: &dyn Reads,
    (id, end): (JobId, BatchEnd),
    (now, channel): (i64, Channel),
    fx: &mut Effects,
) -> Result<(), DaemonError> {
    let record = match end {
        BatchEnd::Recorded(record) => record,
        BatchEnd::Unrecorded { left } => {
            let reason = format!(
                "the job's supervisor ended without recording the job's end{}",
                if left > 0 {
                    format!("; {left} leftover processes killed")
                } else {
                    String::new()
                }
            );
            return core.finish(reads, (id, JobState::NodeFail, now), None, Some(reason), fx);
        }
    };
    if record.fenced.is_some() {
        return core.fence_ended(reads, (id, &record), now, fx);
    }
    let Some(job) = core.jobs.job_mut(&id) else {
        return Ok(());
    };
    job.max_rss_bytes = record.usage.max_rss_bytes;
    job.cpu_usec = record.usage.cpu_usec;
    if let Some(image) = &record.image {
        job.image = Some(image.clone());
        let detail = format!("job {id} ran in {image}");
        fx.audit(
            (now, channel),
            &job.user,
            "container-image",
            Some(id),
            &detail,
        );
    }
    let (state, exit) = how_it_ended(job, &record);
    // Stopped for another job: requeued, whatever its exit (a job that
    // saved a checkpoint and exited 0 included).
    if matches!(state, JobState::Preempted | JobState::Pending) {
        return core.preempted_exit(reads, (id, record.end_time, exit), fx);
    }
    let reason = why_it_ended(job, &record, state, core.config.job_pids_max);
    if record.stuck > 0 {
        core.drain_for_stuck(reads, (id, record.stuck), (now, channel), fx);
    }
    core.finish(reads, (id, state, record.end_time), exit, reason, fx)
}

/// The state a run ends in, and its exit status, from its record.
fn how_it_ended(job: &Job, record: &ExitRecord) -> (JobState, Option<ExitStatus>) {
    // A job stopped while it was being made ready (its image loading)
    // ends as its stop says, not as a failed start.
    let state = if let Some(reason) = job.kill_reason {
        reason
    } else if record.launch_error.is_some() {
        JobState::Failed
    } else if record.usage.oom_kills > 0 {
        // Whatever the exit code: the kernel killed a process of it.
        JobState::OutOfMemory
    } else if record.exit == ExitStatus::default() {
        JobState::Completed
    } else {
        JobState::Failed
    };
    // A job that could not start failed with 1, as a shell that cannot
    // run a command does.
    let exit = Some(match record.launch_error {
        Some(_) => ExitStatus { code: 1, signal: 0 },
        // An allocation its session ended: the session's.
        None if ended_by_session(job) => job.exit.unwrap_or_default(),
        None => record.exit,
    });
    (state, exit)
}

/// Why a run ended in `state`, where the record says more than the state.
fn why_it_ended(job: &Job, record: &ExitRecord, state: JobState, pids_max: u64) -> Option<String> {
    match (&record.launch_error, state) {
        (Some(e), _) => Some(e.clone()),
        (None, JobState::OutOfMemory) => Some(format!(
            "the OOM killer killed {} of its processes: it needed more than its {} of memory",
            record.usage.oom_kills,
            job.mem_mb
                .map(crate::model::units::format_memory_mb)
                .unwrap_or_else(|| "share".into())
        )),
        (None, JobState::Failed | JobState::Completed) if record.usage.pids_refused > 0 => {
            Some(format!(
                "it reached its limit of {pids_max} processes (job_pids_max): {} forks were refused",
                record.usage.pids_refused
            ))
        }
        _ => None,
    }
}

impl Core {
    /// Job `id`'s run was ended by its node for its fence (`record` says
    /// why): NODE_FAIL, requeued unless it asked not to be.
    fn fence_ended(
        &mut self,
        reads: &dyn Reads,
        (id, record): (JobId, &ExitRecord),
        now: i64,
        fx: &mut Effects,
    ) -> Result<(), DaemonError> {
        let Some(job) = self.jobs.get(&id) else {
            return Ok(());
        };
        let node = job.node.clone().unwrap_or_default();
        let no_requeue = job.no_requeue;
        let why = format!(
            "its node {node} ended it: {} (NODE_FAIL)",
            record.fenced.as_deref().unwrap_or("fenced")
        );
        fx.named_event(id, now, "NODE_FAIL", Some(&why));
        let (end, exit) = (record.end_time, Some(record.exit));
        if no_requeue {
            return self.finish(reads, (id, JobState::NodeFail, end), exit, Some(why), fx);
        }
        let reason = Some(format!("requeued: {why}"));
        self.requeue_run(reads, (id, end, end, exit), reason, false, fx);
        Ok(())
    }

    /// A job whose processes SIGKILL did not end (`stuck` of them, in
    /// the kernel) drains its node, saying so: what holds them may hold
    /// its GPUs too.
    fn drain_for_stuck(
        &mut self,
        reads: &dyn Reads,
        (id, stuck): (JobId, usize),
        (now, channel): (i64, Channel),
        fx: &mut Effects,
    ) {
        let Some(name) = self
            .jobs
            .get(&id)
            .and_then(|job| reads.node_name(job.node.as_deref()))
        else {
            return;
        };
        let drain = Drain {
            reason: format!("job {id} left {stuck} process(es) SIGKILL does not end"),
            by: "ysctld".into(),
            since: now,
        };
        tracing::error!(target: "ysched::daemon", "node {name} drained: {}", drain.reason);
        let detail = format!("{name}: {}", drain.reason);
        fx.row(Row::Pool(PoolRow::NodeDrain {
            name,
            drain: Some(drain),
            time: now,
        }));
        fx.audit((now, channel), "ysctld", "drain-node", Some(id), &detail);
        fx.queue_changed();
    }
}

impl Daemon {
    /// The batch script's supervisor exited: its end, read here, goes to
    /// `on_batch_end`.
    pub(super) fn batch_exited(&mut self, id: JobId, now: i64) -> Result<(), DaemonError> {
        let Some(job) = self.core.jobs.get(&id).map(|j| Job::clone(j)) else {
            return Ok(());
        };
        let (end, frozen) = match self.reads().exit_record(id, job.node.as_deref()) {
            Some(record) => {
                let frozen = self.freeze_at_end(&job, &record);
                (BatchEnd::Recorded(Box::new(record)), frozen)
            }
            // Cleared before its end is recorded: its GPUs are not free
            // while its processes live.
            None => (
                BatchEnd::Unrecorded {
                    left: self.clear_remains_of(&job),
                },
                None,
            ),
        };
        let channel = self.turn.channel;
        self.handle_with(|core, reads, fx| {
            if let Some((name, secs, credit)) = &frozen {
                super::node_loss::on_frozen_end(core, (name, *secs, *credit), now, fx);
            }
            on_batch_end(core, reads, (id, end), (now, channel), fx)
        })
    }
}

/// Whether `job` is an interactive allocation ended by its session
/// (`salloc`'s command, `srun`'s step), whose status is its own.
fn ended_by_session(job: &Job) -> bool {
    job.interactive
        && job.exit.is_some()
        && matches!(
            job.kill_reason,
            Some(JobState::Completed | JobState::Failed)
        )
}

#[cfg(test)]
mod tests {
    use super::super::effects::Out;
    use super::super::testing::{core_with, Archive};
    use super::*;

    /// Alice's job 1, running on gpu01's GPUs 0 and 1 since 100.
    fn running() -> Job {
        super::super::testing::running_on(1, "gpu01")
    }

    fn record(code: i32, end_time: i64) -> ExitRecord {
        super::super::testing::exit_record(code, end_time)
    }

    /// Job `job`'s batch script ends as `end` at 500: the core after it,
    /// and what the handler pushed.
    fn ends(job: Job, reads: &Archive, end: BatchEnd) -> (Core, Effects) {
        let (mut core, mut fx) = (core_with(vec![job]), Effects::default());
        on_batch_end(&mut core, reads, (1, end), (500, Channel::Cli), &mut fx).unwrap();
        (core, fx)
    }

    /// As its supervisor recorded it.
    fn as_recorded(record: ExitRecord) -> BatchEnd {
        BatchEnd::Recorded(Box::new(record))
    }

    fn recorded(fx: &Effects) -> Vec<&Job> {
        fx.rows()
            .iter()
            .filter_map(|r| match r {
                Row::Job(job) => Some(&**job),
                _ => None,
            })
            .collect()
    }

    fn events(fx: &Effects) -> Vec<(String, Option<String>)> {
        fx.rows()
            .iter()
            .filter_map(|r| match r {
                Row::Event { name, detail, .. } => Some((name.clone(), detail.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_run_ends_as_recorded_charged_to_its_end_and_forgotten_after_the_commit() {
        let reads = Archive::default();
        let job = running();
        let (core, fx) = ends(job, &reads, as_recorded(record(0, 400)));
        let job = recorded(&fx).pop().unwrap();
        assert_eq!((job.state, job.end_time), (JobState::Completed, Some(400)));
        // 300 s on two GPUs.
        assert_eq!(job.gpu_seconds, 600);
        assert!(core.jobs.get(&1).is_none(), "no longer active");
        assert!(fx
            .outs()
            .iter()
            .any(|o| matches!(o, Out::Forget { job: 1, .. })));
        assert!(fx.reschedule);
    }

    #[test]
    fn an_oom_kill_or_a_refused_fork_says_why_the_run_ended() {
        let reads = Archive::default();
        let job = running();
        let mut oom = record(0, 400);
        oom.usage.oom_kills = 2;
        let (_, fx) = ends(job, &reads, as_recorded(oom));
        let job = recorded(&fx).pop().unwrap();
        assert_eq!(job.state, JobState::OutOfMemory);
        assert!(job
            .reason
            .as_deref()
            .unwrap()
            .starts_with("the OOM killer killed 2 of its processes"));
        let job = running();
        let mut forks = record(1, 400);
        forks.usage.pids_refused = 3;
        let (_, fx) = ends(job, &reads, as_recorded(forks));
        let job = recorded(&fx).pop().unwrap();
        assert_eq!(job.state, JobState::Failed);
        assert!(job
            .reason
            .as_deref()
            .unwrap()
            .contains("3 forks were refused"));
    }

    #[test]
    fn a_run_its_supervisor_left_unrecorded_is_a_node_failure_naming_its_remains() {
        let reads = Archive::default();
        let job = running();
        let (_core, fx) = ends(job, &reads, BatchEnd::Unrecorded { left: 2 });
        let job = recorded(&fx).pop().unwrap();
        assert_eq!((job.state, job.end_time), (JobState::NodeFail, Some(500)));
        assert_eq!(
            job.reason.as_deref(),
            Some("the job's supervisor ended without recording the job's end; 2 leftover processes killed")
        );
    }

    #[test]
    fn a_run_stopped_for_another_job_is_requeued_and_its_stop_settled() {
        let mut victim = running();
        victim.kill_reason = Some(JobState::Preempted);
        victim.preempted_by = Some(9);
        let mut reads = Archive::default();
        // Stopped at 380 with 30 s of grace: it exited within it.
        reads.stops.insert((1, 0), (380, "preempt".into(), 30));
        let (core, fx) = ends(victim, &reads, as_recorded(record(0, 400)));
        let job = &core.jobs[&1];
        assert_eq!(
            (job.state, job.restart_count, job.gpu_seconds),
            (JobState::Pending, 1, 600)
        );
        assert_eq!(
            job.reason.as_deref(),
            Some("requeued after preemption by job 9")
        );
        assert!(fx.rows().iter().any(|r| matches!(
            r,
            Row::StopSettled { job: 1, restart: 0, exit } if exit.clean && exit.lost_gpu_secs == 0
        )));
        assert!(events(&fx).iter().any(|(name, _)| name == "REQUEUED"));
    }

    #[test]
    fn a_run_its_node_ended_for_its_fence_is_requeued_as_a_node_failure() {
        let reads = Archive::default();
        let job = running();
        let mut fenced = record(137, 450);
        fenced.fenced = Some("its lease ran out and it could not be frozen".into());
        let (core, fx) = ends(job, &reads, as_recorded(fenced));
        assert!(events(&fx).iter().any(|(name, detail)| name == "NODE_FAIL"
            && detail
                .as_deref()
                .is_some_and(|d| d.contains("its node gpu01 ended it"))));
        assert_eq!(core.jobs[&1].state, JobState::Pending, "requeued");
        let mut once = running();
        once.no_requeue = true;
        let mut fenced = record(137, 450);
        fenced.fenced = Some("frozen longer than frozen_limit".into());
        let (_, fx) = ends(once, &reads, as_recorded(fenced));
        assert_eq!(recorded(&fx).pop().unwrap().state, JobState::NodeFail);
    }

    /// Found by the simulation (seeds 68, 85, 97): a job suspended when
    /// its node was lost was charged for the time it stood suspended.
    #[test]
    fn a_run_that_ends_while_suspended_is_not_charged_its_suspension() {
        let mut suspended = running();
        suspended.state = JobState::Suspended;
        suspended.suspended_at = Some(300);
        let reads = Archive::default();
        let mut fenced = record(137, 500);
        fenced.fenced = Some("frozen longer than frozen_limit".into());
        let (core, _) = ends(suspended, &reads, as_recorded(fenced));
        // 200 s on two GPUs, not 400 s.
        assert_eq!(core.jobs[&1].gpu_seconds, 400);
        assert_eq!(
            core.jobs[&1].suspended_secs, 0,
            "its next run starts afresh"
        );
    }

    #[test]
    fn processes_sigkill_does_not_end_drain_the_node_and_an_image_is_audited() {
        let reads = Archive::default();
        let job = running();
        let mut stuck = record(0, 400);
        stuck.stuck = 3;
        stuck.image = Some(crate::model::container::ImageRecord {
            reference: "yolo:v8".into(),
            digest: "sha256:ab".into(),
        });
        let (_, fx) = ends(job, &reads, as_recorded(stuck));
        assert!(fx.rows().iter().any(|r| matches!(
            r,
            Row::Pool(PoolRow::NodeDrain { name, drain: Some(d), .. })
                if name == "gpu01" && d.reason == "job 1 left 3 process(es) SIGKILL does not end"
        )));
        let audited: Vec<&str> = fx
            .rows()
            .iter()
            .filter_map(|r| match r {
                Row::Audit { action, .. } => Some(action.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(audited, ["container-image", "drain-node"]);
        assert_eq!(
            recorded(&fx).pop().unwrap().image.as_ref().unwrap().digest,
            "sha256:ab"
        );
    }
}
