//! How a job spreads over servers and tasks, as Slurm scripts ask for it
//! (`-N/--nodes`, `-n/--ntasks`, `--ntasks-per-node`, `--gpus-per-task`),
//! and how its tasks fall on the nodes it gets. The batch script is one
//! process on the first node; the tasks are what `srun` starts.

use serde::{Deserialize, Serialize};

/// The nodes and tasks a job asks for. GPUs, CPUs and memory in the job's
/// request are per node, as `--gres` and `--mem` are in Slurm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TaskLayout {
    /// `--nodes=MIN[-MAX]`: it starts on at least `nodes_min` nodes, and
    /// on up to `nodes_max` when they are free.
    pub nodes_min: u32,
    pub nodes_max: u32,
    /// `--ntasks`: tasks in all (default: `--ntasks-per-node` per node,
    /// else one per node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ntasks: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ntasks_per_node: Option<u32>,
    /// `--gpus-per-task`: each task sees only its own GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_task: Option<u32>,
}

impl Default for TaskLayout {
    fn default() -> TaskLayout {
        TaskLayout {
            nodes_min: 1,
            nodes_max: 1,
            ntasks: None,
            ntasks_per_node: None,
            gpus_per_task: None,
        }
    }
}

/// Why a layout cannot be: the options that disagree, with their values.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("--nodes={min}-{max}: the minimum is above the maximum")]
    Range { min: u32, max: u32 },
    #[error("--nodes must be at least 1")]
    NoNodes,
    #[error("--ntasks={ntasks} is fewer than --nodes={nodes}: every node needs a task")]
    FewerTasksThanNodes { ntasks: u32, nodes: u32 },
    #[error("--ntasks={ntasks} does not fit {nodes} node(s) × --ntasks-per-node={per_node}")]
    TooManyTasks {
        ntasks: u32,
        nodes: u32,
        per_node: u32,
    },
    #[error("--ntasks-per-node and --gpus-per-task must be at least 1")]
    Zero,
}

impl TaskLayout {
    /// Whether the job may span more than one node.
    pub fn is_multi_node(&self) -> bool {
        self.nodes_max > 1
    }

    /// The options agree with each other.
    pub fn check(&self) -> Result<(), LayoutError> {
        if self.nodes_min == 0 {
            return Err(LayoutError::NoNodes);
        }
        if self.nodes_min > self.nodes_max {
            return Err(LayoutError::Range {
                min: self.nodes_min,
                max: self.nodes_max,
            });
        }
        if self.ntasks_per_node == Some(0) || self.gpus_per_task == Some(0) {
            return Err(LayoutError::Zero);
        }
        if let Some(ntasks) = self.ntasks {
            if ntasks < self.nodes_min {
                return Err(LayoutError::FewerTasksThanNodes {
                    ntasks,
                    nodes: self.nodes_min,
                });
            }
            if let Some(per_node) = self.ntasks_per_node {
                if u64::from(ntasks) > u64::from(per_node) * u64::from(self.nodes_max) {
                    return Err(LayoutError::TooManyTasks {
                        ntasks,
                        nodes: self.nodes_max,
                        per_node,
                    });
                }
            }
        }
        Ok(())
    }

    /// The most tasks any node gets on `nodes` nodes.
    pub fn max_tasks_per_node(&self, nodes: u32) -> u32 {
        self.tasks_per_node(nodes).into_iter().max().unwrap_or(1)
    }

    /// Tasks on each of `nodes` nodes, in node order: `--ntasks` spread
    /// as evenly as it goes, the first nodes taking one more (Slurm's
    /// block distribution); else `--ntasks-per-node` each; else one each.
    pub fn tasks_per_node(&self, nodes: u32) -> Vec<u32> {
        let nodes = nodes.max(1);
        match (self.ntasks, self.ntasks_per_node) {
            (Some(ntasks), _) => {
                let (base, extra) = (ntasks / nodes, ntasks % nodes);
                (0..nodes).map(|i| base + u32::from(i < extra)).collect()
            }
            (None, Some(per_node)) => vec![per_node; nodes as usize],
            (None, None) => vec![1; nodes as usize],
        }
    }

    /// `--nodes` as Slurm prints it: `3`, or `2-4`.
    pub fn nodes_text(&self) -> String {
        if self.nodes_min == self.nodes_max {
            self.nodes_min.to_string()
        } else {
            format!("{}-{}", self.nodes_min, self.nodes_max)
        }
    }
}

/// One node's part of a running job, as its processes there see it: the
/// job's nodes, which of them this is, and the tasks each runs (what
/// `SLURM_JOB_NODELIST`, `SLURM_NODEID` and `SLURM_TASKS_PER_NODE` say).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePart {
    /// The job's nodes, the batch node first.
    pub nodes: Vec<String>,
    /// This node's place among them.
    pub index: u32,
    pub tasks_per_node: Vec<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_task: Option<u32>,
    /// Where each node is reached from the others (an address, or its
    /// name), in the order of `nodes`.
    #[serde(default)]
    pub addresses: Vec<String>,
    /// The secret every part of this run of the job shares: srun and the
    /// task servers prove it to each other.
    #[serde(default)]
    pub step_key: String,
    /// The port each node's task server listens on, in the order of
    /// `nodes`, and `MASTER_PORT`: chosen by the controller at random for
    /// this run (`[pool] step_ports`), told to the job alone.
    #[serde(default)]
    pub ports: StepPorts,
    /// A part of an interactive allocation: no script runs on any of
    /// its nodes, the first included; each runs a task server.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interactive: bool,
}

/// A run's ports on its nodes (see [`NodePart::ports`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepPorts {
    pub task_servers: Vec<u16>,
    pub master: u16,
    /// Where a task server listens when its own port is taken (another
    /// program of its node holds it), in order; srun tries them after.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spare: Vec<u16>,
}

impl NodePart {
    /// A job of one task on node `name`.
    pub fn single(name: &str) -> NodePart {
        NodePart {
            nodes: vec![name.to_string()],
            index: 0,
            tasks_per_node: vec![1],
            gpus_per_task: None,
            addresses: Vec::new(),
            step_key: String::new(),
            ports: StepPorts::default(),
            interactive: false,
        }
    }

    /// Whether the batch script runs here (not a peer's holding part).
    pub fn is_batch(&self) -> bool {
        self.index == 0
    }

    /// Whether this part runs a task server for `srun` instead of a
    /// script: a peer's part, or any part of an interactive allocation.
    pub fn serves_tasks(&self) -> bool {
        !self.is_batch() || self.interactive
    }

    /// The most tasks any node runs (at least 1).
    pub fn most_tasks(&self) -> u32 {
        self.tasks_per_node
            .iter()
            .copied()
            .max()
            .unwrap_or(1)
            .max(1)
    }

    pub fn task_count(&self) -> u32 {
        self.tasks_per_node.iter().sum()
    }
}

/// Task counts in Slurm's `SLURM_TASKS_PER_NODE` form: runs of one count
/// as `N(xK)`, joined by commas (`2(x3),1`).
pub fn tasks_per_node_text(counts: &[u32]) -> String {
    let mut runs: Vec<(u32, usize)> = Vec::new();
    for &c in counts {
        match runs.last_mut() {
            Some((n, k)) if *n == c => *k += 1,
            _ => runs.push((c, 1)),
        }
    }
    runs.iter()
        .map(|&(n, k)| {
            if k == 1 {
                n.to_string()
            } else {
                format!("{n}(x{k})")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `--nodes`: `N` or `MIN-MAX`.
pub fn parse_nodes(text: &str) -> Option<(u32, u32)> {
    let t = text.trim();
    let number = |s: &str| s.trim().parse::<u32>().ok();
    match t.split_once('-') {
        // `-3`, as Slurm reads it: no minimum given, so one node.
        Some((a, b)) if a.trim().is_empty() => Some((1, number(b)?)),
        Some((a, b)) => Some((number(a)?, number(b)?)),
        None => number(t).map(|n| (n, n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(min: u32, max: u32, ntasks: Option<u32>, per_node: Option<u32>) -> TaskLayout {
        TaskLayout {
            nodes_min: min,
            nodes_max: max,
            ntasks,
            ntasks_per_node: per_node,
            gpus_per_task: None,
        }
    }

    #[test]
    fn a_node_range_without_a_minimum_starts_at_one() {
        assert_eq!(parse_nodes("-3"), Some((1, 3)));
        assert_eq!(parse_nodes("2-3"), Some((2, 3)));
        assert_eq!(parse_nodes("4"), Some((4, 4)));
        assert_eq!(parse_nodes("-"), None);
        assert_eq!(parse_nodes("3-"), None);
    }

    #[test]
    fn tasks_fall_on_nodes_as_slurm_puts_them() {
        assert_eq!(layout(2, 2, Some(5), None).tasks_per_node(2), vec![3, 2]);
        assert_eq!(layout(3, 3, None, Some(4)).tasks_per_node(3), vec![4, 4, 4]);
        assert_eq!(layout(3, 3, None, None).tasks_per_node(3), vec![1, 1, 1]);
        assert_eq!(tasks_per_node_text(&[2, 2, 2, 1]), "2(x3),1");
        assert_eq!(tasks_per_node_text(&[8]), "8");
        assert_eq!(tasks_per_node_text(&[1, 2]), "1,2");
    }

    #[test]
    fn inconsistent_layouts_are_named() {
        assert!(layout(3, 3, None, None).check().is_ok());
        assert_eq!(
            layout(3, 3, Some(2), None).check().unwrap_err().to_string(),
            "--ntasks=2 is fewer than --nodes=3: every node needs a task"
        );
        assert_eq!(
            layout(2, 2, Some(9), Some(4))
                .check()
                .unwrap_err()
                .to_string(),
            "--ntasks=9 does not fit 2 node(s) × --ntasks-per-node=4"
        );
        assert!(layout(3, 2, None, None).check().is_err());
        assert!(layout(0, 0, None, None).check().is_err());
        assert_eq!(parse_nodes("2-4"), Some((2, 4)));
        assert_eq!(parse_nodes(" 3 "), Some((3, 3)));
        assert_eq!(parse_nodes("x"), None);
        assert_eq!(layout(2, 4, None, None).nodes_text(), "2-4");
    }
}
