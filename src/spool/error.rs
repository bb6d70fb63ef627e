//! What can go wrong with the spool.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum SpoolError {
    #[error(
        "spool directory {0} does not exist; is ysctld installed and has it been started once?"
    )]
    Missing(PathBuf),
    #[error("cannot write to the spool {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("cannot read the reply {path}: {source}")]
    Reply { path: PathBuf, source: io::Error },
    #[error("another ysctld (pid {pid}) already runs on spool {spool}")]
    AlreadyRunning { pid: String, spool: PathBuf },
    #[error("cannot prepare spool {path}: {source}")]
    Prepare { path: PathBuf, source: io::Error },
    #[error("spool {spool} is the personal spool of {owner}; only they can use it")]
    Foreign { spool: PathBuf, owner: String },
}
