//! The pool's nodes as the controller records them: whether each is
//! drained, by whom and why (the controller's own server included, so a
//! drain outlives a restart).

use std::collections::BTreeMap;

use rusqlite::{params, Connection};

use super::error::DbError;
use crate::report::node::Drain;

/// Every drained node, by name.
pub fn node_drains(conn: &Connection) -> Result<BTreeMap<String, Drain>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT name, drain_reason, drain_by, drain_since FROM nodes \
         WHERE drain_reason IS NOT NULL AND removed IS NULL",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get(0)?,
            Drain {
                reason: r.get(1)?,
                by: r.get::<_, Option<String>>(2)?.unwrap_or_default(),
                since: r.get::<_, Option<i64>>(3)?.unwrap_or(0),
            },
        ))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Drains node `name` (`Some`) or puts it back in service (`None`), a
/// row made for it if it has none yet; whether it was drained before.
pub fn set_node_drain(
    conn: &Connection,
    name: &str,
    drain: Option<&Drain>,
    now: i64,
) -> Result<bool, DbError> {
    let was: bool = conn
        .prepare_cached("SELECT drain_reason IS NOT NULL FROM nodes WHERE name = ?1")?
        .query_row([name], |r| r.get(0))
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(false),
            e => Err(e),
        })?;
    conn.prepare_cached(
        "INSERT INTO nodes (name, added, added_by, drain_reason, drain_by, drain_since) \
         VALUES (?1, ?2, 'ysctld', ?3, ?4, ?5) \
         ON CONFLICT (name) DO UPDATE SET drain_reason = excluded.drain_reason, \
         drain_by = excluded.drain_by, drain_since = excluded.drain_since",
    )?
    .execute(params![
        name,
        now,
        drain.map(|d| d.reason.as_str()),
        drain.map(|d| d.by.as_str()),
        drain.map(|d| d.since),
    ])?;
    Ok(was)
}
