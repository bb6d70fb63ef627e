//! How well a job used what it was given: `seff`'s CPU and memory
//! efficiency, in Slurm's seff layout, and what GPU sites ask beyond it —
//! each GPU's mean utilisation and peak memory, idle GPU-hours, and a
//! one-line verdict. Pure: a job's views in, text out.

use std::fmt::Write as _;

use super::view::JobView;
use crate::model::job::JobState;

/// A job's efficiency as seff computes it from its record and its steps'.
#[derive(Clone, Debug, PartialEq)]
pub struct Efficiency {
    pub cpus: u32,
    pub nodes: u32,
    /// Seconds it ran.
    pub wall_secs: u64,
    /// CPU time of all its steps, rounded to the second as seff rounds.
    pub cpu_secs: u64,
    /// The largest step's peak memory times its tasks, in KiB (seff's
    /// "estimated maximum"), and that step's tasks.
    pub memory_kib: u64,
    pub memory_tasks: u32,
    /// What it asked for, in KiB over all its nodes (0: no request).
    pub requested_kib: u64,
}

impl Efficiency {
    /// Of `job` and its steps' views (`N.batch`, `N.extern`, `N.0`...).
    pub fn of(job: &JobView, steps: &[JobView], now: i64) -> Efficiency {
        let record = &job.job;
        let mut cpu_usec = 0u64;
        let (mut memory_kib, mut memory_tasks) = (0u64, 0u32);
        for step in steps {
            let Some(of) = step.step else { continue };
            cpu_usec = cpu_usec.saturating_add(step.job.cpu_usec.unwrap_or(0));
            let peak = step.job.max_rss_bytes.unwrap_or(0) / 1024;
            if peak > memory_kib {
                memory_kib = peak;
                memory_tasks = of.tasks.max(1);
            }
        }
        // Without steps (nothing started yet), the job's own figures.
        if steps.is_empty() {
            cpu_usec = record.cpu_usec.unwrap_or(0);
            memory_kib = record.max_rss_bytes.unwrap_or(0) / 1024;
            memory_tasks = 1;
        }
        let nodes = record.node_count().max(1);
        Efficiency {
            cpus: record.cpus.max(1),
            nodes,
            wall_secs: record.elapsed(now),
            cpu_secs: (cpu_usec + 500_000) / 1_000_000,
            memory_kib: memory_kib.saturating_mul(u64::from(memory_tasks.max(1))),
            memory_tasks: memory_tasks.max(1),
            requested_kib: record
                .mem_mb
                .map_or(0, |mb| mb.saturating_mul(1024) * u64::from(nodes)),
        }
    }

    /// CPU time used of the CPU time held, in percent.
    pub fn cpu_pct(&self) -> f64 {
        let held = self.wall_secs * u64::from(self.cpus);
        if held == 0 {
            0.0
        } else {
            self.cpu_secs as f64 * 100.0 / held as f64
        }
    }

    /// Peak memory of the memory asked for, in percent.
    pub fn memory_pct(&self) -> f64 {
        if self.requested_kib == 0 {
            0.0
        } else {
            self.memory_kib as f64 * 100.0 / self.requested_kib as f64
        }
    }
}

/// seff's report on `job` (with its steps' views), line for line as
/// Slurm's contrib command prints it, then the GPU lines for a job that
/// held GPUs. `group` is the job's group's name, `cluster` the cluster's.
pub fn seff(job: &JobView, steps: &[JobView], (group, cluster): (&str, &str), now: i64) -> String {
    let record = &job.job;
    let e = Efficiency::of(job, steps, now);
    let mut out = String::new();
    let _ = writeln!(out, "Job ID: {}", record.id);
    if let Some(array) = &record.array {
        let _ = writeln!(out, "Array Job ID: {}_{}", array.job_id, array.task_id);
    }
    let _ = writeln!(out, "Cluster: {cluster}");
    let _ = writeln!(out, "User/Group: {}/{group}", record.user);
    let state = record.state.name();
    match record.state {
        JobState::Pending | JobState::Running => {
            let _ = writeln!(out, "State: {state}");
        }
        _ => {
            let code = record.exit.map_or(0, |x| x.code);
            let _ = writeln!(out, "State: {state} (exit code {code})");
        }
    }
    if e.cpus == 1 {
        let _ = writeln!(out, "Cores: 1");
    } else {
        let _ = writeln!(out, "Nodes: {}", e.nodes);
        let _ = writeln!(out, "Cores per node: {}", e.cpus / e.nodes);
    }
    if record.state == JobState::Pending {
        out.push_str("Efficiency not available for jobs in the PENDING state.\n");
        return out;
    }
    let held = e.wall_secs * u64::from(e.cpus);
    let _ = writeln!(out, "CPU Utilized: {}", clock(e.cpu_secs));
    let _ = writeln!(
        out,
        "CPU Efficiency: {:.2}% of {} core-walltime",
        e.cpu_pct(),
        clock(held)
    );
    let _ = writeln!(out, "Job Wall-clock time: {}", clock(e.wall_secs));
    let estimated = if e.memory_tasks == 1 {
        ""
    } else {
        " (estimated maximum)"
    };
    let _ = writeln!(out, "Memory Utilized: {}{estimated}", kib(e.memory_kib));
    let share = if e.memory_tasks == 1 {
        String::new()
    } else {
        format!(" ({}/node)", kib(e.requested_kib / u64::from(e.nodes)))
    };
    let _ = writeln!(
        out,
        "Memory Efficiency: {:.2}% of {}{share}",
        e.memory_pct(),
        kib(e.requested_kib)
    );
    if record.state == JobState::Running {
        out.push_str("WARNING: Efficiency statistics may be misleading for RUNNING jobs.\n");
    }
    if record.gpus.count > 0 {
        for line in gpu_lines(job) {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

/// What a job's GPUs did, a line each: the GPUs held, their mean
/// utilisation, each GPU's mean, peak memory and idle share, the idle
/// GPU-hours, and the verdict.
pub fn gpu_lines(job: &JobView) -> Vec<String> {
    let record = &job.job;
    let usage = &record.gpu_usage;
    let held = record.gpus.gpus_held();
    let kind = record
        .gpus
        .gpu_type
        .as_deref()
        .map_or(String::new(), |t| format!(" ({t})"));
    let mut lines = vec![format!("GPUs: {held}{kind}")];
    if let Some(mean) = usage.mean() {
        lines.push(format!("GPU Utilization: {mean:.2}% mean"));
    }
    for device in &usage.devices {
        lines.push(format!(
            "GPU {} on {}: {:.2}% mean, {} peak memory, idle {:.0}% of the time",
            device.gpu,
            device.node,
            device.mean().unwrap_or(0.0),
            kib(device.memory_max_mb.saturating_mul(1024)),
            device.idle_pct()
        ));
    }
    if !usage.devices.is_empty() {
        lines.push(format!("Idle GPU-hours: {:.2}", usage.idle_gpu_hours()));
    }
    lines.push(format!("GPU Verdict: {}", usage.verdict(held)));
    lines
}

/// Seconds as seff writes them: `[D-]HH:MM:SS`.
fn clock(seconds: u64) -> String {
    crate::model::units::format_elapsed(seconds)
}

/// KiB as seff writes them: `1.50 GB`, two decimals, binary units.
fn kib(kib: u64) -> String {
    if kib == 0 {
        return "0.00 MB".into();
    }
    let units = ["KB", "MB", "GB", "TB", "PB", "EB"];
    let mut value = kib as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < units.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2} {}", units[unit])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gpu::{JobGpuUsage, Sample};
    use crate::model::job::{example_job, ExitStatus};
    use crate::model::step::StepId;
    use crate::report::view::StepOf;

    fn step(id: StepId, tasks: u32, rss_mb: u64, cpu_secs: u64) -> JobView {
        let mut job = example_job(7);
        job.max_rss_bytes = Some(rss_mb << 20);
        job.cpu_usec = Some(cpu_secs * 1_000_000);
        JobView {
            step: Some(StepOf {
                id,
                tasks,
                usage: None,
            }),
            ..JobView::stored(job)
        }
    }

    #[test]
    fn seff_reports_in_slurms_layout_with_the_gpu_lines_after() {
        let mut job = example_job(7);
        job.user = "alice".into();
        job.cpus = 4;
        job.mem_mb = Some(8 * 1024);
        job.state = JobState::Completed;
        job.exit = Some(ExitStatus::default());
        job.start_time = Some(1_000);
        job.end_time = Some(1_000 + 600);
        job.gpus.count = 2;
        job.gpus.gpu_type = Some("a100".into());
        let mut usage = JobGpuUsage::default();
        let read = |gpu, utilization_pct| Sample {
            gpu,
            utilization_pct,
            memory_used_mb: 2048,
        };
        for _ in 0..10 {
            usage.add(&[read(0, 90), read(1, 2)], ("gpu01", &[0, 1]), 60, 10);
        }
        job.gpu_usage = usage;
        let view = JobView::stored(job);
        let steps = [
            step(StepId::Batch, 1, 100, 60),
            step(StepId::Extern, 1, 0, 0),
            step(StepId::Numbered(0), 2, 1024, 840),
        ];
        let text = seff(&view, &steps, ("vision", "gpu01"), 5_000);
        let expected = "Job ID: 7\n\
Cluster: gpu01\n\
User/Group: alice/vision\n\
State: COMPLETED (exit code 0)\n\
Nodes: 1\n\
Cores per node: 4\n\
CPU Utilized: 00:15:00\n\
CPU Efficiency: 37.50% of 00:40:00 core-walltime\n\
Job Wall-clock time: 00:10:00\n\
Memory Utilized: 2.00 GB (estimated maximum)\n\
Memory Efficiency: 25.00% of 8.00 GB (8.00 GB/node)\n\
GPUs: 2 (a100)\n\
GPU Utilization: 46.00% mean\n\
GPU 0 on gpu01: 90.00% mean, 2.00 GB peak memory, idle 0% of the time\n\
GPU 1 on gpu01: 2.00% mean, 2.00 GB peak memory, idle 100% of the time\n\
Idle GPU-hours: 0.17\n\
GPU Verdict: 1 of 2 GPUs idle 100 % of the time\n";
        assert_eq!(text, expected);
    }

    #[test]
    fn a_pending_job_has_no_efficiency_and_one_core_says_cores() {
        let mut job = example_job(9);
        job.user = "bob".into();
        job.cpus = 1;
        job.state = JobState::Pending;
        job.gpus.count = 0;
        let text = seff(&JobView::stored(job), &[], ("bob", "c"), 0);
        assert!(text.contains("State: PENDING\nCores: 1\n"), "{text}");
        assert!(text.ends_with("Efficiency not available for jobs in the PENDING state.\n"));
        assert_eq!(kib(1536), "1.50 MB");
    }
}
