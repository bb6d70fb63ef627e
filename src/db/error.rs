//! What can go wrong with the database.

use std::path::PathBuf;

use thiserror::Error;

use crate::model::job::JobId;

#[derive(Debug, Error)]
pub enum DbError {
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("job {0} does not exist")]
    NotFound(JobId),
    #[error(
        "database {path} has schema version {found}, newer than this ysched knows ({known}); \
         run the ysched release that wrote it, or restore a backup"
    )]
    TooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error(
        "database {path} cannot be used: {message}; stop ysctld, move the file aside and restore \
         a backup (ysched will not start afresh over it)"
    )]
    Corrupt { path: PathBuf, message: String },
    #[error("stored value is invalid: {0}")]
    Invalid(String),
    #[error("cannot create the database {path}: {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
}
