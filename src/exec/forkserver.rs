//! The supervisor fork server: `ysstepd --server`, one per daemon, forks a
//! supervisor for each job, so that a job start costs a fork of a small
//! process instead of an exec of `ysstepd` (on the 2-vCPU build VM, 1.5 ms
//! of exec and dynamic loading, against about 0.2 ms for the fork).
//!
//! The daemon and the server share a `SOCK_SEQPACKET` pair. A request is
//! the job's directory, with the job's locked lock file and bound control
//! socket passed alongside (`SCM_RIGHTS`); the server forks, and the child
//! puts the two descriptors at 3 and 4, starts a session of its own and
//! runs the same supervisor code an exec'd `ysstepd JOB_DIR` runs. The
//! answer carries the supervisor's pid and a pidfd the server opened on its
//! own child before it could be reaped, so the daemon never watches a
//! recycled pid. The server reaps the supervisors; the daemon watches them
//! through the pidfds, as it watches supervisors it adopted.
//!
//! The server holds nothing of its own: it exits when the daemon's end of
//! the socket closes (the daemon stopped or died), and its supervisors,
//! like those of a stopped daemon, go on and are adopted by the next one.
//! It is single-threaded, so the forked child may allocate.

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{
    recvmsg, sendmsg, socketpair, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags,
    SockFlag, SockType,
};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{ForkResult, Pid};

use super::error::StepError;
use super::process::{pidfd_open, spawn_stepd, CONTROL_FD, LOCK_FD};

/// The descriptor the server finds its end of the socket at.
pub const SERVER_FD: RawFd = 3;

/// How long the daemon waits for the server to answer one request. A fork
/// takes well under a millisecond; this only bounds a server that hangs.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// The longest request: a job directory's path.
const MAX_REQUEST: usize = 4096;

/// The daemon's handle on its fork server.
#[derive(Debug)]
pub struct ForkServer {
    pid: i32,
    socket: OwnedFd,
}

/// Why a supervisor was not started through the server.
#[derive(Debug)]
pub enum Failure {
    /// The request could not be sent: the server is gone, and nothing was
    /// started.
    Unreachable(String),
    /// The server answered that it started nothing (a failed fork).
    Refused(String),
    /// The request went out and no answer came back: a supervisor may or
    /// may not be running.
    Unanswered(String),
}

impl ForkServer {
    /// Starts `STEPD --server` in a session of its own.
    pub fn spawn(stepd: &Path) -> io::Result<ForkServer> {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?;
        let timeout = nix::sys::time::TimeVal::new(ANSWER_WITHIN.as_secs() as i64, 0);
        nix::sys::socket::setsockopt(&ours, nix::sys::socket::sockopt::ReceiveTimeout, &timeout)?;
        nix::sys::socket::setsockopt(&ours, nix::sys::socket::sockopt::SendTimeout, &timeout)?;
        let pid = spawn_stepd(
            stepd,
            std::ffi::OsStr::new("--server"),
            &[(theirs.as_raw_fd(), SERVER_FD)],
        )?;
        Ok(ForkServer { pid, socket: ours })
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Has the server fork a supervisor for the job in `dir`; returns its
    /// pid and a pidfd on it.
    pub fn start(
        &self,
        dir: &Path,
        lock: BorrowedFd<'_>,
        control: BorrowedFd<'_>,
    ) -> Result<(i32, OwnedFd), Failure> {
        let fds = [lock.as_raw_fd(), control.as_raw_fd()];
        let path = dir.as_os_str().as_bytes();
        sendmsg::<()>(
            self.socket.as_raw_fd(),
            &[IoSlice::new(path)],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::empty(),
            None,
        )
        .map_err(|e| Failure::Unreachable(format!("cannot reach the fork server: {e}")))?;
        let (answer, mut passed) = receive(self.socket.as_fd(), 1)
            .map_err(|e| Failure::Unanswered(format!("no answer from the fork server: {e}")))?;
        let answer = answer
            .ok_or_else(|| Failure::Unanswered("the fork server closed its socket".into()))?;
        match Answer::decode(&answer) {
            Some(Answer::Started(pid)) if passed.len() == 1 => Ok((pid, passed.remove(0))),
            Some(Answer::Refused(why)) => Err(Failure::Refused(format!(
                "the fork server started nothing: {why}"
            ))),
            _ => Err(Failure::Unanswered(format!(
                "the fork server answered {} bytes and {} descriptors, not a pid and a pidfd",
                answer.len(),
                passed.len()
            ))),
        }
    }

    /// Stops a server that no longer answers, and reaps it.
    pub fn stop(self) {
        let pid = Pid::from_raw(self.pid);
        drop(self.socket);
        let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
        let _ = waitpid(pid, None);
    }
}

/// The server's answer to one request.
#[derive(Debug, PartialEq)]
enum Answer {
    /// `+` and the pid, little-endian; a pidfd travels with it.
    Started(i32),
    /// `-` and why, when no supervisor was started.
    Refused(String),
}

impl Answer {
    fn encode(&self) -> Vec<u8> {
        match self {
            Answer::Started(pid) => {
                let mut bytes = vec![b'+'];
                bytes.extend_from_slice(&pid.to_le_bytes());
                bytes
            }
            Answer::Refused(why) => {
                let mut bytes = vec![b'-'];
                bytes.extend_from_slice(why.as_bytes());
                bytes
            }
        }
    }

    fn decode(bytes: &[u8]) -> Option<Answer> {
        match bytes.split_first()? {
            (b'+', pid) => Some(Answer::Started(i32::from_le_bytes(pid.try_into().ok()?))),
            (b'-', why) => Some(Answer::Refused(String::from_utf8_lossy(why).into_owned())),
            _ => None,
        }
    }
}

/// Reads one message and the descriptors passed with it (at most `fds`;
/// any beyond are closed). `None` at the end of the stream.
fn receive(socket: BorrowedFd<'_>, fds: usize) -> io::Result<(Option<Vec<u8>>, Vec<OwnedFd>)> {
    let mut buf = vec![0u8; MAX_REQUEST];
    let mut space = nix::cmsg_space!([RawFd; 4]);
    let (bytes, flags, received) = {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let msg = loop {
            match recvmsg::<()>(
                socket.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            ) {
                Err(Errno::EINTR) => continue,
                other => break other?,
            }
        };
        let mut received = Vec::new();
        for cmsg in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(list) = cmsg {
                // SAFETY: SCM_RIGHTS installed these descriptors in this
                // process for us; nothing else owns them.
                received.extend(
                    list.into_iter()
                        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                );
            }
        }
        (msg.bytes, msg.flags, received)
    };
    if flags.intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "message or descriptors truncated",
        ));
    }
    if bytes == 0 && received.is_empty() {
        return Ok((None, received));
    }
    if received.len() > fds {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} descriptors passed, {fds} expected", received.len()),
        ));
    }
    buf.truncate(bytes);
    Ok((Some(buf), received))
}

/// `ysstepd --server`: serves the daemon on descriptor 3 until it closes.
/// Returns the process exit code.
pub fn serve() -> i32 {
    match serve_until_closed() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ysstepd --server: {e}");
            1
        }
    }
}

fn serve_until_closed() -> Result<(), StepError> {
    super::supervisor::set_cloexec(SERVER_FD)?;
    // SAFETY: checked open above; started by the daemon for us alone.
    let socket = unsafe { OwnedFd::from_raw_fd(SERVER_FD) };
    let mut chld = SigSet::empty();
    chld.add(Signal::SIGCHLD);
    chld.thread_block()
        .map_err(StepError::os("cannot block SIGCHLD"))?;
    let exits = SignalFd::with_flags(&chld, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(StepError::os("signalfd"))?;
    loop {
        let mut fds = [
            nix::poll::PollFd::new(socket.as_fd(), nix::poll::PollFlags::POLLIN),
            nix::poll::PollFd::new(exits.as_fd(), nix::poll::PollFlags::POLLIN),
        ];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(StepError::os("poll")(e)),
        }
        // The socket is read only when it has something: a blocking read
        // after a mere SIGCHLD would leave the next ended supervisors
        // unreaped until the next job.
        let requested = fds[0].revents().is_some_and(|r| !r.is_empty());
        while let Ok(Some(_)) = exits.read_signal() {}
        reap_supervisors();
        if !requested {
            continue;
        }
        let request = match receive(socket.as_fd(), 2) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                answer(&socket, &Answer::Refused(format!("bad request: {e}")), None)?;
                continue;
            }
            Err(e) => return Err(StepError::io("cannot read a request")(e)),
        };
        let (dir, passed) = match request {
            (None, _) => return Ok(()),
            (Some(dir), passed) => (dir, passed),
        };
        let [lock, control]: [OwnedFd; 2] = match passed.try_into() {
            Ok(pair) => pair,
            Err(passed) => {
                let why = format!(
                    "bad request: {} descriptors, the lock and the control socket expected",
                    passed.len()
                );
                answer(&socket, &Answer::Refused(why), None)?;
                continue;
            }
        };
        let dir = PathBuf::from(std::ffi::OsStr::from_bytes(&dir));
        match fork_supervisor(&dir, lock, control, &socket, &exits) {
            Ok((pid, pidfd)) => answer(&socket, &Answer::Started(pid), Some(pidfd.as_fd()))?,
            Err(why) => answer(&socket, &Answer::Refused(why.to_string()), None)?,
        }
    }
}

fn answer(
    socket: &OwnedFd,
    answer: &Answer,
    pidfd: Option<BorrowedFd<'_>>,
) -> Result<(), StepError> {
    let bytes = answer.encode();
    let fds: Vec<RawFd> = pidfd.iter().map(|fd| fd.as_raw_fd()).collect();
    let cmsgs: Vec<ControlMessage> = if fds.is_empty() {
        Vec::new()
    } else {
        vec![ControlMessage::ScmRights(&fds)]
    };
    sendmsg::<()>(
        socket.as_raw_fd(),
        &[IoSlice::new(&bytes)],
        &cmsgs,
        MsgFlags::empty(),
        None,
    )
    .map(|_| ())
    .map_err(StepError::os("cannot answer the daemon"))
}

/// Reaps every supervisor that has ended (the daemon learnt of each end
/// through its pidfd already).
fn reap_supervisors() {
    while let Ok(status) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

/// Forks the job's supervisor; returns its pid and a pidfd on it.
fn fork_supervisor(
    dir: &Path,
    lock: OwnedFd,
    control: OwnedFd,
    socket: &OwnedFd,
    exits: &SignalFd,
) -> Result<(i32, OwnedFd), StepError> {
    // SAFETY: this process is single-threaded (see the module comment).
    match unsafe { nix::unistd::fork() }.map_err(StepError::os("fork"))? {
        ForkResult::Child => {
            let code = match become_supervisor(&lock, &control, socket, exits) {
                Ok(()) => {
                    show_command_line(dir);
                    super::supervisor::run(dir)
                }
                Err(e) => {
                    eprintln!("ysstepd: {}: {e}", dir.display());
                    1
                }
            };
            std::process::exit(code)
        }
        ForkResult::Parent { child } => match pidfd_open(child.as_raw()) {
            Ok(pidfd) => Ok((child.as_raw(), pidfd)),
            Err(e) => {
                // The daemon cannot watch it safely: it must not run.
                let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
                let _ = waitpid(child, None);
                Err(StepError::io("cannot open a pidfd for the supervisor")(e))
            }
        },
    }
}

/// In the forked child: leaves the server's descriptors and signal mask
/// behind and sets up what an exec'd `ysstepd JOB_DIR` is given: the lock
/// at 3, the control socket at 4, a session of its own.
fn become_supervisor(
    lock: &OwnedFd,
    control: &OwnedFd,
    socket: &OwnedFd,
    exits: &SignalFd,
) -> Result<(), StepError> {
    let close = |fd: RawFd| {
        // SAFETY: closing this child's copy of a descriptor the parent
        // owns; the child never uses the number again except through dup2.
        unsafe { libc::close(fd) };
    };
    // Copies above 4, so that placing one cannot overwrite the other.
    let high = |fd: RawFd| -> Result<RawFd, StepError> {
        // SAFETY: fcntl on a descriptor this child holds.
        let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
        if copy < 0 {
            return Err(StepError::os(format!("cannot copy descriptor {fd}"))(
                Errno::last(),
            ));
        }
        Ok(copy)
    };
    let (high_lock, high_control) = (high(lock.as_raw_fd())?, high(control.as_raw_fd())?);
    for fd in [
        socket.as_raw_fd(),
        exits.as_raw_fd(),
        lock.as_raw_fd(),
        control.as_raw_fd(),
    ] {
        close(fd);
    }
    for (from, to) in [(high_lock, LOCK_FD), (high_control, CONTROL_FD)] {
        // SAFETY: dup2 onto a number this child freed above.
        if unsafe { libc::dup2(from, to) } < 0 {
            return Err(StepError::os(format!("cannot place descriptor {to}"))(
                Errno::last(),
            ));
        }
        close(from);
    }
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
        .map_err(StepError::os("cannot unblock signals"))?;
    nix::unistd::setsid().map_err(StepError::os("cannot start a new session"))?;
    Ok(())
}

/// Makes `ps` show this supervisor as an exec'd one would be shown,
/// `/usr/sbin/ysstepd /var/spool/ysched/jobs/ID`, instead of the server's
/// `ysstepd --server`. The kernel allows this to a process with
/// CAP_SYS_RESOURCE (a system-mode daemon's); elsewhere the server's
/// command line stays.
fn show_command_line(dir: &Path) {
    let mut line: Vec<u8> = std::env::args_os()
        .next()
        .map(|program| program.as_bytes().to_vec())
        .unwrap_or_else(|| b"ysstepd".to_vec());
    line.push(0);
    line.extend_from_slice(dir.as_os_str().as_bytes());
    line.push(0);
    // Lives as long as the process: the kernel reads it for /proc/PID/cmdline.
    let line: &'static [u8] = Box::leak(line.into_boxed_slice());
    let start = line.as_ptr() as libc::c_ulong;
    let end = start + line.len() as libc::c_ulong;
    for (what, address) in [
        (libc::PR_SET_MM_ARG_START, start),
        (libc::PR_SET_MM_ARG_END, end),
    ] {
        // SAFETY: prctl with integer arguments; the addresses point into
        // the leaked buffer above, valid for the rest of the process.
        if unsafe { libc::prctl(libc::PR_SET_MM, what, address, 0, 0) } != 0 {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_survive_their_encoding() {
        for a in [
            Answer::Started(0),
            Answer::Started(4_194_304),
            Answer::Refused("fork: Resource temporarily unavailable".into()),
            Answer::Refused(String::new()),
        ] {
            assert_eq!(Answer::decode(&a.encode()), Some(a));
        }
    }

    #[test]
    fn a_malformed_answer_is_not_taken_for_a_pid() {
        assert_eq!(Answer::decode(b""), None);
        assert_eq!(Answer::decode(b"+12"), None);
        assert_eq!(Answer::decode(b"+12345"), None);
        assert_eq!(Answer::decode(b"?1234"), None);
    }
}
