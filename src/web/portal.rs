//! The portal's pages and forms: sign in and out, the queue (live), the
//! GPU map, "my jobs", one job with its output's end, the submit form
//! with its cost, accounting, and the approval queue. Each page asks the
//! daemon as the signed-in user, through the channel `portal`; every form
//! that changes something carries the session's CSRF token.

use crate::array::JobRef;
use crate::model::job::{Hold, JobState};
use crate::proto::{Control, JobFilter, JobSelector, Query, Reply, Request};
use crate::report::view::JobView;

use super::auth::portal_caller;
use super::context::{Caller, Context};
use super::http::{Request as HttpRequest, Response};
use super::page::{problem_page, redirect, Page};
use super::pages::{self, OutputTail};
use super::session::{self, Sessions};

/// The answer to a portal path, or `None` for a path that is not one.
pub fn respond(ctx: &Context, sessions: &Sessions, request: &HttpRequest) -> Option<Response> {
    let path = request.path.as_str();
    let method = request.method.as_str();
    let answer = match (method, path) {
        ("GET" | "HEAD", "/static/portal.css") => {
            Ok(asset("text/css; charset=utf-8", super::assets::CSS))
        }
        ("GET" | "HEAD", "/static/portal.js") => {
            Ok(asset("text/javascript; charset=utf-8", super::assets::JS))
        }
        ("GET" | "HEAD", "/login") => Ok(Response::html(200, pages::login(None))),
        ("POST", "/login") => Ok(login(ctx, sessions, request)),
        ("POST", "/logout") => signed_in(ctx, sessions, request, logout),
        ("GET" | "HEAD", "/") => Ok(redirect("/queue")),
        ("GET" | "HEAD", "/queue") => signed_in(ctx, sessions, request, queue),
        ("GET" | "HEAD", "/gpus") => signed_in(ctx, sessions, request, gpus),
        ("GET" | "HEAD", "/mine") => signed_in(ctx, sessions, request, mine),
        ("GET" | "HEAD", "/approvals") => signed_in(ctx, sessions, request, approvals),
        ("GET" | "HEAD", "/submit") => signed_in(ctx, sessions, request, |p| {
            submit_page(p, &[], String::new())
        }),
        ("POST", "/submit") => signed_in(ctx, sessions, request, |p| submit(p, false)),
        ("POST", "/submit/preview") => signed_in(ctx, sessions, request, |p| submit(p, true)),
        ("GET" | "HEAD", "/accounting") => {
            signed_in(ctx, sessions, request, super::portal_views::accounting)
        }
        ("GET" | "HEAD", "/accounting/report") => {
            signed_in(ctx, sessions, request, super::portal_views::report)
        }
        ("GET" | "HEAD", p) if p.starts_with("/job/") => signed_in(ctx, sessions, request, job),
        ("POST", p) if p.starts_with("/job/") => signed_in(ctx, sessions, request, job_action),
        _ => return None,
    };
    Some(answer.unwrap_or_else(|refused| refused))
}

/// Runs `handler` for a signed-in user; anyone else goes to sign in. A
/// POST must carry the session's CSRF token and come from this site.
fn signed_in(
    ctx: &Context,
    sessions: &Sessions,
    request: &HttpRequest,
    handler: impl FnOnce(&Page) -> Result<Response, Response>,
) -> Result<Response, Response> {
    let Some(caller) = portal_caller(ctx, request)? else {
        return Ok(redirect("/login"));
    };
    let user = crate::token::claimed_user(&caller.token).unwrap_or_default();
    let csrf = sessions.csrf(&caller.token);
    if request.method == "POST" {
        sessions.check(request, &session::form(request), &caller.token)?;
    }
    let page = Page {
        ctx,
        request,
        caller,
        user,
        csrf,
    };
    handler(&page)
}

fn asset(content_type: &'static str, text: &'static str) -> Response {
    let mut r = Response::html(200, text.to_string());
    r.content_type = content_type;
    r.with_header("Cache-Control", "max-age=3600".into())
}

/// `POST /login`: the token checked by asking the daemon with it; the
/// cookie keeps it until it expires. Failures are limited per client and
/// claimed user (`session::SignIn`).
fn login(ctx: &Context, sessions: &Sessions, request: &HttpRequest) -> Response {
    let form = session::form(request);
    let token = form
        .iter()
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    let who = session::SignIn::of(request, &token, &ctx.config.web.proxy_addresses);
    if !sessions.may_try(&who) {
        return Response::html(
            429,
            pages::login(Some("Too many failed sign-ins from here: wait a minute.")),
        )
        .with_header("Retry-After", "60".into());
    }
    let caller = Caller {
        token: token.clone(),
        channel: crate::proto::Channel::Portal,
    };
    let probe = Request::Query(Query::Shares {
        accounts: Vec::new(),
        users: Vec::new(),
        all_users: false,
    });
    let refused = match ctx.ask(probe, &caller) {
        Ok(Reply::Unauthenticated { error }) => error,
        Ok(Reply::Shares { .. }) => {
            let expires = crate::token::unverified_claims(&token).map_or(0, |c| c.exp);
            let max_age = expires - crate::model::units::now();
            let tls = ctx.config.web.tls.is_some();
            return redirect("/queue")
                .with_header("Set-Cookie", session::cookie(&token, max_age, tls));
        }
        Ok(Reply::Rejected { error }) => error,
        Ok(_) => "ysctld gave an answer of the wrong kind".into(),
        Err(response) => return response,
    };
    tracing::info!(target: "ysched::web", "a sign-in from {} refused: {refused}", who.client);
    sessions.failed(who);
    Response::html(401, pages::login(Some(&refused)))
}

fn logout(page: &Page) -> Result<Response, Response> {
    Ok(redirect("/login").with_header("Set-Cookie", session::cookie("", 0, page.tls())))
}

/// Jobs a page of a job list shows.
const PAGE_ROWS: u32 = 200;

fn queue(page: &Page) -> Result<Response, Response> {
    job_list(page, "Queue", "/queue", JobFilter::default())
}

fn mine(page: &Page) -> Result<Response, Response> {
    let filter = JobFilter {
        users: vec![page.user.clone()],
        states: JobState::ALL.to_vec(),
        ..JobFilter::default()
    };
    job_list(page, "My jobs", "/mine", filter)
}

/// One page (`?page=N`, from 1) of the jobs `filter` selects, with the
/// way to the others; the daemon sends that page only, so a queue of
/// 100,000 jobs costs what 200 do. The live refresh reloads the same page.
fn job_list(page: &Page, title: &str, path: &str, filter: JobFilter) -> Result<Response, Response> {
    let wanted = page
        .request
        .query("page")
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(1)
        .max(1);
    let ask = |number: u32| {
        let query = Query::QueuePage {
            filter: filter.clone(),
            offset: (number - 1).saturating_mul(PAGE_ROWS),
            limit: PAGE_ROWS,
        };
        match page.ask(Request::Query(query))? {
            Reply::JobPage { jobs, total, now } => Ok((jobs, total, now)),
            other => Err(problem_page(page, title, &other)),
        }
    };
    let (mut jobs, total, mut now) = ask(wanted)?;
    let pages_in_all = (total.div_ceil(u64::from(PAGE_ROWS)).max(1)) as u32;
    let number = wanted.min(pages_in_all);
    if number != wanted {
        (jobs, _, now) = ask(number)?;
    }
    let shown: Vec<&JobView> = jobs.iter().collect();
    let rows = pages::job_rows(&shown, now, Some(&page.viewer()));
    let here = format!("{path}?page={number}");
    let mut body = pages::job_table(&rows, &here);
    if pages_in_all > 1 {
        body.push_str(&pages::pager(
            path,
            number as usize,
            pages_in_all as usize,
            total as usize,
        ));
    }
    Ok(page.page(title, path, &body, Some(&rows)))
}

fn approvals(page: &Page) -> Result<Response, Response> {
    // Only pending jobs wait for approval.
    let pending = JobFilter {
        states: vec![JobState::Pending],
        ..JobFilter::default()
    };
    let (jobs, now) = page.jobs(pending)?;
    let waiting: Vec<&JobView> = jobs
        .iter()
        .filter(|v| v.job.hold == Some(Hold::Approval))
        .collect();
    let body = pages::approvals(&waiting, now, &page.viewer());
    Ok(page.page("Approvals", "/approvals", &body, None))
}

fn gpus(page: &Page) -> Result<Response, Response> {
    let Reply::Nodes { nodes } = page.ask(Request::Query(Query::Node))? else {
        return Err(Response::html(
            500,
            "ysctld gave an answer of the wrong kind".into(),
        ));
    };
    let map = pages::gpu_map(&nodes);
    let body = format!("<div id=\"map\" data-refresh=\"/gpus\">{map}</div>");
    Ok(page.page("GPUs", "/gpus", &body, Some(&map)))
}

fn job_ref(page: &Page) -> Result<(JobRef, Option<String>), Response> {
    let rest = &page.request.path["/job/".len()..];
    let (id, action) = match rest.split_once('/') {
        Some((id, action)) => (id, Some(action.to_string())),
        None => (rest, None),
    };
    match JobRef::parse(id) {
        Ok(refs) if refs.len() == 1 => Ok((refs[0], action)),
        _ => {
            let mut r = page.page(
                "No such job",
                "",
                &pages::problem(&format!("'{id}' is not a job id")),
                None,
            );
            r.status = 404;
            Err(r)
        }
    }
}

fn job(page: &Page) -> Result<Response, Response> {
    let (r, _) = job_ref(page)?;
    let (jobs, now) = match page.ask(Request::Query(Query::Job(r)))? {
        Reply::Jobs { jobs, now } => (jobs, now),
        other => return Ok(problem_page(page, &format!("Job {r}"), &other)),
    };
    let Some(view) = jobs.first() else {
        return Ok(problem_page(
            page,
            &format!("Job {r}"),
            &Reply::Rejected {
                error: format!("job {r} does not exist"),
            },
        ));
    };
    let output = match page.ask(Request::Query(Query::Output {
        job: r,
        bytes: 16 << 10,
    }))? {
        Reply::Output {
            path,
            text,
            truncated,
            ..
        } => OutputTail::Shown {
            path,
            text,
            truncated,
        },
        Reply::Rejected { error } => OutputTail::Withheld(error),
        other => OutputTail::Withheld(format!(
            "ysctld gave an answer of the wrong kind: {other:?}"
        )),
    };
    let steps = job_steps(page, r)?;
    let body = pages::job_page(view, now, &page.viewer(), output, &steps);
    Ok(page.page(&format!("Job {}", view.job.display_id()), "", &body, None))
}

/// The steps of job `r` (`srun` in it or in its session), as the
/// accounting lists them; none when it has none or they are not shown.
fn job_steps(page: &Page, r: JobRef) -> Result<Vec<crate::report::view::JobView>, Response> {
    let query = Query::Accounting {
        filter: crate::proto::JobFilter {
            job_ids: vec![r],
            ..Default::default()
        },
        fields: None,
        steps: true,
        batch_steps: true,
    };
    Ok(match page.ask(Request::Query(query))? {
        Reply::Jobs { jobs, .. } => jobs.into_iter().filter(|v| v.step.is_some()).collect(),
        _ => Vec::new(),
    })
}

/// `POST /job/ID/ACTION`: cancel, hold, release or approve, as the user;
/// back to where the button was, or the refusal.
fn job_action(page: &Page) -> Result<Response, Response> {
    let (r, action) = job_ref(page)?;
    let ids = vec![r];
    let control = match action.as_deref() {
        Some("cancel") => Control::Cancel {
            selector: JobSelector {
                job_ids: ids,
                ..JobSelector::default()
            },
            signal: None,
            to: crate::proto::SignalTo::Job,
        },
        Some("hold") => Control::Hold { job_ids: ids },
        Some("release") => Control::Release { job_ids: ids },
        Some("approve") => Control::Approve { job_ids: ids },
        _ => return Err(Response::html(404, pages::problem("no such action"))),
    };
    match page.ask(Request::Control(control))? {
        Reply::Control { outcomes, .. } => {
            if let Some(error) = outcomes.iter().find_map(|o| o.error.clone()) {
                return Ok(problem_page(
                    page,
                    &format!("Job {r}"),
                    &Reply::Rejected { error },
                ));
            }
            let back = page
                .request
                .header("referer")
                .and_then(own_page)
                .unwrap_or_else(|| format!("/job/{r}"));
            Ok(redirect(&back))
        }
        other => Ok(problem_page(page, &format!("Job {r}"), &other)),
    }
}

/// The portal page a `Referer` names, to go back to after an action: one
/// of the portal's own lists or a job's page, with a plain query; anything
/// else (another site, `/\\host`, a path with odd characters) is `None`.
fn own_page(referer: &str) -> Option<String> {
    let (_, rest) = referer.split_once("://")?;
    let path = &rest[rest.find('/')?..];
    let (route, query) = path.split_once('?').unwrap_or((path, ""));
    let listed = ["/queue", "/mine", "/gpus", "/approvals", "/accounting"].contains(&route);
    let job = route.strip_prefix("/job/").is_some_and(|id| {
        !id.is_empty()
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.".contains(&b))
    });
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"=&_.-,%+".contains(&b);
    ((listed || job) && query.bytes().all(plain)).then(|| path.to_string())
}

fn submit_page(
    page: &Page,
    values: &[(String, String)],
    preview: String,
) -> Result<Response, Response> {
    let choices = super::portal_views::choices(page)?;
    let body = pages::submit_form(&choices, values, &page.csrf, &preview);
    Ok(page.page("Submit a job", "/submit", &body, Some(&preview)))
}

/// `POST /submit` (or its preview): the form into a job description, as
/// the JSON API takes it; the preview asks what the job would do without
/// storing it.
fn submit(page: &Page, preview_only: bool) -> Result<Response, Response> {
    let values = session::form(page.request);
    let home = nix::unistd::User::from_name(&page.user)
        .ok()
        .flatten()
        .map_or_else(|| std::path::PathBuf::from("/"), |u| u.dir);
    let body = match super::portal_views::description(&values) {
        Ok(body) => body,
        Err(why) => return submit_page(page, &values, pages::problem(&why.to_string())),
    };
    let mut submission = match super::submit::read(&body, &home) {
        Ok(s) => s,
        Err(response) => {
            let why = serde_json::from_slice::<serde_json::Value>(&response.body)
                .ok()
                .and_then(|v| v["errors"][0]["description"].as_str().map(str::to_string))
                .unwrap_or_else(|| "the job does not read".into());
            return submit_page(page, &values, pages::problem(&why));
        }
    };
    submission.request.test_only = preview_only;
    match page.ask(Request::Submit(Box::new(submission.request)))? {
        Reply::TestOnly(test) => submit_page(page, &values, pages::preview(&test)),
        Reply::Submitted { job_id, .. } => Ok(redirect(&format!("/job/{job_id}"))),
        Reply::Rejected { error } => submit_page(page, &values, pages::problem(&error)),
        other => Ok(problem_page(page, "Submit a job", &other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_go_back_only_to_the_portals_own_pages() {
        assert_eq!(
            own_page("https://h/queue?state=R").as_deref(),
            Some("/queue?state=R")
        );
        assert_eq!(
            own_page("https://h:6821/job/17").as_deref(),
            Some("/job/17")
        );
        for bad in [
            "https://h//evil.example/",
            "https://h/\\evil.example/",
            "https://h/login",
            "https://h/queue?x=<",
            "/queue",
            "https://h/job/../x",
        ] {
            assert_eq!(own_page(bad), None, "{bad}");
        }
    }
}
