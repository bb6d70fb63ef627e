//! What can go wrong when running a job.

use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::model::job::JobId;

#[derive(Debug, Error)]
pub enum ExecError {
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("cannot start the job supervisor {path}: {source}")]
    Spawn { path: PathBuf, source: io::Error },
    #[error("the supervisor of job {0} is gone")]
    Gone(JobId),
    #[error("the job supervisor {0} is missing; install ysstepd next to ysctld")]
    NoSupervisor(PathBuf),
    #[error("{0}")]
    Isolation(String),
    #[error(transparent)]
    Cgroup(#[from] super::cgroup::CgroupError),
    #[error("cannot watch the job supervisors: {0}")]
    Watch(io::Error),
    /// Asked to freeze or thaw a job this node cannot.
    #[error("{why}")]
    CannotFreeze { job: JobId, why: String },
    /// The job's node did not answer in time: nothing is known to have
    /// happened, and the call may be made again.
    #[error("{0}")]
    Unreachable(String),
}

pub(crate) fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> ExecError {
    let path = path.to_path_buf();
    move |source| ExecError::Io {
        action,
        path,
        source,
    }
}
