//! What the controller keeps of tokens and of a node's word: every token
//! made (its id, user, use and life, and whether it was revoked: a token
//! not on record is not taken), and the node each job submitted on a
//! pool's node came from (that node's word may act on it).

use rusqlite::{params, Connection, OptionalExtension};

use super::error::DbError;
use crate::model::job::JobId;
use crate::token::TokenRecord;

/// How long an expired token's record is kept: `ystoken --list` shows
/// what was made lately, and then it goes.
const KEEP_EXPIRED_SECS: i64 = 7 * 86_400;

/// Records `token`, and forgets tokens expired long ago.
pub fn record_token(conn: &Connection, token: &TokenRecord) -> Result<(), DbError> {
    conn.prepare_cached(
        "INSERT INTO tokens (jti, user, audience, issued, expires, made_by, revoked, parent)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL, ?7)",
    )?
    .execute(params![
        token.jti,
        token.user,
        token.audience,
        token.issued,
        token.expires,
        token.made_by,
        token.parent
    ])?;
    conn.prepare_cached("DELETE FROM tokens WHERE expires < ?1")?
        .execute([token.issued - KEEP_EXPIRED_SECS])?;
    Ok(())
}

/// The record of token `jti`, if there is one.
pub fn token(conn: &Connection, jti: &str) -> Result<Option<TokenRecord>, DbError> {
    Ok(conn
        .prepare_cached(&format!("{SELECT} WHERE jti = ?1"))?
        .query_row([jti], token_from_row)
        .optional()?)
}

/// The tokens of `user` (everyone's when `None`) that have not expired
/// before `since`, newest first.
pub fn tokens(
    conn: &Connection,
    user: Option<&str>,
    since: i64,
) -> Result<Vec<TokenRecord>, DbError> {
    let mut statement = conn.prepare_cached(&format!(
        "{SELECT} WHERE (?1 IS NULL OR user = ?1) AND expires >= ?2 ORDER BY issued DESC, jti"
    ))?;
    let rows = statement.query_map(params![user, since], token_from_row)?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

/// How many tokens a revocation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Revoked {
    /// Those it named.
    pub named: usize,
    /// Those made with them, and with those, and so on.
    pub descendants: usize,
}

/// Revokes, at `now`, the unrevoked tokens that `jti` names (every one of
/// `user`'s when `None`), of `user` only when given, and every valid
/// token made with one of them, down the line: a token made with a
/// stolen token goes with it.
pub fn revoke_tokens(
    conn: &Connection,
    jti: Option<&str>,
    user: Option<&str>,
    now: i64,
) -> Result<Revoked, DbError> {
    let named = conn
        .prepare_cached(
            "UPDATE tokens SET revoked = ?1
             WHERE revoked IS NULL AND expires > ?1
               AND (?2 IS NULL OR jti = ?2) AND (?3 IS NULL OR user = ?3)",
        )?
        .execute(params![now, jti, user])?;
    let descendants = conn
        .prepare_cached(
            "WITH RECURSIVE line(jti) AS (
                 SELECT jti FROM tokens WHERE revoked = ?1
                   AND (?2 IS NULL OR jti = ?2) AND (?3 IS NULL OR user = ?3)
                 UNION
                 SELECT t.jti FROM tokens t JOIN line ON t.parent = line.jti
             )
             UPDATE tokens SET revoked = ?1
             WHERE revoked IS NULL AND expires > ?1 AND jti IN line",
        )?
        .execute(params![now, jti, user])?;
    Ok(Revoked { named, descendants })
}

/// What `revoke_tokens` with the same arguments would revoke, counted:
/// read before it in the same transaction, so that what is decided is
/// written as one change.
pub fn revocable(
    conn: &Connection,
    jti: Option<&str>,
    user: Option<&str>,
    now: i64,
) -> Result<Revoked, DbError> {
    let (named, in_line): (i64, i64) = conn
        .prepare_cached(
            "WITH RECURSIVE named(jti) AS (
                 SELECT jti FROM tokens WHERE revoked IS NULL AND expires > ?1
                   AND (?2 IS NULL OR jti = ?2) AND (?3 IS NULL OR user = ?3)
             ), line(jti) AS (
                 SELECT jti FROM named
                 UNION
                 SELECT t.jti FROM tokens t JOIN line ON t.parent = line.jti
             )
             SELECT (SELECT COUNT(*) FROM named),
                    (SELECT COUNT(*) FROM tokens
                     WHERE revoked IS NULL AND expires > ?1 AND jti IN line)",
        )?
        .query_row(params![now, jti, user], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(Revoked {
        named: named as usize,
        descendants: (in_line - named) as usize,
    })
}

const SELECT: &str =
    "SELECT jti, user, audience, issued, expires, made_by, revoked, parent FROM tokens";

fn token_from_row(row: &rusqlite::Row) -> rusqlite::Result<TokenRecord> {
    Ok(TokenRecord {
        jti: row.get(0)?,
        user: row.get(1)?,
        audience: row.get(2)?,
        issued: row.get(3)?,
        expires: row.get(4)?,
        made_by: row.get(5)?,
        revoked: row.get(6)?,
        parent: row.get(7)?,
    })
}

/// Records that job `job` was submitted on node `node`.
pub fn record_node_submission(conn: &Connection, job: JobId, node: &str) -> Result<(), DbError> {
    conn.prepare_cached("INSERT OR REPLACE INTO node_submissions (job, node) VALUES (?1, ?2)")?
        .execute(params![job, node])?;
    Ok(())
}

/// The node job `job` was submitted on, if it was on one.
pub fn submitted_on(conn: &Connection, job: JobId) -> Result<Option<String>, DbError> {
    Ok(conn
        .prepare_cached("SELECT node FROM node_submissions WHERE job = ?1")?
        .query_row([job], |r| r.get(0))
        .optional()?)
}

#[cfg(test)]
mod tests {
    use super::super::migrations::a_job;
    use super::*;

    fn record(jti: &str, user: &str, issued: i64, expires: i64) -> TokenRecord {
        TokenRecord {
            jti: jti.into(),
            user: user.into(),
            audience: "node".into(),
            issued,
            expires,
            made_by: user.into(),
            revoked: None,
            parent: None,
        }
    }

    #[test]
    fn tokens_are_listed_revoked_and_forgotten_long_after_they_expire() {
        let dir = tempfile::tempdir().unwrap();
        let conn = super::super::migrations::migrated(dir.path());
        record_token(&conn, &record("a1", "alice", 100, 200)).unwrap();
        record_token(&conn, &record("a2", "alice", 110, 5_000)).unwrap();
        record_token(&conn, &record("b1", "bob", 120, 5_000)).unwrap();
        let jtis = |list: Vec<TokenRecord>| list.into_iter().map(|t| t.jti).collect::<Vec<_>>();
        assert_eq!(jtis(tokens(&conn, Some("alice"), 0).unwrap()), ["a2", "a1"]);
        assert_eq!(jtis(tokens(&conn, None, 300).unwrap()), ["b1", "a2"]);
        // Another user's id revokes nothing of theirs.
        let none = Revoked {
            named: 0,
            descendants: 0,
        };
        assert_eq!(
            revoke_tokens(&conn, Some("b1"), Some("alice"), 150).unwrap(),
            none
        );
        assert_eq!(
            revoke_tokens(&conn, None, Some("alice"), 150)
                .unwrap()
                .named,
            2
        );
        assert_eq!(token(&conn, "a2").unwrap().unwrap().revoked, Some(150));
        assert_eq!(token(&conn, "b1").unwrap().unwrap().revoked, None);
        // Made a week after a1 expired: a1 goes.
        record_token(
            &conn,
            &record("b2", "bob", 200 + KEEP_EXPIRED_SECS + 1, 9e9 as i64),
        )
        .unwrap();
        assert_eq!(token(&conn, "a1").unwrap(), None);
        assert!(token(&conn, "a2").unwrap().is_some());
        a_job(&conn, 7);
        record_node_submission(&conn, 7, "gpu02").unwrap();
        assert_eq!(submitted_on(&conn, 7).unwrap().as_deref(), Some("gpu02"));
        assert_eq!(submitted_on(&conn, 8).unwrap(), None);
    }

    #[test]
    fn revoking_a_token_revokes_every_token_made_with_it_down_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let conn = super::super::migrations::migrated(dir.path());
        let child = |jti: &str, parent: &str| TokenRecord {
            parent: Some(parent.into()),
            ..record(jti, "alice", 100, 5_000)
        };
        record_token(&conn, &record("root", "alice", 100, 5_000)).unwrap();
        record_token(&conn, &child("kid", "root")).unwrap();
        record_token(&conn, &child("grandkid", "kid")).unwrap();
        record_token(&conn, &record("other", "alice", 100, 5_000)).unwrap();
        let counted = revocable(&conn, Some("root"), Some("alice"), 200).unwrap();
        let revoked = revoke_tokens(&conn, Some("root"), Some("alice"), 200).unwrap();
        assert_eq!(counted, revoked);
        assert_eq!(
            revoked,
            Revoked {
                named: 1,
                descendants: 2
            }
        );
        for jti in ["root", "kid", "grandkid"] {
            assert_eq!(
                token(&conn, jti).unwrap().unwrap().revoked,
                Some(200),
                "{jti}"
            );
        }
        assert_eq!(token(&conn, "other").unwrap().unwrap().revoked, None);
        assert_eq!(
            token(&conn, "kid").unwrap().unwrap().parent.as_deref(),
            Some("root")
        );
        // Revoked again: nothing is valid to revoke.
        assert_eq!(revocable(&conn, Some("kid"), None, 300).unwrap().named, 0);
        let again = revoke_tokens(&conn, Some("kid"), None, 300).unwrap();
        assert_eq!(again.named + again.descendants, 0);
    }
}
