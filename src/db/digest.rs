//! A job payload's content digest, as Rust and SQLite compute it: the
//! key under which `payloads` stores it once.

use rusqlite::functions::FunctionFlags;
use rusqlite::Connection;
use sha2::{Digest, Sha256};

use super::error::DbError;

/// The digest of a payload's stored fields.
pub fn digest(script: &str, args: &str, environment: &str) -> Vec<u8> {
    let mut hash = Sha256::new();
    for field in [script, args, environment] {
        hash.update((field.len() as u64).to_le_bytes());
        hash.update(field.as_bytes());
    }
    hash.finalize().to_vec()
}

/// Makes `payload_digest(script, args, environment)` known to `conn`'s
/// SQL (the migrations use it).
pub fn register(conn: &Connection) -> Result<(), DbError> {
    conn.create_scalar_function(
        "payload_digest",
        3,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            let script = ctx.get::<String>(0)?;
            let args = ctx.get::<String>(1)?;
            let environment = ctx.get::<String>(2)?;
            Ok(digest(&script, &args, &environment))
        },
    )?;
    Ok(())
}
