//! A controller of two (`[standby]`): it waits as the standby until etcd
//! says it leads, then proves its lease a third of a lease apart; the
//! seam writes nothing unless the lease was proven within half a lease
//! (`leader::may_act`, on this process's monotonic clock), and a
//! controller that cannot prove it stops at once, as a crash would stop
//! it: its jobs run on, and the controller that leads next adopts them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Standby;
use crate::leader::{Engine, LeaseId, Outcome, Term};

/// The exit status of a controller that found it no longer leads.
pub const EXIT_DEPOSED: i32 = 75;

/// This controller leads: its term, and when it last proved its lease.
pub(crate) struct Leadership {
    pub(super) term: Term,
    /// When the last keep-alive that etcd answered was sent, in
    /// milliseconds after `origin`: etcd renewed the lease no earlier.
    proven_ms: Arc<AtomicU64>,
    origin: Instant,
    deadline: Duration,
    engine: Engine,
    lease: LeaseId,
    /// `yscontrol takeover`: the lead is handed over once this
    /// controller has stopped writing.
    pub(super) handing_over: bool,
}

/// How a controller's run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Asked to stop (SIGTERM, SIGINT).
    Stopped,
    /// It handed the lead over (`yscontrol takeover`): its lease was
    /// given up after its last write, so the standby leads at once.
    HandedOver { term: i64 },
}

impl Leadership {
    /// Whether it may still write and send: its lease proven within the
    /// deadline.
    pub(super) fn may_act(&self) -> bool {
        proven_within(&self.proven_ms, self.origin, self.deadline)
    }

    /// The same check for another thread (the queries'), which stops
    /// the process rather than answer once this controller may no longer
    /// act.
    pub(super) fn fence(&self) -> Box<dyn Fn() + Send> {
        let (proven_ms, origin, deadline, term) = (
            self.proven_ms.clone(),
            self.origin,
            self.deadline,
            self.term,
        );
        Box::new(move || {
            if !proven_within(&proven_ms, origin, deadline) {
                step_down(term, "its lease was not proven in time (a query waited)");
            }
        })
    }

    pub(super) fn step_down(&self, why: &str) -> ! {
        step_down(self.term, why)
    }

    /// Gives the lease up, after the last write: the standby leads at
    /// its next campaign, without waiting for the lease to end.
    pub(super) fn resign(&self) -> Stopped {
        match self.engine.resign(self.lease) {
            Ok(()) => tracing::info!(
                target: "ysched::daemon",
                "term {} handed over: the lease is given up, the standby leads next",
                self.term.0
            ),
            Err(e) => tracing::warn!(
                target: "ysched::daemon",
                "term {}: cannot give the lease up ({e}); the standby leads once it ends",
                self.term.0
            ),
        }
        Stopped::HandedOver { term: self.term.0 }
    }

    /// The spool's lock, waited for: the controller that led before may
    /// hold it still, deposed but not yet stopped (frozen, or not yet
    /// running again to find out). It stops at its first write, or is
    /// killed; the lease is kept meanwhile, and this controller stops
    /// waiting if it is deposed itself.
    pub(super) fn lock_spool(
        &self,
        spool: &crate::spool::Spool,
    ) -> Result<crate::spool::DaemonLock, crate::spool::SpoolError> {
        let mut told = false;
        loop {
            match spool.lock_daemon() {
                Err(crate::spool::SpoolError::AlreadyRunning { pid, .. }) => {
                    if !told {
                        tracing::warn!(
                            target: "ysched::daemon",
                            "term {}: waiting for the spool's lock, which ysctld {pid} holds (the leader before, deposed; it stops at its next write, or kill it)",
                            self.term.0
                        );
                        told = true;
                    }
                    if !self.may_act() {
                        self.step_down("its lease was not proven while it waited for the spool");
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                other => return other,
            }
        }
    }
}

/// Whether the lease was proven within `deadline`: `proven_ms` after
/// `origin` is when the last proof that etcd answered was sent.
fn proven_within(proven_ms: &AtomicU64, origin: Instant, deadline: Duration) -> bool {
    let proven = origin + Duration::from_millis(proven_ms.load(Ordering::Acquire));
    crate::leader::may_act(proven, Instant::now(), deadline)
}

/// Stops this process: it may no longer act, and what it has not
/// committed is not acknowledged.
fn step_down(term: Term, why: &str) -> ! {
    tracing::error!(
        target: "ysched::daemon",
        "no longer leading (term {}): {why}; stopping, the jobs run on for the leader to adopt",
        term.0
    );
    std::process::exit(EXIT_DEPOSED)
}

/// Waits until this controller leads (for as long as it takes: etcd
/// unreachable is a wait too), then keeps its lease in a thread of its
/// own.
pub(super) fn lead(standby: &Standby) -> Result<Leadership, crate::leader::EngineError> {
    let engine = engine(standby)?;
    let ttl = standby.lease.as_secs() as u32;
    let every = standby.lease / 3;
    let mut lease = None;
    let mut told = None;
    loop {
        let sent = Instant::now();
        match campaign(&engine, standby, ttl, &mut lease) {
            Ok((id, Outcome::Leads { term })) => {
                tracing::info!(
                    target: "ysched::daemon",
                    "leading as {} in term {} (etcd {}, lease {:?})",
                    standby.name, term.0, standby.etcd, standby.lease
                );
                return Ok(keep((engine, id, &standby.key), term, sent, standby.lease));
            }
            Ok((_, Outcome::Follows { leader, term })) => {
                if told.as_ref() != Some(&(leader.clone(), term)) {
                    tracing::info!(
                        target: "ysched::daemon",
                        "standby: {leader} leads in term {}; {} takes over when its lease ends",
                        term.0, standby.name
                    );
                    told = Some((leader, term));
                }
            }
            Err(e) => tracing::warn!(target: "ysched::daemon", "standby: {e}"),
        }
        std::thread::sleep(every.saturating_sub(sent.elapsed()));
    }
}

/// etcd as `standby` says: each request given a sixth of a lease; over
/// TLS with the files it names.
fn engine(standby: &Standby) -> Result<Engine, crate::leader::EngineError> {
    let timeout = standby.lease / 6;
    let Some(tls) = &standby.tls else {
        return Ok(Engine::new(&standby.etcd, timeout));
    };
    let read = |field: &str, path: &std::path::Path| {
        std::fs::read(path).map_err(|e| {
            crate::leader::EngineError::Tls(format!(
                "cannot read [standby] {field} {}: {e}",
                path.display()
            ))
        })
    };
    let authority = read("etcd_ca", &tls.ca)?;
    let client = match &tls.client {
        Some((cert, key)) => Some((read("etcd_cert", cert)?, read("etcd_key", key)?)),
        None => None,
    };
    let client = client.as_ref().map(|(c, k)| (c.as_slice(), k.as_slice()));
    Engine::with_tls(&standby.etcd, timeout, &authority, client)
}

/// One try: a lease (the one held, proven again, or a new one), then the
/// campaign with it.
fn campaign(
    engine: &Engine,
    standby: &Standby,
    ttl: u32,
    lease: &mut Option<LeaseId>,
) -> Result<(LeaseId, Outcome), crate::leader::EngineError> {
    let id = match *lease {
        Some(id) if engine.keep_alive(id)?.is_some() => id,
        _ => engine.grant(ttl)?,
    };
    *lease = Some(id);
    Ok((id, engine.campaign(&standby.key, &standby.name, id)?))
}

/// Proves `lease` a third of a lease apart in a thread; stops the process
/// once etcd says the lease is gone.
/// `proven`: when the campaign that won sent its first request (the
/// lease was granted or renewed no earlier).
fn keep(
    (engine, lease, key): (Engine, LeaseId, &str),
    term: Term,
    proven: Instant,
    ttl: Duration,
) -> Leadership {
    let stamp = move |at: Instant| at.saturating_duration_since(proven).as_millis() as u64;
    let proven_ms = Arc::new(AtomicU64::new(0));
    let leadership = Leadership {
        term,
        proven_ms: proven_ms.clone(),
        origin: proven,
        deadline: ttl / 2,
        engine: engine.clone(),
        lease,
        handing_over: false,
    };
    let every = ttl / 3;
    let key = key.to_string();
    let spawned = std::thread::Builder::new()
        .name("lease".into())
        .spawn(move || loop {
            std::thread::sleep(every);
            let sent = Instant::now();
            match prove(&engine, lease, &key, term) {
                Ok(()) => proven_ms.store(stamp(sent), Ordering::Release),
                Err(Proof::Lost(why)) => step_down(term, &why),
                // Not proven: the seam stops writing at the deadline, and
                // this thread stops the process there too, so that a
                // leader with nothing to write stops answering as well.
                Err(Proof::Unanswered(e)) => {
                    tracing::warn!(target: "ysched::daemon", "lease of term {}: {e}", term.0);
                    if !proven_within(&proven_ms, proven, ttl / 2) {
                        step_down(term, "its lease could not be proven within half a lease");
                    }
                }
            }
        });
    if let Err(e) = spawned {
        step_down(term, &format!("cannot keep the lease: {e}"));
    }
    leadership
}

/// Why a lease was not proven.
enum Proof {
    /// etcd did not answer as it should: the deadline decides.
    Unanswered(crate::leader::EngineError),
    /// etcd says this controller no longer leads.
    Lost(String),
}

/// Proves the lease alive, and that the leader key is still this
/// term's: a key deleted or put by anyone else who reaches etcd ends the
/// lead as the lease's end would.
fn prove(engine: &Engine, lease: LeaseId, key: &str, term: Term) -> Result<(), Proof> {
    match engine.keep_alive(lease).map_err(Proof::Unanswered)? {
        Some(_) => {}
        None => {
            return Err(Proof::Lost(
                "etcd says its lease is gone (ended, or given up): another controller may lead"
                    .into(),
            ))
        }
    }
    match engine.leader(key).map_err(Proof::Unanswered)? {
        Some((_, held)) if held == term => Ok(()),
        Some((name, held)) => Err(Proof::Lost(format!(
            "etcd's leader key {key} is {name}'s, of term {}",
            held.0
        ))),
        None => Err(Proof::Lost(format!("etcd's leader key {key} is gone"))),
    }
}
