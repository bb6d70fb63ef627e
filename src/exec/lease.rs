//! A node's lease, as its jobs' supervisors see it: the moment (on the
//! host's boot clock, which every process shares and no one can set)
//! after which the node may no longer run jobs, written by its agent
//! whenever the controller renews the lease. A supervisor whose job
//! outlives it kills the job: so a node whose agent died stops its jobs
//! too, before the controller, which stopped hearing it at least as long
//! ago, runs them elsewhere.

use std::path::Path;
use std::time::Duration;

use nix::time::{clock_gettime, ClockId};

/// Nanoseconds on the boot clock.
fn boot_now() -> u128 {
    clock_gettime(ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() as u128 * 1_000_000_000 + t.tv_nsec() as u128)
        .unwrap_or(0)
}

/// Writes that the lease runs out `left` from now.
pub fn renew(path: &Path, left: Duration) -> std::io::Result<()> {
    let until = boot_now() + left.as_nanos();
    super::process::write_atomically(path, until.to_string().as_bytes())
}

/// How long the lease in `path` has left (zero once it ran out; `None`
/// without a readable file).
pub fn remaining(path: &Path) -> Option<Duration> {
    let until = std::fs::read_to_string(path)
        .ok()?
        .trim()
        .parse::<u128>()
        .ok()?;
    let left = until.saturating_sub(boot_now());
    Some(Duration::from_nanos(left.min(u64::MAX as u128) as u64))
}

/// Whether the lease in `path` has run out. A file that cannot be read
/// says nothing: the agent writes it before its first launch.
pub fn expired(path: &Path) -> bool {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.trim().parse::<u128>().ok())
        .is_some_and(|until| boot_now() > until)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_runs_out_when_it_says() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lease");
        assert!(!expired(&path), "no file, no verdict");
        renew(&path, Duration::from_secs(60)).unwrap();
        assert!(!expired(&path));
        let left = remaining(&path).unwrap();
        assert!(left > Duration::from_secs(59) && left <= Duration::from_secs(60));
        renew(&path, Duration::ZERO).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert!(expired(&path));
    }
}
