//! Every option of Slurm 22.05's `sbatch`, `salloc`, `srun`, `squeue`, `sacct`,
//! `scancel`, `sinfo`, `scontrol`, `sshare` and `sacctmgr`, as their man
//! pages list them, and what ysched does with each: honoured (the
//! command's own parser takes it), accepted (with a warning that says why
//! it changes nothing here, or without a word where it never could),
//! honoured under another name, or refused with the reason. A tool that
//! passes a documented Slurm option never meets a bare "unexpected
//! argument". `contrib/slurm-compat/README.md` has the same table, and a
//! test walks it against the commands.
//!
//! [`screen`] applies the table to a command line, or to one `#SBATCH`
//! line, before the command's parser sees it.

use std::ffi::OsString;

/// What the Slurm names answer to `-V`: the Slurm release whose commands
/// and options they stand in for (ysched's own names give ysched's
/// version).
/// The one partition ysched shows Slurm's tools and writes into the
/// `slurm.conf` of `ysctld export-slurm`: every job and node is in it.
pub const PARTITION: &str = "ysched";

pub const VERSION: &str = "slurm 22.05.8\n";

/// A refused option, and why: one ysched does not support, or a value
/// that does not read (an accepted option's value is checked all the
/// same, as Slurm checks it).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("{option} is not supported here: {why}")]
    Unsupported { option: String, why: &'static str },
    #[error("invalid {option} argument '{value}': {why}")]
    BadValue {
        option: String,
        value: String,
        why: &'static str,
    },
}

/// Why `value` does not read as the value of accepted option `name`, if
/// it does not: counts are whole numbers, sizes numbers with a unit.
fn bad_value(name: &str, value: &str) -> Option<&'static str> {
    let whole = |v: &str| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit());
    match name {
        "--mincpus"
        | "--cores-per-socket"
        | "--sockets-per-node"
        | "--threads-per-core"
        | "--ntasks-per-core"
        | "--ntasks-per-socket" => (!whole(value)).then_some("a whole number of CPUs, 0 or more"),
        "--tmp" => {
            let digits = value.trim_end_matches(|c: char| "KMGTkmgt".contains(c));
            (!whole(digits) || value.len() > digits.len() + 1)
                .then_some("a size: a whole number of MB, or with K, M, G or T")
        }
        _ => None,
    }
}

/// Whether an option takes a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    None,
    Required,
    /// Only attached: `--opt=VALUE`.
    Optional,
}

/// What ysched does with an option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The command's parser takes it and does what Slurm's does.
    Honoured,
    /// Taken without a word: it could change nothing here (why).
    Quiet(&'static str),
    /// Taken with a warning that says why it changes nothing here.
    Accepted(&'static str),
    /// Refused with the reason.
    Refused(&'static str),
    /// Read as this option (`$USER` is the caller's name).
    Alias(&'static str),
}

/// One option, under all its names.
#[derive(Clone, Copy, Debug)]
pub struct SlurmOption {
    pub names: &'static [&'static str],
    pub value: Value,
    pub decision: Decision,
}

const fn opt(names: &'static [&'static str], value: Value, decision: Decision) -> SlurmOption {
    SlurmOption {
        names,
        value,
        decision,
    }
}

/// The commands the table covers, in its order.
pub const COMMANDS: [&str; 10] = [
    "sbatch", "salloc", "srun", "squeue", "sacct", "scancel", "sinfo", "scontrol", "sshare",
    "sacctmgr",
];

/// The options of `command` (none for a command the table does not cover).
pub fn options(command: &str) -> &'static [SlurmOption] {
    match command {
        "sbatch" => SBATCH,
        "salloc" => &SALLOC,
        "srun" => SRUN,
        "squeue" => SQUEUE,
        "sacct" => SACCT,
        "scancel" => SCANCEL,
        "sinfo" => SINFO,
        "scontrol" => SCONTROL,
        "sshare" => SSHARE,
        "sacctmgr" => SACCTMGR,
        _ => &[],
    }
}

/// What `command` does with `args` (its options, then its operands), as
/// ysched's parser will read them: accepted options taken out (their
/// warnings in `warnings`), aliases written as their options, and a
/// refused option's message (`--bb is not supported here: there are no
/// burst buffers here`).
/// For `sbatch` and `srun` the options end at the first operand (the
/// script, the command), after which nothing is touched.
pub fn screen(
    command: &str,
    args: Vec<OsString>,
    warnings: &mut Vec<String>,
) -> Result<Vec<OsString>, Refused> {
    let table = options(command);
    let options_end = matches!(command, "sbatch" | "salloc" | "srun");
    let mut out = Vec::with_capacity(args.len());
    let mut rest = unclustered(table, args, options_end).into_iter();
    while let Some(arg) = rest.next() {
        let text = arg.to_string_lossy().into_owned();
        if text == "--" || (options_end && !text.starts_with('-')) {
            out.push(arg);
            out.extend(rest);
            break;
        }
        let Some((option, attached)) = find(table, &text) else {
            out.push(arg);
            continue;
        };
        let name = text.split('=').next().unwrap_or(&text).to_string();
        // A value not attached is the next word.
        let takes_next = option.value == Value::Required && attached.is_none();
        match option.decision {
            Decision::Honoured => {
                out.push(arg);
                if takes_next {
                    out.extend(rest.next());
                }
            }
            Decision::Quiet(_) | Decision::Accepted(_) => {
                let next = takes_next.then(|| rest.next()).flatten();
                let value = attached.or_else(|| next.map(|v| v.to_string_lossy().into_owned()));
                if let Some((value, why)) =
                    value.and_then(|v| Some((v.clone(), bad_value(&name, &v)?)))
                {
                    return Err(Refused::BadValue {
                        option: name,
                        value,
                        why,
                    });
                }
                if let Decision::Accepted(why) = option.decision {
                    warnings.push(format!(
                        "{name} is accepted and changes nothing here: {why}"
                    ));
                }
            }
            Decision::Refused(why) => return Err(Refused::Unsupported { option: name, why }),
            Decision::Alias(to) => {
                let to = to.replace("$USER", &user_name());
                let next = takes_next.then(|| rest.next()).flatten();
                let value = attached.or_else(|| next.map(|v| v.to_string_lossy().into_owned()));
                match value {
                    Some(v) if to.starts_with("--") && !to.contains('=') => {
                        out.push(format!("{to}={v}").into())
                    }
                    Some(v) => {
                        out.push(to.into());
                        out.push(v.into());
                    }
                    None => out.push(to.into()),
                }
            }
        }
    }
    Ok(out)
}

/// srun's options, up to its command, that shape a job and not only a
/// step (`-G`, `-t`, `-A`, `-N`, ...), each with its value: outside a
/// job, srun asks for an allocation with them, as Slurm's does. Those
/// for the step alone (its files, its environment) stay srun's.
pub fn allocation_words(args: Vec<OsString>) -> Vec<OsString> {
    // srun's own, whatever sbatch's of the same name mean (`--wait`:
    // srun's kills the rest after the first task ends).
    const STEP_ONLY: [&str; 9] = [
        "--output",
        "--error",
        "--input",
        "--open-mode",
        "--export",
        "--label",
        "--unbuffered",
        "--kill-on-bad-exit",
        "--wait",
    ];
    let mut out = Vec::new();
    let mut rest = unclustered(SRUN, args, true).into_iter();
    while let Some(arg) = rest.next() {
        let text = arg.to_string_lossy().into_owned();
        if text == "--" || !text.starts_with('-') {
            break;
        }
        let Some((option, attached)) = find(SRUN, &text) else {
            continue;
        };
        let value = (option.value == Value::Required && attached.is_none())
            .then(|| rest.next())
            .flatten();
        let for_the_job = option.names.iter().all(|n| !STEP_ONLY.contains(n))
            && option.names.iter().any(|n| {
                SBATCH
                    .iter()
                    .any(|o| o.names.contains(n) && o.decision == Decision::Honoured)
            });
        if for_the_job {
            out.push(arg);
            out.extend(value);
        }
    }
    out
}

/// The options of `command` that `args` give, up to its operand, each
/// with its value (attached, or the next word); words the table does
/// not know are passed over.
pub fn given(command: &str, args: &[OsString]) -> Vec<(&'static SlurmOption, Option<String>)> {
    let table = options(command);
    let options_end = matches!(command, "sbatch" | "salloc" | "srun");
    let mut out = Vec::new();
    let mut rest = unclustered(table, args.to_vec(), options_end).into_iter();
    while let Some(arg) = rest.next() {
        let text = arg.to_string_lossy().into_owned();
        if text == "--" || (options_end && !text.starts_with('-')) {
            break;
        }
        if let Some((option, attached)) = find(table, &text) {
            let value = match (option.value, attached) {
                (Value::Required, None) => rest.next().map(|v| v.to_string_lossy().into_owned()),
                (_, attached) => attached,
            };
            out.push((option, value));
        }
    }
    out
}

/// Whether `command`'s options in `args` include the one named `name`.
pub fn is_given(command: &str, args: &[OsString], name: &str) -> bool {
    given(command, args)
        .iter()
        .any(|(option, _)| option.names.contains(&name))
}

/// Why srun takes an option that only its job's own options decide
/// (outside a job, srun honours it for the allocation it asks for).
pub const WITHIN_JOB: &str =
    "a step runs within its job's allocation: the job's own options decide";

/// The caller's user name (for `--me`).
fn user_name() -> String {
    nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map_or_else(|| nix::unistd::geteuid().to_string(), |u| u.name)
}

/// `args` with each cluster of short flags the table knows (`sinfo -Nel`)
/// written one flag a word (`-N -e -l`); a flag that takes a value takes
/// the rest of its cluster. A cluster with a letter the table does not
/// know is left as it is.
fn unclustered(table: &[SlurmOption], args: Vec<OsString>, options_end: bool) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut operands = false;
    for arg in args {
        let text = arg.to_string_lossy().into_owned();
        operands |= text == "--" || (options_end && !text.starts_with('-'));
        match (operands, cluster(table, &text)) {
            (false, Some(flags)) => out.extend(flags.into_iter().map(OsString::from)),
            _ => out.push(arg),
        }
    }
    out
}

/// `-Nel` as `-N`, `-e`, `-l`, if every letter is an option of the table
/// and all but the last take no value (the last may take the rest).
fn cluster(table: &[SlurmOption], text: &str) -> Option<Vec<String>> {
    let letters = text.strip_prefix('-').filter(|l| !l.starts_with('-'))?;
    if letters.chars().count() < 2 {
        return None;
    }
    let mut flags = Vec::new();
    for (at, c) in letters.char_indices() {
        let flag = format!("-{c}");
        let option = table.iter().find(|o| o.names.contains(&flag.as_str()))?;
        if option.value == Value::None {
            flags.push(flag);
            continue;
        }
        // Its value is the rest of the cluster, if any: a value that is
        // optional stays attached (`-K0`), as it must.
        let value = &letters[at + c.len_utf8()..];
        if at == 0 {
            return None;
        }
        match option.value {
            Value::Optional => flags.push(format!("{flag}{value}")),
            _ => {
                flags.push(flag);
                if !value.is_empty() {
                    flags.push(value.to_string());
                }
            }
        }
        return Some(flags);
    }
    Some(flags)
}

/// The option `text` names (`--opt`, `--opt=VALUE`, `-o`, or `-oVALUE` for
/// one that takes a value), and its attached value.
fn find(
    table: &'static [SlurmOption],
    text: &str,
) -> Option<(&'static SlurmOption, Option<String>)> {
    if let Some(long) = text.strip_prefix("--") {
        let (name, value) = match long.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (long, None),
        };
        let name = format!("--{name}");
        let option = table.iter().find(|o| o.names.contains(&name.as_str()))?;
        return Some((option, value));
    }
    let short = text.strip_prefix('-')?;
    let mut chars = short.chars();
    let flag = format!("-{}", chars.next()?);
    let option = table.iter().find(|o| o.names.contains(&flag.as_str()))?;
    let attached: String = chars.collect();
    match (attached.is_empty(), option.value) {
        (true, _) => Some((option, None)),
        (false, Value::Required | Value::Optional) => Some((option, Some(attached))),
        // A cluster of flags (`-Nel`): left to the parser.
        (false, Value::None) => None,
    }
}

/// `salloc`: sbatch's options but those for a batch script alone, and
/// its own.
static SALLOC: std::sync::LazyLock<Vec<SlurmOption>> = std::sync::LazyLock::new(|| {
    // `-b` is salloc's `--begin` too (sbatch's alias of it): not here.
    const BATCH_ONLY: [&str; 17] = [
        "--array",
        "--batch",
        "--error",
        "--export",
        "--export-file",
        "--ignore-pbs",
        "--input",
        "--kill-on-invalid-dep",
        "--no-requeue",
        "--open-mode",
        "--output",
        "--parsable",
        "--propagate",
        "--requeue",
        "--test-only",
        "--wait",
        "--wrap",
    ];
    SBATCH
        .iter()
        .filter(|o| !o.names.iter().any(|n| BATCH_ONLY.contains(n)))
        .chain(SALLOC_OWN)
        .copied()
        .collect()
});

/// The options of `salloc` that `sbatch` has not.
#[rustfmt::skip]
const SALLOC_OWN: &[SlurmOption] = &[
    opt(&["--bell"], Value::None, Decision::Quiet("nothing rings: the allocation's start is said on the terminal")),
    opt(&["--no-bell"], Value::None, Decision::Quiet("nothing rings: the allocation's start is said on the terminal")),
    opt(&["-I", "--immediate"], Value::Optional, Decision::Accepted("an allocation waits in the queue as any job does; Ctrl-C withdraws it")),
    opt(&["-K", "--kill-command"], Value::Optional, Decision::Accepted("the command is hung up (SIGHUP, then SIGKILL) when its allocation ends first")),
    opt(&["--no-shell"], Value::None, Decision::Refused("an allocation without a session is a batch job: submit it with sbatch")),
    opt(&["--x11"], Value::Optional, Decision::Refused("X11 forwarding is not supported")),
];

/// `sbatch`.
const SBATCH: &[SlurmOption] = &[
    opt(&["-A", "--account"], Value::Required, Decision::Honoured),
    opt(&["--acctg-freq"], Value::Required, Decision::Accepted("accounting is always on, sampled at ysched's own intervals")),
    opt(&["-a", "--array"], Value::Required, Decision::Honoured),
    opt(&["--batch"], Value::Required, Decision::Refused("node features are asked for with --constraint here")),
    opt(&["--bb"], Value::Required, Decision::Refused("there are no burst buffers here")),
    opt(&["--bbf"], Value::Required, Decision::Refused("there are no burst buffers here")),
    opt(&["--begin"], Value::Required, Decision::Honoured),
    opt(&["-b"], Value::Required, Decision::Alias("--begin")),
    opt(&["-D", "--chdir"], Value::Required, Decision::Honoured),
    opt(&["--cluster-constraint"], Value::Required, Decision::Accepted("ysched is one cluster, and every job is in it")),
    opt(&["-M", "--clusters"], Value::Required, Decision::Accepted("ysched is one cluster, and every job is in it")),
    opt(&["--comment"], Value::Required, Decision::Honoured),
    opt(&["-C", "--constraint"], Value::Required, Decision::Honoured),
    opt(&["--container"], Value::Required, Decision::Refused("an OCI bundle is not taken: name an image with --container-image")),
    opt(&["--contiguous"], Value::None, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["-S", "--core-spec"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--cores-per-socket"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--cpu-freq"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--cpus-per-gpu"], Value::Required, Decision::Refused("CPUs are asked for per job here: use -c/--cpus-per-task")),
    opt(&["-c", "--cpus-per-task"], Value::Required, Decision::Honoured),
    opt(&["--deadline"], Value::Required, Decision::Refused("deadlines are not scheduled here: a job that must end by then needs its -t")),
    opt(&["--delay-boot"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["-d", "--dependency"], Value::Required, Decision::Honoured),
    opt(&["-m", "--distribution"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["-e", "--error"], Value::Required, Decision::Honoured),
    opt(&["-x", "--exclude"], Value::Required, Decision::Honoured),
    opt(&["--exclusive"], Value::Optional, Decision::Honoured),
    opt(&["--export"], Value::Required, Decision::Honoured),
    opt(&["--export-file"], Value::Required, Decision::Refused("the job's environment is the submitter's (--export); no file is read")),
    opt(&["-B", "--extra-node-info"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--get-user-env"], Value::Optional, Decision::Accepted("the job starts with the submitter's environment already")),
    opt(&["--gid"], Value::Required, Decision::Refused("a job runs as the user who submits it")),
    opt(&["--gpu-bind"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--gpu-freq"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["-G", "--gpus"], Value::Required, Decision::Honoured),
    opt(&["--gpus-per-node"], Value::Required, Decision::Honoured),
    opt(&["--gpus-per-socket"], Value::Required, Decision::Refused("GPUs are asked for per job or per node here (--gpus, --gres)")),
    opt(&["--gpus-per-task"], Value::Required, Decision::Honoured),
    opt(&["--gres"], Value::Required, Decision::Honoured),
    opt(&["--gres-flags"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["-h", "--help"], Value::None, Decision::Honoured),
    opt(&["--hint"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--ignore-pbs"], Value::None, Decision::Accepted("#PBS lines are never read")),
    opt(&["-i", "--input"], Value::Required, Decision::Refused("a batch script reads /dev/null here")),
    opt(&["-H", "--hold"], Value::None, Decision::Honoured),
    opt(&["-J", "--job-name"], Value::Required, Decision::Honoured),
    opt(&["--kill-on-invalid-dep"], Value::Required, Decision::Accepted("whether a job whose dependency can never be met is cancelled is the site's (kill_invalid_dependency)")),
    opt(&["-L", "--licenses"], Value::Required, Decision::Refused("there are no licenses to count here")),
    opt(&["--mail-type"], Value::Required, Decision::Honoured),
    opt(&["--mail-user"], Value::Required, Decision::Honoured),
    opt(&["--mcs-label"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--mem"], Value::Required, Decision::Honoured),
    opt(&["--mem-bind"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--mem-per-cpu"], Value::Required, Decision::Refused("memory is asked for per job (--mem) or per GPU (--mem-per-gpu) here")),
    opt(&["--mem-per-gpu"], Value::Required, Decision::Honoured),
    opt(&["--mincpus"], Value::Required, Decision::Honoured),
    opt(&["--network"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--nice"], Value::Optional, Decision::Honoured),
    opt(&["-k", "--no-kill"], Value::Optional, Decision::Accepted("a job whose node fails is stopped on all its nodes and requeued (unless --no-requeue)")),
    opt(&["--no-requeue"], Value::None, Decision::Honoured),
    opt(&["-F", "--nodefile"], Value::Required, Decision::Refused("name the nodes with -w/--nodelist")),
    opt(&["-w", "--nodelist"], Value::Required, Decision::Honoured),
    opt(&["-N", "--nodes"], Value::Required, Decision::Honoured),
    opt(&["-n", "--ntasks"], Value::Required, Decision::Honoured),
    opt(&["--ntasks-per-core"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--ntasks-per-gpu"], Value::Required, Decision::Refused("tasks are placed per node here: use --ntasks-per-node and --gpus-per-task")),
    opt(&["--ntasks-per-node"], Value::Required, Decision::Honoured),
    opt(&["--ntasks-per-socket"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--open-mode"], Value::None, Decision::Honoured),
    opt(&["-o", "--output"], Value::Required, Decision::Honoured),
    opt(&["-O", "--overcommit"], Value::None, Decision::Honoured),
    opt(&["-s", "--oversubscribe"], Value::None, Decision::Accepted("GPUs are never shared with other jobs unless the site declares them shareable")),
    opt(&["--parsable"], Value::None, Decision::Honoured),
    opt(&["-p", "--partition"], Value::Required, Decision::Honoured),
    opt(&["--power"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--prefer"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--priority"], Value::Required, Decision::Refused("a job's priority is set by an administrator: yscontrol update job=ID priority=N")),
    opt(&["--profile"], Value::Required, Decision::Accepted("accounting is always on, sampled at ysched's own intervals")),
    opt(&["--propagate"], Value::Optional, Decision::Accepted("the job's limits are those of its cgroup")),
    opt(&["-q", "--qos"], Value::Required, Decision::Honoured),
    opt(&["-Q", "--quiet"], Value::None, Decision::Quiet("messages are few already")),
    opt(&["--reboot"], Value::None, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--requeue"], Value::None, Decision::Honoured),
    opt(&["--reservation"], Value::Required, Decision::Refused("there are no reservations here: the job would not run in one")),
    opt(&["--signal"], Value::Required, Decision::Honoured),
    opt(&["--sockets-per-node"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--spread-job"], Value::None, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--switches"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--test-only"], Value::None, Decision::Honoured),
    opt(&["--thread-spec"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--threads-per-core"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["-t", "--time"], Value::Required, Decision::Honoured),
    opt(&["--time-min"], Value::Required, Decision::Accepted("the job gets its -t whole; the scheduler never shortens it")),
    opt(&["--tmp"], Value::Required, Decision::Honoured),
    opt(&["--uid"], Value::Required, Decision::Refused("a job runs as the user who submits it")),
    opt(&["--usage"], Value::None, Decision::Alias("--help")),
    opt(&["--use-min-nodes"], Value::None, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["-v", "--verbose"], Value::None, Decision::Quiet("no more is said")),
    opt(&["-V", "--version"], Value::None, Decision::Honoured),
    opt(&["-W", "--wait"], Value::None, Decision::Honoured),
    opt(&["--wait-all-nodes"], Value::Required, Decision::Accepted("a job's nodes start together always")),
    opt(&["--wckey"], Value::Required, Decision::Honoured),
    opt(&["--wrap"], Value::Required, Decision::Honoured),
];

/// `srun`.
const SRUN: &[SlurmOption] = &[
    opt(&["--accel-bind"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["-A", "--account"], Value::Required, Decision::Accepted(WITHIN_JOB)),
    opt(&["--acctg-freq"], Value::Required, Decision::Accepted("accounting is always on, sampled at ysched's own intervals")),
    opt(&["--bb"], Value::Required, Decision::Refused("there are no burst buffers here")),
    opt(&["--bbf"], Value::Required, Decision::Refused("there are no burst buffers here")),
    opt(&["--bcast"], Value::Optional, Decision::Refused("no files are copied to the nodes: the program must be on a filesystem every node of the job sees")),
    opt(&["--bcast-exclude"], Value::Required, Decision::Refused("no files are copied to the nodes: the program must be on a filesystem every node of the job sees")),
    opt(&["-b", "--begin"], Value::Required, Decision::Accepted(WITHIN_JOB)),
    opt(&["-D", "--chdir"], Value::Required, Decision::Honoured),
    opt(&["--cluster-constraint"], Value::Required, Decision::Accepted("ysched is one cluster, and every job is in it")),
    opt(&["-M", "--clusters"], Value::Required, Decision::Accepted("ysched is one cluster, and every job is in it")),
    opt(&["--comment"], Value::Required, Decision::Accepted(WITHIN_JOB)),
    opt(&["--compress"], Value::Optional, Decision::Refused("no files are copied to the nodes: the program must be on a filesystem every node of the job sees")),
    opt(&["-C", "--constraint"], Value::Required, Decision::Accepted(WITHIN_JOB)),
    opt(&["--container"], Value::Required, Decision::Refused("an OCI bundle is not taken: name an image with --container-image")),
    opt(&["--contiguous"], Value::None, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["-S", "--core-spec"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--cores-per-socket"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--cpu-bind"], Value::Required, Decision::Honoured),
    opt(&["--cpu-freq"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--cpus-per-gpu"], Value::Required, Decision::Accepted(WITHIN_JOB)),
    opt(&["-c", "--cpus-per-task"], Value::Required, Decision::Honoured),
    opt(&["--deadline"], Value::Required, Decision::Accepted(WITHIN_JOB)),
    opt(&["--delay-boot"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["-d", "--dependency"], Value::Required, Decision::Accepted(WITHIN_JOB)),
    opt(&["-X", "--disable-status"], Value::None, Decision::Accepted("Ctrl-C goes to the tasks as it is")),
    opt(&["-m", "--distribution"], Value::Required, Decision::Honoured),
    opt(&["--epilog"], Value::Required, Decision::Refused("steps have no prolog or epilog here: run it in the job script")),
    opt(&["-e", "--error"], Value::Required, Decision::Honoured),
    opt(&["--exact"], Value::None, Decision::Honoured),
    opt(&["-x", "--exclude"], Value::Required, Decision::Honoured),
    opt(&["--exclusive"], Value::Optional, Decision::Honoured),
    opt(&["--export"], Value::Required, Decision::Honoured),
    opt(&["-B", "--extra-node-info"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--gid"], Value::Required, Decision::Refused("a job runs as the user who submits it")),
    opt(&["--gpu-bind"], Value::Required, Decision::Honoured),
    opt(&["--gpu-freq"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["-G", "--gpus"], Value::Required, Decision::Honoured),
    opt(&["--gpus-per-node"], Value::Required, Decision::Accepted(WITHIN_JOB)),
    opt(&["--gpus-per-socket"], Value::Required, Decision::Accepted(WITHIN_JOB)),
    opt(&["--gpus-per-task"], Value::Required, Decision::Honoured),
    opt(&["--gres"], Value::Required, Decision::Honoured),
    opt(&["--gres-flags"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["-h", "--help"], Value::None, Decision::Honoured),
    opt(&["--het-group"], Value::Required, Decision::Refused("heterogeneous jobs are not supported")),
    opt(&["--hint"], Value::Required, Decision::Honoured),
    opt(&["-I", "--immediate"], Value::Optional, Decision::Accepted(WITHIN_JOB)),
    opt(&["-H", "--hold"], Value::None, Decision::Accepted(WITHIN_JOB)),
    opt(&["-i", "--input"], Value::Required, Decision::Honoured),
    opt(&["-J", "--job-name"], Value::Required, Decision::Honoured),
    opt(&["--jobid"], Value::Required, Decision::Honoured),
    opt(&["-K", "--kill-on-bad-exit"], Value::Optional, Decision::Honoured),
    opt(&["-l", "--label"], Value::None, Decision::Honoured),
    opt(&["-L", "--licenses"], Value::Required, Decision::Refused("there are no licenses to count here")),
    opt(&["--mail-type"], Value::Required, Decision::Accepted(WITHIN_JOB)),
    opt(&["--mail-user"], Value::Required, Decision::Accepted(WITHIN_JOB)),
    opt(&["--mcs-label"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--mem"], Value::Required, Decision::Honoured),
    opt(&["--mem-bind"], Value::Required, Decision::Honoured),
    opt(&["--mem-per-cpu"], Value::Required, Decision::Honoured),
    opt(&["--mem-per-gpu"], Value::Required, Decision::Honoured),
    opt(&["--mincpus"], Value::Required, Decision::Accepted(WITHIN_JOB)),
    opt(&["--mpi"], Value::Required, Decision::Honoured),
    opt(&["--msg-timeout"], Value::Required, Decision::Accepted("srun waits for its task servers as long as it must (30 s to start)")),
    opt(&["--multi-prog"], Value::None, Decision::Refused("one command per step: run each program as a step of its own")),
    opt(&["--network"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--nice"], Value::Optional, Decision::Accepted(WITHIN_JOB)),
    opt(&["-Z", "--no-allocate"], Value::None, Decision::Refused("srun always starts its tasks on the job's nodes")),
    opt(&["-k", "--no-kill"], Value::Optional, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["-F", "--nodefile"], Value::Required, Decision::Refused("name the nodes with -w/--nodelist")),
    opt(&["-w", "--nodelist"], Value::Required, Decision::Honoured),
    opt(&["-N", "--nodes"], Value::Required, Decision::Honoured),
    opt(&["-n", "--ntasks"], Value::Required, Decision::Honoured),
    opt(&["--ntasks-per-core"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--ntasks-per-gpu"], Value::Required, Decision::Honoured),
    opt(&["--ntasks-per-node"], Value::Required, Decision::Honoured),
    opt(&["--ntasks-per-socket"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--open-mode"], Value::None, Decision::Accepted(WITHIN_JOB)),
    opt(&["-o", "--output"], Value::Required, Decision::Honoured),
    opt(&["-O", "--overcommit"], Value::None, Decision::Honoured),
    opt(&["--overlap"], Value::None, Decision::Honoured),
    opt(&["-s", "--oversubscribe"], Value::None, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["-p", "--partition"], Value::Required, Decision::Honoured),
    opt(&["--power"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--prefer"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["-E", "--preserve-env"], Value::None, Decision::Accepted("the step's environment is srun's own, as it is")),
    opt(&["--priority"], Value::Required, Decision::Accepted(WITHIN_JOB)),
    opt(&["--profile"], Value::Required, Decision::Accepted("accounting is always on, sampled at ysched's own intervals")),
    opt(&["--prolog"], Value::Required, Decision::Refused("steps have no prolog or epilog here: run it in the job script")),
    opt(&["--propagate"], Value::Optional, Decision::Honoured),
    opt(&["--pty"], Value::None, Decision::Honoured),
    opt(&["-q", "--qos"], Value::Required, Decision::Accepted(WITHIN_JOB)),
    opt(&["-Q", "--quiet"], Value::None, Decision::Honoured),
    opt(&["--quit-on-interrupt"], Value::None, Decision::Honoured),
    opt(&["--reboot"], Value::None, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["-r", "--relative"], Value::Required, Decision::Refused("a step starts on the job's first nodes")),
    opt(&["--reservation"], Value::Required, Decision::Refused("there are no reservations here: the job would not run in one")),
    opt(&["--resv-ports"], Value::Optional, Decision::Accepted("each job's rendezvous port is its own (MASTER_PORT)")),
    opt(&["--send-libs"], Value::Optional, Decision::Refused("no files are copied to the nodes: the program must be on a filesystem every node of the job sees")),
    opt(&["--signal"], Value::Required, Decision::Accepted("the job's --signal reaches the step's tasks")),
    opt(&["--slurmd-debug"], Value::Required, Decision::Quiet("no more is said")),
    opt(&["--sockets-per-node"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--spread-job"], Value::None, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--switches"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["--task-epilog"], Value::Required, Decision::Refused("steps have no prolog or epilog here: run it in the job script")),
    opt(&["--task-prolog"], Value::Required, Decision::Refused("steps have no prolog or epilog here: run it in the job script")),
    opt(&["--test-only"], Value::None, Decision::Refused("ask the job itself: sbatch --test-only")),
    opt(&["--thread-spec"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["-T", "--threads"], Value::Required, Decision::Accepted("srun talks to each node on one connection")),
    opt(&["--threads-per-core"], Value::Required, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["-t", "--time"], Value::Required, Decision::Honoured),
    opt(&["--time-min"], Value::Required, Decision::Accepted(WITHIN_JOB)),
    opt(&["--tmp"], Value::Required, Decision::Accepted(WITHIN_JOB)),
    opt(&["--uid"], Value::Required, Decision::Refused("a job runs as the user who submits it")),
    opt(&["-u", "--unbuffered"], Value::None, Decision::Honoured),
    opt(&["--usage"], Value::None, Decision::Alias("--help")),
    opt(&["--use-min-nodes"], Value::None, Decision::Accepted("a placement or tuning hint: ysched places jobs by GPUs, CPUs and memory, and runs the job as if it were not given")),
    opt(&["-v", "--verbose"], Value::None, Decision::Honoured),
    opt(&["-V", "--version"], Value::None, Decision::Honoured),
    opt(&["-W", "--wait"], Value::Required, Decision::Honoured),
    opt(&["--wckey"], Value::Required, Decision::Accepted(WITHIN_JOB)),
    opt(&["--x11"], Value::Optional, Decision::Refused("X11 forwarding is not supported")),
];

/// `squeue`.
const SQUEUE: &[SlurmOption] = &[
    opt(&["-A", "--account"], Value::Required, Decision::Honoured),
    opt(&["-a", "--all"], Value::None, Decision::Honoured),
    opt(&["-r", "--array"], Value::None, Decision::Honoured),
    opt(
        &["--array-unique"],
        Value::None,
        Decision::Accepted("an array's pending tasks are shown folded (123_[5-9])"),
    ),
    opt(&["-M", "--clusters"], Value::Required, Decision::Honoured),
    opt(
        &["--federation"],
        Value::None,
        Decision::Quiet("ysched is one cluster, not a federation"),
    ),
    opt(&["-o", "--format"], Value::Required, Decision::Honoured),
    opt(&["-O", "--Format"], Value::Required, Decision::Honoured),
    opt(&["--help"], Value::None, Decision::Honoured),
    opt(&["--helpformat"], Value::None, Decision::Honoured),
    opt(
        &["--hide"],
        Value::None,
        Decision::Quiet("every job and node is shown to whoever may see it"),
    ),
    opt(
        &["-i", "--iterate"],
        Value::Required,
        Decision::Refused("squeue prints once: use watch squeue"),
    ),
    opt(&["-j", "--jobs"], Value::Required, Decision::Honoured),
    opt(
        &["-L", "--licenses"],
        Value::Required,
        Decision::Refused("there are no licenses to count here"),
    ),
    opt(
        &["--local"],
        Value::None,
        Decision::Quiet("ysched is one cluster, not a federation"),
    ),
    opt(
        &["-l", "--long"],
        Value::None,
        Decision::Accepted("the default columns are shown"),
    ),
    opt(&["--me"], Value::None, Decision::Honoured),
    opt(&["-n", "--name"], Value::Required, Decision::Honoured),
    opt(
        &["--noconvert"],
        Value::None,
        Decision::Quiet("sizes are printed as they are"),
    ),
    opt(
        &["-w", "--nodelist"],
        Value::Required,
        Decision::Refused("jobs are not listed by node yet: use -o with %N"),
    ),
    opt(&["-h", "--noheader"], Value::None, Decision::Honoured),
    opt(
        &["-p", "--partition"],
        Value::Required,
        Decision::Accepted("ysched has one partition, ysched, and every job is in it"),
    ),
    opt(
        &["-P", "--priority"],
        Value::None,
        Decision::Quiet("one partition: each job is listed once"),
    ),
    opt(
        &["-q", "--qos"],
        Value::Required,
        Decision::Refused("jobs are not listed by QoS yet: use -o with %q"),
    ),
    opt(
        &["-R", "--reservation"],
        Value::Required,
        Decision::Accepted("no reservations here: no job is in one"),
    ),
    opt(
        &["--sibling"],
        Value::None,
        Decision::Quiet("ysched is one cluster, not a federation"),
    ),
    opt(
        &["-S", "--sort"],
        Value::Required,
        Decision::Accepted(
            "jobs come in queue order: running ones, then pending ones as they would start",
        ),
    ),
    opt(&["--start"], Value::None, Decision::Honoured),
    opt(&["-t", "--states"], Value::Required, Decision::Honoured),
    opt(&["-s", "--steps"], Value::None, Decision::Honoured),
    opt(&["--usage"], Value::None, Decision::Alias("--help")),
    opt(&["-u", "--user"], Value::Required, Decision::Honoured),
    opt(
        &["-v", "--verbose"],
        Value::None,
        Decision::Quiet("no more is said"),
    ),
    opt(&["-V", "--version"], Value::None, Decision::Honoured),
    opt(&["--json"], Value::None, Decision::Honoured),
    opt(&["--yaml"], Value::None, Decision::Refused("use --json")),
];

/// `sacct`.
const SACCT: &[SlurmOption] = &[
    opt(
        &["-L", "--allclusters"],
        Value::None,
        Decision::Quiet("ysched is one cluster, and every job is in it"),
    ),
    opt(&["-X", "--allocations"], Value::None, Decision::Honoured),
    opt(&["-a", "--allusers"], Value::None, Decision::Honoured),
    opt(
        &["-x", "--associations"],
        Value::Required,
        Decision::Refused("associations are listed by sacctmgr show associations"),
    ),
    opt(
        &["-B", "--batch-script"],
        Value::None,
        Decision::Refused("batch scripts are not printed by sacct here"),
    ),
    opt(
        &["-b", "--brief"],
        Value::None,
        Decision::Alias("--format=JobID,State,ExitCode"),
    ),
    opt(&["-M", "--clusters"], Value::Required, Decision::Honoured),
    opt(
        &["-c", "--completion"],
        Value::None,
        Decision::Refused(
            "there is no job completion log here: the accounting database has every job",
        ),
    ),
    opt(
        &["-C", "--constraints"],
        Value::Required,
        Decision::Refused("jobs are not listed by constraint yet"),
    ),
    opt(
        &["--delimiter"],
        Value::Required,
        Decision::Refused("the separator of -p/-P is |"),
    ),
    opt(
        &["-D", "--duplicates"],
        Value::None,
        Decision::Quiet("a requeued job is one record with its restarts (Restarts)"),
    ),
    opt(&["-E", "--endtime"], Value::Required, Decision::Honoured),
    opt(
        &["--env-vars"],
        Value::None,
        Decision::Refused("job environments are not printed by sacct here"),
    ),
    opt(
        &["--federation"],
        Value::None,
        Decision::Quiet("ysched is one cluster, not a federation"),
    ),
    opt(
        &["-f", "--file"],
        Value::Required,
        Decision::Refused("there is no job completion file here"),
    ),
    opt(
        &["-F", "--flags"],
        Value::Required,
        Decision::Quiet("no flags change what is listed"),
    ),
    opt(&["-o", "--format"], Value::None, Decision::Honoured),
    opt(
        &["-g", "--gid", "--group"],
        Value::Required,
        Decision::Refused("jobs are not listed by group yet"),
    ),
    opt(&["-h", "--help"], Value::None, Decision::Honoured),
    opt(&["-e", "--helpformat"], Value::None, Decision::Honoured),
    opt(&["-j", "--jobs"], Value::Required, Decision::Honoured),
    opt(&["--json"], Value::None, Decision::Honoured),
    opt(
        &["--local"],
        Value::None,
        Decision::Quiet("ysched is one cluster, not a federation"),
    ),
    opt(
        &["-l", "--long"],
        Value::None,
        Decision::Accepted("the default fields are shown"),
    ),
    opt(&["--name"], Value::Required, Decision::Honoured),
    opt(
        &["-i", "--nnodes"],
        Value::Required,
        Decision::Refused("jobs are not listed by node count yet"),
    ),
    opt(
        &["-I", "--ncpus"],
        Value::Required,
        Decision::Refused("jobs are not listed by CPU count yet"),
    ),
    opt(
        &["--noconvert"],
        Value::None,
        Decision::Quiet("sizes are printed as they are"),
    ),
    opt(
        &["-N", "--nodelist"],
        Value::Required,
        Decision::Refused("jobs are not listed by node yet: use -o with NodeList"),
    ),
    opt(&["-n", "--noheader"], Value::None, Decision::Honoured),
    opt(&["-p", "--parsable"], Value::None, Decision::Honoured),
    opt(&["-P", "--parsable2"], Value::None, Decision::Honoured),
    opt(
        &["-r", "--partition"],
        Value::None,
        Decision::Accepted("ysched has one partition, ysched, and every job is in it"),
    ),
    opt(
        &["-q", "--qos"],
        Value::None,
        Decision::Refused("jobs are not listed by QoS yet: use -o with QOS"),
    ),
    opt(
        &["-R", "--reason"],
        Value::Required,
        Decision::Refused("jobs are not listed by reason yet: use -o with Reason"),
    ),
    opt(&["-S", "--starttime"], Value::None, Decision::Honoured),
    opt(&["-s", "--state"], Value::Required, Decision::Honoured),
    opt(
        &["-K", "--timelimit-max"],
        Value::None,
        Decision::Refused("jobs are not listed by time limit yet"),
    ),
    opt(
        &["-k", "--timelimit-min"],
        Value::None,
        Decision::Refused("jobs are not listed by time limit yet"),
    ),
    opt(
        &["-T", "--truncate"],
        Value::None,
        Decision::Quiet("times are those of the jobs"),
    ),
    opt(&["--user"], Value::Required, Decision::Honoured),
    opt(
        &["--uid"],
        Value::Required,
        Decision::Refused("name the user with -u/--user"),
    ),
    opt(
        &["--units"],
        Value::None,
        Decision::Quiet("sizes are printed as they are"),
    ),
    opt(&["--usage"], Value::None, Decision::Alias("--help")),
    opt(
        &["--use-local-uid"],
        Value::None,
        Decision::Quiet("user names are resolved here"),
    ),
    opt(
        &["-v", "--verbose"],
        Value::None,
        Decision::Quiet("no more is said"),
    ),
    opt(&["--version"], Value::None, Decision::Honoured),
    opt(
        &["-W", "--wckeys"],
        Value::Required,
        Decision::Accepted("ysched keeps no workload keys"),
    ),
    opt(
        &["--whole-hetjob"],
        Value::Optional,
        Decision::Quiet("there are no heterogeneous jobs"),
    ),
    opt(&["--yaml"], Value::None, Decision::Refused("use --json")),
];

/// `scancel`.
const SCANCEL: &[SlurmOption] = &[
    opt(&["-A", "--account"], Value::Required, Decision::Honoured),
    opt(&["-b", "--batch"], Value::None, Decision::Honoured),
    opt(
        &["-M", "--clusters"],
        Value::Required,
        Decision::Quiet("ysched is one cluster, and every job is in it"),
    ),
    opt(
        &["--ctld"],
        Value::None,
        Decision::Quiet("requests always go to the controller"),
    ),
    opt(&["-f", "--full"], Value::None, Decision::Honoured),
    opt(&["--help"], Value::None, Decision::Honoured),
    opt(
        &["-H", "--hurry"],
        Value::None,
        Decision::Quiet("jobs are stopped as soon as they can be"),
    ),
    opt(
        &["-i", "--interactive"],
        Value::None,
        Decision::Refused("scancel does not ask: name the jobs"),
    ),
    opt(&["-n", "--name"], Value::Required, Decision::Honoured),
    opt(&["--jobname"], Value::Required, Decision::Alias("--name")),
    opt(&["--me"], Value::None, Decision::Alias("--user=$USER")),
    opt(
        &["-w"],
        Value::Required,
        Decision::Refused("jobs are not cancelled by node yet"),
    ),
    opt(
        &["-p", "--partition"],
        Value::Required,
        Decision::Accepted("ysched has one partition, ysched, and every job is in it"),
    ),
    opt(
        &["-q", "--qos"],
        Value::Required,
        Decision::Refused("jobs are not cancelled by QoS yet"),
    ),
    opt(
        &["-Q", "--quiet"],
        Value::None,
        Decision::Quiet("messages are few already"),
    ),
    opt(
        &["-R", "--reservation"],
        Value::Required,
        Decision::Refused("there are no reservations here: the job would not run in one"),
    ),
    opt(
        &["--sibling"],
        Value::Required,
        Decision::Quiet("ysched is one cluster, not a federation"),
    ),
    opt(&["-s", "--signal"], Value::Required, Decision::Honoured),
    opt(&["-t", "--state"], Value::Required, Decision::Honoured),
    opt(&["--usage"], Value::None, Decision::Alias("--help")),
    opt(&["-u", "--user"], Value::Required, Decision::Honoured),
    opt(&["-v", "--verbose"], Value::None, Decision::Honoured),
    opt(&["-V", "--version"], Value::None, Decision::Honoured),
    opt(
        &["--wckey"],
        Value::Required,
        Decision::Refused("ysched keeps no workload keys"),
    ),
];

/// `sinfo`.
const SINFO: &[SlurmOption] = &[
    opt(
        &["-a", "--all"],
        Value::None,
        Decision::Quiet("every partition is shown: there is one"),
    ),
    opt(
        &["-M", "--clusters"],
        Value::Required,
        Decision::Quiet("ysched is one cluster, and every job is in it"),
    ),
    opt(
        &["-d", "--dead"],
        Value::None,
        Decision::Refused("nodes are not listed by state yet: use -o with %t"),
    ),
    opt(
        &["-e", "--exact"],
        Value::None,
        Decision::Quiet("each node is shown as it is"),
    ),
    opt(
        &["--federation"],
        Value::None,
        Decision::Quiet("ysched is one cluster, not a federation"),
    ),
    opt(&["-o", "--format"], Value::Required, Decision::Honoured),
    opt(&["-O", "--Format"], Value::Required, Decision::Honoured),
    opt(&["--helpformat"], Value::None, Decision::Honoured),
    opt(&["--help"], Value::None, Decision::Honoured),
    opt(
        &["--hide"],
        Value::None,
        Decision::Quiet("every job and node is shown to whoever may see it"),
    ),
    opt(
        &["-i", "--iterate"],
        Value::Required,
        Decision::Refused("sinfo prints once: use watch sinfo"),
    ),
    opt(
        &["-R", "--list-reasons"],
        Value::None,
        Decision::Refused("reasons are shown by ysinfo and scontrol show node"),
    ),
    opt(
        &["--local"],
        Value::None,
        Decision::Quiet("ysched is one cluster, not a federation"),
    ),
    opt(
        &["-l", "--long"],
        Value::None,
        Decision::Accepted("the default columns are shown"),
    ),
    opt(
        &["--noconvert"],
        Value::None,
        Decision::Quiet("sizes are printed as they are"),
    ),
    opt(&["-N", "--Node"], Value::None, Decision::Honoured),
    opt(
        &["-n", "--nodes"],
        Value::Required,
        Decision::Refused("nodes are not listed by name yet: use -N and grep"),
    ),
    opt(&["-h", "--noheader"], Value::None, Decision::Honoured),
    opt(&["-p", "--partition"], Value::Required, Decision::Honoured),
    opt(
        &["-T", "--reservation"],
        Value::None,
        Decision::Refused("there are no reservations here"),
    ),
    opt(
        &["-r", "--responding"],
        Value::None,
        Decision::Quiet("down nodes are shown with their state"),
    ),
    opt(
        &["-S", "--sort"],
        Value::Required,
        Decision::Accepted("nodes come in their order"),
    ),
    opt(
        &["-t", "--states"],
        Value::Required,
        Decision::Refused("nodes are not listed by state yet: use -o with %t"),
    ),
    opt(&["-s", "--summarize"], Value::None, Decision::Honoured),
    opt(&["--usage"], Value::None, Decision::Alias("--help")),
    opt(
        &["-v", "--verbose"],
        Value::None,
        Decision::Quiet("no more is said"),
    ),
    opt(&["-V", "--version"], Value::None, Decision::Honoured),
    opt(&["--json"], Value::None, Decision::Honoured),
    opt(&["--yaml"], Value::None, Decision::Refused("use --json")),
];

/// `scontrol`.
const SCONTROL: &[SlurmOption] = &[
    opt(
        &["-a", "--all"],
        Value::None,
        Decision::Quiet("no partition is hidden: all are shown"),
    ),
    opt(
        &["-M", "--clusters"],
        Value::Required,
        Decision::Quiet("ysched is one cluster, not a federation"),
    ),
    opt(&["-d", "--details"], Value::None, Decision::Honoured),
    opt(
        &["--federation"],
        Value::None,
        Decision::Quiet("ysched is one cluster, not a federation"),
    ),
    opt(
        &["-F", "--future"],
        Value::None,
        Decision::Quiet("no node is in the FUTURE state"),
    ),
    opt(&["-h", "--help"], Value::None, Decision::Honoured),
    opt(
        &["--hide"],
        Value::None,
        Decision::Quiet("no partition is hidden"),
    ),
    opt(
        &["--local"],
        Value::None,
        Decision::Quiet("ysched is one cluster, not a federation"),
    ),
    opt(&["-o", "--oneliner"], Value::None, Decision::Honoured),
    opt(
        &["-Q", "--quiet"],
        Value::None,
        Decision::Quiet("messages are few already"),
    ),
    opt(
        &["--sibling"],
        Value::None,
        Decision::Quiet("ysched is one cluster, not a federation"),
    ),
    opt(
        &["-u", "--uid"],
        Value::Required,
        Decision::Refused("requests are made as the user who runs scontrol"),
    ),
    opt(
        &["-v", "--verbose"],
        Value::None,
        Decision::Quiet("no more is said"),
    ),
    opt(&["-V", "--version"], Value::None, Decision::Honoured),
    opt(&["--json"], Value::None, Decision::Honoured),
    opt(&["--yaml"], Value::None, Decision::Refused("use --json")),
];

/// `sshare`.
const SSHARE: &[SlurmOption] = &[
    opt(&["-A", "--accounts"], Value::Required, Decision::Honoured),
    opt(&["-a", "--all"], Value::None, Decision::Honoured),
    opt(&["-M", "--clusters"], Value::Required, Decision::Honoured),
    opt(&["-o", "--format"], Value::Required, Decision::Honoured),
    opt(&["--help"], Value::None, Decision::Honoured),
    opt(&["-l", "--long"], Value::None, Decision::Honoured),
    opt(&["-n", "--noheader"], Value::None, Decision::Honoured),
    opt(&["-p", "--parsable"], Value::None, Decision::Honoured),
    opt(&["-P", "--parsable2"], Value::None, Decision::Honoured),
    opt(
        &["-m", "--partition"],
        Value::None,
        Decision::Quiet("ysched has one partition, ysched, and every job is in it"),
    ),
    opt(&["--usage"], Value::None, Decision::Alias("--help")),
    opt(&["-u", "--users"], Value::Required, Decision::Honoured),
    opt(&["-U", "--Users"], Value::None, Decision::Honoured),
    opt(
        &["-v", "--verbose"],
        Value::None,
        Decision::Quiet("no more is said"),
    ),
    opt(&["-V", "--version"], Value::None, Decision::Honoured),
];

/// `sacctmgr`.
const SACCTMGR: &[SlurmOption] = &[
    opt(&["-s", "--associations"], Value::None, Decision::Honoured),
    opt(&["-h", "--help"], Value::None, Decision::Honoured),
    opt(&["-i", "--immediate"], Value::None, Decision::Honoured),
    opt(&["-n", "--noheader"], Value::None, Decision::Honoured),
    opt(&["-p", "--parsable"], Value::None, Decision::Honoured),
    opt(&["-P", "--parsable2"], Value::None, Decision::Honoured),
    opt(&["-Q", "--quiet"], Value::None, Decision::Honoured),
    opt(&["-r", "--readonly"], Value::None, Decision::Honoured),
    opt(&["-v", "--verbose"], Value::None, Decision::Honoured),
    opt(&["-V", "--version"], Value::None, Decision::Honoured),
];

/// The input variables of a command: each read as an option where the
/// command line does not give that option (`SBATCH_OUTPUT=x.out` as
/// `--output=x.out`), as Slurm 22.05's commands read them: the command
/// line wins over them, and they over `#SBATCH` lines.
pub fn input_variables(command: &str) -> &'static [(&'static str, &'static str)] {
    match command {
        "sbatch" => SBATCH_VARIABLES,
        "salloc" => SALLOC_VARIABLES,
        "srun" => SRUN_VARIABLES,
        _ => &[],
    }
}

/// `args` with the options `command`'s input variables give (read with
/// `get`) put first, those the command line has left out; a variable of
/// a refused option is refused, naming the variable.
pub fn with_input_variables(
    command: &str,
    args: Vec<OsString>,
    get: impl Fn(&str) -> Option<String>,
) -> Result<Vec<OsString>, Refused> {
    let table = options(command);
    // The options the command line gives, by their table entry.
    let mut given: Vec<&'static SlurmOption> =
        given(command, &args).into_iter().map(|(o, _)| o).collect();
    let mut front: Vec<OsString> = Vec::new();
    for (variable, name) in input_variables(command) {
        let Some(value) = get(variable).filter(|v| !v.is_empty()) else {
            continue;
        };
        let Some(option) = table.iter().find(|o| o.names.contains(name)) else {
            continue;
        };
        if given.iter().any(|g| std::ptr::eq(*g, option)) {
            continue;
        }
        if let Decision::Refused(why) = option.decision {
            return Err(Refused::Unsupported {
                option: format!("{variable} (as {name})"),
                why,
            });
        }
        given.push(option);
        match (option.value, *name) {
            // SLURM_DEBUG=2: two -v.
            (Value::None, "--verbose") => {
                let times = value.parse::<usize>().unwrap_or(1).min(9);
                front.extend(std::iter::repeat_n(OsString::from("--verbose"), times));
            }
            (Value::None, _) => {
                if !matches!(value.to_ascii_lowercase().as_str(), "0" | "no" | "false") {
                    front.push(OsString::from(*name));
                }
            }
            _ => front.push(OsString::from(format!("{name}={value}"))),
        }
    }
    front.extend(args);
    Ok(front)
}

/// sbatch's input variables (sbatch(1), INPUT ENVIRONMENT VARIABLES).
#[rustfmt::skip]
const SBATCH_VARIABLES: &[(&str, &str)] = &[
    ("SBATCH_ACCOUNT", "--account"), ("SBATCH_ACCTG_FREQ", "--acctg-freq"),
    ("SBATCH_ARRAY_INX", "--array"), ("SBATCH_BATCH", "--batch"),
    ("SBATCH_CLUSTERS", "--clusters"), ("SLURM_CLUSTERS", "--clusters"),
    ("SBATCH_CONSTRAINT", "--constraint"), ("SBATCH_CONTAINER", "--container"),
    ("SBATCH_CORE_SPEC", "--core-spec"), ("SBATCH_CPUS_PER_GPU", "--cpus-per-gpu"),
    ("SBATCH_DEBUG", "--verbose"), ("SBATCH_DELAY_BOOT", "--delay-boot"),
    ("SBATCH_DISTRIBUTION", "--distribution"), ("SBATCH_ERROR", "--error"),
    ("SBATCH_EXCLUSIVE", "--exclusive"), ("SBATCH_EXPORT", "--export"),
    ("SBATCH_GET_USER_ENV", "--get-user-env"), ("SBATCH_GPU_BIND", "--gpu-bind"),
    ("SBATCH_GPU_FREQ", "--gpu-freq"), ("SBATCH_GPUS", "--gpus"),
    ("SBATCH_GPUS_PER_NODE", "--gpus-per-node"), ("SBATCH_GPUS_PER_TASK", "--gpus-per-task"),
    ("SBATCH_GRES", "--gres"), ("SBATCH_GRES_FLAGS", "--gres-flags"),
    ("SBATCH_HINT", "--hint"), ("SBATCH_IGNORE_PBS", "--ignore-pbs"),
    ("SBATCH_INPUT", "--input"), ("SBATCH_JOB_NAME", "--job-name"),
    ("SBATCH_MEM_BIND", "--mem-bind"), ("SBATCH_MEM_PER_CPU", "--mem-per-cpu"),
    ("SBATCH_MEM_PER_GPU", "--mem-per-gpu"), ("SBATCH_MEM_PER_NODE", "--mem"),
    ("SBATCH_NETWORK", "--network"), ("SBATCH_NO_KILL", "--no-kill"),
    ("SBATCH_NO_REQUEUE", "--no-requeue"), ("SBATCH_OPEN_MODE", "--open-mode"),
    ("SBATCH_OUTPUT", "--output"), ("SBATCH_OVERCOMMIT", "--overcommit"),
    ("SBATCH_PARTITION", "--partition"), ("SBATCH_POWER", "--power"),
    ("SBATCH_PROFILE", "--profile"), ("SBATCH_QOS", "--qos"),
    ("SBATCH_REQ_SWITCH", "--switches"), ("SBATCH_REQUEUE", "--requeue"),
    ("SBATCH_RESERVATION", "--reservation"), ("SBATCH_SIGNAL", "--signal"),
    ("SBATCH_SPREAD_JOB", "--spread-job"), ("SBATCH_THREAD_SPEC", "--thread-spec"),
    ("SBATCH_THREADS_PER_CORE", "--threads-per-core"), ("SBATCH_TIMELIMIT", "--time"),
    ("SBATCH_USE_MIN_NODES", "--use-min-nodes"), ("SBATCH_WAIT", "--wait"),
    ("SBATCH_WAIT_ALL_NODES", "--wait-all-nodes"), ("SBATCH_WCKEY", "--wckey"),
];

/// salloc's input variables (salloc(1), INPUT ENVIRONMENT VARIABLES).
#[rustfmt::skip]
const SALLOC_VARIABLES: &[(&str, &str)] = &[
    ("SALLOC_ACCOUNT", "--account"), ("SALLOC_ACCTG_FREQ", "--acctg-freq"),
    ("SALLOC_BELL", "--bell"), ("SALLOC_CLUSTERS", "--clusters"),
    ("SLURM_CLUSTERS", "--clusters"), ("SALLOC_CONSTRAINT", "--constraint"),
    ("SALLOC_CONTAINER", "--container"), ("SALLOC_CORE_SPEC", "--core-spec"),
    ("SALLOC_CPUS_PER_GPU", "--cpus-per-gpu"), ("SALLOC_DEBUG", "--verbose"),
    ("SALLOC_DELAY_BOOT", "--delay-boot"), ("SALLOC_EXCLUSIVE", "--exclusive"),
    ("SALLOC_GPU_BIND", "--gpu-bind"), ("SALLOC_GPU_FREQ", "--gpu-freq"),
    ("SALLOC_GPUS", "--gpus"), ("SALLOC_GPUS_PER_NODE", "--gpus-per-node"),
    ("SALLOC_GPUS_PER_TASK", "--gpus-per-task"), ("SALLOC_GRES", "--gres"),
    ("SALLOC_GRES_FLAGS", "--gres-flags"), ("SALLOC_HINT", "--hint"),
    ("SALLOC_IMMEDIATE", "--immediate"), ("SALLOC_KILL_CMD", "--kill-command"),
    ("SALLOC_MEM_BIND", "--mem-bind"), ("SALLOC_MEM_PER_CPU", "--mem-per-cpu"),
    ("SALLOC_MEM_PER_GPU", "--mem-per-gpu"), ("SALLOC_MEM_PER_NODE", "--mem"),
    ("SALLOC_NETWORK", "--network"), ("SALLOC_NO_BELL", "--no-bell"),
    ("SALLOC_NO_KILL", "--no-kill"), ("SALLOC_OVERCOMMIT", "--overcommit"),
    ("SALLOC_PARTITION", "--partition"), ("SALLOC_POWER", "--power"),
    ("SALLOC_PROFILE", "--profile"), ("SALLOC_QOS", "--qos"),
    ("SALLOC_REQ_SWITCH", "--switches"), ("SALLOC_RESERVATION", "--reservation"),
    ("SALLOC_SIGNAL", "--signal"), ("SALLOC_SPREAD_JOB", "--spread-job"),
    ("SALLOC_THREAD_SPEC", "--thread-spec"), ("SALLOC_THREADS_PER_CORE", "--threads-per-core"),
    ("SALLOC_TIMELIMIT", "--time"), ("SALLOC_USE_MIN_NODES", "--use-min-nodes"),
    ("SALLOC_WAIT_ALL_NODES", "--wait-all-nodes"), ("SALLOC_WCKEY", "--wckey"),
];

/// srun's input variables (srun(1), INPUT ENVIRONMENT VARIABLES), read
/// outside a job: inside one, the job's own `SLURM_*` variables are its
/// defaults already.
#[rustfmt::skip]
const SRUN_VARIABLES: &[(&str, &str)] = &[
    ("SLURM_ACCOUNT", "--account"), ("SLURM_ACCTG_FREQ", "--acctg-freq"),
    ("SLURM_CLUSTERS", "--clusters"), ("SLURM_CONSTRAINT", "--constraint"),
    ("SLURM_CORE_SPEC", "--core-spec"), ("SLURM_CPU_BIND", "--cpu-bind"),
    ("SLURM_CPU_FREQ_REQ", "--cpu-freq"), ("SLURM_CPUS_PER_GPU", "--cpus-per-gpu"),
    ("SLURM_CPUS_PER_TASK", "--cpus-per-task"), ("SLURM_DEBUG", "--verbose"),
    ("SLURM_DEPENDENCY", "--dependency"), ("SLURM_DISTRIBUTION", "--distribution"),
    ("SLURM_EXACT", "--exact"), ("SLURM_EXCLUSIVE", "--exclusive"),
    ("SLURM_EXPORT_ENV", "--export"), ("SLURM_GPU_BIND", "--gpu-bind"),
    ("SLURM_GPU_FREQ", "--gpu-freq"), ("SLURM_GPUS", "--gpus"),
    ("SLURM_GPUS_PER_NODE", "--gpus-per-node"), ("SLURM_GPUS_PER_TASK", "--gpus-per-task"),
    ("SLURM_GRES", "--gres"), ("SLURM_GRES_FLAGS", "--gres-flags"),
    ("SLURM_HINT", "--hint"), ("SLURM_IMMEDIATE", "--immediate"),
    ("SLURM_JOB_NAME", "--job-name"), ("SLURM_LABELIO", "--label"),
    ("SLURM_MEM_BIND", "--mem-bind"), ("SLURM_MEM_PER_CPU", "--mem-per-cpu"),
    ("SLURM_MEM_PER_GPU", "--mem-per-gpu"), ("SLURM_MEM_PER_NODE", "--mem"),
    ("SLURM_MPI_TYPE", "--mpi"), ("SLURM_NETWORK", "--network"),
    ("SLURM_NNODES", "--nodes"), ("SLURM_NO_KILL", "--no-kill"),
    ("SLURM_NPROCS", "--ntasks"), ("SLURM_NTASKS", "--ntasks"),
    ("SLURM_NTASKS_PER_CORE", "--ntasks-per-core"), ("SLURM_NTASKS_PER_GPU", "--ntasks-per-gpu"),
    ("SLURM_NTASKS_PER_NODE", "--ntasks-per-node"), ("SLURM_NTASKS_PER_SOCKET", "--ntasks-per-socket"),
    ("SLURM_OPEN_MODE", "--open-mode"), ("SLURM_OVERCOMMIT", "--overcommit"),
    ("SLURM_OVERLAP", "--overlap"), ("SLURM_PARTITION", "--partition"),
    ("SLURM_POWER", "--power"), ("SLURM_PROFILE", "--profile"),
    ("SLURM_QOS", "--qos"), ("SLURM_REMOTE_CWD", "--chdir"),
    ("SLURM_REQ_SWITCH", "--switches"), ("SLURM_RESERVATION", "--reservation"),
    ("SLURM_SIGNAL", "--signal"), ("SLURM_SPREAD_JOB", "--spread-job"),
    ("SLURM_STDERRMODE", "--error"), ("SLURM_STDINMODE", "--input"),
    ("SLURM_STDOUTMODE", "--output"), ("SLURM_TASK_EPILOG", "--task-epilog"),
    ("SLURM_TASK_PROLOG", "--task-prolog"), ("SLURM_THREAD_SPEC", "--thread-spec"),
    ("SLURM_THREADS_PER_CORE", "--threads-per-core"), ("SLURM_TIMELIMIT", "--time"),
    ("SLURM_UNBUFFEREDIO", "--unbuffered"), ("SLURM_USE_MIN_NODES", "--use-min-nodes"),
    ("SLURM_WAIT", "--wait"), ("SLURM_WCKEY", "--wckey"),
    ("SLURM_WORKING_DIR", "--chdir"),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn screened(command: &str, args: &[&str]) -> (Result<Vec<String>, Refused>, Vec<String>) {
        let mut warnings = Vec::new();
        let args = args.iter().map(OsString::from).collect();
        let out = screen(command, args, &mut warnings)
            .map(|a| a.iter().map(|w| w.to_string_lossy().into_owned()).collect());
        (out, warnings)
    }

    #[test]
    fn accepted_options_go_with_their_values_and_refused_ones_say_why() {
        let (out, warnings) = screened(
            "sbatch",
            &[
                "--acctg-freq",
                "30",
                "-J",
                "x",
                "--power=level",
                "run.sh",
                "--bb",
            ],
        );
        assert_eq!(
            out.unwrap(),
            ["-J", "x", "run.sh", "--bb"],
            "after the script, nothing is touched"
        );
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        let (out, _) = screened("sbatch", &["--bb=capacity=1G"]);
        assert_eq!(
            out.unwrap_err().to_string(),
            "--bb is not supported here: there are no burst buffers here"
        );
    }

    #[test]
    fn clusters_of_flags_are_read_one_by_one_and_aliases_become_their_options() {
        let (out, warnings) = screened("sinfo", &["-Nel"]);
        assert_eq!(out.unwrap(), ["-N"]);
        assert_eq!(warnings.len(), 1, "-l warns, -e says nothing: {warnings:?}");
        let (out, _) = screened("scancel", &["--jobname", "train", "-Q", "5"]);
        assert_eq!(out.unwrap(), ["--name=train", "5"]);
        let (out, _) = screened("sacct", &["-b", "-j", "7"]);
        assert_eq!(out.unwrap(), ["--format=JobID,State,ExitCode", "-j", "7"]);
    }

    #[test]
    fn every_command_lists_each_option_name_once() {
        for command in COMMANDS {
            let mut names: Vec<&str> = options(command)
                .iter()
                .flat_map(|o| o.names.iter().copied())
                .collect();
            let all = names.len();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), all, "{command}");
        }
    }

    #[test]
    fn input_variables_give_the_options_the_command_line_leaves_out() {
        let words = |w: &[&str]| w.iter().map(OsString::from).collect::<Vec<_>>();
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let got = with_input_variables(
            "srun",
            words(&["-n2", "hostname", "--ntasks=9"]),
            env(&[
                ("SLURM_NPROCS", "5"),
                ("SLURM_DEBUG", "2"),
                ("SLURM_OVERCOMMIT", "1"),
                ("SLURM_LABELIO", "0"),
            ]),
        )
        .unwrap();
        assert_eq!(
            got,
            words(&[
                "--verbose",
                "--verbose",
                "--overcommit",
                "-n2",
                "hostname",
                "--ntasks=9"
            ])
        );
        // A value after its option does not end the options.
        let got = with_input_variables(
            "srun",
            words(&["-J", "name", "--ntasks=2", "true"]),
            env(&[("SLURM_NTASKS", "5")]),
        )
        .unwrap();
        assert_eq!(got, words(&["-J", "name", "--ntasks=2", "true"]));
        let got = with_input_variables(
            "sbatch",
            words(&["x.sh"]),
            env(&[("SBATCH_TIMELIMIT", "10")]),
        )
        .unwrap();
        assert_eq!(got, words(&["--time=10", "x.sh"]));
        let refused =
            with_input_variables("sbatch", words(&[]), env(&[("SBATCH_BATCH", "x")])).unwrap_err();
        assert!(
            matches!(&refused, Refused::Unsupported { option, .. } if option == "SBATCH_BATCH (as --batch)"),
            "{refused}"
        );
    }

    #[test]
    fn an_accepted_options_value_is_checked_all_the_same() {
        let (out, _) = screened("srun", &["--mincpus=-1", "true"]);
        assert_eq!(
            out.unwrap_err().to_string(),
            "invalid --mincpus argument '-1': a whole number of CPUs, 0 or more"
        );
        let (out, _) = screened("srun", &["--tmp", "-1", "true"]);
        assert!(matches!(out, Err(Refused::BadValue { .. })), "{out:?}");
        let (out, warnings) = screened("sbatch", &["--tmp=10G", "--mincpus", "4", "x.sh"]);
        assert_eq!(out.unwrap(), ["--tmp=10G", "--mincpus", "4", "x.sh"]);
        assert!(warnings.is_empty(), "{warnings:?}");
    }
}
