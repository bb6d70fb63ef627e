//! Against a real etcd, started on loopback in a directory of its own
//! (skipped where etcd is not installed, unless YSCHED_REQUIRE_ETCD says
//! it must be).

use super::*;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};

/// An etcd of one member on loopback, stopped when dropped.
struct Etcd {
    child: Child,
    endpoint: String,
    _dir: tempfile::TempDir,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A started etcd, or `None` where it is not installed (and not required).
fn etcd() -> Option<Etcd> {
    if Command::new("etcd").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("YSCHED_REQUIRE_ETCD").is_none(),
            "etcd is required here (YSCHED_REQUIRE_ETCD) but not installed"
        );
        eprintln!("skipped: etcd is not installed (Debian: etcd-server)");
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
        child,
        endpoint: client_url,
        _dir: dir,
    };
    let health = format!("{}/health", etcd.endpoint);
    for _ in 0..100 {
        if ureq::get(&health).call().is_ok() {
            return Some(etcd);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("etcd did not answer {health} within 10 s");
}

fn engine(etcd: &Etcd) -> Engine {
    Engine::new(&etcd.endpoint, Duration::from_secs(2))
}

const KEY: &str = "/ysched/test/leader";

#[test]
fn the_first_leads_the_second_follows_and_leads_one_lease_after_the_first_stops() {
    let Some(etcd) = etcd() else { return };
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
    let Some(etcd) = etcd() else { return };
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

#[test]
fn a_leader_acts_only_within_its_deadline_on_its_own_clock() {
    let proven = Instant::now();
    let deadline = Duration::from_secs(5);
    assert!(may_act(proven, proven, deadline));
    assert!(may_act(
        proven,
        proven + Duration::from_millis(4_999),
        deadline
    ));
    assert!(!may_act(proven, proven + deadline, deadline));
    // A clock read before the proof (another thread's) does not extend it.
    assert!(may_act(proven + Duration::from_secs(1), proven, deadline));
}
