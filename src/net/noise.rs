//! The step link's channel: the Noise protocol (`snow`), pattern
//! `NNpsk0` over X25519, ChaCha20-Poly1305 and SHA-256, with the job's
//! step key as the pre-shared key. Each side proves it holds the key by
//! the handshake itself (a peer without it cannot produce a message the
//! other can decrypt), both legs are bound to both sides' fresh ephemeral
//! keys, and every frame after the handshake is encrypted and
//! authenticated with a counter as its nonce: a relay passes ciphertext it
//! can neither read nor change, a replayed or reordered record does not
//! decrypt, and a recorded session gives nothing to a later one. The job
//! id is the handshake's prologue, so a key never serves another job.
//!
//! Messages are the pool's frames (`frame`), cut into Noise records of at
//! most 65,535 bytes, each sent with a 2-byte length.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{de::DeserializeOwned, Serialize};
use snow::{HandshakeState, StatelessTransportState};

use super::error::NetError;
use super::frame::{decode, encode, Framer};

const PATTERN: &str = "Noise_NNpsk0_25519_ChaChaPoly_SHA256";
/// Noise's largest message, and what its AEAD tag adds.
const MAX_RECORD: usize = 65_535;
const TAG: usize = 16;
/// How long either side waits for the other's handshake message; a task
/// server's whole handshake and the step after it must come within it.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a task server answers, in the clear, instead of its handshake
/// message: a record no handshake message can be (the answer of
/// `NNpsk0` is at least 48 bytes). A hint for srun's error, which anyone
/// on the path could forge, as they could cut the connection.
const BUSY: &[u8] = b"";
const NOT_THIS_KEY: &[u8] = b"\x01";

/// The 32-byte pre-shared key made from a job's step key (a random
/// 256-bit token, so one hash is key derivation enough).
fn psk(step_key: &str) -> [u8; 32] {
    let mut input = b"ysched step link psk ".to_vec();
    input.extend_from_slice(step_key.as_bytes());
    let digest = ring::digest::digest(&ring::digest::SHA256, &input);
    let mut key = [0u8; 32];
    key.copy_from_slice(digest.as_ref());
    key
}

fn prologue(job: u64) -> Vec<u8> {
    format!("ysched step link 1, job {job}").into_bytes()
}

fn noise_error(what: &'static str) -> impl FnOnce(snow::Error) -> NetError {
    move |e| NetError::Refused(format!("{what}: {e}"))
}

fn handshake_state(job: u64, step_key: &str, initiator: bool) -> Result<HandshakeState, NetError> {
    let params = PATTERN
        .parse()
        .map_err(noise_error("the step link's Noise pattern"))?;
    let key = psk(step_key);
    let prologue = prologue(job);
    let builder = snow::Builder::new(params)
        .psk(0, &key)
        .and_then(|b| b.prologue(&prologue))
        .map_err(noise_error("the step link's Noise state"))?;
    let built = if initiator {
        builder.build_initiator()
    } else {
        builder.build_responder()
    };
    built.map_err(noise_error("the step link's Noise state"))
}

fn write_record(stream: &mut impl Write, record: &[u8]) -> Result<(), NetError> {
    let mut out = Vec::with_capacity(record.len() + 2);
    out.extend_from_slice(&(record.len() as u16).to_be_bytes());
    out.extend_from_slice(record);
    stream
        .write_all(&out)
        .map_err(NetError::io("sending on the step link"))
}

/// A stream whose reads end at one deadline, however the bytes trickle
/// in: a socket's own timeout counts from each read, so a peer sending a
/// byte every few seconds would hold it for ever.
struct ByDeadline<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl Read for ByDeadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut stream = self.stream;
        stream.read(buf)
    }
}

fn read_record(stream: &mut impl Read) -> Result<Vec<u8>, NetError> {
    let mut head = [0u8; 2];
    stream.read_exact(&mut head).map_err(|_| NetError::Closed)?;
    let mut record = vec![0u8; u16::from_be_bytes(head) as usize];
    stream
        .read_exact(&mut record)
        .map_err(|_| NetError::Closed)?;
    Ok(record)
}

/// Why a handshake failed, as the side that ran it says it.
fn not_this_job(job: u64) -> NetError {
    NetError::Refused(format!(
        "the peer does not hold job {job}'s step key (not its srun, or not its task server)"
    ))
}

/// How srun's side of a handshake failed, when it did.
#[derive(Debug)]
pub enum ConnectError {
    /// The task server had too many connections in their handshakes and
    /// let this one go to make room: worth trying again.
    Busy,
    /// Anything else, said.
    Failed(NetError),
}

impl From<NetError> for ConnectError {
    fn from(e: NetError) -> ConnectError {
        ConnectError::Failed(e)
    }
}

/// The initiator's (`srun`'s) side of the handshake on `stream`.
pub fn connect(stream: TcpStream, job: u64, step_key: &str) -> Result<Channel, ConnectError> {
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    let mut state = handshake_state(job, step_key, true)?;
    let mut message = vec![0u8; MAX_RECORD];
    let mut writer = &stream;
    let len = state
        .write_message(&[], &mut message)
        .map_err(noise_error("the step link's handshake"))?;
    write_record(&mut writer, &message[..len])?;
    let mut reader = ByDeadline {
        stream: &stream,
        deadline,
    };
    let answer = match read_record(&mut reader) {
        Ok(answer) => answer,
        Err(_) if Instant::now() >= deadline => {
            return Err(ConnectError::Failed(NetError::Refused(format!(
                "the task server did not answer the handshake within {} s",
                HANDSHAKE_TIMEOUT.as_secs()
            ))))
        }
        Err(_) => {
            return Err(ConnectError::Failed(NetError::Refused(
                "the task server closed the connection before the handshake".into(),
            )))
        }
    };
    match answer.as_slice() {
        BUSY => return Err(ConnectError::Busy),
        NOT_THIS_KEY => return Err(not_this_job(job).into()),
        _ => {}
    }
    state
        .read_message(&answer, &mut message)
        .map_err(|_| not_this_job(job))?;
    set_timeout(&stream, None)?;
    Ok(Channel::after(stream, state)?)
}

/// The responder's (a task server's) side of the handshake on `stream`,
/// which must end by `deadline`, with the first frame after it (see
/// [`Receiver::receive_by`]): a replayed first message, whose sender
/// cannot go on, is let go then.
pub fn accept(
    stream: TcpStream,
    job: u64,
    step_key: &str,
    deadline: Instant,
) -> Result<Channel, NetError> {
    let mut state = handshake_state(job, step_key, false)?;
    let mut message = vec![0u8; MAX_RECORD];
    let mut reader = ByDeadline {
        stream: &stream,
        deadline,
    };
    let first = read_record(&mut reader)?;
    let mut writer = &stream;
    if state.read_message(&first, &mut message).is_err() {
        let _ = write_record(&mut writer, NOT_THIS_KEY);
        return Err(not_this_job(job));
    }
    let len = state
        .write_message(&[], &mut message)
        .map_err(noise_error("the step link's handshake"))?;
    write_record(&mut writer, &message[..len])?;
    Channel::after(stream, state)
}

/// Tells srun, on a connection whose handshake has not been answered,
/// that the task server lets it go to make room (see [`ConnectError::Busy`]).
pub fn let_go(stream: &TcpStream) {
    let mut writer = stream;
    let _ = write_record(&mut writer, BUSY);
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

fn set_timeout(stream: &TcpStream, timeout: Option<Duration>) -> Result<(), NetError> {
    stream
        .set_read_timeout(timeout)
        .map_err(NetError::io("the step link's socket"))
}

/// A step link after its handshake, as one sender and one receiver
/// (each with its own nonce), so that a thread may read while another
/// writes.
pub struct Channel {
    pub sender: Sender,
    pub receiver: Receiver,
}

impl Channel {
    fn after(stream: TcpStream, state: HandshakeState) -> Result<Channel, NetError> {
        let state = Arc::new(
            state
                .into_stateless_transport_mode()
                .map_err(noise_error("the step link's handshake"))?,
        );
        let read_half = stream
            .try_clone()
            .map_err(NetError::io("the step link's socket"))?;
        Ok(Channel {
            sender: Sender {
                stream,
                state: state.clone(),
                nonce: 0,
            },
            receiver: Receiver {
                stream: read_half,
                state,
                nonce: 0,
                framer: Framer::default(),
            },
        })
    }
}

/// The sending half of a step link.
pub struct Sender {
    stream: TcpStream,
    state: Arc<StatelessTransportState>,
    nonce: u64,
}

impl Sender {
    /// Sends `message` as one frame, in as many records as it takes.
    pub fn send<T: Serialize>(&mut self, message: &T) -> Result<(), NetError> {
        let frame = encode(message)?;
        let mut record = vec![0u8; MAX_RECORD];
        for chunk in frame.chunks(MAX_RECORD - TAG) {
            let len = self
                .state
                .write_message(self.nonce, chunk, &mut record)
                .map_err(noise_error("encrypting on the step link"))?;
            self.nonce += 1;
            write_record(&mut self.stream, &record[..len])?;
        }
        Ok(())
    }

    /// How long a send may block before it fails.
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> Result<(), NetError> {
        self.stream
            .set_write_timeout(timeout)
            .map_err(NetError::io("the step link's socket"))
    }

    /// Closes both directions: the other side's reads end.
    pub fn shutdown(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// The receiving half of a step link.
pub struct Receiver {
    stream: TcpStream,
    state: Arc<StatelessTransportState>,
    nonce: u64,
    framer: Framer,
}

impl Receiver {
    /// The next message. A record that does not decrypt (changed, replayed,
    /// out of order, or from someone without the key) ends the link.
    pub fn receive<T: DeserializeOwned>(&mut self) -> Result<T, NetError> {
        let mut plain = vec![0u8; MAX_RECORD];
        loop {
            if let Some(body) = self.framer.next_frame()? {
                return decode(&body);
            }
            let record = read_record(&mut self.stream)?;
            self.open(&record, &mut plain)?;
        }
    }

    /// The next message, if it has come whole by `deadline`.
    pub fn receive_by<T: DeserializeOwned>(&mut self, deadline: Instant) -> Result<T, NetError> {
        let mut plain = vec![0u8; MAX_RECORD];
        loop {
            if let Some(body) = self.framer.next_frame()? {
                set_timeout(&self.stream, None)?;
                return decode(&body);
            }
            let mut reader = ByDeadline {
                stream: &self.stream,
                deadline,
            };
            let record = read_record(&mut reader)?;
            self.open(&record, &mut plain)?;
        }
    }

    /// Decrypts `record` into the frames to come.
    fn open(&mut self, record: &[u8], plain: &mut [u8]) -> Result<(), NetError> {
        let len = self
            .state
            .read_message(self.nonce, record, plain)
            .map_err(|_| {
                NetError::Refused("a record on the step link that does not decrypt".into())
            })?;
        self.nonce += 1;
        self.framer.push(&plain[..len]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair(
        job: (u64, u64),
        keys: (&'static str, &'static str),
    ) -> (Result<Channel, NetError>, Result<Channel, NetError>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            accept(stream, job.1, keys.1, Instant::now() + HANDSHAKE_TIMEOUT)
        });
        let client =
            connect(TcpStream::connect(addr).unwrap(), job.0, keys.0).map_err(|e| match e {
                ConnectError::Busy => NetError::Refused("busy".into()),
                ConnectError::Failed(e) => e,
            });
        (client, server.join().unwrap())
    }

    #[test]
    fn a_link_carries_frames_both_ways_larger_than_a_record() {
        let (client, server) = pair((7, 7), ("k", "k"));
        let (mut client, mut server) = (client.unwrap(), server.unwrap());
        let big = "x".repeat(200_000);
        client.sender.send(&big).unwrap();
        client.sender.send(&"after").unwrap();
        assert_eq!(server.receiver.receive::<String>().unwrap(), big);
        assert_eq!(server.receiver.receive::<String>().unwrap(), "after");
        server.sender.send(&vec![1, 2, 3]).unwrap();
        assert_eq!(client.receiver.receive::<Vec<i32>>().unwrap(), [1, 2, 3]);
    }

    #[test]
    fn another_key_or_another_job_fails_the_handshake_on_both_sides() {
        for (jobs, keys) in [((7, 7), ("k", "other")), ((7, 8), ("k", "k"))] {
            let (client, server) = pair(jobs, keys);
            let e = server.err().unwrap().to_string();
            assert!(e.contains("does not hold job"), "{e}");
            let e = client.err().unwrap().to_string();
            assert!(e.contains("does not hold job"), "{e}");
        }
    }

    /// A peer that trickles its first message a byte at a time, each
    /// within the socket's timeout, is let go at the one deadline.
    #[test]
    fn a_trickled_handshake_ends_at_its_deadline() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let started = Instant::now();
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            accept(stream, 7, "k", Instant::now() + Duration::from_millis(600))
        });
        let mut trickler = TcpStream::connect(addr).unwrap();
        let _ = trickler.write_all(&[0, 48]);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let dribble = std::thread::spawn(move || {
            while !stopped.load(std::sync::atomic::Ordering::SeqCst) {
                if trickler.write_all(&[0]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        assert!(server.join().unwrap().is_err());
        let took = started.elapsed();
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        dribble.join().unwrap();
        assert!(took < Duration::from_secs(3), "held for {took:?}");
    }

    /// srun tells a task server that let it go from one that closed.
    #[test]
    fn srun_tells_a_busy_server_from_a_closed_one() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (busy, _) = listener.accept().unwrap();
            let_go(&busy);
            let (closed, _) = listener.accept().unwrap();
            drop(closed);
        });
        let busy = connect(TcpStream::connect(addr).unwrap(), 7, "k");
        assert!(matches!(busy, Err(ConnectError::Busy)), "{:?}", busy.err());
        let closed = connect(TcpStream::connect(addr).unwrap(), 7, "k");
        match closed {
            Err(ConnectError::Failed(e)) => assert_eq!(
                e.to_string(),
                "the task server closed the connection before the handshake"
            ),
            other => panic!("{:?}", other.err()),
        }
        server.join().unwrap();
    }
}
