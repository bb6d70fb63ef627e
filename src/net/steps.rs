//! `srun` and the task servers of a job over several nodes. On each node
//! after the first, the job's part runs a task server (`ysstepd
//! --serve-tasks`) as the job's user, inside the part's cgroup; `srun`,
//! on the batch node, connects to each (as Slurm's srun does to its
//! slurmstepds), sends the step, and reads back every task's output and
//! end. The link is a Noise channel (`noise`) keyed by the job's step key
//! (given to every part of the run by the controller, `YS_STEP_KEY`):
//! both sides prove the key in the handshake, and everything after it,
//! the step's command, environment and every task's output, is encrypted
//! and authenticated, so neither another job's tasks nor a user on a node
//! nor anyone on the network can start tasks, change a step or read it.
//! A task server listens on its node's pool address only, on the port
//! the controller chose for this part of the run at random
//! (`YS_STEP_PORTS`), which `srun` learns from the same place.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::exec::tasks::{self, StepOrder, TaskEvent};
use crate::exec::terminal::TerminalSize;

use super::error::NetError;
use super::noise::{self, Receiver};

/// How long `srun` waits for a connection to a node.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long `srun` waits for a node's task server to start listening.
pub const START_WAIT: Duration = Duration::from_secs(30);
/// Connections a task server takes through their handshake at once, in
/// all and from one address: beyond either, the oldest handshake of the
/// address that holds the most is let go (see [`to_let_go`]).
const MAX_HANDSHAKES: usize = 32;
const MAX_HANDSHAKES_PER_SOURCE: usize = 4;

#[derive(Debug, Serialize, Deserialize)]
enum ToServer {
    Launch(Box<StepOrder>),
    Signal {
        signal: i32,
    },
    /// What the user typed, for a task on a terminal (`--pty`).
    Input(Vec<u8>),
    /// The user's terminal's new size.
    Resize(TerminalSize),
    /// srun's standard input ended.
    InputEnd,
}

#[derive(Debug, Serialize, Deserialize)]
enum FromServer {
    Refused { why: String },
    Task(TaskEvent),
}

/// The task server of one part of job `job`: listens on the first of
/// `addresses` it can (its node's pool address and the port the
/// controller chose, then the run's spares: another program of the node
/// may hold the first) and serves steps until it is killed (its
/// supervisor ends it with the job).
pub fn serve(job: u64, key: &str, addresses: &[SocketAddr]) -> Result<(), NetError> {
    let mut last = None;
    for address in addresses {
        match TcpListener::bind(address) {
            Ok(listener) => return serve_on(listener, job, key),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                eprintln!("ysstepd: {address} is taken; trying the run's next port");
                last = Some((address, e));
            }
            Err(e) => return Err(NetError::io(format!("listening on {address} for srun"))(e)),
        }
    }
    Err(match last {
        Some((address, e)) => NetError::io(format!(
            "listening on {address} for srun, the last of the run's ports"
        ))(e),
        None => NetError::Refused("no address to listen on for srun".into()),
    })
}

/// [`serve`] on a listener already bound.
pub fn serve_on(listener: TcpListener, job: u64, key: &str) -> Result<(), NetError> {
    let handshakes = Arc::new(Handshakes::default());
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let Ok(peer) = stream.peer_addr() else {
            continue;
        };
        let Some(slot) = handshakes.admit(peer.ip(), &stream) else {
            continue;
        };
        let key = key.to_string();
        let handshakes = handshakes.clone();
        std::thread::spawn(move || {
            if let Err(e) = serve_one(stream, job, &key, (&handshakes, slot)) {
                eprintln!("ysstepd: a step from {peer}: {e}");
            }
        });
    }
    Ok(())
}

/// The connections a task server is taking through their handshake, in
/// the order they came.
#[derive(Default)]
struct Handshakes {
    pending: Mutex<Vec<Pending>>,
    next: std::sync::atomic::AtomicU64,
}

struct Pending {
    slot: u64,
    source: IpAddr,
    /// A handle on the connection, to let it go.
    stream: TcpStream,
}

impl Handshakes {
    /// Takes a connection from `source` into its handshake, letting
    /// another go if it must; its slot.
    fn admit(&self, source: IpAddr, stream: &TcpStream) -> Option<u64> {
        let handle = stream.try_clone().ok()?;
        let slot = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let sources: Vec<IpAddr> = pending.iter().map(|p| p.source).collect();
        if let Some(index) = to_let_go(&sources, source) {
            let gone = pending.remove(index);
            noise::let_go(&gone.stream);
        }
        pending.push(Pending {
            slot,
            source,
            stream: handle,
        });
        Some(slot)
    }

    /// The handshake in `slot` ended, well or not.
    fn done(&self, slot: u64) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending.retain(|p| p.slot != slot);
    }
}

/// Which of the handshakes under way (their sources, oldest first) to let
/// go so that one from `source` may start: the oldest of `source`'s own
/// when it holds its share, else, when all the slots are taken, the
/// oldest of the source that holds the most. One address that trickles
/// its handshakes (a byte every few seconds, each within the socket's
/// timeout) or floods them takes its own slots only, and a newcomer from
/// elsewhere, such as the job's srun, always gets one.
fn to_let_go(pending: &[IpAddr], source: IpAddr) -> Option<usize> {
    let count = |of: IpAddr| pending.iter().filter(|p| **p == of).count();
    if count(source) >= MAX_HANDSHAKES_PER_SOURCE {
        return pending.iter().position(|p| *p == source);
    }
    if pending.len() < MAX_HANDSHAKES {
        return None;
    }
    let most = pending.iter().copied().max_by_key(|p| count(*p))?;
    pending.iter().position(|p| *p == most)
}

/// One `srun`'s step: the handshake, its tasks, and their events back
/// until all have ended. A connection lost first kills the step. The
/// handshake and the step must come within one deadline, however slowly
/// their bytes trickle in.
fn serve_one(
    stream: TcpStream,
    job: u64,
    key: &str,
    (handshakes, slot): (&Handshakes, u64),
) -> Result<(), NetError> {
    let deadline = Instant::now() + noise::HANDSHAKE_TIMEOUT;
    let accepted = noise::accept(stream, job, key, deadline).and_then(|mut channel| {
        let first = channel.receiver.receive_by::<ToServer>(deadline)?;
        Ok((channel, first))
    });
    handshakes.done(slot);
    let (channel, first) = accepted?;
    let noise::Channel {
        mut sender,
        mut receiver,
    } = channel;
    let ToServer::Launch(order) = first else {
        let why = "a step link must begin with its step".to_string();
        let _ = sender.send(&FromServer::Refused { why: why.clone() });
        return Err(NetError::Refused(why));
    };
    let (tx, rx) = mpsc::channel();
    let node_env: Vec<(String, String)> = std::env::vars().collect();
    let running = Arc::new(tasks::start(&order, &node_env, &tx));
    drop(tx);
    let signalled = running.clone();
    std::thread::spawn(move || loop {
        match receiver.receive::<ToServer>() {
            Ok(ToServer::Signal { signal }) => signalled.signal(signal),
            Ok(ToServer::Input(data)) => signalled.input(&data),
            Ok(ToServer::Resize(size)) => signalled.resize(size),
            Ok(ToServer::InputEnd) => signalled.end_input(),
            Ok(ToServer::Launch(_)) => {}
            // srun is gone, or the link was tampered with: so is the step.
            Err(_) => return signalled.signal(libc::SIGKILL),
        }
    });
    for event in rx {
        if sender.send(&FromServer::Task(event)).is_err() {
            running.signal(libc::SIGKILL);
            return Err(NetError::Closed);
        }
    }
    Ok(())
}

/// `srun`'s connection to the task server of one node.
pub struct StepLink {
    sender: noise::Sender,
}

impl StepLink {
    /// Connects to job `job`'s task server at `host` on the first of
    /// `ports` where it listens (its own port, then the run's spares:
    /// see [`serve`]), proving the key both ways. The job's part on that
    /// node may still be starting (its cgroup made, its server not yet
    /// listening) when the batch script reaches `srun`, so a refused
    /// connection is tried again until `wait` has passed (`srun` waits
    /// [`START_WAIT`]); a port where another program answers, which
    /// cannot hold the key, is passed over for the next.
    pub fn connect(
        (host, ports): (&str, &[u16]),
        job: u64,
        key: &str,
        wait: Duration,
    ) -> Result<(StepLink, Receiver), NetError> {
        let addrs: Vec<SocketAddr> = ports
            .iter()
            .map(|p| resolve(host, *p))
            .collect::<Option<_>>()
            .ok_or_else(|| NetError::Refused(format!("cannot resolve {host}")))?;
        let deadline = Instant::now() + wait;
        let mut pause = Duration::from_millis(50);
        // A task server that is still starting refuses the connection; one
        // crowded by others' handshakes lets it go: both tried again.
        let channel = 'rounds: loop {
            let late = Instant::now() + pause >= deadline;
            let mut why = None;
            for addr in &addrs {
                match Self::try_one(addr, job, key) {
                    Ok(channel) => break 'rounds channel,
                    Err(e) => why = why.or(Some(e)),
                }
            }
            if late {
                return Err(match why {
                    Some(Tried::Busy(addr)) => NetError::Refused(format!(
                        "{addr}: the task server of job {job} let the connection go before the handshake, too many others were connecting"
                    )),
                    Some(Tried::Failed(e)) => e,
                    None => NetError::Refused(format!("no port to reach job {job}'s task server")),
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_secs(1));
        };
        Ok((
            StepLink {
                sender: channel.sender,
            },
            channel.receiver,
        ))
    }

    /// One try of the handshake at `addr`.
    fn try_one(addr: &SocketAddr, job: u64, key: &str) -> Result<noise::Channel, Tried> {
        match TcpStream::connect_timeout(addr, CONNECT_TIMEOUT) {
            Ok(stream) => match noise::connect(stream, job, key) {
                Ok(channel) => Ok(channel),
                Err(noise::ConnectError::Busy) => Err(Tried::Busy(*addr)),
                Err(noise::ConnectError::Failed(e)) => {
                    Err(Tried::Failed(NetError::Refused(format!("{addr}: {e}"))))
                }
            },
            Err(e) => Err(Tried::Failed(NetError::Refused(format!(
                "no task server of job {job} at {addr}: {e}"
            )))),
        }
    }

    pub fn launch(&mut self, order: StepOrder) -> Result<(), NetError> {
        self.sender.send(&ToServer::Launch(Box::new(order)))
    }

    pub fn signal(&mut self, signal: i32) -> Result<(), NetError> {
        self.sender.send(&ToServer::Signal { signal })
    }

    /// What the user typed, for the step's task on a terminal.
    pub fn input(&mut self, data: Vec<u8>) -> Result<(), NetError> {
        self.sender.send(&ToServer::Input(data))
    }

    /// srun's standard input ended: the tasks reading it see its end.
    pub fn end_input(&mut self) -> Result<(), NetError> {
        self.sender.send(&ToServer::InputEnd)
    }

    /// The user's terminal's new size, for the step's task on one.
    pub fn resize(&mut self, size: TerminalSize) -> Result<(), NetError> {
        self.sender.send(&ToServer::Resize(size))
    }
}

/// Where each node's task server of the job a process runs in listens, as
/// the controller told the job: `YS_NODE_ADDRS` and `YS_STEP_PORTS`, in
/// the order of the job's nodes (`None` if they do not pair up).
pub fn servers_of_this_job() -> Option<Vec<(String, u16)>> {
    let addresses = std::env::var("YS_NODE_ADDRS").ok()?;
    let ports = std::env::var("YS_STEP_PORTS").ok()?;
    let ports: Vec<u16> = ports
        .split(',')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let addresses: Vec<String> = addresses.split(',').map(String::from).collect();
    (addresses.len() == ports.len()).then(|| addresses.into_iter().zip(ports).collect())
}

/// Why one try of a task server failed.
enum Tried {
    Busy(SocketAddr),
    Failed(NetError),
}

/// The ports the controller chose for this run's task servers to fall
/// back on (`YS_STEP_SPARE_PORTS`).
pub fn spare_ports() -> Vec<u16> {
    std::env::var("YS_STEP_SPARE_PORTS")
        .unwrap_or_default()
        .split(',')
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Where this part's task server may listen, in order: its node's pool
/// address (as the others reach it) with the port the controller chose
/// for it, then with each of the run's spares.
pub fn own_addresses() -> Result<Vec<SocketAddr>, NetError> {
    let first = own_address()?;
    Ok(std::iter::once(first.port())
        .chain(spare_ports())
        .map(|port| SocketAddr::new(first.ip(), port))
        .collect())
}

/// Where this part's task server listens first: its node's pool address
/// (as the others reach it) and the port the controller chose for it.
fn own_address() -> Result<SocketAddr, NetError> {
    let refuse = |why: &str| NetError::Refused(why.to_string());
    let servers = servers_of_this_job()
        .ok_or_else(|| refuse("no YS_NODE_ADDRS and YS_STEP_PORTS of the same length"))?;
    let index: usize = std::env::var("SLURM_NODEID")
        .ok()
        .and_then(|i| i.parse().ok())
        .ok_or_else(|| refuse("no SLURM_NODEID"))?;
    let (host, port) = servers
        .get(index)
        .ok_or_else(|| refuse("SLURM_NODEID is past the job's nodes"))?;
    resolve(host, *port).ok_or_else(|| NetError::Refused(format!("cannot resolve {host}")))
}

fn resolve(host: &str, port: u16) -> Option<SocketAddr> {
    (host, port).to_socket_addrs().ok()?.next()
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
pub fn forward_events(mut reader: Receiver, node: usize, events: Sender<(usize, Relayed)>) {
    loop {
        match reader.receive::<FromServer>() {
            Ok(FromServer::Task(event)) => {
                if events.send((node, Relayed::Task(event))).is_err() {
                    return;
                }
            }
            Ok(FromServer::Refused { why }) => {
                let _ = events.send((node, Relayed::Lost(NetError::Refused(why))));
                return;
            }
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
    use std::io::{Read, Write};

    fn order(command: &str) -> StepOrder {
        StepOrder {
            step: 0,
            argv: vec!["/bin/sh".into(), "-c".into(), command.into()],
            env: vec![],
            cwd: "/".into(),
            node_index: 1,
            tasks: vec![5],
            ntasks: 6,
            nodes: vec!["a".into(), "b".into()],
            gpus_per_task: None,
            container: None,
            inputs: Vec::new(),
            pty: None,
            stdin_tasks: Vec::new(),
        }
    }

    /// A task server of job `job` with key `key` on a loopback port.
    fn server(job: u64, key: &'static str) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || serve_on(listener, job, key));
        port
    }

    /// Everything a step's tasks said, until task 5 ended; or the event
    /// that came instead.
    fn outputs(reader: Receiver) -> Result<String, Option<Relayed>> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || forward_events(reader, 1, tx));
        let mut out = String::new();
        for (_, event) in rx {
            match event {
                Relayed::Task(TaskEvent::Output { data, .. }) => {
                    out += &String::from_utf8_lossy(&data)
                }
                Relayed::Task(TaskEvent::Exited {
                    task: 5, code: 0, ..
                }) => return Ok(out),
                other => return Err(Some(other)),
            }
        }
        Err(None)
    }

    #[test]
    fn a_step_runs_on_a_task_server_and_a_wrong_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let port = server(1_999_937, "secret");
        let connect = |key: &str| {
            StepLink::connect(
                ("127.0.0.1", &[port]),
                1_999_937,
                key,
                Duration::from_secs(2),
            )
        };
        let e = connect("wrong").err().unwrap().to_string();
        assert!(e.contains("does not hold job 1999937's step key"), "{e}");
        let (mut link, reader) = connect("secret").unwrap();
        let marker = dir.path().join("ran");
        link.launch(order(&format!(
            "echo task $SLURM_PROCID; touch {}",
            marker.display()
        )))
        .unwrap();
        assert_eq!(outputs(reader).unwrap(), "task 5\n");
        assert!(marker.exists());
    }

    /// What a relay saw: srun's records, and the server's bytes.
    struct Seen {
        from_srun: mpsc::Receiver<Vec<u8>>,
        from_server: mpsc::Receiver<Vec<u8>>,
    }

    /// A man in the middle between srun and a task server: it passes the
    /// handshake on as it is, then what `tamper` makes of each record srun
    /// sends after it.
    fn relay(server_port: u16, tamper: fn(Vec<u8>) -> Vec<u8>) -> (u16, Seen) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (seen_tx, from_srun) = mpsc::channel();
        let (back, from_server) = mpsc::channel();
        std::thread::spawn(move || {
            let (mut client, _) = listener.accept().unwrap();
            let mut upstream = TcpStream::connect(("127.0.0.1", server_port)).unwrap();
            let (mut up_read, mut client_write) =
                (upstream.try_clone().unwrap(), client.try_clone().unwrap());
            std::thread::spawn(move || {
                let mut buf = [0u8; 65_536];
                while let Ok(n @ 1..) = up_read.read(&mut buf) {
                    let _ = back.send(buf[..n].to_vec());
                    if client_write.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                // The server hung up: so does the relay.
                let _ = client_write.shutdown(std::net::Shutdown::Both);
            });
            let mut index = 0;
            loop {
                let mut head = [0u8; 2];
                if client.read_exact(&mut head).is_err() {
                    break;
                }
                let mut record = vec![0u8; u16::from_be_bytes(head) as usize];
                if client.read_exact(&mut record).is_err() {
                    break;
                }
                let _ = seen_tx.send(record.clone());
                let record = if index == 0 { record } else { tamper(record) };
                index += 1;
                let mut out = (record.len() as u16).to_be_bytes().to_vec();
                out.extend_from_slice(&record);
                if upstream.write_all(&out).is_err() {
                    break;
                }
            }
        });
        (
            port,
            Seen {
                from_srun,
                from_server,
            },
        )
    }

    #[test]
    fn a_relayed_handshake_gives_the_relay_nothing_to_read_or_change() {
        let dir = tempfile::tempdir().unwrap();
        let server_port = server(41, "secret");
        // A faithful relay carries the step, but only ciphertext.
        let (port, seen) = relay(server_port, |r| r);
        let (mut link, reader) =
            StepLink::connect(("127.0.0.1", &[port]), 41, "secret", Duration::from_secs(2))
                .unwrap();
        let marker = dir.path().join("faithful");
        link.launch(order(&format!(
            "echo secret-output; touch {}",
            marker.display()
        )))
        .unwrap();
        assert_eq!(outputs(reader).unwrap(), "secret-output\n");
        let wire: Vec<u8> = (seen.from_srun.try_iter().flatten())
            .chain(seen.from_server.try_iter().flatten())
            .collect();
        let text = String::from_utf8_lossy(&wire);
        assert!(!text.contains("secret-output") && !text.contains("faithful"));
        // One that changes a byte of the step: refused, and nothing runs.
        let (port, _) = relay(server_port, |mut r| {
            r[3] ^= 1;
            r
        });
        let (mut link, reader) =
            StepLink::connect(("127.0.0.1", &[port]), 41, "secret", Duration::from_secs(2))
                .unwrap();
        let marker = dir.path().join("tampered");
        link.launch(order(&format!("touch {}", marker.display())))
            .unwrap();
        let e = outputs(reader).unwrap_err();
        assert!(matches!(e, Some(Relayed::Lost(_))), "{e:?}");
        std::thread::sleep(Duration::from_millis(200));
        assert!(!marker.exists());
    }

    #[test]
    fn a_recorded_step_sent_again_runs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let server_port = server(42, "secret");
        let (port, seen) = relay(server_port, |r| r);
        let (mut link, reader) =
            StepLink::connect(("127.0.0.1", &[port]), 42, "secret", Duration::from_secs(2))
                .unwrap();
        let marker = dir.path().join("once");
        link.launch(order(&format!("echo x >> {}", marker.display())))
            .unwrap();
        outputs(reader).unwrap();
        // The records srun sent, the handshake's first and the step, sent
        // again on a connection of their own.
        let records: Vec<Vec<u8>> = seen.from_srun.try_iter().collect();
        assert!(records.len() >= 2);
        let mut replay = TcpStream::connect(("127.0.0.1", server_port)).unwrap();
        for record in &records {
            let mut out = (record.len() as u16).to_be_bytes().to_vec();
            out.extend_from_slice(record);
            let _ = replay.write_all(&out);
        }
        replay
            .set_read_timeout(Some(Duration::from_secs(7)))
            .unwrap();
        let mut rest = Vec::new();
        let _ = replay.read_to_end(&mut rest);
        assert_eq!(std::fs::read_to_string(&marker).unwrap(), "x\n");
    }

    #[test]
    fn one_address_takes_its_own_handshake_slots_only() {
        let (a, b, c): (IpAddr, IpAddr, IpAddr) = (
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            "10.0.0.3".parse().unwrap(),
        );
        assert_eq!(to_let_go(&[], a), None);
        assert_eq!(to_let_go(&[a, b, a, a], a), None);
        // Its share taken: its own oldest goes, not another's.
        assert_eq!(to_let_go(&[b, a, a, a, a], a), Some(1));
        assert_eq!(to_let_go(&[b, a, a, a, a], b), None);
        // All taken: the oldest of the one that holds the most.
        let mut full = vec![c, c];
        full.extend((0..MAX_HANDSHAKES_PER_SOURCE).map(|_| b));
        full.extend((full.len()..MAX_HANDSHAKES).map(|i| IpAddr::from([10, 1, 0, i as u8])));
        assert_eq!(full.len(), MAX_HANDSHAKES);
        assert_eq!(to_let_go(&full, c), Some(2));
        assert_eq!(to_let_go(&full, "10.9.9.9".parse().unwrap()), Some(2));
    }

    /// A connection to `port` from `source`, a loopback address of its own.
    fn connect_from(source: [u8; 4], port: u16) -> TcpStream {
        use nix::sys::socket::{
            bind, connect, socket, AddressFamily, SockFlag, SockType, SockaddrIn,
        };
        let fd = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        let [a, b, c, d] = source;
        bind(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            &SockaddrIn::new(a, b, c, d, 0),
        )
        .unwrap();
        connect(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            &SockaddrIn::new(127, 0, 0, 1, port),
        )
        .unwrap();
        TcpStream::from(fd)
    }

    /// Forty connections from one address that trickle their handshakes a
    /// byte every 400 ms (the attack that held every slot for ever): the
    /// job's srun, from another address, still runs its step.
    #[test]
    fn a_trickle_of_handshakes_from_one_address_does_not_keep_srun_out() {
        let port = server(43, "secret");
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut tricklers = Vec::new();
        for _ in 0..40 {
            let stop = stop.clone();
            tricklers.push(std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let mut stream = connect_from([127, 0, 0, 2], port);
                    let _ = stream.write_all(&[0, 48]);
                    while !stop.load(std::sync::atomic::Ordering::SeqCst)
                        && stream.write_all(&[0]).is_ok()
                    {
                        std::thread::sleep(Duration::from_millis(400));
                    }
                }
            }));
        }
        std::thread::sleep(Duration::from_millis(300));
        let (mut link, reader) =
            StepLink::connect(("127.0.0.1", &[port]), 43, "secret", Duration::from_secs(5))
                .unwrap();
        link.launch(order("echo through")).unwrap();
        assert_eq!(outputs(reader).unwrap(), "through\n");
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        for t in tricklers {
            t.join().unwrap();
        }
    }

    /// Another program of the node holds the port the controller chose
    /// (it answers, and cannot hold the key): the task server listens on
    /// the run's spare, and srun finds it there.
    #[test]
    fn a_task_server_whose_port_is_taken_listens_on_a_spare_and_srun_finds_it() {
        let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
        let taken = squatter.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in squatter.incoming() {
                drop(stream);
            }
        });
        let spare = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let addresses = [taken, spare];
        std::thread::spawn(move || serve(44, "secret", &addresses));
        let ports = [taken.port(), spare.port()];
        let (mut link, reader) =
            StepLink::connect(("127.0.0.1", &ports), 44, "secret", Duration::from_secs(5)).unwrap();
        link.launch(order("echo spare")).unwrap();
        assert_eq!(outputs(reader).unwrap(), "spare\n");
        let none = serve(45, "k", &[taken]).unwrap_err().to_string();
        assert!(none.contains("the last of the run's ports"), "{none}");
    }
}
