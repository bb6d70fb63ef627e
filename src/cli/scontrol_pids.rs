//! `scontrol listpids [JOBID[.STEP]] [NODENAME]`: the processes of the
//! running jobs on the machine it runs on, each with its job, step and
//! task, as Slurm's scontrol lists them.
//!
//! A process belongs to the job and step its environment names
//! (`SLURM_JOB_ID`, `SLURM_STEP_ID`; the batch script and what it runs
//! outside srun have no step id: `batch`), as the job's supervisor finds
//! a step's processes. Only jobs the controller says are running are
//! listed, so a stray variable elsewhere names nothing; a user sees the
//! processes whose environment the kernel lets them read (their own),
//! root all of them.

use std::collections::BTreeSet;

use super::{print, CliError, CliResult};
use crate::model::job::JobState;

/// A process of a job: its pid, job, step (`batch` or the step's number)
/// and task ids (local, global; none for the batch script).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct JobProcess {
    job: u64,
    step: String,
    pid: u32,
    task: Option<(String, String)>,
}

/// Prints the processes `which` names (`N`, `N.S`, `*` or nothing: all
/// running jobs'); `node`, when given, must be this machine's.
pub fn list_pids(
    config: &crate::config::Config,
    which: Option<&str>,
    node: Option<&str>,
) -> CliResult {
    if let Some(node) = node {
        let here = nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default();
        let short = here.split('.').next().unwrap_or_default();
        if node != here && node != short && node != config.node_name {
            return Err(CliError::failed(format!(
                "scontrol listpids lists the processes of the machine it runs on ({here}), not of {node}: run it there"
            )));
        }
    }
    let which = which.filter(|w| *w != "*" && *w != "-1");
    let (step, views, _) = super::scontrol_steps::running_views(config, which)?;
    let running: BTreeSet<u64> = views
        .iter()
        .filter(|v| v.job.state == JobState::Running)
        .map(|v| v.job.id)
        .collect();
    if let (Some(id), true) = (which, running.is_empty()) {
        return Err(CliError::failed(format!(
            "job {id} is not running (Invalid job id specified)"
        )));
    }
    let mut listed: Vec<JobProcess> = processes()
        .into_iter()
        .filter(|p| running.contains(&p.job))
        .filter(|p| step.as_deref().is_none_or(|want| p.step == want))
        .collect();
    listed.sort();
    print(&table(&listed))
}

/// The listing in Slurm's layout.
fn table(listed: &[JobProcess]) -> String {
    let mut out = format!(
        "{:<8} {:<8} {:<8} {:<7} {:<8}\n",
        "PID", "JOBID", "STEPID", "LOCALID", "GLOBALID"
    );
    for p in listed {
        let (local, global) = p
            .task
            .clone()
            .unwrap_or_else(|| ("-".to_string(), "-".to_string()));
        out.push_str(&format!(
            "{:<8} {:<8} {:<8} {:<7} {:<8}\n",
            p.pid, p.job, p.step, local, global
        ));
    }
    out
}

/// Every process of this machine whose environment names a job (and
/// that this user may read).
fn processes() -> Vec<JobProcess> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            of_environment(pid, &environ)
        })
        .collect()
}

/// The job, step and task a process's environment (`environ`, NUL
/// separated) names.
fn of_environment(pid: u32, environ: &[u8]) -> Option<JobProcess> {
    let get = |name: &str| -> Option<String> {
        environ.split(|&b| b == 0).find_map(|v| {
            let v = std::str::from_utf8(v).ok()?;
            v.strip_prefix(name)?.strip_prefix('=').map(str::to_string)
        })
    };
    let job = get("SLURM_JOB_ID")?.parse().ok()?;
    Some(match get("SLURM_STEP_ID") {
        Some(step) => JobProcess {
            job,
            step,
            pid,
            task: Some((
                get("SLURM_LOCALID").unwrap_or_else(|| "-".into()),
                get("SLURM_PROCID").unwrap_or_else(|| "-".into()),
            )),
        },
        None => JobProcess {
            job,
            step: "batch".into(),
            pid,
            task: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_of_the_job_and_step_its_environment_names() {
        let env = b"PATH=/bin\0SLURM_JOB_ID=12\0SLURM_STEP_ID=3\0SLURM_LOCALID=1\0SLURM_PROCID=5\0";
        assert_eq!(
            of_environment(40, env),
            Some(JobProcess {
                job: 12,
                step: "3".into(),
                pid: 40,
                task: Some(("1".into(), "5".into())),
            })
        );
        let batch = b"SLURM_JOB_ID=12\0SLURM_PROCID=0\0";
        assert_eq!(
            of_environment(41, batch).map(|p| p.step),
            Some("batch".into())
        );
        assert_eq!(of_environment(42, b"SLURM_JOB_IDX=1\0PATH=/bin\0"), None);
    }

    #[test]
    fn the_listing_is_in_slurms_columns() {
        let listed = [JobProcess {
            job: 7,
            step: "batch".into(),
            pid: 1234,
            task: None,
        }];
        assert_eq!(
            table(&listed),
            "PID      JOBID    STEPID   LOCALID GLOBALID\n1234     7        batch    -       -       \n"
        );
    }
}
