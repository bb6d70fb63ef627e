//! `ysqueue`: pending and running jobs, and why the pending ones wait.

use clap::Parser;

use super::{job_filter, load_config, print, print_listing, query_rows, CliError, CliResult};
use crate::proto::Query;
use crate::report::{self, Column, Field, SqueueFormat};

#[derive(Parser, Debug)]
#[command(
    name = "ysqueue",
    version,
    infer_long_args = true,
    disable_help_flag = true,
    about = "Show pending and running jobs",
    long_about = "Show pending and running jobs, running first, then pending ones in the order they \
                  would start, each with the reason it waits.",
    after_help = "Format codes (-o): %i id  %j name  %u user  %a account  %q qos  %t state (compact)  \
                  %T state  %M time used  %l time limit  %L time left  %D nodes  %N node  %R node or \
                  (reason)  %r reason  %b GPUs (TRES per node)  %C CPUs  %m memory  %Q priority  %y nice  \
                  %V submit time  %S start time  %e end time  %Z work dir  %k comment  %P partition.\n\
                  Write %.N for a right-aligned column N wide, %N for a left-aligned one."
)]
pub struct Args {
    /// Only jobs of these users
    #[arg(short = 'u', long = "user", value_name = "USER[,USER]")]
    pub users: Vec<String>,
    /// Only your own jobs
    #[arg(long)]
    pub me: bool,
    /// Only jobs of these accounts
    #[arg(short = 'A', long = "account", value_name = "ACCOUNT[,ACCOUNT]")]
    pub accounts: Vec<String>,
    /// Only these jobs
    #[arg(short = 'j', long = "jobs", value_name = "ID[,ID]")]
    pub jobs: Vec<String>,
    /// Only jobs in these states (PD, R, CG, CD, ... or full names; all); final states list jobs that ended in the last min_job_age_secs
    #[arg(short = 't', long = "states", value_name = "STATE[,STATE]")]
    pub states: Vec<String>,
    /// Only jobs with these names
    #[arg(short = 'n', long = "name", value_name = "NAME[,NAME]")]
    pub names: Vec<String>,
    /// Leave out the header line
    #[arg(short = 'h', long)]
    pub noheader: bool,
    /// Output format with squeue's % codes (see below)
    #[arg(short = 'o', long, value_name = "FORMAT")]
    pub format: Option<String>,
    /// Output format with squeue's field names: FIELD[:[.][SIZE][SUFFIX]],... (squeue --helpformat lists them)
    #[arg(
        short = 'O',
        long = "Format",
        value_name = "FIELDS",
        conflicts_with = "format"
    )]
    pub long_format: Option<String>,
    /// Show each job's priority and, for pending jobs, its weighted factors (as sprio)
    #[arg(long)]
    pub priority: bool,
    /// Show pending jobs with the time each is expected to start: the
    /// reservation the scheduler holds for it, or its --begin time (else N/A)
    #[arg(long, conflicts_with = "priority")]
    pub start: bool,
    /// Print the jobs as JSON
    #[arg(long, conflicts_with_all = ["format", "noheader"])]
    pub json: bool,
    /// List the running steps of the jobs (each srun in them) instead: STEPID NAME PARTITION USER TIME NODELIST; -o takes squeue's step letters (%i step, %j name, %A tasks, %P, %u, %U, %M, %l, %S, %N)
    #[arg(short = 's', long, conflicts_with_all = ["priority", "start", "json"])]
    pub steps: bool,
    #[command(flatten)]
    pub clusters: super::Clusters,
    /// Called as Slurm's squeue: `%r` is Slurm's one-word code, and
    /// `--json` Slurm's layout.
    #[arg(skip)]
    pub as_slurm: bool,
    /// Accepted for Slurm tools: every job is shown to whoever may see it
    #[arg(short = 'a', long = "all", hide_short_help = true)]
    pub all: bool,
    /// A line for each pending task of an array, not one for a run of them (12_[3-9])
    #[arg(short = 'r', long)]
    pub array: bool,
    /// Print help
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
}

pub fn run(args: Args) -> CliResult {
    let config = load_config()?;
    let mut users = args.users.clone();
    if args.me {
        users.push(super::current_user_name());
    }
    let mut states = args.states.clone();
    if args.start && states.is_empty() {
        // As squeue --start: the jobs that have a start to come.
        states.push("PENDING".into());
    }
    let filter = job_filter(&args.jobs, &users, &args.accounts, &args.names, &states)?;
    if args.steps {
        let format = match args.format.as_deref() {
            Some(f) => Some(step_format(f)?),
            None => None,
        };
        return running_steps(&config, filter, format, !args.noheader);
    }
    let format = match (&args.format, &args.long_format) {
        (Some(f), _) => {
            Some(report::parse_squeue_format(f).map_err(|e| CliError::usage(e.to_string()))?)
        }
        (None, Some(f)) => {
            Some(report::squeue_long::parse(f).map_err(|e| CliError::usage(e.to_string()))?)
        }
        (None, None) => None,
    };
    let mut format = format.unwrap_or_else(|| default_format(args.priority, args.start));
    if args.as_slurm {
        for (_, column) in &mut format.parts {
            report::with_reason_codes(std::slice::from_mut(column));
        }
    }
    let fields = (!args.json).then(|| format.fields());
    let mut rows = match query_rows(
        "ysqueue",
        &config,
        Query::Queue {
            filter,
            fields,
            unfolded: args.array,
        },
    )? {
        Ok(rows) => rows,
        Err(crate::proto::Reply::Jobs { jobs, .. }) if args.as_slurm => {
            let mut text =
                String::from_utf8_lossy(&crate::report::slurm_json::jobs_answer(&jobs, "squeue"))
                    .into_owned();
            text.push('\n');
            return print(&text);
        }
        Err(reply) => return print_listing(reply, |_| String::new()),
    };
    // Columns fit all rows, so all are read first (as squeue does).
    let table = rows.read_all()?;
    print(&report::render_squeue(
        &format,
        table.rows().collect(),
        !args.noheader,
    ))
}

fn default_format(priority: bool, start: bool) -> SqueueFormat {
    let mut fields = vec![
        Field::JobId,
        Field::Name,
        Field::User,
        Field::Account,
        Field::StateCompact,
        Field::TimeUsed,
        Field::Gpus,
    ];
    if start {
        fields.insert(5, Field::Start);
        fields.remove(6); // time used: none yet
    }
    if priority {
        fields.extend([
            Field::Qos,
            Field::Priority,
            Field::PrioAge,
            Field::PrioFairshare,
            Field::PrioQos,
            Field::PrioSize,
            Field::Nice,
        ]);
    }
    fields.push(Field::NodeListReason);
    let last = fields.len() - 1;
    SqueueFormat {
        parts: fields
            .into_iter()
            .enumerate()
            .map(|(i, f)| {
                let mut column = Column::auto(f);
                if i == last {
                    column.width = report::Width::Natural;
                }
                (
                    if i == 0 {
                        String::new()
                    } else {
                        "  ".to_string()
                    },
                    column,
                )
            })
            .collect(),
        trailer: String::new(),
    }
}

/// squeue's step format (`-s -o`): its job letters, but `%A` is the
/// step's number of tasks, as squeue reads it for steps.
fn step_format(format: &str) -> Result<SqueueFormat, CliError> {
    let mut format =
        report::parse_squeue_format(format).map_err(|e| CliError::usage(e.to_string()))?;
    for (_, column) in &mut format.parts {
        match column.field {
            Field::JobIdRaw => {
                column.field = Field::NTasks;
                column.header = "TASKS".into();
            }
            Field::JobId => column.header = "STEPID".into(),
            _ => {}
        }
    }
    Ok(format)
}

/// `-s -o`: the running steps of `views` in `format`.
fn steps_in_format(
    views: &[crate::report::view::JobView],
    format: &SqueueFormat,
    (now, header): (i64, bool),
) -> String {
    use crate::model::job::JobState;
    let rows: Vec<Vec<String>> = views
        .iter()
        .filter(|v| v.step.is_some() && v.job.state == JobState::Running)
        .map(|v| {
            format
                .fields()
                .into_iter()
                .map(|f| f.value(v, now))
                .collect()
        })
        .collect();
    report::render_squeue(format, rows, header)
}

/// `-s`: the steps running in the running jobs `filter` matches, as
/// squeue lists them (in `format`, when given).
fn running_steps(
    config: &crate::config::Config,
    mut filter: crate::proto::JobFilter,
    format: Option<SqueueFormat>,
    header: bool,
) -> CliResult {
    use crate::model::job::JobState;
    filter.states = vec![JobState::Running];
    if let Some(format) = format {
        let reply = crate::cli::query(
            "ysqueue",
            config,
            Query::Accounting {
                filter,
                fields: None,
                steps: true,
                batch_steps: false,
            },
        )?;
        let crate::proto::Reply::Jobs { jobs, now } = reply else {
            return print_listing(reply, |_| String::new());
        };
        return print(&steps_in_format(&jobs, &format, (now, header)));
    }
    let fields = vec![
        Field::JobId,
        Field::Name,
        Field::Partition,
        Field::User,
        Field::TimeUsed,
        Field::NodeList,
        Field::State,
    ];
    let query = Query::Accounting {
        filter,
        fields: Some(fields),
        steps: true,
        batch_steps: false,
    };
    let mut rows = match query_rows("ysqueue", config, query)? {
        Ok(rows) => rows,
        Err(reply) => return print_listing(reply, |_| String::new()),
    };
    let table = rows.read_all()?;
    let mut lines: Vec<Vec<&str>> = Vec::new();
    if header {
        lines.push(vec![
            "STEPID",
            "NAME",
            "PARTITION",
            "USER",
            "TIME",
            "NODELIST",
        ]);
    }
    lines.extend(
        table
            .rows()
            .filter(|r| r.cell(0).contains('.') && r.cell(6) == JobState::Running.name())
            .map(|r| (0..6).map(|i| r.cell(i)).collect()),
    );
    print(&report::table::plain(&lines))
}
