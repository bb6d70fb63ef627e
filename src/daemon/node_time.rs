//! A node's figures are facts about the node, never durations to add:
//! the controller reads a node's clock as the node's, and computes how
//! long a run stood frozen itself, from its own record of when it last
//! heard the node in good standing.
//!
//! - **Clocks.** Every message a node sends that carries its clock (its
//!   hello, a run's end, each heartbeat) gives `received - sent`: the
//!   difference between the two clocks plus the time the message took,
//!   and the time it sat unread while the controller was stopped. The
//!   smallest of the last few is the difference itself; a node's time
//!   (a run's end) is moved by it. So a run that ended while the
//!   controller was stopped keeps its end, where the time its report sat
//!   unread used to be counted as skew.
//! - **Frozen time.** A node reports, while it holds a run frozen for its
//!   lost lease, how long it has been frozen, in every heartbeat until
//!   the thaw reaches it. The controller credits one freeze once: its
//!   total is the node's figure bounded by the controller's own measure
//!   (from the last report in which the node was unfenced with nothing
//!   frozen to this one, each placed when the node sent it) and by the
//!   run's elapsed time, and each report adds only what that total grew
//!   by. Credit stops the time limit and the charge for that time.

use std::collections::{HashMap, VecDeque};

use crate::net::message::RunKey;

/// How many of a node's latest clock readings are kept.
const CLOCK_SAMPLES: usize = 16;

/// A node's clock readings: `received - sent`, newest last.
#[derive(Debug, Default)]
pub(super) struct NodeClock {
    samples: VecDeque<i64>,
}

impl NodeClock {
    /// A message sent at `sent` by the node's clock came at `received`.
    pub(super) fn observe(&mut self, sent: i64, received: i64) {
        if sent <= 0 {
            // An agent that sends no clock.
            return;
        }
        if self.samples.len() == CLOCK_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back(received.saturating_sub(sent));
    }

    /// The controller's clock less the node's (none known: 0).
    pub(super) fn skew(&self) -> i64 {
        self.samples.iter().copied().min().unwrap_or(0)
    }
}

/// What the controller has credited of the freezes it was told of.
#[derive(Debug, Default, Clone)]
pub(super) struct Freezes {
    /// Per node: when it last said it was unfenced with nothing frozen
    /// (its clock, on the controller's).
    good_at: HashMap<String, i64>,
    /// Per node and run frozen now: seconds credited so far, and when the
    /// node was last in good standing before the freeze.
    credited: HashMap<(String, RunKey), Credit>,
    /// Before a node is heard in this run of the controller: the last
    /// moment the controller knew itself alive (it heard nothing after),
    /// for a node with no good standing on record.
    pub(super) alive_before: i64,
    /// Per node: the good standing last written to the records (what a
    /// restarted controller bounds the node's word by).
    recorded: HashMap<String, i64>,
}

/// How far a node's good standing may move before it is written again:
/// a bound that old only lets a freeze be claimed that much longer.
const RECORD_GOOD_EVERY: i64 = 30;

/// Seconds of a freeze credited to a run by one report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Credited {
    pub(super) run: RunKey,
    /// Added now.
    pub(super) added: u64,
    /// Of this freeze so far.
    pub(super) total: u64,
    /// Whether it is the freeze's first credit.
    pub(super) first: bool,
}

#[derive(Debug, Clone, Copy)]
struct Credit {
    secs: u64,
    since_good: i64,
    /// Whether the freeze was told of (`Credited::first` given).
    told: bool,
}

impl Freezes {
    /// At a start: `alive_before` the last moment the records show the
    /// controller alive, `recorded` each node's good standing on record.
    pub(super) fn new(alive_before: i64, recorded: HashMap<String, i64>) -> Freezes {
        Freezes {
            alive_before,
            good_at: recorded.clone(),
            recorded,
            ..Freezes::default()
        }
    }

    /// Node `node`'s good standing to write to the records, if it moved
    /// far enough since it last was.
    pub(super) fn good_to_record(&mut self, node: &str) -> Option<i64> {
        let good = *self.good_at.get(node)?;
        let written = self.recorded.get(node).copied();
        if written.is_some_and(|w| good < w + RECORD_GOOD_EVERY) {
            return None;
        }
        self.recorded.insert(node.to_string(), good);
        Some(good)
    }

    /// Node `node` reports, as it was at `sent` (its clock moved onto the
    /// controller's: a report read late, after the controller was
    /// stopped, is as old as it is), that it holds `frozen` (run, seconds
    /// by its own count) frozen, and whether it is fenced; the controller
    /// reads it at `now` and thaws what is still its own then, so each
    /// freeze lasts until `now` (the thaw's transit is within the
    /// second): the time the report waited unread is frozen time too.
    /// `elapsed` says how long each run had run by `now` (the
    /// controller's clock, since its start), and until when it can have
    /// stood frozen (`now`, or when it was told to stop, if earlier: a
    /// stop ends a frozen run, and a report read after it is no longer
    /// the run's freeze). What to credit each run now (nothing added left
    /// out).
    pub(super) fn report(
        &mut self,
        node: &str,
        (fenced, frozen): (bool, &[(RunKey, u64)]),
        (sent, now): (i64, i64),
        elapsed: impl Fn(RunKey) -> Option<(i64, i64)>,
    ) -> Vec<Credited> {
        // The wait is the difference of two whole-second clocks, each
        // rounded down, and the node's figure is rounded down too: their
        // sum can exceed the freeze by a second. Crediting a second less
        // of the wait keeps the credit within what was frozen (a frozen
        // second charged, never a worked one given away).
        let waited =
            |until: i64| until.min(now).saturating_sub(sent).saturating_sub(1).max(0) as u64;
        let good_at = *self
            .good_at
            .entry(node.to_string())
            .or_insert(self.alive_before);
        // A freeze no longer reported is over: the next is another.
        self.credited
            .retain(|(n, run), _| n != node || frozen.iter().any(|(r, _)| r == run));
        let mut credit = Vec::new();
        for &(run, reported) in frozen {
            let key = (node.to_string(), run);
            let entry = self.credited.entry(key).or_insert(Credit {
                secs: 0,
                since_good: good_at,
                told: false,
            });
            let Some((ran, until)) = elapsed(run) else {
                continue;
            };
            let bound = now.saturating_sub(entry.since_good).min(ran).max(0) as u64;
            let total = reported.saturating_add(waited(until)).min(bound);
            // A freeze is told of the first time it is heard of, even with
            // nothing of it credited yet: the job's history says it was
            // frozen.
            if total > entry.secs || !entry.told {
                credit.push(Credited {
                    run,
                    added: total - entry.secs,
                    total,
                    first: !entry.told,
                });
                entry.secs = total;
                entry.told = true;
            }
        }
        if !fenced && frozen.is_empty() {
            let good = self.good_at.entry(node.to_string()).or_insert(sent);
            *good = (*good).max(sent);
        }
        credit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(job: u64) -> RunKey {
        RunKey { job, restart: 0 }
    }

    #[test]
    fn the_skew_is_the_least_delay_seen() {
        let mut clock = NodeClock::default();
        assert_eq!(clock.skew(), 0);
        clock.observe(100, 103);
        clock.observe(200, 202);
        // Read 40 s late: the controller was stopped.
        clock.observe(300, 342);
        assert_eq!(clock.skew(), 2);
        clock.observe(0, 999);
        assert_eq!(clock.skew(), 2, "no clock sent, nothing learnt");
        for t in 0..CLOCK_SAMPLES as i64 {
            clock.observe(1_000 + t, 1_000 + t - 5);
        }
        assert_eq!(clock.skew(), -5, "the old readings age out");
    }

    #[test]
    fn a_freeze_is_credited_once_however_often_it_is_reported() {
        let mut freezes = Freezes::new(0, HashMap::new());
        let ran = |_| Some((1_000, i64::MAX));
        assert!(freezes
            .report("n", (false, &[]), (100, 100), ran)
            .is_empty());
        // Heartbeats bunched after a cut: 1, 2, ... 5 s frozen.
        let mut total = 0;
        for secs in 1..=5 {
            let sent = 110 + secs as i64;
            for c in freezes.report("n", (true, &[(run(1), secs)]), (sent, sent), ran) {
                total += c.added;
            }
        }
        assert_eq!(total, 5);
        // Thawed, then frozen again: a new freeze.
        assert!(freezes
            .report("n", (false, &[]), (120, 120), ran)
            .is_empty());
        let again = freezes.report("n", (true, &[(run(1), 3)]), (130, 130), ran);
        assert_eq!((again[0].added, again[0].first), (3, true));
    }

    /// Found by the simulation (a controller stalled past a node's lease):
    /// the last report before the thaw was read 30 s after it was sent,
    /// and those 30 s, frozen until the thaw reached the node, were
    /// charged.
    #[test]
    fn a_report_read_late_credits_the_freeze_until_the_thaw() {
        let mut freezes = Freezes::new(0, HashMap::new());
        let ran = |_| Some((10_000, i64::MAX));
        assert!(freezes
            .report("n", (false, &[]), (1_127, 1_127), ran)
            .is_empty());
        let late = freezes.report("n", (true, &[(run(6), 120)]), (1_307, 1_337), ran);
        // 120 s frozen when sent, and (a second less than) the 30 s it
        // waited.
        assert_eq!(late[0].total, 149);
        // Its next report, still frozen, adds only what it grew by.
        let next = freezes.report("n", (true, &[(run(6), 160)]), (1_347, 1_347), ran);
        assert_eq!(next[0].added, 11);
    }

    /// Found by the simulation (seed 151, once a report's wait is credited
    /// a second short): a freeze of under a second was credited nothing
    /// and left no trace in the job's history.
    #[test]
    fn a_freeze_first_heard_of_is_told_of_even_with_nothing_to_credit() {
        let mut freezes = Freezes::new(0, HashMap::new());
        let ran = |_| Some((10_000, i64::MAX));
        let first = freezes.report("n", (true, &[(run(3), 0)]), (500, 501), ran);
        assert_eq!(
            (first[0].added, first[0].total, first[0].first),
            (0, 0, true)
        );
        let later = freezes.report("n", (true, &[(run(3), 5)]), (505, 505), ran);
        assert_eq!((later[0].added, later[0].first), (5, false));
        assert!(freezes
            .report("n", (true, &[(run(3), 5)]), (505, 505), ran)
            .is_empty());
    }

    /// Found by the simulation (seed 61): a report that waited on a
    /// stalled link was read after its job had been cancelled (its node
    /// stopped the frozen run then), and the whole wait was credited: the
    /// job was charged 58 s less than its run worked.
    #[test]
    fn a_freeze_read_after_its_run_was_stopped_is_credited_until_the_stop() {
        let mut freezes = Freezes::new(0, HashMap::new());
        let stopped_at = |_| Some((10_000, 1_480));
        let late = freezes.report("n", (true, &[(run(6), 0)]), (1_401, 1_539), stopped_at);
        assert_eq!(late[0].total, 78);
        // Stopped before the report was sent: its own count stands.
        let mut freezes = Freezes::new(0, HashMap::new());
        let before = freezes.report("n", (true, &[(run(6), 30)]), (1_401, 1_539), |_| {
            Some((10_000, 1_380))
        });
        assert_eq!(before[0].total, 30);
    }

    #[test]
    fn a_nodes_figure_is_bounded_by_the_controllers_measure_and_the_run() {
        let mut freezes = Freezes::new(0, HashMap::new());
        let ran = |_| Some((200, i64::MAX));
        assert!(freezes
            .report("n", (false, &[]), (1_000, 1_000), ran)
            .is_empty());
        // A hundred million seconds, claimed 30 s after it was last good.
        let claimed = freezes.report("n", (true, &[(run(1), 100_000_000)]), (1_030, 1_030), ran);
        assert_eq!(claimed[0].added, 30);
        // Never more than the run has run.
        let mut fresh = Freezes::new(0, HashMap::new());
        let short = fresh.report("m", (true, &[(run(2), 5_000)]), (5_000, 5_000), |_| {
            Some((60, i64::MAX))
        });
        assert_eq!(short[0].added, 60);
        // Before a node is heard: the controller's last moment alive.
        let mut restarted = Freezes::new(4_900, HashMap::new());
        let after = restarted.report("m", (true, &[(run(2), 5_000)]), (5_000, 5_000), |_| {
            Some((9_999, i64::MAX))
        });
        assert_eq!(after[0].added, 100);
    }

    /// Found by the simulation (seeds 9, 96, 110, 144): a controller
    /// restarted while a node it could not hear had frozen its runs
    /// credited the freeze only from its own last record, and charged the
    /// rest. A node's good standing is on record (every 30 s it moves),
    /// and a restarted controller bounds the node's word by it.
    #[test]
    fn after_a_restart_a_freeze_is_bounded_by_the_nodes_good_standing_on_record() {
        let mut before = Freezes::new(0, HashMap::new());
        let ran = |_| Some((10_000, i64::MAX));
        assert!(before
            .report("n", (false, &[]), (1_000, 1_000), ran)
            .is_empty());
        assert_eq!(before.good_to_record("n"), Some(1_000));
        before.report("n", (false, &[]), (1_020, 1_020), ran);
        assert_eq!(before.good_to_record("n"), None, "moved less than 30 s");
        before.report("n", (false, &[]), (1_040, 1_040), ran);
        assert_eq!(before.good_to_record("n"), Some(1_040));
        // Frozen since 1_060; the controller, down meanwhile, last wrote
        // at 1_100 and hears the node at 1_300.
        let recorded = HashMap::from([("n".to_string(), 1_040)]);
        let mut restarted = Freezes::new(1_100, recorded);
        let credit = restarted.report("n", (true, &[(run(4), 240)]), (1_300, 1_300), ran);
        assert_eq!(credit[0].total, 240);
        // A node that lies gets no more than the time since its good
        // standing on record.
        let recorded = HashMap::from([("n".to_string(), 1_040)]);
        let mut lied_to = Freezes::new(1_100, recorded);
        let claimed = lied_to.report("n", (true, &[(run(4), 100_000_000)]), (1_300, 1_300), ran);
        assert_eq!(claimed[0].total, 260);
    }
}
