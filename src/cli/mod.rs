//! The commands: each `cli::<command>` has its arguments, its action and
//! its output; this file has what they share (config lookup, talking to the
//! daemon, printing, exit codes). Binaries in `src/bin/` only call `run`.

pub mod pty_session;
pub mod sacctmgr;
pub mod scontrol_pids;
pub mod scontrol_steps;
pub mod seff;
pub mod session;
pub mod slurm;
pub mod slurm_formats;
pub mod slurm_help;
pub mod srun;
pub mod srun_signals;
pub mod token_file;
pub mod ysacct;
pub mod ysalloc;
pub mod ysbatch;
pub mod yscancel;
pub mod yscontrol;
pub mod ysctld;
pub mod ysinfo;
pub mod ysnoded;
pub mod ysqueue;
pub mod ysreport;
pub mod ysshare;
pub mod ystoken;
pub mod yswebd;

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use crate::config::Config;
use crate::proto::{Envelope, JobFilter, Query, Reply, Request};
use crate::spool::{DaemonState, Durability, Spool};

/// An error to print once, as `command: error: message`, with its exit code:
/// 1 when the operation failed, 2 for a usage error.
#[derive(Debug)]
pub struct CliError {
    pub code: u8,
    pub message: String,
}

impl CliError {
    pub fn failed(message: impl Into<String>) -> CliError {
        CliError {
            code: 1,
            message: message.into(),
        }
    }

    pub fn usage(message: impl Into<String>) -> CliError {
        CliError {
            code: 2,
            message: message.into(),
        }
    }
}

impl<E: std::fmt::Display> From<E> for CliError {
    fn from(e: E) -> CliError {
        CliError::failed(e.to_string())
    }
}

pub type CliResult = Result<(), CliError>;

/// `-M/--clusters`, which Slurm tools pass to the listing commands:
/// accepted, as ysched is one cluster (any name, `all` too, shows it).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct Clusters {
    /// Accepted for Slurm tools: ysched is one cluster (all, or any name, shows it)
    #[arg(
        short = 'M',
        long = "clusters",
        value_name = "CLUSTER[,CLUSTER]",
        hide_short_help = true
    )]
    pub clusters: Option<String>,
}

/// Runs a command's body and turns its outcome into the process exit code.
pub fn main(command: &str, body: impl FnOnce() -> CliResult) -> ExitCode {
    match body() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if !e.message.is_empty() {
                say(&format!("{command}: error: {}", e.message));
            }
            ExitCode::from(e.code)
        }
    }
}

/// The environment a submission carries: this process's, with the
/// submitter's umask as `SLURM_UMASK` (`0022`), which the job and its
/// steps' tasks run with, as Slurm's do.
pub fn submission_environment() -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k != "SLURM_UMASK")
        .collect();
    env.push(("SLURM_UMASK".into(), current_umask()));
    env
}

/// This process's umask, as four octal digits.
pub fn current_umask() -> String {
    use nix::sys::stat::{umask, Mode};
    // Reading it means setting it: put straight back.
    let mask = umask(Mode::from_bits_truncate(0o022));
    umask(mask);
    format!("{:04o}", mask.bits())
}

pub fn warn(command: &str, message: &str) {
    say(&format!("{command}: warning: {message}"));
}

/// A line on standard error, which may be gone (the terminal of a
/// session hung up): then it is lost, and the command goes on.
pub fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Inside a job, a command that may stop that very job (`scancel
/// $SLURM_JOB_ID`, `scontrol requeue $SLURM_JOB_ID`) must get its answer
/// and exit with it before the stop's signals end it, as under Slurm:
/// the signals a stop sends are blocked for the rest of its life (what
/// comes is never delivered; the grace's SIGKILL still ends one that
/// hangs). Outside a job this does nothing.
pub fn shield_from_own_jobs_stop() {
    if std::env::var_os("SLURM_JOB_ID").is_none() {
        return;
    }
    use nix::sys::signal::{SigSet, Signal};
    let mut stops = SigSet::empty();
    for s in [
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGINT,
    ] {
        stops.add(s);
    }
    let _ = stops.thread_block();
}

/// Writes to stdout; a closed pipe (`ysqueue | head`) is not an error.
pub fn print(text: &str) -> CliResult {
    // Names, comments and paths come from users: no escape sequence of
    // theirs reaches the terminal of whoever reads this.
    let text = crate::report::escape_controls(text, true);
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::failed(format!("cannot write output: {e}"))),
    }
}

/// The config every command reads: `$YS_CONF`, `/etc/ysched/ysched.toml`, or
/// the user's `~/.config/ysched/ysched.toml`.
pub fn load_config() -> Result<Config, CliError> {
    let (path, exists) = crate::config::locate();
    if !exists {
        return Err(CliError::failed(format!(
            "no configuration at {}; set YS_CONF to your ysched.toml (see ysched.toml(5))",
            path.display()
        )));
    }
    Config::load(&path).map_err(|e| CliError::failed(e.to_string()))
}

/// How long a command waits for the daemon: `$YS_TIMEOUT` seconds, else `default`.
pub fn reply_timeout(default: Duration) -> Duration {
    std::env::var("YS_TIMEOUT")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .map(Duration::from_secs_f64)
        .unwrap_or(default)
}

/// Sends a request the running daemon must answer now (control requests and
/// queries). Fails, changing nothing, if no daemon runs.
pub fn ask(config: &Config, request: Request) -> Result<Reply, CliError> {
    ask_keeping(config, request, Duration::from_secs(30)).map(|(reply, _)| reply)
}

/// As `ask`, waiting `wait` (unless `YS_TIMEOUT` says otherwise) before a
/// change is left in the spool for the daemon to apply when it can.
pub fn ask_within(config: &Config, request: Request, wait: Duration) -> Result<Reply, CliError> {
    ask_keeping(config, request, wait).map(|(reply, _)| reply)
}

/// As `ask`, keeping the request when its rows are streamed (its reply
/// file holds them, and goes when the request is dropped).
fn ask_keeping(
    config: &Config,
    request: Request,
    wait: Duration,
) -> Result<(Reply, Option<crate::spool::SentRequest>), CliError> {
    let spool = Spool::new(&config.spool_dir);
    match spool.daemon_state() {
        DaemonState::Running => {}
        DaemonState::Stopped | DaemonState::NoSpool => {
            return Err(CliError::failed(format!(
                "{}; nothing was changed",
                not_running(&spool)
            )))
        }
    }
    let is_query = matches!(request, Request::Query(_));
    let mut envelope = Envelope::new(request);
    if spool.pool_controller().is_some() {
        // On a pool's node the request goes through its agent: the
        // user's token (SLURM_JWT, or the one ystoken --save kept), if
        // they have one, proves who they are beyond what the node says.
        let program = std::env::args().next().unwrap_or_default();
        let command = program.rsplit('/').next().unwrap_or("ysched");
        envelope.token = user_token(command);
    }
    let mut sent = spool.send(&envelope, Durability::OnDemand)?;
    match sent.wait(reply_timeout(wait))? {
        Some(reply @ Reply::Streamed { .. }) => Ok((reply, Some(sent))),
        Some(reply) => Ok((reply, None)),
        None if is_query => {
            sent.withdraw();
            Err(CliError::failed(NO_ANSWER))
        }
        None => {
            sent.make_durable()?;
            Err(CliError::failed(format!(
                "ysctld did not answer in time; the request {} stays in the spool and will be applied when ysctld takes it",
                sent.name()
            )))
        }
    }
}

/// The token `command` sends for its user on a pool's node: `SLURM_JWT`,
/// else the one `ystoken --save` kept.
pub fn user_token(command: &str) -> Option<String> {
    std::env::var("SLURM_JWT")
        .ok()
        .filter(|t| !t.trim().is_empty())
        .or_else(|| saved_token(command))
}

/// The token `ystoken --save` kept, if it may be used.
pub fn saved_token(command: &str) -> Option<String> {
    token_file::saved().unwrap_or_else(|e| {
        warn(command, &e.to_string());
        None
    })
}

/// What a query that ysctld does not answer in time fails with.
const NO_ANSWER: &str = "ysctld did not answer in time";

/// Asks the daemon a query; when it is down, or hung (no answer in time),
/// reads the database directly if this user can (root, or the owner of a
/// personal spool).
pub fn query(command: &str, config: &Config, query: Query) -> Result<Reply, CliError> {
    let spool = Spool::new(&config.spool_dir);
    let reply = if spool.daemon_state() == DaemonState::Running {
        match ask(config, Request::Query(query.clone())) {
            Err(e) if e.message == NO_ANSWER => {
                offline(command, config, query, "ysctld does not answer (hung?)")?
            }
            answered => answered?,
        }
    } else {
        offline(command, config, query, "ysctld is not running")?
    };
    match reply {
        Reply::Rejected { error } => Err(CliError::failed(error)),
        reply @ (Reply::Jobs { .. }
        | Reply::Rows { .. }
        | Reply::Audit { .. }
        | Reply::Usage { .. }
        | Reply::Nodes { .. }) => Ok(reply),
        other => Err(CliError::failed(format!(
            "unexpected reply from ysctld: {other:?}"
        ))),
    }
}

/// What a command says when the daemon it talks to does not run: ysctld,
/// or on a pool's node its agent.
fn not_running(spool: &Spool) -> String {
    match spool.pool_controller() {
        Some(controller) => format!(
            "ysnoded is not running on this node: commands here go through it to the controller, {controller}"
        ),
        None => format!("ysctld is not running (spool {})", spool.root().display()),
    }
}

/// `query` answered from the database, as last recorded, saying `why`.
fn offline(command: &str, config: &Config, query: Query, why: &str) -> Result<Reply, CliError> {
    let spool = Spool::new(&config.spool_dir);
    if spool.pool_controller().is_some() {
        return Err(CliError::failed(not_running(&spool)));
    }
    let database = spool.database();
    if std::fs::File::open(&database).is_err() {
        return Err(CliError::failed(format!(
            "{why} (spool {})",
            config.spool_dir.display()
        )));
    }
    warn(
        command,
        &format!("{why}; showing jobs as last recorded in the database"),
    );
    let uid = nix::unistd::getuid().as_raw();
    let user = current_user_name();
    Ok(crate::query::answer_offline(
        &database,
        query,
        uid,
        config.is_admin(uid, &user),
    )?)
}

/// A listing's rows: all at once, or streamed as the daemon reads them.
pub enum Rows {
    All(std::vec::IntoIter<Vec<String>>),
    Streamed(crate::spool::RowStream),
}

impl Rows {
    pub fn next_row(&mut self) -> Result<Option<Vec<String>>, CliError> {
        match self {
            Rows::All(rows) => Ok(rows.next()),
            Rows::Streamed(stream) => Ok(stream.next_row()?),
        }
    }

    /// Every row left, in one table (cheaper for long listings).
    pub fn read_all(&mut self) -> Result<crate::report::table::RowTable, CliError> {
        let mut table = crate::report::table::RowTable::default();
        match self {
            Rows::All(rows) => rows.for_each(|r| table.push_cells(&r)),
            Rows::Streamed(stream) => while stream.next_row_into(&mut table)? {},
        }
        Ok(table)
    }
}

/// A listing query whose rows may come streamed (`ysacct`): whole jobs
/// (for --json) or rows.
pub fn query_rows(
    command: &str,
    config: &Config,
    query: Query,
) -> Result<Result<Rows, Reply>, CliError> {
    let spool = Spool::new(&config.spool_dir);
    if spool.daemon_state() == DaemonState::Running {
        return match ask_keeping(
            config,
            Request::Query(query.clone()),
            Duration::from_secs(30),
        ) {
            Err(e) if e.message == NO_ANSWER => {
                match offline(command, config, query, "ysctld does not answer (hung?)")? {
                    Reply::Rows { rows, .. } => Ok(Ok(Rows::All(rows.into_iter()))),
                    Reply::Rejected { error } => Err(CliError::failed(error)),
                    reply => Ok(Err(reply)),
                }
            }
            Err(e) => Err(e),
            Ok((Reply::Streamed { .. }, Some(sent))) => Ok(Ok(Rows::Streamed(sent.into_rows()?))),
            Ok((Reply::Rows { rows, .. }, _)) => Ok(Ok(Rows::All(rows.into_iter()))),
            Ok((Reply::Rejected { error }, _)) => Err(CliError::failed(error)),
            Ok((reply, _)) => Ok(Err(reply)),
        };
    }
    match self::query(command, config, query)? {
        Reply::Rows { rows, .. } => Ok(Ok(Rows::All(rows.into_iter()))),
        reply => Ok(Err(reply)),
    }
}

/// The jobs `filter` matches in the accounting records, each followed by
/// its steps (its batch and extern steps among them), and the time of
/// the answer.
pub fn accounting_views(
    command: &str,
    config: &Config,
    filter: crate::proto::JobFilter,
) -> Result<(Vec<crate::report::view::JobView>, i64), CliError> {
    let reply = self::query(
        command,
        config,
        Query::Accounting {
            filter,
            fields: None,
            steps: true,
            batch_steps: true,
        },
    )?;
    match reply {
        Reply::Jobs { jobs, now } => Ok((jobs, now)),
        Reply::Rejected { error } => Err(CliError::failed(error)),
        other => Err(CliError::failed(format!(
            "unexpected reply from ysctld: {other:?}"
        ))),
    }
}

/// What a listing query returned: whole jobs (for --json) or rendered rows.
pub fn print_listing(reply: Reply, render: impl FnOnce(Vec<Vec<String>>) -> String) -> CliResult {
    match reply {
        Reply::Jobs { jobs, now } => {
            let json = serde_json::json!({ "jobs": jobs, "time": now });
            print(&format!("{}\n", serde_json::to_string_pretty(&json)?))
        }
        Reply::Rows { rows, .. } => print(&render(rows)),
        other => Err(CliError::failed(format!(
            "unexpected reply from ysctld: {other:?}"
        ))),
    }
}

pub fn current_user_name() -> String {
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| nix::unistd::getuid().to_string())
}

/// Parses job ids given as separate words or comma lists: `17 18,19`, with
/// array tasks as `12_3` or `12_[1-3,7]`.
pub fn parse_job_ids(words: &[String]) -> Result<Vec<crate::array::JobRef>, CliError> {
    let mut ids = Vec::new();
    for word in words {
        // Commas inside brackets belong to the task list.
        let mut depth = 0;
        let mut part = String::new();
        let mut parts = Vec::new();
        for c in word.chars() {
            match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(std::mem::take(&mut part));
                    continue;
                }
                _ => {}
            }
            part.push(c);
        }
        parts.push(part);
        for part in parts.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
            ids.extend(
                crate::array::JobRef::parse(part).map_err(|e| CliError::usage(e.to_string()))?,
            );
        }
    }
    Ok(ids)
}

/// Splits comma lists given once or repeated: `-u a,b -u c`.
pub fn split_list(values: &[String]) -> Vec<String> {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Parses job states given as names or codes.
pub fn parse_states(values: &[String]) -> Result<Vec<crate::model::job::JobState>, CliError> {
    let words = split_list(values);
    // squeue's `--states=all`.
    if words.iter().any(|w| w.eq_ignore_ascii_case("all")) {
        return Ok(crate::model::job::JobState::ALL.to_vec());
    }
    words
        .iter()
        .map(|s| {
            crate::model::job::JobState::parse(s).ok_or_else(|| {
                let names: Vec<&str> = crate::model::job::JobState::ALL
                    .iter()
                    .map(|s| s.name())
                    .collect();
                CliError::usage(format!(
                    "invalid state '{s}' (states: {}, or all)",
                    names.join(", ")
                ))
            })
        })
        .collect()
}

/// The filter fields shared by ysqueue and ysacct.
pub fn job_filter(
    ids: &[String],
    users: &[String],
    accounts: &[String],
    names: &[String],
    states: &[String],
) -> Result<JobFilter, CliError> {
    Ok(JobFilter {
        job_ids: parse_job_ids(ids)?,
        users: split_list(users),
        accounts: split_list(accounts),
        names: split_list(names),
        states: parse_states(states)?,
        start: None,
        end: None,
        ..JobFilter::default()
    })
}

/// Sets up logging: `YS_LOG` (tracing's filter syntax) or the level `-v` gives.
pub fn init_logging(verbosity: u8) {
    let default = match verbosity {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("YS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| OneLineLog)
        .with_ansi(false)
        .try_init();
}

/// Standard error for the log, a line per event: a control character in
/// anything a line quotes (a name a stranger sent, a job's reason) is
/// written escaped, so no one can forge a line of the log or play on the
/// terminal of whoever reads it.
struct OneLineLog;

impl Write for OneLineLog {
    /// `buf` is one whole event, as the formatter writes it at once.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let (line, end) = match text.strip_suffix('\n') {
            Some(line) => (line, "\n"),
            None => (&*text, ""),
        };
        let line = crate::report::escape_controls(line, false);
        let mut err = std::io::stderr().lock();
        err.write_all(line.as_bytes())?;
        err.write_all(end.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}
