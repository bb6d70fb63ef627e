//! The backfill planner: which pending jobs start now and where, which
//! get a reservation, and why the others wait.

use super::pool::NodeRoom;
use super::profile::{Free, Profile, Slot, Types};
use super::reason::Reason;
use super::{elastic, limits, placement, priority, profile};
use crate::model::gpu::Gpu;
use crate::model::job::{GpuRequest, Hold, IdMap, Job, JobId};

/// The consumable resources of the pool, in pool numbers (see
/// [`super::pool::Layout`]).
#[derive(Clone, Debug)]
pub struct Pool<'a> {
    pub gpus: &'a [Gpu],
    pub nodes: &'a [NodeRoom],
    /// GPUs out of service: no job starts on them, now or later.
    pub drained: &'a [u32],
}

impl<'a> Pool<'a> {
    pub fn of(layout: &'a super::pool::Layout, drained: &'a [u32]) -> Pool<'a> {
        Pool {
            gpus: &layout.gpus,
            nodes: &layout.nodes,
            drained,
        }
    }
}

/// A job to start now: the node's slot and the GPUs, in pool numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Start {
    pub job: JobId,
    /// Its nodes' slots, the batch node first.
    pub nodes: Vec<usize>,
    pub gpus: Vec<u32>,
    /// It takes its account beyond its guarantee (elastic quotas).
    pub borrowing: bool,
}

/// The outcome of one scheduling pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Jobs to start now, where, in priority order.
    pub starts: Vec<Start>,
    /// Why each pending job that does not start waits.
    pub reasons: IdMap<Reason>,
    /// Pending job ids in scheduling order (for `ysqueue`).
    pub order: Vec<JobId>,
    /// The earliest future time at which a pass could start something that
    /// nothing else will wake the daemon for (a `--begin` time).
    pub wake_at: Option<i64>,
    /// Jobs started while a higher-priority job waited for resources.
    pub backfilled: Vec<JobId>,
    /// When the jobs given a reservation are expected to start (`ysqueue
    /// --start`), should running jobs last their whole time limits.
    pub expected_starts: IdMap<i64>,
}

/// One scheduling pass (backfill): jobs in priority order start where they
/// fit from now until their time limit ends, on a timeline of what running
/// jobs free and when ([`profile`]). The first `backfill_depth` jobs that
/// cannot start get a reservation at the earliest time they fit, taken from
/// the timeline, so a later job starts now only where it delays none of
/// them; jobs past the depth start now or wait.
///
/// `pending` and `running` come with each job's priority (`running`'s is
/// unused). A running job without a time limit never ends in this model;
/// one that is completing ends now.
pub fn plan<'a>(
    pending: &[(&'a Job, i64)],
    running: &'a [&'a Job],
    node: &'a Pool<'a>,
    policy: &'a limits::Policy,
    now: i64,
) -> Plan {
    plan_keeping_spare(pending, running, node, policy, now).plan
}

/// A plan, what it leaves for the jobs queued before the next pass, and
/// the pending jobs in the order it took them.
pub struct Planned {
    pub plan: Plan,
    pub spare: Spare,
    /// Where each pending job is in the `pending` the plan was given, in
    /// the order the plan took them: what the caller knows of each job
    /// (kept beside `pending`) it finds without a lookup.
    pub ordered: Vec<usize>,
}

/// [`plan`], and what it leaves for the jobs queued before the next.
pub fn plan_keeping_spare<'a>(
    pending: &[(&'a Job, i64)],
    running: &'a [&'a Job],
    node: &'a Pool<'a>,
    policy: &'a limits::Policy,
    now: i64,
) -> Planned {
    let mut ordered: Vec<(&'a Job, i64, usize)> = pending
        .iter()
        .enumerate()
        .map(|(at, &(job, priority))| (job, priority, at))
        .collect();
    ordered.sort_by(|a, b| priority::order((a.0, a.1), (b.0, b.1)));
    let mut pass = Planner::new(pending, running, node, policy, now);
    pass.plan.order = ordered.iter().map(|(job, ..)| job.id).collect();
    pass.plan.reasons.reserve(ordered.len());
    for &(job, ..) in &ordered {
        pass.consider(job);
    }
    Planned {
        plan: pass.plan,
        spare: pass.left,
        ordered: ordered.into_iter().map(|(.., at)| at).collect(),
    }
}

/// Starts `job`, queued after the pass that left `spare`, at `now` where
/// it fits on what that pass left idle from now to its time limit, as
/// that pass would have started it: within its limits and its QoS's, and
/// delaying none of the pass's reservations. `None`: it waits for the
/// next pass (which says why). A job that would borrow beyond its
/// account's guarantee, is held, or preempted others is for the pass.
/// The spare comes back with the start taken from it.
pub fn start_on_spare(
    spare: Spare,
    job: &Job,
    node: &Pool<'_>,
    policy: &limits::Policy,
    now: i64,
) -> (Spare, Option<Start>) {
    if now < spare.at || spare.until.is_some_and(|t| t <= now) {
        return (spare, None);
    }
    let mut planner = Planner::resume(spare, node, policy);
    let start = planner.start_now(job, now);
    (planner.left, start)
}

/// What a pass leaves for the jobs that come before the next one: the
/// timeline after its starts and reservations, and the limits its starts
/// use. A job queued since can start on what it leaves idle now where it
/// delays none of the reservations ([`start_on_spare`]), as the pass
/// itself would have started it had it been there. What ends after the
/// pass is not in it: that goes to the next pass, in priority order.
#[derive(Clone, Debug)]
pub struct Spare {
    /// The time of the pass: the timeline's first point.
    at: i64,
    profile: Profile,
    held: limits::State,
    reserve_used: Vec<u32>,
    /// GPUs held by running jobs: a claimant starts once none is.
    held_now: placement::GpuSet,
    /// When a limit window opens or closes: what may start changes, so
    /// what the pass left says nothing after.
    until: Option<i64>,
}

/// One pass in progress: the timeline as the jobs placed so far leave
/// it, the limits they use, and the plan.
struct Planner<'a, 'p> {
    node: &'a Pool<'a>,
    policy: &'a limits::Policy<'p>,
    now: i64,
    types: Types<'a>,
    /// What the jobs placed so far leave, which the pass hands on.
    left: Spare,
    /// GPUs kept for a QoS, and how many of them its jobs use now.
    reserves: Vec<(&'p str, u32)>,
    /// Accounts with a job waiting within its guarantee, whose idle
    /// guarantee is not lent.
    wanting: std::collections::HashSet<&'p str>,
    reservations: usize,
    /// A higher-priority job waits for resources: what starts now backfills.
    blocked_above: bool,
    /// The shortest run, per shape of request, found not to fit from now:
    /// the timeline only fills up during a pass, so a job of that shape
    /// that runs as long or longer does not fit either. This keeps a pass
    /// over a long queue that cannot start linear.
    no_room: rustc_hash::FxHashMap<(&'a GpuRequest, u32, u64), u64>,
    plan: Plan,
}

impl<'a, 'p> Planner<'a, 'p> {
    /// The timeline from the running jobs: what they hold, when they are
    /// expected to release it; GPUs claimed by preemptors and drained
    /// ones withheld.
    fn new(
        pending: &[(&Job, i64)],
        running: &'a [&'a Job],
        node: &'a Pool<'a>,
        policy: &'a limits::Policy<'p>,
        now: i64,
    ) -> Self {
        let types = Types::new(node.gpus, node.nodes);
        let mut free = Free::new(&types);
        let mut held = limits::State::default();
        let reserves = policy.reserves(node.gpus.len() as u32);
        let mut reserve_used: Vec<u32> = vec![0; reserves.len()];
        for job in running {
            free.take_held(job, &types);
            if profile::frees_cpus(job) {
                free.give_cpus(job, &types);
            }
            held.add(policy, job, &job.gpus_alloc, node.gpus);
            use_reserve(&reserves, job, &mut reserve_used);
        }
        let mut ends: Vec<(i64, &Job)> = running
            .iter()
            .filter_map(|j| expected_end(j, now).map(|t| (t, *j)))
            .collect();
        ends.sort_by_key(|(t, j)| (*t, j.id));
        let mut profile = Profile::new(now, free, &ends, &types);
        // GPUs kept for jobs that preempted others: no other job may have
        // them, now or later; a claimant starts on its own once they are free.
        for (job, _) in pending
            .iter()
            .filter(|(j, _)| !j.claim.is_empty() && j.hold.is_none())
        {
            profile.withhold(&job.claim, &types);
        }
        profile.withhold(node.drained, &types);
        // Not collected: off an elastic policy, no walk of the queue.
        let wanting = elastic::wanting(policy, &held, pending.iter().map(|&(j, _)| j));
        Planner {
            node,
            policy,
            now,
            types,
            left: Spare {
                at: now,
                profile,
                held,
                reserve_used,
                held_now: running
                    .iter()
                    .flat_map(|j| j.gpus_alloc.iter().copied())
                    .collect(),
                until: policy.next_change(),
            },
            reserves,
            wanting,
            reservations: 0,
            blocked_above: false,
            no_room: Default::default(),
            // A limit window that opens or closes changes what may start.
            plan: Plan {
                wake_at: policy.next_change(),
                ..Plan::default()
            },
        }
    }

    /// A planner over what a pass left, for one more job.
    fn resume(left: Spare, node: &'a Pool<'a>, policy: &'a limits::Policy<'p>) -> Self {
        let reserves = policy.reserves(node.gpus.len() as u32);
        Planner {
            node,
            policy,
            now: left.at,
            types: Types::new(node.gpus, node.nodes),
            left,
            reserves,
            wanting: Default::default(),
            reservations: 0,
            blocked_above: false,
            no_room: Default::default(),
            plan: Plan::default(),
        }
    }

    /// Starts `job` at `now` (after the timeline's first point) where it
    /// fits from there to its time limit, within its limits; no
    /// reservation, no borrowing.
    fn start_now(&mut self, job: &Job, now: i64) -> Option<Start> {
        // Held, or to begin after the pass (a conservative test: the time
        // may have come since), or a claimant: the pass's.
        if self.waits_anyway(job).is_some()
            || !job.claim.is_empty()
            || self.borrows(job)
            || self
                .left
                .held
                .check(self.policy, job, None, self.node.gpus)
                .is_some()
        {
            return None;
        }
        // The timeline begins at the pass: the job holds what it takes
        // from there, so it spans everything up to its own end.
        let since = u64::try_from(now - self.now).unwrap_or(0);
        let duration = job.time_limit.map(|d| d.saturating_add(since));
        let slot = self.left.profile.earliest(job, duration, 1, &self.types)?;
        if self
            .left
            .held
            .check(self.policy, job, Some(&slot.gpus), self.node.gpus)
            .is_some()
            || self.kept_for_other_qos(job)
        {
            return None;
        }
        Some(self.take(job, slot, duration, false))
    }

    /// The next job in priority order: started, reserved, or waiting.
    fn consider(&mut self, job: &'a Job) {
        if let Some(reason) = self.waits_anyway(job) {
            self.plan.reasons.insert(job.id, reason);
        } else if !job.claim.is_empty() {
            self.start_claimant(job);
        } else if let Some(reason) = self.left.held.check(self.policy, job, None, self.node.gpus) {
            // Over an account limit: it waits for its own jobs to end, and
            // neither reserves anything nor holds up the jobs behind it.
            self.plan.reasons.insert(job.id, reason);
        } else if !self.borrows(job) {
            self.place(job, false);
        } else if job.preempt_count >= self.policy.max_preemptions {
            // Reclaimed as often as any job may be preempted: it waits
            // for its own account's GPUs.
            self.plan.reasons.insert(job.id, Reason::AssocGrpGRES);
        } else {
            self.place(job, true);
        }
    }

    /// Whether starting `job` now would take its account beyond its
    /// guarantee.
    fn borrows(&self, job: &Job) -> bool {
        elastic::borrows(self.policy, &self.left.held, job, job.gpus_wanted())
    }

    /// Whether a borrowing job would take GPUs that lenders keep: their
    /// idle guarantees that are wanted now or not lent.
    fn kept_for_lenders(&self, job: &Job) -> bool {
        let kept = elastic::kept_for_lenders(self.policy, &self.left.held, job, &self.wanting);
        let free = self.left.profile.now().gpus.len() as u32;
        kept > 0 && free.saturating_sub(job.gpus_wanted()) < kept
    }

    /// Held, or not to begin yet.
    fn waits_anyway(&mut self, job: &Job) -> Option<Reason> {
        match job.hold {
            Some(Hold::User) => return Some(Reason::JobHeldUser),
            Some(Hold::Admin) => return Some(Reason::JobHeldAdmin),
            Some(Hold::Approval) => return Some(Reason::PendingApproval),
            None => {}
        }
        let begin = job.begin_time.filter(|&b| b > self.now)?;
        self.plan.wake_at = Some(self.plan.wake_at.map_or(begin, |w| w.min(begin)));
        Some(Reason::BeginTime)
    }

    /// A job that preempted others starts on its claimed GPUs once their
    /// holders are gone.
    fn start_claimant(&mut self, job: &Job) {
        let ready = job.claim.iter().all(|g| !self.left.held_now.contains(*g));
        let node = self.types.slot_of(job);
        let slot = Slot::now(node, job.claim.clone(), self.now);
        let now = self.left.profile.now();
        if ready && now.cpus[node] >= job.cpus && now.mem_mb[node] >= job.mem_mb.unwrap_or(0) {
            let borrowing = self.borrows(job);
            let start = self.take(job, slot, job.time_limit, borrowing);
            self.plan.starts.push(start);
        } else {
            self.plan.reasons.insert(job.id, Reason::Preempting);
        }
    }

    /// Starts the job where it fits from now to its time limit, or gives
    /// it a reservation (within the depth) and says why it waits. A
    /// borrowing job starts only on what lenders leave, and never
    /// reserves: it takes what is idle now or waits.
    fn place(&mut self, job: &'a Job, borrowing: bool) {
        let duration = job.time_limit;
        let run = duration.unwrap_or(u64::MAX);
        let shape = (&job.gpus, job.cpus, job.mem_mb.unwrap_or(0));
        let fits_now = self.left.profile.now().fits(job, &self.types);
        let worth_looking = self
            .no_room
            .get(&shape)
            .is_none_or(|&shortest| run < shortest);
        let slot = if fits_now && worth_looking {
            self.left.profile.earliest(job, duration, 1, &self.types)
        } else {
            None
        };
        let Some(slot) = slot else {
            if fits_now {
                self.no_room
                    .entry(shape)
                    .and_modify(|s| *s = (*s).min(run))
                    .or_insert(run);
            }
            if borrowing {
                self.plan.reasons.insert(job.id, Reason::Resources);
                return;
            }
            return self.reserve(job, fits_now);
        };
        if let Some(reason) =
            self.left
                .held
                .check(self.policy, job, Some(&slot.gpus), self.node.gpus)
        {
            self.plan.reasons.insert(job.id, reason);
        } else if self.kept_for_other_qos(job) {
            self.plan.reasons.insert(job.id, Reason::ReservedForQos);
        } else if borrowing && self.kept_for_lenders(job) {
            self.plan.reasons.insert(job.id, Reason::AssocGrpGRES);
        } else {
            if self.blocked_above {
                self.plan.backfilled.push(job.id);
            }
            let start = self.take(job, slot, duration, borrowing);
            self.plan.starts.push(start);
        }
    }

    /// A job that cannot start now: a reservation at the earliest time it
    /// fits, while the depth allows; what starts after it backfills.
    fn reserve(&mut self, job: &Job, fits_now: bool) {
        let duration = job.time_limit;
        // Free now, but taken by a reservation before it would end.
        let reason = if fits_now && self.left.profile.now().place(job, &self.types).is_some() {
            Reason::Priority
        } else {
            Reason::Resources
        };
        if self.reservations < self.policy.backfill_depth {
            if let Some(later) = self
                .left
                .profile
                .earliest(job, duration, usize::MAX, &self.types)
            {
                self.left.profile.take(job, &later, duration, &self.types);
                self.plan.expected_starts.insert(job.id, later.at);
                self.reservations += 1;
            }
        }
        self.blocked_above = true;
        self.plan.reasons.insert(job.id, reason);
    }

    /// Whether other QoS must leave free what a reserving QoS does not
    /// use yet, and starting the job would take it.
    fn kept_for_other_qos(&self, job: &Job) -> bool {
        let kept: u32 = self
            .reserves
            .iter()
            .zip(&self.left.reserve_used)
            .filter(|((qos, _), _)| job.qos != *qos && !self.policy.may_borrow(qos, &job.qos))
            .map(|((_, n), used)| n.saturating_sub(*used))
            .sum();
        let wants = job.gpus_wanted();
        kept > 0
            && wants > 0
            && (self.left.profile.now().gpus.len() as u32).saturating_sub(wants) < kept
    }

    /// Starts the job on `slot`: its resources taken, its start.
    fn take(&mut self, job: &Job, slot: Slot, duration: Option<u64>, borrowing: bool) -> Start {
        self.left.profile.take(job, &slot, duration, &self.types);
        use_reserve(&self.reserves, job, &mut self.left.reserve_used);
        self.left
            .held
            .add(self.policy, job, &slot.gpus, self.node.gpus);
        Start {
            job: job.id,
            nodes: slot.nodes,
            gpus: slot.gpus,
            borrowing,
        }
    }
}

/// Counts the job's GPUs against its QoS's reserve.
fn use_reserve(reserves: &[(&str, u32)], job: &Job, used: &mut [u32]) {
    for (i, (qos, _)) in reserves.iter().enumerate() {
        if job.qos == *qos {
            used[i] += (job.gpus_alloc.len() as u32).max(job.gpus_wanted());
        }
    }
}

/// When a running job's resources come back. Never `now` itself: until
/// its processes are gone (a completing job, one past its limit) they are
/// still in use, so nothing may start on them in this pass.
fn expected_end(job: &Job, now: i64) -> Option<i64> {
    match job.state {
        crate::model::job::JobState::Completing => Some(now + 1),
        crate::model::job::JobState::Running => job.deadline().map(|d| d.max(now + 1)),
        // Suspended: frozen until someone resumes it.
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::job::{GpuRequest, JobState};
    use crate::sched::pool::Layout;

    use crate::gpu::test_a100s as gpus;

    fn job(id: JobId, count: u32, limit: Option<u64>) -> Job {
        Job {
            gpus: GpuRequest {
                count,
                gpu_type: None,
                ..GpuRequest::default()
            },
            cpus: 1,
            mem_mb: None,
            time_limit: limit,
            submit_time: id as i64,
            ..crate::model::job::example_job(id)
        }
    }

    fn running(id: JobId, alloc: &[u32], start: i64, limit: Option<u64>) -> Job {
        let mut j = job(id, alloc.len() as u32, limit);
        j.state = JobState::Running;
        j.gpus_alloc = alloc.to_vec();
        j.start_time = Some(start);
        j
    }

    fn plan_without_limits(
        pending: &[(&Job, i64)],
        running: &[&Job],
        layout: &Layout,
        now: i64,
    ) -> Plan {
        let config = crate::config::Config::builtin(std::path::Path::new("test.toml"));
        let pool = Pool::of(layout, &[]);
        plan(pending, running, &pool, &limits::Policy::new(&config), now)
    }

    fn node(g: &[Gpu]) -> Layout {
        Layout::single("gpu01", 64, 1 << 20, g)
    }

    /// The starts as (job, GPUs).
    fn starts(p: &Plan) -> Vec<(JobId, Vec<u32>)> {
        p.starts.iter().map(|s| (s.job, s.gpus.clone())).collect()
    }

    #[test]
    fn jobs_start_in_priority_order_on_distinct_gpus() {
        let g = gpus(4);
        let (a, b, c) = (job(1, 2, None), job(2, 1, None), job(3, 2, None));
        let p = plan_without_limits(&[(&c, 0), (&a, 0), (&b, 10)], &[], &node(&g), 100);
        assert_eq!(starts(&p), vec![(2, vec![0]), (1, vec![1, 2])]);
        assert_eq!(p.reasons[&3], Reason::Resources);
        assert_eq!(p.order, vec![2, 1, 3]);
    }

    #[test]
    fn gpus_of_a_completing_job_are_not_handed_out_yet() {
        let g = gpus(1);
        let mut stopping = running(1, &[0], 0, Some(10));
        stopping.state = JobState::Completing;
        let next = job(2, 1, Some(5));
        let p = plan_without_limits(&[(&next, 0)], &[&stopping], &node(&g), 100);
        assert!(p.starts.is_empty(), "{p:?}");
        assert_eq!(p.reasons[&2], Reason::Resources);
        assert_eq!(p.expected_starts[&2], 101, "as soon as it is gone");
    }

    #[test]
    fn gpus_kept_for_a_preempting_job_go_to_it_alone() {
        let g = gpus(3);
        let mut victim = running(1, &[0], 0, None);
        victim.state = JobState::Completing;
        let mut urgent = job(2, 2, None);
        urgent.claim = vec![0, 1];
        let other = job(3, 1, None);
        let p = plan_without_limits(&[(&urgent, 1), (&other, 100)], &[&victim], &node(&g), 10);
        assert_eq!(starts(&p), vec![(3, vec![2])], "never GPU 1: {p:?}");
        assert_eq!(p.reasons[&2], Reason::Preempting);
        // The victim is gone: the urgent job starts on what it was kept.
        let p = plan_without_limits(&[(&urgent, 1), (&other, 100)], &[], &node(&g), 10);
        assert_eq!(starts(&p), vec![(3, vec![2]), (2, vec![0, 1])]);
    }

    #[test]
    fn a_borrowing_job_leaves_a_waiting_lender_its_guarantee() {
        let config = crate::config::Config::parse(
            "[[gpus]]\ntype = \"a100\"\ncount = 4\nmemory = \"80G\"\n\
             [[accounts]]\nname = \"a\"\nmax_gpus = 2\nborrow_limit = 2\n\
             [[accounts]]\nname = \"b\"\nmax_gpus = 2\n",
            std::path::Path::new("x.toml"),
        )
        .unwrap();
        let g = gpus(4);
        let of = |account: &str, j: Job| Job {
            account: account.into(),
            ..j
        };
        let (a1, a2) = (
            of("a", running(1, &[0], 0, None)),
            of("a", running(2, &[1], 0, None)),
        );
        let a3 = of("a", job(3, 1, None));
        let b1 = of("b", job(4, 2, None));
        let layout = node(&g);
        let pool = Pool::of(&layout, &[]);
        let policy = limits::Policy::new(&config);
        // a's job comes first, but b waits for its idle guarantee: a may
        // not borrow it.
        let p = plan(&[(&a3, 100), (&b1, 0)], &[&a1, &a2], &pool, &policy, 10);
        assert_eq!(starts(&p), vec![(4, vec![2, 3])]);
        assert_eq!(p.reasons[&3], Reason::AssocGrpGRES);
        // b wants nothing: a borrows, and is marked so.
        let p = plan(&[(&a3, 100)], &[&a1, &a2], &pool, &policy, 10);
        assert_eq!(starts(&p), vec![(3, vec![2])]);
        assert!(p.starts[0].borrowing);
        // Nothing free: a borrowing job waits without a reservation.
        let b_runs = of("b", running(5, &[2, 3], 0, Some(60)));
        let p = plan(&[(&a3, 100)], &[&a1, &a2, &b_runs], &pool, &policy, 10);
        assert_eq!(p.reasons[&3], Reason::Resources);
        assert!(p.expected_starts.is_empty(), "{p:?}");
    }

    #[test]
    fn a_freed_gpu_goes_to_the_next_job() {
        let g = gpus(2);
        let r = running(1, &[1], 0, None);
        let next = job(2, 1, None);
        let p = plan_without_limits(&[(&next, 0)], &[&r], &node(&g), 10);
        assert_eq!(starts(&p), vec![(2, vec![0])]);
    }

    #[test]
    fn holds_and_begin_times_wait_with_reasons() {
        let g = gpus(4);
        let mut held = job(1, 1, None);
        held.hold = Some(Hold::User);
        let mut admin = job(2, 1, None);
        admin.hold = Some(Hold::Admin);
        let mut later = job(3, 1, None);
        later.begin_time = Some(500);
        let p = plan_without_limits(&[(&held, 0), (&admin, 0), (&later, 0)], &[], &node(&g), 100);
        assert!(p.starts.is_empty());
        assert_eq!(p.reasons[&1], Reason::JobHeldUser);
        assert_eq!(p.reasons[&2], Reason::JobHeldAdmin);
        assert_eq!(p.reasons[&3], Reason::BeginTime);
        assert_eq!(p.wake_at, Some(500));
        let p = plan_without_limits(&[(&later, 0)], &[], &node(&g), 500);
        assert_eq!(p.starts.len(), 1, "starts once its time has come");
    }

    #[test]
    fn backfill_never_delays_the_reserved_job() {
        let g = gpus(4);
        // 3 GPUs busy until t=100 and t=200; a 4-GPU job waits for t=200.
        let r1 = running(1, &[0], 0, Some(100));
        let r2 = running(2, &[1, 2], 0, Some(200));
        let big = job(3, 4, Some(1000));
        let long = job(4, 1, Some(500)); // would hold GPU 3 past 200: may not
        let short = job(5, 1, Some(150)); // ends at 160 < 200: may run
        let now = 10;
        let p = plan_without_limits(
            &[(&big, 10), (&long, 0), (&short, 0)],
            &[&r1, &r2],
            &node(&g),
            now,
        );
        assert_eq!(starts(&p), vec![(5, vec![3])]);
        assert_eq!(p.reasons[&3], Reason::Resources);
        assert_eq!(p.reasons[&4], Reason::Priority);
        assert_eq!(p.backfilled, vec![5]);
    }

    #[test]
    fn no_backfill_delays_any_of_the_reservations() {
        let g = gpus(4);
        // GPUs 0,1 busy until 1000, GPU 2 until 100; GPU 3 is free.
        let r1 = running(1, &[0, 1], 0, Some(1000));
        let r2 = running(2, &[2], 0, Some(100));
        let all = job(3, 4, Some(100)); // can only start at 1000
        let two = job(4, 2, Some(100)); // fits at 100, on 2 and 3
        let long = job(5, 1, Some(400)); // on 3 until 410: would delay `two`
        let short = job(6, 1, Some(50)); // on 3 until 60: delays nobody
        let pending = [(&all, 40), (&two, 30), (&long, 20), (&short, 10)];
        let p = plan_without_limits(&pending, &[&r1, &r2], &node(&g), 10);
        assert_eq!(starts(&p), vec![(6, vec![3])]);
        assert_eq!(p.expected_starts[&3], 1000);
        assert_eq!(p.expected_starts[&4], 100);
        assert_eq!(p.reasons[&4], Reason::Resources);
        assert_eq!(p.reasons[&5], Reason::Priority);
        assert_eq!(p.expected_starts[&5], 200, "after `two`, on GPU 3");

        // Without reservations whatever fits starts, big jobs or not.
        let config =
            crate::config::Config::parse("backfill_depth = 0\n", std::path::Path::new("x.toml"))
                .unwrap();
        let p = plan(
            &pending,
            &[&r1, &r2],
            &Pool::of(&node(&g), &[]),
            &limits::Policy::new(&config),
            10,
        );
        assert_eq!(starts(&p), vec![(5, vec![3])]);
        assert!(p.expected_starts.is_empty());
    }

    #[test]
    fn backfill_may_use_gpus_the_reserved_job_does_not_need() {
        let g = gpus(4);
        let r1 = running(1, &[0, 1], 0, Some(100));
        let r2 = running(2, &[2], 0, None);
        let two = job(3, 2, Some(50)); // only GPU 3 is free: blocked until t=100, on 0,1
        let one = job(4, 1, None); // no limit, but GPU 3 is spare at t=100
        let p = plan_without_limits(&[(&two, 10), (&one, 0)], &[&r1, &r2], &node(&g), 10);
        assert_eq!(p.reasons[&3], Reason::Resources);
        assert_eq!(
            starts(&p),
            vec![(4, vec![3])],
            "GPU 3 is not needed by the reservation on 0,1"
        );
    }

    #[test]
    fn cpus_and_memory_are_consumed_too() {
        let g = gpus(4);
        let mut a = job(1, 1, None);
        a.cpus = 40;
        let mut b = job(2, 1, None);
        b.cpus = 40;
        let mut c = job(3, 0, None);
        c.mem_mb = Some(2 << 20);
        let p = plan_without_limits(&[(&a, 0), (&b, 0), (&c, 0)], &[], &node(&g), 0);
        assert_eq!(starts(&p), vec![(1, vec![0])]);
        assert_eq!(p.reasons[&2], Reason::Resources);
        assert_eq!(p.reasons[&3], Reason::Resources);
    }

    #[test]
    fn a_qos_reserve_is_left_free_for_that_qos() {
        let config = crate::config::Config::parse(
            "[[gpus]]\ntype = \"a100\"\ncount = 4\nmemory = \"80G\"\n\
             [[qos]]\nname = \"critical\"\npriority = 300\nreserve = \"50%\"\n\
             [[qos]]\nname = \"medium\"\npriority = 100\n",
            std::path::Path::new("x.toml"),
        )
        .unwrap();
        let policy = limits::Policy::new(&config);
        let g = gpus(4);
        let medium = |id, count| Job {
            qos: "medium".into(),
            ..job(id, count, None)
        };
        let (a, b) = (medium(1, 2), medium(2, 1));
        // Two of four are kept for critical: the second medium job waits.
        let p = plan(
            &[(&a, 10), (&b, 5)],
            &[],
            &Pool::of(&node(&g), &[]),
            &policy,
            0,
        );
        assert_eq!(starts(&p), vec![(1, vec![0, 1])]);
        assert_eq!(p.reasons[&2], Reason::ReservedForQos);
        // A critical job takes the kept GPUs.
        let running_a = running(1, &[0, 1], 0, None);
        let urgent = Job {
            qos: "critical".into(),
            ..job(3, 2, None)
        };
        let p = plan(
            &[(&urgent, 100), (&b, 5)],
            &[&running_a],
            &Pool::of(&node(&g), &[]),
            &policy,
            0,
        );
        assert_eq!(starts(&p), vec![(3, vec![2, 3])]);
        // What critical uses counts against its reserve: with one of its
        // two GPUs in use, one more is kept.
        let mut running_urgent = running(3, &[2], 0, None);
        running_urgent.qos = "critical".into();
        let p = plan(
            &[(&b, 5)],
            &[&running_a, &running_urgent],
            &Pool::of(&node(&g), &[]),
            &policy,
            0,
        );
        assert_eq!(p.reasons[&2], Reason::ReservedForQos, "GPU 3 is kept");
        let p = plan(
            &[(&b, 5)],
            &[&running_urgent],
            &Pool::of(&node(&g), &[]),
            &policy,
            0,
        );
        assert_eq!(p.starts.len(), 1, "three free, one kept: {p:?}");
    }

    #[test]
    fn a_job_gets_all_its_gpus_and_cpus_on_one_node_packing_the_fullest() {
        let (a, b) = (gpus(4), gpus(4));
        let layout = Layout::new([
            crate::sched::pool::Member {
                name: "gpu01",
                cpus: 8,
                mem_mb: 1 << 20,
                open: true,
                gpus: &a,
            },
            crate::sched::pool::Member {
                name: "gpu02",
                cpus: 8,
                mem_mb: 1 << 20,
                open: true,
                gpus: &b,
            },
        ]);
        // gpu01 has 3 of 4 GPUs busy; gpu02 is empty.
        let mut busy = running(1, &[0, 1, 2], 0, None);
        busy.node = Some("gpu01".into());
        let busy = layout.to_pool(&busy);
        let one = job(2, 1, None);
        let two = job(3, 2, None);
        let mut wide = job(4, 0, None);
        wide.cpus = 8;
        let p = plan_without_limits(&[(&one, 30), (&two, 20), (&wide, 10)], &[&busy], &layout, 0);
        let where_: Vec<(JobId, usize, Vec<u32>)> = p
            .starts
            .iter()
            .map(|s| (s.job, s.nodes[0], s.gpus.clone()))
            .collect();
        // One GPU fills gpu01; two go to gpu02, whole; the 8-CPU job finds
        // no node with 8 CPUs left.
        assert_eq!(where_, vec![(2, 0, vec![3]), (3, 1, vec![4, 5])]);
        assert_eq!(p.reasons[&4], Reason::Resources);
        // Five GPUs fit on no node.
        let five = job(5, 5, None);
        let p = plan_without_limits(&[(&five, 0)], &[], &layout, 0);
        assert!(p.starts.is_empty());
        // --nodelist and --exclude choose the node.
        let mut pinned = job(6, 1, None);
        pinned.nodelist = vec!["gpu02".into()];
        let mut avoiding = job(7, 1, None);
        avoiding.exclude = vec!["gpu01".into()];
        let p = plan_without_limits(&[(&pinned, 2), (&avoiding, 1)], &[], &layout, 0);
        assert!(p.starts.iter().all(|s| s.nodes == [1]), "{p:?}");
    }

    /// Three nodes of two GPUs each.
    fn three_nodes(g: &[Gpu]) -> Layout {
        let member = |name| crate::sched::pool::Member {
            name,
            cpus: 8,
            mem_mb: 1 << 20,
            open: true,
            gpus: g,
        };
        Layout::new([member("gpu01"), member("gpu02"), member("gpu03")])
    }

    fn over_nodes(id: JobId, nodes: (u32, u32), per_node: u32, limit: Option<u64>) -> Job {
        let mut j = job(id, per_node, limit);
        j.tasks.nodes_min = nodes.0;
        j.tasks.nodes_max = nodes.1;
        j
    }

    #[test]
    fn a_job_over_several_nodes_starts_on_all_at_once_or_waits_with_a_reservation() {
        let g = gpus(2);
        let layout = three_nodes(&g);
        // GPU 0 of gpu01 is busy until 100.
        let mut busy = running(1, &[0], 0, Some(100));
        busy.node = Some("gpu01".into());
        let two = over_nodes(2, (2, 2), 2, Some(50));
        let p = plan_without_limits(&[(&two, 10)], &[&busy], &layout, 0);
        let s = &p.starts[0];
        assert_eq!(
            (s.nodes.clone(), s.gpus.clone()),
            (vec![1, 2], vec![2, 3, 4, 5])
        );
        // Three whole nodes: not now (no partial hold), at 100; a short
        // job backfills on the free GPU of gpu01, a long one does not.
        let all = over_nodes(3, (3, 3), 2, Some(50));
        let short = job(4, 1, Some(100));
        let long = job(5, 1, Some(101));
        let p = plan_without_limits(&[(&all, 10), (&long, 5), (&short, 1)], &[&busy], &layout, 0);
        assert_eq!(p.starts.iter().map(|s| s.job).collect::<Vec<_>>(), vec![4]);
        assert_eq!(p.reasons[&3], Reason::Resources);
        assert_eq!(p.expected_starts[&3], 100);
        assert_eq!(p.reasons[&5], Reason::Priority);
        // 2-3 nodes: as many as are free, at least two.
        let flexible = over_nodes(6, (2, 3), 2, None);
        let p = plan_without_limits(&[(&flexible, 1)], &[&busy], &layout, 0);
        assert_eq!(p.starts[0].nodes, vec![1, 2]);
        let p = plan_without_limits(&[(&flexible, 1)], &[], &layout, 0);
        assert_eq!(p.starts[0].nodes, vec![0, 1, 2]);
        // Each node holds its CPUs: 6 of 8 on each leaves no room for 3 more.
        let mut cpus = over_nodes(7, (3, 3), 0, None);
        cpus.cpus = 6;
        let mut other = job(8, 0, None);
        other.cpus = 3;
        let p = plan_without_limits(&[(&cpus, 10), (&other, 1)], &[], &layout, 0);
        assert_eq!(p.starts.len(), 1, "{p:?}");
        assert_eq!(p.starts[0].nodes.len(), 3);
    }
}
