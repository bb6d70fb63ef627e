//! Taking in a job (`ysbatch`, `sbatch`, the API's POST, a node passing
//! one on): one handler over the core. Checked again (clients are
//! untrusted), admitted (account, QoS, a request the pool can satisfy),
//! judged by the budgets and limits, held for approval where it is big,
//! then the job row and its payload (each task of an array) pushed for
//! the turn's transaction and the job taken into the queue. A refusal is
//! a reply, not an error. The spool's room is the edge's to check
//! (`Daemon::submit`), and so is a `--test-only` forecast.

use crate::array::ArraySpec;
use crate::db::Payload;
use crate::model::job::{ArrayTask, Hold, Job, JobId, JobRequest, JobState};
use crate::proto::{Channel, Reply};
use crate::sched::admission::{self};
use crate::sched::budget::Verdict;
use crate::sched::Reason;

use super::effects::{Effects, Row};
use super::error::{DaemonError, Refusal};
use super::reads::Reads;
use super::state::{Core, Daemon};

/// A submission: the request, who made it, and through what.
pub(super) struct SubmitAsk<'a> {
    pub(super) request: JobRequest,
    pub(super) uid: u32,
    pub(super) user: &'a str,
    pub(super) channel: Channel,
}

/// What a submission comes to.
#[derive(Debug)]
pub(super) enum Intake {
    /// Taken in (the job's id), or refused.
    Reply(Reply),
    /// `--test-only`, admitted but stored nowhere: when and where it would
    /// start is for the edge to foresee.
    Foresee {
        job: Box<Job>,
        approval: Option<String>,
        warnings: Vec<String>,
    },
}

/// Takes in `ask`'s request: checked, admitted, judged by the budgets,
/// and pushed (each task of an array) as new jobs.
pub(super) fn on_submit(
    core: &mut Core,
    reads: &dyn Reads,
    ask: SubmitAsk,
    now: i64,
    fx: &mut Effects,
) -> Result<Intake, DaemonError> {
    let SubmitAsk {
        mut request,
        uid,
        user,
        channel,
    } = ask;
    // Whatever sent it (an old client, the REST API): nothing of a run it
    // came from is stored.
    request.keep_submitters_environment();
    let screened = match screen(core, reads, &mut request, (uid, user), now)? {
        Ok(screened) => screened,
        Err(Refusal(why)) => {
            tracing::info!(target: "ysched::daemon", "submission by {user} refused: {}", why.escape_debug());
            return Ok(Intake::Reply(Reply::Rejected { error: why }));
        }
    };
    let (approval, approvers) = approval_for(core, reads, &request, &screened.admitted);
    let mut warnings = screened.warnings;
    if !request.mail_type.is_empty() && core.config.notify_command.is_none() {
        warnings.push(
            "--mail-type: nobody will be told: this server has no notify_command in its config"
                .to_string(),
        );
    }
    let gid = core.users.get(uid).map_or(uid, |u| u.gid);
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
        return Ok(Intake::Foresee {
            job: Box::new(job),
            approval,
            warnings,
        });
    }
    let tasks = (array.as_ref(), approval.as_deref());
    let id = insert_tasks(core, reads, (&job, &payload), tasks, now, fx)?;
    log_submitted(core, (id, &job, array.as_ref()), user, (now, channel), fx);
    if let Some(why) = &approval {
        warnings.push(format!(
            "job {id} is {why}. {} may let it run: yscontrol approve {id}",
            capitalized(&approvers)
        ));
    }
    Ok(Intake::Reply(Reply::Submitted {
        job_id: id,
        warning: (!warnings.is_empty()).then(|| warnings.join("; ")),
    }))
}

/// Why a `--container-image` job cannot be taken: no node has a runtime,
/// or it is root's and the site keeps root out of containers.
fn container_refusal(
    core: &Core,
    reads: &dyn Reads,
    request: &JobRequest,
    uid: u32,
) -> Option<String> {
    request.container.as_ref()?;
    if !reads.containers() {
        let why = core.config.containers.missing().unwrap_or_else(|| {
            "no node of the pool has a container runtime (crun and podman)".into()
        });
        return Some(format!("--container-image: {why}"));
    }
    if uid == 0 && !core.config.containers.allow_root {
        return Some(
            "--container-image: root's jobs do not run in containers here (allow_root in [containers])"
                .into(),
        );
    }
    None
}

/// The checks a submission passes before anything is stored: the field
/// rules, admission (account, QoS, what the pool has), the array, the
/// submitted-jobs limits, the budgets, the dependency. `Ok(Err(why))` is
/// a refusal.
fn screen(
    core: &mut Core,
    reads: &dyn Reads,
    request: &mut JobRequest,
    (uid, user): (u32, &str),
    now: i64,
) -> Result<Result<Screened, Refusal>, DaemonError> {
    // The same rules as ysbatch's: anyone can write a request by hand,
    // and what is stored must read back at the next start.
    if let Err(e) = crate::validate::job_request(request) {
        return Ok(Err(Refusal(e.to_string())));
    }
    if let Some(why) = container_refusal(core, reads, request, uid) {
        return Ok(Err(Refusal(why)));
    }
    if let Some(why) = core.session_refusal(request, uid) {
        return Ok(Err(Refusal(why)));
    }
    if request.exclusive {
        make_exclusive(reads, request);
    }
    let capacities = reads.capacities();
    let mut admitted = match admission::admit(request, uid, user, &core.config, &capacities) {
        Ok(a) => a,
        Err(e) => return Ok(Err(Refusal(e.to_string()))),
    };
    let array = match request
        .array
        .as_deref()
        .map(|a| ArraySpec::parse(a, core.config.max_array_size))
        .transpose()
    {
        Ok(a) => a,
        Err(e) => return Ok(Err(Refusal(format!("--array: {e}")))),
    };
    let tasks = array.as_ref().map_or(1, |a| a.indices.len() as u32);
    if let Some(why) = over_submit_limit(core, &admitted.account, tasks) {
        return Ok(Err(Refusal(why)));
    }
    let warning = match judge_submission(core, reads, (request, &mut admitted), tasks, now) {
        Ok(warning) => warning,
        Err(why) => return Ok(Err(why)),
    };
    let dependency = match core.check_dependency(reads, request.dependency.as_deref())? {
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
fn over_submit_limit(core: &Core, account: &str, tasks: u32) -> Option<String> {
    let policy = crate::sched::limits::Policy::new(&core.config);
    if !policy
        .chain(account)
        .iter()
        .any(|a| a.limits.max_submitted_jobs.is_some())
    {
        return None;
    }
    // Count, for each account above, the active jobs below it.
    let active = |above: &str| -> u32 {
        core.jobs
            .all()
            .filter(|j| policy.chain(&j.account).iter().any(|a| a.name == above))
            .count() as u32
    };
    crate::sched::limits::refuse_submission(&policy, account, tasks, active)
}

/// The budget's verdict: refused (`Err`), moved to the lowest QoS, or a
/// warning; an array is judged as a whole.
fn judge_submission(
    core: &Core,
    reads: &dyn Reads,
    (request, admitted): (&JobRequest, &mut admission::Admitted),
    tasks: u32,
    now: i64,
) -> Result<Option<String>, Refusal> {
    let pool = reads.pool_gpus();
    let cost = core
        .worst_case(pool, &request.gpus, admitted.time_limit, &admitted.qos)
        .map(|c| c.saturating_mul(i64::from(tasks)));
    match core.judge_budget(pool, &admitted.account, cost, now) {
        Verdict::Fits => Ok(None),
        Verdict::Warn(m) => Ok(Some(m)),
        Verdict::Refuse(why) => Err(Refusal(why)),
        Verdict::Downgrade(why) => {
            if let Some(lowest) = core.config.qos.iter().min_by_key(|q| q.priority) {
                admitted.qos = lowest.name.clone();
            }
            Ok(Some(why))
        }
    }
}

/// Whether the job waits for a coordinator (big, or on reserved GPU
/// types), why, and who may approve it.
fn approval_for(
    core: &Core,
    reads: &dyn Reads,
    request: &JobRequest,
    admitted: &admission::Admitted,
) -> (Option<String>, String) {
    let policy = crate::sched::limits::Policy::new(&core.config);
    let types = crate::gpu::type_counts(reads.pool_gpus());
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

/// Pushes the job, or each task of its array (the first task's id is the
/// array's), and takes each into the queue; returns the (first) id.
fn insert_tasks(
    core: &mut Core,
    reads: &dyn Reads,
    (job, payload): (&Job, &Payload),
    (array, approval): (Option<&ArraySpec>, Option<&str>),
    now: i64,
    fx: &mut Effects,
) -> Result<JobId, DaemonError> {
    // Ids are never reused: the next ones are this turn's to give.
    let first = reads.next_job_id()?;
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
        fx.row(Row::NewJob {
            job: Box::new(task.clone()),
            payload: Box::new(payload.clone()),
        });
        if let Some(why) = approval {
            fx.event(id, now, JobState::Pending, Some(why));
        }
        enqueue_submitted(core, task, now, fx);
    }
    fx.views_changed();
    Ok(first)
}

/// Logs the submission; one with a QoS not open to everyone (critical by
/// default) is audited.
fn log_submitted(
    core: &Core,
    (id, job, array): (JobId, &Job, Option<&ArraySpec>),
    user: &str,
    (now, channel): (i64, Channel),
    fx: &mut Effects,
) {
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
    if core
        .config
        .qos_named(&job.qos)
        .is_some_and(|q| q.allowed.is_some())
    {
        let detail = format!("job {id} submitted with QoS {} ({})", job.qos, job.gpus);
        fx.audit((now, channel), user, "use-qos", Some(id), &detail);
    }
}

/// `--exclusive`: asks for all of a server, so that the job starts only
/// when nothing else runs there, with everything it has: its CPUs and
/// memory, and its GPUs of the type asked for (of the most numerous type,
/// when none is; not shards). In a pool, the largest server it may run
/// on (by its GPUs, then CPUs).
fn make_exclusive(reads: &dyn Reads, request: &mut JobRequest) {
    let allowed = |name: &str| {
        (request.nodelist.is_empty() || request.nodelist.iter().any(|n| n == name))
            && !request.exclude.iter().any(|n| n == name)
    };
    let capacities = reads.capacities();
    let Some(node) = capacities
        .iter()
        .filter(|c| allowed(c.name))
        .max_by_key(|c| (c.inventory.gpus.len(), c.cpus))
    else {
        return;
    };
    request.cpus = node.cpus;
    request.mem_mb = Some(node.mem_mb);
    let counts = node.inventory.type_counts();
    let of_type = match &request.gpus.gpu_type {
        Some(t) => counts.iter().find(|(name, _)| name == t).map(|(_, n)| *n),
        None => counts.iter().map(|(_, n)| *n).max(),
    };
    if let Some(n) = of_type {
        request.gpus.count = n;
        request.gpus.shard = false;
    }
}

/// Takes a job just pushed into the active set, with its reason when it
/// cannot start yet; a full pass (which sorts every pending job) would
/// gain nothing for it.
fn enqueue_submitted(core: &mut Core, job: Job, now: i64, fx: &mut Effects) {
    let waits = if let Some(hold) = job.hold {
        Some(match hold {
            Hold::User => Reason::JobHeldUser,
            Hold::Admin => Reason::JobHeldAdmin,
            Hold::Approval => Reason::PendingApproval,
        })
    } else {
        job.begin_time.filter(|&b| b > now).map(|b| {
            core.policy.wake_at = Some(core.policy.wake_at.map_or(b, |w| w.min(b)));
            Reason::BeginTime
        })
    };
    match waits {
        Some(reason) => {
            core.policy.reasons.insert(job.id, reason);
        }
        None => fx.queue_grew(job.id),
    }
    core.jobs.insert(job);
}

impl Daemon {
    /// Takes in a submission (`on_submit`), unless the spool's filesystem
    /// is nearly full; a `--test-only` one is foreseen here.
    pub(super) fn submit(
        &mut self,
        request: JobRequest,
        uid: u32,
        user: &str,
        now: i64,
    ) -> Result<Reply, DaemonError> {
        if let Some(why) = self.short_of_space() {
            tracing::warn!(target: "ysched::daemon", "submission by {user} refused: {why}");
            return Ok(Reply::Rejected { error: why });
        }
        let ask = SubmitAsk {
            request,
            uid,
            user,
            channel: self.turn.channel,
        };
        match self.handle_with(|core, reads, fx| on_submit(core, reads, ask, now, fx))? {
            Intake::Reply(reply) => Ok(reply),
            Intake::Foresee {
                job,
                approval,
                warnings,
            } => self.test_only(*job, approval, warnings, now),
        }
    }

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

/// `--exclude`'s nodes and those more, once each.
fn merged(mut names: Vec<String>, more: Vec<String>) -> Vec<String> {
    for name in more {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
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
        // A node short of `--tmp`'s disk is excluded, as if named.
        exclude: merged(request.exclude, admitted.short_of_disk),
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

#[cfg(test)]
mod tests {
    use super::super::testing::{core_of, core_with, Archive};
    use super::*;
    use crate::model::job::example_request;

    const ALICE: (u32, &str) = (1000, "alice");

    fn submit(core: &mut Core, reads: &Archive, request: JobRequest, fx: &mut Effects) -> Intake {
        let ask = SubmitAsk {
            request,
            uid: ALICE.0,
            user: ALICE.1,
            channel: Channel::Cli,
        };
        on_submit(core, reads, ask, 1_000, fx).unwrap()
    }

    fn new_jobs(fx: &Effects) -> Vec<&Job> {
        fx.rows()
            .iter()
            .filter_map(|r| match r {
                Row::NewJob { job, .. } => Some(&**job),
                _ => None,
            })
            .collect()
    }

    fn refusal(intake: Intake) -> String {
        match intake {
            Intake::Reply(Reply::Rejected { error }) => error,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn an_array_is_pushed_task_by_task_under_the_first_id_and_queued() {
        let (mut core, reads, mut fx) = (core_with(vec![]), Archive::default(), Effects::default());
        let mut request = example_request();
        request.array = Some("0-2".into());
        let intake = submit(&mut core, &reads, request, &mut fx);
        assert!(
            matches!(
                intake,
                Intake::Reply(Reply::Submitted {
                    job_id: 100,
                    warning: None
                })
            ),
            "{intake:?}"
        );
        let ids: Vec<(JobId, u32)> = new_jobs(&fx)
            .iter()
            .map(|j| (j.id, j.array.as_ref().unwrap().task_id))
            .collect();
        assert_eq!(ids, [(100, 0), (101, 1), (102, 2)]);
        assert!(new_jobs(&fx)
            .iter()
            .all(|j| j.array.as_ref().unwrap().job_id == 100
                && j.user == "alice"
                && j.state == JobState::Pending
                && j.submit_time == 1_000));
        assert_eq!(core.jobs.all().count(), 3);
        assert!(fx.reschedule, "a pass is due");
    }

    #[test]
    fn a_request_the_pool_cannot_hold_is_refused_and_nothing_changes() {
        let (mut core, reads, mut fx) = (core_with(vec![]), Archive::default(), Effects::default());
        let mut request = example_request();
        request.gpus.count = 5;
        let why = refusal(submit(&mut core, &reads, request, &mut fx));
        assert!(why.contains('5') && why.contains('4'), "{why}");
        let mut relative = example_request();
        relative.work_dir = "runs".into();
        let why = refusal(submit(&mut core, &reads, relative, &mut fx));
        // The field rules come first, as ysbatch's own.
        assert_eq!(why, "--chdir: 'runs' is not absolute");
        assert!(fx.rows().is_empty() && !fx.reschedule);
        assert_eq!(core.jobs.all().count(), 0);
    }

    #[test]
    fn a_big_job_is_held_for_approval_and_told_who_may_give_it() {
        let mut core = core_of("approval_above_gpu_hours = 1\n", vec![]);
        let (reads, mut fx) = (Archive::default(), Effects::default());
        let mut request = example_request();
        request.gpus.count = 2;
        request.time_limit = Some(Some(3_600));
        let Intake::Reply(Reply::Submitted { job_id, warning }) =
            submit(&mut core, &reads, request, &mut fx)
        else {
            panic!("not taken in")
        };
        let warning = warning.unwrap();
        assert!(
            warning.contains("held for approval")
                && warning.contains("An administrator may let it run: yscontrol approve 100"),
            "{warning}"
        );
        assert_eq!(core.jobs[&job_id].hold, Some(Hold::Approval));
        assert_eq!(core.policy.reasons[&job_id], Reason::PendingApproval);
        assert!(!fx.reschedule, "nothing to start");
        assert!(fx
            .rows()
            .iter()
            .any(|r| matches!(r, Row::Event { job: 100, name, .. } if name == "PENDING")));
    }

    #[test]
    fn a_test_only_submission_is_foreseen_and_stored_nowhere() {
        let (mut core, reads, mut fx) = (core_with(vec![]), Archive::default(), Effects::default());
        let mut request = example_request();
        request.test_only = true;
        let Intake::Foresee { job, approval, .. } = submit(&mut core, &reads, request, &mut fx)
        else {
            panic!("not foreseen")
        };
        assert_eq!(
            (job.user.as_str(), job.account.as_str(), approval),
            ("alice", "a", None)
        );
        assert!(fx.rows().is_empty());
        assert_eq!(core.jobs.all().count(), 0);
    }

    #[test]
    fn a_dependency_on_no_job_or_one_that_can_never_be_met_is_refused() {
        let (mut core, mut reads, mut fx) =
            (core_with(vec![]), Archive::default(), Effects::default());
        let mut failed = crate::model::job::example_job(7);
        failed.state = JobState::Failed;
        reads.jobs.insert(7, failed);
        let mut on_none = example_request();
        on_none.dependency = Some("afterok:77".into());
        assert_eq!(
            refusal(submit(&mut core, &reads, on_none, &mut fx)),
            "--dependency: job 77 does not exist"
        );
        let mut on_failed = example_request();
        on_failed.dependency = Some("afterok:7".into());
        let why = refusal(submit(&mut core, &reads, on_failed, &mut fx));
        assert!(
            why.contains("can never be satisfied") && why.contains("job 7 is FAILED"),
            "{why}"
        );
        let mut after_any = example_request();
        after_any.dependency = Some("afterany:7".into());
        assert!(matches!(
            submit(&mut core, &reads, after_any, &mut fx),
            Intake::Reply(Reply::Submitted { .. })
        ));
    }

    #[test]
    fn an_exclusive_job_takes_all_of_its_server_and_a_container_needs_a_runtime() {
        let (mut core, mut reads, mut fx) =
            (core_with(vec![]), Archive::default(), Effects::default());
        let mut request = example_request();
        request.exclusive = true;
        submit(&mut core, &reads, request, &mut fx);
        let job = &core.jobs[&100];
        assert_eq!(
            (job.gpus.count, job.cpus, job.mem_mb),
            (4, 64, Some(512 << 10))
        );
        let mut boxed = example_request();
        boxed.container = Some(crate::model::container::ContainerRequest {
            image: "docker.io/library/python:3".into(),
            mounts: Vec::new(),
            workdir: None,
            env: Vec::new(),
            mount_home: true,
            writable: false,
        });
        let why = refusal(submit(&mut core, &reads, boxed.clone(), &mut fx));
        assert!(why.starts_with("--container-image: "), "{why}");
        reads.containers = true;
        reads.next_id = 101;
        assert!(matches!(
            submit(&mut core, &reads, boxed, &mut fx),
            Intake::Reply(Reply::Submitted { job_id: 101, .. })
        ));
    }

    #[test]
    fn a_job_to_begin_later_waits_for_its_time_without_a_pass() {
        let (mut core, reads, mut fx) = (core_with(vec![]), Archive::default(), Effects::default());
        let mut request = example_request();
        request.begin_time = Some(5_000);
        submit(&mut core, &reads, request, &mut fx);
        assert_eq!(core.policy.reasons[&100], Reason::BeginTime);
        assert_eq!(core.policy.wake_at, Some(5_000));
        assert!(!fx.reschedule);
    }
}
