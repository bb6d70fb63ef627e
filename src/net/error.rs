//! What can go wrong on the pool's transport.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum NetError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("{0}")]
    Pem(String),
    #[error("a frame of {0} bytes is more than a frame may hold")]
    FrameTooLarge(usize),
    #[error("a message that does not read: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("protocol {theirs} where this ysched speaks {ours}; run the same ysched release on the controller and the nodes")]
    Protocol { ours: u32, theirs: u32 },
    #[error("the connection was closed")]
    Closed,
    #[error("{0}")]
    Refused(String),
}

impl NetError {
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> NetError {
        let what = what.into();
        move |source| NetError::Io { what, source }
    }
}
