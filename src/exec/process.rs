//! Process plumbing the daemon's side and the supervisor share: the
//! descriptor numbers a supervisor finds its lock and socket at, starting
//! `ysstepd` with posix_spawn, pidfds, files written whole.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use nix::errno::Errno;
use nix::sys::signal::{self, SigSet, SigmaskHow, Signal};

use super::error::{io_err, ExecError, StepError};

/// The descriptor numbers the supervisor finds its lock and socket at.
pub const LOCK_FD: RawFd = 3;
pub const CONTROL_FD: RawFd = 4;

/// Starts `ysstepd ARG` in a session of its own, with each `(fd, at)` of
/// `fds` at its number (for a supervisor, the job's lock at 3 and its
/// control socket at 4; for the fork server, its socket at 3), nothing on
/// standard input and output, and the daemon's standard error (its log).
///
/// posix_spawn, not fork: glibc spawns with a vfork-style clone that
/// shares the daemon's memory until the exec, where a fork would copy the
/// page tables of a daemon holding 100,000 jobs and then make it take a
/// copy-on-write fault on each page it touched afterwards (12% of its time
/// when starting 1,000 short jobs).
pub(crate) fn spawn_stepd(
    stepd: &Path,
    arg: &std::ffi::OsStr,
    fds: &[(RawFd, RawFd)],
) -> io::Result<i32> {
    use nix::spawn::{PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags};
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c_string = |bytes: &[u8]| {
        CString::new(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    };
    // Copies above the target numbers, so that placing one cannot
    // overwrite the other; they close with this function (close-on-exec
    // meanwhile, so that no other child inherits them).
    let high = |fd: RawFd| -> io::Result<OwnedFd> {
        let copy = nix::fcntl::fcntl(
            // SAFETY: the descriptor is borrowed from a live File/socket.
            unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) },
            nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(10),
        )?;
        // SAFETY: F_DUPFD_CLOEXEC returned a new descriptor we now own.
        Ok(unsafe { OwnedFd::from_raw_fd(copy) })
    };
    let high_fds = fds
        .iter()
        .map(|&(fd, at)| Ok((high(fd)?, at)))
        .collect::<io::Result<Vec<(OwnedFd, RawFd)>>>()?;
    let null = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/null")?;
    let mut actions = PosixSpawnFileActions::init()?;
    actions.add_dup2(null.as_raw_fd(), 0)?;
    actions.add_dup2(null.as_raw_fd(), 1)?;
    for (fd, at) in &high_fds {
        actions.add_dup2(fd.as_raw_fd(), *at)?;
    }
    let mut attr = PosixSpawnAttr::init()?;
    // A clean signal state, as std's Command gives when it spawns this
    // way: nothing blocked, and SIGPIPE (which Rust programs ignore) back
    // to its default. (glibc leaves its two internal signals, 32 and 33,
    // ignored in the child, as for every posix_spawn; it installs their
    // handlers again where a program needs them.)
    attr.set_sigmask(&nix::sys::signal::SigSet::empty())?;
    let mut default = nix::sys::signal::SigSet::empty();
    default.add(nix::sys::signal::Signal::SIGPIPE);
    attr.set_sigdefault(&default)?;
    attr.set_flags(
        PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK
            | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF
            | PosixSpawnFlags::from_bits_retain(libc::POSIX_SPAWN_SETSID as libc::c_int),
    )?;
    let program = c_string(stepd.as_os_str().as_bytes())?;
    let args = [program.clone(), c_string(arg.as_bytes())?];
    let env: Vec<CString> = std::env::vars_os()
        .filter_map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).ok()
        })
        .collect();
    let pid = nix::spawn::posix_spawn(program.as_c_str(), &actions, &attr, &args, &env)?;
    Ok(pid.as_raw())
}

pub(crate) fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open(2) takes a pid and flags and returns a new
    // descriptor, which we take ownership of.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

pub(crate) fn write_new(path: &Path, body: &[u8], mode: u32) -> Result<(), ExecError> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(io_err("create", path))?;
    f.write_all(body).map_err(io_err("write", path))?;
    f.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(io_err("set the mode of", path))?;
    Ok(())
}

/// Writes a file whole or not at all, as readers see it: a temporary
/// name (mode 0600), then a rename over `path`. No fsync: the supervisor's
/// records are read by a daemon on the same running kernel, and what must
/// survive power loss (a job's end) is made durable by the daemon's commit
/// when it reads them (see `supervisor` for the trade).
pub fn write_atomically(path: &Path, body: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let temp = dir.join(format!(
        ".{}.tmp",
        path.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default()
    ));
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)?;
    f.write_all(body)?;
    drop(f);
    fs::rename(&temp, path)
}

/// The direct children of `pid` (from /proc).
pub(crate) fn children_of(pid: nix::unistd::Pid) -> Vec<nix::unistd::Pid> {
    fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .map(|text| {
            text.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .map(nix::unistd::Pid::from_raw)
                .collect()
        })
        .unwrap_or_default()
}

/// Every descendant of `pid` that has not left it (from /proc).
pub(crate) fn descendants(pid: nix::unistd::Pid) -> Vec<nix::unistd::Pid> {
    let mut found = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let Ok(tasks) = fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let kids = fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for kid in kids.split_whitespace().filter_map(|k| k.parse().ok()) {
                let kid = nix::unistd::Pid::from_raw(kid);
                if !found.contains(&kid) && found.len() < 100_000 {
                    found.push(kid);
                    todo.push(kid);
                }
            }
        }
    }
    found
}

/// In the forked child: the signals a job starts with (none blocked,
/// SIGPIPE default) and a session of its own.
pub(crate) fn new_session() -> Result<(), StepError> {
    let _ = signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
    // SAFETY: restoring default dispositions; no handler code is involved.
    unsafe {
        let _ = signal::signal(Signal::SIGPIPE, signal::SigHandler::SigDfl);
    }
    nix::unistd::setsid()
        .map(drop)
        .map_err(|e| StepError::Job(format!("cannot start a new session: {e}")))
}

/// Puts the job's files on descriptors 0, 1 and 2.
pub(crate) fn dup_standard(
    stdin: &fs::File,
    stdout: &fs::File,
    stderr: &fs::File,
) -> Result<(), StepError> {
    for (file, target) in [
        (stdin.as_raw_fd(), 0),
        (stdout.as_raw_fd(), 1),
        (stderr.as_raw_fd(), 2),
    ] {
        // SAFETY: dup2 onto the standard descriptors of this child.
        if unsafe { libc::dup2(file, target) } < 0 {
            return Err(StepError::Job(format!(
                "cannot set up descriptor {target}: {}",
                Errno::last()
            )));
        }
    }
    Ok(())
}

/// How a forked child that was to execute a program went.
pub(crate) enum Forked {
    /// It executed: its pid.
    Executing(nix::unistd::Pid),
    /// It could not, and said why (it has been reaped).
    Failed(String),
}

/// Forks a child that runs `in_child` and then executes a program; it
/// returns only on failure, with why, which comes back here through a
/// pipe closed by the successful exec. The caller must have no other
/// thread.
pub(crate) fn fork_and_exec(in_child: impl FnOnce() -> String) -> nix::Result<Forked> {
    use std::io::Read;
    use std::os::fd::OwnedFd;
    let (read_end, write_end): (OwnedFd, OwnedFd) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    // SAFETY: the caller has no other thread (see above).
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => {
            drop(read_end);
            let message = in_child();
            let _ = fs::File::from(write_end).write_all(message.as_bytes());
            // SAFETY: _exit ends the forked child without running the
            // parent's destructors or atexit handlers.
            unsafe { libc::_exit(127) }
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop(write_end);
            let mut message = String::new();
            let _ = fs::File::from(read_end).read_to_string(&mut message);
            if message.is_empty() {
                Ok(Forked::Executing(child))
            } else {
                let _ = nix::sys::wait::waitpid(child, None);
                Ok(Forked::Failed(message))
            }
        }
    }
}

/// Waits for `child` and measures what it used (`wait4`): how it ended,
/// and the peak resident memory and CPU time of it and of the processes
/// it reaped, as Slurm accounts a task.
pub fn wait_measured(
    child: &std::process::Child,
) -> io::Result<(std::process::ExitStatus, crate::model::step::TaskUsage)> {
    use std::os::unix::process::ExitStatusExt;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data, written by wait4.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: wait4 on our own child, into the locals above.
        if unsafe { libc::wait4(pid, &mut status, 0, &mut usage) } == pid {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let usec = |t: libc::timeval| {
        (t.tv_sec.max(0) as u64).saturating_mul(1_000_000) + t.tv_usec.max(0) as u64
    };
    Ok((
        std::process::ExitStatus::from_raw(status),
        crate::model::step::TaskUsage {
            // Linux gives kilobytes.
            max_rss_bytes: (usage.ru_maxrss.max(0) as u64).saturating_mul(1024),
            user_usec: usec(usage.ru_utime),
            system_usec: usec(usage.ru_stime),
        },
    ))
}
