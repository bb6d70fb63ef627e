//! Job lifecycle: start, stop, end, re-adoption. Each transition is written
//! to the database and logged once, at INFO, with the job id.

use crate::db;
use crate::exec::executor::{Adoption, Executor, Launch};
use crate::exec::spec::{ExitRecord, SignalTarget, StepCommand};
use crate::exec::ExecError;
use crate::model::job::{ExitStatus, JobId, JobState};

use super::effects::Effects;
use super::error::{DaemonError, LaunchError};
use super::reads::{Edge, Reads};
use super::state::{Core, Daemon};

/// What the parts of a job on its other nodes start with.
pub(super) struct PeerLaunch {
    job: crate::model::job::Job,
    environment: Vec<(String, String)>,
    user: super::users::UserInfo,
    link: super::run_link::RunLink,
}

impl Daemon {
    /// The executor of the node job `id` runs on (or ran on); `None`
    /// when that node is no longer in the pool.
    pub(super) fn executor_of(&self, id: JobId) -> Option<&dyn Executor> {
        let job = self.core.jobs.get(&id)?;
        Some(self.nodes.of(job)?.executor.as_ref())
    }

    /// Delivers `command` to a running job through its node's executor
    /// (and to its parts on other nodes, for a job over several).
    /// Sends `command` to job `id`'s processes once this turn is
    /// committed (`effects`); `Gone` if the job is not active.
    pub(super) fn command_job(
        &mut self,
        id: JobId,
        command: &StepCommand,
    ) -> Result<(), ExecError> {
        let Some(job) = self.core.jobs.get(&id) else {
            return Err(ExecError::Gone(id));
        };
        let mut fx = Effects::default();
        fx.command(job, command.clone());
        self.after_commit(fx);
        Ok(())
    }

    /// Records the scheduler's decision; the process starts after the commit.
    pub(super) fn mark_running(
        &mut self,
        start: crate::sched::pass::Placement,
        now: i64,
    ) -> Result<(), DaemonError> {
        let id = start.job;
        let confinement = self
            .nodes
            .named(&start.node)
            .and_then(|n| n.executor.confinement_of(id));
        let Some(job) = self.core.jobs.job_mut(&id) else {
            return Ok(());
        };
        job.cgroup = confinement;
        job.state = JobState::Running;
        job.start_time = Some(now);
        job.end_time = None;
        job.gpus_alloc = start.gpus;
        job.node = Some(start.node);
        job.peers = start.peers;
        job.reason = None;
        job.kill_reason = None;
        job.claim.clear();
        job.borrowed = start.borrowing;
        let job = job.clone();
        let mut detail = if self.nodes.layout().is_single() {
            format!("GPUs [{}]", db::format_index_list(&job.gpus_alloc))
        } else if !job.peers.is_empty() {
            let shares: Vec<String> = job
                .gpus_by_node()
                .iter()
                .map(|(n, g)| format!("{n} [{}]", db::format_index_list(g)))
                .collect();
            format!("on {}, GPUs {}", job.nodelist(), shares.join(" "))
        } else {
            format!(
                "on {}, GPUs [{}]",
                job.node.as_deref().unwrap_or("?"),
                db::format_index_list(&job.gpus_alloc)
            )
        };
        if job.borrowed {
            detail.push_str(", borrowed beyond its account's guarantee");
        }
        let mut fx = Effects::default();
        fx.job(&job);
        fx.event(id, now, JobState::Running, Some(&detail));
        self.apply(fx)?;
        self.turn.to_launch.push(id);
        self.notify_job(&job, super::notifications::JobEvent::Began, now);
        Ok(())
    }

    /// Queues the job's notification for `event`, if it asked for one (sent
    /// after this turn's commit).
    pub(super) fn notify_job(
        &mut self,
        job: &crate::model::job::Job,
        event: super::notifications::JobEvent,
        now: i64,
    ) {
        let mut fx = Effects::default();
        self.core.notify_job(job, event, now, &mut fx);
        self.after_commit(fx);
    }

    /// Starts the supervisors of the jobs marked running in this turn.
    pub(super) fn launch_started(&mut self) -> Result<(), DaemonError> {
        let ids = std::mem::take(&mut self.turn.to_launch);
        if ids.is_empty() {
            return Ok(());
        }
        let now = self.now();
        for id in ids {
            match self.launch(id) {
                Ok(None) => {}
                Ok(Some(peers)) => {
                    self.launch_peers(&peers.job, (&peers.environment, &peers.link), &peers.user)?
                }
                // Its node went away between the pass and the launch:
                // nothing started; it waits for a node again.
                Err(LaunchError::Exec(ExecError::Unreachable(why))) => {
                    let detail = format!("requeued: its node did not take the launch ({why})");
                    self.unlaunch(id, &detail, now)?;
                }
                Err(e) => {
                    tracing::error!(target: "ysched::exec", "job {id} could not be launched: {e}");
                    let exit = Some(ExitStatus { code: 1, signal: 0 });
                    self.finish(id, JobState::Failed, now, exit, Some(e.to_string()))?;
                }
            }
        }
        self.commit()
    }

    /// Starts job `id`'s batch script on its (first) node; for a job over
    /// several nodes, what its other parts need to start.
    fn launch(&mut self, id: JobId) -> Result<Option<PeerLaunch>, LaunchError> {
        let Some(job) = self.core.jobs.get(&id).cloned() else {
            return Ok(None);
        };
        let payload = db::payload(&self.store.db, id)?;
        let user =
            self.core
                .users
                .refresh(job.uid)
                .cloned()
                .ok_or_else(|| LaunchError::UserGone {
                    user: job.user.clone(),
                    uid: job.uid,
                })?;
        let link = if job.peers.is_empty() && !job.interactive {
            super::run_link::RunLink::default()
        } else {
            super::run_link::RunLink::new(job.peers.len() + 1, self.core.config.pool.step_ports)
                .map_err(|e| ExecError::Unreachable(e.to_string()))?
        };
        let (batch, part) = self.placed_part(&job, 0, &link).unzip();
        let node = self
            .nodes
            .of_mut(&job)
            .ok_or_else(|| LaunchError::NodeGone(job.node.clone().unwrap_or_default()))?;
        let started = node.executor.launch(Launch {
            job: batch.as_ref().unwrap_or(&job),
            script: &payload.script,
            args: &payload.args,
            environment: &payload.environment,
            home: &user.home,
            shell: &user.shell,
            part: part.as_ref(),
        })?;
        self.keep_allocation_link(&job, &link);
        tracing::info!(
            target: "ysched::exec",
            "job {id} started: {} for {} on GPUs [{}] (supervisor pid {})",
            job.name,
            job.user,
            db::format_index_list(&job.gpus_alloc),
            started.supervisor_pid
        );
        if job.peers.is_empty() {
            return Ok(None);
        }
        Ok(Some(PeerLaunch {
            job: crate::model::job::Job::clone(&job),
            environment: payload.environment,
            user,
            link,
        }))
    }

    /// A supervisor exited (or, for a job over several nodes, one of its
    /// parts): read how the job ended and account it.
    pub(super) fn job_exited(&mut self, id: JobId, now: i64) -> Result<(), DaemonError> {
        match self.core.jobs.get(&id) {
            Some(j) if j.state.holds_gpus() && !j.peers.is_empty() => self.part_ended(id, now),
            Some(j) if j.state.holds_gpus() => self.batch_exited(id, now),
            _ => Ok(()),
        }
    }

    /// The batch script's supervisor exited: how it ended is the job's end.
    pub(super) fn batch_exited(&mut self, id: JobId, now: i64) -> Result<(), DaemonError> {
        match self.executor_of(id).and_then(|e| e.exit_of(id)) {
            Some(record) if record.fenced.is_some() => self.fence_ended(id, &record, now)?,
            Some(record) => {
                let job = self.core.jobs.job_mut(&id).expect("checked above");
                job.max_rss_bytes = record.usage.max_rss_bytes;
                job.cpu_usec = record.usage.cpu_usec;
                let ran_in = record.image.clone();
                if ran_in.is_some() {
                    job.image = ran_in.clone();
                }
                if let Some(image) = ran_in {
                    let (user, detail) = (job.user.clone(), format!("job {id} ran in {image}"));
                    self.audit(now, &user, "container-image", Some(id), &detail)?;
                }
                let job = self.core.jobs.job_mut(&id).expect("checked above");
                // A job stopped while it was being made ready (its image
                // loading) ends as its stop says, not as a failed start.
                let state = if let Some(reason) = job.kill_reason {
                    reason
                } else if record.launch_error.is_some() {
                    JobState::Failed
                } else if record.usage.oom_kills > 0 {
                    // Whatever the exit code: the kernel killed a process of it.
                    JobState::OutOfMemory
                } else if record.exit == ExitStatus::default() {
                    JobState::Completed
                } else {
                    JobState::Failed
                };
                // A job that could not start failed with 1, as a shell
                // that cannot run a command does.
                let exit = Some(match record.launch_error {
                    Some(_) => ExitStatus { code: 1, signal: 0 },
                    // An allocation its session ended: the session's.
                    None if ended_by_session(job) => job.exit.unwrap_or_default(),
                    None => record.exit,
                });
                // Stopped for another job: requeued, whatever its exit
                // (a job that saved a checkpoint and exited 0 included).
                if matches!(state, JobState::Preempted | JobState::Pending) {
                    return self.preempted_exit(id, record.end_time, exit);
                }
                let reason = match (&record.launch_error, state) {
                    (Some(e), _) => Some(e.clone()),
                    (None, JobState::OutOfMemory) => Some(format!(
                        "the OOM killer killed {} of its processes: it needed more than its {} of memory",
                        record.usage.oom_kills,
                        job.mem_mb.map(crate::model::units::format_memory_mb).unwrap_or_else(|| "share".into())
                    )),
                    (None, JobState::Failed | JobState::Completed)
                        if record.usage.pids_refused > 0 =>
                    {
                        Some(format!(
                        "it reached its limit of {} processes (job_pids_max): {} forks were refused",
                        self.core.config.job_pids_max, record.usage.pids_refused
                        ))
                    }
                    _ => None,
                };
                if record.stuck > 0 {
                    self.drain_for_stuck(id, record.stuck, now)?;
                }
                self.finish(id, state, record.end_time, exit, reason)?;
            }
            None => {
                let left = self.executor_of(id).map_or(0, |e| e.clear_remains(id));
                let reason = format!(
                    "the job's supervisor ended without recording the job's end{}",
                    if left > 0 {
                        format!("; {left} leftover processes killed")
                    } else {
                        String::new()
                    }
                );
                self.finish(id, JobState::NodeFail, now, None, Some(reason))?;
            }
        }
        Ok(())
    }

    /// Job `id`'s run was ended by its node for its fence (`record` says
    /// why): NODE_FAIL, requeued unless it asked not to be.
    fn fence_ended(&mut self, id: JobId, record: &ExitRecord, now: i64) -> Result<(), DaemonError> {
        let Some(job) = self.core.jobs.get(&id) else {
            return Ok(());
        };
        let node = job.node.clone().unwrap_or_default();
        let no_requeue = job.no_requeue;
        let why = format!(
            "its node {node} ended it: {} (NODE_FAIL)",
            record.fenced.as_deref().unwrap_or("fenced")
        );
        let mut fx = Effects::default();
        fx.named_event(id, now, "NODE_FAIL", Some(&why));
        self.apply(fx)?;
        let (end, exit) = (record.end_time, Some(record.exit));
        if no_requeue {
            return self.finish(id, JobState::NodeFail, end, exit, Some(why));
        }
        self.requeue_run(
            id,
            (end, end),
            exit,
            Some(format!("requeued: {why}")),
            false,
        )
    }

    /// Moves a job to a final state and forgets it from the active set.
    pub(super) fn finish(
        &mut self,
        id: JobId,
        state: JobState,
        end: i64,
        exit: Option<ExitStatus>,
        reason: Option<String>,
    ) -> Result<(), DaemonError> {
        let mut fx = Effects::default();
        let reads = Edge {
            db: &self.store.db,
            nodes: &self.nodes,
        };
        self.core
            .finish(&reads, (id, state, end), exit, reason, &mut fx)?;
        self.apply(fx)
    }

    /// Charges active job `id`'s run from its start to `end` to its user
    /// and accounts; the caller records it with the job's new state.
    pub(super) fn charge_run(&mut self, id: JobId, end: i64) -> Result<(i64, i64), DaemonError> {
        let Some(mut job) = self
            .core
            .jobs
            .get(&id)
            .map(|j| crate::model::job::Job::clone(j))
        else {
            return Ok((0, 0));
        };
        job.end_time = Some(job.start_time.map_or(end, |s| end.max(s)));
        let mut fx = Effects::default();
        let reads = Edge {
            db: &self.store.db,
            nodes: &self.nodes,
        };
        let charged = self
            .core
            .charge(&reads, &job, job.end_time.unwrap_or(end), &mut fx);
        self.apply(fx)?;
        Ok(charged)
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

    /// Sends the `--signal` of each job whose time limit is that close
    /// (once per run).
    fn warn_before_limits(&mut self, now: i64) {
        let due: Vec<(JobId, crate::model::job::WarnSignal)> = self
            .core
            .jobs
            .running()
            .filter(|j| {
                j.warn_at().is_some_and(|w| now >= w) && !self.core.policy.warned.contains(&j.id)
            })
            .filter_map(|j| Some((j.id, j.warn_signal?)))
            .collect();
        for (id, warning) in due {
            self.core.policy.warned.insert(id);
            self.send_warning(id, warning, "its time limit is near");
        }
    }

    /// Delivers a job's warning signal: to its steps, or with `B:` to its
    /// batch shell.
    pub(super) fn send_warning(
        &mut self,
        id: JobId,
        warning: crate::model::job::WarnSignal,
        why: &str,
    ) {
        let command = StepCommand::Signal {
            signal: warning.signal,
            target: SignalTarget::of_warning(warning.batch_only),
        };
        match self.command_job(id, &command) {
            Ok(()) => tracing::info!(
                target: "ysched::daemon",
                "job {id} sent SIG{} ({why}{})",
                crate::model::units::signal_name(warning.signal),
                if warning.batch_only { ", to its batch shell" } else { ", to its steps" }
            ),
            Err(ExecError::Gone(_)) => {}
            Err(e) => tracing::error!(target: "ysched::exec", "cannot signal job {id}: {e}"),
        }
    }

    pub(super) fn enforce_time_limits(&mut self, now: i64) -> Result<(), DaemonError> {
        self.warn_before_limits(now);
        // A job on a node the controller cannot hear has its clock stopped
        // there (frozen when the node's lease ran out); the node says how
        // long when it is heard again (`thaw_fenced`).
        let heard = |j: &crate::model::job::Job| {
            j.node_names().all(|n| {
                self.nodes.named(n).is_none_or(|node| {
                    node.down.is_none() && node.remote.as_ref().is_none_or(|r| r.heard_since_away)
                })
            })
        };
        let expired: Vec<JobId> = self
            .core
            .jobs
            .running()
            .filter(|j| j.deadline().is_some_and(|d| now >= d) && heard(j))
            .map(|j| j.id)
            .collect();
        for id in expired {
            self.terminate(id, JobState::Timeout, "time limit reached", now)?;
        }
        Ok(())
    }

    /// After a restart: finds a running job's supervisor again, or accounts
    /// for what happened while the daemon was away.
    pub(super) fn readopt(&mut self, id: JobId) -> Result<(), DaemonError> {
        let now = self.now();
        let job = self.core.jobs[&id].clone();
        if !job.peers.is_empty() {
            if self.readopt_parts(id) {
                self.part_ended(id, now)?;
            } else if job.state == JobState::Completing {
                self.send_terminate(id, self.grace_of(&job));
            }
            return Ok(());
        }
        let adoption = match self.nodes.of_mut(&job) {
            Some(node) => node.executor.adopt(id),
            None => Adoption::Unreachable(format!(
                "its node {} is not in the pool",
                job.node.as_deref().unwrap_or("?")
            )),
        };
        match adoption {
            Adoption::Alive { supervisor_pid } => {
                tracing::info!(target: "ysched::exec", "job {id} re-adopted (supervisor pid {supervisor_pid})");
                if self.core.jobs[&id].state == JobState::Completing {
                    // The stop may not have reached it before the crash;
                    // its grace starts again.
                    self.send_terminate(id, self.grace_of(&self.core.jobs[&id]));
                }
            }
            Adoption::Exited(_) | Adoption::Lost => self.job_exited(id, now)?,
            // Neither running nor ended as far as anyone knows: it keeps
            // its GPUs in the records, and its exit is reported when its
            // node answers.
            Adoption::Unreachable(why) => {
                tracing::warn!(target: "ysched::exec", "job {id} could not be re-adopted yet: {why}");
            }
            Adoption::NeverStarted => {
                self.unlaunch(id, "requeued: ysctld stopped while launching it", now)?;
            }
        }
        Ok(())
    }

    /// A job marked running whose processes never started: back to
    /// pending, as it was (the same run).
    pub(super) fn unlaunch(
        &mut self,
        id: JobId,
        detail: &str,
        now: i64,
    ) -> Result<(), DaemonError> {
        let Some(job) = self.core.jobs.job_mut(&id) else {
            return Ok(());
        };
        let ran = job.clone();
        job.state = JobState::Pending;
        job.start_time = None;
        job.gpus_alloc.clear();
        job.node = None;
        job.peers.clear();
        job.kill_reason = None;
        let job = job.clone();
        let mut fx = Effects::default();
        fx.job(&job);
        fx.event(id, now, JobState::Pending, Some(detail));
        fx.forget(&ran);
        self.apply(fx)?;
        tracing::info!(target: "ysched::daemon", "job {id} {detail}");
        self.reschedule = true;
        Ok(())
    }
}

/// Whether `job` is an interactive allocation ended by its session
/// (`salloc`'s command, `srun`'s step), whose status is its own.
fn ended_by_session(job: &crate::model::job::Job) -> bool {
    job.interactive
        && job.exit.is_some()
        && matches!(
            job.kill_reason,
            Some(JobState::Completed | JobState::Failed)
        )
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
        // Only a job that preempted can have suspended victims to resume;
        // the check spares a scan of every job per ending job (cancelling
        // 10,000 jobs scanned 50 million).
        if job.preemptions_caused > 0 {
            self.resume_suspended_by(id, end, fx);
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
        fx.queue_changed();
        Ok(())
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
        let charged = *usage;
        self.spend(&job.account, billing, at, fx);
        fx.row(super::effects::Row::Usage {
            account: job.account.clone(),
            user: job.user.clone(),
            usage: charged,
        });
        (billing, gpu_seconds)
    }

    /// Resumes suspended job `id`, for `by`: its processes are thawed once
    /// the turn is committed (a thaw that fails there is logged; the
    /// supervisor of a job being stopped sends SIGCONT with SIGTERM), and
    /// the time it spent suspended is counted out of its limit.
    pub(super) fn thaw(&mut self, id: JobId, by: &str, now: i64, fx: &mut Effects) {
        let Some(job) = self
            .jobs
            .job_mut(&id)
            .filter(|j| j.state == JobState::Suspended)
        else {
            return;
        };
        job.state = JobState::Running;
        if let Some(at) = job.suspended_at.take() {
            job.suspended_secs += (now - at).max(0) as u64;
        }
        let job = job.clone();
        let detail = format!("resumed by {by}");
        fx.out(super::effects::Out::Freeze {
            job: Box::new(job.clone()),
            frozen: false,
        });
        fx.job(&job);
        fx.event(id, now, JobState::Running, Some(&detail));
        fx.queue_changed();
        tracing::info!(target: "ysched::daemon", "job {id} {detail}");
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
