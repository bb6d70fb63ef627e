//! Signed user tokens, as Slurm's auth/jwt makes them: a JWT (HS256) with
//! the user's name (`sun`), when it was made and when it expires, signed
//! with the controller's secret key (`SPOOL/token.key`, root only), and
//! beyond Slurm's: what it is for (`aud`: the REST API, the portal, the
//! pool's nodes or one node) and its own id (`jti`), which the controller
//! records and can revoke. A token proves who a request is from where
//! the kernel cannot: a request a pool's node passes on (the node could
//! claim anyone, its user cannot forge the signature) and the web's.
//! Deleting the key invalidates every token made with it.

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
/// The longest a token for nodes may last: it sits in files and
/// environments on servers whose root is not the controller's.
pub const MAX_NODE_LIFESPAN: u64 = 7 * 86_400;

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
    #[error("the token was made by an older ysched (it names no use and has no id): make a new one (ystoken)")]
    Old,
    #[error(
        "the token is for {has}, not for {wanted}: make one with ystoken --audience {audience}"
    )]
    NotFor {
        has: String,
        wanted: String,
        audience: String,
    },
    #[error(
        "the token was revoked, or this controller has no record of it: make a new one (ystoken)"
    )]
    Revoked,
    #[error("{0}")]
    Audience(String),
}

/// What a token may be used for (its `aud`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Audience {
    /// slurmrestd's API of yswebd (`rest`).
    Rest,
    /// The web portal (`portal`).
    Portal,
    /// Commands on any node of the pool (`node`).
    Nodes,
    /// Commands on one node (`node:NAME`).
    Node(String),
}

impl Audience {
    /// `rest`, `portal`, `node` or `node:NAME`.
    pub fn parse(text: &str) -> Result<Audience, TokenError> {
        match text.trim() {
            "rest" => Ok(Audience::Rest),
            "portal" => Ok(Audience::Portal),
            "node" => Ok(Audience::Nodes),
            other => match other.strip_prefix("node:") {
                Some(name) if is_host_name(name) => Ok(Audience::Node(name.into())),
                _ => Err(TokenError::Audience(format!(
                    "audience '{}': give rest, portal, node or node:NAME (comma-separated for several)",
                    other.escape_debug()
                ))),
            },
        }
    }

    /// Several, comma-separated; none is an error.
    pub fn parse_list(text: &str) -> Result<Vec<Audience>, TokenError> {
        let list = text
            .split(',')
            .filter(|a| !a.trim().is_empty())
            .map(Audience::parse)
            .collect::<Result<Vec<_>, _>>()?;
        if list.is_empty() {
            return Err(TokenError::Audience(
                "no audience: give rest, portal, node or node:NAME".into(),
            ));
        }
        Ok(list)
    }

    pub fn name(&self) -> String {
        match self {
            Audience::Rest => "rest".into(),
            Audience::Portal => "portal".into(),
            Audience::Nodes => "node".into(),
            Audience::Node(n) => format!("node:{n}"),
        }
    }

    /// Whether it is for use on nodes (and so lasts a week at most).
    pub fn is_node(&self) -> bool {
        matches!(self, Audience::Nodes | Audience::Node(_))
    }

    /// Whether a token for this audience may be used as `wanted`.
    fn covers(&self, wanted: &Audience) -> bool {
        match (self, wanted) {
            (Audience::Nodes, Audience::Node(_)) => true,
            (a, b) => a == b,
        }
    }

    /// What it is for, in words.
    fn describe(&self) -> String {
        match self {
            Audience::Rest => "the REST API".into(),
            Audience::Portal => "the portal".into(),
            Audience::Nodes => "the pool's nodes".into(),
            Audience::Node(n) => format!("node {n}"),
        }
    }
}

/// What a token says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The user's name (Slurm's claim).
    pub sun: String,
    pub iat: i64,
    pub exp: i64,
    /// What it is for: `rest`, `portal`, `node`, `node:NAME` (empty in
    /// tokens of older versions, which are refused).
    #[serde(default)]
    pub aud: Vec<String>,
    /// Its id, as the controller recorded it.
    #[serde(default)]
    pub jti: String,
}

impl Claims {
    /// Its uses that this version knows.
    pub fn audiences(&self) -> Vec<Audience> {
        self.aud
            .iter()
            .filter_map(|a| Audience::parse(a).ok())
            .collect()
    }

    /// Whether a token for `asked` may be made with this one: each use
    /// asked is one of its own, or narrower (`node:NAME` of `node`);
    /// never the web's from a node's, never a node's from the web's.
    pub fn may_make(&self, asked: &[Audience]) -> Result<(), TokenError> {
        let has = self.audiences();
        match asked.iter().find(|a| !has.iter().any(|h| h.covers(a))) {
            None => Ok(()),
            Some(wider) => Err(TokenError::Audience(format!(
                "a token made with a token is for no more than it: yours is for {}, not for {}; make one for {} with ystoken on the controller",
                has.iter().map(Audience::name).collect::<Vec<_>>().join(","),
                wider.describe(),
                wider.name(),
            ))),
        }
    }

    /// Whether it may be used as `wanted`, or why not.
    pub fn allows(&self, wanted: &Audience) -> Result<(), TokenError> {
        if self.aud.is_empty() || self.jti.is_empty() {
            return Err(TokenError::Old);
        }
        let has = self.audiences();
        if has.iter().any(|a| a.covers(wanted)) {
            return Ok(());
        }
        let has = has.iter().map(Audience::describe).collect::<Vec<_>>();
        Err(TokenError::NotFor {
            has: if has.is_empty() {
                "nothing known".into()
            } else {
                has.join(" and ")
            },
            wanted: wanted.describe(),
            audience: match wanted {
                Audience::Node(_) => "node".into(),
                other => other.name(),
            },
        })
    }
}

/// Whether `name` could be a node's (host) name.
fn is_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(['.', '-'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
}

/// A fresh token id: 128 random bits, in hex.
pub fn new_id() -> Result<String, TokenError> {
    let mut bytes = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| TokenError::Encode("no randomness".into()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The longest a token for `audience` may last.
pub fn max_lifespan(audience: &[Audience]) -> u64 {
    if audience.iter().any(Audience::is_node) {
        MAX_NODE_LIFESPAN
    } else {
        MAX_LIFESPAN
    }
}

/// A token as the controller recorded it (the token itself is never
/// kept).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TokenRecord {
    pub jti: String,
    pub user: String,
    /// Its audiences, comma-separated (`rest,portal`, `node:gpu01`).
    pub audience: String,
    pub issued: i64,
    pub expires: i64,
    /// Who asked for it (the user, an administrator, the web server).
    pub made_by: String,
    pub revoked: Option<i64>,
    /// The id of the token it was made with (none: made on the kernel's
    /// word, on the controller).
    #[serde(default)]
    pub parent: Option<String>,
}

/// The controller's signing key.
pub struct TokenKey {
    secret: Vec<u8>,
}

impl TokenKey {
    /// A key of `secret`, for tests that make no file.
    #[cfg(test)]
    pub(crate) fn of(secret: &[u8]) -> TokenKey {
        TokenKey {
            secret: secret.to_vec(),
        }
    }

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

    /// A token for `user`, for `audience`, with id `jti`, made at `now`,
    /// valid for `lifespan` seconds (at most the audience's longest).
    pub fn mint(
        &self,
        user: &str,
        audience: &[Audience],
        jti: &str,
        now: i64,
        lifespan: u64,
    ) -> Result<String, TokenError> {
        let claims = Claims {
            sun: user.to_string(),
            iat: now,
            exp: now + lifespan.min(max_lifespan(audience)) as i64,
            aud: audience.iter().map(Audience::name).collect(),
            jti: jti.to_string(),
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
        // The audience is judged by `Claims::allows`, for the use at hand.
        validation.validate_aud = false;
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
    validation.validate_aud = false;
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
        let token = key
            .mint("alice", &[Audience::Rest], "j1", 1_000, 60)
            .unwrap();
        let again = TokenKey::load_or_create(&path).unwrap();
        let claims = again.verify(&token, 1_059).unwrap();
        assert_eq!((claims.sun.as_str(), claims.exp), ("alice", 1_060));
        assert_eq!(
            (claims.aud.clone(), claims.jti.as_str()),
            (vec!["rest".to_string()], "j1")
        );
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
            key.mint("bob", &[Audience::Rest], "j2", 0, u64::MAX)
                .is_ok(),
            "capped, not overflowed"
        );
        let node = key
            .mint("bob", &[Audience::Nodes], "j3", 0, u64::MAX)
            .unwrap();
        assert_eq!(key.verify(&node, 1).unwrap().exp, MAX_NODE_LIFESPAN as i64);
    }

    #[test]
    fn a_token_is_good_for_its_audience_only() {
        let claims = |aud: &[&str], jti: &str| Claims {
            sun: "alice".into(),
            iat: 0,
            exp: 10,
            aud: aud.iter().map(|a| a.to_string()).collect(),
            jti: jti.into(),
        };
        let gpu01 = Audience::Node("gpu01".into());
        assert!(claims(&["node"], "j").allows(&gpu01).is_ok());
        assert!(claims(&["node:gpu01"], "j").allows(&gpu01).is_ok());
        let other = claims(&["node:gpu02"], "j").allows(&gpu01).unwrap_err();
        assert_eq!(
            other.to_string(),
            "the token is for node gpu02, not for node gpu01: make one with ystoken --audience node"
        );
        let web = claims(&["rest", "portal"], "j");
        assert!(web.allows(&Audience::Portal).is_ok());
        assert!(matches!(web.allows(&gpu01), Err(TokenError::NotFor { .. })));
        assert!(matches!(
            claims(&["node"], "j").allows(&Audience::Rest),
            Err(TokenError::NotFor { .. })
        ));
        assert!(matches!(
            claims(&[], "j").allows(&Audience::Rest),
            Err(TokenError::Old)
        ));
        assert!(matches!(
            claims(&["rest"], "").allows(&Audience::Rest),
            Err(TokenError::Old)
        ));
        assert_eq!(
            Audience::parse_list("rest, node:gpu01").unwrap(),
            [Audience::Rest, gpu01]
        );
        assert!(Audience::parse_list("rest,web")
            .unwrap_err()
            .to_string()
            .contains("'web'"));
        assert!(Audience::parse_list(" , ").is_err());
        assert!(Audience::parse("node:../x").is_err());
    }

    fn base64_url(bytes: &[u8]) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    }
}
