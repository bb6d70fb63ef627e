//! Who a uid is: name, primary group, home and shell from the system's user
//! database, cached (lookups go through NSS, which may be LDAP) and cleared
//! on reload.

use std::collections::HashMap;
use std::path::PathBuf;

#[derive(Clone, Debug)]
pub struct UserInfo {
    pub name: String,
    pub gid: u32,
    pub home: PathBuf,
    pub shell: PathBuf,
}

#[derive(Default)]
pub struct Users {
    cache: HashMap<u32, Option<UserInfo>>,
}

impl Users {
    pub fn get(&mut self, uid: u32) -> Option<&UserInfo> {
        self.cache
            .entry(uid)
            .or_insert_with(|| lookup(uid))
            .as_ref()
    }

    /// Looks the user up afresh (before launching a job: the account may
    /// have changed or gone since the submission).
    pub fn refresh(&mut self, uid: u32) -> Option<&UserInfo> {
        self.cache.remove(&uid);
        self.get(uid)
    }

    pub fn clear(&mut self) {
        self.cache.clear();
    }
}

fn lookup(uid: u32) -> Option<UserInfo> {
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok()??;
    Some(UserInfo {
        name: user.name,
        gid: user.gid.as_raw(),
        home: user.dir,
        shell: user.shell,
    })
}
