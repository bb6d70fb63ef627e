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
    #[error(transparent)]
    Isolation(#[from] super::isolation::DeviceFileError),
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

/// What stops `ysstepd` (a job's supervisor or the fork server) from
/// doing its work; printed once, to its standard error, as it exits.
#[derive(Debug, Error)]
pub enum StepError {
    #[error("descriptor {fd} is not open; ysstepd is started by ysctld, not by hand ({errno})")]
    NotStartedByDaemon { fd: i32, errno: nix::errno::Errno },
    /// A system call failed; `what` says what it was for.
    #[error("{what}: {errno}")]
    Os {
        what: String,
        errno: nix::errno::Errno,
    },
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error("invalid {file}: {source}")]
    Spec {
        file: &'static str,
        source: serde_json::Error,
    },
    #[error("cannot encode {file}: {source}")]
    Encode {
        file: &'static str,
        source: serde_json::Error,
    },
    #[error("{0} contains a NUL byte")]
    Nul(&'static str),
    /// What the forked job said before it could exec its script (the text
    /// crosses a pipe from the child, which has nothing else to send).
    #[error("{0}")]
    Job(String),
}

impl StepError {
    pub(crate) fn os(what: impl Into<String>) -> impl FnOnce(nix::errno::Errno) -> StepError {
        let what = what.into();
        move |errno| StepError::Os { what, errno }
    }

    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> StepError {
        let what = what.into();
        move |source| StepError::Io { what, source }
    }
}
