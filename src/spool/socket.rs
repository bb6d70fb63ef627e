//! The daemon's socket, `SPOOL/ysctld.sock`: the quick way for a state
//! change (a submission, a cancel, a hold) to reach a running daemon.
//!
//! The spool files stay the protocol of record: they are how a request
//! waits for a daemon that is down, and how queries (whose replies may run
//! to megabytes) are answered. But a request that goes through files costs
//! its sender a reply file, an inotify watch (whose teardown needs a forked
//! child to stay off the command's path), a temporary file and a rename,
//! and costs the daemon a watcher thread's wake-up, an open, a read, a
//! reply file and an unlink: about a third of a sequential submission's
//! CPU on the build machine. Over the socket the same request is one
//! connect, one write and one read.
//!
//! The socket carries exactly what a file would: the request's unique
//! name on the first line, then the same JSON envelope; the sender then
//! shuts down its writing side, and the daemon answers with the reply's
//! JSON and closes. Identity comes from the kernel here too: the sender's
//! uid is the connection's peer credential (`SO_PEERCRED`), never anything
//! in the request.
//!
//! Nothing is lost when the socket fails. A request is applied once per
//! name (the daemon records each state change's name with its reply, in
//! the same transaction), so a sender that gets no complete reply (the
//! daemon crashed or restarted, or its reply did not fit the socket's
//! buffer) sends the same request, under the same name, as a spool file,
//! and gets the recorded reply, or the request is applied then.

use std::io::{self, ErrorKind, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::proto::Reply;

use super::dir::{valid_name, Ownership, Spool};

/// The socket's file name in the spool.
pub const SOCKET_NAME: &str = "ysctld.sock";

/// The longest path a Unix socket may have: `sun_path` less its NUL.
const MAX_SOCKET_PATH: usize = 107;

/// Connections whose request is still arriving, in all and from one user;
/// beyond these, new ones are closed at once (their senders use the spool
/// files instead), so that one user's idle connections cannot push every
/// other user off the socket.
const MAX_PENDING: usize = 256;
const MAX_PENDING_PER_USER: usize = 32;

/// How long a sender may take to send its request. A client sends it in one
/// write right after connecting; this bounds what a connection that never
/// finishes costs.
const SEND_WITHIN: Duration = Duration::from_secs(5);

impl Spool {
    pub fn socket_path(&self) -> PathBuf {
        self.root().join(SOCKET_NAME)
    }
}

/// A request as read from the socket, and the connection its reply goes
/// back on.
#[derive(Debug)]
pub struct SocketRequest {
    pub name: String,
    /// The sender's uid, from the kernel.
    pub uid: u32,
    /// The request envelope's JSON, as a spool file would hold it.
    pub body: Vec<u8>,
    pub connection: UnixStream,
}

/// Why no socket can be made at `path`, when its length alone says so.
pub fn path_too_long(path: &Path) -> Option<String> {
    let length = path.as_os_str().len();
    (length > MAX_SOCKET_PATH).then(|| {
        format!(
            "{} is {length} bytes, over the {MAX_SOCKET_PATH} a socket's path may have",
            path.display()
        )
    })
}

// ---------------------------------------------------------------- daemon side

/// Binds the socket, replacing one left by a daemon that is gone (the caller
/// holds the spool's daemon lock, so no live daemon owns it). Every user may
/// connect in system mode; in personal mode only the spool's owner.
pub fn bind(spool: &Spool, ownership: Ownership) -> io::Result<UnixListener> {
    let path = spool.socket_path();
    if let Some(reason) = path_too_long(&path) {
        return Err(io::Error::other(reason));
    }
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(&path)?;
    let mode = match ownership {
        Ownership::System => 0o666,
        Ownership::Personal => 0o600,
    };
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Removes the socket when the daemon stops, so that senders go straight to
/// the spool files instead of trying a socket nobody listens on.
pub fn unbind(spool: &Spool) {
    let _ = std::fs::remove_file(spool.socket_path());
}

/// A connection whose request is still arriving.
struct Pending {
    connection: UnixStream,
    uid: u32,
    received: Vec<u8>,
    since: Instant,
}

/// Accepts connections and reads their requests, handing each complete one
/// to `deliver`, until `deliver` returns false. Runs in a thread of its
/// own: many connections are read at once, so one slow sender delays no
/// other. `max_size` (`max_spool_file` when the daemon started) bounds
/// what is read of a request. Requests without a usable name are answered
/// here, with the reason.
pub fn serve(
    listener: UnixListener,
    max_size: u64,
    mut deliver: impl FnMut(SocketRequest) -> bool,
) {
    // The name line comes on top of the envelope.
    let cap = max_size.saturating_add(256) as usize;
    let mut pending: Vec<Pending> = Vec::new();
    loop {
        let mut fds = Vec::with_capacity(pending.len() + 1);
        fds.push(nix::poll::PollFd::new(
            listener.as_fd(),
            nix::poll::PollFlags::POLLIN,
        ));
        for p in &pending {
            fds.push(nix::poll::PollFd::new(
                p.connection.as_fd(),
                nix::poll::PollFlags::POLLIN,
            ));
        }
        let timeout = if pending.is_empty() {
            nix::poll::PollTimeout::NONE
        } else {
            nix::poll::PollTimeout::from(1000u16)
        };
        match nix::poll::poll(&mut fds, timeout) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                tracing::error!(target: "ysched::spool", "the daemon's socket stopped: poll failed: {e}");
                return;
            }
        }
        let ready: Vec<bool> = fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        drop(fds);

        // Read what arrived, back to front so that finished ones can go.
        for i in (0..pending.len()).rev() {
            if !ready[i + 1] {
                continue;
            }
            match read_available(&mut pending[i], cap) {
                Progress::More => {}
                Progress::Closed => {
                    pending.swap_remove(i);
                }
                Progress::Complete => {
                    let p = pending.swap_remove(i);
                    if let Some(request) = split_request(p) {
                        if !deliver(request) {
                            return;
                        }
                    }
                }
            }
        }
        let now = Instant::now();
        pending.retain(|p| now.duration_since(p.since) < SEND_WITHIN);

        if ready[0] {
            loop {
                let connection = match listener.accept() {
                    Ok((c, _)) => c,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    // Out of descriptors or memory: senders fall back to files.
                    Err(e) => {
                        tracing::warn!(target: "ysched::spool", "cannot accept on the daemon's socket: {e}");
                        break;
                    }
                };
                let uid = match nix::sys::socket::getsockopt(
                    &connection,
                    nix::sys::socket::sockopt::PeerCredentials,
                ) {
                    Ok(credentials) => credentials.uid(),
                    Err(_) => continue,
                };
                if !room_for(&pending, uid) || connection.set_nonblocking(true).is_err() {
                    continue;
                }
                pending.push(Pending {
                    connection,
                    uid,
                    received: Vec::new(),
                    since: Instant::now(),
                });
            }
        }
    }
}

/// Whether another connection from `uid` may wait for its request.
fn room_for(pending: &[Pending], uid: u32) -> bool {
    pending.len() < MAX_PENDING
        && pending.iter().filter(|p| p.uid == uid).count() < MAX_PENDING_PER_USER
}

enum Progress {
    More,
    Complete,
    /// Dropped: the sender went away, or sent too much.
    Closed,
}

fn read_available(p: &mut Pending, cap: usize) -> Progress {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        match p.connection.read(&mut buffer) {
            // Connected and closed without a word (a probe): nothing to answer.
            Ok(0) if p.received.is_empty() => return Progress::Closed,
            Ok(0) => return Progress::Complete,
            Ok(n) => {
                p.received.extend_from_slice(&buffer[..n]);
                // Closed unanswered: its sender sends it as a file, and the
                // daemon answers that with the limit now in force.
                if p.received.len() > cap {
                    return Progress::Closed;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Progress::More,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return Progress::Closed,
        }
    }
}

/// The name line and the envelope; a request without a usable name is
/// answered here.
fn split_request(mut p: Pending) -> Option<SocketRequest> {
    let Some(end) = p.received.iter().position(|&b| b == b'\n') else {
        refuse(&mut p, "request has no name line".into());
        return None;
    };
    let name = String::from_utf8_lossy(&p.received[..end]).into_owned();
    if !valid_name(&name) {
        refuse(
            &mut p,
            format!(
                "request name '{}' is not a valid spool name ([A-Za-z0-9._-], at most 128)",
                name.escape_debug()
            ),
        );
        return None;
    }
    p.received.drain(..=end);
    Some(SocketRequest {
        name,
        uid: p.uid,
        body: p.received,
        connection: p.connection,
    })
}

fn refuse(p: &mut Pending, error: String) {
    tracing::warn!(target: "ysched::spool", "rejected a request on the daemon's socket (uid {}): {error}", p.uid);
    answer(&p.connection, &Reply::Rejected { error });
}

/// Writes the reply and lets the connection close. Never blocks: a reply
/// that does not fit the socket's buffer arrives cut short, and its
/// sender asks again through the spool files, where the reply recorded
/// under the request's name waits.
pub fn answer(mut connection: &UnixStream, reply: &Reply) {
    let body = match serde_json::to_vec(reply) {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(target: "ysched::spool", "cannot encode a reply: {e}");
            return;
        }
    };
    let _ = connection.set_nonblocking(true);
    let _ = connection.write_all(&body);
}

// ---------------------------------------------------------------- client side

/// Connects to the daemon's socket and sends the request. `None` when
/// there is no daemon listening (none runs, or it predates the socket) or
/// the request could not be sent whole: the caller uses the spool files.
pub fn send(socket: &Path, name: &str, body: &[u8]) -> Option<UnixStream> {
    let mut connection = UnixStream::connect(socket).ok()?;
    let mut message = Vec::with_capacity(name.len() + 1 + body.len());
    message.extend_from_slice(name.as_bytes());
    message.push(b'\n');
    message.extend_from_slice(body);
    connection.write_all(&message).ok()?;
    connection.shutdown(std::net::Shutdown::Write).ok()?;
    Some(connection)
}

/// What came back on the socket.
#[derive(Debug)]
pub enum Answer {
    Reply(Reply),
    /// Nothing yet, and the time is up.
    TimedOut,
    /// The connection ended without a whole reply.
    Lost,
}

/// Reads the daemon's reply, waiting until `deadline`.
pub fn receive(connection: &mut UnixStream, deadline: Instant) -> Answer {
    let mut text = Vec::new();
    let mut buffer = [0u8; 8 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Answer::TimedOut;
        }
        if connection.set_read_timeout(Some(left)).is_err() {
            return Answer::Lost;
        }
        match connection.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => text.extend_from_slice(&buffer[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Answer::TimedOut
            }
            Err(_) => return Answer::Lost,
        }
    }
    match serde_json::from_slice(&text) {
        Ok(reply) => Answer::Reply(reply),
        Err(_) => Answer::Lost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(received: &[u8]) -> (Pending, UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let p = Pending {
            connection: ours,
            uid: 1000,
            received: received.to_vec(),
            since: Instant::now(),
        };
        (p, theirs)
    }

    fn reply_on(mut theirs: UnixStream) -> Reply {
        let mut text = Vec::new();
        theirs.read_to_end(&mut text).unwrap();
        serde_json::from_slice(&text).unwrap()
    }

    #[test]
    fn the_name_line_is_split_from_the_envelope() {
        let (p, _theirs) = pending(b"job-1-2-3\n{\"version\":1}");
        let request = split_request(p).unwrap();
        assert_eq!(request.name, "job-1-2-3");
        assert_eq!(request.uid, 1000);
        assert_eq!(request.body, b"{\"version\":1}");
    }

    #[test]
    fn a_request_without_a_usable_name_is_answered_with_the_reason() {
        let (p, theirs) = pending(b"{\"version\":1}");
        assert!(split_request(p).is_none());
        let Reply::Rejected { error } = reply_on(theirs) else {
            panic!("not a rejection")
        };
        assert!(error.contains("no name line"), "{error}");

        let (p, theirs) = pending(b"../../etc/passwd\n{}");
        assert!(split_request(p).is_none());
        let Reply::Rejected { error } = reply_on(theirs) else {
            panic!("not a rejection")
        };
        assert!(error.contains("'../../etc/passwd'"), "{error}");
    }

    #[test]
    fn a_reply_cut_short_is_lost_not_misread() {
        let (mut ours, mut theirs) = UnixStream::pair().unwrap();
        theirs.write_all(b"{\"kind\":\"submitted\",\"job_").unwrap();
        drop(theirs);
        let deadline = Instant::now() + Duration::from_secs(5);
        assert!(matches!(receive(&mut ours, deadline), Answer::Lost));
    }

    #[test]
    fn one_user_cannot_take_every_waiting_place() {
        let mut waiting = Vec::new();
        let mut ends = Vec::new();
        for _ in 0..MAX_PENDING_PER_USER {
            assert!(room_for(&waiting, 1000));
            let (p, theirs) = pending(b"");
            waiting.push(p);
            ends.push(theirs);
        }
        assert!(!room_for(&waiting, 1000), "the user's share is full");
        assert!(room_for(&waiting, 1001), "another user still gets in");
        while waiting.len() < MAX_PENDING {
            let (mut p, theirs) = pending(b"");
            p.uid = 2000 + waiting.len() as u32;
            waiting.push(p);
            ends.push(theirs);
        }
        assert!(!room_for(&waiting, 1001), "and none when all are taken");
    }

    #[test]
    fn a_socket_path_over_107_bytes_is_refused_by_its_length() {
        assert_eq!(
            path_too_long(Path::new("/var/spool/ysched/ysctld.sock")),
            None
        );
        let long = format!("/{}", "d".repeat(106));
        assert_eq!(path_too_long(Path::new(&long)), None);
        let longer = format!("/{}", "d".repeat(107));
        let reason = path_too_long(Path::new(&longer)).unwrap();
        assert!(reason.contains("is 108 bytes, over the 107"), "{reason}");
    }

    #[test]
    fn a_silent_daemon_times_out() {
        let (mut ours, _theirs) = UnixStream::pair().unwrap();
        let deadline = Instant::now() + Duration::from_millis(50);
        assert!(matches!(receive(&mut ours, deadline), Answer::TimedOut));
    }
}
