//! The listener: a fixed set of worker threads (`[web] max_connections`)
//! takes connections from a queue as long; a connection that finds the
//! queue full is answered 503 at once and closed, so a flood costs a
//! bounded number of threads and sockets, and the daemon, which `yswebd`
//! only reaches through the spool, never notices it. A request has one
//! deadline, 10 s from its connection's accept, for all of it to arrive
//! (`Deadlined`): a client that trickles bytes loses its worker then,
//! and one that waited in the queue past it is dropped as soon as what it
//! sent is read; each write of the answer has 10 s.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::context::Context;
use super::error::WebError;
use super::http::{read_request, ReadError, Response};

const DEADLINE: Duration = Duration::from_secs(10);

/// Serves `ctx.config.web` until the process is stopped.
pub fn serve(ctx: Context) -> Result<(), WebError> {
    let web = ctx.config.web.clone();
    let address = web.listen.ok_or(WebError::NotConfigured)?;
    let tls = web
        .tls
        .as_ref()
        .map(|(c, k)| tls_config(c, k))
        .transpose()?;
    let listener =
        TcpListener::bind(address).map_err(|source| WebError::Bind { address, source })?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(target: "ysched::web", "yswebd serves {scheme}://{address}/ ({} connections at once)", web.max_connections);
    if tls.is_none() && !address.ip().is_loopback() {
        tracing::warn!(target: "ysched::web", "serving plain HTTP on {address}, beyond this host: tokens cross the network readable; set [web] certificate and key");
    }
    let ctx = Arc::new((ctx, super::session::Sessions::new()));
    let (queue, taken) = sync_channel::<(TcpStream, Instant)>(web.max_connections);
    let taken = Arc::new(Mutex::new(taken));
    for n in 0..web.max_connections {
        let (ctx, taken, tls) = (ctx.clone(), taken.clone(), tls.clone());
        std::thread::Builder::new()
            .name(format!("web-{n}"))
            .spawn(move || work(&ctx, &taken, tls.as_ref()))
            .map_err(WebError::Thread)?;
    }
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        match queue.try_send((stream, Instant::now() + DEADLINE)) {
            Ok(()) => {}
            Err(TrySendError::Full((stream, _))) => busy(stream, tls.is_some()),
            Err(TrySendError::Disconnected(_)) => break,
        }
    }
    Ok(())
}

/// Answers a connection that finds every worker busy: 503 on plain HTTP
/// (TLS would need a handshake, which is the work refused: closed).
fn busy(mut stream: TcpStream, tls: bool) {
    tracing::debug!(target: "ysched::web", "busy: a connection from {:?} refused", stream.peer_addr());
    if !tls {
        let _ = stream.set_write_timeout(Some(Duration::from_millis(200)));
        let response = Response::error(503, "yswebd is busy; try again")
            .with_header("Retry-After", "1".into());
        let _ = response.write_to(&mut stream, false, false);
    }
}

fn work(
    ctx: &(Context, super::session::Sessions),
    taken: &Mutex<Receiver<(TcpStream, Instant)>>,
    tls: Option<&Arc<rustls::ServerConfig>>,
) {
    loop {
        let next = taken
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .recv();
        let Ok((stream, deadline)) = next else { return };
        let _ = stream.set_write_timeout(Some(DEADLINE));
        let Ok(peer) = stream.peer_addr() else {
            continue;
        };
        let stream = Deadlined { stream, deadline };
        match tls {
            None => exchange(ctx, stream, peer.ip(), false),
            Some(config) => match rustls::ServerConnection::new(config.clone()) {
                Ok(conn) => exchange(ctx, rustls::StreamOwned::new(conn, stream), peer.ip(), true),
                Err(e) => tracing::warn!(target: "ysched::web", "TLS: {e}"),
            },
        }
    }
}

/// One request and its answer on `stream`.
fn exchange(
    (ctx, sessions): &(Context, super::session::Sessions),
    mut stream: impl std::io::Read + std::io::Write,
    peer: std::net::IpAddr,
    tls: bool,
) {
    let started = std::time::Instant::now();
    let (response, method, path) = match read_request(&mut stream, ctx.config.web.max_body, peer) {
        Ok(request) => {
            let response = super::routes::respond(ctx, sessions, &request);
            (response, request.method, request.path)
        }
        Err(ReadError::Closed) => return,
        Err(ReadError::Refused(response)) => (response, "-".into(), "-".into()),
    };
    let head_only = method == "HEAD";
    if response.write_to(&mut stream, tls, head_only).is_ok() {
        let _ = stream.flush();
    }
    // The path only: a query string could hold what is nobody's business.
    tracing::info!(
        target: "ysched::web",
        "{peer} {method} {path} {} {} bytes {:.1} ms",
        response.status,
        response.body.len(),
        started.elapsed().as_secs_f64() * 1e3
    );
}

/// A connection whose request must have arrived by `deadline`: each read
/// waits only for what is left of the time, and once it is past, takes
/// only what has already come.
struct Deadlined {
    stream: TcpStream,
    deadline: Instant,
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        // A zero timeout means none: a millisecond takes what is there.
        let wait = left.max(Duration::from_millis(1));
        self.stream.set_read_timeout(Some(wait))?;
        self.stream.read(buf)
    }
}

impl Write for Deadlined {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.stream.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

/// The server's TLS settings from PEM files.
fn tls_config(certificate: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, WebError> {
    let pem = |path: &Path, e: rustls::pki_types::pem::Error| WebError::Pem {
        path: path.to_path_buf(),
        why: e.to_string(),
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(certificate)
        .map_err(|e| pem(certificate, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| pem(certificate, e))?;
    if chain.is_empty() {
        return Err(WebError::Pem {
            path: certificate.to_path_buf(),
            why: "no certificate in it".into(),
        });
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| pem(key, e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| WebError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| {
            WebError::Tls(format!(
                "{} and {} do not go together: {e}",
                certificate.display(),
                key.display()
            ))
        })?;
    Ok(Arc::new(config))
}
