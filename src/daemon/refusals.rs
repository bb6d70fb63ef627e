//! Refusals of strangers, recorded (audited and logged) a few a minute per
//! source: a stranger who tries again and again learns the same answer
//! each time, but cannot grow the audit table and the log without bound.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Refusals from one source recorded a minute.
pub(super) const REFUSALS_RECORDED: u32 = 5;
/// Sources remembered at most; beyond, those of past minutes go.
const SOURCES_KEPT: usize = 4_096;

/// Refusals per source in the current minute.
pub(super) struct RefusalLimit<K> {
    by_source: HashMap<K, (Instant, u32)>,
}

impl<K> Default for RefusalLimit<K> {
    fn default() -> Self {
        RefusalLimit {
            by_source: HashMap::new(),
        }
    }
}

/// Whether a refusal is recorded, and how many before it were not.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Recorded {
    Yes { dropped: u32 },
    No,
}

impl<K: Hash + Eq> RefusalLimit<K> {
    /// Whether a refusal from `source` at `now` is recorded: the first
    /// few each minute are; the first of a later minute says how many of
    /// the minute before were not.
    pub(super) fn record(&mut self, source: K, now: Instant) -> Recorded {
        let minute = Duration::from_secs(60);
        if self.by_source.len() >= SOURCES_KEPT {
            self.by_source
                .retain(|_, (since, _)| now.duration_since(*since) < minute);
        }
        let (since, count) = self.by_source.entry(source).or_insert((now, 0));
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
