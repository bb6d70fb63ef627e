//! `yscontrol update` (`scontrol update job`): a job's QoS, time limit or
//! priority changed, all of its changes or none. Users may lower theirs;
//! raising one, and any change by an administrator to another user's
//! job, is an administrator's (audited). A handler over the core.

use crate::model::job::{Job, JobId, JobState};
use crate::proto::{JobUpdate, Reply};

use super::effects::Effects;
use super::error::{DaemonError, Refusal};
use super::reads::Reads;
use super::requester::Requester;
use super::state::Core;

/// Applies `changes` to each of `ids` for `who`.
pub(super) fn on_update(
    core: &mut Core,
    reads: &dyn Reads,
    (ids, changes): (&[JobId], &JobUpdate),
    (who, now): (&Requester, i64),
    fx: &mut Effects,
) -> Result<Reply, DaemonError> {
    core.each_job(reads, ids, who, |core, id| {
        let said = match check_update(core, reads, (id, changes), who, now) {
            Ok(said) => said,
            Err(e) => return Ok(Some(e.0)),
        };
        let job = core.jobs.job_mut(&id).expect("each_job gives active jobs");
        if let Some(q) = &changes.qos {
            job.qos = q.clone();
        }
        if let Some(t) = changes.time_limit {
            job.time_limit = t;
        }
        if let Some(p) = changes.priority {
            job.priority_override = Some(p);
        }
        let job = job.clone();
        let detail = format!("updated by {}: {said}", who.user);
        fx.job(&job);
        fx.event(id, now, job.state, Some(&detail));
        tracing::info!(target: "ysched::daemon", "job {id} {detail}");
        if who.admin {
            let what = format!("job {id} of {}: {said}", job.user);
            fx.audit((now, who.channel), who.user, "update", Some(id), &what);
        }
        fx.queue_changed();
        Ok(None)
    })
}

/// Whether `who` may make `changes` to job `id`; what they change, in words.
fn check_update(
    core: &Core,
    reads: &dyn Reads,
    (id, changes): (JobId, &JobUpdate),
    who: &Requester,
    now: i64,
) -> Result<String, Refusal> {
    let job = &core.jobs[&id];
    let mut said = Vec::new();
    if let Some(q) = &changes.qos {
        said.push(check_qos(core, job, q, who)?);
    }
    if let Some(limit) = changes.time_limit {
        said.push(check_time_limit(job, limit, who)?);
    }
    if let Some(p) = changes.priority {
        let ctx = crate::sched::priority::Context {
            weights: &core.config.priority,
            qos: &core.config.qos,
            fairshare: &core.policy.fairshare,
            total_gpus: reads.pool_gpus().len() as u32,
        };
        let current = crate::sched::priority::factors(job, &ctx, now).priority();
        said.push(check_priority(job, (current, p), who)?);
    }
    if said.is_empty() {
        return Err("nothing to update: give qos=, timelimit= or priority=".into());
    }
    Ok(said.join(", "))
}

/// Whether `who` may move `job` to QoS `q`: only while it waits, only to
/// a known QoS, and upwards or to one it has no access to only as an
/// administrator.
fn check_qos(core: &Core, job: &Job, q: &str, who: &Requester) -> Result<String, Refusal> {
    let shown = job.display_id();
    if job.state != JobState::Pending {
        return Err(format!(
            "job {shown} is {}; only a pending job's QoS can change",
            job.state
        )
        .into());
    }
    let Some(new) = core.config.qos_named(q) else {
        return Err(format!("unknown QoS '{q}' (known: {})", core.config.qos_names(", ")).into());
    };
    let old = core
        .config
        .qos_named(&job.qos)
        .map_or(i64::MIN, |q| q.priority);
    if !who.admin && new.priority > old {
        return Err(format!(
            "permission denied: only admins may raise job {shown}'s QoS ({} → {q})",
            job.qos
        )
        .into());
    }
    if !who.admin {
        crate::sched::admission::check_qos_access(
            &core.config,
            q,
            &job.account,
            job.uid,
            &job.user,
        )
        .map_err(|e| Refusal(e.to_string()))?;
    }
    Ok(format!("qos {} → {q}", job.qos))
}

/// Whether `who` may set `job`'s time limit to `limit`: while it has not
/// ended, and longer only as an administrator.
fn check_time_limit(job: &Job, limit: Option<u64>, who: &Requester) -> Result<String, Refusal> {
    use crate::model::units::format_time_limit;
    let shown = job.display_id();
    if !matches!(
        job.state,
        JobState::Pending | JobState::Running | JobState::Suspended
    ) {
        return Err(format!("job {shown} is {}; its time limit cannot change", job.state).into());
    }
    let raises = match (job.time_limit, limit) {
        (Some(old), Some(new)) => new > old,
        (Some(_), None) => true,
        (None, _) => false,
    };
    if raises && !who.admin {
        return Err(format!(
            "permission denied: only admins may raise job {shown}'s time limit ({})",
            format_time_limit(job.time_limit)
        )
        .into());
    }
    Ok(format!(
        "time limit {} → {}",
        format_time_limit(job.time_limit),
        format_time_limit(limit)
    ))
}

/// Whether `who` may set `job`'s priority from `current` to `p`: while it
/// waits, and higher only as an administrator.
fn check_priority(job: &Job, (current, p): (i64, i64), who: &Requester) -> Result<String, Refusal> {
    let shown = job.display_id();
    if job.state != JobState::Pending {
        return Err(format!(
            "job {shown} is {}; only a pending job's priority can change",
            job.state
        )
        .into());
    }
    if p > current && !who.admin {
        return Err(format!(
            "permission denied: only admins may raise job {shown}'s priority (now {current})"
        )
        .into());
    }
    Ok(format!("priority {current} → {p}"))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{core_with, requester, Archive};
    use super::*;

    fn pending(id: JobId) -> crate::model::job::Job {
        let mut job = crate::model::job::example_job(id);
        job.uid = 1000;
        job.user = "u1000".into();
        job.time_limit = Some(3_600);
        job
    }

    fn error_of(reply: Reply) -> Option<String> {
        match reply {
            Reply::Control { outcomes, .. } => outcomes[0].error.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn users_lower_their_jobs_limits_and_only_administrators_raise_them() {
        let mut core = core_with(vec![pending(1)]);
        let (reads, alice) = (Archive::default(), requester(1000, "u1000", false));
        let mut fx = Effects::default();
        let shorter = JobUpdate {
            time_limit: Some(Some(600)),
            ..Default::default()
        };
        let reply = on_update(&mut core, &reads, (&[1], &shorter), (&alice, 5), &mut fx).unwrap();
        assert_eq!(error_of(reply), None);
        assert_eq!(core.jobs[&1].time_limit, Some(600));
        let longer = JobUpdate {
            time_limit: Some(Some(7_200)),
            ..Default::default()
        };
        let reply = on_update(&mut core, &reads, (&[1], &longer), (&alice, 5), &mut fx).unwrap();
        assert!(error_of(reply)
            .unwrap()
            .contains("only admins may raise job 1's time limit"));
        assert_eq!(core.jobs[&1].time_limit, Some(600), "all or nothing");
        let root = requester(0, "root", true);
        let reply = on_update(&mut core, &reads, (&[1], &longer), (&root, 5), &mut fx).unwrap();
        assert_eq!(error_of(reply), None);
        assert_eq!(core.jobs[&1].time_limit, Some(7_200));
        let nothing = JobUpdate::default();
        let reply = on_update(&mut core, &reads, (&[1], &nothing), (&root, 5), &mut fx).unwrap();
        assert!(error_of(reply).unwrap().starts_with("nothing to update"));
    }
}
