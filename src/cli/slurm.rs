//! Slurm's commands over ysched, for tools that drive Slurm by running its
//! commands and reading their output: one binary, `ysched-slurm`, that acts
//! as `sbatch`, `squeue`, `scancel`, `sacct`, `sshare`, `sinfo`, `scontrol`
//! or `srun` by the name it is called under (links in
//! `/usr/lib/ysched/slurm-compat/`, put on PATH). The ys* commands already
//! take Slurm's options and formats; what is Slurm's alone — `sinfo`'s
//! partition view, `scontrol`'s words, `srun` inside a job, exit status 1
//! for bad options — is here.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

use super::{load_config, print, CliError, CliResult};

/// The commands this binary can be.
pub const COMMANDS: [&str; 8] = [
    "sbatch", "squeue", "scancel", "sacct", "sshare", "sinfo", "scontrol", "srun",
];

/// Runs as `name` (the file name it was called by, or the first argument
/// after `ysched-slurm`).
pub fn main(name: &str, args: Vec<OsString>) -> ExitCode {
    let argv = |args: Vec<OsString>| -> Vec<OsString> {
        std::iter::once(OsString::from(name)).chain(args).collect()
    };
    match name {
        "sbatch" => with_slurm_exit(
            name,
            super::ysbatch::Args::try_parse_from(argv(args)),
            super::ysbatch::run,
        ),
        "squeue" => with_slurm_exit(
            name,
            super::ysqueue::Args::try_parse_from(argv(args)),
            super::ysqueue::run,
        ),
        "scancel" => with_slurm_exit(
            name,
            super::yscancel::Args::try_parse_from(argv(args)),
            super::yscancel::run,
        ),
        "sacct" => with_slurm_exit(
            name,
            super::ysacct::Args::try_parse_from(argv(args)),
            super::ysacct::run,
        ),
        "sshare" => with_slurm_exit(
            name,
            super::ysshare::Args::try_parse_from(argv(args)),
            super::ysshare::run,
        ),
        "sinfo" => with_slurm_exit(name, SinfoArgs::try_parse_from(argv(args)), sinfo),
        "scontrol" => with_slurm_exit(name, ScontrolArgs::try_parse_from(argv(args)), scontrol),
        "srun" => with_slurm_exit(name, SrunArgs::try_parse_from(argv(args)), srun),
        _ => {
            eprintln!(
                "ysched-slurm: call me as one of {} (a link by that name, or `ysched-slurm sbatch ...`)",
                COMMANDS.join(", ")
            );
            ExitCode::from(1)
        }
    }
}

/// Slurm's commands exit 1 for any error, bad options included; help and
/// version exit 0.
fn with_slurm_exit<A>(
    name: &str,
    parsed: Result<A, clap::Error>,
    run: impl FnOnce(A) -> CliResult,
) -> ExitCode {
    match parsed {
        Ok(args) => match run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                if !e.message.is_empty() {
                    eprintln!("{name}: error: {}", e.message);
                }
                ExitCode::from(1)
            }
        },
        Err(e) => {
            let informational = matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            );
            let _ = e.print();
            ExitCode::from(if informational { 0 } else { 1 })
        }
    }
}

/// `sinfo`: the one partition, as Slurm prints it.
#[derive(Parser, Debug)]
#[command(
    name = "sinfo",
    version,
    disable_help_flag = true,
    about = "Slurm's sinfo over ysched: the server as one partition"
)]
pub struct SinfoArgs {
    /// Output format: %P partition, %a availability, %l time limit, %D nodes, %t state, %T long state, %N nodes, %G GPUs, %c CPUs, %m memory
    #[arg(short = 'o', long = "format", value_name = "FORMAT")]
    pub format: Option<String>,
    /// Leave out the header
    #[arg(short = 'h', long)]
    pub noheader: bool,
    /// Node-oriented output (one node either way)
    #[arg(short = 'N', long = "Node")]
    pub node: bool,
    /// Accepted: one partition either way
    #[arg(short = 'p', long, value_name = "PARTITION")]
    pub partition: Option<String>,
    /// Accepted (ysched has one summary)
    #[arg(short = 's', long)]
    pub summarize: bool,
    /// Print help
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
}

/// The partition name ysched shows to Slurm tools.
const PARTITION: &str = "ysched";

fn sinfo(args: SinfoArgs) -> CliResult {
    let config = load_config()?;
    let node = super::ysinfo::node_info(&config)?;
    let allocated = node.gpus.iter().filter(|g| !g.jobs.is_empty()).count();
    let drained = node.gpus.iter().filter(|g| g.drain.is_some()).count();
    let total = node.gpus.len();
    let state = if total > 0 && drained == total {
        "drain"
    } else if total > 0 && allocated == total {
        "alloc"
    } else if allocated > 0 || node.cpus_allocated > 0 {
        "mix"
    } else {
        "idle"
    };
    let long_state = match state {
        "drain" => "drained",
        "alloc" => "allocated",
        "mix" => "mixed",
        _ => "idle",
    };
    let mut types: Vec<(String, usize)> = Vec::new();
    for g in &node.gpus {
        match types.iter_mut().find(|(t, _)| *t == g.gpu_type) {
            Some((_, n)) => *n += 1,
            None => types.push((g.gpu_type.clone(), 1)),
        }
    }
    let gres = if types.is_empty() {
        "(null)".to_string()
    } else {
        types
            .iter()
            .map(|(t, n)| format!("gpu:{t}:{n}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let format = args
        .format
        .unwrap_or_else(|| "%9P %.5a %.10l %.6D %.6t %N".to_string());
    let value = |code: char, header: bool| -> Option<String> {
        Some(match (code, header) {
            ('P', true) => "PARTITION".into(),
            ('P', false) => format!("{PARTITION}*"),
            ('R', true) => "PARTITION".into(),
            ('R', false) => PARTITION.into(),
            ('a', true) => "AVAIL".into(),
            ('a', false) => "up".into(),
            ('l', true) => "TIMELIMIT".into(),
            ('l', false) => "infinite".into(),
            ('D', true) => "NODES".into(),
            ('D', false) => "1".into(),
            ('t', true) | ('T', true) => "STATE".into(),
            ('t', false) => state.into(),
            ('T', false) => long_state.into(),
            ('N', true) => "NODELIST".into(),
            ('N', false) => node.name.clone(),
            ('G', true) => "GRES".into(),
            ('G', false) => gres.clone(),
            ('c', true) => "CPUS".into(),
            ('c', false) => node.cpus.to_string(),
            ('m', true) => "MEMORY".into(),
            ('m', false) => node.memory_mb.to_string(),
            _ => return None,
        })
    };
    let render = |header: bool| -> Result<String, CliError> {
        render_format(&format, |code| value(code, header))
    };
    let mut out = String::new();
    if !args.noheader {
        out.push_str(&render(true)?);
        out.push('\n');
    }
    out.push_str(&render(false)?);
    out.push('\n');
    print(&out)
}

/// Expands a Slurm-style format (`%[.][width]code`, other text as is).
fn render_format(format: &str, value: impl Fn(char) -> Option<String>) -> Result<String, CliError> {
    let mut out = String::new();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let right = chars.next_if_eq(&'.').is_some();
        let mut width = String::new();
        while let Some(d) = chars.next_if(|d| d.is_ascii_digit()) {
            width.push(d);
        }
        let Some(code) = chars.next() else {
            return Err(CliError::failed("format ends with '%'"));
        };
        let text = value(code).ok_or_else(|| {
            CliError::failed(format!(
                "invalid format code %{code} (sinfo here knows %P %R %a %l %D %t %T %N %G %c %m)"
            ))
        })?;
        match width.parse::<usize>() {
            Ok(w) if right => out.push_str(&format!("{text:>w$}")),
            Ok(w) => out.push_str(&format!("{text:<w$}")),
            Err(_) => out.push_str(&text),
        }
    }
    Ok(out.trim_end().to_string())
}

/// `scontrol`: the words tools use.
#[derive(Parser, Debug)]
#[command(name = "scontrol", version, about = "Slurm's scontrol over ysched")]
pub struct ScontrolArgs {
    /// Accepted: one line per record either way
    #[arg(short = 'o', long)]
    pub oneliner: bool,
    /// show job ID | show node | show config | show partition | requeue ID... | hold ID... | release ID... | suspend ID... | resume ID... | update JobId=ID KEY=VALUE... | ping | reconfigure
    #[arg(value_name = "COMMAND", num_args = 1.., required = true, allow_hyphen_values = true)]
    pub words: Vec<String>,
}

fn scontrol(args: ScontrolArgs) -> CliResult {
    let words: Vec<String> = args.words;
    let lower: Vec<String> = words.iter().map(|w| w.to_ascii_lowercase()).collect();
    let rest = |n: usize| -> Vec<String> { words[n..].to_vec() };
    use super::yscontrol::{Args as Y, Command as C, Show as S};
    let command = match lower
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["ping"] => return ping(),
        ["show", "job", ..] | ["show", "jobs", ..] | ["show", "jobid", ..] => {
            let Some(job) = words.get(2) else {
                return Err(CliError::failed(
                    "scontrol show job: give a job id (ysched shows one job at a time)",
                ));
            };
            C::Show {
                what: S::Job { job: job.clone() },
            }
        }
        ["show", "node", ..] | ["show", "nodes", ..] => C::Show { what: S::Node },
        ["show", "config"] => C::Show { what: S::Config },
        ["show", "partition", ..] | ["show", "partitions", ..] => return show_partition(),
        ["requeue", _, ..] => C::Requeue { jobs: rest(1) },
        ["hold", _, ..] => C::Hold { jobs: rest(1) },
        ["release", _, ..] => C::Release { jobs: rest(1) },
        ["suspend", _, ..] => C::Suspend { jobs: rest(1) },
        ["resume", _, ..] => C::Resume { jobs: rest(1) },
        ["update", _, ..] => C::Update { words: rest(1) },
        ["reconfigure"] => C::Reload,
        _ => {
            return Err(CliError::failed(format!(
            "'{}' is not supported by ysched's scontrol (it knows show job/node/config/partition, \
                 requeue, hold, release, suspend, resume, update, ping, reconfigure)",
            words.join(" ")
        )))
        }
    };
    super::yscontrol::run(Y { command })
}

/// `scontrol ping`: whether the controller answers.
fn ping() -> CliResult {
    let config = load_config()?;
    let spool = crate::spool::Spool::new(&config.spool_dir);
    let up = spool.daemon_state() == crate::spool::DaemonState::Running;
    print(&format!(
        "Slurmctld(primary) at {} is {}\n",
        config.node_name,
        if up { "UP" } else { "DOWN" }
    ))?;
    if up {
        Ok(())
    } else {
        Err(CliError::failed(String::new()))
    }
}

fn show_partition() -> CliResult {
    let config = load_config()?;
    let node = super::ysinfo::node_info(&config)?;
    print(&format!(
        "PartitionName={PARTITION}\n   AllowGroups=ALL Default=YES QoS=N/A\n   MaxNodes=1 MaxTime=UNLIMITED\n   \
         Nodes={}\n   State=UP TotalCPUs={} TotalNodes=1\n   TRES=cpu={},mem={}M,node=1,gres/gpu={}\n",
        node.name,
        node.cpus,
        node.cpus,
        node.memory_mb,
        node.gpus.len()
    ))
}

/// `srun` inside a batch job: the command as the job's one task.
#[derive(Parser, Debug)]
#[command(
    name = "srun",
    version,
    about = "Slurm's srun over ysched: inside a batch job, runs a command as its single task"
)]
pub struct SrunArgs {
    /// Tasks: only 1 (ysched runs a job as one task)
    #[arg(short = 'n', long, value_name = "N")]
    pub ntasks: Option<u32>,
    /// Nodes: only 1
    #[arg(short = 'N', long, value_name = "N")]
    pub nodes: Option<String>,
    /// Standard output to this file (%j job id, %t task, %n node, %N node name, %u user, %x name, %A %a arrays)
    #[arg(short = 'o', long, value_name = "PATTERN")]
    pub output: Option<String>,
    /// Standard error to this file (patterns as for --output)
    #[arg(short = 'e', long, value_name = "PATTERN")]
    pub error: Option<String>,
    /// Accepted: output is never buffered by srun here
    #[arg(short = 'u', long)]
    pub unbuffered: bool,
    /// A name for the step (shown nowhere)
    #[arg(short = 'J', long = "job-name", value_name = "NAME")]
    pub job_name: Option<String>,
    /// The command and its arguments
    #[arg(value_name = "COMMAND", num_args = 1.., required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<OsString>,
}

fn srun(args: SrunArgs) -> CliResult {
    use std::os::unix::process::CommandExt;
    let Some(job_id) = std::env::var("SLURM_JOB_ID")
        .ok()
        .and_then(|j| j.parse::<u64>().ok())
    else {
        return Err(CliError::failed(
            "ysched runs srun only inside a batch job (no SLURM_JOB_ID here); submit the work with sbatch",
        ));
    };
    if args.ntasks.is_some_and(|n| n != 1) {
        return Err(CliError::failed(
            "ysched runs a job as one task: --ntasks must be 1 (multi-task and multi-node steps are not supported)",
        ));
    }
    if let Some(n) = &args.nodes {
        if !matches!(n.trim(), "1" | "1-1") {
            return Err(CliError::failed(
                "ysched runs a job on one node: --nodes must be 1",
            ));
        }
    }
    let env = |k: &str| std::env::var(k).ok();
    let array = match (env("SLURM_ARRAY_JOB_ID"), env("SLURM_ARRAY_TASK_ID")) {
        (Some(a), Some(t)) => a.parse().ok().zip(t.parse().ok()),
        _ => None,
    };
    let name = env("SLURM_JOB_NAME").unwrap_or_default();
    let user = env("USER").unwrap_or_default();
    let node = env("SLURMD_NODENAME");
    let open = |pattern: &str| -> Result<std::fs::File, CliError> {
        let path = crate::job::expand_filename_pattern(
            pattern,
            job_id,
            array,
            &name,
            &user,
            node.as_deref(),
        );
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| CliError::failed(format!("cannot open {path}: {e}")))
    };
    let mut command = std::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("SLURM_PROCID", "0")
        .env("SLURM_LOCALID", "0")
        .env("SLURM_NODEID", "0")
        .env("SLURM_NTASKS", "1")
        .env("SLURM_NPROCS", "1")
        .env("SLURM_STEP_ID", "0")
        .env("SLURM_STEPID", "0")
        .env("SLURM_STEP_NUM_TASKS", "1");
    if let Some(o) = &args.output {
        command.stdout(open(o)?);
    }
    if let Some(e) = &args.error {
        command.stderr(open(e)?);
    }
    // Becomes the command: its exit status is srun's, signals reach it.
    let err = command.exec();
    Err(CliError::failed(format!(
        "cannot run {}: {err}",
        args.command[0].to_string_lossy()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sinfo_formats_pad_and_align_as_slurm_does() {
        let text = render_format("%9P|%.5a|%D", |c| match c {
            'P' => Some("ysched*".into()),
            'a' => Some("up".into()),
            'D' => Some("1".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(text, "ysched*  |   up|1");
        assert!(render_format("%Q", |_| None).is_err());
    }
}
