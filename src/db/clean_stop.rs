//! The mark a controller leaves when it stops cleanly, so that the next
//! start need not read the whole database to trust it.
//!
//! `PRAGMA quick_check` reads every page: 2.5 s of a restart at a million
//! finished jobs. After a clean stop the controller has checkpointed its
//! write-ahead log into the file and written, beside it, the file as it
//! left it (device, inode, size, modification time). The next open takes
//! the mark away first, then skips the check only if the file is still
//! exactly as marked and no log waits to be replayed. A crash, a power
//! loss, a restored backup, or any other writer since leaves no mark or
//! one that no longer matches, and the check runs. `ysctld --check-db`
//! runs the full `PRAGMA integrity_check` whenever an administrator asks.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rusqlite::Connection;

use super::error::DbError;

/// `ysched.db-wal` beside `ysched.db`.
pub(super) fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The file's identity and state, as the mark records it.
fn stamp(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    Some(format!(
        "{} {} {} {} {}",
        meta.dev(),
        meta.ino(),
        meta.len(),
        meta.mtime(),
        meta.mtime_nsec()
    ))
}

fn mark_path(path: &Path) -> PathBuf {
    sidecar(path, ".clean-stop")
}

/// Whether the database at `path` may be trusted without a check: its
/// mark is taken away either way, so a crash from now on leaves none.
pub fn take(path: &Path) -> bool {
    let mark = mark_path(path);
    let Ok(recorded) = std::fs::read_to_string(&mark) else {
        return false;
    };
    let _ = std::fs::remove_file(&mark);
    let log_empty = std::fs::metadata(sidecar(path, "-wal")).map_or(true, |m| m.len() == 0);
    log_empty && stamp(path).is_some_and(|now| now == recorded.trim())
}

/// Leaves the mark of a clean stop: the log checkpointed into the file
/// (and emptied), then the file's stamp written beside it. Nothing may
/// write through `conn` after this.
pub fn mark(conn: &Connection, path: &Path) -> Result<(), DbError> {
    let (busy, _, _): (i64, i64, i64) =
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
    if busy != 0 {
        // A reader held the log: it stays, and the next start checks.
        return Ok(());
    }
    let Some(stamp) = stamp(path) else {
        return Ok(());
    };
    let mark = mark_path(path);
    let write = || -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&mark)?;
        file.write_all(stamp.as_bytes())?;
        file.sync_all()
    };
    write().map_err(|source| DbError::Create { path: mark, source })
}

/// `PRAGMA integrity_check` of the database at `path`, read-only: the
/// problems it found (none: the database is sound).
pub fn integrity_check(path: &Path) -> Result<Vec<String>, DbError> {
    let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    let mut statement = conn.prepare("PRAGMA integrity_check")?;
    let lines = statement
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(lines.into_iter().filter(|l| l != "ok").collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opened(dir: &tempfile::TempDir) -> (PathBuf, Connection) {
        let path = dir.path().join("ysched.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE IF NOT EXISTS t (x)")
            .unwrap();
        (path, conn)
    }

    #[test]
    fn a_clean_stop_is_trusted_once_and_any_change_since_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let (path, conn) = opened(&dir);
        mark(&conn, &path).unwrap();
        drop(conn);
        assert!(take(&path), "a clean stop, untouched since");
        assert!(!take(&path), "the mark is taken by the first open");
        let (path, conn) = opened(&dir);
        mark(&conn, &path).unwrap();
        conn.execute_batch("CREATE TABLE written_after (x)")
            .unwrap();
        drop(conn);
        assert!(!take(&path), "written after the mark");
    }

    #[test]
    fn no_mark_is_checked_and_a_sound_file_has_no_problems() {
        let dir = tempfile::tempdir().unwrap();
        let (path, conn) = opened(&dir);
        drop(conn);
        assert!(!take(&path));
        assert_eq!(integrity_check(&path).unwrap(), Vec::<String>::new());
    }
}
