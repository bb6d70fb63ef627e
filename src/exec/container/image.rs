//! A job's image on this node, through podman's image store: found, or
//! pulled from an allowed registry (once per node however many jobs want
//! it at once), or loaded from an archive the user may read, then
//! described: its layers, environment, working directory and digest.
//!
//! A user's archive never enters the node's shared store: `podman load`
//! gives an image the names its archive claims, and moves those names
//! away from the images that had them, so an archive tagged as the site's
//! image would replace it for every user. Archives are loaded into a
//! store of the job's own, in its directory, which goes with the job;
//! only a regular file the user may read, up to `max_archive_size`, is
//! loaded, handed to podman as a file (a pipe would be spooled to disk
//! without bound).
//!
//! podman is used for what it does well (registries, archive formats,
//! layer storage); the container itself is run by crun, in the job's own
//! cgroup (see `super`).

use std::fs;
use std::io::{Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Deserialize;

use crate::config::Containers;
use crate::model::container::{registry_of, ImageRecord};

use super::ContainerError;

/// What a run needs of its image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub record: ImageRecord,
    /// Its layers' directories, the top one first.
    pub layers: Vec<PathBuf>,
    /// `NAME=VALUE`, as the image sets them.
    pub env: Vec<String>,
    pub workdir: Option<String>,
}

/// podman with the site's image store, or with a job's own.
pub struct Store<'a> {
    pub site: &'a Containers,
    /// A store of the job's own (its archives'), instead of the site's.
    private: Option<PathBuf>,
    /// Asked while podman runs: `true` (the job was cancelled) stops it.
    cancelled: Option<&'a dyn Fn() -> bool>,
}

/// The directory of a job's own image store, in its directory.
const ARCHIVE_STORE: &str = "archive-images";

/// The part of `podman image inspect` read here.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Inspected {
    id: String,
    #[serde(default)]
    digest: String,
    #[serde(default)]
    config: InspectedConfig,
    graph_driver: GraphDriver,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct InspectedConfig {
    #[serde(default)]
    env: Option<Vec<String>>,
    #[serde(default)]
    working_dir: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct GraphDriver {
    name: String,
    data: std::collections::BTreeMap<String, String>,
}

impl<'a> Store<'a> {
    /// The node's store, which every job's image names are looked up in.
    pub fn shared(site: &'a Containers) -> Store<'a> {
        Store {
            site,
            private: None,
            cancelled: None,
        }
    }

    /// Job `job_dir`'s own store, for the archives its user names.
    pub fn of_job(site: &'a Containers, job_dir: &Path) -> Store<'a> {
        Store {
            site,
            private: Some(job_dir.join(ARCHIVE_STORE)),
            cancelled: None,
        }
    }

    /// The same store, with podman stopped when `cancelled` says so.
    pub fn stopped_when(self, cancelled: &'a dyn Fn() -> bool) -> Store<'a> {
        Store {
            cancelled: Some(cancelled),
            ..self
        }
    }

    fn podman(&self) -> Command {
        let mut command = Command::new(&self.site.podman);
        if let Some(root) = &self.private {
            command
                .arg("--root")
                .arg(root)
                .arg("--runroot")
                .arg(private_runroot(root));
        } else if let Some(root) = &self.site.storage {
            command
                .arg("--root")
                .arg(root)
                .arg("--runroot")
                .arg(root.join("run"));
        }
        if self.private.is_some() {
            // The layers are joined by overlayfs when the job starts; the
            // store mounts nothing of its own (podman would bind its
            // overlay directory onto itself), so that it goes with a plain
            // removal.
            command.args([
                "--storage-driver",
                "overlay",
                "--storage-opt",
                "overlay.skip_mount_home=true",
            ]);
        }
        command.stdin(Stdio::null());
        command
    }

    /// Runs podman for at most the site's `pull_timeout` (a pull, a load,
    /// anything: a registry or a disk that hangs must not hang the job),
    /// then kills it; its standard output, or its last error line.
    fn run(&self, mut command: Command, what: &str) -> Result<String, ContainerError> {
        let failed = |message: String| ContainerError::Podman {
            what: what.to_string(),
            message,
        };
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| failed(format!("cannot run {}: {e}", self.site.podman.display())))?;
        let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                if let Some(mut p) = pipe {
                    let _ = p.read_to_string(&mut text);
                }
                text
            })
        };
        let stdout = read(child.stdout.take().map(|p| Box::new(p) as _));
        let stderr = read(child.stderr.take().map(|p| Box::new(p) as _));
        let deadline = std::time::Instant::now() + self.site.pull_timeout;
        let cancelled = || self.cancelled.is_some_and(|c| c());
        let waited = crate::exec::command::wait_while(&mut child, deadline, || !cancelled())
            .map_err(|e| failed(format!("cannot wait for podman: {e}")))?;
        let Some(status) = waited else {
            if cancelled() {
                return Err(ContainerError::Cancelled);
            }
            let limit = humantime::format_duration(self.site.pull_timeout);
            return Err(failed(format!("gave up after {limit} (pull_timeout)")));
        };
        let (out, err) = (
            stdout.join().unwrap_or_default(),
            stderr.join().unwrap_or_default(),
        );
        if status.success() {
            return Ok(out);
        }
        Err(failed(last_error_line(&err)))
    }

    /// Whether the store holds `reference`; a store podman cannot read is
    /// an error that says why (not an absent image, which would be pulled,
    /// or refused for its registry, for the wrong reason).
    pub fn exists(&self, reference: &str) -> Result<bool, ContainerError> {
        let mut command = self.podman();
        command.args(["image", "exists", "--", reference]);
        let what = format!("looking for {reference} in the node's image store");
        let output = command.output().map_err(|e| ContainerError::Podman {
            what: what.clone(),
            message: format!("cannot run {}: {e}", self.site.podman.display()),
        })?;
        match output.status.code() {
            Some(0) => Ok(true),
            // podman's "no such image".
            Some(1) => Ok(false),
            _ => {
                let message = last_error_line(&String::from_utf8_lossy(&output.stderr));
                let hint = if message.contains("does not match our storage") {
                    format!(
                        "; the store was used with another --runroot: load images into it with podman --root {} --runroot {} load -i FILE",
                        self.site.storage.as_deref().unwrap_or(Path::new("STORE")).display(),
                        self.site.storage.as_deref().unwrap_or(Path::new("STORE")).join("run").display()
                    )
                } else {
                    String::new()
                };
                Err(ContainerError::Podman {
                    what,
                    message: format!("{message}{hint}"),
                })
            }
        }
    }

    /// Removes job `job_dir`'s own store, once nothing of the job runs.
    pub fn remove_job_store(job_dir: &Path) {
        let root = job_dir.join(ARCHIVE_STORE);
        for dir in [private_runroot(&root), root] {
            if dir.exists() {
                if let Err(e) = fs::remove_dir_all(&dir) {
                    eprintln!("ysstepd: cannot remove {}: {e}", dir.display());
                }
            }
        }
    }

    /// The image `reference` names in the node's store, made present.
    pub fn prepare(&self, reference: &str, locks: &Path) -> Result<Image, ContainerError> {
        self.make_present(reference, locks)?;
        self.describe(reference)
    }

    /// The image in archive `path` (opened with the user's rights, as
    /// `file`), loaded into the job's own store: the steps of one job load
    /// theirs one at a time, and each finds its own by the name it left.
    pub fn prepare_archive(&self, path: &str, file: &fs::File) -> Result<Image, ContainerError> {
        let Some(root) = &self.private else {
            return Err(ContainerError::Podman {
                what: format!("loading {path}"),
                message: "an archive is never loaded into the node's shared store".into(),
            });
        };
        check_archive(path, file, self.site.max_archive_mb)?;
        fs::create_dir_all(root).map_err(|e| ContainerError::io("making", root, e))?;
        let _lock = lock(&root.with_extension("lock"))?;
        let name = self.load(path, file)?;
        let mut image = self.describe(&name)?;
        image.record.reference = path.to_string();
        Ok(image)
    }

    /// What the store's images take, in bytes (an image under several
    /// names counted once).
    pub fn size(&self) -> Result<u64, ContainerError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct Listed {
            id: String,
            #[serde(default)]
            size: u64,
        }
        let mut command = self.podman();
        command.args(["images", "--format", "json"]);
        let text = self.run(command, "listing the images")?;
        let listed: Vec<Listed> =
            serde_json::from_str(&text).map_err(|e| ContainerError::Podman {
                what: "listing the images".into(),
                message: e.to_string(),
            })?;
        let mut seen = std::collections::HashSet::new();
        Ok(listed
            .into_iter()
            .filter(|i| seen.insert(i.id.clone()))
            .map(|i| i.size)
            .sum())
    }

    /// Removes the name `reference` (and the image, when it was its last).
    pub fn remove(&self, reference: &str) -> Result<(), ContainerError> {
        let mut command = self.podman();
        command.args(["rmi", "--", reference]);
        self.run(command, &format!("removing {reference}"))
            .map(drop)
    }

    /// Makes `reference` present in the store: found there, or pulled.
    /// Whether it was pulled (`false`: it was there).
    pub fn make_present(&self, reference: &str, locks: &Path) -> Result<bool, ContainerError> {
        if self.exists(reference)? {
            return Ok(false);
        }
        self.pull(reference, locks).map(|()| true)
    }

    /// Pulls `reference` unless another pull of it on this node is under
    /// way: then waits for that pull and uses its result.
    fn pull(&self, reference: &str, locks: &Path) -> Result<(), ContainerError> {
        let registry = registry_of(reference);
        // podman names the images it loaded or imported localhost/...: no
        // registry has them.
        if registry == "localhost" {
            return Err(ContainerError::Missing {
                image: reference.to_string(),
                why: "a localhost/ image is one an administrator loaded into the node's store (podman load), and this node's store has none of that name".into(),
            });
        }
        if !self.site.may_pull_from(registry) {
            return Err(ContainerError::RegistryRefused {
                image: reference.to_string(),
                registry: registry.to_string(),
            });
        }
        fs::create_dir_all(locks).map_err(|e| ContainerError::io("making", locks, e))?;
        let _lock = lock(&locks.join(format!("{}.lock", lock_name(reference))))?;
        if self.exists(reference)? {
            return Ok(());
        }
        let mut command = self.podman();
        command.args(["pull", "--quiet"]);
        if self.site.is_insecure(registry) {
            command.arg("--tls-verify=false");
        }
        command.args(["--", reference]);
        self.run(command, &format!("pulling {reference}"))
            .map(drop)
            .map_err(|e| {
                // The details stay in the node's log: told to the job, a
                // network error's words would map the network for whoever
                // names an image.
                tracing::warn!(target: "ysched::exec", "{e}");
                ContainerError::Missing {
                    image: reference.to_string(),
                    why: pull_failure(registry, &e),
                }
            })
    }

    /// Loads an image archive (`podman save`, `docker save`, OCI), or
    /// imports a root filesystem tar; returns the name it is stored under.
    /// The archive is podman's standard input, which it reads as the
    /// file it is (`--input /dev/stdin`), not as a stream it would copy.
    fn load(&self, path: &str, file: &fs::File) -> Result<String, ContainerError> {
        let input = |file: &fs::File| -> Result<Stdio, ContainerError> {
            let mut copy = file
                .try_clone()
                .map_err(|e| ContainerError::io("reading", Path::new(path), e))?;
            copy.seek(SeekFrom::Start(0))
                .map_err(|e| ContainerError::io("reading", Path::new(path), e))?;
            Ok(Stdio::from(copy))
        };
        let mut command = self.podman();
        command
            .args(["load", "--input", "/dev/stdin"])
            .stdin(input(file)?);
        let loaded = match self.run(command, &format!("loading {path}")) {
            Ok(out) => out,
            Err(ContainerError::Cancelled) => return Err(ContainerError::Cancelled),
            Err(load_error) => return self.import(path, file, input(file)?, load_error),
        };
        loaded
            .lines()
            .filter_map(|l| l.split_once(": ").map(|(_, names)| names))
            .flat_map(|names| names.split(','))
            .map(str::trim)
            .find(|n| !n.is_empty())
            .map(str::to_string)
            .ok_or_else(|| ContainerError::NotAnImage {
                path: path.to_string(),
                why: "podman load named no image".into(),
            })
    }

    /// A root filesystem as a tar file, imported under a name made of its
    /// path (the record keeps the path, and the digest tells versions
    /// apart).
    fn import(
        &self,
        path: &str,
        file: &fs::File,
        input: Stdio,
        load_error: ContainerError,
    ) -> Result<String, ContainerError> {
        let mut tar_magic = [0u8; 5];
        let is_tar = {
            use std::os::unix::fs::FileExt;
            file.read_exact_at(&mut tar_magic, 257).is_ok() && &tar_magic == b"ustar"
        };
        if !is_tar {
            return Err(ContainerError::NotAnImage {
                path: path.to_string(),
                why: load_error.to_string(),
            });
        }
        let name = format!("localhost/ysched-archive:{}", lock_name(path));
        let mut command = self.podman();
        command.args(["import", "--quiet", "-", &name]).stdin(input);
        self.run(command, &format!("importing {path}"))
            .map_err(|e| ContainerError::NotAnImage {
                path: path.to_string(),
                why: e.to_string(),
            })?;
        Ok(name)
    }

    /// Its layers, environment, working directory and digest.
    fn describe(&self, reference: &str) -> Result<Image, ContainerError> {
        let mut command = self.podman();
        command.args(["image", "inspect", "--", reference]);
        let text = self.run(command, &format!("describing {reference}"))?;
        let bad = |why: String| ContainerError::Podman {
            what: format!("describing {reference}"),
            message: why,
        };
        let mut list: Vec<Inspected> =
            serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let inspected = list.pop().ok_or_else(|| bad("no image".into()))?;
        if inspected.graph_driver.name != "overlay" {
            return Err(bad(format!(
                "the image store uses podman's {} driver; ysched needs overlay",
                inspected.graph_driver.name
            )));
        }
        let data = &inspected.graph_driver.data;
        let layers: Vec<PathBuf> = data
            .get("UpperDir")
            .into_iter()
            .chain(data.get("LowerDir"))
            .flat_map(|dirs| dirs.split(':'))
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .collect();
        if layers.is_empty() {
            return Err(bad("it has no layers".into()));
        }
        let digest = if inspected.digest.is_empty() {
            format!("sha256:{}", inspected.id)
        } else {
            inspected.digest
        };
        Ok(Image {
            record: ImageRecord {
                reference: reference.to_string(),
                digest,
            },
            layers,
            env: inspected.config.env.unwrap_or_default(),
            workdir: inspected.config.working_dir.filter(|w| !w.is_empty()),
        })
    }
}

/// Where podman keeps the locks of a job's own store `root`: podman wants
/// that path short (50 characters), so it is in root's /run, named by a
/// hash of the store's; in the store itself where /run is not root's.
fn private_runroot(root: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let hash = ring::digest::digest(&ring::digest::SHA256, root.as_os_str().as_bytes());
    let name: String = hash.as_ref()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        PathBuf::from(format!("/run/ysched/archive-{name}"))
    } else {
        root.join("run")
    }
}

/// What a job is told of a failed pull from `registry`: whether the image
/// is not there, access was refused, or the registry was not reached as
/// one; or that the pull was given up (`pull_timeout`).
fn pull_failure(registry: &str, error: &ContainerError) -> String {
    let text = error.to_string().to_ascii_lowercase();
    if text.contains("pull_timeout") {
        return error.to_string();
    }
    if ["manifest unknown", "not found", "name unknown"]
        .iter()
        .any(|w| text.contains(w))
    {
        format!("{registry} has no such image")
    } else if ["unauthorized", "denied", "authentication"]
        .iter()
        .any(|w| text.contains(w))
    {
        format!("{registry} refused access to it")
    } else {
        format!("{registry} could not be reached as a registry (the node's log says why)")
    }
}

/// Holds an exclusive lock on `path` (made if missing) until dropped.
fn lock(path: &Path) -> Result<fs::File, ContainerError> {
    let lock = fs::File::create(path).map_err(|e| ContainerError::io("opening", path, e))?;
    // SAFETY: flock on a descriptor this function owns; released when the
    // file is closed.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(ContainerError::io("locking", path, e));
    }
    Ok(lock)
}

/// An archive is loaded only if it is a regular file of at most
/// `limit_mb`: a device or a pipe would feed podman without end.
fn check_archive(path: &str, file: &fs::File, limit_mb: u64) -> Result<(), ContainerError> {
    let refuse = |why: String| ContainerError::NotAnImage {
        path: path.to_string(),
        why,
    };
    let meta = file
        .metadata()
        .map_err(|e| ContainerError::io("reading", Path::new(path), e))?;
    if !meta.file_type().is_file() {
        return Err(refuse("it is not a regular file".into()));
    }
    let limit = limit_mb.saturating_mul(1 << 20);
    if meta.len() > limit {
        return Err(refuse(format!(
            "it is {} MiB, more than this site's max_archive_size of {limit_mb} MiB",
            meta.len() >> 20
        )));
    }
    Ok(())
}

/// podman's last words on standard error, without its `Error: `.
fn last_error_line(stderr: &str) -> String {
    stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no message")
        .trim()
        .trim_start_matches("Error: ")
        .to_string()
}

/// A file name for `text`: its characters that are safe, and a hash that
/// keeps different texts apart.
fn lock_name(text: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut hasher);
    let safe: String = text
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(64)
        .collect();
    format!("{}-{:016x}", safe.to_ascii_lowercase(), hasher.finish())
}
