//! The scheduling pass: one pure function from the state of the queue and
//! the node, at a time, to what to do now — which pending jobs start and
//! on which GPUs, which wait and why (dependencies, holds, budgets, array
//! throttles, limits, time windows, drains, reservations), and which
//! running jobs are preempted for whom. The daemon and the simulator both
//! call it; each carries the decisions out in its own way (processes and
//! records; a simulated clock).

use std::collections::{HashMap, HashSet};

use crate::config::{Config, PreemptMode};
use crate::model::job::{Job, JobId, JobState};
use crate::model::policy::{Association, OverBudget};

use super::dependency::{Dependency, Status};
use super::fairshare::{self, FactorMap, NodeShare, Tree, Usage};
use super::plan::{plan, Plan, Pool};
use super::pool::Layout;
use super::preempt::{self, Candidate, Choice};
use super::profile::{Free, Types};
use super::reason::Reason;
use super::{budget, elastic, limits, priority};

/// What a pass looks at.
pub struct State<'a> {
    /// The active jobs (pending, running, completing, suspended), in id
    /// order, which is submit order.
    pub jobs: &'a [&'a Job],
    /// The states of the jobs pending dependencies name (`None`: no such
    /// job); an array's id stands for its tasks.
    pub named: &'a HashMap<JobId, Option<JobState>>,
    /// The pool's nodes and GPUs; jobs' allocations are in their nodes'
    /// own numbers, as recorded.
    pub layout: &'a Layout,
    /// GPUs out of service, in pool numbers.
    pub drained: &'a [u32],
    /// Each association's usage, with what its running jobs used so far.
    pub usage: &'a HashMap<Association, Usage>,
    /// What each budgeted account spent in its current period: the
    /// period's start and the billing-seconds.
    pub spent: &'a HashMap<String, (i64, i64)>,
    /// When each running job last saved a checkpoint.
    pub checkpoints: &'a HashMap<JobId, i64>,
    /// Whether the nodes can freeze a running job (suspend preemption).
    pub can_suspend: bool,
    pub now: i64,
}

/// What a pass decided.
pub struct Decisions {
    /// Reservations, and why each job that entered placement waits (its
    /// starts, in pool numbers, are moved to `starts`).
    pub plan: Plan,
    /// Jobs to start now, in priority order, where.
    pub starts: Vec<Placement>,
    /// Pending jobs held back before placement, with why.
    pub held: HashMap<JobId, Reason>,
    /// Pending jobs whose dependency can never be satisfied (held with
    /// `DependencyNeverSatisfied`; the config may cancel them instead).
    pub never: Vec<JobId>,
    /// The jobs that preempt, in priority order, with their victims and
    /// the GPUs kept for them.
    pub preemptions: Vec<Preemption>,
    /// The running jobs that borrow beyond their accounts' guarantees now
    /// (elastic quotas): the first a lender's job takes back.
    pub borrowing: HashSet<JobId>,
    /// The fair-share tree the priorities came from.
    pub tree: Tree,
    pub shares: Vec<NodeShare>,
    pub factors: FactorMap,
}

/// A job to start: its node and GPUs, in that node's own numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub job: JobId,
    pub node: String,
    pub gpus: Vec<u32>,
    /// It runs beyond its account's guarantee, on GPUs others lend.
    pub borrowing: bool,
}

/// A job that preempts others: the victims, and the node and GPUs (in
/// that node's own numbers) kept for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preemption {
    pub job: JobId,
    pub victims: Vec<JobId>,
    pub node: String,
    pub gpus: Vec<u32>,
    /// The job takes back its account's guarantee from borrowing jobs,
    /// rather than preempting by its QoS.
    pub reclaim: bool,
}

/// One scheduling pass over `state` under `config`: on a pool, over the
/// jobs with their allocations in pool numbers, and back.
pub fn pass(state: &State<'_>, config: &Config) -> Decisions {
    if state.layout.is_single() {
        return pass_in_pool_numbers(state, config);
    }
    let in_pool: Vec<Job> = state
        .jobs
        .iter()
        .filter(|j| !j.gpus_alloc.is_empty() || !j.claim.is_empty())
        .map(|j| state.layout.to_pool(j))
        .collect();
    let by_id: HashMap<JobId, &Job> = in_pool.iter().map(|j| (j.id, j)).collect();
    let jobs: Vec<&Job> = state
        .jobs
        .iter()
        .map(|j| by_id.get(&j.id).copied().unwrap_or(j))
        .collect();
    pass_in_pool_numbers(
        &State {
            jobs: &jobs,
            ..*state
        },
        config,
    )
}

fn pass_in_pool_numbers(state: &State<'_>, config: &Config) -> Decisions {
    let now = state.now;
    let pool = Pool::of(state.layout, state.drained);
    let (mut held, never) = dependency_waits(state.jobs, state.named);
    for (id, reason) in budget_waits(state, config) {
        held.entry(id).or_insert(reason);
    }
    for id in crate::array::throttled(state.jobs.iter().copied()) {
        held.entry(id).or_insert(Reason::JobArrayTaskLimit);
    }
    let (tree, shares, factors) = fair_share(state, config);
    let ctx = priority::Context {
        weights: &config.priority,
        qos: &config.qos,
        fairshare: &factors,
        total_gpus: state.layout.gpus.len() as u32,
    };
    let mut rater = priority::Rater::new(&ctx);
    let pending: Vec<(&Job, i64)> = state
        .jobs
        .iter()
        .filter(|j| j.state == JobState::Pending && !held.contains_key(&j.id))
        .map(|j| (*j, rater.factors(j, now).priority()))
        .collect();
    let running: Vec<&Job> = state
        .jobs
        .iter()
        .copied()
        .filter(|j| j.state.holds_gpus())
        .collect();
    let policy = limits::Policy::at(config, now);
    let borrowing = elastic::borrowing_now(&policy, &running);
    let mut plan = plan(&pending, &running, &pool, &policy, now);
    let preemptions = preemptions(state, config, &plan, &policy, &borrowing)
        .into_iter()
        .map(|(job, choice, reclaim)| {
            let (node, gpus) = state.layout.to_node(choice.node, &choice.gpus);
            Preemption {
                job,
                victims: choice.victims,
                node,
                gpus,
                reclaim,
            }
        })
        .collect();
    let starts = std::mem::take(&mut plan.starts)
        .into_iter()
        .map(|s| {
            let (node, gpus) = state.layout.to_node(s.node, &s.gpus);
            Placement {
                job: s.job,
                node,
                gpus,
                borrowing: s.borrowing,
            }
        })
        .collect();
    Decisions {
        plan,
        starts,
        held,
        never,
        preemptions,
        borrowing,
        tree,
        shares,
        factors,
    }
}

/// The fair-share tree of the associations with active jobs, and each
/// association's factor.
fn fair_share(state: &State<'_>, config: &Config) -> (Tree, Vec<NodeShare>, FactorMap) {
    // Runs of jobs of one association pass as one: comparing with the job
    // before is cheaper than hashing every job's pair.
    let mut previous = None;
    let associations = state
        .jobs
        .iter()
        .map(|j| (j.account.as_str(), j.user.as_str()))
        .filter(move |pair| previous.replace(*pair) != Some(*pair));
    let tree = fairshare::build_tree(config, associations, state.usage, state.now);
    let shares = tree.compute(config.fairshare.algorithm);
    let factors = fairshare::factors(&tree, &shares);
    (tree, shares, factors)
}

/// The pending jobs their dependencies hold back (waiting, or never to
/// be satisfied), and the never-satisfiable ones.
pub fn dependency_waits(
    jobs: &[&Job],
    named: &HashMap<JobId, Option<JobState>>,
) -> (HashMap<JobId, Reason>, Vec<JobId>) {
    let mut held = HashMap::new();
    let mut never = Vec::new();
    // For singleton: per (user, name), the lowest pending id and whether
    // one is already running.
    let mut namesakes: HashMap<(u32, &str), (JobId, bool)> = HashMap::new();
    for j in jobs.iter().filter(|j| j.state.is_active()) {
        let entry = namesakes
            .entry((j.uid, j.name.as_str()))
            .or_insert((JobId::MAX, false));
        if j.state == JobState::Pending {
            entry.0 = entry.0.min(j.id);
        } else {
            entry.1 = true;
        }
    }
    for job in jobs.iter().filter(|j| j.state == JobState::Pending) {
        let Some(text) = &job.dependency else {
            continue;
        };
        let status = match Dependency::parse(text) {
            Ok(dependency) => {
                let earlier_namesake = dependency.has_singleton()
                    && namesakes
                        .get(&(job.uid, job.name.as_str()))
                        .is_some_and(|&(lowest, running)| running || lowest < job.id);
                dependency.evaluate(|d| named.get(&d).copied().flatten(), earlier_namesake)
            }
            Err(_) => Status::Never,
        };
        match status {
            Status::Satisfied => {}
            Status::Waiting => {
                held.insert(job.id, Reason::Dependency);
            }
            Status::Never => {
                held.insert(job.id, Reason::DependencyNeverSatisfied);
                never.push(job.id);
            }
        }
    }
    (held, never)
}

/// The ids that pending jobs' dependencies name (whose states a pass
/// needs); unreadable dependencies name none.
pub fn named_by_dependencies<'a>(jobs: impl Iterator<Item = &'a Job>) -> HashSet<JobId> {
    jobs.filter(|j| j.state == JobState::Pending)
        .filter_map(|j| Dependency::parse(j.dependency.as_deref()?).ok())
        .flat_map(|d| d.job_ids().collect::<Vec<_>>())
        .collect()
}

/// The most a job can cost under its QoS's usage factor (`None`: no time
/// limit, no worst case).
pub fn worst_case(job: &Job, gpus: &[crate::model::gpu::Gpu], config: &Config) -> Option<i64> {
    let factor = config.qos_named(&job.qos).map_or(1.0, |q| q.usage_factor);
    budget::worst_case(&job.gpus, job.time_limit, factor, gpus, config)
}

/// Pending jobs of budgets that refuse when over: in submit order, each
/// waits once what is spent, what runs (at its worst case) and the jobs
/// before it would pass the budget.
fn budget_waits(state: &State<'_>, config: &Config) -> HashMap<JobId, Reason> {
    let policy = limits::Policy::new(config);
    let mut waits = HashMap::new();
    for account in &config.accounts {
        let Some(b) = account
            .budget
            .as_ref()
            .filter(|b| b.over == OverBudget::Refuse)
        else {
            continue;
        };
        let spent = match state.spent.get(&account.name) {
            Some(&(start, spent)) if start == b.period.start(state.now) => spent,
            _ => 0,
        };
        // The budgeted account and the accounts below it, once.
        let subtree: HashSet<&str> = config
            .accounts
            .iter()
            .filter(|a| policy.chain(&a.name).iter().any(|x| x.name == account.name))
            .map(|a| a.name.as_str())
            .collect();
        let under: Vec<&Job> = state
            .jobs
            .iter()
            .copied()
            .filter(|j| subtree.contains(j.account.as_str()))
            .collect();
        let cost = |j: &Job| worst_case(j, &state.layout.gpus, config);
        let running: i64 = under
            .iter()
            .filter(|j| j.state.holds_gpus())
            .map(|j| cost(j).unwrap_or(0))
            .sum();
        let mut left = b.amount - spent - running;
        for job in under.iter().filter(|j| j.state == JobState::Pending) {
            match cost(job) {
                Some(c) if c <= left => left -= c,
                _ => {
                    waits.insert(job.id, Reason::AssocGrpBillingMinutes);
                }
            }
        }
    }
    waits
}

/// For each job of the plan that waits for resources and may preempt, in
/// priority order: the cheapest victims whose stop lets it start. A job
/// may preempt the jobs its QoS names, and a job within its account's
/// guarantee the jobs of other accounts that borrow (a reclaim, when all
/// its victims borrow). Victims and GPUs chosen for one are not chosen
/// again for the next. What is free and who may be a victim are found
/// once per pass: a long queue of jobs that may preempt costs a choice
/// each, not a walk of every job.
fn preemptions(
    state: &State<'_>,
    config: &Config,
    plan: &Plan,
    policy: &limits::Policy,
    borrowing: &HashSet<JobId>,
) -> Vec<(JobId, Choice, bool)> {
    let reclaiming = !borrowing.is_empty();
    if !reclaiming && config.qos.iter().all(|q| q.preempt.is_empty()) {
        return Vec::new();
    }
    let types = Types::new(&state.layout.gpus, &state.layout.nodes);
    let mut free = free_before_preemption(state, &types);
    let mut candidates: Vec<(Candidate, bool)> = state
        .jobs
        .iter()
        .filter(|j| j.state == JobState::Running)
        .filter_map(|j| candidate(state, config, j, borrowing))
        .collect();
    let held = held_now(state, policy);
    let by_id: HashMap<JobId, &Job> = state.jobs.iter().map(|j| (j.id, *j)).collect();
    let mut chosen = Vec::new();
    // Requests no victims could make room for, until a choice changes
    // what is free: the same request fails again, so it is not tried.
    let mut no_room: HashSet<(&str, &str, &crate::model::job::GpuRequest, u32, Option<u64>)> =
        HashSet::new();
    for &id in &plan.order {
        if candidates.is_empty() {
            break;
        }
        let Some(job) = by_id
            .get(&id)
            .copied()
            .filter(|j| waits_for_room(j, plan, state.now, config.preempt_wait))
        else {
            continue;
        };
        let shape = (
            job.qos.as_str(),
            job.account.as_str(),
            &job.gpus,
            job.cpus,
            job.mem_mb,
        );
        if no_room.contains(&shape) {
            continue;
        }
        let reclaims =
            reclaiming && elastic::within_guarantee(policy, &held, job, job.gpus.gpus_held());
        let allowed = victims_allowed(job, &candidates, config, policy, reclaims);
        if allowed.is_empty() {
            continue;
        }
        match preempt::choose(job, &free, &allowed, &types) {
            Some(choice) => {
                free.take_gpus(&choice.gpus, &types);
                candidates.retain(|(c, _)| !choice.victims.contains(&c.job.id));
                no_room.clear();
                let reclaim = reclaims && choice.victims.iter().all(|v| borrowing.contains(v));
                chosen.push((id, choice, reclaim));
            }
            None => {
                no_room.insert(shape);
            }
        }
    }
    chosen
}

/// Whether a job of the plan waits for GPUs it might preempt for: not
/// started, not already preempting, and not about to start anyway.
fn waits_for_room(job: &Job, plan: &Plan, now: i64, preempt_wait: u64) -> bool {
    let soon = plan
        .expected_starts
        .get(&job.id)
        .is_some_and(|&at| at - now <= preempt_wait as i64);
    matches!(
        plan.reasons.get(&job.id),
        Some(Reason::Resources | Reason::Priority)
    ) && job.claim.is_empty()
        && !soon
}

/// The victims `job` may choose from: those its QoS may preempt, and when
/// it reclaims its guarantee, the borrowing jobs of other accounts.
fn victims_allowed<'a>(
    job: &Job,
    candidates: &[(Candidate<'a>, bool)],
    config: &Config,
    policy: &limits::Policy,
    reclaims: bool,
) -> Vec<Candidate<'a>> {
    let rights: &[String] = config.qos_named(&job.qos).map_or(&[], |q| &q.preempt);
    let own: Vec<&str> = policy
        .chain(&job.account)
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    candidates
        .iter()
        .filter(|(c, by_qos)| {
            (*by_qos && rights.contains(&c.job.qos))
                || (reclaims && c.borrowing && !own.contains(&c.job.account.as_str()))
        })
        .map(|(c, _)| c.clone())
        .collect()
}

/// What the running jobs hold against the accounts' limits.
fn held_now(state: &State<'_>, policy: &limits::Policy) -> limits::State {
    let mut held = limits::State::default();
    for job in state.jobs.iter().filter(|j| j.state.holds_gpus()) {
        held.add(policy, job, &job.gpus_alloc, &state.layout.gpus);
    }
    held
}

/// What is free for preemptors: the node less what jobs hold (a job that
/// frees its CPUs while suspended gives them back) and the GPUs kept for
/// earlier preemptors.
fn free_before_preemption(state: &State<'_>, types: &Types) -> Free {
    let mut free = Free::new(types);
    free.take_gpus(state.drained, types);
    for job in state.jobs {
        if job.state.holds_gpus() {
            free.take_held(job, types);
            if super::profile::frees_cpus(job) {
                free.give_cpus(job, types);
            }
        }
        if job.state == JobState::Pending && !job.claim.is_empty() {
            free.take_gpus(&job.claim, types);
        }
    }
    free
}

/// A running job as a possible victim: with whether its QoS lets it be
/// one now; a borrowing job may be reclaimed whatever its QoS says.
fn candidate<'a>(
    state: &State<'_>,
    config: &Config,
    job: &'a Job,
    borrowing: &HashSet<JobId>,
) -> Option<(Candidate<'a>, bool)> {
    let qos = config.qos_named(&job.qos)?;
    let ran = state.now - job.start_time?;
    let saved = job
        .checkpoint_at
        .max(state.checkpoints.get(&job.id).copied());
    let since_checkpoint = saved.map_or(ran, |c| state.now - c).clamp(0, ran);
    // Suspending keeps the GPUs (and their memory) in use: it frees CPUs
    // only, and loses no work.
    let suspend = qos.preempt_mode == PreemptMode::Suspend;
    let by_qos = qos.preemptible
        && ran >= qos.min_run_time as i64
        && job.preempt_count < config.max_preemptions
        // Freezing needs the job's cgroup.
        && (!suspend || state.can_suspend);
    let borrows = borrowing.contains(&job.id);
    (by_qos || borrows).then_some((
        Candidate {
            job,
            qos_priority: qos.priority,
            // A reclaimed job is stopped, never frozen: its GPUs go back.
            lost_work: if suspend && !borrows {
                0
            } else {
                since_checkpoint
            },
            suspend: suspend && !borrows,
            borrowing: borrows,
        },
        by_qos,
    ))
}
