//! The agent's loop: one connection to the controller, made again
//! whenever it breaks (backing off to a third of the lease); a hello at
//! each connection with every run the node holds; a heartbeat every third
//! of the lease; the controller's orders carried out; each run's end sent
//! when it happens (and told again at each hello until forgotten).
//!
//! The lease: it runs from when the node sent the last heartbeat the
//! controller answered (the node's own monotonic clock). When it runs out
//! the node stops its jobs — the controller, which stopped hearing the
//! node at least as long ago, ends them and may run them elsewhere only
//! half a lease later — and starts none until the controller answers.

use std::collections::HashMap;
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::AsFd;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::EventFd;

use super::error::AgentError;
use super::identity::Identity;
use crate::model::job::JobId;
use crate::net::conn::Conn;
use crate::net::frame::{decode, encode};
use crate::net::message::{Envelope, FromNode, ToNode, PROTOCOL};
use crate::net::runs::Runs;
use crate::net::tls;

/// The controllers' addresses in `list` (`HOST:PORT`, separated by
/// commas: a pool with a standby names each controller).
pub fn addresses(list: &str) -> Vec<&str> {
    list.split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .collect()
}

/// Connects to the first controller of `list` that takes the connection,
/// trying them in turn from the `from`-th (only the one that leads
/// listens); which one it is, and the connection.
pub fn connect_any(
    list: &str,
    from: usize,
    config: Arc<rustls::ClientConfig>,
) -> Result<(usize, Conn), AgentError> {
    let all = addresses(list);
    let mut failed = Vec::new();
    for k in 0..all.len() {
        let i = (from + k) % all.len();
        match connect(all[i], config.clone()) {
            Ok(conn) => return Ok((i, conn)),
            Err(e) => failed.push(e),
        }
    }
    match failed.len() {
        0 => Err(AgentError::Unreachable {
            address: list.to_string(),
            why: "no address".into(),
        }),
        1 => Err(failed.remove(0)),
        _ => Err(AgentError::Unreachable {
            address: list.to_string(),
            why: failed
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        }),
    }
}

/// Connects to the controller at `address` (`HOST:PORT`), TLS as `config`.
pub fn connect(address: &str, config: Arc<rustls::ClientConfig>) -> Result<Conn, AgentError> {
    let fail = |why: String| AgentError::Unreachable {
        address: address.to_string(),
        why,
    };
    let addresses = address.to_socket_addrs().map_err(|e| fail(e.to_string()))?;
    let mut last = String::from("the name resolves to no address");
    for a in addresses {
        match TcpStream::connect_timeout(&a, Duration::from_secs(5)) {
            Ok(sock) => {
                let tls = rustls::ClientConnection::new(config, tls::server_name())
                    .map_err(|e| fail(e.to_string()))?;
                return Conn::new(sock, tls).map_err(|e| fail(e.to_string()));
            }
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    Err(fail(last))
}

/// One connection's state.
struct Link {
    conn: Conn,
    /// Which of the controllers' addresses it is to.
    address: usize,
    welcomed: bool,
    next_heartbeat: Instant,
}

pub struct Session {
    runs: Runs,
    identity: Identity,
    /// Where the identity is kept, for a renewed certificate.
    identity_dir: std::path::PathBuf,
    /// The key of a renewal asked for, until its certificate comes.
    renewing: Option<String>,
    tls: Arc<rustls::ClientConfig>,
    incarnation: u64,
    epoch: u64,
    lease: Duration,
    /// When the lease runs out (monotonic): a lease after the node sent
    /// the last heartbeat the controller answered.
    lease_until: Instant,
    /// Where the jobs' supervisors read the lease (see `exec::lease`).
    lease_file: crate::exec::lease::LeaseFile,
    /// When this agent last fenced the node, or started (boot clock): in
    /// the lease file, so that a supervisor thaws a job it froze itself
    /// only if the agent has not fenced since.
    fenced_at: u64,
    /// Whether the last write of the lease file failed (said once).
    lease_unwritten: bool,
    fenced: bool,
    seq: u64,
    /// When each heartbeat not yet answered was sent.
    sent: HashMap<u64, Instant>,
    link: Option<Link>,
    next_connect: Instant,
    backoff: Duration,
    /// Supervisors' exits, from the executor's watcher.
    exits: Receiver<JobId>,
    wake: Arc<EventFd>,
    /// The node's GPUs, read and sent while connected.
    sampler: Option<super::sampler::Sampler>,
    /// Submissions made on the node, passed on while connected.
    requests: Option<super::requests::Requests>,
    /// How long runs frozen for the fence wait for a controller to claim
    /// them before they are ended (`[pool] frozen_limit`).
    frozen_limit: Duration,
    /// Which of the controllers' addresses to try first at the next
    /// connection.
    next_address: usize,
    /// The highest leader's term a controller has welcomed this node in
    /// (kept in the node's state): a controller of a lower term was
    /// deposed, and none of its orders are taken.
    term: u64,
}

/// Where a node keeps the last `frozen_limit` its controller said
/// (milliseconds), in its identity directory.
const FROZEN_LIMIT_FILE: &str = "frozen_limit";

/// Where a node keeps the highest leader's term it was welcomed in.
const TERM_FILE: &str = "term";

impl Session {
    pub fn new(
        runs: Runs,
        identity: Identity,
        identity_dir: std::path::PathBuf,
        lease: Duration,
        lease_file: std::path::PathBuf,
        exits: Receiver<JobId>,
        wake: Arc<EventFd>,
    ) -> Result<Session, AgentError> {
        let tls = tls::node_config(
            &identity.authority_pem,
            &identity.certificate_pem,
            &identity.key_pem,
        )?;
        // An agent restarted keeps the lease it had (the supervisors' file
        // says what is left of it); a new one has none until the
        // controller answers. Its start counts as a fence: what a
        // supervisor froze before it is the controller's to thaw.
        // One that ran out says since when: the runs its supervisors froze
        // then stand frozen since, and the freeze is told from then.
        let (left, overdue) = crate::exec::lease::read(&lease_file)
            .map_or((Duration::ZERO, Duration::ZERO), |l| {
                (l.remaining(), l.overdue())
            });
        let fenced_at = crate::exec::lease::boot_now();
        let lease_file = crate::exec::lease::LeaseFile::open(
            &lease_file,
            crate::exec::lease::Lease::for_(left, fenced_at),
        )
        .map_err(AgentError::io(format!(
            "cannot write the lease file {}",
            lease_file.display()
        )))?;
        let session = Session {
            runs,
            identity,
            identity_dir,
            renewing: None,
            tls,
            incarnation: incarnation(),
            epoch: 0,
            lease,
            lease_until: Instant::now()
                .checked_sub(overdue)
                .unwrap_or_else(Instant::now)
                + left,
            lease_file,
            fenced_at,
            lease_unwritten: false,
            fenced: false,
            seq: 0,
            sent: HashMap::new(),
            link: None,
            next_connect: Instant::now(),
            backoff: Duration::from_millis(200),
            exits,
            wake,
            sampler: None,
            requests: None,
            frozen_limit: crate::config::DEFAULT_FROZEN_LIMIT,
            next_address: 0,
            term: 0,
        };
        let term_file = session.identity_dir.join(TERM_FILE);
        let term = match std::fs::read_to_string(&term_file) {
            Ok(text) => text
                .trim()
                .parse::<u64>()
                .map_err(|_| AgentError::BadTerm {
                    path: term_file.clone(),
                    found: text.chars().take(40).collect(),
                })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => {
                return Err(AgentError::io(format!(
                    "cannot read {}",
                    term_file.display()
                ))(e))
            }
        };
        Ok(Session { term, ..session })
    }

    /// The session, its runs frozen for the fence ended after `limit`
    /// (the node's own `[pool] frozen_limit`), until a controller says
    /// its own: the last one a controller said, kept in the node's
    /// state, counts over it.
    pub fn with_frozen_limit(mut self, limit: Duration) -> Session {
        self.frozen_limit = std::fs::read_to_string(self.identity_dir.join(FROZEN_LIMIT_FILE))
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .map_or(limit, Duration::from_millis);
        self
    }

    /// The controller's `[pool] frozen_limit`, which is the pool's (one
    /// place to set it): used from now on, and kept for this agent's
    /// restarts, when the controller may be away.
    fn take_frozen_limit(&mut self, limit: Duration) {
        let limit = limit.max(self.lease);
        if limit == self.frozen_limit {
            return;
        }
        tracing::info!(target: "ysched::agent", "frozen_limit {} (the controller's)", humantime::format_duration(limit));
        self.frozen_limit = limit;
        let path = self.identity_dir.join(FROZEN_LIMIT_FILE);
        let text = limit.as_millis().to_string();
        if let Err(e) = crate::exec::process::write_atomically(&path, text.as_bytes()) {
            tracing::warn!(target: "ysched::agent", "cannot keep the controller's frozen_limit in {}: {e}", path.display());
        }
    }

    /// Reads the node's GPUs with `sampler` and sends the readings.
    pub fn sample_gpus_with(&mut self, sampler: super::sampler::Sampler) {
        self.sampler = Some(sampler);
    }

    /// Passes the submissions made on the node on to the controller.
    pub fn forward_requests(&mut self, requests: super::requests::Requests) {
        self.requests = Some(requests);
    }

    /// Sends the submissions waiting in the node's spool, once welcomed.
    fn forward_submissions(&mut self) {
        if !self.link.as_ref().is_some_and(|l| l.welcomed) {
            return;
        }
        let Some(requests) = &mut self.requests else {
            return;
        };
        for submit in requests.take() {
            self.send(submit);
        }
    }

    /// Tells the jobs' supervisors when the lease runs out, and when this
    /// agent last fenced the node. A failure is said once, and when it
    /// mends: the supervisors freeze their jobs when the lease they read
    /// runs out, and thaw them when it is renewed.
    fn publish_lease(&mut self) {
        let left = self.lease_until().saturating_duration_since(Instant::now());
        let lease = crate::exec::lease::Lease::for_(left, self.fenced_at);
        let path = self.lease_file.path().display().to_string();
        match self.lease_file.write(lease) {
            Err(e) if !self.lease_unwritten => {
                tracing::error!(target: "ysched::agent", "cannot write the lease file {path}: {e}; this node's jobs freeze when the lease they read runs out, until it is written again");
                self.lease_unwritten = true;
            }
            Ok(()) if self.lease_unwritten => {
                tracing::info!(target: "ysched::agent", "the lease file {path} is written again");
                self.lease_unwritten = false;
            }
            _ => {}
        }
    }

    /// Runs until the controller refuses this node (removed, revoked):
    /// that is returned as the error to exit with.
    pub fn run(&mut self) -> Result<(), AgentError> {
        loop {
            if self.link.is_none() && Instant::now() >= self.next_connect {
                self.reconnect();
            }
            self.wait();
            self.take_exits();
            if self.link.is_some() {
                self.serve_link()?;
            }
            self.tick();
            self.forward_submissions();
        }
    }

    fn reconnect(&mut self) {
        match connect_any(
            &self.identity.controller,
            self.next_address,
            self.tls.clone(),
        ) {
            Ok((address, conn)) => {
                self.next_address = address;
                let mut link = Link {
                    conn,
                    address,
                    welcomed: false,
                    next_heartbeat: Instant::now(),
                };
                // What the hello says of its runs' freezes is the fence's.
                self.fence_if_due(Instant::now());
                let hello = self.runs.hello(env!("CARGO_PKG_VERSION"), self.seq);
                // The hello counts as a heartbeat: its welcome renews the lease.
                self.seq += 1;
                self.sent.clear();
                self.sent.insert(self.seq, Instant::now());
                if self.send_on(&mut link, hello).is_ok() {
                    self.link = Some(link);
                    self.backoff = Duration::from_millis(200);
                    return;
                }
            }
            Err(e) => tracing::warn!(target: "ysched::agent", "{e}"),
        }
        self.next_connect = Instant::now() + self.backoff;
        // With several controllers, the standby that takes over is found
        // within a second of listening.
        let mut most = (self.lease / 3).max(Duration::from_millis(200));
        if addresses(&self.identity.controller).len() > 1 {
            most = most.min(Duration::from_secs(1));
        }
        self.backoff = (self.backoff * 2).min(most);
    }

    fn send_on(&self, link: &mut Link, body: FromNode) -> Result<(), AgentError> {
        let envelope = Envelope {
            protocol: PROTOCOL,
            epoch: self.epoch,
            incarnation: self.incarnation,
            body,
        };
        link.conn.send(&encode(&envelope)?)?;
        link.conn.flush()?;
        Ok(())
    }

    fn send(&mut self, body: FromNode) {
        let Some(mut link) = self.link.take() else {
            return;
        };
        match self.send_on(&mut link, body) {
            Ok(()) => self.link = Some(link),
            Err(e) => self.disconnected(&e.to_string()),
        }
    }

    fn disconnected(&mut self, why: &str) {
        tracing::warn!(target: "ysched::agent", "lost the controller: {why}");
        self.link = None;
        if let Some(requests) = &mut self.requests {
            requests.disconnected();
        }
        self.next_connect = Instant::now() + self.backoff;
    }

    /// Waits for the connection, an exit, or the next timer.
    fn wait(&self) {
        let now = Instant::now();
        let mut until = if self.fenced {
            now + Duration::from_secs(1)
        } else {
            self.lease_until().max(now + Duration::from_millis(10))
        };
        if self.runs.pulling() {
            until = until.min(now + Duration::from_millis(500));
        }
        if let Some(link) = &self.link {
            until = until.min(link.next_heartbeat);
            let next_reading = self.sampler.as_ref().and_then(|s| s.next());
            if let Some(next) = next_reading.filter(|_| link.welcomed) {
                until = until.min(next);
            }
        } else {
            until = until.min(self.next_connect);
        }
        let mut fds = vec![PollFd::new(self.wake.as_fd(), PollFlags::POLLIN)];
        if let Some(fd) = self.requests.as_ref().and_then(|r| r.fd()) {
            fds.push(PollFd::new(fd, PollFlags::POLLIN));
        }
        if let Some(link) = &self.link {
            let mut flags = PollFlags::POLLIN;
            if link.conn.wants_write() {
                flags |= PollFlags::POLLOUT;
            }
            fds.push(PollFd::new(link.conn.fd(), flags));
        }
        let ms = until
            .saturating_duration_since(now)
            .as_millis()
            .clamp(1, 1_000) as u16;
        let _ = poll(&mut fds, PollTimeout::from(ms));
    }

    fn take_exits(&mut self) {
        let _ = self.wake.read();
        let ended: Vec<JobId> = self.exits.try_iter().collect();
        for id in ended {
            if let Some(report) = self.runs.exited(id) {
                self.send(report);
            }
        }
    }

    /// Reads and carries out what the controller sent.
    fn serve_link(&mut self) -> Result<(), AgentError> {
        let Some(mut link) = self.link.take() else {
            return Ok(());
        };
        let frames = match link.conn.read().and_then(|f| link.conn.flush().map(|()| f)) {
            Ok(frames) => frames,
            Err(e) => {
                self.disconnected(&e.to_string());
                return Ok(());
            }
        };
        let closed = link.conn.is_closed();
        self.link = Some(link);
        for body in frames {
            if self.link.is_none() {
                // Left for another controller: the rest is not taken.
                return Ok(());
            }
            let envelope: Envelope<ToNode> = match decode(&body) {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(target: "ysched::agent", "the controller sent what does not read: {e}");
                    continue;
                }
            };
            self.on_message(envelope)?;
        }
        if closed {
            self.disconnected("the controller closed the connection");
        }
        Ok(())
    }

    fn on_message(&mut self, envelope: Envelope<ToNode>) -> Result<(), AgentError> {
        match envelope.body {
            ToNode::Refused { reason } => return Err(AgentError::Refused(reason)),
            ToNode::Welcome {
                lease_ms,
                frozen_limit_ms,
                term,
            } => {
                if !self.take_term(term) {
                    return Ok(());
                }
                self.epoch = envelope.epoch;
                self.lease = Duration::from_millis(lease_ms.max(1_000));
                if frozen_limit_ms > 0 {
                    self.take_frozen_limit(Duration::from_millis(frozen_limit_ms));
                }
                if let Some(link) = &mut self.link {
                    link.welcomed = true;
                }
                tracing::info!(target: "ysched::agent", "in the pool: lease {}", humantime::format_duration(self.lease));
                self.renewed(self.seq);
                self.renew_certificate_if_due();
            }
            ToNode::HeartbeatAck { seq } if envelope.epoch == self.epoch => self.renewed(seq),
            ToNode::Renewed { certificate_pem } => self.renewed_certificate(certificate_pem),
            ToNode::Answer { name, reply } => {
                if let Some(requests) = &mut self.requests {
                    requests.answered(&name, &reply);
                }
            }
            ToNode::AnswerRows {
                name,
                now,
                rows,
                end,
            } => {
                if let Some(requests) = &mut self.requests {
                    requests.answered_rows(&name, now, &rows, end.as_ref());
                }
            }
            ToNode::PullImage { reference } => self.runs.pull_image(reference),
            ToNode::Joined { .. } | ToNode::HeartbeatAck { .. } => {}
            order if envelope.epoch == self.epoch => {
                for report in self.runs.order(order, self.fenced) {
                    self.send(report);
                }
            }
            // From a controller since replaced.
            _ => {}
        }
        Ok(())
    }

    /// Whether a controller welcoming this node in leader's term `term`
    /// may give it orders: not one of a term lower than the highest seen
    /// (it was deposed, and may not know it yet), which is left for the
    /// next address. A higher term is kept before it is taken, so that a
    /// restart of this agent remembers it.
    fn take_term(&mut self, term: u64) -> bool {
        if term < self.term {
            let address = self.link.as_ref().map_or(0, |l| l.address);
            let name = addresses(&self.identity.controller)
                .get(address)
                .map_or_else(String::new, |a| a.to_string());
            self.leave_for_the_next(&format!(
                "the controller at {name} leads in term {term}, below term {} this node was welcomed in: it was deposed, its orders are refused (a pool gone back to one controller without [standby]: remove {} on this node)",
                self.term,
                self.identity_dir.join(TERM_FILE).display()
            ));
            return false;
        }
        if term > self.term {
            let path = self.identity_dir.join(TERM_FILE);
            if let Err(e) =
                crate::exec::process::write_atomically(&path, term.to_string().as_bytes())
            {
                tracing::error!(target: "ysched::agent", "cannot keep the leader's term {term} in {}: {e}; this node remembers it until it restarts", path.display());
            }
            if self.term > 0 {
                tracing::info!(target: "ysched::agent", "a new leader: term {term} (was {})", self.term);
            }
            self.term = term;
        }
        true
    }

    /// Drops the connection and tries the next controller's address
    /// first: this one was deposed, or has stopped answering.
    fn leave_for_the_next(&mut self, why: &str) {
        let count = addresses(&self.identity.controller).len().max(1);
        let address = self.link.as_ref().map_or(self.next_address, |l| l.address);
        self.next_address = (address + 1) % count;
        self.disconnected(why);
        self.next_connect = Instant::now();
    }

    /// Asks for a certificate for a new key once less than a third of
    /// the current one's life is left (at each welcome and heartbeat).
    fn renew_certificate_if_due(&mut self) {
        use rustls::pki_types::pem::PemObject;
        let Ok(der) = rustls::pki_types::CertificateDer::from_pem_slice(
            self.identity.certificate_pem.as_bytes(),
        ) else {
            return;
        };
        let Ok(subject) = crate::net::pki::subject_of(&der) else {
            return;
        };
        let now = crate::net::runs::now();
        if !subject.due_for_renewal(now) || self.renewing.is_some() {
            return;
        }
        let left = subject.not_after - now;
        match crate::net::pki::new_request(&subject.name) {
            Ok((key_pem, request_pem)) => {
                tracing::info!(target: "ysched::agent", "the node's certificate ends in {}: renewing it", humantime::format_duration(Duration::from_secs(left.max(0) as u64)));
                self.renewing = Some(key_pem);
                self.send(FromNode::Renew { request_pem });
            }
            Err(e) => {
                tracing::error!(target: "ysched::agent", "cannot make a key to renew the certificate: {e}")
            }
        }
    }

    /// The renewed certificate: kept with its key, used from the next
    /// connection on.
    fn renewed_certificate(&mut self, certificate_pem: String) {
        let Some(key_pem) = self.renewing.take() else {
            return;
        };
        let identity = Identity {
            key_pem,
            certificate_pem,
            ..self.identity.clone()
        };
        let kept = super::identity::save(&self.identity_dir, &identity).and_then(|()| {
            tls::node_config(
                &identity.authority_pem,
                &identity.certificate_pem,
                &identity.key_pem,
            )
            .map_err(Into::into)
        });
        match kept {
            Ok(config) => {
                self.tls = config;
                self.identity = identity;
                tracing::info!(target: "ysched::agent", "the node's certificate was renewed");
            }
            Err(e) => {
                tracing::error!(target: "ysched::agent", "cannot keep the renewed certificate: {e}")
            }
        }
    }

    fn lease_until(&self) -> Instant {
        self.lease_until
    }

    /// The controller answered heartbeat `seq`: the lease runs from when
    /// it was sent.
    fn renewed(&mut self, seq: u64) {
        self.runs.heard(seq);
        if let Some(sent) = self.sent.remove(&seq) {
            self.lease_until = self.lease_until.max(sent + self.lease);
            self.sent.retain(|s, _| *s > seq);
            self.publish_lease();
        }
        if self.fenced && Instant::now() < self.lease_until() {
            tracing::info!(target: "ysched::agent", "the controller answers again: jobs may start here again");
            self.fenced = false;
        }
    }

    /// The fence, once the lease has run out: the runs frozen since it
    /// ran out, none started until the controller answers.
    fn fence_if_due(&mut self, now: Instant) {
        if now >= self.lease_until() && !self.fenced {
            let lapsed = now.saturating_duration_since(self.lease_until());
            let (frozen, killed) = self.runs.fence(lapsed);
            if frozen + killed > 0 {
                tracing::error!(target: "ysched::agent", "no answer from the controller for a lease ({}): {frozen} job(s) frozen here until it says they are still this node's, {killed} that could not be frozen stopped; none starts until it answers", humantime::format_duration(self.lease));
            } else {
                tracing::info!(target: "ysched::agent", "no lease from the controller (yet): no job starts here until it answers");
            }
            self.fenced = true;
            self.fenced_at = crate::exec::lease::boot_now();
            self.publish_lease();
        }
    }

    /// Heartbeats, and the lease's end.
    fn tick(&mut self) {
        let now = Instant::now();
        self.leave_a_silent_controller(now);
        self.fence_if_due(now);
        let ended = self.runs.end_frozen_beyond(self.frozen_limit);
        if ended > 0 {
            tracing::error!(target: "ysched::agent", "{ended} job(s) frozen longer than frozen_limit ({}) with no controller to claim them: ended", humantime::format_duration(self.frozen_limit));
        }
        let due = self
            .link
            .as_ref()
            .is_some_and(|l| l.welcomed && now >= l.next_heartbeat);
        if due {
            self.seq += 1;
            self.sent.insert(self.seq, now);
            let heartbeat = FromNode::Heartbeat {
                seq: self.seq,
                running: self.runs.running(),
                fenced: self.fenced,
                frozen: self.runs.frozen_runs(),
                clock: crate::model::units::now(),
                taken_over: self.runs.taken_over(self.seq),
            };
            if let Some(link) = &mut self.link {
                link.next_heartbeat = now + self.lease / 3;
            }
            self.send(heartbeat);
            // A connection may last longer than the certificate has left.
            self.renew_certificate_if_due();
        }
        let welcomed = self.link.as_ref().is_some_and(|l| l.welcomed);
        for report in self.runs.settled_images() {
            self.send(report);
        }
        if let Some(reading) = self
            .sampler
            .as_mut()
            .filter(|_| welcomed)
            .and_then(|s| s.due(now))
        {
            self.send(reading);
        }
    }
}

impl Session {
    /// With several controllers, one that has not answered for half a
    /// lease (killed, frozen, cut off, or not yet past its handshake) is
    /// left for the next: the standby may lead by now, and the jobs here
    /// are not frozen if it answers before the lease runs out. With one,
    /// the connection waits for it, as its restart ends it anyway.
    fn leave_a_silent_controller(&mut self, now: Instant) {
        if addresses(&self.identity.controller).len() < 2 || self.link.is_none() {
            return;
        }
        let oldest = self.sent.values().min().copied();
        if oldest.is_some_and(|sent| now.saturating_duration_since(sent) >= self.lease / 2) {
            self.leave_for_the_next(&format!(
                "no answer for half a lease ({}): trying the other controllers",
                humantime::format_duration(self.lease / 2)
            ));
        }
    }
}

/// A number no earlier run of this agent used: the time, in microseconds.
fn incarnation() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_micros() as u64)
}
