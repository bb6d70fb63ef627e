//! Administering the nodes: drain one (it runs what it runs, takes
//! nothing new) or put it back in service. A drain is recorded, so it
//! outlives a restart, and audited.

use crate::db;
use crate::proto::Reply;
use crate::report::node::Drain;

use super::control::{admins_only, Requester};
use super::effects::{PoolRow, Row};
use super::error::DaemonError;
use super::state::Daemon;

impl Daemon {
    /// The refusal of a command that names a node the pool lacks.
    pub(super) fn unknown_node(&self, name: &str) -> Reply {
        let known: Vec<&str> = self.nodes.iter().map(|n| n.name()).collect();
        Reply::Rejected {
            error: format!("unknown node '{name}' (nodes: {})", known.join(", ")),
        }
    }

    /// Drains node `name` (`reason` given) or resumes it (admins).
    pub(super) fn drain_node(
        &mut self,
        name: &str,
        reason: Option<String>,
        who: &Requester,
        now: i64,
    ) -> Result<Reply, DaemonError> {
        let verb = if reason.is_some() { "drain" } else { "resume" };
        if let Some(refused) = admins_only(who, &format!("{verb} nodes")) {
            return Ok(refused);
        }
        if self.nodes.named(name).is_none() {
            return Ok(self.unknown_node(name));
        }
        let drain = reason.map(|reason| Drain {
            reason,
            by: who.user.to_string(),
            since: now,
        });
        let was = db::node_drained(self.tx()?, name)?;
        self.write(Row::Pool(PoolRow::NodeDrain {
            name: name.to_string(),
            drain: drain.clone(),
            time: now,
        }))?;
        let message = match &drain {
            Some(d) => {
                let running = self
                    .core
                    .jobs
                    .all()
                    .filter(|j| j.state.holds_gpus() && j.node.as_deref() == Some(name))
                    .count();
                self.audit(
                    now,
                    who.user,
                    "drain-node",
                    None,
                    &format!("{name}: {}", d.reason),
                )?;
                if running == 0 {
                    format!("node {name} drained: {}", d.reason)
                } else {
                    format!(
                        "node {name} draining: {}; {running} job(s) run on there until they end",
                        d.reason
                    )
                }
            }
            None if was => {
                self.audit(now, who.user, "resume-node", None, name)?;
                format!("node {name} back in service")
            }
            None => format!("node {name} was not drained"),
        };
        tracing::info!(target: "ysched::daemon", "{message} (by {})", who.user);
        self.reschedule = true;
        self.snapshot = None;
        Ok(Reply::Control {
            outcomes: Vec::new(),
            message: Some(message),
        })
    }

    /// At start: the drains recorded for the nodes there are.
    /// The drained GPUs as recorded; those recorded before the pool
    /// (node '') are the controller's own server's.
    pub(super) fn load_gpu_drains(&mut self) -> Result<(), DaemonError> {
        let local = self.core.config.node_name.clone();
        self.core.policy.drains = db::drains(&self.store.db)?
            .into_iter()
            .map(|((node, gpu), d)| {
                let node = if node.is_empty() { local.clone() } else { node };
                ((node, gpu), d)
            })
            .collect();
        Ok(())
    }

    /// The drained GPUs of the nodes in the pool now, in pool numbers
    /// (what the scheduling pass and the metrics count).
    pub(super) fn drained_pool_gpus(&self) -> Vec<u32> {
        let layout = self.nodes.layout();
        self.core
            .policy
            .drains
            .keys()
            .filter_map(|(node, gpu)| {
                let room = &layout.nodes[layout.slot(node)?];
                (*gpu < room.gpu_count).then_some(room.first_gpu + gpu)
            })
            .collect()
    }

    pub(super) fn load_node_drains(&mut self) -> Result<(), DaemonError> {
        // As recorded, and only so: a drain whose commit failed is none.
        let names: Vec<String> = self.nodes.iter().map(|n| n.name().to_string()).collect();
        for name in names {
            self.nodes.change(&name, |node| node.drain = None);
        }
        for (name, drain) in db::node_drains(&self.store.db)? {
            tracing::warn!(
                target: "ysched::daemon",
                "node {name} is drained since {} by {}: {}",
                crate::model::units::format_timestamp(drain.since),
                drain.by,
                drain.reason
            );
            self.nodes.change(&name, |node| node.drain = Some(drain));
        }
        Ok(())
    }
}
