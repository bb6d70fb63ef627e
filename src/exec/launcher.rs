//! The local node's launcher: writes a job's directory, starts its
//! supervisor (through the fork server, or directly), sends it commands,
//! finds it again after a restart, and watches supervisors exit.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

use super::error::{io_err, ExecError};
use super::forkserver;
use super::process::{pidfd_open, spawn_stepd, write_new, CONTROL_FD, LOCK_FD};
use super::remover::Remover;
use super::spec::{
    ExitRecord, LaunchSpec, StepCommand, SupervisorState, CONTROL, EXIT, LOCK, SCRIPT, SPEC, STATE,
};
use crate::model::job::JobId;
use crate::spool::{Ownership, Spool};

/// A live supervisor: its pid and a pidfd that becomes readable when it exits.
#[derive(Debug)]
pub struct Supervisor {
    pub pid: i32,
    pidfd: OwnedFd,
}

/// What a restarted daemon finds of a job it had started.
#[derive(Debug)]
pub enum Adoption {
    /// The supervisor still runs: watch it again.
    Alive(Supervisor),
    /// It ended while the daemon was away; here is how.
    Exited(ExitRecord),
    /// The supervisor died without a record after starting the script.
    Lost,
    /// The script was never started (the daemon died while launching).
    NeverStarted,
}

/// What came of asking the fork server for a supervisor.
enum Forked {
    Started(Supervisor),
    /// No supervisor runs; the job's lock, still locked, for starting one.
    Nothing(File),
}

/// Launches and controls supervisors on this host.
#[derive(Clone, Debug)]
pub struct Launcher {
    spool: Spool,
    stepd: PathBuf,
    ownership: Ownership,
    /// Started at the first launch; replaced when it stops answering.
    server: Arc<Mutex<Option<forkserver::ForkServer>>>,
    remover: Remover,
}

/// The specs of the jobs whose directories are in `spool` (running, or
/// ended and not yet forgotten).
pub fn recorded_specs(spool: &Spool) -> Vec<(JobId, LaunchSpec)> {
    let Ok(entries) = fs::read_dir(spool.jobs()) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<JobId>().ok())
        .filter_map(|id| {
            let text = fs::read(spool.job_dir(id).join(SPEC)).ok()?;
            Some((id, serde_json::from_slice(&text).ok()?))
        })
        .collect()
}

impl Launcher {
    pub fn new(spool: Spool, stepd: PathBuf, ownership: Ownership) -> Launcher {
        Launcher {
            spool,
            stepd,
            ownership,
            server: Arc::default(),
            remover: Remover::default(),
        }
    }

    /// Writes the job's directory and starts its supervisor.
    pub fn launch(&self, spec: &LaunchSpec, script: &str) -> Result<Supervisor, ExecError> {
        let dir = self.spool.job_dir(spec.job_id);
        if dir.exists() {
            self.remover
                .remove(&dir)
                .map_err(io_err("remove the old job directory", &dir))?;
        }
        let dir_mode = match self.ownership {
            Ownership::System => 0o711,
            Ownership::Personal => 0o700,
        };
        fs::create_dir(&dir).map_err(io_err("create", &dir))?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(dir_mode))
            .map_err(io_err("set the mode of", &dir))?;

        let spec_path = dir.join(SPEC);
        let body = serde_json::to_vec(spec)
            .map_err(|e| io_err("encode", &spec_path)(io::Error::other(e)))?;
        write_new(&spec_path, &body, 0o600)?;
        let script_path = dir.join(SCRIPT);
        write_new(&script_path, script.as_bytes(), 0o500)?;
        if self.ownership == Ownership::System {
            std::os::unix::fs::chown(&script_path, Some(spec.uid), Some(spec.gid))
                .map_err(io_err("give the script to its user:", &script_path))?;
        }

        let lock_path = dir.join(LOCK);
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(&lock_path)
            .map_err(io_err("create", &lock_path))?;
        lock.try_lock()
            .map_err(|e| io_err("lock", &lock_path)(io::Error::other(e.to_string())))?;
        let control_path = dir.join(CONTROL);
        let control = UnixDatagram::bind(&control_path).map_err(io_err("bind", &control_path))?;
        fs::set_permissions(&control_path, fs::Permissions::from_mode(0o600))
            .map_err(io_err("set the mode of", &control_path))?;

        self.start_supervisor(spec.job_id, &dir, lock, control)
    }

    /// Starts the supervisor of the job in `dir`: forked by the fork
    /// server, or, where the server cannot be had, exec'd directly. A
    /// supervisor is started at most once: only where the server surely
    /// started nothing is the job's supervisor exec'd instead.
    fn start_supervisor(
        &self,
        id: JobId,
        dir: &Path,
        lock: File,
        control: UnixDatagram,
    ) -> Result<Supervisor, ExecError> {
        let lock = match self.through_server(id, dir, lock, &control)? {
            Forked::Started(supervisor) => return Ok(supervisor),
            Forked::Nothing(lock) => lock,
        };
        let pid = spawn_stepd(
            &self.stepd,
            dir.as_os_str(),
            &[
                (lock.as_raw_fd(), LOCK_FD),
                (control.as_raw_fd(), CONTROL_FD),
            ],
        )
        .map_err(|source| ExecError::Spawn {
            path: self.stepd.clone(),
            source,
        })?;
        let pidfd = pidfd_open(pid).map_err(io_err("open a pidfd for", &self.stepd))?;
        Ok(Supervisor { pid, pidfd })
    }

    /// Asks the fork server (started here if there is none) for the job's
    /// supervisor; hands the locked lock back where nothing was started.
    fn through_server(
        &self,
        id: JobId,
        dir: &Path,
        lock: File,
        control: &UnixDatagram,
    ) -> Result<Forked, ExecError> {
        use forkserver::{Failure, ForkServer};
        let mut server = self.server.lock().unwrap_or_else(|p| p.into_inner());
        if server.is_none() {
            match ForkServer::spawn(&self.stepd) {
                Ok(s) => {
                    tracing::debug!(target: "ysched::exec", "supervisor fork server started (pid {})", s.pid());
                    *server = Some(s);
                }
                Err(e) => tracing::warn!(
                    target: "ysched::exec",
                    "cannot start the supervisor fork server {} --server: {e}; starting job {id}'s supervisor directly",
                    self.stepd.display()
                ),
            }
        }
        let Some(s) = server.as_ref() else {
            return Ok(Forked::Nothing(lock));
        };
        let why = match s.start(dir, lock.as_fd(), control.as_fd()) {
            Ok((pid, pidfd)) => return Ok(Forked::Started(Supervisor { pid, pidfd })),
            Err(Failure::Refused(why)) => {
                tracing::warn!(target: "ysched::exec", "job {id}: {why}; starting its supervisor directly");
                return Ok(Forked::Nothing(lock));
            }
            Err(Failure::Unreachable(why)) => {
                tracing::warn!(
                    target: "ysched::exec",
                    "job {id}: {why}; starting its supervisor directly, and a new fork server for the next job"
                );
                if let Some(s) = server.take() {
                    s.stop();
                }
                return Ok(Forked::Nothing(lock));
            }
            Err(Failure::Unanswered(why)) => why,
        };
        if let Some(s) = server.take() {
            s.stop();
        }
        drop(server);
        self.after_unanswered(id, dir, lock, why)
    }

    /// The server took the request and died or hung before answering. A
    /// supervisor it forked would hold the job's lock: taken anew, the
    /// lock says whether one does.
    fn after_unanswered(
        &self,
        id: JobId,
        dir: &Path,
        lock: File,
        why: String,
    ) -> Result<Forked, ExecError> {
        let lock_path = dir.join(LOCK);
        drop(lock);
        let relocked = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(&lock_path)
            .map_err(io_err("open", &lock_path))?;
        match relocked.try_lock() {
            Ok(()) => {
                tracing::warn!(
                    target: "ysched::exec",
                    "job {id}: {why}; no supervisor was started: starting its supervisor directly"
                );
                Ok(Forked::Nothing(relocked))
            }
            Err(fs::TryLockError::WouldBlock) => match self.adopt(id) {
                Adoption::Alive(supervisor) => Ok(Forked::Started(supervisor)),
                _ => Err(ExecError::Spawn {
                    path: self.stepd.clone(),
                    source: io::Error::other(why),
                }),
            },
            Err(fs::TryLockError::Error(e)) => Err(io_err("lock", &lock_path)(e)),
        }
    }

    /// Finds what became of a job this daemon (or its predecessor) launched.
    pub fn adopt(&self, id: JobId) -> Adoption {
        let dir = self.spool.job_dir(id);
        if let Some(record) = self.read_exit(id) {
            return Adoption::Exited(record);
        }
        let Ok(lock) = OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.join(LOCK))
        else {
            return Adoption::NeverStarted;
        };
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match lock.try_lock() {
                Ok(()) => {
                    // Nobody holds it: the supervisor is gone.
                    if let Some(record) = self.read_exit(id) {
                        return Adoption::Exited(record);
                    }
                    return match read_state(&dir) {
                        Some(SupervisorState {
                            job_pid: Some(_), ..
                        }) => Adoption::Lost,
                        _ => Adoption::NeverStarted,
                    };
                }
                Err(fs::TryLockError::Error(_)) => return Adoption::Lost,
                Err(fs::TryLockError::WouldBlock) => {}
            }
            // Held: the supervisor lives. Its state file names it (a bare
            // job's supervisor writes it once the job's process is started:
            // it may be a moment away, right after a spawn).
            if let Some(state) = read_state(&dir) {
                if let Ok(pidfd) = pidfd_open(state.supervisor_pid) {
                    // Still held after the pidfd was opened: the pid was the
                    // supervisor's, not a recycled one.
                    if matches!(lock.try_lock(), Err(fs::TryLockError::WouldBlock)) {
                        return Adoption::Alive(Supervisor {
                            pid: state.supervisor_pid,
                            pidfd,
                        });
                    }
                    continue;
                }
            }
            if Instant::now() > deadline {
                return Adoption::Lost;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends a command to the job's supervisor.
    pub fn command(&self, id: JobId, command: &StepCommand) -> Result<(), ExecError> {
        let path = self.spool.job_dir(id).join(CONTROL);
        let body = serde_json::to_vec(command)
            .map_err(|e| io_err("encode a command for", &path)(io::Error::other(e)))?;
        let socket = UnixDatagram::unbound().map_err(io_err("create a socket for", &path))?;
        match socket.send_to(&body, &path) {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ECONNREFUSED) | Some(libc::ENOENT)
                ) =>
            {
                Err(ExecError::Gone(id))
            }
            Err(e) => Err(io_err("send a command to", &path)(e)),
        }
    }

    /// The jobs whose directories are here, with the run each was
    /// launched as (from its spec).
    pub fn recorded(&self) -> Vec<(JobId, u32)> {
        let mut found: Vec<(JobId, u32)> = recorded_specs(&self.spool)
            .into_iter()
            .map(|(id, spec)| (id, spec.restart_count))
            .collect();
        found.sort_unstable();
        found
    }

    pub fn read_exit(&self, id: JobId) -> Option<ExitRecord> {
        let text = fs::read(self.spool.job_dir(id).join(EXIT)).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Removes the job's directory once its end is recorded: its name at
    /// once, its files on the remover's thread.
    pub fn remove(&self, id: JobId) {
        let dir = self.spool.job_dir(id);
        if let Err(e) = self.remover.remove(&dir) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(target: "ysched::exec", "cannot remove {}: {e}", dir.display());
            }
        }
    }

    /// Kills what is left of a job whose supervisor died: processes in its
    /// process group that carry its `YS_JOB_ID` (the id check keeps a
    /// recycled group id from hitting an unrelated process).
    pub fn kill_orphans(&self, id: JobId) -> usize {
        let Some(SupervisorState {
            job_pid: Some(pgid),
            ..
        }) = read_state(&self.spool.job_dir(id))
        else {
            return 0;
        };
        let marker = format!("YS_JOB_ID={id}");
        let mut killed = 0;
        let Ok(entries) = fs::read_dir("/proc") else {
            return 0;
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|p| p.parse::<i32>().ok())
            else {
                continue;
            };
            let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // Fields after the ")" that closes the command name: state ppid pgrp.
            let Some(after) = stat.rsplit_once(')').map(|(_, a)| a) else {
                continue;
            };
            let pgrp = after
                .split_whitespace()
                .nth(2)
                .and_then(|p| p.parse::<i32>().ok());
            if pgrp != Some(pgid) {
                continue;
            }
            let environ = fs::read(entry.path().join("environ")).unwrap_or_default();
            if environ.split(|&b| b == 0).any(|v| v == marker.as_bytes())
                && nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL)
                    .is_ok()
            {
                killed += 1;
            }
        }
        killed
    }
}

fn read_state(dir: &Path) -> Option<SupervisorState> {
    serde_json::from_slice(&fs::read(dir.join(STATE)).ok()?).ok()
}

/// Watches supervisors' pidfds on one thread and reports each exit once.
#[derive(Clone)]
pub struct ExitWatcher {
    epoll: Arc<Epoll>,
    watched: Arc<Mutex<HashMap<JobId, Supervisor>>>,
}

impl ExitWatcher {
    pub fn start(on_exit: impl Fn(JobId) + Send + 'static) -> io::Result<ExitWatcher> {
        let epoll = Arc::new(Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?);
        let watched: Arc<Mutex<HashMap<JobId, Supervisor>>> = Arc::default();
        let watcher = ExitWatcher {
            epoll: epoll.clone(),
            watched: watched.clone(),
        };
        std::thread::Builder::new()
            .name("exit-watcher".into())
            .spawn(move || {
                let mut events = vec![EpollEvent::empty(); 64];
                loop {
                    let n = match epoll.wait(&mut events, EpollTimeout::NONE) {
                        Ok(n) => n,
                        Err(nix::errno::Errno::EINTR) => continue,
                        Err(e) => {
                            tracing::error!(target: "ysched::exec", "exit watcher stopped: {e}");
                            return;
                        }
                    };
                    for event in &events[..n] {
                        let id = event.data();
                        let supervisor = watched
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .remove(&id);
                        if let Some(s) = supervisor {
                            let _ = epoll.delete(&s.pidfd);
                            // Reap it if it is our child (not if adopted).
                            let _ = waitpid(Pid::from_raw(s.pid), Some(WaitPidFlag::WNOHANG));
                            on_exit(id);
                        }
                    }
                }
            })?;
        Ok(watcher)
    }

    /// Reports `id` when `supervisor` exits (at once if it already has).
    pub fn watch(&self, id: JobId, supervisor: Supervisor) -> io::Result<()> {
        let mut watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        self.epoll
            .add(&supervisor.pidfd, EpollEvent::new(EpollFlags::EPOLLIN, id))?;
        watched.insert(id, supervisor);
        Ok(())
    }
}
