//! The pool's network and its nodes' agents, simulated. A remote node's
//! runs are kept by the agent's own bookkeeping (`net::runs::Runs`,
//! over the node's simulated executor, on the simulated clock), driven
//! as the agent's session drives it (`agent::session`): a hello at each
//! connection with every run the node holds, a heartbeat every third of
//! the lease, the lease renewed from each heartbeat the controller
//! answers, the fence when it runs out (runs frozen, none started), the
//! controller's orders carried out, each end reported, and a new
//! connection after a break, backing off. Between the agents and the
//! controller's real pool code (`daemon::pool`), a connection carries
//! frames in order, each after a delay. The faults: a connection broken
//! (both ends learn; what was on its way is lost), one direction or both
//! stalled for minutes (frames held, then delivered late, as TCP does),
//! an agent restarted (a new incarnation that finds its runs again), and
//! a controller's crash, which closes every connection.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::model::job::JobId;
use crate::net::frame::{decode, encode};
use crate::net::message::{Envelope, FromNode, ToNode, PROTOCOL};
use crate::net::pki::Subject;
use crate::net::runs::{AgentClock, Runs};
use crate::net::server::{ConnId, Recorder, Sent, ServerEvent};

use super::node::SimNode;

/// The lease of the simulated pool: long enough that a step (at most a
/// minute) never looks like a stalled controller (half a lease).
pub(super) const LEASE_SECS: i64 = 240;

/// One connection between an agent and the controller.
struct Connection {
    node: usize,
    /// Frames on their way to the controller, and to the node, each with
    /// when it arrives: a connection is a stream, so in order.
    up: VecDeque<(i64, Vec<u8>)>,
    down: VecDeque<(i64, Vec<u8>)>,
    /// Until when what the node sends is held.
    up_stalled_until: i64,
    /// The controller closed it: the node learns once what was sent
    /// before has arrived.
    closing: bool,
}

/// One remote node's agent.
pub(super) struct SimAgent {
    pub(super) node: SimNode,
    serial: String,
    runs: Runs,
    /// The runs that ended here, as the node's supervisors tell its agent.
    exits: Arc<Mutex<Vec<JobId>>>,
    clock: AgentClock,
    conn: Option<ConnId>,
    welcomed: bool,
    incarnation: u64,
    epoch: u64,
    lease: i64,
    lease_until: i64,
    fenced: bool,
    seq: u64,
    /// When each heartbeat not yet answered was sent.
    sent: BTreeMap<u64, i64>,
    next_heartbeat: i64,
    next_connect: i64,
    backoff: i64,
    frozen_limit: Duration,
    /// Why the controller refused this node, if it did: a node of the
    /// pool is never refused.
    pub(super) refused: Option<String>,
}

impl SimAgent {
    pub(super) fn new(
        node: SimNode,
        exits: Arc<Mutex<Vec<JobId>>>,
        clock: AgentClock,
        incarnation: u64,
    ) -> SimAgent {
        let serial = format!("{}-certificate", node.facts.name);
        let runs = Runs::adopt(Box::new(node.executor()), Vec::new()).on_clock(clock.clone());
        let now = clock.wall();
        SimAgent {
            node,
            serial,
            runs,
            exits,
            clock,
            conn: None,
            welcomed: false,
            incarnation,
            epoch: 0,
            lease: LEASE_SECS,
            // A new agent holds no lease until the controller answers.
            lease_until: now,
            fenced: false,
            seq: 0,
            sent: BTreeMap::new(),
            next_heartbeat: now,
            next_connect: now,
            backoff: 1,
            frozen_limit: crate::config::DEFAULT_FROZEN_LIMIT,
            refused: None,
        }
    }

    /// The serial of the certificate the node presents.
    pub(super) fn serial(&self) -> &str {
        &self.serial
    }

    /// The agent restarts (`ysnoded` killed and started again): a new
    /// incarnation that finds every run again from what the node holds,
    /// keeping what is left of its lease (the supervisors' file).
    pub(super) fn restart(&mut self, incarnation: u64) {
        let node = self.node.state();
        let mut recorded: Vec<(JobId, u32)> = node
            .runs
            .iter()
            .filter(|r| r.ended.is_none() || node.exits.contains_key(&r.job))
            .map(|r| (r.job, r.restart))
            .collect();
        drop(node);
        // Each job's latest run: the one its directory holds.
        recorded.sort_unstable_by_key(|&(job, restart)| (job, std::cmp::Reverse(restart)));
        recorded.dedup_by_key(|(job, _)| *job);
        self.runs =
            Runs::adopt(Box::new(self.node.executor()), recorded).on_clock(self.clock.clone());
        self.incarnation = incarnation;
        self.conn = None;
        self.welcomed = false;
        self.fenced = false;
        self.sent.clear();
        self.next_connect = self.clock.wall();
    }

    /// `body`'s frame, as the server hands it on: without its length.
    fn envelope(&self, body: FromNode) -> Vec<u8> {
        let frame = encode(&Envelope {
            protocol: PROTOCOL,
            epoch: self.epoch,
            incarnation: self.incarnation,
            body,
        });
        frame.map(|f| f[4..].to_vec()).unwrap_or_default()
    }

    /// Its connection broke: a new one after the back-off.
    fn disconnected(&mut self, now: i64) {
        self.conn = None;
        self.welcomed = false;
        self.next_connect = now + self.backoff;
        self.backoff = (self.backoff * 2).min(self.lease / 3);
    }

    /// Whether it would connect now.
    fn connects(&self, now: i64) -> bool {
        self.conn.is_none() && self.refused.is_none() && now >= self.next_connect
    }

    /// Connected as `conn`: its hello, which counts as a heartbeat.
    fn connected(&mut self, conn: ConnId, now: i64) -> Vec<u8> {
        self.conn = Some(conn);
        self.backoff = 1;
        self.seq += 1;
        self.sent.clear();
        self.sent.insert(self.seq, now);
        // What the hello says of its runs' freezes is the fence's.
        self.fence_if_due(now);
        let hello = self.runs.hello(env!("CARGO_PKG_VERSION"), self.seq);
        self.envelope(hello)
    }

    /// The fence, once the lease has run out.
    fn fence_if_due(&mut self, now: i64) {
        if now >= self.lease_until && !self.fenced {
            let lapsed = (now - self.lease_until).max(0) as u64;
            self.runs.fence(Duration::from_secs(lapsed));
            self.fenced = true;
        }
    }

    /// What is due at `now`: the ends of runs, the fence when the lease
    /// has run out, runs frozen too long ended, the heartbeat.
    fn tick(&mut self, now: i64) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let ended: Vec<JobId> =
            std::mem::take(&mut *self.exits.lock().unwrap_or_else(|p| p.into_inner()));
        for id in ended {
            if let Some(report) = self.runs.exited(id) {
                out.push(report);
            }
        }
        self.fence_if_due(now);
        self.runs.end_frozen_beyond(self.frozen_limit);
        if self.welcomed && now >= self.next_heartbeat {
            self.seq += 1;
            self.sent.insert(self.seq, now);
            self.next_heartbeat = now + self.lease / 3;
            out.push(FromNode::Heartbeat {
                seq: self.seq,
                running: self.runs.running(),
                fenced: self.fenced,
                frozen: self.runs.frozen_runs(),
                clock: now,
                taken_over: self.runs.taken_over(self.seq),
            });
        }
        if self.conn.is_none() {
            // Told again at the next hello.
            return Vec::new();
        }
        out.into_iter().map(|m| self.envelope(m)).collect()
    }

    /// Carries out what the controller sent; what to answer.
    fn on_frame(&mut self, frame: &[u8], now: i64) -> Vec<Vec<u8>> {
        let Ok(envelope) = decode::<Envelope<ToNode>>(frame) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        match envelope.body {
            ToNode::Refused { reason } => self.refused = Some(reason),
            ToNode::Welcome {
                lease_ms,
                frozen_limit_ms,
                ..
            } => {
                self.epoch = envelope.epoch;
                self.lease = (lease_ms / 1_000).max(1) as i64;
                if frozen_limit_ms > 0 {
                    self.frozen_limit = Duration::from_millis(frozen_limit_ms)
                        .max(Duration::from_secs(self.lease as u64));
                }
                self.welcomed = true;
                self.renewed(self.seq, now);
            }
            ToNode::HeartbeatAck { seq } if envelope.epoch == self.epoch => self.renewed(seq, now),
            ToNode::Joined { .. }
            | ToNode::HeartbeatAck { .. }
            | ToNode::Renewed { .. }
            | ToNode::Answer { .. }
            | ToNode::AnswerRows { .. }
            | ToNode::PullImage { .. } => {}
            order if envelope.epoch == self.epoch => out = self.runs.order(order, self.fenced),
            // From a controller since replaced.
            _ => {}
        }
        out.into_iter().map(|m| self.envelope(m)).collect()
    }

    /// The controller answered heartbeat `seq`: the lease runs from when
    /// it was sent.
    fn renewed(&mut self, seq: u64, now: i64) {
        self.runs.heard(seq);
        if let Some(sent) = self.sent.remove(&seq) {
            self.lease_until = self.lease_until.max(sent + self.lease);
            self.sent.retain(|s, _| *s > seq);
        }
        if self.fenced && now < self.lease_until {
            self.fenced = false;
        }
    }
}

/// The connections, and the agents at their node ends.
pub(super) struct Network {
    conns: BTreeMap<ConnId, Connection>,
    next_conn: ConnId,
    pub(super) agents: Vec<SimAgent>,
    /// What the controller of the moment sends onto the network.
    pub(super) recorder: Option<Recorder>,
    /// Controllers and agents started so far: each one's epoch or
    /// incarnation is its number.
    pub(super) starts: u64,
    /// Each node's index in the controller's own numbering of the pool,
    /// for its address.
    first_node: usize,
}

impl Network {
    pub(super) fn new(agents: Vec<SimAgent>, first_node: usize) -> Network {
        Network {
            conns: BTreeMap::new(),
            next_conn: 1,
            starts: agents.len() as u64 + 1,
            agents,
            recorder: None,
            first_node,
        }
    }

    /// When a frame sent now on `conn` arrives: after `delay`, after
    /// those before it, and not before a stall ends.
    fn arrival(queue: &VecDeque<(i64, Vec<u8>)>, now: i64, stalled_until: i64) -> i64 {
        let last = queue.back().map_or(now, |(at, _)| *at);
        now.max(last).max(stalled_until)
    }

    fn send_up(&mut self, conn: ConnId, frame: Vec<u8>, now: i64) {
        if let Some(c) = self.conns.get_mut(&conn) {
            let at = Self::arrival(&c.up, now, c.up_stalled_until);
            c.up.push_back((at, frame));
        }
    }

    /// Takes what the controller sent (`recorder`) onto the connections.
    pub(super) fn take_sent(&mut self, now: i64) {
        let sent = self
            .recorder
            .as_ref()
            .map(Recorder::sent)
            .unwrap_or_default();
        for sent in sent {
            let (conn, frame, close) = match sent {
                Sent::Frame(conn, frame) => (conn, Some(frame), false),
                Sent::Close(conn, last) => (conn, last, true),
            };
            let Some(c) = self.conns.get_mut(&conn) else {
                continue;
            };
            // What the agent's reader hands on: the frame's body.
            if let Some(frame) = frame.and_then(|f| f.get(4..).map(<[u8]>::to_vec)) {
                let at = Self::arrival(&c.down, now, now);
                c.down.push_back((at, frame));
            }
            c.closing |= close;
        }
    }

    /// Moves what has arrived by `now`: frames to the controller become
    /// its pool's events; frames to an agent are carried out and
    /// answered; agents connect and tick. Whether anything moved.
    pub(super) fn pump(&mut self, now: i64, events: &mut Vec<ServerEvent>) -> bool {
        let mut moved = false;
        for index in 0..self.agents.len() {
            if self.agents[index].connects(now) {
                let conn = self.next_conn;
                self.next_conn += 1;
                self.conns.insert(
                    conn,
                    Connection {
                        node: index,
                        up: VecDeque::new(),
                        down: VecDeque::new(),
                        up_stalled_until: 0,
                        closing: false,
                    },
                );
                let hello = self.agents[index].connected(conn, now);
                self.send_up(conn, hello, now);
                moved = true;
            }
            let Some(conn) = self.agents[index].conn else {
                continue;
            };
            for frame in self.agents[index].tick(now) {
                self.send_up(conn, frame, now);
                moved = true;
            }
        }
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in ids {
            moved |= self.deliver(id, now, events);
        }
        moved
    }

    /// Delivers what has arrived on connection `id` by `now`.
    fn deliver(&mut self, id: ConnId, now: i64, events: &mut Vec<ServerEvent>) -> bool {
        let mut moved = false;
        let Some(c) = self.conns.get_mut(&id) else {
            return false;
        };
        let index = c.node;
        let mut up = Vec::new();
        while c.up.front().is_some_and(|(at, _)| *at <= now) {
            up.extend(c.up.pop_front().map(|(_, f)| f));
        }
        let mut down = Vec::new();
        while c.down.front().is_some_and(|(at, _)| *at <= now) {
            down.extend(c.down.pop_front().map(|(_, f)| f));
        }
        let closed = c.closing && c.down.is_empty();
        for body in up {
            tracing::trace!(target: "ysched::simulation", "t={now} to the controller on {id}: {}", String::from_utf8_lossy(&body));
            events.push(ServerEvent::Frame {
                conn: id,
                peer: Some(self.subject(index)),
                address: Some(self.address(index)),
                body,
            });
            moved = true;
        }
        for frame in down {
            tracing::trace!(target: "ysched::simulation", "t={now} to the node on {id}: {}", String::from_utf8_lossy(&frame));
            moved = true;
            // A frame on a connection the agent has since left is lost.
            if self.agents[index].conn != Some(id) {
                continue;
            }
            let answers = self.agents[index].on_frame(&frame, now);
            for answer in answers {
                self.send_up(id, answer, now);
            }
        }
        if closed {
            self.break_conn(id, now, events);
            moved = true;
        }
        moved
    }

    fn subject(&self, index: usize) -> Subject {
        let agent = &self.agents[index];
        Subject {
            name: agent.node.facts.name.clone(),
            serial: agent.serial.clone(),
            not_before: 0,
            not_after: i64::MAX,
        }
    }

    fn address(&self, index: usize) -> std::net::SocketAddr {
        let last = (self.first_node + index + 1) as u8;
        std::net::SocketAddr::from(([10, 0, 0, last], 40_000))
    }

    /// Connection `id` breaks: what was on its way is lost, the
    /// controller hears it closed, the agent connects again.
    pub(super) fn break_conn(&mut self, id: ConnId, now: i64, events: &mut Vec<ServerEvent>) {
        let Some(c) = self.conns.remove(&id) else {
            return;
        };
        events.push(ServerEvent::Closed {
            conn: id,
            why: "the connection broke".into(),
        });
        let agent = &mut self.agents[c.node];
        if agent.conn == Some(id) {
            agent.disconnected(now);
        }
    }

    /// The next moment after `now` an agent has something to do: its
    /// lease runs out, or its heartbeat is due.
    pub(super) fn next_deadline(&self, now: i64) -> Option<i64> {
        self.agents
            .iter()
            .flat_map(|a| {
                let fence = (!a.fenced).then_some(a.lease_until);
                let beat = a.welcomed.then_some(a.next_heartbeat);
                [fence, beat]
            })
            .flatten()
            .filter(|&t| t > now)
            .min()
    }

    /// Node `index`'s connection of the moment, if it has one.
    pub(super) fn conn_of(&self, index: usize) -> Option<ConnId> {
        self.agents[index].conn
    }

    /// Holds what node `index`'s connection carries to the controller
    /// until `until`.
    pub(super) fn stall(&mut self, index: usize, until: i64) {
        let Some(c) = self.agents[index]
            .conn
            .and_then(|id| self.conns.get_mut(&id))
        else {
            return;
        };
        c.up_stalled_until = c.up_stalled_until.max(until);
        for (at, _) in c.up.iter_mut() {
            *at = (*at).max(until);
        }
    }

    /// The controller died: every connection with it is gone, and the
    /// agents connect to the next one.
    pub(super) fn controller_died(&mut self, now: i64) {
        for (_, c) in std::mem::take(&mut self.conns) {
            let agent = &mut self.agents[c.node];
            agent.conn = None;
            agent.welcomed = false;
            agent.next_connect = now;
        }
    }

    /// Agent `index` restarts with incarnation `incarnation`: its
    /// connection breaks.
    pub(super) fn restart_agent(
        &mut self,
        index: usize,
        incarnation: u64,
        now: i64,
        events: &mut Vec<ServerEvent>,
    ) {
        if let Some(id) = self.agents[index].conn {
            self.break_conn(id, now, events);
        }
        self.agents[index].restart(incarnation);
    }
}
