//! Slurm's commands over ysched, for tools that drive Slurm by running its
//! commands and reading their output: one binary, `ysched-slurm`, that acts
//! as `sbatch`, `squeue`, `scancel`, `sacct`, `sshare`, `sinfo`, `scontrol`,
//! `srun` or a read-only `sacctmgr` by the name it is called under (links in
//! `/usr/lib/ysched/slurm-compat/`, put on PATH). The ys* commands already
//! take Slurm's options and formats; what is Slurm's alone — `sinfo`'s
//! partition view, `scontrol`'s words, `srun` inside a job, exit status 1
//! for bad options — is here.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

use super::{load_config, print, CliError, CliResult};
use crate::report::node::NodeInfo;

/// The commands this binary can be.
pub const COMMANDS: [&str; 11] = [
    "sbatch", "squeue", "scancel", "sacct", "sshare", "sinfo", "scontrol", "srun", "salloc",
    "sacctmgr", "seff",
];

/// Runs as `name` (the file name it was called by, or the first argument
/// after `ysched-slurm`).
pub fn main(name: &str, args: Vec<OsString>) -> ExitCode {
    // Slurm's contrib seff: its own three flags, none of the rest.
    if name == "seff" {
        return super::seff::main(args);
    }
    let args = match before_parsing(name, args) {
        Ok(args) => args,
        Err(answered) => return answered,
    };
    // Every documented option of Slurm's: honoured, accepted (with why),
    // or refused (with why), never a bare "unexpected argument".
    let mut warnings = Vec::new();
    let outside_a_job = name == "srun" && std::env::var_os("SLURM_JOB_ID").is_none();
    let allocation_words =
        outside_a_job.then(|| crate::slurm_options::allocation_words(args.clone()));
    let immediate = crate::slurm_options::is_given("srun", &args, "--immediate");
    let args = match crate::slurm_options::screen(name, args, &mut warnings) {
        Ok(args) => args,
        Err(refusal) => {
            eprintln!("{name}: error: {refusal}");
            return ExitCode::from(1);
        }
    };
    for w in warnings {
        if !(outside_a_job && w.ends_with(crate::slurm_options::WITHIN_JOB)) {
            eprintln!("{name}: warning: {w}");
        }
    }
    let args = if name == "sacct" {
        whole_jobs_of_steps(args)
    } else {
        args
    };

    // Outside a job srun asks for an allocation first: the options that
    // inside one only the job decides are the allocation's.
    if let Some(words) = allocation_words {
        let argv = std::iter::once(OsString::from(name)).chain(args).collect();
        return with_slurm_exit(
            name,
            SrunArgs::try_parse_from(attached_kill_on_bad_exit(argv)),
            |a| srun_allocating(a, words, immediate),
        );
    }
    run_screened(name, args)
}

/// Runs as `name` with `args` its options screened.
fn run_screened(name: &str, args: Vec<OsString>) -> ExitCode {
    let argv = |args: Vec<OsString>| -> Vec<OsString> {
        std::iter::once(OsString::from(name)).chain(args).collect()
    };
    match name {
        "sbatch" => with_slurm_exit(
            name,
            super::ysbatch::Args::try_parse_from(argv(args)),
            |a| super::ysbatch::run_as("sbatch", a),
        ),
        "salloc" => with_slurm_exit(
            name,
            super::ysalloc::Args::try_parse_from(argv(args)),
            |a| super::ysalloc::run_as("salloc", a),
        ),
        "squeue" => with_slurm_exit(
            name,
            super::ysqueue::Args::try_parse_from(argv(args)).map(slurm_squeue_format),
            super::ysqueue::run,
        ),
        "scancel" => with_slurm_exit(
            name,
            super::yscancel::Args::try_parse_from(argv(args)),
            super::yscancel::run_as_scancel,
        ),
        // Slurm's sacct lists each job's batch and extern steps.
        "sacct" => with_slurm_exit(
            name,
            super::ysacct::Args::try_parse_from(argv(args)).map(|a| super::ysacct::Args {
                batch_steps: true,
                as_slurm: true,
                ..a
            }),
            super::ysacct::run,
        ),
        "sshare" => with_slurm_exit(
            name,
            super::ysshare::Args::try_parse_from(argv(args)),
            super::ysshare::run,
        ),
        "sinfo" => with_slurm_exit(name, SinfoArgs::try_parse_from(argv(args)), sinfo),
        "scontrol" => with_slurm_exit(name, ScontrolArgs::try_parse_from(argv(args)), scontrol),
        "srun" => with_slurm_exit(
            name,
            SrunArgs::try_parse_from(attached_kill_on_bad_exit(argv(args))),
            srun,
        ),
        "sacctmgr" => with_slurm_exit(
            name,
            Ok::<_, clap::Error>(
                args.iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect(),
            ),
            super::sacctmgr::run,
        ),
        _ => {
            eprintln!(
                "ysched-slurm: call me as one of {} (a link by that name, or `ysched-slurm sbatch ...`)",
                COMMANDS.join(", ")
            );
            ExitCode::from(1)
        }
    }
}

/// `sacct -j 16.batch,16.0`: Slurm's step ids, read as their job (its
/// record has what the steps ran).
fn whole_jobs_of_steps(args: Vec<OsString>) -> Vec<OsString> {
    let as_job = |list: &str| -> String {
        let mut ids: Vec<&str> = Vec::new();
        for id in list.split(',') {
            let job = id.split('.').next().unwrap_or(id);
            if !ids.contains(&job) {
                ids.push(job);
            }
        }
        ids.join(",")
    };
    let mut out = Vec::with_capacity(args.len());
    let mut value_next = false;
    for arg in args {
        let text = arg.to_string_lossy().into_owned();
        if std::mem::take(&mut value_next) {
            out.push(as_job(&text).into());
            continue;
        }
        match text.split_once('=') {
            Some(("--jobs", list)) => out.push(format!("--jobs={}", as_job(list)).into()),
            _ if text == "-j" || text == "--jobs" => {
                value_next = true;
                out.push(arg);
            }
            _ if text.starts_with("-j") && text.len() > 2 => {
                out.push(format!("-j{}", as_job(&text[2..])).into())
            }
            _ => out.push(arg),
        }
    }
    out
}

/// The columns squeue shows when asked for none: `$SQUEUE_FORMAT`, else
/// Slurm's default (ysqueue's own default is laid out for GPUs).
const SQUEUE_DEFAULT: &str = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R";

fn slurm_squeue_format(mut args: super::ysqueue::Args) -> super::ysqueue::Args {
    let chosen = args.format.is_some() || args.long_format.is_some();
    if !chosen && !args.json && !args.priority && !args.start && !args.steps {
        let from_env = std::env::var("SQUEUE_FORMAT")
            .ok()
            .filter(|f| !f.is_empty());
        args.format = Some(from_env.unwrap_or_else(|| SQUEUE_DEFAULT.to_string()));
    }
    args.as_slurm = true;
    args
}

/// Slurm's commands exit 1 for any error, bad options included; help and
/// version exit 0.
/// Slurm's input variables (SBATCH_OUTPUT, SLURM_NPROCS, ...) as the
/// options they stand for; srun's only outside a job, whose own SLURM_*
/// variables are a step's defaults already.
fn with_input_variables(
    name: &str,
    args: Vec<OsString>,
) -> Result<Vec<OsString>, crate::slurm_options::Refused> {
    if name == "srun" && std::env::var_os("SLURM_JOB_ID").is_some() {
        return Ok(args);
    }
    crate::slurm_options::with_input_variables(name, args, |k| std::env::var(k).ok())
}

/// What is done before the options are read: input variables added as
/// options, `--help` and `--usage` answered (`Err`: the exit status),
/// srun -v's account of its options printed.
fn before_parsing(name: &str, args: Vec<OsString>) -> Result<Vec<OsString>, ExitCode> {
    let args = with_input_variables(name, args).map_err(|refusal| {
        eprintln!("{name}: error: {refusal}");
        ExitCode::from(1)
    })?;
    let helpformat = args
        .iter()
        .any(|a| a == "--helpformat" || (name == "sacct" && a == "-e"));
    if let Some(fields) = helpformat
        .then(|| super::slurm_formats::helpformat(name))
        .flatten()
    {
        return Err(match print(&fields) {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::from(1),
        });
    }
    if let Some(asked) = super::slurm_help::asked(name, &args) {
        let parser = parser_of(name);
        return Err(
            match print(&super::slurm_help::text(name, asked, parser.as_ref())) {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::from(1),
            },
        );
    }
    if name == "srun" {
        if let Some(dump) = srun_defined_options(&args) {
            eprint!("{dump}");
        }
    }
    Ok(args)
}

/// `srun -v`'s account of the options it was given, as Slurm's srun
/// prints it (`srun: verbose             : 1`), up to its command; None
/// without `-v`.
fn srun_defined_options(args: &[OsString]) -> Option<String> {
    let mut given: Vec<(String, String)> = Vec::new();
    let mut verbose = 0;
    for (option, value) in crate::slurm_options::given("srun", args) {
        let name = option
            .names
            .iter()
            .find(|n| n.starts_with("--"))
            .unwrap_or(&option.names[0])
            .trim_start_matches('-');
        if name == "verbose" {
            verbose += 1;
            continue;
        }
        given.push((name.to_string(), value.unwrap_or_else(|| "set".into())));
    }
    if verbose == 0 {
        return None;
    }
    given.push(("verbose".into(), verbose.to_string()));
    let rule = "srun: -------------------- --------------------\n";
    let mut out = format!("srun: defined options\n{rule}");
    for (name, value) in given {
        out.push_str(&format!("srun: {name:<20}: {value}\n"));
    }
    out.push_str(rule);
    out.push_str("srun: end of defined options\n");
    Some(out)
}

/// The parser that reads `name`'s options here, for their help text.
fn parser_of(name: &str) -> Option<clap::Command> {
    use clap::CommandFactory;
    Some(match name {
        "sbatch" => super::ysbatch::Args::command(),
        "salloc" => super::ysalloc::Args::command(),
        "squeue" => super::ysqueue::Args::command(),
        "scancel" => super::yscancel::Args::command(),
        "sacct" => super::ysacct::Args::command(),
        "sshare" => super::ysshare::Args::command(),
        "sinfo" => SinfoArgs::command(),
        "scontrol" => ScontrolArgs::command(),
        "srun" => SrunArgs::command(),
        _ => return None,
    })
}

fn with_slurm_exit<A>(
    name: &str,
    parsed: Result<A, clap::Error>,
    run: impl FnOnce(A) -> CliResult,
) -> ExitCode {
    match parsed {
        Ok(args) => match run(args) {
            Ok(()) => ExitCode::SUCCESS,
            // An error without a word is a status to pass on (`sbatch
            // --wait`: the job's exit code).
            Err(e) if e.message.is_empty() => ExitCode::from(e.code),
            Err(e) => {
                super::say(&format!("{name}: error: {}", e.message));
                ExitCode::from(1)
            }
        },
        // As Slurm's commands answer it: tools parse `slurm 22.05.x`.
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayVersion => {
            let _ = super::print(crate::slurm_options::VERSION);
            ExitCode::SUCCESS
        }
        Err(e) => {
            let informational = e.kind() == clap::error::ErrorKind::DisplayHelp;
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
    about = "Slurm's sinfo over ysched: the nodes as one partition"
)]
pub struct SinfoArgs {
    /// Output format: %P partition, %a availability, %l time limit, %D nodes, %t state, %T long state, %N nodes, %G GPUs, %c CPUs, %m memory, %E reason
    #[arg(short = 'o', long = "format", value_name = "FORMAT")]
    pub format: Option<String>,
    /// Leave out the header
    #[arg(short = 'h', long)]
    pub noheader: bool,
    /// Node-oriented output: one line per node
    #[arg(short = 'N', long = "Node")]
    pub node: bool,
    /// Accepted: one partition either way
    #[arg(short = 'p', long, value_name = "PARTITION")]
    pub partition: Option<String>,
    /// Accepted (ysched has one summary)
    #[arg(short = 's', long)]
    pub summarize: bool,
    /// The nodes in Slurm's JSON
    #[arg(long)]
    pub json: bool,
    /// Output format with sinfo's field names: FIELD[:[.][SIZE][SUFFIX]],... (--helpformat lists them)
    #[arg(
        short = 'O',
        long = "Format",
        value_name = "FIELDS",
        conflicts_with = "format"
    )]
    pub long_format: Option<String>,
    /// Print help
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
}

use crate::slurm_options::PARTITION;

fn sinfo(args: SinfoArgs) -> CliResult {
    let config = load_config()?;
    if args.json {
        return nodes_json(&config, None, "sinfo");
    }
    let pool = super::ysinfo::nodes_info(&config)?;
    let default = if args.node {
        "%N %.6D %P %.11T"
    } else {
        "%9P %.5a %.10l %.6D %.6t %N"
    };
    let format = match (args.format, args.long_format) {
        (Some(format), _) => format,
        (None, Some(long)) => super::slurm_formats::sinfo_long_format(&long)
            .map_err(|e| CliError::usage(e.to_string()))?,
        (None, None) => default.to_string(),
    };
    // Node-oriented: a line per node; else a line per state, as Slurm
    // groups the nodes of a partition.
    let groups: Vec<Vec<&NodeInfo>> = if args.node {
        pool.iter().map(|n| vec![n]).collect()
    } else {
        let mut groups: Vec<Vec<&NodeInfo>> = Vec::new();
        for n in &pool {
            match groups.iter_mut().find(|g| g[0].state == n.state) {
                Some(g) => g.push(n),
                None => groups.push(vec![n]),
            }
        }
        groups
    };
    let mut out = String::new();
    if !args.noheader {
        out.push_str(&render_format(&format, sinfo_header)?);
        out.push('\n');
    }
    for group in groups {
        out.push_str(&render_format(&format, |code| sinfo_cell(code, &group))?);
        out.push('\n');
    }
    print(&out)
}

fn sinfo_header(code: char) -> Option<String> {
    Some(
        match code {
            'P' | 'R' => "PARTITION",
            'a' => "AVAIL",
            'l' => "TIMELIMIT",
            'D' => "NODES",
            't' | 'T' => "STATE",
            'N' => "NODELIST",
            'G' => "GRES",
            'c' => "CPUS",
            'm' => "MEMORY",
            'd' => "TMP_DISK",
            'E' => "REASON",
            'p' => "PRIO_TIER",
            'I' => "PRIO_JOB_FACTOR",
            'h' => "OVERSUBSCRIBE",
            'r' => "ROOT",
            's' => "JOB_SIZE",
            'g' => "GROUPS",
            'L' => "DEFAULTTIME",
            'M' => "PREEMPT_MODE",
            'n' => "HOSTNAMES",
            'o' => "NODE_ADDR",
            'w' => "WEIGHT",
            'A' => "NODES(A/I)",
            'F' => "NODES(A/I/O/T)",
            c if SINFO_NOT_KEPT.contains(c) => "N/A",
            _ => return None,
        }
        .to_string(),
    )
}

/// sinfo's letters for what ysched does not keep (features, sockets,
/// CPU load, reasons' times and users, versions...): shown `N/A`, as
/// Slurm shows a value it does not have.
const SINFO_NOT_KEPT: &str = "bBCefHOSuUvVXYZz";

/// One cell of sinfo's line for `nodes` (of one state).
fn sinfo_cell(code: char, nodes: &[&NodeInfo]) -> Option<String> {
    let first = nodes.first()?;
    let long_state = |s: &str| match s {
        "drain" => "drained",
        "drng" => "draining",
        "alloc" => "allocated",
        "mix" => "mixed",
        "down" => "down",
        _ => "idle",
    };
    Some(match code {
        'P' => format!("{PARTITION}*"),
        'R' => PARTITION.into(),
        'a' => "up".into(),
        'l' => "infinite".into(),
        'D' => nodes.len().to_string(),
        't' => first.state.clone(),
        'T' => long_state(&first.state).into(),
        'N' => crate::model::hostlist::compress(
            &nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
        ),
        'G' => gres_of(first),
        'c' => first.cpus.to_string(),
        'm' => first.memory_mb.to_string(),
        'd' => first.tmp_mb.to_string(),
        'E' => first.reason.clone().unwrap_or_else(|| "none".into()),
        // One partition, open to all, with no limits of its own.
        'p' | 'I' | 'w' => "1".into(),
        'h' => "NO".into(),
        'r' => "no".into(),
        's' => "1-infinite".into(),
        'g' => "all".into(),
        'L' => "n/a".into(),
        'M' => "OFF".into(),
        'n' | 'o' => nodes
            .iter()
            .map(|n| n.name.as_str())
            .collect::<Vec<_>>()
            .join(","),
        'A' | 'F' => node_counts(code, nodes),
        c if SINFO_NOT_KEPT.contains(c) => "N/A".into(),
        _ => return None,
    })
}

/// `%A` (allocated/idle) and `%F` (allocated/idle/other/total) node counts.
fn node_counts(code: char, nodes: &[&NodeInfo]) -> String {
    let count = |states: &[&str]| {
        nodes
            .iter()
            .filter(|n| states.contains(&n.state.as_str()))
            .count()
    };
    let allocated = count(&["alloc", "mix"]);
    let idle = count(&["idle"]);
    let other = nodes.len() - allocated - idle;
    match code {
        'A' => format!("{allocated}/{idle}"),
        _ => format!("{allocated}/{idle}/{other}/{}", nodes.len()),
    }
}

/// `gpu:a100:4,gpu:t4:2`, Slurm's way of writing a node's GPUs.
fn gres_of(node: &NodeInfo) -> String {
    let mut types: Vec<(String, usize)> = Vec::new();
    for g in &node.gpus {
        match types.iter_mut().find(|(t, _)| *t == g.gpu_type) {
            Some((_, n)) => *n += 1,
            None => types.push((g.gpu_type.clone(), 1)),
        }
    }
    if types.is_empty() {
        return "(null)".to_string();
    }
    types
        .iter()
        .map(|(t, n)| format!("gpu:{t}:{n}"))
        .collect::<Vec<_>>()
        .join(",")
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
                "invalid format code %{code}: not one of sinfo's (contrib/slurm-compat/README.md lists them)"
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
    /// Each record on one line
    #[arg(short = 'o', long)]
    pub oneliner: bool,
    /// More detail: where a job's GPUs are on its nodes
    #[arg(short = 'd', long)]
    pub details: bool,
    /// Jobs and nodes in Slurm's JSON (as squeue --json and sinfo --json)
    #[arg(long)]
    pub json: bool,
    /// show job ID | show step(s) [ID[.STEP]] | listpids [ID[.STEP]] | show node | show config | show partition | show hostnames [LIST] | show hostlist NAMES | requeue ID... | hold ID... | release ID... | suspend ID... | resume ID... | update JobId=ID KEY=VALUE... | ping | reconfigure
    #[arg(value_name = "COMMAND", num_args = 1.., required = true)]
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
        ["version"] => return print(crate::slurm_options::VERSION),
        ["show", "job", ..] | ["show", "jobs", ..] | ["show", "jobid", ..] => {
            let layout = super::yscontrol::JobLayout {
                one_line: args.oneliner,
                details: args.details,
                json: args.json,
            };
            let config = load_config()?;
            return match words.get(2) {
                Some(job) => super::yscontrol::show_one_job(&config, job, layout),
                None => super::yscontrol::show_all_jobs(&config, layout),
            };
        }
        ["show", "node" | "nodes", ..] => {
            let config = load_config()?;
            let name = words.get(2).map(String::as_str);
            if args.json {
                return nodes_json(&config, name, "scontrol");
            }
            return super::yscontrol::show_nodes(&config, name, args.oneliner);
        }
        ["show", "step" | "steps", ..] => {
            let config = load_config()?;
            let which = words.get(2).map(String::as_str);
            return super::scontrol_steps::show_steps(&config, which, args.oneliner);
        }
        ["listpids", ..] => {
            let config = load_config()?;
            let which = words.get(1).map(String::as_str);
            let node = words.get(2).map(String::as_str);
            return super::scontrol_pids::list_pids(&config, which, node);
        }
        ["show", "config"] => C::Show { what: S::Config },
        ["show", "partition", ..] | ["show", "partitions", ..] => return show_partition(),
        ["show", "hostnames", ..] => return show_hostnames(words.get(2).map(String::as_str)),
        ["show", "hostlist", names, ..] => return show_hostlist(names),
        ["requeue", _, ..] => C::Requeue { jobs: rest(1) },
        ["hold", _, ..] => C::Hold { jobs: rest(1) },
        ["release", _, ..] => C::Release { jobs: rest(1) },
        ["suspend", _, ..] => C::Suspend { jobs: rest(1) },
        ["resume", _, ..] => C::Resume { jobs: rest(1) },
        ["update", _, ..] => C::Update { words: rest(1) },
        ["reconfigure"] => C::Reload,
        // Slurm's takes the backup's index; ysched's standby is whichever
        // controller etcd lets lead next.
        ["takeover"] | ["takeover", _] => C::Takeover,
        ["token", ..] => return token(&words[1..]),
        _ => {
            return Err(CliError::failed(format!(
            "'{}' is not supported by ysched's scontrol (it knows show job/step/node/config/partition/hostnames/hostlist, \
                 listpids, requeue, hold, release, suspend, resume, update, ping, reconfigure, takeover, token)",
            words.join(" ")
        )))
        }
    };
    super::yscontrol::run(Y { command })
}

/// Nodes (all, or the one `name`d) in Slurm's JSON, as `command` prints
/// them.
fn nodes_json(config: &crate::config::Config, name: Option<&str>, command: &str) -> CliResult {
    let nodes: Vec<NodeInfo> = super::ysinfo::nodes_info(config)?
        .into_iter()
        .filter(|n| name.is_none_or(|want| n.name == want))
        .collect();
    if let (Some(want), true) = (name, nodes.is_empty()) {
        return Err(CliError::failed(format!("Node {want} not found")));
    }
    let answer = crate::report::slurm_json::nodes_answer(&nodes, command);
    print(&format!("{}\n", serde_json::to_string_pretty(&answer)?))
}

/// `scontrol show hostnames [HOSTLIST]`: each node a hostlist names, a
/// line each; without one, the job's (`SLURM_JOB_NODELIST`).
fn show_hostnames(hostlist: Option<&str>) -> CliResult {
    let from_job = std::env::var("SLURM_JOB_NODELIST").ok();
    let Some(hostlist) = hostlist.or(from_job.as_deref()) else {
        return Err(CliError::failed(
            "scontrol show hostnames: give a hostlist (gpu[01-03]), or run it inside a job (SLURM_JOB_NODELIST)",
        ));
    };
    let names = crate::model::hostlist::expand(hostlist)
        .map_err(|e| CliError::failed(format!("scontrol show hostnames: {e}")))?;
    print(&names.iter().map(|n| format!("{n}\n")).collect::<String>())
}

/// `scontrol show hostlist NAME,NAME...`: the names as one compressed
/// hostlist (`gpu[01-03]`).
fn show_hostlist(names: &str) -> CliResult {
    let mut all = Vec::new();
    for part in names.split(',').filter(|p| !p.is_empty()) {
        let expanded = crate::model::hostlist::expand(part)
            .map_err(|e| CliError::failed(format!("scontrol show hostlist: {e}")))?;
        all.extend(expanded);
    }
    print(&format!("{}\n", crate::model::hostlist::compress(&all)))
}

/// `scontrol token [lifespan=SECONDS] [username=USER]`: `SLURM_JWT=...`;
/// beyond Slurm's, `audience=USES`, and `list` (everyone's with
/// `username=all`: administrators) and `revoke=ID|all`, as `ystoken`.
fn token(words: &[String]) -> CliResult {
    let mut args = super::ystoken::Args {
        lifespan: None,
        user: None,
        audience: None,
        save: false,
        list: false,
        all: false,
        revoke: None,
    };
    for word in words {
        let (key, value) = word.split_once('=').unwrap_or((word.as_str(), ""));
        match key.to_ascii_lowercase().as_str() {
            "lifespan" if !value.is_empty() => args.lifespan = Some(value.to_string()),
            "username" if value == "all" => args.all = true,
            "username" if !value.is_empty() => args.user = Some(value.to_string()),
            "audience" if !value.is_empty() => args.audience = Some(value.to_string()),
            "revoke" if !value.is_empty() => args.revoke = Some(value.to_string()),
            "list" if value.is_empty() => args.list = true,
            _ => {
                return Err(CliError::failed(format!(
                    "scontrol token: '{word}' is not lifespan=SECONDS, username=USER, audience=USES, list or revoke=ID|all"
                )))
            }
        }
    }
    if args.all && !args.list {
        return Err(CliError::failed(
            "scontrol token: username=all goes with list",
        ));
    }
    super::ystoken::run(args)
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
    let pool = super::ysinfo::nodes_info(&config)?;
    let names: Vec<&str> = pool.iter().map(|n| n.name.as_str()).collect();
    let cpus: u32 = pool.iter().map(|n| n.cpus).sum();
    let mem: u64 = pool.iter().map(|n| n.memory_mb).sum();
    let gpus: usize = pool.iter().map(|n| n.gpus.len()).sum();
    print(&format!(
        "PartitionName={PARTITION}\n   AllowGroups=ALL Default=YES QoS=N/A\n   MaxNodes=1 MaxTime=UNLIMITED\n   \
         Nodes={}\n   State=UP TotalCPUs={cpus} TotalNodes={}\n   TRES=cpu={cpus},mem={mem}M,node={},gres/gpu={gpus}\n",
        crate::model::hostlist::compress(&names),
        pool.len(),
        pool.len(),
    ))
}

/// `srun` inside a batch job: a step of the job's tasks. Slurm's step
/// options are parsed as srun parses them (`-n1`, `--opt=value`, `--opt
/// value`), up to the first word that is not an option: the command. One
/// task on one node becomes the command itself; several tasks, or a job
/// over several nodes, start through `srun`'s step coordinator
/// (`cli::srun`), on every node of the job. Options that bind CPUs or
/// memory are accepted and change nothing.
#[derive(Parser, Debug)]
#[command(
    name = "srun",
    version,
    infer_long_args = true,
    about = "Slurm's srun over ysched: inside a batch job, runs a command as the job's tasks, on all its nodes"
)]
pub struct SrunArgs {
    /// Tasks in all (default: the job's --ntasks, else one per node)
    #[arg(short = 'n', long, value_name = "N")]
    pub ntasks: Option<u32>,
    /// Nodes of the job the step runs on: N or MIN-MAX (default: all)
    #[arg(short = 'N', long, value_name = "N[-MAX]")]
    pub nodes: Option<String>,
    /// Tasks on each node
    #[arg(long = "ntasks-per-node", value_name = "N")]
    pub ntasks_per_node: Option<u32>,
    /// GPUs of each task: its CUDA_VISIBLE_DEVICES is its own share of its node's
    #[arg(long = "gpus-per-task", value_name = "N")]
    pub gpus_per_task: Option<u32>,
    /// Stop the other tasks when one exits non-zero: 1, or 0 (the default, as Slurm's KillOnBadExit; or $SLURM_KILL_BAD_EXIT)
    #[arg(short = 'K', long = "kill-on-bad-exit", value_name = "0|1", num_args = 0..=1, require_equals = true, default_missing_value = "1")]
    pub kill_on_bad_exit: Option<String>,
    /// Standard output to this file (%j job id, %t task, %n node, %N node name, %u user, %x name, %A %a arrays)
    #[arg(short = 'o', long, value_name = "PATTERN")]
    pub output: Option<String>,
    /// Standard error to this file (patterns as for --output)
    #[arg(short = 'e', long, value_name = "PATTERN")]
    pub error: Option<String>,
    /// Standard input from this file (patterns as for --output; "none": /dev/null)
    #[arg(short = 'i', long, value_name = "PATTERN")]
    pub input: Option<String>,
    /// The task's working directory
    #[arg(short = 'D', long, value_name = "DIR")]
    pub chdir: Option<std::path::PathBuf>,
    /// Environment of the task: ALL (default), NONE (only SLURM_* variables), or [ALL,]VAR[=VALUE],...
    #[arg(long, value_name = "VARS")]
    pub export: Option<String>,
    /// Prefix each output line with the task id ("0: ")
    #[arg(short = 'l', long)]
    pub label: bool,
    /// Pass each task's output on as it comes, not line by line
    #[arg(short = 'u', long)]
    pub unbuffered: bool,
    /// The first Ctrl-C kills the tasks (without it, the first says how they stand and a second within a second ends the step)
    #[arg(long = "quit-on-interrupt")]
    pub quit_on_interrupt: bool,
    /// A name for the step (shown nowhere)
    #[arg(short = 'J', long = "job-name", value_name = "NAME")]
    pub job_name: Option<String>,
    /// Run the one task on a pseudo-terminal that this terminal drives (an interactive shell: srun --pty bash)
    #[arg(long)]
    pub pty: bool,
    /// Resource and placement options of Slurm's steps: the one task has
    /// the job's whole allocation, so they change nothing here.
    #[command(flatten)]
    pub placement: StepPlacement,
    /// pyxis's options: each task runs in a container of the image.
    #[command(flatten)]
    pub container: crate::script::ContainerArgs,
    /// The command and its arguments
    #[arg(value_name = "COMMAND", num_args = 1.., required = true, trailing_var_arg = true)]
    pub command: Vec<OsString>,
}

/// srun's options that place and bind tasks or size the step: accepted,
/// because the step here is the allocation's one task.
#[derive(clap::Args, Debug, Default)]
#[command(next_help_heading = "Accepted (the one task has the whole allocation)")]
pub struct StepPlacement {
    #[arg(short = 'c', long = "cpus-per-task", value_name = "N", hide = true)]
    cpus_per_task: Option<String>,
    #[arg(
        long = "cpu-bind",
        alias = "cpu_bind",
        value_name = "TYPE",
        hide = true
    )]
    cpu_bind: Option<String>,
    #[arg(long = "mem", value_name = "SIZE", hide = true)]
    mem: Option<String>,
    #[arg(long = "mem-per-cpu", value_name = "SIZE", hide = true)]
    mem_per_cpu: Option<String>,
    #[arg(long = "mem-per-gpu", value_name = "SIZE", hide = true)]
    mem_per_gpu: Option<String>,
    #[arg(long = "mem-bind", value_name = "TYPE", hide = true)]
    mem_bind: Option<String>,
    #[arg(long, value_name = "LIST", hide = true)]
    gres: Option<String>,
    #[arg(short = 'G', long, value_name = "N", hide = true)]
    gpus: Option<String>,
    #[arg(long = "gpu-bind", value_name = "TYPE", hide = true)]
    gpu_bind: Option<String>,
    #[arg(long = "ntasks-per-gpu", value_name = "N", hide = true)]
    ntasks_per_gpu: Option<String>,
    #[arg(short = 'm', long = "distribution", value_name = "TYPE", hide = true)]
    distribution: Option<String>,
    #[arg(long, value_name = "TYPE", hide = true)]
    hint: Option<String>,
    #[arg(long, value_name = "TYPE", hide = true)]
    mpi: Option<String>,
    #[arg(short = 't', long, value_name = "TIME", hide = true)]
    time: Option<String>,
    #[arg(short = 'w', long = "nodelist", value_name = "NODES", hide = true)]
    nodelist: Option<String>,
    #[arg(short = 'x', long = "exclude", value_name = "NODES", hide = true)]
    exclude: Option<String>,
    #[arg(short = 'p', long, value_name = "NAME", hide = true)]
    partition: Option<String>,
    #[arg(long, value_name = "ID", hide = true)]
    jobid: Option<String>,
    #[arg(long, value_name = "RLIMITS", num_args = 0..=1, require_equals = true, hide = true)]
    propagate: Option<Option<String>>,
    #[arg(long, hide = true)]
    exclusive: bool,
    #[arg(long, hide = true)]
    exact: bool,
    #[arg(long, hide = true)]
    overlap: bool,
    #[arg(short = 'O', long, hide = true)]
    overcommit: bool,
    #[arg(short = 'W', long = "wait", value_name = "SECONDS", hide = true)]
    wait: Option<String>,
    #[arg(short = 'v', long, action = clap::ArgAction::Count, hide = true)]
    verbose: u8,
    #[arg(short = 'Q', long, hide = true)]
    quiet: bool,
}

/// Slurm's `-K0` and `-K1` (srun's optional value, attached) as
/// `--kill-on-bad-exit=0|1`, up to the command: clap takes an optional
/// value only after `=`, else `srun -K python x.py` would read `python`.
fn attached_kill_on_bad_exit(args: Vec<OsString>) -> Vec<OsString> {
    // Options whose value may follow as the next word.
    const TAKE_VALUES: &[&str] = &[
        "-n",
        "-N",
        "-o",
        "-e",
        "-i",
        "-D",
        "-J",
        "-c",
        "-G",
        "-t",
        "-w",
        "-x",
        "-p",
        "-m",
        "-W",
        "--ntasks",
        "--nodes",
        "--output",
        "--error",
        "--input",
        "--chdir",
        "--export",
        "--job-name",
        "--ntasks-per-node",
        "--gpus-per-task",
        "--container-image",
        "--container-mounts",
        "--container-workdir",
        "--container-env",
    ];
    let mut options = true;
    let mut value_next = false;
    args.into_iter()
        .enumerate()
        .map(|(i, a)| {
            let text = a.to_string_lossy();
            let is_value = std::mem::replace(&mut value_next, false);
            if i > 0 && options && !text.starts_with('-') && !is_value {
                options = false;
            }
            value_next = options && TAKE_VALUES.contains(&text.as_ref());
            match text.as_ref() {
                "-K0" | "-K1" if options => format!("--kill-on-bad-exit={}", &text[2..]).into(),
                _ => a,
            }
        })
        .collect()
}

/// `-w`: a step runs only on nodes of its job, as Slurm refuses one that
/// names others.
fn within_the_job(nodelist: Option<&str>, job_id: u64) -> CliResult {
    use crate::model::hostlist::{compress, expand};
    let Some(list) = nodelist else { return Ok(()) };
    let wanted = expand(list).map_err(|e| CliError::usage(format!("-w {list}: {e}")))?;
    let ours = std::env::var("SLURM_JOB_NODELIST")
        .ok()
        .and_then(|l| expand(&l).ok())
        .or_else(|| std::env::var("SLURMD_NODENAME").ok().map(|n| vec![n]))
        .unwrap_or_default();
    let outside: Vec<&String> = wanted.iter().filter(|n| !ours.contains(n)).collect();
    if outside.is_empty() {
        return Ok(());
    }
    Err(CliError::failed(format!(
        "-w {list}: {} not in job {job_id}'s allocation ({}); a step runs on its job's nodes",
        compress(&outside),
        compress(&ours)
    )))
}

/// Whether the step has several tasks or nodes (else it is the job's one
/// task, and srun becomes the command).
fn is_wide_step(args: &SrunArgs) -> bool {
    let number = |k: &str| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(1)
    };
    let nodes = args
        .nodes
        .as_deref()
        .and_then(crate::model::tasks::parse_nodes)
        .map_or(number("SLURM_JOB_NUM_NODES"), |(_, max)| max);
    nodes > 1
        || args.ntasks.unwrap_or_else(|| number("SLURM_NTASKS")) > 1
        || args.ntasks_per_node.is_some_and(|n| n > 1)
}

/// Whether any `--container-*` option is given (without an image, the
/// step coordinator refuses them with the reason).
fn has_container_options(c: &crate::script::ContainerArgs) -> bool {
    c.container_image.is_some()
        || c.container_mounts.is_some()
        || c.container_workdir.is_some()
        || c.container_env.is_some()
        || c.no_container_mount_home
        || c.container_mount_home
        || c.container_writable
        || c.container_readonly
}

/// A step of several tasks or nodes, or in a container, through the step
/// coordinator.
/// The values a step's file name patterns expand with.
#[derive(Clone)]
struct StepNames {
    job: u64,
    step: u32,
    array: Option<(u64, u32)>,
    name: String,
    user: String,
    node: Option<String>,
}

impl StepNames {
    /// `pattern` for task `task` on the step's node of index `node`.
    fn path(&self, pattern: &str, (task, node): (u32, u32)) -> String {
        let values = crate::model::job::PatternValues {
            id: self.job,
            step: Some(self.step),
            array: self.array,
            name: &self.name,
            user: &self.user,
            node: self.node.as_deref(),
            task: (task, node),
        };
        crate::model::job::expand_pattern(pattern, &values)
    }

    /// What `--input` gives a step's tasks: srun's own standard input
    /// (`all`, the default, or one task's number), a file (per task with
    /// `%t`, per node with `%n`), or with `none`, /dev/null.
    fn input(
        &self,
        pattern: Option<&str>,
    ) -> Result<(Option<super::srun::TaskPath>, super::srun::StdinFor), CliError> {
        use super::srun::StdinFor;
        let Some(pattern) = pattern else {
            return Ok((None, StdinFor::All));
        };
        if pattern.eq_ignore_ascii_case("none") {
            return Ok((None, StdinFor::Nobody));
        }
        if pattern.eq_ignore_ascii_case("all") {
            return Ok((None, StdinFor::All));
        }
        if let Ok(task) = pattern.parse::<u32>() {
            return Ok((None, StdinFor::Task(task)));
        }
        let (names, pattern) = (self.clone(), pattern.to_string());
        Ok((
            Some(Box::new(move |task, node| {
                names.path(&pattern, (task, node))
            })),
            StdinFor::Nobody,
        ))
    }

    /// Where `--output` (or `--error`) `pattern` sends a step's output:
    /// srun's own, one file, or a file per task with `%t` (per node with
    /// `%n`).
    fn sink(&self, pattern: Option<&str>) -> Result<super::srun::Sink, CliError> {
        use super::srun::Sink;
        let Some(pattern) = pattern else {
            return Ok(Sink::Srun);
        };
        if crate::model::job::is_per_task_pattern(pattern) {
            let (names, pattern) = (self.clone(), pattern.to_string());
            return Ok(Sink::PerTask(Box::new(move |task, node| {
                names.path(&pattern, (task, node))
            })));
        }
        let path = self.path(pattern, (0, 0));
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map(Sink::File)
            .map_err(|e| CliError::failed(format!("cannot open {path}: {e}")))
    }
}

fn wide_step(
    args: SrunArgs,
    names: &StepNames,
    (recorded, signals): (
        Option<super::srun::RecordedStep>,
        Option<super::srun_signals::Caught>,
    ),
) -> Result<i32, CliError> {
    match step_request(args, names) {
        Ok(request) => super::srun::run_step(super::srun::StepRequest {
            recorded,
            signals,
            ..request
        }),
        Err(e) => {
            // Refused before any task started: the step ends failed.
            if let Some(recorded) = &recorded {
                recorded.end(1, 0, None);
            }
            Err(e)
        }
    }
}

/// What a step of several tasks (or in a container) asks for, from
/// srun's options, checked.
fn step_request(args: SrunArgs, names: &StepNames) -> Result<super::srun::StepRequest, CliError> {
    let (input, stdin) = names.input(args.input.as_deref())?;
    let nodes = match args.nodes.as_deref() {
        None => None,
        Some(text) => Some(
            crate::model::tasks::parse_nodes(text)
                .ok_or_else(|| CliError::usage(format!("--nodes={text}: expected N or MIN-MAX")))?,
        ),
    };
    // As Slurm's srun: off unless asked for, on the command line or in
    // its input variable.
    let asked = args
        .kill_on_bad_exit
        .clone()
        .or_else(|| std::env::var("SLURM_KILL_BAD_EXIT").ok());
    let kill_on_bad_exit = match asked.as_deref().map(str::trim) {
        Some("1") => true,
        None | Some("0") => false,
        Some(other) => {
            return Err(CliError::usage(format!(
                "--kill-on-bad-exit={other}: expected 0 or 1"
            )))
        }
    };
    // srun's -W/--wait=SECONDS: the rest killed that long after the first
    // task ends (0, the default: never).
    let wait_after_first = match args.placement.wait.as_deref().map(str::trim) {
        None => None,
        Some(text) => match text.parse::<u64>() {
            Ok(0) => None,
            Ok(secs) => Some(std::time::Duration::from_secs(secs)),
            Err(_) => {
                return Err(CliError::usage(format!(
                    "--wait={text}: expected a number of seconds"
                )))
            }
        },
    };
    let mut env = step_environment(args.export.as_deref(), std::env::vars().collect())?;
    env.retain(|(k, _)| k != "YS_STEP_KEY");
    let cwd = match &args.chdir {
        Some(dir) => dir.clone(),
        None => std::env::current_dir()?,
    };
    let container = crate::script::ContainerOptions::of(&args.container)
        .map_err(|e| CliError::usage(e.to_string()))?
        .request(&cwd)
        .map_err(|e| CliError::usage(e.to_string()))?;
    Ok(super::srun::StepRequest {
        ntasks: args.ntasks,
        nodes,
        ntasks_per_node: args.ntasks_per_node,
        gpus_per_task: args.gpus_per_task.or_else(|| {
            std::env::var("SLURM_GPUS_PER_TASK")
                .ok()
                .and_then(|g| g.parse().ok())
        }),
        label: args.label,
        unbuffered: args.unbuffered,
        kill_on_bad_exit,
        wait_after_first,
        quit_on_interrupt: args.quit_on_interrupt,
        argv: args
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        env,
        cwd,
        stdout: names.sink(args.output.as_deref())?,
        stderr: names.sink(args.error.as_deref())?,
        container,
        recorded: None,
        signals: None,
        input,
        stdin,
        pty: args.pty,
    })
}

/// [`terminal_step`] in the job srun is in: an interactive allocation
/// (a batch job has no terminal).
fn terminal_step_in_allocation(args: &mut SrunArgs) -> Result<(), CliError> {
    if std::env::var("YS_ALLOCATION").ok().as_deref() != Some("1") {
        return Err(CliError::failed(
            "--pty: a batch job has no terminal; run srun --pty in an interactive allocation (salloc), or outside any job",
        ));
    }
    terminal_step(args)
}

/// `srun --pty`: one task on a terminal, driven by srun's own; checked,
/// and shaped as one task on one node, before the step is recorded (or
/// the allocation asked for, outside a job).
fn terminal_step(args: &mut SrunArgs) -> Result<(), CliError> {
    if super::pty_session::own_size().is_none() {
        return Err(CliError::failed("--pty: standard input is not a terminal"));
    }
    let refused = [
        (args.ntasks.is_some_and(|n| n > 1), "--ntasks"),
        (
            args.ntasks_per_node.is_some_and(|n| n > 1),
            "--ntasks-per-node",
        ),
        (args.input.is_some(), "--input"),
        (args.output.is_some(), "--output"),
        (args.error.is_some(), "--error"),
        (args.label, "--label"),
        (has_container_options(&args.container), "--container-image"),
    ];
    if let Some((_, option)) = refused.iter().find(|(given, _)| *given) {
        return Err(CliError::usage(format!(
            "--pty runs one task, on the terminal: {option} does not go with it"
        )));
    }
    args.ntasks = Some(1);
    args.nodes.get_or_insert_with(|| "1".into());
    args.unbuffered = true;
    Ok(())
}

/// What srun's `--export` leaves of `env`: Slurm's rules, with the job's
/// `SLURM_*` variables kept whatever it says.
fn step_environment(
    spec: Option<&str>,
    env: Vec<(String, String)>,
) -> Result<Vec<(String, String)>, CliError> {
    let slurm: Vec<(String, String)> = env
        .iter()
        .filter(|(k, _)| k.starts_with("SLURM_"))
        .cloned()
        .collect();
    let mut chosen =
        crate::script::export_environment(spec, env).map_err(|e| CliError::usage(e.to_string()))?;
    for (k, v) in slurm {
        if !chosen.iter().any(|(name, _)| *name == k) {
            chosen.push((k, v));
        }
    }
    // srun's umask, which its tasks run with (Slurm's SLURM_UMASK).
    chosen.retain(|(name, _)| name != "SLURM_UMASK");
    chosen.push(("SLURM_UMASK".into(), super::current_umask()));
    // Where srun runs, as Slurm's tasks are told it.
    let here = launch_address();
    for key in ["SLURM_LAUNCH_NODE_IPADDR", "SLURM_SRUN_COMM_HOST"] {
        chosen.retain(|(name, _)| name != key);
        chosen.push((key.to_string(), here.clone()));
    }
    Ok(chosen)
}

/// The address of the host srun runs on: its name's first address, else
/// loopback's.
fn launch_address() -> String {
    use std::net::ToSocketAddrs;
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| {
            (name.to_string_lossy().as_ref(), 0)
                .to_socket_addrs()
                .ok()?
                .map(|a| a.ip())
                .find(|ip| ip.is_ipv4())
        })
        .map_or_else(|| "127.0.0.1".to_string(), |ip| ip.to_string())
}

fn srun(args: SrunArgs) -> CliResult {
    let code = srun_step(args)?;
    std::process::exit(code)
}

/// srun's options that shape the allocation it asks for outside a job.
#[derive(Parser, Debug)]
#[command(
    name = "srun",
    no_binary_name = true,
    disable_help_flag = true,
    disable_version_flag = true
)]
struct AllocationOptions {
    #[command(flatten)]
    options: crate::script::SubmitOptions,
}

/// srun outside a job: an interactive allocation with the job's options
/// among srun's (`words`), its step run in it, and the allocation ended
/// with the step's status (Slurm's srun does the same).
fn srun_allocating(mut args: SrunArgs, words: Vec<OsString>, immediate: bool) -> CliResult {
    if args.pty {
        terminal_step(&mut args)?;
    }
    let options = AllocationOptions::try_parse_from(words)
        .map_err(|e| CliError::usage(e.to_string()))?
        .options;
    let name = std::path::Path::new(&args.command[0])
        .file_name()
        .map_or_else(|| "srun".into(), |n| n.to_string_lossy().into_owned());
    let request = super::ysalloc::allocation_request(options, &name)?;
    let verbose = args.placement.verbose > 0;
    let allocation = super::session::allocate("srun", request, verbose, immediate)?;
    for (key, value) in &allocation.environment {
        std::env::set_var(key, value);
    }
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let job = allocation.job;
    allocation.watch(done.clone(), move |why| {
        super::say(&format!(
            "srun: Job allocation {job} has been revoked: {why}."
        ))
    });
    let result = srun_step(args);
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    allocation.end(*result.as_ref().unwrap_or(&1), 0);
    std::process::exit(result?)
}

/// Runs srun's step in the job or allocation it is in: the status srun
/// exits with (a one-task step exits here itself).
fn srun_step(mut args: SrunArgs) -> Result<i32, CliError> {
    let Some(job_id) = std::env::var("SLURM_JOB_ID")
        .ok()
        .and_then(|j| j.parse::<u64>().ok())
    else {
        return Err(CliError::failed(
            "not inside a job or allocation (no SLURM_JOB_ID here)",
        ));
    };
    let env = |k: &str| std::env::var(k).ok();
    let array = match (env("SLURM_ARRAY_JOB_ID"), env("SLURM_ARRAY_TASK_ID")) {
        (Some(a), Some(t)) => a.parse().ok().zip(t.parse().ok()),
        _ => None,
    };
    let name = env("SLURM_JOB_NAME").unwrap_or_default();
    let user = env("USER").unwrap_or_default();
    let node = env("SLURMD_NODENAME");
    within_the_job(args.placement.nodelist.as_deref(), job_id)?;
    // A step in a container is started through the job's supervisor,
    // as the tasks of a wide step are.
    // In an allocation (salloc), srun is outside it: every task starts
    // through a task server, as those of wide steps do.
    let wide = env("YS_ALLOCATION").is_some_and(|v| v == "1")
        || args.pty
        || is_wide_step(&args)
        || has_container_options(&args.container);
    if args.pty {
        terminal_step_in_allocation(&mut args)?;
    }
    // Caught before the step is recorded: from then on `scancel N.S`
    // may signal this process.
    let signals = super::srun_signals::catch();
    let recorded = record_step(&args, job_id, wide, node.as_deref());
    let names = StepNames {
        job: job_id,
        step: recorded.as_ref().map_or(0, |r| r.step),
        array,
        name,
        user,
        node: node.clone(),
    };
    let step = names.step;
    if args.placement.verbose > 0 {
        say_launching(&args, job_id, step, wide, node.as_deref());
    }
    let path_of = |pattern: &str| names.path(pattern, (0, 0));
    if wide {
        return wide_step(args, &names, (recorded, signals));
    }
    let open = |pattern: &str| -> Result<std::fs::File, CliError> {
        let path = path_of(pattern);
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| CliError::failed(format!("cannot open {path}: {e}")))
    };
    let mut command = one_task(&args, step, node.as_deref())?;
    if let Some(dir) = &args.chdir {
        command.current_dir(dir);
    }
    let stdout_file = args.output.as_deref().map(open).transpose()?;
    let stderr_file = args.error.as_deref().map(open).transpose()?;
    match args.input.as_deref() {
        // srun's own: the one task's (task 0).
        None | Some("0") => {}
        Some(i) if i.eq_ignore_ascii_case("all") => {}
        Some(i) if i.eq_ignore_ascii_case("none") => {
            command.stdin(std::process::Stdio::null());
        }
        Some(i) if i.parse::<u32>().is_ok() => {
            return Err(CliError::failed(format!(
                "--input={i}: the step has one task, task 0"
            )))
        }
        Some(i) => {
            let path = path_of(i);
            let file = std::fs::File::open(&path)
                .map_err(|e| CliError::failed(format!("cannot open {path}: {e}")))?;
            command.stdin(file);
        }
    }
    let output = (stdout_file, stderr_file);
    let task = OneTask {
        recorded: recorded.as_ref(),
        job: job_id,
        step: format!("StepId={job_id}.{step}"),
        quit_on_interrupt: args.quit_on_interrupt,
        signals,
    };
    run_task(command, args.label, output, task).map(|()| 0)
}

/// The one task of a step srun runs itself, with the step's variables.
fn one_task(
    args: &SrunArgs,
    step: u32,
    node: Option<&str>,
) -> Result<std::process::Command, CliError> {
    use std::os::unix::process::CommandExt;
    let environment = step_environment(args.export.as_deref(), std::env::vars().collect())?;
    let mut command = std::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env_clear()
        .envs(environment)
        .env("SLURM_PROCID", "0")
        .env("SLURM_LOCALID", "0")
        .env("SLURM_NODEID", "0")
        .env("SLURM_NTASKS", "1")
        .env("SLURM_NPROCS", "1")
        .env("SLURM_STEP_ID", step.to_string())
        .env("SLURM_STEPID", step.to_string())
        .env("SLURM_STEP_NUM_TASKS", "1")
        .env("SLURM_TOPOLOGY_ADDR", node.unwrap_or_default())
        .env("SLURM_TOPOLOGY_ADDR_PATTERN", "node")
        // A step's task leads a process group of its own, as those of
        // wide steps do: what the batch shell runs beside it (`tee`) is
        // no step, and a signal meant for the steps passes it by.
        .process_group(0);
    crate::exec::task_pid::set_on(&mut command, None)
        .map_err(|e| CliError::failed(format!("{}: {e}", args.command[0].to_string_lossy())))?;
    Ok(command)
}

/// Asks the controller to number and record the step srun runs: its
/// command's name, its nodes, its tasks.
fn record_step(
    args: &SrunArgs,
    job: u64,
    wide: bool,
    node: Option<&str>,
) -> Option<super::srun::RecordedStep> {
    let name = std::path::Path::new(&args.command[0])
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (nodes, tasks) = step_shape(args, wide, node);
    super::srun::RecordedStep::begin(job, &name, &nodes, tasks)
}

/// srun -v's word on the step it starts: `launching StepId=12.0 on host
/// gpu01, 2 tasks: [0-1]`.
fn say_launching(args: &SrunArgs, job: u64, step: u32, wide: bool, node: Option<&str>) {
    let (nodes, tasks) = step_shape(args, wide, node);
    let ranks = if tasks > 1 {
        format!("[0-{}]", tasks - 1)
    } else {
        "0".into()
    };
    super::say(&format!(
        "srun: launching StepId={job}.{step} on host {nodes}, {tasks} tasks: {ranks}"
    ));
}

/// The nodes (a hostlist) and the number of tasks of srun's step.
fn step_shape(args: &SrunArgs, wide: bool, node: Option<&str>) -> (String, u32) {
    let env = |k: &str| std::env::var(k).ok();
    if !wide {
        return (node.unwrap_or_default().to_string(), 1);
    }
    let nodes = args
        .nodes
        .as_deref()
        .and_then(crate::model::tasks::parse_nodes);
    super::srun::planned(args.ntasks, nodes, args.ntasks_per_node).unwrap_or_else(|| {
        let tasks = args
            .ntasks
            .or_else(|| env("SLURM_NTASKS").and_then(|n| n.parse().ok()))
            .unwrap_or(1);
        (env("SLURM_JOB_NODELIST").unwrap_or_default(), tasks)
    })
}

/// Runs a one-task step: srun waits for its task, passes on the signals
/// a job's steps get, records the step's end, and exits as the task did.
/// With `label` (`--label`), the task's output goes through srun, each
/// line prefixed with its task id, as Slurm prints it.
fn run_task(
    mut command: std::process::Command,
    label: bool,
    (stdout_file, stderr_file): (Option<std::fs::File>, Option<std::fs::File>),
    task: OneTask<'_>,
) -> CliResult {
    use std::process::Stdio;
    if label {
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
    } else {
        if let Some(f) = stdout_file {
            command.stdout(f);
        }
        if let Some(f) = stderr_file {
            command.stderr(f);
        }
        return wait_for_task(command, task, |_| Ok(Vec::new()));
    }
    wait_for_task(command, task, |child| {
        Ok(label_output(child, stdout_file, stderr_file))
    })
}

/// The one task's step, for srun's signals and its record.
struct OneTask<'a> {
    recorded: Option<&'a super::srun::RecordedStep>,
    job: u64,
    /// `StepId=J.S`.
    step: String,
    quit_on_interrupt: bool,
    /// srun's signals, caught before the step was recorded.
    signals: Option<super::srun_signals::Caught>,
}

/// Starts `command`, passes on the signals srun gets, and exits as it
/// did, after the threads `relay` starts for its output are done and its
/// end is recorded.
fn wait_for_task(
    mut command: std::process::Command,
    task: OneTask<'_>,
    relay: impl FnOnce(&mut std::process::Child) -> Result<Vec<std::thread::JoinHandle<()>>, CliError>,
) -> CliResult {
    let recorded = task.recorded;
    let mut child = command.spawn().map_err(|e| {
        if let Some(r) = recorded {
            r.end(127, 0, None);
        }
        CliError::failed(format!("cannot run the task: {e}"))
    })?;
    let pid = child.id() as i32;
    // Once the task is reaped its pid is no longer its own.
    let reaped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let alive = reaped.clone();
    let forwarding = super::srun_signals::Forwarding {
        send: std::sync::Arc::new(move |signal| {
            if !alive.load(std::sync::atomic::Ordering::SeqCst) {
                // SAFETY: kill(2) on the task's pid, not yet reaped.
                unsafe { libc::kill(pid, signal) };
            }
        }),
        step: task.step,
        states: Box::new(|| vec!["task 0: running".to_string()]),
        quit_on_interrupt: task.quit_on_interrupt,
    };
    super::srun_signals::pass_on(task.signals, forwarding);
    let relays = relay(&mut child)?;
    let waited = crate::exec::process::wait_measured(&child);
    reaped.store(true, std::sync::atomic::Ordering::SeqCst);
    let (status, used) =
        waited.map_err(|e| CliError::failed(format!("cannot wait for the task: {e}")))?;
    use std::os::unix::process::ExitStatusExt;
    if status.signal().is_some() {
        super::srun::say_if_job_ending(task.job);
    }
    for r in relays {
        let _ = r.join();
    }
    if let Some(r) = recorded {
        let mut usage = crate::model::step::StepUsage::default();
        usage.add(0, used);
        r.end(
            status.code().unwrap_or(0),
            status.signal().unwrap_or(0),
            Some(usage),
        );
    }
    let code = status
        .code()
        .or(status.signal().map(|s| 128 + s))
        .unwrap_or(1);
    std::process::exit(code)
}

/// Relays the task's output, each line prefixed with its task id (0).
fn label_output(
    child: &mut std::process::Child,
    stdout_file: Option<std::fs::File>,
    stderr_file: Option<std::fs::File>,
) -> Vec<std::thread::JoinHandle<()>> {
    use std::io::{BufRead, Write};
    let pipe = |from: Box<dyn std::io::Read + Send>, mut to: Box<dyn Write + Send>| {
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(from)
                .split(b'\n')
                .map_while(Result::ok)
            {
                let mut text = b"0: ".to_vec();
                text.extend_from_slice(&line);
                text.push(b'\n');
                let _ = to.write_all(&text).and_then(|()| to.flush());
            }
        })
    };
    let out_to: Box<dyn Write + Send> = match stdout_file {
        Some(f) => Box::new(f),
        None => Box::new(std::io::stdout()),
    };
    let err_to: Box<dyn Write + Send> = match stderr_file {
        Some(f) => Box::new(f),
        None => Box::new(std::io::stderr()),
    };
    let out = pipe(Box::new(child.stdout.take().expect("piped")), out_to);
    let err = pipe(Box::new(child.stderr.take().expect("piped")), err_to);
    vec![out, err]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attached_k_value_is_read_up_to_the_command() {
        let words = |s: &str| s.split(' ').map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            attached_kill_on_bad_exit(words("srun -n 3 -K0 sh -K1")),
            words("srun -n 3 --kill-on-bad-exit=0 sh -K1")
        );
    }

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
