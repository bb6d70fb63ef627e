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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobGpuUsage {
    /// Samples taken (each covers all of the job's GPUs).
    pub samples: u32,
    /// Sum over samples of the mean utilisation of its GPUs, in percent.
    pub utilization_sum: u64,
    pub utilization_max: u32,
    pub memory_max_mb: u64,
    /// Seconds its GPUs' mean utilisation stayed below the threshold.
    pub low_secs: u64,
}

impl JobGpuUsage {
    /// Adds one sample of the job's `gpus`, taken `interval_secs` after
    /// the last; below `low_pct` counts as idle.
    pub fn add(&mut self, samples: &[Sample], gpus: &[u32], interval_secs: u64, low_pct: u32) {
        let mine: Vec<&Sample> = samples.iter().filter(|s| gpus.contains(&s.gpu)).collect();
        if mine.is_empty() {
            return;
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
}
