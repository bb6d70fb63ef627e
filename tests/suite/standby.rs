//! Two controllers and etcd (`[standby]`, issue 50): the election against
//! a real etcd started on loopback by the test, and a standby `ysctld`
//! taking over from a leader killed with -9 while a job runs. Skipped
//! where etcd is not installed, unless YSCHED_REQUIRE_ETCD says it must
//! be (CI installs Debian's etcd-server).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ysched::leader::{Engine, Outcome};

use crate::common::{self, wait_for, Cluster};
use crate::pool::{self, Agent, Net};

/// A process killed when dropped (a test that fails leaves none).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An etcd of one member on loopback, in a directory of its own.
struct Etcd {
    _process: Killed,
    endpoint: String,
    _dir: tempfile::TempDir,
}

/// Whether etcd is installed; where it is not, the test is skipped,
/// unless YSCHED_REQUIRE_ETCD says it must run.
fn etcd_installed(test: &str) -> bool {
    if Command::new("etcd").arg("--version").output().is_ok() {
        return true;
    }
    assert!(
        std::env::var_os("YSCHED_REQUIRE_ETCD").is_none(),
        "etcd is required here (YSCHED_REQUIRE_ETCD) but not installed"
    );
    common::skip(test, "etcd is not installed (Debian: etcd-server)");
    false
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A started etcd on loopback, or `None` where it is not installed (and
/// not required).
fn etcd(test: &str) -> Option<Etcd> {
    etcd_on(test, "127.0.0.1", None)
}

/// The same, its client port on `host`, in network namespace `ns` (the
/// test's own when `None`).
fn etcd_on(test: &str, host: &str, ns: Option<&str>) -> Option<Etcd> {
    if !etcd_installed(test) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let (client, peer) = (free_port(), free_port());
    let client_url = format!("http://{host}:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let mut command = match ns {
        Some(ns) => {
            let mut c = Command::new("nsenter");
            c.arg(format!("--net=/run/netns/{ns}")).arg("etcd");
            c
        }
        None => Command::new("etcd"),
    };
    let child = command
        .args(["--name", "t", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("t={peer_url}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let etcd = Etcd {
        _process: Killed(child),
        endpoint: client_url,
        _dir: dir,
    };
    let engine = Engine::new(&etcd.endpoint, Duration::from_secs(1));
    wait_for("etcd to grant a lease", Duration::from_secs(20), || {
        engine.grant(5).is_ok()
    });
    Some(etcd)
}

fn engine(etcd: &Etcd) -> Engine {
    Engine::new(&etcd.endpoint, Duration::from_secs(2))
}

const KEY: &str = "/ysched/test/leader";

#[test]
fn the_first_leads_the_second_follows_and_leads_one_lease_after_the_first_stops() {
    let Some(etcd) = etcd(module_path!()) else {
        return;
    };
    let (a, b) = (engine(&etcd), engine(&etcd));
    let lease_a = a.grant(2).unwrap();
    let Outcome::Leads { term: first } = a.campaign(KEY, "ctl-a", lease_a).unwrap() else {
        panic!("the first campaign did not lead");
    };
    let lease_b = b.grant(2).unwrap();
    assert_eq!(
        b.campaign(KEY, "ctl-b", lease_b).unwrap(),
        Outcome::Follows {
            leader: "ctl-a".into(),
            term: first
        }
    );
    assert!(a.keep_alive(lease_a).unwrap().is_some());
    // a stops proving its lease (killed, frozen, cut off): b leads once
    // the lease has run out, in a higher term, and not before.
    let stopped = Instant::now();
    let mut second = None;
    for _ in 0..100 {
        b.keep_alive(lease_b).unwrap();
        if let Outcome::Leads { term } = b.campaign(KEY, "ctl-b", lease_b).unwrap() {
            second = Some(term);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let second = second.expect("b did not lead within 10 s of a's last keep-alive");
    assert!(second > first, "{second:?} after {first:?}");
    assert!(
        stopped.elapsed() >= Duration::from_millis(900),
        "b led {:?} after a's last keep-alive, inside a's lease",
        stopped.elapsed()
    );
    // a learns that it no longer leads the next time it asks.
    assert_eq!(a.keep_alive(lease_a).unwrap(), None);
    assert!(matches!(
        a.campaign(KEY, "ctl-a", a.grant(2).unwrap()).unwrap(),
        Outcome::Follows { leader, term } if leader == "ctl-b" && term == second
    ));
}

#[test]
fn a_leader_that_resigns_is_replaced_at_once_in_a_higher_term() {
    let Some(etcd) = etcd(module_path!()) else {
        return;
    };
    let (a, b) = (engine(&etcd), engine(&etcd));
    let lease_a = a.grant(30).unwrap();
    let Outcome::Leads { term: first } = a.campaign(KEY, "ctl-a", lease_a).unwrap() else {
        panic!("the first campaign did not lead");
    };
    a.resign(lease_a).unwrap();
    let lease_b = b.grant(30).unwrap();
    match b.campaign(KEY, "ctl-b", lease_b).unwrap() {
        Outcome::Leads { term } => assert!(term > first),
        other => panic!("b did not lead after a resigned: {other:?}"),
    }
}

#[test]
fn an_engine_that_does_not_answer_is_an_error_naming_it() {
    let port = free_port();
    let e = Engine::new(
        &format!("http://127.0.0.1:{port}"),
        Duration::from_millis(500),
    );
    let error = e.grant(2).unwrap_err().to_string();
    assert!(
        error.contains(&format!("etcd at http://127.0.0.1:{port}")),
        "{error}"
    );
}

/// The `[standby]` table of a controller named `name`.
fn standby_table(etcd: &Etcd, name: &str) -> String {
    format!(
        "[standby]\netcd = \"{}\"\nname = \"{name}\"\nkey = \"/ysched/{}/leader\"\nlease = \"3s\"\n",
        etcd.endpoint,
        name.len()
    )
}

/// A standby `ysctld` on `c`'s spool and database, named `name`; its
/// process, and a reader of its log.
fn start_standby(c: &Cluster, name: &str) -> (Killed, impl Fn() -> String) {
    let text = std::fs::read_to_string(&c.config).unwrap();
    let config = c.dir.path().join(format!("ysched-{name}.toml"));
    std::fs::write(
        &config,
        text.replace("name = \"ctl-a\"", &format!("name = \"{name}\"")),
    )
    .unwrap();
    let log = c.dir.path().join(format!("ysctld-{name}.log"));
    let log_file = std::fs::File::create(&log).unwrap();
    let process = Killed(
        Command::new(common::bin_dir().join("ysctld"))
            .args(["--foreground", "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .unwrap(),
    );
    let read = move || std::fs::read_to_string(&log).unwrap_or_default();
    wait_for(
        "the standby to follow ctl-a",
        Duration::from_secs(10),
        || read().contains("standby: ctl-a leads in term"),
    );
    assert!(!read().contains("ysctld ready"), "{}", read());
    (process, read)
}

/// A job that writes when it began and ended, four seconds apart.
fn slow_job(c: &Cluster) -> u64 {
    c.script(
        "slow.sh",
        "#!/bin/sh\necho \"began $(date +%s.%N)\"\nsleep 4\necho \"ended $(date +%s.%N)\"\n",
    );
    c.submit(&["-t", "2", "slow.sh"])
}

/// The job ran once to its end and is accounted once, COMPLETED.
fn ran_once(c: &Cluster, id: u64) {
    assert_eq!(c.wait_done(id, Duration::from_secs(20)), "COMPLETED");
    let output = c.output_of(id);
    assert_eq!(output.matches("began").count(), 1, "{output}");
    assert_eq!(output.matches("ended").count(), 1, "{output}");
    let rows = c.run(
        "ysacct",
        &["-j", &id.to_string(), "-X", "-n", "-P", "-o", "JobID,State"],
    );
    assert_eq!(common::stdout(&rows).trim(), format!("{id}|COMPLETED"));
    // Its start and end, as accounted, are the job's own, across the
    // takeover: one run, recorded once, with its real times.
    let stamp = |word: &str| -> f64 {
        let line = output.lines().find(|l| l.starts_with(word)).unwrap();
        line[word.len()..].trim().parse().unwrap()
    };
    let json = common::stdout(&c.run("ysacct", &["-j", &id.to_string(), "--json"]));
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let job = &json["jobs"][0];
    let (start, end) = (
        job["start_time"].as_f64().unwrap(),
        job["end_time"].as_f64().unwrap(),
    );
    assert!(
        (start - stamp("began")).abs() <= 2.0,
        "start {start}: {output}"
    );
    assert!((end - stamp("ended")).abs() <= 2.0, "end {end}: {output}");
}

/// etcd, a leader (ctl-a, `c`) and a standby (ctl-b) on one server's
/// spool, and a job of `slow_job` running; `None` where etcd is missing.
#[allow(clippy::type_complexity)]
fn one_server_two_controllers(
    test: &str,
) -> Option<(Etcd, Cluster, (Killed, impl Fn() -> String), u64)> {
    let etcd = etcd(test)?;
    let mut c = Cluster::new(&standby_table(&etcd, "ctl-a"));
    c.start();
    assert!(c.log().contains("leading as ctl-a in term"), "{}", c.log());
    let standby = start_standby(&c, "ctl-b");
    let id = slow_job(&c);
    c.wait_state(id, "RUNNING", Duration::from_secs(10));
    Some((etcd, c, standby, id))
}

/// The leader `c` stops by itself with status 75, its log saying `why`,
/// and the standby whose log `b_log` reads leads.
fn stops_and_the_standby_leads(c: &mut Cluster, b_log: &impl Fn() -> String, why: &str) {
    let status = c.wait_exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(75), "{}", c.log());
    assert!(c.log().contains(why), "{}", c.log());
    wait_for("the standby to take over", Duration::from_secs(10), || {
        b_log().contains("ysctld ready")
    });
}

#[test]
fn a_standby_takes_over_from_a_leader_killed_while_a_job_runs_and_the_job_ends_once() {
    let Some((_etcd, mut c, (_b, b_log), id)) = one_server_two_controllers(module_path!()) else {
        return;
    };
    c.crash();
    let killed = Instant::now();
    wait_for("the standby to take over", Duration::from_secs(20), || {
        b_log().contains("ysctld ready")
    });
    let takeover = killed.elapsed();
    assert!(b_log().contains("leading as ctl-b in term"), "{}", b_log());
    // Within a lease and a campaign's interval of the kill, not before
    // the lease could end.
    assert!(
        takeover >= Duration::from_millis(1500) && takeover < Duration::from_secs(10),
        "took over {takeover:?} after the kill"
    );
    // The job was adopted, not run again.
    ran_once(&c, id);
    // The new leader takes new work.
    let next = c.submit(&["--wrap", "true"]);
    assert_eq!(c.wait_done(next, Duration::from_secs(20)), "COMPLETED");
}

#[test]
fn yscontrol_takeover_hands_the_lead_to_the_standby_at_once_and_the_job_ends_once() {
    let Some((_etcd, mut c, (_b, b_log), id)) = one_server_two_controllers(module_path!()) else {
        return;
    };
    let asked = Instant::now();
    let out = c.run("yscontrol", &["takeover"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(
        common::stdout(&out).contains("ctl-a hands the lead over (term"),
        "{}",
        common::stdout(&out)
    );
    // The leader stops with the status that has its service start it
    // again, as the standby.
    stops_and_the_standby_leads(&mut c, &b_log, "handed over: the lease is given up");
    // At the standby's next campaign, well inside the 3 s lease it would
    // otherwise wait out.
    let takeover = asked.elapsed();
    eprintln!("takeover by hand: {takeover:?}");
    assert!(
        takeover < Duration::from_millis(2_500),
        "took over after {takeover:?}"
    );
    ran_once(&c, id);
    // The hand-over is in the audit log, by whom.
    let audit = common::stdout(&c.run("yscontrol", &["show", "audit"]));
    assert!(
        audit
            .lines()
            .any(|l| l.contains("takeover") && l.contains("root")),
        "{audit}"
    );
}

#[test]
fn takeover_is_refused_without_a_standby_and_to_users() {
    let c = Cluster::started("");
    let out = c.run("yscontrol", &["takeover"]);
    assert!(!out.status.success());
    assert!(
        common::stderr(&out).contains("no [standby] table: there is no other controller"),
        "{}",
        common::stderr(&out)
    );
    if common::is_root() {
        let user = common::TestUser::create("tk");
        let out = c.run_as(&user.name, "yscontrol", &["takeover"]);
        assert!(!out.status.success());
        assert!(
            common::stderr(&out).contains("hand the lead over"),
            "{}",
            common::stderr(&out)
        );
    }
    // Still running, and answering.
    assert!(c.run("ysqueue", &[]).status.success());
}

/// Two pure controllers on two "servers" (the first on the pool's bridge,
/// the second in a network namespace of its own on it), sharing the spool
/// directory, etcd on the bridge, and a node in its namespace that knows
/// both controllers' addresses from its join line.
struct TwoControllers {
    net: Net,
    a: Cluster,
    b: Killed,
    b_log: std::path::PathBuf,
    node: Agent,
    _etcd: Etcd,
}

/// The pool's lease: at least three takeovers (a 3 s standby lease and
/// the campaign's second), so that no job freezes for one.
const POOL_LEASE: &str = "12s";

impl TwoControllers {
    /// `None` where the test is skipped: not root (network namespaces, a
    /// bridge), or no etcd.
    fn start(test: &str) -> Option<TwoControllers> {
        if !common::is_root() {
            common::skip(test, "two servers need root (network namespaces, a bridge)");
            return None;
        }
        let mut net = Net::new();
        // etcd on a server of its own, so that a leader can be cut off
        // from it alone.
        let etcd_ns = net.add_node(8);
        let etcd = etcd_on(test, &net.address_of(8), Some(&etcd_ns))?;
        let b_ns = net.add_node(9);
        let (a_ip, b_ip) = (net.controller_ip(), net.address_of(9));
        let advertise = format!("{a_ip}:6820,{b_ip}:6820");
        let pool = format!(
            "[pool]\nlisten = \"{a_ip}:6820\"\nadvertise = \"{advertise}\"\nlease = \"{POOL_LEASE}\"\n"
        );
        let mut a = Cluster::with_gpus(&standby_table(&etcd, "ctl-a"), &pool);
        a.start();
        let text = std::fs::read_to_string(&a.config)
            .unwrap()
            .replace("name = \"ctl-a\"", "name = \"ctl-b\"")
            .replace(
                &format!("listen = \"{a_ip}:6820\""),
                &format!("listen = \"{b_ip}:6820\""),
            );
        let b_config = a.dir.path().join("ysched-ctl-b.toml");
        std::fs::write(&b_config, text).unwrap();
        let b_log = a.dir.path().join("ysctld-ctl-b.log");
        let log_file = std::fs::File::create(&b_log).unwrap();
        let b = Killed(
            Command::new("nsenter")
                .arg(format!("--net=/run/netns/{b_ns}"))
                .arg(common::bin_dir().join("ysctld"))
                .args(["--foreground", "--config"])
                .arg(&b_config)
                .env("YS_LOG", "debug")
                .stdin(Stdio::null())
                .stdout(log_file.try_clone().unwrap())
                .stderr(log_file)
                .spawn()
                .unwrap(),
        );
        let node_ns = net.add_node(0);
        let mut node = Agent::new("gpu10", &node_ns, 2, "");
        let out = a.run("yscontrol", &["node", "add", "gpu10"]);
        let line = common::stdout(&out);
        assert!(line.contains(&format!("--join {advertise} ")), "{line}");
        let words: Vec<&str> = line.split_whitespace().skip(1).collect();
        node.start(&words);
        let two = TwoControllers {
            net,
            a,
            b,
            b_log,
            node,
            _etcd: etcd,
        };
        wait_for(
            "the standby to follow ctl-a",
            Duration::from_secs(10),
            || two.b_log().contains("standby: ctl-a leads in term"),
        );
        two.wait_idle();
        Some(two)
    }

    /// Waits for the node to be idle, as the leader's sinfo says.
    fn wait_idle(&self) {
        let deadline = Instant::now() + pool::LONG;
        loop {
            let out = self
                .a
                .run("ysched-slurm", &["sinfo", "-N", "-h", "-o", "%N %t"]);
            if common::stdout(&out)
                .lines()
                .any(|l| l.trim() == "gpu10 idle")
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the node is not idle: {}{}\nctl-a:\n{}\nctl-b:\n{}\nnode:\n{}",
                common::stdout(&out),
                common::stderr(&out),
                self.a.log(),
                self.b_log(),
                self.node.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn b_log(&self) -> String {
        std::fs::read_to_string(&self.b_log).unwrap_or_default()
    }

    /// The highest term the node was welcomed in, from its state.
    fn node_term(&self) -> u64 {
        std::fs::read_to_string(self.node.state_dir().join("pool/term"))
            .map_or(0, |t| t.trim().parse().unwrap())
    }

    /// The term `log` says its controller leads in.
    fn term_in(log: &str, name: &str) -> u64 {
        let marker = format!("leading as {name} in term ");
        let at = log
            .find(&marker)
            .unwrap_or_else(|| panic!("{name} never led:\n{log}"));
        log[at + marker.len()..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    }

    /// Waits for ctl-b to lead and its node to come to it; how long that
    /// took from `since`.
    fn b_takes_over(&self, since: Instant) -> Duration {
        wait_for("ctl-b to take over", Duration::from_secs(60), || {
            self.b_log().contains("ysctld ready")
        });
        wait_for("the node to come to ctl-b", pool::LONG, || {
            self.b_log().contains("node gpu10 connected")
        });
        let took = since.elapsed();
        let (a_term, b_term) = (
            Self::term_in(&self.a.log(), "ctl-a"),
            Self::term_in(&self.b_log(), "ctl-b"),
        );
        assert!(
            b_term > a_term,
            "ctl-b's term {b_term} after ctl-a's {a_term}"
        );
        // The node keeps the term as it takes the welcome, just after
        // ctl-b logged it.
        wait_for(
            "the node to keep ctl-b's term",
            Duration::from_secs(5),
            || self.node_term() == b_term,
        );
        took
    }
}

/// A job on the node that writes when it began and ended, `secs` apart;
/// its id once it runs.
fn job_on_the_node(c: &Cluster, secs: u32) -> u64 {
    c.script(
        "slow.sh",
        &format!("#!/bin/sh\necho \"began $(date +%s.%N)\"\nsleep {secs}\necho \"ended $(date +%s.%N)\"\n"),
    );
    let id = c.submit(&["-t", "3", "--gres", "gpu:1", "slow.sh"]);
    c.wait_state(id, "RUNNING", Duration::from_secs(20));
    id
}

#[test]
fn a_standby_on_another_server_takes_over_from_a_killed_leader_and_the_node_follows_it() {
    let Some(mut two) = TwoControllers::start(module_path!()) else {
        return;
    };
    let id = job_on_the_node(&two.a, 6);
    two.a.crash();
    let takeover = two.b_takes_over(Instant::now());
    eprintln!("takeover after kill -9, node included: {takeover:?}");
    assert!(takeover < Duration::from_secs(12), "{takeover:?}");
    ran_once(&two.a, id);
    // The node's job was not frozen for it: its lease outlasts a takeover.
    assert!(
        !two.node.log_text().contains("frozen here"),
        "{}",
        two.node.log_text()
    );
    let next = two.a.submit(&["--gres", "gpu:1", "--wrap", "true"]);
    assert_eq!(two.a.wait_done(next, Duration::from_secs(20)), "COMPLETED");
    drop(two.net);
}

#[test]
fn a_leader_frozen_for_three_takeovers_finds_itself_deposed_and_writes_nothing() {
    let Some(mut two) = TwoControllers::start(module_path!()) else {
        return;
    };
    let id = job_on_the_node(&two.a, 6);
    let pid = two.a.daemon_pid();
    let before = two.a.log().len();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let frozen = Instant::now();
    // ctl-b wins the election while ctl-a is frozen, and waits for the
    // spool, which the frozen process still holds.
    wait_for("ctl-b to lead in etcd", Duration::from_secs(20), || {
        two.b_log().contains("leading as ctl-b in term")
    });
    let led = frozen.elapsed();
    std::thread::sleep(Duration::from_secs(14).saturating_sub(led));
    assert!(!two.b_log().contains("ysctld ready"), "{}", two.b_log());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    let continued = Instant::now();
    let status = two.a.wait_exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(75), "{}", two.a.log());
    // What ctl-a said once it ran again: that it no longer leads, and
    // nothing it did.
    let after = two.a.log()[before..].to_string();
    assert!(after.contains("no longer leading (term"), "{after}");
    for deed in [
        "gpu10 connected",
        "welcome",
        "started",
        "COMPLETED",
        "requeued",
        "thaw",
    ] {
        assert!(
            !after.contains(deed),
            "ctl-a, deposed, logged {deed:?}:\n{after}"
        );
    }
    let takeover = two.b_takes_over(continued);
    eprintln!(
        "frozen leader: ctl-b led in etcd {led:?} after the freeze, and took over {takeover:?} after ctl-a ran again"
    );
    ran_once(&two.a, id);
    drop(two.net);
}

#[test]
fn a_leader_cut_off_from_etcd_stops_within_half_a_lease_and_the_standby_takes_over() {
    let Some(mut two) = TwoControllers::start(module_path!()) else {
        return;
    };
    let id = job_on_the_node(&two.a, 6);
    // ctl-a's server loses its way to etcd; the nodes still reach it.
    let etcd_ip = format!("{}/32", two.net.address_of(8));
    pool::ip(&["route", "add", "blackhole", &etcd_ip]);
    let cut = Instant::now();
    let status = two.a.wait_exit(Duration::from_secs(10));
    let stopped = cut.elapsed();
    pool::ip(&["route", "del", "blackhole", &etcd_ip]);
    assert_eq!(status.code(), Some(75), "{}", two.a.log());
    assert!(
        two.a
            .log()
            .contains("could not be proven within half a lease"),
        "{}",
        two.a.log()
    );
    let takeover = two.b_takes_over(cut);
    eprintln!("leader cut off from etcd: it stopped {stopped:?} after the cut, the standby took over {takeover:?} after it");
    // It stopped before its lease could end, and so before ctl-b led.
    assert!(stopped < Duration::from_secs(3), "{stopped:?}");
    ran_once(&two.a, id);
    drop(two.net);
}

/// What became of one submission of the client's loop.
#[derive(Debug)]
enum Submitted {
    /// Acknowledged with this job id.
    Acked(u64),
    /// Spooled while no controller ran, for the next to take in.
    Queued,
    /// Refused or lost (the command failed): it may exist once, or not.
    Failed(String),
}

/// A client, `user`, that submits in a loop until `stop`, each job named
/// for its turn, and records what each submission was told.
fn submit_in_a_loop(
    c: &Cluster,
    user: &str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Vec<(String, Submitted)>> {
    let (config, work, user) = (c.config.clone(), c.work.clone(), user.to_string());
    std::thread::spawn(move || {
        let mut told = Vec::new();
        for n in 0.. {
            if stop.load(std::sync::atomic::Ordering::SeqCst) {
                break;
            }
            let name = format!("sub-{n}");
            let echo = format!("echo {name}");
            let out = Command::new("runuser")
                .args(["-u", &user, "--", "env"])
                .arg(format!("YS_CONF={}", config.display()))
                .arg(common::bin_dir().join("ysbatch"))
                .args([
                    "--parsable",
                    "--gres",
                    "gpu:1",
                    "-J",
                    &name,
                    "--wrap",
                    &echo,
                ])
                .current_dir(&work)
                .output()
                .unwrap();
            let text = common::stdout(&out);
            let outcome = match text.trim().parse::<u64>() {
                Ok(id) if out.status.success() => Submitted::Acked(id),
                _ if text.starts_with("queued for the daemon") => Submitted::Queued,
                _ => Submitted::Failed(format!("{text}{}", common::stderr(&out))),
            };
            told.push((name, outcome));
            std::thread::sleep(Duration::from_millis(100));
        }
        told
    })
}

#[test]
fn submissions_acknowledged_across_a_takeover_each_exist_once_and_run_once() {
    let Some(mut two) = TwoControllers::start(module_path!()) else {
        return;
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let user = common::TestUser::create("sb");
    let client = submit_in_a_loop(&two.a, &user.name, stop.clone());
    std::thread::sleep(Duration::from_secs(2));
    two.a.crash();
    let takeover = two.b_takes_over(Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let told = client.join().unwrap();
    let acked = told
        .iter()
        .filter(|(_, o)| matches!(o, Submitted::Acked(_)))
        .count();
    let queued = told
        .iter()
        .filter(|(_, o)| matches!(o, Submitted::Queued))
        .count();
    eprintln!(
        "takeover under submissions: {takeover:?}; {} submissions, {acked} acknowledged, {queued} spooled",
        told.len()
    );
    assert!(acked >= 10, "{told:?}");
    // Every job ends; each name is one job at most, each acknowledged or
    // spooled one exactly one, under the id it was given.
    wait_for("every job to end", Duration::from_secs(60), || {
        let q = common::stdout(&two.a.run("ysqueue", &["-h", "-o", "%i"]));
        q.trim().is_empty()
    });
    let rows = common::stdout(&two.a.run(
        "ysacct",
        &[
            "-a",
            "-X",
            "-n",
            "-P",
            "-S",
            "now-1hours",
            "-o",
            "JobID,JobName,State,User",
        ],
    ));
    let jobs: Vec<(u64, String, String)> = rows
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            // Each the submitter's, as it was before the takeover.
            assert_eq!(f[3], user.name, "{l}");
            (f[0].parse().unwrap(), f[1].to_string(), f[2].to_string())
        })
        .collect();
    for (name, outcome) in &told {
        let mine: Vec<_> = jobs.iter().filter(|(_, n, _)| n == name).collect();
        match outcome {
            Submitted::Acked(id) => {
                assert_eq!(mine.len(), 1, "{name} acknowledged as {id}: {mine:?}");
                assert_eq!(mine[0].0, *id, "{name}: {mine:?}");
            }
            Submitted::Queued => assert_eq!(mine.len(), 1, "{name} spooled: {mine:?}"),
            Submitted::Failed(why) => assert!(mine.len() <= 1, "{name} failed ({why}): {mine:?}"),
        }
        for (id, _, state) in mine {
            assert_eq!(state, "COMPLETED", "{name} ({id})");
            let output = two.a.output_of(*id);
            assert_eq!(
                output.matches(name.as_str()).count(),
                1,
                "{name} ({id}): {output:?}"
            );
        }
    }
    drop(two.net);
}

#[test]
fn a_standby_killed_while_it_takes_over_leaves_the_lead_to_the_next_and_the_job_ends_once() {
    let Some(mut two) = TwoControllers::start(module_path!()) else {
        return;
    };
    let id = job_on_the_node(&two.a, 8);
    two.a.crash();
    wait_for("ctl-b to lead", Duration::from_secs(20), || {
        two.b_log().contains("leading as ctl-b in term")
    });
    // Killed in the midst of its start: the spool, the database, the
    // jobs' adoption.
    let _ = two.b.0.kill();
    let _ = two.b.0.wait();
    let killed = Instant::now();
    let b_term = TwoControllers::term_in(&two.b_log(), "ctl-b");
    // ctl-a, started again, leads once ctl-b's lease is over, in a term
    // above both, and the node comes back to it.
    two.a.start();
    let log = two.a.log();
    let second = &log[log.rfind("leading as ctl-a in term").unwrap()..];
    let a_term = TwoControllers::term_in(second, "ctl-a");
    assert!(a_term > b_term, "{a_term} after {b_term}");
    wait_for("the node to come back to ctl-a", pool::LONG, || {
        two.node_term() == a_term
    });
    eprintln!(
        "standby killed while taking over: ctl-a led again {:?} after",
        killed.elapsed()
    );
    ran_once(&two.a, id);
    drop(two.net);
}

#[test]
fn a_leader_cut_off_from_its_nodes_but_not_from_etcd_stays_the_leader() {
    let Some(two) = TwoControllers::start(module_path!()) else {
        return;
    };
    let id = job_on_the_node(&two.a, 10);
    let a_term = TwoControllers::term_in(&two.a.log(), "ctl-a");
    // The node loses its way to ctl-a's server (ctl-b's it still has)
    // for more than half a lease, less than a lease.
    let route = |verb: &str| {
        pool::ip(&[
            "netns",
            "exec",
            two.node.ns(),
            "ip",
            "route",
            verb,
            "blackhole",
            &format!("{}/32", two.net.controller_ip()),
        ])
    };
    route("add");
    wait_for(
        "the node to leave the silent controller",
        Duration::from_secs(20),
        || two.node.log_text().contains("no answer for half a lease"),
    );
    std::thread::sleep(Duration::from_secs(1));
    route("del");
    wait_for("the node to come back to ctl-a", pool::LONG, || {
        two.a.log().matches("node gpu10 connected").count() >= 2
    });
    // etcd still heard ctl-a: ctl-b never led, and the node's term is
    // ctl-a's.
    assert!(!two.b_log().contains("leading as ctl-b"), "{}", two.b_log());
    assert_eq!(two.node_term(), a_term);
    ran_once(&two.a, id);
    drop(two.net);
}

#[test]
fn a_node_refuses_a_controller_of_a_lower_term_than_it_was_welcomed_in() {
    let Some(mut two) = TwoControllers::start(module_path!()) else {
        return;
    };
    two.a.crash();
    two.b_takes_over(Instant::now());
    let b_term = two.node_term();
    let _ = two.b.0.kill();
    let _ = two.b.0.wait();
    // ctl-a comes back without its [standby] table (term 0): a leader
    // no election made, beside whatever etcd says.
    let text = std::fs::read_to_string(&two.a.config).unwrap();
    let alone = &text[..text.find("[standby]").unwrap()];
    let pool = &text[text.find("[pool]").unwrap()..];
    std::fs::write(&two.a.config, format!("{alone}\n{pool}")).unwrap();
    two.a.start();
    wait_for("the node to refuse ctl-a", pool::LONG, || {
        two.node.log_text().contains(&format!(
            "leads in term 0, below term {b_term} this node was welcomed in"
        ))
    });
    // It takes none of its orders: a job ctl-a places there never runs
    // (ctl-a, which heard the node's hello, believes it up until the
    // node's lease ends).
    let id = two.a.submit(&["--gres", "gpu:1", "--wrap", "echo ran"]);
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(two.a.output_of(id), "", "{}", two.node.log_text());
    assert!(
        !two.node.log_text().contains(&format!("job {id} ")),
        "{}",
        two.node.log_text()
    );
    assert_eq!(two.node_term(), b_term);
    drop(two.net);
}

#[test]
fn a_leader_whose_key_someone_deletes_in_etcd_stops_before_the_standby_acts() {
    let Some((etcd, mut c, (_b, b_log), id)) = one_server_two_controllers(module_path!()) else {
        return;
    };
    // Whoever reaches etcd's client port deletes the leader key: the
    // standby may lead at its next campaign, while the leader's lease
    // still lives.
    use base64::Engine as _;
    let key = base64::engine::general_purpose::STANDARD.encode("/ysched/5/leader");
    ureq::post(&format!("{}/v3/kv/deleterange", etcd.endpoint))
        .send_json(serde_json::json!({ "key": key }))
        .unwrap();
    // The leader finds out at its next proof and stops.
    stops_and_the_standby_leads(&mut c, &b_log, "leader key /ysched/5/leader is gone");
    ran_once(&c, id);
}

/// A certificate authority of the test's own, PEM files in `dir`.
struct TestCa {
    pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl TestCa {
    fn new(name: &str) -> TestCa {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A certificate for `name` (an IP address is one), for a server or a
    /// client; its PEM and its key's.
    fn certify(&self, name: &str, server: bool) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        // etcd's own gateway calls etcd with the server's certificate:
        // it is a client's too, as etcd's guide has it.
        params.extended_key_usages = if server {
            vec![
                rcgen::ExtendedKeyUsagePurpose::ServerAuth,
                rcgen::ExtendedKeyUsagePurpose::ClientAuth,
            ]
        } else {
            vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth]
        };
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// An etcd on loopback that speaks TLS only and takes only clients with
/// a certificate of `ca`.
fn etcd_with_tls(test: &str, ca: &TestCa) -> Option<Etcd> {
    if !etcd_installed(test) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = ca.certify("127.0.0.1", true);
    for (file, text) in [
        ("ca.pem", &ca.pem),
        ("etcd.pem", &cert),
        ("etcd-key.pem", &key),
    ] {
        std::fs::write(dir.path().join(file), text).unwrap();
    }
    let (client, peer) = (free_port(), free_port());
    let client_url = format!("https://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let child = Command::new("etcd")
        .args(["--name", "t", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("t={peer_url}")])
        .arg("--cert-file")
        .arg(dir.path().join("etcd.pem"))
        .arg("--key-file")
        .arg(dir.path().join("etcd-key.pem"))
        .arg("--trusted-ca-file")
        .arg(dir.path().join("ca.pem"))
        .arg("--client-cert-auth")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (me, my_key) = ca.certify("ysctld", false);
    let engine = Engine::with_tls(
        &client_url,
        Duration::from_secs(1),
        ca.pem.as_bytes(),
        Some((me.as_bytes(), my_key.as_bytes())),
    )
    .unwrap();
    let etcd = Etcd {
        _process: Killed(child),
        endpoint: client_url,
        _dir: dir,
    };
    let mut last = String::new();
    for _ in 0..200 {
        match engine.grant(5) {
            Ok(_) => return Some(etcd),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("etcd did not grant a lease over TLS within 20 s: {last}");
}

#[test]
fn over_tls_etcd_takes_only_the_controllers_certificates_and_a_controller_leads_through_it() {
    let ca = TestCa::new("ysched test etcd authority");
    let Some(etcd) = etcd_with_tls(module_path!(), &ca) else {
        return;
    };
    let second = Duration::from_secs(2);
    let (cert, key) = ca.certify("ysctld", false);
    let good = Engine::with_tls(
        &etcd.endpoint,
        second,
        ca.pem.as_bytes(),
        Some((cert.as_bytes(), key.as_bytes())),
    )
    .unwrap();
    assert!(good.grant(5).is_ok());
    // Whoever has no certificate of the pool's etcd authority is refused:
    // none, a stranger's, or plain HTTP on the TLS port.
    let stranger = TestCa::new("a stranger");
    let (s_cert, s_key) = stranger.certify("ysctld", false);
    let refused = [
        Engine::with_tls(&etcd.endpoint, second, ca.pem.as_bytes(), None).unwrap(),
        Engine::with_tls(
            &etcd.endpoint,
            second,
            ca.pem.as_bytes(),
            Some((s_cert.as_bytes(), s_key.as_bytes())),
        )
        .unwrap(),
        Engine::new(&etcd.endpoint.replace("https://", "http://"), second),
    ];
    for engine in &refused {
        assert!(engine.grant(5).is_err());
    }
    // A controller that does not know etcd's authority does not talk to
    // it (a server posing as etcd is not believed).
    let fooled = Engine::with_tls(
        &etcd.endpoint,
        second,
        stranger.pem.as_bytes(),
        Some((cert.as_bytes(), key.as_bytes())),
    )
    .unwrap();
    let error = fooled.grant(5).unwrap_err().to_string();
    assert!(error.contains(&etcd.endpoint), "{error}");
    // A controller with the files in [standby] leads and runs jobs.
    let files = tempfile::tempdir().unwrap();
    for (file, text) in [
        ("ca.pem", &ca.pem),
        ("ctl.pem", &cert),
        ("ctl-key.pem", &key),
    ] {
        std::fs::write(files.path().join(file), text).unwrap();
    }
    let table = format!(
        "{}etcd_ca = \"{}\"\netcd_cert = \"{}\"\netcd_key = \"{}\"\n",
        standby_table(&etcd, "ctl-a"),
        files.path().join("ca.pem").display(),
        files.path().join("ctl.pem").display(),
        files.path().join("ctl-key.pem").display()
    );
    let mut c = Cluster::new(&table);
    c.start();
    assert!(c.log().contains("leading as ctl-a in term"), "{}", c.log());
    let id = c.submit(&["--wrap", "true"]);
    assert_eq!(c.wait_done(id, Duration::from_secs(20)), "COMPLETED");
}

#[test]
fn a_controller_whose_etcd_files_do_not_read_does_not_start_and_says_which() {
    let c = Cluster::new(
        "[standby]\netcd = \"https://127.0.0.1:1\"\netcd_ca = \"/nonexistent/ca.pem\"\n",
    );
    let out = Command::new(common::bin_dir().join("ysctld"))
        .args(["--foreground", "--config"])
        .arg(&c.config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = common::stderr(&out);
    assert!(
        said.contains("cannot read [standby] etcd_ca /nonexistent/ca.pem"),
        "{said}"
    );
}

#[test]
fn systemd_is_told_the_controller_is_ready_and_alive_until_it_hangs() {
    // systemd's side of the socket: a datagram socket of the test's own.
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify");
    let socket = std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let c = Cluster::new("");
    // WATCHDOG_PID must be ysctld's own: the shell's, which exec keeps.
    let script = format!(
        "WATCHDOG_PID=$$ exec {} --foreground --config {}",
        common::bin_dir().join("ysctld").display(),
        c.config.display()
    );
    let process = Killed(
        Command::new("sh")
            .args(["-c", &script])
            .env("NOTIFY_SOCKET", &socket_path)
            .env("WATCHDOG_USEC", "1000000")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = nix::unistd::Pid::from_raw(process.0.id() as i32);
    // What systemd hears within `window`.
    let heard = |window: Duration| {
        let until = Instant::now() + window;
        let mut said = Vec::new();
        let mut buf = [0u8; 256];
        while Instant::now() < until {
            if let Ok(n) = socket.recv(&mut buf) {
                said.push(String::from_utf8_lossy(&buf[..n]).trim().to_string());
            }
        }
        said
    };
    let said = heard(Duration::from_secs(5));
    assert!(said.iter().any(|m| m == "READY=1"), "{said:?}");
    let alive = said.iter().filter(|m| *m == "WATCHDOG=1").count();
    assert!(alive >= 3, "{said:?}");
    // Frozen, it says nothing: systemd's watchdog would kill it.
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let _ = heard(Duration::from_millis(300));
    assert_eq!(heard(Duration::from_secs(2)), Vec::<String>::new());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    assert!(heard(Duration::from_secs(2))
        .iter()
        .any(|m| m == "WATCHDOG=1"));
}
