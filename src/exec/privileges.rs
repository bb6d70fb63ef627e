//! Dropping from root to the job's user. The order matters and is fixed
//! here once: supplementary groups, then the gid, then the uid (after
//! setuid there is no way back to change the others).

use std::ffi::CStr;

use nix::errno::Errno;
use nix::unistd::{Gid, Uid};

/// The privileged calls, behind a trait so the order is unit-testable.
pub trait Privileges {
    fn init_groups(&mut self, user: &CStr, gid: u32) -> Result<(), Errno>;
    fn set_gid(&mut self, gid: u32) -> Result<(), Errno>;
    fn set_uid(&mut self, uid: u32) -> Result<(), Errno>;
}

/// The real calls.
pub struct Kernel;

impl Privileges for Kernel {
    fn init_groups(&mut self, user: &CStr, gid: u32) -> Result<(), Errno> {
        nix::unistd::initgroups(user, Gid::from_raw(gid))
    }
    fn set_gid(&mut self, gid: u32) -> Result<(), Errno> {
        nix::unistd::setgid(Gid::from_raw(gid))
    }
    fn set_uid(&mut self, uid: u32) -> Result<(), Errno> {
        nix::unistd::setuid(Uid::from_raw(uid))
    }
}

/// Which step of becoming the user failed, and the kernel's answer.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PrivilegeError {
    #[error("cannot set the supplementary groups of {user}: {errno}")]
    Groups { user: String, errno: Errno },
    #[error("cannot set gid {gid}: {errno}")]
    Gid { gid: u32, errno: Errno },
    #[error("cannot set uid {uid}: {errno}")]
    Uid { uid: u32, errno: Errno },
}

/// Becomes `user` (`uid`, `gid` and the user's groups). Refuses uid 0 as a
/// target only by the caller's policy, not here.
pub fn become_user(
    p: &mut impl Privileges,
    user: &CStr,
    uid: u32,
    gid: u32,
) -> Result<(), PrivilegeError> {
    p.init_groups(user, gid)
        .map_err(|errno| PrivilegeError::Groups {
            user: user.to_string_lossy().into_owned(),
            errno,
        })?;
    p.set_gid(gid)
        .map_err(|errno| PrivilegeError::Gid { gid, errno })?;
    p.set_uid(uid)
        .map_err(|errno| PrivilegeError::Uid { uid, errno })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Recorder {
        calls: Vec<String>,
        fail_gid: bool,
    }

    impl Privileges for Recorder {
        fn init_groups(&mut self, user: &CStr, gid: u32) -> Result<(), Errno> {
            self.calls
                .push(format!("groups {} {gid}", user.to_string_lossy()));
            Ok(())
        }
        fn set_gid(&mut self, gid: u32) -> Result<(), Errno> {
            self.calls.push(format!("gid {gid}"));
            if self.fail_gid {
                Err(Errno::EPERM)
            } else {
                Ok(())
            }
        }
        fn set_uid(&mut self, uid: u32) -> Result<(), Errno> {
            self.calls.push(format!("uid {uid}"));
            Ok(())
        }
    }

    #[test]
    fn groups_then_gid_then_uid() {
        let mut r = Recorder::default();
        become_user(&mut r, c"alice", 1000, 1001).unwrap();
        assert_eq!(r.calls, vec!["groups alice 1001", "gid 1001", "uid 1000"]);
    }

    #[test]
    fn a_failure_stops_before_setuid() {
        let mut r = Recorder {
            fail_gid: true,
            ..Recorder::default()
        };
        let e = become_user(&mut r, c"alice", 1000, 1001).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot set gid 1001: EPERM: Operation not permitted"
        );
        assert_eq!(r.calls, vec!["groups alice 1001", "gid 1001"]);
    }
}
