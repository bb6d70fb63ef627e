//! Dependencies in the daemon: the states of the jobs they name (active
//! ones from memory, ended ones as recorded) and which pending jobs
//! they hold back. The rules themselves are `sched::dependency`.

use std::collections::HashMap;

use crate::model::job::{JobId, JobState};
use crate::sched::dependency::{Dependency, Status};

use super::error::{DaemonError, Refusal};
use super::reads::Reads;
use super::state::{Core, Daemon};

impl Core {
    /// A job's state: from memory while it is active, else as recorded,
    /// cached (an end is final; a requeued job is active again and found
    /// in memory first). An array's id stands for all its tasks.
    pub(super) fn state_of(
        &mut self,
        reads: &dyn Reads,
        id: JobId,
    ) -> Result<Option<JobState>, DaemonError> {
        let is_array =
            |j: &crate::model::job::Job| j.array.as_ref().is_some_and(|a| a.job_id == id);
        match self.jobs.get(&id) {
            Some(job) if !is_array(job) => return Ok(Some(job.state)),
            Some(_) => {}
            None => {
                if let Some(state) = self.policy.ended.get(&id) {
                    if !self.jobs.all().any(is_array) {
                        return Ok(Some(*state));
                    }
                }
            }
        }
        // Read in the turn's transaction: the states are current.
        let tasks = reads.array_states(id)?;
        let state = if tasks.is_empty() {
            reads.job_state(id)?
        } else {
            Some(array_state(&tasks))
        };
        if let Some(s) = state.filter(|s| !s.is_active()) {
            self.policy.ended.insert(id, s);
        }
        Ok(state)
    }

    /// Checks a submission's `--dependency`: well-formed, naming jobs that
    /// exist, and not already impossible. Returns its canonical form, or
    /// why the submission is refused.
    pub(super) fn check_dependency(
        &mut self,
        reads: &dyn Reads,
        text: Option<&str>,
    ) -> Result<Result<Option<String>, Refusal>, DaemonError> {
        let Some(text) = text else {
            return Ok(Ok(None));
        };
        let dependency = match Dependency::parse(text) {
            Ok(d) => d,
            Err(e) => return Ok(Err(Refusal(format!("--dependency: {e}")))),
        };
        let mut states = HashMap::new();
        for id in dependency.job_ids() {
            match self.state_of(reads, id)? {
                Some(state) => {
                    states.insert(id, state);
                }
                None => {
                    return Ok(Err(Refusal(format!(
                        "--dependency: job {id} does not exist"
                    ))))
                }
            }
        }
        if dependency.evaluate(|id| states.get(&id).copied(), false) == Status::Never {
            let mut ended: Vec<(JobId, JobState)> = states.into_iter().collect();
            ended.sort_by_key(|(id, _)| *id);
            let ended: Vec<String> = ended
                .iter()
                .map(|(id, state)| format!("job {id} is {state}"))
                .collect();
            return Ok(Err(Refusal(format!(
                "--dependency {dependency} can never be satisfied: {}",
                ended.join(", ")
            ))));
        }
        Ok(Ok(Some(dependency.to_string())))
    }
}

impl Daemon {
    /// Job `id`'s state, as `Core::state_of` reads it here.
    pub(super) fn state_of(&mut self, id: JobId) -> Result<Option<JobState>, DaemonError> {
        self.handle_with(|core, reads, _| core.state_of(reads, id))
    }

    /// The states of the jobs that pending dependencies name, for the
    /// pass; ended jobs no dependency names any more leave the cache.
    pub(super) fn dependency_states(
        &mut self,
    ) -> Result<HashMap<JobId, Option<JobState>>, DaemonError> {
        let named = crate::sched::pass::named_by_dependencies(self.core.jobs.depending());
        let mut states = HashMap::with_capacity(named.len());
        for &id in &named {
            states.insert(id, self.state_of(id)?);
        }
        self.core.policy.ended.retain(|id, _| named.contains(id));
        Ok(states)
    }
}

/// The state an array is in for its dependents: pending while a task is,
/// running while one is active, COMPLETED once all are, else the end of
/// the first task that did not complete.
fn array_state(tasks: &[JobState]) -> JobState {
    if tasks.contains(&JobState::Pending) {
        JobState::Pending
    } else if tasks.iter().any(|s| s.is_active()) {
        JobState::Running
    } else {
        tasks
            .iter()
            .copied()
            .find(|s| *s != JobState::Completed)
            .unwrap_or(JobState::Completed)
    }
}
