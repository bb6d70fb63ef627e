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
    /// Refused joins recorded per address, so that a stranger who tries
    /// again and again cannot grow the audit table and the log.
    pub(super) join_refusals: JoinRefusals,
}

/// Refused joins per address in the current minute.
#[derive(Default)]
pub(super) struct JoinRefusals {
    by_address: HashMap<std::net::IpAddr, (std::time::Instant, u32)>,
}

/// Refused joins from one address recorded (audited and logged) a minute.
const REFUSALS_RECORDED: u32 = 5;
/// Addresses remembered at most; beyond, those of past minutes go.
const ADDRESSES_KEPT: usize = 4_096;

impl JoinRefusals {
    /// Whether a refusal from `address` at `now` is recorded: the first
    /// few each minute are; then one more says how many went unrecorded.
    pub(super) fn record(
        &mut self,
        address: std::net::IpAddr,
        now: std::time::Instant,
    ) -> Recorded {
        let minute = Duration::from_secs(60);
        if self.by_address.len() >= ADDRESSES_KEPT {
            self.by_address
                .retain(|_, (since, _)| now.duration_since(*since) < minute);
        }
        let (since, count) = self.by_address.entry(address).or_insert((now, 0));
        if now.duration_since(*since) >= minute {
            let dropped = count.saturating_sub(REFUSALS_RECORDED);
            *since = now;
            *count = 1;
            return Recorded::Yes { dropped };
        }
        *count += 1;
        if *count <= REFUSALS_RECORDED {
            Recorded::Yes { dropped: 0 }
        } else {
            Recorded::No
        }
    }
}

/// Whether a refusal is recorded, and how many before it were not.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Recorded {
    Yes { dropped: u32 },
    No,
}

#[cfg(test)]
mod tests {
    use super::*;

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
