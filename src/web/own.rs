//! ysched's own API (`/ysched/v1/…`), for what slurmrestd has no
//! operation: the fair-share tree, usage by account, user and GPU type
//! over a period, token budgets with their balance, burn rate and alert
//! threshold, and the waste ranking. The answers are the daemon's, as
//! `ysshare` and `ysreport --json` get them.

use serde_json::{json, Value};

use crate::proto::{Query, Reply, Request};
use crate::report::usage::{Period, UsageReport, WASTE_ROWS};

use super::context::{refusal, Caller, Context};
use super::http::{Request as HttpRequest, Response};

/// `/ysched/v1/…` (after the version), for `caller`.
pub fn route(
    ctx: &Context,
    http: &HttpRequest,
    rest: &str,
    caller: &Caller,
) -> Result<Response, Response> {
    if http.method != "GET" {
        return Err(super::rest::not_allowed(&http.method));
    }
    match rest.trim_end_matches('/') {
        "shares" => shares(ctx, caller).map(|rows| Response::json(200, &json!({ "shares": rows }))),
        "usage" => usage(ctx, http, caller).map(|r| Response::json(200, &json!(r))),
        "waste" => waste(ctx, http, caller),
        "budgets" => budgets(ctx, caller),
        p if p.starts_with("job/") && p.ends_with("/output") => output(
            ctx,
            http,
            caller,
            &p["job/".len()..p.len() - "/output".len()],
        ),
        _ => Err(Response::error(
            404,
            &format!("no such operation: {}", http.path),
        )),
    }
}

pub fn shares(ctx: &Context, caller: &Caller) -> Result<Vec<crate::proto::ShareRow>, Response> {
    let query = Query::Shares {
        accounts: Vec::new(),
        users: Vec::new(),
        all_users: true,
    };
    match ctx.ask(Request::Query(query), caller)? {
        Reply::Shares { rows } => Ok(rows),
        other => Err(refusal(&other)),
    }
}

/// This month so far.
pub fn this_month(ctx: &Context) -> Result<Period, Response> {
    period_between(ctx, None, None)
}

/// The period `start` and `end` name (Unix seconds, or what `ysreport
/// --starttime` takes); by default this month so far.
fn period(ctx: &Context, http: &HttpRequest) -> Result<Period, Response> {
    period_between(ctx, http.query("start"), http.query("end"))
}

fn period_between(
    ctx: &Context,
    start: Option<&str>,
    end: Option<&str>,
) -> Result<Period, Response> {
    let tz = ctx.config.timezone().clone();
    let now = jiff::Timestamp::now().to_zoned(tz.clone());
    let time = |name: &str, value: Option<&str>| super::http::time_param(name, value, &now);
    let month_start = now
        .date()
        .first_of_month()
        .to_zoned(tz.clone())
        .map_err(|e| Response::error(500, &e.to_string()))?
        .timestamp()
        .as_second();
    let from = time("start", start)?.unwrap_or(month_start);
    let to = time("end", end)?.unwrap_or(now.timestamp().as_second() + 1);
    if to <= from {
        return Err(Response::error(400, "end: the end is not after the start"));
    }
    let days = crate::report::usage::day_starts(from, to, &tz)
        .map_err(|e| Response::error(400, &format!("the period does not read: {e}")))?;
    Ok(Period {
        from,
        to,
        label: format!(
            "{} to {}",
            crate::model::units::format_timestamp(from),
            crate::model::units::format_timestamp(to)
        ),
        days,
    })
}

fn usage(ctx: &Context, http: &HttpRequest, caller: &Caller) -> Result<UsageReport, Response> {
    let query = Query::Usage {
        period: period(ctx, http)?,
        accounts: http.query_list("account"),
        users: http.query_list("user"),
        waste_after_secs: 3_600,
    };
    match ctx.ask(Request::Query(query), caller)? {
        Reply::Usage { report } => Ok(*report),
        other => Err(refusal(&other)),
    }
}

fn waste(ctx: &Context, http: &HttpRequest, caller: &Caller) -> Result<Response, Response> {
    let report = usage(ctx, http, caller)?;
    let rows: Vec<_> = report.waste.iter().take(WASTE_ROWS).collect();
    Ok(Response::json(
        200,
        &json!({ "period": report.period, "gpu_sampled": report.gpu_sampled, "waste": rows }),
    ))
}

/// The end of a job's output file (`?bytes=`, default 16 KiB, at most
/// 1 MiB), read with the caller's rights: another user's output only
/// where the caller could read the file itself.
fn output(
    ctx: &Context,
    http: &HttpRequest,
    caller: &Caller,
    id: &str,
) -> Result<Response, Response> {
    let job = match crate::array::JobRef::parse(id) {
        Ok(refs) if refs.len() == 1 => refs[0],
        _ => return Err(Response::error(400, &format!("'{id}' is not one job id"))),
    };
    let bytes = match http.query("bytes") {
        None => 16 << 10,
        Some(b) => b
            .parse::<u32>()
            .ok()
            .filter(|b| (1..=1 << 20).contains(b))
            .ok_or_else(|| Response::error(400, "bytes: give 1 to 1048576"))?,
    };
    match ctx.ask(Request::Query(Query::Output { job, bytes }), caller)? {
        Reply::Output {
            job_id,
            path,
            text,
            truncated,
        } => Ok(Response::json(
            200,
            &json!({ "job_id": job_id, "path": path, "text": text, "truncated": truncated }),
        )),
        Reply::Rejected { error } if error.contains("does not exist") => {
            Err(Response::error(404, &error))
        }
        other => Err(refusal(&other)),
    }
}

/// Each budgeted account the caller may see: its budget for the current
/// period, what is used and left, the burn rate so far, when it would
/// run out at that rate, and the threshold at which users are warned.
fn budgets(ctx: &Context, caller: &Caller) -> Result<Response, Response> {
    let now = crate::model::units::now();
    let rows = shares(ctx, caller)?;
    let list = balances(ctx, &rows, now);
    Ok(Response::json(200, &json!({ "now": now, "budgets": list })))
}

/// The balance of each budgeted account among `rows` (the fair-share
/// tree as the caller may see it).
pub fn balances(ctx: &Context, rows: &[crate::proto::ShareRow], now: i64) -> Vec<Value> {
    let mut list = Vec::new();
    for row in rows.iter().filter(|r| r.user.is_none()) {
        let (Some(budget), Some(left)) = (row.budget, row.budget_left) else {
            continue;
        };
        let Some(config) = ctx
            .config
            .accounts
            .iter()
            .find(|a| a.name == row.account)
            .and_then(|a| a.budget.as_ref())
        else {
            continue;
        };
        list.push(balance(&row.account, budget, left, config, now));
    }
    list
}

fn balance(
    account: &str,
    budget: f64,
    left: f64,
    config: &crate::config::Budget,
    now: i64,
) -> Value {
    let start = config.period.start(now);
    let used = budget - left;
    let elapsed_days = ((now - start) as f64 / 86_400.0).max(1.0 / 24.0);
    let per_day = used / elapsed_days;
    let runs_out = (per_day > 0.0 && left > 0.0).then(|| now + (left / per_day * 86_400.0) as i64);
    json!({
        "account": account,
        "period": config.period.name(now),
        "period_start": start,
        "budget": budget,
        "used": used,
        "left": left,
        "used_fraction": if budget > 0.0 { used / budget } else { 0.0 },
        "burn_per_day": per_day,
        "runs_out_at": runs_out,
        "warning_at": config.warning,
        "warning": budget > 0.0 && used / budget >= config.warning,
        "over_budget": match config.over {
            crate::model::policy::OverBudget::Refuse => "refuse",
            crate::model::policy::OverBudget::LowestQos => "lowest_qos",
        },
    })
}
