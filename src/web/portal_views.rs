//! The portal's pages that gather from several answers: what the submit
//! form offers, the form turned into a job description, and accounting
//! (budgets, the month's usage, the full HTML report).

use serde_json::{json, Value};

use crate::proto::{Query, Reply, Request};

use super::http::Response;
use super::page::{problem_page, Page};
use super::pages::{self, SubmitChoices};

/// A submit form that does not read as a job.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FormError(String);

/// The GPU types of the pool, the QoS names, and the caller's accounts.
pub fn choices(page: &Page) -> Result<SubmitChoices, Response> {
    let mut gpu_types: Vec<String> = page
        .ctx
        .config
        .gpus
        .iter()
        .map(|g| g.gpu_type.clone())
        .collect();
    if let Reply::Nodes { nodes } = page.ask(Request::Query(Query::Node))? {
        gpu_types.extend(
            nodes
                .iter()
                .flat_map(|n| n.gpus.iter().map(|g| g.gpu_type.clone())),
        );
    }
    gpu_types.sort();
    gpu_types.dedup();
    let qos = page.ctx.config.qos.iter().map(|q| q.name.clone()).collect();
    let mut accounts: Vec<String> = super::own::shares(page.ctx, &page.caller)?
        .into_iter()
        .filter(|r| r.user.as_deref() == Some(page.user.as_str()))
        .map(|r| r.account)
        .collect();
    accounts.dedup();
    Ok(SubmitChoices {
        gpu_types,
        qos,
        accounts,
    })
}

/// The form as the JSON API's `job_submit_req`.
pub fn description(values: &[(String, String)]) -> Result<Vec<u8>, FormError> {
    let get = |k: &str| {
        values
            .iter()
            .find(|(n, _)| n == k)
            .map_or("", |(_, v)| v.trim())
    };
    // Browsers send a textarea's lines with CRLF.
    let script = match (get("command"), get("script")) {
        ("", "") => return Err(FormError("give a command or a script".into())),
        ("", script) => script.replace("\r\n", "\n") + "\n",
        (command, _) => crate::script::wrap_command(command),
    };
    let script = match get("image") {
        "" => script,
        image => with_image(&script, image)?,
    };
    let mut job = json!({ "environment": ["PATH=/usr/local/bin:/usr/bin:/bin"] });
    for (field, key) in [
        ("name", "name"),
        ("qos", "qos"),
        ("account", "account"),
        ("dir", "current_working_directory"),
    ] {
        if !get(field).is_empty() {
            job[key] = json!(get(field));
        }
    }
    let gpus: u32 = match get("gpus") {
        "" => 0,
        n => n
            .parse()
            .map_err(|_| FormError(format!("GPUs: '{n}' is not a number")))?,
    };
    if gpus > 0 {
        job["tres_per_job"] = match get("gpu_type") {
            "" => json!(format!("gres/gpu:{gpus}")),
            t => json!(format!("gres/gpu:{t}:{gpus}")),
        };
    }
    if !get("time").is_empty() {
        let limit = crate::model::units::parse_time_limit(get("time"))
            .map_err(|e| FormError(format!("Time limit: {e}")))?;
        job["time_limit"] = match limit {
            Some(secs) => json!(secs.div_ceil(60)),
            None => json!({ "set": true, "infinite": true, "number": 0 }),
        };
    }
    serde_json::to_vec(&json!({ "script": script, "job": job }))
        .map_err(|e| FormError(e.to_string()))
}

/// The script with `#SBATCH --container-image=IMAGE` after its first
/// line (its interpreter), as a user would write it.
fn with_image(script: &str, image: &str) -> Result<String, FormError> {
    crate::model::container::ContainerRequest::new(image).map_err(|e| {
        FormError(format!(
            "Container image: {}",
            e.to_string().replacen("--container-image: ", "", 1)
        ))
    })?;
    let directive = format!("#SBATCH --container-image={image}\n");
    Ok(match script.split_once('\n') {
        Some((first, rest)) if first.starts_with("#!") => format!("{first}\n{directive}{rest}"),
        _ => format!("{directive}{script}"),
    })
}

fn month_report(page: &Page) -> Result<crate::report::usage::UsageReport, Response> {
    let query = Query::Usage {
        period: super::own::this_month(page.ctx)?,
        accounts: Vec::new(),
        users: Vec::new(),
        waste_after_secs: 3_600,
    };
    match page.ask(Request::Query(query))? {
        Reply::Usage { report } => Ok(*report),
        other => Err(problem_page(page, "Accounting", &other)),
    }
}

/// Budgets with their balance and burn rate, and the month's usage.
pub fn accounting(page: &Page) -> Result<Response, Response> {
    let now = crate::model::units::now();
    let rows = super::own::shares(page.ctx, &page.caller)?;
    let budgets: Vec<Value> = super::own::balances(page.ctx, &rows, now);
    let report = month_report(page)?;
    let body = pages::accounting(&budgets, &report);
    Ok(page.page("Accounting", "/accounting", &body, None))
}

/// The month's report as `ysreport --html` renders it: inline CSS and
/// SVG, no script, so its page allows inline styles and nothing else.
pub fn report(page: &Page) -> Result<Response, Response> {
    let report = month_report(page)?;
    let html = crate::report::html::render(&report, &page.ctx.config.node_name);
    Ok(Response::html(200, html).with_header(
        "Content-Security-Policy",
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> Result<Value, FormError> {
        let values: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        description(&values).map(|b| serde_json::from_slice(&b).unwrap())
    }

    #[test]
    fn a_form_becomes_a_job_description() {
        let v = form(&[
            ("command", "python train.py"),
            ("gpus", "2"),
            ("gpu_type", "a100"),
            ("time", "1:30:00"),
            ("qos", "high"),
        ])
        .unwrap();
        assert!(v["script"].as_str().unwrap().contains("python train.py"));
        assert_eq!(v["job"]["tres_per_job"], "gres/gpu:a100:2");
        assert_eq!(v["job"]["time_limit"], 90);
        assert_eq!(v["job"]["qos"], "high");
        let v = form(&[("script", "#!/bin/sh\r\necho hi\r\n"), ("gpus", "0")]).unwrap();
        assert_eq!(v["script"], "#!/bin/sh\necho hi\n");
        assert!(v["job"].get("tres_per_job").is_none());
        assert!(form(&[])
            .unwrap_err()
            .to_string()
            .contains("command or a script"));
        assert!(form(&[("command", "x"), ("gpus", "two")])
            .unwrap_err()
            .to_string()
            .contains("GPUs"));
        let v = form(&[
            ("command", "yolo train"),
            ("image", "nvcr.io#nvidia/pytorch:24.01-py3"),
        ])
        .unwrap();
        let script = v["script"].as_str().unwrap();
        assert!(
            script.starts_with("#!")
                && script.lines().nth(1)
                    == Some("#SBATCH --container-image=nvcr.io#nvidia/pytorch:24.01-py3"),
            "{script}"
        );
        assert!(form(&[("command", "x"), ("image", "a b")])
            .unwrap_err()
            .to_string()
            .contains("Container image: 'a b'"));
        assert!(form(&[("command", "x"), ("time", "soon")])
            .unwrap_err()
            .to_string()
            .contains("Time limit"));
    }
}
