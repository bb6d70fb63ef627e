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
}

/// A change to the records, written in the turn's transaction.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Row {
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
}

impl Effects {
    pub(super) fn row(&mut self, row: Row) {
        self.rows.push(row);
    }

    /// The queue changed (a pass is due), and so did what the views show.
    pub(super) fn queue_changed(&mut self) {
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
        assert_eq!(
            fx.rows()[1],
            Row::Event {
                job: 7,
                time: 10,
                name: "COMPLETING".into(),
                detail: Some("cancelled by alice".into())
            }
        );
        assert!(matches!(fx.outs()[0], Out::Command { .. }));
        assert!(matches!(fx.outs()[1], Out::Forget { job: 7, .. }));
    }
}
