//! `ysreport`'s usage report: per account and per user, the jobs that
//! ended in a period — GPU-hours, billed tokens, share, waits, preemptions
//! and how jobs ended — computed from accounting rows, and rendered as an
//! aligned table, CSV or JSON. A job counts in the period it ended in, with
//! all of its runs.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::model::job::JobState;

/// What a report needs of one finished job.
#[derive(Clone, Debug, PartialEq)]
pub struct EndedJob {
    pub id: crate::model::job::JobId,
    /// An interactive session (`salloc`, `srun` outside a job).
    pub interactive: bool,
    pub name: String,
    /// GPUs it held (its last run's).
    pub gpus: u32,
    pub gpu_usage: crate::model::gpu::JobGpuUsage,
    pub account: String,
    pub user: String,
    pub state: JobState,
    pub submit_time: i64,
    pub begin_time: Option<i64>,
    /// Its last run's start (`None`: it never ran).
    pub start_time: Option<i64>,
    pub gpu_seconds: i64,
    /// Billing-seconds charged over all its runs.
    pub billing: i64,
    pub preempt_count: u32,
    /// Running jobs it preempted to start.
    pub preemptions_caused: u32,
    pub end_time: i64,
    /// The node its last run was on (`None`: it never ran, or a record
    /// from before nodes were recorded).
    pub node: Option<String>,
    /// The GPU type it asked for (`None`: any).
    pub gpu_type: Option<String>,
    /// The container image its last run ran in, `REFERENCE@DIGEST`.
    pub image: Option<String>,
}

/// What the jobs that asked for one GPU type used in the period.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TypeLine {
    /// The type asked for; `any` for jobs that named none.
    pub gpu_type: String,
    pub jobs: u64,
    pub gpu_hours: f64,
    pub tokens: f64,
}

/// What the jobs that ran in one container image used in the period.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ImageLine {
    /// `REFERENCE@DIGEST`: the exact image.
    pub image: String,
    pub jobs: u64,
    pub gpu_hours: f64,
    pub tokens: f64,
}

/// What the jobs that ran on one node used in the period.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeLine {
    pub node: String,
    pub jobs: u64,
    pub gpu_hours: f64,
    /// Tokens (billing-hours) charged.
    pub tokens: f64,
}

/// The period a report covers: [from, to), Unix seconds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Period {
    pub from: i64,
    pub to: i64,
    /// `2026-11`, or `2026-11-03 – 2026-11-10`.
    pub label: String,
    /// Where each day of the period starts, in the config's time zone (at
    /// most MAX_DAYS): the daily charts' columns.
    #[serde(default)]
    pub days: Vec<i64>,
}

/// Where each day of [from, to) starts in `tz`: the period's start, then
/// each midnight (at most MAX_DAYS).
pub fn day_starts(from: i64, to: i64, tz: &jiff::tz::TimeZone) -> Result<Vec<i64>, jiff::Error> {
    let mut days = vec![from];
    let start = jiff::Timestamp::from_second(from)?;
    let mut date = start.to_zoned(tz.clone()).date();
    while days.len() < MAX_DAYS {
        date = date.tomorrow()?;
        let midnight = date.to_zoned(tz.clone())?.timestamp().as_second();
        if midnight >= to {
            break;
        }
        days.push(midnight);
    }
    Ok(days)
}

/// Days a report charts day by day, at most.
pub const MAX_DAYS: usize = 400;

impl Period {
    /// The day of the period holding `t` (`None`: outside the charted days).
    pub fn day_index(&self, t: i64) -> Option<usize> {
        if t < self.from || t >= self.to {
            return None;
        }
        match self.days.partition_point(|&d| d <= t) {
            0 => None,
            i => Some(i - 1),
        }
    }

    /// When day `i` ends.
    fn day_end(&self, i: usize) -> i64 {
        self.days.get(i + 1).copied().unwrap_or(self.to)
    }
}

/// One line of the report: an account, a user in an account, or the total.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Line {
    pub account: String,
    /// Empty on account lines and the total.
    pub user: String,
    pub jobs: u64,
    pub gpu_hours: f64,
    /// Billing-hours: GPU-hours × billing weight × QoS usage factor.
    pub tokens: f64,
    /// Of the period's GPU-hours, 0..1.
    pub share: f64,
    /// Over the jobs that ran: from eligible (submit or --begin) to start.
    pub wait_mean_s: Option<f64>,
    pub wait_p50_s: Option<i64>,
    pub wait_p95_s: Option<i64>,
    pub preemptions: u64,
    /// Running jobs its jobs preempted.
    #[serde(default)]
    pub preemptions_caused: u64,
    pub completed: u64,
    pub failed: u64,
    pub timeout: u64,
    pub out_of_memory: u64,
    pub cancelled: u64,
    /// Mean GPU utilisation over the sampled jobs (`None`: no samples).
    pub gpu_util_mean: Option<f64>,
    /// GPU-hours its jobs' GPUs spent below the low-utilisation threshold.
    pub idle_gpu_hours: f64,
    /// Of its jobs, the interactive sessions, and their GPU-hours.
    #[serde(default)]
    pub interactive_jobs: u64,
    #[serde(default)]
    pub interactive_gpu_hours: f64,
}

/// How the runs of an account's jobs stopped by preemption or reclaim
/// went: did they checkpoint within their grace, did the next run resume.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckpointLine {
    pub account: String,
    /// Runs stopped by a preemption or a reclaim in the period.
    pub stops: u64,
    /// Of them, by a reclaim of a lender's guarantee.
    pub reclaims: u64,
    /// Victims that exited by themselves within their grace.
    pub clean_in_grace: u64,
    /// Victims whose next run resumed: it exited 0 or saved a checkpoint.
    pub resumed: u64,
    /// Victims whose next run has not ended yet.
    pub unsettled: u64,
    /// GPU-hours of work lost: since the last checkpoint, for victims that
    /// did not exit within their grace.
    pub gpu_hours_lost: f64,
}

/// A job that held GPUs doing little for long: the waste ranking.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Waste {
    pub job_id: crate::model::job::JobId,
    pub name: String,
    pub account: String,
    pub user: String,
    pub gpus: u32,
    /// Time its GPUs averaged below the threshold.
    pub low_secs: u64,
    pub gpu_util_mean: Option<f64>,
    /// `low_secs` × its GPUs, in hours.
    pub wasted_gpu_hours: f64,
    /// How its GPUs each did, in a line (`1 of 4 GPUs idle 93 % of the
    /// time`); empty for a job read before GPUs were kept one by one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub verdict: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UsageReport {
    pub period: Period,
    pub total: Line,
    pub accounts: Vec<Line>,
    pub users: Vec<Line>,
    /// Jobs idle on their GPUs longer than the threshold, most wasted first.
    pub waste: Vec<Waste>,
    /// Whether any job of the period had utilisation samples.
    pub gpu_sampled: bool,
    /// GPU-hours per account per day (the period's `days`), each job's
    /// GPU time spread over the time before its end that it ran.
    #[serde(default)]
    pub daily_gpu_hours: BTreeMap<String, Vec<f64>>,
    /// How long the jobs that ran waited: jobs per bucket.
    #[serde(default)]
    pub wait_histogram: Vec<WaitBucket>,
    /// Each GPU over the period (all GPUs, whatever the filters).
    #[serde(default)]
    pub gpus: Vec<GpuSeries>,
    /// GPU-hours GPUs sat free while GPU jobs waited (all GPUs).
    #[serde(default)]
    pub idle_waiting_gpu_hours: f64,
    /// Budgeted accounts: what the period used of their budget (filled in
    /// by `ysreport` from the config, for complete monthly reports).
    #[serde(default)]
    pub budgets: Vec<BudgetLine>,
    /// Whether the report covers every user's jobs (an admin's, without -u):
    /// only then are budgets shown.
    #[serde(default)]
    pub complete: bool,
    /// Months whose job rows were purged, answered from their summaries.
    #[serde(default)]
    pub summarised_months: Vec<String>,
    /// Per node of a pool, by name (jobs that never ran are on none).
    #[serde(default)]
    pub nodes: Vec<NodeLine>,
    /// Per GPU type asked for (jobs that held GPUs).
    #[serde(default)]
    pub gpu_types: Vec<TypeLine>,
    /// Per container image (jobs that ran in one).
    #[serde(default)]
    pub images: Vec<ImageLine>,
    /// Per account, the preemptions and reclaims of the period and how
    /// they went.
    #[serde(default)]
    pub checkpoints: Vec<CheckpointLine>,
}

/// Jobs whose wait fell in [from, to) seconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WaitBucket {
    pub label: String,
    pub from_s: i64,
    pub jobs: u64,
}

/// The bucket bounds of the wait histogram, and their labels.
const WAIT_BUCKETS: [(i64, &str); 7] = [
    (0, "< 1 min"),
    (60, "1–10 min"),
    (600, "10–60 min"),
    (3_600, "1–6 h"),
    (21_600, "6–24 h"),
    (86_400, "1–3 days"),
    (259_200, "> 3 days"),
];

/// One GPU over the period.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuSeries {
    pub gpu: u32,
    /// Mean utilisation per day, percent (`None`: not sampled that day).
    pub util_by_day: Vec<Option<f64>>,
    pub util_mean: Option<f64>,
    pub idle_waiting_hours: f64,
}

/// An account's budget over the period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BudgetLine {
    pub account: String,
    /// Tokens for the period.
    pub budget: f64,
    /// Tokens charged by jobs of the account and the accounts below it.
    pub used: f64,
    pub left: f64,
}

/// Jobs listed in the waste ranking, at most.
pub const WASTE_ROWS: usize = 20;

#[derive(Default)]
struct Sums {
    line: Line,
    /// Each wait, for the percentiles (bucket bounds for summarised months).
    waits: Vec<i64>,
    /// Exact, for the mean.
    wait_sum: i64,
    util_samples: u64,
    util_sum: u64,
}

/// The wait of a job that ran: from eligible (submit, or `--begin`) to its
/// last start.
fn wait_of(job: &EndedJob) -> Option<i64> {
    let start = job.start_time?;
    let eligible = job
        .begin_time
        .unwrap_or(job.submit_time)
        .max(job.submit_time);
    Some((start - eligible).max(0))
}

/// Where a month's summary files a wait: the upper bound of its bucket —
/// the minute below an hour, ten minutes below a day, the hour beyond.
pub fn wait_bucket(wait: i64) -> i64 {
    let step = match wait {
        w if w < 3_600 => 60,
        w if w < 86_400 => 600,
        _ => 3_600,
    };
    (wait.max(0) + step - 1) / step * step
}

/// What a month's summary keeps of one user in one account once the
/// month's job rows are purged: sums that add up exactly, waits in buckets
/// (`wait_bucket`), GPU-hours per day.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub jobs: u64,
    pub completed: u64,
    pub failed: u64,
    pub timeout: u64,
    pub out_of_memory: u64,
    pub cancelled: u64,
    pub gpu_seconds: i64,
    pub billing: i64,
    pub preemptions: u64,
    pub preemptions_caused: u64,
    pub wait_sum: i64,
    /// Jobs per wait bucket, by the bucket's upper bound in seconds.
    pub waits: BTreeMap<i64, u64>,
    pub util_samples: u64,
    pub util_sum: u64,
    /// GPU-seconds spent below the low-utilisation threshold.
    pub low_gpu_seconds: u64,
    /// Interactive sessions, and their GPU-seconds.
    #[serde(default)]
    pub interactive_jobs: u64,
    #[serde(default)]
    pub interactive_gpu_seconds: i64,
    /// GPU-hours per day, by the day's start.
    pub daily: BTreeMap<i64, f64>,
}

impl Summary {
    pub fn add(&mut self, job: &EndedJob, period: &Period) {
        self.jobs += 1;
        match job.state {
            JobState::Completed => self.completed += 1,
            JobState::Failed | JobState::NodeFail => self.failed += 1,
            JobState::Timeout => self.timeout += 1,
            JobState::OutOfMemory => self.out_of_memory += 1,
            JobState::Cancelled | JobState::Preempted => self.cancelled += 1,
            _ => {}
        }
        self.gpu_seconds += job.gpu_seconds;
        self.billing += job.billing;
        self.preemptions += u64::from(job.preempt_count);
        self.preemptions_caused += u64::from(job.preemptions_caused);
        if let Some(wait) = wait_of(job) {
            self.wait_sum += wait;
            *self.waits.entry(wait_bucket(wait)).or_default() += 1;
        }
        self.util_samples += u64::from(job.gpu_usage.samples);
        self.util_sum += job.gpu_usage.utilization_sum;
        self.low_gpu_seconds += job.gpu_usage.low_secs * u64::from(job.gpus);
        if job.interactive {
            self.interactive_jobs += 1;
            self.interactive_gpu_seconds += job.gpu_seconds;
        }
        spread(job, period, |day, hours| {
            *self.daily.entry(period.days[day]).or_default() += hours;
        });
    }
}

/// A job's GPU-hours over the days it ran: back from its end, as long as
/// its GPU time lasts on its GPUs.
fn spread(job: &EndedJob, period: &Period, mut add: impl FnMut(usize, f64)) {
    if job.gpu_seconds <= 0 || period.days.is_empty() {
        return;
    }
    let gpus = i64::from(job.gpus.max(1));
    let end = job.end_time;
    let mut t = (end - job.gpu_seconds / gpus).max(period.from);
    while t < end {
        let Some(i) = period.day_index(t) else {
            break;
        };
        let until = period.day_end(i).min(end);
        add(i, (until - t) as f64 * gpus as f64 / 3600.0);
        t = until;
    }
}

impl Sums {
    /// A summarised month's user: its sums, its waits at their buckets' bounds.
    fn add_summary(&mut self, s: &Summary) {
        let l = &mut self.line;
        l.jobs += s.jobs;
        l.completed += s.completed;
        l.failed += s.failed;
        l.timeout += s.timeout;
        l.out_of_memory += s.out_of_memory;
        l.cancelled += s.cancelled;
        l.gpu_hours += s.gpu_seconds as f64 / 3600.0;
        l.tokens += s.billing as f64 / 3600.0;
        l.preemptions += s.preemptions;
        l.preemptions_caused += s.preemptions_caused;
        l.idle_gpu_hours += s.low_gpu_seconds as f64 / 3600.0;
        l.interactive_jobs += s.interactive_jobs;
        l.interactive_gpu_hours += s.interactive_gpu_seconds as f64 / 3600.0;
        self.wait_sum += s.wait_sum;
        for (&bound, &n) in &s.waits {
            self.waits.extend(std::iter::repeat_n(bound, n as usize));
        }
        self.util_samples += s.util_samples;
        self.util_sum += s.util_sum;
    }

    fn add(&mut self, job: &EndedJob) {
        let l = &mut self.line;
        l.jobs += 1;
        l.gpu_hours += job.gpu_seconds as f64 / 3600.0;
        l.tokens += job.billing as f64 / 3600.0;
        l.preemptions += u64::from(job.preempt_count);
        l.preemptions_caused += u64::from(job.preemptions_caused);
        match job.state {
            JobState::Completed => l.completed += 1,
            JobState::Failed | JobState::NodeFail => l.failed += 1,
            JobState::Timeout => l.timeout += 1,
            JobState::OutOfMemory => l.out_of_memory += 1,
            JobState::Cancelled | JobState::Preempted => l.cancelled += 1,
            _ => {}
        }
        if let Some(wait) = wait_of(job) {
            self.waits.push(wait);
            self.wait_sum += wait;
        }
        self.util_samples += u64::from(job.gpu_usage.samples);
        self.util_sum += job.gpu_usage.utilization_sum;
        self.line.idle_gpu_hours += job.gpu_usage.low_secs as f64 * f64::from(job.gpus) / 3600.0;
        if job.interactive {
            self.line.interactive_jobs += 1;
            self.line.interactive_gpu_hours += job.gpu_seconds as f64 / 3600.0;
        }
    }

    fn finish(mut self, total_gpu_hours: f64) -> Line {
        self.waits.sort_unstable();
        let l = &mut self.line;
        if !self.waits.is_empty() {
            l.wait_mean_s = Some(self.wait_sum as f64 / self.waits.len() as f64);
            l.wait_p50_s = Some(nearest_rank(&self.waits, 50));
            l.wait_p95_s = Some(nearest_rank(&self.waits, 95));
        }
        l.gpu_util_mean =
            (self.util_samples > 0).then(|| self.util_sum as f64 / self.util_samples as f64);
        l.share = if total_gpu_hours > 0.0 {
            l.gpu_hours / total_gpu_hours
        } else {
            0.0
        };
        self.line
    }
}

/// The p-th percentile of sorted values, by nearest rank.
fn nearest_rank(sorted: &[i64], p: usize) -> i64 {
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// Builds the report from the jobs that ended in `period`; jobs idle on
/// their GPUs longer than `waste_after_secs` are ranked.
pub fn build(
    period: Period,
    waste_after_secs: u64,
    jobs: impl IntoIterator<Item = EndedJob>,
) -> UsageReport {
    let mut builder = Builder::new(period, waste_after_secs);
    for job in jobs {
        builder.add(&job);
    }
    builder.finish()
}

/// Sums jobs one at a time (streamed from the database).
#[derive(Default)]
pub struct Builder {
    waste_after_secs: u64,
    waste: Vec<Waste>,
    total: Sums,
    /// Per account: its sums, and its users' (looked up by borrowed
    /// names: a million rows, no key copies).
    accounts: BTreeMap<String, (Sums, BTreeMap<String, Sums>)>,
    period: Period,
    daily: BTreeMap<String, Vec<f64>>,
    gpu_hours: Vec<super::history::GpuHour>,
    /// Per node: jobs, GPU-seconds, billing-seconds.
    nodes: BTreeMap<String, Tally>,
    /// The same per GPU type asked for.
    types: BTreeMap<String, Tally>,
    /// The same per container image.
    images: BTreeMap<String, Tally>,
}

/// Jobs, GPU-seconds and billing-seconds, under one key.
type Tally = (u64, i64, i64);

/// Counts `job` under `key`, without copying a key already there.
fn tally(map: &mut BTreeMap<String, Tally>, key: &str, job: &EndedJob) {
    let entry = match map.get_mut(key) {
        Some(e) => e,
        None => map.entry(key.to_string()).or_default(),
    };
    entry.0 += 1;
    entry.1 += job.gpu_seconds;
    entry.2 += job.billing;
}

/// Each key's jobs, GPU-hours and tokens, made into a line by `line`.
fn lines<T>(map: BTreeMap<String, Tally>, line: impl Fn(String, u64, f64, f64) -> T) -> Vec<T> {
    map.into_iter()
        .map(|(key, (jobs, gpu_seconds, billing))| {
            line(
                key,
                jobs,
                gpu_seconds as f64 / 3600.0,
                billing as f64 / crate::model::policy::TOKEN,
            )
        })
        .collect()
}

impl Builder {
    pub fn new(period: Period, waste_after_secs: u64) -> Builder {
        Builder {
            waste_after_secs,
            period,
            ..Builder::default()
        }
    }

    pub fn add(&mut self, job: &EndedJob) {
        self.total.add(job);
        self.spread_over_days(job);
        if let Some(node) = &job.node {
            tally(&mut self.nodes, node, job);
        }
        if let Some(image) = &job.image {
            tally(&mut self.images, image, job);
        }
        if job.gpus > 0 {
            tally(
                &mut self.types,
                job.gpu_type.as_deref().unwrap_or("any"),
                job,
            );
        }
        if job.gpus > 0 && job.gpu_usage.low_secs > self.waste_after_secs {
            self.waste.push(Waste {
                job_id: job.id,
                name: job.name.clone(),
                account: job.account.clone(),
                user: job.user.clone(),
                gpus: job.gpus,
                low_secs: job.gpu_usage.low_secs,
                gpu_util_mean: job.gpu_usage.mean(),
                wasted_gpu_hours: job.gpu_usage.low_secs as f64 * f64::from(job.gpus) / 3600.0,
                verdict: if job.gpu_usage.devices.is_empty() {
                    String::new()
                } else {
                    job.gpu_usage.verdict(job.gpus)
                },
            });
            // Keep the worst only, however many jobs there are.
            if self.waste.len() > 4 * WASTE_ROWS {
                rank(&mut self.waste);
            }
        }
        let (account, users) = match self.accounts.get_mut(&job.account) {
            Some(entry) => entry,
            None => self.accounts.entry(job.account.clone()).or_default(),
        };
        account.add(job);
        match users.get_mut(&job.user) {
            Some(s) => s.add(job),
            None => users.entry(job.user.clone()).or_default().add(job),
        }
    }

    /// Charges the job's GPU-hours to the days it ran: back from its end,
    /// as long as its GPU time lasts on its GPUs.
    fn spread_over_days(&mut self, job: &EndedJob) {
        if job.gpu_seconds <= 0 || self.period.days.is_empty() {
            return;
        }
        let days = self.period.days.len();
        let row = match self.daily.get_mut(&job.account) {
            Some(r) => r,
            None => self
                .daily
                .entry(job.account.clone())
                .or_insert_with(|| vec![0.0; days]),
        };
        spread(job, &self.period, |i, hours| row[i] += hours);
    }

    /// Adds one user's summary of a purged month (its jobs ended in it).
    pub fn add_summary(&mut self, account: &str, user: &str, summary: &Summary) {
        self.total.add_summary(summary);
        let (sums, users) = self.accounts.entry(account.to_string()).or_default();
        sums.add_summary(summary);
        users
            .entry(user.to_string())
            .or_default()
            .add_summary(summary);
        let days = self.period.days.len();
        if days == 0 {
            return;
        }
        let row = self
            .daily
            .entry(account.to_string())
            .or_insert_with(|| vec![0.0; days]);
        for (&day, &hours) in &summary.daily {
            if let Some(i) = self.period.day_index(day) {
                row[i] += hours;
            }
        }
    }

    /// Adds the waste ranking a purged month kept.
    pub fn add_waste(&mut self, waste: impl IntoIterator<Item = Waste>) {
        self.waste.extend(waste);
        if self.waste.len() > 4 * WASTE_ROWS {
            rank(&mut self.waste);
        }
    }

    /// The jobs ranked so far (before `finish`), worst first.
    pub fn waste_so_far(&mut self) -> Vec<Waste> {
        rank(&mut self.waste);
        self.waste.clone()
    }

    /// Adds the GPUs' hours of the period (utilisation per day, idle time
    /// while jobs waited).
    pub fn add_gpu_hours(&mut self, hours: &[super::history::GpuHour]) {
        self.gpu_hours.extend_from_slice(hours);
    }

    pub fn finish(self) -> UsageReport {
        let period = self.period.clone();
        let (gpus, idle_waiting_gpu_hours) = gpu_series(&period, &self.gpu_hours);
        let wait_histogram = wait_histogram(&self.total.waits);
        let daily_gpu_hours = self.daily;
        let mut accounts = BTreeMap::new();
        let mut users = BTreeMap::new();
        for (name, (sums, of_users)) in self.accounts {
            for (user, s) in of_users {
                users.insert((name.clone(), user), s);
            }
            accounts.insert(name, sums);
        }
        let gpu_sampled = self.total.util_samples > 0;
        let mut waste = self.waste;
        rank(&mut waste);
        let nodes = lines(self.nodes, |node, jobs, gpu_hours, tokens| NodeLine {
            node,
            jobs,
            gpu_hours,
            tokens,
        });
        let gpu_types = lines(self.types, |gpu_type, jobs, gpu_hours, tokens| TypeLine {
            gpu_type,
            jobs,
            gpu_hours,
            tokens,
        });
        let images = lines(self.images, |image, jobs, gpu_hours, tokens| ImageLine {
            image,
            jobs,
            gpu_hours,
            tokens,
        });
        UsageReport {
            nodes,
            gpu_types,
            images,
            waste,
            gpu_sampled,
            daily_gpu_hours,
            wait_histogram,
            gpus,
            idle_waiting_gpu_hours,
            ..assemble(period, self.total, accounts, users)
        }
    }
}

fn wait_histogram(waits: &[i64]) -> Vec<WaitBucket> {
    let mut buckets: Vec<WaitBucket> = WAIT_BUCKETS
        .iter()
        .map(|&(from_s, label)| WaitBucket {
            label: label.to_string(),
            from_s,
            jobs: 0,
        })
        .collect();
    for &w in waits {
        let i = WAIT_BUCKETS.partition_point(|&(from, _)| from <= w).max(1) - 1;
        buckets[i].jobs += 1;
    }
    buckets
}

/// Each GPU's utilisation per day and idle-while-waiting hours, and the
/// idle total.
fn gpu_series(period: &Period, hours: &[super::history::GpuHour]) -> (Vec<GpuSeries>, f64) {
    /// One GPU's sums: per day (utilisation sum, samples), then in all.
    struct Sum {
        per_day: Vec<(u64, u64)>,
        util_sum: u64,
        samples: u64,
        idle_secs: u64,
    }
    let days = period.days.len();
    let mut by_gpu: BTreeMap<u32, Sum> = BTreeMap::new();
    for h in hours {
        let sum = by_gpu.entry(h.gpu).or_insert_with(|| Sum {
            per_day: vec![(0, 0); days],
            util_sum: 0,
            samples: 0,
            idle_secs: 0,
        });
        if let Some(i) = period.day_index(h.hour.max(period.from)) {
            sum.per_day[i].0 += h.util_sum;
            sum.per_day[i].1 += u64::from(h.samples);
        }
        sum.util_sum += h.util_sum;
        sum.samples += u64::from(h.samples);
        sum.idle_secs += h.idle_waiting_secs;
    }
    let mean = |sum: u64, n: u64| (n > 0).then(|| sum as f64 / n as f64);
    let mut idle_total = 0.0;
    let series = by_gpu
        .into_iter()
        .map(|(gpu, s)| {
            idle_total += s.idle_secs as f64 / 3600.0;
            GpuSeries {
                gpu,
                util_by_day: s.per_day.into_iter().map(|(u, n)| mean(u, n)).collect(),
                util_mean: mean(s.util_sum, s.samples),
                idle_waiting_hours: s.idle_secs as f64 / 3600.0,
            }
        })
        .collect();
    (series, idle_total)
}

/// Most GPU-hours wasted first; the first WASTE_ROWS.
fn rank(waste: &mut Vec<Waste>) {
    waste.sort_by(|a, b| {
        b.wasted_gpu_hours
            .total_cmp(&a.wasted_gpu_hours)
            .then(a.job_id.cmp(&b.job_id))
    });
    waste.truncate(WASTE_ROWS);
}

fn assemble(
    period: Period,
    total: Sums,
    accounts: BTreeMap<String, Sums>,
    users: BTreeMap<(String, String), Sums>,
) -> UsageReport {
    let all = total.line.gpu_hours;
    let accounts = accounts
        .into_iter()
        .map(|(name, s)| Line {
            account: name,
            ..s.finish(all)
        })
        .collect();
    let users = users
        .into_iter()
        .map(|((account, user), s)| Line {
            account,
            user,
            ..s.finish(all)
        })
        .collect();
    UsageReport {
        period,
        total: Line {
            account: "TOTAL".into(),
            ..total.finish(all)
        },
        accounts,
        users,
        waste: Vec::new(),
        gpu_sampled: false,
        daily_gpu_hours: BTreeMap::new(),
        wait_histogram: Vec::new(),
        gpus: Vec::new(),
        idle_waiting_gpu_hours: 0.0,
        budgets: Vec::new(),
        complete: false,
        summarised_months: Vec::new(),
        nodes: Vec::new(),
        gpu_types: Vec::new(),
        images: Vec::new(),
        checkpoints: Vec::new(),
    }
}

const HEADER: [&str; 16] = [
    "ACCOUNT",
    "USER",
    "JOBS",
    "GPU_HOURS",
    "TOKENS",
    "SHARE",
    "WAIT_MEAN",
    "WAIT_P50",
    "WAIT_P95",
    "PREEMPTED",
    "PREEMPTS",
    "FAILED",
    "TIMEOUT",
    "OOM",
    "CANCELLED",
    "GPU_UTIL",
];

fn cells(l: &Line, readable: bool) -> Vec<String> {
    let wait = |w: Option<i64>| match (w, readable) {
        (Some(s), true) => crate::model::units::format_duration(s.max(0) as u64),
        (Some(s), false) => s.to_string(),
        (None, _) => if readable { "-" } else { "" }.to_string(),
    };
    vec![
        l.account.clone(),
        l.user.clone(),
        l.jobs.to_string(),
        format!("{:.2}", l.gpu_hours),
        format!("{:.2}", l.tokens),
        if readable {
            format!("{:.1}%", l.share * 100.0)
        } else {
            format!("{:.4}", l.share)
        },
        wait(l.wait_mean_s.map(|m| m.round() as i64)),
        wait(l.wait_p50_s),
        wait(l.wait_p95_s),
        l.preemptions.to_string(),
        l.preemptions_caused.to_string(),
        l.failed.to_string(),
        l.timeout.to_string(),
        l.out_of_memory.to_string(),
        l.cancelled.to_string(),
        match (l.gpu_util_mean, readable) {
            (Some(u), true) => format!("{u:.1}%"),
            (Some(u), false) => format!("{u:.1}"),
            (None, true) => "n/a".into(),
            (None, false) => String::new(),
        },
    ]
}

/// The usage table: a line per account, per user, and the total.
fn render_usage_table(out: &mut String, report: &UsageReport) {
    let mut rows: Vec<Vec<String>> = vec![HEADER.iter().map(|h| h.to_string()).collect()];
    rows.extend(report.accounts.iter().map(|l| cells(l, true)));
    rows.extend(report.users.iter().map(|l| cells(l, true)));
    rows.push(cells(&report.total, true));
    let widths: Vec<usize> = (0..HEADER.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, v)| {
                if c < 2 {
                    format!("{v:<w$}", w = widths[c])
                } else {
                    format!("{v:>w$}", w = widths[c])
                }
            })
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out.push('\n');
}

/// The report as aligned text: accounts, then users, then the total.
/// How preemptions and reclaims went, per account: runs stopped, clean
/// exits within the grace, resumed runs, GPU-hours lost.
fn render_checkpoints(out: &mut String, lines: &[CheckpointLine]) {
    if lines.is_empty() {
        return;
    }
    out.push_str("Preemptions and checkpoints\n");
    let _ = writeln!(
        out,
        "  {:<16} {:>7} {:>8} {:>14} {:>8} {:>9} {:>10}",
        "ACCOUNT", "STOPPED", "RECLAIMS", "CLEAN_IN_GRACE", "RESUMED", "UNSETTLED", "GPU_H_LOST"
    );
    for l in lines {
        let _ = writeln!(
            out,
            "  {:<16} {:>7} {:>8} {:>14} {:>8} {:>9} {:>10.2}",
            l.account,
            l.stops,
            l.reclaims,
            l.clean_in_grace,
            l.resumed,
            l.unsettled,
            l.gpu_hours_lost
        );
    }
    out.push('\n');
}

/// A section of lines: a key, its jobs, GPU-hours and tokens.
fn render_breakdown<'a>(
    out: &mut String,
    title: &str,
    rows: impl Iterator<Item = (&'a String, u64, f64, f64)>,
) {
    out.push_str(title);
    out.push('\n');
    for (key, jobs, gpu_hours, tokens) in rows {
        let _ = writeln!(
            out,
            "  {key:<16} {jobs:>7} jobs  {gpu_hours:>10.1} GPU-hours  {tokens:>10.2} tokens"
        );
    }
    out.push('\n');
}

/// How much of each account's use was interactive sessions (salloc,
/// srun outside a job), and their GPUs' idle time: a session holding
/// GPUs it does not use is the waste this shows.
fn render_interactive(out: &mut String, report: &UsageReport) {
    if report.total.interactive_jobs == 0 {
        return;
    }
    out.push_str("Interactive sessions (salloc, srun outside a job)\n");
    for line in report.accounts.iter().filter(|l| l.interactive_jobs > 0) {
        let share = if line.gpu_hours > 0.0 {
            line.interactive_gpu_hours / line.gpu_hours * 100.0
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "  {:<16} {:>7} sessions  {:>10.1} GPU-hours  {share:>5.1}% of the account's",
            line.account, line.interactive_jobs, line.interactive_gpu_hours
        );
    }
    out.push('\n');
}

pub fn render_text(report: &UsageReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Usage for {} (jobs that ended in it: {})",
        report.period.label, report.total.jobs
    );
    if report.total.jobs == 0 {
        out.push_str("No job ended in this period.\n");
        return out;
    }
    render_usage_table(&mut out, report);
    render_interactive(&mut out, report);
    // A pool's nodes (one server: nothing to break down).
    if report.nodes.len() > 1 {
        let rows = report.nodes.iter();
        render_breakdown(
            &mut out,
            "By node",
            rows.map(|n| (&n.node, n.jobs, n.gpu_hours, n.tokens)),
        );
    }
    if !report.images.is_empty() {
        let rows = report.images.iter();
        render_breakdown(
            &mut out,
            "By container image",
            rows.map(|i| (&i.image, i.jobs, i.gpu_hours, i.tokens)),
        );
    }
    render_checkpoints(&mut out, &report.checkpoints);
    if !report.budgets.is_empty() {
        out.push_str("Budgets (tokens)\n");
        for b in &report.budgets {
            let _ = writeln!(
                out,
                "  {:<16} budget {:>10.2}  used {:>10.2} ({:.1}%)  left {:>10.2}",
                b.account,
                b.budget,
                b.used,
                if b.budget > 0.0 {
                    b.used / b.budget * 100.0
                } else {
                    0.0
                },
                b.left
            );
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "GPUs idle while GPU jobs waited: {:.2} GPU-hours{}",
        report.idle_waiting_gpu_hours,
        if report.gpus.is_empty() {
            " (no GPU history recorded for this period)"
        } else {
            ""
        }
    );
    if !report.summarised_months.is_empty() {
        let _ = writeln!(
            out,
            "From monthly summaries (job rows purged): {}; their waits are summarised to the minute.",
            report.summarised_months.join(", ")
        );
    }
    if !report.gpu_sampled {
        out.push_str(
            "GPU utilisation: not sampled (no NVIDIA driver answered), so no waste ranking.\n",
        );
    } else if report.waste.is_empty() {
        out.push_str("Waste: no job held GPUs idle longer than the threshold.\n");
    } else {
        out.push_str("Waste: jobs whose GPUs sat below the utilisation threshold longest\n");
        for w in &report.waste {
            let _ = writeln!(
                out,
                "  {:>8}  {:<20}  {}/{}  {} GPU(s) idle {}  mean {}  wasted {:.2} GPU-hours",
                w.job_id,
                w.name.chars().take(20).collect::<String>(),
                w.account,
                w.user,
                w.gpus,
                crate::model::units::format_duration(w.low_secs),
                w.gpu_util_mean.map_or("n/a".into(), |u| format!("{u:.1}%")),
                w.wasted_gpu_hours
            );
            if !w.verdict.is_empty() {
                let _ = writeln!(out, "            {}", w.verdict);
            }
        }
    }
    out
}

/// What each budgeted account used of its budget: the tokens of its jobs
/// and of those of the accounts below it (`subtree`: the account's name
/// and its descendants'). Tokens are charged when a job ends, as budgets
/// count them.
pub fn budget_line(
    report: &UsageReport,
    account: &str,
    budget: f64,
    subtree: &[&str],
) -> BudgetLine {
    let used: f64 = report
        .accounts
        .iter()
        .filter(|l| subtree.contains(&l.account.as_str()))
        .map(|l| l.tokens)
        .sum();
    BudgetLine {
        account: account.to_string(),
        budget,
        used,
        left: budget - used,
    }
}

/// The report as CSV: one header, then accounts, users and the total.
pub fn render_csv(report: &UsageReport) -> String {
    let quote = |v: &str| {
        if v.contains([',', '"', '\n']) {
            format!("\"{}\"", v.replace('"', "\"\""))
        } else {
            v.to_string()
        }
    };
    let mut out = HEADER.join(",").to_ascii_lowercase();
    out.push('\n');
    for l in report
        .accounts
        .iter()
        .chain(&report.users)
        .chain(std::iter::once(&report.total))
    {
        let row: Vec<String> = cells(l, false).iter().map(|c| quote(c)).collect();
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(account: &str, user: &str, wait: i64, gpu_seconds: i64, state: JobState) -> EndedJob {
        EndedJob {
            id: 1,
            interactive: false,
            name: "j".into(),
            gpus: 1,
            gpu_usage: Default::default(),
            account: account.into(),
            user: user.into(),
            state,
            submit_time: 1_000,
            begin_time: None,
            start_time: Some(1_000 + wait),
            gpu_seconds,
            billing: gpu_seconds * 2,
            preempt_count: 0,
            preemptions_caused: 0,
            end_time: 1_000 + wait + 60,
            node: None,
            gpu_type: None,
            image: None,
        }
    }

    #[test]
    fn interactive_sessions_are_counted_apart_within_their_accounts() {
        let period = Period {
            from: 0,
            to: 10,
            label: "x".into(),
            days: Vec::new(),
        };
        let session = EndedJob {
            interactive: true,
            ..job("vision", "alice", 0, 3_600, JobState::Completed)
        };
        let jobs = vec![
            session.clone(),
            session,
            job("vision", "alice", 0, 7_200, JobState::Completed),
            job("nlp", "bob", 0, 3_600, JobState::Completed),
        ];
        let r = build(period, 3_600, jobs);
        let vision = r.accounts.iter().find(|l| l.account == "vision").unwrap();
        assert_eq!(vision.interactive_jobs, 2);
        assert!((vision.interactive_gpu_hours - 2.0).abs() < 1e-9);
        assert_eq!(r.total.interactive_jobs, 2);
        let text = render_text(&r);
        assert!(
            text.contains("Interactive sessions (salloc, srun outside a job)\n  vision")
                && text.contains("2 sessions")
                && text.contains("50.0% of the account's"),
            "{text}"
        );
        let section = text.split("Interactive sessions").nth(1).unwrap();
        let section = section.split("\n\n").next().unwrap();
        assert_eq!(
            section.lines().count(),
            2,
            "one account had sessions: {section}"
        );
    }

    #[test]
    fn sums_shares_and_wait_percentiles_by_hand() {
        let period = Period {
            from: 0,
            to: 10,
            label: "x".into(),
            days: Vec::new(),
        };
        let mut jobs: Vec<EndedJob> = (1..=20)
            .map(|w| job("vision", "alice", w * 60, 3_600, JobState::Completed))
            .collect();
        jobs.push(job("nlp", "bob", 0, 7_200, JobState::Timeout));
        jobs.push(EndedJob {
            start_time: None,
            ..job("nlp", "bob", 0, 0, JobState::Cancelled)
        });
        jobs[0].image = Some("yolo:v8@sha256:ab".into());
        jobs[1].image = Some("yolo:v8@sha256:ab".into());
        let r = build(period, 3_600, jobs);
        assert_eq!(r.images.len(), 1);
        assert_eq!(
            (r.images[0].image.as_str(), r.images[0].jobs),
            ("yolo:v8@sha256:ab", 2)
        );
        assert!((r.images[0].gpu_hours - 2.0).abs() < 1e-9);
        assert!(render_text(&r).contains("By container image\n  yolo:v8@sha256:ab"));
        assert_eq!(r.total.jobs, 22);
        assert_eq!(r.gpu_types.len(), 1);
        assert_eq!(
            (r.gpu_types[0].gpu_type.as_str(), r.gpu_types[0].jobs),
            ("any", 22)
        );
        assert!((r.total.gpu_hours - 22.0).abs() < 1e-9);
        let vision = &r.accounts[1];
        assert_eq!(vision.account, "vision");
        assert!((vision.share - 20.0 / 22.0).abs() < 1e-9);
        assert!((vision.tokens - 40.0).abs() < 1e-9);
        // Waits 1..20 minutes: mean 10.5 min; p50 rank 10 → 10 min; p95 rank 19.
        assert_eq!(vision.wait_mean_s, Some(630.0));
        assert_eq!(vision.wait_p50_s, Some(600));
        assert_eq!(vision.wait_p95_s, Some(1_140));
        let nlp = &r.accounts[0];
        assert_eq!((nlp.jobs, nlp.timeout, nlp.cancelled), (2, 1, 1));
        assert_eq!(nlp.wait_p50_s, Some(0), "only the job that ran waited");
        assert_eq!(r.users.len(), 2);
        let csv = render_csv(&r);
        assert!(csv.starts_with("account,user,jobs,gpu_hours"), "{csv}");
        assert!(
            csv.contains("\nvision,alice,20,20.00,40.00,0.9091,630,600,1140,0,0,0,0,0,0,\n"),
            "{csv}"
        );
        let text = render_text(&r);
        assert!(text.contains("TOTAL"), "{text}");
    }

    #[test]
    fn an_empty_period_is_an_honest_empty_report() {
        let r = build(
            Period {
                from: 0,
                to: 1,
                label: "2026-10".into(),
                days: Vec::new(),
            },
            3_600,
            Vec::new(),
        );
        assert_eq!(r.total.jobs, 0);
        assert_eq!(r.total.wait_mean_s, None);
        assert_eq!(
            render_text(&r),
            "Usage for 2026-10 (jobs that ended in it: 0)\nNo job ended in this period.\n"
        );
    }

    #[test]
    fn the_waste_ranking_lists_long_idle_jobs_worst_first() {
        let idle = |id, gpus, low_secs| EndedJob {
            id,
            gpus,
            gpu_usage: crate::model::gpu::JobGpuUsage {
                samples: 10,
                utilization_sum: 50,
                low_secs,
                ..Default::default()
            },
            ..job("vision", "alice", 0, 3_600, JobState::Completed)
        };
        let period = Period {
            from: 0,
            to: 1,
            label: "x".into(),
            days: Vec::new(),
        };
        // Job 2's GPUs one by one: one busy, three idle every reading.
        let mut each = idle(2, 4, 5_400);
        for _ in 0..10 {
            let read = |gpu, utilization_pct| crate::model::gpu::Sample {
                gpu,
                utilization_pct,
                memory_used_mb: 1,
            };
            let samples = [read(0, 80), read(1, 0), read(2, 0), read(3, 0)];
            each.gpu_usage
                .add(&samples, ("gpu01", &[0, 1, 2, 3]), 540, 10);
        }
        each.gpu_usage.samples = 10;
        each.gpu_usage.utilization_sum = 50;
        each.gpu_usage.low_secs = 5_400;
        let r = build(
            period,
            3_600,
            vec![idle(1, 1, 7_200), each, idle(3, 8, 1_800)],
        );
        let ids: Vec<u64> = r.waste.iter().map(|w| w.job_id).collect();
        assert_eq!(ids, vec![2, 1], "job 3 was idle less than the hour");
        assert!((r.waste[0].wasted_gpu_hours - 6.0).abs() < 1e-9);
        assert_eq!(r.waste[0].gpu_util_mean, Some(5.0));
        assert!(r.gpu_sampled);
        assert!((r.total.idle_gpu_hours - (2.0 + 6.0 + 4.0)).abs() < 1e-9);
        assert!(render_text(&r).contains("wasted 6.00 GPU-hours"));
        assert_eq!(r.waste[0].verdict, "3 of 4 GPUs idle 100 % of the time");
        assert_eq!(r.waste[1].verdict, "", "no GPU read one by one");
        assert!(render_text(&r).contains("\n            3 of 4 GPUs idle 100 % of the time\n"));
    }
}
