//! The transport end to end on loopback: a node joins by fingerprint and
//! token exchange, comes back with its certificate and is known by it;
//! a wrong fingerprint is refused with both fingerprints named.

use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::conn::Conn;
use super::frame::{decode, encode};
use super::pki::{new_request, Authority};
use super::server::{self, ServerEvent};
use super::tls;

fn connect(port: u16, config: std::sync::Arc<rustls::ClientConfig>) -> Conn {
    let sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let tls = rustls::ClientConnection::new(config, tls::server_name()).unwrap();
    Conn::new(sock, tls).unwrap()
}

/// Drives `client` until the server hears something of it.
fn next_event(client: &mut Conn, heard: &mpsc::Receiver<ServerEvent>) -> ServerEvent {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        client.flush().unwrap();
        let _ = client.read();
        if let Ok(event) = heard.recv_timeout(Duration::from_millis(20)) {
            return event;
        }
        assert!(Instant::now() < deadline, "the server heard nothing");
    }
}

#[test]
fn a_node_joins_by_fingerprint_then_is_known_by_its_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let authority = Authority::load_or_create(dir.path(), "test").unwrap();
    let config = tls::server_config(authority.der(), authority.server_identity().unwrap()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (events, heard) = mpsc::channel();
    let handle = server::spawn(listener, config, move |e| {
        let _ = events.send(e);
    })
    .unwrap();
    let soon = || Instant::now() + Duration::from_secs(10);

    // Joining: no certificate; the controller is trusted by fingerprint.
    let mut joining = connect(port, tls::join_config(&authority.fingerprint()).unwrap());
    let (key_pem, request_pem) = new_request("gpu01").unwrap();
    joining.send(&encode(&request_pem).unwrap()).unwrap();
    let (conn, body) = match next_event(&mut joining, &heard) {
        ServerEvent::Frame {
            conn, peer, body, ..
        } => {
            assert!(peer.is_none(), "no certificate yet");
            (conn, body)
        }
        other => panic!("{other:?}"),
    };
    let request: String = decode(&body).unwrap();
    let (certificate, serial) = authority
        .sign_node("gpu01", &request, std::time::Duration::from_secs(86_400))
        .unwrap();
    handle.send(conn, encode(&certificate).unwrap());
    let answer: String = decode(&joining.wait_frame(soon()).unwrap()).unwrap();
    assert_eq!(answer, certificate);
    // A frame as large as a job's script and environment comes whole.
    let big = "x".repeat(9 << 20);
    handle.send(conn, encode(&big).unwrap());
    let back: String = decode(&joining.wait_frame(soon()).unwrap()).unwrap();
    assert_eq!(back.len(), big.len());

    // Back with the certificate: the server knows the node by it.
    let node = tls::node_config(authority.pem(), &certificate, &key_pem).unwrap();
    let mut joined = connect(port, node);
    joined.send(&encode(&"hello").unwrap()).unwrap();
    match next_event(&mut joined, &heard) {
        ServerEvent::Frame { peer, .. } => {
            let peer = peer.expect("the node's certificate");
            assert_eq!(
                (peer.name.as_str(), peer.serial.as_str()),
                ("gpu01", serial.as_str())
            );
        }
        other => panic!("{other:?}"),
    }

    // A join line with another fingerprint: refused, both named.
    let wrong = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    let mut mistaken = connect(port, tls::join_config(wrong).unwrap());
    mistaken.send(&encode(&"x").unwrap()).unwrap();
    let error = mistaken.wait_frame(soon()).unwrap_err().to_string();
    assert!(
        error.contains(&authority.fingerprint()) && error.contains(wrong),
        "{error}"
    );
}
