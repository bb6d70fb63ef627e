//! `ysctld`: the controller daemon's command line. It daemonizes itself
//! unless told `--foreground`, and returns only once the daemon accepts
//! requests (or with the reason it could not start).

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use clap::Parser;

use super::{init_logging, CliError, CliResult};
use crate::config::{self, Config};
use crate::daemon;

#[derive(Parser, Debug)]
#[command(
    name = "ysctld",
    version,
    about = "The ysched controller daemon",
    long_about = "The ysched controller daemon: takes jobs from the spool, schedules them on the GPUs, \
                  runs them through one supervisor (ysstepd) each, and keeps the accounting database. \
                  Run as root it serves every user (system mode); run as an ordinary user it serves \
                  only that user (personal mode). Jobs keep running when it stops, and are re-adopted \
                  when it starts again."
)]
pub struct Args {
    /// Configuration file (default: $YS_CONF, /etc/ysched/ysched.toml, ~/.config/ysched/ysched.toml)
    #[arg(short = 'f', long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
    /// Stay in the foreground and log to standard error
    #[arg(short = 'D', long)]
    pub foreground: bool,
    /// Log more (-v debug, -vv trace); YS_LOG overrides
    #[arg(short = 'v', long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Check a configuration file (default: the one ysctld would read) and print what would be detected, without starting
    #[arg(long = "check-config", value_name = "FILE", num_args = 0..=1)]
    pub check_config: Option<Option<PathBuf>>,
    /// Check the whole accounting database (SQLite's integrity_check, read-only; a start checks it only after an unclean stop) and exit: 0 sound, 1 not
    #[arg(long = "check-db")]
    pub check_db: bool,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Replay a workload trace through the scheduling policy in virtual time
    Simulate(SimulateArgs),
    /// Write Slurm's configuration for this setup into DIR: slurm.conf, gres.conf, qos.sh and a sacctmgr load file
    ExportSlurm(ExportArgs),
}

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// The directory to write into (made if missing)
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Slurm's ClusterName
    #[arg(long, value_name = "NAME", default_value = "ysched")]
    pub cluster: String,
    /// Replace files already there
    #[arg(long)]
    pub force: bool,
}

#[derive(clap::Args, Debug)]
pub struct SimulateArgs {
    /// The trace: CSV with a header (submit_s, run_s or duration_s, gpus or procs, req_time_s, user, group)
    #[arg(long, value_name = "FILE.csv", required_unless_present = "chaos")]
    pub trace: Option<PathBuf>,
    /// Instead of a trace: the whole controller under faults (crashes, failed commits, users' requests) over simulated nodes, its invariants checked at every step
    #[arg(long, conflicts_with = "trace")]
    pub chaos: bool,
    /// With --chaos: how many seeds
    #[arg(long, value_name = "N", default_value_t = 100, requires = "chaos")]
    pub seeds: u64,
    /// With --chaos: the first seed (--first-seed N --seeds 1 reruns one)
    #[arg(
        long = "first-seed",
        value_name = "N",
        default_value_t = 1,
        requires = "chaos"
    )]
    pub first_seed: u64,
    /// With --chaos: simulated hours of faults per seed
    #[arg(long, value_name = "H", default_value_t = 24.0, requires = "chaos")]
    pub hours: f64,
    /// With --chaos: two of the three nodes are the pool's, their agents over a simulated network (links broken and stalled, agents restarted, the controller stalled)
    #[arg(long, requires = "chaos")]
    pub pool: bool,
    /// The policy to replay it under
    #[arg(long, value_enum, default_value = "ysched")]
    pub policy: crate::sim::Policy,
    /// Processors per GPU, for traces that count processors (procs)
    #[arg(long = "procs-per-gpu", value_name = "N", default_value_t = 1)]
    pub procs_per_gpu: u32,
    /// Where the trace gives no requested time, the time limit is the run time times this
    #[arg(long = "limit-factor", value_name = "F", default_value_t = 2.0)]
    pub limit_factor: f64,
    /// Replay only the first N jobs
    #[arg(long = "max-jobs", value_name = "N")]
    pub max_jobs: Option<usize>,
    /// Divide submission times by F: the same jobs arriving F times faster
    #[arg(long = "arrival-scale", value_name = "F", default_value_t = 1.0)]
    pub arrival_scale: f64,
    /// Which trace column makes a job's account
    #[arg(long = "accounts-from", value_enum, default_value = "group")]
    pub accounts_from: crate::sim::trace::AccountsFrom,
    /// Print the report as one JSON object
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> CliResult {
    // The controller under faults runs a pool of its own: no config read.
    if let Some(Command::Simulate(sim)) = args
        .command
        .as_ref()
        .filter(|c| matches!(c, Command::Simulate(s) if s.chaos))
    {
        return chaos(sim);
    }
    let checked = args.check_config.clone().flatten();
    let path = match checked.or(args.config) {
        Some(p) => p,
        None => {
            let (p, exists) = config::locate();
            if !exists {
                return Err(CliError::failed(format!(
                    "no configuration at {}; pass --config FILE or set YS_CONF (see ysched.toml(5))",
                    p.display()
                )));
            }
            p
        }
    };
    let config = Config::load(&path).map_err(|e| CliError::failed(e.to_string()))?;
    if args.check_config.is_some() {
        let checked = check_config(&config);
        super::print(&checked.report())?;
        return checked.outcome();
    }
    if args.check_db {
        return check_db(&config);
    }
    match args.command {
        Some(Command::Simulate(sim)) => {
            // The controller's own log, for a seed being looked into.
            if args.verbose > 0 {
                init_logging(args.verbose - 1);
            }
            return simulate(&config, sim);
        }
        Some(Command::ExportSlurm(export)) => return export_slurm(&config, &export),
        None => {}
    }
    if args.foreground {
        init_logging(args.verbose);
        let stopped = daemon::run(config, daemon::Options { stepd: None }, || {})?;
        return stopped_status(stopped);
    }
    let log = config
        .log_file
        .clone()
        .unwrap_or_else(|| config.spool_dir.join("ysctld.log"));
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| CliError::failed(format!("cannot create {}: {e}", dir.display())))?;
    }
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    // SAFETY: no thread has been started yet in this process.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Parent { child } => {
            drop(write_end);
            // "ready", or the reason it failed followed by EOF; the daemon
            // keeps its end open, so stop at "ready" rather than wait for EOF.
            let mut status = String::new();
            let mut pipe = std::fs::File::from(read_end);
            let mut buf = [0u8; 512];
            while status != "ready" {
                match pipe.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => status.push_str(&String::from_utf8_lossy(&buf[..n])),
                }
            }
            if status == "ready" {
                println!("ysctld started (pid {child}); log: {}", log.display());
                Ok(())
            } else if status.is_empty() {
                Err(CliError::failed(format!(
                    "ysctld exited during start-up; see {}",
                    log.display()
                )))
            } else {
                Err(CliError::failed(status))
            }
        }
        nix::unistd::ForkResult::Child => {
            drop(read_end);
            let notify = write_end;
            let result = background(config, &log, args.verbose, &notify);
            if let Err(e) = &result {
                let _ = std::fs::File::from(notify).write_all(e.message.as_bytes());
            }
            result
        }
    }
}

fn background(config: Config, log: &std::path::Path, verbosity: u8, notify: &OwnedFd) -> CliResult {
    nix::unistd::setsid()?;
    // The log names users, jobs and paths: root's eyes only.
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log)
        .map_err(|e| CliError::failed(format!("cannot open the log {}: {e}", log.display())))?;
    let _ = log_file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600));
    let null = std::fs::File::open("/dev/null")?;
    nix::unistd::dup2_stdin(&null)?;
    nix::unistd::dup2_stdout(&log_file)?;
    nix::unistd::dup2_stderr(&log_file)?;
    init_logging(verbosity);
    let notify = notify.try_clone()?;
    let ready = move || {
        let _ = std::fs::File::from(notify).write_all(b"ready");
    };
    let stopped = daemon::run(config, daemon::Options { stepd: None }, ready).map_err(|e| {
        tracing::error!(target: "ysched::daemon", "{e}");
        CliError::from(e)
    })?;
    stopped_status(stopped)
}

/// A controller that handed the lead over exits with the status of one
/// deposed (75): the service manager starts it again, as the standby.
fn stopped_status(stopped: daemon::Stopped) -> CliResult {
    match stopped {
        daemon::Stopped::Stopped => Ok(()),
        daemon::Stopped::HandedOver { term } => Err(CliError {
            code: daemon::leading::EXIT_DEPOSED as u8,
            message: format!(
                "term {term} handed over (yscontrol takeover); started again, this controller is the standby"
            ),
        }),
    }
}

/// What ysctld would find and do with `config`, read from the host but
/// touching nothing: no spool, no cgroup, no database; and what would
/// keep it from starting or running jobs (errors) or is worth a look
/// (warnings).
/// `--check-db`: the whole database checked, as SQLite's
/// `integrity_check` finds it.
fn check_db(config: &Config) -> CliResult {
    let path = crate::spool::Spool::new(&config.spool_dir).database();
    if !path.exists() {
        return Err(CliError::failed(format!(
            "no database at {} (the config's spool_dir): nothing to check",
            path.display()
        )));
    }
    let started = std::time::Instant::now();
    const RESTORE: &str = "Stop ysctld and restore the database from a backup (see ysctld(8), FILES, and the admin guide's Backup)";
    let problems = crate::db::clean_stop::integrity_check(&path).map_err(|e| {
        CliError::failed(format!(
            "{}: integrity_check cannot read it: {e}\n{RESTORE}",
            path.display()
        ))
    })?;
    if problems.is_empty() {
        return super::print(&format!(
            "{}: sound (integrity_check, {} ms)\n",
            path.display(),
            started.elapsed().as_millis()
        ));
    }
    Err(CliError::failed(format!(
        "{}: integrity_check found {} problem(s):\n{}\n{RESTORE}",
        path.display(),
        problems.len(),
        problems.join("\n")
    )))
}

fn check_config(config: &Config) -> Checked {
    let mut lines = vec![format!("{}: valid", config.path.display())];
    let mut problems = Vec::new();
    describe(config, &mut lines, &mut problems);
    Checked { lines, problems }
}

/// What `--check-config` found: the description, and the problems.
struct Checked {
    lines: Vec<String>,
    problems: Vec<Problem>,
}

enum Problem {
    /// ysctld would not start, or jobs could not run.
    Error(String),
    Warning(String),
}

impl Checked {
    fn report(&self) -> String {
        let mut out = self.lines.join("\n");
        for p in &self.problems {
            match p {
                Problem::Error(e) => out.push_str(&format!("error: {e}\n")),
                Problem::Warning(w) => out.push_str(&format!("warning: {w}\n")),
            }
        }
        out
    }

    /// Exit status 0: nothing to say; 3: warnings only; 4: errors.
    fn outcome(&self) -> CliResult {
        let errors = self
            .problems
            .iter()
            .filter(|p| matches!(p, Problem::Error(_)))
            .count();
        let warnings = self.problems.len() - errors;
        match (errors, warnings) {
            (0, 0) => Ok(()),
            (0, n) => Err(CliError {
                code: 3,
                message: format!("{n} warning{}", if n == 1 { "" } else { "s" }),
            }),
            (n, _) => Err(CliError {
                code: 4,
                message: format!(
                    "{n} error{} (ysctld would not start, or jobs could not run)",
                    if n == 1 { "" } else { "s" }
                ),
            }),
        }
    }
}

/// Whether this process could create files in `dir`, or in the nearest
/// directory above it that exists (where `dir` would be made).
fn writable(dir: &Path) -> Result<(), NotWritable> {
    let mut at = dir;
    while !at.exists() {
        match at.parent() {
            Some(p) => at = p,
            None => return Err(NotWritable::NoneExists(dir.to_path_buf())),
        }
    }
    let at = at.to_path_buf();
    if !at.is_dir() {
        return Err(NotWritable::NotADirectory(at));
    }
    let read_only = nix::sys::statvfs::statvfs(&at)
        .is_ok_and(|s| s.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY));
    if read_only {
        return Err(NotWritable::ReadOnly(at));
    }
    nix::unistd::access(
        &at,
        nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
    )
    .map_err(|errno| NotWritable::Denied { at, errno })
}

/// Why the spool directory could not be written.
#[derive(Debug, thiserror::Error)]
enum NotWritable {
    #[error("no directory of {} exists", .0.display())]
    NoneExists(PathBuf),
    #[error("{} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    #[error("{} is on a read-only filesystem", .0.display())]
    ReadOnly(PathBuf),
    #[error("{} is not writable: {errno}", at.display())]
    Denied {
        at: PathBuf,
        errno: nix::errno::Errno,
    },
}

fn describe(config: &Config, lines: &mut Vec<String>, problems: &mut Vec<Problem>) {
    let inventory = crate::gpu::Inventory::discover(config);
    let system = nix::unistd::geteuid().is_root();
    check_basics(config, &inventory, problems);
    describe_node(config, &inventory, system, lines);
    describe_isolation(config, &inventory, system, lines, problems);
    describe_policy(config, lines);
    lines.push(String::new());
}

/// One `key  value` line of the description.
fn add(lines: &mut Vec<String>, key: &str, value: String) {
    lines.push(format!("  {key:<17}{value}"));
}

/// The spool is writable, there are GPUs, the notify command exists.
fn check_basics(config: &Config, inventory: &crate::gpu::Inventory, problems: &mut Vec<Problem>) {
    if let Err(e) = writable(&config.spool_dir) {
        problems.push(Problem::Error(format!(
            "spool_dir {}: {e}",
            config.spool_dir.display()
        )));
    }
    if inventory.gpus.is_empty() {
        problems.push(Problem::Warning(
            "no GPUs: none declared in [[gpus]] and none found by the driver; only jobs without GPUs can run".into(),
        ));
    }
    if let Some(command) = &config.notify_command {
        let program = std::path::Path::new(&command[0]);
        let found = if program.is_absolute() {
            program.is_file()
        } else {
            std::env::var_os("PATH")
                .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        };
        if !found {
            problems.push(Problem::Error(format!(
                "notify_command: {} not found",
                program.display()
            )));
        }
    }
}

/// The spool, the socket, the node: name, GPUs, CPUs, memory.
fn describe_node(
    config: &Config,
    inventory: &crate::gpu::Inventory,
    system: bool,
    lines: &mut Vec<String>,
) {
    add(
        lines,
        "spool",
        format!(
            "{} ({} mode, as {})",
            config.spool_dir.display(),
            if system { "system" } else { "personal" },
            if system {
                "root: serves every user".to_string()
            } else {
                format!("uid {}: serves only that user", nix::unistd::geteuid())
            }
        ),
    );
    let spool = crate::spool::Spool::new(&config.spool_dir);
    let socket = spool.socket_path();
    add(
        lines,
        "requests",
        match crate::spool::socket::path_too_long(&socket) {
            None => format!(
                "state changes on {}, queries through {}",
                socket.display(),
                spool.incoming().display()
            ),
            Some(reason) => format!(
                "all through {}: no socket, as {reason}",
                spool.incoming().display()
            ),
        },
    );
    add(
        lines,
        "node",
        format!(
            "{}, time zone {}",
            config.node_name,
            config.timezone().iana_name().unwrap_or("UTC")
        ),
    );
    add(
        lines,
        "GPUs",
        format!("{} ({})", inventory.describe_details(), inventory.source),
    );
    let groups: std::collections::BTreeSet<u32> = inventory.gpus.iter().map(|g| g.group).collect();
    if groups.len() > 1 {
        add(
            lines,
            "GPU groups",
            format!("{} (NVLink or PCIe switch, or group_size)", groups.len()),
        );
    }
    add(
        lines,
        "CPUs",
        match config.cpus {
            Some(n) => format!("{n} (config)"),
            None => format!("{} (detected)", crate::exec::local::host_cpus()),
        },
    );
    add(
        lines,
        "memory",
        match config.memory_mb {
            Some(mb) => format!("{} (config)", crate::model::units::format_memory_mb(mb)),
            None => format!(
                "{} (detected)",
                crate::model::units::format_memory_mb(crate::exec::local::host_memory_mb())
            ),
        },
    );
}

/// How jobs are confined here, and what is not enforced.
fn describe_isolation(
    config: &Config,
    inventory: &crate::gpu::Inventory,
    system: bool,
    lines: &mut Vec<String>,
    problems: &mut Vec<Problem>,
) {
    match crate::exec::isolation::Isolation::prepare(config, inventory) {
        Ok(isolation) => {
            let d = &isolation.detected;
            add(lines, "isolation", d.description.clone());
            if system && d.placement.layout == crate::model::isolation::Layout::Off {
                problems.push(Problem::Warning(format!(
                    "job isolation is off ({}): jobs are not confined to their GPUs, memory and CPUs",
                    d.description
                )));
            }
            for missing in &d.missing {
                add(lines, "  not enforced", missing.clone());
            }
            if d.placement.layout != crate::model::isolation::Layout::Off {
                let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
                if let Some(point) = crate::exec::cgroup::slow_moves(&mounts) {
                    add(lines,
                        "  job starts",
                        format!("each waits ~10 ms for the kernel to move it into its cgroup; `mount -o remount,favordynmods {point}` removes the wait (ysctld(8), ISOLATION)"),
                    );
                }
            }
        }
        Err(e) => {
            add(lines, "isolation", format!("ERROR: {e}"));
            problems.push(Problem::Error(e.to_string()));
        }
    }
}

/// Sampling, accounts, QoS, admins, metrics, notifications, retention.
fn describe_policy(config: &Config, lines: &mut Vec<String>) {
    add(
        lines,
        "GPU utilisation",
        if config.gpu_sample_secs == 0 {
            "not sampled (gpu_sample_secs = 0)".into()
        } else {
            let source = crate::gpu::sampling::detect().describe();
            if source.starts_with("none") {
                source
            } else {
                format!("{source}, every {} s", config.gpu_sample_secs)
            }
        },
    );
    add(
        lines,
        "accounts",
        if config.accounts.is_empty() {
            format!(
                "none: every job is charged to '{}'",
                config::DEFAULT_ACCOUNT
            )
        } else {
            config
                .accounts
                .iter()
                .map(|a| a.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        },
    );
    let builtin = config.qos == config::default_qos_levels();
    add(
        lines,
        "QoS",
        format!(
            "{} (default {}{})",
            config.qos_names(", "),
            config.default_qos,
            if builtin {
                ""
            } else {
                "; the [[qos]] tables replace the built-in critical, high, medium, low"
            }
        ),
    );
    add(
        lines,
        "admins",
        if config.admins.is_empty() {
            "root only".into()
        } else {
            config.admins.join(", ")
        },
    );
    if let Some(f) = &config.metrics_file {
        add(lines, "metrics file", f.display().to_string());
    }
    if let Some(a) = &config.metrics_listen {
        add(lines, "metrics", format!("http://{a}/metrics"));
    }
    if let Some(c) = &config.notify_command {
        add(lines, "notifications", c.join(" "));
    }
    add(
        lines,
        "retention",
        match config.purge_after_months {
            Some(m) => format!("jobs purged {m} whole months after their month, summarised first"),
            None => "every job kept".into(),
        },
    );
    if let Some(days) = config.keep_payloads_days {
        add(
            lines,
            "scripts",
            format!("a finished job's script and environment kept {days} days after it ended"),
        );
    }
}

/// `ysctld simulate --chaos`: the whole controller under faults, seed by
/// seed; one line per invariant, and each broken one's seed and steps.
fn chaos(args: &SimulateArgs) -> CliResult {
    if !(args.hours > 0.0 && args.hours.is_finite()) {
        return Err(CliError::usage("--hours must be a positive number"));
    }
    let options = daemon::chaos::Options {
        first_seed: args.first_seed,
        seeds: args.seeds.max(1),
        hours: args.hours,
        pool: args.pool,
    };
    let report = daemon::chaos::run(&options).map_err(CliError::from)?;
    super::print(&report.render())?;
    if report.failures.is_empty() {
        Ok(())
    } else {
        Err(CliError::failed(format!(
            "{} seed(s) broke an invariant",
            report.failures.len()
        )))
    }
}

fn simulate(config: &Config, args: SimulateArgs) -> CliResult {
    if config.gpus.is_empty() {
        return Err(CliError::failed(format!(
            "{} declares no GPUs; the simulator needs [[gpus]] tables",
            config.path.display()
        )));
    }
    if !(args.limit_factor >= 1.0 && args.limit_factor.is_finite()) {
        return Err(CliError::usage("--limit-factor must be 1 or more"));
    }
    if !(args.arrival_scale > 0.0 && args.arrival_scale.is_finite()) {
        return Err(CliError::usage("--arrival-scale must be a positive number"));
    }
    let reading = crate::sim::trace::Reading {
        procs_per_gpu: args.procs_per_gpu.max(1),
        limit_factor: args.limit_factor,
        max_jobs: args.max_jobs,
        arrival_scale: args.arrival_scale,
        accounts_from: args.accounts_from,
    };
    let Some(trace) = &args.trace else {
        return Err(CliError::usage("give --trace FILE.csv, or --chaos"));
    };
    let (jobs, skipped) = crate::sim::trace::read(trace, &reading)?;
    if jobs.is_empty() {
        return Err(CliError::failed(format!(
            "{} has no job to replay",
            trace.display()
        )));
    }
    let report = crate::sim::run(config, &jobs, skipped, args.policy);
    if args.json {
        super::print(&format!("{}\n", serde_json::to_string_pretty(&report)?))
    } else {
        super::print(&report.render())
    }
}

/// `ysctld export-slurm DIR`: this server and the pool's nodes (as they
/// last reported), the accounts and the QoS, as Slurm's files.
fn export_slurm(config: &Config, args: &ExportArgs) -> CliResult {
    let mut nodes = vec![this_node(config)];
    let database = config.database_path();
    if database.exists() {
        let conn = crate::db::open_readonly(&database)?;
        for record in crate::db::joined_nodes(&conn)? {
            let facts = record
                .facts
                .as_deref()
                .and_then(|f| serde_json::from_str::<crate::exec::executor::NodeFacts>(f).ok());
            match facts {
                Some(f) => nodes.push(export_node(
                    &record.name,
                    &f.inventory,
                    (f.cpus, f.mem_mb, f.tmp_mb),
                )),
                None => super::warn(
                    "ysctld",
                    &format!(
                        "node {} has not reported what it has yet: left out",
                        record.name
                    ),
                ),
            }
        }
    }
    let export = crate::report::slurm_conf::export(config, &nodes, &args.cluster);
    std::fs::create_dir_all(&args.dir)
        .map_err(|e| CliError::failed(format!("cannot create {}: {e}", args.dir.display())))?;
    let there: Vec<String> = export
        .files
        .iter()
        .map(|(name, _)| args.dir.join(name))
        .filter(|p| p.exists())
        .map(|p| p.display().to_string())
        .collect();
    if !there.is_empty() && !args.force {
        return Err(CliError::failed(format!(
            "{} already exist; nothing was written (--force replaces them)",
            there.join(", ")
        )));
    }
    for (name, text) in &export.files {
        let path = args.dir.join(name);
        std::fs::write(&path, text)
            .map_err(|e| CliError::failed(format!("cannot write {}: {e}", path.display())))?;
    }
    super::print(&format!(
        "wrote slurm.conf, gres.conf, qos.sh and sacctmgr.cfg for {} node(s) into {}\n\
         then: start slurmdbd, then slurmctld with this slurm.conf (it registers the cluster and its gres/gpu), \
         then sh qos.sh && sacctmgr -i load file=sacctmgr.cfg; what Slurm cannot say is in their comments\n",
        nodes.len(),
        args.dir.display()
    ))
}

fn this_node(config: &Config) -> crate::report::slurm_conf::ExportNode {
    let inventory = crate::gpu::Inventory::discover(config);
    let cpus = config.cpus.unwrap_or_else(crate::exec::local::host_cpus);
    let memory = config
        .memory_mb
        .unwrap_or_else(crate::exec::local::host_memory_mb);
    let tmp = crate::exec::local::tmp_disk_mb();
    export_node(&config.node_name, &inventory, (cpus, memory, tmp))
}

fn export_node(
    name: &str,
    inventory: &crate::gpu::Inventory,
    (cpus, memory_mb, tmp_mb): (u32, u64, u64),
) -> crate::report::slurm_conf::ExportNode {
    let mut gpus: Vec<(String, u32, Vec<PathBuf>)> = Vec::new();
    for gpu in &inventory.gpus {
        match gpus.iter_mut().find(|(t, _, _)| *t == gpu.gpu_type) {
            Some(entry) => entry.1 += 1,
            None => gpus.push((gpu.gpu_type.clone(), 1, Vec::new())),
        }
        if let (Some(device), Some(entry)) = (
            &gpu.device,
            gpus.iter_mut().find(|(t, _, _)| *t == gpu.gpu_type),
        ) {
            entry.2.push(device.clone());
        }
    }
    crate::report::slurm_conf::ExportNode {
        name: name.to_string(),
        cpus,
        memory_mb,
        tmp_mb,
        gpus,
    }
}
