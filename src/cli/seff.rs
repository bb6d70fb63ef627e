//! `seff JOBID`: Slurm's contrib command on a job's efficiency — CPU and
//! memory used of what it held, its wall time — in seff's layout, with
//! the GPU lines ysched adds for a job that held GPUs (each GPU's mean
//! utilisation, peak memory and idle share, idle GPU-hours, a verdict).

use std::ffi::OsString;
use std::process::ExitCode;

use super::{accounting_views, job_filter, load_config, CliError};
use crate::report::efficiency;
use crate::report::view::JobView;

const USAGE: &str = "Usage: seff [Options] <Jobid>
       Options:
       -h    Help menu
       -v    Version
       -d    Debug mode: display raw Slurm data
";

/// Runs `seff` with `args` (after the command's name); its exit status
/// as Slurm's seff's: 1 for usage and version, 2 for a job not found.
pub fn main(args: Vec<OsString>) -> ExitCode {
    let mut debug = false;
    let mut ids = Vec::new();
    for arg in args.iter().map(|a| a.to_string_lossy().into_owned()) {
        match arg.as_str() {
            "-h" | "--help" => return usage(),
            "-v" | "-V" | "--version" => {
                println!("seff Version 2.1 (ysched {})", env!("CARGO_PKG_VERSION"));
                return ExitCode::from(1);
            }
            "-d" => debug = true,
            flag if flag.starts_with('-') => {
                eprintln!("seff: unknown option {flag}");
                return usage();
            }
            _ => ids.push(arg),
        }
    }
    let [id] = ids.as_slice() else {
        return usage();
    };
    match report(id, debug) {
        Ok(Some(text)) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Ok(None) => {
            eprintln!("Job not found.");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("seff: error: {}", e.message);
            ExitCode::from(1)
        }
    }
}

fn usage() -> ExitCode {
    print!("{USAGE}");
    ExitCode::from(1)
}

/// seff's report on job `id` (`N`, `N_T` or a step id, read as its
/// job), or `None` where there is no such job of the user's to see.
fn report(id: &str, debug: bool) -> Result<Option<String>, CliError> {
    let config = load_config()?;
    let job_id = id.split('.').next().unwrap_or(id).to_string();
    let filter = job_filter(&[job_id], &[], &[], &[], &[])?;
    let (views, now) = accounting_views("seff", &config, filter)?;
    let Some(job) = views.iter().find(|v| v.step.is_none()) else {
        return Ok(None);
    };
    let steps: Vec<JobView> = views
        .iter()
        .filter(|v| v.step.is_some() && v.job.id == job.job.id)
        .cloned()
        .collect();
    let group = nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(job.job.gid))
        .ok()
        .flatten()
        .map_or_else(|| job.job.gid.to_string(), |g| g.name);
    let mut text = String::new();
    if debug {
        let e = efficiency::Efficiency::of(job, &steps, now);
        text.push_str(&format!(
            "Slurm data: JobID User Group State Ncpus Nnodes Ntasks Reqmem Cput Walltime Mem ExitStatus\n\
             Slurm data: {} {} {group} {} {} {} {} {} {} {} {} {}\n\n",
            job.job.id,
            job.job.user,
            job.job.state.name(),
            e.cpus,
            e.nodes,
            e.memory_tasks,
            e.requested_kib,
            e.cpu_secs,
            e.wall_secs,
            e.memory_kib,
            job.job.exit.map_or(0, |x| x.code)
        ));
    }
    text.push_str(&efficiency::seff(
        job,
        &steps,
        (&group, &config.node_name),
        now,
    ));
    Ok(Some(text))
}
