//! A job's container: the image it runs in and what is mounted into it,
//! in pyxis's option names (`--container-image`, `--container-mounts`,
//! `--container-workdir`, `--container-env`, `--no-container-mount-home`,
//! `--container-writable`/`--container-readonly`), and the image a run
//! resolved it to, for accounting.
//!
//! Only the values and their rules live here; `exec::container` runs them.

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Mounts one job may ask for (site mounts come on top).
pub const MAX_MOUNTS: usize = 64;
/// Names in one `--container-env`.
pub const MAX_ENV_NAMES: usize = 256;
/// The longest image reference or archive path taken.
pub const MAX_IMAGE_CHARS: usize = 1024;
/// The longest path a mount or working directory may have.
const MAX_PATH_BYTES: usize = 4096;

/// What a job asked for with the `--container-*` options.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerRequest {
    /// A registry reference (`nvcr.io/nvidia/pytorch:24.01-py3`, or
    /// enroot's `nvcr.io#nvidia/pytorch:24.01-py3`), a local image's name
    /// (`yolo:v8.2.1-cu11.7`), or the absolute path of an image archive.
    pub image: String,
    /// `--container-mounts`, mounted with the user's rights.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<ContainerMount>,
    /// `--container-workdir`: where the script starts inside.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// `--container-env`: variables whose value from the job wins over the
    /// image's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// The user's home is mounted at its own path (pyxis's default).
    pub mount_home: bool,
    /// The image's files may be changed, in a layer thrown away when the
    /// job ends; read-only otherwise.
    pub writable: bool,
}

/// One `SRC:DST[:ro|rw]` of `--container-mounts`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerMount {
    pub source: String,
    pub destination: String,
    pub read_only: bool,
}

impl fmt::Display for ContainerMount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.source, self.destination)?;
        if self.read_only {
            f.write_str(":ro")?;
        }
        Ok(())
    }
}

/// Where an image comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageSource<'a> {
    /// An archive on disk: a `podman save`/`docker save` or OCI archive,
    /// or a root filesystem as a tar file.
    Archive(&'a str),
    /// A name in the node's image store, pulled from its registry when
    /// missing.
    Reference(String),
}

/// The image a run resolved its request to: what `ysacct -o
/// ContainerImage` shows, so that a model can be traced to the exact image
/// that trained it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRecord {
    /// The name it was found under on the node.
    pub reference: String,
    /// Its manifest digest (`sha256:…`).
    pub digest: String,
}

impl fmt::Display for ImageRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.reference, self.digest)
    }
}

/// A `--container-*` value that breaks its rule.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ContainerError {
    #[error("--container-image: must not be empty")]
    EmptyImage,
    #[error("--container-image: longer than {MAX_IMAGE_CHARS} characters")]
    LongImage,
    #[error(
        "--container-image: '{0}' has a character an image name cannot hold \
         (letters, digits and . _ - / : @ # + only)"
    )]
    ImageCharacter(String),
    #[error("--container-mounts: '{0}' is not SRC:DST[:ro|rw] with absolute paths")]
    MountSyntax(String),
    #[error("--container-mounts: '{flags}' in '{mount}' is not one of ro, rw")]
    MountFlags { mount: String, flags: String },
    #[error(
        "--container-mounts: {path} may not be mounted over (it is the container's own {what})"
    )]
    MountOverSystem { path: String, what: &'static str },
    #[error("--container-mounts: more than {MAX_MOUNTS} mounts")]
    TooManyMounts,
    #[error("{flag}: '{path}' is not an absolute path without '..', control characters or ':'")]
    Path { flag: &'static str, path: String },
    #[error(
        "--container-env: '{0}' is not a variable name (letters, digits, '_'; not first a digit)"
    )]
    EnvName(String),
    #[error("--container-env: more than {MAX_ENV_NAMES} names")]
    TooManyEnvNames,
}

impl ContainerRequest {
    /// A request for `image` with pyxis's defaults: home mounted, writable.
    pub fn new(image: &str) -> Result<ContainerRequest, ContainerError> {
        check_image(image)?;
        Ok(ContainerRequest {
            image: image.to_string(),
            mounts: Vec::new(),
            workdir: None,
            env: Vec::new(),
            mount_home: true,
            writable: true,
        })
    }

    /// Where its image comes from: a path is an archive, anything else a
    /// name (enroot's `REGISTRY#IMAGE` read as `REGISTRY/IMAGE`).
    pub fn source(&self) -> ImageSource<'_> {
        if self.image.starts_with('/') {
            ImageSource::Archive(&self.image)
        } else {
            ImageSource::Reference(self.image.replacen('#', "/", 1))
        }
    }

    /// Every rule, checked again where the request is taken in.
    pub fn check(&self) -> Result<(), ContainerError> {
        check_image(&self.image)?;
        if self.mounts.len() > MAX_MOUNTS {
            return Err(ContainerError::TooManyMounts);
        }
        for m in &self.mounts {
            check_path(&m.source, "--container-mounts")?;
            check_destination(&m.destination)?;
        }
        if let Some(w) = &self.workdir {
            check_path(w, "--container-workdir")?;
        }
        check_env_names(&self.env)
    }
}

/// The registry an image reference names: its first component when that
/// looks like a host (a dot, a port, or `localhost`), else Docker Hub, as
/// podman and docker read short names.
pub fn registry_of(reference: &str) -> &str {
    match reference.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            first
        }
        _ => "docker.io",
    }
}

fn check_image(image: &str) -> Result<(), ContainerError> {
    if image.is_empty() {
        return Err(ContainerError::EmptyImage);
    }
    if image.chars().count() > MAX_IMAGE_CHARS {
        return Err(ContainerError::LongImage);
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || "._-/:@#+".contains(c);
    if !image.chars().all(allowed) || image.starts_with('-') || image.contains("..") {
        return Err(ContainerError::ImageCharacter(
            image.escape_debug().to_string(),
        ));
    }
    Ok(())
}

/// An absolute path with no `..`, no control character and no ':' (the
/// mount list's separator).
fn check_path(path: &str, flag: &'static str) -> Result<(), ContainerError> {
    let ok = path.starts_with('/')
        && path.len() <= MAX_PATH_BYTES
        && !path.chars().any(|c| c.is_control() || c == ':' || c == ',')
        && !path.split('/').any(|part| part == "..");
    if ok {
        Ok(())
    } else {
        Err(ContainerError::Path {
            flag,
            path: path.escape_debug().to_string(),
        })
    }
}

/// A mount's destination: a path, and not the container's own /proc,
/// /sys or /dev (which the runtime makes), nor its root.
fn check_destination(path: &str) -> Result<(), ContainerError> {
    check_path(path, "--container-mounts")?;
    let clean = path.trim_end_matches('/');
    for (top, what) in [
        ("/proc", "process list"),
        ("/sys", "kernel view"),
        ("/dev", "device list"),
    ] {
        if clean == top || clean.starts_with(&format!("{top}/")) {
            return Err(ContainerError::MountOverSystem {
                path: path.to_string(),
                what,
            });
        }
    }
    if clean.is_empty() {
        return Err(ContainerError::MountOverSystem {
            path: path.to_string(),
            what: "root",
        });
    }
    Ok(())
}

/// `--container-mounts`: `SRC:DST[:FLAGS]` or `SRC` (the same path
/// inside), separated by commas.
pub fn parse_mounts(text: &str) -> Result<Vec<ContainerMount>, ContainerError> {
    let mut mounts = Vec::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let parts: Vec<&str> = item.split(':').collect();
        let (source, destination, flags) = match parts.as_slice() {
            [src] => (*src, *src, None),
            [src, dst] => (*src, *dst, None),
            [src, dst, flags] => (*src, *dst, Some(*flags)),
            _ => return Err(ContainerError::MountSyntax(item.escape_debug().to_string())),
        };
        if !source.starts_with('/') || !destination.starts_with('/') {
            return Err(ContainerError::MountSyntax(item.escape_debug().to_string()));
        }
        let read_only = match flags {
            None | Some("rw") => false,
            Some("ro") => true,
            Some(other) => {
                return Err(ContainerError::MountFlags {
                    mount: item.escape_debug().to_string(),
                    flags: other.escape_debug().to_string(),
                })
            }
        };
        check_path(source, "--container-mounts")?;
        check_destination(destination)?;
        mounts.push(ContainerMount {
            source: source.to_string(),
            destination: destination.to_string(),
            read_only,
        });
    }
    if mounts.len() > MAX_MOUNTS {
        return Err(ContainerError::TooManyMounts);
    }
    Ok(mounts)
}

/// `--container-env`: variable names separated by commas.
pub fn parse_env_names(text: &str) -> Result<Vec<String>, ContainerError> {
    let names: Vec<String> = text
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect();
    check_env_names(&names)?;
    Ok(names)
}

fn check_env_names(names: &[String]) -> Result<(), ContainerError> {
    if names.len() > MAX_ENV_NAMES {
        return Err(ContainerError::TooManyEnvNames);
    }
    for name in names {
        let ok = name.len() <= 255
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && name.chars().next().is_some_and(|c| !c.is_ascii_digit());
        if !ok {
            return Err(ContainerError::EnvName(name.escape_debug().to_string()));
        }
    }
    Ok(())
}

/// `--container-workdir`: an absolute path.
pub fn parse_workdir(text: &str) -> Result<String, ContainerError> {
    check_path(text, "--container-workdir")?;
    Ok(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_names_or_archive_paths_and_shell_characters_are_refused() {
        let r = ContainerRequest::new("nvcr.io#nvidia/pytorch:24.01-py3").unwrap();
        assert_eq!(
            r.source(),
            ImageSource::Reference("nvcr.io/nvidia/pytorch:24.01-py3".into())
        );
        let r = ContainerRequest::new("/data/images/yolo.tar").unwrap();
        assert_eq!(r.source(), ImageSource::Archive("/data/images/yolo.tar"));
        for bad in [
            "yolo;rm -rf /",
            "$(id)",
            "a b",
            "-v",
            "img`x`",
            "x/../y",
            "",
        ] {
            let e = ContainerRequest::new(bad).unwrap_err().to_string();
            assert!(e.starts_with("--container-image:"), "{bad}: {e}");
        }
        assert_eq!(registry_of("nvcr.io/nvidia/pytorch:1"), "nvcr.io");
        assert_eq!(registry_of("localhost/yolo:1"), "localhost");
        assert_eq!(registry_of("ultralytics/ultralytics:8"), "docker.io");
        assert_eq!(registry_of("busybox"), "docker.io");
        assert_eq!(registry_of("registry:5000/team/img"), "registry:5000");
    }

    #[test]
    fn mounts_parse_with_their_flags_and_name_what_is_wrong() {
        let m = parse_mounts("/datasets:/data:ro,/scratch/out:/out, /models").unwrap();
        assert_eq!(
            m.iter().map(|m| m.to_string()).collect::<Vec<_>>(),
            ["/datasets:/data:ro", "/scratch/out:/out", "/models:/models"]
        );
        assert_eq!(
            parse_mounts("/a:/b:rx").unwrap_err().to_string(),
            "--container-mounts: 'rx' in '/a:/b:rx' is not one of ro, rw"
        );
        assert!(parse_mounts("data:/data").is_err());
        assert!(parse_mounts("/a:/b:ro:x").is_err());
        assert!(parse_mounts("/a/../etc:/b").is_err());
        let e = parse_mounts("/host:/proc/sys").unwrap_err().to_string();
        assert!(e.contains("/proc/sys may not be mounted over"), "{e}");
        assert!(parse_mounts("/host:/").is_err());
        assert!(parse_mounts("/host:/devices").is_ok());
    }

    #[test]
    fn env_names_and_workdir() {
        assert_eq!(
            parse_env_names("PATH, HF_HOME").unwrap(),
            ["PATH", "HF_HOME"]
        );
        assert!(parse_env_names("1X").is_err());
        assert!(parse_env_names("A=B").is_err());
        assert_eq!(parse_workdir("/workspace").unwrap(), "/workspace");
        assert!(parse_workdir("workspace").is_err());
    }
}
