//! Removes ended jobs' directories away from the daemon's event loop.
//!
//! Unlinking a job's files costs 0.1–1 ms on a filesystem mounted with
//! `discard` (each freed block is trimmed as it is freed), paid on the
//! thread that decides the next start. So a job's directory is first
//! renamed out of the way (one cheap, atomic step: a job launched again
//! under the same id finds its name free), then removed on a thread of
//! its own. Names that start with `.gone-` are never a job's, and any a
//! crash left behind are removed with the first removal after a restart.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// The prefix of a directory on its way out.
const GONE: &str = ".gone-";

/// Hands directories to a thread that removes them, started at the
/// first removal (which also sweeps what a crash left behind).
#[derive(Clone, Debug, Default)]
pub struct Remover {
    thread: Arc<Mutex<Option<Sender<PathBuf>>>>,
}

impl Remover {
    /// Renames `dir` out of the way (beside itself), then has it
    /// removed; where the rename fails (a full disk does not make it
    /// fail; a directory already gone does), nothing more is done.
    pub fn remove(&self, dir: &Path) -> io::Result<()> {
        let parent = dir.parent().unwrap_or(Path::new("."));
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let gone = parent.join(format!("{GONE}{name}-{nanos}"));
        fs::rename(dir, &gone)?;
        let mut thread = self.thread.lock().unwrap_or_else(|p| p.into_inner());
        let sender = thread.get_or_insert_with(|| start(parent.to_path_buf()));
        if let Err(unsent) = sender.send(gone) {
            // The thread is gone (it cannot panic, but never leave a
            // directory behind): remove it here, and start anew next time.
            *thread = None;
            remove_logged(&unsent.0);
        }
        Ok(())
    }
}

fn start(parent: PathBuf) -> Sender<PathBuf> {
    let (sender, receiver) = channel::<PathBuf>();
    let spawned = std::thread::Builder::new()
        .name("dir-remover".into())
        .spawn(move || {
            sweep(&parent);
            for dir in receiver {
                remove_logged(&dir);
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(target: "ysched::exec", "cannot start a thread to remove job directories: {e}");
    }
    sender
}

/// Removes what an earlier run left on its way out.
fn sweep(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(GONE) {
            remove_logged(&entry.path());
        }
    }
}

fn remove_logged(dir: &Path) {
    if let Err(e) = fs::remove_dir_all(dir) {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(target: "ysched::exec", "cannot remove {}: {e}", dir.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_directory_frees_its_name_at_once_and_goes_with_what_a_crash_left() {
        let parent = tempfile::tempdir().unwrap();
        let left = parent.path().join(".gone-7-1");
        fs::create_dir(&left).unwrap();
        fs::write(left.join("state.json"), "{}").unwrap();
        let job = parent.path().join("8");
        fs::create_dir(&job).unwrap();
        fs::write(job.join("exit.json"), "{}").unwrap();

        let remover = Remover::default();
        remover.remove(&job).unwrap();
        assert!(
            !job.exists(),
            "the job's name is free as soon as remove returns"
        );
        fs::create_dir(&job).unwrap();

        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let others = || {
            fs::read_dir(parent.path())
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n != "8")
                .collect::<Vec<_>>()
        };
        while !others().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(others(), Vec::<String>::new());
        assert!(job.exists(), "the new directory under the same name stays");
        let missing = parent.path().join("9");
        assert!(remover.remove(&missing).is_err());
    }
}
