//! A simulated node: an executor whose runs are records on the simulated
//! clock. Each run is kept by job and restart, with the GPUs it holds, its
//! real start and, once over, its real end, so that the checks can tell
//! two runs of a job alive at once (which the daemon's view alone would
//! hide) and compare every charge with the time each run really held its
//! GPUs. A stop ends a run at once, as a job that obeys SIGTERM; the
//! simulation ends the others when their time comes. A frozen run
//! (suspended) does no work: it keeps its GPUs, does not end by itself,
//! and the time it stands frozen is kept, to be left out of its charge.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::exec::cgroup::Usage;
use crate::exec::executor::{Adoption, Executor, Launch, NodeFacts, Started};
use crate::exec::spec::{ExitRecord, StepCommand};
use crate::exec::ExecError;
use crate::model::job::{ExitStatus, JobId};

/// One run of a job on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    pub job: JobId,
    pub restart: u32,
    pub gpus: Vec<u32>,
    pub start: i64,
    /// When it ends by itself (the simulation decides, at launch).
    pub ends_at: i64,
    /// When it ended, and how.
    pub ended: Option<(i64, ExitStatus)>,
    /// Since when it is frozen, while it is.
    pub frozen_since: Option<i64>,
    /// How long it stood frozen, over every freeze that ended.
    pub frozen_secs: i64,
}

impl Run {
    /// The time it held its GPUs and could work: from its start to its
    /// end, less the time it stood frozen.
    pub fn working_secs(&self) -> Option<i64> {
        self.ended
            .map(|(end, _)| end - self.start - self.frozen_secs)
    }

    /// Freezes or thaws it at `now`; a freeze of a frozen run, or a thaw
    /// of a running one, changes nothing.
    fn set_frozen(&mut self, frozen: bool, now: i64) {
        match (frozen, self.frozen_since) {
            (true, None) => self.frozen_since = Some(now),
            (false, Some(since)) => {
                self.frozen_secs += now - since;
                self.frozen_since = None;
            }
            _ => {}
        }
    }
}

/// What a node holds and did.
#[derive(Debug, Default)]
pub struct NodeState {
    /// Every run ever launched here, in order.
    pub runs: Vec<Run>,
    /// The record of each job's last run that ended, until the controller
    /// forgets it (a supervisor's exit record).
    pub exits: BTreeMap<JobId, ExitRecord>,
}

impl NodeState {
    /// The runs that still hold their GPUs.
    pub fn alive(&self) -> impl Iterator<Item = &Run> {
        self.runs.iter().filter(|r| r.ended.is_none())
    }

    /// Ends job `job`'s alive run at `now` with `exit`; whether one was.
    pub fn end(&mut self, job: JobId, now: i64, exit: ExitStatus, terminated: bool) -> bool {
        let Some(run) = self
            .runs
            .iter_mut()
            .find(|r| r.job == job && r.ended.is_none())
        else {
            return false;
        };
        run.set_frozen(false, now);
        run.ended = Some((now, exit));
        let record = ExitRecord {
            exit,
            end_time: now,
            launch_error: None,
            terminated,
            usage: Usage::default(),
            stuck: 0,
            image: None,
            fenced: None,
            fence_frozen_secs: None,
        };
        self.exits.insert(job, record);
        true
    }
}

/// The simulation's hold on a node: its state, its clock, and who hears
/// of each end.
#[derive(Clone)]
pub struct SimNode {
    pub facts: NodeFacts,
    pub state: Arc<Mutex<NodeState>>,
    clock: Arc<AtomicI64>,
    /// How long each job runs by itself, as the simulation drew it.
    durations: Arc<Mutex<BTreeMap<JobId, i64>>>,
    exits: Arc<Mutex<Vec<JobId>>>,
}

impl SimNode {
    pub fn new(
        facts: NodeFacts,
        clock: Arc<AtomicI64>,
        durations: Arc<Mutex<BTreeMap<JobId, i64>>>,
        exits: Arc<Mutex<Vec<JobId>>>,
    ) -> SimNode {
        SimNode {
            facts,
            state: Arc::default(),
            clock,
            durations,
            exits,
        }
    }

    /// Who hears of each end: the controller (its own node) or the node's
    /// agent.
    pub(super) fn heard(&self) -> Arc<Mutex<Vec<JobId>>> {
        self.exits.clone()
    }

    pub fn state(&self) -> MutexGuard<'_, NodeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An executor on this node, as a (re)started controller finds it.
    pub fn executor(&self) -> SimExecutor {
        SimExecutor { node: self.clone() }
    }

    /// Ends the runs whose time has come; how many.
    pub fn end_due(&self) -> usize {
        let now = self.clock.load(Ordering::SeqCst);
        let due: Vec<(JobId, i32)> = self
            .state()
            .alive()
            .filter(|r| r.frozen_since.is_none() && r.ends_at + r.frozen_secs <= now)
            .map(|r| (r.job, i32::from(r.job % 7 == 3)))
            .collect();
        for &(job, code) in &due {
            self.end(job, ExitStatus { code, signal: 0 }, false);
        }
        due.len()
    }

    fn end(&self, job: JobId, exit: ExitStatus, terminated: bool) -> bool {
        let now = self.clock.load(Ordering::SeqCst);
        let ended = self.state().end(job, now, exit, terminated);
        if ended {
            self.exits
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(job);
        }
        ended
    }
}

/// A node's executor, as the controller holds it.
pub struct SimExecutor {
    node: SimNode,
}

impl Executor for SimExecutor {
    fn node(&self) -> &NodeFacts {
        &self.node.facts
    }

    fn confinement_of(&self, job: JobId) -> Option<String> {
        Some(format!("/sim/{}/job_{job}", self.node.facts.name))
    }

    fn launch(&mut self, launch: Launch<'_>) -> Result<Started, ExecError> {
        let now = self.node.clock.load(Ordering::SeqCst);
        let job = launch.job;
        let runs_for = self
            .node
            .durations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&job.id)
            .copied()
            .unwrap_or(60);
        let mut state = self.node.state();
        // A launch of a run already here (the same job and restart) is the
        // same run: launches are idempotent.
        if state
            .runs
            .iter()
            .any(|r| r.job == job.id && r.restart == job.restart_count)
        {
            return Ok(Started { supervisor_pid: 0 });
        }
        state.exits.remove(&job.id);
        state.runs.push(Run {
            job: job.id,
            restart: job.restart_count,
            gpus: job.gpus_alloc.clone(),
            start: now,
            ends_at: now + runs_for,
            ended: None,
            frozen_since: None,
            frozen_secs: 0,
        });
        Ok(Started { supervisor_pid: 0 })
    }

    fn command(&self, job: JobId, command: &StepCommand) -> Result<(), ExecError> {
        let alive = self.node.state().alive().any(|r| r.job == job);
        if !alive {
            return Err(ExecError::Gone(job));
        }
        if let StepCommand::Terminate { signal, .. } = command {
            let exit = ExitStatus {
                code: 0,
                signal: signal.unwrap_or(libc::SIGTERM),
            };
            self.node.end(job, exit, true);
        }
        Ok(())
    }

    fn set_frozen(&self, job: JobId, frozen: bool) -> Result<(), ExecError> {
        let now = self.node.clock.load(Ordering::SeqCst);
        let mut state = self.node.state();
        let run = state
            .runs
            .iter_mut()
            .find(|r| r.job == job && r.ended.is_none());
        match run {
            Some(run) => {
                run.set_frozen(frozen, now);
                Ok(())
            }
            None => Err(ExecError::Gone(job)),
        }
    }

    fn exit_of(&self, job: JobId) -> Option<ExitRecord> {
        self.node.state().exits.get(&job).cloned()
    }

    fn adopt(&mut self, job: JobId) -> Adoption {
        let state = self.node.state();
        if let Some(record) = state.exits.get(&job) {
            return Adoption::Exited(record.clone());
        }
        if state.alive().any(|r| r.job == job) {
            Adoption::Alive { supervisor_pid: 0 }
        } else {
            Adoption::NeverStarted
        }
    }

    fn clear_remains(&self, job: JobId) -> usize {
        let now = self.node.clock.load(Ordering::SeqCst);
        let killed = ExitStatus {
            code: 0,
            signal: libc::SIGKILL,
        };
        usize::from(self.node.state().end(job, now, killed, true))
    }

    fn forget(&self, job: JobId) {
        self.node.state().exits.remove(&job);
    }

    fn leftovers(&self) -> Vec<JobId> {
        Vec::new()
    }
}
