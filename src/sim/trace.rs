//! Workload traces as CSV with a header, read as they are: the columns are
//! found by name, so the NASA iPSC log (`submit_s run_s procs req_time_s
//! user group`) and Alibaba's GPU trace (`submit_s duration_s gpus group`)
//! both work unchanged.

use std::path::Path;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum TraceError {
    #[error("cannot read {path}: {message}")]
    Read { path: String, message: String },
    #[error("{path}: line {line}: {message}")]
    Line {
        path: String,
        line: usize,
        message: String,
    },
}

/// One job of the trace, sized in GPUs.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceJob {
    /// The row's line number in the file.
    pub line: usize,
    pub submit: i64,
    /// How long it ran, seconds.
    pub run: u64,
    pub gpus: u32,
    /// Its time limit: the requested time, or the run time times the limit
    /// factor where the trace has none (never below the run time).
    pub time_limit: u64,
    pub user: String,
    pub account: String,
    /// A QoS other than the default (traces have none; workloads built
    /// by hand may).
    pub qos: Option<String>,
    /// A `--dependency` on earlier jobs, by their ids (the n-th job of the
    /// trace is job n).
    pub dependency: Option<String>,
}

/// How trace rows become jobs.
#[derive(Clone, Debug)]
pub struct Reading {
    /// Processors per GPU, for CPU traces (`procs` / this, rounded up).
    pub procs_per_gpu: u32,
    /// Time limit = run time × this, where the trace gives no requested time.
    pub limit_factor: f64,
    /// Read at most this many jobs.
    pub max_jobs: Option<usize>,
    /// Submission times are divided by this (above 1: the same jobs arrive
    /// faster, a heavier load on the same cluster).
    pub arrival_scale: f64,
    /// Which column names a job's account.
    pub accounts_from: AccountsFrom,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AccountsFrom {
    /// The group (or account) column: users share their group's account.
    Group,
    /// The user column: each user is an account of their own.
    User,
}

/// Rows that did not become jobs, and why.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    /// No run time: never started in the trace (or unknown).
    pub no_run_time: usize,
    /// Asked for no GPU.
    pub no_gpus: usize,
}

pub fn read(path: &Path, reading: &Reading) -> Result<(Vec<TraceJob>, Skipped), TraceError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| TraceError::Read {
        path: name.clone(),
        message: e.to_string(),
    })?;
    parse(&text, &name, reading)
}

/// Where a trace's columns are, by their usual names.
struct Columns {
    submit_at: usize,
    run_at: usize,
    gpus_at: usize,
    /// Processors, not GPUs: divided by `procs_per_gpu`.
    scale: bool,
    req_at: Option<usize>,
    user_at: Option<usize>,
    account_at: Option<usize>,
}

fn columns_of(columns: &[&str], name: &str) -> Result<Columns, TraceError> {
    let find = |names: &[&str]| columns.iter().position(|c| names.contains(c));
    let missing = |what: &str, names: &[&str]| TraceError::Line {
        path: name.to_string(),
        line: 1,
        message: format!("no {what} column (one of: {})", names.join(", ")),
    };
    const SUBMIT: &[&str] = &["submit_s", "submit", "submit_time"];
    const RUN: &[&str] = &["run_s", "duration_s", "runtime", "run_time"];
    const GPUS: &[&str] = &["gpus", "procs", "num_gpu"];
    let submit_at = find(SUBMIT).ok_or_else(|| missing("submit time", SUBMIT))?;
    let run_at = find(RUN).ok_or_else(|| missing("run time", RUN))?;
    let gpus_at = find(GPUS).ok_or_else(|| missing("GPU or processor count", GPUS))?;
    let scale = columns[gpus_at] == "procs";
    let req_at = find(&["req_time_s", "requested_time", "time_limit_s"]);
    let user_at = find(&["user", "user_id"]);
    let account_at = find(&["group", "account", "group_id"]);
    Ok(Columns {
        submit_at,
        run_at,
        gpus_at,
        scale,
        req_at,
        user_at,
        account_at,
    })
}

/// A user or group cell as a name: letters, digits, `_` and `-`, with
/// `prefix` before one that does not start with a letter; `default` for
/// an empty cell or -1.
fn label(value: Option<&str>, prefix: &str, default: &str) -> String {
    match value {
        Some(v) if !v.is_empty() && v != "-1" => {
            let clean: String = v
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                .collect();
            if clean
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic())
            {
                clean
            } else {
                format!("{prefix}{clean}")
            }
        }
        _ => default.to_string(),
    }
}

pub fn parse(
    text: &str,
    name: &str,
    reading: &Reading,
) -> Result<(Vec<TraceJob>, Skipped), TraceError> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with(';'));
    let Some((_, header)) = lines.next() else {
        return Err(TraceError::Read {
            path: name.to_string(),
            message: "the file is empty".into(),
        });
    };
    let columns: Vec<&str> = header.split(',').map(str::trim).collect();
    let at = columns_of(&columns, name)?;

    let mut jobs = Vec::new();
    let mut skipped = Skipped::default();
    for (index, row) in lines {
        match read_row(index + 1, row, &columns, &at, reading, name)? {
            Read::Job(job) => jobs.push(*job),
            Read::NoRunTime => skipped.no_run_time += 1,
            Read::NoGpus => skipped.no_gpus += 1,
        }
        if reading.max_jobs.is_some_and(|m| jobs.len() >= m) {
            break;
        }
    }
    jobs.sort_by_key(|j| (j.submit, j.line));
    Ok((jobs, skipped))
}

/// What one row of a trace is.
enum Read {
    Job(Box<TraceJob>),
    /// It never ran (no run time).
    NoRunTime,
    /// It asked for no GPU.
    NoGpus,
}

/// One row of the trace, at `line`.
fn read_row(
    line: usize,
    row: &str,
    columns: &[&str],
    at: &Columns,
    reading: &Reading,
    name: &str,
) -> Result<Read, TraceError> {
    let cells: Vec<&str> = row.split(',').map(str::trim).collect();
    let cell = |at: usize| cells.get(at).copied().unwrap_or("");
    let bad = |column: &str, value: &str| TraceError::Line {
        path: name.to_string(),
        line,
        message: format!("column {column}: '{value}' is not a number"),
    };
    let number = |at: usize| -> Result<Option<f64>, TraceError> {
        let v = cell(at);
        if v.is_empty() {
            return Ok(None);
        }
        v.parse::<f64>().map(Some).map_err(|_| bad(columns[at], v))
    };
    if cells.len() < columns.len() {
        return Err(TraceError::Line {
            path: name.to_string(),
            line,
            message: format!(
                "{} fields, but the header has {}",
                cells.len(),
                columns.len()
            ),
        });
    }
    let submit = number(at.submit_at)?.ok_or_else(|| bad(columns[at.submit_at], ""))?;
    let run = match number(at.run_at)? {
        Some(r) if r >= 0.0 => r.ceil() as u64,
        _ => {
            return Ok(Read::NoRunTime);
        }
    };
    let size = number(at.gpus_at)?.unwrap_or(0.0);
    let gpus = if at.scale {
        (size / f64::from(reading.procs_per_gpu.max(1))).ceil()
    } else {
        size.ceil()
    };
    if gpus < 1.0 {
        return Ok(Read::NoGpus);
    }
    let requested = match at.req_at {
        Some(at) => number(at)?.filter(|r| *r > 0.0).map(|r| r.ceil() as u64),
        None => None,
    };
    let time_limit = requested
        .unwrap_or_else(|| ((run as f64) * reading.limit_factor).ceil() as u64)
        .max(run)
        .max(1);
    let user = label(at.user_at.map(cell), "u", "user");
    let account = match reading.accounts_from {
        AccountsFrom::Group => label(at.account_at.map(cell), "g", "default"),
        AccountsFrom::User => user.clone(),
    };
    Ok(Read::Job(Box::new(TraceJob {
        line,
        submit: (submit / reading.arrival_scale.max(1e-9)).round() as i64,
        run,
        gpus: gpus.min(u32::MAX as f64) as u32,
        time_limit,
        user,
        account,
        qos: None,
        dependency: None,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading() -> Reading {
        Reading {
            procs_per_gpu: 8,
            limit_factor: 2.0,
            max_jobs: None,
            arrival_scale: 1.0,
            accounts_from: AccountsFrom::Group,
        }
    }

    #[test]
    fn nasa_columns() {
        let text = "job_id,submit_s,wait_s,run_s,procs,req_procs,req_time_s,status,user,group,queue\n\
                    1,0,-1,1451,128,-1,-1,-1,1,1,-1\n2,10,-1,30,8,-1,100,-1,3,1,-1\n3,20,-1,-1,8,-1,-1,-1,3,1,-1\n";
        let (jobs, skipped) = parse(text, "nasa.csv", &reading()).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(skipped.no_run_time, 1);
        assert_eq!(jobs[0].gpus, 16, "128 processors at 8 per GPU");
        assert_eq!(
            jobs[0].time_limit, 2_902,
            "no requested time: twice the run"
        );
        assert_eq!(jobs[1].time_limit, 100);
        assert_eq!(
            (jobs[1].user.as_str(), jobs[1].account.as_str()),
            ("u3", "g1")
        );
    }

    #[test]
    fn alibaba_columns() {
        let text = "job_id,submit_s,start_s,end_s,duration_s,gpus,gpu_milli,cpus_milli,mem_mib,group,final_phase,gpu_spec\n\
                    p0,0,0,10,10,1,1000,1,1,LS,Running,\np1,5,,,,1,1000,1,1,BE,Pending,\np2,6,6,7,1,0,0,1,1,BE,Succeeded,\n";
        let (jobs, skipped) = parse(text, "ali.csv", &reading()).unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!(
            skipped,
            Skipped {
                no_run_time: 1,
                no_gpus: 1
            }
        );
        assert_eq!(jobs[0].account, "LS");
        assert_eq!(jobs[0].user, "user");
    }

    #[test]
    fn a_bad_row_names_its_line() {
        let e = parse(
            "submit_s,run_s,gpus\n0,10,1\n5,ten,1\n",
            "t.csv",
            &reading(),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.csv: line 3: column run_s: 'ten' is not a number"
        );
        let e = parse("submit_s,run_s,gpus\n0,10\n", "t.csv", &reading()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.csv: line 2: 2 fields, but the header has 3"
        );
        let e = parse("when,run_s,gpus\n", "t.csv", &reading()).unwrap_err();
        assert!(e.to_string().contains("no submit time column"), "{e}");
    }
}
