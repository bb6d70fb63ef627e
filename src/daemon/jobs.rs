//! Job lifecycle: a start recorded and launched after the commit,
//! re-adoption at a start, an exit sent to
//! its reader (`exits` for a batch script, `peers` for a part). How a
//! run ends is `ends`. Each transition is written through the seam and
//! logged once, at INFO, with the job id.

use crate::db;
use crate::exec::executor::{Adoption, Launch};
use crate::exec::ExecError;
use crate::model::job::{ExitStatus, JobId, JobState};

use super::effects::Effects;
use super::error::{DaemonError, LaunchError};
use super::reads::Reads;
use super::state::{Core, Daemon};

/// What the parts of a job on its other nodes start with.
pub(super) struct PeerLaunch {
    job: crate::model::job::Job,
    environment: Vec<(String, String)>,
    user: super::users::UserInfo,
    link: super::run_link::RunLink,
}

impl Daemon {
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
        let (batch, part) = super::peers::placed_part(&self.reads(), &job, 0, &link).unzip();
        let launch = Launch {
            job: batch.as_ref().unwrap_or(&job),
            script: &payload.script,
            args: &payload.args,
            environment: &payload.environment,
            home: &user.home,
            shell: &user.shell,
            part: part.as_ref(),
        };
        let started = self
            .launch_on(job.node.as_deref(), launch)
            .ok_or_else(|| LaunchError::NodeGone(job.node.clone().unwrap_or_default()))??;
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

    /// After a restart: finds a running job's supervisor again, or accounts
    /// for what happened while the daemon was away.
    pub(super) fn readopt(&mut self, id: JobId) -> Result<(), DaemonError> {
        let now = self.now();
        let job = self.core.jobs[&id].clone();
        if !job.peers.is_empty() {
            if self.readopt_parts(id) {
                self.part_ended(id, now)?;
            } else if job.state == JobState::Completing {
                self.send_terminate(id, self.core.grace_of(&job));
            }
            return Ok(());
        }
        let adoption = self.adopt_on(job.node.as_deref(), id).unwrap_or_else(|| {
            Adoption::Unreachable(format!(
                "its node {} is not in the pool",
                job.node.as_deref().unwrap_or("?")
            ))
        });
        match adoption {
            Adoption::Alive { supervisor_pid } => {
                tracing::info!(target: "ysched::exec", "job {id} re-adopted (supervisor pid {supervisor_pid})");
                if self.core.jobs[&id].state == JobState::Completing {
                    // The stop may not have reached it before the crash;
                    // its grace starts again.
                    self.send_terminate(id, self.core.grace_of(&self.core.jobs[&id]));
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

    /// A job marked running whose processes never started goes back to
    /// pending (see [`Core::unlaunch`]).
    pub(super) fn unlaunch(
        &mut self,
        id: JobId,
        detail: &str,
        now: i64,
    ) -> Result<(), DaemonError> {
        let mut fx = Effects::default();
        self.core.unlaunch(id, detail, now, &mut fx);
        self.apply(fx)
    }
}

impl Core {
    /// A job marked running whose processes never started: back to
    /// pending, as it was (the same run).
    pub(super) fn unlaunch(&mut self, id: JobId, detail: &str, now: i64, fx: &mut Effects) {
        let Some(job) = self.jobs.job_mut(&id) else {
            return;
        };
        let ran = job.clone();
        job.state = JobState::Pending;
        job.start_time = None;
        job.gpus_alloc.clear();
        job.node = None;
        job.peers.clear();
        job.kill_reason = None;
        let job = job.clone();
        self.policy.stopping.remove(&id);
        self.policy.resumed.remove(&id);
        self.policy.resumed_again.remove(&id);
        fx.job(&job);
        fx.event(id, now, JobState::Pending, Some(detail));
        fx.forget(&ran);
        tracing::info!(target: "ysched::daemon", "job {id} {detail}");
        fx.reschedule = true;
    }

    /// Records the scheduler's decision to start `start`; its processes
    /// start after the commit (the turn launches it). Whether it started.
    pub(super) fn mark_running(
        &mut self,
        reads: &dyn Reads,
        start: crate::sched::pass::Placement,
        now: i64,
        fx: &mut Effects,
    ) -> bool {
        let id = start.job;
        let confinement = reads.confinement(id, &start.node);
        let Some(job) = self.jobs.job_mut(&id) else {
            return false;
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
        let mut detail = if reads.single_server() {
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
        fx.job(&job);
        fx.event(id, now, JobState::Running, Some(&detail));
        self.notify_job(&job, super::notifications::JobEvent::Began, now, fx);
        true
    }
}
