//! A scheduling pass's decisions carried out over the core: jobs whose
//! dependency can never be met cancelled where the config says so, the
//! starts marked running (their images present; a start whose image
//! is still pulling waits, one whose image failed ends FAILED), the
//! preemptions carried out, and the reasons, order and fair-share tree
//! kept for the views. The pass itself is `sched::pass`, a pure function
//! of the state; the images are looked at by the edge, which starts
//! their pulls (`Daemon::schedule`).

use std::collections::HashMap;

use crate::exec::executor::ImageStatus;
use crate::model::job::{ExitStatus, JobId, JobState};
use crate::proto::Channel;
use crate::sched::{self, Reason};

use super::effects::Effects;
use super::error::DaemonError;
use super::reads::Reads;
use super::state::Core;

/// What the edge does after a pass's decisions are recorded.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Passed {
    /// The jobs marked running, to launch once the turn is committed.
    pub(super) launch: Vec<JobId>,
    /// How many preemptions were carried out.
    pub(super) preemptions: u64,
}

/// Carries out `decisions`, the starts' images standing as `images`
/// says (a job it lacks has none to wait for).
pub(super) fn on_pass(
    core: &mut Core,
    reads: &dyn Reads,
    (decisions, images): (sched::pass::Decisions, &HashMap<JobId, ImageStatus>),
    (now, channel): (i64, Channel),
    fx: &mut Effects,
) -> Result<Passed, DaemonError> {
    let sched::pass::Decisions {
        plan,
        starts,
        mut held,
        never,
        preemptions,
        borrowing,
        tree,
        shares,
        factors,
        spare: _,
    } = decisions;
    core.mark_borrowing(&borrowing, fx);
    if core.config.kill_invalid_dependency {
        for id in never {
            held.remove(&id);
            let reason = Some("DependencyNeverSatisfied".into());
            core.finish(reads, (id, JobState::Cancelled, now), None, reason, fx)?;
        }
    }
    core.policy.fairshare = factors;
    core.policy.pass_tree = Some((tree, shares));
    let mut passed = Passed::default();
    let mut pulling = Vec::new();
    for start in starts {
        match images
            .get(&start.job)
            .cloned()
            .unwrap_or(ImageStatus::Ready)
        {
            ImageStatus::Ready => {
                let id = start.job;
                if core.mark_running(reads, start, now, fx) {
                    passed.launch.push(id);
                }
            }
            ImageStatus::Pulling => pulling.push(start.job),
            ImageStatus::Failed(why) => {
                let exit = Some(ExitStatus { code: 1, signal: 0 });
                core.finish(
                    reads,
                    (start.job, JobState::Failed, now),
                    exit,
                    Some(why),
                    fx,
                )?;
            }
        }
    }
    core.policy.reasons = plan.reasons;
    let mut wake_at = plan.wake_at;
    if !pulling.is_empty() {
        // Looked at again each second until its image is present.
        wake_at = Some(wake_at.map_or(now + 1, |w| w.min(now + 1)));
    }
    for id in pulling {
        core.policy.reasons.insert(id, Reason::ImagePull);
    }
    for preemption in preemptions {
        let id = preemption.job;
        core.carry_out(reads, preemption, (now, channel), fx);
        core.policy.reasons.insert(id, Reason::Preempting);
        passed.preemptions += 1;
    }
    core.policy.expected_starts = plan.expected_starts;
    // A job started now may satisfy an `after` dependency at once.
    if !passed.launch.is_empty() && !held.is_empty() {
        fx.reschedule = true;
    }
    core.policy.reasons.extend(held);
    core.policy.order = plan.order;
    core.policy.wake_at = wake_at;
    fx.views_changed();
    Ok(passed)
}

/// Marks running the jobs started between passes
/// (`Daemon::quick_starts`), and says which to launch.
pub(super) fn on_quick_starts(
    core: &mut Core,
    reads: &dyn Reads,
    starts: Vec<sched::pass::Placement>,
    now: i64,
    fx: &mut Effects,
) -> Vec<JobId> {
    let mut launch = Vec::new();
    for start in starts {
        let id = start.job;
        if core.mark_running(reads, start, now, fx) {
            core.policy.reasons.remove(&id);
            core.policy.expected_starts.remove(&id);
            launch.push(id);
        }
    }
    fx.views_changed();
    launch
}

#[cfg(test)]
mod tests {
    use super::super::effects::{Out, Row};
    use super::super::testing::{core_of, core_with, Archive};
    use super::*;
    use crate::model::job::Job;
    use crate::sched::pool::Layout;

    /// Alice's job `id` in QoS `qos`, pending for `gpus` GPUs.
    fn pending(id: JobId, qos: &str, gpus: u32) -> Job {
        let mut job = crate::model::job::example_job(id);
        job.account = "a".into();
        job.qos = qos.into();
        job.gpus.count = gpus;
        job
    }

    /// What the pass decides for `core` at `now`, on gpu01's four A100s.
    fn decide(core: &Core, now: i64) -> sched::pass::Decisions {
        let layout = Layout::single("gpu01", 64, 512 * 1024, &crate::gpu::test_a100s(4));
        let jobs: Vec<&Job> = core.jobs.all().collect();
        let (named, usage, checkpoints) = Default::default();
        let state = sched::pass::State {
            jobs: &jobs,
            named: &named,
            layout: &layout,
            drained: &[],
            usage: &usage,
            spent: &core.policy.budgets,
            checkpoints: &checkpoints,
            can_suspend: true,
            now,
            numbered: None,
        };
        sched::pass(&state, &core.config)
    }

    fn events(fx: &Effects) -> Vec<String> {
        fx.rows()
            .iter()
            .filter_map(|r| match r {
                Row::Event {
                    job, name, detail, ..
                } => Some(format!("{job} {name}: {}", detail.as_deref().unwrap_or(""))),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_starts_are_marked_running_and_handed_to_the_edge_to_launch() {
        let mut core = core_with(vec![pending(1, "medium", 2), pending(2, "medium", 2)]);
        let (reads, mut fx) = (Archive::default(), Effects::default());
        let decisions = decide(&core, 50);
        let no_images = HashMap::new();
        let passed = on_pass(
            &mut core,
            &reads,
            (decisions, &no_images),
            (50, Channel::Cli),
            &mut fx,
        );
        assert_eq!(passed.unwrap().launch, [1, 2]);
        for id in [1, 2] {
            let job = &core.jobs[&id];
            assert_eq!((job.state, job.start_time), (JobState::Running, Some(50)));
        }
        assert_eq!(
            core.jobs[&1].gpus_alloc.len() + core.jobs[&2].gpus_alloc.len(),
            4
        );
        assert_eq!(
            events(&fx),
            ["1 RUNNING: GPUs [0,1]", "2 RUNNING: GPUs [2,3]"]
        );
        assert!(fx.changed);
    }

    #[test]
    fn a_job_started_between_passes_runs_where_the_spare_put_it_and_loses_its_reason() {
        // GPUs 2 and 3 busy until 1000, a 4-GPU job reserved from then.
        let mut busy = pending(3, "medium", 2);
        busy.state = JobState::Running;
        busy.gpus_alloc = vec![2, 3];
        busy.node = Some("gpu01".into());
        busy.start_time = Some(0);
        busy.time_limit = Some(1_000);
        let mut core = core_with(vec![pending(2, "medium", 4), busy]);
        let (reads, mut fx) = (Archive::default(), Effects::default());
        let layout = Layout::single("gpu01", 64, 512 * 1024, &crate::gpu::test_a100s(4));
        let spare = decide(&core, 50).spare.expect("a pass leaves a spare");
        // Job 1 comes after the pass, for 5 minutes: done before 1000.
        let mut short = pending(1, "medium", 2);
        short.time_limit = Some(300);
        core.jobs.insert(short);
        core.policy.reasons.insert(1, Reason::Priority);
        core.policy.expected_starts.insert(1, 900);
        let around = sched::quick::Around {
            layout: &layout,
            drained: &[],
            now: 60,
        };
        let (_, start) = sched::quick::start(spare, &core.jobs[&1], &around, &core.config);
        let start = start.expect("two of four GPUs idle");
        let launch = on_quick_starts(&mut core, &reads, vec![start], 60, &mut fx);
        assert_eq!(launch, [1]);
        let job = &core.jobs[&1];
        assert_eq!((job.state, job.start_time), (JobState::Running, Some(60)));
        assert!(!core.policy.reasons.contains_key(&1));
        assert!(!core.policy.expected_starts.contains_key(&1));
        assert_eq!(core.jobs[&2].state, JobState::Pending);
        assert_eq!(events(&fx), ["1 RUNNING: GPUs [0,1]"]);
        // Nothing leaves before the commit: no command to a process.
        assert!(fx.out.iter().all(|o| !matches!(o, Out::Command { .. })));
        assert!(fx.changed);
    }

    #[test]
    fn a_start_whose_image_is_pulling_waits_and_one_whose_pull_failed_ends_failed() {
        let mut core = core_with(vec![pending(1, "medium", 2), pending(2, "medium", 2)]);
        let (reads, mut fx) = (Archive::default(), Effects::default());
        let decisions = decide(&core, 50);
        let images = HashMap::from([
            (1, ImageStatus::Pulling),
            (2, ImageStatus::Failed("manifest unknown".into())),
        ]);
        let passed = on_pass(
            &mut core,
            &reads,
            (decisions, &images),
            (50, Channel::Cli),
            &mut fx,
        );
        assert!(passed.unwrap().launch.is_empty());
        assert_eq!(core.jobs[&1].state, JobState::Pending);
        assert_eq!(core.policy.reasons.get(&1), Some(&Reason::ImagePull));
        assert_eq!(core.policy.wake_at, Some(51), "looked at again in a second");
        assert!(!core.jobs.contains_key(&2));
        assert!(fx.rows().iter().any(|r| matches!(
            r,
            Row::Job(j) if j.id == 2 && j.state == JobState::Failed
                && j.reason.as_deref() == Some("manifest unknown")
        )));
    }

    #[test]
    fn an_urgent_job_preempts_its_victims_which_keep_their_gpus_until_they_are_gone() {
        let qos = "[[qos]]\nname = \"high\"\npriority = 200\npreempt = [\"low\"]\n\
                   [[qos]]\nname = \"medium\"\npriority = 100\n\
                   [[qos]]\nname = \"low\"\npriority = 0\ngrace_time = \"0:30\"\n";
        let mut victim = pending(1, "low", 4);
        victim.state = JobState::Running;
        victim.start_time = Some(10);
        victim.node = Some("gpu01".into());
        victim.gpus_alloc = vec![0, 1, 2, 3];
        let mut core = core_of(qos, vec![victim, pending(2, "high", 4)]);
        let (reads, mut fx) = (Archive::default(), Effects::default());
        let decisions = decide(&core, 50);
        let none = HashMap::new();
        let passed = on_pass(
            &mut core,
            &reads,
            (decisions, &none),
            (50, Channel::Cli),
            &mut fx,
        );
        let passed = passed.unwrap();
        assert_eq!((passed.launch.len(), passed.preemptions), (0, 1));
        let victim = &core.jobs[&1];
        assert_eq!(victim.state, JobState::Completing);
        assert_eq!(victim.kill_reason, Some(JobState::Preempted));
        assert_eq!(victim.preempted_by, Some(2));
        assert_eq!(core.jobs[&2].claim, [0, 1, 2, 3]);
        assert_eq!(core.policy.reasons.get(&2), Some(&Reason::Preempting));
        assert_eq!(
            events(&fx),
            ["1 PREEMPTED: preempted by job 2; SIGTERM, SIGKILL after 30 s"]
        );
        assert!(fx
            .rows()
            .iter()
            .any(|r| matches!(r, Row::Stopped(s) if s.job == 1 && s.by == 2)));
        assert!(matches!(
            &fx.out[..],
            [Out::Command { job, command: crate::exec::spec::StepCommand::Terminate { grace_secs: 30, .. } }]
                if job.id == 1
        ));
    }
}
