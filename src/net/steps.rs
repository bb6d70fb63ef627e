//! `srun` and the task servers of a job over several nodes. On each node
//! after the first, the job's part runs a task server (`ysstepd
//! --serve-tasks`) as the job's user, inside the part's cgroup; `srun`,
//! on the batch node, connects to each (as Slurm's srun does to its
//! slurmstepds), sends the step, and reads back every task's output and
//! end. Both sides prove they hold the job's step key (given to every
//! part of the job by the controller, `YS_STEP_KEY`) by an HMAC over the
//! other's random challenge, so neither another job's tasks nor a stranger
//! on the network can start tasks or read them; the key itself never
//! crosses the wire. A task server listens on the first free port of a
//! small range derived from the job id, which `srun` tries in turn.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc::{self, Sender};
use std::time::Duration;

use ring::hmac;
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::exec::tasks::{self, StepOrder, TaskEvent};

use super::error::NetError;
use super::frame::{decode, encode, MAX_FRAME};

/// Ports a task server may listen on: from [`first_port`], this many.
pub const PORTS: u16 = 16;
/// How long `srun` waits for a connection to a node.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long `srun` waits for a node's task server to start listening.
pub const START_WAIT: Duration = Duration::from_secs(30);

/// The first port of job `job`'s range.
pub fn first_port(job: u64) -> u16 {
    30_000 + (job % 2_000) as u16 * PORTS
}

#[derive(Debug, Serialize, Deserialize)]
enum ToServer {
    /// `srun`'s proof of the key (over the server's challenge), and its
    /// own challenge.
    Hello {
        job: u64,
        proof: String,
        challenge: String,
    },
    Launch(Box<StepOrder>),
    Signal {
        signal: i32,
    },
}

#[derive(Debug, Serialize, Deserialize)]
enum FromServer {
    Challenge {
        challenge: String,
    },
    /// The server's proof of the key, over `srun`'s challenge.
    Welcome {
        proof: String,
    },
    Refused {
        why: String,
    },
    Task(TaskEvent),
}

fn send<T: Serialize>(stream: &mut impl Write, message: &T) -> Result<(), NetError> {
    stream
        .write_all(&encode(message)?)
        .map_err(NetError::io("sending to a task server"))
}

fn receive<T: DeserializeOwned>(stream: &mut impl Read) -> Result<T, NetError> {
    let mut head = [0u8; 4];
    stream.read_exact(&mut head).map_err(|_| NetError::Closed)?;
    let len = u32::from_be_bytes(head) as usize;
    if len > MAX_FRAME {
        return Err(NetError::FrameTooLarge(len));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).map_err(|_| NetError::Closed)?;
    decode(&body)
}

fn challenge() -> Result<String, NetError> {
    super::pki::new_token()
}

/// The proof that `side` holds `key`, over `challenge`.
fn proof(key: &str, side: &str, challenge: &str) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key.as_bytes());
    let tag = hmac::sign(&key, format!("ysched step {side} {challenge}").as_bytes());
    tag.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

fn verify(key: &str, side: &str, challenge: &str, given: &str) -> bool {
    let tag: Option<Vec<u8>> = given
        .len()
        .is_multiple_of(2)
        .then(|| {
            (0..given.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(given.get(i..i + 2)?, 16).ok())
                .collect()
        })
        .flatten();
    let Some(tag) = tag else { return false };
    let key = hmac::Key::new(hmac::HMAC_SHA256, key.as_bytes());
    let message = format!("ysched step {side} {challenge}");
    hmac::verify(&key, message.as_bytes(), &tag).is_ok()
}

/// The task server of one part of job `job`: listens on the first free
/// port of the job's range and serves steps until it is killed (its
/// supervisor ends it with the job).
pub fn serve(job: u64, key: &str) -> Result<(), NetError> {
    let listener = listen(job)?;
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let key = key.to_string();
        std::thread::spawn(move || {
            let peer = stream.peer_addr().ok();
            if let Err(e) = serve_one(stream, job, &key) {
                eprintln!("ysstepd: a step from {peer:?}: {e}");
            }
        });
    }
    Ok(())
}

fn listen(job: u64) -> Result<TcpListener, NetError> {
    let first = first_port(job);
    let mut last = None;
    for port in first..first + PORTS {
        match TcpListener::bind(("0.0.0.0", port)) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(NetError::Io {
        what: format!("no free port in {first}-{}", first + PORTS - 1),
        source: last.unwrap_or_else(|| std::io::Error::other("no port")),
    })
}

/// One `srun`'s step: the handshake, its tasks, and their events back
/// until all have ended. A connection lost first kills the step.
fn serve_one(mut stream: TcpStream, job: u64, key: &str) -> Result<(), NetError> {
    let ours = challenge()?;
    send(
        &mut stream,
        &FromServer::Challenge {
            challenge: ours.clone(),
        },
    )?;
    let ToServer::Hello {
        job: theirs_job,
        proof: theirs,
        challenge,
    } = receive(&mut stream)?
    else {
        return Err(NetError::Refused("no hello".into()));
    };
    if theirs_job != job || !verify(key, "srun", &ours, &theirs) {
        let why = format!("this is the task server of job {job}, and the key does not match");
        let _ = send(&mut stream, &FromServer::Refused { why: why.clone() });
        return Err(NetError::Refused(why));
    }
    send(
        &mut stream,
        &FromServer::Welcome {
            proof: proof(key, "server", &challenge),
        },
    )?;
    let ToServer::Launch(order) = receive(&mut stream)? else {
        return Err(NetError::Refused("no step".into()));
    };
    let (tx, rx) = mpsc::channel();
    let node_env: Vec<(String, String)> = std::env::vars().collect();
    let running = std::sync::Arc::new(tasks::start(&order, &node_env, &tx));
    drop(tx);
    let mut reader = stream
        .try_clone()
        .map_err(NetError::io("a step's connection"))?;
    let signalled = running.clone();
    std::thread::spawn(move || loop {
        match receive::<ToServer>(&mut reader) {
            Ok(ToServer::Signal { signal }) => signalled.signal(signal),
            Ok(_) => {}
            // srun is gone: so is its step.
            Err(_) => return signalled.signal(libc::SIGKILL),
        }
    });
    for event in rx {
        if send(&mut stream, &FromServer::Task(event)).is_err() {
            running.signal(libc::SIGKILL);
            return Err(NetError::Closed);
        }
    }
    Ok(())
}

/// `srun`'s connection to the task server of one node.
pub struct StepLink {
    writer: TcpStream,
}

impl StepLink {
    /// Connects to job `job`'s task server at `host`, proving the key
    /// both ways. The job's part on that node may still be starting (its
    /// cgroup made, its server not yet listening) when the batch script
    /// reaches `srun`, so the range is swept again until [`START_WAIT`]
    /// has passed (`wait`; `srun` waits [`START_WAIT`]).
    pub fn connect(
        host: &str,
        job: u64,
        key: &str,
        wait: Duration,
    ) -> Result<(StepLink, TcpStream), NetError> {
        let deadline = std::time::Instant::now() + wait;
        let mut pause = Duration::from_millis(50);
        loop {
            match Self::connect_once(host, job, key) {
                Err(NetError::Refused(why))
                    if why.starts_with("no task server")
                        && std::time::Instant::now() + pause < deadline =>
                {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                other => return other,
            }
        }
    }

    /// One sweep of the job's port range.
    fn connect_once(host: &str, job: u64, key: &str) -> Result<(StepLink, TcpStream), NetError> {
        let first = first_port(job);
        let mut why = String::from("no answer");
        for port in first..first + PORTS {
            let Some(addr) = resolve(host, port) else {
                return Err(NetError::Refused(format!("cannot resolve {host}")));
            };
            let Ok(mut stream) = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) else {
                continue;
            };
            match handshake(&mut stream, job, key) {
                Ok(()) => {
                    let reader = stream.try_clone().map_err(NetError::io("a step link"))?;
                    return Ok((StepLink { writer: stream }, reader));
                }
                Err(e) => why = e.to_string(),
            }
        }
        Err(NetError::Refused(format!(
            "no task server of job {job} on {host} (ports {first}-{}): {why}",
            first + PORTS - 1
        )))
    }

    pub fn launch(&mut self, order: StepOrder) -> Result<(), NetError> {
        send(&mut self.writer, &ToServer::Launch(Box::new(order)))
    }

    pub fn signal(&mut self, signal: i32) -> Result<(), NetError> {
        send(&mut self.writer, &ToServer::Signal { signal })
    }
}

fn resolve(host: &str, port: u16) -> Option<SocketAddr> {
    (host, port).to_socket_addrs().ok()?.next()
}

fn handshake(stream: &mut TcpStream, job: u64, key: &str) -> Result<(), NetError> {
    stream
        .set_read_timeout(Some(CONNECT_TIMEOUT))
        .map_err(NetError::io("a step link"))?;
    let FromServer::Challenge { challenge: theirs } = receive(stream)? else {
        return Err(NetError::Refused("no challenge".into()));
    };
    let ours = challenge()?;
    send(
        stream,
        &ToServer::Hello {
            job,
            proof: proof(key, "srun", &theirs),
            challenge: ours.clone(),
        },
    )?;
    match receive(stream)? {
        FromServer::Welcome { proof: p } if verify(key, "server", &ours, &p) => {
            stream
                .set_read_timeout(None)
                .map_err(NetError::io("a step link"))?;
            Ok(())
        }
        FromServer::Refused { why } => Err(NetError::Refused(why)),
        _ => Err(NetError::Refused(
            "the server there does not hold this job's key".into(),
        )),
    }
}

/// What `srun` hears of one node's part of a step.
#[derive(Debug)]
pub enum Relayed {
    Task(TaskEvent),
    /// The connection to its task server ended, and why.
    Lost(NetError),
}

/// Reads a task server's events into `events`, tagged with `node`, until
/// the connection ends.
pub fn forward_events(mut reader: TcpStream, node: usize, events: Sender<(usize, Relayed)>) {
    loop {
        match receive::<FromServer>(&mut reader) {
            Ok(FromServer::Task(event)) => {
                if events.send((node, Relayed::Task(event))).is_err() {
                    return;
                }
            }
            Ok(_) => {}
            Err(e) => {
                let _ = events.send((node, Relayed::Lost(e)));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_match_only_with_the_same_key_side_and_challenge() {
        let p = proof("k1", "srun", "c");
        assert!(verify("k1", "srun", "c", &p));
        assert!(!verify("k2", "srun", "c", &p));
        assert!(!verify("k1", "server", "c", &p));
        assert!(!verify("k1", "srun", "d", &p));
        assert_eq!(first_port(2_001), first_port(1));
    }

    #[test]
    fn a_step_runs_on_a_task_server_and_a_wrong_key_is_refused() {
        let job = 1_999_937;
        std::thread::spawn(move || serve(job, "secret"));
        let connect = |key: &str| StepLink::connect("127.0.0.1", job, key, Duration::from_secs(2));
        let e = connect("wrong").err().unwrap().to_string();
        assert!(e.contains("key does not match"), "{e}");
        let (mut link, reader) = connect("secret").unwrap();
        link.launch(StepOrder {
            step: 0,
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                "echo task $SLURM_PROCID".into(),
            ],
            env: vec![],
            cwd: "/".into(),
            node_index: 1,
            tasks: vec![5],
            ntasks: 6,
            nodes: vec!["a".into(), "b".into()],
            gpus_per_task: None,
            container: None,
        })
        .unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || forward_events(reader, 1, tx));
        let mut out = String::new();
        for (node, event) in rx {
            assert_eq!(node, 1);
            match event {
                Relayed::Task(TaskEvent::Output { data, .. }) => {
                    out += &String::from_utf8_lossy(&data)
                }
                Relayed::Task(TaskEvent::Exited { task, code, .. }) => {
                    assert_eq!((task, code), (5, 0));
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(out, "task 5\n");
    }
}
