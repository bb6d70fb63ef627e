//! `yscontrol`: hold, release, show and reload.

use clap::{Parser, Subcommand};

use super::{ask, load_config, parse_job_ids, print, query, CliError, CliResult};
use crate::model::units;
use crate::proto::{Control, Query, Reply, Request};
use crate::report::view::JobView;

#[derive(Parser, Debug)]
#[command(
    name = "yscontrol",
    version,
    about = "Control jobs and the ysched daemon"
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Keep pending jobs from starting (an admin's hold can only be released by an admin)
    Hold {
        #[arg(value_name = "JOBID", required = true)]
        jobs: Vec<String>,
    },
    /// Let held jobs start again
    Release {
        #[arg(value_name = "JOBID", required = true)]
        jobs: Vec<String>,
    },
    /// Approve jobs held for approval (coordinators of their account, admins)
    Approve {
        #[arg(value_name = "JOBID", required = true)]
        jobs: Vec<String>,
    },
    /// Change jobs: qos=QOS (pending), timelimit=TIME, priority=N (pending); users may lower, admins also raise
    Update {
        /// Job ids, and KEY=VALUE changes (Slurm's JobId=ID is accepted)
        #[arg(value_name = "JOBID|KEY=VALUE", required = true)]
        words: Vec<String>,
    },
    /// Report that a running job saved a checkpoint now (default: $YS_JOB_ID, from inside a job)
    Checkpoint {
        #[arg(value_name = "JOBID")]
        jobs: Vec<String>,
    },
    /// Stop running jobs and queue them again with their ids (SIGTERM first, as for a cancel)
    Requeue {
        #[arg(value_name = "JOBID", required = true)]
        jobs: Vec<String>,
    },
    /// Freeze running jobs where they are; they keep their GPUs (admins)
    Suspend {
        #[arg(value_name = "JOBID", required = true)]
        jobs: Vec<String>,
    },
    /// Let suspended jobs run on, or with `gpu`, put drained GPUs back in service (admins)
    Resume {
        /// Job ids, or `gpu` and GPU indices (yscontrol resume gpu 2, or gpu gpu02:1)
        #[arg(value_name = "JOBID|gpu GPU", required = true)]
        jobs: Vec<String>,
    },
    /// Take GPUs out of service (admins): no job starts on them; jobs there finish first
    Drain {
        /// GPU indices, as ysinfo shows them (2, or 2,3); on a pool's other node NODE:GPU (gpu02:1,3)
        #[arg(value_name = "GPU", required = true)]
        gpus: Vec<String>,
        /// Why, for ysinfo and the audit log
        #[arg(long, value_name = "TEXT", required = true)]
        reason: String,
    },
    /// Administer the pool's nodes: add, remove, drain, resume (admins)
    Node {
        #[command(subcommand)]
        action: NodeAction,
    },
    /// Container images on the nodes: pull one ahead of the jobs that need it (admins)
    Image {
        #[command(subcommand)]
        action: ImageAction,
    },
    /// Show a job in full, or the audit log
    Show {
        #[command(subcommand)]
        what: Show,
    },
    /// Re-read the configuration file (admins; a file with errors is refused and nothing changes)
    Reload,
    /// Hand the lead to the standby controller (admins; [standby] in ysched.toml): this controller stops, gives its etcd lease up and exits 75 (its service starts it again as the standby); the running jobs run on and are adopted
    Takeover,
}

#[derive(Subcommand, Debug)]
pub enum NodeAction {
    /// Let a server join the pool: prints the line to run there (ysnoded with a one-time token), to which --config FILE is added
    Add {
        #[arg(value_name = "NODE")]
        node: String,
    },
    /// Take a node out of the pool; its certificate is refused from then on
    Remove {
        #[arg(value_name = "NODE")]
        node: String,
    },
    /// Take a node out of service: no job starts there; jobs there finish first
    Drain {
        #[arg(value_name = "NODE")]
        node: String,
        /// Why, for ysinfo and the audit log
        #[arg(long, value_name = "TEXT", required = true)]
        reason: String,
    },
    /// Put a drained node back in service
    Resume {
        #[arg(value_name = "NODE")]
        node: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum ImageAction {
    /// Make IMAGE present on every node that runs containers (or one), once however many ask; waits until it is
    Pull {
        #[arg(value_name = "IMAGE")]
        image: String,
        /// Only on this node
        #[arg(long, value_name = "NAME")]
        node: Option<String>,
        /// Start the pull and return at once
        #[arg(long)]
        no_wait: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum Show {
    /// The nodes: their GPUs and their state, CPUs, memory, isolation, as KEY=VALUE pairs
    Node {
        /// Only this node
        #[arg(value_name = "NODE")]
        name: Option<String>,
    },
    /// The configuration in effect, and what ysctld detected, as KEY = VALUE lines
    Config,
    /// One job, as KEY=VALUE pairs
    Job {
        #[arg(value_name = "JOBID")]
        job: String,
    },
    /// The audit log (admins): preemptions, uses of restricted QoS, actions on others' jobs, reloads
    Audit {
        /// How many of the latest entries
        #[arg(short = 'n', long, value_name = "N", default_value_t = 100)]
        lines: u32,
    },
}

pub fn run(args: Args) -> CliResult {
    let config = load_config()?;
    match args.command {
        Command::Hold { jobs } => control(
            &config,
            Control::Hold {
                job_ids: parse_job_ids(&jobs)?,
            },
        ),
        Command::Release { jobs } => control(
            &config,
            Control::Release {
                job_ids: parse_job_ids(&jobs)?,
            },
        ),
        Command::Approve { jobs } => control(
            &config,
            Control::Approve {
                job_ids: parse_job_ids(&jobs)?,
            },
        ),
        Command::Update { words } => {
            let (jobs, changes) = parse_update(&words)?;
            control(
                &config,
                Control::Update {
                    job_ids: parse_job_ids(&jobs)?,
                    changes,
                },
            )
        }
        Command::Checkpoint { jobs } => checkpoint(&config, jobs),
        Command::Requeue { jobs } => {
            super::shield_from_own_jobs_stop();
            control(
                &config,
                Control::Requeue {
                    job_ids: parse_job_ids(&jobs)?,
                },
            )
        }
        Command::Suspend { jobs } => control(
            &config,
            Control::Suspend {
                job_ids: parse_job_ids(&jobs)?,
            },
        ),
        Command::Resume { jobs } if jobs.first().is_some_and(|w| w.eq_ignore_ascii_case("gpu")) => {
            let (node, gpus) = parse_gpus(&jobs[1..])?;
            control(&config, Control::Undrain { gpus, node })
        }
        Command::Resume { jobs } => control(
            &config,
            Control::Resume {
                job_ids: parse_job_ids(&jobs)?,
            },
        ),
        Command::Drain { gpus, reason } => drain(&config, &gpus, &reason),
        Command::Node {
            action: NodeAction::Drain { node, reason },
        } => control(
            &config,
            Control::NodeDrain {
                node,
                reason: one_line_reason(&reason)?,
            },
        ),
        Command::Node {
            action: NodeAction::Resume { node },
        } => control(&config, Control::NodeResume { node }),
        Command::Node {
            action: NodeAction::Add { node },
        } => control(&config, Control::NodeAdd { node }),
        Command::Node {
            action: NodeAction::Remove { node },
        } => control(&config, Control::NodeRemove { node }),
        Command::Image {
            action:
                ImageAction::Pull {
                    image,
                    node,
                    no_wait,
                },
        } => pull_image(&config, Control::ImagePull { image, node }, !no_wait),
        Command::Reload => control(&config, Control::Reload),
        Command::Takeover => control(&config, Control::Takeover),
        Command::Show { what } => show(&config, what),
    }
}

/// `yscontrol show WHAT`.
fn show(config: &crate::config::Config, what: Show) -> CliResult {
    match what {
        Show::Node { name } => show_nodes(config, name.as_deref(), false),
        Show::Config => {
            let nodes = super::ysinfo::nodes_info(config).ok();
            print(&show_config(config, nodes.as_ref().and_then(|n| n.first())))
        }
        Show::Audit { lines } => show_audit(config, lines),
        Show::Job { job } => show_one_job(config, &job, JobLayout::default()),
    }
}

/// `yscontrol checkpoint [JOB...]`: the jobs named, or the one it runs in.
fn checkpoint(config: &crate::config::Config, mut jobs: Vec<String>) -> CliResult {
    if jobs.is_empty() {
        let own = std::env::var("YS_JOB_ID")
            .or_else(|_| std::env::var("SLURM_JOB_ID"))
            .map_err(|_| {
                CliError::usage("give a job id (or run it inside a job, where YS_JOB_ID is set)")
            })?;
        jobs.push(own);
    }
    control(
        config,
        Control::Checkpoint {
            job_ids: parse_job_ids(&jobs)?,
        },
    )
}

/// A `--reason`: one line of 1 to 200 characters.
fn one_line_reason(reason: &str) -> Result<String, CliError> {
    let reason = reason.trim().to_string();
    if reason.is_empty() || reason.chars().count() > 200 || reason.chars().any(char::is_control) {
        return Err(CliError::usage(
            "--reason: say why in one line of 1 to 200 characters",
        ));
    }
    Ok(reason)
}

/// `yscontrol drain GPU... --reason WHY`.
fn drain(config: &crate::config::Config, gpus: &[String], reason: &str) -> CliResult {
    let reason = one_line_reason(reason)?;
    let (node, gpus) = parse_gpus(gpus)?;
    control(config, Control::Drain { gpus, reason, node })
}

/// `yscontrol show audit`: the last actions, oldest first.
fn show_audit(config: &crate::config::Config, lines: u32) -> CliResult {
    match query("yscontrol", config, Query::Audit { limit: lines })? {
        Reply::Audit { rows } => {
            let text: String = rows
                .iter()
                .map(|r| {
                    // The channel where it is not a command here.
                    let via = match r.channel {
                        crate::proto::Channel::Cli => String::new(),
                        other => format!("via={} ", other.as_str()),
                    };
                    // A row is one line: a line break in what it quotes
                    // (a name a stranger sent) cannot forge another row.
                    let one_line = |t: &str| crate::report::escape_controls(t, false).into_owned();
                    format!(
                        "{} {} {} {via}{}{}\n",
                        crate::model::units::format_timestamp(r.time),
                        one_line(&r.actor),
                        one_line(&r.action),
                        r.job_id.map(|j| format!("job={j} ")).unwrap_or_default(),
                        one_line(&r.detail)
                    )
                })
                .collect();
            print(&text)
        }
        Reply::Rejected { error } => Err(CliError::failed(error)),
        other => Err(CliError::failed(format!(
            "unexpected reply from ysctld: {other:?}"
        ))),
    }
}

/// `show node [NAME]`: every node, or the one named; `one_line` puts each
/// node's record on one line (scontrol's `-o`).
pub fn show_nodes(config: &crate::config::Config, name: Option<&str>, one_line: bool) -> CliResult {
    let nodes = super::ysinfo::nodes_info(config)?;
    let shown: Vec<_> = nodes
        .iter()
        .filter(|n| name.is_none_or(|x| x == n.name))
        .collect();
    if shown.is_empty() {
        return Err(CliError::failed(format!(
            "node {} not found",
            name.unwrap_or_default()
        )));
    }
    print(
        &shown
            .iter()
            .map(|n| show_node(n, one_line))
            .collect::<String>(),
    )
}

/// How `show job` lays a record out: Slurm's `scontrol -o` puts each on
/// one line, and `-d` adds where it runs in detail.
#[derive(Clone, Copy, Debug, Default)]
pub struct JobLayout {
    pub one_line: bool,
    pub details: bool,
    /// Slurm's JSON (`scontrol --json`): the records as squeue --json
    /// gives them.
    pub json: bool,
}

/// `scontrol show jobs`: every job the controller holds, as slurmctld
/// does: the active ones and those that ended within `min_job_age_secs`
/// (Slurm's MinJobAge), each record followed by one blank line.
pub fn show_all_jobs(config: &crate::config::Config, layout: JobLayout) -> CliResult {
    let all = Query::Queue {
        filter: crate::proto::JobFilter {
            states: crate::model::job::JobState::ALL.to_vec(),
            ..Default::default()
        },
        fields: None,
        unfolded: false,
    };
    match query("scontrol", config, all)? {
        Reply::Jobs { jobs, .. } if jobs.is_empty() => print("No jobs in the system\n"),
        Reply::Jobs { jobs, now } => print(&show_records(&jobs, now, layout)),
        Reply::Rejected { error } => Err(CliError::failed(error)),
        other => Err(CliError::failed(format!(
            "unexpected reply from ysctld: {other:?}"
        ))),
    }
}

/// `yscontrol show job ID`.
pub fn show_one_job(config: &crate::config::Config, job: &String, layout: JobLayout) -> CliResult {
    let ids = parse_job_ids(std::slice::from_ref(job))?;
    let [id] = ids.as_slice() else {
        return Err(CliError::usage("give one job id"));
    };
    // A task is read with its array: whether it is still a record of
    // its own depends on its siblings.
    let asked = match *id {
        crate::array::JobRef::Task(array, _) => crate::array::JobRef::Id(array),
        other => other,
    };
    let task = match *id {
        crate::array::JobRef::Task(_, task) => Some(task),
        crate::array::JobRef::Id(_) => None,
    };
    match query("yscontrol", config, Query::Job(asked))? {
        Reply::Jobs { jobs, now } => {
            let mut shown = records(&jobs);
            if let Some(task) = task {
                shown.retain(|r| r.holds(task));
            }
            if shown.is_empty() {
                return Err(CliError::failed(format!(
                    "job {id} does not exist (Invalid job id specified)"
                )));
            }
            print(&text_of(&shown, now, layout))
        }
        Reply::Rejected { error } => Err(CliError::failed(error)),
        // A pending array task cancelled is gone from its array's record.
        _ => Err(CliError::failed(format!(
            "job {id} does not exist (Invalid job id specified)"
        ))),
    }
}

/// A record `scontrol show job` prints: a job, or the pending tasks of an
/// array folded into one, as slurmctld keeps them (`JobId=N
/// ArrayTaskId=0-7`), with the tasks' range.
struct Record<'a> {
    view: &'a JobView,
    folded: Option<String>,
    /// The array tasks it shows (none outside arrays).
    tasks: Vec<u32>,
}

impl Record<'_> {
    fn holds(&self, task: u32) -> bool {
        self.tasks.contains(&task)
    }
}

/// The records of `jobs`: each job on its own, but an array's tasks that
/// never started folded into one record per state, as slurmctld keeps
/// them; a task cancelled before it started leaves its array's pending
/// record and is no record of its own (unless none of its array is left
/// pending: the array then shows cancelled, whole).
fn records(jobs: &[JobView]) -> Vec<Record<'_>> {
    use crate::model::job::JobState;
    let unstarted = |v: &JobView| v.job.array.is_some() && v.job.start_time.is_none();
    let mut out: Vec<Record<'_>> = Vec::new();
    for view in jobs {
        let Some(array) = view.job.array.as_ref().filter(|_| unstarted(view)) else {
            let tasks = view.job.array.iter().map(|a| a.task_id).collect();
            out.push(Record {
                view,
                folded: None,
                tasks,
            });
            continue;
        };
        let state = view.job.state;
        let pending_left = jobs.iter().any(|v| {
            unstarted(v)
                && v.job.state == JobState::Pending
                && v.job
                    .array
                    .as_ref()
                    .is_some_and(|a| a.job_id == array.job_id)
        });
        if state == JobState::Cancelled && pending_left {
            continue;
        }
        let same = |v: &&JobView| {
            unstarted(v)
                && v.job.state == state
                && v.job
                    .array
                    .as_ref()
                    .is_some_and(|a| a.job_id == array.job_id)
        };
        if out.iter().any(|r| r.folded.is_some() && same(&r.view)) {
            continue;
        }
        let mut tasks: Vec<u32> = jobs
            .iter()
            .filter(same)
            .filter_map(|v| v.job.array.as_ref().map(|a| a.task_id))
            .collect();
        tasks.sort_unstable();
        out.push(Record {
            view,
            folded: Some(crate::array::format_ranges(&tasks)),
            tasks,
        });
    }
    out
}

/// `jobs` as `scontrol show job` prints them, record after record.
fn show_records(jobs: &[JobView], now: i64, layout: JobLayout) -> String {
    text_of(&records(jobs), now, layout)
}

/// `shown`'s text, or with `layout.json` Slurm's JSON of their jobs.
fn text_of(shown: &[Record<'_>], now: i64, layout: JobLayout) -> String {
    if layout.json {
        let jobs: Vec<JobView> = shown.iter().map(|r| r.view.clone()).collect();
        let mut text =
            String::from_utf8_lossy(&crate::report::slurm_json::jobs_answer(&jobs, "scontrol"))
                .into_owned();
        text.push('\n');
        return text;
    }
    shown
        .iter()
        .map(|r| show_job(r.view, now, layout, r.folded.as_deref()))
        .collect()
}

/// `yscontrol update` words: job ids (or JobId=ID) and KEY=VALUE changes.
fn parse_update(words: &[String]) -> Result<(Vec<String>, crate::proto::JobUpdate), CliError> {
    let mut jobs = Vec::new();
    let mut changes = crate::proto::JobUpdate::default();
    for word in words {
        let Some((key, value)) = word.split_once('=') else {
            jobs.push(word.clone());
            continue;
        };
        match key.to_ascii_lowercase().as_str() {
            "jobid" => jobs.push(value.to_string()),
            "qos" => changes.qos = Some(value.to_string()),
            "timelimit" => {
                changes.time_limit = Some(
                    crate::model::units::parse_time_limit(value)
                        .map_err(|e| CliError::usage(format!("timelimit={value}: {e}")))?,
                )
            }
            "priority" => {
                changes.priority = Some(value.parse::<u32>().map(i64::from).map_err(|_| {
                    CliError::usage(format!("priority={value}: not a whole number 0 or more"))
                })?)
            }
            _ => {
                return Err(CliError::usage(format!(
                    "cannot update '{key}': give qos=, timelimit= or priority="
                )))
            }
        }
    }
    if jobs.is_empty() {
        return Err(CliError::usage("give the job ids to update"));
    }
    Ok((jobs, changes))
}

fn control(config: &crate::config::Config, control: Control) -> CliResult {
    match ask(config, Request::Control(control))? {
        Reply::Control { outcomes, message } => {
            if let Some(m) = message {
                println!("{m}");
            }
            let errors: Vec<String> = outcomes.into_iter().filter_map(|o| o.error).collect();
            for e in &errors {
                eprintln!("yscontrol: error: {e}");
            }
            if errors.is_empty() {
                Ok(())
            } else {
                Err(CliError::failed(""))
            }
        }
        Reply::Rejected { error } => Err(CliError::failed(error)),
        other => Err(CliError::failed(format!(
            "unexpected reply from ysctld: {other:?}"
        ))),
    }
}

/// How long `yscontrol image pull` waits for the nodes' pulls.
const PULL_WAIT: std::time::Duration = std::time::Duration::from_secs(6 * 3_600);

/// Asks for the pull, and again each second while a node still pulls
/// (the daemon pulls once however often it is asked); prints where the
/// image stands on each node; fails when it failed on one.
fn pull_image(config: &crate::config::Config, pull: Control, wait: bool) -> CliResult {
    let deadline = std::time::Instant::now() + PULL_WAIT;
    loop {
        let message = match ask(config, Request::Control(pull.clone()))? {
            Reply::Control { message, .. } => message.unwrap_or_default(),
            Reply::Rejected { error } => return Err(CliError::failed(error)),
            other => {
                return Err(CliError::failed(format!(
                    "unexpected reply from ysctld: {other:?}"
                )))
            }
        };
        let pulling = message.lines().any(|l| l.ends_with(": pulling"));
        if pulling && wait && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_secs(1));
            continue;
        }
        println!("{message}");
        return match message.lines().any(|l| l.contains(": failed: ")) {
            true => Err(CliError::failed("")),
            false => Ok(()),
        };
    }
}

/// scontrol's layout: KEY=VALUE pairs, a few to a line.
/// `Reason=`'s value: Slurm's one-word code, which parsers that split on
/// spaces read; then the words, quoted, where they say more.
fn reason_of(view: &JobView, now: i64) -> String {
    let code = crate::report::Field::ReasonCode.value(view, now);
    let words = crate::report::Field::Reason.value(view, now);
    if words == code || words == "None" {
        code
    } else {
        format!("{code} ReasonText=\"{}\"", words.replace('"', "'"))
    }
}

/// One record: `view`'s job, or (`folded`: the tasks' range) the pending
/// tasks of its array, under the array's id.
fn show_job(view: &JobView, now: i64, layout: JobLayout, folded: Option<&str>) -> String {
    let job = &view.job;
    let id = folded.and(job.array.as_ref()).map_or(job.id, |a| a.job_id);
    let time = |t: Option<i64>| {
        t.map(units::format_timestamp)
            .unwrap_or_else(|| "Unknown".into())
    };
    let reason = reason_of(view, now);
    let lines = [
        format!("JobId={id} JobName={}", job.name),
        format!(
            "UserId={}({}) GroupId={} Account={} QOS={}",
            job.user, job.uid, job.gid, job.account, job.qos
        ),
        format!(
            "JobState={} Reason={} Hold={} Priority={}",
            job.state,
            reason,
            job.hold.map(|h| h.name()).unwrap_or("no"),
            // A held job is out of the running: Slurm shows it at 0.
            if job.hold.is_some() { 0 } else { view.priority }
        ),
        format!(
            "RunTime={} TimeLimit={} Restarts={} ExitCode={}",
            units::format_elapsed(job.elapsed(now)),
            units::format_time_limit(job.time_limit),
            job.restart_count,
            job.exit.unwrap_or_default()
        ),
        format!(
            "SubmitTime={} EligibleTime={} StartTime={} EndTime={}",
            units::format_timestamp(job.submit_time),
            units::format_timestamp(
                job.begin_time
                    .unwrap_or(job.submit_time)
                    .max(job.submit_time)
            ),
            time(job.start_time),
            if job.state.is_active() {
                "Unknown".into()
            } else {
                time(job.end_time)
            }
        ),
        format!(
            "NodeList={} BatchHost={} NumNodes={} NumTasks={}",
            job.node
                .as_ref()
                .map_or_else(|| "(null)".to_string(), |_| job.nodelist()),
            job.node.as_deref().unwrap_or("(null)"),
            job.node_count(),
            job.tasks
                .tasks_per_node(job.node_count())
                .iter()
                .sum::<u32>()
        ),
        format!(
            "NumCPUs={} Mem={} TRES=gres/{} GPUs=[{}]",
            job.cpus * job.node_count(),
            job.mem_mb
                .map(units::format_memory_mb)
                .unwrap_or_else(|| "(none)".into()),
            job.gpus,
            crate::db::format_index_list(&job.gpus_alloc)
        ),
    ];
    let mut out: Vec<String> = lines.iter().map(|l| format!("   {l}")).collect();
    out[0] = lines[0].clone();
    // Why a pending job waits where its reason code does not say (held
    // after quick requeues, requeued after a node was lost), as Slurm's
    // SystemComment.
    if let Some(why) = job
        .reason
        .as_deref()
        .filter(|_| job.state == crate::model::job::JobState::Pending)
    {
        out.insert(3, format!("   SystemComment={why}"));
    }
    if let Some(task) = &job.array {
        out.insert(
            1,
            format!(
                "   ArrayJobId={} ArrayTaskId={}",
                task.job_id,
                folded.map_or_else(|| task.task_id.to_string(), str::to_string)
            ),
        );
    }
    out.extend(optional_job_lines(view));
    if layout.details {
        out.extend(detail_lines(view));
    }
    if layout.one_line {
        let words: Vec<&str> = out.iter().map(|l| l.trim()).collect();
        return words.join(" ") + "\n";
    }
    out.join("\n") + "\n\n"
}

/// What `scontrol -d show job` adds: for a job that holds GPUs, where
/// they are on each of its nodes (Slurm's `Nodes=... GRES=gpu:N(IDX:...)`).
fn detail_lines(view: &JobView) -> Vec<String> {
    let job = &view.job;
    if !job.state.holds_gpus() || job.node.is_none() {
        return Vec::new();
    }
    let mem = job
        .mem_mb
        .map_or_else(|| "(none)".to_string(), units::format_memory_mb);
    vec![format!(
        "     Nodes={} CPUs={} Mem={mem} GRES=gpu:{}(IDX:{})",
        job.nodelist(),
        job.cpus,
        job.gpus_alloc.len(),
        crate::db::format_index_list(&job.gpus_alloc)
    )]
}

/// The lines `show job` prints only when they have something to say, and
/// the paths only to those who may see them.
fn optional_job_lines(view: &JobView) -> Vec<String> {
    let job = &view.job;
    let mut out = Vec::new();
    if let Some(by) = &job.approved_by {
        out.push(format!("   ApprovedBy={by}"));
    }
    if let Some(dependency) = &job.dependency {
        out.push(format!("   Dependency={dependency}"));
    }
    if let Some(constraint) = &job.gpus.constraint {
        out.push(format!("   Features={constraint}"));
    }
    if let Some(cgroup) = &job.cgroup {
        let mut usage = String::new();
        if let Some(rss) = job.max_rss_bytes {
            usage.push_str(&format!(" MaxRSS={}", units::format_rss(rss)));
        }
        if let Some(cpu) = job.cpu_usec {
            usage.push_str(&format!(" TotalCPU={}", units::format_cpu_time(cpu)));
        }
        out.push(format!("   Cgroup={cgroup}{usage}"));
    }
    if !view.redacted {
        out.push(format!("   WorkDir={}", job.work_dir.display()));
        out.push(format!("   StdOut={}", job.stdout_path().display()));
        out.push(format!(
            "   StdErr={}",
            job.stderr_path()
                .unwrap_or_else(|| job.stdout_path())
                .display()
        ));
        if let Some(c) = &job.comment {
            out.push(format!("   Comment={c}"));
        }
    }
    out
}

/// GPU indices: `2`, `2,3`, `2 3`.
fn parse_gpus(words: &[String]) -> Result<(Option<String>, Vec<u32>), CliError> {
    let mut node: Option<String> = None;
    let mut gpus: Vec<u32> = Vec::new();
    for word in super::split_list(words) {
        let index = match word.split_once(':') {
            Some((name, index)) => {
                // The node comes first and once: gpu02:2,3.
                if node.as_deref().is_some_and(|n| n != name)
                    || (node.is_none() && !gpus.is_empty())
                {
                    return Err(CliError::usage(
                        "GPUs of one node at a time, the node first: NODE:GPU,GPU (gpu02:2,3)",
                    ));
                }
                node = Some(name.to_string());
                index.to_string()
            }
            None => word.clone(),
        };
        let index = index.parse::<u32>().map_err(|_| {
            CliError::usage(format!(
                "'{word}' is not a GPU: give its index (2), or its node and index (gpu02:2), as ysinfo lists them"
            ))
        })?;
        gpus.push(index);
    }
    if gpus.is_empty() {
        return Err(CliError::usage("name the GPUs, by index"));
    }
    Ok((node, gpus))
}

/// `scontrol show node`'s shape: the node, then a line per GPU; with
/// `one_line` (scontrol's `-o`), the node's fields on one line.
fn show_node(node: &crate::report::node::NodeInfo, one_line: bool) -> String {
    let mut types: Vec<(String, u32)> = Vec::new();
    for g in &node.gpus {
        match types.iter_mut().find(|(t, _)| *t == g.gpu_type) {
            Some((_, n)) => *n += 1,
            None => types.push((g.gpu_type.clone(), 1)),
        }
    }
    let gres: Vec<String> = types.iter().map(|(t, n)| format!("gpu:{t}:{n}")).collect();
    let drained = node.gpus.iter().filter(|g| g.drain.is_some()).count();
    let allocated = node.gpus.iter().filter(|g| !g.jobs.is_empty()).count();
    let state = match node.state.as_str() {
        "down" => "DOWN",
        "drain" => "DRAINED",
        "drng" => "MIXED+DRAIN",
        "alloc" => "ALLOCATED",
        "mix" => "MIXED",
        _ => "IDLE",
    };
    // Slurm's fields first, in slurmctld's order, with the topology that
    // `ysctld export-slurm` writes (CPUs only: one core per socket), then
    // what ysched adds: how jobs are confined, where the GPU list comes
    // from, and (not one-line) a line per GPU.
    let lines = [
        format!(
            "NodeName={} Arch={} CoresPerSocket=1",
            node.name,
            std::env::consts::ARCH
        ),
        format!(
            "CPUAlloc={} CPUEfctv={cpus} CPUTot={cpus}",
            node.cpus_allocated,
            cpus = node.cpus
        ),
        "AvailableFeatures=(null)".to_string(),
        "ActiveFeatures=(null)".to_string(),
        format!(
            "Gres={} GresUsed=gpu:{allocated} GresDrained=gpu:{drained}",
            if gres.is_empty() {
                "(null)".into()
            } else {
                gres.join(",")
            },
        ),
        format!("NodeAddr={name} NodeHostName={name}", name = node.name),
        format!(
            "RealMemory={} AllocMem={} Sockets={} Boards=1",
            node.memory_mb, node.memory_allocated_mb, node.cpus
        ),
        format!(
            "State={state}{}{} ThreadsPerCore=1 TmpDisk={} Weight=1 Owner=N/A",
            if drained > 0 && !state.contains("DRAIN") {
                "+DRAIN"
            } else {
                ""
            },
            node.reason
                .as_ref()
                .map(|r| format!(" Reason=\"{r}\""))
                .unwrap_or_default(),
            node.tmp_mb,
        ),
        format!("Partitions={}", crate::slurm_options::PARTITION),
        format!(
            "CfgTRES=cpu={},mem={}M,gres/gpu={}",
            node.cpus,
            node.memory_mb,
            node.gpus.len()
        ),
        format!(
            "AllocTRES=cpu={},mem={}M,gres/gpu={allocated}",
            node.cpus_allocated, node.memory_allocated_mb
        ),
        format!("Isolation={}", node.isolation),
        format!("GpuSource={}", node.gpu_source),
    ];
    if one_line {
        return lines.join(" ") + "\n";
    }
    let mut out = lines.join("\n   ") + "\n";
    for g in &node.gpus {
        out.push_str(&gpu_line(g));
    }
    out
}

/// One GPU of `scontrol show node`: its state, who holds it, why drained.
fn gpu_line(g: &crate::report::node::GpuInfo) -> String {
    let mem = crate::model::units::format_memory_mb;
    format!(
        "   GPU={} Type={} Memory={} Group={} State={} Jobs={} Users={}{}\n",
        g.index,
        g.gpu_type,
        mem(g.memory_mb),
        g.group,
        g.state.to_ascii_uppercase(),
        if g.jobs.is_empty() {
            "(null)".into()
        } else {
            g.jobs.join(",")
        },
        if g.users.is_empty() {
            "(null)".into()
        } else {
            g.users.join(",")
        },
        g.drain
            .as_ref()
            .map(|d| format!(
                " Reason=\"{}\" DrainedBy={} DrainedSince={}",
                d.reason,
                d.by,
                crate::model::units::format_timestamp(d.since)
            ))
            .unwrap_or_default()
    )
}

/// `scontrol show config`'s shape: `Key = value`, the config in effect and
/// what ysctld detected (when it runs).
fn show_config(
    config: &crate::config::Config,
    node: Option<&crate::report::node::NodeInfo>,
) -> String {
    let mut pairs: Vec<(&str, String)> = vec![
        ("ClusterName", config.node_name.clone()),
        ("ConfigFile", config.path.display().to_string()),
        ("SpoolDir", config.spool_dir.display().to_string()),
        (
            "TimeZone",
            config.timezone().iana_name().unwrap_or("UTC").to_string(),
        ),
        ("DefaultQOS", config.default_qos.clone()),
        ("QOS", config.qos_names(",")),
        (
            "Accounts",
            if config.accounts.is_empty() {
                crate::config::DEFAULT_ACCOUNT.to_string()
            } else {
                config
                    .accounts
                    .iter()
                    .map(|a| a.name.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            },
        ),
        (
            "Admins",
            if config.admins.is_empty() {
                "root".into()
            } else {
                config.admins.join(",")
            },
        ),
        ("MinJobAge", format!("{} sec", config.min_job_age_secs)),
        (
            "PurgeJobAfter",
            config
                .purge_after_months
                .map_or("NONE".into(), |m| format!("{m} months")),
        ),
        (
            "PrivateData",
            format!("{:?}", config.private_data).to_ascii_lowercase(),
        ),
        ("MaxArraySize", config.max_array_size.to_string()),
        ("BackfillDepth", config.backfill_depth.to_string()),
        (
            "GpuSampleInterval",
            format!("{} sec", config.gpu_sample_secs),
        ),
        ("LowUtilizationPct", config.low_utilization_pct.to_string()),
        ("MaxPreemptions", config.max_preemptions.to_string()),
        (
            "MetricsFile",
            config
                .metrics_file
                .as_ref()
                .map_or("(null)".into(), |p| p.display().to_string()),
        ),
        (
            "MetricsListen",
            config
                .metrics_listen
                .map_or("(null)".into(), |a| a.to_string()),
        ),
        (
            "NotifyCommand",
            config
                .notify_command
                .as_ref()
                .map_or("(null)".into(), |c| c.join(" ")),
        ),
        ("SchedulerType", "ysched/backfill".into()),
        ("SelectType", "ysched/gpus".into()),
        ("Version", env!("CARGO_PKG_VERSION").into()),
    ];
    match node {
        Some(n) => {
            pairs.push(("DetectedCPUs", n.cpus.to_string()));
            pairs.push(("DetectedMemory", format!("{}M", n.memory_mb)));
            pairs.push((
                "DetectedGPUs",
                format!("{} ({})", n.gpus.len(), n.gpu_source),
            ));
            pairs.push(("Isolation", n.isolation.clone()));
        }
        None => pairs.push(("Daemon", "not running (nothing detected)".into())),
    }
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    pairs
        .iter()
        .map(|(k, v)| format!("{k:<width$} = {v}\n"))
        .collect()
}
