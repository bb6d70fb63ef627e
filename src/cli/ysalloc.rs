//! `ysalloc` (Slurm's `salloc`): an interactive allocation. It waits in
//! the queue like any job, then runs a shell (or the command given) here,
//! on the submitting host, with the allocation's `SLURM_*` variables, so
//! that `srun` in it runs steps on the allocation's nodes, GPUs and
//! cgroups. The allocation ends when the command exits (with its
//! status), and the command is hung up when the allocation ends first
//! (cancelled, timed out, preempted).

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;

use super::session::{self, Allocation};
use super::{CliError, CliResult};
use crate::script::{self, Partial, SubmitContext, SubmitOptions};

/// How long the command has between SIGHUP and SIGKILL once its
/// allocation ended under it.
const HANGUP_GRACE: Duration = Duration::from_secs(5);

#[derive(Parser, Debug)]
#[command(
    name = "ysalloc",
    version,
    about = "Ask for an interactive allocation, and run a shell (or a command) in it",
    long_about = "Ask for an interactive allocation, and run a shell (or a command) in it.\n\n\
                  The allocation waits in the queue like a batch job (Ctrl-C withdraws it); once \
                  granted, the command runs here with SLURM_JOB_ID, SLURM_JOB_NODELIST and the \
                  other SLURM_* variables of the allocation, and srun in it runs steps on the \
                  allocation's nodes and GPUs. The allocation ends when the command exits.",
    after_help = "Examples:\n  ysalloc -G 1 -t 30\n  ysalloc -G a100:2 -c 8 --mem 32G -t 2:00:00 srun python debug.py\n  ysalloc -N 2 -G 4 -t 1:00:00"
)]
pub struct Args {
    #[command(flatten)]
    pub options: SubmitOptions,
    /// The command to run (default: your shell, $SHELL). Options come
    /// first, as in Slurm: `-N2` is salloc's; from the first word that is
    /// no option on, all is the command's.
    #[arg(value_name = "COMMAND", trailing_var_arg = true)]
    pub command: Vec<OsString>,
}

/// The batch-only options an allocation refuses, and why.
fn refuse_batch_only(o: &SubmitOptions) -> Result<(), CliError> {
    let refused = [
        (
            o.array.is_some(),
            "--array",
            "an allocation is one session; submit arrays with ysbatch",
        ),
        (
            o.output.is_some(),
            "--output",
            "the command's output is the terminal's; srun -o sends a step's to a file",
        ),
        (
            o.error.is_some(),
            "--error",
            "the command's errors are the terminal's; srun -e sends a step's to a file",
        ),
        (
            o.open_mode.is_some(),
            "--open-mode",
            "there is no output file",
        ),
        (
            o.checkpoint_file.is_some(),
            "--checkpoint-file",
            "a session cannot be requeued from a checkpoint",
        ),
        (
            o.requeue,
            "--requeue",
            "a session cannot be requeued: preempted, it ends",
        ),
        (
            o.container.container_image.is_some(),
            "--container-image",
            "give --container-image to srun, whose tasks then run in the image",
        ),
        (
            o.parsable,
            "--parsable",
            "it prints no job id to read: SLURM_JOB_ID is in the command's environment",
        ),
    ];
    match refused.iter().find(|(given, _, _)| *given) {
        Some((_, option, why)) => Err(CliError::usage(format!("{option}: {why}"))),
        None => Ok(()),
    }
}

/// What the allocation asks for, from `options`.
pub fn allocation_request(
    options: SubmitOptions,
    name: &str,
) -> Result<crate::model::job::JobRequest, CliError> {
    let partial = Partial::from_options(options).map_err(|e| CliError::usage(e.to_string()))?;
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::failed(format!("cannot read the current directory: {e}")))?;
    let context = SubmitContext {
        cwd: &cwd,
        environment: super::submission_environment(),
        now: &jiff::Zoned::now,
        default_name: name.to_string(),
    };
    let body = "#!/bin/sh\n# an interactive allocation: no script runs\n".to_string();
    let mut request = script::resolve(partial, body, Vec::new(), context)?;
    request.keep_submitters_environment();
    request.interactive = true;
    crate::validate::job_request(&request).map_err(|e| CliError::usage(e.to_string()))?;
    Ok(request)
}

pub fn run(args: Args) -> CliResult {
    run_as("ysalloc", args)
}

/// `ysalloc`, or `salloc` (its messages named `command`).
pub fn run_as(command: &'static str, args: Args) -> CliResult {
    refuse_batch_only(&args.options)?;
    let argv: Vec<OsString> = if args.command.is_empty() {
        vec![std::env::var_os("SHELL").unwrap_or_else(|| "/bin/sh".into())]
    } else {
        args.command
    };
    let name = std::path::Path::new(&argv[0]).file_name().map_or_else(
        || "interactive".into(),
        |n| n.to_string_lossy().into_owned(),
    );
    let request = allocation_request(args.options, &name)?;
    let allocation = session::allocate(command, request, false, false)?;
    let status = run_command(&allocation, &argv);
    let (code, signal) = match &status {
        Ok(s) => (s.code().unwrap_or(0), s.signal().unwrap_or(0)),
        Err(_) => (1, 0),
    };
    allocation.end(code, signal);
    let status = status?;
    std::process::exit(
        status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
    )
}

/// Runs `argv` with the allocation's environment until it exits; hangs
/// it up if the allocation ends first.
fn run_command(
    allocation: &Allocation,
    argv: &[OsString],
) -> Result<std::process::ExitStatus, CliError> {
    // The terminal's Ctrl-C and Ctrl-\ are for the command: salloc
    // lives on (a handler, unlike SIG_IGN, is not inherited).
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [libc::SIGINT, libc::SIGQUIT] {
        let _ = signal_hook::flag::register(signal, interrupted.clone());
    }
    // The terminal lost (an ssh dropped), or salloc stopped: the command
    // is hung up, and the allocation ends when it has.
    let hangup = Arc::new(AtomicBool::new(false));
    for signal in [libc::SIGHUP, libc::SIGTERM] {
        let _ = signal_hook::flag::register(signal, hangup.clone());
    }
    // What the command starts and leaves behind stays below salloc, to
    // be hung up with it.
    // SAFETY: prctl(2) with integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
    }
    let mut child = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .envs(allocation.environment.iter().cloned())
        .spawn()
        .map_err(|e| CliError::failed(format!("cannot run {}: {e}", argv[0].to_string_lossy())))?;
    let pid = Arc::new(AtomicI32::new(child.id() as i32));
    let done = Arc::new(AtomicBool::new(false));
    let (command, job) = (allocation.command, allocation.job);
    let hung_up = pid.clone();
    allocation.watch(done.clone(), move |why| {
        super::say(&format!(
            "{command}: Job allocation {job} has been revoked: {why}."
        ));
        hang_up(hung_up.load(Ordering::SeqCst));
    });
    let (watched, done_too) = (pid.clone(), done.clone());
    let terminal = nix::unistd::isatty(std::io::stdin()).unwrap_or(false);
    std::thread::spawn(move || {
        while !done_too.load(Ordering::SeqCst) {
            if hangup.load(Ordering::SeqCst) || (terminal && terminal_gone()) {
                return hang_up(watched.load(Ordering::SeqCst));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let status = child.wait();
    done.store(true, Ordering::SeqCst);
    pid.store(0, Ordering::SeqCst);
    status.map_err(|e| CliError::failed(format!("waiting for the command: {e}")))
}

/// Whether standard input's terminal has hung up (an ssh dropped):
/// looked at without reading what the command is to read.
fn terminal_gone() -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let stdin = std::io::stdin();
    let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::empty())];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(_) => fds[0].revents().is_some_and(|r| {
            r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL)
        }),
        Err(_) => false,
    }
}

/// SIGHUP to the command and everything it started (each process and
/// the groups they lead: a shell's jobs have groups of their own), then
/// SIGKILL after `HANGUP_GRACE` to whatever of it is still there.
fn hang_up(pid: i32) {
    if pid <= 0 {
        return;
    }
    // salloc is the subreaper of what the command starts: what outlives
    // its parent is still below salloc.
    let send = |signal: i32| {
        let tree = crate::exec::process::descendants(nix::unistd::Pid::this());
        for p in tree {
            // SAFETY: kill(2) on a process of the command's and on the
            // group it may lead.
            unsafe {
                libc::kill(p.as_raw(), signal);
                libc::kill(-p.as_raw(), signal);
            }
        }
    };
    send(libc::SIGHUP);
    send(libc::SIGCONT);
    std::thread::sleep(HANGUP_GRACE);
    send(libc::SIGKILL);
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn options_with_values_attached_come_before_the_command() {
        for (argv, nodes, gpus, time) in [
            (&["salloc", "-N2", "hostname"][..], Some("2"), None, None),
            (
                &["salloc", "-G2", "-t1", "hostname", "-N3"],
                None,
                Some("2"),
                Some("1"),
            ),
            (
                &["salloc", "-N", "2", "--gpus=1", "hostname"],
                Some("2"),
                Some("1"),
                None,
            ),
        ] {
            let args = Args::try_parse_from(argv).unwrap();
            assert_eq!(args.options.nodes.as_deref(), nodes, "{argv:?}");
            assert_eq!(args.options.gpus.as_deref(), gpus, "{argv:?}");
            assert_eq!(args.options.time.as_deref(), time, "{argv:?}");
            assert_eq!(args.command[0], "hostname", "{argv:?}");
        }
        let args = Args::try_parse_from(["salloc", "-G2", "hostname", "-N3"]).unwrap();
        assert_eq!(
            args.command,
            ["hostname", "-N3"],
            "the command's own options stay its own"
        );
    }
}
