//! The replay: a virtual clock that moves from event to event (an
//! arrival, an end, a time the pass asked to be woken at), and at each
//! the daemon's scheduling pass (`sched::pass`) over the simulated queue:
//! the same priorities, fair-share, limits, windows, budgets, dependencies,
//! holds, reservations and preemption. Jobs end when their trace says;
//! a preempted job is requeued (or ends PREEMPTED) at once, as one that
//! obeys SIGTERM would.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

use crate::config::{Config, PreemptMode};
use crate::gpu::Inventory;
use serde::Serialize;

use crate::model::job::{GpuRequest, Job, JobId, JobState};
use crate::model::policy::Association;
use crate::sched::fairshare::{self, Usage};
use crate::sched::pool::Layout;
use crate::sched::{self, budget, limits, pass};

use super::trace::TraceJob;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Submission order, no backfill, no fair-share.
    Fifo,
    /// ysched's policy: multifactor priority, fair-share, limits, budgets, backfill.
    Ysched,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Fifo => "fifo",
            Policy::Ysched => "ysched",
        }
    }
}

/// What a replay leaves for the report.
pub struct Outcome {
    /// The jobs that ended, as they ended.
    pub done: Vec<Job>,
    /// Each job's run time, by id.
    pub runs: HashMap<JobId, u64>,
    pub counts: Counts,
    /// Seconds during which some job waited, and busy GPU-seconds in them.
    pub waited_s: i64,
    pub busy_while_waiting: f64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub backfilled: usize,
    pub refused: usize,
    pub downgraded: usize,
    pub clamped: usize,
    pub preempted: usize,
    /// Of them, borrowing jobs a lender reclaimed its guarantee from.
    pub reclaimed: usize,
}

/// A GPU out of service from a time on: what `yscontrol drain` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainAt {
    pub time: i64,
    pub gpu: u32,
}

/// Passes at one moment at most: each that changes something may enable
/// another, and none can repeat forever.
const MAX_PASSES_AT_ONCE: usize = 16;

pub struct Sim<'a> {
    config: &'a Config,
    /// The config without accounts: FIFO knows no limits.
    fifo_config: Config,
    inventory: Inventory,
    /// The simulated server as the pass sees it: the inventory, CPUs and
    /// memory without limit.
    layout: Layout,
    policy: Policy,
    trace: &'a [TraceJob],
    drains: Vec<DrainAt>,
    /// The active jobs: pending and running.
    jobs: BTreeMap<JobId, Job>,
    /// When each running job ends: (time, id, its run number), so an end
    /// of a run that a preemption cut short is told from the next run's.
    ends: BinaryHeap<Reverse<(i64, JobId, u32)>>,
    usage: HashMap<Association, Usage>,
    spent: HashMap<String, (i64, i64)>,
    ended: HashMap<JobId, JobState>,
    wake_at: Option<i64>,
    next: usize,
    out: Outcome,
    /// GPUs in use, and since when the state (busy, anyone waiting) holds.
    busy: usize,
    since: Option<(i64, bool)>,
    /// Every start, in order: (time, job).
    pub starts: Vec<(i64, JobId)>,
}

impl<'a> Sim<'a> {
    pub fn new(
        config: &'a Config,
        trace: &'a [TraceJob],
        policy: Policy,
        drains: Vec<DrainAt>,
    ) -> Sim<'a> {
        Sim {
            config,
            fifo_config: Config {
                accounts: Vec::new(),
                ..config.clone()
            },
            inventory: Inventory::declared(config),
            layout: Layout::single("sim", u32::MAX, u64::MAX, &Inventory::declared(config).gpus),
            policy,
            trace,
            drains,
            jobs: BTreeMap::new(),
            ends: BinaryHeap::new(),
            usage: HashMap::new(),
            spent: HashMap::new(),
            ended: HashMap::new(),
            wake_at: None,
            next: 0,
            out: Outcome {
                done: Vec::new(),
                runs: HashMap::new(),
                counts: Counts::default(),
                waited_s: 0,
                busy_while_waiting: 0.0,
            },
            busy: 0,
            since: None,
            starts: Vec::new(),
        }
    }

    pub fn gpus(&self) -> u32 {
        self.inventory.gpus.len() as u32
    }

    /// Replays the whole trace.
    pub fn run(mut self) -> (Outcome, Vec<(i64, JobId)>) {
        while let Some(now) = self.next_event() {
            self.account_busy(now);
            self.end_due(now);
            self.arrive(now);
            // As the daemon does: another pass at once after a preemption
            // (the claimant starts on the GPUs freed) or after a start
            // that may satisfy a held job's dependency.
            for _ in 0..MAX_PASSES_AT_ONCE {
                if !self.schedule(now) {
                    break;
                }
            }
            let waiting = self.jobs.values().any(|j| j.state == JobState::Pending);
            self.since = Some((now, waiting));
        }
        (self.out, self.starts)
    }

    /// The next time something happens; `None` when nothing can change.
    fn next_event(&self) -> Option<i64> {
        let arrival = self.trace.get(self.next).map(|t| t.submit);
        let end = self.ends.peek().map(|Reverse((t, _, _))| *t);
        let last = self.since.map(|(t, _)| t);
        let wake = self.wake_at.filter(|&w| last.is_none_or(|l| w > l));
        let drain = self
            .drains
            .iter()
            .map(|d| d.time)
            .filter(|&t| last.is_none_or(|l| t > l))
            .min();
        let anything = [arrival, end, wake, drain].into_iter().flatten().min()?;
        // A wake or a drain with nothing pending and nothing to come
        // changes nothing.
        let waiting = self.jobs.values().any(|j| j.state == JobState::Pending);
        (arrival.is_some() || end.is_some() || waiting).then_some(anything)
    }

    fn account_busy(&mut self, now: i64) {
        if let Some((from, true)) = self.since {
            self.out.waited_s += now - from;
            self.out.busy_while_waiting += (now - from) as f64 * self.busy as f64;
        }
    }

    /// Ends the runs due at `now`, charging their usage and budgets.
    fn end_due(&mut self, now: i64) {
        while let Some(&Reverse((t, id, run))) = self.ends.peek() {
            if t != now {
                break;
            }
            self.ends.pop();
            let current = self
                .jobs
                .get(&id)
                .is_some_and(|j| j.state == JobState::Running && j.restart_count == run);
            if current {
                let job = self.jobs.remove(&id).expect("checked");
                self.finish(job, JobState::Completed, now);
            }
        }
    }

    fn finish(&mut self, mut job: Job, state: JobState, now: i64) {
        job.end_time = Some(now);
        job.state = state;
        self.busy -= job.gpus_alloc.len();
        self.charge(&job, now);
        self.ended.insert(job.id, state);
        self.out.done.push(job);
    }

    fn charge(&mut self, job: &Job, now: i64) {
        let config = self.config;
        let billing = fairshare::charge(job, &self.inventory.gpus, config);
        self.usage
            .entry((job.account.clone(), job.user.clone()))
            .or_default()
            .charge(
                billing,
                now,
                config.fairshare.half_life,
                config.fairshare.reset,
            );
        for a in limits::Policy::new(config).chain(&job.account) {
            if let Some(b) = &a.budget {
                let start = b.period.start(now);
                let e = self.spent.entry(a.name.clone()).or_insert((start, 0));
                if e.0 != start {
                    *e = (start, 0);
                }
                e.1 += billing;
            }
        }
    }

    /// Takes in the jobs submitted at `now`, judged by the budgets as the
    /// daemon's admission judges them.
    fn arrive(&mut self, now: i64) {
        let largest = self
            .inventory
            .type_counts()
            .iter()
            .map(|(_, n)| *n)
            .max()
            .unwrap_or(0);
        while let Some(t) = self.trace.get(self.next).filter(|t| t.submit == now) {
            let id = self.next as JobId + 1;
            self.next += 1;
            let mut job = job_of(id, t, &self.config.default_qos);
            if job.gpus.count > largest {
                job.gpus.count = largest;
                self.out.counts.clamped += 1;
            }
            if self.policy == Policy::Ysched && !self.admit(&mut job, now) {
                self.out.counts.refused += 1;
                continue;
            }
            self.out.runs.insert(id, t.run);
            self.jobs.insert(id, job);
        }
    }

    /// Whether the budgets take `job`; a downgrade moves it to the lowest QoS.
    fn admit(&mut self, job: &mut Job, now: i64) -> bool {
        let config = self.config;
        let cost = budget::worst_case(&job.gpus, job.time_limit, 1.0, &self.inventory.gpus, config);
        match judge(
            config,
            &limits::Policy::new(config),
            &self.spent,
            &self.jobs,
            &self.inventory,
            job,
            cost,
            now,
        ) {
            budget::Verdict::Refuse(_) => false,
            budget::Verdict::Downgrade(_) => {
                self.out.counts.downgraded += 1;
                let lowest = config.qos.iter().min_by_key(|q| q.priority);
                job.qos = lowest.map(|q| q.name.clone()).unwrap_or_default();
                true
            }
            _ => true,
        }
    }

    /// One pass at `now`, carried out; whether another should follow.
    fn schedule(&mut self, now: i64) -> bool {
        let drained: Vec<u32> = self
            .drains
            .iter()
            .filter(|d| d.time <= now)
            .map(|d| d.gpu)
            .collect();
        if self.policy == Policy::Fifo {
            let starts = fifo(
                &self.jobs,
                &sched::Pool::of(&self.layout, &drained),
                &limits::Policy::new(&self.fifo_config),
                now,
            );
            self.start(starts, now);
            return false;
        }
        let decisions = {
            let jobs: Vec<&Job> = self.jobs.values().collect();
            let named = self.named();
            let usage = self.usage_with_running(now);
            let state = pass::State {
                jobs: &jobs,
                named: &named,
                layout: &self.layout,
                drained: &drained,
                usage: &usage,
                spent: &self.spent,
                checkpoints: &HashMap::new(),
                can_suspend: false,
                now,
                numbered: None,
            };
            sched::pass(&state, self.config)
        };
        self.out.counts.backfilled += decisions.plan.backfilled.len();
        self.wake_at = decisions.plan.wake_at;
        if self.config.kill_invalid_dependency {
            for id in &decisions.never {
                let job = self.jobs.remove(id).expect("a pending job");
                self.ended.insert(job.id, JobState::Cancelled);
                self.out.done.push(Job {
                    state: JobState::Cancelled,
                    end_time: Some(now),
                    ..job
                });
            }
        }
        let again = !decisions.preemptions.is_empty()
            || (!decisions.starts.is_empty() && !decisions.held.is_empty());
        let starts = decisions
            .starts
            .into_iter()
            .map(|s| (s.job, s.gpus, s.borrowing));
        self.start(starts.collect(), now);
        for preemption in decisions.preemptions {
            self.preempt(preemption, now);
        }
        again
    }

    /// The states of the jobs pending dependencies name.
    fn named(&self) -> HashMap<JobId, Option<JobState>> {
        pass::named_by_dependencies(self.jobs.values())
            .into_iter()
            .map(|id| {
                (
                    id,
                    self.jobs
                        .get(&id)
                        .map(|j| j.state)
                        .or_else(|| self.ended.get(&id).copied()),
                )
            })
            .collect()
    }

    /// Usage as charged, plus what running jobs used so far (as the daemon
    /// counts it).
    fn usage_with_running(&self, now: i64) -> HashMap<Association, Usage> {
        let fs = &self.config.fairshare;
        let mut usage = self.usage.clone();
        for job in self.jobs.values().filter(|j| j.state == JobState::Running) {
            let so_far = Job {
                end_time: Some(now),
                ..job.clone()
            };
            let billing = fairshare::charge(&so_far, &self.inventory.gpus, self.config);
            usage
                .entry((job.account.clone(), job.user.clone()))
                .or_default()
                .charge(billing, now, fs.half_life, fs.reset);
        }
        usage
    }

    fn start(&mut self, starts: Vec<(JobId, Vec<u32>, bool)>, now: i64) {
        for (id, gpus, borrowing) in starts {
            let job = self
                .jobs
                .get_mut(&id)
                .expect("a start belongs to a pending job");
            job.state = JobState::Running;
            job.start_time = Some(now);
            job.claim.clear();
            job.borrowed = borrowing;
            self.busy += gpus.len();
            job.gpus_alloc = gpus;
            self.ends.push(Reverse((
                now + self.out.runs[&id] as i64,
                id,
                job.restart_count,
            )));
            self.starts.push((now, id));
        }
    }

    /// Stops the victims at once and keeps their GPUs for `urgent`: a
    /// requeued victim waits again from the start of its run.
    fn preempt(&mut self, choice: pass::Preemption, now: i64) {
        if let Some(job) = self.jobs.get_mut(&choice.job) {
            job.claim = choice.gpus;
        }
        for victim in choice.victims {
            let Some(job) = self.jobs.remove(&victim) else {
                continue;
            };
            self.out.counts.preempted += 1;
            let reclaimed = choice.reclaimed.contains(&victim);
            self.out.counts.reclaimed += usize::from(reclaimed);
            let mode = self.config.qos_named(&job.qos).map(|q| q.preempt_mode);
            // A reclaimed job gives borrowed GPUs back and runs again,
            // whatever its QoS does with preempted jobs (as the daemon).
            if mode == Some(PreemptMode::Cancel) && !reclaimed {
                self.finish(job, JobState::Preempted, now);
                continue;
            }
            self.busy -= job.gpus_alloc.len();
            let ran = Job {
                end_time: Some(now),
                ..job.clone()
            };
            self.charge(&ran, now);
            let requeued = Job {
                state: JobState::Pending,
                start_time: None,
                gpus_alloc: Vec::new(),
                borrowed: false,
                preempt_count: job.preempt_count + 1,
                restart_count: job.restart_count + 1,
                ..job
            };
            self.jobs.insert(victim, requeued);
        }
    }
}

fn job_of(id: JobId, t: &TraceJob, qos: &str) -> Job {
    Job {
        id,
        user: t.user.clone(),
        account: t.account.clone(),
        qos: t.qos.clone().unwrap_or_else(|| qos.to_string()),
        dependency: t.dependency.clone(),
        name: format!("line{}", t.line),
        gpus: GpuRequest {
            count: t.gpus,
            ..GpuRequest::default()
        },
        cpus: 0,
        time_limit: Some(t.time_limit),
        submit_time: t.submit,
        ..Job::default()
    }
}

/// The budget verdict for an arriving job, as the daemon would give it.
#[allow(clippy::too_many_arguments)]
fn judge(
    config: &Config,
    policy: &limits::Policy,
    spent: &HashMap<String, (i64, i64)>,
    jobs: &BTreeMap<JobId, Job>,
    inventory: &Inventory,
    job: &Job,
    cost: Option<i64>,
    now: i64,
) -> budget::Verdict {
    let mut verdict = budget::Verdict::Fits;
    for a in policy.chain(&job.account) {
        let Some(b) = &a.budget else { continue };
        let committed = jobs
            .values()
            .filter(|j| policy.chain(&j.account).iter().any(|x| x.name == a.name))
            .filter_map(|j| budget::worst_case(&j.gpus, j.time_limit, 1.0, &inventory.gpus, config))
            .sum();
        let standing = budget::Standing {
            budget: b.amount,
            spent: spent
                .get(&a.name)
                .filter(|(s, _)| *s == b.period.start(now))
                .map_or(0, |(_, x)| *x),
            committed,
        };
        match budget::judge(&a.name, cost, &standing, b.warning, b.over, b.period, now) {
            v @ budget::Verdict::Refuse(_) => return v,
            v @ budget::Verdict::Downgrade(_) => verdict = v,
            _ => {}
        }
    }
    verdict
}

/// Strict first-come-first-served: jobs start in submission order until
/// the first that does not fit.
/// First come, first served: pending jobs in submit order, each started
/// where it fits now, until one does not.
fn fifo(
    jobs: &BTreeMap<JobId, Job>,
    node: &sched::Pool,
    no_limits: &limits::Policy,
    now: i64,
) -> Vec<(JobId, Vec<u32>, bool)> {
    let mut starts = Vec::new();
    let mut busy: Vec<Job> = jobs
        .values()
        .filter(|j| j.state.holds_gpus())
        .cloned()
        .collect();
    for job in jobs.values().filter(|j| j.state == JobState::Pending) {
        let refs: Vec<&Job> = busy.iter().collect();
        let plan = sched::plan(&[(job, 0)], &refs, node, no_limits, now);
        match plan.starts.into_iter().next() {
            Some(sched::plan::Start { job: id, gpus, .. }) => {
                let mut started = job.clone();
                started.gpus_alloc = gpus.clone();
                started.state = JobState::Running;
                busy.push(started);
                starts.push((id, gpus, false));
            }
            None => break,
        }
    }
    starts
}
