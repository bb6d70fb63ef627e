//! `--help` and `--usage` of the Slurm names in Slurm's own layout
//! (`Usage: squeue [-A account] [--clusters names] ...`, `Help options:`,
//! sacct's `Valid <OPTION> values are:`), which tools and Slurm's test
//! suite read. The options listed are those of the compat table
//! (`slurm_options`): every one ysched takes, refused ones left out;
//! each described by its ys* command's help where that command parses
//! it, else by why it changes nothing here.

use crate::slurm_options::{Decision, SlurmOption, Value};

/// What was asked: Slurm's long help or its one-paragraph usage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asked {
    Help,
    Usage,
}

/// Whether `args` ask `command` for its help or usage: `--help` or
/// `--usage` among its options (for sbatch, salloc and srun, before the
/// script or command, whose own arguments they may be).
pub fn asked(command: &str, args: &[std::ffi::OsString]) -> Option<Asked> {
    let options_end = matches!(command, "sbatch" | "salloc" | "srun");
    let table = crate::slurm_options::options(command);
    let mut words = args.iter();
    while let Some(word) = words.next() {
        match word.to_str() {
            Some("--help") => return Some(Asked::Help),
            Some("--usage") => return Some(Asked::Usage),
            Some("--") => return None,
            Some(word) if options_end && !word.starts_with('-') => return None,
            // An option's value, not attached, is the next word.
            Some(word)
                if table
                    .iter()
                    .any(|o| o.value == Value::Required && o.names.contains(&word)) =>
            {
                words.next();
            }
            _ => {}
        }
    }
    None
}

/// The text to print. `parser` is the clap command that parses `command`'s
/// options here, for their descriptions.
pub fn text(command: &str, asked: Asked, parser: Option<&clap::Command>) -> String {
    let listed: Vec<Listed> = crate::slurm_options::options(command)
        .iter()
        .filter(|o| !matches!(o.decision, Decision::Refused(_)))
        .filter(|o| {
            !(asked == Asked::Help
                && o.names
                    .iter()
                    .any(|n| ["--help", "--usage", "--version"].contains(n)))
        })
        .map(|o| Listed::of(o, parser))
        .collect();
    let own = parser.map(|p| own_options(command, p)).unwrap_or_default();
    match (command, asked) {
        ("sacct", _) => sacct_help(&listed, &own),
        ("scontrol", _) => scontrol_help(&listed),
        ("sacctmgr", _) => sacctmgr_help(&listed),
        (_, Asked::Usage) => usage(command, &listed),
        (_, Asked::Help) => help(command, &listed, &own),
    }
}

/// The options the parser takes that Slurm's command does not have
/// (ysched's own, such as sbatch's `--tokens`), for a section of their own.
fn own_options(command: &str, parser: &clap::Command) -> Vec<Listed> {
    let table = crate::slurm_options::options(command);
    let in_table = |name: &str| table.iter().any(|o| o.names.contains(&name));
    parser
        .get_arguments()
        .filter(|a| !a.is_positional() && !a.is_hide_set())
        .filter(|a| !["help", "version"].contains(&a.get_id().as_str()))
        .filter(|a| {
            !(a.get_long().is_some_and(|l| in_table(&format!("--{l}")))
                || a.get_short().is_some_and(|c| in_table(&format!("-{c}"))))
        })
        .map(|a| Listed {
            short: None,
            long: None,
            placeholder: None,
            about: format!(
                "{}\t{}",
                match (a.get_short(), a.get_long()) {
                    (Some(c), Some(l)) => format!("-{c}, --{l}"),
                    (Some(c), None) => format!("-{c}"),
                    (None, Some(l)) => format!("    --{l}"),
                    (None, None) => String::new(),
                } + &a
                    .get_value_names()
                    .and_then(|n| n.first())
                    .map(|n| format!("={n}"))
                    .filter(|_| a.get_action().takes_values())
                    .unwrap_or_default(),
                a.get_help().map(|h| h.to_string()).unwrap_or_default()
            ),
        })
        .collect()
}

/// The section of ysched's own options, when there are any.
fn own_section(own: &[Listed]) -> String {
    if own.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nOptions of ysched's own:\n");
    for option in own {
        let (flags, about) = option.about.split_once('\t').unwrap_or(("", ""));
        out.push_str(&option_line(flags, about));
    }
    out
}

/// What the command takes after its options, as Slurm's usage ends.
fn operands(command: &str) -> &'static str {
    match command {
        "sbatch" | "srun" => "executable [args...]",
        "salloc" => "[command [args...]]",
        "scancel" => "[job_id[_array_id][.step_id]]",
        _ => "",
    }
}

/// One option as the help lists it.
struct Listed {
    short: Option<&'static str>,
    long: Option<&'static str>,
    placeholder: Option<String>,
    about: String,
}

impl Listed {
    fn of(option: &SlurmOption, parser: Option<&clap::Command>) -> Listed {
        let short = option.names.iter().copied().find(|n| !n.starts_with("--"));
        let long = option.names.iter().copied().find(|n| n.starts_with("--"));
        let arg = parser.and_then(|p| {
            p.get_arguments().find(|a| {
                long.is_some_and(|l| a.get_long() == Some(&l[2..]))
                    || short.is_some_and(|s| {
                        a.get_short().map(|c| format!("-{c}")).as_deref() == Some(s)
                    })
            })
        });
        let placeholder = (option.value != Value::None).then(|| {
            long.and_then(|l| slurm_placeholder(&l[2..]))
                .map(str::to_string)
                .or_else(|| {
                    arg.and_then(|a| a.get_value_names())
                        .and_then(|names| names.first())
                        .map(|n| n.to_string())
                })
                .unwrap_or_else(|| "value".to_string())
        });
        let about = match option.decision {
            // srun outside a job asks for an allocation with them.
            Decision::Accepted(why) if why == crate::slurm_options::WITHIN_JOB => {
                "the allocation's, outside a job; within one, the job's own decides".to_string()
            }
            Decision::Accepted(why) | Decision::Quiet(why) => format!("accepted: {why}"),
            Decision::Alias(other) => format!("as {other}"),
            _ => arg
                .and_then(|a| a.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default(),
        };
        Listed {
            short,
            long,
            placeholder,
            about,
        }
    }

    /// `-N, --nodes=N` or `    --mincpus=n`.
    fn flags(&self) -> String {
        let value = self.placeholder.as_deref();
        match (self.short, self.long) {
            (Some(s), Some(l)) => match value {
                Some(v) => format!("{s}, {l}={v}"),
                None => format!("{s}, {l}"),
            },
            (Some(s), None) => match value {
                Some(v) => format!("{s} {v}"),
                None => s.to_string(),
            },
            (None, Some(l)) => match value {
                Some(v) => format!("    {l}={v}"),
                None => format!("    {l}"),
            },
            (None, None) => String::new(),
        }
    }

    /// `[-N N]` or `[--mincpus=n]`, as usage lists it (a placeholder's
    /// own brackets left out: `[-t STATE]`, not `[-t STATE[,STATE]]`).
    fn brief(&self) -> String {
        let value = self
            .placeholder
            .as_deref()
            .map(|v| v.split('[').next().unwrap_or(v))
            .filter(|v| !v.is_empty());
        match (self.short, self.long, value) {
            (Some(s), _, Some(v)) => format!("[{s} {v}]"),
            (Some(s), _, None) => format!("[{s}]"),
            (None, Some(l), Some(v)) => format!("[{l}={v}]"),
            (None, Some(l), None) => format!("[{l}]"),
            (None, None, _) => String::new(),
        }
    }
}

/// The words Slurm's own help puts after its common options.
fn slurm_placeholder(long: &str) -> Option<&'static str> {
    Some(match long {
        "account" => "name",
        "begin" => "time",
        "chdir" => "path",
        "cpus-per-task" => "ncpus",
        "dependency" => "type:jobid[:time]",
        "error" | "output" | "input" => "file",
        "gpus" | "gpus-per-node" | "gpus-per-task" | "mincpus" => "n",
        "job-name" => "jobname",
        "mem" => "MB",
        "nodes" => "N",
        "ntasks" | "ntasks-per-node" => "ntasks",
        "partition" => "partition",
        "qos" => "qos",
        "time" => "minutes",
        "user" => "user_list",
        "jobs" => "job(s)",
        "format" => "format",
        _ => return None,
    })
}

/// Slurm's usage: the options bracketed, wrapped under the name.
fn usage(command: &str, listed: &[Listed]) -> String {
    let mut words: Vec<String> = listed.iter().map(Listed::brief).collect();
    let tail = operands(command);
    if !tail.is_empty() {
        words.push(tail.to_string());
    }
    let lead = format!("Usage: {command}");
    let indent = " ".repeat(lead.len() + 1);
    let mut out = lead;
    let mut width = out.len();
    for word in words.iter().filter(|w| !w.is_empty()) {
        if width + 1 + word.len() > 79 {
            out.push('\n');
            out.push_str(&indent);
            width = indent.len();
        } else {
            out.push(' ');
            width += 1;
        }
        out.push_str(word);
        width += word.len();
    }
    out + "\n"
}

/// One option line: flags in a column, then what it does.
fn option_line(flags: &str, about: &str) -> String {
    if about.is_empty() {
        format!("  {flags}\n")
    } else if flags.len() < 30 {
        format!("  {flags:<30} {about}\n")
    } else {
        format!("  {flags}\n  {:<30} {about}\n", "")
    }
}

/// Slurm's help: `Usage: squeue [OPTIONS]`, the options, `Help options:`.
fn help(command: &str, listed: &[Listed], own: &[Listed]) -> String {
    let tail = operands(command);
    let mut out = match command {
        "sbatch" | "srun" | "salloc" => format!("Usage: {command} [OPTIONS...] {tail}\n\n"),
        _ if tail.is_empty() => format!("Usage: {command} [OPTIONS]\n"),
        _ => format!("Usage: {command} [OPTIONS] {tail}\n"),
    };
    for option in listed {
        out.push_str(&option_line(&option.flags(), &option.about));
    }
    out.push_str(&own_section(own));
    out.push_str("\nHelp options:\n");
    out.push_str(&option_line("    --help", "show this help message"));
    out.push_str(&option_line(
        "    --usage",
        &format!("display a brief summary of {command} options"),
    ));
    out
}

/// sacct's own layout: `-A, --accounts:` and the description below.
fn sacct_help(listed: &[Listed], own: &[Listed]) -> String {
    let mut out = String::from("sacct [<OPTION>]\n    Valid <OPTION> values are:\n");
    for option in listed {
        let flags = option.flags();
        let flags = flags.trim_start();
        let name = flags.split('=').next().unwrap_or(flags);
        out.push_str(&format!("     {name}:\n"));
        if !option.about.is_empty() {
            out.push_str(&format!("                   {}\n", option.about));
        }
    }
    for option in own {
        let (flags, about) = option.about.split_once('\t').unwrap_or(("", ""));
        let flags = flags.trim_start();
        let name = flags.split('=').next().unwrap_or(flags);
        out.push_str(&format!("     {name}:\n                   {about}\n"));
    }
    out.push_str(
        "     --help:\n                   show this help message\n     --usage:\n                   \
         display a brief summary of sacct options\n\n\
         Note, valid start/end time formats are...\n\
         \tHH:MM[:SS] [AM|PM]\n\tMMDD[YY] or MM/DD[/YY] or MM.DD[.YY]\n\tMM/DD[/YY]-HH:MM[:SS]\n\
         \tYYYY-MM-DD[THH:MM[:SS]]\n\ttoday, midnight, noon, now[{+|-}count[seconds|minutes|hours|days|weeks]]\n",
    );
    out
}

/// Options of scontrol and sacctmgr, as their help lists them.
fn valid_options(listed: &[Listed]) -> String {
    let mut out = String::from("    Valid <OPTION> values are:\n");
    for option in listed {
        let flags = option.flags();
        out.push_str(&format!("     {}: {}\n", flags.trim_start(), option.about));
    }
    out
}

/// scontrol's help: its options, then the commands ysched answers.
fn scontrol_help(listed: &[Listed]) -> String {
    format!(
        "scontrol [<OPTION>] [<COMMAND>]\n{}     --help: show this help message\n     \
         -V, --version: print the Slurm release\n\n    Valid <COMMAND> values are:\n\
         \x20    hold <job_list>          prevent the jobs from starting\n\
         \x20    ping                     print the status of the controller\n\
         \x20    reconfigure              have the controller re-read its configuration\n\
         \x20    release <job_list>       let held jobs start\n\
         \x20    requeue <job_list>       put the jobs back in the queue\n\
         \x20    resume <job_list>        resume suspended jobs\n\
         \x20    show <ENTITY> [<ID>]     display the state of the entity: job, node, partition, config,\n\
         \x20                             hostnames <list>, hostlist <names>\n\
         \x20    suspend <job_list>       suspend running jobs\n\
         \x20    update <SPECIFICATIONS>  update a job: JobId=<id> and the fields to change\n\
         \x20    version                  print the Slurm release these commands stand in for\n",
        valid_options(listed)
    )
}

/// sacctmgr's help: ysched's associations are its config, so only the
/// list commands answer; the others say where the change is made.
fn sacctmgr_help(listed: &[Listed]) -> String {
    format!(
        "sacctmgr [<OPTION>] [<COMMAND>]\n{}     --help, --usage: show this help message\n     \
         -V, --version: print the Slurm release\n\n    Valid <COMMAND> values are:\n\
         \x20    list <ENTITY> [<SPECS>]      display info of identified entity, default is all\n\
         \x20    show <ENTITY> [<SPECS>]      same as list\n\
         \x20    add account, add user, add qos, modify cluster, modify user, delete qos, ...:\n\
         \x20                                 refused: accounts, users and QoS are set in ysched.toml\n\
         \x20                                 (ysched.toml(5)); list associations shows them\n\
         \n  <ENTITY> may be \"account\", \"association\", \"cluster\", \"qos\" or \"user\".\n\
         \n  <SPECS> are different for each command entity pair: where name=, user=, account=,\n\
         \x20 cluster=, and format= with the fields to show.\n",
        valid_options(listed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_ends_with_the_operands_and_wraps_under_the_name() {
        let listed: Vec<Listed> = (0..30)
            .map(|i| Listed {
                short: None,
                long: Some(["--alpha", "--beta", "--gamma"][i % 3]),
                placeholder: Some("n".into()),
                about: String::new(),
            })
            .collect();
        let text = usage("srun", &listed);
        assert!(text.starts_with("Usage: srun [--alpha=n] [--beta=n]"));
        assert!(text.ends_with(" executable [args...]\n"), "{text}");
        assert!(text.lines().all(|l| l.len() <= 79), "{text}");
        assert!(
            text.lines()
                .skip(1)
                .all(|l| l.starts_with("            [") || l.starts_with("            executable")),
            "{text}"
        );
    }

    #[test]
    fn help_and_usage_are_asked_before_the_command_only() {
        let words = |w: &[&str]| w.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        assert_eq!(
            asked("srun", &words(&["-n", "2", "--usage"])),
            Some(Asked::Usage)
        );
        assert_eq!(asked("srun", &words(&["python", "--help"])), None);
        assert_eq!(
            asked("squeue", &words(&["-u", "alice", "--help"])),
            Some(Asked::Help)
        );
        assert_eq!(asked("squeue", &words(&["-u", "alice"])), None);
    }
}
