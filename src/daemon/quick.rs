//! Between scheduling passes. A full pass over a long queue takes its
//! time (about 100 ms over 100,000 pending jobs, release build), and one
//! after every change would leave the loop no time for requests: passes
//! are spaced by what the last one took ([`Pace`]). A job queued in
//! between that fits on what the last pass left idle starts at once
//! (`sched::quick`), as that pass would have started it; what ends in
//! between goes to the next pass, in priority order.

use std::time::{Duration, Instant};

use crate::exec::executor::ImageStatus;
use crate::model::job::JobId;
use crate::sched::{self, plan::Spare};

use super::error::DaemonError;
use super::state::Daemon;

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
}

impl Default for BetweenPasses {
    fn default() -> Self {
        BetweenPasses {
            spare: None,
            queued: Vec::new(),
            pace: Pace::Measured {
                next: Instant::now(),
            },
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

impl BetweenPasses {
    /// Whether a pass may run now.
    pub(super) fn pass_due(&self) -> bool {
        match self.pace {
            Pace::Measured { next } => Instant::now() >= next,
            Pace::Told(due) => due,
        }
    }

    /// How long until a pass may run (none: now, or as told).
    pub(super) fn until_pass(&self) -> Option<Duration> {
        match self.pace {
            Pace::Measured { next } => Some(next.saturating_duration_since(Instant::now())),
            Pace::Told(_) => None,
        }
    }

    /// A pass that took `took` ran and left `spare`.
    pub(super) fn passed(&mut self, took: Duration, spare: Option<Kept>) {
        self.spare = spare;
        self.queued.clear();
        if let Pace::Measured { next } = &mut self.pace {
            *next = if took <= CHEAP_PASS {
                Instant::now()
            } else {
                Instant::now() + took * SPACING
            };
        }
    }
}

impl Daemon {
    /// The queue changed in a way the last pass's spare does not account
    /// for (a node, a resumed job, a reload): a pass is due, and nothing
    /// starts before it.
    pub(super) fn replan(&mut self) {
        self.reschedule = true;
        self.between.spare = None;
    }

    /// Starts the jobs queued since the last pass that fit on what it
    /// left idle (their images present); the others wait for the next
    /// pass.
    pub(super) fn quick_starts(&mut self, now: i64) -> Result<(), DaemonError> {
        let queued = std::mem::take(&mut self.between.queued);
        let Some(Kept {
            mut spare,
            layout,
            drained,
        }) = self.between.spare.take()
        else {
            return Ok(());
        };
        if &layout != self.nodes.layout() || drained != self.drained_pool_gpus() {
            return Ok(());
        }
        let mut starts = Vec::new();
        for id in queued {
            let Some(job) = self.core.jobs.get(&id) else {
                continue;
            };
            let around = sched::quick::Around {
                layout: &layout,
                drained: &drained,
                now,
            };
            let (left, start) = sched::quick::start(spare, job, &around, &self.core.config);
            spare = left;
            // A job whose image is not present yet waits for a pass (its
            // pull begun here); what it took stays taken until then.
            starts.extend(start.filter(|s| self.image_readiness(s) == ImageStatus::Ready));
        }
        self.between.spare = Some(Kept {
            spare,
            layout,
            drained,
        });
        if starts.is_empty() {
            return Ok(());
        }
        let launch = self.handle_with(|core, reads, fx| {
            Ok(super::pass::on_quick_starts(core, reads, starts, now, fx))
        })?;
        self.stats.quick_starts_total += launch.len() as u64;
        self.turn.to_launch.extend(launch);
        Ok(())
    }
}
