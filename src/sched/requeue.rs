//! What follows a requeue: when the job may run again, and whether it is
//! held. A run that fails as soon as it starts (its node cannot start
//! it, the job requeues itself in a loop) would otherwise run again
//! within milliseconds, for ever, each run an event row and a launch.
//! As Slurm delays a requeued job and holds a batch job after
//! `MaxBatchRequeue` failed launches, each run in a row that ended
//! within `QUICK_RUN_SECS` of its start waits twice as long as the one
//! before it (from `requeue_delay`, 5 s), and after `max_quick_requeues`
//! of them (5) the job is held with the reason, for its user to release
//! once the cause is fixed. A
//! run that lasted shows the job is well again and starts the count
//! anew; a preemption is no fault of the job's, and counts for nothing.

/// A run shorter than this, requeued, counts as a quick failure.
pub const QUICK_RUN_SECS: i64 = 60;
/// The longest wait.
const MAX_DELAY_SECS: i64 = 600;

/// The site's backoff: `requeue_delay` and `max_quick_requeues`.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    pub first_delay: u64,
    /// 0: never held.
    pub max_quick: u32,
}

impl Backoff {
    pub fn of(config: &crate::config::Config) -> Backoff {
        Backoff {
            first_delay: config.requeue_delay,
            max_quick: config.max_quick_requeues,
        }
    }
}

/// What a requeue does to the job.
#[derive(Debug, PartialEq, Eq)]
pub struct Requeue {
    /// Its quick requeues in a row, now.
    pub quick: u32,
    /// Seconds before it may run again (none: at once).
    pub delay: Option<i64>,
    /// Whether it is held.
    pub hold: bool,
}

/// The requeue of a job with `quick_before` quick requeues in a row,
/// whose run lasted `ran_secs`, `preempted` or not.
pub fn after(backoff: Backoff, quick_before: u32, ran_secs: i64, preempted: bool) -> Requeue {
    if preempted {
        return Requeue {
            quick: quick_before,
            delay: None,
            hold: false,
        };
    }
    if ran_secs >= QUICK_RUN_SECS {
        return Requeue {
            quick: 0,
            delay: None,
            hold: false,
        };
    }
    let quick = quick_before.saturating_add(1);
    let hold = backoff.max_quick > 0 && quick >= backoff.max_quick;
    let doublings = (quick - 1).min(16);
    let first = i64::try_from(backoff.first_delay).unwrap_or(MAX_DELAY_SECS);
    Requeue {
        quick,
        // Held, it waits for its user instead.
        delay: (!hold && first > 0)
            .then(|| first.saturating_mul(1 << doublings).min(MAX_DELAY_SECS)),
        hold,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SITE: Backoff = Backoff {
        first_delay: crate::config::DEFAULT_REQUEUE_DELAY,
        max_quick: crate::config::DEFAULT_MAX_QUICK_REQUEUES,
    };

    #[test]
    fn quick_failures_wait_longer_each_time_and_are_held_at_the_fifth() {
        let delays: Vec<(Option<i64>, bool)> = (0..6)
            .map(|before| {
                let r = after(SITE, before, 2, false);
                (r.delay, r.hold)
            })
            .collect();
        assert_eq!(
            delays,
            [
                (Some(5), false),
                (Some(10), false),
                (Some(20), false),
                (Some(40), false),
                (None, true),
                (None, true)
            ]
        );
        let never_held = Backoff {
            max_quick: 0,
            ..SITE
        };
        assert_eq!(after(never_held, 40, 0, false).delay, Some(MAX_DELAY_SECS));
        assert_eq!(after(never_held, u32::MAX, 0, false).quick, u32::MAX);
        let no_wait = Backoff {
            first_delay: 0,
            ..SITE
        };
        assert_eq!(after(no_wait, 0, 0, false).delay, None);
    }

    #[test]
    fn a_run_that_lasted_starts_the_count_anew_and_a_preemption_counts_nothing() {
        let well = after(SITE, 3, QUICK_RUN_SECS, false);
        assert_eq!((well.quick, well.delay, well.hold), (0, None, false));
        let preempted = after(SITE, 3, 1, true);
        assert_eq!(
            (preempted.quick, preempted.delay, preempted.hold),
            (3, None, false)
        );
    }
}
