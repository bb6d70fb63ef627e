//! ysched's jobs and nodes in slurmrestd's shapes (OpenAPI v0.0.45, the
//! newest whose spec could be read; the fields below have the same names
//! and types in v0.0.40 to v0.0.44, so those paths answer the same), for
//! yswebd's API and the `--json` of the Slurm names. Only
//! what ysched knows is filled in; a client reading a field ysched has no
//! value for finds it absent, as slurmrestd leaves out unset fields.

use serde_json::{json, Value};

use crate::model::job::Job;
use crate::report::node::NodeInfo;
use crate::report::view::JobView;

/// The versions whose paths are served.
pub const VERSIONS: [&str; 6] = [
    "v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45",
];

/// slurmrestd's integer "with flags": set, infinite, number.
pub fn number(value: Option<i64>) -> Value {
    match value {
        Some(n) => json!({ "set": true, "infinite": false, "number": n }),
        None => json!({ "set": false, "infinite": false, "number": 0 }),
    }
}

fn infinite() -> Value {
    json!({ "set": true, "infinite": true, "number": 0 })
}

/// A time limit in minutes, or infinite.
fn minutes(limit: Option<u64>) -> Value {
    match limit {
        Some(secs) => number(Some(secs.div_ceil(60) as i64)),
        None => infinite(),
    }
}

/// The `meta` every answer carries.
pub fn meta(command: &str) -> Value {
    json!({
        "plugin": { "type": "openapi/ysched", "name": "ysched", "data_parser": "data_parser/v0.0.45", "accounting_storage": "sqlite" },
        "client": { "source": "yswebd" },
        "command": [command],
        "slurm": { "version": { "major": "ysched", "micro": "0", "minor": env!("CARGO_PKG_VERSION") }, "release": env!("CARGO_PKG_VERSION"), "cluster": "ysched" },
    })
}

/// An answer with `meta`, empty `errors` and the given `warnings`.
pub fn answer(mut body: Value, command: &str, warnings: &[String]) -> Value {
    body["meta"] = meta(command);
    body["errors"] = json!([]);
    body["warnings"] = Value::Array(
        warnings
            .iter()
            .map(|w| json!({ "description": w, "source": "yswebd" }))
            .collect(),
    );
    body
}

/// An answer whose `key` is a long list, written item by item (each
/// item's JSON is built and dropped in turn: 100,000 jobs never sit in
/// memory as JSON values), then `rest`'s fields.
pub fn list_answer(key: &str, items: impl Iterator<Item = Value>, rest: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(4096);
    out.extend_from_slice(format!("{{\"{key}\":[").as_bytes());
    for (n, item) in items.enumerate() {
        if n > 0 {
            out.push(b',');
        }
        // Writing a Value into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, &item);
    }
    out.push(b']');
    let tail = serde_json::to_vec(rest).unwrap_or_default();
    match tail.strip_prefix(b"{") {
        Some(fields) if fields != b"}" => {
            out.push(b',');
            out.extend_from_slice(fields);
        }
        _ => out.push(b'}'),
    }
    out.push(b'\n');
    out
}

fn exit_code(job: &Job) -> Value {
    match &job.exit {
        None => {
            json!({ "status": ["PENDING"], "return_code": number(None), "signal": { "id": number(None), "name": "" } })
        }
        Some(e) => {
            let status = if e.signal != 0 {
                "SIGNALED"
            } else if e.code != 0 {
                "ERROR"
            } else {
                "SUCCESS"
            };
            json!({
                "status": [status],
                "return_code": number(Some(i64::from(e.code))),
                "signal": { "id": number((e.signal != 0).then_some(i64::from(e.signal))), "name": "" },
            })
        }
    }
}

/// `tres_per_node` as Slurm writes it: `gres/gpu:2`, `gres/gpu:a100:2`.
fn gres(job: &Job) -> String {
    if job.gpus.count == 0 {
        return String::new();
    }
    let kind = if job.gpus.shard { "shard" } else { "gpu" };
    match &job.gpus.gpu_type {
        Some(t) => format!("gres/{kind}:{t}:{}", job.gpus.count),
        None => format!("gres/{kind}:{}", job.gpus.count),
    }
}

fn state_reason(view: &JobView) -> String {
    match (&view.pending_reason, &view.job.reason) {
        (Some(r), _) => r.to_string(),
        (None, Some(r)) => r.clone(),
        (None, None) => "None".into(),
    }
}

/// One job as `GET /slurm/…/jobs` lists it (`job_info`).
pub fn job_info(view: &JobView) -> Value {
    let job = &view.job;
    let mut flags = Vec::new();
    if job.hold.is_some() {
        flags.push("HOLD");
    }
    json!({
        "job_id": job.id,
        "name": job.name,
        "user_id": job.uid,
        "user_name": job.user,
        "group_id": job.gid,
        "account": job.account,
        "partition": "gpu",
        "qos": job.qos,
        "job_state": [job.state.name()],
        "state_reason": state_reason(view),
        "state_description": job.reason.clone().unwrap_or_default(),
        "hold": job.hold.is_some(),
        "priority": number(Some(view.priority)),
        "nice": job.nice,
        "submit_time": number(Some(job.submit_time)),
        "eligible_time": number(job.begin_time.or(Some(job.submit_time))),
        "start_time": number(job.start_time.or(view.expected_start)),
        "end_time": number(job.end_time),
        "time_limit": minutes(job.time_limit),
        "nodes": job.node.as_ref().map(|_| job.nodelist()).unwrap_or_default(),
        "batch_host": job.node.clone().unwrap_or_default(),
        "node_count": number(Some(i64::from(job.node_count()))),
        "cpus": number(Some(i64::from(job.cpus))),
        "cpus_per_task": number(Some(i64::from(job.cpus))),
        "tasks": number(Some(1)),
        "memory_per_node": number(job.mem_mb.map(|m| m as i64)),
        "tres_per_node": gres(job),
        "tres_req_str": tres_string(job),
        "tres_alloc_str": if job.state.holds_gpus() { tres_string(job) } else { String::new() },
        "gres_detail": gres_detail(job),
        "restart_cnt": job.restart_count,
        "requeue": !job.no_requeue,
        "exit_code": exit_code(job),
        "derived_exit_code": exit_code(job),
        "current_working_directory": job.work_dir,
        "standard_output": job.std_out,
        "standard_error": job.std_err.clone().unwrap_or_else(|| job.std_out.clone()),
        "comment": job.comment.clone().unwrap_or_default(),
        "dependency": job.dependency.clone().unwrap_or_default(),
        "array_job_id": number(job.array.as_ref().map(|a| a.job_id as i64)),
        "array_task_id": number(job.array.as_ref().map(|a| i64::from(a.task_id))),
        "array_task_string": job.array.as_ref().map(|a| a.spec.clone()).unwrap_or_default(),
        "flags": flags,
        "batch_flag": true,
    })
}

fn tres_string(job: &Job) -> String {
    let mut parts = vec![format!("cpu={}", job.cpus)];
    if let Some(mb) = job.mem_mb {
        parts.push(format!("mem={mb}M"));
    }
    parts.push("node=1".into());
    if job.gpus.count > 0 {
        parts.push(format!("gres/gpu={}", job.gpus.gpus_held()));
    }
    parts.join(",")
}

/// `gpu:a100:2(IDX:0-1)`, for jobs holding GPUs.
fn gres_detail(job: &Job) -> Vec<String> {
    if !job.state.holds_gpus() || job.gpus_alloc.is_empty() {
        return Vec::new();
    }
    let ids: Vec<String> = job.gpus_alloc.iter().map(u32::to_string).collect();
    let kind = job
        .gpus
        .gpu_type
        .as_deref()
        .map_or(String::new(), |t| format!("{t}:"));
    vec![format!(
        "gpu:{kind}{}(IDX:{})",
        job.gpus_alloc.len(),
        ids.join(",")
    )]
}

/// One node (`node`): CPUs, memory, GPUs as gres, and its state.
pub fn node(info: &NodeInfo) -> Value {
    let mut by_type: std::collections::BTreeMap<&str, (u32, u32)> = Default::default();
    for gpu in &info.gpus {
        let entry = by_type.entry(gpu.gpu_type.as_str()).or_default();
        entry.0 += 1;
        if !gpu.jobs.is_empty() {
            entry.1 += 1;
        }
    }
    let gres: Vec<String> = by_type
        .iter()
        .map(|(t, (n, _))| format!("gpu:{t}:{n}"))
        .collect();
    let used: Vec<String> = by_type
        .iter()
        .map(|(t, (_, u))| format!("gpu:{t}:{u}"))
        .collect();
    let state = match info.state.as_str() {
        "idle" => vec!["IDLE"],
        "mix" => vec!["MIXED"],
        "alloc" => vec!["ALLOCATED"],
        "drain" => vec!["IDLE", "DRAIN"],
        "drng" => vec!["MIXED", "DRAIN"],
        "down" => vec!["DOWN"],
        _ => vec!["UNKNOWN"],
    };
    json!({
        "name": info.name,
        "hostname": info.name,
        "address": info.name,
        "state": state,
        "reason": info.reason.clone().unwrap_or_default(),
        "cpus": info.cpus,
        "alloc_cpus": info.cpus_allocated,
        "real_memory": info.memory_mb,
        "alloc_memory": info.memory_allocated_mb,
        "tmp_disk": info.tmp_mb,
        "gres": gres.join(","),
        "gres_used": used.join(","),
        "partitions": [crate::slurm_options::PARTITION],
        "tres": format!("cpu={},mem={}M,gres/gpu={}", info.cpus, info.memory_mb, info.gpus.len()),
    })
}

/// One job as the accounting query lists it (`job`, slurmdbd's shape).
pub fn accounting_job(view: &JobView) -> Value {
    let job = &view.job;
    let end = job.end_time.unwrap_or(0);
    let elapsed = match (job.start_time, job.end_time) {
        (Some(s), Some(e)) => e - s,
        (Some(s), None) => crate::model::units::now() - s,
        _ => 0,
    };
    json!({
        "job_id": job.id,
        "name": job.name,
        "user": job.user,
        "group": job.gid.to_string(),
        "account": job.account,
        "partition": "gpu",
        "qos": job.qos,
        "cluster": "ysched",
        "nodes": job.node.as_ref().map(|_| job.nodelist()).unwrap_or_default(),
        "state": { "current": [job.state.name()], "reason": state_reason(view) },
        "exit_code": exit_code(job),
        "derived_exit_code": exit_code(job),
        "restart_cnt": job.restart_count,
        "working_directory": job.work_dir,
        "stdout": job.std_out,
        "stderr": job.std_err.clone().unwrap_or_else(|| job.std_out.clone()),
        "comment": { "job": job.comment.clone().unwrap_or_default(), "administrator": "", "system": "" },
        "time": {
            "submission": job.submit_time,
            "eligible": job.begin_time.unwrap_or(job.submit_time),
            "start": job.start_time.unwrap_or(0),
            "end": end,
            "elapsed": elapsed,
            "suspended": job.suspended_secs,
            "limit": minutes(job.time_limit),
        },
        "tres": {
            "requested": tres_list(job),
            "allocated": if job.start_time.is_some() { tres_list(job) } else { json!([]) },
        },
        "used_gres": gres(job),
        "hold": job.hold.is_some(),
        "priority": number(Some(view.priority)),
        "steps": [],
    })
}

/// Jobs as squeue and scontrol `--json` and slurmrestd's job list give
/// them: `jobs`, with `meta`, `errors` and `warnings`.
pub fn jobs_answer(jobs: &[JobView], command: &str) -> Vec<u8> {
    let now = crate::model::units::now();
    let rest = json!({
        "last_backfill": number(Some(now)),
        "last_update": number(Some(now)),
    });
    let rest = answer(rest, command, &[]);
    list_answer("jobs", jobs.iter().map(job_info), &rest)
}

/// Accounting views (each job followed by its steps) as sacct `--json`
/// and slurmdbd give them: each job with its steps nested in it.
pub fn accounting_jobs(views: &[JobView]) -> Vec<Value> {
    let mut list: Vec<Value> = Vec::new();
    for view in views {
        match (view.step.is_some(), list.last_mut()) {
            (true, Some(job)) => {
                if let Some(steps) = job["steps"].as_array_mut() {
                    steps.push(accounting_step(view));
                }
            }
            _ => list.push(accounting_job(view)),
        }
    }
    list
}

/// Nodes as sinfo and scontrol `--json` and slurmrestd give them.
pub fn nodes_answer(nodes: &[NodeInfo], command: &str) -> Value {
    let list: Vec<Value> = nodes.iter().map(node).collect();
    let body = json!({ "nodes": list, "last_update": number(Some(crate::model::units::now())) });
    answer(body, command, &[])
}

/// A job's step as slurmdbd gives it in its job's `steps`: `view` is the
/// job with the step's name, nodes, times, state and end.
pub fn accounting_step(view: &JobView) -> Value {
    let job = &view.job;
    let (id, tasks) = view
        .step
        .map_or(("0".to_string(), 0), |s| (s.id.to_string(), s.tasks));
    let start = job.start_time.unwrap_or(0);
    let end = job.end_time.unwrap_or(0);
    let elapsed = match job.end_time {
        Some(e) => e - start,
        None => crate::model::units::now() - start,
    };
    let nodes: Vec<&str> = job.node_names().collect();
    json!({
        "step": { "id": format!("{}.{id}", job.display_id()), "name": job.name },
        "state": job.state.name(),
        "exit_code": exit_code(job),
        "time": { "start": start, "end": end, "elapsed": elapsed },
        "nodes": { "count": nodes.len(), "range": job.nodelist(), "list": nodes },
        "tasks": { "count": tasks },
    })
}

fn tres_list(job: &Job) -> Value {
    let mut list = vec![
        json!({ "type": "cpu", "name": "", "id": 1, "count": job.cpus }),
        json!({ "type": "node", "name": "", "id": 4, "count": 1 }),
    ];
    if let Some(mb) = job.mem_mb {
        list.push(json!({ "type": "mem", "name": "", "id": 2, "count": mb }));
    }
    if job.gpus.count > 0 {
        list.push(
            json!({ "type": "gres", "name": "gpu", "id": 1001, "count": job.gpus.gpus_held() }),
        );
    }
    Value::Array(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_list_is_written_as_the_same_json() {
        let items = (1..=3).map(|n| json!({ "job_id": n }));
        let bytes = list_answer("jobs", items, &json!({ "errors": [], "meta": { "a": 1 } }));
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            v,
            json!({ "jobs": [{"job_id": 1}, {"job_id": 2}, {"job_id": 3}], "errors": [], "meta": {"a": 1} })
        );
        let empty: Value =
            serde_json::from_slice(&list_answer("jobs", std::iter::empty(), &json!({}))).unwrap();
        assert_eq!(empty, json!({ "jobs": [] }));
    }

    #[test]
    fn a_running_job_reads_as_slurmrestd_writes_it() {
        use crate::model::job::JobState;
        let mut job = Job {
            id: 42,
            name: "train".into(),
            user: "alice".into(),
            state: JobState::Running,
            time_limit: Some(3_601),
            start_time: Some(100),
            gpus_alloc: vec![0, 1],
            node: Some("gpu01".into()),
            ..Job::default()
        };
        job.gpus.count = 2;
        job.gpus.gpu_type = Some("a100".into());
        let v = job_info(&JobView::stored(job));
        assert_eq!(v["job_state"], json!(["RUNNING"]));
        assert_eq!(
            v["time_limit"],
            json!({"set": true, "infinite": false, "number": 61})
        );
        assert_eq!(v["tres_per_node"], "gres/gpu:a100:2");
        assert_eq!(v["gres_detail"], json!(["gpu:a100:2(IDX:0,1)"]));
        assert_eq!(v["nodes"], "gpu01");
        assert_eq!(v["end_time"]["set"], false);
    }
}
