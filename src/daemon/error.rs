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
    #[error("cannot listen for the pool's nodes on {0} ([pool] listen): {1}")]
    PoolListen(std::net::SocketAddr, std::io::Error),
    #[error("the pool: {0}")]
    Pool(#[from] crate::net::NetError),
    #[error("[standby]: {0}")]
    Leader(#[from] crate::leader::EngineError),
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

/// Why the daemon says no to one request, or to one job of it: the
/// sentence the requester is shown (it travels in `Reply::Rejected` and in
/// per-job outcomes). Refusals come from many rules (admission, limits,
/// budgets, dependencies, permissions, a config reload); each rule builds
/// its sentence where the facts are, so this type carries the sentence.
#[derive(Debug, Clone, PartialEq, Error)]
#[error("{0}")]
pub struct Refusal(pub String);

impl From<String> for Refusal {
    fn from(why: String) -> Refusal {
        Refusal(why)
    }
}

impl From<&str> for Refusal {
    fn from(why: &str) -> Refusal {
        Refusal(why.to_string())
    }
}

/// Why a job marked running could not be handed to its executor; the job
/// ends FAILED with this as its reason.
#[derive(Debug, Error)]
pub enum LaunchError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("user {user} (uid {uid}) no longer exists")]
    UserGone { user: String, uid: u32 },
    #[error("its node {0} is no longer in the pool")]
    NodeGone(String),
    #[error(transparent)]
    Exec(#[from] ExecError),
}

/// Why `yscontrol reload` or SIGHUP did not apply a config (or applied it
/// only in part).
#[derive(Debug, Error)]
pub enum ReloadError {
    #[error("config not reloaded: {0}")]
    Invalid(#[from] ConfigError),
    #[error(
        "config not reloaded: spool_dir changed ({} → {}); restart ysctld to move the spool",
        from.display(),
        to.display()
    )]
    SpoolMoved { from: PathBuf, to: PathBuf },
    #[error("config not reloaded: [[gpus]] changed; restart ysctld to change the GPU inventory")]
    GpusChanged,
    #[error("config {} not reloaded: its budgets could not be summed: {source}", path.display())]
    Budgets {
        path: PathBuf,
        source: Box<DaemonError>,
    },
}
