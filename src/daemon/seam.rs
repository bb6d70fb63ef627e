//! The one seam through which effects leave the core (`effects` says
//! what they are): `tx` opens the turn's transaction; `apply` writes
//! every row in it (no other daemon file writes to the database);
//! `commit` makes it durable and only then calls `send_out`, which sends
//! what leaves the process; a turn whose commit fails drops it.
//! `handle_with` runs a handler over the core with what it may read, and
//! applies what it pushed.

use rusqlite::Connection;

use crate::db;
use crate::exec::executor::{Adoption, ImageStatus, Launch, Started};
use crate::exec::spec::StepCommand;
use crate::exec::ExecError;
use crate::model::job::{Job, JobId};
use crate::net::frame::encode;
use crate::net::message::{Envelope, ToNode, PROTOCOL};
use crate::net::remote::Link;
use crate::net::server::ConnId;
use crate::proto::Reply;

use super::effects::{Effects, Out, PoolRow, Purge, Row};
use super::error::{DaemonError, Refusal};
use super::nodes::Node;
use super::reads::{Edge, Reads};
use super::state::{Core, Daemon};

impl Daemon {
    /// The open transaction, begun on first use in a loop turn.
    pub(super) fn tx(&mut self) -> Result<&Connection, DaemonError> {
        self.fence();
        if !self.store.in_transaction {
            self.store.db.execute_batch("BEGIN IMMEDIATE")?;
            self.store.in_transaction = true;
        }
        Ok(&self.store.db)
    }

    /// Commits the turn's transaction, then sends what it left to send:
    /// nothing leaves before its record is durable (`effects`).
    pub(super) fn commit(&mut self) -> Result<(), DaemonError> {
        self.fence();
        if self.store.in_transaction {
            self.store.db.execute_batch("COMMIT")?;
            self.store.in_transaction = false;
        }
        if let Some(pool) = &mut self.pool {
            pool.freezes_committed = pool.freezes.clone();
            pool.taken.clear();
        }
        self.send_out();
        Ok(())
    }

    /// With `[standby]`, stops the process before anything is written
    /// or sent once this controller's lease is no longer proven: another
    /// may lead by now (`leading`). The event loop asks too before it
    /// takes in what came: a controller that runs again after a stall
    /// (frozen, its machine suspended) stops before it handles, or logs,
    /// what came meanwhile, not only at its next write.
    pub(super) fn fence(&self) {
        if let Some(leadership) = &self.store.leadership {
            if !leadership.may_act() {
                leadership.step_down("its lease was not proven in time");
            }
        }
    }

    /// Applies `fx`: its rows now, in the turn's transaction; what leaves
    /// the process once that is committed.
    pub(super) fn apply(&mut self, fx: Effects) -> Result<(), DaemonError> {
        if fx.reschedule {
            self.reschedule = true;
        }
        if fx.spare_stale {
            self.between.spare = None;
        }
        self.between.queued.extend(fx.queued);
        if fx.changed {
            self.snapshot = None;
        }
        for row in fx.rows {
            // A node's drain is kept with the node too (what the pass and
            // the views read); a failed commit reloads it as recorded.
            if let Row::Pool(PoolRow::NodeDrain { name, drain, .. }) = &row {
                let drain = drain.clone();
                self.nodes.change(name, |node| node.drain = drain);
            }
            write(self.tx()?, row)?;
        }
        self.turn.out.extend(fx.out);
        #[cfg(test)]
        if self.turn.send_before_commit {
            self.send_out();
        }
        Ok(())
    }

    /// Sends what the committed turn left to send.
    pub(super) fn send_out(&mut self) {
        for out in std::mem::take(&mut self.turn.out) {
            match out {
                Out::Command { job, command } => self.deliver(&job, &command),
                Out::Freeze { job, frozen } => {
                    if let Err(e) = self.set_frozen_on_nodes(&job, frozen) {
                        tracing::error!(target: "ysched::exec", "{e}");
                        if frozen {
                            self.turn.unfreezable.push((job.id, e.0));
                        }
                    }
                }
                Out::Notify(n) => self.notifier.send(*n),
                Out::Forget { job, node } => {
                    if let Some(node) = self.nodes.named_or_local(node.as_deref()) {
                        node.executor.forget(job);
                    }
                }
                Out::Frame { node, frame } => self.send_frame(&node, *frame),
                Out::PartCommand { job, node, command } => self.command_part(job, &node, &command),
                Out::Conn { conn, body, close } => self.send_on(conn, *body, close),
                Out::Removed { name } => self.drop_node(&name),
            }
        }
    }

    /// Node `name`, whose removal is committed, is no longer one of the
    /// nodes; its connection is told why and closed.
    fn drop_node(&mut self, name: &str) {
        let Some(node) = self.nodes.remove(name) else {
            return;
        };
        let Some((_, conn)) = node.remote.and_then(|r| r.link.state().conn.clone()) else {
            return;
        };
        if let Some(pool) = &mut self.pool {
            pool.conns.remove(&conn);
        }
        let reason = format!("node {name} was removed from the pool");
        tracing::warn!(target: "ysched::pool", "connection refused: {reason}");
        self.send_on(conn, ToNode::Refused { reason }, true);
    }

    /// Delivers `command` to what runs of job `id` on node `name`.
    fn command_part(&self, id: JobId, name: &str, command: &StepCommand) {
        let Some(node) = self.nodes.named(name) else {
            return;
        };
        match node.executor.command(id, command) {
            Ok(()) | Err(ExecError::Gone(_)) => {}
            Err(e) => {
                tracing::warn!(target: "ysched::exec", "job {id}: cannot reach its part on {name}: {e}")
            }
        }
    }

    /// Freezes or thaws `job`'s processes on each of its nodes.
    fn set_frozen_on_nodes(
        &self,
        job: &crate::model::job::Job,
        frozen: bool,
    ) -> Result<(), Refusal> {
        let (id, peers) = (job.id, &job.peers);
        let mut frozen_or_not = match self.nodes.of(job) {
            Some(node) => node.executor.set_frozen(id, frozen),
            None => Err(ExecError::Unreachable(format!(
                "the node job {id} runs on is not in the pool"
            ))),
        };
        for peer in peers {
            let done = match self.nodes.named(peer) {
                Some(node) => node.executor.set_frozen(id, frozen),
                None => Err(ExecError::Unreachable(format!(
                    "its node {peer} is not in the pool"
                ))),
            };
            frozen_or_not = frozen_or_not.and(done);
        }
        frozen_or_not.map_err(|e| {
            let verb = if frozen { "suspend" } else { "resume" };
            Refusal(format!("cannot {verb} job {id}: {e}"))
        })
    }

    /// Sends `frame` to node `name`'s agent on its connection of the
    /// moment. One that is not connected asks again, or says again what
    /// it holds, when it is back.
    fn send_frame(&self, name: &str, frame: ToNode) {
        let Some(remote) = self.nodes.named(name).and_then(|n| n.remote.as_ref()) else {
            return;
        };
        if let Err(e) = remote.link.send(name, frame) {
            tracing::debug!(target: "ysched::pool", "a frame for node {name} is dropped: {e}");
        }
    }

    /// Sends `body` on connection `conn`, which is no node's link; closes
    /// it after if `close`.
    fn send_on(&self, conn: ConnId, body: ToNode, close: bool) {
        let Some(pool) = &self.pool else { return };
        let envelope = Envelope {
            protocol: PROTOCOL,
            epoch: pool.epoch,
            incarnation: 0,
            body,
        };
        let Ok(frame) = encode(&envelope) else { return };
        if close {
            pool.server.close(conn, Some(frame));
        } else {
            pool.server.send(conn, frame);
        }
    }

    /// Sends node `node` the answer to its request `name` (after the
    /// commit). A node gone since asks again when it is back.
    pub(super) fn answer_node(&self, node: &str, name: String, reply: Reply) {
        let answer = ToNode::Answer {
            name,
            reply: Box::new(reply),
        };
        self.send_frame(node, answer);
    }

    /// Answers the link protocol itself at once (`Welcome`,
    /// `HeartbeatAck`): such frames say the controller hears the node and
    /// record nothing, so they need not wait for a commit (and a node
    /// must not wait a failed turn's pause for its lease). A deposed
    /// leader sends none: its answer would renew a node's lease.
    pub(super) fn answer_link(&self, name: &str, link: &Link, frame: ToNode) {
        debug_assert!(matches!(
            frame,
            ToNode::Welcome { .. } | ToNode::HeartbeatAck { .. }
        ));
        self.fence();
        let _ = link.send(name, frame);
    }

    /// Records an action in the audit table (committed with what it did)
    /// and the log.
    pub(super) fn audit(
        &mut self,
        now: i64,
        actor: &str,
        action: &str,
        job: Option<JobId>,
        detail: &str,
    ) -> Result<(), DaemonError> {
        let mut fx = Effects::default();
        fx.audit((now, self.turn.channel), actor, action, job, detail);
        self.apply(fx)
    }

    /// Writes `row` through the seam, in the turn's transaction.
    pub(super) fn write(&mut self, row: Row) -> Result<(), DaemonError> {
        let mut fx = Effects::default();
        fx.row(row);
        self.apply(fx)
    }

    /// Effects that only leave the process (`fx` with no rows), queued
    /// for after this turn's commit.
    pub(super) fn after_commit(&mut self, fx: Effects) {
        debug_assert!(fx.rows.is_empty());
        self.turn.out.extend(fx.out);
    }

    /// Delivers `command` to `job`'s processes on its nodes.
    fn deliver(&self, job: &Job, command: &StepCommand) {
        if let Some(for_parts) = super::peers::for_parts(command) {
            for peer in &job.peers {
                self.command_part(job.id, peer, &for_parts);
            }
        }
        let node = self.nodes.named_or_local(job.node.as_deref());
        let sent = match node {
            Some(node) => node.executor.command(job.id, command),
            None => Err(ExecError::Unreachable(format!(
                "the node job {} runs on is not in the pool",
                job.id
            ))),
        };
        match sent {
            Ok(()) => {}
            // It ended already; its exit event is on the way.
            Err(ExecError::Gone(_)) => {}
            Err(e) => tracing::error!(target: "ysched::exec", "job {}: {e}", job.id),
        }
    }
}

impl Daemon {
    /// Runs `handler` over the core, with this controller's database and
    /// nodes to read, and applies what it pushed.
    pub(super) fn handle_with<T>(
        &mut self,
        handler: impl FnOnce(&mut Core, &dyn Reads, &mut Effects) -> Result<T, DaemonError>,
    ) -> Result<T, DaemonError> {
        let mut fx = Effects::default();
        let reads = Edge {
            db: &self.store.db,
            nodes: &self.nodes,
            spool: &self.spool,
            pool: self.pool.as_ref(),
            listen: self.core.config.pool.listen,
        };
        let answer = handler(&mut self.core, &reads, &mut fx)?;
        self.apply(fx)?;
        Ok(answer)
    }
}

/// The executors: what the edge asks of the processes on the nodes. What
/// a run recorded, and the confinement a run gets, are read through
/// `Reads`; commands, freezes, thaws and forgetting leave with the
/// turn's commit (`send_out`); these are the rest, each called where its
/// order says: a launch after the commit that records the run started
/// (`launch_started`), an adoption at a start or a node's hello, the
/// remains of a run whose supervisor died cleared before its end is
/// recorded (its GPUs are not free until they are), and images made
/// present before a start.
impl Daemon {
    /// Starts a run's supervisor on node `name` (`None`: this host);
    /// `None` when that node is not in the pool.
    pub(super) fn launch_on(
        &mut self,
        name: Option<&str>,
        launch: Launch<'_>,
    ) -> Option<Result<Started, ExecError>> {
        let node = self.nodes.named_or_local_mut(name)?;
        Some(node.executor.launch(launch))
    }

    /// Finds job `id`'s supervisor on node `name` again after a restart or
    /// a node's hello; `None` when that node is not in the pool.
    pub(super) fn adopt_on(&mut self, name: Option<&str>, id: JobId) -> Option<Adoption> {
        let node = self.nodes.named_or_local_mut(name)?;
        Some(node.executor.adopt(id))
    }

    /// Ends what is left of `job`'s run, whose supervisor is gone, on its
    /// node; how many processes were left.
    pub(super) fn clear_remains_of(&self, job: &Job) -> usize {
        self.nodes
            .of(job)
            .map_or(0, |node| node.executor.clear_remains(job.id))
    }

    /// At a start: what runs no longer active left behind on each node
    /// (their supervisor killed with the controller, say) is cleared.
    pub(super) fn clear_leftovers(&self) {
        for node in self.nodes.iter() {
            for id in node.executor.leftovers() {
                let holds = |j: &Job| j.state.holds_gpus();
                if !self.core.jobs.get(&id).is_some_and(|j| holds(j)) {
                    let left = node.executor.clear_remains(id);
                    tracing::info!(target: "ysched::exec", "cleared what job {id} left behind on {} ({left} processes)", node.name());
                }
            }
        }
    }
}

/// Where container image `reference` stands on `node`; a pull starts
/// there when it is needed (once per image, however many jobs want it).
pub(super) fn ensure_image(node: &Node, reference: &str) -> ImageStatus {
    node.executor.ensure_image(reference)
}

/// Writes `row` in the turn's transaction `tx`.
fn write(tx: &Connection, row: Row) -> Result<(), DaemonError> {
    match row {
        Row::Job(job) => db::update_job(tx, &job)?,
        Row::NewJob { job, payload } => {
            db::insert_job(tx, &job, &payload)?;
        }
        Row::Quarantined { bad, time } => db::quarantine_job(tx, &bad, time)?,
        Row::Usage {
            account,
            user,
            usage,
        } => db::save_usage(tx, &account, &user, &usage)?,
        Row::Resumed {
            job,
            stopped_restart,
            resumed,
        } => db::preemptions::settle_resume(tx, job, stopped_restart, resumed)?,
        Row::Event {
            job,
            time,
            name,
            detail,
        } => db::add_event_named(tx, job, time, &name, detail.as_deref())?,
        Row::Audit {
            time,
            actor,
            action,
            job,
            detail,
            channel,
        } => {
            db::add_audit(tx, time, &actor, &action, job, &detail, channel)?;
            tracing::info!(target: "ysched::audit", "{actor} {action} ({}): {detail}", channel.as_str());
        }
        Row::Request {
            key,
            uid,
            time,
            kind,
            reply,
        } => db::record_request(tx, &key, uid, time, &kind, &reply)?,
        Row::Pool(row) => write_pool(tx, row)?,
        Row::GpuSamples { hour, samples } => db::add_gpu_samples(tx, hour, &samples)?,
        Row::IdleWaiting(owed) => db::add_idle_waiting(tx, &owed)?,
        Row::StepBegun(step) => db::begin_step(tx, &step)?,
        Row::StepEnded {
            step,
            exit,
            time,
            usage,
            gpu,
        } => {
            db::end_step(tx, step, (exit, usage, gpu), time)?;
        }
        Row::Stopped(stopped) => db::preemptions::record(tx, &stopped)?,
        Row::StopSettled { job, restart, exit } => {
            db::preemptions::settle_exit(tx, job, restart, &exit)?
        }
        Row::Purge(Purge::Batch { start, end, limit }) => {
            db::purge_jobs(tx, start, end, limit)?;
        }
        Row::Purge(Purge::Payloads { before, limit }) => {
            db::let_go_payloads(tx, before, limit)?;
        }
        Row::Purge(Purge::Month {
            month,
            summaries,
            cutoff,
            time,
        }) => {
            db::save_month_summary(tx, &month, &summaries, time)?;
            db::forget_requests_before(tx, cutoff)?;
        }
    }
    Ok(())
}

/// Writes one of the pool's or access's rows.
fn write_pool(tx: &Connection, row: PoolRow) -> Result<(), DaemonError> {
    match row {
        PoolRow::NodeDrain { name, drain, time } => {
            db::set_node_drain(tx, &name, drain.as_ref(), time)?
        }
        PoolRow::GpuDrain { key, drain } => match drain {
            Some(drain) => db::set_drain(tx, &key, &drain)?,
            None => {
                db::clear_drain(tx, &key)?;
            }
        },
        PoolRow::Expected {
            name,
            token_hash,
            expires,
            by,
            time,
        } => db::expect_node(tx, &name, &token_hash, expires, &by, time)?,
        PoolRow::Joined { name, certificate } => db::node_joined(tx, &name, &certificate)?,
        PoolRow::Certificate { name, certificate } => {
            db::set_node_certificate(tx, &name, &certificate)?
        }
        PoolRow::CertificateUsed { name } => db::certificate_used(tx, &name)?,
        PoolRow::Facts { name, facts } => db::set_node_facts(tx, &name, &facts)?,
        PoolRow::Good { name, time } => db::set_node_good(tx, &name, time)?,
        PoolRow::Removed { name, time } => db::remove_node(tx, &name, time)?,
        PoolRow::Submission { job, node } => db::record_node_submission(tx, job, &node)?,
        PoolRow::Token(token) => db::record_token(tx, &token)?,
        PoolRow::Revoked { jti, user, time } => {
            db::revoke_tokens(tx, jti.as_deref(), user.as_deref(), time)?;
        }
    }
    Ok(())
}
