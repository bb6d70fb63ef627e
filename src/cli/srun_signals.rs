//! What srun does with the signals it gets, as Slurm's srun does: those
//! its user sends (`kill`, a terminal's Ctrl-C) go on to every task of the
//! step, except SIGINT: the first Ctrl-C says how the tasks stand, a
//! second within a second sends them SIGINT and ends the step, and one
//! more within a second of that kills them at once
//! (`--quit-on-interrupt`: the first one does).
//!
//! A signal the job's supervisor sends every process of the job (a
//! cancel, a time limit, a preemption's warning) is not passed on: each
//! node's supervisor gives it to every task there itself, and a task must
//! get it once. One the supervisor queues to this srun alone
//! (`scancel N.S`, `sigqueue`) is for its tasks, on every node.

use std::sync::Arc;

use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use std::time::{Duration, Instant};

/// How close two Ctrl-Cs must come to count as one more.
const INTERRUPT_WINDOW: Duration = Duration::from_secs(1);
/// How long the tasks have after the Ctrl-C that ends the step before
/// they are killed.
pub(super) const ABORT_GRACE: Duration = Duration::from_secs(5);

/// What srun does with a Ctrl-C.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OnInterrupt {
    /// Say how the tasks stand (`aborting`: a Ctrl-C has gone to them
    /// already).
    Report { aborting: bool },
    /// Send the tasks SIGINT, and kill them after [`ABORT_GRACE`].
    Abort,
    /// Kill the tasks now.
    Kill,
}

/// The Ctrl-Cs srun has had, and when.
#[derive(Debug, Default)]
struct Interrupts {
    quit_on_interrupt: bool,
    /// The last that reported.
    last: Option<Instant>,
    /// The last that went on to the tasks.
    sent: Option<Instant>,
}

impl Interrupts {
    fn on_interrupt(&mut self, now: Instant) -> OnInterrupt {
        if self.quit_on_interrupt {
            return OnInterrupt::Kill;
        }
        let within = |t: Option<Instant>| {
            t.is_some_and(|t| now.saturating_duration_since(t) <= INTERRUPT_WINDOW)
        };
        if !within(self.last) {
            self.last = Some(now);
            return OnInterrupt::Report {
                aborting: self.sent.is_some(),
            };
        }
        if within(self.sent) {
            return OnInterrupt::Kill;
        }
        self.sent = Some(now);
        OnInterrupt::Abort
    }
}

/// A step's tasks, as srun's signals reach them.
pub(super) struct Forwarding {
    /// Sends a signal to every task of the step that is still running.
    pub send: Arc<dyn Fn(i32) + Send + Sync>,
    /// `StepId=J.S`, for what srun says.
    pub step: String,
    /// How the tasks stand, a line for each state (`tasks 0-3: running`).
    pub states: Box<dyn Fn() -> Vec<String> + Send>,
    /// `--quit-on-interrupt`.
    pub quit_on_interrupt: bool,
}

/// The signals srun passes on, caught from before its step is recorded:
/// once recorded, `scancel N.S` may signal srun at any moment, and one
/// that comes before the tasks have started waits for them instead of
/// ending srun and leaving its step running.
pub struct Caught(SignalsInfo<WithOrigin>);

/// Catches the signals srun passes on; `None` where they cannot be
/// caught (srun then keeps their default actions).
pub(super) fn catch() -> Option<Caught> {
    use signal_hook::consts::*;
    SignalsInfo::<WithOrigin>::new([SIGTERM, SIGINT, SIGUSR1, SIGUSR2, SIGHUP])
        .ok()
        .map(Caught)
}

/// Passes the signals srun gets on to the step's tasks, those caught
/// before they started first, from now until srun exits.
pub(super) fn pass_on(caught: Option<Caught>, step: Forwarding) {
    use signal_hook::consts::*;
    use signal_hook::low_level::siginfo::{Cause, Sent};
    let Some(Caught(mut signals)) = caught.or_else(catch) else {
        return;
    };
    std::thread::spawn(move || {
        let mut interrupts = Interrupts {
            quit_on_interrupt: step.quit_on_interrupt,
            ..Interrupts::default()
        };
        for origin in signals.forever() {
            let queued = matches!(origin.cause, Cause::Sent(Sent::Queue));
            if !queued && origin.process.is_some_and(|p| is_supervisor(p.pid)) {
                continue;
            }
            if origin.signal != SIGINT || queued {
                (step.send)(origin.signal);
                continue;
            }
            interrupted(&step, interrupts.on_interrupt(Instant::now()));
        }
    });
}

/// Does and says what a Ctrl-C calls for.
fn interrupted(step: &Forwarding, action: OnInterrupt) {
    let id = &step.step;
    match action {
        OnInterrupt::Report { aborting } => {
            super::say(if aborting {
                "srun: interrupt (abort already in progress)"
            } else {
                "srun: interrupt (one more within 1 sec to abort)"
            });
            for line in (step.states)() {
                super::say(&format!("srun: {id} {line}"));
            }
        }
        OnInterrupt::Abort => {
            super::say(&format!("srun: sending Ctrl-C to {id}"));
            (step.send)(libc::SIGINT);
            super::say(&format!(
                "srun: Job step aborted: Waiting up to {} seconds for job step to finish.",
                ABORT_GRACE.as_secs()
            ));
            let send = step.send.clone();
            std::thread::spawn(move || {
                std::thread::sleep(ABORT_GRACE);
                send(libc::SIGKILL);
            });
        }
        OnInterrupt::Kill => {
            super::say("srun: forcing job termination");
            (step.send)(libc::SIGKILL);
        }
    }
}

/// Whether process `pid` is a job's supervisor (`ysstepd`).
fn is_supervisor(pid: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "ysstepd")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_ctrl_c_reports_a_second_within_a_second_aborts_a_third_kills() {
        let mut i = Interrupts::default();
        let t0 = Instant::now();
        assert_eq!(i.on_interrupt(t0), OnInterrupt::Report { aborting: false });
        assert_eq!(
            i.on_interrupt(t0 + Duration::from_millis(500)),
            OnInterrupt::Abort
        );
        assert_eq!(
            i.on_interrupt(t0 + Duration::from_millis(900)),
            OnInterrupt::Kill
        );
    }

    #[test]
    fn ctrl_cs_a_second_apart_only_report() {
        let mut i = Interrupts::default();
        let t0 = Instant::now();
        for n in 0..3 {
            let at = t0 + Duration::from_millis(1500 * n);
            assert_eq!(i.on_interrupt(at), OnInterrupt::Report { aborting: false });
        }
    }

    #[test]
    fn a_report_after_the_abort_says_it_is_under_way_and_a_late_pair_sends_again() {
        let mut i = Interrupts::default();
        let t0 = Instant::now();
        i.on_interrupt(t0);
        assert_eq!(
            i.on_interrupt(t0 + Duration::from_millis(200)),
            OnInterrupt::Abort
        );
        let later = t0 + Duration::from_secs(3);
        assert_eq!(
            i.on_interrupt(later),
            OnInterrupt::Report { aborting: true }
        );
        assert_eq!(
            i.on_interrupt(later + Duration::from_millis(300)),
            OnInterrupt::Abort
        );
    }

    #[test]
    fn quit_on_interrupt_kills_at_the_first() {
        let mut i = Interrupts {
            quit_on_interrupt: true,
            ..Interrupts::default()
        };
        assert_eq!(i.on_interrupt(Instant::now()), OnInterrupt::Kill);
    }
}
