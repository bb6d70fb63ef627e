//! `ysacct`: accounting data for finished and unfinished jobs.

use clap::Parser;

use super::{job_filter, load_config, print, print_listing, query_rows, CliError, CliResult};
use crate::model::units;
use crate::proto::Query;
use crate::report;

const DEFAULT_FORMAT: &str = "JobID,JobName,User,Account,State,ExitCode,Elapsed,AllocTRES";

#[derive(Parser, Debug)]
#[command(
    name = "ysacct",
    version,
    infer_long_args = true,
    about = "Show accounting data for jobs",
    long_about = "Show accounting data for jobs from ysched's database: finished, running and pending. \
                  Without -j or -S, jobs active since midnight today are shown, as sacct does; \
                  without -u, -a or -j, only your own.",
    after_help = "Fields (-o): JobID JobIDRaw JobName User UID Account QOS State ExitCode Submit Eligible \
                  Start End Elapsed ElapsedRaw Timelimit AllocTRES ReqTRES AllocCPUS ReqCPUS ReqMem \
                  AllocGPUS NodeList NNodes Reason Restarts Preemptions GPUUtil GPUUtilMax GPUMemMax GPULowTime GPUIdleHours GPUEach GPUVerdict MaxRSS AveRSS MaxRSSTask \
                  TRESUsageInTot Billing TotalCPU UserCPU SystemCPU AveCPU CPUTime CPUTimeRAW MailType Cgroup WorkDir StdOut StdErr \
                  Comment Priority \
                  Partition. Add %N to a field for a fixed width: JobName%30."
)]
pub struct Args {
    /// Only these jobs (comma-separated, repeatable)
    #[arg(short = 'j', long = "jobs", value_name = "ID[,ID]")]
    pub jobs: Vec<String>,
    /// Only jobs of these users
    #[arg(short = 'u', long = "user", value_name = "USER[,USER]")]
    pub users: Vec<String>,
    /// Jobs of all users
    #[arg(short = 'a', long = "allusers")]
    pub all_users: bool,
    /// Only jobs of these accounts
    #[arg(short = 'A', long = "accounts", value_name = "ACCOUNT[,ACCOUNT]")]
    pub accounts: Vec<String>,
    /// Only jobs with these names
    #[arg(long = "name", value_name = "NAME[,NAME]")]
    pub names: Vec<String>,
    /// Only jobs in these states
    #[arg(short = 's', long = "state", value_name = "STATE[,STATE]")]
    pub states: Vec<String>,
    /// Jobs active at or after this time (YYYY-MM-DD[THH:MM[:SS]], HH:MM, now-N[units])
    #[arg(short = 'S', long = "starttime", value_name = "TIME")]
    pub start: Option<String>,
    /// Jobs submitted at or before this time
    #[arg(short = 'E', long = "endtime", value_name = "TIME")]
    pub end: Option<String>,
    /// Allocations only: leave out the jobs' steps (each srun in a job, listed as JOBID.STEP)
    #[arg(short = 'X', long = "allocations")]
    pub allocations: bool,
    /// With the steps, each job's batch step (N.batch) and extern step (N.extern) too, as Slurm's sacct lists them
    #[arg(long)]
    pub batch_steps: bool,
    /// Leave out the header
    #[arg(short = 'n', long)]
    pub noheader: bool,
    /// Output fields separated by '|', with a trailing '|'
    #[arg(short = 'p', long)]
    pub parsable: bool,
    /// Output fields separated by '|', without a trailing '|'
    #[arg(short = 'P', long)]
    pub parsable2: bool,
    /// Fields to show (see below)
    #[arg(short = 'o', long, value_name = "FIELDS")]
    pub format: Option<String>,
    /// Print the jobs as JSON
    #[arg(long, conflicts_with_all = ["format", "parsable", "parsable2", "noheader"])]
    pub json: bool,
    #[command(flatten)]
    pub clusters: super::Clusters,
    /// Called as Slurm's sacct: `Reason` is Slurm's one-word code, and
    /// `--json` Slurm's layout, each job's steps in it.
    #[arg(skip)]
    pub as_slurm: bool,
}

pub fn run(args: Args) -> CliResult {
    let config = load_config()?;
    let mut columns = report::parse_sacct_format(args.format.as_deref().unwrap_or(DEFAULT_FORMAT))
        .map_err(|e| CliError::usage(e.to_string()))?;
    if args.as_slurm {
        report::with_reason_codes(&mut columns);
    }
    // As sacct: your own jobs unless -a, -u or job ids say otherwise.
    let mut users = args.users.clone();
    if users.is_empty() && !args.all_users && args.jobs.is_empty() {
        users.push(super::current_user_name());
    }
    let mut filter = job_filter(
        &args.jobs,
        &users,
        &args.accounts,
        &args.names,
        &args.states,
    )?;
    let now = jiff::Zoned::now();
    let time = |t: &str, flag: &str| {
        units::parse_time_filter(t, now.clone())
            .map_err(|e| CliError::usage(format!("{flag}: {e}")))
    };
    filter.start = match &args.start {
        Some(s) => Some(time(s, "--starttime")?),
        None if filter.job_ids.is_empty() => Some(time("today", "--starttime")?),
        None => None,
    };
    filter.end = args
        .end
        .as_deref()
        .map(|e| time(e, "--endtime"))
        .transpose()?;
    let fields = (!args.json).then(|| report::fields_of(&columns));
    let query = Query::Accounting {
        filter,
        fields,
        steps: !args.allocations && (!args.json || args.as_slurm),
        batch_steps: args.batch_steps,
    };
    let mut rows = match query_rows("ysacct", &config, query)? {
        Ok(rows) => rows,
        Err(crate::proto::Reply::Jobs { jobs, .. }) if args.as_slurm => {
            let list = crate::report::slurm_json::accounting_jobs(&jobs);
            let answer = crate::report::slurm_json::answer(
                serde_json::json!({ "jobs": list }),
                "sacct",
                &[],
            );
            return print(&format!("{}\n", serde_json::to_string_pretty(&answer)?));
        }
        Err(reply) => return print_listing(reply, |_| String::new()),
    };
    // Printed a part at a time: a month of a million jobs streams through.
    let mut header = !args.noheader;
    let mut widths = None;
    loop {
        let mut part = Vec::with_capacity(PART);
        while part.len() < PART {
            match rows.next_row()? {
                Some(row) => part.push(row),
                None => break,
            }
        }
        let last = part.len() < PART;
        if part.is_empty() && !header {
            return Ok(());
        }
        let text = if args.parsable || args.parsable2 {
            report::render_parsable(&columns, part, header, args.parsable)
        } else {
            let (text, fitted) = report::render_table_fitted(&columns, part, header, widths.take());
            widths = Some(fitted);
            text
        };
        print(&text)?;
        header = false;
        if last {
            return Ok(());
        }
    }
}

/// Rows per printed part; a table's widths fit the first part.
const PART: usize = 1_000;
