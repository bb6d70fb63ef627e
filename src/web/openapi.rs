//! The OpenAPI 3 description of what `yswebd` serves (`GET
//! /openapi.json`, also at slurmrestd's `/openapi/v3`). The slurmrestd
//! operations refer to Slurm's schema names for v0.0.45, whose fields the
//! answers fill where ysched has a value.

use serde_json::{json, Value};

fn operation(summary: &str, tag: &str, parameters: Value, body: Option<&str>) -> Value {
    let mut op = json!({
        "summary": summary,
        "tags": [tag],
        "parameters": parameters,
        "security": [{ "user_token": [] }, { "bearer": [] }],
        "responses": {
            "200": { "description": "done", "content": { "application/json": { "schema": { "type": "object" } } } },
            "400": { "description": "the request does not read; errors[0].description says why" },
            "401": { "description": "no token, or one the controller does not take" },
            "403": { "description": "the caller may not do this" },
            "404": { "description": "no such job, node or operation" },
            "503": { "description": "ysctld is not running" },
        },
    });
    if let Some(schema) = body {
        op["requestBody"] = json!({
            "required": true,
            "content": { "application/json": { "schema": { "$ref": format!("#/components/schemas/{schema}") } } },
        });
    }
    op
}

fn parameter(name: &str, place: &str, description: &str) -> Value {
    json!({ "name": name, "in": place, "required": place == "path", "description": description, "schema": { "type": "string" } })
}

/// A map of paths, each with its operations by method.
type Paths = serde_json::Map<String, Value>;

fn add(paths: &mut Paths, path: String, method: &str, op: Value) {
    let entry = paths.entry(path).or_insert_with(|| json!({}));
    entry[method] = op;
}

/// The operations served, by path.
fn paths() -> Paths {
    let mut paths = Paths::new();
    slurm_paths(&mut paths);
    slurmdb_paths(&mut paths);
    ysched_paths(&mut paths);
    paths
}

/// slurmrestd's.
fn slurm_paths(paths: &mut Paths) {
    let v = "v0.0.45";
    let job_id = parameter("job_id", "path", "a job id: 12, or an array task 12_3");
    add(
        paths,
        format!("/slurm/{v}/ping/"),
        "get",
        operation("Is the controller up", "slurm", json!([]), None),
    );
    add(
        paths,
        format!("/slurm/{v}/jobs/"),
        "get",
        operation(
            "Pending, running and recently ended jobs (v0.0.45_openapi_job_info_resp)",
            "slurm",
            json!([]),
            None,
        ),
    );
    add(
        paths,
        format!("/slurm/{v}/job/{{job_id}}"),
        "get",
        operation(
            "One job (v0.0.45_openapi_job_info_resp)",
            "slurm",
            json!([job_id.clone()]),
            None,
        ),
    );
    add(
        paths,
        format!("/slurm/{v}/job/{{job_id}}"),
        "delete",
        operation(
            "Cancel a job, or signal it (v0.0.45_openapi_kill_job_resp)",
            "slurm",
            json!([
                job_id.clone(),
                parameter(
                    "signal",
                    "query",
                    "a signal name or number: the job keeps running"
                )
            ]),
            None,
        ),
    );
    add(
        paths,
        format!("/slurm/{v}/job/submit"),
        "post",
        operation(
            "Submit a batch job (v0.0.45_openapi_job_submit_response)",
            "slurm",
            json!([]),
            Some("job_submit_req"),
        ),
    );
    add(
        paths,
        format!("/slurm/{v}/nodes/"),
        "get",
        operation(
            "Every node (v0.0.45_openapi_nodes_resp)",
            "slurm",
            json!([]),
            None,
        ),
    );
    add(
        paths,
        format!("/slurm/{v}/node/{{node_name}}"),
        "get",
        operation(
            "One node",
            "slurm",
            json!([parameter("node_name", "path", "the node's name")]),
            None,
        ),
    );
}

/// slurmdbd's, through slurmrestd.
fn slurmdb_paths(paths: &mut Paths) {
    let v = "v0.0.45";
    let job_id = parameter("job_id", "path", "a job id: 12, or an array task 12_3");
    add(
        paths,
        format!("/slurmdb/{v}/jobs/"),
        "get",
        operation(
            "Accounting records (v0.0.45_openapi_slurmdbd_jobs_resp)",
            "slurmdb",
            json!([
                parameter("users", "query", "comma-separated users"),
                parameter("account", "query", "comma-separated accounts"),
                parameter("job_name", "query", "comma-separated names"),
                parameter("state", "query", "comma-separated states"),
                parameter(
                    "start_time",
                    "query",
                    "Unix seconds or a time ysacct -S takes"
                ),
                parameter("end_time", "query", "as start_time"),
                parameter(
                    "limit",
                    "query",
                    "jobs in a page: 1 to 10000 (default 1000); a full page gives next_page"
                ),
                parameter(
                    "after",
                    "query",
                    "a job id: the page begins after it (next_page gives it)"
                ),
            ]),
            None,
        ),
    );
    add(
        paths,
        format!("/slurmdb/{v}/job/{{job_id}}"),
        "get",
        operation(
            "One job's accounting record",
            "slurmdb",
            json!([job_id]),
            None,
        ),
    );
}

/// ysched's own.
fn ysched_paths(paths: &mut Paths) {
    let period = json!([
        parameter(
            "start",
            "query",
            "Unix seconds, or YYYY-MM-DD[THH:MM[:SS]], now-7days (default: the month's start)"
        ),
        parameter("end", "query", "as start (default: now)"),
        parameter("account", "query", "comma-separated accounts"),
        parameter("user", "query", "comma-separated users"),
    ]);
    add(
        paths,
        "/ysched/v1/shares".into(),
        "get",
        operation(
            "The fair-share tree the caller may see, with budgets",
            "ysched",
            json!([]),
            None,
        ),
    );
    add(
        paths,
        "/ysched/v1/usage".into(),
        "get",
        operation(
            "Usage by account, user and GPU type over a period (ysreport --json)",
            "ysched",
            period.clone(),
            None,
        ),
    );
    add(
        paths,
        "/ysched/v1/job/{job_id}/output".into(),
        "get",
        operation(
            "The end of a job's output, read with the caller's rights",
            "ysched",
            json!([
                parameter("job_id", "path", "a job id"),
                parameter(
                    "bytes",
                    "query",
                    "how much of its end (default 16384, at most 1048576)"
                )
            ]),
            None,
        ),
    );
    add(
        paths,
        "/ysched/v1/budgets".into(),
        "get",
        operation(
            "Token budgets: balance, burn rate, when they run out, the warning threshold",
            "ysched",
            json!([]),
            None,
        ),
    );
    add(
        paths,
        "/ysched/v1/waste".into(),
        "get",
        operation(
            "Jobs that held GPUs doing little, most wasted first",
            "ysched",
            period,
            None,
        ),
    );
}

/// The document.
pub fn document() -> Value {
    let paths = paths();
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "ysched REST API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "slurmrestd's operations on slurmrestd's paths (v0.0.40 to v0.0.45 answer alike), and ysched's own under /ysched/v1. Every request acts as the user its token names, by the command line's rules.",
        },
        "servers": [{ "url": "/" }],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "user_token": { "type": "apiKey", "in": "header", "name": "X-SLURM-USER-TOKEN", "description": "a token from ystoken or scontrol token" },
                "bearer": { "type": "http", "scheme": "bearer", "bearerFormat": "JWT" },
            },
            "schemas": {
                "job_submit_req": {
                    "type": "object",
                    "required": ["script", "job"],
                    "properties": {
                        "script": { "type": "string", "description": "the batch script; its #SBATCH lines are read" },
                        "job": { "$ref": "#/components/schemas/job_desc_msg" },
                    },
                },
                "job_desc_msg": job_desc_msg(),
            },
        },
    })
}

/// The fields of Slurm's job description that ysched uses.
fn job_desc_msg() -> Value {
    json!({
        "type": "object",
        "description": "Slurm's job description; the fields below are used, Slurm's others are taken and named in warnings, unknown ones refused",
        "properties": {
            "name": { "type": "string" }, "account": { "type": "string" }, "qos": { "type": "string" },
            "comment": { "type": "string" }, "dependency": { "type": "string" }, "array": { "type": "string" },
            "time_limit": { "description": "minutes: an integer or {set, infinite, number}" },
            "tres_per_job": { "type": "string", "example": "gres/gpu:a100:2" },
            "tres_per_node": { "type": "string" }, "tres_per_task": { "type": "string" },
            "cpus_per_task": { "type": "integer" }, "minimum_cpus": { "type": "integer" },
            "memory_per_node": { "description": "MB: an integer or {set, infinite, number}" },
            "environment": { "type": "array", "items": { "type": "string" }, "description": "NAME=value" },
            "current_working_directory": { "type": "string", "description": "absolute (default: the user's home)" },
            "standard_output": { "type": "string" }, "standard_error": { "type": "string" },
            "open_mode": { "type": "string", "enum": ["append", "truncate"] },
            "hold": { "type": "boolean" }, "requeue": { "type": "boolean" }, "nice": { "type": "integer" },
            "begin_time": { "description": "Unix seconds: an integer or {set, infinite, number}" },
            "mail_type": { "type": "array", "items": { "type": "string" } }, "mail_user": { "type": "string" },
            "constraints": { "type": "string" }, "nodes": { "type": "string" }, "minimum_nodes": { "type": "integer" },
            "tasks": { "type": "integer" }, "tasks_per_node": { "type": "integer" },
            "required_nodes": { "type": "string" }, "excluded_nodes": { "type": "string" },
            "argv": { "type": "array", "items": { "type": "string" } },
        },
    })
}
