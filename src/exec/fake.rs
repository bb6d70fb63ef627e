//! An executor that runs nothing: jobs "run" until the test that holds its
//! [`FakeNode`] ends them, and a terminate ends a job at once, as a job
//! that obeys SIGTERM would. With it the daemon's state machine runs in
//! milliseconds, on a node whose GPUs, CPUs and memory the test declares,
//! and a node that stops answering is one call away.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::model::job::{ExitStatus, JobId};

use super::cgroup::Usage;
use super::error::ExecError;
use super::executor::{Adoption, Executor, Launch, NodeFacts, Started};
use super::spec::{ExitRecord, StepCommand};

/// What happened on the fake node, for the test to read and steer.
#[derive(Debug, Default)]
pub struct FakeState {
    /// Jobs whose processes "run", with the GPUs they were given.
    pub running: BTreeMap<JobId, Vec<u32>>,
    /// Jobs frozen where they are.
    pub frozen: BTreeSet<JobId>,
    /// Every launch, in order.
    pub launched: Vec<JobId>,
    /// The script and place among its nodes of each job launched over
    /// several nodes.
    pub parts: BTreeMap<JobId, (String, crate::model::tasks::NodePart)>,
    /// Every command delivered, in order.
    pub commands: Vec<(JobId, StepCommand)>,
    /// How ended jobs ended, until the daemon forgets them.
    pub exits: BTreeMap<JobId, ExitRecord>,
    /// While set, every call fails as for a node that does not answer.
    pub unreachable: bool,
    /// The time a job's end is recorded with (the test's clock).
    pub now: i64,
}

/// The test's hold on a fake node.
#[derive(Clone)]
pub struct FakeNode {
    state: Arc<Mutex<FakeState>>,
    on_exit: Arc<dyn Fn(JobId) + Send + Sync>,
}

impl FakeNode {
    pub fn state(&self) -> MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends a running job with `code` (or the signal that killed it), as
    /// its supervisor would report; false if it was not running.
    pub fn end(&self, job: JobId, code: i32, signal: i32) -> bool {
        let ended = end_job(&mut self.state(), job, ExitStatus { code, signal }, false);
        if ended {
            (self.on_exit)(job);
        }
        ended
    }

    /// Ends a running job leaving `stuck` processes SIGKILL did not end.
    pub fn end_stuck(&self, job: JobId, stuck: usize) -> bool {
        let mut state = self.state();
        let ended = end_job(&mut state, job, ExitStatus { code: 0, signal: 9 }, true);
        if let Some(record) = state.exits.get_mut(&job) {
            record.stuck = stuck;
        }
        drop(state);
        if ended {
            (self.on_exit)(job);
        }
        ended
    }
}

fn end_job(state: &mut FakeState, job: JobId, exit: ExitStatus, terminated: bool) -> bool {
    if state.running.remove(&job).is_none() {
        return false;
    }
    state.frozen.remove(&job);
    let record = ExitRecord {
        exit,
        end_time: state.now,
        launch_error: None,
        terminated,
        usage: Usage::default(),
        stuck: 0,
        image: None,
        fenced: None,
        fence_frozen_secs: None,
    };
    state.exits.insert(job, record);
    true
}

pub struct FakeExecutor {
    node: NodeFacts,
    hold: FakeNode,
}

impl FakeExecutor {
    /// A fake node with `node`'s resources; `on_exit` hears of each end.
    pub fn new(
        node: NodeFacts,
        on_exit: impl Fn(JobId) + Send + Sync + 'static,
    ) -> (FakeExecutor, FakeNode) {
        let hold = FakeNode {
            state: Arc::default(),
            on_exit: Arc::new(on_exit),
        };
        (
            FakeExecutor {
                node,
                hold: hold.clone(),
            },
            hold,
        )
    }

    /// Another executor on the same fake node: what a restarted daemon
    /// finds (the jobs that still run, the ends it missed).
    pub fn rejoin(node: NodeFacts, hold: &FakeNode) -> FakeExecutor {
        FakeExecutor {
            node,
            hold: hold.clone(),
        }
    }

    fn reachable(&self) -> Result<MutexGuard<'_, FakeState>, ExecError> {
        let state = self.hold.state();
        if state.unreachable {
            return Err(ExecError::Unreachable(format!(
                "node {} does not answer",
                self.node.name
            )));
        }
        Ok(state)
    }
}

impl Executor for FakeExecutor {
    fn node(&self) -> &NodeFacts {
        &self.node
    }

    fn confinement_of(&self, job: JobId) -> Option<String> {
        Some(format!("/fake/{}/job_{job}", self.node.name))
    }

    fn launch(&mut self, launch: Launch<'_>) -> Result<Started, ExecError> {
        let mut state = self.reachable()?;
        let id = launch.job.id;
        state.running.insert(id, launch.job.gpus_alloc.clone());
        state.launched.push(id);
        if let Some(part) = launch.part.filter(|p| p.nodes.len() > 1) {
            state
                .parts
                .insert(id, (launch.script.to_string(), part.clone()));
        }
        Ok(Started { supervisor_pid: 0 })
    }

    fn command(&self, job: JobId, command: &StepCommand) -> Result<(), ExecError> {
        let mut state = self.reachable()?;
        if !state.running.contains_key(&job) {
            return Err(ExecError::Gone(job));
        }
        state.commands.push((job, command.clone()));
        if let StepCommand::Terminate { signal, .. } = command {
            let exit = ExitStatus {
                code: 0,
                signal: signal.unwrap_or(libc::SIGTERM),
            };
            end_job(&mut state, job, exit, true);
            drop(state);
            (self.hold.on_exit)(job);
        }
        Ok(())
    }

    fn set_frozen(&self, job: JobId, frozen: bool) -> Result<(), ExecError> {
        let mut state = self.reachable()?;
        if !state.running.contains_key(&job) {
            return Err(ExecError::Gone(job));
        }
        if frozen {
            state.frozen.insert(job);
        } else {
            state.frozen.remove(&job);
        }
        Ok(())
    }

    fn exit_of(&self, job: JobId) -> Option<ExitRecord> {
        self.hold.state().exits.get(&job).cloned()
    }

    fn adopt(&mut self, job: JobId) -> Adoption {
        let state = self.hold.state();
        if state.unreachable {
            return Adoption::Unreachable(format!("node {} does not answer", self.node.name));
        }
        if let Some(record) = state.exits.get(&job) {
            return Adoption::Exited(record.clone());
        }
        if state.running.contains_key(&job) {
            Adoption::Alive { supervisor_pid: 0 }
        } else {
            Adoption::NeverStarted
        }
    }

    fn clear_remains(&self, job: JobId) -> usize {
        let mut state = self.hold.state();
        usize::from(state.running.remove(&job).is_some())
    }

    fn forget(&self, job: JobId) {
        self.hold.state().exits.remove(&job);
    }

    fn leftovers(&self) -> Vec<JobId> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::Inventory;
    use crate::model::gpu::Source;

    fn node() -> NodeFacts {
        NodeFacts {
            name: "fake0".into(),
            inventory: Inventory {
                gpus: Vec::new(),
                source: Source::None,
            },
            cpus: 4,
            mem_mb: 4096,
            tmp_mb: 100 << 10,
            containers: false,
            isolation: Default::default(),
        }
    }

    fn launch_of(job: &crate::model::job::Job) -> Launch<'_> {
        Launch {
            job,
            script: "",
            args: &[],
            environment: &[],
            home: "/".as_ref(),
            shell: "/bin/sh".as_ref(),
            part: None,
        }
    }

    #[test]
    fn a_job_runs_until_the_test_ends_it_or_it_is_terminated() {
        let exits = Arc::new(Mutex::new(Vec::new()));
        let heard = exits.clone();
        let (mut executor, fake) =
            FakeExecutor::new(node(), move |id| heard.lock().unwrap().push(id));
        let mut job = crate::model::job::example_job(1);
        job.gpus_alloc = vec![0];
        let launch = launch_of(&job);
        executor.launch(launch).unwrap();
        assert_eq!(executor.adopt(1), Adoption::Alive { supervisor_pid: 0 });
        assert!(fake.end(1, 3, 0));
        assert_eq!(
            executor.exit_of(1).unwrap().exit,
            ExitStatus { code: 3, signal: 0 }
        );
        assert!(!fake.end(1, 0, 0), "a job ends once");

        let mut second = job.clone();
        second.id = 2;
        executor
            .launch(Launch {
                job: &second,
                ..launch
            })
            .unwrap();
        let stop = StepCommand::Terminate {
            grace_secs: 30,
            signal: None,
            target: Default::default(),
        };
        executor.command(2, &stop).unwrap();
        assert!(executor.exit_of(2).unwrap().terminated);
        assert!(matches!(
            executor.command(2, &stop),
            Err(ExecError::Gone(2))
        ));
        assert_eq!(*exits.lock().unwrap(), vec![1, 2]);
    }

    #[test]
    fn a_node_that_does_not_answer_fails_every_call_without_losing_its_jobs() {
        let (mut executor, fake) = FakeExecutor::new(node(), |_| {});
        let job = crate::model::job::example_job(5);
        let launch = launch_of(&job);
        executor.launch(launch).unwrap();
        fake.state().unreachable = true;
        assert!(matches!(
            executor.launch(launch),
            Err(ExecError::Unreachable(_))
        ));
        assert!(matches!(executor.adopt(5), Adoption::Unreachable(_)));
        fake.state().unreachable = false;
        assert_eq!(executor.adopt(5), Adoption::Alive { supervisor_pid: 0 });
    }
}
