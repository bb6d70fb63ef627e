//! The spool directory and its protocol.
//!
//! ```text
//! SPOOL/incoming/   1733  drop box: requests, written as .NAME.tmp, fsync'd, renamed to NAME
//! SPOOL/replies/    1733  NAME, created (0600) by the requester before it sends, filled by the daemon
//! SPOOL/jobs/<id>/  0711  the job's spec, script, supervisor state (root's, but for the script)
//! SPOOL/ysched.db   0600  the daemon's SQLite database
//! SPOOL/ysctld.pid  0644  the daemon's pid, flock'ed while it runs
//! SPOOL/ysctld.sock 0666  the running daemon's socket (personal mode: 0600)
//! SPOOL/reserve     0644  room kept for recording jobs when the filesystem fills (space.rs)
//! ```
//!
//! The requester makes its reply file itself and watches it with inotify, so
//! it sleeps until the daemon closes the file after writing — no polling on
//! either side. The daemon trusts nothing in a request for identity: the uid
//! is the request file's owner as the kernel reports it, and the reply file
//! is written only if that same uid owns it.
//!
//! A running daemon also takes state changes on `SPOOL/ysctld.sock`, the
//! same request in fewer steps; [`socket`] says how, and why nothing is
//! lost when it fails.

use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use thiserror::Error;

use crate::proto::{Envelope, Reply, PROTOCOL_VERSION};
use crate::report::table::RowTable;

pub mod socket;
pub mod space;

#[derive(Debug, Error)]
pub enum SpoolError {
    #[error(
        "spool directory {0} does not exist; is ysctld installed and has it been started once?"
    )]
    Missing(PathBuf),
    #[error("cannot write to the spool {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("cannot read the reply {path}: {source}")]
    Reply { path: PathBuf, source: io::Error },
    #[error("another ysctld (pid {pid}) already runs on spool {spool}")]
    AlreadyRunning { pid: String, spool: PathBuf },
    #[error("cannot prepare spool {path}: {source}")]
    Prepare { path: PathBuf, source: io::Error },
    #[error("spool {spool} is the personal spool of {owner}; only they can use it")]
    Foreign { spool: PathBuf, owner: String },
}

/// Who owns the spool: root, serving every user (system mode), or one
/// unprivileged user, serving only themselves (personal mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ownership {
    System,
    Personal,
}

impl Ownership {
    pub fn of_this_process() -> Ownership {
        if nix::unistd::geteuid().is_root() {
            Ownership::System
        } else {
            Ownership::Personal
        }
    }
}

#[derive(Clone, Debug)]
pub struct Spool {
    root: PathBuf,
}

impl Spool {
    pub fn new(root: impl Into<PathBuf>) -> Spool {
        Spool { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn incoming(&self) -> PathBuf {
        self.root.join("incoming")
    }
    pub fn replies(&self) -> PathBuf {
        self.root.join("replies")
    }
    pub fn jobs(&self) -> PathBuf {
        self.root.join("jobs")
    }
    pub fn job_dir(&self, id: u64) -> PathBuf {
        self.jobs().join(id.to_string())
    }
    pub fn database(&self) -> PathBuf {
        self.root.join("ysched.db")
    }
    pub fn pid_file(&self) -> PathBuf {
        self.root.join("ysctld.pid")
    }

    /// Creates the layout with the modes above (personal mode: all 0700),
    /// repairing modes of directories that already exist.
    pub fn prepare(&self, ownership: Ownership) -> Result<(), SpoolError> {
        let (root_mode, dropbox_mode, jobs_mode) = match ownership {
            Ownership::System => (0o755, 0o1733, 0o711),
            Ownership::Personal => (0o700, 0o700, 0o700),
        };
        let err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| SpoolError::Prepare { path, source }
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(root_mode)
            .create(&self.root)
            .map_err(err(&self.root))?;
        for (dir, mode) in [
            (self.root.clone(), root_mode),
            (self.incoming(), dropbox_mode),
            (self.replies(), dropbox_mode),
            (self.jobs(), jobs_mode),
        ] {
            match fs::DirBuilder::new().mode(mode).create(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(err(&dir)(e)),
            }
            let meta = fs::symlink_metadata(&dir).map_err(err(&dir))?;
            if !meta.is_dir() {
                return Err(err(&dir)(io::Error::other("exists and is not a directory")));
            }
            if ownership == Ownership::System && meta.uid() != 0 {
                std::os::unix::fs::lchown(&dir, Some(0), Some(0)).map_err(err(&dir))?;
            }
            // set_permissions, as DirBuilder's mode is filtered by the umask.
            fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).map_err(err(&dir))?;
        }
        Ok(())
    }

    // ------------------------------------------------------------ daemon lock

    /// Takes the daemon's lock; fails if another daemon holds it.
    pub fn lock_daemon(&self) -> Result<DaemonLock, SpoolError> {
        let path = self.pid_file();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|source| SpoolError::Prepare {
                path: path.clone(),
                source,
            })?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                return Err(SpoolError::AlreadyRunning {
                    pid: pid.trim().to_string(),
                    spool: self.root.clone(),
                });
            }
            Err(fs::TryLockError::Error(source)) => {
                return Err(SpoolError::Prepare { path, source })
            }
        }
        let _ = fs::set_permissions(&path, fs::Permissions::from_mode(0o644));
        file.set_len(0)
            .and_then(|_| writeln!(file, "{}", std::process::id()))
            .map_err(|source| SpoolError::Prepare {
                path: path.clone(),
                source,
            })?;
        Ok(DaemonLock { _file: file })
    }

    /// Whether a daemon holds the lock right now.
    pub fn daemon_state(&self) -> DaemonState {
        if !self.incoming().is_dir() {
            return DaemonState::NoSpool;
        }
        let Ok(file) = File::open(self.pid_file()) else {
            return DaemonState::Stopped;
        };
        match file.try_lock_shared() {
            Ok(()) => DaemonState::Stopped,
            Err(fs::TryLockError::WouldBlock) => DaemonState::Running,
            Err(fs::TryLockError::Error(_)) => DaemonState::Stopped,
        }
    }

    // ------------------------------------------------------------ client side

    /// Sends a request: a state change for a running daemon on its socket
    /// (see [`socket`]), anything else, or when no daemon listens, as a
    /// file (see [`SentRequest::send_file`]).
    pub fn send(
        &self,
        envelope: &Envelope,
        durability: Durability,
    ) -> Result<SentRequest, SpoolError> {
        let owner = match fs::metadata(self.incoming()) {
            Ok(m) if m.is_dir() => m.uid(),
            _ => return Err(SpoolError::Missing(self.root.clone())),
        };
        // A spool not owned by root is one user's personal spool: its daemon
        // could neither serve nor answer anyone else.
        if owner != 0 && owner != nix::unistd::geteuid().as_raw() {
            let name = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(owner))
                .ok()
                .flatten()
                .map_or_else(|| format!("uid {owner}"), |u| u.name);
            return Err(SpoolError::Foreign {
                spool: self.root.clone(),
                owner: name,
            });
        }
        let name = unique_name(envelope.request.kind());
        let body = serde_json::to_vec(envelope).map_err(|e| SpoolError::Write {
            path: self.incoming().join(&name),
            source: io::Error::other(e),
        })?;
        let mut sent = SentRequest {
            spool: self.clone(),
            reply_path: self.replies().join(&name),
            name,
            inotify: None,
            reply_made: false,
            direct: None,
        };
        // A running daemon takes state changes on its socket. Queries stay
        // on the files: their replies are streamed, and may be long.
        let is_query = matches!(envelope.request, crate::proto::Request::Query(_));
        if durability == Durability::OnDemand && !is_query {
            if let Some(connection) = socket::send(&self.socket_path(), &sent.name, &body) {
                sent.direct = Some(Direct { connection, body });
                return Ok(sent);
            }
        }
        sent.send_file(&body, durability)?;
        Ok(sent)
    }
}

pub struct DaemonLock {
    _file: File,
}

/// When a request file is flushed to disk.
///
/// A request is accepted either when the daemon replies, which it does only
/// after committing the request to its database (durable), or when the
/// client, getting no reply, tells its user the request is spooled. Only the
/// second needs the client's own fsync, so a client talking to a running
/// daemon defers it ([`SentRequest::make_durable`]) and saves a disk flush
/// per submission without promising less.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Before it is renamed into place (no daemon to reply).
    Now,
    /// Only if asked later, before claiming the request is spooled.
    OnDemand,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DaemonState {
    Running,
    Stopped,
    /// The spool was never created.
    NoSpool,
}

/// How a streamed reply begins.
const STREAM_HEADER: &str = "{\"stream\":";

#[derive(serde::Serialize, serde::Deserialize)]
struct StreamHeader {
    stream: String,
    now: i64,
}

/// How long a streamed reply may stall before the reader gives up.
const STREAM_STALL: Duration = Duration::from_secs(30);

/// The rows of a streamed reply, read as the daemon writes them.
pub struct RowStream {
    sent: SentRequest,
    reader: io::BufReader<File>,
    /// A line read only in part so far.
    partial: Vec<u8>,
    done: bool,
}

impl RowStream {
    /// The next row; `None` after the last.
    pub fn next_row(&mut self) -> Result<Option<Vec<String>>, SpoolError> {
        self.next_line_with(|line| serde_json::from_slice(line))
    }

    /// Appends the next row to `table`; false after the last.
    pub fn next_row_into(&mut self, table: &mut RowTable) -> Result<bool, SpoolError> {
        Ok(self.next_line_with(|line| table.push_json(line))?.is_some())
    }

    /// Waits for the next row's line and gives it to `parse`; `None` after
    /// the last.
    fn next_line_with<T>(
        &mut self,
        parse: impl FnOnce(&[u8]) -> serde_json::Result<T>,
    ) -> Result<Option<T>, SpoolError> {
        use std::io::BufRead;
        if self.done {
            return Ok(None);
        }
        // Per row: no allocation but the row's own (the line buffer is
        // reused, the error path built only on error), since ysqueue and
        // ysacct read tens of thousands of rows through here.
        let reply_path = &self.sent.reply_path;
        let fail = |e: io::Error| SpoolError::Reply {
            path: reply_path.clone(),
            source: e,
        };
        let mut stalled_since: Option<Instant> = None;
        loop {
            let n = self
                .reader
                .read_until(b'\n', &mut self.partial)
                .map_err(fail)?;
            if self.partial.ends_with(b"\n") {
                if self.partial.starts_with(b"[") {
                    let parsed = parse(&self.partial);
                    self.partial.clear();
                    return parsed.map(Some).map_err(|e| fail(io::Error::other(e)));
                }
                let line = std::mem::take(&mut self.partial);
                self.done = true;
                let end: serde_json::Value =
                    serde_json::from_slice(&line).map_err(|e| fail(io::Error::other(e)))?;
                if let Some(error) = end.get("error").and_then(|e| e.as_str()) {
                    return Err(fail(io::Error::other(format!(
                        "ysctld stopped the listing: {error}"
                    ))));
                }
                return Ok(None);
            }
            if n > 0 {
                stalled_since = None;
                continue;
            }
            // At the end of what is written so far: wait for more.
            let since = *stalled_since.get_or_insert_with(Instant::now);
            let left = STREAM_STALL.saturating_sub(since.elapsed());
            if left.is_zero() {
                return Err(fail(io::Error::other(
                    "ysctld stopped writing the listing half way",
                )));
            }
            match &self.sent.inotify {
                Some(inotify) => {
                    let mut fds = [nix::poll::PollFd::new(
                        inotify.as_fd(),
                        nix::poll::PollFlags::POLLIN,
                    )];
                    let ms = left.as_millis().min(1_000) as u16;
                    let _ = nix::poll::poll(&mut fds, ms);
                    let _ = inotify.read_events();
                }
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

/// A request in the spool, waiting for its reply.
pub struct SentRequest {
    spool: Spool,
    name: String,
    reply_path: PathBuf,
    inotify: Option<Inotify>,
    /// Whether this command made the reply file (and removes it).
    reply_made: bool,
    /// Sent on the daemon's socket, and not (yet) as a file.
    direct: Option<Direct>,
}

/// A request sent on the daemon's socket, kept to send again as a file.
struct Direct {
    connection: std::os::unix::net::UnixStream,
    body: Vec<u8>,
}

impl SentRequest {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sends the request as a file: creates the reply file and its watch
    /// first, then writes the request under a temporary name and renames it
    /// into place, fsync'ing it first when `durability` says so.
    fn send_file(&mut self, body: &[u8], durability: Durability) -> Result<(), SpoolError> {
        let write_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| SpoolError::Write { path, source }
        };
        let reply_path = &self.reply_path;
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(reply_path)
            .map_err(write_err(reply_path))?;
        self.reply_made = true;
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK)
            .and_then(|ino| {
                // Modify too: streamed rows arrive before the file is closed.
                ino.add_watch(
                    reply_path,
                    AddWatchFlags::IN_CLOSE_WRITE | AddWatchFlags::IN_MODIFY,
                )
                .map(|_| ino)
            })
            .map_err(|e| write_err(reply_path)(io::Error::from(e)))?;
        self.inotify = Some(inotify);

        let incoming = self.spool.incoming();
        let temp = incoming.join(format!(".{}.tmp", self.name));
        let final_path = incoming.join(&self.name);
        let result = (|| -> io::Result<()> {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&temp)?;
            file.write_all(body)?;
            if durability == Durability::Now {
                file.sync_all()?;
            }
            drop(file);
            fs::rename(&temp, &final_path)?;
            // The rename itself must survive a power cut once the user is
            // told the job is spooled.
            if durability == Durability::Now {
                sync_dir(&incoming)?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            let _ = fs::remove_file(&temp);
            return Err(write_err(&final_path)(e));
        }
        Ok(())
    }

    /// The rows of a reply that came as `Reply::Streamed`.
    pub fn into_rows(self) -> Result<RowStream, SpoolError> {
        use std::io::BufRead;
        let file = File::open(&self.reply_path).map_err(|source| SpoolError::Reply {
            path: self.reply_path.clone(),
            source,
        })?;
        let mut reader = io::BufReader::new(file);
        let mut header = Vec::new();
        reader
            .read_until(b'\n', &mut header)
            .map_err(|source| SpoolError::Reply {
                path: self.reply_path.clone(),
                source,
            })?;
        Ok(RowStream {
            sent: self,
            reader,
            partial: Vec::new(),
            done: false,
        })
    }

    /// Waits up to `timeout` for the daemon's reply; `Ok(None)` on timeout.
    pub fn wait(&mut self, timeout: Duration) -> Result<Option<Reply>, SpoolError> {
        let deadline = Instant::now() + timeout;
        if let Some(mut direct) = self.direct.take() {
            match socket::receive(&mut direct.connection, deadline) {
                socket::Answer::Reply(reply) => return Ok(Some(reply)),
                socket::Answer::TimedOut => {
                    self.direct = Some(direct);
                    return Ok(None);
                }
                // The daemon went away, or its answer did not fit: ask
                // again through the files, under the same name, so that a
                // request already applied is answered, not applied twice.
                socket::Answer::Lost => self.send_file(&direct.body, Durability::OnDemand)?,
            }
        }
        loop {
            if let Some(reply) = self.try_read()? {
                return Ok(Some(reply));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let Some(inotify) = &self.inotify else {
                return Ok(None);
            };
            let ms = left.as_millis().min(i32::MAX as u128) as i32;
            let mut fds = [nix::poll::PollFd::new(
                inotify.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            match nix::poll::poll(
                &mut fds,
                nix::poll::PollTimeout::try_from(ms).unwrap_or(nix::poll::PollTimeout::MAX),
            ) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    return Err(SpoolError::Reply {
                        path: self.reply_path.clone(),
                        source: e.into(),
                    })
                }
            }
            let _ = inotify.read_events();
        }
    }

    /// Reads the reply if the daemon has written a complete one.
    fn try_read(&self) -> Result<Option<Reply>, SpoolError> {
        let text = match fs::read(&self.reply_path) {
            Ok(t) => t,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(SpoolError::Reply {
                    path: self.reply_path.clone(),
                    source,
                })
            }
        };
        if text.is_empty() {
            return Ok(None);
        }
        // Streamed rows: a header line, then the rows as they come.
        if text.starts_with(STREAM_HEADER.as_bytes()) {
            let Some(end) = text.iter().position(|&b| b == b'\n') else {
                return Ok(None);
            };
            let header: StreamHeader =
                serde_json::from_slice(&text[..end]).map_err(|e| SpoolError::Reply {
                    path: self.reply_path.clone(),
                    source: io::Error::other(e),
                })?;
            return Ok(Some(Reply::Streamed { now: header.now }));
        }
        // A reply being written is incomplete JSON; the close event follows.
        Ok(serde_json::from_slice(&text).ok())
    }

    /// Flushes the request file to disk if it is still in the spool (if it is
    /// gone, the daemon committed it before removing it).
    pub fn make_durable(&mut self) -> Result<(), SpoolError> {
        // Still only on the socket: put it in the spool, flushed, under the
        // same name (the daemon applies a name once, whichever way it came).
        if let Some(direct) = self.direct.take() {
            return self.send_file(&direct.body, Durability::Now);
        }
        let path = self.spool.incoming().join(&self.name);
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path);
        match file {
            Ok(f) => f
                .sync_all()
                .and_then(|()| sync_dir(&self.spool.incoming()))
                .map_err(|source| SpoolError::Write { path, source }),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(source) => Err(SpoolError::Write { path, source }),
        }
    }

    /// Takes the request back out of the spool (a query nobody will answer).
    pub fn withdraw(self) {
        let _ = fs::remove_file(self.spool.incoming().join(&self.name));
    }
}

impl Drop for SentRequest {
    fn drop(&mut self) {
        if let Some(inotify) = self.inotify.take() {
            close_watch_off_path(inotify);
        }
        if self.reply_made {
            let _ = fs::remove_file(&self.reply_path);
        }
    }
}

/// Closes an inotify instance without waiting for it. The last close of
/// one makes the kernel wait for its watches to be torn down (an SRCU
/// grace period: about 7 ms on the build machine), which was most of a
/// command's run and capped sequential submissions near 130/s. A child
/// that holds a copy of the descriptor makes this close not the last: the
/// child pays the wait, after closing its standard streams so that a shell
/// reading the command's output is not kept waiting.
fn close_watch_off_path(inotify: Inotify) {
    // SAFETY: the child only calls close and _exit, which are
    // async-signal-safe, so forking here is sound even with threads.
    match unsafe { libc::fork() } {
        0 => unsafe {
            libc::close(0);
            libc::close(1);
            libc::close(2);
            libc::_exit(0)
        },
        // No child (fork failed): pay the wait here.
        _ => drop(inotify),
    }
}

/// `job-4242-18a3f0c2b1e4d5f6-9c1d2e3f4a5b6c7d`: kind, pid, time, randomness.
pub fn unique_name(kind: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut random = [0u8; 8];
    // SAFETY: getrandom writes at most `random.len()` bytes into the buffer.
    let got = unsafe { libc::getrandom(random.as_mut_ptr().cast(), random.len(), 0) };
    if got != random.len() as isize {
        random = (nanos ^ (std::process::id() as u64).rotate_left(32)).to_le_bytes();
    }
    format!(
        "{kind}-{}-{nanos:x}-{:x}",
        std::process::id(),
        u64::from_le_bytes(random)
    )
}

/// How long ago the command that chose `name` (see `unique_name`) sent
/// it, by the sender's clock; `None` for a name without a time or from the
/// future.
pub fn age_of_name(name: &str) -> Option<std::time::Duration> {
    let nanos = u64::from_str_radix(name.split('-').nth(2)?, 16).ok()?;
    let sent = SystemTime::UNIX_EPOCH + std::time::Duration::from_nanos(nanos);
    SystemTime::now().duration_since(sent).ok()
}

/// Names the daemon accepts: no path separators, no hidden files, nothing a
/// terminal or a log line could misread.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

// ---------------------------------------------------------------- daemon side

/// What the daemon found under one name in `incoming/`.
#[derive(Debug)]
pub enum Inbound {
    Request {
        name: String,
        uid: u32,
        envelope: Envelope,
    },
    /// A file that cannot be a request; it is removed and, where its owner
    /// made a reply file, answered with the reason.
    Bad {
        name: String,
        uid: Option<u32>,
        reason: String,
    },
    /// Nothing to do: it vanished, or is a client's temporary file.
    Skip,
}

impl Spool {
    pub fn list_incoming(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(self.incoming())? {
            let entry = entry?;
            if let Some(name) = entry.file_name().to_str() {
                if !name.starts_with('.') {
                    names.push(name.to_string());
                }
            } else {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        Ok(names)
    }

    /// Opens and checks one request: no symlinks, a regular file with one
    /// link, at most `max_size` bytes, UTF-8 JSON of a known version.
    pub fn read_request(&self, name: &str, max_size: u64) -> Inbound {
        if name.starts_with('.') {
            return Inbound::Skip;
        }
        let path = self.incoming().join(name);
        let owner = || fs::symlink_metadata(&path).ok().map(|m| m.uid());
        let bad = |reason: String, uid: Option<u32>| Inbound::Bad {
            name: name.to_string(),
            uid,
            reason,
        };
        if !valid_name(name) {
            return bad(
                format!(
                    "request name '{}' has characters outside [A-Za-z0-9._-]",
                    name.escape_debug()
                ),
                owner(),
            );
        }
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(&path);
        let mut file = match file {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Inbound::Skip,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return bad(
                    "request is a symbolic link; only regular files are accepted".into(),
                    owner(),
                )
            }
            Err(e) => return bad(format!("cannot open request: {e}"), owner()),
        };
        let meta = match file.metadata() {
            Ok(m) => m,
            Err(e) => return bad(format!("cannot stat request: {e}"), owner()),
        };
        let uid = Some(meta.uid());
        let ft = meta.file_type();
        if !ft.is_file() {
            let what = if ft.is_dir() {
                "a directory"
            } else if std::os::unix::fs::FileTypeExt::is_fifo(&ft) {
                "a FIFO"
            } else if std::os::unix::fs::FileTypeExt::is_socket(&ft) {
                "a socket"
            } else {
                "a device or special file"
            };
            return bad(
                format!("request is {what}; only regular files are accepted"),
                uid,
            );
        }
        if meta.nlink() != 1 {
            return bad(
                format!(
                    "request has {} hard links; it must have exactly one",
                    meta.nlink()
                ),
                uid,
            );
        }
        if meta.len() > max_size {
            return bad(
                format!(
                    "request is {} bytes, over the limit of {max_size} (max_spool_file)",
                    meta.len()
                ),
                uid,
            );
        }
        let mut body = Vec::with_capacity(meta.len() as usize);
        if let Err(e) = (&mut file).take(max_size + 1).read_to_end(&mut body) {
            return bad(format!("cannot read request: {e}"), uid);
        }
        if body.len() as u64 > max_size {
            return bad(
                format!("request grew over the limit of {max_size} bytes while being read"),
                uid,
            );
        }
        parse_request(name, meta.uid(), &body, max_size)
    }
}

/// Reads a request's envelope from its bytes, however it came (a spool file
/// or the daemon's socket), sent by `sender` as the kernel reports it.
pub fn parse_request(name: &str, sender: u32, body: &[u8], max_size: u64) -> Inbound {
    let uid = Some(sender);
    let bad = |reason: String, uid: Option<u32>| Inbound::Bad {
        name: name.to_string(),
        uid,
        reason,
    };
    if body.len() as u64 > max_size {
        return bad(
            format!(
                "request is {} bytes, over the limit of {max_size} (max_spool_file)",
                body.len()
            ),
            uid,
        );
    }
    let text = match std::str::from_utf8(body) {
        Ok(t) => t,
        Err(e) => {
            return bad(
                format!("request is not valid UTF-8 (at byte {})", e.valid_up_to()),
                uid,
            )
        }
    };
    // Check the version first, so an old or new client gets a clear answer.
    let version = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v.get("version").and_then(|v| v.as_u64()));
    if let Some(v) = version {
        if v != PROTOCOL_VERSION as u64 {
            return bad(
                    format!("request uses protocol version {v}; this ysctld speaks version {PROTOCOL_VERSION} (mismatched ysched versions?)"),
                    uid,
                );
        }
    }
    match serde_json::from_str::<Envelope>(text) {
        Ok(envelope) => Inbound::Request {
            name: name.to_string(),
            uid: sender,
            envelope,
        },
        Err(e) if e.is_eof() => bad(format!("request is truncated ({} bytes)", body.len()), uid),
        Err(e) => bad(format!("request is not a valid ysched request: {e}"), uid),
    }
}

/// Flushes a directory's entries (a rename or unlink in it) to disk.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

impl Spool {
    /// Removes processed or rejected entries from `incoming/`, and makes
    /// their removal durable with one flush of the directory: a request
    /// that came back after a power cut would be a second copy of one the
    /// database recorded (its name would still be refused as applied, for
    /// as long as request names are kept).
    pub fn discard_all(&self, names: &[String]) {
        for name in names {
            self.discard(name);
        }
        if !names.is_empty() {
            if let Err(e) = sync_dir(&self.incoming()) {
                tracing::warn!(target: "ysched::spool", "cannot flush {}: {e}", self.incoming().display());
            }
        }
    }

    /// Removes a processed or rejected entry from `incoming/`.
    pub fn discard(&self, name: &str) {
        let path = self.incoming().join(name);
        match fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => {
                let _ = fs::remove_dir_all(&path);
            }
            Ok(_) => {
                let _ = fs::remove_file(&path);
            }
            Err(_) => {}
        }
    }

    /// Writes the reply into the file the requester made. Returns false when
    /// there is none, or it is not a plain file owned by `uid` (then nothing
    /// is written: a reply never lands in a file its requester does not own).
    pub fn write_reply(&self, name: &str, uid: u32, reply: &Reply) -> bool {
        let Some(mut file) = self.open_reply(name, uid) else {
            return false;
        };
        let body = match serde_json::to_vec(reply) {
            Ok(b) => b,
            Err(e) => {
                // A bug, not the requester's fault: say so to both.
                tracing::error!(target: "ysched::spool", "cannot encode the reply to {name}: {e}");
                let error = Reply::Rejected {
                    error: format!("ysctld could not encode its answer ({e}); see its log"),
                };
                serde_json::to_vec(&error).unwrap_or_default()
            }
        };
        file.write_all(&body).is_ok()
    }

    /// Streams rows into a reply file: a header line, a JSON array per row
    /// as `rows` yields it, and an end line (or an error line). Writes in
    /// buffered chunks; the requester reads them as they land.
    pub fn stream_reply<E: std::fmt::Display>(
        &self,
        name: &str,
        uid: u32,
        now: i64,
        rows: impl FnOnce(&mut dyn FnMut(&[String]) -> io::Result<()>) -> Result<(), E>,
    ) -> bool {
        let Some(file) = self.open_reply(name, uid) else {
            return false;
        };
        let mut out = io::BufWriter::with_capacity(64 * 1024, file);
        let header = serde_json::to_string(&StreamHeader {
            stream: "rows".into(),
            now,
        })
        .unwrap_or_default();
        if writeln!(out, "{header}").is_err() {
            return false;
        }
        let mut count = 0u64;
        let result = rows(&mut |cells: &[String]| {
            count += 1;
            serde_json::to_writer(&mut out, cells).map_err(io::Error::other)?;
            out.write_all(b"\n")
        });
        let end = match result {
            Ok(()) => serde_json::json!({ "end": count }),
            Err(e) => serde_json::json!({ "error": e.to_string() }),
        };
        writeln!(out, "{end}").and_then(|()| out.flush()).is_ok()
    }

    /// Opens the reply file the requester made, if it is a plain file of
    /// theirs, and empties it if the requester left anything in it.
    ///
    /// An empty file is not truncated: on ext4, truncating to zero marks
    /// the file for a forced write-back when it is closed (the
    /// replace-via-truncate heuristic), a disk write per reply that showed
    /// up in the daemon's profile, and it wakes the requester once more.
    fn open_reply(&self, name: &str, uid: u32) -> Option<File> {
        if !valid_name(name) {
            return None;
        }
        let path = self.replies().join(name);
        let file = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(&path)
            .ok()?;
        let meta = file.metadata().ok()?;
        if !meta.is_file() || meta.uid() != uid || meta.nlink() != 1 {
            tracing::warn!(target: "ysched::spool", "reply file {} is not a plain file of uid {uid}; not answered", path.display());
            return None;
        }
        if meta.len() > 0 {
            file.set_len(0).ok()?;
        }
        Some(file)
    }

    /// Removes replies and temporary request files older than `age`: left by
    /// clients that were killed while waiting.
    pub fn remove_stale(&self, age: Duration) {
        let cutoff = SystemTime::now() - age;
        for dir in [self.replies(), self.incoming()] {
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let is_temp = name.to_string_lossy().starts_with('.');
                if dir == self.incoming() && !is_temp {
                    continue;
                }
                let old = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .map(|t| t < cutoff)
                    .unwrap_or(false);
                if old {
                    let _ = fs::remove_file(entry.path());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Query, Request};

    #[test]
    fn streamed_rows_keep_their_cells_in_one_table() {
        let cells = ["17_[3-9%2]", "", "tab\there \"quoted\"", "naïve ✓", "\\"];
        let line = serde_json::to_vec(&cells).unwrap();
        let mut table = RowTable::default();
        table.push_json(&line).unwrap();
        table.push_json(b"[]").unwrap();
        table.push_json(&line).unwrap();
        assert_eq!(table.len(), 3);
        assert_eq!(table.row(0).cells().collect::<Vec<_>>(), cells);
        assert_eq!(table.row(0).cell(4), "\\");
        assert_eq!(table.row(0).cell(9), "", "past the last cell");
        assert_eq!(table.row(1).cells().count(), 0);
        assert_eq!(table.row(1).cell(0), "", "an empty row has no cells");
        assert_eq!(table.row(2).cells().collect::<Vec<_>>(), cells);
        let mut same = RowTable::default();
        same.push_cells(&cells);
        same.push_cells::<&str>(&[]);
        same.push_cells(&cells);
        assert_eq!(table, same);
        for bad in [
            &b"[1, 2]"[..],
            b"[\"a\"",
            b"{\"a\": 1}",
            b"[\"a\"] x",
            b"[\"ok\", 3]",
            b"[\"\xff\"]",
        ] {
            assert!(
                table.push_json(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
            assert_eq!(table, same, "a bad line leaves nothing behind");
        }
    }

    #[test]
    fn names() {
        let n = unique_name("job");
        assert!(valid_name(&n), "{n}");
        assert_ne!(n, unique_name("job"));
        assert!(!valid_name(".hidden"));
        assert!(!valid_name("a/b"));
        assert!(!valid_name("a\nb"));
        assert!(!valid_name(""));
    }

    #[test]
    fn request_round_trip_and_reply() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(dir.path().join("spool"));
        spool.prepare(Ownership::Personal).unwrap();
        let envelope = Envelope::new(Request::Query(Query::Job(crate::array::JobRef::Id(7))));
        let mut sent = spool.send(&envelope, Durability::OnDemand).unwrap();
        let names = spool.list_incoming().unwrap();
        assert_eq!(names, vec![sent.name().to_string()]);
        let uid = nix::unistd::geteuid().as_raw();
        match spool.read_request(&names[0], 1 << 20) {
            Inbound::Request {
                uid: u,
                envelope: e,
                ..
            } => {
                assert_eq!(u, uid);
                assert_eq!(e, envelope);
            }
            other => panic!("{other:?}"),
        }
        assert!(spool.write_reply(
            sent.name(),
            uid,
            &Reply::Submitted {
                job_id: 9,
                warning: None
            }
        ));
        assert!(
            !spool.write_reply(
                sent.name(),
                uid + 1,
                &Reply::Submitted {
                    job_id: 9,
                    warning: None
                }
            ),
            "wrong owner"
        );
        let reply = sent.wait(Duration::from_secs(5)).unwrap();
        assert_eq!(
            reply,
            Some(Reply::Submitted {
                job_id: 9,
                warning: None
            })
        );
        let reply_path = spool.replies().join(sent.name());
        drop(sent);
        assert!(!reply_path.exists(), "the client removes its reply file");
    }

    #[test]
    fn hostile_files_are_refused_with_reasons() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(dir.path().join("spool"));
        spool.prepare(Ownership::Personal).unwrap();
        let inc = spool.incoming();
        let reason = |name: &str| match spool.read_request(name, 64) {
            Inbound::Bad { reason, .. } => reason,
            other => panic!("{name}: {other:?}"),
        };
        std::os::unix::fs::symlink("/etc/passwd", inc.join("link")).unwrap();
        assert!(reason("link").contains("symbolic link"));
        fs::write(inc.join("big"), vec![b' '; 100]).unwrap();
        assert!(reason("big").contains("over the limit of 64"));
        fs::write(inc.join("bin"), [0xff, 0xfe, b'{']).unwrap();
        assert!(reason("bin").contains("not valid UTF-8"));
        fs::write(inc.join("trunc"), b"{\"version\":1,\"request\":{").unwrap();
        assert!(reason("trunc").contains("truncated"));
        fs::write(inc.join("v9"), b"{\"version\":9}").unwrap();
        assert!(reason("v9").contains("protocol version 9"));
        fs::write(inc.join("two"), b"{}").unwrap();
        fs::hard_link(inc.join("two"), inc.join("two-b")).unwrap();
        assert!(reason("two").contains("2 hard links"));
        nix::unistd::mkfifo(
            &inc.join("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        assert!(reason("fifo").contains("FIFO"));
        fs::create_dir(inc.join("dir")).unwrap();
        assert!(reason("dir").contains("directory"));
        spool.discard("dir");
        assert!(!inc.join("dir").exists());
        assert!(matches!(spool.read_request("absent", 64), Inbound::Skip));
        assert!(matches!(spool.read_request(".x.tmp", 64), Inbound::Skip));
    }

    #[test]
    fn one_daemon_per_spool() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(dir.path());
        spool.prepare(Ownership::Personal).unwrap();
        assert_eq!(spool.daemon_state(), DaemonState::Stopped);
        let lock = spool.lock_daemon().unwrap();
        assert_eq!(spool.daemon_state(), DaemonState::Running);
        assert!(matches!(
            spool.lock_daemon(),
            Err(SpoolError::AlreadyRunning { .. })
        ));
        drop(lock);
        assert_eq!(spool.daemon_state(), DaemonState::Stopped);
    }
}
