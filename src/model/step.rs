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
    /// What its tasks used, as srun reported with its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<StepUsage>,
    /// Its job's GPU sums when it began: what its share is counted from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_begin: Option<StepGpu>,
    /// Its job's GPU readings while it ran, as the controller charged
    /// them (the job's sums at its end less those at its begin); set at
    /// its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<StepGpu>,
}

/// Which step of its job a record is, as sacct names it after the job's
/// id: `N.0`, `N.1`... (each srun), `N.batch` (the batch script),
/// `N.extern` (the allocation held on each of the job's nodes, which
/// nothing of the job's own runs in).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StepId {
    Numbered(u32),
    Batch,
    Extern,
}

impl std::fmt::Display for StepId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepId::Numbered(n) => write!(f, "{n}"),
            StepId::Batch => f.write_str("batch"),
            StepId::Extern => f.write_str("extern"),
        }
    }
}

/// What one task used, measured when it was reaped (`wait4`): its peak
/// resident memory and CPU time, and those of the processes it reaped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskUsage {
    pub max_rss_bytes: u64,
    pub user_usec: u64,
    pub system_usec: u64,
}

/// What a step's tasks used, summed as Slurm's accounting sums them:
/// the largest task's peak memory (`MaxRSS`, with its task), the mean
/// (`AveRSS`), and CPU time summed over tasks (`TotalCPU`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepUsage {
    /// Tasks measured.
    pub tasks: u32,
    pub max_rss_bytes: u64,
    pub max_rss_task: u32,
    pub rss_sum_bytes: u64,
    pub user_usec: u64,
    pub system_usec: u64,
}

impl StepUsage {
    /// Adds what task `task` used.
    pub fn add(&mut self, task: u32, used: TaskUsage) {
        if self.tasks == 0 || used.max_rss_bytes > self.max_rss_bytes {
            self.max_rss_bytes = used.max_rss_bytes;
            self.max_rss_task = task;
        }
        self.tasks += 1;
        self.rss_sum_bytes = self.rss_sum_bytes.saturating_add(used.max_rss_bytes);
        self.user_usec = self.user_usec.saturating_add(used.user_usec);
        self.system_usec = self.system_usec.saturating_add(used.system_usec);
    }

    /// The mean of the tasks' peak memory (`AveRSS`).
    pub fn ave_rss_bytes(&self) -> u64 {
        self.rss_sum_bytes / u64::from(self.tasks.max(1))
    }

    /// User and system CPU time of every task (`TotalCPU`).
    pub fn total_cpu_usec(&self) -> u64 {
        self.user_usec.saturating_add(self.system_usec)
    }

    /// The mean CPU time of a task (`AveCPU`).
    pub fn ave_cpu_usec(&self) -> u64 {
        self.total_cpu_usec() / u64::from(self.tasks.max(1))
    }
}

/// A step's share of its job's GPU readings: the readings taken while it
/// ran and the sum of their mean utilisation (as in
/// [`JobGpuUsage`](super::gpu::JobGpuUsage)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepGpu {
    pub samples: u32,
    pub utilization_sum: u64,
}

impl StepGpu {
    /// The job's sums now.
    pub fn of(job: &super::gpu::JobGpuUsage) -> StepGpu {
        StepGpu {
            samples: job.samples,
            utilization_sum: job.utilization_sum,
        }
    }

    /// What was added since `begin`.
    pub fn since(self, begin: StepGpu) -> StepGpu {
        StepGpu {
            samples: self.samples.saturating_sub(begin.samples),
            utilization_sum: self.utilization_sum.saturating_sub(begin.utilization_sum),
        }
    }

    /// Mean utilisation in percent; `None` without readings.
    pub fn mean(&self) -> Option<f64> {
        (self.samples > 0).then(|| self.utilization_sum as f64 / f64::from(self.samples))
    }
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

    /// The state a step's end gives it: a step whose tasks a signal
    /// ended was cancelled (`scancel N.S`, the job's cancel), as Slurm
    /// records it, whatever its exit code.
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
            usage: None,
            gpu_begin: None,
            gpu: None,
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

    #[test]
    fn a_steps_usage_is_its_largest_task_and_the_sum_of_their_cpu() {
        let mut usage = StepUsage::default();
        let task = |mb: u64, user: u64, system: u64| TaskUsage {
            max_rss_bytes: mb << 20,
            user_usec: user,
            system_usec: system,
        };
        usage.add(0, task(10, 1_000_000, 0));
        usage.add(3, task(30, 2_000_000, 500_000));
        usage.add(1, task(20, 0, 500_000));
        assert_eq!((usage.max_rss_bytes, usage.max_rss_task), (30 << 20, 3));
        assert_eq!(usage.ave_rss_bytes(), 20 << 20);
        assert_eq!(usage.total_cpu_usec(), 4_000_000);
        assert_eq!(usage.ave_cpu_usec(), 4_000_000 / 3);
        let begin = StepGpu {
            samples: 4,
            utilization_sum: 100,
        };
        let end = StepGpu {
            samples: 6,
            utilization_sum: 260,
        };
        assert_eq!(end.since(begin).mean(), Some(80.0));
        assert_eq!(begin.since(begin).mean(), None);
    }
}
