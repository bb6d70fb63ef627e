//! `yswebd`: the JSON API (slurmrestd's paths, and ysched's own) and the
//! portal (server-rendered pages) over HTTP or HTTPS. A process of its own, not a thread of `ysctld`: it
//! holds no privilege (it runs as `[web] user`), a fault or a flood in it
//! leaves scheduling alone, and it reaches the daemon only as any command
//! does, through the spool, carrying the caller's token.

mod assets;
mod auth;
mod context;
mod error;
mod http;
mod openapi;
mod own;
mod page;
mod pages;
mod portal;
mod portal_views;
mod rest;
mod routes;
mod server;
mod session;
mod submit;

pub use context::Context;
pub use error::WebError;
pub use server::serve;
