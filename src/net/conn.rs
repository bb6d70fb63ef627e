//! One TLS connection driven without blocking: bytes the socket has are
//! read into rustls, the plaintext cut into frames; frames to send are
//! written into rustls and flushed as the socket takes them. The
//! controller polls many of these from one thread; an agent polls its
//! one next to its other events.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rustls::pki_types::CertificateDer;

use super::error::NetError;
use super::frame::Framer;

/// Plaintext queued for sending beyond this means the peer does not read:
/// the connection is given up rather than the memory.
const MAX_QUEUED: usize = 64 << 20;
/// Socket reads (of up to rustls's 16 KiB each) per `read` call.
const READS_PER_CALL: usize = 64;

pub struct Conn {
    sock: TcpStream,
    tls: rustls::Connection,
    framer: Framer,
    closed: bool,
}

impl Conn {
    pub fn new(sock: TcpStream, tls: impl Into<rustls::Connection>) -> Result<Conn, NetError> {
        sock.set_nonblocking(true)
            .map_err(NetError::io("cannot make the socket non-blocking"))?;
        let _ = sock.set_nodelay(true);
        let mut tls: rustls::Connection = tls.into();
        tls.set_buffer_limit(Some(MAX_QUEUED));
        Ok(Conn {
            sock,
            tls,
            framer: Framer::default(),
            closed: false,
        })
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    pub fn peer_address(&self) -> Option<std::net::SocketAddr> {
        self.sock.peer_addr().ok()
    }

    /// The longest frame taken from the peer (see `Framer::set_limit`).
    pub fn set_frame_limit(&mut self, limit: usize) {
        self.framer.set_limit(limit);
    }

    /// The certificate the peer presented, once the handshake is done.
    pub fn peer_certificate(&self) -> Option<&CertificateDer<'static>> {
        self.tls.peer_certificates().and_then(|c| c.first())
    }

    pub fn is_handshaking(&self) -> bool {
        self.tls.is_handshaking()
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    pub fn wants_write(&self) -> bool {
        self.tls.wants_write()
    }

    /// Reads what the socket has; the frames that are now whole. After
    /// the peer closes, `is_closed` says so (frames before it still come).
    pub fn read(&mut self) -> Result<Vec<Vec<u8>>, NetError> {
        // A bounded share per call: a peer that never stops sending must
        // not keep the others waiting.
        for _ in 0..READS_PER_CALL {
            let got = match self.tls.read_tls(&mut self.sock) {
                Ok(0) => {
                    self.closed = true;
                    0
                }
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => 0,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(NetError::io("cannot read from the connection")(e)),
            };
            if let Err(e) = self.tls.process_new_packets() {
                // Tell the peer why before giving up.
                let _ = self.flush();
                return Err(e.into());
            }
            // Plaintext out as it comes, so rustls's buffer never fills.
            self.drain_plaintext()?;
            if got == 0 {
                break;
            }
        }
        let mut frames = Vec::new();
        while let Some(frame) = self.framer.next_frame()? {
            frames.push(frame);
        }
        Ok(frames)
    }

    fn drain_plaintext(&mut self) -> Result<(), NetError> {
        let mut plain = [0u8; 16 << 10];
        loop {
            match self.tls.reader().read(&mut plain) {
                Ok(0) => {
                    self.closed = true;
                    return Ok(());
                }
                Ok(n) => self.framer.push(&plain[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(NetError::io("cannot read from the connection")(e)),
            }
        }
    }

    /// Queues a frame (see `frame::encode`); `flush` sends it.
    pub fn send(&mut self, frame: &[u8]) -> Result<(), NetError> {
        let queued = self
            .tls
            .writer()
            .write(frame)
            .map_err(NetError::io("cannot queue a frame"))?;
        if queued < frame.len() {
            return Err(NetError::Refused(format!(
                "the peer does not read: more than {MAX_QUEUED} bytes wait for it"
            )));
        }
        Ok(())
    }

    /// Writes what the socket takes now.
    pub fn flush(&mut self) -> Result<(), NetError> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.sock) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(NetError::io("cannot write to the connection")(e)),
            }
        }
        Ok(())
    }

    /// Ends the connection politely: a close notice, sent if it can be.
    pub fn close(&mut self) {
        self.tls.send_close_notify();
        let _ = self.flush();
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        self.closed = true;
    }

    /// Waits (flushing as it goes) for the next frame, until `deadline`:
    /// for a node's one-off exchanges, such as its join.
    pub fn wait_frame(&mut self, deadline: Instant) -> Result<Vec<u8>, NetError> {
        let mut waiting = Vec::new();
        loop {
            self.flush()?;
            waiting.extend(self.read()?);
            if !waiting.is_empty() {
                return Ok(waiting.remove(0));
            }
            if self.closed {
                return Err(NetError::Closed);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(NetError::Io {
                    what: "no answer from the controller".into(),
                    source: std::io::Error::from(ErrorKind::TimedOut),
                });
            }
            let mut flags = PollFlags::POLLIN;
            if self.wants_write() {
                flags |= PollFlags::POLLOUT;
            }
            let mut fds = [PollFd::new(self.sock.as_fd(), flags)];
            let ms = left.min(Duration::from_secs(1)).as_millis() as u16;
            match poll(&mut fds, PollTimeout::from(ms)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(NetError::io("cannot wait for the controller")(e.into())),
            }
        }
    }
}
