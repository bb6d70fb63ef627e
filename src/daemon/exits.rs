//! A batch script's end, read from what its executor recorded: the
//! state it ends in (COMPLETED, FAILED, OUT_OF_MEMORY, as stopped), its
//! use of memory and CPU, a requeue when it was stopped for another job,
//! or a fence's end (its node lost its lease).

use crate::exec::spec::ExitRecord;
use crate::model::job::{ExitStatus, JobId, JobState};

use super::effects::Effects;
use super::error::DaemonError;
use super::reads::Reads;
use super::state::Daemon;

impl Daemon {
    /// The batch script's supervisor exited: how it ended is the job's end.
    pub(super) fn batch_exited(&mut self, id: JobId, now: i64) -> Result<(), DaemonError> {
        let node = self.core.jobs.get(&id).and_then(|j| j.node.clone());
        match self.reads().exit_record(id, node.as_deref()) {
            Some(record) if record.fenced.is_some() => self.fence_ended(id, &record, now)?,
            Some(record) => {
                let job = self.core.jobs.job_mut(&id).expect("checked above");
                job.max_rss_bytes = record.usage.max_rss_bytes;
                job.cpu_usec = record.usage.cpu_usec;
                let ran_in = record.image.clone();
                if ran_in.is_some() {
                    job.image = ran_in.clone();
                }
                if let Some(image) = ran_in {
                    let (user, detail) = (job.user.clone(), format!("job {id} ran in {image}"));
                    self.audit(now, &user, "container-image", Some(id), &detail)?;
                }
                let job = self.core.jobs.job_mut(&id).expect("checked above");
                // A job stopped while it was being made ready (its image
                // loading) ends as its stop says, not as a failed start.
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
                // A job that could not start failed with 1, as a shell
                // that cannot run a command does.
                let exit = Some(match record.launch_error {
                    Some(_) => ExitStatus { code: 1, signal: 0 },
                    // An allocation its session ended: the session's.
                    None if ended_by_session(job) => job.exit.unwrap_or_default(),
                    None => record.exit,
                });
                // Stopped for another job: requeued, whatever its exit
                // (a job that saved a checkpoint and exited 0 included).
                if matches!(state, JobState::Preempted | JobState::Pending) {
                    return self.preempted_exit(id, record.end_time, exit);
                }
                let reason = match (&record.launch_error, state) {
                    (Some(e), _) => Some(e.clone()),
                    (None, JobState::OutOfMemory) => Some(format!(
                        "the OOM killer killed {} of its processes: it needed more than its {} of memory",
                        record.usage.oom_kills,
                        job.mem_mb.map(crate::model::units::format_memory_mb).unwrap_or_else(|| "share".into())
                    )),
                    (None, JobState::Failed | JobState::Completed)
                        if record.usage.pids_refused > 0 =>
                    {
                        Some(format!(
                        "it reached its limit of {} processes (job_pids_max): {} forks were refused",
                        self.core.config.job_pids_max, record.usage.pids_refused
                        ))
                    }
                    _ => None,
                };
                if record.stuck > 0 {
                    self.drain_for_stuck(id, record.stuck, now)?;
                }
                self.finish(id, state, record.end_time, exit, reason)?;
            }
            None => {
                // Before its end is recorded: its GPUs are not free
                // while its processes live.
                let left = self
                    .core
                    .jobs
                    .get(&id)
                    .map_or(0, |job| self.clear_remains_of(job));
                let reason = format!(
                    "the job's supervisor ended without recording the job's end{}",
                    if left > 0 {
                        format!("; {left} leftover processes killed")
                    } else {
                        String::new()
                    }
                );
                self.finish(id, JobState::NodeFail, now, None, Some(reason))?;
            }
        }
        Ok(())
    }

    /// Job `id`'s run was ended by its node for its fence (`record` says
    /// why): NODE_FAIL, requeued unless it asked not to be.
    fn fence_ended(&mut self, id: JobId, record: &ExitRecord, now: i64) -> Result<(), DaemonError> {
        let Some(job) = self.core.jobs.get(&id) else {
            return Ok(());
        };
        let node = job.node.clone().unwrap_or_default();
        let no_requeue = job.no_requeue;
        let why = format!(
            "its node {node} ended it: {} (NODE_FAIL)",
            record.fenced.as_deref().unwrap_or("fenced")
        );
        let mut fx = Effects::default();
        fx.named_event(id, now, "NODE_FAIL", Some(&why));
        self.apply(fx)?;
        let (end, exit) = (record.end_time, Some(record.exit));
        if no_requeue {
            return self.finish(id, JobState::NodeFail, end, exit, Some(why));
        }
        self.requeue_run(
            id,
            (end, end),
            exit,
            Some(format!("requeued: {why}")),
            false,
        )
    }
}

/// Whether `job` is an interactive allocation ended by its session
/// (`salloc`'s command, `srun`'s step), whose status is its own.
fn ended_by_session(job: &crate::model::job::Job) -> bool {
    job.interactive
        && job.exit.is_some()
        && matches!(
            job.kill_reason,
            Some(JobState::Completed | JobState::Failed)
        )
}
