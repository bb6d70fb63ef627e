//! Taking in a job: admission (account, QoS, a request the server can
//! satisfy), then the job row and its payload, in the turn's transaction.

use crate::array::ArraySpec;
use crate::db::{self, Payload};
use crate::model::job::{ArrayTask, Hold, Job, JobId, JobRequest, JobState};
use crate::proto::Reply;
use crate::sched::admission::{self};
use crate::sched::budget::Verdict;
use crate::sched::Reason;

use super::effects::Row;
use super::error::{DaemonError, Refusal};
use super::state::Daemon;

impl Daemon {
    /// Takes in a submission: checked again (clients are untrusted),
    /// admitted, judged by the budgets, and inserted (each task of an
    /// array) in the turn's transaction. A refusal is a reply, not an
    /// error.
    pub(super) fn submit(
        &mut self,
        mut request: JobRequest,
        uid: u32,
        user: &str,
        now: i64,
    ) -> Result<Reply, DaemonError> {
        if let Some(why) = self.short_of_space() {
            tracing::warn!(target: "ysched::daemon", "submission by {user} refused: {why}");
            return Ok(Reply::Rejected { error: why });
        }
        // Whatever sent it (an old client, the REST API): nothing of a
        // run it came from is stored.
        request.keep_submitters_environment();
        let screened = match self.screen(&mut request, uid, user)? {
            Ok(screened) => screened,
            Err(Refusal(why)) => {
                tracing::info!(target: "ysched::daemon", "submission by {user} refused: {}", why.escape_debug());
                return Ok(Reply::Rejected { error: why });
            }
        };
        let (approval, approvers) = self.approval_for(&request, &screened.admitted);
        let mut warnings = screened.warnings;
        if !request.mail_type.is_empty() && self.core.config.notify_command.is_none() {
            warnings.push(
                "--mail-type: nobody will be told: this server has no notify_command in its config"
                    .to_string(),
            );
        }
        let gid = self.core.users.get(uid).map_or(uid, |u| u.gid);
        let test_only = request.test_only;
        let payload = Payload {
            script: std::mem::take(&mut request.script),
            args: std::mem::take(&mut request.args),
            environment: std::mem::take(&mut request.environment),
        };
        let array = screened.array;
        // A test-only one is foreseen as if approved: when it would start
        // once it may.
        let held = approval.is_some() && !test_only;
        let job = job_of(
            request,
            screened.admitted,
            screened.dependency,
            (uid, gid, user),
            held,
            array.is_some(),
            now,
        );
        if test_only {
            return self.test_only(job, approval, warnings, now);
        }
        let id = self.insert_tasks(&job, &payload, array.as_ref(), approval.as_deref(), now)?;
        self.log_submitted(id, &job, array.as_ref(), user, now)?;
        if let Some(why) = &approval {
            warnings.push(format!(
                "job {id} is {why}. {} may let it run: yscontrol approve {id}",
                capitalized(&approvers)
            ));
        }
        Ok(Reply::Submitted {
            job_id: id,
            warning: (!warnings.is_empty()).then(|| warnings.join("; ")),
        })
    }

    /// Why a `--container-image` job cannot be taken: no node has a
    /// runtime, or it is root's and the site keeps root out of containers.
    fn container_refusal(&self, request: &JobRequest, uid: u32) -> Option<String> {
        request.container.as_ref()?;
        if !self.nodes.iter().any(|n| n.facts().containers) {
            let why = self.core.config.containers.missing().unwrap_or_else(|| {
                "no node of the pool has a container runtime (crun and podman)".into()
            });
            return Some(format!("--container-image: {why}"));
        }
        if uid == 0 && !self.core.config.containers.allow_root {
            return Some(
                "--container-image: root's jobs do not run in containers here (allow_root in [containers])"
                    .into(),
            );
        }
        None
    }

    /// The checks a submission passes before anything is stored: the
    /// field rules, admission (account, QoS, what the server has), the
    /// array, the submitted-jobs limits, the budgets, the dependency.
    /// `Ok(Err(why))` is a refusal.
    fn screen(
        &mut self,
        request: &mut JobRequest,
        uid: u32,
        user: &str,
    ) -> Result<Result<Screened, Refusal>, DaemonError> {
        // The same rules as ysbatch's: anyone can write a request by hand,
        // and what is stored must read back at the next start.
        if let Err(e) = crate::validate::job_request(request) {
            return Ok(Err(Refusal(e.to_string())));
        }
        if let Some(why) = self.container_refusal(request, uid) {
            return Ok(Err(Refusal(why)));
        }
        if let Some(why) = self.session_refusal(request, uid) {
            return Ok(Err(Refusal(why)));
        }
        if request.exclusive {
            self.make_exclusive(request);
        }
        let capacities = self.nodes.capacities();
        let mut admitted =
            match admission::admit(request, uid, user, &self.core.config, &capacities) {
                Ok(a) => a,
                Err(e) => return Ok(Err(Refusal(e.to_string()))),
            };
        let array = match request
            .array
            .as_deref()
            .map(|a| ArraySpec::parse(a, self.core.config.max_array_size))
            .transpose()
        {
            Ok(a) => a,
            Err(e) => return Ok(Err(Refusal(format!("--array: {e}")))),
        };
        let tasks = array.as_ref().map_or(1, |a| a.indices.len() as u32);
        if let Some(why) = self.over_submit_limit(&admitted.account, tasks) {
            return Ok(Err(Refusal(why)));
        }
        if !request.work_dir.is_absolute() {
            return Ok(Err(Refusal(format!(
                "working directory {} is not absolute",
                request.work_dir.display()
            ))));
        }
        let warning = match self.judge_submission(request, &mut admitted, tasks) {
            Ok(warning) => warning,
            Err(why) => return Ok(Err(why)),
        };
        let dependency = match self.check_dependency(request.dependency.as_deref())? {
            Ok(d) => d,
            Err(why) => return Ok(Err(why)),
        };
        Ok(Ok(Screened {
            admitted,
            array,
            dependency,
            warnings: warning.into_iter().collect(),
        }))
    }

    /// Why `tasks` more jobs of `account` would pass a `max_submitted_jobs`
    /// of it or of an account above it.
    fn over_submit_limit(&self, account: &str, tasks: u32) -> Option<String> {
        let policy = crate::sched::limits::Policy::new(&self.core.config);
        if !policy
            .chain(account)
            .iter()
            .any(|a| a.limits.max_submitted_jobs.is_some())
        {
            return None;
        }
        // Count, for each account above, the active jobs below it.
        let active = |above: &str| -> u32 {
            self.core
                .jobs
                .all()
                .filter(|j| policy.chain(&j.account).iter().any(|a| a.name == above))
                .count() as u32
        };
        crate::sched::limits::refuse_submission(&policy, account, tasks, active)
    }

    /// The budget's verdict: refused (`Err`), moved to the lowest QoS, or
    /// a warning; an array is judged as a whole.
    fn judge_submission(
        &self,
        request: &JobRequest,
        admitted: &mut admission::Admitted,
        tasks: u32,
    ) -> Result<Option<String>, Refusal> {
        let now = self.now();
        let cost = self
            .worst_case(&request.gpus, admitted.time_limit, &admitted.qos)
            .map(|c| c.saturating_mul(i64::from(tasks)));
        match self.judge_budget(&admitted.account, cost, now) {
            Verdict::Fits => Ok(None),
            Verdict::Warn(m) => Ok(Some(m)),
            Verdict::Refuse(why) => Err(Refusal(why)),
            Verdict::Downgrade(why) => {
                if let Some(lowest) = self.core.config.qos.iter().min_by_key(|q| q.priority) {
                    admitted.qos = lowest.name.clone();
                }
                Ok(Some(why))
            }
        }
    }

    /// Whether the job waits for a coordinator (big, or on reserved GPU
    /// types), why, and who may approve it.
    fn approval_for(
        &self,
        request: &JobRequest,
        admitted: &admission::Admitted,
    ) -> (Option<String>, String) {
        let policy = crate::sched::limits::Policy::new(&self.core.config);
        let types = crate::gpu::type_counts(self.nodes.all_gpus());
        let type_names: Vec<&str> = types.iter().map(|(t, _)| t.as_str()).collect();
        let approval = crate::sched::approval::needed(
            &policy,
            &admitted.account,
            &request.gpus.times(request.tasks.nodes_min),
            admitted.time_limit,
            &type_names,
        )
        .map(|why| format!("held for approval: {why}"));
        let who = crate::sched::approval::coordinators(&policy, &admitted.account);
        let approvers = if who.is_empty() {
            "an administrator".to_string()
        } else {
            format!(
                "a coordinator of account {} ({}) or an administrator",
                admitted.account,
                who.join(", ")
            )
        };
        (approval, approvers)
    }

    /// Inserts the job, or each task of its array (the first task's id is
    /// the array's); returns the (first) id.
    fn insert_tasks(
        &mut self,
        job: &Job,
        payload: &Payload,
        array: Option<&ArraySpec>,
        approval: Option<&str>,
        now: i64,
    ) -> Result<JobId, DaemonError> {
        // Ids are never reused: the next ones are this turn's to give.
        let first = db::next_job_id(self.tx()?)?;
        let indices = array.map_or(vec![0], |a| a.indices.clone());
        for (id, index) in (first..).zip(indices) {
            let task = Job {
                id,
                array: array.map(|a| ArrayTask {
                    job_id: first,
                    task_id: index,
                    spec: a.to_string(),
                }),
                ..job.clone()
            };
            let mut fx = super::effects::Effects::default();
            fx.row(Row::NewJob {
                job: Box::new(task.clone()),
                payload: Box::new(payload.clone()),
            });
            if let Some(why) = approval {
                fx.event(id, now, JobState::Pending, Some(why));
            }
            self.apply(fx)?;
            self.enqueue_submitted(task, now);
        }
        Ok(first)
    }

    /// Logs the submission; one with a QoS not open to everyone
    /// (critical by default) is audited.
    fn log_submitted(
        &mut self,
        id: JobId,
        job: &Job,
        array: Option<&ArraySpec>,
        user: &str,
        now: i64,
    ) -> Result<(), DaemonError> {
        let tasks = array.map_or(1, |a| a.indices.len());
        tracing::info!(
            target: "ysched::daemon",
            "job {id} submitted by {user}: {} account={} qos={} {}{}",
            job.name,
            job.account,
            job.qos,
            job.gpus,
            array.map(|a| format!(" array={a} ({tasks} tasks)")).unwrap_or_default()
        );
        if self
            .core
            .config
            .qos_named(&job.qos)
            .is_some_and(|q| q.allowed.is_some())
        {
            let detail = format!("job {id} submitted with QoS {} ({})", job.qos, job.gpus);
            self.audit(now, user, "use-qos", Some(id), &detail)?;
        }
        self.snapshot = None;
        Ok(())
    }

    /// `--exclusive`: asks for all of a server, so that the job starts
    /// only when nothing else runs there, with everything it has: its
    /// CPUs and memory, and its GPUs of the type asked for (of the most
    /// numerous type, when none is; not shards). In a pool, the largest
    /// server it may run on (by its GPUs, then CPUs).
    fn make_exclusive(&self, request: &mut JobRequest) {
        let allowed = |name: &str| {
            (request.nodelist.is_empty() || request.nodelist.iter().any(|n| n == name))
                && !request.exclude.iter().any(|n| n == name)
        };
        let Some(node) = self
            .nodes
            .iter()
            .filter(|n| allowed(n.name()))
            .max_by_key(|n| (n.facts().inventory.gpus.len(), n.cpus))
        else {
            return;
        };
        request.cpus = node.cpus;
        request.mem_mb = Some(node.mem_mb);
        let counts = node.facts().inventory.type_counts();
        let of_type = match &request.gpus.gpu_type {
            Some(t) => counts.iter().find(|(name, _)| name == t).map(|(_, n)| *n),
            None => counts.iter().map(|(_, n)| *n).max(),
        };
        if let Some(n) = of_type {
            request.gpus.count = n;
            request.gpus.shard = false;
        }
    }

    /// Why no job can be taken in now, if the spool's filesystem has less
    /// room than its reserve besides: what is left is for recording the
    /// jobs already held.
    /// Why no new job is taken now, if the spool's filesystem is nearly
    /// full: less free than the reserve, or the reserve released to record
    /// what the daemon already holds and not yet room to make it again
    /// (the room it freed is for that, not for new work).
    fn short_of_space(&self) -> Option<String> {
        let reserve = self.core.config.spool_reserve;
        if reserve == 0 {
            return None;
        }
        let free = self.spool.free_bytes()?;
        let released = !self.spool.reserve_path().exists() && free < reserve.saturating_mul(2);
        (free < reserve || released).then(|| {
            format!(
                "the spool filesystem of {} is nearly full ({} KiB free{}); ysctld takes no new jobs until an administrator frees space",
                self.spool.root().display(),
                free >> 10,
                if released { ", its reserve in use" } else { "" }
            )
        })
    }

    /// Takes a job just inserted into the active set, with its reason when
    /// it cannot start yet; a full pass (which sorts every pending job)
    /// would gain nothing for it.
    fn enqueue_submitted(&mut self, job: Job, now: i64) {
        let waits = if let Some(hold) = job.hold {
            Some(match hold {
                Hold::User => Reason::JobHeldUser,
                Hold::Admin => Reason::JobHeldAdmin,
                Hold::Approval => Reason::PendingApproval,
            })
        } else {
            job.begin_time.filter(|&b| b > now).map(|b| {
                self.core.policy.wake_at = Some(self.core.policy.wake_at.map_or(b, |w| w.min(b)));
                Reason::BeginTime
            })
        };
        match waits {
            Some(reason) => {
                self.core.policy.reasons.insert(job.id, reason);
            }
            None => self.reschedule = true,
        }
        self.core.jobs.insert(job);
    }
}

/// "An administrator" at the start of a sentence.
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// What a submission that passed the checks comes with.
struct Screened {
    admitted: admission::Admitted,
    array: Option<ArraySpec>,
    /// Its dependency, in canonical form.
    dependency: Option<String>,
    warnings: Vec<String>,
}

/// The job record of an admitted request, pending.
fn job_of(
    request: JobRequest,
    admitted: admission::Admitted,
    dependency: Option<String>,
    (uid, gid, user): (u32, u32, &str),
    held_for_approval: bool,
    is_array: bool,
    now: i64,
) -> Job {
    Job {
        id: 0,
        uid,
        gid,
        user: user.to_string(),
        account: admitted.account,
        qos: admitted.qos,
        name: request.name,
        state: JobState::Pending,
        hold: if held_for_approval {
            Some(Hold::Approval)
        } else {
            request.hold.then_some(Hold::User)
        },
        gpus: request.gpus,
        cpus: request.cpus,
        mem_mb: admitted.mem_mb,
        time_limit: admitted.time_limit,
        submit_time: now,
        begin_time: request.begin_time,
        start_time: None,
        end_time: None,
        gpus_alloc: Vec::new(),
        node: None,
        exit: None,
        restart_count: 0,
        max_rss_bytes: None,
        cpu_usec: None,
        cgroup: None,
        suspended_secs: 0,
        suspended_at: None,
        nice: request.nice,
        billing: None,
        reason: None,
        kill_reason: None,
        dependency,
        array: None,
        approved_by: None,
        preempted_by: None,
        claim: Vec::new(),
        preempt_count: 0,
        // A session cannot be requeued: preempted, it ends.
        no_requeue: request.no_requeue || request.interactive,
        checkpoint_at: None,
        priority_override: None,
        warn_signal: request.warn_signal,
        checkpoint_file: request.checkpoint_file,
        grace: request.grace,
        gpu_seconds: 0,
        gpu_usage: Default::default(),
        preemptions_caused: 0,
        borrowed: false,
        mail_type: request.mail_type,
        mail_user: request.mail_user,
        nodelist: request.nodelist,
        exclude: request.exclude,
        tasks: request.tasks,
        peers: Vec::new(),
        container: request.container,
        image: None,
        interactive: request.interactive,
        quick_requeues: 0,
        work_dir: request.work_dir,
        submit_dir: request.submit_dir,
        std_out: request.output.unwrap_or_else(|| {
            if is_array {
                "ys-%A_%a.out"
            } else {
                "ys-%j.out"
            }
            .to_string()
        }),
        std_err: request.error,
        open_append: request.open_append,
        comment: request.comment,
    }
}
