//! The rules every field of a submission must meet. `ysbatch` checks them
//! before it sends a request, and the daemon checks them again at
//! admission: clients are untrusted (anyone can write a request to the
//! socket by hand), and a value the daemon stored without checking could
//! fail to read back from the database at its next start.
//!
//! Each rule names the option it guards, so a refusal reads like
//! `--job-name: control characters are not allowed`.

use thiserror::Error;

use crate::model::job::{GpuConstraint, JobRequest, MailTypes, WarnSignal};

/// The most GPUs one job may ask for; anything above is a typo.
pub const MAX_GPUS_PER_JOB: u32 = 1024;
pub const MAX_CPUS_PER_JOB: u32 = 65_536;
pub const MAX_NICE: i64 = 1_000_000;
/// Nodes one job may ask for.
pub const MAX_NODES: u32 = 4096;
/// Tasks one job may ask for.
pub const MAX_TASKS: u32 = 1 << 20;
pub const MAX_NAME_CHARS: usize = 200;
pub const MAX_COMMENT_CHARS: usize = 1000;
pub const MAX_PATH_BYTES: usize = 4096;
/// Node names in one --nodelist or --exclude.
pub const MAX_NODE_NAMES: usize = 4096;
/// Slurm's default `max_script_size`.
pub const MAX_SCRIPT_BYTES: usize = 4 << 20;
/// The job's environment, names and values together.
pub const MAX_ENVIRONMENT_BYTES: usize = 4 << 20;
pub const MAX_GRACE_SECS: u64 = 86_400;
/// Ten years: longer limits are typos (UNLIMITED says "no limit").
pub const MAX_TIME_LIMIT_SECS: u64 = 10 * 366 * 86_400;
/// 9999-12-31T23:59:59Z: a `--begin` beyond it is not a time.
pub const MAX_BEGIN_TIME: i64 = 253_402_300_799;

/// A field that breaks its rule: which option, and what is wrong.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{field}: {problem}")]
pub struct InvalidField {
    pub field: &'static str,
    pub problem: String,
}

fn invalid(field: &'static str, problem: impl Into<String>) -> InvalidField {
    InvalidField {
        field,
        problem: problem.into(),
    }
}

/// Checks every field of a submission.
pub fn job_request(r: &JobRequest) -> Result<(), InvalidField> {
    text(&r.name, "--job-name", MAX_NAME_CHARS)?;
    if let Some(c) = &r.comment {
        text(c, "--comment", MAX_COMMENT_CHARS)?;
    }
    for (field, name) in [("--account", &r.account), ("--qos", &r.qos)] {
        if let Some(n) = name {
            word(n, field)?;
        }
    }
    gpus(r)?;
    for (field, names) in [("--nodelist", &r.nodelist), ("--exclude", &r.exclude)] {
        if names.len() > MAX_NODE_NAMES {
            return Err(invalid(
                field,
                format!("{} nodes named; at most {MAX_NODE_NAMES}", names.len()),
            ));
        }
        for name in names {
            word(name, field)?;
        }
    }
    count(r.cpus, "--cpus-per-task", 1, MAX_CPUS_PER_JOB)?;
    tasks(r)?;
    if r.mem_mb == Some(0) {
        return Err(invalid("--mem", "must be more than 0"));
    }
    if let Some(Some(t)) = r.time_limit {
        if t == 0 || t > MAX_TIME_LIMIT_SECS {
            return Err(invalid(
                "--time",
                format!("{t} seconds is out of range (1 second to 10 years, or UNLIMITED)"),
            ));
        }
    }
    for (field, value) in [
        ("--output", &r.output),
        ("--error", &r.error),
        ("--checkpoint-file", &r.checkpoint_file),
    ] {
        if let Some(v) = value {
            path(v, field)?;
        }
    }
    for (field, dir) in [
        ("--chdir", &r.work_dir),
        ("submit directory", &r.submit_dir),
    ] {
        let text = dir.to_string_lossy();
        path(&text, field)?;
        if !dir.is_absolute() {
            return Err(invalid(field, format!("'{}' is not absolute", text)));
        }
    }
    environment(&r.environment)?;
    if let Some(b) = r.begin_time {
        if !(0..=MAX_BEGIN_TIME).contains(&b) {
            return Err(invalid("--begin", format!("{b} is not a time")));
        }
    }
    if r.nice.abs() > MAX_NICE {
        return Err(invalid(
            "--nice",
            format!("{} is out of range (-{MAX_NICE} to {MAX_NICE})", r.nice),
        ));
    }
    if r.grace.is_some_and(|g| g > MAX_GRACE_SECS) {
        return Err(invalid("--grace", "longer than a day"));
    }
    if let Some(w) = &r.warn_signal {
        warn_signal(w)?;
    }
    mail(r.mail_type, r.mail_user.as_deref())?;
    if let Some(c) = &r.container {
        container(c)?;
    }
    script(&r.script)?;
    if r.args.iter().any(|a| a.contains('\0')) {
        return Err(invalid("script arguments", "a NUL byte"));
    }
    Ok(())
}

/// The `--container-*` options, under the option the error names.
fn container(c: &crate::model::container::ContainerRequest) -> Result<(), InvalidField> {
    c.check().map_err(|e| {
        let text = e.to_string();
        let flags = [
            "--container-image",
            "--container-mounts",
            "--container-workdir",
            "--container-env",
        ];
        let field = flags
            .into_iter()
            .find(|f| text.starts_with(&format!("{f}: ")))
            .unwrap_or("--container-image");
        let problem = text.strip_prefix(&format!("{field}: ")).unwrap_or(&text);
        invalid(field, problem)
    })
}

/// `-N`, `--ntasks` and the like: in bounds, agreeing with each other,
/// and not a shard request over several nodes.
fn tasks(r: &JobRequest) -> Result<(), InvalidField> {
    let t = &r.tasks;
    if t.nodes_max > MAX_NODES {
        return Err(invalid("--nodes", format!("at most {MAX_NODES}")));
    }
    if t.ntasks.is_some_and(|n| n > MAX_TASKS) || t.ntasks_per_node.is_some_and(|n| n > MAX_TASKS) {
        return Err(invalid("--ntasks", format!("at most {MAX_TASKS}")));
    }
    t.check()
        .map_err(|e| invalid("--nodes/--ntasks", e.to_string()))?;
    if t.is_multi_node() && r.gpus.shard {
        return Err(invalid(
            "--gpus",
            "a shard job shares one GPU of one node; it cannot span --nodes",
        ));
    }
    Ok(())
}

/// A name or comment: not empty, not too long, no control characters
/// (which would forge lines and move the cursor in every listing).
/// A node's name: what `node_name` and `yscontrol node add` take; a
/// host name's characters, at most 63 (one DNS label).
pub fn node_name(name: &str) -> Result<(), InvalidField> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
        && !name.starts_with(['-', '.']);
    if ok {
        Ok(())
    } else {
        Err(invalid(
            "node name",
            format!(
                "'{}' is not a node name (letters, digits, '_', '-', '.'; at most 63)",
                name.escape_debug()
            ),
        ))
    }
}

pub fn text(value: &str, field: &'static str, max_chars: usize) -> Result<(), InvalidField> {
    if value.is_empty() {
        return Err(invalid(field, "must not be empty"));
    }
    if value.chars().count() > max_chars {
        return Err(invalid(
            field,
            format!("longer than {max_chars} characters"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(invalid(field, "control characters are not allowed"));
    }
    Ok(())
}

/// An account, QoS or GPU type name: letters, digits, `_-.`.
fn word(value: &str, field: &'static str) -> Result<(), InvalidField> {
    if value.is_empty()
        || value.len() > 64
        || !value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
    {
        return Err(invalid(
            field,
            format!(
                "'{}' is not a name (letters, digits, '_', '-', '.')",
                value.escape_debug()
            ),
        ));
    }
    Ok(())
}

fn count(n: u32, field: &'static str, min: u32, max: u32) -> Result<(), InvalidField> {
    if n < min || n > max {
        return Err(invalid(
            field,
            format!("{n} is out of range ({min} to {max})"),
        ));
    }
    Ok(())
}

fn gpus(r: &JobRequest) -> Result<(), InvalidField> {
    let g = &r.gpus;
    count(g.count, "--gpus", 0, MAX_GPUS_PER_JOB)?;
    if let Some(t) = &g.gpu_type {
        word(t, "--gpus")?;
    }
    if g.shard && g.count == 0 {
        return Err(invalid("--gpus", "a shard request needs at least 1 shard"));
    }
    if let Some(c) = &g.constraint {
        if g.count == 0 {
            return Err(invalid(
                "--constraint",
                "applies to GPUs, and the job asks for none",
            ));
        }
        // What the database keeps is the text: it must read back as itself.
        if GpuConstraint::parse(&c.to_string()).as_ref() != Ok(c) {
            return Err(invalid(
                "--constraint",
                format!(
                    "'{}' is not features joined by '&' and gpumem>=SIZE",
                    c.to_string().escape_debug()
                ),
            ));
        }
    }
    Ok(())
}

/// A path pattern: not empty, no NUL or newline, not absurdly long.
fn path(value: &str, field: &'static str) -> Result<(), InvalidField> {
    if value.is_empty() || value.contains(['\0', '\n', '\r']) || value.len() > MAX_PATH_BYTES {
        return Err(invalid(
            field,
            format!("invalid path '{}'", value.escape_debug()),
        ));
    }
    Ok(())
}

fn environment(vars: &[(String, String)]) -> Result<(), InvalidField> {
    let mut bytes = 0;
    for (name, value) in vars {
        if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
            return Err(invalid(
                "--export",
                format!("'{}' is not an environment variable", name.escape_debug()),
            ));
        }
        bytes += name.len() + value.len() + 2;
    }
    if bytes > MAX_ENVIRONMENT_BYTES {
        return Err(invalid(
            "--export",
            format!("the environment is {bytes} bytes; at most {MAX_ENVIRONMENT_BYTES}"),
        ));
    }
    Ok(())
}

fn warn_signal(w: &WarnSignal) -> Result<(), InvalidField> {
    if WarnSignal::parse(&w.to_string()).as_ref() != Ok(w) {
        return Err(invalid(
            "--signal",
            format!(
                "signal {} before {} s is not a signal ysched can send",
                w.signal, w.before_secs
            ),
        ));
    }
    Ok(())
}

/// `--mail-type` and `--mail-user`. An address is a user name or
/// `local@domain` with no spaces, quotes, commas or line breaks: it ends
/// up in a mail header, where any of those could add recipients or
/// headers.
pub fn mail(types: MailTypes, user: Option<&str>) -> Result<(), InvalidField> {
    if !types.is_valid() {
        return Err(invalid("--mail-type", "unknown event bits"));
    }
    let Some(address) = user else {
        return Ok(());
    };
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b"._+-".contains(&b);
    let (local, domain) = match address.split_once('@') {
        Some((l, d)) => (l, Some(d)),
        None => (address, None),
    };
    let local_ok = !local.is_empty() && !local.starts_with('-') && local.bytes().all(allowed);
    let domain_ok = domain.is_none_or(|d| {
        !d.is_empty()
            && !d.starts_with(['-', '.'])
            && d.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-".contains(&b))
    });
    if address.len() > 254 || !local_ok || !domain_ok {
        return Err(invalid(
            "--mail-user",
            format!(
                "'{}' is not a user name or mail address",
                address.escape_debug()
            ),
        ));
    }
    Ok(())
}

/// A batch script: at most 4 MiB, no NUL bytes, no DOS line breaks (the
/// kernel would look for `/bin/bash\r` and the job fail with ENOENT).
pub fn script(body: &str) -> Result<(), InvalidField> {
    if body.len() > MAX_SCRIPT_BYTES {
        return Err(invalid(
            "script",
            format!("{} bytes; at most {MAX_SCRIPT_BYTES} bytes", body.len()),
        ));
    }
    if let Some(at) = body.find('\0') {
        let line = body[..at].matches('\n').count() + 1;
        return Err(invalid(
            "script",
            format!("line {line}: a NUL byte; a batch script is text"),
        ));
    }
    if let Some(at) = body.find("\r\n") {
        let line = body[..at].matches('\n').count() + 1;
        return Err(invalid(
            "script",
            format!(
                "line {line}: DOS line breaks (\\r\\n) instead of UNIX line breaks (\\n); convert it with dos2unix"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> JobRequest {
        crate::model::job::example_request()
    }

    fn refused(change: impl FnOnce(&mut JobRequest)) -> String {
        let mut r = request();
        change(&mut r);
        job_request(&r).expect_err("must be refused").to_string()
    }

    #[test]
    fn a_plain_request_passes() {
        job_request(&request()).unwrap();
    }

    #[test]
    fn what_only_a_hand_written_request_carries_is_refused() {
        assert!(refused(|r| r.name = "a\x1b[2Jb".into()).starts_with("--job-name: control"));
        assert!(refused(|r| r.name = "x".repeat(3_000_000)).contains("longer than 200"));
        assert!(refused(|r| r.comment = Some("a\nb".into())).starts_with("--comment"));
        assert!(refused(|r| r.mail_type = MailTypes::from_bits(255)).starts_with("--mail-type"));
        assert!(refused(|r| {
            r.gpus.count = 1;
            r.gpus.constraint = Some(GpuConstraint::default());
        })
        .starts_with("--constraint"));
        assert!(refused(|r| {
            r.warn_signal = Some(WarnSignal {
                signal: 99999,
                before_secs: 60,
                batch_only: false,
            })
        })
        .starts_with("--signal"));
        assert!(refused(|r| r.cpus = 0).starts_with("--cpus-per-task"));
        assert!(refused(|r| r.mem_mb = Some(0)).starts_with("--mem"));
        assert!(refused(|r| r.work_dir = "relative".into()).contains("not absolute"));
        assert!(refused(|r| r.environment.push(("A=B".into(), "c".into()))).starts_with("--export"));
        assert!(refused(|r| r.begin_time = Some(i64::MAX)).starts_with("--begin"));
        assert!(refused(|r| r.account = Some("a b".into())).starts_with("--account"));
        assert!(refused(|r| r.output = Some("a\0b".into())).starts_with("--output"));
    }

    #[test]
    fn mail_addresses_cannot_carry_headers() {
        for bad in [
            "a@b\nBcc: x@y",
            "a b@c",
            "-oQ/tmp",
            "a,b@c",
            "\"a\"@b",
            "a@",
            "",
        ] {
            assert!(
                mail(MailTypes::END, Some(bad)).is_err(),
                "{bad:?} must be refused"
            );
        }
        for good in ["alice", "alice.smith+ys@example.org", "ops-team@gpu-01.lab"] {
            mail(MailTypes::END, Some(good)).unwrap();
        }
    }

    #[test]
    fn dos_line_breaks_and_nul_bytes_are_named_with_their_line() {
        let e = script("#!/bin/bash\r\necho hi\r\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 1: DOS line breaks"), "{e}");
        let e = script("#!/bin/sh\necho\0hi\n").unwrap_err().to_string();
        assert!(e.contains("line 2: a NUL byte"), "{e}");
        script("#!/bin/sh\necho 'a\rb'\n").unwrap();
    }
}
