//! The GPU inventory: GPUs declared in the config, or detected through NVML
//! where a driver answers. Jobs never appear here; `sched` decides who holds
//! which index.

pub mod sampling;

use serde::{Deserialize, Serialize};

use crate::config::Config;

use crate::model::gpu::{Gpu, Source};

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
        let mut next_group = 0;
        for decl in &config.gpus {
            let size = decl.group_size.unwrap_or(decl.count);
            for i in 0..decl.count {
                gpus.push(Gpu {
                    index: gpus.len() as u32,
                    gpu_type: decl.gpu_type.clone(),
                    memory_mb: decl.memory_mb,
                    device: decl.devices.get(i as usize).cloned(),
                    group: next_group + i / size,
                    features: decl.features.clone(),
                    shards: decl.shards,
                    node: 0,
                });
            }
            next_group += decl.count.div_ceil(size);
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
        type_counts(&self.gpus)
    }

    /// Each type with its memory, features and shards: `a100 x8 (80G,
    /// nvlink), t4 x2 (16G, 4 shards)`, for messages about constraints.
    pub fn describe_details(&self) -> String {
        if self.gpus.is_empty() {
            return "no GPUs".to_string();
        }
        let mut seen: Vec<(&Gpu, u32)> = Vec::new();
        for gpu in &self.gpus {
            let same = |g: &Gpu| {
                g.gpu_type == gpu.gpu_type
                    && g.memory_mb == gpu.memory_mb
                    && g.features == gpu.features
                    && g.shards == gpu.shards
            };
            match seen.iter_mut().find(|(g, _)| same(g)) {
                Some((_, n)) => *n += 1,
                None => seen.push((gpu, 1)),
            }
        }
        seen.iter()
            .map(|(g, n)| {
                let mut details = vec![crate::model::units::format_memory_mb(g.memory_mb)];
                details.extend(g.features.iter().cloned());
                if g.shards > 0 {
                    details.push(format!("{} shards", g.shards));
                }
                format!("{} x{n} ({})", g.gpu_type, details.join(", "))
            })
            .collect::<Vec<_>>()
            .join(", ")
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

/// Type names of `gpus` with their counts, in order of first appearance.
pub fn type_counts(gpus: &[Gpu]) -> Vec<(String, u32)> {
    let mut out: Vec<(String, u32)> = Vec::new();
    for gpu in gpus {
        match out.iter_mut().find(|(t, _)| *t == gpu.gpu_type) {
            Some((_, n)) => *n += 1,
            None => out.push((gpu.gpu_type.clone(), 1)),
        }
    }
    out
}

/// `n` a100 GPUs numbered from 0, in one group, for tests.
#[cfg(test)]
pub(crate) fn test_a100s(n: u32) -> Vec<Gpu> {
    (0..n)
        .map(|i| Gpu {
            index: i,
            gpu_type: "a100".into(),
            memory_mb: 1,
            ..Gpu::default()
        })
        .collect()
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

/// Two GPUs that are close: on one NVLink, or behind one PCIe switch.
#[derive(Clone, Copy, Debug)]
struct Link {
    a: u32,
    b: u32,
    nvlink: bool,
}

/// Numbers the connected groups of `count` GPUs joined by `links`, in
/// order of each group's first GPU: 0, 0, 1, 1 for two linked pairs.
fn connected_groups(count: u32, links: &[Link]) -> Vec<u32> {
    let mut parent: Vec<u32> = (0..count).collect();
    fn root(parent: &mut [u32], mut i: u32) -> u32 {
        while parent[i as usize] != i {
            parent[i as usize] = parent[parent[i as usize] as usize];
            i = parent[i as usize];
        }
        i
    }
    for link in links.iter().filter(|l| l.a < count && l.b < count) {
        let (ra, rb) = (root(&mut parent, link.a), root(&mut parent, link.b));
        if ra != rb {
            parent[ra.max(rb) as usize] = ra.min(rb);
        }
    }
    let mut numbers: Vec<(u32, u32)> = Vec::new();
    (0..count)
        .map(|i| {
            let r = root(&mut parent, i);
            match numbers.iter().find(|(root, _)| *root == r) {
                Some((_, n)) => *n,
                None => {
                    let n = numbers.len() as u32;
                    numbers.push((r, n));
                    n
                }
            }
        })
        .collect()
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
                group: i,
                features: Vec::new(),
                shards: 0,
                node: 0,
            });
        }
        let links = topology_links(&nvml, count);
        for (gpu, group) in gpus.iter_mut().zip(super::connected_groups(count, &links)) {
            gpu.group = group;
            if links
                .iter()
                .any(|l| l.nvlink && (l.a == gpu.index || l.b == gpu.index))
            {
                gpu.features.push("nvlink".to_string());
            }
        }
        Ok(gpus)
    }

    /// Pairs of GPUs joined by an active NVLink or behind the same PCIe
    /// switch (no host bridge between them). A query the driver does not
    /// answer links nothing: placement then has no preference, never a
    /// wrong one.
    fn topology_links(nvml: &nvml_wrapper::Nvml, count: u32) -> Vec<super::Link> {
        use nvml_wrapper::enum_wrappers::device::TopologyLevel;
        // NVML_NVLINK_MAX_LINKS in current drivers.
        const MAX_NVLINKS: u32 = 18;
        let bus_ids: Vec<Option<String>> = (0..count)
            .map(|i| {
                nvml.device_by_index(i)
                    .and_then(|d| d.pci_info())
                    .map(|p| p.bus_id.to_ascii_lowercase())
                    .ok()
            })
            .collect();
        let mut links = Vec::new();
        for a in 0..count {
            let Ok(device) = nvml.device_by_index(a) else {
                continue;
            };
            for l in 0..MAX_NVLINKS {
                let link = device.link_wrapper_for(l);
                if !link.is_active().unwrap_or(false) {
                    continue;
                }
                let Ok(remote) = link.remote_pci_info() else {
                    continue;
                };
                let remote = remote.bus_id.to_ascii_lowercase();
                if let Some(b) = bus_ids.iter().position(|id| id.as_deref() == Some(&remote)) {
                    links.push(super::Link {
                        a,
                        b: b as u32,
                        nvlink: true,
                    });
                }
            }
            for b in a + 1..count {
                let Ok(other) = nvml.device_by_index(b) else {
                    continue;
                };
                if matches!(
                    device.topology_common_ancestor(other),
                    Ok(TopologyLevel::Internal | TopologyLevel::Single | TopologyLevel::Multiple)
                ) {
                    links.push(super::Link {
                        a,
                        b,
                        nvlink: false,
                    });
                }
            }
        }
        links
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
    fn linked_gpus_form_groups() {
        let link = |a, b| Link { a, b, nvlink: true };
        assert_eq!(
            connected_groups(6, &[link(0, 1), link(3, 2), link(4, 5), link(5, 3)]),
            vec![0, 0, 1, 1, 1, 1]
        );
        assert_eq!(connected_groups(3, &[]), vec![0, 1, 2]);
        assert_eq!(
            connected_groups(2, &[link(0, 7)]),
            vec![0, 1],
            "unknown GPUs"
        );
    }

    #[test]
    fn declared_gpus_get_groups_features_and_shards() {
        let c = Config::parse(
            "[[gpus]]\ntype = \"a100\"\ncount = 8\nmemory = \"80G\"\ngroup_size = 4\nfeatures = [\"nvlink\"]\n\
             [[gpus]]\ntype = \"t4\"\ncount = 2\nmemory = \"16G\"\nshards = 4\n",
            Path::new("x.toml"),
        )
        .unwrap();
        let inv = Inventory::declared(&c);
        let groups: Vec<u32> = inv.gpus.iter().map(|g| g.group).collect();
        assert_eq!(groups, vec![0, 0, 0, 0, 1, 1, 1, 1, 2, 2]);
        assert_eq!(inv.gpus[0].features, vec!["nvlink".to_string()]);
        assert_eq!((inv.gpus[7].shards, inv.gpus[8].shards), (0, 4));
        for (bad, key) in [
            ("group_size = 0", "group_size"),
            ("group_size = 3", "group_size"),
            ("shards = 1", "shards"),
            ("features = [\"a b\"]", "features"),
        ] {
            let text = format!("[[gpus]]\ntype = \"t4\"\ncount = 2\nmemory = \"16G\"\n{bad}\n");
            let e = Config::parse(&text, Path::new("x.toml"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key) && e.contains("line"), "{bad}: {e}");
        }
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
        assert_eq!(
            inv.gpus[3].device,
            Some(std::path::PathBuf::from("/dev/nvidia5"))
        );
        assert_eq!(inv.describe(), "a100 x2, t4 x2");
    }
}
