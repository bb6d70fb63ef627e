//! Multifactor priority, as in Slurm: each factor is a number in [0, 1],
//! and a job's priority is their weighted sum minus its nice value:
//!
//! ```text
//! priority = w_age * age + w_fairshare * fairshare + w_qos * qos + w_size * size - nice
//! ```
//!
//! - age: time since the job became eligible (submitted, or its `--begin`),
//!   over `max_age`, capped at 1;
//! - fairshare: its (account, user) association's fair-share factor;
//! - qos: its QoS's priority over the highest QoS priority;
//! - size: its GPUs over the server's.
//!
//! The factors come back with the priority, so `ysqueue --priority` shows
//! the numbers the scheduler used.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use crate::config::{PriorityWeights, Qos};
use crate::model::job::Job;

/// What priority depends on besides the job.
pub struct Context<'a> {
    pub weights: &'a PriorityWeights,
    pub qos: &'a [Qos],
    /// Fair-share factor of each (account, user) association.
    pub fairshare: &'a crate::sched::fairshare::FactorMap,
    pub total_gpus: u32,
}

/// A job's factors, each in [0, 1], each also times its weight (what
/// `ysqueue --priority` shows), and its nice value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Factors {
    pub age: f64,
    pub fairshare: f64,
    pub qos: f64,
    pub size: f64,
    pub nice: i64,
    pub weighted: Weighted,
    /// Set by an update: this, not the weighted sum, is the priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed: Option<i64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Weighted {
    pub age: i64,
    pub fairshare: i64,
    pub qos: i64,
    pub size: i64,
}

impl Factors {
    pub fn priority(&self) -> i64 {
        if let Some(p) = self.fixed {
            return p;
        }
        let w = &self.weighted;
        w.age + w.fairshare + w.qos + w.size - self.nice
    }
}

/// One job's factors at `now` (for many jobs, a [`Rater`]).
pub fn factors(job: &Job, ctx: &Context, now: i64) -> Factors {
    Rater::new(ctx).factors(job, now)
}

/// Rates job after job with one context. It remembers the last job's
/// fair-share factor and QoS factor (by the names in that job, borrowed):
/// the fair-share factor is two hash lookups of the job's account and
/// user, which at 100,000 jobs was a third of a query snapshot's rebuild.
/// Jobs taken in id order come in runs of one association and one QoS, so
/// most jobs cost two string comparisons instead.
pub struct Rater<'c, 'a, 'j> {
    ctx: &'c Context<'a>,
    top_qos: i64,
    last_association: Option<(&'j str, &'j str, f64)>,
    last_qos: Option<(&'j str, f64)>,
}

impl<'c, 'a, 'j> Rater<'c, 'a, 'j> {
    pub fn new(ctx: &'c Context<'a>) -> Rater<'c, 'a, 'j> {
        Rater {
            ctx,
            top_qos: top_qos(ctx.qos),
            last_association: None,
            last_qos: None,
        }
    }

    pub fn factors(&mut self, job: &'j Job, now: i64) -> Factors {
        let qos = self.qos_factor(&job.qos);
        let fairshare = self.fairshare_factor(&job.account, &job.user);
        factors_with(self.ctx, job, now, (fairshare, qos))
    }

    fn qos_factor(&mut self, name: &'j str) -> f64 {
        if let Some((last, factor)) = self.last_qos {
            if last == name {
                return factor;
            }
        }
        let factor = qos_factor_of(self.ctx.qos, self.top_qos, name);
        self.last_qos = Some((name, factor));
        factor
    }

    fn fairshare_factor(&mut self, account: &'j str, user: &'j str) -> f64 {
        if let Some((a, u, factor)) = self.last_association {
            if a == account && u == user {
                return factor;
            }
        }
        let factor = crate::sched::fairshare::factor_of(self.ctx.fairshare, account, user);
        self.last_association = Some((account, user, factor));
        factor
    }
}

/// The highest priority of the QoS in `qos`, what [`qos_factor_of`]
/// divides by.
pub fn top_qos(qos: &[Qos]) -> i64 {
    qos.iter().map(|q| q.priority).max().unwrap_or(0)
}

/// The QoS factor of the QoS called `name` (0 for one not in `qos`).
pub fn qos_factor_of(qos: &[Qos], top: i64, name: &str) -> f64 {
    match qos.iter().find(|q| q.name == name) {
        Some(q) if top > 0 => (q.priority.max(0) as f64 / top as f64).min(1.0),
        _ => 0.0,
    }
}

/// A job's factors at `now`, given its association's fair-share factor
/// and its QoS's factor (looked up once for many jobs by the caller).
pub fn factors_with(ctx: &Context, job: &Job, now: i64, (fairshare, qos): (f64, f64)) -> Factors {
    let eligible = job
        .begin_time
        .unwrap_or(job.submit_time)
        .max(job.submit_time);
    let age = if ctx.weights.max_age == 0 {
        0.0
    } else {
        ((now - eligible).max(0) as f64 / ctx.weights.max_age as f64).min(1.0)
    };
    let size = if ctx.total_gpus == 0 {
        0.0
    } else {
        (job.gpus_wanted() as f64 / ctx.total_gpus as f64).min(1.0)
    };
    let w = ctx.weights;
    let weigh = |factor: f64, weight: u64| (factor * weight as f64).round() as i64;
    Factors {
        age,
        fairshare,
        qos,
        size,
        nice: job.nice,
        weighted: Weighted {
            age: weigh(age, w.age),
            fairshare: weigh(fairshare, w.fairshare),
            qos: weigh(qos, w.qos),
            size: weigh(size, w.size),
        },
        fixed: job.priority_override,
    }
}

/// Scheduling order: higher priority first, then earlier submission, then
/// lower id (submissions within one second keep their order).
pub fn order(a: (&Job, i64), b: (&Job, i64)) -> Ordering {
    b.1.cmp(&a.1)
        .then(a.0.submit_time.cmp(&b.0.submit_time))
        .then(a.0.id.cmp(&b.0.id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::default_qos_levels;
    use crate::model::job::example_job;
    use crate::sched::fairshare::FactorMap;

    fn weights() -> PriorityWeights {
        PriorityWeights {
            age: 1_000,
            fairshare: 10_000,
            qos: 100_000,
            size: 500,
            max_age: 1_000,
        }
    }

    #[test]
    fn factors_and_their_weighted_sum_by_hand() {
        let qos = default_qos_levels();
        let fs: FactorMap = [(
            "vision".to_string(),
            [("alice".to_string(), 0.25)].into_iter().collect(),
        )]
        .into_iter()
        .collect();
        let w = weights();
        let ctx = Context {
            weights: &w,
            qos: &qos,
            fairshare: &fs,
            total_gpus: 8,
        };
        let mut job = example_job(1); // medium QoS (100 of 300), 2 GPUs, submitted at 1,000
        job.nice = 7;
        let f = factors(&job, &ctx, 1_500);
        assert_eq!(f.age, 0.5);
        assert_eq!(f.fairshare, 0.25);
        assert!((f.qos - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(f.size, 0.25);
        assert_eq!(
            f.weighted,
            Weighted {
                age: 500,
                fairshare: 2_500,
                qos: 33_333,
                size: 125
            }
        );
        assert_eq!(f.priority(), 500 + 2_500 + 33_333 + 125 - 7);
        // Age is capped, and counts from --begin.
        assert_eq!(factors(&job, &ctx, 99_999).age, 1.0);
        job.begin_time = Some(1_400);
        assert!((factors(&job, &ctx, 1_500).age - 0.1).abs() < 1e-12);
        // An association without usage record: no fair-share claim.
        job.user = "bob".into();
        assert_eq!(factors(&job, &ctx, 1_500).fairshare, 0.0);
    }

    #[test]
    fn a_rater_gives_each_job_its_own_factors_whatever_came_before() {
        let qos = default_qos_levels();
        let w = weights();
        let fs: FactorMap = [
            (
                "vision".to_string(),
                [("alice".to_string(), 0.25), ("bob".to_string(), 0.75)]
                    .into_iter()
                    .collect(),
            ),
            (
                "nlp".to_string(),
                [("alice".to_string(), 0.5)].into_iter().collect(),
            ),
        ]
        .into_iter()
        .collect();
        let ctx = Context {
            weights: &w,
            qos: &qos,
            fairshare: &fs,
            total_gpus: 8,
        };
        let mut jobs = Vec::new();
        for (i, (account, user, q)) in [
            ("vision", "alice", "medium"),
            ("vision", "alice", "medium"),
            ("vision", "bob", "medium"),
            ("nlp", "alice", "critical"),
            ("vision", "alice", "low"),
            ("nlp", "bob", "nonesuch"),
            ("nlp", "alice", "critical"),
        ]
        .into_iter()
        .enumerate()
        {
            let mut job = example_job(i as u64 + 1);
            job.account = account.into();
            job.user = user.into();
            job.qos = q.into();
            jobs.push(job);
        }
        let mut rater = Rater::new(&ctx);
        for job in &jobs {
            let alone = factors(job, &ctx, 1_500);
            assert_eq!(rater.factors(job, 1_500), alone, "job {}", job.id);
        }
        assert_eq!(rater.factors(&jobs[2], 1_500).fairshare, 0.75);
        assert_eq!(rater.factors(&jobs[5], 1_500).fairshare, 0.0);
        assert_eq!(rater.factors(&jobs[5], 1_500).qos, 0.0);
        assert_eq!(rater.factors(&jobs[3], 1_500).qos, 1.0);
    }

    #[test]
    fn qos_dominates_with_the_default_weights() {
        let qos = default_qos_levels();
        let w = weights();
        let fs: FactorMap = [(
            "vision".to_string(),
            [("alice".to_string(), 0.0), ("bob".to_string(), 1.0)]
                .into_iter()
                .collect(),
        )]
        .into_iter()
        .collect();
        let ctx = Context {
            weights: &w,
            qos: &qos,
            fairshare: &fs,
            total_gpus: 8,
        };
        let mut urgent = example_job(1);
        urgent.qos = "critical".into();
        let mut fresh = example_job(2);
        fresh.user = "bob".into();
        let p = |j: &Job| factors(j, &ctx, 1_000).priority();
        assert!(
            p(&urgent) > p(&fresh),
            "a critical job of a heavy user beats a medium job of a fresh one"
        );
        let plain = example_job(3);
        assert!(p(&fresh) > p(&plain), "same QoS: fair-share decides");
    }
}
