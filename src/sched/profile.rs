//! What will be free when: the node's resources as a timeline built from
//! running jobs' expected ends, from which every start and reservation of a
//! pass is taken. A job may start now only where it fits from now to its
//! end, so no start can delay a reservation made before it (conservative
//! backfill over the first reservations of the queue).

use std::collections::HashMap;

use crate::model::gpu::Gpu;
use crate::model::job::Job;

use super::placement::{self, GpuSet};
use super::pool::{self, NodeRoom};

/// GPU types numbered once per pass, with the pool's inventory and nodes
/// they number.
pub struct Types<'a> {
    pub gpus: &'a [Gpu],
    pub nodes: &'a [NodeRoom],
    pub names: Vec<&'a str>,
    /// Type id of each GPU, by index.
    pub of_gpu: Vec<usize>,
    /// Node slots by name.
    slots: HashMap<&'a str, usize>,
}

impl<'a> Types<'a> {
    pub fn new(gpus: &'a [Gpu], nodes: &'a [NodeRoom]) -> Types<'a> {
        let mut names: Vec<&str> = Vec::new();
        let of_gpu = gpus
            .iter()
            .map(|g| match names.iter().position(|n| *n == g.gpu_type) {
                Some(i) => i,
                None => {
                    names.push(&g.gpu_type);
                    names.len() - 1
                }
            })
            .collect();
        let slots = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        Types {
            gpus,
            nodes,
            names,
            of_gpu,
            slots,
        }
    }

    /// The node slot of a job that holds resources (or claims them): where
    /// its GPUs are, else its node by name, else the first.
    pub fn slot_of(&self, job: &Job) -> usize {
        let gpu = job.gpus_alloc.first().or(job.claim.first());
        if let Some(g) = gpu.and_then(|&g| self.gpus.get(g as usize)) {
            return g.node as usize;
        }
        job.node
            .as_deref()
            .and_then(|n| self.slots.get(n).copied())
            .unwrap_or(0)
    }

    /// The slots of every node a job holds, its batch node first.
    pub fn slots_of(&self, job: &Job) -> Vec<usize> {
        let mut slots = vec![self.slot_of(job)];
        slots.extend(
            job.peers
                .iter()
                .filter_map(|n| self.slots.get(n.as_str()).copied()),
        );
        slots
    }
}

/// A job suspended by preemption keeps its GPUs and memory but runs on no
/// CPU: its CPUs are free for the job that preempted it.
pub fn frees_cpus(job: &Job) -> bool {
    job.state == crate::model::job::JobState::Suspended && job.preempted_by.is_some()
}

/// Resources free over one stretch of time.
#[derive(Clone, Debug)]
pub struct Free {
    pub gpus: GpuSet,
    /// Free CPUs and memory of each node, by slot.
    pub cpus: Vec<u32>,
    pub mem_mb: Vec<u64>,
    /// Free GPUs of each type (by `Types` id), over the pool: a job
    /// needing more than any type has free is turned down without
    /// looking at single GPUs, which keeps a pass over a long blocked
    /// queue linear.
    per_type: Vec<u32>,
    /// Shard slots in use on each GPU (by index). A GPU with slots in use
    /// is not in `gpus`: whole-GPU jobs never share a card.
    shards_used: Vec<u32>,
}

impl Free {
    pub fn new(types: &Types) -> Free {
        let mut per_type = vec![0; types.names.len()];
        for &t in &types.of_gpu {
            per_type[t] += 1;
        }
        Free {
            gpus: types.gpus.iter().map(|g| g.index).collect(),
            cpus: types.nodes.iter().map(|n| n.cpus).collect(),
            mem_mb: types.nodes.iter().map(|n| n.mem_mb).collect(),
            per_type,
            shards_used: vec![0; types.gpus.len()],
        }
    }

    /// The nodes `job` may start on with its CPUs and memory free there.
    pub fn rooms(&self, job: &Job, types: &Types) -> GpuSet {
        let mem = job.mem_mb.unwrap_or(0);
        types
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, n)| {
                n.open
                    && self.cpus[*i] >= job.cpus
                    && self.mem_mb[*i] >= mem
                    && pool::allows(job, &n.name)
            })
            .map(|(i, _)| i as u32)
            .collect()
    }

    /// GPUs a shard request could share now: accepted by it, not taken
    /// whole, with enough free slots.
    pub fn shareable(&self, job: &Job, types: &Types) -> GpuSet {
        types
            .gpus
            .iter()
            .filter(|g| {
                let used = self.shards_used.get(g.index as usize).copied().unwrap_or(0);
                job.gpus.accepts(g)
                    && (used > 0 || self.gpus.contains(g.index))
                    && g.shards.saturating_sub(used) >= job.gpus.count
            })
            .map(|g| g.index)
            .collect()
    }

    fn free_slots(&self, gpu: u32, types: &Types) -> u32 {
        let total = types.gpus.get(gpu as usize).map_or(0, |g| g.shards);
        total.saturating_sub(self.shards_used.get(gpu as usize).copied().unwrap_or(0))
    }

    /// The GPUs `job` could use now on the nodes of `rooms`, before
    /// placement chooses among them.
    fn usable(&self, job: &Job, rooms: &GpuSet, types: &Types) -> GpuSet {
        let mut gpus = if job.gpus.shard {
            self.shareable(job, types)
        } else {
            self.gpus.clone()
        };
        if rooms.len() < types.nodes.len() {
            gpus = on_nodes(&gpus, rooms, types);
        }
        gpus
    }

    /// Where `job` would go on what is free now, ignoring the future: its
    /// nodes' slots and its GPUs.
    pub fn place(&self, job: &Job, types: &Types) -> Option<(Vec<usize>, Vec<u32>)> {
        if !self.fits(job, types) {
            return None;
        }
        let rooms = self.rooms(job, types);
        choose(job, &self.usable(job, &rooms, types), &rooms, self, types)
    }

    /// Enough GPUs of one type in the pool for `job`, and a node with its
    /// CPUs and memory: what every placement needs, checked cheaply.
    pub fn fits(&self, job: &Job, types: &Types) -> bool {
        let count = job.gpus.count * job.tasks.nodes_min;
        // The GPUs of its type first: behind a long queue the pool is
        // full, and their count answers without a walk of the nodes.
        let enough_gpus = count == 0
            || job.gpus.shard
            || match &job.gpus.gpu_type {
                Some(t) => types
                    .names
                    .iter()
                    .position(|n| n == t)
                    .is_some_and(|i| self.per_type[i] >= count),
                None => self.per_type.iter().any(|&n| n >= count),
            };
        if !enough_gpus {
            return false;
        }
        let mem = job.mem_mb.unwrap_or(0);
        let rooms = (0..types.nodes.len())
            .filter(|&i| {
                types.nodes[i].open
                    && self.cpus[i] >= job.cpus
                    && self.mem_mb[i] >= mem
                    && pool::allows(job, &types.nodes[i].name)
            })
            .take(job.tasks.nodes_min as usize)
            .count();
        if rooms < job.tasks.nodes_min as usize {
            return false;
        }
        // A shard needs a GPU with room left to share.
        !(job.gpus.shard && count > 0 && self.shareable(job, types).is_empty())
    }

    /// Takes GPUs only, whole.
    pub fn take_gpus(&mut self, gpus: &[u32], types: &Types) {
        for &g in gpus {
            if self.gpus.remove(g) {
                self.per_type[types.of_gpu[g as usize]] -= 1;
            }
        }
    }

    /// Takes `job`'s resources: `gpus`, and its CPUs and memory on each
    /// of `nodes`.
    pub fn take(&mut self, job: &Job, nodes: &[usize], gpus: &[u32], types: &Types) {
        for &g in gpus {
            if self.gpus.remove(g) {
                self.per_type[types.of_gpu[g as usize]] -= 1;
            }
            if job.gpus.shard {
                if let Some(used) = self.shards_used.get_mut(g as usize) {
                    *used += job.gpus.count;
                }
            }
        }
        for &node in nodes {
            self.cpus[node] = self.cpus[node].saturating_sub(job.cpus);
            self.mem_mb[node] = self.mem_mb[node].saturating_sub(job.mem_mb.unwrap_or(0));
        }
    }

    /// Takes what a running (or stopping) job holds, on its nodes.
    pub fn take_held(&mut self, job: &Job, types: &Types) {
        self.take(job, &types.slots_of(job), &job.gpus_alloc, types);
    }

    /// Gives back a job's CPUs only (a job suspended for a preemptor).
    pub fn give_cpus(&mut self, job: &Job, types: &Types) {
        for node in types.slots_of(job) {
            self.cpus[node] = self.cpus[node].saturating_add(job.cpus);
        }
    }

    pub fn give(&mut self, job: &Job, types: &Types) {
        for &g in &job.gpus_alloc {
            if job.gpus.shard {
                let Some(used) = self.shards_used.get_mut(g as usize) else {
                    continue;
                };
                *used = used.saturating_sub(job.gpus.count);
                if *used > 0 {
                    // Other shard jobs still share the card.
                    continue;
                }
            }
            if self.gpus.insert(g) {
                self.per_type[types.of_gpu[g as usize]] += 1;
            }
        }
        for node in types.slots_of(job) {
            self.cpus[node] = self.cpus[node].saturating_add(job.cpus);
            self.mem_mb[node] = self.mem_mb[node].saturating_add(job.mem_mb.unwrap_or(0));
        }
    }
}

/// The GPUs of `gpus` on the nodes of `rooms`.
fn on_nodes(gpus: &GpuSet, rooms: &GpuSet, types: &Types) -> GpuSet {
    gpus.iter()
        .filter(|&g| {
            types
                .gpus
                .get(g as usize)
                .is_some_and(|gpu| rooms.contains(gpu.node))
        })
        .collect()
}

/// Picks `job`'s node and GPUs among `usable` ones on the nodes of
/// `rooms`: whole GPUs by placement, the card a shard job shares (the most
/// shared one, by `now`'s slots), or for a job without GPUs the node with
/// the fewest CPUs left that holds it (packing, so that whole nodes stay
/// free for large jobs).
fn choose(
    job: &Job,
    usable: &GpuSet,
    rooms: &GpuSet,
    now: &Free,
    types: &Types,
) -> Option<(Vec<usize>, Vec<u32>)> {
    if job.tasks.is_multi_node() {
        return choose_nodes(job, usable, rooms, now, types);
    }
    let node_of = |gpus: Vec<u32>| {
        let node = gpus
            .first()
            .and_then(|&g| types.gpus.get(g as usize))
            .map_or(0, |g| g.node as usize);
        (vec![node], gpus)
    };
    if job.gpus.count == 0 {
        let node = rooms
            .iter()
            .min_by_key(|&n| (now.cpus[n as usize] - job.cpus, n))?;
        return Some((vec![node as usize], Vec::new()));
    }
    if job.gpus.shard {
        placement::pick_shared(usable, |g| now.free_slots(g, types)).map(|g| node_of(vec![g]))
    } else {
        placement::place(&job.gpus, usable, types.gpus).map(node_of)
    }
}

/// Nodes and GPUs for a job over several nodes: at least `--nodes`'
/// minimum of the `rooms`, up to its maximum, each with `gpus.count` of
/// the `usable` GPUs, all of one type (a data-parallel run goes at its
/// slowest card's pace). The first type in config order that has enough
/// such nodes wins; its nodes are taken fullest first (best fit, as for
/// one node), then in pool order, and on each node the GPUs as
/// [`placement::place`] picks them there. Without GPUs: the nodes with
/// the fewest CPUs left that hold it.
fn choose_nodes(
    job: &Job,
    usable: &GpuSet,
    rooms: &GpuSet,
    now: &Free,
    types: &Types,
) -> Option<(Vec<usize>, Vec<u32>)> {
    let (min, max) = (job.tasks.nodes_min as usize, job.tasks.nodes_max as usize);
    if job.gpus.count == 0 {
        let mut nodes: Vec<usize> = rooms.iter().map(|n| n as usize).collect();
        nodes.sort_by_key(|&n| (now.cpus[n] - job.cpus, n));
        nodes.truncate(max);
        return (nodes.len() >= min).then(|| (nodes, Vec::new()));
    }
    for type_name in &types.names {
        // (free GPUs of the type there, node, the GPUs it would get)
        let mut fitting: Vec<(usize, usize, Vec<u32>)> = Vec::new();
        for node in rooms.iter().map(|n| n as usize) {
            let on_node: GpuSet = usable
                .iter()
                .filter(|&g| {
                    let gpu = &types.gpus[g as usize];
                    gpu.node as usize == node && gpu.gpu_type == *type_name
                })
                .collect();
            if let Some(gpus) = placement::place(&job.gpus, &on_node, types.gpus) {
                fitting.push((on_node.len(), node, gpus));
            }
        }
        if fitting.len() < min {
            continue;
        }
        fitting.sort_by_key(|(free, node, _)| (*free, *node));
        fitting.truncate(max);
        let nodes = fitting.iter().map(|(_, n, _)| *n).collect();
        let gpus = fitting.into_iter().flat_map(|(_, _, g)| g).collect();
        return Some((nodes, gpus));
    }
    None
}

/// Where a job can run from a point of the timeline on.
#[derive(Clone, Debug, PartialEq)]
pub struct Slot {
    pub at: i64,
    /// The slots of its nodes, the batch node first.
    pub nodes: Vec<usize>,
    pub gpus: Vec<u32>,
    /// Index of the point it starts at (0: now).
    point: usize,
}

impl Slot {
    /// Starting now on `gpus` of `node`.
    pub fn now(node: usize, gpus: Vec<u32>, now: i64) -> Slot {
        Slot {
            at: now,
            nodes: vec![node],
            gpus,
            point: 0,
        }
    }
}

#[derive(Clone, Debug)]
struct Point {
    at: i64,
    free: Free,
}

/// The timeline: `points[0]` is now; each point holds what is free from its
/// time until the next point's.
#[derive(Clone, Debug)]
pub struct Profile {
    points: Vec<Point>,
}

impl Profile {
    /// From what is free now and when running jobs end (`ends` sorted by time).
    pub fn new(now: i64, free: Free, ends: &[(i64, &Job)], types: &Types) -> Profile {
        let mut points = vec![Point { at: now, free }];
        for &(t, job) in ends {
            let last = points.last_mut().expect("one point at least");
            if t <= last.at {
                last.free.give(job, types);
            } else {
                let mut free = last.free.clone();
                free.give(job, types);
                points.push(Point { at: t, free });
            }
        }
        Profile { points }
    }

    pub fn now(&self) -> &Free {
        &self.points[0].free
    }

    /// Takes `gpus` out of the timeline for good (kept for one job).
    pub fn withhold(&mut self, gpus: &[u32], types: &Types) {
        for point in &mut self.points {
            point.free.take_gpus(gpus, types);
        }
    }

    /// The earliest point, among the first `max_points`, from which `job`
    /// fits for `duration` seconds (`None`: for ever), with its GPUs.
    pub fn earliest(
        &self,
        job: &Job,
        duration: Option<u64>,
        max_points: usize,
        types: &Types,
    ) -> Option<Slot> {
        let last = self.points.len().min(max_points);
        let mut i = 0;
        while i < last {
            let start = &self.points[i];
            if !start.free.fits(job, types) {
                i += 1;
                continue;
            }
            let end = duration.map(|d| start.at.saturating_add(d as i64));
            let mut rooms = start.free.rooms(job, types);
            let mut gpus = start.free.usable(job, &rooms, types);
            // The first later point where too little is free: every start
            // up to it would span it too, so the next to try is after it.
            let mut short_at = None;
            for (j, later) in self.points.iter().enumerate().skip(i + 1) {
                if end.is_some_and(|e| later.at >= e) {
                    break;
                }
                if later.free.fits(job, types) {
                    rooms.intersect_with(&later.free.rooms(job, types));
                }
                if rooms.len() < job.tasks.nodes_min as usize || !later.free.fits(job, types) {
                    short_at = Some(j);
                    break;
                }
                gpus.intersect_with(&later.free.usable(job, &rooms, types));
            }
            if let Some(j) = short_at {
                i = j + 1;
                continue;
            }
            if rooms.len() < types.nodes.len() {
                gpus = on_nodes(&gpus, &rooms, types);
            }
            if let Some((nodes, gpus)) = choose(job, &gpus, &rooms, &start.free, types) {
                return Some(Slot {
                    at: start.at,
                    nodes,
                    gpus,
                    point: i,
                });
            }
            i += 1;
        }
        None
    }

    /// Takes `job`'s resources on `slot.gpus` from the slot's start for
    /// `duration` seconds (`None`: for ever).
    pub fn take(&mut self, job: &Job, slot: &Slot, duration: Option<u64>, types: &Types) {
        let end = duration.map(|d| slot.at.saturating_add(d as i64));
        if let Some(end) = end {
            // A point where the job's resources come back.
            let at_or_after = self.points.partition_point(|p| p.at < end);
            if self.points.get(at_or_after).is_none_or(|p| p.at != end) {
                let free = self.points[at_or_after - 1].free.clone();
                self.points.insert(at_or_after, Point { at: end, free });
            }
        }
        for point in self.points[slot.point..]
            .iter_mut()
            .take_while(|p| end.is_none_or(|e| p.at < e))
        {
            point.free.take(job, &slot.nodes, &slot.gpus, types);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::job::{GpuRequest, JobState};

    use crate::gpu::test_a100s as gpus;
    use crate::sched::pool::Layout;

    /// One node of `g` with 8 CPUs and 1 GiB.
    fn node(g: &[Gpu]) -> Layout {
        Layout::single("gpu01", 8, 1024, g)
    }

    fn job(id: u64, count: u32, alloc: &[u32]) -> Job {
        Job {
            gpus: GpuRequest {
                count,
                gpu_type: None,
                ..GpuRequest::default()
            },
            gpus_alloc: alloc.to_vec(),
            cpus: 1,
            mem_mb: None,
            state: JobState::Running,
            ..crate::model::job::example_job(id)
        }
    }

    #[test]
    fn a_reservation_blocks_only_the_time_it_covers() {
        let layout = node(&gpus(2));
        let types = Types::new(&layout.gpus, &layout.nodes);
        let mut free = Free::new(&types);
        let running = job(1, 1, &[0]);
        free.take(&running, &[0], &[0], &types);
        let mut profile = Profile::new(0, free, &[(100, &running)], &types);
        // A 2-GPU job can start when job 1 ends, at 100; reserve it for 50 s.
        let big = job(2, 2, &[]);
        let slot = profile
            .earliest(&big, Some(50), usize::MAX, &types)
            .unwrap();
        assert_eq!((slot.at, slot.gpus.clone()), (100, vec![0, 1]));
        profile.take(&big, &slot, Some(50), &types);
        let one = job(3, 1, &[]);
        // Ends before 100: starts now on GPU 1.
        let now = profile
            .earliest(&one, Some(100), usize::MAX, &types)
            .unwrap();
        assert_eq!((now.at, now.gpus), (0, vec![1]));
        // Would run into the reservation: only after it, at 150.
        let later = profile
            .earliest(&one, Some(101), usize::MAX, &types)
            .unwrap();
        assert_eq!(later.at, 150);
        // Looking only at now: nothing.
        assert_eq!(profile.earliest(&one, Some(101), 1, &types), None);
        // Without an end it never fits before the reservation ends.
        assert_eq!(
            profile.earliest(&one, None, usize::MAX, &types).unwrap().at,
            150
        );
    }

    #[test]
    fn shard_jobs_share_cards_that_whole_gpu_jobs_then_leave_alone() {
        let g: Vec<Gpu> = (0..2)
            .map(|i| Gpu {
                index: i,
                gpu_type: "t4".into(),
                shards: 4,
                ..Gpu::default()
            })
            .collect();
        let layout = node(&g);
        let types = Types::new(&layout.gpus, &layout.nodes);
        let shard = |id, n| Job {
            gpus: GpuRequest {
                count: n,
                shard: true,
                ..GpuRequest::default()
            },
            ..job(id, n, &[])
        };
        let mut free = Free::new(&types);
        let a = shard(1, 2);
        let (_, at_a) = free.place(&a, &types).unwrap();
        assert_eq!(at_a, vec![0]);
        free.take(&a, &[0], &at_a, &types);
        let b = shard(2, 1);
        assert_eq!(
            free.place(&b, &types),
            Some((vec![0], vec![0])),
            "onto the shared card"
        );
        free.take(&b, &[0], &[0], &types);
        let whole = job(3, 1, &[]);
        assert_eq!(
            free.place(&whole, &types),
            Some((vec![0], vec![1])),
            "never a shared card"
        );
        let two = job(4, 2, &[]);
        assert_eq!(free.place(&two, &types), None);
        free.take(&whole, &[0], &[1], &types);
        let c = shard(5, 2);
        assert_eq!(
            free.place(&c, &types),
            None,
            "1 slot left on GPU 0, GPU 1 taken whole"
        );
        // The shard jobs end: GPU 0 is whole again.
        free.give(
            &Job {
                gpus_alloc: vec![0],
                ..a
            },
            &types,
        );
        assert!(!free.gpus.contains(0), "job 2 still shares it");
        free.give(
            &Job {
                gpus_alloc: vec![0],
                ..b
            },
            &types,
        );
        assert_eq!(free.place(&whole, &types), Some((vec![0], vec![0])));
    }
}
