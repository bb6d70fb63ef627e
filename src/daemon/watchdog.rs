//! systemd's side of the controller (`Type=notify`, `WatchdogSec=` in
//! ysctld.service): ready once it answers, and alive at each turn of the
//! event loop, at half the interval systemd asked for. A controller that
//! stops turning (frozen, wedged on a disk, deadlocked) is killed by
//! systemd and started again; for a controller of two that turns a hang,
//! which keeps the spool's lock, into a crash, which the standby takes
//! over from. Without systemd (no `NOTIFY_SOCKET`) nothing is sent.

use std::time::{Duration, Instant};

/// The watchdog systemd set for this process, and when to tell it next.
pub(super) struct Watchdog {
    every: Duration,
    next: Instant,
}

impl Watchdog {
    /// The watchdog systemd asked this process for (`WATCHDOG_USEC`,
    /// `WATCHDOG_PID`), if any.
    pub(super) fn from_env() -> Option<Watchdog> {
        let mut usec = 0;
        if !sd_notify::watchdog_enabled(false, &mut usec) || usec == 0 {
            return None;
        }
        let every = Duration::from_micros(usec) / 2;
        tracing::info!(
            target: "ysched::daemon",
            "systemd's watchdog: alive every {}",
            humantime::format_duration(every)
        );
        Some(Watchdog {
            every,
            next: Instant::now(),
        })
    }

    /// When the event loop must turn next to tell systemd in time.
    pub(super) fn next(&self) -> Instant {
        self.next
    }

    /// Tells systemd this controller is alive, when due.
    pub(super) fn pet(&mut self) {
        let now = Instant::now();
        if now < self.next {
            return;
        }
        if let Err(e) = sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog]) {
            tracing::warn!(target: "ysched::daemon", "cannot tell systemd's watchdog: {e}");
        }
        self.next = now + self.every;
    }
}

/// Tells systemd the controller is ready (`Type=notify`).
pub(super) fn ready() {
    if let Err(e) = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]) {
        tracing::warn!(target: "ysched::daemon", "cannot tell systemd it is ready: {e}");
    }
}
