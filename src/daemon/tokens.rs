//! User tokens: made for the sender (`ystoken`, `scontrol token`) or, by
//! an administrator, for a service account, each for a use (its
//! audience) and recorded by its id; listed and revoked by their user
//! or an administrator; checked where the kernel cannot say who a
//! request is from (a request a pool's node passes on, the web's). The
//! key is read from the spool each time: tokens are rare.

use crate::db;
use crate::proto::Reply;
use crate::token::{Audience, Claims, TokenError, TokenKey, TokenRecord, DEFAULT_LIFESPAN};

use super::control::{Requester, TokenAsk};
use super::error::DaemonError;
use super::state::Daemon;

/// What a token is for when its asker does not say: the web's uses, as
/// Slurm's `scontrol token` is for slurmrestd.
const DEFAULT_AUDIENCE: &str = "rest,portal";

impl Daemon {
    /// A token for `who`, or for `ask.user` (admins, and the web server's
    /// account, for the users its trusted proxy names), recorded.
    pub(super) fn make_token(
        &mut self,
        ask: TokenAsk,
        who: &Requester,
        now: i64,
    ) -> Result<Reply, DaemonError> {
        let user = match self.token_user(ask.user, who) {
            Ok(user) => user,
            Err(refused) => return Ok(refused),
        };
        let refuse = |error: String| Ok(Reply::Rejected { error });
        let audience =
            match Audience::parse_list(ask.audience.as_deref().unwrap_or(DEFAULT_AUDIENCE)) {
                Ok(a) => a,
                Err(e) => return refuse(e.to_string()),
            };
        let lifespan = ask.lifespan.unwrap_or(DEFAULT_LIFESPAN);
        let longest = crate::token::max_lifespan(&audience);
        if lifespan == 0 || lifespan > longest {
            let what = if longest < crate::token::MAX_LIFESPAN {
                "a token for nodes lasts 1 s to 7 days"
            } else {
                "a token lasts 1 s to 30 days"
            };
            return refuse(format!("lifespan {lifespan} s: {what} ({longest} s)"));
        }
        let record = TokenRecord {
            jti: String::new(),
            user: user.clone(),
            audience: audience
                .iter()
                .map(Audience::name)
                .collect::<Vec<_>>()
                .join(","),
            issued: now,
            expires: now + lifespan as i64,
            made_by: who.user.to_string(),
            revoked: None,
        };
        let minted = crate::token::new_id().and_then(|jti| {
            let token = self
                .token_key()?
                .mint(&user, &audience, &jti, now, lifespan)?;
            Ok((jti, token))
        });
        let (jti, token) = match minted {
            Ok(made) => made,
            Err(e) => {
                tracing::error!(target: "ysched::daemon", "{e}");
                return refuse(e.to_string());
            }
        };
        db::record_token(
            self.tx()?,
            &TokenRecord {
                jti: jti.clone(),
                ..record
            },
        )?;
        let detail = format!(
            "token {jti} for {user}, {}, {lifespan} s",
            audience
                .iter()
                .map(Audience::name)
                .collect::<Vec<_>>()
                .join(",")
        );
        self.audit(now, who.user, "token", None, &detail)?;
        Ok(Reply::Token {
            token,
            user,
            expires: now + lifespan as i64,
        })
    }

    /// Whom a token asked for by `who` names, or the refusal.
    fn token_user(&self, user: Option<String>, who: &Requester) -> Result<String, Reply> {
        match user {
            Some(u) if u != who.user => {
                // Never for root or an administrator, by uid (a second
                // name of uid 0 is root): the web server's account is no
                // administrator's equal.
                let web_server =
                    self.config.web.user.as_deref() == Some(who.user) && self.is_plain_user(&u);
                match super::control::admins_only(who, "make tokens for other users") {
                    Some(refused) if !web_server => Err(refused),
                    _ => Ok(u),
                }
            }
            _ => Ok(who.user.to_string()),
        }
    }

    /// The tokens of `who`, of `user` or of everyone (admins), not long
    /// expired.
    pub(super) fn list_tokens(
        &self,
        user: Option<String>,
        all_users: bool,
        who: &Requester,
        now: i64,
    ) -> Result<Reply, DaemonError> {
        let user = match (user, all_users) {
            (_, true) => None,
            (Some(u), false) => Some(u),
            (None, false) => Some(who.user.to_string()),
        };
        if user.as_deref() != Some(who.user) {
            if let Some(refused) = super::control::admins_only(who, "list other users' tokens") {
                return Ok(refused);
            }
        }
        let tokens = db::tokens(&self.store.db, user.as_deref(), now - 86_400)?;
        Ok(Reply::Tokens { tokens, now })
    }

    /// Revokes `who`'s token `jti` (all of them when `None`), or `user`'s
    /// (admins; any user's token by its id).
    pub(super) fn revoke_tokens(
        &mut self,
        jti: Option<String>,
        user: Option<String>,
        who: &Requester,
        now: i64,
    ) -> Result<Reply, DaemonError> {
        let owner = match &user {
            Some(u) if u != who.user => {
                if let Some(refused) =
                    super::control::admins_only(who, "revoke other users' tokens")
                {
                    return Ok(refused);
                }
                Some(u.clone())
            }
            Some(_) => Some(who.user.to_string()),
            None if who.admin && jti.is_some() => None,
            None => Some(who.user.to_string()),
        };
        let count = db::revoke_tokens(self.tx()?, jti.as_deref(), owner.as_deref(), now)?;
        let whose = owner
            .as_deref()
            .map_or("any user's".to_string(), |o| format!("{o}'s"));
        if count == 0 {
            return Ok(Reply::Rejected {
                error: match &jti {
                    Some(j) => format!(
                        "no token {} of {whose} is valid to revoke",
                        j.escape_debug()
                    ),
                    None => format!("{whose} tokens: none is valid to revoke"),
                },
            });
        }
        let detail = match &jti {
            Some(j) => format!("token {j} of {whose} revoked"),
            None => format!("{count} token(s) of {whose} revoked"),
        };
        self.audit(now, who.user, "token revoke", None, &detail)?;
        Ok(Reply::Control {
            outcomes: Vec::new(),
            message: Some(detail),
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

    /// What `token` says, if this controller signed it, it is valid now,
    /// it is for `used_as`, and it is on record and not revoked.
    pub(super) fn check_token(
        &self,
        token: &str,
        used_as: &Audience,
        now: i64,
    ) -> Result<Claims, TokenError> {
        let claims = self.token_key()?.verify(token, now)?;
        claims.allows(used_as)?;
        match db::token(&self.store.db, &claims.jti) {
            Ok(Some(record)) if record.revoked.is_none() && record.user == claims.sun => Ok(claims),
            Ok(_) => Err(TokenError::Revoked),
            Err(e) => {
                tracing::error!(target: "ysched::daemon", "cannot read the token records: {e}");
                Err(TokenError::Revoked)
            }
        }
    }

    fn token_key(&self) -> Result<TokenKey, TokenError> {
        TokenKey::load_or_create(&self.spool.token_key())
    }
}
