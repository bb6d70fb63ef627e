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

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A started etcd, or `None` where it is not installed (and not required).
fn etcd(test: &str) -> Option<Etcd> {
    if Command::new("etcd").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("YSCHED_REQUIRE_ETCD").is_none(),
            "etcd is required here (YSCHED_REQUIRE_ETCD) but not installed"
        );
        common::skip(test, "etcd is not installed (Debian: etcd-server)");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let (client, peer) = (free_port(), free_port());
    let client_url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let child = Command::new("etcd")
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
    wait_for("etcd to grant a lease", Duration::from_secs(10), || {
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
}

#[test]
fn a_standby_takes_over_from_a_leader_killed_while_a_job_runs_and_the_job_ends_once() {
    let Some(etcd) = etcd(module_path!()) else {
        return;
    };
    let mut c = Cluster::new(&standby_table(&etcd, "ctl-a"));
    c.start();
    assert!(c.log().contains("leading as ctl-a in term"), "{}", c.log());
    let (_b, b_log) = start_standby(&c, "ctl-b");
    let id = slow_job(&c);
    c.wait_state(id, "RUNNING", Duration::from_secs(10));
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
    let Some(etcd) = etcd(module_path!()) else {
        return;
    };
    let mut c = Cluster::new(&standby_table(&etcd, "ctl-a"));
    c.start();
    let (_b, b_log) = start_standby(&c, "ctl-b");
    let id = slow_job(&c);
    c.wait_state(id, "RUNNING", Duration::from_secs(10));
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
    let status = c.wait_exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(75), "{}", c.log());
    assert!(
        c.log().contains("handed over: the lease is given up"),
        "{}",
        c.log()
    );
    wait_for("the standby to take over", Duration::from_secs(10), || {
        b_log().contains("ysctld ready")
    });
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
