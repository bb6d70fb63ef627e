//! A node's lease, as its jobs' supervisors see it: the moment (on the
//! host's boot clock, which every process shares and no one can set)
//! after which the node may no longer run jobs, written by its agent
//! whenever the controller renews the lease. A supervisor whose job
//! outlives it freezes the job: so a node whose agent died stops its jobs
//! too, before the controller, which stopped hearing it at least as long
//! ago, runs them elsewhere.
//!
//! The file also says when the agent last fenced its node (froze its
//! runs itself for want of the controller) or started: a supervisor that
//! froze its job for a lease run out thaws it when the lease is good
//! again only if the agent has not fenced since. Then the lease ran out
//! for no reason the controller could act on (a renewal written late),
//! and the controller, whose view the agent's lease follows, never gave
//! the run up; otherwise the agent holds the frozen run for the
//! controller to thaw or stop.
//!
//! The record has one fixed length and is written in place over the same
//! bytes (`pwrite` at offset 0): after the first write, made when the
//! agent starts, a renewal needs no new block, so a full file system
//! (an ordinary user's `dd` on a state directory shared with `/tmp`)
//! cannot keep the lease from being renewed. Each field is written twice
//! so that a reader who meets a write half done sees the copies differ
//! and reads again.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::time::{clock_gettime, ClockId};

/// Nanoseconds on the boot clock.
pub fn boot_now() -> u64 {
    clock_gettime(ClockId::CLOCK_BOOTTIME)
        .map(|t| (t.tv_sec() as u64).saturating_mul(1_000_000_000) + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// What the lease file says, on the boot clock (nanoseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// When the lease runs out.
    pub until: u64,
    /// When the agent last fenced its node, or started (0 in a file an
    /// older agent wrote).
    pub fenced_at: u64,
}

impl Lease {
    /// A lease that runs out `left` from now.
    pub fn for_(left: Duration, fenced_at: u64) -> Lease {
        let left = u64::try_from(left.as_nanos()).unwrap_or(u64::MAX);
        Lease {
            until: boot_now().saturating_add(left),
            fenced_at,
        }
    }

    pub fn expired(&self) -> bool {
        boot_now() > self.until
    }

    pub fn remaining(&self) -> Duration {
        Duration::from_nanos(self.until.saturating_sub(boot_now()))
    }

    /// How long ago it ran out (zero while it holds).
    pub fn overdue(&self) -> Duration {
        Duration::from_nanos(boot_now().saturating_sub(self.until))
    }

    /// The record: each field twice, fixed width.
    fn record(&self) -> [u8; RECORD] {
        let text = format!(
            "{:020} {:020} {:020} {:020}\n",
            self.until, self.fenced_at, self.until, self.fenced_at
        );
        let mut record = [0u8; RECORD];
        record.copy_from_slice(text.as_bytes());
        record
    }

    /// What `text` says: a record whose copies agree, or the bare number
    /// an older agent wrote.
    fn parse(text: &str) -> Option<Lease> {
        let fields: Vec<u64> = text
            .split_whitespace()
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        match fields[..] {
            [until, fenced_at, again, fenced_again]
                if until == again && fenced_at == fenced_again =>
            {
                Some(Lease { until, fenced_at })
            }
            [until] => Some(Lease {
                until,
                fenced_at: 0,
            }),
            _ => None,
        }
    }
}

const RECORD: usize = 4 * 21;

/// The agent's lease file, open for renewals in place.
pub struct LeaseFile {
    file: File,
    path: PathBuf,
}

impl LeaseFile {
    /// Opens (makes) the lease file at `path` and writes `lease`, to the
    /// disk, so that the record's block is the file's from now on.
    pub fn open(path: &Path, lease: Lease) -> std::io::Result<LeaseFile> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)?;
        file.set_len(RECORD as u64)?;
        file.write_all_at(&lease.record(), 0)?;
        file.flush()?;
        file.sync_all()?;
        Ok(LeaseFile {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Writes `lease` over the record, in place.
    pub fn write(&self, lease: Lease) -> std::io::Result<()> {
        self.file.write_all_at(&lease.record(), 0)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// What the lease file at `path` says (`None` without a readable file, or
/// a record that never reads whole).
pub fn read(path: &Path) -> Option<Lease> {
    for _ in 0..3 {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                if let Some(lease) = Lease::parse(&text) {
                    return Some(lease);
                }
            }
            Err(_) => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_runs_out_when_it_says_and_keeps_its_fence() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lease");
        assert_eq!(read(&path), None, "no file, no verdict");
        let file = LeaseFile::open(&path, Lease::for_(Duration::from_secs(60), 7)).unwrap();
        let lease = read(&path).unwrap();
        assert!(!lease.expired());
        assert_eq!(lease.fenced_at, 7);
        let left = lease.remaining();
        assert!(left > Duration::from_secs(59) && left <= Duration::from_secs(60));
        assert_eq!(lease.overdue(), Duration::ZERO);
        file.write(Lease::for_(Duration::ZERO, 9)).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let lease = read(&path).unwrap();
        assert!(lease.expired() && lease.fenced_at == 9);
        // A restarted agent reads since when its node's runs stand frozen.
        assert!(lease.overdue() >= Duration::from_millis(5));
        assert_eq!(lease.remaining(), Duration::ZERO);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), RECORD as u64);
        // Opened again by a restarted agent: the same length.
        drop(file);
        LeaseFile::open(&path, Lease::for_(Duration::from_secs(5), 11)).unwrap();
        assert_eq!(read(&path).unwrap().fenced_at, 11);
    }

    #[test]
    fn a_record_half_written_or_of_an_older_agent_reads_as_it_should() {
        assert_eq!(
            Lease::parse("123\n"),
            Some(Lease {
                until: 123,
                fenced_at: 0
            })
        );
        let whole = Lease {
            until: 5_000,
            fenced_at: 40,
        };
        let text = String::from_utf8(whole.record().to_vec()).unwrap();
        assert_eq!(Lease::parse(&text), Some(whole));
        // The first copy new, the second still the old one.
        let old = Lease {
            until: 4_000,
            ..whole
        };
        let old = String::from_utf8(old.record().to_vec()).unwrap();
        let torn = format!("{}{}", &text[..42], &old[42..]);
        assert_eq!(Lease::parse(&torn), None);
        assert_eq!(Lease::parse("x y"), None);
    }

    /// A renewal writes over the record's own bytes: the same file, the
    /// same length (on a full file system it still lands: see the pool
    /// test that fills a node's state directory).
    #[test]
    fn a_renewal_needs_no_new_block() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lease");
        let file = LeaseFile::open(&path, Lease::for_(Duration::from_secs(1), 1)).unwrap();
        let before = std::fs::metadata(&path).unwrap();
        for i in 0..100 {
            file.write(Lease::for_(Duration::from_secs(i), 1)).unwrap();
        }
        use std::os::unix::fs::MetadataExt as _;
        let after = std::fs::metadata(&path).unwrap();
        assert_eq!((after.len(), after.ino()), (before.len(), before.ino()));
    }
}
