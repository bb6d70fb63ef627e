//! The user's saved token for the pool's nodes (`ystoken --save`):
//! `~/.config/ysched/token` (under `$XDG_CONFIG_HOME` when set), the
//! user's own and readable by nobody else. On a pool's node the commands
//! send it, when `SLURM_JWT` is not set, so that daily commands need no
//! token pasted by hand. A file that anyone else could have written or
//! read is not used: it would prove nothing, or prove it to others.

use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::PathBuf;

/// Why a saved token is not used, or cannot be saved.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("{0} is not used: it must be a file of yours that nobody else may read or write (chmod 600)")]
    NotPrivate(PathBuf),
    #[error("you have no home directory to keep a token in")]
    NoHome,
    #[error("cannot save the token in {path}: {source}")]
    Save {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Where the caller's token is kept.
pub fn path() -> Option<PathBuf> {
    let config = match std::env::var_os("XDG_CONFIG_HOME").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let uid = nix::unistd::getuid();
            let home = nix::unistd::User::from_uid(uid).ok().flatten()?.dir;
            home.join(".config")
        }
    };
    Some(config.join("ysched").join("token"))
}

/// The saved token, if there is one the caller alone owns and reads.
pub fn saved() -> Result<Option<String>, TokenFileError> {
    let Some(path) = path() else { return Ok(None) };
    let Ok(file) = std::fs::File::open(&path) else {
        return Ok(None);
    };
    let Ok(meta) = file.metadata() else {
        return Ok(None);
    };
    let uid = nix::unistd::getuid().as_raw();
    if !meta.is_file() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(TokenFileError::NotPrivate(path));
    }
    let mut text = String::new();
    use std::io::Read as _;
    if file.take(16 * 1024).read_to_string(&mut text).is_err() {
        return Ok(None);
    }
    let token = text.trim().trim_start_matches("SLURM_JWT=").to_string();
    Ok((!token.is_empty()).then_some(token))
}

/// Saves `token` as the caller's, readable by them alone; where.
pub fn save(token: &str) -> Result<PathBuf, TokenFileError> {
    let path = path().ok_or(TokenFileError::NoHome)?;
    let failed = |source: std::io::Error| TokenFileError::Save {
        path: path.clone(),
        source,
    };
    let dir = path.parent().expect("a file in a directory");
    std::fs::create_dir_all(dir).map_err(failed)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(failed)?;
    // Written beside and renamed: a command never reads half a token.
    let partial = dir.join(".token.partial");
    let _ = std::fs::remove_file(&partial);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .map_err(failed)?;
    file.write_all(format!("{token}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(failed)?;
    std::fs::rename(&partial, &path).map_err(failed)?;
    Ok(path)
}
