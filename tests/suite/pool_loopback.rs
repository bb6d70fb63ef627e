//! A node's agent in this test's own process — its real join, TLS
//! connection and session, over a fake executor and a scripted GPU source
//! (there is no GPU here) — against a real pure controller on loopback.
//! What needs no root and no network namespace: what a node's GPUs say
//! reaching the controller's views, metrics and accounting.

use std::path::Path;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use nix::sys::eventfd::{EfdFlags, EventFd};
use ysched::agent::join::JoinLine;
use ysched::agent::sampler::Sampler;
use ysched::agent::session::Session;
use ysched::config::Config;
use ysched::exec::executor::{IsolationFacts, NodeFacts};
use ysched::exec::fake::{FakeExecutor, FakeNode};
use ysched::gpu::sampling::Source;
use ysched::gpu::Inventory;
use ysched::model::gpu::Sample;
use ysched::net::runs::Runs;

use crate::common::*;

const LONG: Duration = Duration::from_secs(20);

/// Two A100s, always busy at 75 % and 5 %.
struct Steady;

impl Source for Steady {
    fn describe(&self) -> String {
        "steady".into()
    }

    fn sample(&mut self) -> Option<Vec<Sample>> {
        let at = |gpu, utilization_pct| Sample {
            gpu,
            utilization_pct,
            memory_used_mb: 2_048,
        };
        Some(vec![at(0, 75), at(1, 5)])
    }
}

/// Joins node `name` with `yscontrol node add`'s line and runs its
/// session on a thread of its own, reading `source` every second.
fn start_node(c: &Cluster, name: &str, source: Box<dyn Source>) -> FakeNode {
    let state = c.dir.path().join(name);
    let (identity, config) = joined(c, name);
    let facts = NodeFacts {
        name: name.to_string(),
        inventory: Inventory::declared(&config),
        cpus: 8,
        mem_mb: 16 << 10,
        tmp_mb: 100 << 10,
        containers: false,
        isolation: IsolationFacts {
            confined: true,
            ..Default::default()
        },
    };
    let wake = Arc::new(EventFd::from_flags(EfdFlags::EFD_NONBLOCK).unwrap());
    let (exits, ended) = mpsc::channel();
    let waker = wake.clone();
    let (executor, fake) = FakeExecutor::new(facts, move |id| {
        let _ = exits.send(id);
        let _ = waker.write(1);
    });
    let runs = Runs::adopt(Box::new(executor), Vec::new());
    let pool_dir = state.join("pool");
    // The session runs until the test process ends.
    std::thread::spawn(move || {
        let mut session = Session::new(
            runs,
            identity,
            pool_dir.clone(),
            Duration::from_secs(10),
            pool_dir.join("lease"),
            ended,
            wake,
        )
        .unwrap();
        session.sample_gpus_with(Sampler::new(source, Duration::from_secs(1)));
        let _ = session.run();
    });
    fake
}

#[test]
fn a_nodes_gpu_readings_reach_the_controllers_views_and_its_jobs() {
    let c = controller_on_loopback();
    let node = start_node(&c, "gpu02", Box::new(Steady));
    let utilization = || stdout(&c.run("ysinfo", &["-h", "-o", "node,gpu,util"]));
    wait_for("gpu02's GPU readings", LONG, || {
        utilization().contains("75%")
    });
    let lines: Vec<Vec<String>> = utilization()
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    assert_eq!(
        lines,
        vec![vec!["gpu02", "0", "75%"], vec!["gpu02", "1", "5%"]]
    );

    let id = c.submit(&["-G", "1", "--wrap", "true"]);
    c.wait_state(id, "RUNNING", LONG);
    wait_for("a reading charged to the job", LONG, || {
        c.field(id, "GPUUtil") != "n/a"
    });
    end_once_launched(&node, id);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    assert_eq!(c.field(id, "NodeList"), "gpu02");
    assert_eq!(c.field(id, "GPUUtil"), "75.0%", "GPU 0, the job's");
    assert_eq!(c.field(id, "GPUMemMax"), "2G");
}

/// Each GPU of a job is read on its own: `seff` and `sacct` say which
/// of its GPUs sat idle, with a verdict in a line.
#[test]
fn seff_and_sacct_say_how_each_gpu_of_a_job_was_used() {
    let c = controller_on_loopback();
    let node = start_node(&c, "gpu02", Box::new(Steady));
    wait_idle(&c, "gpu02");
    let id = c.submit(&["-G", "a100:2", "--wrap", "true"]);
    c.wait_state(id, "RUNNING", LONG);
    wait_for("two readings charged to the job", LONG, || {
        let out = c.run("ysched-slurm", &["seff", &id.to_string()]);
        stdout(&out).contains("GPU 1 on gpu02") && c.field(id, "GPUUtil") == "40.0%"
    });
    end_once_launched(&node, id);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    let out = c.run("ysched-slurm", &["seff", &id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let gpu_lines: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("GPUs:"))
        .collect();
    assert_eq!(gpu_lines.len(), 6, "{text}");
    assert_eq!(gpu_lines[0], "GPUs: 2 (a100)");
    assert_eq!(gpu_lines[1], "GPU Utilization: 40.00% mean");
    assert_eq!(
        gpu_lines[2],
        "GPU 0 on gpu02: 75.00% mean, 2.00 GB peak memory, idle 0% of the time"
    );
    assert_eq!(
        gpu_lines[3],
        "GPU 1 on gpu02: 5.00% mean, 2.00 GB peak memory, idle 100% of the time"
    );
    assert!(gpu_lines[4].starts_with("Idle GPU-hours: "), "{text}");
    assert_eq!(
        gpu_lines[5],
        "GPU Verdict: 1 of 2 GPUs idle 100 % of the time"
    );
    let out = c.run(
        "ysacct",
        &[
            "-j",
            &id.to_string(),
            "-X",
            "-n",
            "-P",
            "-o",
            "GPUEach,GPUVerdict",
        ],
    );
    assert_eq!(
        stdout(&out),
        "gpu02:0=75%/2G/idle0%,gpu02:1=5%/2G/idle100%|1 of 2 GPUs idle 100 % of the time\n"
    );
}

#[test]
fn a_node_renews_its_certificate_and_connects_with_the_new_one_after_the_old_expired() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // Certificates of 12 s: renewed when 4 s are left.
    let pool = format!(
        "[pool]\nlisten = \"127.0.0.1:{port}\"\nlease = \"3s\"\ncertificate_lifetime = \"12s\"\n"
    );
    let mut c = Cluster::with_gpus(&pool, "");
    c.start();
    let node = start_node(&c, "gpu03", Box::new(Steady));
    let joined = std::time::Instant::now();
    wait_for("gpu03 to renew its certificate", LONG, || {
        c.log().contains("node gpu03 renewed its certificate")
    });
    // Its connection goes on with the certificate it opened with.
    let id = c.submit(&["-G", "1", "--wrap", "true"]);
    c.wait_state(id, "RUNNING", LONG);
    end_once_launched(&node, id);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    // Once the first certificate has expired, a new connection is made
    // with the renewed one.
    let expired = Duration::from_secs(13).saturating_sub(joined.elapsed());
    std::thread::sleep(expired);
    c.stop();
    c.start();
    let id = c.submit(&["-G", "1", "--wrap", "true"]);
    c.wait_state(id, "RUNNING", LONG);
    end_once_launched(&node, id);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    assert_eq!(c.field(id, "NodeList"), "gpu03");
}

/// Waits until node `name` is heard and idle.
fn wait_idle(c: &Cluster, name: &str) {
    wait_for(&format!("{name} to be heard"), LONG, || {
        let nodes = c.run("ysched-slurm", &["sinfo", "-N", "-h", "-o", "%N %t"]);
        stdout(&nodes)
            .lines()
            .any(|l| l.trim() == format!("{name} idle"))
    });
}

/// Ends job `id` on the fake `node` once the node has it: the controller
/// shows a job RUNNING when it commits the start, a moment before the
/// node's launch arrives.
fn end_once_launched(node: &FakeNode, id: u64) {
    wait_for("the node to launch the job", LONG, || {
        node.state().running.contains_key(&id)
    });
    assert!(node.end(id, 0, 0), "job {id} ended on the node");
}

/// Sends a join for `node` with `token` to the pool at `address` (the
/// authority pinned by `fingerprint`); the answer, or why there is none.
fn hostile_join(address: &str, fingerprint: &str, node: &str, token: &str) -> String {
    use std::time::Instant;
    use ysched::net::frame::{decode, encode};
    use ysched::net::message::{Envelope, FromNode, ToNode, PROTOCOL};
    let config = ysched::net::tls::join_config(fingerprint).unwrap();
    let mut conn = ysched::agent::session::connect(address, config).unwrap();
    let envelope = Envelope {
        protocol: PROTOCOL,
        epoch: 0,
        incarnation: 0,
        body: FromNode::Join {
            node: node.to_string(),
            token: token.to_string(),
            request_pem: String::new(),
        },
    };
    if let Err(e) = conn.send(&encode(&envelope).unwrap()) {
        return format!("not sent: {e}");
    }
    match conn.wait_frame(Instant::now() + Duration::from_secs(10)) {
        Ok(frame) => match decode::<Envelope<ToNode>>(&frame) {
            Ok(Envelope {
                body: ToNode::Refused { reason },
                ..
            }) => reason,
            other => format!("{other:?}"),
        },
        Err(e) => format!("no answer: {e}"),
    }
}

#[test]
fn a_strangers_joins_cannot_grow_the_database_or_forge_audit_rows_and_log_lines() {
    let c = controller_on_loopback();
    let out = c.run("yscontrol", &["node", "add", "gpu02"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let words: Vec<String> = stdout(&out)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let (address, fingerprint) = (&words[2], &words[6]);
    let spool_size = || -> u64 {
        std::fs::read_dir(&c.spool)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".db"))
            .map(|e| e.metadata().unwrap().len())
            .sum()
    };
    let before = spool_size();
    // A 4 MB name is no frame a stranger may send.
    let huge = "n".repeat(4 << 20);
    let answer = hostile_join(address, fingerprint, &huge, "t");
    assert!(
        !answer.contains("nnnnnnnn"),
        "{}",
        &answer[..answer.len().min(200)]
    );
    // A name with a line break, and one just too long: refused as such.
    let answer = hostile_join(
        address,
        fingerprint,
        "evil\n2026-01-01 00:00:00 root cancel job=1",
        "t",
    );
    assert!(answer.contains("bad node name"), "{answer}");
    let answer = hostile_join(address, fingerprint, &"a".repeat(64), "t");
    assert!(answer.contains("a node name of 64 bytes"), "{answer}");
    // Many refusals from one address: a few recorded a minute.
    for _ in 0..20 {
        hostile_join(address, fingerprint, "nosuch", "t");
    }
    assert!(
        spool_size() < before + (1 << 20),
        "{before} -> {}",
        spool_size()
    );
    let audit = stdout(&c.run("yscontrol", &["show", "audit", "--lines", "100"]));
    let refusals = audit.lines().filter(|l| l.contains("join-refused")).count();
    assert!(
        (3..=6).contains(&refusals),
        "{refusals} refusals audited:\n{audit}"
    );
    assert!(
        !audit.lines().any(|l| l.starts_with("2026-01-01")),
        "a forged row:\n{audit}"
    );
    assert!(
        !c.log().lines().any(|l| l.starts_with("2026-01-01")),
        "a forged log line:\n{}",
        c.log()
    );
    // The node that is expected still joins (its hello, then a job).
    let node = start_node(&c, "gpu02", Box::new(Steady));
    wait_idle(&c, "gpu02");
    let id = c.submit(&["-G", "1", "--wrap", "true"]);
    c.wait_state(id, "RUNNING", LONG);
    end_once_launched(&node, id);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
}

/// A started controller of a pool on a free loopback port (lease 10 s),
/// with no GPUs of its own.
fn controller_on_loopback() -> Cluster {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let pool = format!("[pool]\nlisten = \"127.0.0.1:{port}\"\nlease = \"10s\"\n");
    let mut c = Cluster::with_gpus(&pool, "");
    c.start();
    c
}

/// Node `name` (two A100s, its state under the cluster's directory),
/// joined with the line `yscontrol node add` printed: its identity and
/// config.
fn joined(c: &Cluster, name: &str) -> (ysched::agent::identity::Identity, Config) {
    let text = format!(
        "spool_dir = \"{}\"\nnode_name = \"{name}\"\ncpus = 8\nmemory = \"16GiB\"\n\
         [[gpus]]\ntype = \"a100\"\ncount = 2\nmemory = \"80GiB\"\n",
        c.dir.path().join(name).display()
    );
    let config = Config::parse(&text, Path::new("node.toml")).unwrap();
    let out = c.run("yscontrol", &["node", "add", name]);
    assert!(out.status.success(), "{}", stderr(&out));
    // ysnoded --join ADDRESS --token TOKEN --authority FINGERPRINT
    let words: Vec<String> = stdout(&out)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let line = JoinLine {
        controller: words[2].clone(),
        token: words[4].clone(),
        authority: words[6].clone(),
    };
    let identity = ysched::agent::join::join(&config, &line, &mut |w| eprintln!("{w}")).unwrap();
    (identity, config)
}

/// A node's agent of this test's own, joined with `yscontrol node add`'s
/// line and connected with its certificate: what root on a node can do
/// with the node's identity. Its connection, and its config.
fn certified_node(c: &Cluster, name: &str) -> (ysched::net::conn::Conn, Config) {
    let (identity, config) = joined(c, name);
    let tls = ysched::net::tls::node_config(
        &identity.authority_pem,
        &identity.certificate_pem,
        &identity.key_pem,
    )
    .unwrap();
    let conn = ysched::agent::session::connect(&identity.controller, tls).unwrap();
    (conn, config)
}

/// A node's side of the protocol, spoken by the test: root on a node owns
/// its agent.
struct RawNode {
    conn: ysched::net::conn::Conn,
    seq: u64,
}

impl RawNode {
    /// Sends `body`, which gets no answer.
    fn tell(&mut self, body: ysched::net::message::FromNode) {
        use ysched::net::frame::encode;
        use ysched::net::message::{Envelope, PROTOCOL};
        let envelope = Envelope {
            protocol: PROTOCOL,
            epoch: 0,
            incarnation: 7,
            body,
        };
        self.conn.send(&encode(&envelope).unwrap()).unwrap();
        self.conn.flush().unwrap();
    }

    /// Sends `body`; the controller's next message, if one comes.
    fn send(
        &mut self,
        body: ysched::net::message::FromNode,
    ) -> Option<ysched::net::message::ToNode> {
        use ysched::net::frame::decode;
        use ysched::net::message::{Envelope, ToNode};
        self.tell(body);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        self.conn
            .wait_frame(deadline)
            .ok()
            .and_then(|f| decode::<Envelope<ToNode>>(&f).ok())
            .map(|e| e.body)
    }

    /// A heartbeat saying these runs run, and these are frozen.
    fn heartbeat(
        &mut self,
        running: Vec<ysched::net::message::RunKey>,
        frozen: Vec<(ysched::net::message::RunKey, u64)>,
    ) -> Option<ysched::net::message::ToNode> {
        self.seq += 1;
        self.send(ysched::net::message::FromNode::Heartbeat {
            seq: self.seq,
            running,
            fenced: !frozen.is_empty(),
            frozen,
            clock: ysched::model::units::now(),
            taken_over: Vec::new(),
        })
    }
}

/// A node that lies, speaking the protocol itself with its real
/// certificate: root on a node owns its agent. Its figures are facts
/// about it, never durations the controller adds: a run it claims was
/// frozen for a hundred million seconds, bunched five times as
/// heartbeats that waited in a socket would be, is credited no more than
/// the controller's own measure allows, and is charged for the time it
/// ran.
#[test]
fn a_node_that_claims_its_run_was_frozen_for_years_gains_nothing() {
    use ysched::net::message::{FromNode, RunKey, ToNode};
    let c = controller_on_loopback();
    let (conn, config) = certified_node(&c, "liar");
    let mut node = RawNode { conn, seq: 0 };
    let facts = NodeFacts {
        name: "liar".to_string(),
        inventory: Inventory::declared(&config),
        cpus: 8,
        mem_mb: 16 << 10,
        tmp_mb: 100 << 10,
        containers: false,
        isolation: IsolationFacts {
            confined: true,
            ..Default::default()
        },
    };
    let now = ysched::model::units::now;
    let hello = node.send(FromNode::Hello {
        facts,
        running: Vec::new(),
        ended: Vec::new(),
        lost: Vec::new(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        clock: now(),
        frozen: Vec::new(),
        taken_over: Vec::new(),
        suspended: Vec::new(),
    });
    assert!(matches!(hello, Some(ToNode::Welcome { .. })), "{hello:?}");
    let id = c.submit(&["-G", "1", "-t", "2:00", "--wrap", "sleep 60"]);
    // Its launch comes (after a heartbeat's answer, perhaps).
    let run = loop {
        match node.heartbeat(Vec::new(), Vec::new()) {
            Some(ToNode::Launch(order)) => break RunKey::of(&order.job),
            _ if node.seq > 50 => panic!("no launch: {}", c.log()),
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    node.tell(FromNode::Started {
        run,
        supervisor_pid: 4242,
    });
    std::thread::sleep(Duration::from_secs(1));
    for _ in 0..5 {
        node.heartbeat(vec![run], vec![(run, 100_000_000)]);
    }
    std::thread::sleep(Duration::from_secs(4));
    let record = ysched::exec::spec::ExitRecord {
        exit: Default::default(),
        end_time: now(),
        launch_error: None,
        terminated: false,
        usage: Default::default(),
        stuck: 0,
        image: None,
        fenced: None,
        // And its end says it stood frozen for years more.
        fence_frozen_secs: Some(100_000_000),
    };
    node.tell(FromNode::Exited {
        run,
        record,
        clock: now(),
    });
    assert_eq!(c.wait_done(id, LONG), "COMPLETED", "{}", c.log());
    // It ran about 5 s; the controller last heard the node in good
    // standing about a second before the lie: at most that is credited.
    let elapsed: i64 = c.field(id, "ElapsedRaw").parse().unwrap();
    let billed: i64 = c.field(id, "Billing").parse().unwrap();
    assert!(elapsed >= 4, "{elapsed}");
    assert!(
        billed >= elapsed - 2 && billed <= elapsed,
        "billed {billed} of {elapsed} s:\n{}",
        c.log()
    );
}
