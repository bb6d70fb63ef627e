//! Interactive allocations (`salloc`, and `srun` outside a job): a job
//! whose nodes, the first included, run a task server each instead of a
//! script, for the steps its user starts from wherever the session runs
//! (`net::steps`). Its `salloc` asks how it stands until it runs, is then
//! told its environment (its nodes, their task servers, the run's step
//! key), and says when the session ended, which ends the allocation with
//! the session's status.
//!
//! The step key is told only to the job's user (or an admin) over the
//! controller's own socket, or from a node with the user's token: a
//! node's word alone is not enough ([`forwarded`]). It is kept in memory:
//! a controller restarted between an allocation's start and its salloc's
//! first look cannot tell it again, and the session fails to start (the
//! allocation is then ended by salloc).
//!
//! [`forwarded`]: super::forwarded

use std::time::Instant;

use crate::config::Interactive;
use crate::model::job::{ExitStatus, Job, JobId, JobRequest, JobState};
use crate::proto::{AllocationView, Reply};

use super::access::AccessRefusal;
use super::effects::Effects;
use super::error::DaemonError;
use super::reads::Reads;
use super::requester::Requester;
use super::run_link::RunLink;
use super::state::{Core, Daemon};

/// How interactive allocation `id` stands, for `who`; looking at it
/// keeps it (`end_unwatched_allocations`).
pub(super) fn on_attach(
    core: &mut Core,
    reads: &dyn Reads,
    id: JobId,
    (who, now): (&Requester, i64),
) -> Result<Reply, DaemonError> {
    if let Some(error) = refuse_allocation(core, reads, id, who)? {
        return Ok(Reply::Rejected { error });
    }
    core.jobs.sessions.seen.insert(id, Instant::now());
    let view = match core.jobs.get(&id) {
        Some(job) => {
            let reason = match job.state {
                JobState::Pending => Some(job.reason.clone().unwrap_or_else(|| {
                    core.policy
                        .reasons
                        .get(&id)
                        .map_or("None", |r| r.name())
                        .to_string()
                })),
                _ => job.reason.clone(),
            };
            let environment = match (job.state, core.jobs.sessions.links.get(&id)) {
                (JobState::Running, Some(link)) => allocation_environment(reads, job, link),
                _ => Vec::new(),
            };
            let time_left = match (job.state, job.time_limit, job.start_time) {
                (JobState::Running, Some(limit), Some(start)) => {
                    Some(start + limit as i64 + job.suspended_secs as i64 - now)
                }
                _ => None,
            };
            AllocationView {
                job_id: id,
                state: job.state,
                reason,
                environment,
                time_left,
            }
        }
        None => {
            let job = reads
                .ended_job(id)?
                .ok_or(crate::db::DbError::NotFound(id))?;
            AllocationView {
                job_id: id,
                state: job.state,
                reason: job.reason,
                environment: Vec::new(),
                time_left: None,
            }
        }
    };
    Ok(Reply::Allocation(Box::new(view)))
}

/// The session of allocation `id` ended with `exit`: the allocation ends
/// COMPLETED (0) or FAILED, once what runs in it is gone; one that has
/// not started is withdrawn (CANCELLED).
pub(super) fn on_end_allocation(
    core: &mut Core,
    reads: &dyn Reads,
    (id, exit): (JobId, ExitStatus),
    (who, now): (&Requester, i64),
    fx: &mut Effects,
) -> Result<Reply, DaemonError> {
    if let Some(error) = refuse_allocation(core, reads, id, who)? {
        return Ok(Reply::Rejected { error });
    }
    let message = match core.jobs.get(&id).map(|j| j.state) {
        Some(JobState::Pending) => {
            let why = format!("withdrawn by {} before it started", who.user);
            core.finish(reads, (id, JobState::Cancelled, now), None, Some(why), fx)?;
            None
        }
        Some(JobState::Running) => {
            let state = if exit == ExitStatus::default() {
                JobState::Completed
            } else {
                JobState::Failed
            };
            if let Some(job) = core.jobs.job_mut(&id) {
                job.exit = Some(exit);
            }
            let detail = format!("its session ended (exit {exit})");
            core.terminate(id, state, &detail, now, fx);
            None
        }
        Some(state) => Some(format!("job {id} is {state} already")),
        None => Some(format!("job {id} has already ended")),
    };
    Ok(Reply::Control {
        outcomes: vec![crate::proto::JobOutcome::new(id, None)],
        message,
    })
}

/// Why `who` may not attach to or end `id`: not theirs (as for any
/// request on a job), or no interactive allocation. One that has ended
/// is still theirs to look at: its holder learns how it ended.
fn refuse_allocation(
    core: &Core,
    reads: &dyn Reads,
    id: JobId,
    who: &Requester,
) -> Result<Option<String>, DaemonError> {
    match core.refusal(reads, id, who)? {
        None | Some(AccessRefusal::Ended(_)) => {}
        Some(other) => return Ok(Some(other.into_message())),
    }
    let interactive = match core.jobs.get(&id) {
        Some(job) => job.interactive,
        None => reads.ended_job(id)?.is_some_and(|j| j.interactive),
    };
    Ok((!interactive)
        .then(|| format!("job {id} is a batch job, not an interactive allocation (salloc, srun)")))
}

impl Daemon {
    /// Ends the allocations whose holder (salloc, srun) has not looked
    /// at them for `[interactive] unwatched_after` (a minute): the
    /// session is gone (killed, its host down), and nothing else would
    /// give their resources back. salloc and srun look every 2 s, while
    /// they wait and while the session runs.
    pub(super) fn end_unwatched_allocations(&mut self, now: i64) -> Result<(), DaemonError> {
        let live: Vec<(JobId, JobState)> = self
            .core
            .jobs
            .all()
            .filter(|j| j.interactive && matches!(j.state, JobState::Pending | JobState::Running))
            .map(|j| (j.id, j.state))
            .collect();
        let ids: std::collections::HashSet<JobId> = live.iter().map(|(id, _)| *id).collect();
        self.core
            .jobs
            .sessions
            .seen
            .retain(|id, _| ids.contains(id));
        for (id, state) in live {
            // One not seen since this controller started is given the
            // whole span from now.
            let seen = *self
                .core
                .jobs
                .sessions
                .seen
                .entry(id)
                .or_insert_with(Instant::now);
            let unwatched = self.core.config.interactive.unwatched_after;
            if seen.elapsed() < unwatched {
                continue;
            }
            let why = format!(
                "its session stopped answering for {} s (salloc or srun gone)",
                unwatched.as_secs()
            );
            tracing::info!(target: "ysched::daemon", "job {id}: {why}");
            match state {
                JobState::Pending => self.finish(id, JobState::Cancelled, now, None, Some(why))?,
                _ => self.terminate(id, JobState::Cancelled, &why, now)?,
            }
        }
        Ok(())
    }

    /// Keeps the step link of interactive allocation `job`'s run, which
    /// just started, for its salloc.
    pub(super) fn keep_allocation_link(&mut self, job: &Job, link: &RunLink) {
        if job.interactive {
            self.core.jobs.sessions.links.insert(job.id, link.clone());
        }
    }
}

impl Core {
    /// For an interactive allocation: its QoS and time limit where it
    /// names none (`[interactive]`), then why it is refused, if it is:
    /// a batch-only option, or over the user's session limits.
    pub(super) fn session_refusal(&self, request: &mut JobRequest, uid: u32) -> Option<String> {
        if !request.interactive {
            return None;
        }
        let rules = &self.config.interactive;
        if request.qos.is_none() {
            request.qos = rules.qos.clone();
        }
        if request.time_limit.is_none() {
            request.time_limit = rules.default_time.map(Some);
        }
        let held: Vec<&Job> = self
            .jobs
            .all()
            .filter(|j| j.interactive && j.uid == uid && j.state.is_active())
            .collect();
        judge_session(rules, request, &held)
    }
}

/// What the commands of a session in allocation `job` run with: the
/// job's and its nodes' `SLURM_*` variables, and where its task servers
/// listen with the key that opens them. None of a node's own (its GPUs'
/// numbers, its name): the session runs on the submitting host.
fn allocation_environment(reads: &dyn Reads, job: &Job, link: &RunLink) -> Vec<(String, String)> {
    let Some((_, part)) = super::peers::placed_part(reads, job, 0, link) else {
        return Vec::new();
    };
    let nodelist = job.nodelist();
    let nodes = part.nodes.len().to_string();
    let tasks_per_node = crate::model::tasks::tasks_per_node_text(&part.tasks_per_node);
    let ports: Vec<String> = part.ports.task_servers.iter().map(u16::to_string).collect();
    let spare: Vec<String> = part.ports.spare.iter().map(u16::to_string).collect();
    let mut env = vec![
        ("SLURM_JOB_ID", job.id.to_string()),
        ("SLURM_JOBID", job.id.to_string()),
        ("SLURM_JOB_NAME", job.name.clone()),
        ("SLURM_JOB_USER", job.user.clone()),
        ("SLURM_JOB_ACCOUNT", job.account.clone()),
        ("SLURM_JOB_QOS", job.qos.clone()),
        (
            "SLURM_JOB_PARTITION",
            crate::slurm_options::PARTITION.to_string(),
        ),
        ("SLURM_CLUSTER_NAME", "ysched".to_string()),
        ("SLURM_JOB_NODELIST", nodelist.clone()),
        ("SLURM_NODELIST", nodelist),
        ("SLURM_JOB_NUM_NODES", nodes.clone()),
        ("SLURM_NNODES", nodes),
        ("SLURM_NTASKS", part.task_count().to_string()),
        ("SLURM_NPROCS", part.task_count().to_string()),
        ("SLURM_TASKS_PER_NODE", tasks_per_node),
        (
            "SLURM_JOB_CPUS_PER_NODE",
            crate::model::tasks::tasks_per_node_text(&vec![job.cpus; part.nodes.len()]),
        ),
        ("SLURM_GPUS_ON_NODE", job.gpus.count.to_string()),
        ("SLURM_CPUS_ON_NODE", job.cpus.to_string()),
        (
            "SLURM_CPUS_PER_TASK",
            (job.cpus
                / part
                    .tasks_per_node
                    .iter()
                    .copied()
                    .max()
                    .unwrap_or(1)
                    .max(1))
            .max(1)
            .to_string(),
        ),
        ("YS_JOB_ID", job.id.to_string()),
        ("YS_ALLOCATION", "1".to_string()),
        ("YS_NODE_ADDRS", part.addresses.join(",")),
        ("YS_STEP_PORTS", ports.join(",")),
        ("YS_STEP_SPARE_PORTS", spare.join(",")),
        ("YS_STEP_KEY", part.step_key.clone()),
    ];
    if let Some(mem) = job.mem_mb {
        env.push(("SLURM_MEM_PER_NODE", mem.to_string()));
    }
    if let Some(g) = part.gpus_per_task {
        env.push(("SLURM_GPUS_PER_TASK", g.to_string()));
    }
    env.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// Why session `request` is refused, given the sessions its user holds
/// (`held`, pending or running) and the site's `rules`; `None`: taken.
/// A session over a limit is refused at once rather than left waiting:
/// its user is at the terminal.
fn judge_session(rules: &Interactive, request: &JobRequest, held: &[&Job]) -> Option<String> {
    if request.array.is_some() {
        return Some("--array: an interactive allocation is one session".into());
    }
    if request.container.is_some() {
        return Some("--container-image: an allocation runs no image itself; give it to srun, whose tasks then run in it".into());
    }
    if let Some(max) = rules.max_time {
        let asked = request.time_limit.flatten();
        if asked.is_none_or(|t| t > max) {
            return Some(format!(
                "an interactive session may last at most {} ([interactive] max_time): ask for less with -t",
                crate::model::units::format_duration(max)
            ));
        }
    }
    let ids = || {
        held.iter()
            .map(|j| j.id.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(max) = rules.max_sessions_per_user {
        if held.len() as u32 >= max {
            return Some(format!(
                "you hold {} interactive sessions (jobs {}), the most [interactive] max_sessions_per_user allows: end one first (yscancel ID)",
                held.len(),
                ids()
            ));
        }
    }
    if let Some(max) = rules.max_gpus_per_user {
        let holding: u32 = held.iter().map(|j| j.gpus.count * j.node_count()).sum();
        let asking = request.gpus.count * request.tasks.nodes_min.max(1);
        if holding + asking > max {
            return Some(format!(
                "interactive sessions may hold {max} GPUs per user ([interactive] max_gpus_per_user); yours hold {holding} (jobs {}) and this one asks for {asking}",
                ids()
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::testing::{core_with, requester, Archive};
    use super::*;

    /// Alice's interactive allocation 1, in `state`.
    fn session(state: JobState) -> Job {
        let mut job = crate::model::job::example_job(1);
        job.interactive = true;
        job.state = state;
        if state == JobState::Running {
            job.node = Some("gpu01".into());
            job.gpus_alloc = vec![0, 1];
            job.start_time = Some(100);
            job.time_limit = Some(3_600);
        }
        job
    }

    fn view(reply: Reply) -> AllocationView {
        match reply {
            Reply::Allocation(view) => *view,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_running_allocation_tells_its_user_its_step_link_and_time_left() {
        let mut core = core_with(vec![session(JobState::Running)]);
        let link = RunLink::new(1, (40_000, 40_100)).unwrap();
        core.jobs.sessions.links.insert(1, link.clone());
        let reads = Archive::default();
        let alice = requester(1000, "alice", false);
        let seen = view(on_attach(&mut core, &reads, 1, (&alice, 400)).unwrap());
        assert_eq!(
            (seen.state, seen.time_left),
            (JobState::Running, Some(3_300))
        );
        let env: std::collections::HashMap<String, String> = seen.environment.into_iter().collect();
        assert_eq!(env["YS_STEP_KEY"], link.key);
        assert_eq!(env["YS_NODE_ADDRS"], "127.0.0.1");
        assert_eq!(env["SLURM_JOB_ID"], "1");
        assert!(core.jobs.sessions.seen.contains_key(&1), "looked at");
        let bob = requester(1001, "bob", false);
        let refused = on_attach(&mut core, &reads, 1, (&bob, 400)).unwrap();
        assert!(
            matches!(refused, Reply::Rejected { error } if error == "permission denied: job 1 belongs to alice")
        );
    }

    #[test]
    fn a_batch_job_is_no_allocation_and_an_ended_one_says_how_it_ended() {
        let mut batch = crate::model::job::example_job(2);
        batch.state = JobState::Running;
        let mut core = core_with(vec![batch]);
        let mut reads = Archive::default();
        let mut ended = session(JobState::Failed);
        ended.reason = Some("its session ended".into());
        reads.jobs.insert(1, ended);
        let alice = requester(1000, "alice", false);
        let not = on_attach(&mut core, &reads, 2, (&alice, 0)).unwrap();
        assert!(
            matches!(not, Reply::Rejected { error } if error.contains("is a batch job, not an interactive allocation"))
        );
        let gone = view(on_attach(&mut core, &reads, 1, (&alice, 0)).unwrap());
        assert_eq!(
            (gone.state, gone.reason.as_deref()),
            (JobState::Failed, Some("its session ended"))
        );
    }

    #[test]
    fn a_session_ends_its_allocation_with_its_status_or_withdraws_it() {
        let (mut core, reads, mut fx) = (
            core_with(vec![session(JobState::Running)]),
            Archive::default(),
            Effects::default(),
        );
        let alice = requester(1000, "alice", false);
        let exit = ExitStatus { code: 3, signal: 0 };
        on_end_allocation(&mut core, &reads, (1, exit), (&alice, 500), &mut fx).unwrap();
        let job = &core.jobs[&1];
        assert_eq!(
            (job.state, job.kill_reason, job.exit),
            (JobState::Completing, Some(JobState::Failed), Some(exit))
        );
        let again =
            on_end_allocation(&mut core, &reads, (1, exit), (&alice, 600), &mut fx).unwrap();
        assert!(
            matches!(again, Reply::Control { message: Some(m), .. } if m == "job 1 is COMPLETING already")
        );
        let (mut core, mut fx) = (
            core_with(vec![session(JobState::Pending)]),
            Effects::default(),
        );
        on_end_allocation(
            &mut core,
            &reads,
            (1, ExitStatus::default()),
            (&alice, 50),
            &mut fx,
        )
        .unwrap();
        assert!(core.jobs.get(&1).is_none());
        assert!(fx.rows().iter().any(|r| matches!(
            r,
            super::super::effects::Row::Job(j) if j.state == JobState::Cancelled
                && j.reason.as_deref() == Some("withdrawn by alice before it started")
        )));
    }
}
