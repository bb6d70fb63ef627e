//! What a transition's effects are: handlers and the core's helpers push
//! them, and one file applies them (`seam`): every row in the turn's
//! transaction at once, and everything that leaves the process — commands to a job's processes, thaws and
//! freezes, notifications, what an executor kept of an ended job — only
//! after that transaction has committed (`Daemon::commit`). A turn whose
//! commit fails drops them all (`Daemon::after_failed_commit`): nothing
//! leaves before its record is durable, by construction, so a crash or a
//! full disk between the two never leaves a signal sent for a change the
//! database does not hold.

use crate::exec::spec::StepCommand;
use crate::model::job::{Job, JobId, JobState};
use crate::net::message::ToNode;
use crate::net::server::ConnId;
use crate::proto::Channel;

use super::notifications::Notification;

/// What a transition changes in the records and sends out, in order.
#[derive(Debug, Default)]
pub(super) struct Effects {
    pub(super) rows: Vec<Row>,
    pub(super) out: Vec<Out>,
    /// The queue changed: a scheduling pass is due.
    pub(super) reschedule: bool,
    /// What the views show changed: their snapshot is stale.
    pub(super) changed: bool,
    /// Jobs queued, which may start before the next pass
    /// (`Daemon::quick_starts`).
    pub(super) queued: Vec<JobId>,
    /// The change is one the last pass's spare does not account for: no
    /// job starts before the next pass. New jobs and ended ones leave it
    /// as it is: it only ever holds less than is idle.
    pub(super) spare_stale: bool,
}

/// A change to the records, written in the turn's transaction.
#[derive(Debug)]
pub(super) enum Row {
    /// A new job (its id given: `db::next_job_id`), its payload and its
    /// first event.
    NewJob {
        job: Box<Job>,
        payload: Box<crate::db::Payload>,
    },
    /// A job whose row does not read back, marked FAILED at a start.
    Quarantined {
        bad: Box<crate::db::Unreadable>,
        time: i64,
    },
    /// A request applied, and the reply a retry of it gets.
    Request {
        key: String,
        uid: u32,
        time: i64,
        kind: String,
        reply: Box<crate::proto::Reply>,
    },
    /// A node's record, a GPU's drain, a token: the pool's and access's
    /// own rows.
    Pool(PoolRow),
    /// GPU use over the hour `hour` as sampled, or GPU-seconds idle while
    /// jobs waited (hour, GPU, seconds).
    GpuSamples {
        hour: i64,
        samples: Vec<crate::model::gpu::Sample>,
    },
    IdleWaiting(Vec<(i64, u32, u64)>),
    /// A job step begun (under its number), or its end.
    StepBegun(Box<crate::model::step::Step>),
    StepEnded {
        step: (JobId, u32, u32),
        exit: crate::model::job::ExitStatus,
        time: i64,
        usage: Option<crate::model::step::StepUsage>,
        gpu: Option<crate::model::step::StepGpu>,
    },
    /// A run stopped to make room, and how its stop went once it ended.
    Stopped(Box<crate::db::preemptions::Stopped>),
    StopSettled {
        job: JobId,
        restart: u32,
        exit: crate::db::preemptions::Exit,
    },
    /// Retention: a batch of an already summarised month's job rows
    /// deleted, or a month summarised (its rows to go next).
    Purge(Purge),
    /// A job's record as it is now.
    Job(Box<Job>),
    /// An entry in a job's history: a state's name, or another
    /// (`REQUEUED`, `THAWED`).
    Event {
        job: JobId,
        time: i64,
        name: String,
        detail: Option<String>,
    },
    /// An association's fair-share usage as charged.
    Usage {
        account: String,
        user: String,
        usage: crate::sched::fairshare::Usage,
    },
    /// How a preempted run's rerun went: whether it resumed from the
    /// work saved (`db::preemptions::settle_resume`).
    Resumed {
        job: JobId,
        stopped_restart: u32,
        resumed: bool,
    },
    /// An entry of the audit log.
    Audit {
        time: i64,
        actor: String,
        action: String,
        job: Option<JobId>,
        detail: String,
        channel: Channel,
    },
}

/// The pool's and access's own records.
#[derive(Debug)]
pub(super) enum PoolRow {
    /// Node `name` drained (`Some`) or back in service.
    NodeDrain {
        name: String,
        drain: Option<crate::report::node::Drain>,
        time: i64,
    },
    /// One GPU drained (`Some`) or back in service.
    GpuDrain {
        key: crate::db::DrainKey,
        drain: Option<crate::report::node::Drain>,
    },
    /// A node expected to join with the token of hash `token_hash`.
    Expected {
        name: String,
        token_hash: String,
        expires: i64,
        by: String,
        time: i64,
    },
    /// A node joined with, or renewed, the certificate of serial
    /// `certificate`.
    Joined {
        name: String,
        certificate: String,
    },
    Certificate {
        name: String,
        certificate: String,
    },
    /// A node said hello with its current certificate: the one before a
    /// renewal is good no more.
    CertificateUsed {
        name: String,
    },
    /// When a node was last heard in good standing.
    Good {
        name: String,
        time: i64,
    },
    /// What a node says of itself at its hello (JSON).
    Facts {
        name: String,
        facts: String,
    },
    Removed {
        name: String,
        time: i64,
    },
    /// Job `job` was submitted on node `node`.
    Submission {
        job: JobId,
        node: String,
    },
    /// A token made.
    Token(Box<crate::token::TokenRecord>),
    /// The valid tokens `jti` names (all of `user`'s when `None`), and
    /// every one made with them, revoked.
    Revoked {
        jti: Option<String>,
        user: Option<String>,
        time: i64,
    },
}

/// Retention's changes.
#[derive(Debug)]
pub(super) enum Purge {
    /// At most `limit` job rows that ended in [start, end) deleted.
    Batch { start: i64, end: i64, limit: u32 },
    /// The scripts and environments of at most `limit` finished jobs
    /// that ended before `before` let go (`keep_payloads_days`).
    Payloads { before: i64, limit: u32 },
    /// A month's jobs summarised; requests received before `cutoff`
    /// forgotten.
    Month {
        month: Box<crate::db::PurgedMonth>,
        summaries: std::collections::BTreeMap<(String, String), crate::report::usage::Summary>,
        cutoff: i64,
        time: i64,
    },
}

/// What leaves the process once the turn is committed.
#[derive(Debug, Clone)]
pub(super) enum Out {
    /// A command to a job's processes, on every node it runs on (as the
    /// job was when it was decided: its nodes).
    Command { job: Box<Job>, command: StepCommand },
    /// A job's processes frozen (suspended) or thawed, on each node.
    Freeze { job: Box<Job>, frozen: bool },
    /// A notification for `notify_command`.
    Notify(Box<Notification>),
    /// What the executor of `node` (`None`: this host's) kept of an
    /// ended job goes.
    Forget { job: JobId, node: Option<String> },
    /// A command to what runs of job `job` on node `node` alone (a part
    /// of a job over several nodes).
    PartCommand {
        job: JobId,
        node: String,
        command: StepCommand,
    },
    /// A frame to node `node`'s agent on its connection of the moment
    /// (a run to forget or clear, a thaw, a renewed certificate, an
    /// answer to a request it passed on).
    Frame { node: String, frame: Box<ToNode> },
    /// A frame on connection `conn`, which is no node's link (a join's
    /// certificate; a removed node told so), closed after it if `close`.
    Conn {
        conn: ConnId,
        body: Box<ToNode>,
        close: bool,
    },
    /// Node `name` left the pool: it is no longer one of the nodes, and
    /// its connection, if it has one, is told why and closed.
    Removed { name: String },
}

impl Effects {
    pub(super) fn row(&mut self, row: Row) {
        self.rows.push(row);
    }

    /// The queue changed (a pass is due), and so did what the views show.
    pub(super) fn queue_changed(&mut self) {
        self.reschedule = true;
        self.changed = true;
        self.spare_stale = true;
    }

    /// Job `id` was queued: a pass is due, and the job may start before
    /// it on what the last one left idle.
    pub(super) fn queue_grew(&mut self, id: JobId) {
        self.reschedule = true;
        self.changed = true;
        self.queued.push(id);
    }

    /// A job left the queue or ended: a pass is due, to hand out what it
    /// held; what the last pass left idle is still idle.
    pub(super) fn queue_shrank(&mut self) {
        self.reschedule = true;
        self.changed = true;
    }

    /// What the views show changed.
    pub(super) fn views_changed(&mut self) {
        self.changed = true;
    }

    /// An entry of the audit log: `actor` did `action` through `channel`.
    pub(super) fn audit(
        &mut self,
        (time, channel): (i64, Channel),
        actor: &str,
        action: &str,
        job: Option<JobId>,
        detail: &str,
    ) {
        self.rows.push(Row::Audit {
            time,
            actor: actor.to_string(),
            action: action.to_string(),
            job,
            detail: detail.to_string(),
            channel,
        });
    }

    pub(super) fn out(&mut self, out: Out) {
        self.out.push(out);
    }

    /// `job`'s record as it is now.
    pub(super) fn job(&mut self, job: &Job) {
        self.rows.push(Row::Job(Box::new(job.clone())));
    }

    /// An event in `job`'s history under `state`'s name.
    pub(super) fn event(&mut self, job: JobId, time: i64, state: JobState, detail: Option<&str>) {
        self.named_event(job, time, state.name(), detail);
    }

    /// An event in `job`'s history under another name (`REQUEUED`).
    pub(super) fn named_event(&mut self, job: JobId, time: i64, name: &str, detail: Option<&str>) {
        self.rows.push(Row::Event {
            job,
            time,
            name: name.to_string(),
            detail: detail.map(str::to_string),
        });
    }

    /// A command to `job`'s processes, after the commit.
    pub(super) fn command(&mut self, job: &Job, command: StepCommand) {
        self.out.push(Out::Command {
            job: Box::new(job.clone()),
            command,
        });
    }

    /// What the executors of `job`'s nodes kept of it goes, after the
    /// commit (a crash in between must find its exit record again, not
    /// requeue a job that ran).
    pub(super) fn forget(&mut self, job: &Job) {
        if job.node.is_none() {
            self.out.push(Out::Forget {
                job: job.id,
                node: None,
            });
        }
        for node in job.node_names() {
            self.out.push(Out::Forget {
                job: job.id,
                node: Some(node.to_string()),
            });
        }
    }

    /// A frame to node `node`'s agent, after the commit.
    pub(super) fn frame(&mut self, node: &str, frame: ToNode) {
        self.out.push(Out::Frame {
            node: node.to_string(),
            frame: Box::new(frame),
        });
    }

    /// The rows, for the tests and the simulation.
    #[cfg(test)]
    pub(super) fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// What leaves after the commit, for the tests and the simulation.
    #[cfg(test)]
    pub(super) fn outs(&self) -> &[Out] {
        &self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effects_keep_their_order_and_say_what_they_are() {
        let job = crate::model::job::example_job(7);
        let mut fx = Effects::default();
        fx.job(&job);
        fx.event(7, 10, JobState::Completing, Some("cancelled by alice"));
        fx.command(
            &job,
            StepCommand::Signal {
                signal: 10,
                target: Default::default(),
            },
        );
        fx.forget(&job);
        assert!(matches!(fx.rows()[0], Row::Job(_)));
        assert!(matches!(
            &fx.rows()[1],
            Row::Event { job: 7, time: 10, name, detail: Some(d) }
                if name == "COMPLETING" && d == "cancelled by alice"
        ));
        assert!(matches!(fx.outs()[0], Out::Command { .. }));
        assert!(matches!(fx.outs()[1], Out::Forget { job: 7, .. }));
    }
}
