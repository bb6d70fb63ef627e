//! The pool, as the controller runs it: nodes join with a one-time token
//! and are given a certificate; each joined node's agent connects, says
//! what it has and what it holds, and from then on is one more node of
//! the pass, behind a `RemoteExecutor`. Frames from the agents come in as
//! events and are applied in the turn's transaction, like requests.
//!
//! Exactly once: a job is marked running (committed) before its launch is
//! sent; a launch is idempotent on the run (job, restart count); an agent
//! tells every run it holds, ended ones included, at each `Hello` and
//! again until the controller says `Forget` (after the end is
//! committed). Never twice at once: a node unheard for a lease is down
//! (no new jobs), and its jobs are ended NODE_FAIL (and requeued) only
//! after half a lease more; an agent that has not heard back for a lease
//! has killed its jobs by then (`agent`).

use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::db;
use crate::exec::executor::NodeFacts;
use crate::exec::spec::ExitRecord;
use crate::model::job::{Job, JobId, JobState};
use crate::net::frame::{decode, encode};
use crate::net::message::{Envelope, FromNode, RunKey, ToNode, PROTOCOL};
use crate::net::pki::{hash_token, Authority, Subject};
use crate::net::remote::{Link, RemoteExecutor};
use crate::net::server::{self, ConnId, ServerEvent};
use crate::net::tls;
use crate::spool::Spool;

use super::effects::{Effects, Out, PoolRow, Row};
use super::error::DaemonError;
use super::node_loss::{current_run, stop_stale};
use super::node_time::{lease_secs, Credited, RunSecs};
use super::nodes::{Node, RemoteNode};
use super::pool_state::PoolState;
use super::state::{Daemon, Event};

/// Starts the pool's server when the config turns the pool on.
pub(super) fn start(
    config: &Config,
    spool: &Spool,
    events: Sender<Event>,
    bounds: (i64, std::collections::HashMap<String, i64>),
) -> Result<Option<PoolState>, DaemonError> {
    let Some(listen) = config.pool.listen else {
        return Ok(None);
    };
    let authority = Authority::load_or_create(&spool.root().join("pool"), &config.node_name)?;
    let tls = tls::server_config(authority.der(), authority.server_identity()?)?;
    let listener =
        std::net::TcpListener::bind(listen).map_err(|e| DaemonError::PoolListen(listen, e))?;
    let bound = listener.local_addr().unwrap_or(listen);
    let server = server::spawn(listener, tls, move |e| {
        let _ = events.send(Event::Pool(e));
    })?;
    let advertise = config.pool.advertise.clone().unwrap_or_else(|| {
        if bound.ip().is_unspecified() {
            format!("{}:{}", config.node_name, bound.port())
        } else {
            bound.to_string()
        }
    });
    tracing::info!(
        target: "ysched::pool",
        "the pool listens on {bound} (nodes join at {advertise}); authority {}",
        authority.fingerprint()
    );
    Ok(Some(PoolState::new(
        (server, authority),
        (epoch(), config.pool.lease),
        advertise,
        bounds,
        Instant::now(),
    )))
}

/// A number no earlier run of this controller used: the time, in
/// microseconds.
fn epoch() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_micros() as u64)
}

impl Daemon {
    /// At start: the nodes that joined, each down until its agent says
    /// hello (with a full lease to do so).
    pub(super) fn load_pool_nodes(&mut self) -> Result<(), DaemonError> {
        if self.pool.is_none() {
            return Ok(());
        }
        for record in db::joined_nodes(&self.store.db)? {
            let Some(facts) = record
                .facts
                .as_deref()
                .and_then(|f| serde_json::from_str::<NodeFacts>(f).ok())
            else {
                continue;
            };
            self.attach_node(facts, Link::default());
        }
        Ok(())
    }

    /// Adds node `facts.name` to the nodes (or gives it new facts),
    /// behind a remote executor on `link`.
    fn attach_node(&mut self, facts: NodeFacts, link: Link) {
        let name = facts.name.clone();
        // The node's own pull_timeout bounds its pull; a minute more for
        // its answer to come.
        let pull_wait =
            self.core.config.containers.pull_timeout + std::time::Duration::from_secs(60);
        let executor = Box::new(RemoteExecutor::new(facts, link.clone(), pull_wait));
        let remote = RemoteNode {
            link,
            last_heard: self.core.clock.instant(),
            lease_from: self.now(),
            lost: false,
            heard_since_away: true,
            lapsed_at: None,
        };
        if self.nodes.named(&name).is_some() {
            self.nodes.change(&name, |node| {
                let mut fresh = Node::new(executor);
                fresh.drain = node.drain.take();
                fresh.down = node.down.take();
                fresh.remote = Some(remote);
                *node = fresh;
            });
        } else {
            let mut node = Node::new(executor);
            node.down = Some("its agent has not connected yet".into());
            node.remote = Some(remote);
            self.nodes.add(node);
        }
    }

    /// Applies what the agents sent since the last turn; the runs that
    /// ended are accounted with the exits.
    pub(super) fn take_pool_events(&mut self, now: i64) -> Result<Vec<JobId>, DaemonError> {
        let Some(pool) = &mut self.pool else {
            return Ok(Vec::new());
        };
        let events = std::mem::take(&mut pool.events);
        pool.taken.extend(events.iter().cloned());
        let mut ended = Vec::new();
        for event in events {
            match event {
                ServerEvent::Frame {
                    conn,
                    peer,
                    body,
                    address,
                } => self.on_frame(conn, (peer, address), &body, now, &mut ended)?,
                ServerEvent::Closed { conn, why } => self.on_closed(conn, &why),
            }
        }
        Ok(ended)
    }

    fn on_frame(
        &mut self,
        conn: ConnId,
        (peer, address): (Option<Subject>, Option<std::net::SocketAddr>),
        body: &[u8],
        now: i64,
        ended: &mut Vec<JobId>,
    ) -> Result<(), DaemonError> {
        let envelope: Envelope<FromNode> = match decode(body) {
            Ok(e) => e,
            Err(e) => {
                self.refuse_connection(conn, &format!("a message that does not read: {e}"));
                return Ok(());
            }
        };
        if envelope.protocol != PROTOCOL {
            let why = crate::net::NetError::Protocol {
                ours: PROTOCOL,
                theirs: envelope.protocol,
            };
            self.refuse_connection(conn, &why.to_string());
            return Ok(());
        }
        let Some(peer) = peer else {
            if let FromNode::Join {
                node,
                token,
                request_pem,
            } = envelope.body
            {
                let from = address.map(|a| a.ip());
                return self.join(conn, from, (&node, &token, &request_pem), now);
            }
            self.refuse_connection(conn, "this connection has no certificate: join first");
            return Ok(());
        };
        if let Some(why) = self.check_certificate(&peer)? {
            self.refuse_connection(conn, &why);
            return Ok(());
        }
        if let (Some(address), Some(pool)) = (address, self.pool.as_mut()) {
            pool.addresses.insert(peer.name.clone(), address.ip());
        }
        if matches!(envelope.body, FromNode::Hello { .. }) {
            self.hello_certified(&peer)?;
        }
        self.node_message(conn, &peer.name, envelope, now, ended)
    }

    /// Why a node's certificate is not accepted, if it is not: its node
    /// removed, or given another certificate since (a new join).
    fn check_certificate(&self, peer: &Subject) -> Result<Option<String>, DaemonError> {
        let record = db::node_record(&self.store.db, &peer.name)?;
        Ok(match record {
            None => Some(format!("no node {} is in the pool", peer.name)),
            Some(r) if r.removed.is_some() => Some(format!(
                "node {} was removed from the pool; an administrator adds it again with yscontrol node add {}",
                peer.name, peer.name
            )),
            Some(r)
                if r.certificate.as_deref() != Some(peer.serial.as_str())
                    && r.previous_certificate.as_deref() != Some(peer.serial.as_str()) =>
            {
                Some(format!(
                    "the certificate of node {} is no longer valid (the node joined again or was removed); join it anew",
                    peer.name
                ))
            }
            Some(_) => None,
        })
    }

    /// A node says hello with its current certificate: the one it had
    /// before a renewal is no longer good.
    fn hello_certified(&mut self, peer: &Subject) -> Result<(), DaemonError> {
        let record = db::node_record(&self.store.db, &peer.name)?;
        let current =
            record.is_some_and(|r| r.certificate.as_deref() == Some(peer.serial.as_str()));
        if current {
            self.write(Row::Pool(PoolRow::CertificateUsed {
                name: peer.name.clone(),
            }))?;
        }
        Ok(())
    }

    /// A certified node's message.
    fn node_message(
        &mut self,
        conn: ConnId,
        name: &str,
        envelope: Envelope<FromNode>,
        now: i64,
        ended: &mut Vec<JobId>,
    ) -> Result<(), DaemonError> {
        if let FromNode::Hello {
            facts,
            running,
            ended: their_ended,
            lost,
            version,
            clock,
            frozen,
            taken_over,
            suspended,
        } = envelope.body
        {
            let skew = self.node_skew(name, clock);
            let hello = Hello {
                sent: if clock > 0 {
                    (clock + skew).min(now)
                } else {
                    now
                },
                facts,
                running,
                ended: their_ended
                    .into_iter()
                    .map(|(run, record)| (run, shifted(record, skew)))
                    .collect(),
                lost,
                version,
                frozen,
                taken_over,
                suspended,
            };
            return self.hello(conn, name, envelope.incarnation, hello, now, ended);
        }
        self.node_report(conn, name, envelope, now, ended)
    }

    /// A certified node's message other than its hello.
    fn node_report(
        &mut self,
        conn: ConnId,
        name: &str,
        envelope: Envelope<FromNode>,
        now: i64,
        ended: &mut Vec<JobId>,
    ) -> Result<(), DaemonError> {
        let Some(link) = self.current_link(conn, name, envelope.incarnation) else {
            // From a connection or a run of the agent since replaced.
            return Ok(());
        };
        match envelope.body {
            FromNode::Heartbeat {
                seq,
                running,
                fenced,
                frozen,
                clock,
                taken_over,
            } => {
                let skew = self.node_skew(name, clock);
                let sent = if clock > 0 {
                    (clock + skew).min(now)
                } else {
                    now
                };
                self.heartbeat(name, &link, (seq, sent, now), &running, fenced);
                let reported = (fenced, &frozen[..], &taken_over[..]);
                self.thaw_fenced(name, reported, (sent, now))?;
            }
            FromNode::NotStarted { run, why } => self.not_started(name, run, &why, now)?,
            FromNode::Started {
                run,
                supervisor_pid,
            } => {
                tracing::debug!(target: "ysched::pool", "{run} started on {name} (supervisor pid {supervisor_pid})");
            }
            FromNode::Exited { run, record, clock } => {
                let record = shifted(record, self.node_skew(name, clock));
                link.state().exits.insert(run.job, (run.restart, record));
                self.settle_run(name, &link, run, ended);
            }
            FromNode::Lost { run } => {
                link.state().lost.insert(run.job);
                self.settle_run(name, &link, run, ended);
            }
            FromNode::Renew { request_pem } => self.renew(name, &request_pem)?,
            // A node's readings, of its own GPUs only (numbers beyond its
            // inventory are dropped there), every second to every hour.
            FromNode::Gpus {
                reading,
                every_secs,
            } => self.take_reading(name, reading, every_secs.clamp(1, 3_600))?,
            FromNode::Submit {
                name: request,
                uid,
                user,
                request: job,
                token,
            } => {
                let sender = super::forwarded::Sender {
                    uid,
                    user: &user,
                    token: token.as_deref(),
                };
                self.node_submit(name, request, &sender, *job, now)?
            }
            FromNode::Forward {
                name: request,
                uid,
                user,
                request: forwarded,
                token,
            } => {
                let sender = super::forwarded::Sender {
                    uid,
                    user: &user,
                    token: token.as_deref(),
                };
                self.node_request(name, request, &sender, *forwarded, now)?
            }
            FromNode::Image { reference, error } => {
                let mut state = link.state();
                state
                    .images
                    .settle(&reference, error, std::time::Instant::now());
                self.replan();
            }
            FromNode::Join { .. } | FromNode::Hello { .. } => {}
        }
        let _ = now;
        Ok(())
    }

    /// The link of node `name` if `conn` is its current connection and
    /// `incarnation` its agent's current run.
    fn current_link(&self, conn: ConnId, name: &str, incarnation: u64) -> Option<Link> {
        let pool = self.pool.as_ref()?;
        if pool.conns.get(&conn).map(String::as_str) != Some(name) {
            return None;
        }
        let link = self.nodes.named(name)?.remote.as_ref()?.link.clone();
        let current = link.state().incarnation == incarnation;
        current.then_some(link)
    }

    /// A run ended (or was lost) on node `name`: accounted if it is the
    /// job's current run there, else forgotten at once.
    pub(super) fn settle_run(
        &mut self,
        name: &str,
        link: &Link,
        run: RunKey,
        ended: &mut Vec<JobId>,
    ) {
        let current = self.core.jobs.get(&run.job).is_some_and(|j| {
            j.state.holds_gpus() && j.runs_on(name) && j.restart_count == run.restart
        });
        if current {
            ended.push(run.job);
        } else {
            {
                let mut state = link.state();
                state.exits.remove(&run.job);
                state.lost.remove(&run.job);
            }
            let mut fx = Effects::default();
            fx.frame(name, ToNode::Forget { run });
            self.after_commit(fx);
        }
    }

    fn on_closed(&mut self, conn: ConnId, why: &str) {
        let Some(pool) = &mut self.pool else { return };
        let Some(name) = pool.conns.remove(&conn) else {
            return;
        };
        if let Some(remote) = self.nodes.named(&name).and_then(|n| n.remote.as_ref()) {
            let mut state = remote.link.state();
            if state.conn.as_ref().is_some_and(|(_, c)| *c == conn) {
                state.conn = None;
            }
        }
        tracing::warn!(target: "ysched::pool", "node {name} disconnected: {why}");
    }

    /// Refuses what came on `conn`, saying why, and closes it.
    fn refuse_connection(&mut self, conn: ConnId, why: &str) {
        let Some(pool) = &mut self.pool else { return };
        tracing::warn!(target: "ysched::pool", "connection refused: {why}");
        pool.conns.remove(&conn);
        let envelope = Envelope {
            protocol: PROTOCOL,
            epoch: pool.epoch,
            incarnation: 0,
            body: ToNode::Refused {
                reason: why.to_string(),
            },
        };
        pool.server.close(conn, encode(&envelope).ok());
    }
}

impl Daemon {
    /// A node's welcome: its lease, the pool's `frozen_limit`, and the
    /// leader's term (0 without `[standby]`), below which the node takes
    /// no controller's orders from now on.
    fn welcome(&self, lease: Duration) -> ToNode {
        ToNode::Welcome {
            lease_ms: lease.as_millis() as u64,
            frozen_limit_ms: self.core.config.pool.frozen_limit.as_millis() as u64,
            term: self
                .store
                .leadership
                .as_ref()
                .map_or(0, |l| l.term.0.max(0) as u64),
        }
    }
}

/// What an agent says at each connection.
pub(super) struct Hello {
    /// When the node sent it (the controller's clock): its welcome gives
    /// the node a lease from then.
    pub(super) sent: i64,
    pub(super) facts: NodeFacts,
    pub(super) running: Vec<(RunKey, i32)>,
    pub(super) ended: Vec<(RunKey, crate::exec::spec::ExitRecord)>,
    pub(super) lost: Vec<RunKey>,
    pub(super) version: String,
    /// The runs it froze when its lease ran out, and for how long.
    pub(super) frozen: Vec<(RunKey, u64)>,
    /// Those of its freezes a suspension took over, and how long.
    pub(super) taken_over: Vec<(RunKey, u64)>,
    /// The runs it holds frozen for a suspension.
    pub(super) suspended: Vec<RunKey>,
}

impl Daemon {
    /// A node joins: its token checked (the node expected, not yet
    /// joined, the token unexpired and right), its key certified under
    /// the name the token was made for.
    fn join(
        &mut self,
        conn: ConnId,
        from: Option<std::net::IpAddr>,
        (name, token, request_pem): (&str, &str, &str),
        now: i64,
    ) -> Result<(), DaemonError> {
        // What a stranger sends is looked at before anything is written
        // with it: a name that is no node name is refused as such.
        if let Some(why) = malformed_join(name, token) {
            return self.refuse_join(conn, from, "?", &why, now);
        }
        let record = db::node_record(&self.store.db, name)?;
        let refusal = match &record {
            None => Some(format!(
                "no node {name} is expected: an administrator adds it with yscontrol node add {name}"
            )),
            Some(r) if r.removed.is_some() => Some(format!(
                "node {name} was removed; an administrator adds it again with yscontrol node add {name}"
            )),
            Some(r) if r.token_hash.is_none() => Some(format!(
                "the join token of node {name} was used already; an administrator makes a new one with yscontrol node add {name}"
            )),
            Some(r) if r.token_expires.is_some_and(|e| e < now) => Some(format!(
                "the join token of node {name} expired at {}; an administrator makes a new one with yscontrol node add {name}",
                crate::model::units::format_timestamp(r.token_expires.unwrap_or(0))
            )),
            Some(r) if r.token_hash.as_deref() != Some(hash_token(token).as_str()) => {
                Some(format!("wrong join token for node {name}"))
            }
            Some(_) => None,
        };
        if let Some(why) = refusal {
            return self.refuse_join(conn, from, name, &why, now);
        }
        let pool = self.pool.as_ref().expect("joins come from the pool");
        let signed = pool.authority.sign_node(
            name,
            request_pem,
            self.core.config.pool.certificate_lifetime,
        );
        let (certificate_pem, serial) = match signed {
            Ok(s) => s,
            Err(e) => {
                self.refuse_connection(conn, &format!("cannot certify the node's key: {e}"));
                return Ok(());
            }
        };
        let authority_pem = pool.authority.pem().to_string();
        self.write(Row::Pool(PoolRow::Joined {
            name: name.to_string(),
            certificate: serial.clone(),
        }))?;
        self.audit(
            now,
            name,
            "join",
            None,
            &format!("node {name} joined the pool"),
        )?;
        tracing::info!(target: "ysched::pool", "node {name} joined the pool (certificate {serial})");
        let users = self.known_users();
        // The certificate leaves once the node's joining is recorded: a
        // node never holds one its controller does not know of.
        let mut fx = Effects::default();
        fx.out(Out::Conn {
            conn,
            body: Box::new(ToNode::Joined {
                certificate_pem,
                authority_pem,
                users,
            }),
            close: true,
        });
        self.after_commit(fx);
        Ok(())
    }

    /// Refuses a join, audited and logged unless its address was refused
    /// more than a few times this minute (then only the count is, later).
    fn refuse_join(
        &mut self,
        conn: ConnId,
        from: Option<std::net::IpAddr>,
        name: &str,
        why: &str,
        now: i64,
    ) -> Result<(), DaemonError> {
        use super::refusals::Recorded;
        let recorded = match (from, self.pool.as_mut()) {
            (Some(ip), Some(pool)) => pool.join_refusals.record(ip, Instant::now()),
            _ => Recorded::Yes { dropped: 0 },
        };
        let address = from.map_or("?".to_string(), |ip| ip.to_string());
        match recorded {
            Recorded::Yes { dropped } => {
                let more = if dropped > 0 {
                    format!(
                        " ({dropped} more from {address} in the minute before were not recorded)"
                    )
                } else {
                    String::new()
                };
                let detail = format!("from {address}: {why}{more}");
                self.audit(now, name, "join-refused", None, &detail)?;
                self.refuse_connection(conn, why);
            }
            Recorded::No => {
                // Closed without a word in the log or the audit table.
                if let Some(pool) = &mut self.pool {
                    pool.conns.remove(&conn);
                    pool.server.close(conn, None);
                }
            }
        }
        Ok(())
    }

    /// The users the config names, with their uids here: a joining node
    /// checks each is the same user there.
    fn known_users(&self) -> Vec<(String, u32)> {
        let mut names: Vec<&str> = self
            .core
            .config
            .accounts
            .iter()
            .flat_map(|a| a.users.iter().map(String::as_str))
            .filter(|u| *u != "*")
            .collect();
        names.sort_unstable();
        names.dedup();
        names
            .into_iter()
            .filter_map(|n| {
                let user = nix::unistd::User::from_name(n).ok().flatten()?;
                Some((user.name, user.uid.as_raw()))
            })
            .collect()
    }

    /// An agent connected: its node is (again) in the pool, with what it
    /// has now; each run recorded there is settled from what it holds.
    fn hello(
        &mut self,
        conn: ConnId,
        name: &str,
        incarnation: u64,
        hello: Hello,
        now: i64,
        ended: &mut Vec<JobId>,
    ) -> Result<(), DaemonError> {
        if hello.facts.name != name {
            let why = format!(
                "the node's certificate is for {name}, and its config says node_name = \"{}\"",
                hello.facts.name
            );
            self.refuse_connection(conn, &why);
            return Ok(());
        }
        let facts_json = serde_json::to_string(&hello.facts).map_err(crate::net::NetError::from)?;
        self.write(Row::Pool(PoolRow::Facts {
            name: name.to_string(),
            facts: facts_json,
        }))?;
        let link = self
            .nodes
            .named(name)
            .and_then(|n| n.remote.as_ref())
            .map(|r| r.link.clone())
            .unwrap_or_default();
        let (server, epoch, lease) = {
            let pool = self.pool.as_mut().expect("hello comes from the pool");
            // An earlier connection of the node is done with.
            let older: Vec<ConnId> = pool
                .conns
                .iter()
                .filter(|(c, n)| **c != conn && n.as_str() == name)
                .map(|(c, _)| *c)
                .collect();
            for c in older {
                pool.conns.remove(&c);
                pool.server.close(c, None);
            }
            pool.conns.insert(conn, name.to_string());
            (pool.server.clone(), pool.epoch, pool.lease)
        };
        {
            let mut state = link.state();
            state.conn = Some((server, conn));
            state.epoch = epoch;
            state.incarnation = incarnation;
            // Pulls asked of an earlier connection may never be answered:
            // ask again (a present image is found at once).
            state.images = Default::default();
            state.running = Some(
                hello
                    .running
                    .iter()
                    .map(|(run, pid)| (run.job, (run.restart, *pid)))
                    .collect(),
            );
            state.exits = hello
                .ended
                .iter()
                .map(|(run, record)| (run.job, (run.restart, record.clone())))
                .collect();
            state.lost = hello.lost.iter().map(|r| r.job).collect();
        }
        let before = self.nodes.named(name).and_then(|n| n.remote.as_ref());
        let secs = lease_secs(lease);
        let lapse = before.map(|r| r.lease_from.saturating_add(secs));
        self.attach_node(hello.facts.clone(), link.clone());
        self.nodes.change(name, |node| {
            node.down = None;
            if let Some(remote) = &mut node.remote {
                remote.lease_from = hello.sent;
                // A hello sent before its lease ran out unanswered, read
                // late, does not know of the freeze since (see
                // `heartbeat`).
                let unknowing = |at: i64| at <= now && hello.sent < at && now <= at + secs;
                remote.lapsed_at = lapse.filter(|&at| unknowing(at));
                remote.heard_since_away = remote.lapsed_at.is_none();
            }
        });
        self.answer_link(name, &link, self.welcome(lease));
        tracing::info!(
            target: "ysched::pool",
            "node {name} connected (ysnoded {}): {} running, {} ended, {} lost",
            hello.version,
            hello.running.len(),
            hello.ended.len(),
            hello.lost.len()
        );
        self.settle_after_hello(name, &link, &hello, now, ended)
    }

    /// After a hello: runs the node holds that are not the current run of
    /// a job recorded there are killed and forgotten; jobs recorded there
    /// are re-adopted from what the node said.
    fn settle_after_hello(
        &mut self,
        name: &str,
        link: &Link,
        hello: &Hello,
        now: i64,
        ended: &mut Vec<JobId>,
    ) -> Result<(), DaemonError> {
        let current = |daemon: &Daemon, run: &RunKey| {
            daemon.core.jobs.get(&run.job).is_some_and(|j| {
                j.state.holds_gpus() && j.runs_on(name) && j.restart_count == run.restart
            })
        };
        let held = hello
            .running
            .iter()
            .map(|(r, _)| *r)
            .chain(hello.ended.iter().map(|(r, _)| *r))
            .chain(hello.lost.iter().copied());
        for run in held.collect::<Vec<_>>() {
            if !current(self, &run) {
                let mut fx = Effects::default();
                stop_stale(name, run, false, &mut fx);
                self.after_commit(fx);
                let mut state = link.state();
                state.exits.remove(&run.job);
                state.lost.remove(&run.job);
                if let Some(running) = &mut state.running {
                    running.remove(&run.job);
                }
            }
        }
        let recorded: Vec<(JobId, bool)> = self
            .core
            .jobs
            .all()
            .filter(|j| j.state.holds_gpus() && j.runs_on(name))
            .map(|j| (j.id, !j.peers.is_empty()))
            .collect();
        for (id, multi_node) in recorded {
            let exited = link.state().exits.contains_key(&id) || link.state().lost.contains(&id);
            if multi_node {
                if self.readopt_part(id, name) {
                    ended.push(id);
                } else {
                    self.restop_part(id, name);
                }
            } else if exited {
                ended.push(id);
            } else {
                self.readopt(id)?;
            }
        }
        // Fenced, if it holds runs frozen for its lease, or ended one so.
        let ended_frozen = hello
            .ended
            .iter()
            .any(|(_, r)| r.fence_frozen_secs.is_some());
        let fenced = !hello.frozen.is_empty() || ended_frozen;
        // As of when the node sent it: a hello read late, after the
        // controller was stopped, is as old as it is (found by the
        // simulation of the pool, seed 26 over 2 hours: a hello sent
        // before a node's lease ran out, read after, was taken as good
        // standing then, and the freeze reported next credited nothing).
        let reported = (fenced, &hello.frozen[..], &hello.taken_over[..]);
        self.thaw_fenced(name, reported, (hello.sent, now))?;
        self.handle_with(|core, _, fx| {
            super::suspend::on_resume_missed(core, (name, &hello.suspended), now, fx);
            Ok(())
        })?;
        self.refreeze_on(name);
        self.replan();
        self.snapshot = None;
        Ok(())
    }

    /// Runs node `name` froze when its lease ran out (`frozen`, with how
    /// long they have been frozen): each still the current run of a
    /// running job there goes on where it stopped (thawed), the time it
    /// was frozen not counted against its time limit nor charged, as
    /// Slurm does with suspended time; any other was run elsewhere since
    /// (or its job ended), and is stopped and forgotten.
    pub(super) fn thaw_fenced(
        &mut self,
        name: &str,
        (fenced, frozen, taken_over): (bool, &[RunSecs], &[RunSecs]),
        (sent, now): (i64, i64),
    ) -> Result<(), DaemonError> {
        let (taken, credits, good) = match &mut self.pool {
            Some(pool) => {
                // Before the freezes reported: a run taken over, resumed,
                // and frozen again is in both, the freeze reported anew.
                let taken = pool.freezes.taken_over(name, taken_over, |run| {
                    let job = current_run(&self.core.jobs, run, name)?;
                    // The suspension's start (its last, if it ended).
                    let resumed = self.core.policy.resumed.get(&run.job);
                    let until = job.suspended_at.or(resumed.map(|&(from, _)| from));
                    Some((now - job.start_time?, until.unwrap_or(now).min(now)))
                });
                let credits = pool
                    .freezes
                    .report(name, (fenced, frozen), (sent, now), |run| {
                        let job = current_run(&self.core.jobs, run, name)?;
                        let until = self.core.policy.stopping.get(&run.job).copied();
                        // `node_loss::on_frozen` thaws these.
                        let thaws = matches!(job.state, JobState::Running | JobState::Completing);
                        Some((now - job.start_time?, until.unwrap_or(now), thaws))
                    });
                // Its good standing on record bounds what it may say it
                // froze while a restarted controller was away.
                (taken, credits, pool.freezes.good_to_record(name))
            }
            None => (Vec::new(), Vec::new(), None),
        };
        self.handle_with(|core, _, fx| {
            if let Some(time) = good {
                let name = name.to_string();
                fx.row(Row::Pool(PoolRow::Good { name, time }));
            }
            super::node_loss::on_taken_over(core, (name, taken_over, &taken), now, fx);
            super::node_loss::on_frozen(core, (name, frozen, &credits), now, fx);
            Ok(())
        })
    }

    /// The freeze for its node's lost lease that `job`'s run ended in, as
    /// its end (`record`) tells it: the node, its count, and what the
    /// controller credits of it.
    pub(super) fn freeze_at_end(
        &mut self,
        job: &Job,
        record: &ExitRecord,
    ) -> Option<(String, u64, Credited)> {
        let secs = record.fence_frozen_secs?;
        let name = job.node.clone()?;
        let ran = record.end_time.saturating_sub(job.start_time?);
        let run = RunKey {
            job: job.id,
            restart: job.restart_count,
        };
        let freezes = &mut self.pool.as_mut()?.freezes;
        let credit = freezes.ended(&name, run, secs, (record.end_time, ran));
        Some((name, secs, credit))
    }

    /// The controller's clock less node `name`'s, with a reading of the
    /// node's clock (`sent`, by it) taken in.
    fn node_skew(&mut self, name: &str, sent: i64) -> i64 {
        let received = self.now();
        match &mut self.pool {
            Some(pool) => {
                let clock = pool.clocks.entry(name.to_string()).or_default();
                clock.observe(sent, received);
                clock.skew()
            }
            None => received - sent,
        }
    }

    /// A launch node `name` did not carry out (it was fenced): nothing of
    /// the run started, and the job waits for a node again.
    fn not_started(
        &mut self,
        name: &str,
        run: RunKey,
        why: &str,
        now: i64,
    ) -> Result<(), DaemonError> {
        let multi_node = self.handle_with(|core, _, fx| {
            Ok(super::node_loss::on_not_started(
                core,
                (name, run, why),
                now,
                fx,
            ))
        })?;
        match multi_node {
            Some(id) => self.part_ended(id, now),
            None => Ok(()),
        }
    }

    /// A heartbeat: the node is heard, its lease renewed by the answer.
    fn heartbeat(
        &mut self,
        name: &str,
        link: &Link,
        (seq, sent, now): (u64, i64, i64),
        running: &[RunKey],
        fenced: bool,
    ) {
        link.state().running = Some(running.iter().map(|r| (r.job, (r.restart, 0))).collect());
        self.answer_link(name, link, ToNode::HeartbeatAck { seq });
        // A run the node still holds that is no job's current run there
        // (its node was lost and its job requeued or ended meanwhile, the
        // node heard again without a new hello): stopped and forgotten,
        // as at a hello, before anything else starts on its GPUs.
        let mut fx = Effects::default();
        for &run in running {
            if current_run(&self.core.jobs, run, name).is_none() {
                stop_stale(name, run, false, &mut fx);
            }
        }
        self.after_commit(fx);
        let was_down = self.nodes.named(name).and_then(|n| n.down.clone());
        let heard = self.core.clock.instant();
        let lease = self.pool.as_ref().map_or(0, |p| lease_secs(p.lease));
        self.nodes.change(name, |node| {
            if let Some(remote) = &mut node.remote {
                // Its lease ran out before this answer can reach it: it
                // froze its runs then. What it sent before that (frames
                // held on the way, or unread while the controller was
                // stopped) does not know of it; its jobs' clocks wait
                // for a report sent since (found by the simulation of
                // the pool, seed 35 over 2 hours: a time limit reached
                // on a run its node held frozen, unreported).
                let lapse = remote.lease_from.saturating_add(lease);
                if lapse <= now && remote.lapsed_at.is_none() {
                    remote.lapsed_at = Some(lapse);
                }
                // No longer than a lease: an honest node's report comes
                // within it (or the node is lost first), and a node whose
                // clock stays behind holds its jobs' limits no further.
                if remote
                    .lapsed_at
                    .is_some_and(|at| sent >= at || now > at + lease)
                {
                    remote.lapsed_at = None;
                }
                remote.last_heard = heard;
                remote.lease_from = remote.lease_from.max(sent);
                remote.lost = false;
                remote.heard_since_away = remote.lapsed_at.is_none();
            }
            node.down = fenced.then(|| "its agent stopped its jobs: it had lost its lease".into());
        });
        if was_down.is_some() && !fenced {
            tracing::info!(target: "ysched::pool", "node {name} is up again");
            self.replan();
            self.snapshot = None;
        }
    }

    /// A new certificate for a node whose certificate nears its end.
    fn renew(&mut self, name: &str, request_pem: &str) -> Result<(), DaemonError> {
        let Some(pool) = &self.pool else {
            return Ok(());
        };
        let lifetime = self.core.config.pool.certificate_lifetime;
        let (certificate_pem, serial) = pool.authority.sign_node(name, request_pem, lifetime)?;
        self.write(Row::Pool(PoolRow::Certificate {
            name: name.to_string(),
            certificate: serial.clone(),
        }))?;
        tracing::info!(target: "ysched::pool", "node {name} renewed its certificate ({serial})");
        // Handed out once its serial is recorded as the node's.
        let mut fx = Effects::default();
        fx.frame(name, ToNode::Renewed { certificate_pem });
        self.after_commit(fx);
        Ok(())
    }
}

impl Daemon {
    /// Nodes unheard for a lease go down; half a lease later their jobs
    /// end NODE_FAIL and are requeued (unless they asked not to be), by
    /// which time the node's agent, not having heard back either, has
    /// stopped them.
    pub(super) fn check_leases(&mut self, now: i64) -> Result<(), DaemonError> {
        let Some(pool) = &mut self.pool else {
            return Ok(());
        };
        let lease = pool.lease;
        let margin = lease / 2;
        // The controller did not run for a while (SIGSTOP, a stalled disk,
        // a long transaction): what the nodes sent meanwhile waits in the
        // sockets, unread. That time is not theirs: each node gets it back,
        // and is judged on time the controller could hear it.
        let instant = self.core.clock.instant();
        let gap =
            instant.saturating_duration_since(std::mem::replace(&mut pool.leases_checked, instant));
        if gap > margin {
            tracing::warn!(target: "ysched::pool", "the controller did not run for {}: every node gets that time back to be heard", humantime::format_duration(round(gap)));
            for node in self.nodes.iter_mut() {
                if let Some(remote) = &mut node.remote {
                    remote.last_heard += gap;
                    remote.heard_since_away = false;
                }
            }
        }
        let (mut changed, mut lost) = (false, Vec::new());
        for node in self.nodes.iter_mut() {
            let name = node.name().to_string();
            let Some(remote) = &mut node.remote else {
                continue;
            };
            let silent = instant.saturating_duration_since(remote.last_heard);
            if silent > lease && node.down.is_none() {
                tracing::warn!(target: "ysched::pool", "node {name} is down: not heard from for {}", humantime::format_duration(round(silent)));
                node.down = Some(format!(
                    "not heard from for more than {}",
                    humantime::format_duration(lease)
                ));
                changed = true;
            }
            if silent > lease + margin && !remote.lost {
                remote.lost = true;
                lost.push(name);
            }
        }
        if !changed && lost.is_empty() {
            return Ok(());
        }
        self.nodes.relayout();
        self.replan();
        self.snapshot = None;
        for name in lost {
            self.lose_jobs_of(&name, now)?;
        }
        Ok(())
    }

    /// Ends the jobs that ran on node `name` NODE_FAIL; each is requeued
    /// unless it asked not to be (`--no-requeue`).
    fn lose_jobs_of(&mut self, name: &str, now: i64) -> Result<(), DaemonError> {
        // The node froze its runs when its lease ran out, a lease after it
        // sent the last heartbeat answered: they are charged until then,
        // not for the half lease more the controller waited.
        let lease = self.pool.as_ref().map_or(0, |p| lease_secs(p.lease));
        let stopped = self
            .nodes
            .named(name)
            .and_then(|n| n.remote.as_ref())
            .map_or(now, |r| r.lease_from.saturating_add(lease).min(now));
        let parts = self.handle_with(|core, reads, fx| {
            super::node_loss::on_node_lost(core, reads, (name, stopped), now, fx)
        })?;
        for id in parts {
            self.part_ended(id, now)?;
        }
        Ok(())
    }

    /// When the next node would go down or be lost, for the loop's wait.
    pub(super) fn next_lease_deadline(&self) -> Option<Instant> {
        let pool = self.pool.as_ref()?;
        let lease = pool.lease;
        let deadline = self
            .nodes
            .iter()
            .filter_map(|n| {
                let remote = n.remote.as_ref()?;
                let at = if n.down.is_none() {
                    remote.last_heard + lease
                } else if !remote.lost {
                    remote.last_heard + lease + lease / 2
                } else {
                    return None;
                };
                Some(at + Duration::from_millis(10))
            })
            .min()?;
        // Looked at every quarter lease at least, so that a longer gap
        // means the controller did not run (see `check_leases`).
        Some(deadline.min(pool.leases_checked + lease / 4))
    }
}

/// A node's record with its times moved by `skew` seconds (the
/// controller's clock less the node's), so that ends are in the
/// controller's time whatever the node's clock says.
/// Why a join's words cannot be a join at all, if they cannot: a node
/// name (at most 63 letters, digits, `_-.`) and a token of a sane length.
/// The name is described, never repeated: it may be megabytes of anything.
fn malformed_join(name: &str, token: &str) -> Option<String> {
    if name.len() > 63 {
        return Some(format!(
            "a join with a node name of {} bytes (a node name has at most 63)",
            name.len()
        ));
    }
    if let Err(e) = crate::validate::node_name(name) {
        return Some(format!("a join with a bad node name: {e}"));
    }
    if token.is_empty() || token.len() > 256 || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Some(format!("a join for {name} with a token that is none"));
    }
    None
}

fn shifted(mut record: crate::exec::spec::ExitRecord, skew: i64) -> crate::exec::spec::ExitRecord {
    record.end_time = record.end_time.saturating_add(skew);
    record
}

/// A lease in whole seconds, rounded up.
fn round(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs())
}
