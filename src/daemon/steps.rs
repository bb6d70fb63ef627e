//! Job steps: `srun` in a running job asks for its step's number before
//! it starts the tasks and reports their end; both are recorded, for
//! `ysacct` to list under the job. Asked by the job's user (or an
//! administrator), from where the job runs. Handlers over the core
//! (`on_begin_step`, `on_end_step`, `on_cancel_step`).

use crate::exec::spec::{SignalTarget, StepCommand};
use crate::model::job::{ExitStatus, JobId, JobState};
use crate::model::step::{Step, StepGpu, StepUsage};
use crate::proto::Reply;

use super::effects::{Effects, Row};
use super::error::DaemonError;
use super::reads::Reads;
use super::requester::Requester;
use super::state::Core;

/// A step asked for: in which job, what it runs, where, how many tasks.
pub(super) struct StepAsk {
    pub(super) job: JobId,
    pub(super) name: String,
    pub(super) nodes: String,
    pub(super) tasks: u32,
    pub(super) pid: u32,
}

/// Records a step beginning in a running job; its number.
pub(super) fn on_begin_step(
    core: &mut Core,
    reads: &dyn Reads,
    ask: StepAsk,
    (who, now): (&Requester, i64),
    fx: &mut Effects,
) -> Result<Reply, DaemonError> {
    let refuse = |error: String| Ok(Reply::Rejected { error });
    if let Some(error) = refuse_step(core, reads, ask.job, who)? {
        return refuse(error);
    }
    let job = &core.jobs[&ask.job];
    if job.state != JobState::Running {
        return refuse(format!(
            "job {} is {}; steps run in a running job",
            job.display_id(),
            job.state
        ));
    }
    let restart = job.restart_count;
    // Read in the turn's transaction, which holds the steps begun in it.
    let number = reads.next_step(ask.job, restart)?;
    fx.row(Row::StepBegun(Box::new(Step {
        job: ask.job,
        restart,
        step: number,
        name: one_line(&ask.name, 64),
        nodes: one_line(&ask.nodes, 1024),
        tasks: ask.tasks,
        start: now,
        end: None,
        state: JobState::Running,
        exit: None,
        srun_pid: ask.pid,
        usage: None,
        gpu_begin: Some(StepGpu::of(&job.gpu_usage)),
        gpu: None,
    })));
    Ok(Reply::StepBegun {
        step: number,
        restart,
    })
}

/// Records the end of a step, with what srun measured its tasks used
/// and its share of the job's GPU readings, which the controller counts.
pub(super) fn on_end_step(
    core: &mut Core,
    reads: &dyn Reads,
    ((job, restart, step), exit, usage): ((JobId, u32, u32), ExitStatus, Option<StepUsage>),
    (who, now): (&Requester, i64),
    fx: &mut Effects,
) -> Result<Reply, DaemonError> {
    if let Some(error) = refuse_step(core, reads, job, who)? {
        return Ok(Reply::Rejected { error });
    }
    let ended = reads.step_running((job, restart, step))?;
    if ended {
        let begin = reads
            .steps_of(job)?
            .into_iter()
            .find(|s| (s.restart, s.step) == (restart, step))
            .and_then(|s| s.gpu_begin);
        let current = &core.jobs[&job];
        // Readings of this run only: a requeued run's sums start again.
        let gpu = begin
            .filter(|_| current.restart_count == restart)
            .map(|b| StepGpu::of(&current.gpu_usage).since(b));
        fx.row(Row::StepEnded {
            step: (job, restart, step),
            exit,
            time: now,
            usage,
            gpu,
        });
    }
    Ok(Reply::Control {
        outcomes: Vec::new(),
        message: (!ended).then(|| format!("step {job}.{step} had already ended")),
    })
}

/// Signals the srun of a running step, which passes the signal on to its
/// tasks (`scancel N.S`), once the turn is committed.
pub(super) fn on_cancel_step(
    core: &mut Core,
    reads: &dyn Reads,
    ((job, step), signal): ((JobId, u32), Option<i32>),
    who: &Requester,
    fx: &mut Effects,
) -> Result<Reply, DaemonError> {
    let error = match refuse_step(core, reads, job, who)? {
        Some(error) => Some(error),
        None => signal_step(
            core,
            reads,
            (job, step),
            signal.unwrap_or(libc::SIGTERM),
            fx,
        )?,
    };
    Ok(Reply::Control {
        outcomes: vec![crate::proto::JobOutcome::new(job, error)],
        message: None,
    })
}

/// Why step `step` of `job` cannot be signalled, if it cannot.
fn signal_step(
    core: &Core,
    reads: &dyn Reads,
    (job, step): (JobId, u32),
    signal: i32,
    fx: &mut Effects,
) -> Result<Option<String>, DaemonError> {
    let current = &core.jobs[&job];
    if current.state != JobState::Running {
        return Ok(Some(format!(
            "job {job} is {}; its steps are not running",
            current.state
        )));
    }
    let restart = current.restart_count;
    let found = reads
        .steps_of(job)?
        .into_iter()
        .find(|s| s.restart == restart && s.step == step && s.end.is_none());
    let target = match found {
        None => return Ok(Some(format!("step {job}.{step} is not running"))),
        // Its srun is outside the allocation: its tasks are signalled.
        Some(_) if current.interactive => SignalTarget::Step(step),
        Some(s) if s.srun_pid == 0 => {
            return Ok(Some(format!(
            "step {job}.{step} was started by an srun that did not say its process: cancel the job"
        )))
        }
        Some(s) => SignalTarget::Process(s.srun_pid),
    };
    fx.command(current, StepCommand::Signal { signal, target });
    tracing::info!(target: "ysched::daemon", "step {job}.{step} sent signal {signal}");
    Ok(None)
}

/// Why `who` may not record steps of `job`, if not: another's job, or one
/// not in the queue (its steps ended with it).
fn refuse_step(
    core: &Core,
    reads: &dyn Reads,
    job: JobId,
    who: &Requester,
) -> Result<Option<String>, DaemonError> {
    if core.jobs.get(&job).is_none() {
        return Ok(Some(format!(
            "job {job} is not running; its steps ended with it"
        )));
    }
    Ok(core
        .refusal(reads, job, who)?
        .map(super::access::AccessRefusal::into_message))
}

/// `text` on one line, at most `max` characters: what a step is called
/// and where it runs are shown in listings, one row each.
fn one_line(text: &str, max: usize) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .take(max)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::effects::Out;
    use super::super::testing::{core_with, requester, Archive};
    use super::*;

    fn ask(name: &str, pid: u32) -> StepAsk {
        StepAsk {
            job: 1,
            name: name.into(),
            nodes: "gpu01".into(),
            tasks: 2,
            pid,
        }
    }

    /// Job 1, alice's (uid 1000), running in its second run.
    fn core(state: JobState) -> Core {
        let mut job = crate::model::job::example_job(1);
        job.state = state;
        job.restart_count = 1;
        job.node = Some("gpu01".into());
        core_with(vec![job])
    }

    fn begun(fx: &Effects) -> Vec<&Step> {
        fx.rows()
            .iter()
            .filter_map(|r| match r {
                Row::StepBegun(step) => Some(&**step),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_step_of_a_running_job_is_numbered_in_its_run_and_named_on_one_line() {
        let (mut core, mut reads, mut fx) = (
            core(JobState::Running),
            Archive::default(),
            Effects::default(),
        );
        let alice = requester(1000, "alice", false);
        let mut earlier = Step {
            job: 1,
            restart: 1,
            step: 0,
            name: "prep".into(),
            nodes: "gpu01".into(),
            tasks: 1,
            start: 10,
            end: Some(20),
            state: JobState::Completed,
            exit: None,
            srun_pid: 40,
            usage: None,
            gpu_begin: None,
            gpu: None,
        };
        reads.steps.push(earlier.clone());
        earlier.restart = 0;
        earlier.step = 7;
        reads.steps.push(earlier);
        let reply = on_begin_step(
            &mut core,
            &reads,
            ask("train\n\x1b[2Jx", 50),
            (&alice, 100),
            &mut fx,
        );
        assert!(matches!(
            reply.unwrap(),
            Reply::StepBegun {
                step: 1,
                restart: 1
            }
        ));
        let step = begun(&fx)[0];
        assert_eq!(
            (step.name.as_str(), step.start, step.srun_pid),
            ("train??[2Jx", 100, 50)
        );
    }

    #[test]
    fn only_the_jobs_user_records_steps_and_only_while_it_runs() {
        let (mut core, reads, mut fx) = (
            core(JobState::Pending),
            Archive::default(),
            Effects::default(),
        );
        let bob = requester(1001, "bob", false);
        let theirs = on_begin_step(&mut core, &reads, ask("x", 1), (&bob, 0), &mut fx).unwrap();
        assert!(
            matches!(theirs, Reply::Rejected { error } if error == "permission denied: job 1 belongs to alice")
        );
        let alice = requester(1000, "alice", false);
        let pending = on_begin_step(&mut core, &reads, ask("x", 1), (&alice, 0), &mut fx).unwrap();
        assert!(
            matches!(pending, Reply::Rejected { error } if error == "job 1 is PENDING; steps run in a running job")
        );
        let mut other = ask("x", 1);
        other.job = 9;
        let gone = on_begin_step(&mut core, &reads, other, (&alice, 0), &mut fx).unwrap();
        assert!(
            matches!(gone, Reply::Rejected { error } if error.contains("its steps ended with it"))
        );
        assert!(fx.rows().is_empty());
    }

    #[test]
    fn a_step_ends_once_and_a_cancel_signals_its_srun_after_the_commit() {
        let (mut core, mut reads, mut fx) = (
            core(JobState::Running),
            Archive::default(),
            Effects::default(),
        );
        let alice = requester(1000, "alice", false);
        on_begin_step(
            &mut core,
            &reads,
            ask("train", 4242),
            (&alice, 100),
            &mut fx,
        )
        .unwrap();
        reads.steps.push(begun(&fx)[0].clone());
        let mut fx = Effects::default();
        let cancel = on_cancel_step(&mut core, &reads, ((1, 0), None), &alice, &mut fx).unwrap();
        let Reply::Control { outcomes, .. } = cancel else {
            panic!("{cancel:?}")
        };
        assert_eq!(outcomes[0].error, None);
        assert!(fx.outs().iter().any(|o| matches!(
            o,
            Out::Command {
                command: StepCommand::Signal {
                    signal: libc::SIGTERM,
                    target: SignalTarget::Process(4242)
                },
                ..
            }
        )));
        let missing =
            on_cancel_step(&mut core, &reads, ((1, 5), Some(9)), &alice, &mut fx).unwrap();
        assert!(
            matches!(missing, Reply::Control { outcomes, .. } if outcomes[0].error.as_deref() == Some("step 1.5 is not running"))
        );
        // Two readings of the job's GPUs while the step ran: its share.
        let job = core.jobs.job_mut(&1).unwrap();
        job.gpu_usage.samples += 2;
        job.gpu_usage.utilization_sum += 150;
        let exit = ExitStatus { code: 0, signal: 0 };
        let usage = Some(StepUsage {
            tasks: 2,
            max_rss_bytes: 1 << 20,
            ..StepUsage::default()
        });
        let ended = on_end_step(
            &mut core,
            &reads,
            ((1, 1, 0), exit, usage),
            (&alice, 200),
            &mut fx,
        )
        .unwrap();
        assert!(matches!(ended, Reply::Control { message: None, .. }));
        let share = StepGpu {
            samples: 2,
            utilization_sum: 150,
        };
        assert!(
            fx.rows().iter().any(|r| matches!(
                r,
                Row::StepEnded {
                    step: (1, 1, 0),
                    time: 200,
                    usage: u,
                    gpu: Some(g),
                    ..
                } if *u == usage && *g == share
            )),
            "{:?}",
            fx.rows()
        );
        reads.steps[0].end = Some(200);
        let again = on_end_step(
            &mut core,
            &reads,
            ((1, 1, 0), exit, None),
            (&alice, 300),
            &mut fx,
        )
        .unwrap();
        assert!(
            matches!(again, Reply::Control { message: Some(m), .. } if m == "step 1.0 had already ended")
        );
    }
}
