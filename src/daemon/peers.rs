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
use super::state::{Core, Daemon};

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
        let command = if name != batch_node
            && part_state(&self.core, &self.reads(), job, batch_node) == PartState::Ended
        {
            stop_now()
        } else {
            StepCommand::Terminate {
                grace_secs: self.core.grace_of(job),
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

    /// A part of multi-node job `id` ended, or its node was lost (see
    /// [`on_part_end`]); its batch script's end is read here, once every
    /// part has ended and the job ends as it did.
    pub(super) fn part_ended(&mut self, id: JobId, now: i64) -> Result<(), DaemonError> {
        match self.handle_with(|core, reads, fx| on_part_end(core, reads, id, now, fx))? {
            PartEnd::Settled => Ok(()),
            PartEnd::BatchEnds => self.batch_exited(id, now),
        }
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

/// How the part of `job` on node `name` stands.
fn part_state(core: &Core, reads: &dyn Reads, job: &Job, name: &str) -> PartState {
    let Some(lost) = reads.part_lost(job.id, name) else {
        return PartState::Lost;
    };
    let lost_here = (job.id, job.restart_count, name.to_string());
    if lost || core.policy.lost_parts.contains(&lost_here) {
        PartState::Lost
    } else if reads.exit_record(job.id, Some(name)).is_some() {
        PartState::Ended
    } else {
        PartState::Running
    }
}

/// What is left to do once a part's end is taken in.
#[derive(Debug, PartialEq)]
pub(super) enum PartEnd {
    /// Nothing: the job stops, or has ended as recorded.
    Settled,
    /// Every part has ended and the job ends as its batch script did:
    /// its end is to be read (`Daemon::batch_exited`).
    BatchEnds,
}

/// A part of multi-node job `id` ended (or its node was lost). While
/// others run, the job stops: all of it, NODE_FAIL, if the batch
/// script still runs; the rest of it, if the batch script ended.
/// Once every part has ended, the job ends as its batch script did,
/// or NODE_FAIL (requeued unless it asked not to be).
pub(super) fn on_part_end(
    core: &mut Core,
    reads: &dyn Reads,
    id: JobId,
    now: i64,
    fx: &mut Effects,
) -> Result<PartEnd, DaemonError> {
    let Some(job) = core.jobs.get(&id).map(|j| Job::clone(j)) else {
        return Ok(PartEnd::Settled);
    };
    let batch_node = job.node.clone().unwrap_or_default();
    let batch = part_state(core, reads, &job, &batch_node);
    let peers: Vec<(String, PartState)> = job
        .peers
        .iter()
        .map(|p| (p.clone(), part_state(core, reads, &job, p)))
        .collect();
    let running = peers.iter().any(|(_, s)| *s == PartState::Running);
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
            core.stop_all_parts(id, &why, now, fx);
        }
    }
    if batch == PartState::Running || running {
        if batch != PartState::Running && job.state == JobState::Running {
            // The batch script is done: what is left of the job goes.
            let done = "its batch script ended; its other nodes stop";
            core.mark_completing(id, done, now, fx);
            command_parts(&job, &stop_now(), fx);
        }
        return Ok(PartEnd::Settled);
    }
    all_parts_ended(core, reads, id, batch, now, fx)
}

/// Every part of job `id` has ended: its end is recorded, or, when it
/// ends as its batch script did, read first.
fn all_parts_ended(
    core: &mut Core,
    reads: &dyn Reads,
    id: JobId,
    batch: PartState,
    now: i64,
    fx: &mut Effects,
) -> Result<PartEnd, DaemonError> {
    let Some(job) = core.jobs.get(&id).map(|j| Job::clone(j)) else {
        return Ok(PartEnd::Settled);
    };
    if job.kill_reason != Some(JobState::NodeFail) {
        return Ok(PartEnd::BatchEnds);
    }
    let why = job
        .reason
        .clone()
        .unwrap_or_else(|| "a node of it failed (NODE_FAIL)".into());
    fx.named_event(id, now, "NODE_FAIL", Some(&why));
    let exit = (batch == PartState::Ended)
        .then(|| reads.exit_record(id, job.node.as_deref()))
        .flatten()
        .map(|r| r.exit);
    if job.no_requeue {
        core.finish(reads, (id, JobState::NodeFail, now), exit, Some(why), fx)?;
    } else {
        let why = Some(format!("requeued: {why}"));
        core.requeue_run(reads, (id, now, now, exit), why, false, fx);
    }
    Ok(PartEnd::Settled)
}

impl Core {
    /// Stops every part of job `id` for a failed node: it ends NODE_FAIL
    /// once all have ended.
    fn stop_all_parts(&mut self, id: JobId, why: &str, now: i64, fx: &mut Effects) {
        let Some(job) = self.jobs.job_mut(&id) else {
            return;
        };
        job.kill_reason = Some(JobState::NodeFail);
        job.reason = Some(why.to_string());
        if job.state != JobState::Running {
            // Stopping already (cancelled, timed out): the stop goes on,
            // and the end is NODE_FAIL.
            return;
        }
        self.mark_completing(id, why, now, fx);
        tracing::warn!(target: "ysched::daemon", "job {id} stopping: {why}");
        self.stop(id, self.config.kill_wait, fx);
    }

    /// The job goes COMPLETING, keeping its GPUs until its processes are
    /// gone.
    fn mark_completing(&mut self, id: JobId, detail: &str, now: i64, fx: &mut Effects) {
        let Some(job) = self.jobs.job_mut(&id) else {
            return;
        };
        if job.state != JobState::Running {
            return;
        }
        job.state = JobState::Completing;
        fx.job(job);
        fx.event(id, now, JobState::Completing, Some(detail));
        self.policy.stopping.insert(id, now);
        fx.views_changed();
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

#[cfg(test)]
mod tests {
    use super::super::effects::{Out, Row};
    use super::super::testing::{core_with, Archive};
    use super::*;
    use crate::exec::spec::ExitRecord;

    /// Job 1 over gpu01 (its batch script) and gpu02, running since 100.
    fn over_two_nodes() -> Job {
        let mut job = super::super::testing::running_on(1, "gpu01");
        job.peers = vec!["gpu02".into()];
        job
    }

    fn ended(code: i32) -> ExitRecord {
        super::super::testing::exit_record(code, 400)
    }

    fn events(fx: &Effects) -> Vec<String> {
        fx.rows()
            .iter()
            .filter_map(|r| match r {
                Row::Event { name, detail, .. } => {
                    Some(format!("{name}: {}", detail.as_deref().unwrap_or("")))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_part_that_ends_before_its_batch_script_stops_the_whole_job_node_fail() {
        let (mut core, mut reads, mut fx) = (
            core_with(vec![over_two_nodes()]),
            Archive::default(),
            Effects::default(),
        );
        reads.part_exits.insert((1, "gpu02".into()), ended(0));
        let end = on_part_end(&mut core, &reads, 1, 400, &mut fx).unwrap();
        assert_eq!(end, PartEnd::Settled);
        let job = &core.jobs[&1];
        assert_eq!(job.state, JobState::Completing);
        assert_eq!(job.kill_reason, Some(JobState::NodeFail));
        let why = "its part on gpu02 ended before its batch script (NODE_FAIL)";
        assert_eq!(job.reason.as_deref(), Some(why));
        assert_eq!(events(&fx), [format!("COMPLETING: {why}")]);
        assert!(matches!(&fx.out[..], [Out::Command { job, .. }] if job.id == 1));
        // Its batch script's end, then, ends it NODE_FAIL and requeues it.
        let mut fx = Effects::default();
        reads.exits.insert(1, ended(143));
        let end = on_part_end(&mut core, &reads, 1, 410, &mut fx).unwrap();
        assert_eq!(end, PartEnd::Settled);
        let job = &core.jobs[&1];
        assert_eq!((job.state, job.restart_count), (JobState::Pending, 1));
        assert_eq!(job.exit.map(|e| e.code), Some(143));
        assert_eq!(events(&fx)[0], format!("NODE_FAIL: {why}"));
        assert!(events(&fx)[1].starts_with("REQUEUED: requeued: its part on gpu02"));
    }

    #[test]
    fn once_its_batch_script_ends_the_rest_of_the_job_stops_at_once_and_it_ends_as_the_script_did()
    {
        let (mut core, mut reads, mut fx) = (
            core_with(vec![over_two_nodes()]),
            Archive::default(),
            Effects::default(),
        );
        reads.exits.insert(1, ended(0));
        let end = on_part_end(&mut core, &reads, 1, 400, &mut fx).unwrap();
        assert_eq!(end, PartEnd::Settled);
        assert_eq!(core.jobs[&1].state, JobState::Completing);
        assert_eq!(core.jobs[&1].kill_reason, None);
        assert!(matches!(
            &fx.out[..],
            [Out::PartCommand { job: 1, node, command: StepCommand::Terminate { grace_secs: 0, .. } }]
                if node == "gpu02"
        ));
        reads.part_exits.insert((1, "gpu02".into()), ended(0));
        let mut fx = Effects::default();
        let end = on_part_end(&mut core, &reads, 1, 401, &mut fx).unwrap();
        assert_eq!(end, PartEnd::BatchEnds, "its end is its batch script's");
        assert!(fx.rows().is_empty());
    }

    #[test]
    fn a_lost_node_ends_the_job_node_fail_and_a_job_that_asked_not_to_be_requeued_ends_there() {
        let mut job = over_two_nodes();
        job.no_requeue = true;
        let (mut core, mut reads, mut fx) =
            (core_with(vec![job]), Archive::default(), Effects::default());
        reads.lost_parts.insert((1, "gpu02".into()));
        on_part_end(&mut core, &reads, 1, 400, &mut fx).unwrap();
        let why = "its node gpu02 was lost (NODE_FAIL)";
        assert_eq!(core.jobs[&1].reason.as_deref(), Some(why));
        assert_eq!(core.jobs[&1].state, JobState::Completing);
        reads.exits.insert(1, ended(137));
        let mut fx = Effects::default();
        on_part_end(&mut core, &reads, 1, 420, &mut fx).unwrap();
        assert!(!core.jobs.contains_key(&1), "it ended");
        assert!(fx.rows().iter().any(|r| matches!(
            r,
            Row::Job(j) if j.state == JobState::NodeFail && j.end_time == Some(420)
        )));
    }
}
