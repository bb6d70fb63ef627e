//! Between scheduling passes. A full pass over a long queue takes its
//! time (50-60 ms over 100,000 pending jobs, release build), and one
//! after every change would leave the loop no time for requests: passes
//! are spaced by what the last one took ([`Pace`]). A job queued in
//! between that fits on what the last pass left idle starts at once
//! (`sched::quick`), as that pass would have started it; what ends in
//! between goes to the next pass, in priority order.

use std::time::Duration;

use crate::exec::executor::ImageStatus;
use crate::sched;

use super::error::DaemonError;
use super::pace::Kept;
use super::state::Daemon;

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
        let last_pass = Duration::from_secs_f64(self.stats.last_pass_seconds);
        self.between.quick_turn(last_pass);
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
