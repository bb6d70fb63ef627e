//! GPUs through CDI, the Container Device Interface, as the NVIDIA
//! Container Toolkit describes a node's GPUs (`nvidia-ctk cdi generate
//! --output=/etc/cdi/nvidia.yaml`, or JSON): the device files, the
//! driver's libraries and tools to mount, the environment, and the hooks
//! (`nvidia-ctk hook update-ldcache`…) a container with those GPUs needs.
//! Without a spec a container gets the job's `/dev/nvidiaN` and the
//! control devices only, and the driver's libraries must be in the image
//! or among the site's mounts.
//!
//! A job's GPUs are the spec's devices named by their index on the node
//! (`0`, `1`…, as `nvidia-ctk` names them). Specs are read in YAML
//! (`.yaml`, `.yml`, what `nvidia-ctk` writes by default) and JSON
//! (`.json`), in name order, as CDI's own readers take them.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ContainerError;

/// The kind of device a job's GPUs are.
const GPU_KIND: &str = "nvidia.com/gpu";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    kind: String,
    #[serde(default)]
    devices: Vec<Device>,
    #[serde(default)]
    container_edits: Edits,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Device {
    name: String,
    #[serde(default)]
    container_edits: Edits,
}

/// What a spec adds to a container.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Edits {
    /// `NAME=VALUE`.
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default)]
    pub device_nodes: Vec<DeviceNode>,
    #[serde(default)]
    pub mounts: Vec<Mount>,
    #[serde(default)]
    pub hooks: Vec<Hook>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceNode {
    /// Where it is inside.
    pub path: String,
    /// Where it is on the host, when not at `path`.
    #[serde(default)]
    pub host_path: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    pub host_path: String,
    pub container_path: String,
    #[serde(default)]
    pub options: Vec<String>,
}

/// An OCI hook, run by the runtime at `hook_name` (`createContainer`…).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hook {
    pub hook_name: String,
    pub path: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Vec<String>,
}

impl Edits {
    fn add(&mut self, more: &Edits) {
        self.env.extend(more.env.iter().cloned());
        for node in &more.device_nodes {
            if !self.device_nodes.iter().any(|d| d.path == node.path) {
                self.device_nodes.push(node.clone());
            }
        }
        for mount in &more.mounts {
            if !self
                .mounts
                .iter()
                .any(|m| m.container_path == mount.container_path)
            {
                self.mounts.push(mount.clone());
            }
        }
        for hook in &more.hooks {
            if !self.hooks.contains(hook) {
                self.hooks.push(hook.clone());
            }
        }
    }

    /// The hooks as the OCI configuration's `hooks` object.
    pub fn oci_hooks(&self) -> serde_json::Value {
        let mut by_stage: BTreeMap<&str, Vec<serde_json::Value>> = BTreeMap::new();
        for h in &self.hooks {
            by_stage
                .entry(&h.hook_name)
                .or_default()
                .push(serde_json::json!({"path": h.path, "args": h.args, "env": h.env}));
        }
        serde_json::json!(by_stage)
    }
}

/// What the first GPU spec found in `dirs` adds for GPUs `gpus` (this
/// node's indices); `None` without a spec or without GPUs.
pub fn edits_for(dirs: &[PathBuf], gpus: &[u32]) -> Result<Option<Edits>, ContainerError> {
    if gpus.is_empty() {
        return Ok(None);
    }
    for dir in dirs {
        let Ok(entries) = fs::read_dir(dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| format_of(p).is_some())
            .collect();
        files.sort();
        for file in files {
            if let Some(edits) = read_spec(&file, gpus)? {
                return Ok(Some(edits));
            }
        }
    }
    Ok(None)
}

enum Format {
    Json,
    Yaml,
}

/// A spec file's format, by its name's ending; `None`: not a spec.
fn format_of(file: &Path) -> Option<Format> {
    match file.extension()?.to_str()? {
        "json" => Some(Format::Json),
        "yaml" | "yml" => Some(Format::Yaml),
        _ => None,
    }
}

/// A spec's edits for `gpus`, when it describes GPUs.
fn read_spec(file: &Path, gpus: &[u32]) -> Result<Option<Edits>, ContainerError> {
    let bad = |why: String| ContainerError::Cdi {
        file: file.to_path_buf(),
        why,
    };
    let text = fs::read_to_string(file).map_err(|e| bad(e.to_string()))?;
    let spec: Spec = match format_of(file) {
        Some(Format::Yaml) => yaml_serde::from_str(&text).map_err(|e| bad(e.to_string()))?,
        _ => serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?,
    };
    if spec.kind != GPU_KIND {
        return Ok(None);
    }
    let mut edits = spec.container_edits;
    for gpu in gpus {
        let name = gpu.to_string();
        let device = spec
            .devices
            .iter()
            .find(|d| d.name == name)
            .ok_or_else(|| bad(format!("no device named '{name}' for the job's GPU {gpu}")))?;
        edits.add(&device.container_edits);
    }
    Ok(Some(edits))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = r#"{
      "cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
      "devices": [
        {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
        {"name": "1", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1"}]}}
      ],
      "containerEdits": {
        "env": ["NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes": [{"path": "/dev/nvidiactl"}],
        "mounts": [{"hostPath": "/usr/lib/libcuda.so.1", "containerPath": "/usr/lib/libcuda.so.1", "options": ["ro", "bind"]}],
        "hooks": [{"hookName": "createContainer", "path": "/usr/bin/nvidia-ctk", "args": ["nvidia-ctk", "hook", "update-ldcache"]}]
      }
    }"#;

    #[test]
    fn a_jobs_gpus_take_their_devices_and_the_common_edits() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("nvidia.json"), SPEC).unwrap();
        fs::write(dir.path().join("other.txt"), "not read").unwrap();
        let dirs = [dir.path().to_path_buf()];
        assert_eq!(edits_for(&dirs, &[]).unwrap(), None);
        let e = edits_for(&dirs, &[1]).unwrap().unwrap();
        let nodes: Vec<&str> = e.device_nodes.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(nodes, ["/dev/nvidiactl", "/dev/nvidia1"]);
        assert_eq!(e.mounts.len(), 1);
        assert_eq!(
            e.oci_hooks()["createContainer"][0]["path"],
            "/usr/bin/nvidia-ctk"
        );
        let err = edits_for(&dirs, &[5]).unwrap_err().to_string();
        assert!(
            err.contains("nvidia.json") && err.contains("no device named '5'"),
            "{err}"
        );
        fs::write(dir.path().join("nvidia.json"), "{").unwrap();
        assert!(edits_for(&dirs, &[0]).is_err());
    }

    /// As `nvidia-ctk cdi generate` writes it by default.
    const YAML_SPEC: &str = "---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: \"0\"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidiactl
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-ctk
    args:
    - nvidia-ctk
    - hook
    - update-ldcache
  mounts:
  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05
    options:
    - ro
    - nosuid
    - nodev
    - bind
";

    #[test]
    fn a_spec_in_yaml_is_read_as_nvidia_ctk_writes_it() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("nvidia.yaml"), YAML_SPEC).unwrap();
        let dirs = [dir.path().to_path_buf()];
        let e = edits_for(&dirs, &[0]).unwrap().unwrap();
        let nodes: Vec<&str> = e.device_nodes.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(nodes, ["/dev/nvidiactl", "/dev/nvidia0"]);
        assert_eq!(e.env, ["NVIDIA_VISIBLE_DEVICES=void"]);
        assert_eq!(e.mounts[0].options, ["ro", "nosuid", "nodev", "bind"]);
        assert_eq!(
            e.oci_hooks()["createContainer"][0]["args"][2],
            "update-ldcache"
        );
        fs::write(dir.path().join("nvidia.yaml"), "kind: [").unwrap();
        let err = edits_for(&dirs, &[0]).unwrap_err().to_string();
        assert!(err.contains("nvidia.yaml"), "{err}");
    }
}
