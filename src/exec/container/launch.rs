//! The two halves of starting a job in its container: [`prepare`], in
//! the supervisor (the image made present and described, the bundle and
//! its configuration written), and [`become_container`], in the job's
//! forked child (mounts made in a private namespace, then crun executed).

use std::ffi::CString;
use std::fs::{self, File};
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags};
use nix::sched::CloneFlags;

use super::image::{Image, Store};
use super::mounts::{self, FsIdentity};
use super::{
    Bundle, ContainerDevice, ContainerError, ContainerLaunch, RuntimeConfig, SCRIPT_INSIDE,
};
use crate::exec::spec::LaunchSpec;
use crate::model::container::ImageSource;

/// One mount to make: from the host path `source`, opened with the
/// user's rights unless it is the system's own (`as_user` false).
#[derive(Clone, Debug)]
pub struct PlannedMount {
    pub source: PathBuf,
    pub destination: String,
    pub read_only: bool,
    pub as_user: bool,
}

/// A container ready to be entered.
pub struct Prepared {
    pub image: Image,
    pub bundle: Bundle,
    pub mounts: Vec<PlannedMount>,
    pub argv: Vec<CString>,
}

/// What runs in a container: the batch script, or a step's command.
pub struct Payload<'a> {
    /// The command line inside.
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Its working directory on the host: inside, where a mount brings
    /// it in.
    pub host_cwd: &'a Path,
    pub bundle: Bundle,
    /// The container's name for the runtime.
    pub name: String,
    /// The job's directory, where its own image store is (its archives').
    pub job_dir: &'a Path,
}

impl Payload<'_> {
    /// The job's batch script, in the job's directory.
    pub fn batch<'a>(spec: &'a LaunchSpec, job_dir: &'a Path) -> Payload<'a> {
        let mut args = vec![SCRIPT_INSIDE.to_string()];
        args.extend(spec.args.iter().cloned());
        Payload {
            args,
            env: crate::exec::env::job_environment(spec),
            host_cwd: &spec.work_dir,
            bundle: Bundle::new(job_dir),
            name: format!("ysched-{}-{}", spec.job_id, spec.restart_count),
            job_dir,
        }
    }
}

/// Opens an archive without waiting for a writer (a FIFO would block the
/// supervisor until one came); what it is, is checked before loading.
fn open_archive(path: &str) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
}

/// Makes the image present and writes the bundle: everything that may
/// take long or fail before the job's process is forked. `cancelled`
/// says, while podman works, whether the job was cancelled meanwhile.
pub fn prepare(
    spec: &LaunchSpec,
    launch: &ContainerLaunch,
    payload: Payload<'_>,
    cancelled: &dyn Fn() -> bool,
) -> Result<Prepared, ContainerError> {
    let who = FsIdentity {
        user: &spec.user,
        uid: spec.uid,
        gid: spec.gid,
    };
    let image = match launch.request.source() {
        ImageSource::Archive(path) => {
            let file = mounts::as_user(&who, || open_archive(path))?.map_err(|e| {
                ContainerError::Mount {
                    path: path.to_string(),
                    why: format!("{e} (it is read with your rights)"),
                }
            })?;
            Store::of_job(&launch.site, payload.job_dir)
                .stopped_when(cancelled)
                .prepare_archive(path, &file)?
        }
        ImageSource::Reference(reference) => Store::shared(&launch.site)
            .stopped_when(cancelled)
            .prepare(&reference, &launch.pull_locks)?,
    };
    let bundle = payload.bundle;
    bundle.make()?;
    let cdi = super::cdi::edits_for(&launch.site.cdi_dirs, &spec.gpus)?.unwrap_or_default();
    let mut planned = planned_mounts(spec, launch);
    planned.extend(cdi.mounts.iter().map(|m| PlannedMount {
        source: PathBuf::from(&m.host_path),
        destination: m.container_path.clone(),
        read_only: m.options.iter().any(|o| o == "ro"),
        as_user: false,
    }));
    let devices = with_cdi_devices(&launch.devices, &cdi)?;
    let image_env: Vec<String> = image.env.iter().chain(&cdi.env).cloned().collect();
    let env = super::environment(payload.env, &image_env, &launch.request.env);
    let cwd = working_directory(payload.host_cwd, launch, &planned, &image);
    let groups = user_groups(spec)?;
    let (passwd, group) =
        super::account_files(&image.layers, (&spec.user, spec.uid, spec.gid), &spec.home);
    for (path, text) in [(bundle.passwd(), passwd), (bundle.group(), group)] {
        fs::write(&path, text).map_err(|e| ContainerError::io("writing", &path, e))?;
    }
    let config = RuntimeConfig {
        args: payload.args,
        env: &env,
        cwd: &cwd,
        user: (spec.uid, spec.gid, groups),
        read_only: !launch.request.writable,
        devices: &devices,
        as_root: spec.uid == 0,
        hooks: cdi.oci_hooks(),
    };
    let path = bundle.dir.join("config.json");
    fs::write(&path, config.to_json()?).map_err(|e| ContainerError::io("writing", &path, e))?;
    let argv = super::runtime_argv(&launch.site, &bundle, &payload.name)
        .into_iter()
        .map(|a| {
            CString::new(a).map_err(|_| ContainerError::Identity("a NUL byte in a path".into()))
        })
        .collect::<Result<_, _>>()?;
    Ok(Prepared {
        image,
        bundle,
        mounts: planned,
        argv,
    })
}

/// The job's devices and those the CDI spec adds (found on the host).
fn with_cdi_devices(
    devices: &[ContainerDevice],
    cdi: &super::cdi::Edits,
) -> Result<Vec<ContainerDevice>, ContainerError> {
    let mut all = devices.to_vec();
    for node in &cdi.device_nodes {
        let host = node.host_path.as_deref().unwrap_or(&node.path);
        let st = nix::sys::stat::stat(host).map_err(|e| ContainerError::Mount {
            path: host.to_string(),
            why: format!("a device of the GPUs' CDI spec: {e}"),
        })?;
        let path = PathBuf::from(&node.path);
        if !all.iter().any(|d| d.path == path) {
            all.push(ContainerDevice {
                path,
                major: nix::sys::stat::major(st.st_rdev) as u32,
                minor: nix::sys::stat::minor(st.st_rdev) as u32,
            });
        }
    }
    Ok(all)
}

/// The site's mounts, the user's home (unless not wanted), the job's.
fn planned_mounts(spec: &LaunchSpec, launch: &ContainerLaunch) -> Vec<PlannedMount> {
    let mut planned: Vec<PlannedMount> = launch
        .site
        .mounts
        .iter()
        .map(|m| PlannedMount {
            source: PathBuf::from(&m.source),
            destination: m.destination.clone(),
            read_only: m.read_only,
            as_user: true,
        })
        .collect();
    // A user whose home does not exist (a service account) goes without.
    if launch.request.mount_home && spec.home.is_dir() && spec.home != Path::new("/") {
        planned.push(PlannedMount {
            source: spec.home.clone(),
            destination: spec.home.display().to_string(),
            read_only: false,
            as_user: true,
        });
    }
    planned.extend(launch.request.mounts.iter().map(|m| PlannedMount {
        source: PathBuf::from(&m.source),
        destination: m.destination.clone(),
        read_only: m.read_only,
        as_user: true,
    }));
    for file in ["/etc/hosts", "/etc/resolv.conf"] {
        if Path::new(file).is_file() {
            planned.push(PlannedMount {
                source: file.into(),
                destination: file.into(),
                read_only: true,
                as_user: false,
            });
        }
    }
    planned
}

/// `--container-workdir`; else the working directory when a mount
/// brings it in; else the image's; else `/`.
fn working_directory(
    host_cwd: &Path,
    launch: &ContainerLaunch,
    planned: &[PlannedMount],
    image: &Image,
) -> String {
    if let Some(w) = &launch.request.workdir {
        return w.clone();
    }
    let inside = planned.iter().find_map(|m| {
        let rest = host_cwd.strip_prefix(&m.source).ok()?;
        Some(Path::new(&m.destination).join(rest))
    });
    match inside {
        Some(dir) => dir.display().to_string(),
        None => image.workdir.clone().unwrap_or_else(|| "/".into()),
    }
}

fn user_groups(spec: &LaunchSpec) -> Result<Vec<u32>, ContainerError> {
    let name = CString::new(spec.user.as_str())
        .map_err(|_| ContainerError::Identity("a NUL in the user name".into()))?;
    let groups = nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(spec.gid))
        .map_err(|e| ContainerError::Identity(format!("the groups of {}: {e}", spec.user)))?;
    Ok(groups.into_iter().map(|g| g.as_raw()).collect())
}

/// In the job's forked child, in its cgroup and session, as root: opens
/// the output files and the mounts' sources with the user's rights, makes
/// the container's file system in a private mount namespace, puts the
/// output on descriptors 1 and 2, and executes crun. Returns only on
/// failure, with why.
pub fn become_container(
    spec: &LaunchSpec,
    prepared: &Prepared,
    script: Option<&Path>,
    open_outputs: impl FnOnce() -> Result<(File, File, File), ContainerError>,
) -> String {
    let who = FsIdentity {
        user: &spec.user,
        uid: spec.uid,
        gid: spec.gid,
    };
    // First: a mount can only be made from what was opened in the
    // namespace it is made in.
    if let Err(e) = private_namespace() {
        return e.to_string();
    }
    let opened = mounts::as_user(&who, || -> Result<_, ContainerError> {
        Ok((open_outputs()?, open_sources(&prepared.mounts, true)?))
    });
    let ((stdin, stdout, stderr), mut sources) = match opened.and_then(|o| o) {
        Ok(opened) => opened,
        Err(e) => return e.to_string(),
    };
    match open_sources(&prepared.mounts, false) {
        Ok(system) => sources.extend(system),
        Err(e) => return e.to_string(),
    }
    if let Err(e) = make_file_system(prepared, script, &sources) {
        return e.to_string();
    }
    if let Err(e) = crate::exec::process::dup_standard(&stdin, &stdout, &stderr) {
        return e.to_string();
    }
    let env = [CString::new("PATH=/usr/sbin:/usr/bin:/sbin:/bin").unwrap_or_default()];
    match nix::unistd::execve(&prepared.argv[0], &prepared.argv, &env) {
        Err(e) => format!(
            "cannot execute the container runtime {}: {e}",
            prepared.argv[0].to_string_lossy()
        ),
        Ok(never) => match never {},
    }
}

/// The sources of the mounts opened by the current identity: the user's
/// (`by_user`) or the system's.
fn open_sources(
    planned: &[PlannedMount],
    by_user: bool,
) -> Result<Vec<(File, PlannedMount)>, ContainerError> {
    planned
        .iter()
        .filter(|m| m.as_user == by_user)
        .map(|m| Ok((mounts::open_source(&m.source)?, m.clone())))
        .collect()
}

/// A mount namespace of this process's own, where host mounts still
/// appear but its own stay; cgroup2 hidden from crun on a hybrid host.
fn private_namespace() -> Result<(), ContainerError> {
    let os = |what: &str| {
        let what = what.to_string();
        move |e: nix::errno::Errno| ContainerError::Mount {
            path: what.clone(),
            why: e.to_string(),
        }
    };
    nix::sched::unshare(CloneFlags::CLONE_NEWNS).map_err(os("a private mount namespace"))?;
    nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_SLAVE,
        None::<&str>,
    )
    .map_err(os("/ (as a slave)"))?;
    if super::hybrid_with_controllers() {
        nix::mount::umount2("/sys/fs/cgroup/unified", MntFlags::MNT_DETACH)
            .map_err(os("/sys/fs/cgroup/unified (hidden from crun)"))?;
    }
    Ok(())
}

/// The container's file system: the layers and every mount.
fn make_file_system(
    prepared: &Prepared,
    script: Option<&Path>,
    sources: &[(File, PlannedMount)],
) -> Result<(), ContainerError> {
    mount_layers(prepared)?;
    let rootfs = prepared.bundle.rootfs();
    let root = File::open(&rootfs).map_err(|e| ContainerError::io("opening", &rootfs, e))?;
    for (file, m) in sources {
        let is_dir = file.metadata().is_ok_and(|meta| meta.is_dir());
        let target = mounts::open_destination(&root, &m.destination, !is_dir)?;
        mounts::bind(file, &target, m.read_only, &m.source.display().to_string())?;
    }
    let script = script.map(|s| (s.to_path_buf(), SCRIPT_INSIDE));
    let accounts = [
        (prepared.bundle.passwd(), "/etc/passwd"),
        (prepared.bundle.group(), "/etc/group"),
    ];
    for (source, destination) in script.into_iter().chain(accounts) {
        let file = File::open(&source).map_err(|e| ContainerError::io("opening", &source, e))?;
        let target = mounts::open_destination(&root, destination, true)?;
        mounts::bind(&file, &target, true, destination)?;
    }
    Ok(())
}

/// The image's layers under the run's own writable layer, at the
/// bundle's root. Layer paths are given relative to their common parent
/// where they share one: the mount's options are limited to a page.
fn mount_layers(prepared: &Prepared) -> Result<(), ContainerError> {
    let layers = &prepared.image.layers;
    let parent = layers
        .first()
        .and_then(|l| l.parent())
        .and_then(|p| p.parent())
        .map(Path::to_path_buf);
    let relative: Option<Vec<String>> = parent.as_ref().and_then(|p| {
        layers
            .iter()
            .map(|l| l.strip_prefix(p).ok().map(|r| r.display().to_string()))
            .collect()
    });
    let lower = match (&parent, relative) {
        (Some(p), Some(rel)) => {
            std::env::set_current_dir(p).map_err(|e| ContainerError::io("entering", p, e))?;
            rel.join(":")
        }
        _ => layers
            .iter()
            .map(|l| l.display().to_string())
            .collect::<Vec<_>>()
            .join(":"),
    };
    let options = format!(
        "lowerdir={lower},upperdir={},workdir={}",
        prepared.bundle.upper().display(),
        prepared.bundle.work().display()
    );
    if options.len() >= 4000 {
        return Err(ContainerError::Mount {
            path: prepared.image.record.reference.clone(),
            why: format!(
                "its {} layers are more than one mount can join",
                layers.len()
            ),
        });
    }
    let rootfs = prepared.bundle.rootfs();
    let result = nix::mount::mount(
        Some("overlay"),
        &rootfs,
        Some("overlay"),
        MsFlags::MS_NODEV,
        Some(options.as_str()),
    );
    let _ = std::env::set_current_dir("/");
    result.map_err(|e| ContainerError::Mount {
        path: format!("the image's layers at {}", rootfs.display()),
        why: e.to_string(),
    })
}
