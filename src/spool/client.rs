//! The requester's side: send a request (on the socket when the daemon
//! listens, else as a file in the drop box), wait for its reply with
//! inotify, read a streamed listing row by row.

use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use crate::proto::{Envelope, Reply};
use crate::report::table::RowTable;

use super::dir::{sync_dir, unique_name, Spool};
use super::error::SpoolError;
use super::request::{StreamHeader, STREAM_HEADER};
use super::socket;

impl Spool {
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
            _ => return Err(SpoolError::Missing(self.root().to_path_buf())),
        };
        // A spool not owned by root is one user's personal spool: its daemon
        // could neither serve nor answer anyone else.
        if owner != 0 && owner != nix::unistd::geteuid().as_raw() {
            let name = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(owner))
                .ok()
                .flatten()
                .map_or_else(|| format!("uid {owner}"), |u| u.name);
            return Err(SpoolError::Foreign {
                spool: self.root().to_path_buf(),
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

/// How often a reply is looked for where no inotify watch could be made.
const POLL_WITHOUT_WATCH: Duration = Duration::from_millis(10);

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
                None => std::thread::sleep(POLL_WITHOUT_WATCH),
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
        // Without a watch (a user's inotify instances or watches used up,
        // by a workflow tool running a thousand commands at once), the
        // reply is looked for every few milliseconds instead.
        self.inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK)
            .and_then(|ino| {
                // Modify too: streamed rows arrive before the file is closed.
                ino.add_watch(
                    reply_path,
                    AddWatchFlags::IN_CLOSE_WRITE | AddWatchFlags::IN_MODIFY,
                )
                .map(|_| ino)
            })
            .ok();

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
                sync_entries(&incoming)?;
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
                std::thread::sleep(left.min(POLL_WITHOUT_WATCH));
                continue;
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
                .and_then(|()| sync_entries(&self.spool.incoming()))
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
            match &self.spool.closer {
                Some(closer) => {
                    if let Err(unsent) = closer.send(inotify) {
                        drop(unsent.0);
                    }
                }
                None => close_watch_off_path(inotify),
            }
        }
        if self.reply_made {
            let _ = fs::remove_file(&self.reply_path);
        }
    }
}

/// Flushes the spool directory's entries, where this user may: a system
/// spool's drop box (mode 1733) cannot be opened (read) by its users.
/// Their request's data is on disk either way; its name is once the
/// kernel writes the directory back, seconds later.
fn sync_entries(dir: &Path) -> io::Result<()> {
    match sync_dir(dir) {
        Err(e) if e.kind() == ErrorKind::PermissionDenied => Ok(()),
        other => other,
    }
}

/// Closes an inotify instance without waiting for it, in a command that
/// ends soon. The last close of one makes the kernel wait for its
/// watches to be torn down (an SRCU grace period: about 7 ms on the build
/// machine), which was most of a command's run and capped sequential
/// submissions near 130/s. A child that holds a copy of the descriptor
/// makes this close not the last: the child pays the wait, after closing
/// its standard streams so that a shell reading the command's output is
/// not kept waiting; it is reaped by init once the command has exited. A
/// server never forks for this (`Spool::for_a_server`).
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
