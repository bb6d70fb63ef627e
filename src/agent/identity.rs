//! What a node keeps of its join, in its state directory's `pool/`: its
//! key and certificate, the authority's certificate, and where the
//! controller is. All private to root (0600).

use std::path::{Path, PathBuf};

use super::error::AgentError;
use crate::net::pki::write_private;

const KEY: &str = "node-key.pem";
const CERTIFICATE: &str = "node.pem";
const AUTHORITY: &str = "authority.pem";
const CONTROLLER: &str = "controller";

/// The node's credentials, as kept.
#[derive(Clone, Debug)]
pub struct Identity {
    pub key_pem: String,
    pub certificate_pem: String,
    pub authority_pem: String,
    /// The controller's `HOST:PORT`.
    pub controller: String,
}

/// Where a node keeps them: `STATE/pool`.
pub fn dir_of(state: &Path) -> PathBuf {
    state.join("pool")
}

/// Whether the node has joined (its certificate is there).
pub fn joined(dir: &Path) -> bool {
    dir.join(CERTIFICATE).exists()
}

pub fn load(dir: &Path) -> Result<Identity, AgentError> {
    if !joined(dir) {
        return Err(AgentError::NotJoined(dir.to_path_buf()));
    }
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path)
            .map_err(AgentError::io(format!("cannot read {}", path.display())))
    };
    Ok(Identity {
        key_pem: read(KEY)?,
        certificate_pem: read(CERTIFICATE)?,
        authority_pem: read(AUTHORITY)?,
        controller: read(CONTROLLER)?.trim().to_string(),
    })
}

/// Keeps `identity` (the certificate last, so a node is joined only once
/// every file is there).
pub fn save(dir: &Path, identity: &Identity) -> Result<(), AgentError> {
    std::fs::create_dir_all(dir)
        .map_err(AgentError::io(format!("cannot create {}", dir.display())))?;
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    write_private(&dir.join(KEY), identity.key_pem.as_bytes())?;
    write_private(&dir.join(AUTHORITY), identity.authority_pem.as_bytes())?;
    write_private(&dir.join(CONTROLLER), identity.controller.as_bytes())?;
    write_private(&dir.join(CERTIFICATE), identity.certificate_pem.as_bytes())?;
    Ok(())
}
