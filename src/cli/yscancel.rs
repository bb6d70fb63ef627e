//! `yscancel`: cancel jobs, or send them a signal.

use clap::Parser;

use super::{ask, load_config, parse_job_ids, parse_states, CliError, CliResult};
use crate::proto::{Control, JobSelector, Reply, Request, SignalTo};

#[derive(Parser, Debug)]
#[command(
    name = "yscancel",
    version,
    about = "Cancel jobs, or send them a signal",
    long_about = "Cancel pending or running jobs, or with --signal send running jobs a signal and let \
                  them run. A running job gets SIGTERM, and SIGKILL after the configured grace time \
                  (kill_wait). Users may cancel their own jobs; root and the config's admins any job.",
    after_help = "Examples:\n  yscancel 17 18\n  yscancel -u alice -t PENDING\n  yscancel --signal USR1 17"
)]
pub struct Args {
    /// Job ids (space- or comma-separated); ID_TASK one array task; ID.STEP one running step
    #[arg(value_name = "JOBID")]
    pub jobs: Vec<String>,
    /// Only jobs of this user
    #[arg(short = 'u', long, value_name = "USER")]
    pub user: Option<String>,
    /// Only jobs of this account
    #[arg(short = 'A', long, value_name = "ACCOUNT")]
    pub account: Option<String>,
    /// Only jobs with this name
    #[arg(short = 'n', long = "name", value_name = "NAME")]
    pub name: Option<String>,
    /// Only jobs in these states (PENDING, RUNNING)
    #[arg(short = 't', long = "state", value_name = "STATE[,STATE]")]
    pub states: Vec<String>,
    /// Send this signal instead of cancelling (a name like USR1 or a number): to every process of the job (as scancel: to what its batch shell started, its steps)
    #[arg(short = 's', long, value_name = "SIGNAL")]
    pub signal: Option<String>,
    /// With --signal: to the batch shell alone
    #[arg(short = 'b', long, conflicts_with = "full")]
    pub batch: bool,
    /// With --signal: to every process of the job, the batch shell too
    #[arg(short = 'f', long)]
    pub full: bool,
    /// Report each job acted on
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

pub fn run(args: Args) -> CliResult {
    cancel(args, "yscancel", false)
}

/// As Slurm's scancel: a job that has already ended is no error (said
/// with `-v` only), so that a tool cancelling workers that just finished
/// does not fail.
pub fn run_as_scancel(args: Args) -> CliResult {
    cancel(args, "scancel", true)
}

fn cancel(mut args: Args, command: &str, ended_is_done: bool) -> CliResult {
    super::shield_from_own_jobs_stop();
    let (steps, jobs) = step_ids(&args.jobs)?;
    args.jobs = jobs;
    let signal = args.signal.as_deref().map(parse_signal).transpose()?;
    // Slurm's scancel signals the steps, the batch shell only when asked.
    let to = if args.batch {
        SignalTo::BatchShell
    } else if args.full || !ended_is_done {
        SignalTo::Job
    } else {
        SignalTo::Steps
    };
    let mut failed = false;
    if !steps.is_empty() {
        failed = !cancel_steps(&steps, signal, command)?;
        let filtered = args.user.is_some()
            || args.account.is_some()
            || args.name.is_some()
            || !args.states.is_empty();
        if args.jobs.is_empty() && !filtered {
            return if failed {
                Err(CliError::failed(""))
            } else {
                Ok(())
            };
        }
    }
    let selector = JobSelector {
        job_ids: parse_job_ids(&args.jobs)?,
        user: args.user.clone(),
        account: args.account.clone(),
        name: args.name.clone(),
        states: parse_states(&args.states)?,
    };
    if selector.is_empty() {
        return Err(CliError::usage(
            "no job identification provided: give job ids, or -u, -A, -n or -t",
        ));
    }
    let config = load_config()?;
    let reply = ask(
        &config,
        Request::Control(Control::Cancel {
            selector,
            signal,
            to,
        }),
    )?;
    let outcomes = match reply {
        Reply::Control { outcomes, .. } => outcomes,
        Reply::Rejected { error } => return Err(CliError::failed(error)),
        other => {
            return Err(CliError::failed(format!(
                "unexpected reply from ysctld: {other:?}"
            )))
        }
    };
    for o in &outcomes {
        match &o.error {
            Some(e) if ended_is_done && o.already_ended && args.verbose => {
                eprintln!("{command}: {e}");
            }
            Some(_) if ended_is_done && o.already_ended => {}
            Some(e) => {
                eprintln!("{command}: error: {e}");
                failed = true;
            }
            None if args.verbose => {
                let what = if args.signal.is_some() {
                    "signalled"
                } else {
                    "cancelled"
                };
                eprintln!("{command}: job {} {what}", o.job_id);
            }
            None => {}
        }
    }
    if failed {
        Err(CliError::failed(""))
    } else {
        Ok(())
    }
}

/// A step named on the command line: its job and number.
type StepId = (u64, u32);

/// The steps named (`12.3`), apart from the other words (job ids,
/// arrays: `12`, `12_3`, `12_[1-3]`), which keep their commas.
fn step_ids(words: &[String]) -> Result<(Vec<StepId>, Vec<String>), CliError> {
    let (mut steps, mut rest) = (Vec::new(), Vec::new());
    for word in words {
        if word.contains('[') || !word.contains('.') {
            rest.push(word.clone());
            continue;
        }
        for part in word.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.split_once('.') {
                None => rest.push(part.to_string()),
                Some((job, step)) => {
                    let parsed = job.parse::<u64>().ok().zip(step.parse::<u32>().ok());
                    let Some(id) = parsed else {
                        return Err(CliError::usage(format!(
                            "'{part}' is not a job step: give JOBID.STEP with numbers (12.0)"
                        )));
                    };
                    steps.push(id);
                }
            }
        }
    }
    Ok((steps, rest))
}

/// Signals each step's srun (SIGTERM unless `signal`), which passes it
/// on to the step's tasks; whether all went.
fn cancel_steps(
    steps: &[(u64, u32)],
    signal: Option<i32>,
    command: &str,
) -> Result<bool, CliError> {
    let config = load_config()?;
    let mut all = true;
    for &(job_id, step) in steps {
        let control = Control::CancelStep {
            job_id,
            step,
            signal,
        };
        match ask(&config, Request::Control(control))? {
            Reply::Control { outcomes, .. } => {
                for e in outcomes.iter().filter_map(|o| o.error.as_ref()) {
                    eprintln!("{command}: error: {e}");
                    all = false;
                }
            }
            Reply::Rejected { error } => {
                eprintln!("{command}: error: {error}");
                all = false;
            }
            other => {
                return Err(CliError::failed(format!(
                    "unexpected reply from ysctld: {other:?}"
                )))
            }
        }
    }
    Ok(all)
}

/// `TERM`, `SIGTERM`, `term` or `15`.
pub fn parse_signal(text: &str) -> Result<i32, CliError> {
    crate::model::units::parse_signal(text).map_err(|e| CliError::usage(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::parse_signal;

    #[test]
    fn signal_names() {
        assert_eq!(parse_signal("USR1").unwrap(), libc::SIGUSR1);
        assert_eq!(parse_signal("sigterm").unwrap(), libc::SIGTERM);
        assert_eq!(parse_signal("9").unwrap(), libc::SIGKILL);
        assert!(parse_signal("NOPE").is_err());
        assert!(parse_signal("999").is_err());
    }
}
