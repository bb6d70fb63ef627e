//! Who is calling: a token in slurmrestd's header (`X-SLURM-USER-TOKEN`,
//! with `X-SLURM-USER-NAME` checked against it when sent), a bearer
//! token, the portal's session cookie, or the user a trusted reverse
//! proxy names. yswebd only reads which user a token claims (to compare
//! it with the name header); the daemon checks its signature and expiry.

use crate::proto::Channel;

use super::context::{Caller, Context};
use super::http::{Request, Response};

/// The portal's session cookie: the token itself, HttpOnly, SameSite.
pub const SESSION_COOKIE: &str = "ysched_session";

/// The caller of an API request, or the 401 that says how to sign in.
/// The API takes tokens in headers only: a browser sends its cookie
/// with requests other sites make, a header it never adds by itself.
pub fn caller(ctx: &Context, request: &Request, channel: Channel) -> Result<Caller, Response> {
    if let Some(user) = proxied_user(ctx, request) {
        let token = ctx.proxy_token(&user, channel, crate::model::units::now())?;
        return Ok(Caller { token, channel });
    }
    let token = request
        .header("x-slurm-user-token")
        .or_else(|| {
            request
                .header("authorization")
                .and_then(|a| a.strip_prefix("Bearer "))
        })
        .map(str::trim)
        .filter(|t| !t.is_empty());
    let Some(token) = token else {
        return Err(Response::error(
            401,
            "no token: send X-SLURM-USER-TOKEN (or Authorization: Bearer) with a token from ystoken or scontrol token",
        ));
    };
    if let Some(name) = request.header("x-slurm-user-name") {
        match crate::token::claimed_user(token) {
            Some(claimed) if claimed == name => {}
            Some(claimed) => {
                return Err(Response::error(
                    401,
                    &format!("the token is {claimed}'s, not {name}'s (X-SLURM-USER-NAME)"),
                ))
            }
            None => return Err(Response::error(401, "that is not a token")),
        }
    }
    Ok(Caller {
        token: token.to_string(),
        channel,
    })
}

/// The portal's caller: the user a trusted proxy names, or the session
/// cookie's token; `None`: not signed in.
pub fn portal_caller(ctx: &Context, request: &Request) -> Result<Option<Caller>, Response> {
    let channel = Channel::Portal;
    if let Some(user) = proxied_user(ctx, request) {
        let token = ctx.proxy_token(&user, channel, crate::model::units::now())?;
        return Ok(Some(Caller { token, channel }));
    }
    Ok(request
        .cookie(SESSION_COOKIE)
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|token| Caller {
            token: token.to_string(),
            channel,
        }))
}

/// The user a trusted proxy signed in, if the config names a header, the
/// request came from one of the proxies with the proxy's secret, and the
/// header is set. The address alone proves nothing: every account and job
/// on the proxy's host shares it.
fn proxied_user(ctx: &Context, request: &Request) -> Option<String> {
    let web = &ctx.config.web;
    let header = web.proxy_header.as_deref()?;
    let user = request.header(header)?.trim();
    if !web.proxy_addresses.contains(&request.peer) {
        tracing::warn!(target: "ysched::web", "{header} from {}, which is no trusted proxy: ignored", request.peer);
        return None;
    }
    let proven = request
        .header(crate::config::PROXY_SECRET_HEADER)
        .is_some_and(|given| ctx.is_proxy_secret(given));
    if !proven {
        tracing::warn!(target: "ysched::web", "{header} from {} without the proxy's secret ({}): ignored", request.peer, crate::config::PROXY_SECRET_HEADER);
        return None;
    }
    let valid = !user.is_empty()
        && user.len() <= 64
        && user
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-@".contains(&b));
    valid.then(|| user.to_string())
}
