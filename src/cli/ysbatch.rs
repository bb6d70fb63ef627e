//! `ysbatch`: submit a job script.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use super::{load_config, print, reply_timeout, warn, CliError, CliResult};
use crate::gpu::Inventory;
use crate::model::units;
use crate::proto::{Envelope, Reply, Request};
use crate::sched::admission::{self, Capacity};
use crate::script::{self, Partial, SubmitContext, SubmitOptions};
use crate::spool::{DaemonState, Durability, Spool};

use crate::validate::MAX_SCRIPT_BYTES;

#[derive(Parser, Debug)]
#[command(
    name = "ysbatch",
    version,
    about = "Submit a batch job script to ysched",
    long_about = "Submit a batch job script to ysched.\n\nOptions may also be given in the script, on \
                  '#YS' or '#SBATCH' lines before the first command; options on the command line win. \
                  With no script, the script is read from standard input.",
    after_help = "Examples:\n  ysbatch train.sh\n  ysbatch --parsable -G 2 -t 30 -J yolo-s --wrap \"python train.py\"\n  ysbatch -G a100:4 -t 1-00:00:00 --mem 64G train.sh --epochs 300"
)]
pub struct Args {
    #[command(flatten)]
    pub options: SubmitOptions,
    /// Run this command line as the job's script (with /bin/sh)
    #[arg(long, value_name = "COMMAND", conflicts_with = "script")]
    pub wrap: Option<String>,
    /// Submit nothing: check the job as a submission is checked, and say when and where it would start (should running jobs last their time limits), what it may cost and whether it needs approval
    #[arg(long = "test-only")]
    pub test_only: bool,
    /// With --test-only: the answer as JSON on standard output
    #[arg(long, requires = "test_only")]
    pub json: bool,
    /// Wait until the job (every task of an array) has ended, and exit
    /// with its exit code (the highest of its tasks')
    #[arg(short = 'W', long, conflicts_with = "test_only")]
    pub wait: bool,
    /// The job script (default: standard input)
    #[arg(value_name = "SCRIPT")]
    pub script: Option<PathBuf>,
    /// Arguments passed to the script
    #[arg(
        value_name = "ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub args: Vec<String>,
}

/// The script's text, where it came from (for messages), and the job
/// name it gives: `--wrap`'s command, the file, or standard input.
fn script_source(args: &Args) -> Result<(String, String, String), CliError> {
    Ok(match (&args.wrap, &args.script) {
        (Some(command), _) => {
            if command.trim().is_empty() {
                return Err(CliError::usage("--wrap needs a command"));
            }
            (
                script::wrap_command(command),
                "--wrap".to_string(),
                "wrap".to_string(),
            )
        }
        (None, Some(path)) => {
            let text = read_script(|| std::fs::File::open(path), &path.display().to_string())?;
            (
                text,
                path.display().to_string(),
                script::name_from_path(path),
            )
        }
        (None, None) => {
            let text = read_script(|| Ok(std::io::stdin()), "standard input")?;
            (text, "standard input".to_string(), "ysbatch".to_string())
        }
    })
}

pub fn run(args: Args) -> CliResult {
    run_as("ysbatch", args)
}

/// `ysbatch`, or Slurm's `sbatch` (`command`): a job whose script and
/// options name no output file writes it where the command's own jobs
/// do, `ys-%j.out` or Slurm's `slurm-%j.out` (`%A_%a` for an array).
pub fn run_as(command: &str, args: Args) -> CliResult {
    let (script_text, source_name, default_name) = script_source(&args)?;
    let cli = Partial::from_options(args.options).map_err(|e| CliError::usage(e.to_string()))?;
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::failed(format!("cannot read the current directory: {e}")))?;
    if let Err(e) = crate::validate::script(&script_text) {
        return Err(CliError::failed(format!("{source_name}: {}", e.problem)));
    }
    script::check_interpreter_line(&script_text, &source_name)?;
    let directives = script::parse_directives(&script_text, &source_name)?;
    let partial = directives.overridden_by(cli);
    for w in &partial.warnings {
        warn("ysbatch", w);
    }
    let parsable = partial.parsable;
    let context = SubmitContext {
        cwd: &cwd,
        environment: super::submission_environment(),
        now: &jiff::Zoned::now,
        default_name,
    };
    let mut request = script::resolve(partial, script_text, args.args, context)?;
    request.test_only = args.test_only;
    if command == "sbatch" && request.output.is_none() {
        let pattern = if request.array.is_some() {
            "slurm-%A_%a.out"
        } else {
            "slurm-%j.out"
        };
        request.output = Some(pattern.to_string());
    }
    crate::validate::job_request(&request).map_err(|e| CliError::usage(e.to_string()))?;
    if !request.work_dir.is_dir() {
        return Err(CliError::failed(format!(
            "working directory {} does not exist",
            request.work_dir.display()
        )));
    }
    warn_of_missing_output_dirs(&request);

    let config = load_config()?;
    if let Some(a) = &request.array {
        // Against the server's limit: refused, as the daemon would (1).
        crate::array::ArraySpec::parse(a, config.max_array_size)
            .map_err(|e| CliError::failed(format!("--array: {e}")))?;
    }
    let spool = Spool::new(&config.spool_dir);
    let on_node = spool.pool_controller().is_some() || config.pool.controller.is_some();
    let state = spool.daemon_state();
    if state == DaemonState::NoSpool {
        return Err(CliError::failed(format!(
            "spool directory {} does not exist; start ysctld once to create it",
            config.spool_dir.display()
        )));
    }
    if state == DaemonState::Stopped {
        if request.test_only {
            return Err(CliError::failed(
                "no daemon is running: --test-only needs the controller's queue to say when the job would start",
            ));
        }
        // Nobody can answer: check what can be checked here, so that a job
        // that would be refused is not left in the spool. On a pool's
        // node the controller's config judges, not this one.
        if !on_node {
            check_locally(&request, &config)?;
        }
    }
    let durability = if state == DaemonState::Running {
        Durability::OnDemand
    } else {
        Durability::Now
    };
    // A token is a credential: it proves who submits on a pool's node,
    // and goes into no job's environment.
    let token = take_token(&mut request);
    request.keep_submitters_environment();
    let mut envelope = Envelope::new(Request::Submit(Box::new(request)));
    if on_node {
        envelope.token = token.or_else(|| super::saved_token("ysbatch"));
    }
    let sent = spool.send(&envelope, durability)?;
    let daemon = if on_node { "ysnoded" } else { "ysctld" };
    if state == DaemonState::Stopped {
        return queued_for_daemon(sent.name(), &format!("{daemon} is not running"), parsable);
    }
    let shown = Shown {
        daemon,
        parsable,
        test_only: args.test_only,
        json: args.json,
    };
    match answer(sent, &shown)? {
        Some(id) if args.wait => wait_for_end(&config, id),
        _ => Ok(()),
    }
}

/// `--wait`: polls the job until it (every task of an array) has ended;
/// exits with its exit code, or 1 for one that ended without one
/// (cancelled before it ran).
fn wait_for_end(config: &crate::config::Config, id: u64) -> CliResult {
    use crate::proto::Query;
    let mut pause = Duration::from_millis(200);
    loop {
        let reply = super::query("ysbatch", config, Query::Job(crate::array::JobRef::Id(id)))?;
        let jobs = match reply {
            Reply::Jobs { jobs, .. } if !jobs.is_empty() => jobs,
            Reply::Rejected { error } => return Err(CliError::failed(error)),
            _ => return Err(CliError::failed(format!("job {id} is no longer known"))),
        };
        if jobs.iter().all(|v| !v.job.state.is_active()) {
            let code = jobs
                .iter()
                .map(|v| match (v.job.state, v.job.exit) {
                    (crate::model::job::JobState::Completed, _) => 0,
                    (_, Some(e)) if e.signal != 0 => 128 + e.signal,
                    (_, Some(e)) if e.code != 0 => e.code,
                    _ => 1,
                })
                .max()
                .unwrap_or(0);
            return match code {
                0 => Ok(()),
                code => Err(CliError {
                    code: code.clamp(1, 255) as u8,
                    message: String::new(),
                }),
            };
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

/// The sender's token (`SLURM_JWT`, as Slurm's clients set it), taken
/// out of the job's environment.
fn take_token(request: &mut crate::model::job::JobRequest) -> Option<String> {
    let at = request
        .environment
        .iter()
        .position(|(k, _)| k == "SLURM_JWT")?;
    Some(request.environment.remove(at).1).filter(|t| !t.trim().is_empty())
}

/// How the answer is shown, and whose it is.
struct Shown {
    daemon: &'static str,
    parsable: bool,
    test_only: bool,
    json: bool,
}

/// Waits for the daemon's answer and shows it: the job id, the
/// test-only forecast, the refusal; without an answer in time the
/// submission stays spooled (a test-only one is taken back). The id of
/// a job submitted.
fn answer(mut sent: crate::spool::SentRequest, shown: &Shown) -> Result<Option<u64>, CliError> {
    let daemon = shown.daemon;
    match sent.wait(reply_timeout(Duration::from_secs(5)))? {
        Some(Reply::Submitted { job_id, warning }) => {
            if let Some(w) = warning {
                warn("ysbatch", &w);
            }
            if shown.parsable {
                print(&format!("{job_id}\n"))?;
            } else {
                print(&format!("Submitted batch job {job_id}\n"))?;
            }
            Ok(Some(job_id))
        }
        Some(Reply::TestOnly(answer)) => print_test_only(&answer, shown.json).map(|()| None),
        Some(Reply::Rejected { error }) => Err(CliError::failed(error)),
        Some(other) => Err(CliError::failed(format!(
            "unexpected reply from {daemon}: {other:?}"
        ))),
        None if shown.test_only => {
            sent.withdraw();
            Err(CliError::failed(format!(
                "{daemon} has not answered yet; nothing was submitted"
            )))
        }
        None => {
            sent.make_durable()?;
            queued_for_daemon(
                sent.name(),
                &format!("{daemon} has not answered yet"),
                shown.parsable,
            )
            .map(|()| None)
        }
    }
}

/// `--test-only`'s answer: sbatch's line (`Job N to start at T using C
/// processors on nodes N in partition P`) on standard error, then what
/// ysched knows besides; or all of it as JSON on standard output.
fn print_test_only(answer: &crate::proto::TestOnly, json: bool) -> CliResult {
    if json {
        let text = serde_json::to_string_pretty(answer)
            .map_err(|e| CliError::failed(format!("cannot write the answer as JSON: {e}")))?;
        return print(&format!("{text}\n"));
    }
    let id = answer.job_id;
    match (answer.start, &answer.node) {
        (Some(start), Some(node)) => {
            let gpus = crate::db::format_index_list(&answer.gpu_ids);
            warn(
                "ysbatch",
                &format!(
                    "Job {id} to start at {} using {} processors on nodes {node} in partition ysched (GPUs {gpus}{})",
                    units::format_timestamp(start),
                    answer.cpus,
                    if answer.borrowing {
                        ", borrowed beyond its account's guarantee"
                    } else {
                        ""
                    }
                ),
            );
        }
        _ => warn(
            "ysbatch",
            &format!(
                "Job {id}: {}",
                answer
                    .unknown
                    .as_deref()
                    .unwrap_or("no start can be foreseen")
            ),
        ),
    }
    let cost = answer.tokens.map_or_else(
        || "no time limit, so no upper bound".to_string(),
        |t| format!("at most {t:.2} tokens"),
    );
    warn(
        "ysbatch",
        &format!(
            "account {}, QoS {}, {} GPU(s), time limit {}: {cost}",
            answer.account,
            answer.qos,
            answer.gpus,
            units::format_time_limit(answer.time_limit)
        ),
    );
    if let Some(why) = &answer.approval {
        warn("ysbatch", &format!("it would be {why}"));
    }
    for w in &answer.warnings {
        warn("ysbatch", w);
    }
    warn("ysbatch", "--test-only: nothing was submitted");
    Ok(())
}

/// A submission spooled without an answer has no job id yet: say so on
/// standard output too, where `--parsable` callers look for the id (exit
/// status 0: the job is kept and will be taken in).
fn queued_for_daemon(name: &str, why: &str, parsable: bool) -> CliResult {
    warn(
        "ysbatch",
        &format!(
            "{why}; the job is spooled as {name} and will be taken in (and given its id) when it answers"
        ),
    );
    if parsable {
        print(&format!("queued for the daemon: {name}\n"))
    } else {
        print(&format!(
            "Queued for the daemon as {name} (no job id yet)\n"
        ))
    }
}

/// The job's output directories are created when it starts (as its
/// user); a missing one is worth a warning, since a typo in the path
/// would otherwise show only in the output's unexpected place.
fn warn_of_missing_output_dirs(request: &crate::model::job::JobRequest) {
    for pattern in [&request.output, &request.error].into_iter().flatten() {
        let path = request.work_dir.join(pattern);
        let Some(dir) = path.parent() else { continue };
        // Patterns in the directory are expanded at start: nothing to check.
        if dir.to_string_lossy().contains('%') || dir.is_dir() {
            continue;
        }
        warn(
            "ysbatch",
            &format!(
                "the output directory {} does not exist; it will be created when the job starts",
                dir.display()
            ),
        );
    }
}

fn read_script<R: Read>(
    open: impl FnOnce() -> std::io::Result<R>,
    name: &str,
) -> Result<String, CliError> {
    let mut bytes = Vec::new();
    open()
        .and_then(|r| r.take(MAX_SCRIPT_BYTES as u64 + 1).read_to_end(&mut bytes))
        .map_err(|e| CliError::failed(format!("cannot read {name}: {e}")))?;
    if bytes.len() > MAX_SCRIPT_BYTES {
        return Err(CliError::failed(format!(
            "{name} is larger than {MAX_SCRIPT_BYTES} bytes"
        )));
    }
    if bytes.is_empty() {
        return Err(CliError::failed(format!("{name} is empty")));
    }
    String::from_utf8(bytes).map_err(|e| {
        CliError::failed(format!(
            "{name} is not valid UTF-8 (at byte {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// The daemon's admission checks, with what this host can know: accounts,
/// QoS, declared GPUs, CPUs and memory (a pool's nodes, their number and
/// what they hold, only the daemon knows).
fn check_locally(
    request: &crate::model::job::JobRequest,
    config: &crate::config::Config,
) -> CliResult {
    let uid = nix::unistd::getuid().as_raw();
    let user = super::current_user_name();
    let inventory = Inventory::declared(config);
    let mut checked = request.clone();
    let pool = config.pool.listen.is_some();
    if inventory.gpus.is_empty() || pool {
        // GPUs will be detected by the daemon, or are the pool's nodes':
        // the count cannot be checked here.
        checked.gpus = Default::default();
    }
    // Which nodes there are, and how many, the daemon knows.
    checked.nodelist.clear();
    checked.exclude.clear();
    if pool {
        checked.tasks = Default::default();
    }
    let (cpus, mem_mb) = match pool {
        true => (u32::MAX, u64::MAX),
        false => (
            config.cpus.unwrap_or(u32::MAX),
            config.memory_mb.unwrap_or(u64::MAX),
        ),
    };
    let capacity = Capacity {
        name: &config.node_name,
        inventory: &inventory,
        cpus,
        mem_mb,
        // The nodes' disks are the controller's to know.
        tmp_mb: u64::MAX,
    };
    admission::admit(&checked, uid, &user, config, &[capacity])
        .map(|_| ())
        .map_err(|e| CliError::failed(e.to_string()))
}
