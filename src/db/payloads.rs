//! What jobs run — script, arguments, environment — stored once by
//! content. The tasks of an array, and a script submitted again as it
//! was, share one row of `payloads`; each job points at its payload
//! (`job_payload_refs`). A payload no job points at any more (its jobs
//! purged, or their payloads let go after `keep_payloads_days`) is
//! deleted with the last pointer.
//!
//! The content's digest (SHA-256 over the three fields, each preceded by
//! its length, so no two different payloads run together into one) is
//! the payload's key; SQLite computes it too, as `payload_digest(script,
//! args, environment)`, for the migration that moved the old per-job
//! copies here.

use rusqlite::{params, Connection, OptionalExtension};

use super::digest::digest;
use super::error::DbError;
use crate::model::job::JobId;

/// Points job `job` at the payload of these fields, storing it unless
/// it is stored already.
pub fn store(
    conn: &Connection,
    job: JobId,
    (script, args, environment): (&str, &str, &str),
) -> Result<(), DbError> {
    let key = digest(script, args, environment);
    conn.prepare_cached(
        "INSERT OR IGNORE INTO payloads (digest, script, args, environment) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![key, script, args, environment])?;
    conn.prepare_cached(
        "INSERT INTO job_payload_refs (job_id, payload_id) \
         SELECT ?1, id FROM payloads WHERE digest = ?2",
    )?
    .execute(params![job as i64, key])?;
    Ok(())
}

/// Job `job`'s payload fields (script, args, environment), if it still
/// has them.
pub fn load(conn: &Connection, job: JobId) -> Result<Option<(String, String, String)>, DbError> {
    Ok(conn
        .prepare_cached(
            "SELECT p.script, p.args, p.environment FROM job_payload_refs r \
             JOIN payloads p ON p.id = r.payload_id WHERE r.job_id = ?1",
        )?
        .query_row([job as i64], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?)
}

/// The payloads these jobs point at, before they are deleted.
pub fn of_jobs_ended(
    conn: &Connection,
    (start, end): (i64, i64),
    limit: u32,
) -> Result<Vec<i64>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT DISTINCT r.payload_id FROM job_payload_refs r WHERE r.job_id IN \
         (SELECT id FROM jobs WHERE end_time >= ?1 AND end_time < ?2 ORDER BY id LIMIT ?3)",
    )?;
    let ids = stmt.query_map(params![start, end, limit], |r| r.get(0))?;
    Ok(ids.collect::<Result<_, _>>()?)
}

/// The jobs that still point at a payload and ended by `?1`, read
/// from the pointers (a few: the recent and the active), not from the
/// jobs (all the history).
const ENDED_BEFORE: &str = "SELECT r.job_id FROM job_payload_refs r WHERE EXISTS \
     (SELECT 1 FROM jobs j WHERE j.id = r.job_id AND j.end_time <= ?1 \
     AND j.state NOT IN ('PENDING', 'RUNNING', 'COMPLETING', 'SUSPENDED'))";

/// Whether a job that ended by `before` still points at a payload.
pub fn any_ended_before(conn: &Connection, before: i64) -> Result<bool, DbError> {
    Ok(conn
        .prepare_cached(&format!("{ENDED_BEFORE} LIMIT 1"))?
        .query_row([before], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Lets go of the payloads of at most `limit` finished jobs that ended
/// by `before` (their accounting rows stay); how many jobs let go.
pub fn let_go_ended_before(conn: &Connection, before: i64, limit: u32) -> Result<usize, DbError> {
    let ended = format!("{ENDED_BEFORE} LIMIT ?2");
    let payloads: Vec<i64> = conn
        .prepare_cached(&format!(
            "SELECT DISTINCT payload_id FROM job_payload_refs WHERE job_id IN ({ended})"
        ))?
        .query_map(params![before, limit], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let gone = conn
        .prepare_cached(&format!(
            "DELETE FROM job_payload_refs WHERE job_id IN ({ended})"
        ))?
        .execute(params![before, limit])?;
    delete_unused(conn, &payloads)?;
    Ok(gone)
}

/// Deletes those of `payloads` no job points at any more.
pub fn delete_unused(conn: &Connection, payloads: &[i64]) -> Result<(), DbError> {
    let mut delete = conn.prepare_cached(
        "DELETE FROM payloads WHERE id = ?1 AND NOT EXISTS \
         (SELECT 1 FROM job_payload_refs WHERE payload_id = ?1)",
    )?;
    for id in payloads {
        delete.execute([id])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn database() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = super::super::migrations::migrated(dir.path());
        (dir, conn)
    }

    fn count(conn: &Connection, table: &str) -> i64 {
        conn.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn the_same_payload_is_stored_once_and_goes_with_its_last_job() {
        let (_dir, conn) = database();
        for id in 1..=3 {
            super::super::migrations::a_job(&conn, id);
        }
        store(&conn, 1, ("#!/bin/sh\ntrue\n", "[]", "[]")).unwrap();
        store(&conn, 2, ("#!/bin/sh\ntrue\n", "[]", "[]")).unwrap();
        store(&conn, 3, ("#!/bin/sh\nfalse\n", "[]", "[]")).unwrap();
        assert_eq!(count(&conn, "payloads"), 2);
        assert_eq!(load(&conn, 2).unwrap().unwrap().0, "#!/bin/sh\ntrue\n");
        conn.execute_batch(
            "UPDATE jobs SET state = 'COMPLETED', end_time = 100 WHERE id IN (1, 2)",
        )
        .unwrap();
        assert_eq!(let_go_ended_before(&conn, 50, 10).unwrap(), 0, "not yet");
        assert_eq!(let_go_ended_before(&conn, 200, 1).unwrap(), 1, "a batch");
        assert_eq!(count(&conn, "payloads"), 2, "job 2 still points at it");
        assert_eq!(let_go_ended_before(&conn, 200, 10).unwrap(), 1);
        assert_eq!(count(&conn, "payloads"), 1);
        assert_eq!(load(&conn, 1).unwrap(), None);
        assert!(load(&conn, 3).unwrap().is_some(), "job 3 is running");
    }

    #[test]
    fn fields_do_not_run_together_into_another_payload() {
        assert_ne!(digest("ab", "c", ""), digest("a", "bc", ""));
        assert_eq!(digest("a", "b", "c"), digest("a", "b", "c"));
    }

    #[test]
    fn the_migration_moves_each_jobs_copy_to_one_shared_payload() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("db")).unwrap();
        super::super::digest::register(&conn).unwrap();
        let before = super::super::migrations::MIGRATIONS.len() - 1;
        for migration in &super::super::migrations::MIGRATIONS[..before] {
            conn.execute_batch(migration).unwrap();
        }
        for id in 1..=3 {
            super::super::migrations::a_job(&conn, id);
            let script = if id == 3 { "other" } else { "same" };
            conn.execute(
                "INSERT INTO job_payloads (job_id, script, args, environment) VALUES (?1, ?2, '[]', '[]')",
                params![id, script],
            )
            .unwrap();
        }
        conn.execute_batch(super::super::migrations::MIGRATIONS[before])
            .unwrap();
        assert_eq!(count(&conn, "payloads"), 2);
        assert_eq!(count(&conn, "job_payload_refs"), 3);
        assert_eq!(load(&conn, 1).unwrap().unwrap().0, "same");
        assert_eq!(load(&conn, 3).unwrap().unwrap().0, "other");
    }
}
