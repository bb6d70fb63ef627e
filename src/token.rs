//! Signed user tokens, as Slurm's auth/jwt makes them: a JWT (HS256) with
//! the user's name (`sun`), when it was made and when it expires, signed
//! with the controller's secret key (`SPOOL/token.key`, root only). A
//! token proves who a request is from where the kernel cannot: a
//! submission a pool's node passes on (the node could claim anyone, its
//! user cannot forge the signature), and later the web API. Deleting the
//! key invalidates every token made with it.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// How long a token lasts unless asked otherwise (Slurm's default).
pub const DEFAULT_LIFESPAN: u64 = 1_800;
/// The longest a token may last.
pub const MAX_LIFESPAN: u64 = 30 * 86_400;

const KEY_BYTES: usize = 32;

#[derive(Debug, Error)]
pub enum TokenError {
    #[error("cannot read or make the token key {path}: {source}")]
    Key {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the token key {0} is not {KEY_BYTES} bytes: delete it to make a new one (every token made with it stops working)")]
    BadKey(PathBuf),
    #[error("the token has expired; make a new one (ystoken)")]
    Expired,
    #[error("the token is not one this controller signed")]
    Forged,
    #[error("that is not a token: {0}")]
    Malformed(String),
    #[error("cannot make a token: {0}")]
    Encode(String),
}

/// What a token says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The user's name (Slurm's claim).
    pub sun: String,
    pub iat: i64,
    pub exp: i64,
}

/// The controller's signing key.
pub struct TokenKey {
    secret: Vec<u8>,
}

impl TokenKey {
    /// The key at `path`, made (random, 0600) when there is none.
    pub fn load_or_create(path: &Path) -> Result<TokenKey, TokenError> {
        let key_error = |source| TokenError::Key {
            path: path.to_path_buf(),
            source,
        };
        match std::fs::read(path) {
            Ok(secret) if secret.len() == KEY_BYTES => Ok(TokenKey { secret }),
            Ok(_) => Err(TokenError::BadKey(path.to_path_buf())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut secret = vec![0u8; KEY_BYTES];
                ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret)
                    .map_err(|_| key_error(std::io::Error::other("no randomness")))?;
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path)
                    .map_err(key_error)?;
                file.write_all(&secret)
                    .and_then(|()| file.sync_all())
                    .map_err(key_error)?;
                Ok(TokenKey { secret })
            }
            Err(e) => Err(key_error(e)),
        }
    }

    /// A token for `user`, made at `now`, valid for `lifespan` seconds.
    pub fn mint(&self, user: &str, now: i64, lifespan: u64) -> Result<String, TokenError> {
        let claims = Claims {
            sun: user.to_string(),
            iat: now,
            exp: now + lifespan.min(MAX_LIFESPAN) as i64,
        };
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(&self.secret),
        )
        .map_err(|e| TokenError::Encode(e.to_string()))
    }

    /// What `token` says, if this key signed it and it has not expired
    /// at `now`.
    pub fn verify(&self, token: &str, now: i64) -> Result<Claims, TokenError> {
        let mut validation = Validation::new(Algorithm::HS256);
        // Expiry is judged below against `now`, the caller's clock.
        validation.validate_exp = false;
        validation.set_required_spec_claims(&["exp"]);
        let data = jsonwebtoken::decode::<Claims>(
            token.trim(),
            &DecodingKey::from_secret(&self.secret),
            &validation,
        )
        .map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::InvalidSignature => TokenError::Forged,
            _ => TokenError::Malformed(e.to_string()),
        })?;
        if data.claims.exp <= now {
            return Err(TokenError::Expired);
        }
        Ok(data.claims)
    }
}

/// What `token` claims, unverified: for comparing with a name sent beside
/// it, or for a cookie's lifetime. Only [`TokenKey::verify`] says it is
/// true.
pub fn unverified_claims(token: &str) -> Option<Claims> {
    let mut validation = Validation::new(Algorithm::HS256);
    validation.insecure_disable_signature_validation();
    validation.validate_exp = false;
    validation.set_required_spec_claims::<&str>(&[]);
    jsonwebtoken::decode::<Claims>(token.trim(), &DecodingKey::from_secret(&[]), &validation)
        .ok()
        .map(|data| data.claims)
}

/// The user `token` claims to be for, unverified.
pub fn claimed_user(token: &str) -> Option<String> {
    unverified_claims(token).map(|c| c.sun)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_says_who_until_it_expires_and_only_with_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token.key");
        let key = TokenKey::load_or_create(&path).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let token = key.mint("alice", 1_000, 60).unwrap();
        let again = TokenKey::load_or_create(&path).unwrap();
        let claims = again.verify(&token, 1_059).unwrap();
        assert_eq!((claims.sun.as_str(), claims.exp), ("alice", 1_060));
        assert!(matches!(
            again.verify(&token, 1_060),
            Err(TokenError::Expired)
        ));
        let other = TokenKey::load_or_create(&dir.path().join("other.key")).unwrap();
        assert!(matches!(
            other.verify(&token, 1_001),
            Err(TokenError::Forged)
        ));
        assert!(matches!(
            key.verify("nonsense", 1_001),
            Err(TokenError::Malformed(_))
        ));
        // A changed claim breaks the signature.
        let parts: Vec<&str> = token.split('.').collect();
        let forged_claims = base64_url(br#"{"sun":"root","iat":1000,"exp":9999999999}"#);
        let forged = format!("{}.{}.{}", parts[0], forged_claims, parts[2]);
        assert!(matches!(
            key.verify(&forged, 1_001),
            Err(TokenError::Forged)
        ));
        assert_eq!(claimed_user(&token).as_deref(), Some("alice"));
        assert_eq!(claimed_user("nonsense"), None);
        assert!(
            key.mint("bob", 0, u64::MAX).is_ok(),
            "capped, not overflowed"
        );
    }

    fn base64_url(bytes: &[u8]) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    }
}
