//! What the controller holds of the pool between turns: its server and
//! authority, this run's epoch, the lease, the connections' nodes, and
//! what the agents sent since the last turn.

use std::collections::HashMap;
use std::time::Duration;

use crate::net::pki::Authority;
use crate::net::server::{ConnId, ServerEvent, ServerHandle};

/// The controller's end of the pool.
pub(super) struct PoolState {
    pub(super) server: ServerHandle,
    pub(super) authority: Authority,
    /// This run of the controller.
    pub(super) epoch: u64,
    pub(super) lease: Duration,
    /// What the agents sent since the last turn.
    pub(super) events: Vec<ServerEvent>,
    /// The node each certified connection speaks for.
    pub(super) conns: HashMap<ConnId, String>,
    /// The address each node's agent connects from: where the other
    /// nodes of a job reach it (`MASTER_ADDR`, srun's task servers).
    pub(super) addresses: HashMap<String, std::net::IpAddr>,
    /// `HOST:PORT` for the join line.
    pub(super) advertise: String,
}
