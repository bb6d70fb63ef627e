//! Jobs over several nodes. The batch script runs on the first node; on
//! each of the others (its peers) the job holds a part of its own: a run
//! whose cgroup has that node's share of GPUs, CPUs and memory, and whose
//! one process ignores signals and waits (Slurm's extern step), so that
//! `srun`'s tasks there run inside it. The job is over when every part
//! is: the batch script's end decides its state; a part that ends before
//! the batch script does, or a node lost under it, ends the whole job
//! NODE_FAIL (requeued unless it asked not to be). Until every part has
//! ended, the job keeps all its GPUs, so that nothing of it still runs
//! where the next job starts.

use crate::exec::executor::Launch;
use crate::exec::spec::{SignalTarget, StepCommand};
use crate::exec::ExecError;
use crate::model::job::{Job, JobId, JobState};

use super::effects::Effects;
use super::error::DaemonError;
use super::reads::Reads;
use super::run_link::RunLink;
use super::state::Daemon;

/// The script sent with a peer's part: its supervisor runs the task
/// server (`ysstepd --serve-tasks`) instead, which ignores the signals
/// meant for tasks (and SIGTERM: the supervisor ends it once the tasks
/// are gone).
pub(super) const HOLDER_SCRIPT: &str =
    "#!/bin/sh\n# ysstepd runs the task server of this part of the job, not this script.\nexit 1\n";

/// How a part of a job stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PartState {
    Running,
    Ended,
    /// Its node was lost, or left the pool: nothing of it runs there.
    Lost,
}

/// Job `job`'s part on its `index`th node, with where each of its nodes
/// is reached and this run's step link (for a job over several, or an
/// interactive allocation).
pub(super) fn placed_part(
    reads: &dyn Reads,
    job: &Job,
    index: usize,
    link: &RunLink,
) -> Option<(Job, crate::model::tasks::NodePart)> {
    let (share, mut part) = job.part(index)?;
    if part.nodes.len() > 1 || job.interactive {
        part.addresses = part.nodes.iter().map(|n| reads.node_address(n)).collect();
        part.step_key = link.key.clone();
        part.ports = link.ports.clone();
    }
    Some((share, part))
}

impl Daemon {
    /// Starts the parts of job `job` on its peers, after its batch part.
    /// A peer that does not take its part ends the job NODE_FAIL.
    pub(super) fn launch_peers(
        &mut self,
        job: &Job,
        (environment, link): (&[(String, String)], &RunLink),
        user: &super::users::UserInfo,
    ) -> Result<(), DaemonError> {
        for index in 1..=job.peers.len() {
            let Some((share, part)) = placed_part(&self.reads(), job, index, link) else {
                continue;
            };
            let name = share.node.clone().unwrap_or_default();
            let launch = Launch {
                job: &share,
                script: HOLDER_SCRIPT,
                args: &[],
                environment,
                home: &user.home,
                shell: &user.shell,
                part: Some(&part),
            };
            let launched = self
                .launch_on(Some(&name), launch)
                .unwrap_or_else(|| Err(ExecError::Unreachable(format!("{name} left the pool"))));
            if let Err(e) = launched {
                let why = format!("its part on {name} could not start: {e}");
                tracing::warn!(target: "ysched::exec", "job {}: {why}", job.id);
                let now = self.now();
                self.terminate(job.id, JobState::NodeFail, &why, now)?;
                return Ok(());
            }
        }
        tracing::info!(target: "ysched::exec", "job {} holds its parts on {}", job.id, job.peers.join(", "));
        Ok(())
    }

    /// After node `name` says hello: the part there of job `id`, alive and
    /// stopping, may have missed its stop (sent while the node was away,
    /// and lost): it gets it again, at once if the batch script has
    /// ended, with the job's grace otherwise (a supervisor already
    /// stopping keeps the stop it has).
    pub(super) fn restop_part(&mut self, id: JobId, name: &str) {
        let Some(job) = self
            .core
            .jobs
            .get(&id)
            .filter(|j| j.state == JobState::Completing)
        else {
            return;
        };
        let batch_node = job.node.as_deref().unwrap_or_default();
        let command = if name != batch_node && self.part_state(job, batch_node) == PartState::Ended
        {
            stop_now()
        } else {
            StepCommand::Terminate {
                grace_secs: self.grace_of(job),
                signal: None,
                target: if name == batch_node {
                    SignalTarget::Job
                } else {
                    SignalTarget::Steps
                },
            }
        };
        tracing::info!(target: "ysched::exec", "job {id}: its part on {name} is told again to stop");
        let mut fx = Effects::default();
        fx.out(super::effects::Out::PartCommand {
            job: id,
            node: name.to_string(),
            command,
        });
        self.after_commit(fx);
    }

    /// How the part of `job` on node `name` stands.
    fn part_state(&self, job: &Job, name: &str) -> PartState {
        let Some(node) = self.nodes.named(name) else {
            return PartState::Lost;
        };
        let ended = self.reads().exit_record(job.id, Some(name)).is_some();
        let lost_run = |r: &super::nodes::RemoteNode| r.link.state().lost.contains(&job.id);
        if node.remote.as_ref().is_some_and(|r| r.lost || lost_run(r))
            || self
                .core
                .policy
                .lost_parts
                .contains(&(job.id, job.restart_count, name.to_string()))
        {
            return PartState::Lost;
        }
        if ended {
            PartState::Ended
        } else {
            PartState::Running
        }
    }

    /// A part of multi-node job `id` ended (or its node was lost). While
    /// others run, the job stops: all of it, NODE_FAIL, if the batch
    /// script still runs; the rest of it, if the batch script ended.
    /// Once every part has ended, the job ends as its batch script did,
    /// or NODE_FAIL (requeued unless it asked not to be).
    pub(super) fn part_ended(&mut self, id: JobId, now: i64) -> Result<(), DaemonError> {
        let Some(job) = self.core.jobs.get(&id).map(|j| Job::clone(j)) else {
            return Ok(());
        };
        let batch_node = job.node.clone().unwrap_or_default();
        let batch = self.part_state(&job, &batch_node);
        let peers: Vec<(String, PartState)> = job
            .peers
            .iter()
            .map(|p| (p.clone(), self.part_state(&job, p)))
            .collect();
        let running: Vec<&str> = peers
            .iter()
            .filter(|(_, s)| *s == PartState::Running)
            .map(|(p, _)| p.as_str())
            .collect();
        // Once the batch script has ended, the job has: a part lost or
        // ended after that changes nothing of how it ended.
        let failed = std::iter::once((batch_node.as_str(), batch))
            .chain(peers.iter().map(|(p, s)| (p.as_str(), *s)))
            .find(|(_, s)| batch != PartState::Ended && *s == PartState::Lost)
            .or_else(|| {
                // A part that ends while the job stops (cancelled, timed
                // out, its session over) ends in its turn, not early.
                let early = batch == PartState::Running && job.state == JobState::Running;
                peers
                    .iter()
                    .find(|(_, s)| early && *s != PartState::Running)
                    .map(|(p, s)| (p.as_str(), *s))
            });
        if let Some((node, state)) = failed {
            if job.kill_reason != Some(JobState::NodeFail) {
                let why = match state {
                    PartState::Lost => format!("its node {node} was lost (NODE_FAIL)"),
                    _ => format!("its part on {node} ended before its batch script (NODE_FAIL)"),
                };
                self.stop_all_parts(id, &why, now)?;
            }
        }
        if batch == PartState::Running || !running.is_empty() {
            if batch != PartState::Running && job.state == JobState::Running {
                // The batch script is done: what is left of the job goes.
                self.mark_completing(id, "its batch script ended; its other nodes stop", now)?;
                let mut fx = Effects::default();
                command_parts(&job, &stop_now(), &mut fx);
                self.after_commit(fx);
            }
            return Ok(());
        }
        self.all_parts_ended(id, batch, now)
    }

    /// Every part of job `id` has ended: its end is recorded.
    fn all_parts_ended(
        &mut self,
        id: JobId,
        batch: PartState,
        now: i64,
    ) -> Result<(), DaemonError> {
        let Some(job) = self.core.jobs.get(&id).map(|j| Job::clone(j)) else {
            return Ok(());
        };
        if job.kill_reason != Some(JobState::NodeFail) {
            return self.batch_exited(id, now);
        }
        let why = job
            .reason
            .clone()
            .unwrap_or_else(|| "a node of it failed (NODE_FAIL)".into());
        let mut fx = Effects::default();
        fx.named_event(id, now, "NODE_FAIL", Some(&why));
        self.apply(fx)?;
        let exit = (batch == PartState::Ended)
            .then(|| self.reads().exit_record(id, job.node.as_deref()))
            .flatten()
            .map(|r| r.exit);
        if job.no_requeue {
            return self.finish(id, JobState::NodeFail, now, exit, Some(why));
        }
        self.requeue_run(
            (id, now, now, exit),
            Some(format!("requeued: {why}")),
            false,
        )
    }

    /// Stops every part of job `id` for a failed node: it ends NODE_FAIL
    /// once all have ended.
    fn stop_all_parts(&mut self, id: JobId, why: &str, now: i64) -> Result<(), DaemonError> {
        let Some(job) = self.core.jobs.job_mut(&id) else {
            return Ok(());
        };
        job.kill_reason = Some(JobState::NodeFail);
        job.reason = Some(why.to_string());
        if job.state != JobState::Running {
            // Stopping already (cancelled, timed out): the stop goes on,
            // and the end is NODE_FAIL.
            return Ok(());
        }
        self.mark_completing(id, why, now)?;
        tracing::warn!(target: "ysched::daemon", "job {id} stopping: {why}");
        self.send_terminate(id, self.core.config.kill_wait);
        Ok(())
    }

    /// The job goes COMPLETING, keeping its GPUs until its processes are
    /// gone.
    fn mark_completing(&mut self, id: JobId, detail: &str, now: i64) -> Result<(), DaemonError> {
        let Some(job) = self.core.jobs.job_mut(&id) else {
            return Ok(());
        };
        if job.state != JobState::Running {
            return Ok(());
        }
        job.state = JobState::Completing;
        let mut fx = Effects::default();
        fx.job(job);
        fx.event(id, now, JobState::Completing, Some(detail));
        self.core.policy.stopping.insert(id, now);
        fx.views_changed();
        self.apply(fx)?;
        Ok(())
    }

    /// After a restart, or when node `name` says hello: the job's part
    /// there found again. Whether it has ended (a part that never
    /// started, or whose supervisor is gone, counts as lost).
    pub(super) fn readopt_part(&mut self, id: JobId, name: &str) -> bool {
        let Some(restart) = self.core.jobs.get(&id).map(|j| j.restart_count) else {
            return false;
        };
        use crate::exec::executor::Adoption;
        let Some(adoption) = self.adopt_on(Some(name), id) else {
            return true;
        };
        match adoption {
            Adoption::Alive { .. } | Adoption::Unreachable(_) => false,
            Adoption::Exited(_) => true,
            Adoption::Lost | Adoption::NeverStarted => {
                tracing::warn!(target: "ysched::exec", "job {id}: its part on {name} is gone");
                self.core
                    .policy
                    .lost_parts
                    .insert((id, restart, name.to_string()));
                true
            }
        }
    }

    /// After a restart: every part of multi-node job `id` found again;
    /// whether any has ended.
    pub(super) fn readopt_parts(&mut self, id: JobId) -> bool {
        let Some(job) = self.core.jobs.get(&id).map(|j| Job::clone(j)) else {
            return false;
        };
        let mut ended = false;
        for name in job.node_names() {
            ended |= self.readopt_part(id, name);
        }
        ended
    }
}

/// What ends the parts that outlive their batch script: at once.
fn stop_now() -> StepCommand {
    StepCommand::Terminate {
        grace_secs: 0,
        signal: None,
        target: SignalTarget::Steps,
    }
}

/// `command` for job `job`'s parts on its other nodes, after the commit
/// (see [`for_parts`]).
fn command_parts(job: &Job, command: &StepCommand, fx: &mut Effects) {
    let Some(for_parts) = for_parts(command) else {
        return;
    };
    for peer in &job.peers {
        fx.out(super::effects::Out::PartCommand {
            job: job.id,
            node: peer.clone(),
            command: for_parts.clone(),
        });
    }
}

/// What of `command` goes to a job's parts on its other nodes: signals
/// and stops go to what runs in each part, not to its holder; what is
/// for the batch shell alone, or for a step's srun (on the batch node),
/// goes nowhere there (`None`).
pub(super) fn for_parts(command: &StepCommand) -> Option<StepCommand> {
    Some(match command {
        // A step's srun runs on the batch node.
        StepCommand::Signal {
            target: SignalTarget::Process(_),
            ..
        } => return None,
        // An allocation's step runs on every node of it.
        StepCommand::Signal {
            target: SignalTarget::Step(_),
            ..
        } => command.clone(),
        StepCommand::Signal { target, .. } | StepCommand::Terminate { target, .. }
            if *target == SignalTarget::BatchShell =>
        {
            match command {
                StepCommand::Terminate { grace_secs, .. } => StepCommand::Terminate {
                    grace_secs: *grace_secs,
                    signal: None,
                    target: SignalTarget::Steps,
                },
                _ => return None,
            }
        }
        StepCommand::Signal { signal, .. } => StepCommand::Signal {
            signal: *signal,
            target: SignalTarget::Steps,
        },
        StepCommand::Terminate {
            grace_secs, signal, ..
        } => StepCommand::Terminate {
            grace_secs: *grace_secs,
            signal: *signal,
            target: SignalTarget::Steps,
        },
    })
}
