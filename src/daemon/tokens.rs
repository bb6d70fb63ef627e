//! User tokens: made for the sender (`ystoken`, `scontrol token`) or, by
//! an administrator, for a service account, each for a use (its
//! audience) and recorded by its id; listed and revoked by their user
//! or an administrator; checked where the kernel cannot say who a
//! request is from (a request a pool's node passes on, the web's).
//! Handlers over the core (`on_make_token`, `on_list_tokens`,
//! `on_revoke_tokens`); the key and the records read through `Reads`.

use crate::proto::Reply;
use crate::token::{Audience, Claims, TokenError, TokenRecord, DEFAULT_LIFESPAN};

use super::access::admins_only;
use super::effects::{Effects, PoolRow, Row};
use super::error::DaemonError;
use super::reads::Reads;
use super::requester::{Proven, Requester};
use super::state::{Core, Daemon};

/// A token asked for: by whom, for whom, what for, for how long.
pub(super) struct TokenAsk {
    pub(super) lifespan: Option<u64>,
    pub(super) user: Option<String>,
    pub(super) audience: Option<String>,
}

/// What a token is for when its asker does not say: the web's uses, as
/// Slurm's `scontrol token` is for slurmrestd.
const DEFAULT_AUDIENCE: &str = "rest,portal";

/// The longest token the web server's account gets for a user its proxy
/// names.
pub(super) const WEB_SERVER_LIFESPAN: u64 = 3_600;

/// How a user gets a token where a token or a node's word would not do.
const HOW_TO_MINT: &str = "run ystoken on the controller";

/// What proves the asker of a token, which bounds what it may get.
#[derive(Debug)]
pub(super) enum Minter<'a> {
    /// The kernel on the controller, for its own user (or an
    /// administrator, for anyone): any use, the longest life.
    Kernel,
    /// The web server's account, for a user its proxy names: the web's
    /// uses, an hour.
    WebServer,
    /// A token: no more than it (its uses or narrower, ending no later).
    Token(&'a Claims),
}

/// Why a token is not made.
#[derive(Debug, thiserror::Error)]
pub(super) enum Refused {
    #[error("lifespan {asked} s: {what} ({longest} s)")]
    Lifespan {
        asked: u64,
        longest: u64,
        what: &'static str,
    },
    #[error("the web server's account gets tokens for rest or portal only, not {0}")]
    NodeForWebServer(String),
    #[error(transparent)]
    Token(#[from] TokenError),
}

/// What a token will be: its uses and how long it lasts.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Terms {
    pub(super) audience: Vec<Audience>,
    pub(super) lifespan: u64,
}

/// The terms of the token `minter` asks for (`audience`, `lifespan`,
/// either unsaid), at `now`, or why it gets none. A token made with a
/// token ends when its parent ends, whatever was asked: it can never
/// outlive the proof it was made with.
pub(super) fn terms(
    minter: &Minter,
    audience: Option<&str>,
    lifespan: Option<u64>,
    now: i64,
) -> Result<Terms, Refused> {
    let default_audience = match minter {
        Minter::Token(parent) => parent.aud.join(","),
        _ => DEFAULT_AUDIENCE.to_string(),
    };
    let audience = Audience::parse_list(audience.unwrap_or(&default_audience))?;
    let lifespan = lifespan.unwrap_or(DEFAULT_LIFESPAN);
    let longest = match minter {
        Minter::WebServer => WEB_SERVER_LIFESPAN,
        _ => crate::token::max_lifespan(&audience),
    };
    if lifespan == 0 || lifespan > longest {
        let what = match minter {
            Minter::WebServer => "the web server's account gets tokens of 1 s to an hour",
            _ if longest < crate::token::MAX_LIFESPAN => "a token for nodes lasts 1 s to 7 days",
            _ => "a token lasts 1 s to 30 days",
        };
        return Err(Refused::Lifespan {
            asked: lifespan,
            longest,
            what,
        });
    }
    match minter {
        Minter::Kernel => Ok(Terms { audience, lifespan }),
        Minter::WebServer => match audience.iter().find(|a| a.is_node()) {
            Some(node) => Err(Refused::NodeForWebServer(node.name())),
            None => Ok(Terms { audience, lifespan }),
        },
        Minter::Token(parent) => {
            parent.may_make(&audience)?;
            let left = u64::try_from(parent.exp - now).unwrap_or(0);
            if left == 0 {
                return Err(TokenError::Expired.into());
            }
            Ok(Terms {
                audience,
                lifespan: lifespan.min(left),
            })
        }
    }
}

/// A token for `who`, or for `ask.user` (admins, and the web server's
/// account, for the users its trusted proxy names), recorded with the
/// token that proved `who`, if one did.
pub(super) fn on_make_token(
    core: &Core,
    reads: &dyn Reads,
    ask: TokenAsk,
    (who, now): (&Requester, i64),
    fx: &mut Effects,
) -> Result<Reply, DaemonError> {
    let refuse = |error: String| Ok(Reply::Rejected { error });
    let (user, minter) = match minter(core, reads, ask.user, who) {
        Ok(made) => made,
        Err(refused) => return Ok(refused),
    };
    let Terms { audience, lifespan } =
        match terms(&minter, ask.audience.as_deref(), ask.lifespan, now) {
            Ok(terms) => terms,
            Err(why) => return refuse(why.to_string()),
        };
    let parent = match minter {
        Minter::Token(claims) => Some(claims.jti.clone()),
        _ => None,
    };
    let minted = crate::token::new_id().and_then(|jti| {
        let token = reads
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
    let uses = audience
        .iter()
        .map(Audience::name)
        .collect::<Vec<_>>()
        .join(",");
    let mut detail = format!("token {jti} for {user}, {uses}, {lifespan} s");
    if let Some(parent) = &parent {
        detail.push_str(&format!(", made with token {parent}"));
    }
    fx.row(Row::Pool(PoolRow::Token(Box::new(TokenRecord {
        jti,
        user: user.clone(),
        audience: uses,
        issued: now,
        expires: now + lifespan as i64,
        made_by: who.user.to_string(),
        revoked: None,
        parent,
    }))));
    fx.audit((now, who.channel), who.user, "token", None, &detail);
    Ok(Reply::Token {
        token,
        user,
        expires: now + lifespan as i64,
    })
}

/// Whom the token `who` asks for names (`user`, or `who`), and what
/// bounds it, or the refusal. A token names the user who asks, unless an
/// administrator asks on the controller or the web server's account asks
/// for a user its proxy names (never root or an administrator, by uid: a
/// second name of uid 0 is root). A token makes tokens for its own user
/// only; a node's word makes none.
fn minter<'a>(
    core: &Core,
    reads: &dyn Reads,
    user: Option<String>,
    who: &Requester<'a>,
) -> Result<(String, Minter<'a>), Reply> {
    let user = user.unwrap_or_else(|| who.user.to_string());
    match who.proven {
        Proven::NodeWord => Err(Reply::Rejected {
            error: format!("a node's word makes no token: {HOW_TO_MINT}"),
        }),
        Proven::Token(claims) if user == claims.sun => Ok((user, Minter::Token(claims))),
        Proven::Token(claims) => Err(Reply::Rejected {
            error: format!(
                "permission denied: a token makes tokens for its own user ({}) only: {HOW_TO_MINT}",
                claims.sun
            ),
        }),
        Proven::Kernel if user == who.user || who.admin => Ok((user, Minter::Kernel)),
        Proven::Kernel
            if core.config.web.user.as_deref() == Some(who.user)
                && is_plain_user(core, reads, &user) =>
        {
            Ok((user, Minter::WebServer))
        }
        Proven::Kernel => Err(Reply::Rejected {
            error: "permission denied: only root and the config's admins may make tokens for other users".into(),
        }),
    }
}

/// The tokens of `who`, of `user` or of everyone (admins), not long
/// expired.
pub(super) fn on_list_tokens(
    reads: &dyn Reads,
    (user, all_users): (Option<String>, bool),
    (who, now): (&Requester, i64),
) -> Result<Reply, DaemonError> {
    let user = match (user, all_users) {
        (_, true) => None,
        (Some(u), false) => Some(u),
        (None, false) => Some(who.user.to_string()),
    };
    if user.as_deref() != Some(who.user) {
        if let Some(refused) = admins_only(who, "list other users' tokens") {
            return Ok(refused);
        }
    }
    let tokens = reads.tokens(user.as_deref(), now - 86_400)?;
    Ok(Reply::Tokens { tokens, now })
}

/// Revokes `who`'s token `jti` (all of them when `None`), or `user`'s
/// (admins; any user's token by its id).
pub(super) fn on_revoke_tokens(
    reads: &dyn Reads,
    (jti, user): (Option<String>, Option<String>),
    (who, now): (&Requester, i64),
    fx: &mut Effects,
) -> Result<Reply, DaemonError> {
    let owner = match &user {
        Some(u) if u != who.user => {
            if let Some(refused) = admins_only(who, "revoke other users' tokens") {
                return Ok(refused);
            }
            Some(u.clone())
        }
        Some(_) => Some(who.user.to_string()),
        None if who.admin && jti.is_some() => None,
        None => Some(who.user.to_string()),
    };
    let revoked = reads.revocable(jti.as_deref(), owner.as_deref(), now)?;
    let whose = owner
        .as_deref()
        .map_or("any user's".to_string(), |o| format!("{o}'s"));
    if revoked.named == 0 {
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
    let mut detail = match &jti {
        Some(j) => format!("token {j} of {whose} revoked"),
        None => format!("{} token(s) of {whose} revoked", revoked.named),
    };
    if revoked.descendants > 0 {
        detail.push_str(&format!(
            ", and {} made with it or with those",
            revoked.descendants
        ));
    }
    fx.row(Row::Pool(PoolRow::Revoked {
        jti,
        user: owner,
        time: now,
    }));
    fx.audit((now, who.channel), who.user, "token revoke", None, &detail);
    Ok(Reply::Control {
        outcomes: Vec::new(),
        message: Some(detail),
    })
}

/// Whether `name` is a user here who is neither root nor an
/// administrator, whatever name they go by.
fn is_plain_user(core: &Core, reads: &dyn Reads, name: &str) -> bool {
    let Some(uid) = reads.uid_of(name) else {
        return false;
    };
    uid != 0
        && !core.config.is_admin(uid, name)
        && !core
            .config
            .admins
            .iter()
            .any(|a| reads.uid_of(a) == Some(uid))
}

/// What `token` says, if this controller signed it, it is valid now, it
/// is for `used_as`, and it is on record and not revoked.
pub(super) fn check_token(
    reads: &dyn Reads,
    token: &str,
    used_as: &Audience,
    now: i64,
) -> Result<Claims, TokenError> {
    let claims = reads.token_key()?.verify(token, now)?;
    claims.allows(used_as)?;
    match reads.token_record(&claims.jti) {
        Ok(Some(record)) if record.revoked.is_none() && record.user == claims.sun => Ok(claims),
        Ok(_) => Err(TokenError::Revoked),
        Err(e) => {
            tracing::error!(target: "ysched::daemon", "cannot read the token records: {e}");
            Err(TokenError::Revoked)
        }
    }
}

impl Daemon {
    /// What `token` says (see [`check_token`]).
    pub(super) fn check_token(
        &self,
        token: &str,
        used_as: &Audience,
        now: i64,
    ) -> Result<Claims, TokenError> {
        check_token(&self.reads(), token, used_as, now)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{core_of, core_with, requester, Archive};
    use super::*;

    fn ask(user: Option<&str>, audience: Option<&str>) -> TokenAsk {
        TokenAsk {
            lifespan: Some(600),
            user: user.map(str::to_string),
            audience: audience.map(str::to_string),
        }
    }

    /// The token a reply carries, its record taken into `reads` as the
    /// seam would write it.
    fn made(reply: Reply, fx: &Effects, reads: &mut Archive) -> String {
        let Reply::Token { token, .. } = reply else {
            panic!("no token: {reply:?}")
        };
        for row in fx.rows() {
            if let Row::Pool(PoolRow::Token(record)) = row {
                reads
                    .token_records
                    .insert(record.jti.clone(), (**record).clone());
            }
        }
        token
    }

    fn refusal(reply: Reply) -> String {
        match reply {
            Reply::Rejected { error } => error,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_user_makes_their_own_token_which_checks_until_it_is_revoked() {
        let (core, mut reads, mut fx) = (core_with(vec![]), Archive::default(), Effects::default());
        let alice = requester(1000, "alice", false);
        let reply = on_make_token(
            &core,
            &reads,
            ask(None, Some("rest")),
            (&alice, 100),
            &mut fx,
        );
        let token = made(reply.unwrap(), &fx, &mut reads);
        let claims = check_token(&reads, &token, &Audience::Rest, 200).unwrap();
        assert_eq!(claims.sun, "alice");
        // For the REST API only, not for a node.
        assert!(check_token(&reads, &token, &Audience::Nodes, 200).is_err());
        let mut fx = Effects::default();
        let revoked = on_revoke_tokens(&reads, (None, None), (&alice, 300), &mut fx).unwrap();
        assert!(
            matches!(revoked, Reply::Control { message: Some(m), .. } if m == "1 token(s) of alice's revoked")
        );
        assert!(fx.rows().iter().any(
            |r| matches!(r, Row::Pool(PoolRow::Revoked { user: Some(u), .. }) if u == "alice")
        ));
        for record in reads.token_records.values_mut() {
            record.revoked = Some(300);
        }
        assert!(matches!(
            check_token(&reads, &token, &Audience::Rest, 400),
            Err(TokenError::Revoked)
        ));
        let none = on_revoke_tokens(&reads, (None, None), (&alice, 400), &mut fx).unwrap();
        assert_eq!(refusal(none), "alice's tokens: none is valid to revoke");
    }

    #[test]
    fn only_administrators_make_list_or_revoke_other_users_tokens() {
        let (core, reads, mut fx) = (core_with(vec![]), Archive::default(), Effects::default());
        let alice = requester(1000, "alice", false);
        let for_bob = on_make_token(&core, &reads, ask(Some("bob"), None), (&alice, 0), &mut fx);
        assert_eq!(
            refusal(for_bob.unwrap()),
            "permission denied: only root and the config's admins may make tokens for other users"
        );
        let mut node = requester(1000, "alice", false);
        node.proven = Proven::NodeWord;
        let word = on_make_token(&core, &reads, ask(None, None), (&node, 0), &mut fx);
        assert!(refusal(word.unwrap()).starts_with("a node's word makes no token"));
        let listed = on_list_tokens(&reads, (Some("bob".into()), false), (&alice, 0)).unwrap();
        assert!(refusal(listed)
            .contains("only root and the config's admins may list other users' tokens"));
        let revoked = on_revoke_tokens(&reads, (None, Some("bob".into())), (&alice, 0), &mut fx);
        assert!(refusal(revoked.unwrap()).contains("revoke other users' tokens"));
        assert!(fx.rows().is_empty());
        let root = requester(0, "root", true);
        let service = on_make_token(
            &core,
            &reads,
            ask(Some("ci-bot"), None),
            (&root, 0),
            &mut fx,
        );
        assert!(matches!(service.unwrap(), Reply::Token { user, .. } if user == "ci-bot"));
    }

    #[test]
    fn the_web_servers_account_gets_tokens_for_plain_users_only() {
        let core = core_of("[web]\nuser = \"ysweb\"\n", vec![]);
        let (mut reads, mut fx) = (Archive::default(), Effects::default());
        reads.uids.insert("alice".into(), 1000);
        reads.uids.insert("root".into(), 0);
        reads.uids.insert("toor".into(), 0);
        let web = requester(990, "ysweb", false);
        let alice = on_make_token(&core, &reads, ask(Some("alice"), None), (&web, 0), &mut fx);
        assert!(matches!(alice.unwrap(), Reply::Token { user, .. } if user == "alice"));
        // Root by a second name is root; nobody unknown either.
        for user in ["toor", "root", "mallory"] {
            let refused = on_make_token(&core, &reads, ask(Some(user), None), (&web, 0), &mut fx);
            assert!(
                refusal(refused.unwrap()).starts_with("permission denied"),
                "{user}"
            );
        }
    }

    fn parent(aud: &[&str], exp: i64) -> Claims {
        Claims {
            sun: "alice".into(),
            iat: 0,
            exp,
            aud: aud.iter().map(|a| a.to_string()).collect(),
            jti: "p1".into(),
        }
    }

    fn uses(terms: &Terms) -> Vec<String> {
        terms.audience.iter().map(Audience::name).collect()
    }

    #[test]
    fn the_kernels_word_gets_any_use_for_as_long_as_the_use_allows() {
        let web = terms(&Minter::Kernel, None, None, 100).unwrap();
        assert_eq!(
            (uses(&web), web.lifespan),
            (vec!["rest".into(), "portal".into()], 1_800)
        );
        let month = terms(&Minter::Kernel, Some("rest"), Some(30 * 86_400), 100).unwrap();
        assert_eq!(month.lifespan, 30 * 86_400);
        let too_long = terms(&Minter::Kernel, Some("node"), Some(8 * 86_400), 100)
            .unwrap_err()
            .to_string();
        assert_eq!(
            too_long,
            "lifespan 691200 s: a token for nodes lasts 1 s to 7 days (604800 s)"
        );
        assert!(terms(&Minter::Kernel, Some("rest"), Some(0), 100).is_err());
        assert!(terms(&Minter::Kernel, Some("nodes"), None, 100)
            .unwrap_err()
            .to_string()
            .contains("give rest, portal, node or node:NAME"));
    }

    #[test]
    fn the_web_servers_account_gets_the_webs_uses_for_an_hour() {
        let portal = terms(&Minter::WebServer, Some("portal"), Some(3_600), 0).unwrap();
        assert_eq!(
            (uses(&portal), portal.lifespan),
            (vec!["portal".into()], 3_600)
        );
        let node = terms(&Minter::WebServer, Some("node"), Some(60), 0)
            .unwrap_err()
            .to_string();
        assert_eq!(
            node,
            "the web server's account gets tokens for rest or portal only, not node"
        );
        let long = terms(&Minter::WebServer, Some("rest"), Some(3_601), 0)
            .unwrap_err()
            .to_string();
        assert!(long.contains("1 s to an hour"), "{long}");
        assert!(terms(&Minter::WebServer, Some("rest"), Some(30 * 86_400), 0).is_err());
    }

    #[test]
    fn a_token_makes_no_more_than_itself() {
        let node = parent(&["node"], 10_000);
        // Its own uses by default, or narrower; never the web's.
        let same = terms(&Minter::Token(&node), None, Some(600), 1_000).unwrap();
        assert_eq!((uses(&same), same.lifespan), (vec!["node".into()], 600));
        let one = terms(&Minter::Token(&node), Some("node:gpu02"), Some(600), 1_000).unwrap();
        assert_eq!(uses(&one), ["node:gpu02"]);
        for wider in ["rest", "portal", "rest,node", "node,portal"] {
            let refused = terms(&Minter::Token(&node), Some(wider), Some(60), 1_000)
                .unwrap_err()
                .to_string();
            assert!(refused.starts_with("a token made with a token is for no more than it: yours is for node, not for the"), "{wider}: {refused}");
        }
        let gpu01 = parent(&["node:gpu01"], 10_000);
        for wider in ["node", "node:gpu02"] {
            assert!(
                terms(&Minter::Token(&gpu01), Some(wider), Some(60), 1_000).is_err(),
                "{wider}"
            );
        }
        let web = parent(&["rest"], 10_000);
        assert!(terms(&Minter::Token(&web), Some("node"), Some(60), 1_000).is_err());
        assert!(terms(&Minter::Token(&web), Some("portal"), Some(60), 1_000).is_err());
        // It ends no later than its parent, whatever was asked.
        let week = terms(&Minter::Token(&node), None, Some(7 * 86_400), 1_000).unwrap();
        assert_eq!(week.lifespan, 9_000);
        let default = terms(&Minter::Token(&parent(&["rest"], 1_100)), None, None, 1_000).unwrap();
        assert_eq!(default.lifespan, 100);
        assert!(terms(&Minter::Token(&parent(&["rest"], 1_000)), None, None, 1_000).is_err());
        // Its own bounds still hold.
        assert!(terms(&Minter::Token(&node), None, Some(8 * 86_400), 1_000).is_err());
    }
}
