//! What the controller holds of the pool between turns: its server and
//! authority, this run's epoch, the lease, the connections' nodes, and
//! what the agents sent since the last turn.

use std::collections::HashMap;
use std::time::Duration;

use crate::net::pki::Authority;
use crate::net::server::{ConnId, ServerEvent, ServerHandle};

use super::node_time::lease_secs;

/// The controller's end of the pool.
pub(super) struct PoolState {
    pub(super) server: ServerHandle,
    pub(super) authority: Authority,
    /// This run of the controller.
    pub(super) epoch: u64,
    pub(super) lease: Duration,
    /// What the agents sent since the last turn.
    pub(super) events: Vec<ServerEvent>,
    /// What this turn took of them, until it is committed: a turn whose
    /// commit fails takes them again (a run's end a node reported is
    /// not told again until the node reconnects).
    pub(super) taken: Vec<ServerEvent>,
    /// The node each certified connection speaks for.
    pub(super) conns: HashMap<ConnId, String>,
    /// The address each node's agent connects from: where the other
    /// nodes of a job reach it (`MASTER_ADDR`, srun's task servers).
    pub(super) addresses: HashMap<String, std::net::IpAddr>,
    /// `HOST:PORT` for the join line.
    pub(super) advertise: String,
    /// Refused joins recorded per address, so that a stranger who tries
    /// again and again cannot grow the audit table and the log.
    pub(super) join_refusals: JoinRefusals,
    /// When the leases were last looked at (this host's monotonic clock):
    /// a gap of more than half a lease means the controller itself did
    /// not run (stopped, or stalled), which is no node's fault.
    pub(super) leases_checked: std::time::Instant,
    /// Each node's clock, as its messages show it.
    pub(super) clocks: HashMap<String, super::node_time::NodeClock>,
    /// The freezes the nodes reported, and what was credited of them.
    pub(super) freezes: super::node_time::Freezes,
    /// The same, as of the last commit: a turn whose commit fails goes
    /// back to it, as the jobs' records do, so that the credit its
    /// reports gave is given again by the next report (each report says
    /// a freeze's whole length, and only what that grew by is added).
    pub(super) freezes_committed: super::node_time::Freezes,
}

impl PoolState {
    /// The pool's state at a controller's start: `server` its nodes'
    /// connections, `alive_before` the last moment this controller's
    /// records show it alive and `good` when each node was last heard in
    /// good standing, as recorded (what nodes say they froze meanwhile is
    /// bounded by them), `instant` now on the clock leases are timed on.
    pub(super) fn new(
        (server, authority): (ServerHandle, Authority),
        (epoch, lease): (u64, Duration),
        advertise: String,
        (alive_before, good): (i64, HashMap<String, i64>),
        instant: std::time::Instant,
    ) -> PoolState {
        PoolState {
            server,
            authority,
            epoch,
            lease,
            events: Vec::new(),
            taken: Vec::new(),
            conns: HashMap::new(),
            addresses: HashMap::new(),
            advertise,
            join_refusals: Default::default(),
            leases_checked: instant,
            clocks: HashMap::new(),
            freezes: super::node_time::Freezes::new(alive_before, good.clone(), lease_secs(lease)),
            freezes_committed: super::node_time::Freezes::new(
                alive_before,
                good,
                lease_secs(lease),
            ),
        }
    }
}

/// Refused joins per address: recorded a few a minute each.
pub(super) type JoinRefusals = super::refusals::RefusalLimit<std::net::IpAddr>;

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::refusals::{Recorded, REFUSALS_RECORDED};

    #[test]
    fn refused_joins_are_recorded_a_few_a_minute_per_address() {
        let mut refusals = JoinRefusals::default();
        let (a, b): (std::net::IpAddr, std::net::IpAddr) =
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t = std::time::Instant::now();
        for _ in 0..REFUSALS_RECORDED {
            assert_eq!(refusals.record(a, t), Recorded::Yes { dropped: 0 });
        }
        assert_eq!(refusals.record(a, t), Recorded::No);
        assert_eq!(refusals.record(a, t), Recorded::No);
        assert_eq!(refusals.record(b, t), Recorded::Yes { dropped: 0 });
        let later = t + Duration::from_secs(61);
        assert_eq!(refusals.record(a, later), Recorded::Yes { dropped: 2 });
    }
}
