//! The servers the daemon runs jobs on, each behind its executor: the
//! controller's own (a `LocalExecutor`), and in a pool the nodes that
//! joined it. Which of them take new jobs (not drained, not down), the
//! CPUs and memory each hands out, and the pool's layout that the
//! scheduling pass sees, rebuilt whenever one of those changes.

use crate::exec::executor::{Executor, NodeFacts};
use crate::model::gpu::Gpu;
use crate::model::job::Job;
use crate::sched::admission::Capacity;
use crate::sched::pool::{Layout, Member};

/// One server and what the daemon knows of it.
pub(super) struct Node {
    pub(super) executor: Box<dyn Executor>,
    /// What the scheduler may hand out there: its CPUs and memory, or
    /// what its config says.
    pub(super) cpus: u32,
    pub(super) mem_mb: u64,
    /// Drained by an administrator: runs what it runs, takes nothing new.
    pub(super) drain: Option<crate::report::node::Drain>,
    /// Not answering (or not connected): takes nothing new.
    pub(super) down: Option<String>,
    /// For a node of the pool: its agent's link, and when it was heard.
    pub(super) remote: Option<RemoteNode>,
    /// Its GPUs at the last reading, in its own numbers.
    pub(super) samples: Option<Vec<crate::model::gpu::Sample>>,
}

/// A node of the pool, as the controller follows it.
pub(super) struct RemoteNode {
    pub(super) link: crate::net::remote::Link,
    /// When its agent was last heard (this host's monotonic clock); until
    /// then, since the controller started: each node gets a full lease to
    /// reconnect after a restart.
    pub(super) last_heard: std::time::Instant,
    /// When (the controller's clock) the node sent the last heartbeat,
    /// or hello, the controller answered: its lease runs a lease from
    /// then, and when it runs out the node freezes its runs.
    pub(super) lease_from: i64,
    /// Whether its jobs were already ended for its silence.
    pub(super) lost: bool,
    /// Whether it has been heard since the controller itself was away
    /// (`false` until then), or since its lease ran out unanswered: its
    /// jobs' clocks wait for what it says.
    pub(super) heard_since_away: bool,
    /// When its lease ran out before the controller could answer it (the
    /// controller's clock): it froze its runs then, and only a report it
    /// sent since says for how long. `None` once one has come.
    pub(super) lapsed_at: Option<i64>,
}

impl Node {
    pub(super) fn new(executor: Box<dyn Executor>) -> Node {
        let facts = executor.node();
        let (cpus, mem_mb) = (facts.cpus, facts.mem_mb);
        Node {
            executor,
            cpus,
            mem_mb,
            drain: None,
            down: None,
            remote: None,
            samples: None,
        }
    }

    pub(super) fn facts(&self) -> &NodeFacts {
        self.executor.node()
    }

    pub(super) fn name(&self) -> &str {
        &self.facts().name
    }

    /// Whether new jobs may start here.
    pub(super) fn open(&self) -> bool {
        self.drain.is_none() && self.down.is_none()
    }

    pub(super) fn capacity(&self) -> Capacity<'_> {
        Capacity {
            name: &self.facts().name,
            inventory: &self.facts().inventory,
            cpus: self.cpus,
            mem_mb: self.mem_mb,
            tmp_mb: self.facts().tmp_mb,
        }
    }
}

/// The nodes, in the order the pass numbers them.
pub(super) struct Nodes {
    nodes: Vec<Node>,
    /// The controller's own server's name, if it runs jobs.
    local: Option<String>,
    layout: Layout,
}

impl Nodes {
    /// `nodes`, the first the controller's own server.
    pub(super) fn new(nodes: Vec<Node>) -> Nodes {
        let mut all = Nodes {
            local: nodes.first().map(|n| n.name().to_string()),
            nodes,
            layout: Layout::default(),
        };
        all.relayout();
        all
    }

    /// A pure controller: no server of its own; nodes join.
    pub(super) fn none() -> Nodes {
        Nodes::new(Vec::new())
    }

    /// One server: the controller's own.
    pub(super) fn single(executor: Box<dyn Executor>) -> Nodes {
        Nodes::new(vec![Node::new(executor)])
    }

    /// Builds the layout again: after a node came, went, or changed its
    /// CPUs, memory, drain or reachability.
    pub(super) fn relayout(&mut self) {
        self.layout = Layout::new(self.nodes.iter().map(|n| Member {
            name: n.name(),
            cpus: n.cpus,
            mem_mb: n.mem_mb,
            open: n.open(),
            gpus: &n.facts().inventory.gpus,
        }));
    }

    pub(super) fn layout(&self) -> &Layout {
        &self.layout
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter()
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Node> {
        self.nodes.iter_mut()
    }

    /// Adds a node (a pool node that joined), in name order after the
    /// controller's own; the layout is built again.
    pub(super) fn add(&mut self, node: Node) {
        let local = self.local.as_deref();
        let at = self
            .nodes
            .iter()
            .position(|n| Some(n.name()) != local && n.name() > node.name())
            .unwrap_or(self.nodes.len());
        self.nodes.insert(at, node);
        self.relayout();
    }

    /// Takes node `name` out of the pool.
    pub(super) fn remove(&mut self, name: &str) -> Option<Node> {
        let i = self.nodes.iter().position(|n| n.name() == name)?;
        let node = self.nodes.remove(i);
        self.relayout();
        Some(node)
    }

    pub(super) fn named(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name() == name)
    }

    /// A node to change; the layout is built again after `change`.
    pub(super) fn change<T>(
        &mut self,
        name: &str,
        change: impl FnOnce(&mut Node) -> T,
    ) -> Option<T> {
        let node = self.nodes.iter_mut().find(|n| n.name() == name)?;
        let result = change(node);
        self.relayout();
        Some(result)
    }

    /// The controller's own server, if it runs jobs (a pure controller
    /// has none, and so no local executor).
    pub(super) fn local(&self) -> Option<&Node> {
        self.named(self.local.as_deref()?)
    }

    /// The node `name`, or the controller's own for a record from before
    /// nodes were recorded (`None`).
    pub(super) fn named_or_local(&self, name: Option<&str>) -> Option<&Node> {
        match name {
            Some(name) => self.named(name),
            None => self.local(),
        }
    }

    /// The node a job runs (or ran, or will run) on.
    pub(super) fn of(&self, job: &Job) -> Option<&Node> {
        self.named_or_local(job.node.as_deref())
    }

    /// The node `name` (`None`: the controller's own), to use its executor.
    pub(super) fn named_or_local_mut(&mut self, name: Option<&str>) -> Option<&mut Node> {
        let name = name.map(str::to_string).or_else(|| self.local.clone())?;
        self.nodes.iter_mut().find(|n| n.name() == name)
    }

    /// The GPUs of a job's node, as that node numbers them (where the
    /// job's allocation points); none when the node is gone.
    pub(super) fn gpus_of(&self, job: &Job) -> &[Gpu] {
        self.of(job)
            .map_or(&[], |n| n.facts().inventory.gpus.as_slice())
    }

    /// Every node's capacity, for admission.
    pub(super) fn capacities(&self) -> Vec<Capacity<'_>> {
        self.nodes.iter().map(Node::capacity).collect()
    }

    /// All GPUs of the pool (as the pass numbers them).
    pub(super) fn all_gpus(&self) -> &[Gpu] {
        &self.layout.gpus
    }
}
