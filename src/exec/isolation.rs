//! What confines jobs on this host: the cgroup layout found at start, the
//! device files of each GPU, and the limits a job's cgroup gets.

use std::path::{Path, PathBuf};

use super::cgroup::{
    self, Detected, DeviceRule, Limits, Placement, NVIDIA_CONTROL_DEVICES, STANDARD_DEVICES,
};
use crate::config::Config;
use crate::gpu::Inventory;
use crate::model::job::Job;

/// A GPU's device file that the config names and that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error(
    "GPU {index} ({gpu_type}): device file {}: {source}; correct `devices` in its [[gpus]] table in {}",
    device.display(),
    config.display()
)]
pub struct DeviceFileError {
    pub index: u32,
    pub gpu_type: String,
    pub device: PathBuf,
    pub config: PathBuf,
    pub source: std::io::Error,
}

pub struct Isolation {
    pub detected: Detected,
    /// Each GPU's device, by index; `None` where it has no device file here.
    gpu_devices: Vec<Option<DeviceRule>>,
    /// Each GPU's device file, by index, where it has one.
    gpu_paths: Vec<Option<PathBuf>>,
    /// Devices every job may open.
    shared: Vec<DeviceRule>,
    pids_max: Option<u64>,
}

impl Isolation {
    /// Detects the cgroup layout and reads the GPUs' device numbers. A
    /// device file the config names that does not exist is an error.
    pub fn prepare(config: &Config, inventory: &Inventory) -> Result<Isolation, DeviceFileError> {
        let mut gpu_devices = Vec::with_capacity(inventory.gpus.len());
        let mut gpu_paths = Vec::with_capacity(inventory.gpus.len());
        for gpu in &inventory.gpus {
            let path = gpu
                .device
                .clone()
                .unwrap_or_else(|| default_device(gpu.index));
            let rule = match &gpu.device {
                Some(path) => {
                    Some(DeviceRule::of_file(path).map_err(|source| DeviceFileError {
                        index: gpu.index,
                        gpu_type: gpu.gpu_type.to_string(),
                        device: path.clone(),
                        config: config.path.clone(),
                        source,
                    })?)
                }
                // Undeclared: the driver's usual name, if it is there.
                None => DeviceRule::of_file(&default_device(gpu.index)).ok(),
            };
            gpu_paths.push(rule.is_some().then_some(path));
            gpu_devices.push(rule);
        }
        let mut shared = STANDARD_DEVICES.to_vec();
        shared.extend(
            NVIDIA_CONTROL_DEVICES
                .iter()
                .filter_map(|p| DeviceRule::of_file(Path::new(p)).ok()),
        );
        Ok(Isolation {
            detected: cgroup::detect(config.cgroups, &config.cgroup_root, &config.cgroup_parent),
            gpu_devices,
            gpu_paths,
            shared,
            pids_max: (config.job_pids_max > 0).then_some(config.job_pids_max),
        })
    }

    pub fn placement(&self) -> &Placement {
        &self.detected.placement
    }

    /// What `job`'s cgroup enforces: its memory, a quota of its CPUs, the
    /// process cap, and the shared devices plus its own GPUs'.
    pub fn limits(&self, job: &Job) -> Limits {
        let mut devices = self.shared.clone();
        devices.extend(
            job.gpus_alloc
                .iter()
                .filter_map(|&g| self.gpu_devices.get(g as usize).copied().flatten()),
        );
        Limits {
            memory_bytes: job.mem_mb.map(|mb| mb.max(MIN_MEMORY_MB) << 20),
            cpus: Some(job.cpus),
            pids_max: self.pids_max,
            devices,
        }
    }
}

/// The least memory a job's cgroup is given, whatever it asked for (as
/// Slurm's MinRAMSpace, 30 MB by default): below it the job's own step
/// daemon and shell are killed before the job starts (`srun --mem=1`).
pub const MIN_MEMORY_MB: u64 = 30;

impl Isolation {
    /// The device files a container of `job` gets: its GPUs' and NVIDIA's
    /// control devices, where they exist (the standard ones the runtime
    /// makes itself).
    pub fn container_devices(&self, job: &Job) -> Vec<crate::exec::container::ContainerDevice> {
        let gpus = job
            .gpus_alloc
            .iter()
            .filter_map(|&g| self.gpu_paths.get(g as usize).cloned().flatten());
        let control = NVIDIA_CONTROL_DEVICES.iter().map(PathBuf::from);
        gpus.chain(control)
            .filter_map(|path| {
                let rule = DeviceRule::of_file(&path).ok()?;
                Some(crate::exec::container::ContainerDevice {
                    major: rule.major,
                    minor: rule.minor?,
                    path,
                })
            })
            .collect()
    }
}

/// `/dev/nvidiaN`, the device file the NVIDIA driver creates for GPU N.
pub fn default_device(index: u32) -> PathBuf {
    PathBuf::from(format!("/dev/nvidia{index}"))
}
