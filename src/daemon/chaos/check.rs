//! What must hold after every step of the simulation, whatever happened:
//! checked against what the simulated nodes really did (every run, its
//! GPUs, its real start and end) and what the controller recorded. Each
//! check is a function of those facts alone.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::job::{Job, JobId, JobState};

use super::node::Run;

/// The invariants, each with its name in the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Invariant {
    /// A GPU is never held by two runs.
    OneRunPerGpu,
    /// A job never has two runs that can both still write.
    OneRunPerJob,
    /// Every acknowledged submission survives every crash.
    AcknowledgedKept,
    /// A job that ended from its run's end is recorded with that end.
    RealEnds,
    /// Each job is charged the GPU time its runs really held, less the
    /// time they stood frozen, exactly.
    ExactCharges,
    /// Fair-share usage is the sum of the charges.
    UsageSumsCharges,
    /// After the faults stop, every job reaches a final state in time.
    Ends,
    /// The controller never fails on its own (an error it returns).
    Runs,
}

impl Invariant {
    pub const ALL: [Invariant; 8] = [
        Invariant::OneRunPerGpu,
        Invariant::OneRunPerJob,
        Invariant::AcknowledgedKept,
        Invariant::RealEnds,
        Invariant::ExactCharges,
        Invariant::UsageSumsCharges,
        Invariant::Ends,
        Invariant::Runs,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Invariant::OneRunPerGpu => "one run per GPU",
            Invariant::OneRunPerJob => "one live run per job",
            Invariant::AcknowledgedKept => "acknowledged jobs kept",
            Invariant::RealEnds => "real ends recorded",
            Invariant::ExactCharges => "exact charges",
            Invariant::UsageSumsCharges => "usage sums the charges",
            Invariant::Ends => "every job ends",
            Invariant::Runs => "the controller runs",
        }
    }
}

/// What broke an invariant, said.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Broken(pub String);

/// What the checks look at: the runs the nodes hold or held (with their
/// node's name), the jobs acknowledged, the controller's record of each
/// it has, and its fair-share usage (undecayed) per association.
pub(super) struct Facts<'a> {
    pub(super) runs: &'a [(String, Run)],
    pub(super) submitted: &'a BTreeSet<JobId>,
    pub(super) records: &'a BTreeMap<JobId, Job>,
    pub(super) usage: &'a BTreeMap<(String, String), i64>,
    /// Per job, the GPU-seconds its runs lost with their nodes may be
    /// charged beyond what they held (see `exact_charges`).
    pub(super) lost_slack: &'a BTreeMap<JobId, i64>,
}

/// One invariant's check.
pub(super) type Check = fn(&Facts) -> Result<(), Broken>;

/// The checks of what runs, for every step.
pub(super) const LIVE: [(Invariant, Check); 2] = [
    (Invariant::OneRunPerGpu, one_run_per_gpu),
    (Invariant::OneRunPerJob, one_run_per_job),
];

/// The checks of the records.
pub(super) const RECORDS: [(Invariant, Check); 4] = [
    (Invariant::AcknowledgedKept, acknowledged_kept),
    (Invariant::RealEnds, real_ends),
    (Invariant::ExactCharges, exact_charges),
    (Invariant::UsageSumsCharges, usage_sums_charges),
];

fn one_run_per_gpu(facts: &Facts) -> Result<(), Broken> {
    let mut held: BTreeMap<(&str, u32), &Run> = BTreeMap::new();
    for (node, run) in facts.runs.iter().filter(|(_, r)| r.ended.is_none()) {
        for &gpu in &run.gpus {
            if let Some(other) = held.insert((node, gpu), run) {
                return Err(Broken(format!(
                    "GPU {gpu} of {node} held by job {} (run {}) and job {} (run {})",
                    other.job, other.restart, run.job, run.restart
                )));
            }
        }
    }
    Ok(())
}

/// A frozen run cannot write: one frozen on a node that lost its lease
/// may wait there while the job runs again elsewhere, until its node is
/// heard again and stops it.
fn one_run_per_job(facts: &Facts) -> Result<(), Broken> {
    let mut live: BTreeMap<JobId, (&str, u32)> = BTreeMap::new();
    let writing = |r: &Run| r.ended.is_none() && r.frozen_since.is_none();
    for (node, run) in facts.runs.iter().filter(|(_, r)| writing(r)) {
        if let Some((other, restart)) = live.insert(run.job, (node, run.restart)) {
            return Err(Broken(format!(
                "job {} runs twice at once: run {restart} on {other}, run {} on {node}",
                run.job, run.restart
            )));
        }
    }
    Ok(())
}

fn acknowledged_kept(facts: &Facts) -> Result<(), Broken> {
    match facts
        .submitted
        .iter()
        .find(|id| !facts.records.contains_key(id))
    {
        Some(id) => Err(Broken(format!(
            "job {id} was acknowledged and is not on record"
        ))),
        None => Ok(()),
    }
}

/// Each job's runs, in the order they started.
fn runs_by_job(runs: &[(String, Run)]) -> BTreeMap<JobId, Vec<&Run>> {
    let mut by_job: BTreeMap<JobId, Vec<&Run>> = BTreeMap::new();
    for (_, run) in runs {
        by_job.entry(run.job).or_default().push(run);
    }
    for of in by_job.values_mut() {
        of.sort_by_key(|r| (r.start, r.restart));
    }
    by_job
}

fn real_ends(facts: &Facts) -> Result<(), Broken> {
    let by_job = runs_by_job(facts.runs);
    for job in facts.records.values().filter(|j| !j.state.is_active()) {
        // Ended from its last run: that run's start is the job's.
        let Some(&last) = by_job.get(&job.id).and_then(|r| r.last()) else {
            continue;
        };
        if job.start_time != Some(last.start) || job.restart_count != last.restart {
            continue;
        }
        let Some((end, _)) = last.ended else {
            return Err(Broken(format!(
                "job {} is recorded {} while its run {} still runs",
                job.id, job.state, last.restart
            )));
        };
        if job.end_time != Some(end) {
            return Err(Broken(format!(
                "job {} is recorded ending at {:?}, its run ended at {end}",
                job.id, job.end_time
            )));
        }
    }
    Ok(())
}

fn exact_charges(facts: &Facts) -> Result<(), Broken> {
    let by_job = runs_by_job(facts.runs);
    let none = Vec::new();
    for job in facts.records.values() {
        if job.state.is_active() && job.state != JobState::Pending {
            continue;
        }
        let of = by_job.get(&job.id).unwrap_or(&none);
        if of.iter().any(|r| r.ended.is_none()) {
            continue;
        }
        let held: i64 = of
            .iter()
            .filter_map(|r| r.working_secs().map(|s| s * r.gpus.len() as i64))
            .sum();
        // A run lost with its node is charged until the node's lease ran
        // out (it froze there then): exactly what it held if it still ran
        // then; if it ended in the silence, unseen, up to a lease more.
        // A freeze credited is a second short at most.
        let slack = facts.lost_slack.get(&job.id).copied().unwrap_or(0);
        if !(held..=held + slack).contains(&job.gpu_seconds) {
            let beyond = if slack > 0 {
                format!(" (and at most {slack} more, lost with their nodes or frozen)")
            } else {
                String::new()
            };
            return Err(Broken(format!(
                "job {} ({}) was charged {} GPU-seconds; its runs held {held}{beyond}",
                job.id, job.state, job.gpu_seconds
            )));
        }
    }
    Ok(())
}

fn usage_sums_charges(facts: &Facts) -> Result<(), Broken> {
    let mut charged: BTreeMap<(String, String), i64> = BTreeMap::new();
    for job in facts.records.values() {
        *charged
            .entry((job.account.clone(), job.user.clone()))
            .or_default() += job.billing.unwrap_or(0);
    }
    for (association, sum) in &charged {
        let usage = facts.usage.get(association).copied().unwrap_or(0);
        if usage != *sum {
            return Err(Broken(format!(
                "{}/{} has usage {usage}, its jobs were charged {sum}",
                association.0, association.1
            )));
        }
    }
    Ok(())
}
