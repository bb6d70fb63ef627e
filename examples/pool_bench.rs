//! A pool of many nodes on one machine: a real `ysctld` (release build,
//! a pure controller on loopback) and N node agents in this process, each
//! a real `ysnoded` session (its join, TLS connection, heartbeats, lease)
//! over a fake executor with 8 declared GPUs, whose jobs "run" for a set
//! time. Measures what the pool costs the controller: CPU and memory at
//! rest, heartbeat traffic, submit-to-start of one job across the pool,
//! and how long starting a full pool's worth of jobs takes.
//!
//! cargo build --release && cargo run --release --example pool_bench -- [NODES] [SECONDS_AT_REST]
//! (defaults: 64 nodes, 20 s)

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use nix::sys::eventfd::{EfdFlags, EventFd};
use ysched::agent::join::JoinLine;
use ysched::agent::session::Session;
use ysched::config::Config;
use ysched::exec::executor::{IsolationFacts, NodeFacts};
use ysched::exec::fake::{FakeExecutor, FakeNode};
use ysched::gpu::Inventory;
use ysched::net::runs::Runs;

const GPUS_PER_NODE: u32 = 8;

/// A binary of the release build (or of `YS_BENCH_PROFILE`'s).
fn release(name: &str) -> PathBuf {
    let profile = std::env::var("YS_BENCH_PROFILE").unwrap_or_else(|_| "release".into());
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join(profile)
        .join(name)
}

fn run(dir: &Path, name: &str, args: &[&str]) -> String {
    let out = Command::new(release(name))
        .args(args)
        .env("YS_CONF", dir.join("ctl.toml"))
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// CPU seconds (user + system) and resident KiB of process `pid`.
fn usage_of(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks = 100.0; // sysconf(_SC_CLK_TCK) on Linux
    let cpu = (fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap()) / ticks;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|k| k.parse().ok())
        .unwrap_or(0);
    (cpu, rss)
}

/// Bytes through the loopback interface, both ways.
fn loopback_bytes() -> u64 {
    let text = std::fs::read_to_string("/proc/net/dev").unwrap();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("lo:"))
        .unwrap();
    let f: Vec<u64> = line
        .split_once(':')
        .unwrap()
        .1
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    f[0] + f[8]
}

fn start_controller(dir: &Path, port: u16) -> Child {
    let config = format!(
        "spool_dir = \"{}\"\nnode_name = \"ctl\"\nallow_root_jobs = true\nmax_array_size = 100001\ncpus = 4\nmemory = \"4GiB\"\n\
         metrics_file = \"{}\"\nmetrics_every_secs = 1\ncgroup_parent = \"ysched-pool-bench\"\n\
         [pool]\nlisten = \"127.0.0.1:{port}\"\nlease = \"30s\"\n",
        dir.join("spool").display(),
        dir.join("metrics.prom").display()
    );
    std::fs::write(dir.join("ctl.toml"), config).unwrap();
    let log = std::fs::File::create(dir.join("ctl.log")).unwrap();
    let child = Command::new(release("ysctld"))
        .args(["--foreground", "--config"])
        .arg(dir.join("ctl.toml"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(dir.join("ctl.log"))
        .unwrap_or_default()
        .contains("ysctld ready")
    {
        assert!(Instant::now() < deadline, "ysctld did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// Node `name`: joined with a token from the controller, then its
/// session on a fake executor, on a thread of its own. Jobs end
/// `run_for` after they start.
fn start_node(dir: &Path, name: &str, run_for: Duration) -> FakeNode {
    let state = dir.join(name);
    let text = format!(
        "spool_dir = \"{}\"\nnode_name = \"{name}\"\ncpus = 64\nmemory = \"512GiB\"\n\
         [[gpus]]\ntype = \"a100\"\ncount = {GPUS_PER_NODE}\nmemory = \"80GiB\"\n",
        state.display()
    );
    let config = Config::parse(&text, Path::new("node.toml")).unwrap();
    let line = run(dir, "yscontrol", &["node", "add", name]);
    let words: Vec<&str> = line.split_whitespace().collect();
    let join = JoinLine {
        controller: words[2].to_string(),
        token: words[4].to_string(),
        authority: words[6].to_string(),
    };
    let identity = ysched::agent::join::join(&config, &join, &mut |w| eprintln!("{w}")).unwrap();
    let facts = NodeFacts {
        name: name.to_string(),
        inventory: Inventory::declared(&config),
        cpus: 64,
        mem_mb: 512 << 10,
        tmp_mb: 100 << 10,
        containers: false,
        isolation: IsolationFacts {
            confined: true,
            can_suspend: true,
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
    let lease_file = state.join("pool/lease");
    let identity_dir = state.join("pool");
    std::thread::spawn(move || {
        let mut session = Session::new(
            runs,
            identity,
            identity_dir,
            Duration::from_secs(30),
            lease_file,
            ended,
            wake,
        )
        .unwrap();
        let _ = session.run();
    });
    let ender = fake.clone();
    std::thread::spawn(move || end_jobs_after(ender, run_for));
    fake
}

/// Ends each job of `node` `run_for` after it was launched.
fn end_jobs_after(node: FakeNode, run_for: Duration) {
    let mut seen: std::collections::HashMap<u64, Instant> = Default::default();
    loop {
        let running: Vec<u64> = node.state().running.keys().copied().collect();
        for id in running {
            let since = *seen.entry(id).or_insert_with(Instant::now);
            if since.elapsed() >= run_for {
                node.end(id, 0, 0);
                seen.remove(&id);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn count(dir: &Path, state: &str) -> usize {
    run(dir, "ysqueue", &["-h", "-t", state, "-o", "%i"])
        .lines()
        .count()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let nodes = *args.first().unwrap_or(&64) as usize;
    let rest_secs = *args.get(1).unwrap_or(&20);
    let dir = tempfile::Builder::new()
        .prefix("ysched-pool-bench-")
        .tempdir()
        .unwrap();
    let port = 20_000 + (std::process::id() % 20_000) as u16;
    let mut controller = start_controller(dir.path(), port);
    let pid = controller.id();
    let (cpu0, rss0) = usage_of(pid);

    let joined = Instant::now();
    let _fakes: Vec<FakeNode> = (0..nodes)
        .map(|i| start_node(dir.path(), &format!("node{i:03}"), Duration::from_secs(2)))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while run(dir.path(), "ysinfo", &["-N", "-h"])
        .lines()
        .filter(|l| l.contains(" idle "))
        .count()
        < nodes
    {
        assert!(Instant::now() < deadline, "not every node came up");
        std::thread::sleep(Duration::from_millis(200));
    }
    println!(
        "{nodes} nodes, {} GPUs: joined and idle in {:.1} s",
        nodes as u32 * GPUS_PER_NODE,
        joined.elapsed().as_secs_f64()
    );

    // At rest: what the pool costs with nothing to run.
    std::thread::sleep(Duration::from_secs(2));
    let (cpu1, _) = usage_of(pid);
    let lo1 = loopback_bytes();
    std::thread::sleep(Duration::from_secs(rest_secs));
    let (cpu2, rss2) = usage_of(pid);
    let lo2 = loopback_bytes();
    println!(
        "at rest over {rest_secs} s: controller CPU {:.2} % of one core ({:.3} ms/s per node), RSS {} KiB ({} KiB before the nodes, {:.0} KiB per node)",
        (cpu2 - cpu1) / rest_secs as f64 * 100.0,
        (cpu2 - cpu1) / rest_secs as f64 * 1_000.0 / nodes as f64,
        rss2,
        rss0,
        (rss2 as f64 - rss0 as f64) / nodes as f64
    );
    println!(
        "heartbeat traffic at rest: {:.0} bytes/s on loopback ({:.1} bytes/s per node, both ways, TLS included)",
        (lo2 - lo1) as f64 / rest_secs as f64,
        (lo2 - lo1) as f64 / rest_secs as f64 / nodes as f64
    );
    let _ = cpu0;

    // One job at a time across the idle pool: submit to running.
    let mut latencies = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let id = run(
            dir.path(),
            "ysbatch",
            &["--parsable", "-G", "1", "--wrap", "true"],
        );
        let id = id.trim().to_string();
        loop {
            let state = run(dir.path(), "ysqueue", &["-h", "-j", &id, "-o", "%T"]);
            if state.trim() == "RUNNING" {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        latencies.push(t.elapsed().as_secs_f64() * 1_000.0);
    }
    println!(
        "submit to running, one 1-GPU job on an idle pool: median {:.1} ms (min {:.1}, max {:.1}) over 20",
        median(latencies.clone()),
        latencies.iter().cloned().fold(f64::MAX, f64::min),
        latencies.iter().cloned().fold(0.0, f64::max)
    );
    while count(dir.path(), "all") > 0 && count(dir.path(), "R") > 0 {
        std::thread::sleep(Duration::from_millis(100));
    }

    // A full pool's worth: one array of as many 1-GPU jobs as GPUs.
    let gpus = nodes as u32 * GPUS_PER_NODE;
    let (cpu3, _) = usage_of(pid);
    let t = Instant::now();
    run(
        dir.path(),
        "ysbatch",
        &[
            "--parsable",
            "-G",
            "1",
            &format!("--array=0-{}", gpus - 1),
            "--wrap",
            "true",
        ],
    );
    while count(dir.path(), "R") < gpus as usize {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "the array did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let all_started = t.elapsed().as_secs_f64();
    let (cpu4, rss4) = usage_of(pid);
    println!(
        "{gpus} 1-GPU jobs (one array) over {nodes} nodes: all running in {all_started:.2} s; controller CPU {:.2} s for it; RSS {rss4} KiB",
        cpu4 - cpu3
    );
    // While they hold every GPU: four times as many wait. The pass over
    // them (what the metrics say of the last one).
    run(
        dir.path(),
        "ysbatch",
        &[
            "--parsable",
            "-G",
            "1",
            &format!("--array=0-{}", 4 * gpus - 1),
            "-t",
            "10",
            "--wrap",
            "true",
        ],
    );
    std::thread::sleep(Duration::from_millis(1_500));
    let metrics = std::fs::read_to_string(dir.path().join("metrics.prom")).unwrap_or_default();
    let pass = metrics
        .lines()
        .find(|l| l.starts_with("ysched_schedule_pass_seconds "))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or("?".to_string(), |s| format!("{:.1} ms", s * 1_000.0));
    println!(
        "one scheduling pass over {} pending and {gpus} running jobs on {nodes} nodes: {pass}",
        4 * gpus
    );
    let _ = controller.kill();
    let _ = controller.wait();
}
