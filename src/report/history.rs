//! Each GPU's history, an hour at a time: utilisation samples, and the
//! time it sat free while jobs that want GPUs waited (the cost of
//! fragmentation and of limits). The daemon adds to it as it goes; the
//! HTML report charts it, and `ysreport` totals the idle time.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::model::job::{Job, JobState};

/// One GPU over one hour.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuHour {
    /// Start of the hour, Unix seconds (a multiple of 3,600).
    pub hour: i64,
    pub gpu: u32,
    pub samples: u32,
    /// Sum of the sampled utilisation percentages.
    pub util_sum: u64,
    pub mem_max_mb: u64,
    /// Seconds of the hour it was free while GPU jobs waited.
    pub idle_waiting_secs: u64,
}

impl GpuHour {
    /// Mean utilisation in percent; `None` without samples.
    pub fn util_mean(&self) -> Option<f64> {
        (self.samples > 0).then(|| self.util_sum as f64 / f64::from(self.samples))
    }
}

/// The start of the hour holding `t`.
pub fn hour_of(t: i64) -> i64 {
    t.div_euclid(3_600) * 3_600
}

/// [from, to) cut at hour boundaries: each hour and the seconds of it.
pub fn split_by_hour(from: i64, to: i64) -> Vec<(i64, u64)> {
    let mut out = Vec::new();
    let mut t = from;
    while t < to {
        let hour = hour_of(t);
        let end = (hour + 3_600).min(to);
        out.push((hour, (end - t) as u64));
        t = end;
    }
    out
}

/// The GPUs free while a GPU job waits that is not held: none when no such
/// job waits. A GPU counts as taken while any job (shards included) holds it.
pub fn idle_while_waiting<'a>(
    jobs: impl IntoIterator<Item = &'a Job>,
    gpu_count: usize,
) -> Vec<u32> {
    let mut taken = BTreeSet::new();
    let mut waiting = false;
    for job in jobs {
        if job.state.holds_gpus() {
            taken.extend(job.gpus_alloc.iter().copied());
        } else if waits_for_gpus(job) {
            waiting = true;
        }
    }
    if !waiting {
        return Vec::new();
    }
    (0..gpu_count as u32)
        .filter(|g| !taken.contains(g))
        .collect()
}

/// Whether a job waits for GPUs now: pending, asking for some, not held.
pub fn waits_for_gpus(job: &Job) -> bool {
    job.state == JobState::Pending && job.gpus.count > 0 && job.hold.is_none()
}

/// Watches which GPUs sit idle while jobs wait, and turns each stretch
/// into seconds per GPU and hour.
#[derive(Debug, Default)]
pub struct IdleWatch {
    since: i64,
    gpus: Vec<u32>,
}

impl IdleWatch {
    /// The idle set is now `gpus`: returns the seconds owed for the stretch
    /// that ends at `now` if the set changed (or `flush`), and starts anew.
    pub fn observe(&mut self, now: i64, gpus: Vec<u32>, flush: bool) -> Vec<(i64, u32, u64)> {
        if gpus == self.gpus && !flush {
            return Vec::new();
        }
        let mut owed = Vec::new();
        if self.since > 0 && now > self.since {
            for (hour, secs) in split_by_hour(self.since, now) {
                owed.extend(self.gpus.iter().map(|&g| (hour, g, secs)));
            }
        }
        self.since = now;
        self.gpus = gpus;
        owed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stretches_split_at_hours() {
        assert_eq!(
            split_by_hour(3_500, 7_300),
            vec![(0, 100), (3_600, 3_600), (7_200, 100)]
        );
        assert!(split_by_hour(10, 10).is_empty());
    }

    #[test]
    fn idle_gpus_count_only_while_gpu_jobs_wait() {
        let mut running = crate::model::job::example_job(1);
        running.state = JobState::Running;
        running.gpus_alloc = vec![0, 1];
        let mut waiting = crate::model::job::example_job(2);
        waiting.gpus.count = 4;
        assert_eq!(idle_while_waiting([&running], 4), Vec::<u32>::new());
        assert_eq!(idle_while_waiting([&running, &waiting], 4), vec![2, 3]);
        waiting.hold = Some(crate::model::job::Hold::User);
        assert!(idle_while_waiting([&running, &waiting], 4).is_empty());
    }

    #[test]
    fn the_watch_charges_each_stretch_once() {
        let mut w = IdleWatch::default();
        assert!(w.observe(3_000, vec![2, 3], false).is_empty());
        assert!(w.observe(3_100, vec![2, 3], false).is_empty(), "unchanged");
        let owed = w.observe(3_700, vec![3], false);
        assert_eq!(
            owed,
            vec![(0, 2, 600), (0, 3, 600), (3_600, 2, 100), (3_600, 3, 100)]
        );
        assert_eq!(w.observe(3_800, vec![3], true), vec![(3_600, 3, 100)]);
    }
}
