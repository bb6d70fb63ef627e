//! srun's side of a step on a terminal (`srun --pty`): its own terminal
//! goes raw, so that every key (Ctrl-C, Ctrl-Z, Ctrl-D) goes to the
//! task's terminal as the byte it is, where the task's line discipline
//! acts on it; its size goes along, and again at each change (SIGWINCH).
//! A terminal lost (an ssh dropped: standard input ends or fails) hangs
//! the task up, and kills it if it is still there after `HANGUP_GRACE`.

use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::termios::{self, SetArg, Termios};

use crate::exec::terminal::TerminalSize;
use crate::net::steps::StepLink;

/// How long a task hung up has before SIGKILL.
const HANGUP_GRACE: Duration = Duration::from_secs(5);

/// srun's terminal, raw while the step runs; put back as it was when
/// dropped (what was typed ahead for the shell it returns to is kept).
pub struct RawTerminal {
    saved: Termios,
}

impl RawTerminal {
    /// Makes standard input's terminal raw; `None` if it is no terminal.
    pub fn enter() -> Option<RawTerminal> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(&stdin).ok()?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(&stdin, SetArg::TCSANOW, &raw).ok()?;
        Some(RawTerminal { saved })
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin(), SetArg::TCSADRAIN, &self.saved);
    }
}

/// The size of srun's terminal (standard input's), if it is one.
pub fn own_size() -> Option<TerminalSize> {
    TerminalSize::of(&std::io::stdin())
}

/// Passes what is typed, and each new size of the terminal, to the
/// step's task through `link`, until the terminal is gone.
pub fn relay(link: Arc<Mutex<Vec<StepLink>>>) {
    let sizes = link.clone();
    if let Ok(mut signals) = signal_hook::iterator::Signals::new([libc::SIGWINCH]) {
        std::thread::spawn(move || {
            for _ in signals.forever() {
                if let Some(size) = own_size() {
                    for l in lock(&sizes).iter_mut() {
                        let _ = l.resize(size);
                    }
                }
            }
        });
    }
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 4096];
        loop {
            match stdin.read(&mut buf) {
                Ok(n) if n > 0 => {
                    for l in lock(&link).iter_mut() {
                        let _ = l.input(buf[..n].to_vec());
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // The terminal is gone: so is the session.
                _ => return hang_up(&link),
            }
        }
    });
}

fn hang_up(link: &Mutex<Vec<StepLink>>) {
    for l in lock(link).iter_mut() {
        let _ = l.signal(libc::SIGHUP);
    }
    std::thread::sleep(HANGUP_GRACE);
    for l in lock(link).iter_mut() {
        let _ = l.signal(libc::SIGKILL);
    }
}

fn lock(link: &Mutex<Vec<StepLink>>) -> std::sync::MutexGuard<'_, Vec<StepLink>> {
    link.lock().unwrap_or_else(|p| p.into_inner())
}
