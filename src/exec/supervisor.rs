//! The job supervisor (`ysstepd`), one per running job, like slurmstepd.
//!
//! It is started (forked by the fork server, or exec'd by the daemon) with
//! two descriptors already set up: fd 3, the job's lock, which the daemon
//! locked and which this process holds for its whole life (so a restarted
//! daemon knows it lives), and fd 4, the bound control socket (so commands
//! sent at any time after the spawn are queued, never lost). It then runs
//! the script as the job's user in a new session, forwards the daemon's
//! commands as signals to the whole job, and when the script ends kills
//! what the script left behind and records the exit. It is a child
//! subreaper, so processes the job double-forks come back to it and are
//! killed with the job.
//!
//! The exit record is written whole (a rename), not fsynced: the daemon
//! reads it when this process exits and commits the job's end durably,
//! many ends to one fsync. Only a power loss before that commit (the
//! daemon down, the record not yet written back by the kernel: seconds)
//! loses the record; the restarted daemon then ends the job as NODE_FAIL,
//! as Slurm ends a job whose node went down. The job's own output files
//! were no safer in that moment. An fsync here
//! cost 12 % of the machine's CPU per job start and end on the build VM,
//! and held the job's GPUs for the length of two disk flushes.
//!
//! It is single-threaded on purpose: after `fork` the child may allocate.

use std::ffi::CString;
use std::fs::{self, OpenOptions};
use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{self, SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::cgroup::{self, JobCgroup, Usage};
use super::container;
use super::error::StepError;
use super::privileges;
use super::process::{
    children_of, descendants, dup_standard, fork_and_exec, new_session, write_atomically, Forked,
    CONTROL_FD, LOCK_FD,
};
use super::spec::{
    ExitRecord, LaunchSpec, SignalTarget, StepCommand, SupervisorState, EXIT, SCRIPT, SPEC, STATE,
};
use super::step_server::StepServer;
use crate::model::isolation::Layout;
use crate::model::job::ExitStatus;

/// How long one round of killing a finished job's processes may take
/// before the supervisor logs what is stuck and tries again; and how many
/// rounds before it gives up on them and reports them (the node is then
/// drained: processes SIGKILL cannot end are stuck in the kernel).
const KILL_ROUND: Duration = Duration::from_secs(10);
const KILL_ROUNDS: u32 = 3;
/// How often a supervisor on a pool's node looks at the node's lease:
/// well within the half lease between the lease's end and the job's rerun.
const LEASE_LOOK: Duration = Duration::from_millis(250);

/// Signals the supervisor receives through its signalfd instead of dying of
/// them: SIGCHLD for the job's end; the others are ignored, so that a stray
/// Ctrl-C or `kill` of the daemon's process group does not orphan the job.
fn handled_signals() -> SigSet {
    let mut set = SigSet::empty();
    for s in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGTSTP,
        Signal::SIGTTIN,
        Signal::SIGTTOU,
    ] {
        set.add(s);
    }
    set
}

/// `ysstepd JOB_DIR`: returns the process exit code.
pub fn run(job_dir: &Path) -> i32 {
    match supervise(job_dir) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ysstepd: {}: {e}", job_dir.display());
            1
        }
    }
}

pub(super) fn set_cloexec(fd: RawFd) -> Result<(), StepError> {
    // SAFETY: fcntl on a descriptor number; fails with EBADF if it is not open.
    let r = unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    if r < 0 {
        return Err(StepError::NotStartedByDaemon {
            fd,
            errno: Errno::last(),
        });
    }
    Ok(())
}

/// The signals the supervisor handles, blocked and read from a signalfd;
/// and the job's orphans, which come back to it (a child subreaper).
fn take_signals() -> Result<SignalFd, StepError> {
    let mask = handled_signals();
    mask.thread_block()
        .map_err(StepError::os("cannot block signals"))?;
    let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(StepError::os("signalfd"))?;
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        eprintln!(
            "ysstepd: cannot become a child subreaper: {}",
            Errno::last()
        );
    }
    Ok(signals)
}

fn supervise(dir: &Path) -> Result<(), StepError> {
    set_cloexec(LOCK_FD)?;
    set_cloexec(CONTROL_FD)?;
    // SAFETY: both descriptors were checked open above and are ours alone.
    let _lock = unsafe { OwnedFd::from_raw_fd(LOCK_FD) };
    let control = unsafe { UnixDatagram::from_raw_fd(CONTROL_FD) };
    control
        .set_nonblocking(true)
        .map_err(StepError::io("control socket"))?;

    let signals = take_signals()?;

    let spec = read_spec(dir)?;
    let slot = ExitSlot::reserve(dir);
    let write_exit = |dir: &Path, record: &ExitRecord| slot.write(dir, record);
    let mut state = SupervisorState {
        supervisor_pid: std::process::id() as i32,
        job_pid: None,
    };
    // A daemon that restarts meanwhile finds the lock held and waits for
    // the state (up to 2 s) to learn who holds it. A bare job starts well
    // within that, so its state is written once, with the job's pid (one
    // file less per job); preparing an image may take minutes.
    if spec.container.is_some() {
        write_state(dir, &state)?;
    }

    let group = match spec.cgroup.layout {
        Layout::Off => None,
        _ => match cgroup::create(&spec.cgroup, spec.job_id, &spec.limits) {
            Ok(g) => Some(g),
            Err(e) => {
                let record = launch_failed(format!("cannot create the job's cgroup: {e}"));
                return write_exit(dir, &record);
            }
        },
    };
    let group = group.as_deref();
    let cancelled = || cancel_waiting(&control);
    // A part that serves tasks (a peer's, an allocation's) runs this
    // program's task server, for srun, instead of the script; the job's
    // image is the script's (its steps name theirs to srun).
    let script = dir.join(SCRIPT);
    let serves_tasks = spec.part.as_ref().is_some_and(|p| p.serves_tasks());
    let program = match serves_tasks {
        true => Program::TaskServer,
        false => Program::Script(&script),
    };
    let image = spec.container.as_ref().filter(|_| !serves_tasks);
    let container = match image.map(|c| {
        let payload = container::launch::Payload::batch(&spec, dir);
        container::launch::prepare(&spec, c, payload, &cancelled)
    }) {
        None => None,
        Some(Ok(prepared)) => Some(prepared),
        Some(Err(e)) => {
            let record = launch_failed(format!("container: {e}"));
            if let Some(g) = group {
                let _ = g.remove();
            }
            return write_exit(dir, &record);
        }
    };
    let steps = step_server(&spec, dir, group);
    let extra_env: Vec<(String, String)> = steps.iter().map(StepServer::variable).collect();
    let launched = launch(&spec, program, group, container.as_ref(), &extra_env);
    let record = match launched {
        Err(e) => launch_failed(e.to_string()),
        Ok(job) => {
            state.job_pid = Some(job.as_raw());
            write_state(dir, &state)?;
            serve_beside_the_script(&spec, group);
            let watch = Watch {
                group,
                lease: spec.lease_file.as_deref(),
                holder: serves_tasks,
                runtime: container.is_some(),
                steps: steps.as_ref(),
            };
            let mut record = watch_job(job, &signals, &control, &watch);
            record.image = container.as_ref().map(|c| c.image.record.clone());
            record
        }
    };
    if let Some(c) = &container {
        c.bundle.remove();
    }
    container::image::Store::remove_job_store(dir);
    if let Some(g) = group {
        if let Err(e) = g.remove() {
            eprintln!("ysstepd: job {}: {e}", spec.job_id);
        }
    }
    write_exit(dir, &record)
}

/// Whether a stop of the job waits on the control socket, while its
/// container is being made ready (its image pulled or loaded): it is left
/// there for the watch that follows. A signal for the job before it has a
/// process has nothing to reach, and is dropped.
fn cancel_waiting(control: &UnixDatagram) -> bool {
    let mut buf = [0u8; 512];
    let peek = |buf: &mut [u8]| {
        use nix::sys::socket::{recv, MsgFlags};
        recv(
            std::os::fd::AsRawFd::as_raw_fd(control),
            buf,
            MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT,
        )
    };
    while let Ok(n) = peek(&mut buf) {
        if let Ok(StepCommand::Terminate { .. }) = serde_json::from_slice(&buf[..n]) {
            return true;
        }
        let _ = control.recv(&mut buf);
    }
    false
}

/// The listener for the job's steps in containers, where this node runs
/// them; without it the job runs on, its steps bare.
fn step_server<'a>(
    spec: &'a LaunchSpec,
    dir: &'a Path,
    group: Option<&'a dyn JobCgroup>,
) -> Option<StepServer<'a>> {
    let site = spec.step_containers.as_ref()?;
    StepServer::bind(spec, site, dir, group)
        .map_err(|e| eprintln!("ysstepd: job {}: no steps in containers: {e}", spec.job_id))
        .ok()
}

/// Waits for the job's end, kills what it left, and records how it ended
/// and what its cgroup measured.
fn watch_job(
    job: Pid,
    signals: &SignalFd,
    control: &UnixDatagram,
    watch: &Watch<'_>,
) -> ExitRecord {
    let (mut exit, terminated) = wait_for_job(job, signals, control, watch);
    if let Some(s) = watch.steps {
        s.stop();
    }
    if watch.runtime {
        exit = exit.of_runtime();
    }
    let stuck = kill_leftovers(job, watch.group);
    let mut usage = watch.group.map(|g| g.usage()).unwrap_or_default();
    if usage.cpu_usec.is_none() {
        usage.cpu_usec = children_cpu_usec();
    }
    ExitRecord {
        exit,
        end_time: now(),
        launch_error: None,
        terminated,
        usage,
        stuck,
        image: None,
        fenced: None,
        fence_frozen_secs: None,
    }
}

/// The record of a job that could not be started.
fn launch_failed(message: String) -> ExitRecord {
    ExitRecord {
        exit: ExitStatus::default(),
        end_time: now(),
        launch_error: Some(message),
        terminated: false,
        usage: Usage::default(),
        stuck: 0,
        image: None,
        fenced: None,
        fence_frozen_secs: None,
    }
}

fn read_spec(dir: &Path) -> Result<LaunchSpec, StepError> {
    let text =
        fs::read_to_string(dir.join(SPEC)).map_err(StepError::io(format!("cannot read {SPEC}")))?;
    serde_json::from_str(&text).map_err(|source| StepError::Spec { file: SPEC, source })
}

/// Where the job's end will be written, its bytes taken when the
/// supervisor starts: a file system filled while the job runs (by the
/// job, or by a user of the same disk) cannot then keep its end from
/// being recorded. The end is written over the slot's own bytes, padded
/// with spaces (which JSON ignores), and the slot renamed to `exit.json`
/// (the same event for the exit watcher as any atomic write); a record
/// larger than the slot, or a slot that could not be made, is written the
/// ordinary way.
struct ExitSlot(Option<fs::File>);

/// A slot's size: an end's record is a few hundred bytes.
const EXIT_SLOT_BYTES: usize = 4_096;
const EXIT_SLOT: &str = "exit.slot";

impl ExitSlot {
    fn reserve(dir: &Path) -> ExitSlot {
        let made = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(dir.join(EXIT_SLOT))
            .and_then(|mut f| {
                use std::io::Write as _;
                f.write_all(&[b' '; EXIT_SLOT_BYTES])?;
                Ok(f)
            });
        match made {
            Ok(file) => ExitSlot(Some(file)),
            Err(e) => {
                eprintln!("ysstepd: cannot reserve {EXIT_SLOT} for the job's end: {e}");
                ExitSlot(None)
            }
        }
    }

    fn write(&self, dir: &Path, record: &ExitRecord) -> Result<(), StepError> {
        let mut body = serde_json::to_vec(&record)
            .map_err(|source| StepError::Encode { file: EXIT, source })?;
        if let Some(file) = self.0.as_ref().filter(|_| body.len() <= EXIT_SLOT_BYTES) {
            use std::os::unix::fs::FileExt as _;
            body.resize(EXIT_SLOT_BYTES, b' ');
            let written = file
                .write_all_at(&body, 0)
                .and_then(|()| fs::rename(dir.join(EXIT_SLOT), dir.join(EXIT)));
            match written {
                Ok(()) => return Ok(()),
                Err(e) => eprintln!("ysstepd: cannot write the job's end in {EXIT_SLOT}: {e}"),
            }
            body.truncate(body.iter().rposition(|b| *b != b' ').map_or(0, |i| i + 1));
        }
        write_atomically(&dir.join(EXIT), &body)
            .map_err(StepError::io(format!("cannot write {EXIT}")))
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn write_state(dir: &Path, state: &SupervisorState) -> Result<(), StepError> {
    let body = serde_json::to_vec(state).map_err(|source| StepError::Encode {
        file: STATE,
        source,
    })?;
    write_atomically(&dir.join(STATE), &body)
        .map_err(StepError::io(format!("cannot write {STATE}")))
}

fn cstring(what: &'static str, s: impl Into<Vec<u8>>) -> Result<CString, StepError> {
    CString::new(s).map_err(|_| StepError::Nul(what))
}

/// Beside the batch script of a job over several nodes, the first node's
/// task server, as every other node of the job runs one: srun started on
/// any node of the job (by a task) reaches the tasks of every node. It
/// ignores the job's signals and goes with the job's cgroup when the
/// script has ended; one that cannot start leaves srun to the first node.
fn serve_beside_the_script(spec: &LaunchSpec, group: Option<&dyn JobCgroup>) {
    let beside = spec
        .part
        .as_ref()
        .is_some_and(|p| p.is_batch() && !p.serves_tasks() && p.nodes.len() > 1);
    if !beside {
        return;
    }
    // The script's user, cgroup and environment; it writes nothing of its
    // own, and must not truncate the script's output file.
    let mut server = spec.clone();
    server.stdout = "/dev/null".into();
    server.stderr = None;
    server.open_append = true;
    if let Err(e) = launch(&server, Program::TaskServer, group, None, &[]) {
        eprintln!(
            "ysstepd: job {}: the first node's task server: {e}",
            spec.job_id
        );
    }
}

/// What a part's process runs.
#[derive(Clone, Copy)]
enum Program<'a> {
    /// The job's script (in its container, if it has one).
    Script(&'a Path),
    /// This program's task server (`ysstepd --serve-tasks`), for srun.
    TaskServer,
}

/// Forks the job and execs its program; returns its pid (and process
/// group) once the exec succeeded, or the reason it could not start.
fn launch(
    spec: &LaunchSpec,
    program: Program<'_>,
    group: Option<&dyn JobCgroup>,
    container: Option<&container::launch::Prepared>,
    extra_env: &[(String, String)],
) -> Result<Pid, StepError> {
    use std::os::unix::ffi::OsStrExt;
    let (executable, script) = match program {
        Program::Script(script) => (script.to_path_buf(), script),
        Program::TaskServer => {
            let me = std::env::current_exe().map_err(|source| StepError::Io {
                what: "finding ysstepd".into(),
                source,
            })?;
            (me, Path::new(""))
        }
    };
    let path = cstring("script path", executable.as_os_str().as_bytes())?;
    let mut argv = vec![path.clone()];
    match program {
        Program::TaskServer => argv.push(cstring("an argument", "--serve-tasks")?),
        Program::Script(_) => {
            for a in &spec.args {
                argv.push(cstring("an argument", a.as_bytes())?);
            }
        }
    }
    let env = super::env::job_environment(spec);
    let envp: Vec<CString> = env
        .iter()
        .chain(extra_env)
        .filter_map(|(k, v)| CString::new(format!("{k}={v}")).ok())
        .collect();
    let user = cstring("user name", spec.user.as_bytes())?;
    let mask = super::tasks::umask_of(&env);

    let forked = fork_and_exec(|| {
        // Into the cgroup first, as root: everything it starts follows.
        let joined = match group {
            Some(g) => g
                .join(std::process::id() as i32)
                .map_err(|e| format!("cannot join the job's cgroup: {e}")),
            None => Ok(()),
        };
        match (joined, container) {
            (Err(e), _) => e,
            (Ok(()), None) => {
                // The submitter's umask (SLURM_UMASK), as Slurm's jobs.
                if let Some(mask) = mask {
                    // SAFETY: umask(2) is async-signal-safe.
                    unsafe { libc::umask(mask) };
                }
                exec_job(spec, &user, &path, &argv, &envp)
            }
            (Ok(()), Some(c)) => enter_container(spec, c, script),
        }
    })
    .map_err(StepError::os("fork"))?;
    match forked {
        Forked::Executing(child) => Ok(child),
        Forked::Failed(message) => Err(StepError::Job(message)),
    }
}

/// In the forked child: becomes crun running the job's container.
/// Returns only on failure, with why.
fn enter_container(
    spec: &LaunchSpec,
    prepared: &container::launch::Prepared,
    script: &Path,
) -> String {
    if let Err(e) = new_session() {
        return e.to_string();
    }
    container::launch::become_container(spec, prepared, Some(script), || {
        open_outputs(spec).map_err(|e| container::ContainerError::Output(e.to_string()))
    })
}

/// In the forked child: becomes the job. Returns only on failure, with why.
fn exec_job(
    spec: &LaunchSpec,
    user: &CString,
    path: &CString,
    argv: &[CString],
    envp: &[CString],
) -> String {
    if let Err(e) = new_session() {
        return e.to_string();
    }
    if spec.switch_user {
        if spec.uid == 0 {
            // The daemon refuses root jobs unless configured; nothing to drop.
        } else if let Err(e) =
            privileges::become_user(&mut privileges::Kernel, user, spec.uid, spec.gid)
        {
            return e.to_string();
        }
    }
    // A working directory the job's user may not enter is left for /tmp,
    // said on the job's standard error, as Slurm's step daemon does.
    let moved = std::env::set_current_dir(&spec.work_dir).err().map(|e| {
        format!(
            "ysched: error: couldn't chdir to `{}': {e}: going to /tmp instead\n",
            spec.work_dir.display()
        )
    });
    if moved.is_some() {
        if let Err(e) = std::env::set_current_dir("/tmp") {
            return format!(
                "cannot change to the working directory {} nor to /tmp: {e}",
                spec.work_dir.display()
            );
        }
    }
    let (stdin, stdout, stderr) = match open_outputs(spec) {
        Ok(files) => files,
        Err(e) => return e.to_string(),
    };
    if let Err(e) = dup_standard(&stdin, &stdout, &stderr) {
        return e.to_string();
    }
    if let Some(said) = moved {
        let _ = nix::unistd::write(std::io::stderr(), said.as_bytes());
    }
    match nix::unistd::execve(path, argv, envp) {
        Err(Errno::ENOEXEC) => {
            "cannot execute the job script: it has no valid #! interpreter line".to_string()
        }
        Err(e) => format!("cannot execute the job script: {e}"),
        Ok(never) => match never {},
    }
}

/// The job's standard input (/dev/null), output and error files, opened
/// (and their directory made) with the identity of the calling process.
pub(super) fn open_outputs(spec: &LaunchSpec) -> Result<(fs::File, fs::File, fs::File), StepError> {
    let open = |p: &Path| {
        let mut o = OpenOptions::new();
        o.write(true).create(true).mode(0o644);
        if spec.open_append {
            o.append(true);
        } else {
            o.truncate(true);
        }
        // A missing directory is made, as the job's user: tools create
        // `folder/%j` once they know the id, and the job may start first.
        let opened = match o.open(p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => p
                .parent()
                .map(|dir| {
                    fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o755)
                        .create(dir)
                })
                .unwrap_or(Ok(()))
                .and_then(|()| o.open(p)),
            other => other,
        };
        opened.map_err(|e| {
            StepError::Job(format!("cannot open the output file {}: {e}", p.display()))
        })
    };
    let stdout = open(&spec.stdout)?;
    let stderr = match &spec.stderr {
        Some(p) => open(p)?,
        None => match stdout.try_clone() {
            Ok(f) => f,
            Err(e) => {
                return Err(StepError::Job(format!(
                    "cannot duplicate the output file: {e}"
                )))
            }
        },
    };
    let stdin = match fs::File::open("/dev/null") {
        Ok(f) => f,
        Err(e) => return Err(StepError::Job(format!("cannot open /dev/null: {e}"))),
    };
    Ok((stdin, stdout, stderr))
}

/// What a job's wait watches besides its main process.
struct Watch<'a> {
    group: Option<&'a dyn JobCgroup>,
    /// The node's lease, on a pool's node.
    lease: Option<&'a Path>,
    /// The main process only holds the job's part on a node after its
    /// first (it ignores the signals): once stopping, the part ends as
    /// soon as nothing else is left in its group.
    holder: bool,
    /// The main process is the container runtime, which passes the
    /// signals it gets to the container's first process: signals for the
    /// whole job skip it, or that process would get them twice.
    runtime: bool,
    /// The job's steps in containers, whose runtimes the signals skip too.
    steps: Option<&'a StepServer<'a>>,
}

/// How often a stopping holder looks whether its group is empty.
const HOLDER_LOOK: Duration = Duration::from_millis(100);
/// How long a stopping holder (a task server) that had tasks running is
/// left alone in its group before it is killed: their ends (how each
/// ended, which srun reports) are relayed to srun in that time.
const HOLDER_RELAYS: Duration = Duration::from_secs(1);

/// Where a job's stop stands: asked for, and when what is left is killed.
#[derive(Default)]
struct Stopping {
    terminated: bool,
    kill_at: Option<Instant>,
    /// Since when a stopping holder has been all that is left.
    alone_since: Option<Instant>,
    /// The holder had tasks when the stop began, whose ends it relays.
    relays: bool,
}

/// Waits for the job's main process, forwarding commands from the daemon.
/// Returns its exit status and whether it was asked to terminate.
fn wait_for_job(
    job: Pid,
    signals: &SignalFd,
    control: &UnixDatagram,
    watch: &Watch<'_>,
) -> (ExitStatus, bool) {
    let (group, lease) = (watch.group, watch.lease);
    let mut stop = Stopping::default();
    // The main process's end, while what it left has the rest of its grace.
    let mut ended: Option<ExitStatus> = None;
    // Whether the job was stopped for the lease's end since the lease was
    // last good, and how.
    let mut fence: Option<LeaseFence> = None;
    loop {
        // With a lease to watch, a look at it every LEASE_LOOK.
        let mut next = match (stop.kill_at, lease) {
            (Some(t), Some(_)) => Some(t.min(Instant::now() + LEASE_LOOK)),
            (Some(t), None) => Some(t),
            (None, Some(_)) => Some(Instant::now() + LEASE_LOOK),
            (None, None) => None,
        };
        if stop.terminated && (watch.holder || ended.is_some()) {
            let soon = Instant::now() + HOLDER_LOOK;
            next = Some(next.map_or(soon, |t| t.min(soon)));
            if watch.holder && holds_alone(job, group) {
                let alone = *stop.alone_since.get_or_insert_with(Instant::now);
                let relayed = alone
                    + if stop.relays {
                        HOLDER_RELAYS
                    } else {
                        Duration::ZERO
                    };
                stop.kill_at = Some(stop.kill_at.map_or(relayed, |t| t.min(relayed)));
            } else {
                stop.alone_since = None;
            }
        }
        if let Some(lease) = lease {
            watch_lease(lease, group, &mut fence, &mut stop);
        }
        let mut fds = vec![
            nix::poll::PollFd::new(signals.as_fd(), nix::poll::PollFlags::POLLIN),
            nix::poll::PollFd::new(control.as_fd(), nix::poll::PollFlags::POLLIN),
        ];
        if let Some(s) = watch.steps {
            fds.push(nix::poll::PollFd::new(
                s.as_fd(),
                nix::poll::PollFlags::POLLIN,
            ));
        }
        let _ = nix::poll::poll(&mut fds, poll_timeout(next));

        while let Ok(Some(_)) = signals.read_signal() {}
        ended = reap(job, watch.steps).or(ended);
        if let Some(s) = watch.steps.filter(|_| !stop.terminated) {
            s.accept();
        }
        if let Some(status) = ended {
            if !in_grace(stop.terminated, stop.kill_at, group) {
                return (status, stop.terminated);
            }
            // The batch shell ended while the job stops: what it left
            // outside any step (a data loader, a nohup'ed logger that
            // ignores SIGTERM) goes now, as Slurm's batch step does; the
            // steps keep their grace to save their work.
            if let Some(g) = group {
                kill_strays(g);
            }
        }
        take_commands(control, job, watch, &mut stop);
        if stop.kill_at.is_some_and(|t| Instant::now() >= t) {
            match group {
                // Frozen or forking processes too.
                Some(g) => g.kill_all(),
                None => signal_job(job, watch, Signal::SIGKILL),
            }
            stop.kill_at = None;
        }
    }
}

/// A poll's timeout until `next` (none: for ever).
fn poll_timeout(next: Option<Instant>) -> nix::poll::PollTimeout {
    match next {
        Some(t) => {
            let ms = t
                .saturating_duration_since(Instant::now())
                .as_millis()
                .min(i32::MAX as u128) as i32;
            nix::poll::PollTimeout::try_from(ms).unwrap_or(nix::poll::PollTimeout::MAX)
        }
        None => nix::poll::PollTimeout::NONE,
    }
}

/// What a supervisor did when the node's lease ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LeaseFence {
    /// When the agent had last fenced the node, as the lease file said.
    fenced_at: u64,
    /// Whether the job was frozen (else killed: it had no cgroup).
    frozen: bool,
}

/// The node's lease, looked at: once it has run out, the job is frozen
/// where it is (the agent does the same, and the controller thaws it, or
/// stops it, when it hears the node again); killed where it cannot be
/// frozen. Renewed with no fence of the agent's in between, the lease ran
/// out for nothing the controller saw (a renewal written late, a file
/// that could not be written): the job is thawed here, as no one else
/// would.
fn watch_lease(
    lease: &Path,
    group: Option<&dyn JobCgroup>,
    fence: &mut Option<LeaseFence>,
    stop: &mut Stopping,
) {
    // A file that cannot be read says nothing: the agent writes it
    // before its first launch.
    let Some(lease) = super::lease::read(lease) else {
        return;
    };
    match (*fence, lease.expired()) {
        (None, true) => {
            let frozen = group.is_some_and(|g| g.set_frozen(true).is_ok());
            if frozen {
                eprintln!("ysstepd: the node's lease ran out: the job is frozen until the controller claims it");
            } else if !stop.terminated {
                eprintln!("ysstepd: the node's lease ran out: the job is killed");
                stop.terminated = true;
                stop.kill_at = Some(Instant::now());
            }
            *fence = Some(LeaseFence {
                fenced_at: lease.fenced_at,
                frozen,
            });
        }
        (Some(before), false) => {
            if after_fence(before, lease.fenced_at) == Thaw::Here {
                if let Some(g) = group {
                    match g.set_frozen(false) {
                        Ok(()) => eprintln!("ysstepd: the node's lease is good again, and its agent did not fence it: the job is thawed"),
                        Err(e) => eprintln!("ysstepd: the node's lease is good again, but the job cannot be thawed: {e}"),
                    }
                }
            }
            *fence = None;
        }
        _ => {}
    }
}

/// Who thaws a job frozen for the lease once the lease is good again.
#[derive(Debug, PartialEq, Eq)]
enum Thaw {
    /// Its supervisor: the agent has not fenced the node since it froze.
    Here,
    /// The controller, through the agent (which fenced the node, or
    /// started anew, since), if the run is still this node's; or nobody
    /// (it was killed).
    Elsewhere,
}

fn after_fence(fence: LeaseFence, fenced_at_now: u64) -> Thaw {
    if fence.frozen && fence.fenced_at == fenced_at_now {
        Thaw::Here
    } else {
        Thaw::Elsewhere
    }
}

/// Carries out the daemon's commands waiting on the control socket.
fn take_commands(control: &UnixDatagram, job: Pid, watch: &Watch<'_>, stop: &mut Stopping) {
    let mut buf = [0u8; 512];
    while let Ok(n) = control.recv(&mut buf) {
        match serde_json::from_slice::<StepCommand>(&buf[..n]) {
            Ok(StepCommand::Terminate {
                grace_secs,
                signal,
                target,
            }) => {
                if !stop.terminated {
                    stop.terminated = true;
                    stop.relays = watch.holder && !holds_alone(job, watch.group);
                    let (first, target) = match signal.and_then(|s| Signal::try_from(s).ok()) {
                        Some(s) => (s, target),
                        None => (Signal::SIGTERM, SignalTarget::Job),
                    };
                    signal_job(job, watch, Signal::SIGCONT);
                    signal_target(job, watch, first, target);
                    stop.kill_at = Some(Instant::now() + Duration::from_secs(grace_secs));
                }
            }
            Ok(StepCommand::Signal { signal, target }) => match Signal::try_from(signal) {
                Ok(s) => signal_target(job, watch, s, target),
                Err(_) => eprintln!("ysstepd: ignoring unknown signal number {signal}"),
            },
            Err(e) => eprintln!("ysstepd: ignoring malformed command: {e}"),
        }
    }
}

/// Whether a job being stopped still has processes within their grace:
/// when its batch shell dies of the first signal, the steps it started
/// still get the whole grace to save their work, as in Slurm (what else
/// it left is killed at once, see [`kill_strays`]).
fn in_grace(terminated: bool, kill_at: Option<Instant>, group: Option<&dyn JobCgroup>) -> bool {
    terminated
        && kill_at.is_some_and(|t| Instant::now() < t)
        && group.is_some_and(|g| !g.is_empty())
}

/// Kills the processes of the job that belong to none of its steps.
fn kill_strays(group: &dyn JobCgroup) {
    let pids = group.pids();
    let programs: Vec<(i32, String)> = pids.iter().map(|p| (*p, program_of(*p))).collect();
    let own = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let members = |root: i32| {
        let mut all: Vec<i32> = descendants(Pid::from_raw(root))
            .into_iter()
            .map(Pid::as_raw)
            .collect();
        all.push(root);
        all
    };
    for pid in strays(&programs, &own, members) {
        let _ = signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// The program `pid` runs (its executable's file name).
fn program_of(pid: i32) -> String {
    fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .map(|n| n.trim_end_matches(" (deleted)").to_string())
        .unwrap_or_default()
}

/// Of a job's processes (`pid`, program), those outside its steps: a
/// step is an `srun` (this build's `ysched-slurm`) or a task server (this
/// program, `supervisor`), with everything it started (`members` of
/// each, itself included). A process named so by its user is spared to
/// its grace's end, as before: no step is ever taken for a stray.
fn strays(
    programs: &[(i32, String)],
    supervisor: &str,
    members: impl Fn(i32) -> Vec<i32>,
) -> Vec<i32> {
    let mut steps = std::collections::HashSet::new();
    for (pid, program) in programs {
        if program == "ysched-slurm" || program == supervisor {
            steps.extend(members(*pid));
        }
    }
    programs
        .iter()
        .map(|(pid, _)| *pid)
        .filter(|pid| !steps.contains(pid))
        .collect()
}

/// Whether the holder `job` is all that is left of its part (without a
/// group, nothing tells: it is).
fn holds_alone(job: Pid, group: Option<&dyn JobCgroup>) -> bool {
    group.is_none_or(|g| g.pids().iter().all(|&p| p == job.as_raw()))
}

/// Reaps every child that has ended; returns the job's status once it has.
fn reap(job: Pid, steps: Option<&StepServer<'_>>) -> Option<ExitStatus> {
    let mut result = None;
    loop {
        let status = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG));
        if let (Some(s), Ok(status)) = (steps, &status) {
            if let Some(pid) = status.pid().filter(|&p| p != job) {
                s.reaped(pid);
            }
        }
        match status {
            Ok(WaitStatus::Exited(pid, code)) if pid == job => {
                result = Some(ExitStatus { code, signal: 0 })
            }
            Ok(WaitStatus::Signaled(pid, sig, _)) if pid == job => {
                result = Some(ExitStatus {
                    code: 0,
                    signal: sig as i32,
                })
            }
            Ok(WaitStatus::StillAlive) | Err(_) => return result,
            Ok(_) => {}
        }
    }
}

/// Signals every process of the job once: those in its cgroup, which
/// holds them all; without one, its process group and every other process
/// that became this supervisor's child (double-forked processes that left
/// the group). Once, because a script that traps a signal runs its trap
/// for each delivery: a container runtime, which passes signals on, is
/// left out.
fn signal_job(job: Pid, watch: &Watch<'_>, sig: Signal) {
    let step_runtimes = watch.steps.map(StepServer::runtimes).unwrap_or_default();
    if let Some(g) = watch.group {
        if !watch.runtime && step_runtimes.is_empty() {
            g.signal_all(sig);
            return;
        }
        let skip = |p: Pid| (watch.runtime && p == job) || step_runtimes.contains(&p);
        for pid in g
            .pids()
            .into_iter()
            .map(Pid::from_raw)
            .filter(|&p| !skip(p))
        {
            let _ = signal::kill(pid, sig);
        }
        return;
    }
    if watch.runtime {
        for pid in descendants(job) {
            let _ = signal::kill(pid, sig);
        }
    } else {
        let _ = signal::killpg(job, sig);
    }
    for child in children()
        .into_iter()
        .filter(|&c| c != job || !watch.runtime)
    {
        let _ = signal::kill(child, sig);
    }
}

/// Signals the processes `target` names: the whole job, the batch shell
/// alone, or everything but the batch shell. In a container the batch
/// shell is the runtime's child, and the runtime passes a signal on to it.
fn signal_target(job: Pid, watch: &Watch<'_>, sig: Signal, target: SignalTarget) {
    match target {
        SignalTarget::Job => signal_job(job, watch, sig),
        SignalTarget::BatchShell => {
            let _ = signal::kill(job, sig);
        }
        SignalTarget::Steps => {
            let mut shells = vec![job];
            if watch.runtime {
                shells.extend(children_of(job));
            }
            // What the batch shell runs itself (`tee` in `srun … | tee`,
            // `time`, `bash -c`, srun) is in the shells' process groups;
            // srun's tasks each lead a group of their own. Only these are
            // the job's steps, as Slurm signals them.
            let shell_groups: Vec<Pid> = shells
                .iter()
                .filter_map(|&p| nix::unistd::getpgid(Some(p)).ok())
                .collect();
            // Runtimes pass signals on: not shells, but skipped alike.
            shells.extend(watch.steps.map(StepServer::runtimes).unwrap_or_default());
            let steps: Vec<Pid> = match watch.group {
                Some(g) => g.pids().into_iter().map(Pid::from_raw).collect(),
                None => descendants(job).into_iter().chain(children()).collect(),
            };
            let of_a_step = |p: &Pid| {
                !shells.contains(p)
                    && nix::unistd::getpgid(Some(*p)).is_ok_and(|g| !shell_groups.contains(&g))
            };
            for pid in steps.into_iter().filter(of_a_step) {
                let _ = signal::kill(pid, sig);
            }
        }
        SignalTarget::Process(pid) => {
            // Only a process of this job: the number came from the
            // job's user, through the controller.
            let pid = Pid::from_raw(pid as i32);
            let of_the_job = match watch.group {
                Some(g) => g.pids().contains(&pid.as_raw()),
                None => descendants(job).contains(&pid),
            };
            if of_the_job {
                // Queued, not killed: srun passes on what is queued to it
                // alone, and leaves what the supervisor sends every
                // process of the job to the supervisors.
                let value = libc::sigval {
                    sival_ptr: std::ptr::null_mut(),
                };
                // SAFETY: sigqueue(3) with a plain value to a process of
                // the job.
                unsafe { libc::sigqueue(pid.as_raw(), sig as i32, value) };
            }
        }
        SignalTarget::Step(step) => {
            let pids: Vec<Pid> = match watch.group {
                Some(g) => g.pids().into_iter().map(Pid::from_raw).collect(),
                None => descendants(job),
            };
            let marker = format!("SLURM_STEP_ID={step}");
            for pid in pids.into_iter().filter(|&p| has_variable(p, &marker)) {
                let _ = signal::kill(pid, sig);
            }
        }
    }
}

/// Whether process `pid` started with `variable` (`NAME=VALUE`) in its
/// environment.
fn has_variable(pid: Pid, variable: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == variable.as_bytes()))
}

/// This process's children, from /proc (reparented orphans included).
fn children() -> Vec<Pid> {
    children_of(Pid::this())
}

/// After the script ended: kills what it left behind. With a cgroup, the
/// job is over only when its cgroup is empty: killed in rounds, each round
/// that leaves processes (stuck in uninterruptible sleep) logged with what
/// they are, until they go or the rounds run out. Without one, its process
/// group and this supervisor's children are killed (bounded at a second).
/// Kills what is left of the job; how many of its processes survive.
fn kill_leftovers(job: Pid, group: Option<&dyn JobCgroup>) -> usize {
    let _ = signal::killpg(job, Signal::SIGKILL);
    if let Some(g) = group {
        for round in 1..=KILL_ROUNDS {
            let stuck = g.kill_and_wait(KILL_ROUND);
            if stuck.is_empty() {
                return 0;
            }
            eprintln!(
                "ysstepd: {} processes of the job survive SIGKILL after {} s (round {round} of {KILL_ROUNDS}): {}",
                stuck.len(),
                KILL_ROUND.as_secs() * u64::from(round),
                describe_processes(&stuck)
            );
        }
        eprintln!(
            "ysstepd: giving up on the job's stuck processes; its cgroup {} stays",
            g.path()
        );
        return g.pids().len();
    }
    for _ in 0..100 {
        let left = children();
        if left.is_empty() {
            return 0;
        }
        for child in &left {
            let _ = signal::kill(*child, Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(10));
        while let Ok(status) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            if status == WaitStatus::StillAlive {
                break;
            }
        }
    }
    eprintln!("ysstepd: processes of job (pgid {job}) did not die within 1 s of SIGKILL; giving up on them");
    children().len()
}

/// The CPU time (user and system) of the job's processes, where no cgroup
/// measures it: this supervisor is their subreaper, so every process of
/// the job that ended was reaped here or by a reaped ancestor, and the
/// kernel sums them into this process's children's rusage. Zombies left
/// by the kill are reaped first so that they count.
fn children_cpu_usec() -> Option<u64> {
    while let Ok(status) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
    let usage =
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).ok()?;
    let usec = |t: nix::sys::time::TimeVal| -> Option<u64> {
        Some(u64::try_from(t.tv_sec()).ok()? * 1_000_000 + u64::try_from(t.tv_usec()).ok()?)
    };
    Some(usec(usage.user_time())? + usec(usage.system_time())?)
}

/// `4242 (python, state D)` for each pid, from /proc.
fn describe_processes(pids: &[i32]) -> String {
    pids.iter()
        .map(|pid| {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let name = stat
                .split_once('(')
                .and_then(|(_, r)| r.rsplit_once(')'))
                .map(|(n, _)| n)
                .unwrap_or("?");
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next())
                .unwrap_or("?");
            format!("{pid} ({name}, state {state})")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strays_are_what_no_step_started() {
        // 10 the batch shell, 11 its data loader, 12 an srun with its
        // task 13, 14 a task server with its task 15 and that task's
        // child 16.
        let programs: Vec<(i32, String)> = [
            (10, "bash"),
            (11, "python3"),
            (12, "ysched-slurm"),
            (13, "python3"),
            (14, "ysstepd"),
            (15, "python3"),
            (16, "sh"),
        ]
        .iter()
        .map(|(p, n)| (*p, n.to_string()))
        .collect();
        let members = |root: i32| match root {
            12 => vec![13, 12],
            14 => vec![15, 16, 14],
            other => vec![other],
        };
        assert_eq!(strays(&programs, "ysstepd", members), [10, 11]);
        assert_eq!(strays(&[], "ysstepd", members), Vec::<i32>::new());
    }
}
