//! GPU utilisation, sampled every few seconds where an NVIDIA driver
//! answers, and summed per job: mean and peak utilisation, peak memory,
//! and time spent below a threshold (what the waste ranking needs). Where
//! no driver answers there is no data, and reports say "n/a" — never a
//! made-up number.

use serde::{Deserialize, Serialize};

/// One GPU at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// The scheduler's index.
    pub gpu: u32,
    /// Percent of the last sample period a kernel ran.
    pub utilization_pct: u32,
    pub memory_used_mb: u64,
}

/// Where samples come from.
pub trait Source: Send {
    /// What this source is, for the log.
    fn describe(&self) -> String;
    /// The GPUs now; `None` when this source has no data.
    fn sample(&mut self) -> Option<Vec<Sample>>;
}

/// No driver: no data.
pub struct NoData;

impl Source for NoData {
    fn describe(&self) -> String {
        "none (no NVIDIA driver answered: GPU utilisation is not known)".into()
    }

    fn sample(&mut self) -> Option<Vec<Sample>> {
        None
    }
}

/// The NVIDIA driver, through NVML. GPU `i` of the inventory is NVML's
/// device `i` (the inventory is NVML's order, or declared in that order).
pub struct Nvml {
    nvml: nvml_wrapper::Nvml,
    count: u32,
}

impl Source for Nvml {
    fn describe(&self) -> String {
        format!("NVML ({} GPUs)", self.count)
    }

    fn sample(&mut self) -> Option<Vec<Sample>> {
        let mut out = Vec::with_capacity(self.count as usize);
        for i in 0..self.count {
            let Ok(device) = self.nvml.device_by_index(i) else {
                continue;
            };
            let (Ok(rates), Ok(memory)) = (device.utilization_rates(), device.memory_info()) else {
                continue;
            };
            out.push(Sample {
                gpu: i,
                utilization_pct: rates.gpu.min(100),
                memory_used_mb: memory.used / (1 << 20),
            });
        }
        (!out.is_empty()).then_some(out)
    }
}

/// NVML where a driver answers with GPUs, else no data.
pub fn detect() -> Box<dyn Source> {
    match nvml_wrapper::Nvml::init() {
        Ok(nvml) => match nvml.device_count() {
            Ok(count) if count > 0 => Box::new(Nvml { nvml, count }),
            _ => Box::new(NoData),
        },
        Err(_) => Box::new(NoData),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A scripted source, for tests only.
    struct Scripted(Vec<Vec<Sample>>);

    impl Source for Scripted {
        fn describe(&self) -> String {
            "scripted".into()
        }

        fn sample(&mut self) -> Option<Vec<Sample>> {
            (!self.0.is_empty()).then(|| self.0.remove(0))
        }
    }

    fn s(gpu: u32, pct: u32, mb: u64) -> Sample {
        Sample {
            gpu,
            utilization_pct: pct,
            memory_used_mb: mb,
        }
    }

    #[test]
    fn a_jobs_gpus_are_summed_and_idle_time_counted() {
        let mut source = Scripted(vec![
            vec![s(0, 90, 1_000), s(1, 70, 3_000), s(2, 100, 9_000)],
            vec![s(0, 10, 1_000), s(1, 0, 500), s(2, 100, 9_000)],
        ]);
        let mut usage = JobGpuUsage::default();
        while let Some(samples) = source.sample() {
            usage.add(&samples, &[0, 1], 30, 20);
        }
        // Means 80 and 5: 42.5 on average; the second sample was idle.
        assert_eq!(usage.mean(), Some(42.5));
        assert_eq!(usage.utilization_max, 90);
        assert_eq!(usage.memory_max_mb, 3_000);
        assert_eq!(usage.low_secs, 30);
    }

    #[test]
    fn no_data_is_no_number() {
        let mut none = NoData;
        assert_eq!(none.sample(), None);
        let usage = JobGpuUsage::default();
        assert_eq!(usage.mean(), None);
        let mut other = JobGpuUsage::default();
        other.add(&[s(5, 50, 1)], &[0], 30, 20);
        assert_eq!(other.samples, 0, "samples of other GPUs are not the job's");
    }
}
