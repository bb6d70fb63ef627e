//! A task's own pid in its environment (`SLURM_TASK_PID`), as Slurm's
//! step daemon sets it between fork and exec. The standard library makes
//! a child's environment before it forks, so the child cannot add its own
//! pid to it. This hook, run in the child after the fork (its standard
//! streams, directory, process group and signal mask already set), writes
//! its pid into a slot made for it in the parent and calls execve(2)
//! itself, trying the task's PATH as execvp(3) does (a file without a `#!`
//! line runs under /bin/sh, as there). Nothing in the child allocates:
//! everything is made before the fork.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::process::Command;

const NAME: &[u8] = b"SLURM_TASK_PID=";

/// Room for any pid's digits and the terminating NUL.
const DIGITS: usize = 21;

/// Where execvp looks when the task has no PATH.
const DEFAULT_PATH: &[u8] = b"/bin:/usr/bin";

/// What the child execs, made before the fork. The pointers point into
/// the buffers of the vectors beside them, which are never resized.
struct Exec {
    /// The paths to try, in order, each with the argument vector that
    /// runs it under /bin/sh should it be no executable format.
    tries: Vec<(CString, Vec<*const libc::c_char>)>,
    argv: Vec<*const libc::c_char>,
    env: Vec<*const libc::c_char>,
    /// `NAME` and room for the digits, NUL-filled.
    pid_slot: Vec<u8>,
    umask: Option<libc::mode_t>,
    /// Owners of what the pointers point into.
    _strings: Vec<CString>,
}

// SAFETY: the raw pointers point into heap buffers `Exec` owns and never
// changes but for the pid slot's digits, which only the forked child
// writes, in its own copy of the memory.
unsafe impl Send for Exec {}
unsafe impl Sync for Exec {}

/// Makes `command` set `SLURM_TASK_PID` to the task's own pid, and its
/// umask to `umask` where given. Its environment must have been cleared
/// (`env_clear`) and set whole: that is what the task gets.
pub fn set_on(command: &mut Command, umask: Option<libc::mode_t>) -> io::Result<()> {
    let mut exec = Exec::of(command, umask)?;
    // SAFETY: the hook calls only async-signal-safe functions (umask,
    // getpid, execve) and writes to memory made before the fork.
    unsafe {
        command.pre_exec(move || exec.run());
    }
    Ok(())
}

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a command, argument or variable holds a NUL byte",
        )
    })
}

impl Exec {
    fn of(command: &Command, umask: Option<libc::mode_t>) -> io::Result<Exec> {
        let program = command.get_program().as_bytes().to_vec();
        let mut args: Vec<CString> = vec![c_string(&program)?];
        for a in command.get_args() {
            args.push(c_string(a.as_bytes())?);
        }
        let mut path = None;
        let mut vars = Vec::new();
        for (key, value) in command.get_envs() {
            let (Some(value), false) = (value, key == OsStr::new("SLURM_TASK_PID")) else {
                continue;
            };
            if key == OsStr::new("PATH") {
                path = Some(value.as_bytes().to_vec());
            }
            let mut pair = key.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(value.as_bytes());
            vars.push(c_string(&pair)?);
        }
        let mut pid_slot = NAME.to_vec();
        pid_slot.resize(NAME.len() + DIGITS, 0);
        let argv = pointers(&args);
        let sh = c_string(b"/bin/sh")?;
        let tries = candidates(&program, path.as_deref().unwrap_or(DEFAULT_PATH))
            .into_iter()
            .map(|p| {
                let file = c_string(&p)?;
                let mut under_sh = vec![sh.as_ptr(), file.as_ptr()];
                under_sh.extend(&argv[1..]);
                Ok((file, under_sh))
            })
            .collect::<io::Result<Vec<_>>>()?;
        let mut env = pointers(&vars);
        env.insert(env.len() - 1, pid_slot.as_ptr().cast());
        let mut strings = args;
        strings.extend(vars);
        strings.push(sh);
        Ok(Exec {
            tries,
            argv,
            env,
            pid_slot,
            umask,
            _strings: strings,
        })
    }

    /// In the child: the pid written, each path tried.
    fn run(&mut self) -> io::Result<()> {
        if let Some(mask) = self.umask {
            // SAFETY: umask(2) is async-signal-safe.
            unsafe { libc::umask(mask) };
        }
        // SAFETY: getpid(2) is async-signal-safe.
        write_digits(&mut self.pid_slot[NAME.len()..], unsafe { libc::getpid() }
            as u64);
        let mut error = libc::ENOENT;
        for (file, under_sh) in &self.tries {
            // SAFETY: every vector is NUL-terminated and points into
            // strings that live as long as `self`.
            unsafe { libc::execve(file.as_ptr(), self.argv.as_ptr(), self.env.as_ptr()) };
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::ENOENT | libc::ENOTDIR) => {}
                Some(libc::EACCES) => error = libc::EACCES,
                Some(libc::ENOEXEC) => {
                    // SAFETY: as above.
                    unsafe { libc::execve(under_sh[0], under_sh.as_ptr(), self.env.as_ptr()) };
                    return Err(io::Error::last_os_error());
                }
                Some(other) => return Err(io::Error::from_raw_os_error(other)),
                None => {}
            }
        }
        Err(io::Error::from_raw_os_error(error))
    }
}

/// `strings`' pointers, NUL-terminated.
fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// The files execvp would try for `program`: itself where it names a
/// path, else it in each directory of `path` (an empty one is the
/// working directory).
fn candidates(program: &[u8], path: &[u8]) -> Vec<Vec<u8>> {
    if program.contains(&b'/') {
        return vec![program.to_vec()];
    }
    path.split(|&b| b == b':')
        .map(|dir| {
            let mut file = if dir.is_empty() {
                b".".to_vec()
            } else {
                dir.to_vec()
            };
            file.push(b'/');
            file.extend_from_slice(program);
            file
        })
        .collect()
}

/// `n` in decimal at the start of `slot`, NUL-terminated.
fn write_digits(slot: &mut [u8], mut n: u64) {
    let mut digits = [0u8; DIGITS - 1];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let len = digits.len() - at;
    slot[..len].copy_from_slice(&digits[at..]);
    slot[len] = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(mut command: Command) -> (String, u32) {
        set_on(&mut command, None).unwrap();
        let child = command
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        (String::from_utf8(out.stdout).unwrap(), pid)
    }

    #[test]
    fn the_task_sees_its_own_pid_and_the_environment_it_was_given() {
        let mut command = Command::new("sh");
        command
            .args(["-c", "echo $SLURM_TASK_PID $$ $A"])
            .env_clear()
            .env("PATH", "/nonexistent:/usr/bin:/bin")
            .env("A", "b c")
            .env("SLURM_TASK_PID", "stale");
        let (out, pid) = run(command);
        assert_eq!(out, format!("{pid} {pid} b c\n"));
    }

    #[test]
    fn a_script_without_an_interpreter_line_runs_under_sh() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("plain");
        std::fs::write(&script, "echo ran $1 $SLURM_TASK_PID\n").unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let mut command = Command::new(&script);
        command.arg("x").env_clear().env("PATH", "/usr/bin:/bin");
        let (out, pid) = run(command);
        assert_eq!(out, format!("ran x {pid}\n"));
    }

    #[test]
    fn a_missing_program_fails_to_spawn_as_it_always_did() {
        let mut command = Command::new("no-such-program-here");
        command.env_clear().env("PATH", "/usr/bin:/bin");
        set_on(&mut command, None).unwrap();
        let e = command.spawn().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    }

    #[test]
    fn a_nul_byte_in_an_argument_fails_the_spawn() {
        let mut command = Command::new("echo");
        command.arg("a\0b").env_clear();
        set_on(&mut command, None).unwrap();
        let e = command.spawn().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    }

    #[test]
    fn digits_are_written_in_place() {
        let mut slot = [7u8; DIGITS];
        write_digits(&mut slot, 4_194_304);
        assert_eq!(&slot[..8], b"4194304\0");
        write_digits(&mut slot, 0);
        assert_eq!(&slot[..2], b"0\0");
    }
}
