//! A step's task on a pseudo-terminal (`srun --pty`): the task leads a
//! session of its own whose controlling terminal is the pty's slave, so
//! that what the user types (Ctrl-C, Ctrl-Z included, sent as the bytes
//! they are from srun's raw terminal) reaches its foreground process
//! group through the line discipline, as on a local terminal; the
//! master's side is srun's, through the step link: output out, input
//! and window sizes in.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long a task's last output has to come through once it exited
/// (what it started in the background may hold the terminal open).
const DRAIN_WAIT: Duration = Duration::from_millis(500);

/// A terminal's size in characters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalSize {
    pub rows: u16,
    pub cols: u16,
}

impl TerminalSize {
    /// The size of the terminal `fd` is, if it is one.
    pub fn of(fd: &impl AsRawFd) -> Option<TerminalSize> {
        let mut size = libc::winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCGWINSZ writes a winsize into `size`.
        let got = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut size) };
        (got == 0).then_some(TerminalSize {
            rows: size.ws_row,
            cols: size.ws_col,
        })
    }

    fn winsize(self) -> libc::winsize {
        libc::winsize {
            ws_row: self.rows,
            ws_col: self.cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        }
    }
}

/// The master side of a task's terminal.
pub struct Terminal {
    master: File,
}

impl Terminal {
    /// Passes what the user typed on to the task.
    pub fn input(&self, data: &[u8]) {
        let _ = (&self.master).write_all(data);
    }

    /// The user's terminal changed size: so does the task's, and the
    /// kernel tells its foreground process group (SIGWINCH).
    pub fn resize(&self, size: TerminalSize) {
        let size = size.winsize();
        // SAFETY: TIOCSWINSZ reads a winsize.
        unsafe {
            libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &size);
        }
    }
}

/// What a task on a terminal runs, and where.
pub struct TerminalCommand<'a> {
    pub argv: &'a [String],
    pub env: Vec<(String, String)>,
    pub cwd: &'a std::path::Path,
    pub size: TerminalSize,
}

/// Starts `what` on a new pseudo-terminal; `output` gets what it writes
/// (one stream: a terminal's), then `ended` how it ended. Its process
/// group (its session's, which it leads) and its terminal.
pub fn spawn(
    what: TerminalCommand<'_>,
    output: impl FnMut(Vec<u8>) -> bool + Send + 'static,
    ended: impl FnOnce(std::io::Result<std::process::ExitStatus>) + Send + 'static,
) -> std::io::Result<(i32, Arc<Terminal>)> {
    let Some(program) = what.argv.first() else {
        return Err(std::io::Error::other("no command to run"));
    };
    let pty = nix::pty::openpty(Some(&what.size.winsize()), None).map_err(std::io::Error::from)?;
    let slave = File::from(pty.slave);
    let mut command = Command::new(program);
    command
        .args(&what.argv[1..])
        .env_clear()
        .envs(what.env)
        .current_dir(what.cwd)
        .stdin(slave.try_clone()?)
        .stdout(slave.try_clone()?)
        .stderr(slave);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // After the terminal is taken: this one execs.
    super::task_pid::set_on(&mut command, None)?;
    let mut child = command.spawn()?;
    // The slave's copies here go, so that the master reads its end once
    // the task's side is closed.
    drop(command);
    let master = File::from(pty.master);
    let reader = master.try_clone()?;
    let group = child.id() as i32;
    std::thread::spawn(move || {
        let (drained, drained_rx) = mpsc::channel();
        std::thread::spawn(move || {
            relay(reader, output);
            let _ = drained.send(());
        });
        let status = child.wait();
        let _ = drained_rx.recv_timeout(DRAIN_WAIT);
        ended(status);
    });
    Ok((group, Arc::new(Terminal { master })))
}

/// Gives `output` what the terminal's master reads until the task's
/// side is closed (or `output` wants no more).
fn relay(mut from: File, mut output: impl FnMut(Vec<u8>) -> bool) {
    let mut buf = vec![0u8; 16 << 10];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) if !output(buf[..n].to_vec()) => return,
            Ok(_) => {}
        }
    }
}
