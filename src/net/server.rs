//! The controller's end of the pool: one thread that accepts the nodes'
//! connections, runs their TLS, cuts what they send into frames and hands
//! each to the daemon (with the certificate the node presented), and
//! sends what the daemon gives it. It holds no state of the pool; the
//! daemon decides what each frame means.
//!
//! What a stranger can do is bounded: at most `MAX_UNPROVEN` connections
//! (`MAX_UNPROVEN_PER_ADDRESS` from one address) may be in their
//! handshake, or without a certificate (joining), at a time, each for at
//! most `HANDSHAKE_TIME`; more are closed at once. A refused handshake is
//! logged, at most once a minute with a count.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsFd;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use rustls::ServerConfig;

use super::conn::Conn;
use super::error::NetError;
use super::pki::{subject_of, Subject};

pub type ConnId = u64;

const MAX_CONNECTIONS: usize = 4_096;
/// Connections not yet proven (in their handshake, or joining), in all
/// and from one address: a flood from one host cannot keep others out.
const MAX_UNPROVEN: usize = 256;
const MAX_UNPROVEN_PER_ADDRESS: usize = 8;
const HANDSHAKE_TIME: Duration = Duration::from_secs(10);

/// What the server thread hands the daemon.
#[derive(Debug)]
pub enum ServerEvent {
    /// A frame's body; `peer`, the node's certificate (`None`: it has
    /// none, and may only join).
    Frame {
        conn: ConnId,
        peer: Option<Subject>,
        address: Option<SocketAddr>,
        body: Vec<u8>,
    },
    /// A connection that had sent frames is gone.
    Closed { conn: ConnId, why: String },
}

enum Order {
    Send(ConnId, Vec<u8>),
    /// Send the last frame, if any, then close.
    Close(ConnId, Option<Vec<u8>>),
}

/// The daemon's hold on the server thread.
#[derive(Clone)]
pub struct ServerHandle {
    orders: Sender<Order>,
    wake: Arc<EventFd>,
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerHandle")
    }
}

impl ServerHandle {
    /// Queues a frame (see `frame::encode`) for a connection.
    pub fn send(&self, conn: ConnId, frame: Vec<u8>) {
        let _ = self.orders.send(Order::Send(conn, frame));
        let _ = self.wake.write(1);
    }

    /// Closes a connection, after `last` if given.
    pub fn close(&self, conn: ConnId, last: Option<Vec<u8>>) {
        let _ = self.orders.send(Order::Close(conn, last));
        let _ = self.wake.write(1);
    }
}

/// Serves `listener` on a thread of its own; `on_event` hears every frame
/// and every end of a connection that had sent one.
pub fn spawn(
    listener: TcpListener,
    config: Arc<ServerConfig>,
    on_event: impl Fn(ServerEvent) + Send + 'static,
) -> Result<ServerHandle, NetError> {
    listener
        .set_nonblocking(true)
        .map_err(NetError::io("cannot make the pool's socket non-blocking"))?;
    let wake = Arc::new(
        EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(|e| NetError::io("cannot make an eventfd")(e.into()))?,
    );
    let (orders, inbox) = mpsc::channel();
    let handle = ServerHandle {
        orders,
        wake: wake.clone(),
    };
    let mut server = Server {
        listener,
        config,
        wake,
        inbox,
        conns: HashMap::new(),
        next_id: 1,
        refused: Refusals::default(),
    };
    std::thread::Builder::new()
        .name("ysched-pool".into())
        .spawn(move || server.run(on_event))
        .map_err(NetError::io("cannot start the pool's thread"))?;
    Ok(handle)
}

struct Entry {
    conn: Conn,
    peer: Option<Subject>,
    since: Instant,
    /// Whether a frame came: the daemon hears of its end only then.
    spoke: bool,
}

impl Entry {
    /// In its handshake, or without a certificate: not yet a node.
    fn unproven(&self) -> bool {
        self.conn.is_handshaking() || self.peer.is_none()
    }
}

/// Handshakes refused since the last log line.
#[derive(Default)]
struct Refusals {
    count: u64,
    last_logged: Option<Instant>,
    last_why: String,
}

impl Refusals {
    fn note(&mut self, why: String) {
        self.count += 1;
        self.last_why = why;
        if self
            .last_logged
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(60))
        {
            tracing::warn!(
                target: "ysched::pool",
                "refused {} connection(s) since the last report; the last: {}",
                self.count,
                self.last_why
            );
            self.count = 0;
            self.last_logged = Some(Instant::now());
        }
    }
}

struct Server {
    listener: TcpListener,
    config: Arc<ServerConfig>,
    wake: Arc<EventFd>,
    inbox: Receiver<Order>,
    conns: HashMap<ConnId, Entry>,
    next_id: ConnId,
    refused: Refusals,
}

impl Server {
    fn run(&mut self, on_event: impl Fn(ServerEvent)) {
        loop {
            let ids: Vec<ConnId> = self.conns.keys().copied().collect();
            let ready = self.wait(&ids);
            if ready.wake {
                let _ = self.wake.read();
                self.take_orders();
            }
            if ready.listener {
                self.accept();
            }
            for id in ready.conns {
                self.serve(id, &on_event);
            }
            self.expire(&on_event);
        }
    }

    /// Polls the wake-up, the listener and every connection.
    fn wait(&self, ids: &[ConnId]) -> Ready {
        let mut fds = vec![
            PollFd::new(self.wake.as_fd(), PollFlags::POLLIN),
            PollFd::new(self.listener.as_fd(), PollFlags::POLLIN),
        ];
        for id in ids {
            let conn = &self.conns[id].conn;
            let mut flags = PollFlags::POLLIN;
            if conn.wants_write() {
                flags |= PollFlags::POLLOUT;
            }
            fds.push(PollFd::new(conn.fd(), flags));
        }
        let _ = poll(&mut fds, PollTimeout::from(1_000u16));
        let hit = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
        Ready {
            wake: hit(&fds[0]),
            listener: hit(&fds[1]),
            conns: ids
                .iter()
                .zip(&fds[2..])
                .filter(|(_, fd)| hit(fd))
                .map(|(id, _)| *id)
                .collect(),
        }
    }

    fn take_orders(&mut self) {
        while let Ok(order) = self.inbox.try_recv() {
            match order {
                Order::Send(id, frame) => {
                    if let Some(entry) = self.conns.get_mut(&id) {
                        if entry
                            .conn
                            .send(&frame)
                            .and_then(|()| entry.conn.flush())
                            .is_err()
                        {
                            entry.conn.close();
                        }
                    }
                }
                Order::Close(id, last) => {
                    if let Some(mut entry) = self.conns.remove(&id) {
                        if let Some(frame) = last {
                            let _ = entry.conn.send(&frame);
                        }
                        entry.conn.close();
                    }
                }
            }
        }
    }

    fn accept(&mut self) {
        while let Ok((sock, address)) = self.listener.accept() {
            let unproven: Vec<&Entry> = self.conns.values().filter(|e| e.unproven()).collect();
            let from_there = unproven
                .iter()
                .filter(|e| e.conn.peer_address().map(|a| a.ip()) == Some(address.ip()))
                .count();
            if self.conns.len() >= MAX_CONNECTIONS
                || unproven.len() >= MAX_UNPROVEN
                || from_there >= MAX_UNPROVEN_PER_ADDRESS
            {
                self.refused
                    .note(format!("{address}: too many connections not yet proven"));
                continue;
            }
            let tls = match rustls::ServerConnection::new(self.config.clone()) {
                Ok(tls) => tls,
                Err(e) => {
                    tracing::error!(target: "ysched::pool", "cannot start TLS: {e}");
                    continue;
                }
            };
            match Conn::new(sock, tls) {
                Ok(conn) => {
                    self.conns.insert(
                        self.next_id,
                        Entry {
                            conn,
                            peer: None,
                            since: Instant::now(),
                            spoke: false,
                        },
                    );
                    self.next_id += 1;
                }
                Err(e) => self.refused.note(format!("{address}: {e}")),
            }
        }
    }

    /// Reads and writes what connection `id` is ready for.
    fn serve(&mut self, id: ConnId, on_event: &impl Fn(ServerEvent)) {
        let Some(entry) = self.conns.get_mut(&id) else {
            return;
        };
        let read = entry.conn.read();
        if entry.peer.is_none() && !entry.conn.is_handshaking() {
            entry.peer = entry
                .conn
                .peer_certificate()
                .and_then(|c| subject_of(c).ok());
        }
        let result = read.and_then(|frames| {
            for body in frames {
                entry.spoke = true;
                on_event(ServerEvent::Frame {
                    conn: id,
                    peer: entry.peer.clone(),
                    address: entry.conn.peer_address(),
                    body,
                });
            }
            entry.conn.flush()
        });
        let why = match result {
            Err(e) => Some(e.to_string()),
            Ok(()) if entry.conn.is_closed() => Some("closed by the node".to_string()),
            Ok(()) => None,
        };
        if let Some(why) = why {
            let entry = self.conns.remove(&id).expect("looked up above");
            if entry.spoke {
                on_event(ServerEvent::Closed { conn: id, why });
            } else {
                let from = entry
                    .conn
                    .peer_address()
                    .map_or("?".to_string(), |a| a.to_string());
                self.refused.note(format!("{from}: {why}"));
            }
        }
    }

    /// Closes connections that did not prove themselves in time.
    fn expire(&mut self, on_event: &impl Fn(ServerEvent)) {
        let late: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, e)| e.unproven() && e.since.elapsed() > HANDSHAKE_TIME)
            .map(|(id, _)| *id)
            .collect();
        for id in late {
            let mut entry = self.conns.remove(&id).expect("listed above");
            entry.conn.close();
            if entry.spoke {
                on_event(ServerEvent::Closed {
                    conn: id,
                    why: "no certificate, and no join in time".into(),
                });
            } else {
                self.refused
                    .note("a connection made no TLS handshake in time".into());
            }
        }
    }
}

struct Ready {
    wake: bool,
    listener: bool,
    conns: Vec<ConnId>,
}
