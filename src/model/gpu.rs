//! A GPU as the scheduler knows it, and its use: one sample of one GPU,
//! and a job's use summed over the samples taken while it ran.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    /// The scheduler's index, 0..n; what `SLURM_JOB_GPUS` shows.
    pub index: u32,
    pub gpu_type: String,
    pub memory_mb: u64,
    pub device: Option<PathBuf>,
    /// GPUs with the same group share an NVLink or PCIe switch: a job's
    /// GPUs are taken from one group where they fit.
    #[serde(default)]
    pub group: u32,
    /// What `--constraint` can ask for.
    #[serde(default)]
    pub features: Vec<String>,
    /// Slots for `--gpus shard:N` jobs (0: whole-GPU jobs only).
    #[serde(default)]
    pub shards: u32,
    /// The slot of its server in a pool's inventory (see
    /// `sched::pool::Layout`); 0 in a server's own inventory.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub node: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Declared,
    Nvml,
    /// No GPUs declared and NVML did not answer: a CPU-only node.
    None,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Declared => "declared in the config",
            Source::Nvml => "detected through NVML",
            Source::None => "none (no [[gpus]] in the config and no NVIDIA driver answered)",
        })
    }
}

/// One GPU at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// The scheduler's index.
    pub gpu: u32,
    /// Percent of the last sample period a kernel ran.
    pub utilization_pct: u32,
    pub memory_used_mb: u64,
}

/// A job's GPU use, summed over the samples taken while it ran.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobGpuUsage {
    /// Samples taken (each covers all of the job's GPUs).
    pub samples: u32,
    /// Sum over samples of the mean utilisation of its GPUs, in percent.
    pub utilization_sum: u64,
    pub utilization_max: u32,
    pub memory_max_mb: u64,
    /// Seconds its GPUs' mean utilisation stayed below the threshold.
    pub low_secs: u64,
    /// Each of its GPUs on its own, in the order first read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceUse>,
}

/// One GPU of a job, summed over its readings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceUse {
    /// The node it is on, and its index there.
    pub node: String,
    pub gpu: u32,
    pub samples: u32,
    pub utilization_sum: u64,
    pub memory_max_mb: u64,
    /// Readings below the idle threshold, and the seconds they cover.
    pub idle_samples: u32,
    pub idle_secs: u64,
}

impl DeviceUse {
    /// Mean utilisation in percent; `None` without readings.
    pub fn mean(&self) -> Option<f64> {
        (self.samples > 0).then(|| self.utilization_sum as f64 / f64::from(self.samples))
    }

    /// The share of its readings it sat idle, in percent.
    pub fn idle_pct(&self) -> f64 {
        if self.samples == 0 {
            return 0.0;
        }
        f64::from(self.idle_samples) * 100.0 / f64::from(self.samples)
    }
}

/// A GPU counts as idle in a job's verdict when it sat idle at least
/// this share of its readings.
pub const IDLE_VERDICT_PCT: f64 = 50.0;

impl JobGpuUsage {
    /// Adds one sample of the job's `gpus` on node `node`, taken
    /// `interval_secs` after the last; below `low_pct` counts as idle.
    pub fn add(
        &mut self,
        samples: &[Sample],
        (node, gpus): (&str, &[u32]),
        interval_secs: u64,
        low_pct: u32,
    ) {
        let mine: Vec<&Sample> = samples.iter().filter(|s| gpus.contains(&s.gpu)).collect();
        if mine.is_empty() {
            return;
        }
        for sample in &mine {
            let at = self
                .devices
                .iter()
                .position(|d| d.node == node && d.gpu == sample.gpu);
            let device = match at {
                Some(i) => &mut self.devices[i],
                None => {
                    self.devices.push(DeviceUse {
                        node: node.to_string(),
                        gpu: sample.gpu,
                        ..DeviceUse::default()
                    });
                    self.devices.last_mut().expect("just pushed")
                }
            };
            device.samples += 1;
            device.utilization_sum += u64::from(sample.utilization_pct);
            device.memory_max_mb = device.memory_max_mb.max(sample.memory_used_mb);
            if sample.utilization_pct < low_pct {
                device.idle_samples += 1;
                device.idle_secs += interval_secs;
            }
        }
        let mean = mine
            .iter()
            .map(|s| u64::from(s.utilization_pct))
            .sum::<u64>()
            / mine.len() as u64;
        self.samples += 1;
        self.utilization_sum += mean;
        self.utilization_max = self
            .utilization_max
            .max(mine.iter().map(|s| s.utilization_pct).max().unwrap_or(0));
        self.memory_max_mb = self
            .memory_max_mb
            .max(mine.iter().map(|s| s.memory_used_mb).max().unwrap_or(0));
        if mean < u64::from(low_pct) {
            self.low_secs += interval_secs;
        }
    }

    /// Mean utilisation in percent; `None` without samples.
    pub fn mean(&self) -> Option<f64> {
        (self.samples > 0).then(|| self.utilization_sum as f64 / f64::from(self.samples))
    }

    /// Hours its GPUs sat idle, each GPU counted on its own.
    pub fn idle_gpu_hours(&self) -> f64 {
        self.devices.iter().map(|d| d.idle_secs as f64).sum::<f64>() / 3600.0
    }

    /// One line on how a job of `held` GPUs used them: `2 of 4 GPUs idle
    /// 93 % of the time`, or that all were busy, or that none was read.
    pub fn verdict(&self, held: u32) -> String {
        if self.devices.is_empty() {
            return "no GPU readings (no driver answered, or the run was shorter than a reading)"
                .into();
        }
        let idle: Vec<&DeviceUse> = self
            .devices
            .iter()
            .filter(|d| d.idle_pct() >= IDLE_VERDICT_PCT)
            .collect();
        let held = held.max(self.devices.len() as u32);
        let plural = if held == 1 { "GPU" } else { "GPUs" };
        if idle.is_empty() {
            return format!(
                "all {held} {plural} busy: {:.0} % mean utilisation",
                self.mean().unwrap_or(0.0)
            );
        }
        let share = idle.iter().map(|d| d.idle_pct()).sum::<f64>() / idle.len() as f64;
        format!(
            "{} of {held} {plural} idle {share:.0} % of the time",
            idle.len()
        )
    }
}
