//! A page request of a signed-in user: who they are, their forms' CSRF
//! token, the way to ask the daemon as them, and the answers every page
//! shares (a redirect, a refusal on a page of its own, back to sign in).

use crate::proto::{JobFilter, Query, Reply, Request};
use crate::report::view::JobView;

use super::context::{Caller, Context};
use super::http::{Request as HttpRequest, Response};
use super::pages::{self, Viewer};
use super::session;

/// A request of a signed-in user, with what its handler needs.
pub struct Page<'a> {
    pub ctx: &'a Context,
    pub request: &'a HttpRequest,
    pub caller: Caller,
    pub user: String,
    pub csrf: String,
}

impl Page<'_> {
    pub fn viewer(&self) -> Viewer<'_> {
        Viewer {
            user: &self.user,
            csrf: &self.csrf,
        }
    }

    /// Asks the daemon; a token it no longer takes sends the user to sign
    /// in again.
    pub fn ask(&self, request: Request) -> Result<Reply, Response> {
        match self.ctx.ask(request, &self.caller)? {
            Reply::Unauthenticated { error } => Err(signed_out(&error, self.tls())),
            reply => Ok(reply),
        }
    }

    pub fn tls(&self) -> bool {
        self.ctx.config.web.tls.is_some()
    }

    /// A whole page, or (for the live refresh) only `fragment`.
    pub fn page(&self, title: &str, here: &str, body: &str, fragment: Option<&str>) -> Response {
        match fragment.filter(|_| self.request.header("x-fragment") == Some("1")) {
            Some(part) => Response::html(200, part.to_string()),
            None => Response::html(200, pages::layout(title, here, Some(&self.viewer()), body)),
        }
    }

    /// The page's own jobs query.
    pub fn jobs(&self, filter: JobFilter) -> Result<(Vec<JobView>, i64), Response> {
        match self.ask(Request::Query(Query::Queue {
            filter,
            fields: None,
            unfolded: false,
        }))? {
            Reply::Jobs { jobs, now } => Ok((jobs, now)),
            other => Err(problem_page(self, "Jobs", &other)),
        }
    }
}

pub fn redirect(to: &str) -> Response {
    Response::html(303, String::new()).with_header("Location", to.to_string())
}

/// To the sign-in page, the session forgotten, saying why.
fn signed_out(why: &str, tls: bool) -> Response {
    Response::html(401, pages::login(Some(why)))
        .with_header("Set-Cookie", session::cookie("", 0, tls))
}

/// A daemon's refusal shown on a page of its own.
pub fn problem_page(page: &Page, title: &str, reply: &Reply) -> Response {
    let (status, text) = match reply {
        Reply::Rejected { error } if error.contains("permission denied") => (403, error.clone()),
        Reply::Rejected { error } if error.contains("does not exist") => (404, error.clone()),
        Reply::Rejected { error } => (400, error.clone()),
        other => (
            500,
            format!("ysctld gave an answer of the wrong kind: {other:?}"),
        ),
    };
    let mut r = page.page(title, "", &pages::problem(&text), None);
    r.status = status;
    r
}
