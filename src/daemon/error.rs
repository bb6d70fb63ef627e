//! What stops the daemon, or a turn of its loop.

use std::path::PathBuf;

use thiserror::Error;

use crate::config::ConfigError;
use crate::db::DbError;
use crate::exec::ExecError;
use crate::spool::SpoolError;

#[derive(Debug, Error)]
pub enum DaemonError {
    #[error(transparent)]
    Spool(#[from] SpoolError),
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot watch {path}: {message}")]
    Watch { path: PathBuf, message: String },
    #[error(transparent)]
    Exec(#[from] ExecError),
    #[error("cannot serve metrics on {0} (metrics_listen): {1}")]
    MetricsListen(std::net::SocketAddr, std::io::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl DaemonError {
    /// The database could not write (disk full, I/O error): the turn is
    /// lost, the daemon is not.
    pub fn is_storage_failure(&self) -> bool {
        use rusqlite::ErrorCode::{DiskFull, SystemIoFailure};
        matches!(
            self,
            DaemonError::Db(DbError::Sqlite(rusqlite::Error::SqliteFailure(e, _)))
                if matches!(e.code, DiskFull | SystemIoFailure)
        )
    }
}

impl From<rusqlite::Error> for DaemonError {
    fn from(e: rusqlite::Error) -> DaemonError {
        DaemonError::Db(DbError::Sqlite(e))
    }
}
