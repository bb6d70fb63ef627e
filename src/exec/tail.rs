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
/// there was more before them. Without root, only one's own files.
pub fn tail_as(
    path: &std::path::Path,
    user: &str,
    uid: u32,
    gid: u32,
    bytes: usize,
) -> Result<(Vec<u8>, bool), TailError> {
    let shown = path.display().to_string();
    let mut command = Command::new("tail");
    command
        .args(["-c", &(bytes + 1).to_string(), "--"])
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LC_ALL", "C");
    if nix::unistd::geteuid().is_root() {
        let name = std::ffi::CString::new(user).map_err(|e| TailError::Groups {
            user: user.into(),
            why: e.to_string(),
        })?;
        let groups =
            nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(gid)).map_err(|e| {
                TailError::Groups {
                    user: user.into(),
                    why: e.to_string(),
                }
            })?;
        // SAFETY: between fork and exec only async-signal-safe system
        // calls (setgroups, setgid, setuid), on values computed before.
        unsafe {
            command.pre_exec(move || {
                nix::unistd::setgroups(&groups)?;
                nix::unistd::setgid(nix::unistd::Gid::from_raw(gid))?;
                nix::unistd::setuid(nix::unistd::Uid::from_raw(uid))?;
                Ok(())
            });
        }
    } else if nix::unistd::geteuid().as_raw() != uid {
        return Err(TailError::Unreadable {
            path: shown,
            why: "only root reads as another user".into(),
        });
    }
    let fail = |why: String| TailError::Unreadable {
        path: shown.clone(),
        why,
    };
    let mut child = command.spawn().map_err(|e| fail(e.to_string()))?;
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
    }
}
