//! A node of the pool, to the daemon: one more `Executor`, whose calls
//! become messages to the node's agent. Nothing here waits for the node:
//! a launch or a signal is sent (or, with the node not connected, fails
//! as `Unreachable`), and what the node reports — the runs it holds, how
//! runs ended — is kept in the node's [`Link`], which the daemon fills in
//! as frames arrive and which the executor's questions read.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::exec::container::pulls::ImageStates;
use crate::exec::executor::{Adoption, Executor, ImageStatus, Launch, NodeFacts, Started};
use crate::exec::spec::{ExitRecord, StepCommand};
use crate::exec::ExecError;
use crate::model::job::JobId;

use super::frame::encode;
use super::message::{Envelope, LaunchOrder, RunKey, ToNode, PROTOCOL};
use super::server::{ConnId, ServerHandle};

/// What the controller knows of one node's agent and its connection.
#[derive(Debug, Default)]
pub struct LinkState {
    /// The connection to its agent, while there is one.
    pub conn: Option<(ServerHandle, ConnId)>,
    pub epoch: u64,
    /// The agent's run that is connected (or was last).
    pub incarnation: u64,
    /// The runs the agent said it holds at its last `Hello` or heartbeat;
    /// `None` until it has said (since the controller started).
    pub running: Option<HashMap<JobId, (u32, i32)>>,
    /// Runs it said ended, until the end is recorded and forgotten.
    pub exits: HashMap<JobId, (u32, ExitRecord)>,
    /// Runs it said it lost (their supervisor gone without a record).
    pub lost: HashSet<JobId>,
    /// The run each job was launched as here (for commands).
    pub launched: HashMap<JobId, u32>,
    /// The container images asked of it, as it answered.
    pub images: ImageStates,
}

/// Shared between the executor and the daemon's pool concern.
#[derive(Clone, Debug, Default)]
pub struct Link(Arc<Mutex<LinkState>>);

impl Link {
    pub fn state(&self) -> MutexGuard<'_, LinkState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends `body` to the agent; `Unreachable` when it is not connected.
    pub fn send(&self, node: &str, body: ToNode) -> Result<(), ExecError> {
        let state = self.state();
        let Some((server, conn)) = &state.conn else {
            return Err(ExecError::Unreachable(format!(
                "node {node} is not connected"
            )));
        };
        let envelope = Envelope {
            protocol: PROTOCOL,
            epoch: state.epoch,
            incarnation: state.incarnation,
            body,
        };
        let frame = encode(&envelope).map_err(|e| ExecError::Unreachable(e.to_string()))?;
        server.send(*conn, frame);
        Ok(())
    }

    fn run_of(&self, job: JobId) -> RunKey {
        let restart = self.state().launched.get(&job).copied().unwrap_or(0);
        RunKey { job, restart }
    }
}

pub struct RemoteExecutor {
    facts: NodeFacts,
    link: Link,
    /// How long a pull asked of the node may go unanswered.
    pull_wait: std::time::Duration,
}

impl RemoteExecutor {
    pub fn new(facts: NodeFacts, link: Link, pull_wait: std::time::Duration) -> RemoteExecutor {
        RemoteExecutor {
            facts,
            link,
            pull_wait,
        }
    }
}

impl Executor for RemoteExecutor {
    fn node(&self) -> &NodeFacts {
        &self.facts
    }

    fn confinement_of(&self, _job: JobId) -> Option<String> {
        None
    }

    fn launch(&mut self, launch: Launch<'_>) -> Result<Started, ExecError> {
        let run = RunKey::of(launch.job);
        let order = LaunchOrder {
            job: launch.job.clone(),
            script: launch.script.to_string(),
            args: launch.args.to_vec(),
            environment: launch.environment.to_vec(),
            part: launch.part.cloned(),
        };
        self.link
            .send(&self.facts.name, ToNode::Launch(Box::new(order)))?;
        self.link.state().launched.insert(run.job, run.restart);
        Ok(Started { supervisor_pid: 0 })
    }

    fn command(&self, job: JobId, command: &StepCommand) -> Result<(), ExecError> {
        let run = self.link.run_of(job);
        self.link.send(
            &self.facts.name,
            ToNode::Command {
                run,
                command: command.clone(),
            },
        )
    }

    fn set_frozen(&self, job: JobId, frozen: bool) -> Result<(), ExecError> {
        if !self.facts.isolation.can_suspend {
            return Err(ExecError::CannotFreeze {
                job,
                why: format!("node {} cannot suspend jobs", self.facts.name),
            });
        }
        let run = self.link.run_of(job);
        self.link
            .send(&self.facts.name, ToNode::Freeze { run, frozen })
    }

    fn exit_of(&self, job: JobId) -> Option<ExitRecord> {
        self.link.state().exits.get(&job).map(|(_, r)| r.clone())
    }

    fn adopt(&mut self, job: JobId) -> Adoption {
        let mut state = self.link.state();
        if let Some((_, record)) = state.exits.get(&job) {
            return Adoption::Exited(record.clone());
        }
        if state.lost.contains(&job) {
            return Adoption::Lost;
        }
        let Some(running) = &state.running else {
            return Adoption::Unreachable(format!(
                "node {} has not reported since the controller started",
                self.facts.name
            ));
        };
        match running.get(&job).copied() {
            Some((restart, pid)) => {
                state.launched.insert(job, restart);
                Adoption::Alive {
                    supervisor_pid: pid,
                }
            }
            None => Adoption::NeverStarted,
        }
    }

    fn clear_remains(&self, job: JobId) -> usize {
        let run = self.link.run_of(job);
        let _ = self.link.send(&self.facts.name, ToNode::Clear { run });
        0
    }

    fn forget(&self, job: JobId) {
        let run = {
            let mut state = self.link.state();
            let restart = state
                .exits
                .remove(&job)
                .map(|(r, _)| r)
                .or_else(|| state.launched.get(&job).copied())
                .unwrap_or(0);
            state.lost.remove(&job);
            state.launched.remove(&job);
            if let Some(running) = &mut state.running {
                running.remove(&job);
            }
            RunKey { job, restart }
        };
        let _ = self.link.send(&self.facts.name, ToNode::Forget { run });
    }

    fn leftovers(&self) -> Vec<JobId> {
        Vec::new()
    }

    /// Asks the node's agent to pull; its answer (`FromNode::Image`)
    /// settles the image in the link's state.
    fn ensure_image(&self, reference: &str) -> ImageStatus {
        let begun = {
            let mut state = self.link.state();
            state
                .images
                .give_up_unanswered(self.pull_wait, Instant::now());
            state.images.begin(reference, Instant::now())
        };
        if let Some(status) = begun {
            return status;
        }
        let order = ToNode::PullImage {
            reference: reference.to_string(),
        };
        if self.link.send(&self.facts.name, order).is_err() {
            // Not connected: asked again at the next pass.
            self.link.state().images.forget(reference);
        }
        ImageStatus::Pulling
    }
}
