//! What every handler shares: the config, the way to the daemon, and who
//! the caller is. `yswebd` decides nothing itself: it passes each request
//! to `ysctld` with the caller's token, and the daemon judges it by the
//! command line's rules, as the user the token names.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::config::Config;
use crate::proto::{Channel, Control, Envelope, Reply, Request};
use crate::spool::{DaemonState, Durability, Spool};

use super::http::{self, Response};

/// How long the daemon has to answer one request.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);
/// Tokens made for the users a proxy names last this long, and are made
/// again when less than half is left.
const PROXY_TOKEN_LIFESPAN: u64 = 3_600;

/// Tokens made for users a trusted proxy named: (user, the channel it
/// is for) → (token, expiry).
type ProxyTokens = HashMap<(String, &'static str), (String, i64)>;

pub struct Context {
    pub config: Config,
    pub spool: Spool,
    proxy_tokens: Mutex<ProxyTokens>,
    /// The SHA-256 of the secret a trusted proxy sends, read at the start.
    proxy_secret: Option<Vec<u8>>,
}

/// Why yswebd cannot start with its config.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    #[error("[web] proxy_secret_file {}: {why}", path.display())]
    ProxySecret {
        path: std::path::PathBuf,
        why: String,
    },
}

/// The shortest secret taken: 128 bits, written as hex or base64.
const MIN_PROXY_SECRET: usize = 24;

/// Who the caller is: their token, and the channel they came through.
#[derive(Clone, Debug)]
pub struct Caller {
    pub token: String,
    pub channel: Channel,
}

impl Context {
    /// The server's context, with the proxy's secret read (it must be
    /// yswebd's account's alone, and long enough not to be guessed).
    pub fn new(config: Config) -> Result<Context, ContextError> {
        let proxy_secret = match &config.web.proxy_secret_file {
            Some(path) => Some(read_proxy_secret(path)?),
            None => None,
        };
        let spool = Spool::new(&config.spool_dir).for_a_server();
        Ok(Context {
            config,
            spool,
            proxy_tokens: Mutex::new(HashMap::new()),
            proxy_secret,
        })
    }

    /// Whether `given` is the proxy's secret (compared as SHA-256
    /// digests, in constant time).
    pub fn is_proxy_secret(&self, given: &str) -> bool {
        let Some(ours) = &self.proxy_secret else {
            return false;
        };
        let theirs = ring::digest::digest(&ring::digest::SHA256, given.trim().as_bytes());
        #[allow(deprecated)]
        ring::constant_time::verify_slices_are_equal(ours, theirs.as_ref()).is_ok()
    }

    /// Asks the daemon `request` for `caller`.
    pub fn ask(&self, request: Request, caller: &Caller) -> Result<Reply, Response> {
        let envelope = Envelope::on_behalf(request, caller.token.clone(), caller.channel);
        self.send(&envelope)
    }

    fn send(&self, envelope: &Envelope) -> Result<Reply, Response> {
        if self.spool.daemon_state() != DaemonState::Running {
            return Err(Response::error(
                503,
                "ysctld is not running; nothing was changed",
            ));
        }
        let unavailable = |e: crate::spool::SpoolError| {
            tracing::warn!(target: "ysched::web", "cannot reach ysctld: {e}");
            Response::error(503, &format!("cannot reach ysctld: {e}"))
        };
        let mut sent = self
            .spool
            .send(envelope, Durability::OnDemand)
            .map_err(unavailable)?;
        match sent.wait(ANSWER_WITHIN).map_err(unavailable)? {
            Some(Reply::Streamed { .. }) => Err(Response::error(
                500,
                "ysctld streamed an answer yswebd did not ask for",
            )),
            Some(reply) => Ok(reply),
            None if matches!(envelope.request, Request::Query(_)) => {
                sent.withdraw();
                Err(Response::error(504, "ysctld did not answer in time"))
            }
            None => {
                // Accepted all the same: it stays in the spool.
                let _ = sent.make_durable();
                Err(Response::error(
                    504,
                    "ysctld did not answer in time; the request stays in the spool and will be applied",
                ))
            }
        }
    }

    /// A token for `user`, whom a trusted proxy named: made by the daemon
    /// for this server's account, kept until half its life is spent.
    pub fn proxy_token(
        &self,
        user: &str,
        channel: crate::proto::Channel,
        now: i64,
    ) -> Result<String, Response> {
        let key = (user.to_string(), channel.as_str());
        if let Some((token, expires)) = self.lock_tokens().get(&key) {
            if *expires - now > PROXY_TOKEN_LIFESPAN as i64 / 2 {
                return Ok(token.clone());
            }
        }
        let request = Request::Control(Control::Token {
            lifespan: Some(PROXY_TOKEN_LIFESPAN),
            user: Some(user.to_string()),
            audience: Some(channel.as_str().to_string()),
        });
        match self.send(&Envelope::new(request))? {
            Reply::Token { token, expires, .. } => {
                self.lock_tokens().insert(key, (token.clone(), expires));
                Ok(token)
            }
            Reply::Rejected { error } | Reply::Unauthenticated { error } => Err(Response::error(
                403,
                &format!("the proxy's user {user} cannot be signed in: {error}"),
            )),
            other => Err(unexpected(&other)),
        }
    }

    fn lock_tokens(&self) -> std::sync::MutexGuard<'_, ProxyTokens> {
        self.proxy_tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// An answer of a kind the request does not get.
pub fn unexpected(reply: &Reply) -> Response {
    tracing::error!(target: "ysched::web", "unexpected answer from ysctld: {reply:?}");
    Response::error(500, "ysctld gave an answer of the wrong kind")
}

/// A refusal of the daemon, as HTTP: a token it does not take is 401,
/// a permission problem 403, the rest 400.
pub fn refusal(reply: &Reply) -> Response {
    match reply {
        Reply::Unauthenticated { error } => http::Response::error(401, error),
        Reply::Rejected { error }
            if error.contains("permission denied") || error.contains("personal mode") =>
        {
            http::Response::error(403, error)
        }
        Reply::Rejected { error } => http::Response::error(400, error),
        other => unexpected(other),
    }
}

fn read_proxy_secret(path: &std::path::Path) -> Result<Vec<u8>, ContextError> {
    use std::os::unix::fs::MetadataExt;
    let fail = |why: String| ContextError::ProxySecret {
        path: path.to_path_buf(),
        why,
    };
    let meta = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?;
    if meta.mode() & 0o077 != 0 {
        return Err(fail(format!(
            "is mode {:o}: only yswebd's account may read it (chmod 600)",
            meta.mode() & 0o777
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let secret = text.trim();
    if secret.len() < MIN_PROXY_SECRET || secret.bytes().any(|b| !b.is_ascii_graphic()) {
        return Err(fail(format!(
            "needs one line of at least {MIN_PROXY_SECRET} printable characters (openssl rand -hex 32)"
        )));
    }
    Ok(
        ring::digest::digest(&ring::digest::SHA256, secret.as_bytes())
            .as_ref()
            .to_vec(),
    )
}
