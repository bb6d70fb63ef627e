//! The servers of a pool as one scheduling pass sees them: every node's
//! GPUs in one inventory, numbered across the pool, and each node's CPUs
//! and memory. A job's record keeps its node's name and that node's own
//! GPU numbers (what `CUDA_VISIBLE_DEVICES` and `ysacct` show there); the
//! pass works on pool numbers, so that placement, the timeline and
//! preemption see every GPU of the pool at once. The two numberings meet
//! only here: [`Layout::to_pool`] on the way in, [`Layout::to_node`] on the
//! way out. On a single server the two are the same, and nothing is copied.

use std::collections::HashMap;

use crate::model::gpu::Gpu;
use crate::model::job::Job;

/// One server's room, as the pass hands it out.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeRoom {
    pub name: String,
    pub cpus: u32,
    pub mem_mb: u64,
    /// Whether new jobs may start there (not drained, not down).
    pub open: bool,
    /// Its first GPU's number in the pool's inventory.
    pub first_gpu: u32,
    pub gpu_count: u32,
}

/// The pool's inventory, built once per change of the nodes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Layout {
    /// Every node's GPUs in node order, `index` numbered across the pool,
    /// `node` the node's slot, `group` unique across the pool.
    pub gpus: Vec<Gpu>,
    pub nodes: Vec<NodeRoom>,
    slots: HashMap<String, usize>,
}

/// One node to lay out: its name, CPUs, memory, whether it takes new
/// jobs, and its GPUs as it numbers them.
pub struct Member<'a> {
    pub name: &'a str,
    pub cpus: u32,
    pub mem_mb: u64,
    pub open: bool,
    pub gpus: &'a [Gpu],
}

impl Layout {
    pub fn new<'a>(members: impl IntoIterator<Item = Member<'a>>) -> Layout {
        let mut layout = Layout::default();
        let mut group_base = 0;
        for (slot, m) in members.into_iter().enumerate() {
            let first_gpu = layout.gpus.len() as u32;
            let mut next_group = group_base;
            for gpu in m.gpus {
                next_group = next_group.max(group_base + gpu.group + 1);
                layout.gpus.push(Gpu {
                    index: first_gpu + gpu.index,
                    node: slot as u32,
                    group: group_base + gpu.group,
                    ..gpu.clone()
                });
            }
            group_base = next_group;
            layout.slots.insert(m.name.to_string(), slot);
            layout.nodes.push(NodeRoom {
                name: m.name.to_string(),
                cpus: m.cpus,
                mem_mb: m.mem_mb,
                open: m.open,
                first_gpu,
                gpu_count: m.gpus.len() as u32,
            });
        }
        layout
    }

    /// One server with `gpus` (numbered 0..n), taking new jobs.
    pub fn single(name: &str, cpus: u32, mem_mb: u64, gpus: &[Gpu]) -> Layout {
        Layout::new([Member {
            name,
            cpus,
            mem_mb,
            open: true,
            gpus,
        }])
    }

    pub fn slot(&self, name: &str) -> Option<usize> {
        self.slots.get(name).copied()
    }

    /// The slot of a job that holds or claims resources: its node, or
    /// the first node for a record from before nodes were recorded.
    pub fn slot_of(&self, job: &Job) -> usize {
        job.node.as_deref().and_then(|n| self.slot(n)).unwrap_or(0)
    }

    /// Whether pool numbers are the node's own: one node, numbered from 0.
    pub fn is_single(&self) -> bool {
        self.nodes.len() <= 1
    }

    /// `job` with its allocation and claim in pool numbers (each node's
    /// share of a job on several nodes from that node's first GPU).
    pub fn to_pool(&self, job: &Job) -> Job {
        let first_of = |name: Option<&str>| {
            let slot = name.and_then(|n| self.slot(n)).unwrap_or(0);
            self.nodes.get(slot).map_or(0, |n| n.first_gpu)
        };
        let mut copy = job.clone();
        let first = first_of(job.node.as_deref());
        for g in copy.claim.iter_mut() {
            *g += first;
        }
        if job.peers.is_empty() {
            for g in copy.gpus_alloc.iter_mut() {
                *g += first;
            }
            return copy;
        }
        copy.gpus_alloc = job
            .gpus_by_node()
            .into_iter()
            .flat_map(|(name, gpus)| {
                let first = first_of(Some(name));
                gpus.iter().map(move |g| g + first)
            })
            .collect();
        copy
    }

    /// Pool GPU numbers (all on one node) as that node's name and its own
    /// numbers.
    pub fn to_node(&self, slot: usize, gpus: &[u32]) -> (String, Vec<u32>) {
        let node = &self.nodes[slot];
        let local = gpus.iter().map(|g| g - node.first_gpu).collect();
        (node.name.clone(), local)
    }

    /// Pool GPU numbers on the nodes of `slots` as each node's name and
    /// its own numbers, in the order of `slots`.
    pub fn to_nodes(&self, slots: &[usize], gpus: &[u32]) -> Vec<(String, Vec<u32>)> {
        slots
            .iter()
            .map(|&slot| {
                let node = &self.nodes[slot];
                let end = node.first_gpu + node.gpu_count;
                let mine: Vec<u32> = gpus
                    .iter()
                    .filter(|&&g| g >= node.first_gpu && g < end)
                    .copied()
                    .collect();
                self.to_node(slot, &mine)
            })
            .collect()
    }

    /// The GPUs of one node, as it numbers them.
    pub fn node_gpus(&self, slot: usize) -> &[Gpu] {
        let node = &self.nodes[slot];
        let first = node.first_gpu as usize;
        &self.gpus[first..first + node.gpu_count as usize]
    }
}

/// Whether `job` may run on `node`: `--nodelist` names it (or nothing),
/// and `--exclude` does not.
pub fn allows(job: &Job, node: &str) -> bool {
    (job.nodelist.is_empty() || job.nodelist.iter().any(|n| n == node))
        && !job.exclude.iter().any(|n| n == node)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(n: u32, group_size: u32) -> Vec<Gpu> {
        (0..n)
            .map(|i| Gpu {
                index: i,
                gpu_type: "a100".into(),
                group: i / group_size,
                ..Gpu::default()
            })
            .collect()
    }

    #[test]
    fn nodes_are_numbered_across_the_pool_and_back() {
        let (a, b) = (gpus(4, 2), gpus(2, 2));
        let layout = Layout::new([
            Member {
                name: "gpu01",
                cpus: 32,
                mem_mb: 1 << 18,
                open: true,
                gpus: &a,
            },
            Member {
                name: "gpu02",
                cpus: 16,
                mem_mb: 1 << 17,
                open: true,
                gpus: &b,
            },
        ]);
        let indices: Vec<(u32, u32, u32)> = layout
            .gpus
            .iter()
            .map(|g| (g.index, g.node, g.group))
            .collect();
        assert_eq!(
            indices,
            vec![
                (0, 0, 0),
                (1, 0, 0),
                (2, 0, 1),
                (3, 0, 1),
                (4, 1, 2),
                (5, 1, 2)
            ]
        );
        let mut job = crate::model::job::example_job(7);
        job.node = Some("gpu02".into());
        job.gpus_alloc = vec![1];
        assert_eq!(layout.to_pool(&job).gpus_alloc, vec![5]);
        assert_eq!(
            layout.to_node(1, &[4, 5]),
            ("gpu02".to_string(), vec![0, 1])
        );
        assert_eq!(layout.node_gpus(1).len(), 2);
        assert!(!layout.is_single());
    }

    #[test]
    fn nodelist_and_exclude_choose_the_nodes() {
        let mut job = crate::model::job::example_job(1);
        assert!(allows(&job, "gpu01"));
        job.nodelist = vec!["gpu02".into()];
        assert!(!allows(&job, "gpu01") && allows(&job, "gpu02"));
        job.nodelist.clear();
        job.exclude = vec!["gpu02".into()];
        assert!(allows(&job, "gpu01") && !allows(&job, "gpu02"));
    }
}
