//! Time limits: a job's `--signal` sent when its limit is that close
//! (once per run), and a job stopped TIMEOUT at its limit. A job with a
//! node the controller cannot hear has its clock stopped there (the
//! node froze it when its lease ran out; it says for how long when it is
//! heard again), so its limit waits until every node of it is heard.

use crate::exec::spec::{SignalTarget, StepCommand};
use crate::model::job::{Job, JobId, JobState, WarnSignal};

use super::effects::Effects;
use super::reads::Reads;
use super::state::Core;

/// The clock reached `now`: warnings sent, jobs past their limit stopped.
pub(super) fn on_clock(core: &mut Core, reads: &dyn Reads, now: i64, fx: &mut Effects) {
    let due: Vec<(JobId, WarnSignal)> = core
        .jobs
        .running()
        .filter(|j| j.warn_at().is_some_and(|w| now >= w) && !core.policy.warned.contains(&j.id))
        .filter_map(|j| Some((j.id, j.warn_signal?)))
        .collect();
    for (id, warning) in due {
        core.policy.warned.insert(id);
        warn(core, id, warning, fx);
    }
    let heard = |j: &Job| j.node_names().all(|n| reads.node_heard(n));
    let expired: Vec<JobId> = core
        .jobs
        .running()
        .filter(|j| j.deadline().is_some_and(|d| now >= d) && heard(j))
        .map(|j| j.id)
        .collect();
    for id in expired {
        core.terminate(id, JobState::Timeout, "time limit reached", now, fx);
    }
}

/// Job `id`'s warning signal, after the commit: to its steps, or with
/// `B:` to its batch shell.
fn warn(core: &Core, id: JobId, warning: WarnSignal, fx: &mut Effects) {
    let Some(job) = core.jobs.get(&id) else {
        return;
    };
    let command = StepCommand::Signal {
        signal: warning.signal,
        target: SignalTarget::of_warning(warning.batch_only),
    };
    fx.command(job, command);
    tracing::info!(
        target: "ysched::daemon",
        "job {id} sent SIG{} (its time limit is near{})",
        crate::model::units::signal_name(warning.signal),
        if warning.batch_only { ", to its batch shell" } else { ", to its steps" }
    );
}

#[cfg(test)]
mod tests {
    use super::super::effects::Out;
    use super::super::testing::{core_with, Archive};
    use super::*;

    /// Job `id` on gpu01, running since 100 with an hour's limit and
    /// SIGUSR1 (10) 60 s before it.
    fn running(id: JobId) -> Job {
        let mut job = crate::model::job::example_job(id);
        job.state = JobState::Running;
        job.start_time = Some(100);
        job.time_limit = Some(3600);
        job.node = Some("gpu01".into());
        job.gpus_alloc = vec![0];
        job.warn_signal = Some(WarnSignal {
            signal: 10,
            before_secs: 60,
            batch_only: false,
        });
        job
    }

    fn signals(fx: &Effects) -> Vec<(JobId, StepCommand)> {
        fx.out
            .iter()
            .filter_map(|o| match o {
                Out::Command { job, command } => Some((job.id, command.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_job_is_warned_once_before_its_limit_and_stopped_timeout_at_it() {
        let (mut core, reads) = (core_with(vec![running(1)]), Archive::default());
        let mut fx = Effects::default();
        on_clock(&mut core, &reads, 3639, &mut fx);
        assert!(fx.out.is_empty(), "nothing is due before 3640");
        on_clock(&mut core, &reads, 3640, &mut fx);
        on_clock(&mut core, &reads, 3641, &mut fx);
        let warning = StepCommand::Signal {
            signal: 10,
            target: SignalTarget::Steps,
        };
        assert_eq!(signals(&fx), [(1, warning)], "one warning per run");
        assert_eq!(core.jobs[&1].state, JobState::Running);
        let mut fx = Effects::default();
        on_clock(&mut core, &reads, 3700, &mut fx);
        let job = &core.jobs[&1];
        assert_eq!(job.state, JobState::Completing);
        assert_eq!(job.kill_reason, Some(JobState::Timeout));
        assert!(matches!(
            &signals(&fx)[..],
            [(
                1,
                StepCommand::Terminate {
                    target: SignalTarget::Job,
                    ..
                }
            )]
        ));
    }

    #[test]
    fn a_suspension_moves_the_limit_and_an_unheard_node_holds_it() {
        let mut suspended = running(1);
        suspended.suspended_secs = 500;
        let (mut core, mut reads) = (core_with(vec![suspended, running(2)]), Archive::default());
        reads.unheard.insert("gpu01".into());
        let mut fx = Effects::default();
        on_clock(&mut core, &reads, 3700, &mut fx);
        assert_eq!(
            core.jobs[&2].state,
            JobState::Running,
            "its node is not heard"
        );
        reads.unheard.clear();
        on_clock(&mut core, &reads, 3700, &mut fx);
        assert_eq!(core.jobs[&2].state, JobState::Completing);
        assert_eq!(core.jobs[&1].state, JobState::Running, "500 s suspended");
        on_clock(&mut core, &reads, 4200, &mut fx);
        assert_eq!(core.jobs[&1].state, JobState::Completing);
    }
}
