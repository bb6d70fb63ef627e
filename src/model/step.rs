//! A job step: one `srun` in a job, as Slurm numbers them (`N.0`, `N.1`,
//! ... per run of the job) and accounts them.

use serde::{Deserialize, Serialize};

use super::job::{ExitStatus, JobId, JobState};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub job: JobId,
    /// The run of the job it belongs to (its restart count then).
    pub restart: u32,
    pub step: u32,
    /// What it runs: its command's name, as Slurm names steps.
    pub name: String,
    /// The nodes it runs on, as a hostlist.
    pub nodes: String,
    pub tasks: u32,
    pub start: i64,
    pub end: Option<i64>,
    pub state: JobState,
    pub exit: Option<ExitStatus>,
    /// The srun that runs it, on the job's batch node (0: unknown).
    #[serde(default)]
    pub srun_pid: u32,
}

impl Step {
    /// Its state and end as far as they are known: a step still running
    /// when its job's run ended ended then, as the job did (its tasks
    /// went with the job).
    pub fn as_of(mut self, job_state: JobState, job_end: Option<i64>, job_restart: u32) -> Step {
        let run_over = job_restart > self.restart || !job_state.is_active();
        if self.end.is_none() && run_over {
            self.end = job_end.or(Some(self.start));
            self.state = match job_state {
                s if s.is_active() => JobState::Cancelled,
                s => s,
            };
        }
        self
    }

    /// The state a step's end gives it.
    pub fn state_of(exit: ExitStatus) -> JobState {
        match exit {
            ExitStatus { code: 0, signal: 0 } => JobState::Completed,
            ExitStatus { signal: 0, .. } => JobState::Failed,
            _ => JobState::Cancelled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running() -> Step {
        Step {
            job: 7,
            restart: 0,
            step: 1,
            name: "python".into(),
            nodes: "gpu01".into(),
            tasks: 1,
            start: 100,
            end: None,
            state: JobState::Running,
            exit: None,
            srun_pid: 0,
        }
    }

    #[test]
    fn a_step_left_running_ends_with_its_run() {
        let step = running();
        assert_eq!(step.clone().as_of(JobState::Running, None, 0), step);
        let ended = step.clone().as_of(JobState::Timeout, Some(300), 0);
        assert_eq!((ended.state, ended.end), (JobState::Timeout, Some(300)));
        // The job was requeued and runs again: the old run's step is over.
        let requeued = step.as_of(JobState::Running, None, 1);
        assert_eq!(
            (requeued.state, requeued.end),
            (JobState::Cancelled, Some(100))
        );
        let exit = |code, signal| Step::state_of(ExitStatus { code, signal });
        assert_eq!(exit(0, 0), JobState::Completed);
        assert_eq!(exit(3, 0), JobState::Failed);
        assert_eq!(exit(0, 15), JobState::Cancelled);
    }
}
