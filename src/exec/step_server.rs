//! The supervisor's side of steps in containers (`srun
//! --container-image`, see `container::steps`): it listens for the job's
//! task starters and forks a runner for each task, which makes the
//! container and reports the task's end.
//!
//! A runner stays root and outside the job's cgroup (a pull may take
//! long; what runs the task is put in the cgroup); it dies with the
//! supervisor (`PR_SET_PDEATHSIG`), and the supervisor kills what is left
//! of them when the job ends. The runtime it starts passes the signals it
//! gets to the task, so the job's own signals skip it ([`runtimes`]).
//!
//! [`runtimes`]: StepServer::runtimes

use std::cell::RefCell;
use std::fs::File;
use std::io::ErrorKind;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::{self, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{ForkResult, Pid};

use super::cgroup::JobCgroup;
use super::container::launch::{self, Payload};
use super::container::steps::{self, ContainerStepError, ContainerStepOrder, FromRunner, ToRunner};
use super::container::{Bundle, ContainerSite};
use super::process::{children_of, descendants, fork_and_exec, Forked};
use super::spec::LaunchSpec;
use crate::model::job::ExitStatus;

/// How long a starter has to send its order once connected.
const ORDER_WAIT: Duration = Duration::from_secs(10);

/// A job's listener for steps in containers, and the runners it forked.
pub struct StepServer<'a> {
    listener: UnixListener,
    name: String,
    spec: &'a LaunchSpec,
    site: &'a ContainerSite,
    dir: &'a Path,
    group: Option<&'a dyn JobCgroup>,
    runners: RefCell<Vec<Pid>>,
}

impl<'a> StepServer<'a> {
    /// Listens under a fresh abstract name of the job's.
    pub fn bind(
        spec: &'a LaunchSpec,
        site: &'a ContainerSite,
        dir: &'a Path,
        group: Option<&'a dyn JobCgroup>,
    ) -> std::io::Result<StepServer<'a>> {
        let mut last = None;
        for _ in 0..4 {
            let name = format!("ysched/job-{}/steps-{}", spec.job_id, random_hex());
            let address = SocketAddr::from_abstract_name(name.as_bytes())?;
            match UnixListener::bind_addr(&address) {
                Ok(listener) => {
                    listener.set_nonblocking(true)?;
                    return Ok(StepServer {
                        listener,
                        name,
                        spec,
                        site,
                        dir,
                        group,
                        runners: RefCell::new(Vec::new()),
                    });
                }
                // Taken (by chance, or by someone guessing): another name.
                Err(e) if e.kind() == ErrorKind::AddrInUse => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no free name")))
    }

    /// The job's variable that names it.
    pub fn variable(&self) -> (String, String) {
        (steps::SOCKET_VARIABLE.to_string(), self.name.clone())
    }

    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.listener.as_fd()
    }

    /// Takes the connections waiting: one from the job's user (or root)
    /// gets a runner; any other is told why not.
    pub fn accept(&self) {
        while let Ok((mut stream, _)) = self.listener.accept() {
            let uid = steps::peer_uid(&stream);
            if uid != Some(self.spec.uid) && uid != Some(0) {
                let why = format!(
                    "job {}'s steps are its user's ({}) to start",
                    self.spec.job_id, self.spec.user
                );
                let _ = stream.set_nonblocking(true);
                let _ = steps::send(&mut stream, &FromRunner::Failed(why), &[]);
                continue;
            }
            match self.fork_runner(stream) {
                Ok(pid) => self.runners.borrow_mut().push(pid),
                Err(e) => eprintln!("ysstepd: a step's container: cannot fork: {e}"),
            }
        }
    }

    fn fork_runner(&self, stream: UnixStream) -> nix::Result<Pid> {
        // SAFETY: the supervisor is single-threaded (see its module).
        match unsafe { nix::unistd::fork() }? {
            ForkResult::Child => run(stream, self.spec, self.site, self.dir, self.group),
            ForkResult::Parent { child } => Ok(child),
        }
    }

    /// A child of the supervisor that ended: a runner no more.
    pub fn reaped(&self, pid: Pid) {
        self.runners.borrow_mut().retain(|&r| r != pid);
    }

    /// The container runtimes the runners started.
    pub fn runtimes(&self) -> Vec<Pid> {
        self.runners
            .borrow()
            .iter()
            .flat_map(|&r| children_of(r))
            .collect()
    }

    /// Kills the runners left (the job is over).
    pub fn stop(&self) {
        for &runner in self.runners.borrow().iter() {
            let _ = signal::kill(runner, Signal::SIGKILL);
        }
    }
}

fn random_hex() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 8];
    let _ = ring::rand::SystemRandom::new().fill(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The runner: runs one task's container and answers how it ended.
/// Never returns.
fn run(
    mut stream: UnixStream,
    spec: &LaunchSpec,
    site: &ContainerSite,
    dir: &Path,
    group: Option<&dyn JobCgroup>,
) -> ! {
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let answer = serve(&mut stream, spec, site, dir, group)
        .unwrap_or_else(|e| FromRunner::Failed(e.to_string()));
    let _ = steps::send(&mut stream, &answer, &[]);
    // SAFETY: _exit ends the forked runner without the supervisor's
    // destructors.
    unsafe { libc::_exit(0) }
}

fn serve(
    stream: &mut UnixStream,
    spec: &LaunchSpec,
    site: &ContainerSite,
    dir: &Path,
    group: Option<&dyn JobCgroup>,
) -> Result<FromRunner, ContainerStepError> {
    let failed = |why: String| ContainerStepError::Failed(why);
    let _ = stream.set_read_timeout(Some(ORDER_WAIT));
    let (order, fds) = steps::receive::<ContainerStepOrder>(stream, 3)?;
    let _ = stream.set_read_timeout(None);
    let stdio: [OwnedFd; 3] = fds
        .try_into()
        .map_err(|_| failed("the task's standard input, output and error did not come".into()))?;
    order.request.check().map_err(|e| failed(e.to_string()))?;
    if spec.uid == 0 && !site.site.allow_root {
        return Err(failed(
            "--container-image: root's jobs do not run in containers here (allow_root in [containers])"
                .into(),
        ));
    }
    let me = std::process::id();
    let payload = Payload {
        args: order.argv,
        env: order.env,
        host_cwd: &order.cwd,
        bundle: Bundle::named(dir, &format!("step-container-{me}")),
        name: format!("ysched-{}-step-{me}", spec.job_id),
        job_dir: dir,
    };
    // A cancel ends the runner itself (with the job's supervisor).
    let prepared = launch::prepare(spec, &site.launch(order.request), payload, &|| false)
        .map_err(|e| failed(format!("container: {e}")))?;
    let answer = run_prepared(stream, spec, &prepared, group, stdio);
    prepared.bundle.remove();
    answer
}

/// Starts the runtime, passes the starter's signals on, and waits.
fn run_prepared(
    stream: &UnixStream,
    spec: &LaunchSpec,
    prepared: &launch::Prepared,
    group: Option<&dyn JobCgroup>,
    stdio: [OwnedFd; 3],
) -> Result<FromRunner, ContainerStepError> {
    let runtime = fork_runtime(spec, prepared, group, stdio)?;
    let reader = stream
        .try_clone()
        .map_err(|e| ContainerStepError::Wire(e.to_string()))?;
    std::thread::spawn(move || pass_signals(reader, runtime));
    let status = loop {
        match waitpid(runtime, None) {
            Ok(WaitStatus::Exited(_, code)) => break ExitStatus { code, signal: 0 },
            Ok(WaitStatus::Signaled(_, sig, _)) => {
                break ExitStatus {
                    code: 0,
                    signal: sig as i32,
                }
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                return Err(ContainerStepError::Failed(format!(
                    "cannot wait for the container: {e}"
                )))
            }
        }
    }
    .of_runtime();
    Ok(FromRunner::Ended {
        code: status.code,
        signal: status.signal,
    })
}

/// The starter's signals, to the runtime (which passes them on); once it
/// is gone, or asks for SIGKILL, the task and all it started are killed.
fn pass_signals(mut from: UnixStream, runtime: Pid) {
    let kill_all = || {
        for pid in descendants(runtime) {
            let _ = signal::kill(pid, Signal::SIGKILL);
        }
        let _ = signal::kill(runtime, Signal::SIGKILL);
    };
    loop {
        match steps::receive::<ToRunner>(&mut from, 0) {
            Ok((ToRunner::Signal(libc::SIGKILL), _)) => kill_all(),
            Ok((ToRunner::Signal(sig), _)) => {
                if let Ok(sig) = Signal::try_from(sig) {
                    let _ = signal::kill(runtime, sig);
                }
            }
            Err(_) => return kill_all(),
        }
    }
}

/// Forks the runtime into the job's cgroup and session; its pid once it
/// executed, or why it could not.
fn fork_runtime(
    spec: &LaunchSpec,
    prepared: &launch::Prepared,
    group: Option<&dyn JobCgroup>,
    stdio: [OwnedFd; 3],
) -> Result<Pid, ContainerStepError> {
    let forked = fork_and_exec(move || become_runtime(spec, prepared, group, stdio))
        .map_err(|e| ContainerStepError::Failed(format!("cannot fork: {e}")))?;
    match forked {
        Forked::Executing(child) => Ok(child),
        Forked::Failed(message) => Err(ContainerStepError::Failed(message)),
    }
}

/// In the runtime's child: into the cgroup and a session of its own, then
/// the container. Returns only on failure, with why.
fn become_runtime(
    spec: &LaunchSpec,
    prepared: &launch::Prepared,
    group: Option<&dyn JobCgroup>,
    stdio: [OwnedFd; 3],
) -> String {
    if let Some(g) = group {
        if let Err(e) = g.join(std::process::id() as i32) {
            return format!("cannot join the job's cgroup: {e}");
        }
    }
    if let Err(e) = super::process::new_session() {
        return e.to_string();
    }
    let [stdin, stdout, stderr] = stdio.map(File::from);
    launch::become_container(spec, prepared, None, || Ok((stdin, stdout, stderr)))
}
