//! User tokens: made for the sender (`ystoken`, `scontrol token`) or, by
//! an administrator, for a service account; checked where the kernel
//! cannot say who a request is from (a submission a pool's node passes
//! on). The key is read from the spool each time: tokens are rare.

use crate::proto::Reply;
use crate::token::{Claims, TokenError, TokenKey, DEFAULT_LIFESPAN, MAX_LIFESPAN};

use super::control::Requester;
use super::error::DaemonError;
use super::state::Daemon;

impl Daemon {
    /// A token for `who`, or for `user` (admins, and the web server's
    /// account, for the users its trusted proxy names), lasting `lifespan`.
    pub(super) fn make_token(
        &mut self,
        lifespan: Option<u64>,
        user: Option<String>,
        who: &Requester,
        now: i64,
    ) -> Result<Reply, DaemonError> {
        let user = match user {
            Some(u) if u != who.user => {
                // Never for root or an administrator, by uid (a second
                // name of uid 0 is root): the web server's account is no
                // administrator's equal.
                let web_server =
                    self.config.web.user.as_deref() == Some(who.user) && self.is_plain_user(&u);
                if let Some(refused) =
                    super::control::admins_only(who, "make tokens for other users")
                        .filter(|_| !web_server)
                {
                    return Ok(refused);
                }
                u
            }
            _ => who.user.to_string(),
        };
        let lifespan = lifespan.unwrap_or(DEFAULT_LIFESPAN);
        if lifespan == 0 || lifespan > MAX_LIFESPAN {
            return Ok(Reply::Rejected {
                error: format!(
                    "lifespan {lifespan} s: a token lasts 1 s to {MAX_LIFESPAN} s (30 days)"
                ),
            });
        }
        let minted = self
            .token_key()
            .and_then(|key| key.mint(&user, now, lifespan));
        let token = match minted {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(target: "ysched::daemon", "{e}");
                return Ok(Reply::Rejected {
                    error: e.to_string(),
                });
            }
        };
        let detail = format!("token for {user}, {lifespan} s");
        self.audit(now, who.user, "token", None, &detail)?;
        Ok(Reply::Token {
            token,
            user,
            expires: now + lifespan as i64,
        })
    }

    /// Whether `name` is a user here who is neither root nor an
    /// administrator, whatever name they go by.
    fn is_plain_user(&self, name: &str) -> bool {
        let uid_of = |n: &str| {
            nix::unistd::User::from_name(n)
                .ok()
                .flatten()
                .map(|u| u.uid.as_raw())
        };
        let Some(uid) = uid_of(name) else {
            return false;
        };
        uid != 0
            && !self.config.is_admin(uid, name)
            && !self.config.admins.iter().any(|a| uid_of(a) == Some(uid))
    }

    /// What `token` says, if this controller signed it and it is valid now.
    pub(super) fn check_token(&self, token: &str, now: i64) -> Result<Claims, TokenError> {
        self.token_key()?.verify(token, now)
    }

    fn token_key(&self) -> Result<TokenKey, TokenError> {
        TokenKey::load_or_create(&self.spool.token_key())
    }
}
