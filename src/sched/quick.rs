//! A job started the moment it is queued, between passes: Slurm's
//! scheduling at submit. A full pass over a long queue takes its time
//! (about 100 ms over 100,000 pending jobs), so passes are spaced; a job
//! queued in between that fits on what the last pass left idle, delaying
//! none of its reservations and within its limits, starts at once, as
//! that pass would have started it ([`super::plan::start_on_spare`]).
//! What the pass cannot decide for one job alone is left to the next
//! pass: a dependency, a throttled array (`%N`), a budget that refuses
//! when spent (jobs of its accounts are counted against it in submit
//! order), a job that would borrow beyond its account's guarantee.

use crate::config::Config;
use crate::model::job::{Job, JobState};
use crate::model::policy::OverBudget;

use super::limits::Policy;
use super::pass::{placement, Placement};
use super::plan::{start_on_spare, Pool, Spare};
use super::pool::Layout;

/// What a quick start looks at besides the job and the spare.
pub struct Around<'a> {
    /// The pool's nodes and GPUs, as they were at the pass that left the
    /// spare (the caller sees to it).
    pub layout: &'a Layout,
    /// GPUs out of service, in pool numbers.
    pub drained: &'a [u32],
    pub now: i64,
}

/// Starts `job`, queued since the pass that left `spare`, where it fits
/// on that spare now, or leaves it to the next pass (`None`). The spare
/// comes back with the start taken from it.
pub fn start(
    spare: Spare,
    job: &Job,
    around: &Around<'_>,
    config: &Config,
) -> (Spare, Option<Placement>) {
    let policy = Policy::at(config, around.now);
    if job.state != JobState::Pending || !for_one_job_alone(job, &policy) {
        return (spare, None);
    }
    let pool = Pool::of(around.layout, around.drained);
    let (spare, start) = start_on_spare(spare, job, &pool, &policy, around.now);
    (spare, start.map(|s| placement(s, around.layout)))
}

/// Whether what decides if `job` may start is the job itself and what
/// runs, not the other jobs waiting.
fn for_one_job_alone(job: &Job, policy: &Policy) -> bool {
    let throttled = job.array.as_ref().is_some_and(|a| a.spec.contains('%'));
    let refusing_budget = policy.chain(&job.account).iter().any(|a| {
        a.budget
            .as_ref()
            .is_some_and(|b| b.over == OverBudget::Refuse)
    });
    job.dependency.is_none() && !throttled && !refusing_budget
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::job::{example_job, GpuRequest, JobId};
    use crate::sched::pass::{pass, State};

    fn config(extra: &str) -> Config {
        let text = format!(
            "{extra}[[gpus]]\ntype = \"a100\"\ncount = 4\nmemory = \"80G\"\n\
             [[accounts]]\nname = \"a\"\nusers = [\"*\"]\n"
        );
        Config::parse(&text, std::path::Path::new("t.toml")).unwrap()
    }

    fn job(id: JobId, gpus: u32, limit: u64) -> Job {
        Job {
            account: "a".into(),
            gpus: GpuRequest {
                count: gpus,
                ..GpuRequest::default()
            },
            cpus: 1,
            mem_mb: None,
            time_limit: Some(limit),
            submit_time: id as i64,
            ..example_job(id)
        }
    }

    fn running(id: JobId, alloc: &[u32], start: i64, limit: u64) -> Job {
        let mut j = job(id, alloc.len() as u32, limit);
        j.state = JobState::Running;
        j.gpus_alloc = alloc.to_vec();
        j.start_time = Some(start);
        j.node = Some("gpu01".into());
        j
    }

    /// The spare a pass over `jobs` at `now` leaves, on one node of 4 A100s.
    fn spare_after(jobs: &[&Job], layout: &Layout, config: &Config, now: i64) -> Spare {
        let (named, usage, spent, checkpoints) = Default::default();
        let state = State {
            jobs,
            named: &named,
            layout,
            drained: &[],
            usage: &usage,
            spent: &spent,
            checkpoints: &checkpoints,
            can_suspend: false,
            now,
            numbered: None,
        };
        pass(&state, config).spare.expect("a pass leaves a spare")
    }

    fn layout() -> Layout {
        Layout::single("gpu01", 64, 1 << 20, &crate::gpu::test_a100s(4))
    }

    #[test]
    fn a_job_that_fits_what_the_pass_left_starts_and_takes_it() {
        let (config, layout) = (config(""), layout());
        let busy = running(1, &[0, 1], 0, 1_000);
        let spare = spare_after(&[&busy], &layout, &config, 100);
        let around = Around {
            layout: &layout,
            drained: &[],
            now: 105,
        };
        let (spare, first) = start(spare, &job(2, 2, 60), &around, &config);
        let first = first.expect("two GPUs are idle");
        assert_eq!((first.node.as_str(), first.gpus), ("gpu01", vec![2, 3]));
        // What it took is gone from the spare.
        let (_, second) = start(spare, &job(3, 1, 60), &around, &config);
        assert_eq!(second, None);
    }

    #[test]
    fn a_quick_start_never_delays_a_reservation() {
        let (config, layout) = (config(""), layout());
        // GPUs 0-2 busy until 200; a 4-GPU job reserved from 200.
        let busy = running(1, &[0, 1, 2], 0, 200);
        let big = job(2, 4, 1_000);
        let spare = spare_after(&[&busy, &big], &layout, &config, 100);
        let at = |now| Around {
            layout: &layout,
            drained: &[],
            now,
        };
        // 90 s from 110 ends at 200: it fits before the reservation.
        let (_, short) = start(spare, &job(3, 1, 90), &at(110), &config);
        assert!(short.is_some());
        // The same shape later would run into it (the time since the pass
        // counts), and a long one never fits.
        let spare = spare_after(&[&busy, &big], &layout, &config, 100);
        let (spare, late) = start(spare, &job(4, 1, 90), &at(150), &config);
        assert_eq!(late, None);
        let (_, long) = start(spare, &job(5, 1, 500), &at(101), &config);
        assert_eq!(long, None);
    }

    #[test]
    fn what_other_jobs_decide_is_left_to_the_pass() {
        let (layout, now) = (layout(), 100);
        let config = config("");
        let around = Around {
            layout: &layout,
            drained: &[],
            now,
        };
        let mut after = job(2, 1, 60);
        after.dependency = Some("afterok:1".into());
        let mut held = job(3, 1, 60);
        held.hold = Some(crate::model::job::Hold::User);
        let mut later = job(4, 1, 60);
        later.begin_time = Some(now + 10);
        for waiting in [after, held, later] {
            let spare = spare_after(&[], &layout, &config, now);
            let (_, start) = start(spare, &waiting, &around, &config);
            assert_eq!(start, None, "job {}", waiting.id);
        }
    }

    #[test]
    fn account_limits_count_what_started_since_the_pass() {
        let layout = layout();
        let config = Config::parse(
            "[[gpus]]\ntype = \"a100\"\ncount = 4\nmemory = \"80G\"\n\
             [[accounts]]\nname = \"a\"\nmax_gpus = 2\nusers = [\"*\"]\n",
            std::path::Path::new("t.toml"),
        )
        .unwrap();
        let around = Around {
            layout: &layout,
            drained: &[],
            now: 10,
        };
        let spare = spare_after(&[], &layout, &config, 10);
        let (spare, one) = start(spare, &job(1, 2, 60), &around, &config);
        assert!(one.is_some());
        let (_, two) = start(spare, &job(2, 1, 60), &around, &config);
        assert_eq!(two, None, "the account's 2 GPUs are in use");
    }
}
