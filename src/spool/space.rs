//! Room on the spool's filesystem. The drop boxes are world-writable, so
//! any user could fill the filesystem the database lives on; a database
//! that cannot commit cannot record a job's end. Three defences:
//!
//! - what one user may hold unfinished in `incoming/` is bounded (count
//!   and bytes), and an unfinished request larger than any request may be
//!   is removed at once: the daemon looks every few seconds
//!   ([`Spool::police`]); complete requests it reads and answers anyway;
//! - a reserve file (`SPOOL/reserve`, `spool_reserve` in the config) keeps
//!   room that the daemon frees the moment a commit fails, so that what it
//!   already holds (exits, cancels) can still be recorded;
//! - new submissions are refused while less than a reserve's worth is
//!   free besides ([`Spool::free_bytes`]).

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::dir::Spool;

/// The most unfinished requests one user may have in `incoming/` (and
/// reply files left unclaimed in `replies/`) at once.
pub const MAX_ENTRIES_PER_USER: usize = 256;
/// The most bytes of unfinished requests one user may have in
/// `incoming/`, in requests of `max_spool_file` bytes at most.
pub const MAX_FILES_OF_MAX_SIZE: u64 = 16;

/// An unfinished request is a client's between its write and its rename,
/// milliseconds: one older than this was left by a client killed on the
/// way, or by someone filling the drop box.
pub const UNFINISHED_STALE_SECS: i64 = 300;

/// An entry removed by [`Spool::police`], for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removed {
    pub uid: u32,
    pub path: PathBuf,
    pub why: String,
}

struct Entry {
    path: PathBuf,
    uid: u32,
    bytes: u64,
    modified: i64,
    /// Not a complete request: a temporary name, or any name the daemon
    /// would never read as a request.
    temporary: bool,
    /// A plain file: anything else (a directory, a FIFO, a link) is no
    /// request at all.
    file: bool,
}

impl Spool {
    pub fn reserve_path(&self) -> PathBuf {
        self.root().join("reserve")
    }

    /// Bytes an unprivileged user could still write on the spool's
    /// filesystem (`None` if it cannot be told).
    pub fn free_bytes(&self) -> Option<u64> {
        let st = nix::sys::statvfs::statvfs(self.root()).ok()?;
        Some(st.blocks_available() as u64 * st.fragment_size() as u64)
    }

    /// Makes sure the reserve file holds `bytes` of real blocks (0: no
    /// reserve). Returns whether it does; a filesystem too full for it
    /// leaves none, to be tried again later.
    pub fn keep_reserve(&self, bytes: u64) -> bool {
        let path = self.reserve_path();
        if bytes == 0 {
            let _ = fs::remove_file(&path);
            return true;
        }
        if fs::metadata(&path).is_ok_and(|m| m.len() == bytes && m.blocks() * 512 >= bytes) {
            return true;
        }
        let made = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .and_then(|f| {
                use std::os::fd::AsRawFd;
                // Real blocks, not a sparse file: they are what is freed.
                // SAFETY: on a descriptor this function owns.
                let r = unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, bytes as libc::off_t) };
                if r != 0 {
                    return Err(std::io::Error::from_raw_os_error(r));
                }
                f.set_len(bytes)?;
                f.sync_all()
            });
        if made.is_err() {
            let _ = fs::remove_file(&path);
        }
        made.is_ok()
    }

    /// Frees the reserve; whether there was one.
    pub fn release_reserve(&self) -> bool {
        fs::remove_file(self.reserve_path()).is_ok()
    }

    /// Removes from the drop boxes what no user may hold there: anything in
    /// `incoming/` that is not a plain file (a directory could hold any
    /// amount), files under a name no request has (not a temporary name
    /// either), unfinished requests (temporary files) larger than
    /// `max_file` or older than
    /// [`UNFINISHED_STALE_SECS`], and beyond what one user may hold that
    /// user's newest unfinished requests, and reply files left a minute
    /// unclaimed. Complete requests are never removed here: each is the
    /// daemon's to read and answer (one over `max_file` is refused then).
    /// Root's entries are the daemon's own.
    pub fn police(&self, max_file: u64) -> Vec<Removed> {
        let max_bytes = max_file.saturating_mul(MAX_FILES_OF_MAX_SIZE);
        let mut removed = Vec::new();
        let mut unfinished: HashMap<u32, Vec<Entry>> = HashMap::new();
        let stale = now_secs() - UNFINISHED_STALE_SECS;
        for entry in entries_of(&self.incoming()) {
            let named = !entry
                .path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'));
            if !entry.file {
                remove(entry, "not a file: requests are files".into(), &mut removed);
            } else if entry.temporary && named {
                remove(entry, "a name no request has".into(), &mut removed);
            } else if !entry.temporary {
                continue;
            } else if entry.bytes > max_file {
                let why = format!(
                    "an unfinished request of {} bytes, over max_spool_file ({max_file})",
                    entry.bytes
                );
                remove(entry, why, &mut removed);
            } else if entry.modified < stale {
                let why = format!("an unfinished request left over {UNFINISHED_STALE_SECS} s");
                remove(entry, why, &mut removed);
            } else {
                unfinished.entry(entry.uid).or_default().push(entry);
            }
        }
        let minute_ago = now_secs() - 60;
        let mut unclaimed: HashMap<u32, Vec<Entry>> = HashMap::new();
        for entry in entries_of(&self.replies()) {
            if entry.modified < minute_ago {
                unclaimed.entry(entry.uid).or_default().push(entry);
            }
        }
        for (entries, count_bytes) in [(unfinished, true), (unclaimed, false)] {
            for (_, mut entries) in entries {
                entries.sort_by_key(|e| e.modified);
                let (mut count, mut bytes) = (0usize, 0u64);
                for entry in entries {
                    count += 1;
                    bytes += if count_bytes { entry.bytes } else { 0 };
                    if count > MAX_ENTRIES_PER_USER {
                        let why = format!("more than {MAX_ENTRIES_PER_USER} entries of one user");
                        remove(entry, why, &mut removed);
                    } else if bytes > max_bytes {
                        let why = format!("more than {max_bytes} bytes of one user");
                        remove(entry, why, &mut removed);
                    }
                }
            }
        }
        removed
    }
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn entries_of(dir: &Path) -> Vec<Entry> {
    let Ok(list) = fs::read_dir(dir) else {
        return Vec::new();
    };
    list.flatten()
        .filter_map(|e| {
            let meta = e.path().symlink_metadata().ok()?;
            let name = e.file_name().to_string_lossy().into_owned();
            (meta.uid() != 0).then(|| Entry {
                path: e.path(),
                uid: meta.uid(),
                bytes: meta.len(),
                modified: meta.mtime(),
                temporary: !super::dir::valid_name(&name),
                file: meta.file_type().is_file(),
            })
        })
        .collect()
}

fn remove(entry: Entry, why: String, removed: &mut Vec<Removed>) {
    let gone = if entry.path.is_dir() && !entry.path.is_symlink() {
        fs::remove_dir_all(&entry.path)
    } else {
        fs::remove_file(&entry.path)
    };
    if gone.is_ok() {
        removed.push(Removed {
            uid: entry.uid,
            path: entry.path,
            why,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_requests_stay_and_unfinished_ones_are_bounded() {
        if !nix::unistd::geteuid().is_root() {
            return; // needs chown to another user; the suite runs as root in CI
        }
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(dir.path());
        fs::create_dir(spool.incoming()).unwrap();
        fs::create_dir(spool.replies()).unwrap();
        let make = |name: String, bytes: usize| {
            let path = spool.incoming().join(name);
            fs::write(&path, vec![b' '; bytes]).unwrap();
            std::os::unix::fs::chown(&path, Some(4242), Some(4242)).unwrap();
        };
        for i in 0..300 {
            make(format!("job-{i}"), 10);
            make(format!(".job-{i}.tmp"), 10);
        }
        make(".big.tmp".into(), 2_000);
        // A name the daemon never reads, a directory to fill, and a
        // temporary file left long ago: none may stay.
        make("not a request".into(), 10);
        let dir_entry = spool.incoming().join(".fill");
        fs::create_dir(&dir_entry).unwrap();
        fs::write(dir_entry.join("data"), vec![0u8; 100]).unwrap();
        std::os::unix::fs::chown(&dir_entry, Some(4242), Some(4242)).unwrap();
        make(".old.tmp".into(), 10);
        let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3_600);
        fs::File::options()
            .write(true)
            .open(spool.incoming().join(".old.tmp"))
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        let removed = spool.police(1_000);
        let left: Vec<String> = fs::read_dir(spool.incoming())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            left.iter().filter(|n| !n.starts_with('.')).count(),
            300,
            "{left:?}"
        );
        assert_eq!(left.iter().filter(|n| n.starts_with('.')).count(), 256);
        assert_eq!(removed.len(), 48);
        assert!(!left
            .iter()
            .any(|n| n == "not a request" || n == ".fill" || n == ".old.tmp"));
        assert!(removed
            .iter()
            .any(|r| r.why.contains("over max_spool_file")));
    }

    #[test]
    fn the_reserve_is_real_blocks_and_can_be_released() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(dir.path());
        assert!(spool.keep_reserve(1 << 20));
        let meta = fs::metadata(spool.reserve_path()).unwrap();
        assert_eq!(meta.len(), 1 << 20);
        assert!(meta.blocks() * 512 >= 1 << 20, "not sparse");
        assert!(spool.keep_reserve(1 << 20), "kept as it is");
        assert!(spool.release_reserve());
        assert!(!spool.release_reserve());
        assert!(spool.keep_reserve(0));
        assert!(!spool.reserve_path().exists());
        assert!(spool.free_bytes().unwrap() > 0);
    }
}
