//! Times one scheduling pass on a large made-up queue, by stage (fair-share
//! tree, priorities, the plan) and whole, as the daemon runs it
//! (`sched::pass`); pure code, no daemon.
//!
//! cargo run --release --example sched_pass -- [PENDING] [ACCOUNTS] [GPUS]
//! (defaults: 100000 pending jobs, 50 accounts, 1024 GPUs)

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use ysched::config::Config;
use ysched::model::gpu::Gpu;
use ysched::model::job::{GpuRequest, Job, JobState};
use ysched::sched::{self, fairshare, priority};

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let pending_count = *args.first().unwrap_or(&100_000);
    let account_count = *args.get(1).unwrap_or(&50);
    let gpu_count = *args.get(2).unwrap_or(&1024) as u32;

    let mut text = String::new();
    for a in 0..account_count {
        text.push_str(&format!(
            "[[accounts]]\nname = \"acct{a}\"\nshares = {}\nusers = [\"*\"]\n",
            1 + a % 5
        ));
    }
    let config = Config::parse(&text, Path::new("bench.toml")).unwrap();
    let gpus: Vec<Gpu> = (0..gpu_count)
        .map(|i| Gpu {
            index: i,
            gpu_type: "a100".into(),
            memory_mb: 81_920,
            device: None,
            ..Gpu::default()
        })
        .collect();
    let template = |id: u64, count: u32| Job {
        id,
        uid: 1000,
        gid: 1000,
        user: format!("user{}", id % (account_count * 4)),
        account: format!("acct{}", id % account_count),
        qos: ["low", "medium", "high"][(id % 3) as usize].into(),
        name: "j".into(),
        gpus: GpuRequest {
            count,
            ..GpuRequest::default()
        },
        cpus: 1,
        time_limit: Some(3_600 * (1 + id % 24)),
        submit_time: id as i64,
        work_dir: "/".into(),
        submit_dir: "/".into(),
        std_out: "o".into(),
        ..Job::default()
    };
    // The GPUs all busy with 2-GPU jobs; a queue of 1-, 2-, 4- and 8-GPU jobs.
    let running: Vec<Job> = (0..gpu_count / 2)
        .map(|i| {
            let mut j = template(1_000_000 + i as u64, 2);
            j.state = JobState::Running;
            j.start_time = Some(0);
            j.gpus_alloc = vec![2 * i, 2 * i + 1];
            j
        })
        .collect();
    let pending: Vec<Job> = (0..pending_count)
        .map(|i| template(i, [1, 2, 4, 8][(i % 4) as usize]))
        .collect();
    let usage: HashMap<ysched::model::policy::Association, fairshare::Usage> = (0..account_count
        * 4)
        .map(|u| {
            let usage = fairshare::Usage {
                raw: (u as i64 + 1) * 3_600,
                decayed: (u as f64 + 1.0) * 3_600.0,
                as_of: 0,
            };
            (
                (format!("acct{}", u % account_count), format!("user{u}")),
                usage,
            )
        })
        .collect();
    let now = 10_000;
    let layout = sched::pool::Layout::single("bench", 1 << 20, 1 << 40, &gpus);
    let node = sched::Pool::of(&layout, &[]);

    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let mut stage = Instant::now();
        let mut lap = |name: &str| {
            if std::env::var_os("YS_STAGES").is_some() {
                eprintln!("  {name}: {:.1} ms", stage.elapsed().as_secs_f64() * 1e3);
            }
            stage = Instant::now();
        };
        let associations = pending
            .iter()
            .chain(&running)
            .map(|j| (j.account.as_str(), j.user.as_str()));
        let tree = fairshare::build_tree(&config, associations, &usage, now);
        lap("associations and tree");
        let shares = tree.compute(config.fairshare.algorithm);
        let factors = fairshare::factors(&tree, &shares);
        lap("fair-share");
        let ctx = priority::Context {
            weights: &config.priority,
            qos: &config.qos,
            fairshare: &factors,
            total_gpus: gpu_count,
        };
        let mut rater = priority::Rater::new(&ctx);
        let queue: Vec<(&Job, i64)> = pending
            .iter()
            .map(|j| (j, rater.factors(j, now).priority()))
            .collect();
        lap("priorities");
        let run: Vec<&Job> = running.iter().collect();
        let plan = sched::plan(
            &queue,
            &run,
            &node,
            &sched::limits::Policy::new(&config),
            now,
        );
        lap("plan");
        times.push(t.elapsed());
        assert_eq!(plan.reasons.len() + plan.starts.len(), pending.len());
    }
    times.sort();

    // The plan alone, with reservations for the first 100 blocked jobs (the
    // default) against 1 (EASY backfill), same queue, same process.
    let plan_only = |depth: usize| {
        let config = Config::parse(
            &format!("backfill_depth = {depth}\n{text}"),
            Path::new("bench.toml"),
        )
        .unwrap();
        let factors = fairshare::FactorMap::default();
        let ctx = priority::Context {
            weights: &config.priority,
            qos: &config.qos,
            fairshare: &factors,
            total_gpus: gpu_count,
        };
        let mut rater = priority::Rater::new(&ctx);
        let queue: Vec<(&Job, i64)> = pending
            .iter()
            .map(|j| (j, rater.factors(j, now).priority()))
            .collect();
        let run: Vec<&Job> = running.iter().collect();
        let policy = sched::limits::Policy::new(&config);
        let mut t: Vec<f64> = (0..5)
            .map(|_| {
                let start = Instant::now();
                sched::plan(&queue, &run, &node, &policy, now);
                start.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        t.sort_by(f64::total_cmp);
        t[2]
    };
    let (deep, easy) = (plan_only(100), plan_only(1));
    println!(
        "plan alone (median of 5): {deep:.1} ms with 100 reservations, {easy:.1} ms with 1 (EASY): ratio {:.2}",
        deep / easy
    );
    // The whole pass as the daemon and the simulator carry it out
    // (`sched::pass`: holds, dependencies, budgets, array throttles,
    // fair-share, priorities, the plan, preemption).
    let jobs: Vec<&Job> = pending.iter().chain(&running).collect();
    let (named, spent, checkpoints) = (HashMap::new(), HashMap::new(), HashMap::new());
    // The daemon keeps each job's association and QoS numbered with its
    // jobs, outside the pass.
    let numbered = sched::pass::Numbered::of(&jobs);
    let state = sched::pass::State {
        jobs: &jobs,
        named: &named,
        layout: &layout,
        drained: &[],
        usage: &usage,
        spent: &spent,
        checkpoints: &checkpoints,
        can_suspend: true,
        now,
        numbered: Some(&numbered),
    };
    let mut whole: Vec<f64> = (0..5)
        .map(|_| {
            let start = Instant::now();
            let decisions = sched::pass(&state, &config);
            assert_eq!(
                decisions.plan.reasons.len() + decisions.starts.len(),
                pending.len()
            );
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    whole.sort_by(f64::total_cmp);
    println!(
        "sched::pass, the daemon's whole pass: min {:.1} ms, median {:.1} ms",
        whole[0], whole[2]
    );
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM"))
                .map(|l| l.split_whitespace().nth(1).unwrap_or("?").to_string())
        })
        .unwrap_or_default();
    println!(
        "{pending_count} pending, {} running, {account_count} accounts, {gpu_count} GPUs: pass min {:.1} ms, median {:.1} ms; peak RSS {rss} kB",
        running.len(),
        times[0].as_secs_f64() * 1e3,
        times[2].as_secs_f64() * 1e3
    );
}
