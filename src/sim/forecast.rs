//! When would a job start (`ysbatch --test-only`)? The scheduling pass run
//! forward on a copy of the queue: every running job ends at its time
//! limit, each job started on the way runs to its own, until the job asked
//! about starts. What cannot be known is left out — a job that ends early,
//! a job submitted later, usage charged on the way — so the estimate is
//! the start the queue promises now, and a job without a time limit ahead
//! of it makes it unknown.

use std::collections::HashMap;

use crate::config::Config;
use crate::model::job::{Job, JobId, JobState};
use crate::model::policy::Association;
use crate::sched::fairshare::Usage;
use crate::sched::pool::Layout;
use crate::sched::{self, pass};

/// What the pass looks at besides the jobs, held fixed while it runs
/// forward.
pub struct Context<'a> {
    pub layout: &'a Layout,
    pub drained: &'a [u32],
    pub usage: &'a HashMap<Association, Usage>,
    pub spent: &'a HashMap<String, (i64, i64)>,
    /// The states of the jobs dependencies name (those not active).
    pub named: &'a HashMap<JobId, Option<JobState>>,
    pub can_suspend: bool,
    pub now: i64,
}

/// Where and when the job would start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forecast {
    pub start: i64,
    pub node: String,
    /// In the node's own numbers.
    pub gpus: Vec<u32>,
    /// It would borrow beyond its account's guarantee.
    pub borrowing: bool,
}

/// Why there is no forecast.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unknown {
    /// Nothing would end before it could start: jobs without a time limit
    /// hold what it needs, or it waits for something no end brings (a
    /// hold, an approval, a dependency on a job that never ends).
    NoEnd { reason: String },
    /// Not within the horizon, or not within the steps a forecast may take.
    TooFar,
}

/// How far ahead a forecast looks, and how many moments it may visit.
const HORIZON_SECS: i64 = 366 * 86_400;
const MAX_STEPS: usize = 5_000;
/// Passes at one moment at most (as the simulator).
const MAX_PASSES_AT_ONCE: usize = 16;

/// When `target` (one of `jobs`, pending) would start.
pub fn start_of(
    target: JobId,
    jobs: Vec<Job>,
    ctx: &Context,
    config: &Config,
) -> Result<Forecast, Unknown> {
    let mut queue = Queue {
        jobs: jobs.into_iter().map(|j| (j.id, j)).collect(),
        named: ctx.named.clone(),
    };
    let mut now = ctx.now;
    let mut last_reason = String::from("None");
    for _ in 0..MAX_STEPS {
        let mut wake = None;
        for _ in 0..MAX_PASSES_AT_ONCE {
            let decisions = queue.pass(ctx, config, now);
            if let Some(p) = decisions.starts.iter().find(|s| s.job == target) {
                return Ok(Forecast {
                    start: now,
                    node: p.node.clone(),
                    gpus: p.gpus.clone(),
                    borrowing: p.borrowing,
                });
            }
            if let Some(r) = decisions
                .plan
                .reasons
                .get(&target)
                .or(decisions.held.get(&target))
            {
                last_reason = r.to_string();
            }
            wake = decisions.plan.wake_at;
            if !queue.carry_out(decisions, now) {
                break;
            }
        }
        let Some(next) = queue.next_end().into_iter().chain(wake).min() else {
            return Err(Unknown::NoEnd {
                reason: last_reason,
            });
        };
        if next - ctx.now > HORIZON_SECS {
            return Err(Unknown::TooFar);
        }
        now = next.max(now + 1);
        queue.end_until(now);
    }
    Err(Unknown::TooFar)
}

/// The copy of the queue the forecast runs forward.
struct Queue {
    jobs: std::collections::BTreeMap<JobId, Job>,
    named: HashMap<JobId, Option<JobState>>,
}

impl Queue {
    fn pass(&mut self, ctx: &Context, config: &Config, now: i64) -> pass::Decisions {
        // A dependency on a job of the queue reads its state as it is now.
        for (id, state) in self.named.iter_mut() {
            if let Some(job) = self.jobs.get(id) {
                *state = Some(job.state);
            }
        }
        let jobs: Vec<&Job> = self.jobs.values().collect();
        let state = pass::State {
            jobs: &jobs,
            named: &self.named,
            layout: ctx.layout,
            drained: ctx.drained,
            usage: ctx.usage,
            spent: ctx.spent,
            checkpoints: &HashMap::new(),
            can_suspend: ctx.can_suspend,
            now,
            numbered: None,
        };
        sched::pass(&state, config)
    }

    /// Starts and preempts as the pass decided; whether anything changed.
    fn carry_out(&mut self, decisions: pass::Decisions, now: i64) -> bool {
        let changed = !decisions.starts.is_empty() || !decisions.preemptions.is_empty();
        for start in decisions.starts {
            if let Some(job) = self.jobs.get_mut(&start.job) {
                job.state = JobState::Running;
                job.start_time = Some(now);
                job.gpus_alloc = start.gpus;
                job.node = Some(start.node);
                job.claim.clear();
                job.borrowed = start.borrowing;
            }
        }
        for p in decisions.preemptions {
            // The victims go at once, as ones that obey SIGTERM would, and
            // wait again; the preemptor keeps their GPUs.
            for victim in &p.victims {
                if let Some(job) = self.jobs.get_mut(victim) {
                    job.state = JobState::Pending;
                    job.start_time = None;
                    job.gpus_alloc.clear();
                    job.node = None;
                    job.preempt_count += 1;
                }
            }
            if let Some(job) = self.jobs.get_mut(&p.job) {
                job.claim = p.gpus;
                job.node = Some(p.node);
            }
        }
        changed
    }

    /// The next time a running job reaches its time limit.
    fn next_end(&self) -> Option<i64> {
        self.jobs
            .values()
            .filter(|j| j.state.holds_gpus())
            .filter_map(end_of)
            .min()
    }

    /// Ends every running job whose time is up at `now`.
    fn end_until(&mut self, now: i64) {
        let ended: Vec<JobId> = self
            .jobs
            .values()
            .filter(|j| j.state.holds_gpus() && end_of(j).is_some_and(|t| t <= now))
            .map(|j| j.id)
            .collect();
        for id in ended {
            self.jobs.remove(&id);
            // Ending at its limit is a TIMEOUT; a dependency on it reads
            // as a job that ran to its end.
            self.named.insert(id, Some(JobState::Completed));
        }
    }
}

/// When a job holding GPUs gives them back: at its time limit (a
/// completing one at once).
fn end_of(job: &Job) -> Option<i64> {
    match job.state {
        JobState::Completing => Some(job.start_time.unwrap_or(0)),
        _ => job.deadline(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::job::{example_job, GpuRequest};

    fn job(id: JobId, gpus: u32, limit: Option<u64>) -> Job {
        Job {
            gpus: GpuRequest {
                count: gpus,
                ..GpuRequest::default()
            },
            cpus: 1,
            mem_mb: None,
            time_limit: limit,
            submit_time: id as i64,
            ..example_job(id)
        }
    }

    fn running(id: JobId, alloc: &[u32], start: i64, limit: Option<u64>) -> Job {
        Job {
            state: JobState::Running,
            gpus_alloc: alloc.to_vec(),
            start_time: Some(start),
            node: Some("gpu01".into()),
            ..job(id, alloc.len() as u32, limit)
        }
    }

    fn forecast(jobs: Vec<Job>, target: JobId) -> Result<Forecast, Unknown> {
        let config = Config::builtin(std::path::Path::new("t.toml"));
        let gpus = crate::gpu::test_a100s(4);
        let layout = Layout::single("gpu01", 64, 1 << 20, &gpus);
        let (usage, spent, named) = (HashMap::new(), HashMap::new(), HashMap::new());
        let ctx = Context {
            layout: &layout,
            drained: &[],
            usage: &usage,
            spent: &spent,
            named: &named,
            can_suspend: false,
            now: 100,
        };
        start_of(target, jobs, &ctx, &config)
    }

    #[test]
    fn a_job_starts_when_the_jobs_before_it_reach_their_limits() {
        // 3 GPUs busy until 160, one until 130; a 2-GPU job ahead takes
        // two at 160 for 100 s; ours needs 3: at 260, or at 160 if it
        // fits beside it (it does not: 4 - 2 = 2).
        let jobs = vec![
            running(1, &[0, 1, 2], 60, Some(100)),
            running(2, &[3], 30, Some(100)),
            job(3, 2, Some(100)),
            job(4, 3, Some(50)),
        ];
        let f = forecast(jobs, 4).unwrap();
        assert_eq!(f.start, 260);
        assert_eq!(f.gpus.len(), 3);
        assert_eq!(f.node, "gpu01");
    }

    #[test]
    fn a_job_behind_one_without_a_limit_has_no_forecast() {
        let jobs = vec![running(1, &[0, 1, 2, 3], 60, None), job(2, 1, Some(60))];
        assert!(matches!(
            forecast(jobs, 2),
            Err(Unknown::NoEnd { reason }) if reason == "Resources"
        ));
    }
}
