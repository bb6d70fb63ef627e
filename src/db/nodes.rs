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

/// Whether node `name` is recorded drained.
pub fn node_drained(conn: &Connection, name: &str) -> Result<bool, DbError> {
    Ok(conn
        .prepare_cached("SELECT drain_reason IS NOT NULL FROM nodes WHERE name = ?1")?
        .query_row([name], |r| r.get(0))
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(false),
            e => Err(e),
        })?)
}

/// Drains node `name` (`Some`) or puts it back in service (`None`), a
/// row made for it if it has none yet.
pub fn set_node_drain(
    conn: &Connection,
    name: &str,
    drain: Option<&Drain>,
    now: i64,
) -> Result<(), DbError> {
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
    Ok(())
}

/// A node of the pool as recorded.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeRecord {
    pub name: String,
    pub added: i64,
    pub added_by: String,
    /// The SHA-256 of its unused join token, and when that expires.
    pub token_hash: Option<String>,
    pub token_expires: Option<i64>,
    /// The serial of the certificate it was given at its join (or last
    /// renewal).
    pub certificate: Option<String>,
    /// The one before a renewal: still good until the node connects with
    /// the new one (its open connection was made with it).
    pub previous_certificate: Option<String>,
    /// What it last reported (JSON of `NodeFacts`).
    pub facts: Option<String>,
    pub removed: Option<i64>,
}

const NODE_COLUMNS: &str = "name, added, added_by, token_hash, token_expires, certificate, facts, \
     removed, previous_certificate";

fn node_of(r: &rusqlite::Row) -> rusqlite::Result<NodeRecord> {
    Ok(NodeRecord {
        name: r.get(0)?,
        added: r.get(1)?,
        added_by: r.get(2)?,
        token_hash: r.get(3)?,
        token_expires: r.get(4)?,
        certificate: r.get(5)?,
        facts: r.get(6)?,
        removed: r.get(7)?,
        previous_certificate: r.get(8)?,
    })
}

/// Records that node `name` was last heard in good standing at `time`.
pub fn set_node_good(conn: &Connection, name: &str, time: i64) -> Result<(), DbError> {
    conn.prepare_cached("UPDATE nodes SET good_at = ?2 WHERE name = ?1")?
        .execute(params![name, time])?;
    Ok(())
}

/// When each node was last heard in good standing, where it is recorded.
pub fn nodes_good(conn: &Connection) -> Result<Vec<(String, i64)>, DbError> {
    let mut stmt =
        conn.prepare_cached("SELECT name, good_at FROM nodes WHERE good_at IS NOT NULL")?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub fn node_record(conn: &Connection, name: &str) -> Result<Option<NodeRecord>, DbError> {
    let sql = format!("SELECT {NODE_COLUMNS} FROM nodes WHERE name = ?1");
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query_map([name], node_of)?;
    Ok(rows.next().transpose()?)
}

/// The nodes that joined and were not removed, by name.
pub fn joined_nodes(conn: &Connection) -> Result<Vec<NodeRecord>, DbError> {
    let sql = format!(
        "SELECT {NODE_COLUMNS} FROM nodes \
         WHERE certificate IS NOT NULL AND removed IS NULL ORDER BY name"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map([], node_of)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Expects node `name` to join with the token of `token_hash` until
/// `expires`: a new row, or a removed node's (or one not yet joined)
/// made ready again.
pub fn expect_node(
    conn: &Connection,
    name: &str,
    token_hash: &str,
    expires: i64,
    by: &str,
    now: i64,
) -> Result<(), DbError> {
    conn.prepare_cached(
        "INSERT INTO nodes (name, added, added_by, token_hash, token_expires) \
         VALUES (?1, ?2, ?3, ?4, ?5) \
         ON CONFLICT (name) DO UPDATE SET added = excluded.added, added_by = excluded.added_by, \
         token_hash = excluded.token_hash, token_expires = excluded.token_expires, \
         certificate = NULL, previous_certificate = NULL, removed = NULL",
    )?
    .execute(params![name, now, by, token_hash, expires])?;
    Ok(())
}

/// Node `name` joined: its token is used up, its certificate recorded.
pub fn node_joined(conn: &Connection, name: &str, certificate: &str) -> Result<(), DbError> {
    conn.prepare_cached(
        "UPDATE nodes SET token_hash = NULL, token_expires = NULL, certificate = ?2 WHERE name = ?1",
    )?
    .execute(params![name, certificate])?;
    Ok(())
}

/// A renewed certificate replaces the one before, which stays good until
/// the node uses the new one (`certificate_used`).
pub fn set_node_certificate(
    conn: &Connection,
    name: &str,
    certificate: &str,
) -> Result<(), DbError> {
    conn.prepare_cached(
        "UPDATE nodes SET previous_certificate = certificate, certificate = ?2 WHERE name = ?1",
    )?
    .execute(params![name, certificate])?;
    Ok(())
}

/// Node `name` connected with its current certificate: the one before is
/// no longer good.
pub fn certificate_used(conn: &Connection, name: &str) -> Result<(), DbError> {
    conn.prepare_cached(
        "UPDATE nodes SET previous_certificate = NULL WHERE name = ?1 AND previous_certificate IS NOT NULL",
    )?
    .execute([name])?;
    Ok(())
}

pub fn set_node_facts(conn: &Connection, name: &str, facts: &str) -> Result<(), DbError> {
    conn.prepare_cached("UPDATE nodes SET facts = ?2 WHERE name = ?1")?
        .execute(params![name, facts])?;
    Ok(())
}

/// Node `name` leaves the pool: its certificate is no longer accepted.
pub fn remove_node(conn: &Connection, name: &str, now: i64) -> Result<(), DbError> {
    conn.prepare_cached(
        "UPDATE nodes SET removed = ?2, certificate = NULL, previous_certificate = NULL, \
         token_hash = NULL, drain_reason = NULL WHERE name = ?1",
    )?
    .execute(params![name, now])?;
    Ok(())
}
