//! Mounts into a job's container, made with the user's rights: each
//! source is opened while this process's file-system identity is the
//! user's (so a path the user cannot read is refused, as it would be to
//! the user), and the mount is made from that open descriptor (so the
//! path cannot be swapped for another between the check and the mount).
//! Destinations are resolved inside the image's root, symbolic links
//! included, so that no link in an image leads a mount out of it.
//!
//! All of it runs in the job's forked child, single-threaded, in the
//! private mount namespace the child made: nothing here is seen outside.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use nix::errno::Errno;
use nix::mount::MsFlags;

use super::ContainerError;

/// Who opens the sources.
pub struct FsIdentity<'a> {
    pub user: &'a str,
    pub uid: u32,
    pub gid: u32,
}

/// Runs `f` with this process's file-system ids and groups those of the
/// user, then restores root's.
pub fn as_user<T>(who: &FsIdentity<'_>, f: impl FnOnce() -> T) -> Result<T, ContainerError> {
    let name = CString::new(who.user)
        .map_err(|_| ContainerError::Identity("a NUL in the user name".into()))?;
    let groups = nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(who.gid))
        .map_err(|e| ContainerError::Identity(format!("the groups of {}: {e}", who.user)))?;
    let saved = nix::unistd::getgroups()
        .map_err(|e| ContainerError::Identity(format!("this process's groups: {e}")))?;
    nix::unistd::setgroups(&groups)
        .map_err(|e| ContainerError::Identity(format!("taking {}'s groups: {e}", who.user)))?;
    nix::unistd::setfsgid(nix::unistd::Gid::from_raw(who.gid));
    nix::unistd::setfsuid(nix::unistd::Uid::from_raw(who.uid));
    let result = f();
    nix::unistd::setfsuid(nix::unistd::Uid::from_raw(0));
    nix::unistd::setfsgid(nix::unistd::Gid::from_raw(0));
    nix::unistd::setgroups(&saved)
        .map_err(|e| ContainerError::Identity(format!("restoring groups: {e}")))?;
    Ok(result)
}

/// Opens `path` to be mounted: a directory or a file, read access
/// checked (by the caller's identity, see [`as_user`]).
pub fn open_source(path: &Path) -> Result<File, ContainerError> {
    let refused = |e: std::io::Error| ContainerError::Mount {
        path: path.display().to_string(),
        why: e.to_string(),
    };
    let meta = std::fs::metadata(path).map_err(refused)?;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    if meta.is_dir() {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_DIRECTORY);
    }
    // O_RDONLY checks read access, of a directory too (listing it).
    let file = options.open(path).map_err(refused)?;
    Ok(file)
}

/// The path by which this process reaches an open descriptor.
fn fd_path(fd: &impl AsRawFd) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// Opens `destination` under the root `root`, making what is missing
/// (directories, and the last component as a file when `file`), with
/// symbolic links resolved as if `root` were `/`.
pub fn open_destination(
    root: &File,
    destination: &str,
    file: bool,
) -> Result<OwnedFd, ContainerError> {
    let failed = |why: String| ContainerError::Mount {
        path: destination.to_string(),
        why,
    };
    let parts: Vec<&std::ffi::OsStr> = Path::new(destination)
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p),
            _ => None,
        })
        .collect();
    let mut so_far = std::path::PathBuf::from("/");
    for (i, part) in parts.iter().enumerate() {
        let parent =
            open_in_root(root, &so_far).map_err(|e| failed(format!("in the image: {e}")))?;
        so_far.push(part);
        if open_in_root(root, &so_far).is_ok() {
            continue;
        }
        let name = CString::new(part.as_bytes()).map_err(|_| failed("a NUL byte".into()))?;
        let last = i + 1 == parts.len();
        // SAFETY: *at calls on a descriptor this function holds, with a
        // NUL-terminated name of one component.
        let made = unsafe {
            if last && file {
                let fd = libc::openat(
                    parent.as_raw_fd(),
                    name.as_ptr(),
                    libc::O_CREAT | libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                    0o644,
                );
                if fd >= 0 {
                    libc::close(fd);
                }
                fd
            } else {
                libc::mkdirat(parent.as_raw_fd(), name.as_ptr(), 0o755)
            }
        };
        if made < 0 && Errno::last() != Errno::EEXIST {
            return Err(failed(format!(
                "cannot make it in the image: {}",
                Errno::last()
            )));
        }
    }
    open_in_root(root, &so_far).map_err(|e| failed(format!("in the image: {e}")))
}

/// `openat2` with `RESOLVE_IN_ROOT`: an O_PATH descriptor of `path`
/// inside `root`.
fn open_in_root(root: &File, path: &Path) -> Result<OwnedFd, Errno> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    nix::fcntl::openat2(root, path, how)
}

/// Bind-mounts the open `source` at the open `target`; read-only when
/// asked. Never set-user-id programs or device files through it.
pub fn bind(
    source: &File,
    target: &OwnedFd,
    read_only: bool,
    what: &str,
) -> Result<(), ContainerError> {
    let failed = |e: Errno| ContainerError::Mount {
        path: what.to_string(),
        why: e.to_string(),
    };
    let target_path = fd_path(target);
    nix::mount::mount(
        Some(fd_path(source).as_str()),
        target_path.as_str(),
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(failed)?;
    let mut flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    if read_only {
        flags |= MsFlags::MS_RDONLY;
    }
    // The new mount is reached through its mount point's path in this
    // namespace: the descriptor still names the directory beneath.
    let mounted = std::fs::read_link(&target_path).map_err(|e| ContainerError::Mount {
        path: what.to_string(),
        why: e.to_string(),
    })?;
    nix::mount::mount(None::<&str>, &mounted, None::<&str>, flags, None::<&str>).map_err(failed)
}
