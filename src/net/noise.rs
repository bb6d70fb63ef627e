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
use std::time::Duration;

use serde::{de::DeserializeOwned, Serialize};
use snow::{HandshakeState, StatelessTransportState};

use super::error::NetError;
use super::frame::{decode, encode, Framer};

const PATTERN: &str = "Noise_NNpsk0_25519_ChaChaPoly_SHA256";
/// Noise's largest message, and what its AEAD tag adds.
const MAX_RECORD: usize = 65_535;
const TAG: usize = 16;
/// How long either side waits for the other's handshake message.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

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

/// The initiator's (`srun`'s) side of the handshake on `stream`.
pub fn connect(stream: TcpStream, job: u64, step_key: &str) -> Result<Channel, NetError> {
    set_timeout(&stream, Some(HANDSHAKE_TIMEOUT))?;
    let mut state = handshake_state(job, step_key, true)?;
    let mut message = vec![0u8; MAX_RECORD];
    let mut writer = &stream;
    let len = state
        .write_message(&[], &mut message)
        .map_err(noise_error("the step link's handshake"))?;
    write_record(&mut writer, &message[..len])?;
    let mut reader = &stream;
    // A server that cannot read the first message closes the connection.
    let answer = read_record(&mut reader).map_err(|_| not_this_job(job))?;
    state
        .read_message(&answer, &mut message)
        .map_err(|_| not_this_job(job))?;
    set_timeout(&stream, None)?;
    Channel::after(stream, state)
}

/// The responder's (a task server's) side of the handshake on `stream`.
pub fn accept(stream: TcpStream, job: u64, step_key: &str) -> Result<Channel, NetError> {
    set_timeout(&stream, Some(HANDSHAKE_TIMEOUT))?;
    let mut state = handshake_state(job, step_key, false)?;
    let mut message = vec![0u8; MAX_RECORD];
    let mut reader = &stream;
    let first = read_record(&mut reader)?;
    state
        .read_message(&first, &mut message)
        .map_err(|_| not_this_job(job))?;
    let len = state
        .write_message(&[], &mut message)
        .map_err(noise_error("the step link's handshake"))?;
    let mut writer = &stream;
    write_record(&mut writer, &message[..len])?;
    // srun's first frame (its step) must come within the same time: a
    // replayed first message, whose sender cannot go on, is let go.
    Channel::after(stream, state)
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
            let len = self
                .state
                .read_message(self.nonce, &record, &mut plain)
                .map_err(|_| {
                    NetError::Refused("a record on the step link that does not decrypt".into())
                })?;
            self.nonce += 1;
            self.framer.push(&plain[..len]);
        }
    }

    /// How long a receive may wait (`None`: for ever).
    pub fn set_timeout(&self, timeout: Option<Duration>) -> Result<(), NetError> {
        set_timeout(&self.stream, timeout)
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
            accept(stream, job.1, keys.1)
        });
        let client = connect(TcpStream::connect(addr).unwrap(), job.0, keys.0);
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
            assert!(client.is_err());
        }
    }
}
