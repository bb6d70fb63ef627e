//! How a run ends, as recorded and sent: a job stopped (COMPLETING,
//! its processes signalled after the commit), moved to its final state
//! and charged for its run, its notification queued. The core's helpers,
//! and the daemon's thin calls that apply what they push; every file
//! that ends a run comes here, and this file calls none of them.

use crate::exec::spec::{SignalTarget, StepCommand};
use crate::model::job::{ExitStatus, JobId, JobState};

use super::effects::Effects;
use super::error::DaemonError;
use super::reads::Reads;
use super::state::{Core, Daemon};

impl Daemon {
    /// Moves a job to a final state and forgets it from the active set.
    pub(super) fn finish(
        &mut self,
        id: JobId,
        state: JobState,
        end: i64,
        exit: Option<ExitStatus>,
        reason: Option<String>,
    ) -> Result<(), DaemonError> {
        self.handle_with(|core, reads, fx| core.finish(reads, (id, state, end), exit, reason, fx))
    }

    /// Stops a running job (see [`Core::terminate`]).
    pub(super) fn terminate(
        &mut self,
        id: JobId,
        reason: JobState,
        detail: &str,
        now: i64,
    ) -> Result<(), DaemonError> {
        let mut fx = Effects::default();
        self.core.terminate(id, reason, detail, now, &mut fx);
        self.apply(fx)
    }

    /// Stops job `id`'s processes, SIGKILL after `grace_secs`, once this
    /// turn is committed (see [`Core::stop`]).
    pub(super) fn send_terminate(&mut self, id: JobId, grace_secs: u64) {
        let mut fx = Effects::default();
        self.core.stop(id, grace_secs, &mut fx);
        self.after_commit(fx);
    }
}

impl Core {
    /// Stops running job `id`: it goes COMPLETING and keeps its GPUs until
    /// its processes are gone, then ends in `reason` (CANCELLED, TIMEOUT…);
    /// its processes get SIGTERM, SIGKILL after `kill_wait`, once the turn
    /// is committed.
    pub(super) fn terminate(
        &mut self,
        id: JobId,
        reason: JobState,
        detail: &str,
        now: i64,
        fx: &mut Effects,
    ) {
        let grace = self.config.kill_wait;
        let Some(job) = self.jobs.job_mut(&id) else {
            return;
        };
        if job.state != JobState::Running {
            return;
        }
        job.state = JobState::Completing;
        job.kill_reason = Some(reason);
        job.reason = Some(detail.to_string());
        let job = job.clone();
        self.policy.stopping.insert(id, now);
        fx.job(&job);
        fx.event(id, now, JobState::Completing, Some(detail));
        fx.views_changed();
        tracing::info!(target: "ysched::daemon", "job {id} stopping ({detail}); SIGKILL after {grace} s");
        self.stop(id, grace, fx);
    }

    /// Stops job `id`'s processes: SIGTERM (a preempted job with
    /// `--signal`, that signal, where it sends it: its steps, or with `B:`
    /// its batch shell), SIGKILL after `grace_secs`.
    pub(super) fn stop(&self, id: JobId, grace_secs: u64, fx: &mut Effects) {
        let Some(job) = self.jobs.get(&id) else {
            return;
        };
        let warning = Some(job)
            .filter(|j| j.kill_reason == Some(JobState::Preempted))
            .and_then(|j| j.warn_signal);
        let command = StepCommand::Terminate {
            grace_secs,
            signal: warning.map(|w| w.signal),
            target: warning.map_or(SignalTarget::Job, |w| {
                SignalTarget::of_warning(w.batch_only)
            }),
        };
        fx.command(job, command);
    }

    /// Moves active job `id` to final state `state` at `end` and forgets it
    /// from the active set: the suspended victims it preempted run on, how
    /// its rerun went is settled, its last run is charged, its user is told
    /// (`--mail-type`), and what its executors kept of it goes once the
    /// turn is committed.
    pub(super) fn finish(
        &mut self,
        reads: &dyn Reads,
        (id, state, end): (JobId, JobState, i64),
        exit: Option<ExitStatus>,
        reason: Option<String>,
        fx: &mut Effects,
    ) -> Result<(), DaemonError> {
        let Some(job) = self.jobs.remove(&id) else {
            return Ok(());
        };
        let mut job = std::sync::Arc::unwrap_or_clone(job);
        self.policy.ended.remove(&id);
        self.policy.warned.remove(&id);
        self.policy.stopping.remove(&id);
        // Only a job that preempted can have suspended victims to resume;
        // the check spares a scan of every job per ending job (cancelling
        // 10,000 jobs scanned 50 million).
        if job.preemptions_caused > 0 {
            // Thawed now, after the commit, however long ago this job
            // ended (found by the simulation of the pool, seed 105 over 2
            // hours: an end read after the controller stalled resumed its
            // victim as of then, and the time it stood frozen since was
            // charged).
            let resumed = self.clock.now().max(end);
            self.resume_suspended_by(id, resumed, fx);
        }
        self.settle_rerun(reads, &job, exit, true, fx);
        job.state = state;
        job.end_time = Some(job.start_time.map_or(end, |s| end.max(s)));
        job.exit = exit;
        job.kill_reason = None;
        if reason.is_some() {
            job.reason = reason;
        }
        // Charge what it used in its last run, in the same transaction as
        // its end (earlier runs were charged when they were preempted).
        if job.start_time.is_some() {
            let (billing, gpu_seconds) = self.charge(reads, &job, job.end_time.unwrap_or(end), fx);
            job.billing = Some(job.billing.unwrap_or(0) + billing);
            job.gpu_seconds += gpu_seconds;
        }
        self.policy.resumed.remove(&id);
        self.policy.resumed_again.remove(&id);
        fx.job(&job);
        fx.event(id, end, state, job.reason.as_deref());
        self.notify_job(&job, super::notifications::JobEvent::Ended, end, fx);
        let exit_text = job.exit.map(|e| format!(" exit {e}")).unwrap_or_default();
        let why = job
            .reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        tracing::info!(target: "ysched::daemon", "job {id} {state}{exit_text}{why}");
        // The exit record may only go once the end is committed: a crash
        // in between must find it again, not requeue a job that ran.
        fx.forget(&job);
        self.policy.reasons.remove(&id);
        fx.queue_shrank();
        Ok(())
    }

    /// Charges active `job`'s run from its start to `end` to its user and
    /// accounts: its billing-seconds and GPU-seconds, which the caller
    /// records with the job's new state.
    pub(super) fn charge_run(
        &mut self,
        reads: &dyn Reads,
        job: &crate::model::job::Job,
        end: i64,
        fx: &mut Effects,
    ) -> (i64, i64) {
        let end = job.start_time.map_or(end, |s| end.max(s));
        let mut ended = job.clone();
        ended.end_time = Some(end);
        self.charge(reads, &ended, end, fx)
    }

    /// Charges `job`'s run up to `at` to its user and accounts (fair-share
    /// usage, budgets): its billing-seconds and GPU-seconds.
    pub(super) fn charge(
        &mut self,
        reads: &dyn Reads,
        job: &crate::model::job::Job,
        at: i64,
        fx: &mut Effects,
    ) -> (i64, i64) {
        // A run that ends while suspended (its node lost, say) stood
        // frozen from its suspension on: no more charged for it than a
        // resumed run is.
        let suspended;
        let resumed = self.policy.resumed.get(&job.id).copied();
        let job = match (job.suspended_at, job.end_time, resumed) {
            (Some(since), Some(end), _) => {
                let mut frozen = job.clone();
                frozen.suspended_secs += end.saturating_sub(since).max(0) as u64;
                suspended = frozen;
                &suspended
            }
            // Charged until before its last resume (its node lost, which
            // froze it then, suspended, when its lease ran out): no more
            // of that suspension is taken off than stood in the run (found
            // by the simulation of the pool, seed 167 over 2 hours).
            (None, Some(end), Some((from, to))) if to > end => {
                let mut cut = job.clone();
                let beyond = (to - from.max(end)).max(0) as u64;
                cut.suspended_secs = cut.suspended_secs.saturating_sub(beyond);
                suspended = cut;
                &suspended
            }
            _ => job,
        };
        let (billing, gpu_seconds) = if job.peers.is_empty() {
            let gpus = reads.node_gpus(job.node.as_deref());
            (
                crate::sched::fairshare::charge(job, &gpus, &self.config),
                crate::sched::fairshare::gpu_seconds(job, &gpus),
            )
        } else {
            // Each node's GPUs from its own inventory, numbered in turn.
            let gpus: Vec<crate::model::gpu::Gpu> = job
                .gpus_by_node()
                .into_iter()
                .flat_map(|(name, share)| {
                    let inventory = reads.node_gpus(Some(name));
                    share
                        .iter()
                        .map(|&g| inventory.get(g as usize).cloned().unwrap_or_default())
                        .collect::<Vec<_>>()
                })
                .collect();
            let mut renumbered = job.clone();
            renumbered.gpus_alloc = (0..gpus.len() as u32).collect();
            (
                crate::sched::fairshare::charge(&renumbered, &gpus, &self.config),
                crate::sched::fairshare::gpu_seconds(&renumbered, &gpus),
            )
        };
        let fs = &self.config.fairshare;
        let usage = self
            .policy
            .usage
            .entry((job.account.clone(), job.user.clone()))
            .or_default();
        usage.charge(billing, at, fs.half_life, fs.reset);
        #[cfg(test)]
        if self.policy.charge_twice {
            usage.charge(billing, at, fs.half_life, fs.reset);
        }
        let charged = *usage;
        self.spend(&job.account, billing, at, fx);
        fx.row(super::effects::Row::Usage {
            account: job.account.clone(),
            user: job.user.clone(),
            usage: charged,
        });
        (billing, gpu_seconds)
    }

    /// Tells `job`'s user of `event` (`--mail-type`), if this site sends
    /// notifications.
    pub(super) fn notify_job(
        &self,
        job: &crate::model::job::Job,
        event: super::notifications::JobEvent,
        now: i64,
        fx: &mut Effects,
    ) {
        if self.config.notify_command.is_none() {
            return;
        }
        if let Some(n) = super::notifications::for_job(job, event, now, &self.config.node_name) {
            fx.out(super::effects::Out::Notify(Box::new(n)));
        }
    }
}
