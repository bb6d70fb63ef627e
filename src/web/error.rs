//! Why `yswebd` cannot serve.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error(
        "no [web] listen in the config: the web server is off (set listen = \"127.0.0.1:6820\")"
    )]
    NotConfigured,
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("{}: {why}", path.display())]
    Pem { path: PathBuf, why: String },
    #[error("TLS: {0}")]
    Tls(String),
    #[error("cannot start a worker thread: {0}")]
    Thread(std::io::Error),
}
