//! Preemption as the daemon carries it out: after a scheduling pass, each
//! job that may preempt and could not start picks its victims
//! (`sched::preempt`), they are signalled at once with their QoS's grace,
//! their GPUs are kept for it (`Job::claim`), and when they are gone they
//! are requeued (or end PREEMPTED) and it starts. Every step is in the
//! database, so a crash in the middle resumes it.

use std::collections::HashMap;

use crate::config::PreemptMode;
use crate::db;
use crate::model::job::{Job, JobId, JobState};
use crate::sched::pass::Preemption;

use super::effects::Effects;
use super::error::DaemonError;
use super::reads::Reads;
use super::state::{Core, Daemon};

impl Daemon {
    /// When each running job last saved a checkpoint file (for the
    /// work a preemption would lose); only while a pending job may
    /// preempt (or reclaim), so that a pass does not stat every running
    /// job's file.
    pub(super) fn checkpoint_times(&mut self) -> HashMap<JobId, i64> {
        // With elastic quotas any job within its guarantee may reclaim.
        let may_reclaim = self
            .core
            .config
            .accounts
            .iter()
            .any(|a| a.limits.borrow_limit.is_some());
        let jobs = &mut self.core.jobs;
        let may_preempt = self
            .core
            .config
            .qos
            .iter()
            .filter(|q| !q.preempt.is_empty())
            .any(|q| jobs.any_pending_in(&q.name));
        if !may_reclaim && !may_preempt {
            return HashMap::new();
        }
        jobs.running()
            .filter_map(|j| Some((j.id, super::reads::checkpoint_file_time(j)?)))
            .collect()
    }
}

impl Core {
    /// Keeps each running job's borrowing mark as the pass found it: a job
    /// stops borrowing once its account's other jobs end, and may start
    /// again when a time window lowers the guarantee.
    pub(super) fn mark_borrowing(
        &mut self,
        borrowing: &std::collections::HashSet<JobId>,
        fx: &mut Effects,
    ) {
        let changed: Vec<JobId> = self
            .jobs
            .running()
            .filter(|j| j.state == JobState::Running && j.borrowed != borrowing.contains(&j.id))
            .map(|j| j.id)
            .collect();
        for id in changed {
            let Some(job) = self.jobs.job_mut(&id) else {
                continue;
            };
            job.borrowed = !job.borrowed;
            fx.job(job);
            fx.views_changed();
        }
    }

    /// Signals the victims, keeps their GPUs for the urgent job, records
    /// it all (audited on `channel`).
    pub(super) fn carry_out(
        &mut self,
        reads: &dyn Reads,
        choice: Preemption,
        (now, channel): (i64, crate::proto::Channel),
        fx: &mut Effects,
    ) {
        let urgent = choice.job;
        let Some(job) = self.jobs.job_mut(&urgent) else {
            return;
        };
        job.claim = choice.gpus.clone();
        job.node = Some(choice.node.clone());
        job.preemptions_caused += choice.victims.len() as u32;
        let job = job.clone();
        let victims = choice
            .victims
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let on = if reads.single_server() {
            String::new()
        } else {
            format!(" on {}", choice.node)
        };
        let all_reclaimed = choice.reclaimed.len() == choice.victims.len();
        let (action, verb) = if all_reclaimed {
            (
                "reclaim",
                format!(
                    "reclaims its account's guarantee ({}) from borrowing job(s)",
                    job.account
                ),
            )
        } else {
            ("preempt", "preempts job(s)".to_string())
        };
        let detail = format!(
            "job {urgent} ({}, {}) {verb} {victims}; GPUs [{}]{on} kept for it",
            job.qos,
            job.user,
            db::format_index_list(&choice.gpus)
        );
        fx.job(&job);
        fx.audit((now, channel), "ysctld", action, Some(urgent), &detail);
        for victim in choice.victims {
            let suspend = self.jobs.get(&victim).is_some_and(|j| {
                self.config
                    .qos_named(&j.qos)
                    .is_some_and(|q| q.preempt_mode == PreemptMode::Suspend)
            });
            if choice.reclaimed.contains(&victim) {
                self.stop_preempted((victim, urgent), "reclaimed", now, fx);
            } else if suspend {
                self.suspend_preempted(reads, (victim, urgent), now, fx);
            } else {
                self.stop_preempted((victim, urgent), "preempted", now, fx);
            }
        }
        fx.views_changed();
    }

    /// Signals victim `id`: SIGTERM to all of it now, SIGKILL after its
    /// QoS's grace. It keeps its GPUs (COMPLETING) until it is gone. `how`
    /// says why: `preempted`, or `reclaimed` for a borrowing job.
    fn stop_preempted(&mut self, (id, by): (JobId, JobId), how: &str, now: i64, fx: &mut Effects) {
        let Some(job) = self.jobs.job_mut(&id) else {
            return;
        };
        if job.state != JobState::Running {
            return;
        }
        job.state = JobState::Completing;
        job.kill_reason = Some(JobState::Preempted);
        job.preempted_by = Some(by);
        job.reason = Some(format!("{how} by job {by}"));
        let job = job.clone();
        self.policy.stopping.insert(id, now);
        let grace = self.grace_of(&job);
        let first = job.warn_signal.map_or("TERM".to_string(), |w| {
            crate::model::units::signal_name(w.signal)
        });
        let detail = format!("{how} by job {by}; SIG{first}, SIGKILL after {grace} s");
        let kind = if how == "reclaimed" {
            "reclaim"
        } else {
            "preempt"
        };
        super::stops::record_stop(&job, by, (kind, grace), now, fx);
        fx.job(&job);
        fx.event(id, now, JobState::Preempted, Some(&detail));
        tracing::info!(target: "ysched::daemon", "job {id} {detail}");
        self.stop(id, grace, fx);
    }

    /// Freezes victim `id`, whose QoS suspends: it keeps its GPUs and
    /// memory, gives its CPUs to `by`, and runs on when `by` ends.
    fn suspend_preempted(
        &mut self,
        reads: &dyn Reads,
        (id, by): (JobId, JobId),
        now: i64,
        fx: &mut Effects,
    ) {
        if let Some(e) = self.suspension_refused(reads, id) {
            tracing::error!(target: "ysched::daemon", "job {id} could not be suspended for job {by}: {e}");
            return;
        }
        let Some(job) = self.jobs.job_mut(&id) else {
            return;
        };
        job.preempted_by = Some(by);
        job.preempt_count += 1;
        job.reason = Some(format!("suspended for job {by}"));
        self.suspend(id, &format!("job {by} (preemption)"), now, fx);
    }

    /// Seconds between SIGTERM and SIGKILL when `job` is stopped.
    pub(super) fn grace_of(&self, job: &crate::model::job::Job) -> u64 {
        match job.kill_reason {
            Some(JobState::Preempted) => {
                let qos = self
                    .config
                    .qos_named(&job.qos)
                    .map_or(crate::config::DEFAULT_GRACE_TIME, |q| q.grace_time);
                // A job may ask for less, never for more.
                job.grace.map_or(qos, |g| g.min(qos))
            }
            _ => self.config.kill_wait,
        }
    }
}

/// A run that ends: its job, when it ended, until when it is charged, and
/// how it exited.
pub(super) type Run = (JobId, i64, i64, Option<crate::model::job::ExitStatus>);

impl Core {
    /// A preempted job is gone: back to the queue with its id, its submit
    /// time and one more restart, or PREEMPTED where its QoS or
    /// `--no-requeue` says so. What it ran is charged either way.
    pub(super) fn preempted_exit(
        &mut self,
        reads: &dyn Reads,
        (id, end, exit): (JobId, i64, Option<crate::model::job::ExitStatus>),
        fx: &mut Effects,
    ) -> Result<(), DaemonError> {
        let Some(job) = self.jobs.get(&id) else {
            return Ok(());
        };
        let by = job.preempted_by;
        // `yscontrol requeue`: requeued, whatever its QoS says.
        let asked = job.kill_reason == Some(JobState::Pending);
        let qos_requeues = self
            .config
            .qos_named(&job.qos)
            .is_none_or(|q| q.preempt_mode == PreemptMode::Requeue);
        let no_requeue = job.no_requeue;
        let settled = self.settle_stop(reads, (id, end, exit), fx)?;
        // A reclaimed job gives borrowed GPUs back: it runs again later,
        // whatever its QoS does with preempted jobs.
        let requeue = asked || !no_requeue && (qos_requeues || settled.reclaimed);
        let how = if settled.reclaimed {
            "reclaim"
        } else {
            "preemption"
        };
        let by_text = by.map(|b| format!(" by job {b}")).unwrap_or_default();
        if !requeue {
            // Counted as a requeued victim is (ysacct Preemptions, reports).
            if !asked {
                if let Some(job) = self.jobs.job_mut(&id) {
                    job.preempt_count += 1;
                }
            }
            let reason = Some(format!("preempted{by_text}"));
            return self.finish(reads, (id, JobState::Preempted, end), exit, reason, fx);
        }
        let reason = (!asked).then(|| format!("requeued after {how}{by_text}"));
        let charged_until = settled.charged_until.unwrap_or(end);
        let run = (id, end, charged_until, exit);
        self.requeue_run(reads, run, reason, !asked, fx);
        Ok(())
    }

    /// Puts a job whose run is over back in the queue, with its id, its
    /// submit time and one more restart: what the run used up to
    /// `charged_until` (its end, but for a reclaimed run that lost work)
    /// is charged, `reason` (if any) says why, and `preempted` counts it
    /// as a preemption. What its node kept of the run goes after the
    /// commit.
    pub(super) fn requeue_run(
        &mut self,
        reads: &dyn Reads,
        (id, end, charged_until, exit): Run,
        reason: Option<String>,
        preempted: bool,
        fx: &mut Effects,
    ) {
        let Some(job) = self.jobs.get(&id).map(|j| Job::clone(j)) else {
            return;
        };
        let (billing, gpu_seconds) = self.charge_run(reads, &job, charged_until, fx);
        self.settle_rerun(reads, &job, exit, false, fx);
        let job = self.jobs.job_mut(&id).expect("an active job");
        let ran = job.clone();
        job.billing = Some(job.billing.unwrap_or(0) + billing);
        job.gpu_seconds += gpu_seconds;
        job.state = JobState::Pending;
        job.restart_count += 1;
        if preempted {
            job.preempt_count += 1;
        }
        job.start_time = None;
        job.end_time = None;
        job.gpus_alloc.clear();
        job.node = None;
        job.peers.clear();
        job.kill_reason = None;
        job.preempted_by = None;
        job.checkpoint_at = None;
        job.suspended_secs = 0;
        job.suspended_at = None;
        job.exit = exit;
        if reason.is_some() {
            job.reason = reason;
        }
        let requeued = job.reason.clone().unwrap_or_else(|| "requeued".into());
        let ran_secs = end - ran.start_time.unwrap_or(end);
        let backoff = crate::sched::requeue::Backoff::of(&self.config);
        let job = self.jobs.job_mut(&id).expect("an active job");
        let next = crate::sched::requeue::after(backoff, job.quick_requeues, ran_secs, preempted);
        job.quick_requeues = next.quick;
        if let Some(delay) = next.delay {
            job.begin_time = Some(job.begin_time.unwrap_or(0).max(end + delay));
        }
        let held = next.hold.then(|| {
            job.hold = Some(crate::model::job::Hold::User);
            let why = format!(
                "held: its last {} runs were requeued within {} s of their start; release it (yscontrol release {id}) once the cause is fixed",
                next.quick,
                crate::sched::requeue::QUICK_RUN_SECS
            );
            job.reason = Some(why.clone());
            why
        });
        let job = job.clone();
        self.policy.warned.remove(&id);
        self.policy.stopping.remove(&id);
        self.policy.resumed.remove(&id);
        self.policy.resumed_again.remove(&id);
        let mut detail = format!("{requeued} (restart {})", job.restart_count);
        if let Some(delay) = next.delay {
            detail.push_str(&format!(
                "; its runs end soon after they start: it waits {delay} s"
            ));
        }
        fx.job(&job);
        fx.named_event(id, end, "REQUEUED", Some(&detail));
        if let Some(why) = &held {
            fx.event(id, end, JobState::Pending, Some(why));
            tracing::warn!(target: "ysched::daemon", "job {id} {why}");
        }
        // Its exit record goes once this is committed; it may run again
        // at once.
        fx.forget(&ran);
        self.notify_job(&job, super::notifications::JobEvent::Requeued, end, fx);
        tracing::info!(target: "ysched::daemon", "job {id} {detail}");
        fx.queue_changed();
    }
}
