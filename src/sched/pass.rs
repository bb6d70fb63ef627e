//! The scheduling pass: one pure function from the state of the queue and
//! the node, at a time, to what to do now — which pending jobs start and
//! on which GPUs, which wait and why (dependencies, holds, budgets, array
//! throttles, limits, time windows, drains, reservations), and which
//! running jobs are preempted for whom. The daemon and the simulator both
//! call it; each carries the decisions out in its own way (processes and
//! records; a simulated clock).

use std::collections::{HashMap, HashSet};

use crate::config::{Config, PreemptMode};
use crate::model::job::{IdMap, Job, JobId, JobState};
use crate::model::policy::{Association, OverBudget};

use super::dependency::{Dependency, Status};
use super::fairshare::{self, FactorMap, NodeShare, Tree, Usage};
use super::plan::{plan_keeping_spare, Plan, Planned, Pool, Spare, Start};
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
    /// The jobs' associations and QoS as numbers, where the caller keeps
    /// them (`None`: the pass numbers them itself).
    pub numbered: Option<&'a Numbered<'a>>,
}

/// The names a pass looks up job after job, as small numbers: each job's
/// association (account, user) and its QoS. A pass over a long queue then
/// reads each job's numbers instead of its strings, a trip to memory
/// each; the daemon keeps them with its jobs, [`Numbered::of`] numbers a
/// queue that comes without them.
#[derive(Debug, Default)]
pub struct Numbered<'a> {
    /// (account, user) of each association number; some may have no job.
    pub associations: Vec<(&'a str, &'a str)>,
    /// The name of each QoS number.
    pub qos: Vec<&'a str>,
    /// Of each of [`State::jobs`], in its order: its association's number
    /// and its QoS's.
    pub jobs: Vec<(u32, u32)>,
}

impl<'a> Numbered<'a> {
    /// Numbers the associations and QoS of `jobs`, in the order they
    /// first come.
    pub fn of(jobs: &[&'a Job]) -> Numbered<'a> {
        let mut associations = rustc_hash::FxHashMap::default();
        let mut qos = rustc_hash::FxHashMap::default();
        let mut numbered = Numbered::default();
        for job in jobs {
            let pair = (job.account.as_str(), job.user.as_str());
            let association = *associations.entry(pair).or_insert_with(|| {
                numbered.associations.push(pair);
                numbered.associations.len() as u32 - 1
            });
            let level = *qos.entry(job.qos.as_str()).or_insert_with(|| {
                numbered.qos.push(job.qos.as_str());
                numbered.qos.len() as u32 - 1
            });
            numbered.jobs.push((association, level));
        }
        numbered
    }
}

/// What a pass decided.
pub struct Decisions {
    /// Reservations, and why each job that entered placement waits (its
    /// starts, in pool numbers, are moved to `starts`).
    pub plan: Plan,
    /// Jobs to start now, in priority order, where.
    pub starts: Vec<Placement>,
    /// Pending jobs held back before placement, with why.
    pub held: IdMap<Reason>,
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
    /// What the pass leaves idle, for jobs queued before the next one
    /// ([`super::quick`]); the caller that keeps it takes it.
    pub spare: Option<Spare>,
}

/// A job to start: its node and GPUs, in that node's own numbers; for a
/// job over several nodes, the others too, each node's GPUs in turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub job: JobId,
    pub node: String,
    pub gpus: Vec<u32>,
    /// The nodes after the first.
    pub peers: Vec<String>,
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
    /// The victims taken as a reclaim of the job's account's guarantee
    /// (stopped and requeued whatever their QoS says); the others are
    /// preempted by the job's QoS.
    pub reclaimed: Vec<JobId>,
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
    debug_assert!(
        state.jobs.windows(2).all(|w| w[0].id < w[1].id),
        "the jobs come in id order"
    );
    let now = state.now;
    let pool = Pool::of(state.layout, state.drained);
    let numbered_here;
    let numbered = match state.numbered {
        Some(numbered) => numbered,
        None => {
            numbered_here = Numbered::of(state.jobs);
            &numbered_here
        }
    };
    debug_assert_eq!(numbered.jobs.len(), state.jobs.len());
    let (tree, shares, factors) = fair_share(numbered, state, config);
    let ctx = priority::Context {
        weights: &config.priority,
        qos: &config.qos,
        fairshare: &factors,
        total_gpus: state.layout.gpus.len() as u32,
    };
    let walked = walk(state, numbered, &ctx);
    let (mut held, never) = dependency_waits(state.jobs, &walked.depending, state.named);
    for (id, reason) in budget_waits(state, config) {
        held.entry(id).or_insert(reason);
    }
    for id in crate::array::throttled(walked.throttled_arrays.iter().copied()) {
        held.entry(id).or_insert(Reason::JobArrayTaskLimit);
    }
    let (pending, of_preempting_qos): (Vec<(&Job, i64)>, Vec<bool>) = walked
        .pending
        .into_iter()
        .filter(|rated| !held.contains_key(&rated.id))
        .map(|rated| ((rated.job, rated.priority), rated.preempts))
        .unzip();
    let running = walked.running;
    let policy = limits::Policy::at(config, now);
    let borrowing = elastic::borrowing_now(&policy, &running);
    let excess = elastic::excess(&policy, &running);
    let Planned {
        mut plan,
        spare,
        ordered,
    } = plan_keeping_spare(&pending, &running, &pool, &policy, now);
    // With no account over its guarantee, only a QoS's rights stop others.
    let contenders: Vec<&Job> = ordered
        .into_iter()
        .filter(|&at| !excess.is_empty() || of_preempting_qos[at])
        .map(|at| pending[at].0)
        .collect();
    let taken = (&plan, contenders.as_slice());
    let preemptions = preemptions(state, config, taken, &policy, (&borrowing, excess))
        .into_iter()
        .map(|(job, choice, reclaimed)| {
            let (node, gpus) = state.layout.to_node(choice.node, &choice.gpus);
            Preemption {
                job,
                victims: choice.victims,
                node,
                gpus,
                reclaimed,
            }
        })
        .collect();
    let starts = std::mem::take(&mut plan.starts)
        .into_iter()
        .map(|s| placement(s, state.layout))
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
        spare: Some(spare),
    }
}

/// What one walk of the jobs sorts out for a pass: over a long queue each
/// walk is a trip to memory for every job, whatever it reads of it.
struct Walked<'j> {
    /// Every pending job, rated.
    pending: Vec<Rated<'j>>,
    /// The jobs holding GPUs.
    running: Vec<&'j Job>,
    /// The pending jobs with a dependency.
    depending: Vec<&'j Job>,
    /// The tasks of the arrays that limit how many of them run (`%N`).
    throttled_arrays: Vec<&'j Job>,
}

/// A pending job, its priority, and whether its QoS may stop others (the
/// preemption walk passes the others by without a trip to each job's
/// memory: most of a long queue).
struct Rated<'j> {
    id: JobId,
    job: &'j Job,
    priority: i64,
    preempts: bool,
}

/// Walks the jobs once; each association's and QoS's factor is looked up
/// once, by number.
fn walk<'j>(state: &State<'j>, numbered: &Numbered<'_>, ctx: &priority::Context) -> Walked<'j> {
    let fairshare_of: Vec<f64> = numbered
        .associations
        .iter()
        .map(|&(account, user)| fairshare::factor_of(ctx.fairshare, account, user))
        .collect();
    let top = priority::top_qos(ctx.qos);
    let preempting: Vec<&str> = ctx
        .qos
        .iter()
        .filter(|q| !q.preempt.is_empty())
        .map(|q| q.name.as_str())
        .collect();
    let qos_of: Vec<(f64, bool)> = numbered
        .qos
        .iter()
        .map(|&name| {
            let factor = priority::qos_factor_of(ctx.qos, top, name);
            (factor, preempting.contains(&name))
        })
        .collect();
    let mut walked = Walked {
        pending: Vec::new(),
        running: Vec::new(),
        depending: Vec::new(),
        throttled_arrays: Vec::new(),
    };
    for (&job, &(association, level)) in state.jobs.iter().zip(&numbered.jobs) {
        if job.state.holds_gpus() {
            walked.running.push(job);
        }
        if job.array.as_ref().is_some_and(|t| t.spec.contains('%')) {
            walked.throttled_arrays.push(job);
        }
        if job.state != JobState::Pending {
            continue;
        }
        if job.dependency.is_some() {
            walked.depending.push(job);
        }
        let (qos, preempts) = qos_of[level as usize];
        let fairshare = fairshare_of[association as usize];
        let factors = priority::factors_with(ctx, job, state.now, (fairshare, qos));
        walked.pending.push(Rated {
            id: job.id,
            job,
            priority: factors.priority(),
            preempts,
        });
    }
    walked
}

/// Where a start the plan made (in pool numbers) runs: its nodes, the
/// batch node first, and its GPUs in each node's own numbers.
pub(super) fn placement(start: Start, layout: &Layout) -> Placement {
    let mut shares = in_hostlist_order(layout.to_nodes(&start.nodes, &start.gpus)).into_iter();
    let (node, mut gpus) = shares.next().unwrap_or_default();
    let mut peers = Vec::new();
    for (peer, more) in shares {
        peers.push(peer);
        gpus.extend(more);
    }
    Placement {
        job: start.job,
        node,
        gpus,
        peers,
        borrowing: start.borrowing,
    }
}

/// The fair-share tree of the associations with active jobs, and each
/// association's factor.
fn fair_share(
    numbered: &Numbered<'_>,
    state: &State<'_>,
    config: &Config,
) -> (Tree, Vec<NodeShare>, FactorMap) {
    let mut active = vec![false; numbered.associations.len()];
    for &(association, _) in &numbered.jobs {
        active[association as usize] = true;
    }
    let associations = numbered
        .associations
        .iter()
        .zip(active)
        .filter_map(|(&pair, active)| active.then_some(pair));
    let tree = fairshare::build_tree(config, associations, state.usage, state.now);
    let shares = tree.compute(config.fairshare.algorithm);
    let factors = fairshare::factors(&tree, &shares);
    (tree, shares, factors)
}

/// The pending jobs their dependencies hold back (waiting, or never to
/// be satisfied), and the never-satisfiable ones.
/// `waiting` are the pending jobs with a dependency, in id order, of the
/// active `jobs`.
pub fn dependency_waits(
    jobs: &[&Job],
    waiting: &[&Job],
    named: &HashMap<JobId, Option<JobState>>,
) -> (IdMap<Reason>, Vec<JobId>) {
    let mut held = IdMap::default();
    let mut never = Vec::new();
    // For singleton: per (user, name), the lowest pending id and whether
    // one is already running; only where one is asked for (a walk of
    // every job).
    let singletons = waiting.iter().any(|j| {
        j.dependency
            .as_deref()
            .and_then(|d| Dependency::parse(d).ok())
            .is_some_and(|d| d.has_singleton())
    });
    let mut namesakes: HashMap<(u32, &str), (JobId, bool)> = HashMap::new();
    for j in jobs.iter().filter(|j| singletons && j.state.is_active()) {
        let entry = namesakes
            .entry((j.uid, j.name.as_str()))
            .or_insert((JobId::MAX, false));
        if j.state == JobState::Pending {
            entry.0 = entry.0.min(j.id);
        } else {
            entry.1 = true;
        }
    }
    for (job, text) in waiting
        .iter()
        .filter_map(|j| Some((j, j.dependency.as_ref()?)))
    {
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
    budget::worst_case(&job.gpus_for_job(), job.time_limit, factor, gpus, config)
}

/// Pending jobs of budgets that refuse when over: in submit order, each
/// waits once what is spent, what runs (at its worst case) and the jobs
/// before it would pass the budget.
fn budget_waits(state: &State<'_>, config: &Config) -> IdMap<Reason> {
    let policy = limits::Policy::new(config);
    let mut waits = IdMap::default();
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
/// guarantee the jobs of other accounts over theirs (a reclaim, when all
/// its victims are such): the jobs marked borrowing first, any of them
/// where the room must be on one node, never more GPUs of an account
/// than it holds beyond its guarantee. Victims and GPUs chosen for one
/// are not chosen again for the next. What is free and who may be a
/// victim are found once per pass: a long queue of jobs that may preempt
/// costs a choice each, not a walk of every job. `contenders` are the
/// pending jobs that may stop others (by their QoS, or any while an
/// account is over its guarantee), in the plan's order.
fn preemptions(
    state: &State<'_>,
    config: &Config,
    (plan, contenders): (&Plan, &[&Job]),
    policy: &limits::Policy,
    (borrowing, mut excess): (&HashSet<JobId>, HashMap<String, u32>),
) -> Vec<(JobId, Choice, Vec<JobId>)> {
    // No job that may stop others waits (a sweep of a QoS that preempts
    // no one): no walk of the running jobs for victims either.
    if contenders.is_empty() {
        return Vec::new();
    }
    let types = Types::new(&state.layout.gpus, &state.layout.nodes);
    let by_id = |id: JobId| {
        let at = state.jobs.binary_search_by_key(&id, |j| j.id).ok()?;
        Some(state.jobs[at])
    };
    let mut free = free_before_preemption(state, &types);
    // What this pass starts is no more free for a preemptor than what
    // runs: a claim on it would start two jobs on one GPU.
    for start in &plan.starts {
        if let Some(job) = by_id(start.job) {
            free.take(job, &start.nodes, &start.gpus, &types);
        }
    }
    // A job whose GPUs are kept for a preemptor already is no victim for
    // another: stopping it frees them for the first.
    let claimed: HashSet<u32> = state
        .jobs
        .iter()
        .filter(|j| j.state == JobState::Pending)
        .flat_map(|j| j.claim.iter().copied())
        .collect();
    let mut victims: Vec<Victim> = state
        .jobs
        .iter()
        .filter(|j| j.state == JobState::Running)
        .filter(|j| !j.gpus_alloc.iter().any(|g| claimed.contains(g)))
        .filter_map(|j| victim(state, config, policy, j, borrowing, &excess))
        .collect();
    let held = held_now(state, policy);
    let mut chosen = Vec::new();
    // Requests no victims could make room for, until a choice changes
    // what is free: the same request fails again, so it is not tried.
    let mut no_room: rustc_hash::FxHashSet<(
        &str,
        &str,
        &crate::model::job::GpuRequest,
        u32,
        Option<u64>,
    )> = Default::default();
    for &job in contenders {
        if victims.is_empty() {
            break;
        }
        let id = job.id;
        // A job over several nodes waits for them; it stops no one.
        if job.tasks.is_multi_node() || !waits_for_room(job, plan, state.now, config.preempt_wait) {
            continue;
        }
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
            !excess.is_empty() && elastic::within_guarantee(policy, &held, job, job.gpus_wanted());
        let Some(choice) = choose_victims(
            job,
            &free,
            &victims,
            &types,
            (config, policy, reclaims),
            &excess,
        ) else {
            no_room.insert(shape);
            continue;
        };
        free.take_gpus(&choice.gpus, &types);
        let reclaimed = taken_back(job, &choice, &victims, config, &mut excess);
        victims.retain(|v| !choice.victims.contains(&v.candidate.job.id));
        no_room.clear();
        chosen.push((id, choice, reclaimed));
    }
    chosen
}

/// The victims of `choice` that `job` takes as a reclaim (those its QoS
/// gives it no right to), counted against what their accounts hold
/// beyond their guarantees.
fn taken_back(
    job: &Job,
    choice: &Choice,
    victims: &[Victim],
    config: &Config,
    excess: &mut HashMap<String, u32>,
) -> Vec<JobId> {
    let rights: &[String] = config.qos_named(&job.qos).map_or(&[], |q| &q.preempt);
    let mut reclaimed = Vec::new();
    for v in victims
        .iter()
        .filter(|v| choice.victims.contains(&v.candidate.job.id))
    {
        if v.by_qos && rights.contains(&v.candidate.job.qos) {
            continue;
        }
        reclaimed.push(v.candidate.job.id);
        if let Some(over) = v.lender.as_deref().and_then(|a| excess.get_mut(a)) {
            *over = over.saturating_sub(v.candidate.job.gpus_alloc.len() as u32);
        }
    }
    reclaimed
}

/// A running job as a possible victim: whether its QoS lets it be one
/// now, and the account over its guarantee it counts against, if any.
struct Victim<'a> {
    candidate: Candidate<'a>,
    by_qos: bool,
    lender: Option<String>,
    /// The work stopping it loses (a frozen job loses none).
    stopping_loses: i64,
}

/// The cheapest victims for `job`: by its QoS's rights and, when it
/// reclaims, the jobs of other accounts over their guarantees — first
/// any of them within what each account holds beyond its guarantee, then
/// the marked borrowing ones alone.
fn choose_victims(
    job: &Job,
    free: &Free,
    victims: &[Victim],
    types: &Types,
    (config, policy, reclaims): (&Config, &limits::Policy, bool),
    excess: &HashMap<String, u32>,
) -> Option<Choice> {
    let rights: &[String] = config.qos_named(&job.qos).map_or(&[], |q| &q.preempt);
    let own: Vec<&str> = policy
        .chain(&job.account)
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    let by_qos = |v: &Victim| v.by_qos && rights.contains(&v.candidate.job.qos);
    let reclaimable = |v: &Victim| {
        reclaims && v.lender.is_some() && !own.contains(&v.candidate.job.account.as_str())
    };
    let pick = |keep: &dyn Fn(&Victim) -> bool| -> Option<Choice> {
        let allowed: Vec<Candidate> = victims
            .iter()
            .filter(|v| keep(v))
            .map(|v| match by_qos(v) {
                true => v.candidate.clone(),
                // Reclaimed: stopped, never frozen; its GPUs go back.
                false => Candidate {
                    suspend: false,
                    lost_work: v.stopping_loses,
                    ..v.candidate.clone()
                },
            })
            .collect();
        if allowed.is_empty() {
            return None;
        }
        preempt::choose(job, free, &allowed, types)
    };
    // Within what each account holds beyond its guarantee.
    let within_excess = |choice: &Choice| {
        let mut taken: HashMap<&str, u32> = HashMap::new();
        for v in victims
            .iter()
            .filter(|v| choice.victims.contains(&v.candidate.job.id))
        {
            if let (false, Some(a)) = (by_qos(v), v.lender.as_deref()) {
                *taken.entry(a).or_default() += v.candidate.job.gpus_alloc.len() as u32;
            }
        }
        taken
            .iter()
            .all(|(a, n)| excess.get(*a).is_some_and(|over| n <= over))
    };
    if let Some(choice) = pick(&|v| by_qos(v) || reclaimable(v)).filter(within_excess) {
        return Some(choice);
    }
    pick(&|v| by_qos(v) || (reclaimable(v) && v.candidate.borrowing)).filter(within_excess)
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

/// A running job as a possible victim, if its QoS lets it be one now or
/// its account holds more than its guarantee (reclaimable whatever its
/// QoS says).
fn victim<'a>(
    state: &State<'_>,
    config: &Config,
    policy: &limits::Policy,
    job: &'a Job,
    borrowing: &HashSet<JobId>,
    excess: &HashMap<String, u32>,
) -> Option<Victim<'a>> {
    let qos = config.qos_named(&job.qos)?;
    let ran = state.now - job.start_time?;
    let saved = job
        .checkpoint_at
        .max(state.checkpoints.get(&job.id).copied());
    let since_checkpoint = saved.map_or(ran, |c| state.now - c).clamp(0, ran);
    let lender = elastic::borrowing_account(policy, job)
        .filter(|a| excess.contains_key(*a))
        .map(str::to_string);
    // Suspending keeps the GPUs (and their memory) in use: it frees CPUs
    // only, and loses no work.
    let suspend = qos.preempt_mode == PreemptMode::Suspend;
    let by_qos = qos.preemptible
        && ran >= qos.min_run_time as i64
        && job.preempt_count < config.max_preemptions
        // Freezing needs the job's cgroup.
        && (qos.preempt_mode != PreemptMode::Suspend || state.can_suspend);
    (by_qos || lender.is_some()).then_some(Victim {
        candidate: Candidate {
            job,
            qos_priority: qos.priority,
            lost_work: if suspend { 0 } else { since_checkpoint },
            suspend,
            borrowing: borrowing.contains(&job.id),
        },
        by_qos,
        lender,
        stopping_loses: since_checkpoint,
    })
}

/// A job's nodes (with each one's GPUs) in the order Slurm's node list
/// names them, as `SLURM_JOB_NODELIST` writes and every tool reads them:
/// the batch script runs on the first, as it does under Slurm, and srun's
/// and torchrun's node 0 is the list's first name.
fn in_hostlist_order(mut shares: Vec<(String, Vec<u32>)>) -> Vec<(String, Vec<u32>)> {
    let names: Vec<&str> = shares.iter().map(|(n, _)| n.as_str()).collect();
    let order = crate::model::hostlist::expand(&crate::model::hostlist::compress(&names))
        .unwrap_or_default();
    shares.sort_by_key(|(name, _)| order.iter().position(|n| n == name).unwrap_or(usize::MAX));
    shares
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::{fairshare, pass, Decisions, Numbered, State};
    use crate::config::Config;
    use crate::model::job::{GpuRequest, Job, JobState};
    use crate::sched::pool::Layout;

    /// One node of four A100s; QoS high preempts low (requeued).
    fn config() -> Config {
        Config::parse(
            "default_qos = \"low\"\n[[gpus]]\ntype = \"a100\"\ncount = 4\nmemory = \"80G\"\n\
             [[qos]]\nname = \"high\"\npriority = 200\npreempt = [\"low\"]\n\
             [[qos]]\nname = \"low\"\npriority = 0\n",
            std::path::Path::new("pass.toml"),
        )
        .unwrap()
    }

    /// Job `id` of QoS `qos` wanting `count` GPUs for an hour; running on
    /// `alloc` since 0 when it holds any.
    fn job(id: u64, qos: &str, count: u32, alloc: &[u32]) -> Job {
        let mut job = Job {
            gpus: GpuRequest {
                count,
                gpu_type: None,
                ..GpuRequest::default()
            },
            gpus_alloc: alloc.to_vec(),
            cpus: 1,
            mem_mb: None,
            qos: qos.into(),
            time_limit: Some(3_600),
            state: JobState::Pending,
            ..crate::model::job::example_job(id)
        };
        if !alloc.is_empty() {
            job.state = JobState::Running;
            job.start_time = Some(0);
            job.node = Some("gpu01".into());
        }
        job
    }

    fn decide(jobs: &[&Job], config: &Config) -> Decisions {
        decide_with(jobs, config, &HashMap::new(), None)
    }

    /// A pass at 600 on gpu01's four A100s, with `usage` and the names
    /// `numbered` (`None`: by the pass).
    fn decide_with(
        jobs: &[&Job],
        config: &Config,
        usage: &HashMap<crate::model::policy::Association, crate::sched::fairshare::Usage>,
        numbered: Option<&Numbered<'_>>,
    ) -> Decisions {
        let layout = Layout::single("gpu01", 64, 1 << 20, &crate::gpu::test_a100s(4));
        let (named, spent, checkpoints) = (HashMap::new(), HashMap::new(), HashMap::new());
        let state = State {
            jobs,
            named: &named,
            layout: &layout,
            drained: &[],
            usage,
            spent: &spent,
            checkpoints: &checkpoints,
            can_suspend: true,
            now: 600,
            numbered,
        };
        pass(&state, config)
    }

    /// The daemon numbers names as it first meets them, over its life:
    /// its numbers (here in another order, with an association no job
    /// has) decide what the pass's own numbering decides.
    #[test]
    fn a_pass_decides_the_same_whoever_numbers_the_names() {
        let config = config();
        let mut jobs: Vec<Job> = (1..=12)
            .map(|id| {
                let qos = if id % 3 == 0 { "high" } else { "low" };
                let mut job = job(id, qos, 1 + (id % 2) as u32, &[]);
                job.user = format!("user{}", id % 4);
                job.account = crate::config::DEFAULT_ACCOUNT.into();
                job.submit_time = id as i64;
                job
            })
            .collect();
        jobs[0].gpus_alloc = vec![0];
        jobs[0].state = JobState::Running;
        jobs[0].start_time = Some(0);
        jobs[0].node = Some("gpu01".into());
        let jobs: Vec<&Job> = jobs.iter().collect();
        // Each user a different usage: fair-share orders the queue.
        let usage: HashMap<_, _> = (0..4)
            .map(|u| {
                let used = crate::sched::fairshare::Usage {
                    raw: 3_600 * (u + 1),
                    decayed: 3_600.0 * (u + 1) as f64,
                    as_of: 0,
                };
                ((jobs[0].account.clone(), format!("user{u}")), used)
            })
            .collect();
        let mut theirs = Numbered::of(&jobs);
        theirs.associations.reverse();
        theirs.associations.push(("elsewhere", "nobody"));
        theirs.qos.reverse();
        let last = (theirs.associations.len() - 2, theirs.qos.len() - 1);
        for (association, level) in &mut theirs.jobs {
            *association = (last.0 - *association as usize) as u32;
            *level = (last.1 - *level as usize) as u32;
        }
        let own = decide_with(&jobs, &config, &usage, None);
        let given = decide_with(&jobs, &config, &usage, Some(&theirs));
        assert_eq!(own.plan.order, given.plan.order);
        assert_eq!(own.starts, given.starts);
        assert_eq!(own.plan.reasons, given.plan.reasons);
        assert_eq!(own.factors, given.factors);
        assert_eq!(own.preemptions, given.preemptions);
        let factor = |u: &str| fairshare::factor_of(&own.factors, &jobs[0].account, u);
        assert!(
            factor("user0") > factor("user3"),
            "fair-share tells the users apart"
        );
        let users: Vec<&str> = own
            .plan
            .order
            .iter()
            .map(|id| jobs.iter().find(|j| j.id == *id).unwrap().user.as_str())
            .collect();
        assert_ne!(
            users,
            jobs[1..]
                .iter()
                .map(|j| j.user.as_str())
                .collect::<Vec<_>>(),
            "priorities, not submission, order the queue"
        );
    }

    /// Found by the simulation (seed 33): a pass backfilled a low job on
    /// three free GPUs and, in the same pass, gave the same three to an
    /// urgent job's claim; both later ran on them.
    #[test]
    fn what_a_pass_starts_is_not_kept_for_a_preemptor_in_the_same_pass() {
        let config = config();
        let victim = job(1, "low", 1, &[3]);
        let urgent = job(2, "high", 4, &[]);
        let mut short = job(3, "low", 3, &[]);
        short.time_limit = Some(60);
        let decisions = decide(&[&victim, &urgent, &short], &config);
        let started: Vec<u32> = decisions
            .starts
            .iter()
            .flat_map(|s| s.gpus.iter().copied())
            .collect();
        for p in &decisions.preemptions {
            assert!(
                !p.gpus.iter().any(|g| started.contains(g)),
                "job {} is kept GPUs {:?} that job(s) starting now take ({started:?})",
                p.job,
                p.gpus
            );
        }
    }

    /// Found by the simulation (seed 33): a job running on GPUs kept for
    /// one preemptor was chosen as the victim of a second, which was kept
    /// the same GPUs; both started once it was gone.
    #[test]
    fn a_job_on_gpus_kept_for_one_preemptor_is_no_victim_of_another() {
        let config = config();
        let on_claimed = job(1, "low", 3, &[0, 1, 2]);
        let mut first = job(2, "high", 4, &[]);
        first.claim = vec![0, 1, 2, 3];
        let second = job(3, "high", 2, &[]);
        let decisions = decide(&[&on_claimed, &first, &second], &config);
        assert!(
            decisions.preemptions.iter().all(|p| p.job != 3),
            "{:?}",
            decisions
                .preemptions
                .iter()
                .map(|p| (p.job, &p.victims, &p.gpus))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_jobs_nodes_come_in_the_order_its_node_list_names_them() {
        let shares = |names: &[&str]| -> Vec<(String, Vec<u32>)> {
            names.iter().map(|n| (n.to_string(), vec![0])).collect()
        };
        let names =
            |s: Vec<(String, Vec<u32>)>| -> Vec<String> { s.into_iter().map(|(n, _)| n).collect() };
        assert_eq!(
            names(super::in_hostlist_order(shares(&["n3", "n10", "n1"]))),
            ["n1", "n3", "n10"]
        );
        assert_eq!(
            names(super::in_hostlist_order(shares(&["gpu02", "gpu01"]))),
            ["gpu01", "gpu02"]
        );
    }
}
