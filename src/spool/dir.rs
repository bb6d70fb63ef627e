//! The spool directory: its layout and modes, the daemon's lock, the
//! request and reply names, and the daemon's side of the protocol (read
//! the drop box, write replies, remove what it consumed, with the
//! directory flushed so a power cut neither loses nor resurrects one).

use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::proto::Reply;

use super::error::SpoolError;
use super::request::{parse_request, Inbound, StreamHeader};

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
    /// In a process that lives on (a server): where the reply watches its
    /// requests leave go to be closed, on a thread of its own.
    pub(super) closer: Option<std::sync::mpsc::Sender<nix::sys::inotify::Inotify>>,
}

impl Spool {
    pub fn new(root: impl Into<PathBuf>) -> Spool {
        Spool {
            root: root.into(),
            closer: None,
        }
    }

    /// The same spool, for a process that lives on and sends many
    /// requests (`yswebd`): the last close of a request's reply watch
    /// waits for the kernel (milliseconds), which a command leaves to a
    /// child it forks and forgets; a server would have to reap one per
    /// request, so it closes them on one thread of its own instead.
    pub fn for_a_server(mut self) -> Spool {
        let (closer, watches) = std::sync::mpsc::channel::<nix::sys::inotify::Inotify>();
        let spawned = std::thread::Builder::new()
            .name("watch-closer".into())
            .spawn(move || watches.into_iter().for_each(drop));
        if spawned.is_ok() {
            self.closer = Some(closer);
        }
        self
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
    /// On a pool's node, the file saying so, readable by everyone: the
    /// controller's address (written by `ysnoded`).
    pub fn pool_node_file(&self) -> PathBuf {
        self.root().join("pool-node")
    }

    /// Whether this is a pool's node's spool, and its controller's
    /// address: its requests are passed on by `ysnoded`, not answered by a
    /// `ysctld` here.
    pub fn pool_controller(&self) -> Option<String> {
        let text = fs::read_to_string(self.pool_node_file()).ok()?;
        Some(text.trim().to_string()).filter(|t| !t.is_empty())
    }

    /// Marks the spool as a pool's node's (see `pool_controller`).
    pub fn mark_pool_node(&self, controller: &str) -> io::Result<()> {
        let path = self.pool_node_file();
        let temp = self.root().join(".pool-node.tmp");
        fs::write(&temp, format!("{controller}\n"))?;
        fs::set_permissions(&temp, fs::Permissions::from_mode(0o644))?;
        fs::rename(&temp, &path)
    }

    /// The controller's key for signing user tokens (root only).
    pub fn token_key(&self) -> PathBuf {
        self.root().join("token.key")
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
}

/// The daemon's claim on its spool, held while it runs.
pub struct DaemonLock {
    _file: File,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DaemonState {
    Running,
    Stopped,
    /// The spool was never created.
    NoSpool,
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
        let Some(mut stream) = self.open_stream(name, uid, now) else {
            return false;
        };
        let result = rows(&mut |cells: &[String]| stream.row(cells));
        stream.end(result.err().map(|e| e.to_string()).as_deref())
    }

    /// Starts a streamed reply to request `name` of `uid` (its header
    /// written), whose rows come later: [`ReplyStream`]. `None` if the
    /// requester is gone.
    pub fn open_stream(&self, name: &str, uid: u32, now: i64) -> Option<ReplyStream> {
        let file = self.open_reply(name, uid)?;
        let mut out = io::BufWriter::with_capacity(64 * 1024, file);
        let header = serde_json::to_string(&StreamHeader {
            stream: "rows".into(),
            now,
        })
        .unwrap_or_default();
        writeln!(out, "{header}").ok()?;
        Some(ReplyStream { out, count: 0 })
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

/// A streamed reply being written: rows, then its end.
pub struct ReplyStream {
    out: io::BufWriter<File>,
    count: u64,
}

impl ReplyStream {
    /// Writes one row (buffered).
    pub fn row(&mut self, cells: &[String]) -> io::Result<()> {
        self.count += 1;
        serde_json::to_writer(&mut self.out, cells).map_err(io::Error::other)?;
        self.out.write_all(b"\n")
    }

    /// Lets the requester read what was written so far.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Ends the reply: the count of its rows, or why it stopped short.
    /// Whether it was all written.
    pub fn end(mut self, error: Option<&str>) -> bool {
        let end = match error {
            None => serde_json::json!({ "end": self.count }),
            Some(e) => serde_json::json!({ "error": e }),
        };
        writeln!(self.out, "{end}")
            .and_then(|()| self.out.flush())
            .is_ok()
    }
}
