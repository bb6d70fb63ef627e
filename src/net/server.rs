//! The controller's end of the pool: one thread that accepts the nodes'
//! connections, runs their TLS, cuts what they send into frames and hands
//! each to the daemon (with the certificate the node presented), and
//! sends what the daemon gives it. It holds no state of the pool; the
//! daemon decides what each frame means.
//!
//! What a stranger can do is bounded, and never costs the certified nodes
//! their service: at most `MAX_UNPROVEN` connections
//! (`MAX_UNPROVEN_PER_ADDRESS` from one address) may be in their
//! handshake, or without a certificate (joining), at a time, each for at
//! most `HANDSHAKE_TIME` and with frames of at most `UNPROVEN_FRAME`;
//! beyond the per-address share a new one is closed at once, and when
//! all are taken the oldest unproven one of the address that holds the
//! most makes room (a node's own handshake takes milliseconds and one
//! place, a flood's idle connections many, for ever).
//! Each wake-up serves the connections that are ready before it accepts,
//! and accepts at most `ACCEPTS_PER_WAKE`; the unproven are counted in
//! maps kept as they come and go, so an accept costs no scan. A refused
//! handshake is logged, at most once a minute with a count.

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
/// Connections accepted per wake-up: the rest wait in the backlog.
const ACCEPTS_PER_WAKE: usize = 16;
/// The longest frame from a connection without a certificate: a join
/// (a name, a token and a certificate request) is a few KiB.
const UNPROVEN_FRAME: usize = 64 << 10;

/// What the server thread hands the daemon.
#[derive(Debug, Clone)]
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

/// A handle whose orders go nowhere but to whoever holds the receiver (a
/// test, the simulation's network): what the daemon would have sent, to
/// which connection, and when.
pub(crate) struct Recorder(mpsc::Receiver<Order>);

/// What the daemon asked the server to do with a connection.
pub(crate) enum Sent {
    Frame(ConnId, Vec<u8>),
    /// Send the last frame, if any, then close.
    Close(ConnId, Option<Vec<u8>>),
}

impl Recorder {
    /// What was asked since the last call, in order.
    pub(crate) fn sent(&self) -> Vec<Sent> {
        self.0
            .try_iter()
            .map(|order| match order {
                Order::Send(conn, frame) => Sent::Frame(conn, frame),
                Order::Close(conn, last) => Sent::Close(conn, last),
            })
            .collect()
    }

    pub(crate) fn new() -> Result<(ServerHandle, Recorder), NetError> {
        let wake = EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(|e| NetError::io("cannot make an eventfd")(e.into()))?;
        let (orders, inbox) = mpsc::channel();
        let handle = ServerHandle {
            orders,
            wake: Arc::new(wake),
        };
        Ok((handle, Recorder(inbox)))
    }

    /// The frames sent since the last call, to any connection.
    #[cfg(test)]
    pub(crate) fn frames(&self) -> Vec<Vec<u8>> {
        self.0
            .try_iter()
            .filter_map(|order| match order {
                Order::Send(_, frame) => Some(frame),
                Order::Close(_, last) => last,
            })
            .collect()
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
        unproven: Unproven::default(),
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
    /// Where it came from, as accepted.
    address: std::net::IpAddr,
    since: Instant,
    /// Whether a frame came: the daemon hears of its end only then.
    spoke: bool,
    /// Whether it is counted among the unproven.
    counted: bool,
}

impl Entry {
    /// In its handshake, or without a certificate: not yet a node.
    fn unproven(&self) -> bool {
        self.conn.is_handshaking() || self.peer.is_none()
    }
}

/// The connections not yet proven, in all and per address.
#[derive(Default)]
struct Unproven {
    total: usize,
    by_address: HashMap<std::net::IpAddr, usize>,
}

impl Unproven {
    fn add(&mut self, address: std::net::IpAddr) {
        self.total += 1;
        *self.by_address.entry(address).or_default() += 1;
    }

    fn remove(&mut self, address: std::net::IpAddr) {
        self.total = self.total.saturating_sub(1);
        if let Some(n) = self.by_address.get_mut(&address) {
            *n -= 1;
            if *n == 0 {
                self.by_address.remove(&address);
            }
        }
    }

    fn from(&self, address: std::net::IpAddr) -> usize {
        self.by_address.get(&address).copied().unwrap_or(0)
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
    unproven: Unproven,
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
            // The nodes first, then (a bounded number of) newcomers.
            for id in ready.conns {
                self.serve(id, &on_event);
            }
            if ready.listener {
                self.accept();
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
                    if let Some(mut entry) = self.remove(id) {
                        if let Some(frame) = last {
                            let _ = entry.conn.send(&frame);
                        }
                        entry.conn.close();
                    }
                }
            }
        }
    }

    /// Takes connection `id` out, and out of the unproven counts.
    fn remove(&mut self, id: ConnId) -> Option<Entry> {
        let entry = self.conns.remove(&id)?;
        if entry.counted {
            self.unproven.remove(entry.address);
        }
        Some(entry)
    }

    /// The oldest connection not yet proven of the address that holds
    /// the most, closed to make room: a crowd from many addresses gives
    /// way before a node's one handshake does, however fast it comes
    /// back (as the step links' handshakes do: `steps::to_let_go`).
    fn evict_unproven(&mut self) -> bool {
        let most = self.unproven.by_address.values().copied().max();
        let oldest = self
            .conns
            .iter()
            .filter(|(_, e)| e.counted && Some(self.unproven.from(e.address)) == most)
            .min_by_key(|(_, e)| e.since)
            .map(|(id, _)| *id);
        let Some(mut entry) = oldest.and_then(|id| self.remove(id)) else {
            return false;
        };
        entry.conn.close();
        self.refused.note(format!(
            "{}: closed to make room for a newer connection (all {MAX_UNPROVEN} unproven places taken)",
            entry.address
        ));
        true
    }

    fn accept(&mut self) {
        for _ in 0..ACCEPTS_PER_WAKE {
            let Ok((sock, address)) = self.listener.accept() else {
                return;
            };
            if self.unproven.from(address.ip()) >= MAX_UNPROVEN_PER_ADDRESS {
                self.refused
                    .note(format!("{address}: too many connections not yet proven"));
                continue;
            }
            if self.unproven.total >= MAX_UNPROVEN && !self.evict_unproven() {
                continue;
            }
            if self.conns.len() >= MAX_CONNECTIONS {
                self.refused
                    .note(format!("{address}: too many connections"));
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
                Ok(mut conn) => {
                    conn.set_frame_limit(UNPROVEN_FRAME);
                    self.unproven.add(address.ip());
                    self.conns.insert(
                        self.next_id,
                        Entry {
                            conn,
                            peer: None,
                            address: address.ip(),
                            since: Instant::now(),
                            spoke: false,
                            counted: true,
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
            if entry.peer.is_some() {
                // A node's frames may be as long as the protocol's.
                entry.conn.set_frame_limit(super::frame::MAX_FRAME);
                entry.counted = false;
                self.unproven.remove(entry.address);
            }
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
            let entry = self.remove(id).expect("looked up above");
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
            let mut entry = self.remove(id).expect("listed above");
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
