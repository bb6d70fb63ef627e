//! `ysbatch --test-only`: a submission judged as any other (the same
//! refusals), then, instead of being stored, run forward with the queue
//! (`sim::forecast`): when and where it would start, what it would cost,
//! whether it would wait for approval or be demoted by a budget.

use crate::model::job::{Job, JobId};
use crate::model::policy::TOKEN;
use crate::proto::{Reply, TestOnly};
use crate::sim::forecast::{self, Unknown};

use super::error::DaemonError;
use super::state::Daemon;

impl Daemon {
    /// What would happen to `job` (admitted, not stored): its forecast,
    /// with `approval` and the budget's `warnings`.
    pub(super) fn test_only(
        &mut self,
        mut job: Job,
        approval: Option<String>,
        warnings: Vec<String>,
        now: i64,
    ) -> Result<Reply, DaemonError> {
        job.id = crate::db::next_job_id(self.tx()?)?;
        let tokens = self
            .core
            .worst_case(self.nodes.all_gpus(), &job.gpus, job.time_limit, &job.qos)
            .map(|c| c as f64 / TOKEN);
        let mut answer = TestOnly {
            job_id: job.id,
            account: job.account.clone(),
            qos: job.qos.clone(),
            gpus: job.gpus.count,
            cpus: job.cpus,
            time_limit: job.time_limit,
            tokens,
            approval,
            warnings,
            ..TestOnly::default()
        };
        match self.forecast(job, now)? {
            Ok(f) => {
                answer.start = Some(f.start);
                answer.node = Some(f.node);
                answer.gpu_ids = f.gpus;
                answer.borrowing = f.borrowing;
            }
            Err(Unknown::NoEnd { reason }) => {
                answer.unknown = Some(format!(
                    "no start can be foreseen: it would wait ({reason}) for jobs without a time limit, or for something no job's end brings"
                ));
            }
            Err(Unknown::TooFar) => {
                answer.unknown = Some("no start within a year of running jobs' time limits".into());
            }
        }
        Ok(Reply::TestOnly(Box::new(answer)))
    }

    /// The pass run forward over a copy of the queue with `job` in it.
    fn forecast(
        &mut self,
        job: Job,
        now: i64,
    ) -> Result<Result<forecast::Forecast, Unknown>, DaemonError> {
        let target = job.id;
        let mut named = self.dependency_states()?;
        let extra: Vec<JobId> = crate::sched::pass::named_by_dependencies(std::iter::once(&job))
            .into_iter()
            .collect();
        for id in extra {
            let state = self.state_of(id)?;
            named.insert(id, state);
        }
        let mut jobs: Vec<Job> = self.core.jobs.all().map(Job::clone).collect();
        jobs.push(job);
        let usage = self.usage_with_running(now);
        let drained = self.drained_pool_gpus();
        let ctx = forecast::Context {
            layout: self.nodes.layout(),
            drained: &drained,
            usage: &usage,
            spent: &self.core.policy.budgets,
            named: &named,
            can_suspend: self.nodes.iter().all(|n| n.facts().isolation.can_suspend),
            now,
        };
        Ok(forecast::start_of(target, jobs, &ctx, &self.core.config))
    }
}
