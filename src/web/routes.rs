//! Which handler answers a request: the OpenAPI document (no token
//! needed), slurmrestd's paths, ysched's own, the portal's pages;
//! everything else is 404.

use crate::proto::Channel;

use super::context::Context;
use super::http::{Request, Response};
use super::session::Sessions;

/// The answer to `request`.
pub fn respond(ctx: &Context, sessions: &Sessions, request: &Request) -> Response {
    if let Some(page) = super::portal::respond(ctx, sessions, request) {
        return page;
    }
    let path = request.path.as_str();
    let answer = match path {
        "/api" => Ok(Response::json(200, &index())),
        "/openapi.json" | "/openapi/v3" | "/openapi" => match request.method.as_str() {
            "GET" | "HEAD" => Ok(Response::json(200, &super::openapi::document())),
            other => Err(super::rest::not_allowed(other)),
        },
        _ => api(ctx, request),
    };
    answer.unwrap_or_else(|refused| refused)
}

fn api(ctx: &Context, request: &Request) -> Result<Response, Response> {
    let path = request.path.as_str();
    let versioned = |prefix: &str| -> Option<Result<&str, Response>> {
        let rest = path.strip_prefix(prefix)?;
        let (version, rest) = rest.split_once('/').unwrap_or((rest, ""));
        Some(if crate::report::slurm_json::VERSIONS.contains(&version) {
            Ok(rest)
        } else {
            Err(Response::error(
                404,
                &format!(
                    "version {version} is not served: {}",
                    crate::report::slurm_json::VERSIONS.join(", ")
                ),
            ))
        })
    };
    if let Some(rest) = versioned("/slurm/") {
        let caller = super::auth::caller(ctx, request, Channel::Rest)?;
        return super::rest::slurm(ctx, request, rest?, &caller);
    }
    if let Some(rest) = versioned("/slurmdb/") {
        let caller = super::auth::caller(ctx, request, Channel::Rest)?;
        return super::rest::slurmdb(ctx, request, rest?, &caller);
    }
    if let Some(rest) = path.strip_prefix("/ysched/v1/") {
        let caller = super::auth::caller(ctx, request, Channel::Rest)?;
        return super::own::route(ctx, request, rest, &caller);
    }
    Err(Response::error(404, &format!("no such page: {path}")))
}

fn index() -> serde_json::Value {
    serde_json::json!({
        "service": "yswebd",
        "version": env!("CARGO_PKG_VERSION"),
        "openapi": "/openapi.json",
        "slurm": format!("/slurm/{}/", crate::report::slurm_json::VERSIONS[crate::report::slurm_json::VERSIONS.len() - 1]),
        "ysched": "/ysched/v1/",
    })
}
