//! The GPU inventory: GPUs declared in the config, or detected through NVML
//! where a driver answers. Jobs never appear here; `sched` decides who holds
//! which index.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::Config;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    /// The scheduler's index, 0..n; what `SLURM_JOB_GPUS` shows.
    pub index: u32,
    pub gpu_type: String,
    pub memory_mb: u64,
    pub device: Option<PathBuf>,
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

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    pub gpus: Vec<Gpu>,
    pub source: Source,
}

impl Inventory {
    /// GPUs declared in the config win; otherwise ask NVML.
    pub fn discover(config: &Config) -> Inventory {
        let declared = Inventory::declared(config);
        if !declared.gpus.is_empty() {
            return declared;
        }
        match nvml::detect() {
            Ok(gpus) if !gpus.is_empty() => Inventory {
                gpus,
                source: Source::Nvml,
            },
            Ok(_) => Inventory {
                gpus: Vec::new(),
                source: Source::None,
            },
            Err(e) => {
                tracing::info!(target: "ysched::gpu", "NVML not available ({e}); no GPUs declared");
                Inventory {
                    gpus: Vec::new(),
                    source: Source::None,
                }
            }
        }
    }

    /// Only the GPUs the config declares (what a client can know without NVML).
    pub fn declared(config: &Config) -> Inventory {
        let mut gpus = Vec::new();
        for decl in &config.gpus {
            for i in 0..decl.count as usize {
                gpus.push(Gpu {
                    index: gpus.len() as u32,
                    gpu_type: decl.gpu_type.clone(),
                    memory_mb: decl.memory_mb,
                    device: decl.devices.get(i).cloned(),
                });
            }
        }
        let source = if gpus.is_empty() {
            Source::None
        } else {
            Source::Declared
        };
        Inventory { gpus, source }
    }

    /// Type names with their counts, in inventory order: `a100 ×4, rtx3090 ×2`.
    pub fn type_counts(&self) -> Vec<(String, u32)> {
        let mut out: Vec<(String, u32)> = Vec::new();
        for gpu in &self.gpus {
            match out.iter_mut().find(|(t, _)| *t == gpu.gpu_type) {
                Some((_, n)) => *n += 1,
                None => out.push((gpu.gpu_type.clone(), 1)),
            }
        }
        out
    }

    pub fn describe(&self) -> String {
        if self.gpus.is_empty() {
            return "no GPUs".to_string();
        }
        self.type_counts()
            .iter()
            .map(|(t, n)| format!("{t} x{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Turns an NVML product name into a short type name a user would type:
/// "NVIDIA A100-SXM4-80GB" → "a100", "NVIDIA GeForce RTX 3090" → "rtx3090",
/// "NVIDIA H200" → "h200". Brand words are dropped, words are joined up to
/// the first one with a digit, and a form-factor suffix after '-' is cut.
pub fn type_from_product_name(name: &str) -> String {
    let mut joined = String::new();
    for word in name.split_whitespace() {
        let w = word.to_ascii_lowercase();
        if matches!(w.as_str(), "nvidia" | "geforce" | "tesla" | "quadro") {
            continue;
        }
        let has_digit = w.bytes().any(|b| b.is_ascii_digit());
        joined.push_str(&w);
        if has_digit {
            break;
        }
    }
    let short = joined.split('-').next().unwrap_or("");
    let clean: String = short
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
        .collect();
    if clean.is_empty() {
        "gpu".to_string()
    } else {
        clean
    }
}

mod nvml {
    use super::{type_from_product_name, Gpu};
    use std::path::PathBuf;

    /// Lists the GPUs the NVIDIA driver reports, in NVML order (which is PCI
    /// bus order, and what `CUDA_DEVICE_ORDER=PCI_BUS_ID` makes CUDA use).
    pub fn detect() -> Result<Vec<Gpu>, nvml_wrapper::error::NvmlError> {
        let nvml = nvml_wrapper::Nvml::init()?;
        let count = nvml.device_count()?;
        let mut gpus = Vec::with_capacity(count as usize);
        for i in 0..count {
            let device = nvml.device_by_index(i)?;
            let name = device.name()?;
            let memory = device.memory_info()?;
            let minor = device.minor_number().ok();
            gpus.push(Gpu {
                index: i,
                gpu_type: type_from_product_name(&name),
                memory_mb: memory.total / (1 << 20),
                device: minor.map(|m| PathBuf::from(format!("/dev/nvidia{m}"))),
            });
        }
        Ok(gpus)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn product_names_become_short_types() {
        assert_eq!(type_from_product_name("NVIDIA A100-SXM4-80GB"), "a100");
        assert_eq!(type_from_product_name("NVIDIA H200"), "h200");
        assert_eq!(type_from_product_name("NVIDIA GeForce RTX 3090"), "rtx3090");
        assert_eq!(type_from_product_name("NVIDIA RTX A6000"), "rtxa6000");
        assert_eq!(type_from_product_name("Tesla V100-PCIE-32GB"), "v100");
        assert_eq!(type_from_product_name("NVIDIA L40S"), "l40s");
        assert_eq!(type_from_product_name(""), "gpu");
    }

    #[test]
    fn declared_gpus_get_consecutive_indices() {
        let c = Config::parse(
            "[[gpus]]\ntype = \"a100\"\ncount = 2\nmemory = \"80G\"\n[[gpus]]\ntype = \"t4\"\nmemory = \"16G\"\ndevices = \"/dev/nvidia[4-5]\"\n",
            Path::new("x.toml"),
        )
        .unwrap();
        let inv = Inventory::discover(&c);
        assert_eq!(inv.source, Source::Declared);
        let idx: Vec<u32> = inv.gpus.iter().map(|g| g.index).collect();
        assert_eq!(idx, vec![0, 1, 2, 3]);
        assert_eq!(inv.gpus[3].device, Some(PathBuf::from("/dev/nvidia5")));
        assert_eq!(inv.describe(), "a100 x2, t4 x2");
    }
}
