//! When the next scheduling pass may run, and what the last one left for
//! the jobs queued before it (see `quick`, which starts them).

use std::time::{Duration, Instant};

use crate::model::job::JobId;
use crate::sched::{self, plan::Spare};

/// A pass no longer than this is due again at once: over a short queue
/// passes cost nothing, and each change is followed by one, as always.
const CHEAP_PASS: Duration = Duration::from_millis(5);

/// After a longer pass, the next waits this many times as long: passes
/// take at most a third of the loop's time.
const SPACING: u32 = 2;

/// What the loop keeps between passes.
#[derive(Debug)]
pub(super) struct BetweenPasses {
    /// What the last pass left idle; dropped by any change it does not
    /// account for (see `Effects::spare_stale`): it only ever holds less
    /// than is idle.
    pub(super) spare: Option<Kept>,
    /// Jobs queued since the last pass: each starts at once where it can.
    pub(super) queued: Vec<JobId>,
    pub(super) pace: Pace,
    /// The last turn made quick starts and no pass: the next turn passes
    /// if one is due, so that a stream of submissions never starves it.
    pub(super) quick_last: bool,
}

impl Default for BetweenPasses {
    fn default() -> Self {
        BetweenPasses {
            spare: None,
            queued: Vec::new(),
            pace: Pace::Measured {
                next: Instant::now(),
            },
            quick_last: false,
        }
    }
}

/// What a pass left idle, and the pool as it was then: a quick start is
/// made only while the nodes and drains are the same.
#[derive(Debug)]
pub(super) struct Kept {
    pub(super) spare: Spare,
    pub(super) layout: sched::pool::Layout,
    pub(super) drained: Vec<u32>,
}

/// When the next full pass may run.
#[derive(Debug)]
pub(super) enum Pace {
    /// Once the last pass has been over for `SPACING` times as long as it
    /// took (at once after a cheap one).
    Measured { next: Instant },
    /// As the simulation says, turn by turn (its own choice, from its
    /// seed, so that quick starts are part of what it checks).
    Told(bool),
}

/// What a turn does about the queue.
#[derive(Debug, PartialEq)]
pub(super) enum Next {
    /// A full pass.
    Pass,
    /// The quick starts of the jobs just queued; a pass, if one is
    /// wanted, in a turn of its own right after.
    Quick,
    Nothing,
}

impl BetweenPasses {
    /// Whether a pass may run now.
    pub(super) fn pass_due(&self) -> bool {
        match self.pace {
            Pace::Measured { next } => Instant::now() >= next,
            Pace::Told(due) => due,
        }
    }

    /// What this turn does, a pass being `wanted` (the queue changed, or
    /// a job's begin time came). Jobs just queued onto a kept spare start
    /// first when the last pass was long: the turn that queues them
    /// commits, and they launch, without waiting for the pass (which
    /// comes next turn, whatever is queued by then).
    pub(super) fn next(&self, wanted: bool, last_pass: Duration) -> Next {
        let quick = !self.queued.is_empty() && self.spare.is_some();
        let pass = wanted && self.pass_due();
        let long = matches!(self.pace, Pace::Measured { .. }) && last_pass > CHEAP_PASS;
        if quick && long && !(pass && self.quick_last) {
            Next::Quick
        } else if pass {
            Next::Pass
        } else if quick {
            Next::Quick
        } else {
            Next::Nothing
        }
    }

    /// How long until a pass may run (none: now, or as told).
    pub(super) fn until_pass(&self) -> Option<Duration> {
        match self.pace {
            Pace::Measured { next } => Some(next.saturating_duration_since(Instant::now())),
            Pace::Told(_) => None,
        }
    }

    /// Whether what a pass that took `took` leaves is worth keeping: after
    /// a cheap pass the next one comes at once and takes the jobs queued
    /// in between itself.
    pub(super) fn keeps_spare(&self, took: Duration) -> bool {
        matches!(self.pace, Pace::Told(_)) || took > CHEAP_PASS
    }

    /// A turn made quick starts: the next pass waits at least as long as
    /// the last took, so that what a submitter asks next (is my job
    /// running?) is answered before it holds the loop.
    pub(super) fn quick_turn(&mut self, last_pass: Duration) {
        self.quick_last = true;
        if let Pace::Measured { next } = &mut self.pace {
            *next = (*next).max(Instant::now() + last_pass);
        }
    }

    /// A pass that took `took` ran and left `spare`.
    pub(super) fn passed(&mut self, took: Duration, spare: Option<Kept>) {
        self.spare = spare;
        self.queued.clear();
        self.quick_last = false;
        if let Pace::Measured { next } = &mut self.pace {
            *next = if took <= CHEAP_PASS {
                Instant::now()
            } else {
                Instant::now() + took * SPACING
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a pass over nothing leaves on one node of four GPUs.
    fn kept() -> Kept {
        let layout = sched::pool::Layout::single("gpu01", 8, 1 << 20, &crate::gpu::test_a100s(4));
        let config = crate::config::Config::builtin(std::path::Path::new("t.toml"));
        let policy = sched::limits::Policy::new(&config);
        let pool = sched::Pool::of(&layout, &[]);
        let spare = sched::plan::plan_keeping_spare(&[], &[], &pool, &policy, 0).spare;
        Kept {
            spare,
            layout: layout.clone(),
            drained: Vec::new(),
        }
    }

    #[test]
    fn after_a_long_pass_jobs_just_queued_start_before_the_next_one() {
        let long = Duration::from_millis(60);
        let mut between = BetweenPasses::default();
        between.passed(Duration::ZERO, Some(kept()));
        between.queued.push(7);
        assert_eq!(between.next(true, long), Next::Quick);
        // A stream of submissions does not starve the pass.
        between.quick_last = true;
        assert_eq!(between.next(true, long), Next::Pass);
        // After a cheap pass the next pass takes the queued jobs itself.
        between.quick_last = false;
        assert_eq!(between.next(true, Duration::from_millis(1)), Next::Pass);
    }

    #[test]
    fn without_a_spare_or_before_it_is_due_nothing_starts_early() {
        let long = Duration::from_millis(60);
        let mut between = BetweenPasses::default();
        between.queued.push(7);
        assert_eq!(between.next(true, long), Next::Pass, "no spare: the pass");
        between.passed(Duration::from_secs(3600), Some(kept()));
        assert_eq!(between.next(true, long), Next::Nothing, "not due yet");
        between.queued.push(8);
        assert_eq!(between.next(true, long), Next::Quick);
        between.pace = Pace::Told(false);
        assert_eq!(between.next(true, long), Next::Quick, "as told: not due");
        between.pace = Pace::Told(true);
        assert_eq!(between.next(true, long), Next::Pass, "as told: due");
    }
}
