//! Jobs in container images (`--container-image`): the image from
//! podman's store, run by crun, in the job's own cgroup.
//!
//! Why this way. crun is the OCI runtime Debian ships with podman; asked
//! not to manage cgroups (`--cgroup-manager=disabled`), it leaves the
//! container's processes in the cgroup it was started in, which is the
//! job's: memory, CPU and device limits, freezing, killing and accounting
//! keep working unchanged, and the supervisor stays the parent of it all.
//! `podman run` would instead hand the container to conmon, outside the
//! supervisor's reach. podman is used for images only.
//!
//! The supervisor's child, already in the job's cgroup and its own
//! session, makes a private mount namespace and in it: the image's
//! layers joined by overlayfs (changes go to a layer in the job's
//! directory, removed with it), the mounts (opened with the user's rights,
//! see [`mounts`]), the script, `/etc/passwd` with the user in it, and the
//! host's `/etc/hosts` and `/etc/resolv.conf`. It then executes crun,
//! which adds /proc, /dev with the job's GPUs only, and runs the script as
//! the user with no capabilities and `no_new_privileges`.
//!
//! crun 1.8 refuses a hybrid host whose cgroup2 mount has controllers,
//! even when told not to manage cgroups; on such a host the child hides
//! that mount in its own namespace (the processes' cgroups do not change).

pub mod cdi;
pub mod image;
pub mod launch;
pub mod mounts;
pub mod pulls;
pub mod steps;

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::config::Containers;
use crate::model::container::ContainerRequest;

/// The supervisor's runtime state directory, inside the bundle.
const RUNTIME_STATE: &str = "runtime";
/// Where the batch script is inside the container.
pub const SCRIPT_INSIDE: &str = "/run/ysched/batch_script";

/// Why a job's container could not be made; each names what it was about.
#[derive(Debug, Error)]
pub enum ContainerError {
    #[error("{what}: {message}")]
    Podman { what: String, message: String },
    #[error("image {image} is not on this node and could not be pulled: {why}")]
    Missing { image: String, why: String },
    #[error("image {image}: its registry {registry} is not in this site's allowed_registries (an administrator lists it in [containers] allowed_registries)")]
    RegistryRefused { image: String, registry: String },
    #[error("{path} is not an image archive (a podman/docker save or OCI archive, or a root file system as a tar file): {why}")]
    NotAnImage { path: String, why: String },
    #[error("cannot mount {path}: {why}")]
    Mount { path: String, why: String },
    #[error("{0}")]
    Identity(String),
    /// The job's output files (the message names the file).
    #[error("{0}")]
    Output(String),
    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("CDI spec {}: {why}", file.display())]
    Cdi { file: PathBuf, why: String },
    #[error("cannot write the container's configuration: {0}")]
    Config(#[from] serde_json::Error),
    #[error("cancelled while its image was being made ready")]
    Cancelled,
}

impl ContainerError {
    pub fn io(action: &'static str, path: &Path, source: std::io::Error) -> ContainerError {
        ContainerError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A device file the container gets: the job's GPUs and NVIDIA's
/// control devices, at their host paths.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerDevice {
    pub path: PathBuf,
    pub major: u32,
    pub minor: u32,
}

/// What a job's supervisor needs to run it in a container: the request,
/// the site's settings on this node, and the devices it may see.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerLaunch {
    pub request: ContainerRequest,
    pub site: Containers,
    pub devices: Vec<ContainerDevice>,
    /// Where pulls of one image wait for each other on this node.
    pub pull_locks: PathBuf,
}

/// What this node gives the containers of a job's steps (`srun
/// --container-image`): the site's settings, the job's devices, where
/// pulls wait for each other. Each step brings its own request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerSite {
    pub site: Containers,
    pub devices: Vec<ContainerDevice>,
    pub pull_locks: PathBuf,
}

impl ContainerSite {
    /// The launch of a step asking for `request`.
    pub fn launch(&self, request: ContainerRequest) -> ContainerLaunch {
        ContainerLaunch {
            request,
            site: self.site.clone(),
            devices: self.devices.clone(),
            pull_locks: self.pull_locks.clone(),
        }
    }
}

/// The paths of a job's container, in its directory.
pub struct Bundle {
    pub dir: PathBuf,
}

impl Bundle {
    /// The batch script's container.
    pub fn new(job_dir: &Path) -> Bundle {
        Bundle::named(job_dir, "container")
    }
    /// Another container of the job (a step's), in its own directory.
    pub fn named(job_dir: &Path, name: &str) -> Bundle {
        Bundle {
            dir: job_dir.join(name),
        }
    }
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs")
    }
    pub fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }
    pub fn work(&self) -> PathBuf {
        self.dir.join("work")
    }
    pub fn passwd(&self) -> PathBuf {
        self.dir.join("passwd")
    }
    pub fn group(&self) -> PathBuf {
        self.dir.join("group")
    }
    pub fn state(&self) -> PathBuf {
        self.dir.join(RUNTIME_STATE)
    }

    /// Makes the directories, empty (a previous run's are removed).
    pub fn make(&self) -> Result<(), ContainerError> {
        self.remove();
        for dir in [self.rootfs(), self.upper(), self.work(), self.state()] {
            fs::create_dir_all(&dir).map_err(|e| ContainerError::io("making", &dir, e))?;
        }
        Ok(())
    }

    /// Removes it all: the container's changes are thrown away.
    pub fn remove(&self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The environment inside: the job's, where the image sets a variable
/// the image's value, but for the scheduler's own variables and those the
/// job named in `--container-env`.
pub fn environment(
    job: Vec<(String, String)>,
    image_env: &[String],
    keep: &[String],
) -> Vec<(String, String)> {
    let ours = |name: &str| {
        name.starts_with("SLURM_")
            || name.starts_with("YS_")
            || [
                "CUDA_VISIBLE_DEVICES",
                "MASTER_ADDR",
                "MASTER_PORT",
                "USER",
                "LOGNAME",
                "HOME",
            ]
            .contains(&name)
            || keep.iter().any(|k| k == name)
    };
    let mut env = job;
    for entry in image_env {
        let Some((name, value)) = entry.split_once('=') else {
            continue;
        };
        if ours(name) && env.iter().any(|(k, _)| k == name) {
            continue;
        }
        env.retain(|(k, _)| k != name);
        env.push((name.to_string(), value.to_string()));
    }
    env
}

/// `/etc/passwd` and `/etc/group` for inside: the image's, with the
/// job's user and group added when the image lacks them (tools look the
/// user up: `whoami`, Python's `getpass`).
pub fn account_files(
    rootfs_layers: &[PathBuf],
    user: (&str, u32, u32),
    home: &Path,
) -> (String, String) {
    let (name, uid, gid) = user;
    let read = |file: &str| {
        rootfs_layers
            .iter()
            .find_map(|layer| fs::read_to_string(layer.join("etc").join(file)).ok())
            .unwrap_or_default()
    };
    let mut passwd = read("passwd");
    let mut group = read("group");
    let has = |text: &str, id: u32| {
        text.lines()
            .any(|l| l.split(':').nth(2) == Some(id.to_string().as_str()))
    };
    let end_line = |text: &mut String| {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
    };
    if !has(&passwd, uid) {
        end_line(&mut passwd);
        passwd.push_str(&format!(
            "{name}:x:{uid}:{gid}::{}:/bin/sh\n",
            home.display()
        ));
    }
    if !has(&group, gid) {
        end_line(&mut group);
        group.push_str(&format!("{name}:x:{gid}:\n"));
    }
    (passwd, group)
}

/// What crun is told to run: the OCI runtime configuration.
pub struct RuntimeConfig<'a> {
    pub args: Vec<String>,
    pub env: &'a [(String, String)],
    pub cwd: &'a str,
    pub user: (u32, u32, Vec<u32>),
    pub read_only: bool,
    pub devices: &'a [ContainerDevice],
    /// Root inside, allowed by the site: the usual container capabilities.
    pub as_root: bool,
    /// The OCI hooks the GPUs' CDI spec asks for.
    pub hooks: serde_json::Value,
}

impl RuntimeConfig<'_> {
    /// The `config.json` text.
    pub fn to_json(&self) -> Result<String, ContainerError> {
        let (uid, gid, groups) = &self.user;
        let capabilities: Vec<&str> = if self.as_root {
            ROOT_CAPABILITIES.to_vec()
        } else {
            Vec::new()
        };
        let caps = serde_json::json!({
            "bounding": capabilities, "effective": capabilities, "permitted": capabilities,
        });
        let devices: Vec<serde_json::Value> = self
            .devices
            .iter()
            .map(|d| {
                serde_json::json!({
                    "path": d.path, "type": "c", "major": d.major, "minor": d.minor,
                    "fileMode": 0o666, "uid": 0, "gid": 0,
                })
            })
            .collect();
        let mut mounts = vec![
            serde_json::json!({"destination": "/proc", "type": "proc", "source": "proc",
                "options": ["nosuid", "noexec", "nodev"]}),
            serde_json::json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
                "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
            serde_json::json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts",
                "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]}),
            serde_json::json!({"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
                "options": ["nosuid", "noexec", "nodev", "mode=1777"]}),
            serde_json::json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
                "options": ["nosuid", "noexec", "nodev"]}),
            serde_json::json!({"destination": "/sys", "type": "bind", "source": "/sys",
                "options": ["rbind", "ro", "nosuid", "noexec", "nodev"]}),
        ];
        if self.read_only {
            mounts.push(
                serde_json::json!({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                "options": ["nosuid", "nodev", "mode=1777"]}),
            );
        }
        let config = serde_json::json!({
            "ociVersion": "1.0.2",
            "process": {
                "terminal": false,
                "user": {"uid": uid, "gid": gid, "additionalGids": groups},
                "args": self.args,
                "env": self.env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
                "cwd": self.cwd,
                "capabilities": caps,
                "noNewPrivileges": !self.as_root,
            },
            "root": {"path": "rootfs", "readonly": self.read_only},
            "hooks": self.hooks,
            "mounts": mounts,
            "linux": {
                "namespaces": [{"type": "mount"}],
                "devices": devices,
                "maskedPaths": ["/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
                    "/sys/firmware"],
                "readonlyPaths": ["/proc/asound", "/proc/bus", "/proc/fs", "/proc/irq",
                    "/proc/sys", "/proc/sysrq-trigger"],
            },
        });
        Ok(serde_json::to_string_pretty(&config)?)
    }
}

/// What root inside a container may do where the site allows root:
/// podman's default set.
const ROOT_CAPABILITIES: [&str; 11] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_NET_BIND_SERVICE",
    "CAP_SETFCAP",
    "CAP_SETGID",
    "CAP_SETPCAP",
    "CAP_SETUID",
    "CAP_SYS_CHROOT",
];

/// Whether crun would refuse this host: cgroup2 mounted beside v1
/// controllers, with a controller of its own.
pub fn hybrid_with_controllers() -> bool {
    let unified = Path::new("/sys/fs/cgroup/unified");
    fs::read_to_string(unified.join("cgroup.controllers")).is_ok_and(|c| !c.trim().is_empty())
}

/// crun's command line: run the bundle, in the cgroup it is started in.
pub fn runtime_argv(site: &Containers, bundle: &Bundle, name: &str) -> Vec<String> {
    vec![
        site.runtime.display().to_string(),
        "--root".into(),
        bundle.state().display().to_string(),
        "--cgroup-manager=disabled".into(),
        "run".into(),
        "--bundle".into(),
        bundle.dir.display().to_string(),
        name.into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_sets_its_variables_but_not_the_schedulers_nor_those_kept() {
        let job = vec![
            ("PATH".to_string(), "/home/u/bin:/usr/bin".to_string()),
            ("CUDA_VISIBLE_DEVICES".to_string(), "0".to_string()),
            ("HF_HOME".to_string(), "/data/hf".to_string()),
            ("SLURM_JOB_ID".to_string(), "7".to_string()),
        ];
        let image = [
            "PATH=/opt/conda/bin:/usr/bin".to_string(),
            "CUDA_VISIBLE_DEVICES=all".to_string(),
            "HF_HOME=/root/.cache".to_string(),
            "NVIDIA_DRIVER_CAPABILITIES=compute".to_string(),
        ];
        let env = environment(job, &image, &["HF_HOME".to_string()]);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("PATH"), Some("/opt/conda/bin:/usr/bin"));
        assert_eq!(get("CUDA_VISIBLE_DEVICES"), Some("0"));
        assert_eq!(get("HF_HOME"), Some("/data/hf"));
        assert_eq!(get("SLURM_JOB_ID"), Some("7"));
        assert_eq!(get("NVIDIA_DRIVER_CAPABILITIES"), Some("compute"));
    }

    #[test]
    fn the_user_is_added_to_the_images_accounts_once() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("etc")).unwrap();
        fs::write(dir.path().join("etc/passwd"), "root:x:0:0::/root:/bin/sh").unwrap();
        let layers = [dir.path().to_path_buf()];
        let (passwd, group) = account_files(&layers, ("ana", 1001, 1001), Path::new("/home/ana"));
        assert_eq!(
            passwd,
            "root:x:0:0::/root:/bin/sh\nana:x:1001:1001::/home/ana:/bin/sh\n"
        );
        assert_eq!(group, "ana:x:1001:\n");
        let (passwd, _) = account_files(&layers, ("root", 0, 0), Path::new("/root"));
        assert_eq!(passwd, "root:x:0:0::/root:/bin/sh");
    }

    #[test]
    fn the_runtime_config_has_no_capabilities_for_a_user() {
        let env = vec![("A".to_string(), "1".to_string())];
        let devices = [ContainerDevice {
            path: "/dev/nvidia1".into(),
            major: 195,
            minor: 1,
        }];
        let config = RuntimeConfig {
            args: vec![SCRIPT_INSIDE.into()],
            env: &env,
            cwd: "/",
            user: (1001, 1001, vec![1001, 27]),
            read_only: true,
            devices: &devices,
            as_root: false,
            hooks: serde_json::json!({}),
        };
        let json: serde_json::Value = serde_json::from_str(&config.to_json().unwrap()).unwrap();
        assert_eq!(json["process"]["user"]["uid"], 1001);
        assert_eq!(
            json["process"]["capabilities"]["bounding"],
            serde_json::json!([])
        );
        assert_eq!(json["process"]["noNewPrivileges"], true);
        assert_eq!(json["root"]["readonly"], true);
        assert_eq!(json["linux"]["devices"][0]["path"], "/dev/nvidia1");
        assert_eq!(
            json["linux"]["namespaces"],
            serde_json::json!([{"type": "mount"}])
        );
    }
}
