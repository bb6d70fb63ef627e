//! The simulator: replays a workload trace through the scheduling policy
//! in virtual time — the same `sched` functions the daemon calls, with no
//! processes, spool or database — and measures what users would have seen.
//!
//! Each distinct event time (arrivals, ends) gets one scheduling pass, as in
//! the daemon. Usage is charged at each end and decays in virtual time, so
//! fair-share acts as it would live. `fifo` is the baseline: jobs start
//! strictly in submission order, and the first that does not fit stops the
//! queue, as in a simple GPU queue.

pub mod engine;
pub mod forecast;
pub mod trace;

pub use engine::Policy;

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::config::{Account, AccountLimits, Config};
use crate::model::job::Job;
use crate::sched::fairshare;
use trace::TraceJob;

#[derive(Clone, Debug, Default, Serialize)]
pub struct Stats {
    pub jobs: usize,
    pub gpu_hours: f64,
    pub wait_mean_s: f64,
    pub wait_p50_s: f64,
    pub wait_p95_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub policy: Policy,
    pub gpus: u32,
    pub jobs: usize,
    /// GPU-time used over GPU-time available from the first submission to
    /// the last end.
    pub utilization: f64,
    pub makespan_s: i64,
    /// The same, only over the time during which some job waited: 1.0 means
    /// no GPU was ever idle while work queued.
    pub utilization_while_waiting: f64,
    /// GPU-hours left idle while some job waited.
    pub idle_gpu_hours_while_waiting: f64,
    pub wait_mean_s: f64,
    pub wait_p50_s: f64,
    pub wait_p95_s: f64,
    /// Mean of max(1, (wait + run) / max(run, 10 s)).
    pub bounded_slowdown_mean: f64,
    /// Jain's index over accounts of GPU-seconds used per normalized share,
    /// over the whole replay. When every job runs in the end this reflects
    /// demand more than policy; see `jain_fairness_daily`.
    pub jain_fairness: f64,
    /// The same index per day, over the accounts that had work queued or
    /// running that day, averaged over days with two or more such accounts:
    /// whether, while they competed, accounts got GPU time by their shares.
    pub jain_fairness_daily: f64,
    pub backfilled_jobs: usize,
    /// Running jobs stopped for a preemptor (requeued), and of them those
    /// a lender reclaimed its guarantee from (elastic quotas).
    pub preempted_jobs: usize,
    pub reclaimed_jobs: usize,
    /// Jobs refused or moved to the lowest QoS by budgets.
    pub budget_refused: usize,
    pub budget_downgraded: usize,
    /// Jobs asking for more GPUs than the cluster has, cut down to fit.
    pub clamped_jobs: usize,
    pub skipped_rows: trace::Skipped,
    pub by_size: BTreeMap<String, Stats>,
    pub accounts: BTreeMap<String, Stats>,
    /// Seconds the replay took (wall clock, not virtual).
    pub elapsed_s: f64,
}

/// Adds an account (one share, everyone may use it) for each account the
/// trace names that the config does not, so a config of GPUs alone is enough.
fn complete_config(config: &Config, jobs: &[TraceJob]) -> Config {
    let mut config = config.clone();
    let mut names: Vec<&str> = jobs.iter().map(|j| j.account.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    for name in names {
        if !config.accounts.iter().any(|a| a.name == name) {
            config.accounts.push(Account {
                name: name.to_string(),
                parent: None,
                shares: 1.0,
                users: vec!["*".into()],
                limits: AccountLimits::default(),
                budget: None,
                coordinators: Vec::new(),
                approval: Default::default(),
            });
        }
    }
    config
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn stats(jobs: &[(f64, f64)]) -> Stats {
    // (wait, gpu-seconds) per job.
    let mut waits: Vec<f64> = jobs.iter().map(|(w, _)| *w).collect();
    waits.sort_by(f64::total_cmp);
    Stats {
        jobs: jobs.len(),
        gpu_hours: jobs.iter().map(|(_, g)| g).sum::<f64>() / 3_600.0,
        wait_mean_s: if waits.is_empty() {
            0.0
        } else {
            waits.iter().sum::<f64>() / waits.len() as f64
        },
        wait_p50_s: percentile(&waits, 50.0),
        wait_p95_s: percentile(&waits, 95.0),
    }
}

fn size_class(gpus: usize) -> &'static str {
    match gpus {
        0..=1 => "1 GPU",
        2..=4 => "2-4 GPUs",
        5..=16 => "5-16 GPUs",
        _ => "17+ GPUs",
    }
}

/// Replays `trace` under `policy` on the GPUs `config` declares.
pub fn run(config: &Config, trace: &[TraceJob], skipped: trace::Skipped, policy: Policy) -> Report {
    let started_at = std::time::Instant::now();
    let config = complete_config(config, trace);
    let sim = engine::Sim::new(&config, trace, policy, Vec::new());
    let gpus = sim.gpus();
    let (outcome, _) = sim.run();
    report(&config, trace, outcome, gpus, policy, skipped, started_at)
}

/// What a replay's outcome comes to.
fn report(
    config: &Config,
    trace: &[TraceJob],
    outcome: engine::Outcome,
    gpu_count: u32,
    policy: Policy,
    skipped: trace::Skipped,
    started_at: std::time::Instant,
) -> Report {
    let engine::Outcome {
        done,
        runs,
        counts,
        waited_s,
        busy_while_waiting,
    } = outcome;
    let done: Vec<Job> = done
        .into_iter()
        .filter(|j| j.start_time.is_some())
        .collect();
    let first_submit = trace.first().map_or(0, |t| t.submit);
    let last_end = done
        .iter()
        .filter_map(|j| j.end_time)
        .max()
        .unwrap_or(first_submit);
    let makespan = (last_end - first_submit).max(1);
    let gpu_seconds = |j: &Job| {
        (j.end_time.unwrap_or(0) - j.start_time.unwrap_or(0)) as f64 * j.gpus_alloc.len() as f64
    };
    let wait = |j: &Job| (j.start_time.unwrap_or(0) - j.submit_time) as f64;
    let all: Vec<(f64, f64)> = done.iter().map(|j| (wait(j), gpu_seconds(j))).collect();
    let overall = stats(&all);
    let mut by_size: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut by_account: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for j in &done {
        by_size
            .entry(size_class(j.gpus_alloc.len()).to_string())
            .or_default()
            .push((wait(j), gpu_seconds(j)));
        by_account
            .entry(j.account.clone())
            .or_default()
            .push((wait(j), gpu_seconds(j)));
    }
    let slowdown = done
        .iter()
        .map(|j| {
            let run = runs[&j.id] as f64;
            ((wait(j) + run) / run.max(10.0)).max(1.0)
        })
        .sum::<f64>()
        / done.len().max(1) as f64;
    let (jain, daily) = fairness(config, &by_account, &done);
    Report {
        policy,
        gpus: gpu_count,
        jobs: done.len(),
        utilization: all.iter().map(|(_, g)| g).sum::<f64>()
            / (makespan as f64 * gpu_count.max(1) as f64),
        makespan_s: makespan,
        utilization_while_waiting: if waited_s > 0 {
            busy_while_waiting / (waited_s as f64 * gpu_count.max(1) as f64)
        } else {
            1.0
        },
        idle_gpu_hours_while_waiting: (waited_s as f64 * gpu_count as f64 - busy_while_waiting)
            / 3600.0,
        wait_mean_s: overall.wait_mean_s,
        wait_p50_s: overall.wait_p50_s,
        wait_p95_s: overall.wait_p95_s,
        bounded_slowdown_mean: slowdown,
        jain_fairness: jain,
        jain_fairness_daily: daily,
        backfilled_jobs: counts.backfilled,
        preempted_jobs: counts.preempted,
        reclaimed_jobs: counts.reclaimed,
        budget_refused: counts.refused,
        budget_downgraded: counts.downgraded,
        clamped_jobs: counts.clamped,
        skipped_rows: skipped,
        by_size: by_size.iter().map(|(k, v)| (k.clone(), stats(v))).collect(),
        accounts: by_account
            .iter()
            .map(|(k, v)| (k.clone(), stats(v)))
            .collect(),
        elapsed_s: started_at.elapsed().as_secs_f64(),
    }
}

/// Jain's index over accounts of usage per normalized share: over the
/// whole replay, and per day while they competed.
fn fairness(
    config: &Config,
    by_account: &BTreeMap<String, Vec<(f64, f64)>>,
    done: &[Job],
) -> (f64, f64) {
    let tree = fairshare::build_tree(config, std::iter::empty(), &HashMap::new(), 0);
    let shares = tree.compute(config.fairshare.algorithm);
    let per_share: Vec<f64> = by_account
        .iter()
        .filter_map(|(name, jobs)| {
            let i = tree.account_index(name)?;
            let share = shares[i].norm_shares;
            (share > 0.0).then(|| jobs.iter().map(|(_, g)| g).sum::<f64>() / share)
        })
        .collect();
    (jain_index(&per_share), daily_fairness(done, &tree, &shares))
}

/// Jain's fairness index of `values`: 1 when all are equal, 1/n when one
/// has everything.
fn jain_index(values: &[f64]) -> f64 {
    let sum: f64 = values.iter().sum();
    let squares: f64 = values.iter().map(|x| x * x).sum();
    if squares > 0.0 {
        sum * sum / (values.len() as f64 * squares)
    } else {
        1.0
    }
}

/// Jain's index per day over the accounts with work queued or running
/// that day, of GPU-seconds per normalized share, averaged over the days
/// with two or more such accounts.
fn daily_fairness(done: &[Job], tree: &fairshare::Tree, shares: &[fairshare::NodeShare]) -> f64 {
    const DAY: i64 = 86_400;
    let share_of = |account: &str| {
        tree.account_index(account)
            .map_or(0.0, |i| shares[i].norm_shares)
    };
    // Per day: GPU-seconds per account, and which accounts were active.
    let mut used: HashMap<i64, HashMap<&str, f64>> = HashMap::new();
    let mut active: HashMap<i64, std::collections::HashSet<&str>> = HashMap::new();
    for j in done {
        let (submit, start, end) = (
            j.submit_time,
            j.start_time.unwrap_or(0),
            j.end_time.unwrap_or(0),
        );
        for day in submit.div_euclid(DAY)..=end.div_euclid(DAY) {
            active.entry(day).or_default().insert(&j.account);
            let (from, to) = ((day * DAY).max(start), ((day + 1) * DAY).min(end));
            if to > from {
                *used.entry(day).or_default().entry(&j.account).or_default() +=
                    (to - from) as f64 * j.gpus_alloc.len() as f64;
            }
        }
    }
    let indices: Vec<f64> = active
        .iter()
        .filter(|(_, a)| a.len() >= 2)
        .map(|(day, accounts)| {
            let x: Vec<f64> = accounts
                .iter()
                .filter(|a| share_of(a) > 0.0)
                .map(|a| used.get(day).and_then(|u| u.get(a)).copied().unwrap_or(0.0) / share_of(a))
                .collect();
            jain_index(&x)
        })
        .collect();
    if indices.is_empty() {
        1.0
    } else {
        indices.iter().sum::<f64>() / indices.len() as f64
    }
}

impl Report {
    /// The report for people.
    pub fn render(&self) -> String {
        let h = |s: f64| crate::model::units::format_duration(s.max(0.0).round() as u64);
        let mut out = format!(
            "policy {} on {} GPUs: {} jobs in {} (replayed in {:.2} s)\n\
             utilization            {:.1} % ({:.1} % while jobs waited; {:.1} GPU-hours idle then)\n\
             wait mean / p50 / p95  {} / {} / {}\n\
             bounded slowdown mean  {:.2}\n\
             Jain fairness          {:.3} (daily, while competing: {:.3})\n\
             backfilled jobs        {}\n",
            self.policy.name(),
            self.gpus,
            self.jobs,
            h(self.makespan_s as f64),
            self.elapsed_s,
            self.utilization * 100.0,
            self.utilization_while_waiting * 100.0,
            self.idle_gpu_hours_while_waiting,
            h(self.wait_mean_s),
            h(self.wait_p50_s),
            h(self.wait_p95_s),
            self.bounded_slowdown_mean,
            self.jain_fairness,
            self.jain_fairness_daily,
            self.backfilled_jobs
        );
        if self.preempted_jobs > 0 {
            out.push_str(&format!(
                "preempted jobs         {} ({} reclaimed from borrowing accounts)\n",
                self.preempted_jobs, self.reclaimed_jobs
            ));
        }
        if self.budget_refused + self.budget_downgraded > 0 {
            out.push_str(&format!(
                "budgets                {} refused, {} at the lowest QoS\n",
                self.budget_refused, self.budget_downgraded
            ));
        }
        if self.clamped_jobs > 0 {
            out.push_str(&format!(
                "clamped jobs           {} asked for more GPUs than there are\n",
                self.clamped_jobs
            ));
        }
        let skipped = &self.skipped_rows;
        if skipped.no_run_time + skipped.no_gpus > 0 {
            out.push_str(&format!(
                "skipped trace rows     {} without a run time, {} without GPUs\n",
                skipped.no_run_time, skipped.no_gpus
            ));
        }
        let table = |title: &str, rows: &BTreeMap<String, Stats>| {
            let mut t = format!(
                "\n{title:<12} {:>6} {:>10} {:>12} {:>12} {:>12}\n",
                "jobs", "GPU-hours", "wait mean", "wait p50", "wait p95"
            );
            for (name, s) in rows {
                t.push_str(&format!(
                    "{name:<12} {:>6} {:>10.1} {:>12} {:>12} {:>12}\n",
                    s.jobs,
                    s.gpu_hours,
                    h(s.wait_mean_s),
                    h(s.wait_p50_s),
                    h(s.wait_p95_s)
                ));
            }
            t
        };
        out.push_str(&table("size", &self.by_size));
        out.push_str(&table("account", &self.accounts));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(gpus: u32, extra: &str) -> Config {
        Config::parse(
            &format!("{extra}\n[[gpus]]\ntype = \"a100\"\ncount = {gpus}\nmemory = \"80G\"\n"),
            Path::new("x.toml"),
        )
        .unwrap()
    }

    fn t(line: usize, submit: i64, run: u64, gpus: u32, account: &str) -> TraceJob {
        TraceJob {
            line,
            submit,
            run,
            gpus,
            time_limit: run,
            user: format!("{account}-user"),
            account: account.into(),
            qos: None,
            dependency: None,
        }
    }

    #[test]
    fn backfill_fills_the_hole_fifo_leaves() {
        // 4 GPUs: a 2-GPU job runs 100 s; a 4-GPU job waits for it; 1-GPU
        // jobs of 50 s fit in the hole without delaying the big one. One
        // account, so that the big job comes first by age (another account
        // would come first by fair-share: the running job counts).
        let trace = vec![
            t(1, 0, 100, 2, "a"),
            t(2, 1, 100, 4, "a"),
            t(3, 2, 50, 1, "a"),
            t(4, 3, 50, 1, "a"),
        ];
        let fifo = run(&config(4, ""), &trace, Default::default(), Policy::Fifo);
        let ours = run(&config(4, ""), &trace, Default::default(), Policy::Ysched);
        assert_eq!(fifo.jobs, 4);
        assert_eq!(ours.jobs, 4);
        assert_eq!(ours.backfilled_jobs, 2);
        assert!(
            ours.wait_mean_s < fifo.wait_mean_s,
            "{} vs {}",
            ours.wait_mean_s,
            fifo.wait_mean_s
        );
        assert_eq!(
            ours.by_size["2-4 GPUs"].wait_mean_s, fifo.by_size["2-4 GPUs"].wait_mean_s,
            "the big job was not delayed"
        );
        assert!(ours.makespan_s < fifo.makespan_s);
        assert!(ours.utilization > fifo.utilization);
        // The small jobs waited 0 under ysched, 98+ under FIFO.
        assert_eq!(ours.by_size["1 GPU"].wait_mean_s, 0.0);
        assert!(fifo.by_size["1 GPU"].wait_mean_s >= 98.0);
    }

    #[test]
    fn fair_share_lets_a_light_account_past_a_heavy_one() {
        // 1 GPU. Account a submits a stream; b submits one job later. Under
        // FIFO b waits for all of a's; with fair-share b goes next.
        let mut trace: Vec<TraceJob> = (0..10).map(|i| t(i + 1, i as i64, 100, 1, "a")).collect();
        trace.push(t(11, 150, 100, 1, "b"));
        let fifo = run(&config(1, ""), &trace, Default::default(), Policy::Fifo);
        let ours = run(&config(1, ""), &trace, Default::default(), Policy::Ysched);
        assert!(fifo.accounts["b"].wait_mean_s > 800.0);
        assert!(
            ours.accounts["b"].wait_mean_s < 100.0,
            "{}",
            ours.accounts["b"].wait_mean_s
        );
    }

    #[test]
    fn an_elastic_quota_borrows_idle_gpus_and_gives_them_back() {
        // 4 GPUs, a and b guaranteed 2 each. a floods four 100-s jobs at
        // 0; b's 2-GPU job comes at 10.
        let mut trace: Vec<TraceJob> = (0..4).map(|i| t(i + 1, 0, 100, 1, "a")).collect();
        trace.push(t(5, 10, 20, 2, "b"));
        let accounts = |borrow: &str| {
            format!(
                "[[accounts]]\nname = \"a\"\nusers = [\"*\"]\nmax_gpus = 2\n{borrow}\n\
                 [[accounts]]\nname = \"b\"\nusers = [\"*\"]\nmax_gpus = 2\n"
            )
        };
        let rigid = run(
            &config(4, &accounts("")),
            &trace,
            Default::default(),
            Policy::Ysched,
        );
        let elastic = run(
            &config(4, &accounts("borrow_limit = 2")),
            &trace,
            Default::default(),
            Policy::Ysched,
        );
        // Rigid: a runs two at a time; b starts at once on the idle two.
        assert_eq!(rigid.reclaimed_jobs, 0);
        assert_eq!(rigid.accounts["b"].wait_mean_s, 0.0);
        assert_eq!(rigid.accounts["a"].wait_mean_s, 50.0, "two waited 100 s");
        // Elastic: a runs all four; b takes its two back at once, and a's
        // two borrowers run again after it.
        assert_eq!(elastic.reclaimed_jobs, 2);
        assert_eq!(elastic.accounts["b"].wait_mean_s, 0.0);
        assert!(
            elastic.accounts["a"].wait_mean_s < rigid.accounts["a"].wait_mean_s,
            "{} vs {}",
            elastic.accounts["a"].wait_mean_s,
            rigid.accounts["a"].wait_mean_s
        );
        assert!(elastic.makespan_s <= rigid.makespan_s);
    }

    #[test]
    fn oversized_jobs_are_clamped_and_budgets_count() {
        let trace = vec![t(1, 0, 3_600, 8, "a"), t(2, 1, 3_600, 1, "tight")];
        let cfg = config(
            2,
            "[[accounts]]\nname = \"tight\"\nusers = [\"*\"]\nbudget = 0.5\n",
        );
        let r = run(&cfg, &trace, Default::default(), Policy::Ysched);
        assert_eq!(r.clamped_jobs, 1);
        assert_eq!(r.budget_refused, 1, "an hour of a GPU is over half a token");
        assert_eq!(r.jobs, 1);
    }
}
