//! `POST /slurm/…/job/submit`: slurmrestd's `job_submit_req` (a script
//! and a `job_desc_msg`) into the request `ysbatch` would make. The
//! script's `#SBATCH` lines are read as `ysbatch` reads them, and the
//! description's fields override them as command-line options do. A field
//! of Slurm's description ysched has no use for is taken and named in the
//! answer's warnings; a field Slurm does not have is refused.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::model::job::JobRequest;
use crate::script::{self, Partial, SubmitContext, SubmitOptions};

use super::http::Response;

/// The fields of Slurm's `job_desc_msg` (v0.0.45) ysched does not use:
/// taken, and named in the answer's warnings.
const IGNORED: &[&str] = &[
    "account_gather_frequency",
    "admin_comment",
    "allocation_node_list",
    "allocation_node_port",
    "batch_features",
    "flags",
    "burst_buffer",
    "clusters",
    "cluster_constraint",
    "contiguous",
    "container",
    "container_id",
    "container_type",
    "core_specification",
    "thread_specification",
    "cpu_binding",
    "cpu_binding_flags",
    "cpu_frequency",
    "cpus_per_tres",
    "crontab",
    "deadline",
    "delay_boot",
    "end_time",
    "rlimits",
    "extra",
    "group_id",
    "hetjob_group",
    "immediate",
    "job_id",
    "kill_on_node_fail",
    "licenses",
    "mcs_label",
    "memory_binding",
    "memory_binding_type",
    "memory_per_tres",
    "memory_update_margin",
    "memory_update_delay",
    "network",
    "tasks",
    "oom_kill_step",
    "reserve_ports",
    "overcommit",
    "partition",
    "distribution_plane_size",
    "prefer",
    "priority",
    "profile",
    "reboot",
    "reservation",
    "shared",
    "site_factor",
    "spank_environment",
    "step_id",
    "distribution",
    "time_minimum",
    "tres_bind",
    "tres_freq",
    "tres_per_socket",
    "user_id",
    "wait_all_nodes",
    "kill_warning_flags",
    "kill_warning_signal",
    "kill_warning_delay",
    "maximum_cpus",
    "maximum_nodes",
    "minimum_boards_per_node",
    "minimum_sockets_per_board",
    "sockets_per_node",
    "cores_per_socket",
    "threads_per_core",
    "tasks_per_socket",
    "tasks_per_core",
    "tasks_per_board",
    "ntasks_per_tres",
    "minimum_cpus_per_node",
    "memory_per_cpu",
    "temporary_disk_per_node",
    "selinux_context",
    "required_switches",
    "segment_size",
    "standard_input",
    "wait_for_switch",
    "wckey",
    "x11",
    "x11_magic_cookie",
    "x11_target_host",
];

/// What is wrong with one field's value.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Invalid(String);

/// A submission read from the body, and what was ignored in it.
pub struct Submission {
    pub request: JobRequest,
    pub warnings: Vec<String>,
}

/// Reads a `job_submit_req` body; `home` is where a job without a working
/// directory runs.
pub fn read(body: &[u8], home: &Path) -> Result<Submission, Response> {
    let bad = |message: String| Response::error(400, &message);
    let value: Value =
        serde_json::from_slice(body).map_err(|e| bad(format!("the body is not JSON: {e}")))?;
    let Value::Object(top) = value else {
        return Err(bad(
            "the body must be a JSON object with 'script' and 'job'".into(),
        ));
    };
    for key in top.keys() {
        match key.as_str() {
            "script" | "job" => {}
            "jobs" => {
                return Err(bad(
                    "'jobs' (a heterogeneous job) is not supported: send one 'job'".into(),
                ))
            }
            other => {
                return Err(bad(format!(
                    "unknown field '{other}': a submission has 'script' and 'job'"
                )))
            }
        }
    }
    let job = match top.get("job") {
        Some(Value::Object(job)) => job.clone(),
        Some(_) => return Err(bad("'job' must be an object (a job description)".into())),
        None => {
            return Err(bad(
                "'job' is missing: a submission needs a job description".into(),
            ))
        }
    };
    let script = match (top.get("script"), job.get("script")) {
        (Some(Value::String(s)), _) | (None, Some(Value::String(s))) => s.clone(),
        (None, None) => {
            return Err(bad(
                "'script' is missing: a submission needs a batch script".into(),
            ))
        }
        _ => return Err(bad("'script' must be a string".into())),
    };
    crate::validate::script(&script).map_err(|e| bad(format!("script: {}", e.problem)))?;
    script::check_interpreter_line(&script, "script").map_err(|e| bad(e.to_string()))?;
    let mut warnings = Vec::new();
    let mut options = SubmitOptions::default();
    let mut extra = Extra::default();
    for (key, value) in &job {
        take_field(key, value, &mut options, &mut extra)?;
        if IGNORED.contains(&key.as_str()) {
            warnings.push(format!(
                "job.{key} is taken and ignored: ysched has no use for it"
            ));
        }
    }
    let request = resolve(script, options, extra, home)?;
    Ok(Submission { request, warnings })
}

/// What a description holds that is not an option of `ysbatch`.
#[derive(Default)]
struct Extra {
    environment: Option<Vec<(String, String)>>,
    args: Vec<String>,
    begin_time: Option<i64>,
    cwd: Option<PathBuf>,
}

/// Puts field `key` of the description where it belongs, checking it
/// alone so that an error names it.
fn take_field(
    key: &str,
    value: &Value,
    options: &mut SubmitOptions,
    extra: &mut Extra,
) -> Result<(), Response> {
    let bad = |problem: Invalid| Response::error(400, &format!("job.{key}: {problem}"));
    let mut alone = SubmitOptions::default();
    match key {
        "name" => alone.job_name = Some(text(value).map_err(bad)?),
        "account" => alone.account = Some(text(value).map_err(bad)?),
        "qos" => alone.qos = Some(text(value).map_err(bad)?),
        "comment" => alone.comment = Some(text(value).map_err(bad)?),
        "dependency" => alone.dependency = Some(text(value).map_err(bad)?),
        "array" => alone.array = Some(text(value).map_err(bad)?),
        "mail_user" => alone.mail_user = Some(text(value).map_err(bad)?),
        "constraints" => alone.constraint = Some(text(value).map_err(bad)?),
        "nodes" => alone.nodes = Some(text(value).map_err(bad)?),
        "minimum_nodes" => alone.nodes = Some(integer(value).map_err(bad)?.to_string()),
        "tasks" => alone.ntasks = Some(integer(value).map_err(bad)?.to_string()),
        "tasks_per_node" => alone.ntasks_per_node = Some(integer(value).map_err(bad)?.to_string()),
        "required_nodes" => alone.nodelist = Some(list_or_text(value).map_err(bad)?),
        "excluded_nodes" => alone.exclude = Some(list_or_text(value).map_err(bad)?),
        "standard_output" => alone.output = Some(text(value).map_err(bad)?),
        "standard_error" => alone.error = Some(text(value).map_err(bad)?),
        "hold" => alone.hold = flag(value).map_err(bad)?,
        "requeue" => alone.no_requeue = !flag(value).map_err(bad)?,
        "nice" => alone.nice = Some(integer(value).map_err(bad)?.to_string()),
        "cpus_per_task" | "minimum_cpus" => {
            alone.cpus_per_task = Some(integer(value).map_err(bad)?.to_string())
        }
        "memory_per_node" => {
            alone.mem = number_with_flags(value)
                .map_err(bad)?
                .map(|mb| format!("{mb}M"))
        }
        "time_limit" => {
            alone.time = Some(match number_with_flags(value).map_err(bad)? {
                Some(minutes) => minutes.to_string(),
                None => "UNLIMITED".into(),
            })
        }
        "tres_per_job" | "tres_per_node" | "tres_per_task" => {
            alone.gres = Some(gres_of(&text(value).map_err(bad)?).map_err(bad)?)
        }
        "mail_type" => alone.mail_type = Some(list_or_text(value).map_err(bad)?),
        "open_mode" => alone.open_mode = Some(open_mode(value).map_err(bad)?),
        "environment" => extra.environment = Some(environment(value).map_err(bad)?),
        "argv" => extra.args = strings(value).map_err(bad)?,
        "begin_time" => extra.begin_time = number_with_flags(value).map_err(bad)?,
        "current_working_directory" => extra.cwd = Some(PathBuf::from(text(value).map_err(bad)?)),
        "script" => {}
        other if IGNORED.contains(&other) => {}
        other => {
            return Err(Response::error(
                400,
                &format!("unknown field 'job.{other}': not a field of Slurm's job description"),
            ))
        }
    }
    Partial::from_options(alone.clone()).map_err(|e| bad(Invalid(e.to_string())))?;
    merge(options, alone);
    Ok(())
}

/// The description's options over the script's directives, resolved as
/// `ysbatch` resolves them.
fn resolve(
    script_text: String,
    options: SubmitOptions,
    extra: Extra,
    home: &Path,
) -> Result<JobRequest, Response> {
    let bad = |message: String| Response::error(400, &message);
    let given = Partial::from_options(options).map_err(|e| bad(format!("job: {e}")))?;
    let directives =
        script::parse_directives(&script_text, "script").map_err(|e| bad(e.to_string()))?;
    let cwd = extra.cwd.unwrap_or_else(|| home.to_path_buf());
    if !cwd.is_absolute() {
        return Err(bad(format!(
            "job.current_working_directory: '{}' is not an absolute path",
            cwd.display()
        )));
    }
    let environment = extra
        .environment
        .unwrap_or_else(|| vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())]);
    let context = SubmitContext {
        cwd: &cwd,
        environment,
        now: &jiff::Zoned::now,
        default_name: "job".into(),
    };
    let mut request = script::resolve(
        directives.overridden_by(given),
        script_text,
        extra.args,
        context,
    )
    .map_err(|e| bad(e.to_string()))?;
    if extra.begin_time.is_some() {
        request.begin_time = extra.begin_time;
    }
    crate::validate::job_request(&request).map_err(|e| bad(e.to_string()))?;
    Ok(request)
}

/// Sets in `into` what `from` sets (one field at a time, so no clash).
fn merge(into: &mut SubmitOptions, from: SubmitOptions) {
    macro_rules! take {
        ($($field:ident),*) => { $( if from.$field.is_some() { into.$field = from.$field; } )* };
    }
    take!(
        job_name,
        account,
        qos,
        comment,
        dependency,
        array,
        mail_user,
        constraint,
        nodes,
        nodelist,
        exclude,
        output,
        error,
        nice,
        cpus_per_task,
        mem,
        time,
        gres,
        mail_type,
        open_mode
    );
    into.hold |= from.hold;
    into.no_requeue |= from.no_requeue;
}

fn text(value: &Value) -> Result<String, Invalid> {
    match value {
        Value::String(s) => Ok(s.clone()),
        other => Err(Invalid(format!("must be a string, not {other}"))),
    }
}

fn flag(value: &Value) -> Result<bool, Invalid> {
    value
        .as_bool()
        .ok_or_else(|| Invalid(format!("must be true or false, not {value}")))
}

fn integer(value: &Value) -> Result<i64, Invalid> {
    value
        .as_i64()
        .ok_or_else(|| Invalid(format!("must be an integer, not {value}")))
}

fn strings(value: &Value) -> Result<Vec<String>, Invalid> {
    match value {
        Value::Array(items) => items.iter().map(text).collect(),
        other => Err(Invalid(format!("must be a list of strings, not {other}"))),
    }
}

/// A list of strings or one comma-separated string, as one string.
fn list_or_text(value: &Value) -> Result<String, Invalid> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Array(_) => Ok(strings(value)?.join(",")),
        other => Err(Invalid(format!(
            "must be a string or a list of strings, not {other}"
        ))),
    }
}

/// slurmrestd's numbers: plain, or `{set, infinite, number}`; `None`
/// for infinite.
fn number_with_flags(value: &Value) -> Result<Option<i64>, Invalid> {
    let wrong = || {
        Invalid(format!(
            "must be a non-negative integer or {{\"set\", \"infinite\", \"number\"}}, not {value}"
        ))
    };
    match value {
        Value::Number(n) => n.as_i64().filter(|n| *n >= 0).map(Some).ok_or_else(wrong),
        Value::Object(o) => flagged(o).ok_or_else(wrong),
        _ => Err(wrong()),
    }
}

fn flagged(o: &Map<String, Value>) -> Option<Option<i64>> {
    if o.get("infinite").and_then(Value::as_bool) == Some(true) {
        return Some(None);
    }
    let n = o.get("number")?.as_i64().filter(|n| *n >= 0)?;
    Some(Some(n))
}

/// `gres/gpu:2`, `gres/gpu:a100:2`, `gres/gpu=2` (Slurm's TRES forms)
/// into `--gres`'s `gpu:2`, `gpu:a100:2`.
fn gres_of(tres: &str) -> Result<String, Invalid> {
    let mut found = None;
    for item in tres.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let item = item
            .strip_prefix("gres/")
            .or_else(|| item.strip_prefix("gres:"))
            .unwrap_or(item);
        let item = item.replace('=', ":");
        if item.starts_with("gpu") || item.starts_with("shard") {
            found = Some(item);
        } else if !item.starts_with("cpu") && !item.starts_with("mem") && !item.starts_with("node")
        {
            return Err(Invalid(format!(
                "'{item}': ysched's resources are gres/gpu, gres/shard, cpu and mem"
            )));
        }
    }
    found.ok_or_else(|| Invalid(format!("'{tres}' asks for no GPUs (gres/gpu:N)")))
}

fn open_mode(value: &Value) -> Result<script::OpenMode, Invalid> {
    match text(value)?.to_ascii_lowercase().as_str() {
        "append" => Ok(script::OpenMode::Append),
        "truncate" => Ok(script::OpenMode::Truncate),
        other => Err(Invalid(format!("'{other}' is not append or truncate"))),
    }
}

/// `["NAME=value", …]`.
fn environment(value: &Value) -> Result<Vec<(String, String)>, Invalid> {
    strings(value)?
        .into_iter()
        .map(|item| {
            item.split_once('=')
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .ok_or_else(|| Invalid(format!("'{item}' is not NAME=value")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn submit(body: &str) -> Result<Submission, u16> {
        read(body.as_bytes(), Path::new("/home/alice")).map_err(|r| r.status)
    }

    fn message(body: &str) -> String {
        match read(body.as_bytes(), Path::new("/home/alice")) {
            Err(r) => String::from_utf8(r.body).unwrap(),
            Ok(_) => panic!("taken: {body}"),
        }
    }

    #[test]
    fn a_description_overrides_the_directives() {
        let body = r##"{"script": "#!/bin/bash\n#SBATCH -J fromscript\n#SBATCH --gres=gpu:1\ntrue\n",
            "job": {"name": "fromjson", "time_limit": {"set": true, "number": 90}, "tres_per_node": "gres/gpu:a100:2",
                    "environment": ["PATH=/bin", "A=b=c"], "current_working_directory": "/tmp", "memory_per_node": 2048,
                    "partition": "gpu", "hold": true}}"##;
        let s = submit(body).unwrap();
        let r = &s.request;
        assert_eq!(r.name, "fromjson");
        assert_eq!(r.time_limit, Some(Some(5_400)));
        assert_eq!(
            (r.gpus.count, r.gpus.gpu_type.as_deref()),
            (2, Some("a100"))
        );
        assert_eq!(r.mem_mb, Some(2048));
        assert!(r.hold);
        assert_eq!(r.work_dir, Path::new("/tmp"));
        assert!(r.environment.contains(&("A".into(), "b=c".into())));
        assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
        assert!(s.warnings[0].contains("job.partition"));
    }

    #[test]
    fn bad_descriptions_are_refused_naming_the_field() {
        assert_eq!(submit("{").err(), Some(400));
        assert!(message(r##"{"script":"#!/bin/sh\n","job":{"bogus":1}}"##)
            .contains("unknown field 'job.bogus'"));
        assert!(message(r##"{"script":"#!/bin/sh\n","job":{},"extra":1}"##)
            .contains("unknown field 'extra'"));
        assert!(message(r##"{"job":{}}"##).contains("'script' is missing"));
        assert!(message(r##"{"script":"#!/bin/sh\n\u0000","job":{}}"##).contains("NUL"));
        assert!(
            message(r##"{"script":"#!/bin/sh\n","job":{"time_limit":"soon"}}"##)
                .contains("job.time_limit")
        );
        assert!(
            message(r##"{"script":"#!/bin/sh\n","job":{"tres_per_job":"license/x:1"}}"##)
                .contains("job.tres_per_job")
        );
        assert!(
            message(r##"{"script":"#!/bin/sh\n","job":{"current_working_directory":"rel"}}"##)
                .contains("absolute")
        );
        assert!(
            message(r##"{"script":"#!/bin/sh\n","job":{"environment":["novalue"]}}"##)
                .contains("NAME=value")
        );
    }
}
