//! Whom to stop so that an urgent job can start: among the running jobs
//! it may preempt, the set whose resources let it start that costs least —
//! lowest QoS first, then least work lost, then fewest jobs and GPUs. A
//! pure function of what runs and what is free; the daemon decides who
//! may be a candidate (QoS rules, exempt time) and carries it out.

use crate::model::job::{Job, JobId};

use super::profile::{Free, Types};

/// A running job that could be preempted, with what stopping it costs.
#[derive(Clone, Debug)]
pub struct Candidate<'a> {
    pub job: &'a Job,
    /// Its QoS's priority: lower goes first.
    pub qos_priority: i64,
    /// Seconds of work it would lose: since its last checkpoint, or since
    /// it started.
    pub lost_work: i64,
    /// Suspended rather than stopped: it frees its CPUs only (its GPUs and
    /// memory stay in use), and loses no work.
    pub suspend: bool,
    /// It runs on borrowed GPUs (elastic quotas): it goes before any job
    /// that does not.
    pub borrowing: bool,
}

/// The victims chosen, and the node and GPUs the urgent job will get.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    pub victims: Vec<JobId>,
    /// The node's slot in the pass's pool.
    pub node: usize,
    pub gpus: Vec<u32>,
}

/// Up to this many candidates every set is weighed; beyond, a greedy pass
/// in cost order, then pruning, keeps a decision in microseconds.
const EXHAUSTIVE_UP_TO: usize = 12;

/// The cost of stopping a set, compared in this order.
type Cost = (bool, i64, i64, usize, usize);

fn cost(set: &[&Candidate]) -> Cost {
    (
        // Borrowing jobs alone, where they are enough.
        set.iter().any(|c| !c.borrowing),
        set.iter().map(|c| c.qos_priority).max().unwrap_or(i64::MIN),
        set.iter().map(|c| c.lost_work.max(0)).sum(),
        set.len(),
        set.iter().map(|c| c.job.gpus_alloc.len()).sum(),
    )
}

/// Where `urgent` would go if `set` stopped, on top of `free`.
fn place_without(
    urgent: &Job,
    free: &Free,
    set: &[&Candidate],
    types: &Types,
) -> Option<(usize, Vec<u32>)> {
    let mut after = free.clone();
    for c in set {
        if c.suspend {
            after.give_cpus(c.job, types);
        } else {
            after.give(c.job, types);
        }
    }
    after
        .place(urgent, types)
        .map(|(nodes, gpus)| (nodes[0], gpus))
}

/// The cheapest set of `candidates` to stop so that `urgent` fits, with
/// its GPUs; `None` if even stopping them all would not make room. No job
/// is in the set that the urgent job does not need.
pub fn choose(
    urgent: &Job,
    free: &Free,
    candidates: &[Candidate],
    types: &Types,
) -> Option<Choice> {
    let mut sorted: Vec<&Candidate> = candidates.iter().collect();
    sorted.sort_by_key(|c| {
        (
            !c.borrowing,
            c.qos_priority,
            c.lost_work,
            c.job.gpus_alloc.len(),
            c.job.id,
        )
    });
    let set = if sorted.len() <= EXHAUSTIVE_UP_TO {
        cheapest_of_all(urgent, free, &sorted, types)?
    } else {
        greedy_then_pruned(urgent, free, &sorted, types)?
    };
    let (node, gpus) = place_without(urgent, free, &set, types)?;
    let mut victims: Vec<JobId> = set.iter().map(|c| c.job.id).collect();
    victims.sort_unstable();
    Some(Choice {
        victims,
        node,
        gpus,
    })
}

fn cheapest_of_all<'c, 'a>(
    urgent: &Job,
    free: &Free,
    sorted: &[&'c Candidate<'a>],
    types: &Types,
) -> Option<Vec<&'c Candidate<'a>>> {
    let mut best: Option<(Cost, Vec<&Candidate>)> = None;
    for mask in 1u32..(1 << sorted.len()) {
        let set: Vec<&Candidate> = sorted
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, c)| *c)
            .collect();
        let c = cost(&set);
        if best.as_ref().is_some_and(|(b, _)| c >= *b) {
            continue;
        }
        if place_without(urgent, free, &set, types).is_some() {
            best = Some((c, set));
        }
    }
    best.map(|(_, set)| set)
}

fn greedy_then_pruned<'c, 'a>(
    urgent: &Job,
    free: &Free,
    sorted: &[&'c Candidate<'a>],
    types: &Types,
) -> Option<Vec<&'c Candidate<'a>>> {
    let mut set: Vec<&Candidate> = Vec::new();
    for c in sorted {
        set.push(c);
        if place_without(urgent, free, &set, types).is_some() {
            break;
        }
    }
    place_without(urgent, free, &set, types)?;
    // The costliest first: drop each that is not needed.
    let mut i = set.len();
    while i > 0 {
        i -= 1;
        let mut without = set.clone();
        without.remove(i);
        if place_without(urgent, free, &without, types).is_some() {
            set = without;
        }
    }
    Some(set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gpu::Gpu;
    use crate::model::job::{GpuRequest, JobState};

    use crate::gpu::test_a100s as gpus;
    use crate::sched::pool::Layout;

    fn job(id: JobId, count: u32, alloc: &[u32]) -> Job {
        Job {
            gpus: GpuRequest {
                count,
                ..GpuRequest::default()
            },
            gpus_alloc: alloc.to_vec(),
            cpus: 1,
            mem_mb: None,
            state: JobState::Running,
            ..crate::model::job::example_job(id)
        }
    }

    fn busy(types: &Types, running: &[&Job]) -> Free {
        let mut free = Free::new(types);
        for j in running {
            free.take_held(j, types);
        }
        free
    }

    fn node(g: &[Gpu]) -> Layout {
        Layout::single("gpu01", 64, 1 << 20, g)
    }

    #[test]
    fn the_set_needed_and_no_more_least_work_lost_first() {
        let layout = node(&gpus(4));
        let types = Types::new(&layout.gpus, &layout.nodes);
        let (a, b, c) = (job(1, 1, &[0]), job(2, 1, &[1]), job(3, 2, &[2, 3]));
        let free = busy(&types, &[&a, &b, &c]);
        let urgent = job(9, 2, &[]);
        let cand = |j, lost| Candidate {
            job: j,
            qos_priority: 0,
            lost_work: lost,
            suspend: false,
            borrowing: false,
        };
        // Equal work lost per job: the one 2-GPU job loses less in all.
        let all = [cand(&a, 100), cand(&b, 100), cand(&c, 100)];
        let choice = choose(&urgent, &free, &all, &types).unwrap();
        assert_eq!(choice.victims, vec![3]);
        assert_eq!(choice.gpus, vec![2, 3]);
        // The 2-GPU job ran long since its checkpoint: the two small ones.
        let all = [cand(&a, 100), cand(&b, 100), cand(&c, 500)];
        let choice = choose(&urgent, &free, &all, &types).unwrap();
        assert_eq!(choice.victims, vec![1, 2]);
        assert_eq!(choice.gpus, vec![0, 1]);
        // One GPU free already: one 1-GPU job is enough.
        let free = busy(&types, &[&b, &c]);
        let choice = choose(&urgent, &free, &all[1..], &types).unwrap();
        assert_eq!(choice.victims, vec![2]);
        // Nothing to gain: none.
        assert_eq!(choose(&job(9, 8, &[]), &free, &all, &types), None);
    }

    #[test]
    fn lower_qos_goes_first_and_greedy_pruning_agrees() {
        let layout = node(&gpus(16));
        let types = Types::new(&layout.gpus, &layout.nodes);
        let jobs: Vec<Job> = (0..16).map(|i| job(i + 1, 1, &[i as u32])).collect();
        let refs: Vec<&Job> = jobs.iter().collect();
        let free = busy(&types, &refs);
        // Jobs 1-8 are medium, 9-16 low; the low ones lost more work.
        let all: Vec<Candidate> = jobs
            .iter()
            .map(|j| Candidate {
                job: j,
                qos_priority: if j.id <= 8 { 100 } else { 0 },
                lost_work: if j.id <= 8 { 10 } else { 1_000 + j.id as i64 },
                suspend: false,
                borrowing: false,
            })
            .collect();
        let urgent = job(99, 3, &[]);
        // 16 candidates: the greedy path.
        let choice = choose(&urgent, &free, &all, &types).unwrap();
        assert_eq!(choice.victims, vec![9, 10, 11]);
        // 12 candidates: every set weighed, same answer.
        let choice = choose(&urgent, &free, &all[4..], &types).unwrap();
        assert_eq!(choice.victims, vec![9, 10, 11]);
    }
}
