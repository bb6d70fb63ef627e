//! Every preemption and reclaim that stopped a run, and how it went: did
//! the victim exit within its grace (it checkpointed), how much GPU time
//! it lost, and did its next run resume. `ysreport` sums them per account.

use rusqlite::{params, Connection, OptionalExtension};

use super::error::DbError;
use crate::model::job::JobId;
use crate::report::usage::CheckpointLine;

/// A run stopped to make room: what is known when the victim is signalled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stopped {
    pub job: JobId,
    /// The restart count of the run it stopped.
    pub restart: u32,
    pub at: i64,
    /// `preempt` or `reclaim`.
    pub kind: String,
    pub by: JobId,
    pub account: String,
    pub user: String,
    pub gpus: u32,
    /// Seconds from the first signal to SIGKILL.
    pub grace: u64,
}

/// How a stopped run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exit {
    pub at: i64,
    /// It exited by itself within its grace.
    pub clean: bool,
    /// GPU-seconds of work since its last checkpoint (0 when clean).
    pub lost_gpu_secs: i64,
}

pub fn record(conn: &Connection, s: &Stopped) -> Result<(), DbError> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO preemptions (job, restart, at, kind, by_job, account, user, gpus, grace) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        s.job as i64,
        s.restart,
        s.at,
        s.kind,
        s.by as i64,
        s.account,
        s.user,
        s.gpus,
        s.grace as i64
    ])?;
    Ok(())
}

/// The stop of `job`'s run `restart` not settled yet: (signal time, kind,
/// grace), if there is one.
pub fn pending_exit(
    conn: &Connection,
    job: JobId,
    restart: u32,
) -> Result<Option<(i64, String, u64)>, DbError> {
    Ok(conn
        .prepare_cached(
            "SELECT at, kind, grace FROM preemptions WHERE job = ?1 AND restart = ?2 AND exited_at IS NULL",
        )?
        .query_row(params![job as i64, restart], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)? as u64))
        })
        .optional()?)
}

pub fn settle_exit(
    conn: &Connection,
    job: JobId,
    restart: u32,
    exit: &Exit,
) -> Result<(), DbError> {
    conn.prepare_cached(
        "UPDATE preemptions SET exited_at = ?3, clean = ?4, lost_gpu_secs = ?5 \
         WHERE job = ?1 AND restart = ?2",
    )?
    .execute(params![
        job as i64,
        restart,
        exit.at,
        exit.clean,
        exit.lost_gpu_secs
    ])?;
    Ok(())
}

/// The run after a stopped one ended (or the job ended without one):
/// whether it resumed.
pub fn settle_resume(
    conn: &Connection,
    job: JobId,
    stopped_restart: u32,
    resumed: bool,
) -> Result<(), DbError> {
    conn.prepare_cached(
        "UPDATE preemptions SET resumed = ?3 WHERE job = ?1 AND restart = ?2 AND resumed IS NULL",
    )?
    .execute(params![job as i64, stopped_restart, resumed])?;
    Ok(())
}

/// Per account, the stops signalled in [from, to), for the accounts
/// `wanted` keeps.
pub fn lines(
    conn: &Connection,
    from: i64,
    to: i64,
    wanted: impl Fn(&str, &str) -> bool,
) -> Result<Vec<CheckpointLine>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT account, user, kind, clean, resumed, lost_gpu_secs FROM preemptions \
         WHERE at >= ?1 AND at < ?2 ORDER BY account",
    )?;
    let mut rows = stmt.query(params![from, to])?;
    let mut lines: Vec<CheckpointLine> = Vec::new();
    while let Some(r) = rows.next()? {
        let (account, user): (String, String) = (r.get(0)?, r.get(1)?);
        if !wanted(&account, &user) {
            continue;
        }
        if lines.last().is_none_or(|l| l.account != account) {
            lines.push(CheckpointLine {
                account,
                ..CheckpointLine::default()
            });
        }
        let line = lines.last_mut().expect("pushed above");
        line.stops += 1;
        line.reclaims += u64::from(r.get::<_, String>(2)? == "reclaim");
        line.clean_in_grace += u64::from(r.get::<_, Option<bool>>(3)?.unwrap_or(false));
        match r.get::<_, Option<bool>>(4)? {
            Some(true) => line.resumed += 1,
            Some(false) => {}
            None => line.unsettled += 1,
        }
        line.gpu_hours_lost += r.get::<_, Option<i64>>(5)?.unwrap_or(0) as f64 / 3600.0;
    }
    Ok(lines)
}
