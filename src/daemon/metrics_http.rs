//! The metrics over HTTP (`metrics_listen`): `GET /metrics` answers the
//! text the event loop last rendered, from a thread of its own, so a slow
//! or hostile scraper never holds up scheduling.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// The text served, replaced by the event loop at each render.
pub type Latest = Arc<Mutex<String>>;

/// Binds `addr` and serves until the daemon exits.
pub fn start(addr: SocketAddr, latest: Latest) -> std::io::Result<()> {
    let server = tiny_http::Server::http(addr).map_err(std::io::Error::other)?;
    tracing::info!(target: "ysched::daemon", "metrics served on http://{addr}/metrics");
    std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || {
            for request in server.incoming_requests() {
                let response = respond(request.method(), request.url(), &latest);
                // A scraper that went away is its own business.
                let _ = request.respond(response);
            }
        })?;
    Ok(())
}

fn respond(
    method: &tiny_http::Method,
    url: &str,
    latest: &Latest,
) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let header = |value: &str| {
        tiny_http::Header::from_bytes(&b"Content-Type"[..], value.as_bytes())
            .expect("a valid header")
    };
    let path = url.split('?').next().unwrap_or("");
    if path != "/metrics" {
        return tiny_http::Response::from_string("not found: ysctld serves /metrics\n")
            .with_status_code(404)
            .with_header(header("text/plain; charset=utf-8"));
    }
    if !matches!(method, tiny_http::Method::Get | tiny_http::Method::Head) {
        return tiny_http::Response::from_string("only GET\n")
            .with_status_code(405)
            .with_header(header("text/plain; charset=utf-8"));
    }
    let text = latest.lock().map(|t| t.clone()).unwrap_or_default();
    tiny_http::Response::from_string(text)
        .with_header(header("text/plain; version=0.0.4; charset=utf-8"))
}
