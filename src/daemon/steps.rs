//! Job steps: `srun` in a running job asks for its step's number before
//! it starts the tasks and reports their end; both are recorded, for
//! `ysacct` to list under the job. Asked by the job's user (or an
//! administrator), from where the job runs.

use crate::db;
use crate::model::job::{ExitStatus, JobId, JobState};
use crate::model::step::Step;
use crate::proto::Reply;

use super::control::StepAsk;
use super::effects::Row;
use super::error::DaemonError;
use super::requester::Requester;
use super::state::Daemon;

impl Daemon {
    /// Records a step beginning in a running job; its number.
    pub(super) fn begin_step(
        &mut self,
        ask: StepAsk,
        who: &Requester,
        now: i64,
    ) -> Result<Reply, DaemonError> {
        let refuse = |error: String| Ok(Reply::Rejected { error });
        if let Some(error) = self.refuse_step(ask.job, who)? {
            return refuse(error);
        }
        let job = &self.core.jobs[&ask.job];
        if job.state != JobState::Running {
            return refuse(format!(
                "job {} is {}; steps run in a running job",
                job.display_id(),
                job.state
            ));
        }
        let step = Step {
            job: ask.job,
            restart: job.restart_count,
            step: 0,
            name: one_line(&ask.name, 64),
            nodes: one_line(&ask.nodes, 1024),
            tasks: ask.tasks,
            start: now,
            end: None,
            state: JobState::Running,
            exit: None,
            srun_pid: ask.pid,
        };
        let number = db::next_step(self.tx()?, step.job, step.restart)?;
        let restart = step.restart;
        self.write(Row::StepBegun(Box::new(Step {
            step: number,
            ..step
        })))?;
        Ok(Reply::StepBegun {
            step: number,
            restart,
        })
    }

    /// Records the end of a step.
    pub(super) fn end_step(
        &mut self,
        (job, restart, step): (JobId, u32, u32),
        exit: ExitStatus,
        who: &Requester,
        now: i64,
    ) -> Result<Reply, DaemonError> {
        if let Some(error) = self.refuse_step(job, who)? {
            return Ok(Reply::Rejected { error });
        }
        let ended = db::step_running(self.tx()?, (job, restart, step))?;
        if ended {
            self.write(Row::StepEnded {
                step: (job, restart, step),
                exit,
                time: now,
            })?;
        }
        Ok(Reply::Control {
            outcomes: Vec::new(),
            message: (!ended).then(|| format!("step {job}.{step} had already ended")),
        })
    }

    /// Signals the srun of a running step, which passes the signal on to
    /// its tasks (`scancel N.S`).
    pub(super) fn cancel_step(
        &mut self,
        (job, step): (JobId, u32),
        signal: Option<i32>,
        who: &Requester,
    ) -> Result<Reply, DaemonError> {
        let error = match self.refuse_step(job, who)? {
            Some(error) => Some(error),
            None => self.signal_step((job, step), signal.unwrap_or(libc::SIGTERM))?,
        };
        Ok(Reply::Control {
            outcomes: vec![crate::proto::JobOutcome::new(job, error)],
            message: None,
        })
    }

    /// Why step `step` of `job` could not be signalled, if it could not.
    fn signal_step(
        &mut self,
        (job, step): (JobId, u32),
        signal: i32,
    ) -> Result<Option<String>, DaemonError> {
        let current = &self.core.jobs[&job];
        if current.state != JobState::Running {
            return Ok(Some(format!(
                "job {job} is {}; its steps are not running",
                current.state
            )));
        }
        let restart = current.restart_count;
        let found = db::steps_of(&self.store.db, job)?
            .into_iter()
            .find(|s| s.restart == restart && s.step == step && s.end.is_none());
        use crate::exec::spec::SignalTarget;
        let target = match found {
            None => return Ok(Some(format!("step {job}.{step} is not running"))),
            // Its srun is outside the allocation: its tasks are signalled.
            Some(_) if current.interactive => SignalTarget::Step(step),
            Some(s) if s.srun_pid == 0 => {
                return Ok(Some(format!("step {job}.{step} was started by an srun that did not say its process: cancel the job")))
            }
            Some(s) => SignalTarget::Process(s.srun_pid),
        };
        let command = crate::exec::spec::StepCommand::Signal { signal, target };
        Ok(match self.command_job(job, &command) {
            Ok(()) => {
                tracing::info!(target: "ysched::daemon", "step {job}.{step} sent signal {signal}");
                None
            }
            Err(e) => Some(e.to_string()),
        })
    }

    /// Why `who` may not record steps of `job`, if not: another's job, or
    /// one not in the queue (its steps ended with it).
    fn refuse_step(&self, job: JobId, who: &Requester) -> Result<Option<String>, DaemonError> {
        if self.core.jobs.get(&job).is_none() {
            return Ok(Some(format!(
                "job {job} is not running; its steps ended with it"
            )));
        }
        self.refuse(job, who)
    }
}

/// `text` on one line, at most `max` characters: what a step is called
/// and where it runs are shown in listings, one row each.
fn one_line(text: &str, max: usize) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .take(max)
        .collect()
}
