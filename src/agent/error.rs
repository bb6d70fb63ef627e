//! What stops a node's agent.

use std::path::PathBuf;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum AgentError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Spool(#[from] crate::spool::SpoolError),
    #[error(transparent)]
    Exec(#[from] crate::exec::ExecError),
    #[error(transparent)]
    Net(#[from] crate::net::NetError),
    #[error("this node has joined a pool already ({0} holds its certificate); start it with ysnoded --config FILE, or remove that directory to join anew")]
    AlreadyJoined(PathBuf),
    #[error("this node has not joined a pool ({0} holds no certificate): run the line `yscontrol node add NAME` printed on the controller, with --config")]
    NotJoined(PathBuf),
    #[error("cannot reach the controller at {address}: {why}")]
    Unreachable { address: String, why: String },
    #[error("the controller refused: {0}")]
    Refused(String),
    #[error("the controller answered what a join does not expect: {0}")]
    Unexpected(String),
    #[error("{path} holds {found:?}, not a leader's term: the agent will not guess which controllers it may obey (the file is written by the agent alone; remove it to start from term 0)")]
    BadTerm { path: PathBuf, found: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

impl AgentError {
    pub(super) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> AgentError {
        let what = what.into();
        move |source| AgentError::Io { what, source }
    }
}
