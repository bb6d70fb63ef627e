//! `ysreport`'s usage report: per account and per user, the jobs that
//! ended in a period — GPU-hours, billed tokens, share, waits, preemptions
//! and how jobs ended — computed from accounting rows, and rendered as an
//! aligned table, CSV or JSON. A job counts in the period it ended in, with
//! all of its runs.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::job::JobState;

/// What a report needs of one finished job.
#[derive(Clone, Debug, PartialEq)]
pub struct EndedJob {
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
}

/// The period a report covers: [from, to), Unix seconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Period {
    pub from: i64,
    pub to: i64,
    /// `2026-11`, or `2026-11-03 – 2026-11-10`.
    pub label: String,
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
    pub completed: u64,
    pub failed: u64,
    pub timeout: u64,
    pub out_of_memory: u64,
    pub cancelled: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UsageReport {
    pub period: Period,
    pub total: Line,
    pub accounts: Vec<Line>,
    pub users: Vec<Line>,
}

#[derive(Default)]
struct Sums {
    line: Line,
    waits: Vec<i64>,
}

impl Sums {
    fn add(&mut self, job: &EndedJob) {
        let l = &mut self.line;
        l.jobs += 1;
        l.gpu_hours += job.gpu_seconds as f64 / 3600.0;
        l.tokens += job.billing as f64 / 3600.0;
        l.preemptions += u64::from(job.preempt_count);
        match job.state {
            JobState::Completed => l.completed += 1,
            JobState::Failed | JobState::NodeFail => l.failed += 1,
            JobState::Timeout => l.timeout += 1,
            JobState::OutOfMemory => l.out_of_memory += 1,
            JobState::Cancelled | JobState::Preempted => l.cancelled += 1,
            _ => {}
        }
        if let Some(start) = job.start_time {
            let eligible = job
                .begin_time
                .unwrap_or(job.submit_time)
                .max(job.submit_time);
            self.waits.push((start - eligible).max(0));
        }
    }

    fn finish(mut self, total_gpu_hours: f64) -> Line {
        self.waits.sort_unstable();
        let l = &mut self.line;
        if !self.waits.is_empty() {
            l.wait_mean_s = Some(self.waits.iter().sum::<i64>() as f64 / self.waits.len() as f64);
            l.wait_p50_s = Some(nearest_rank(&self.waits, 50));
            l.wait_p95_s = Some(nearest_rank(&self.waits, 95));
        }
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

/// Builds the report from the jobs that ended in `period`.
pub fn build(period: Period, jobs: impl IntoIterator<Item = EndedJob>) -> UsageReport {
    let mut builder = Builder::default();
    for job in jobs {
        builder.add(&job);
    }
    builder.finish(period)
}

/// Sums jobs one at a time (streamed from the database).
#[derive(Default)]
pub struct Builder {
    total: Sums,
    /// Per account: its sums, and its users' (looked up by borrowed
    /// names: a million rows, no key copies).
    accounts: BTreeMap<String, (Sums, BTreeMap<String, Sums>)>,
}

impl Builder {
    pub fn add(&mut self, job: &EndedJob) {
        self.total.add(job);
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

    pub fn finish(self, period: Period) -> UsageReport {
        let mut accounts = BTreeMap::new();
        let mut users = BTreeMap::new();
        for (name, (sums, of_users)) in self.accounts {
            for (user, s) in of_users {
                users.insert((name.clone(), user), s);
            }
            accounts.insert(name, sums);
        }
        assemble(period, self.total, accounts, users)
    }
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
    }
}

const HEADER: [&str; 14] = [
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
    "FAILED",
    "TIMEOUT",
    "OOM",
    "CANCELLED",
];

fn cells(l: &Line, readable: bool) -> Vec<String> {
    let wait = |w: Option<i64>| match (w, readable) {
        (Some(s), true) => crate::units::format_duration(s.max(0) as u64),
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
        l.failed.to_string(),
        l.timeout.to_string(),
        l.out_of_memory.to_string(),
        l.cancelled.to_string(),
    ]
}

/// The report as aligned text: accounts, then users, then the total.
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
    out
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
            account: account.into(),
            user: user.into(),
            state,
            submit_time: 1_000,
            begin_time: None,
            start_time: Some(1_000 + wait),
            gpu_seconds,
            billing: gpu_seconds * 2,
            preempt_count: 0,
        }
    }

    #[test]
    fn sums_shares_and_wait_percentiles_by_hand() {
        let period = Period {
            from: 0,
            to: 10,
            label: "x".into(),
        };
        let mut jobs: Vec<EndedJob> = (1..=20)
            .map(|w| job("vision", "alice", w * 60, 3_600, JobState::Completed))
            .collect();
        jobs.push(job("nlp", "bob", 0, 7_200, JobState::Timeout));
        jobs.push(EndedJob {
            start_time: None,
            ..job("nlp", "bob", 0, 0, JobState::Cancelled)
        });
        let r = build(period, jobs);
        assert_eq!(r.total.jobs, 22);
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
            csv.contains("\nvision,alice,20,20.00,40.00,0.9091,630,600,1140,0,0,0,0,0\n"),
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
            },
            Vec::new(),
        );
        assert_eq!(r.total.jobs, 0);
        assert_eq!(r.total.wait_mean_s, None);
        assert_eq!(
            render_text(&r),
            "Usage for 2026-10 (jobs that ended in it: 0)\nNo job ended in this period.\n"
        );
    }
}
