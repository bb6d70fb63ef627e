//! The end of a job's output file, read with the rights of whoever asks
//! (the web portal's "output tail"): a child process becomes that user
//! (groups, gid, uid) before `tail` opens the file, so the kernel applies
//! the file's mode and ACLs exactly as for the user's own `tail`. What the
//! user could not read at the command line, they are not shown.

use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use thiserror::Error;

/// A file that never ends (a FIFO, a device) is given up on after this.
const DEADLINE: Duration = Duration::from_secs(3);

#[derive(Debug, Error, PartialEq)]
pub enum TailError {
    #[error("{user} has no groups to read as: {why}")]
    Groups { user: String, why: String },
    #[error("cannot read {path}: {why}")]
    Unreadable { path: String, why: String },
    #[error("{path} did not end within {} s (not a regular file?)", DEADLINE.as_secs())]
    Endless { path: String },
}

/// The last `bytes` of `path` as user `user` (`uid`, `gid`), and whether
/// there was more before them. Without root, only one's own files. Only a
/// regular file is read: the child, as the user, opens it without
/// waiting (a FIFO would block until a writer came) and gives up at once
/// on anything else, so a user's FIFO or device holds nobody's queries.
pub fn tail_as(
    path: &std::path::Path,
    user: &str,
    uid: u32,
    gid: u32,
    bytes: usize,
) -> Result<(Vec<u8>, bool), TailError> {
    let shown = path.display().to_string();
    let fail = |why: String| TailError::Unreadable {
        path: shown.clone(),
        why,
    };
    let as_root = nix::unistd::geteuid().is_root();
    if !as_root && nix::unistd::geteuid().as_raw() != uid {
        return Err(fail("only root reads as another user".into()));
    }
    let groups = if as_root {
        Some(groups_of(user, gid)?)
    } else {
        None
    };
    let file = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|e| fail(e.to_string()))?;
    let mut command = Command::new("tail");
    command
        .args(["-c", &(bytes + 1).to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LC_ALL", "C");
    // SAFETY: between fork and exec only async-signal-safe system calls
    // (setgroups, setgid, setuid, open, fstat, dup2, close), on values
    // computed before.
    unsafe {
        command.pre_exec(move || {
            if let Some(groups) = &groups {
                nix::unistd::setgroups(groups)?;
                nix::unistd::setgid(nix::unistd::Gid::from_raw(gid))?;
                nix::unistd::setuid(nix::unistd::Uid::from_raw(uid))?;
            }
            open_regular_as_stdin(&file)
        });
    }
    let mut child = command.spawn().map_err(|e| match e.raw_os_error() {
        Some(libc::ESPIPE) => fail("it is not a regular file".into()),
        _ => fail(e.to_string()),
    })?;
    let waited = super::command::wait_until(&mut child, Instant::now() + DEADLINE);
    let Some(status) = waited.map_err(|e| fail(e.to_string()))? else {
        return Err(TailError::Endless { path: shown });
    };
    let mut out = Vec::new();
    let mut err = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.read_to_end(&mut out);
    }
    if let Some(mut stderr) = child.stderr.take() {
        let _ = stderr.read_to_string(&mut err);
    }
    if !status.success() {
        let why = err
            .trim()
            .rsplit(": ")
            .next()
            .unwrap_or("unreadable")
            .to_string();
        return Err(fail(why));
    }
    let more = out.len() > bytes;
    if more {
        out.drain(..out.len() - bytes);
    }
    Ok((out, more))
}

fn groups_of(user: &str, gid: u32) -> Result<Vec<nix::unistd::Gid>, TailError> {
    let failed = |why: String| TailError::Groups {
        user: user.into(),
        why,
    };
    let name = std::ffi::CString::new(user).map_err(|e| failed(e.to_string()))?;
    nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(gid))
        .map_err(|e| failed(e.to_string()))
}

/// In the child: `file` opened without blocking, as its standard input,
/// if it is a regular file; `ESPIPE` if it is anything else.
fn open_regular_as_stdin(file: &std::ffi::CStr) -> std::io::Result<()> {
    // SAFETY: open, fstat, dup2 and close on a path and a descriptor
    // this function owns.
    unsafe {
        let fd = libc::open(
            file.as_ptr(),
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut stat: libc::stat = std::mem::zeroed();
        let regular =
            libc::fstat(fd, &mut stat) == 0 && stat.st_mode & libc::S_IFMT == libc::S_IFREG;
        if !regular {
            libc::close(fd);
            return Err(std::io::Error::from_raw_os_error(libc::ESPIPE));
        }
        // dup2 clears close-on-exec on the copy.
        let copied = libc::dup2(fd, 0);
        libc::close(fd);
        if copied < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_of_a_file_and_whether_there_was_more() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        std::fs::write(&path, b"0123456789").unwrap();
        let me = nix::unistd::geteuid().as_raw();
        let gid = nix::unistd::getegid().as_raw();
        let user = nix::unistd::User::from_uid(nix::unistd::geteuid())
            .unwrap()
            .map_or("root".to_string(), |u| u.name);
        assert_eq!(
            tail_as(&path, &user, me, gid, 4).unwrap(),
            (b"6789".to_vec(), true)
        );
        assert_eq!(
            tail_as(&path, &user, me, gid, 10).unwrap(),
            (b"0123456789".to_vec(), false)
        );
        let missing = tail_as(&dir.path().join("none"), &user, me, gid, 4).unwrap_err();
        assert!(missing.to_string().contains("No such file"), "{missing}");
        // A FIFO with no writer: refused at once, never waited on.
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let started = Instant::now();
        let e = tail_as(&fifo, &user, me, gid, 4).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        assert!(started.elapsed() < DEADLINE);
    }
}
