//! slurmrestd's operations on slurmrestd's paths: list jobs, one job,
//! submit, cancel or signal, nodes, ping, and the accounting query. Each
//! is one request to the daemon on behalf of the caller.

use serde_json::{json, Value};

use crate::array::JobRef;
use crate::proto::{Control, JobFilter, JobSelector, Query, Reply, Request};

use super::context::{refusal, Caller, Context};
use super::http::{Request as HttpRequest, Response};
use crate::report::slurm_json as slurm;

/// `/slurm/VERSION/…` (after the version), for `caller`.
pub fn slurm(
    ctx: &Context,
    http: &HttpRequest,
    rest: &str,
    caller: &Caller,
) -> Result<Response, Response> {
    let path = rest.trim_end_matches('/');
    let command = format!("{} {}", http.method, http.path);
    match (http.method.as_str(), path) {
        ("GET", "jobs") => list_jobs(ctx, caller, &command),
        ("GET", "ping") => ping(ctx, caller, &command),
        ("GET", "nodes") => nodes(ctx, caller, None, &command),
        ("POST", "job/submit") => submit(ctx, http, caller, &command),
        ("GET", p) if p.starts_with("job/") => one_job(ctx, caller, &p[4..], &command),
        ("DELETE", p) if p.starts_with("job/") => cancel(ctx, http, caller, &p[4..], &command),
        ("GET", p) if p.starts_with("node/") => nodes(ctx, caller, Some(&p[5..]), &command),
        (_, "jobs" | "ping" | "nodes" | "job/submit") => Err(not_allowed(&http.method)),
        (_, p) if p.starts_with("job/") || p.starts_with("node/") => Err(not_allowed(&http.method)),
        _ => Err(Response::error(
            404,
            &format!("no such operation: {}", http.path),
        )),
    }
}

/// `/slurmdb/VERSION/…`: the accounting query.
pub fn slurmdb(
    ctx: &Context,
    http: &HttpRequest,
    rest: &str,
    caller: &Caller,
) -> Result<Response, Response> {
    let command = format!("{} {}", http.method, http.path);
    match (http.method.as_str(), rest.trim_end_matches('/')) {
        ("GET", "jobs") => accounting(ctx, http, caller, None, &command),
        ("GET", p) if p.starts_with("job/") => {
            let id = job_ref(&p[4..])?;
            accounting(ctx, http, caller, Some(id), &command)
        }
        (_, "jobs") => Err(not_allowed(&http.method)),
        _ => Err(Response::error(
            404,
            &format!("no such operation: {}", http.path),
        )),
    }
}

pub fn not_allowed(method: &str) -> Response {
    Response::error(405, &format!("{method} is not allowed here"))
}

fn job_ref(text: &str) -> Result<JobRef, Response> {
    match JobRef::parse(text) {
        Ok(refs) if refs.len() == 1 => Ok(refs[0]),
        Ok(_) => Err(Response::error(
            400,
            &format!("'{text}' names several jobs"),
        )),
        Err(e) => Err(Response::error(400, &e.to_string())),
    }
}

fn jobs_of(reply: Reply) -> Result<Vec<crate::report::view::JobView>, Response> {
    match reply {
        Reply::Jobs { jobs, .. } => Ok(jobs),
        Reply::Rejected { ref error } if error.contains("does not exist") => {
            Err(Response::error(404, error))
        }
        other => Err(refusal(&other)),
    }
}

/// The jobs the controller holds, and those that ended less than
/// `min_job_age` ago, as slurmctld lists them.
fn list_jobs(ctx: &Context, caller: &Caller, command: &str) -> Result<Response, Response> {
    let query = Query::Queue {
        filter: JobFilter {
            states: crate::model::job::JobState::ALL.to_vec(),
            ..JobFilter::default()
        },
        fields: None,
        unfolded: false,
    };
    let jobs = jobs_of(ctx.ask(Request::Query(query), caller)?)?;
    Ok(job_info_answer(&jobs, command))
}

fn job_info_answer(jobs: &[crate::report::view::JobView], command: &str) -> Response {
    Response::json_bytes(200, slurm::jobs_answer(jobs, command))
}

fn one_job(ctx: &Context, caller: &Caller, id: &str, command: &str) -> Result<Response, Response> {
    let r = job_ref(id)?;
    let jobs = jobs_of(ctx.ask(Request::Query(Query::Job(r)), caller)?)?;
    Ok(job_info_answer(&jobs, command))
}

fn nodes(
    ctx: &Context,
    caller: &Caller,
    name: Option<&str>,
    command: &str,
) -> Result<Response, Response> {
    let reply = ctx.ask(Request::Query(Query::Node), caller)?;
    let Reply::Nodes { nodes } = reply else {
        return Err(refusal(&reply));
    };
    let named: Vec<_> = nodes
        .into_iter()
        .filter(|n| name.is_none_or(|want| n.name == want))
        .collect();
    if let (Some(want), true) = (name, named.is_empty()) {
        return Err(Response::error(404, &format!("node {want} does not exist")));
    }
    Ok(Response::json(200, &slurm::nodes_answer(&named, command)))
}

fn ping(ctx: &Context, caller: &Caller, command: &str) -> Result<Response, Response> {
    let started = std::time::Instant::now();
    let reply = ctx.ask(Request::Query(Query::Node), caller)?;
    let Reply::Nodes { nodes } = reply else {
        return Err(refusal(&reply));
    };
    let host = nodes.first().map(|n| n.name.clone()).unwrap_or_default();
    let body = json!({ "pings": [{
        "hostname": host,
        "pinged": "UP",
        "responding": true,
        "latency": started.elapsed().as_micros() as u64,
        "mode": "primary",
        "primary": true,
    }] });
    Ok(Response::json(200, &slurm::answer(body, command, &[])))
}

fn submit(
    ctx: &Context,
    http: &HttpRequest,
    caller: &Caller,
    command: &str,
) -> Result<Response, Response> {
    let home = crate::token::claimed_user(&caller.token)
        .and_then(|user| nix::unistd::User::from_name(&user).ok().flatten())
        .map_or_else(|| std::path::PathBuf::from("/"), |u| u.dir);
    let submission = super::submit::read(&http.body, &home)?;
    let reply = ctx.ask(Request::Submit(Box::new(submission.request)), caller)?;
    match reply {
        Reply::Submitted { job_id, warning } => {
            let body = json!({
                "job_id": job_id,
                "step_id": "batch",
                "job_submit_user_msg": warning.unwrap_or_default(),
            });
            Ok(Response::json(
                200,
                &slurm::answer(body, command, &submission.warnings),
            ))
        }
        other => Err(refusal(&other)),
    }
}

fn cancel(
    ctx: &Context,
    http: &HttpRequest,
    caller: &Caller,
    id: &str,
    command: &str,
) -> Result<Response, Response> {
    let r = job_ref(id)?;
    let signal = match http.query("signal") {
        None => None,
        Some(name) => Some(
            crate::model::units::parse_signal(name)
                .map_err(|e| Response::error(400, &format!("signal: {e}")))?,
        ),
    };
    let control = Control::Cancel {
        selector: JobSelector {
            job_ids: vec![r],
            ..JobSelector::default()
        },
        signal,
        to: crate::proto::SignalTo::Job,
    };
    let outcomes = match ctx.ask(Request::Control(control), caller)? {
        Reply::Control { outcomes, .. } => outcomes,
        // A token ysctld does not take is 401, as on every endpoint.
        other => return Err(refusal(&other)),
    };
    let mut status = 200;
    let mut entries = Vec::new();
    let mut errors = Vec::new();
    for o in &outcomes {
        let (code, message) = match &o.error {
            None => (0, String::new()),
            Some(e) if e.contains("permission denied") => (1, e.clone()),
            Some(e) => (2, e.clone()),
        };
        if code != 0 {
            status = if code == 1 {
                403
            } else if names_no_job(&message) {
                404
            } else {
                400
            };
            errors.push(json!({ "description": message, "error_number": status, "error": super::http::reason(status), "source": "yswebd" }));
        }
        entries.push(json!({
            "error": { "string": message, "code": code, "message": message },
            "step_id": "",
            "job_id": slurm::number(Some(o.job_id as i64)),
            "federation": { "sibling": "" },
        }));
    }
    let mut body = slurm::answer(json!({ "status": entries }), command, &[]);
    body["errors"] = Value::Array(errors);
    Ok(Response::json(status, &body))
}

/// Whether a job's outcome says there is no such job (404, not 400).
fn names_no_job(message: &str) -> bool {
    message.contains("does not exist")
        || message.contains("no such job")
        || message.contains("unknown")
}

/// The accounting query, with slurmrestd's filters: `users`, `account`,
/// `job_name`, `state`, `start_time`, `end_time` (Unix seconds or what
/// `ysacct -S` takes).
fn accounting(
    ctx: &Context,
    http: &HttpRequest,
    caller: &Caller,
    id: Option<JobRef>,
    command: &str,
) -> Result<Response, Response> {
    let mut filter = accounting_filter(ctx, http, id)?;
    let page = Page::of(http)?;
    filter.after = page.after;
    filter.limit = Some(page.limit);
    let query = Query::Accounting {
        filter,
        fields: None,
        steps: true,
        batch_steps: true,
    };
    let reply = ctx.ask(Request::Query(query), caller)?;
    let views = jobs_of(reply)?;
    if id.is_some() && views.is_empty() {
        return Err(Response::error(
            404,
            "no such job in the accounting records",
        ));
    }
    // Each job's steps follow it, as slurmdbd nests them in the job.
    let list = slurm::accounting_jobs(&views);
    let jobs: Vec<u64> = views
        .iter()
        .filter(|v| v.step.is_none())
        .map(|v| v.job.id)
        .collect();
    let mut body = json!({ "jobs": list });
    let mut warnings = Vec::new();
    if let (true, Some(&last)) = (jobs.len() >= page.limit as usize, jobs.last()) {
        let next = page.next(http, last);
        warnings.push(format!("a page of {} jobs; the next: {next}", page.limit));
        body["next_page"] = json!(next);
    }
    Ok(Response::json(
        200,
        &slurm::answer(body, command, &warnings),
    ))
}

/// A page of the accounting records: at most `limit` jobs, those after
/// job `after` (the last of the page before), in id order. However long
/// the history, a request reads one page of it.
struct Page {
    limit: u32,
    after: Option<u64>,
}

impl Page {
    /// Jobs a page holds unless `limit` says otherwise.
    const DEFAULT: u32 = 1_000;
    const MAX: u32 = 10_000;

    fn of(http: &HttpRequest) -> Result<Page, Response> {
        let number = |name: &str, min: u64, max: u64| -> Result<Option<u64>, Response> {
            match http.query(name) {
                None => Ok(None),
                Some(text) => match text.trim().parse::<u64>() {
                    Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
                    _ => Err(Response::error(
                        400,
                        &format!("{name}: '{text}' is not a whole number from {min} to {max}"),
                    )),
                },
            }
        };
        Ok(Page {
            limit: number("limit", 1, u64::from(Self::MAX))?.map_or(Self::DEFAULT, |n| n as u32),
            after: number("after", 0, i64::MAX as u64)?,
        })
    }

    /// The path and query of the page after the one that ended at job
    /// `last`: the same query, from `last` on.
    fn next(&self, http: &HttpRequest, last: u64) -> String {
        let mut pairs: Vec<(String, String)> = http
            .query
            .iter()
            .filter(|(name, _)| name != "after" && name != "limit")
            .cloned()
            .collect();
        pairs.push(("limit".into(), self.limit.to_string()));
        pairs.push(("after".into(), last.to_string()));
        let query: Vec<String> = pairs
            .iter()
            .map(|(n, v)| format!("{}={}", encode(n), encode(v)))
            .collect();
        format!("{}?{}", http.path, query.join("&"))
    }
}

/// A query parameter's text, percent-encoded where it must be.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~,:".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn accounting_filter(
    ctx: &Context,
    http: &HttpRequest,
    id: Option<JobRef>,
) -> Result<JobFilter, Response> {
    let now = jiff::Timestamp::now().to_zoned(ctx.config.timezone().clone());
    let time = |name: &str| super::http::time_param(name, http.query(name), &now);
    let mut states = Vec::new();
    for s in http.query_list("state") {
        states
            .push(crate::model::job::JobState::parse(&s).ok_or_else(|| {
                Response::error(400, &format!("state: '{s}' is not a job state"))
            })?);
    }
    Ok(JobFilter {
        job_ids: id.into_iter().collect(),
        users: http.query_list("users"),
        accounts: http.query_list("account"),
        names: http.query_list("job_name"),
        states,
        start: time("start_time")?,
        end: time("end_time")?,
        ..JobFilter::default()
    })
}
