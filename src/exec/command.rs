//! Helper commands the administrator configures (`notify_command`): run
//! with their input on stdin and a time limit, their output discarded.

use std::io::Write;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use thiserror::Error;

/// Why a helper command did not succeed; each names the program.
#[derive(Debug, Error)]
pub enum CommandError {
    #[error("the command is empty")]
    Empty,
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("cannot wait for {program}: {source}")]
    Wait {
        program: String,
        source: std::io::Error,
    },
    #[error("{program} exited with {status}")]
    Failed { program: String, status: ExitStatus },
    #[error("{program} still ran after {} s and was killed", timeout.as_secs())]
    TimedOut { program: String, timeout: Duration },
}

/// Runs `command` (program and arguments) with `env` added and `input` on
/// its standard input; one that runs past `timeout` is killed. `Err` says
/// what went wrong, naming the program.
pub fn run_with_input(
    command: &[String],
    env: &[(&str, String)],
    input: &[u8],
    timeout: Duration,
) -> Result<(), CommandError> {
    let program = command.first().ok_or(CommandError::Empty)?;
    let mut child = Command::new(program)
        .args(&command[1..])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|source| CommandError::Spawn {
            program: program.clone(),
            source,
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        // A command that does not read its input is its own business.
        let _ = stdin.write_all(input);
    }
    let waited =
        wait_until(&mut child, Instant::now() + timeout).map_err(|source| CommandError::Wait {
            program: program.clone(),
            source,
        })?;
    match waited {
        Some(status) if status.success() => Ok(()),
        Some(status) => Err(CommandError::Failed {
            program: program.clone(),
            status,
        }),
        None => Err(CommandError::TimedOut {
            program: program.clone(),
            timeout,
        }),
    }
}

/// Waits for `child` until `deadline`: looked at often at first (most
/// commands end within milliseconds, some on a job's way to its start),
/// then every 100 ms. Past the deadline it is killed and reaped: `None`.
pub fn wait_until(child: &mut Child, deadline: Instant) -> std::io::Result<Option<ExitStatus>> {
    wait_while(child, deadline, || true)
}

/// [`wait_until`], and the child is killed (`None`) as soon as
/// `keep_going` says no.
pub fn wait_while(
    child: &mut Child,
    deadline: Instant,
    keep_going: impl Fn() -> bool,
) -> std::io::Result<Option<ExitStatus>> {
    let mut pause = Duration::from_millis(2);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline || !keep_going() {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_command_is_stopped_after_its_timeout_and_a_failure_says_so() {
        let started = Instant::now();
        let sleep = ["/bin/sleep".to_string(), "30".to_string()];
        let err = run_with_input(&sleep, &[], b"{}\n", Duration::from_millis(200))
            .unwrap_err()
            .to_string();
        assert!(err.contains("still ran after 0 s and was killed"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(10));
        let err = run_with_input(
            &["/bin/false".to_string()],
            &[],
            b"",
            Duration::from_secs(5),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("/bin/false exited with"), "{err}");
        assert_eq!(
            run_with_input(&[], &[], b"", Duration::from_secs(1))
                .unwrap_err()
                .to_string(),
            "the command is empty"
        );
    }
}
