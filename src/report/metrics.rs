//! The daemon's state as Prometheus text exposition (format 0.0.4), for
//! node_exporter's textfile collector or any scraper of a file: queue by
//! state and account, GPUs held per account, per-GPU utilisation where it
//! is sampled, the last scheduling pass, preemptions, budgets.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::model::gpu::Gpu;
use crate::model::gpu::Sample;
use crate::model::job::Job;

/// What the metrics are made of, as the daemon has it.
pub struct Inputs<'a> {
    pub jobs: &'a [&'a Job],
    pub gpus: &'a [Gpu],
    /// Each node's GPUs at their last reading (none: not sampled).
    pub samples: &'a [GpuSample<'a>],
    pub last_pass_seconds: f64,
    pub preemptions_total: u64,
    /// Jobs started between passes, the moment they were queued.
    pub quick_starts_total: u64,
    /// GPUs out of service.
    pub drained: &'a [u32],
    /// Spool requests handled, and the seconds from their sending to their
    /// handling, summed.
    pub requests_total: u64,
    pub ingest_seconds_sum: f64,
    /// Tokens left in each budgeted account's current period.
    pub budget_left: &'a [(String, f64)],
    /// Free GPUs while GPU jobs wait (0 when none wait), counted by the
    /// daemon over the pool.
    pub idle_while_waiting: usize,
    /// Each node: its name, Slurm's state word, its GPUs and how many
    /// running jobs hold.
    pub nodes: &'a [NodeLoad],
    /// Per account, every run stopped by a preemption or reclaim and how
    /// it went, from the accounting database.
    pub checkpoints: &'a [super::usage::CheckpointLine],
}

/// One GPU's last sample, and where the GPU is.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuSample<'a> {
    pub node: &'a str,
    pub gpu_type: &'a str,
    /// In the node's own GPU numbers.
    pub sample: Sample,
}

/// One node, for the metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeLoad {
    pub name: String,
    pub state: String,
    pub gpus: usize,
    pub gpus_allocated: usize,
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The exposition text.
pub fn render(inputs: &Inputs) -> String {
    let mut out = String::new();
    render_jobs(&mut out, inputs);
    render_gpus(&mut out, inputs);
    render_samples(&mut out, inputs);
    render_daemon(&mut out, inputs);
    render_checkpoints(&mut out, inputs.checkpoints);
    out
}

/// One number of an account's checkpoint line.
type Value = fn(&super::usage::CheckpointLine) -> f64;

/// How preemptions and reclaims went, per account: counters over the
/// accounting database's whole history.
fn render_checkpoints(out: &mut String, lines: &[super::usage::CheckpointLine]) {
    if lines.is_empty() {
        return;
    }
    family(
        out,
        "ysched_stopped_runs_total",
        "counter",
        "Runs stopped to make room, by account and kind (preempt or reclaim).",
    );
    for l in lines {
        let account = escape(&l.account);
        for (kind, n) in [("preempt", l.stops - l.reclaims), ("reclaim", l.reclaims)] {
            let _ = writeln!(
                out,
                "ysched_stopped_runs_total{{account=\"{account}\",kind=\"{kind}\"}} {n}"
            );
        }
    }
    let per_account: [(&str, &str, Value); 3] = [
        (
            "ysched_stopped_runs_clean_total",
            "Stopped runs that exited by themselves within their grace (checkpointed).",
            |l| l.clean_in_grace as f64,
        ),
        (
            "ysched_stopped_runs_resumed_total",
            "Stopped runs whose next run resumed (exited 0 or saved a checkpoint).",
            |l| l.resumed as f64,
        ),
        (
            "ysched_stopped_runs_lost_gpu_hours_total",
            "GPU-hours of work lost by stopped runs (since their last checkpoint).",
            |l| l.gpu_hours_lost,
        ),
    ];
    for (name, help, value) in per_account {
        family(out, name, "counter", help);
        for l in lines {
            let _ = writeln!(
                out,
                "{name}{{account=\"{}\"}} {}",
                escape(&l.account),
                value(l)
            );
        }
    }
}

/// Jobs by state and account.
fn render_jobs(out: &mut String, inputs: &Inputs) {
    family(
        out,
        "ysched_jobs",
        "gauge",
        "Jobs in the queue, by state and account.",
    );
    let mut by_state: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for job in inputs.jobs {
        *by_state
            .entry((job.state.name(), job.account.as_str()))
            .or_default() += 1;
    }
    for ((state, account), n) in &by_state {
        let _ = writeln!(
            out,
            "ysched_jobs{{state=\"{}\",account=\"{}\"}} {n}",
            state.to_ascii_lowercase(),
            escape(account)
        );
    }
}

/// The GPUs: how many, drained, held by account, idle while jobs wait.
fn render_gpus(out: &mut String, inputs: &Inputs) {
    family(
        out,
        "ysched_gpus",
        "gauge",
        "GPUs this controller schedules, on all its nodes.",
    );
    let _ = writeln!(out, "ysched_gpus {}", inputs.gpus.len());

    family(
        out,
        "ysched_gpus_drained",
        "gauge",
        "GPUs taken out of service (yscontrol drain).",
    );
    let _ = writeln!(out, "ysched_gpus_drained {}", inputs.drained.len());

    family(
        out,
        "ysched_gpus_allocated",
        "gauge",
        "GPUs held by running jobs, by account.",
    );
    let mut held: BTreeMap<&str, usize> = BTreeMap::new();
    for job in inputs.jobs.iter().filter(|j| j.state.holds_gpus()) {
        *held.entry(job.account.as_str()).or_default() += job.gpus_alloc.len();
    }
    for (account, n) in &held {
        let _ = writeln!(
            out,
            "ysched_gpus_allocated{{account=\"{}\"}} {n}",
            escape(account)
        );
    }

    // Free GPUs while jobs that want GPUs wait: fragmentation or limits.
    family(
        out,
        "ysched_gpus_idle_while_waiting",
        "gauge",
        "Free GPUs while GPU jobs are pending (0 when none wait).",
    );
    let _ = writeln!(
        out,
        "ysched_gpus_idle_while_waiting {}",
        inputs.idle_while_waiting
    );
    render_nodes(out, inputs);
}

/// Each node: in service or not (with its state word), its GPUs, how
/// many are held.
fn render_nodes(out: &mut String, inputs: &Inputs) {
    family(
        out,
        "ysched_node_up",
        "gauge",
        "Whether each node takes new jobs (1) or is drained or down (0), with Slurm's state word.",
    );
    for n in inputs.nodes {
        let up = !matches!(n.state.as_str(), "drain" | "drng" | "down");
        let _ = writeln!(
            out,
            "ysched_node_up{{node=\"{}\",state=\"{}\"}} {}",
            escape(&n.name),
            n.state,
            u8::from(up)
        );
    }
    family(out, "ysched_node_gpus", "gauge", "Each node's GPUs.");
    for n in inputs.nodes {
        let _ = writeln!(
            out,
            "ysched_node_gpus{{node=\"{}\"}} {}",
            escape(&n.name),
            n.gpus
        );
    }
    family(
        out,
        "ysched_node_gpus_allocated",
        "gauge",
        "Each node's GPUs held by running jobs.",
    );
    for n in inputs.nodes {
        let _ = writeln!(
            out,
            "ysched_node_gpus_allocated{{node=\"{}\"}} {}",
            escape(&n.name),
            n.gpus_allocated
        );
    }
}

/// Each GPU's last sample, where there is one.
fn render_samples(out: &mut String, inputs: &Inputs) {
    if inputs.samples.is_empty() {
        return;
    }
    family(
        out,
        "ysched_gpu_utilization_ratio",
        "gauge",
        "Utilisation of each GPU at the last sample, 0 to 1.",
    );
    for g in inputs.samples {
        let _ = writeln!(
            out,
            "ysched_gpu_utilization_ratio{{node=\"{}\",gpu=\"{}\",type=\"{}\"}} {}",
            escape(g.node),
            g.sample.gpu,
            escape(g.gpu_type),
            f64::from(g.sample.utilization_pct) / 100.0
        );
    }
    family(
        out,
        "ysched_gpu_memory_used_bytes",
        "gauge",
        "Memory used on each GPU at the last sample.",
    );
    for g in inputs.samples {
        let _ = writeln!(
            out,
            "ysched_gpu_memory_used_bytes{{node=\"{}\",gpu=\"{}\"}} {}",
            escape(g.node),
            g.sample.gpu,
            g.sample.memory_used_mb * (1 << 20)
        );
    }
}

/// The daemon's own figures: pass time, ingest latency, preemptions, budgets.
fn render_daemon(out: &mut String, inputs: &Inputs) {
    family(
        out,
        "ysched_schedule_pass_seconds",
        "gauge",
        "Duration of the last scheduling pass.",
    );
    let _ = writeln!(
        out,
        "ysched_schedule_pass_seconds {:.6}",
        inputs.last_pass_seconds
    );

    family(
        out,
        "ysched_ingest_latency_seconds",
        "summary",
        "From a command sending a request to ysctld handling it.",
    );
    let _ = writeln!(
        out,
        "ysched_ingest_latency_seconds_sum {:.6}\nysched_ingest_latency_seconds_count {}",
        inputs.ingest_seconds_sum, inputs.requests_total
    );

    family(
        out,
        "ysched_preemptions_total",
        "counter",
        "Preemptions decided (each may stop several jobs).",
    );
    let _ = writeln!(out, "ysched_preemptions_total {}", inputs.preemptions_total);

    family(
        out,
        "ysched_quick_starts_total",
        "counter",
        "Jobs started the moment they were queued, between scheduling passes, on what the last pass left idle.",
    );
    let _ = writeln!(
        out,
        "ysched_quick_starts_total {}",
        inputs.quick_starts_total
    );

    if !inputs.budget_left.is_empty() {
        family(
            out,
            "ysched_budget_left_tokens",
            "gauge",
            "Tokens (billing-hours) left in each budgeted account's period.",
        );
        for (account, left) in inputs.budget_left {
            let _ = writeln!(
                out,
                "ysched_budget_left_tokens{{account=\"{}\"}} {left:.3}",
                escape(account)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::job::JobState;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn a_queue_as_text() {
        let gpus = crate::gpu::test_a100s(4);
        let running = Job {
            state: JobState::Running,
            gpus_alloc: vec![0, 1],
            ..crate::model::job::example_job(1)
        };
        let pending = crate::model::job::example_job(2);
        let jobs = [&running, &pending];
        let text = render(&Inputs {
            jobs: &jobs,
            gpus: &gpus,
            samples: &[],
            last_pass_seconds: 0.0125,
            drained: &[],
            requests_total: 4,
            ingest_seconds_sum: 0.002,
            preemptions_total: 3,
            quick_starts_total: 2,
            budget_left: &[],
            idle_while_waiting: 2,
            nodes: &[NodeLoad {
                name: "gpu01".into(),
                state: "mix".into(),
                gpus: 4,
                gpus_allocated: 2,
            }],
            checkpoints: &[crate::report::usage::CheckpointLine {
                account: "vision".into(),
                stops: 3,
                reclaims: 1,
                clean_in_grace: 2,
                resumed: 2,
                unsettled: 0,
                gpu_hours_lost: 0.5,
            }],
        });
        assert!(
            text.contains("ysched_jobs{state=\"running\",account=\"vision\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("ysched_gpus_allocated{account=\"vision\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("ysched_gpus_idle_while_waiting 2\n"),
            "{text}"
        );
        assert!(text.contains("ysched_preemptions_total 3\n"), "{text}");
        assert!(text.contains("ysched_quick_starts_total 2\n"), "{text}");
        for line in [
            "ysched_stopped_runs_total{account=\"vision\",kind=\"preempt\"} 2\n",
            "ysched_stopped_runs_total{account=\"vision\",kind=\"reclaim\"} 1\n",
            "ysched_stopped_runs_clean_total{account=\"vision\"} 2\n",
            "ysched_stopped_runs_lost_gpu_hours_total{account=\"vision\"} 0.5\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(
            text.contains("ysched_node_up{node=\"gpu01\",state=\"mix\"} 1\n")
                && text.contains("ysched_node_gpus_allocated{node=\"gpu01\"} 2\n"),
            "{text}"
        );
        assert!(
            !text.contains("utilization"),
            "not sampled: no made-up numbers"
        );
    }

    #[test]
    fn each_gpus_last_sample_names_its_node() {
        let sample = |node, gpu| GpuSample {
            node,
            gpu_type: "a100",
            sample: Sample {
                gpu,
                utilization_pct: 25,
                memory_used_mb: 2,
            },
        };
        let samples = [sample("gpu01", 0), sample("gpu02", 0)];
        let text = render(&Inputs {
            jobs: &[],
            gpus: &[],
            samples: &samples,
            last_pass_seconds: 0.0,
            drained: &[],
            requests_total: 0,
            ingest_seconds_sum: 0.0,
            preemptions_total: 0,
            quick_starts_total: 0,
            budget_left: &[],
            idle_while_waiting: 0,
            nodes: &[],
            checkpoints: &[],
        });
        for node in ["gpu01", "gpu02"] {
            assert!(
                text.contains(&format!(
                    "ysched_gpu_utilization_ratio{{node=\"{node}\",gpu=\"0\",type=\"a100\"}} 0.25\n"
                )),
                "{text}"
            );
            assert!(
                text.contains(&format!(
                    "ysched_gpu_memory_used_bytes{{node=\"{node}\",gpu=\"0\"}} 2097152\n"
                )),
                "{text}"
            );
        }
    }
}
