//! `srun` for a step of several tasks, or over several nodes: the tasks on
//! the node srun runs on start here; those on the job's other nodes start
//! through each node's task server (`net::steps`), the first node's
//! included (its part runs one beside the batch script), and in an
//! interactive allocation every node's. Every task's output comes back here, to srun's own
//! output (`--label` prefixes each line with the task id); a signal srun
//! gets goes to every task (a Ctrl-C as Slurm's srun takes it, see
//! `srun_signals`); a task that fails stops the others when asked
//! (`--kill-on-bad-exit`, off by default as in Slurm); srun exits with
//! the worst task's status.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::exec::tasks::{self, RunningTasks, StepOrder, TaskEvent};
use crate::model::step::StepUsage;
use crate::model::tasks::{LayoutError, TaskLayout};
use crate::net::steps::{self, Relayed, StepLink, START_WAIT};

use super::CliError;
use crate::proto::{Control, Reply, Request};

/// How long tasks have between SIGTERM and SIGKILL when one of them
/// failed.
const BAD_EXIT_GRACE: Duration = Duration::from_secs(5);
/// A line longer than this goes out before its end.
const MAX_PARTIAL_LINE: usize = 64 << 10;

/// What a step asks for, from srun's options.
pub struct StepRequest {
    pub ntasks: Option<u32>,
    /// `--nodes` as (MIN, MAX).
    pub nodes: Option<(u32, u32)>,
    pub ntasks_per_node: Option<u32>,
    pub gpus_per_task: Option<u32>,
    pub label: bool,
    /// `--unbuffered`: output as it comes, not line by line.
    pub unbuffered: bool,
    pub kill_on_bad_exit: bool,
    /// `--wait=SECONDS`: the other tasks are killed this long after the
    /// first one ends.
    pub wait_after_first: Option<Duration>,
    /// `--quit-on-interrupt`: the first Ctrl-C kills the tasks.
    pub quit_on_interrupt: bool,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: std::path::PathBuf,
    /// Where `--output` and `--error` go.
    pub stdout: Sink,
    pub stderr: Sink,
    /// `--container-image` and the other `--container-*` options.
    pub container: Option<crate::model::container::ContainerRequest>,
    /// The step as the controller numbered it (`None`: not recorded,
    /// step 0).
    pub recorded: Option<RecordedStep>,
    /// The signals srun passes on to the tasks, caught before the step
    /// was recorded.
    pub signals: Option<super::srun_signals::Caught>,
    /// `--input`: the file for (task, node index); `None`: /dev/null.
    pub input: Option<TaskPath>,
    /// `--pty`: the one task runs on a terminal that srun's drives.
    pub pty: bool,
    /// Which tasks read srun's own standard input.
    pub stdin: StdinFor,
}

/// Which of a step's tasks read srun's standard input (`--input`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StdinFor {
    Nobody,
    /// Every task (`all`, Slurm's default).
    All,
    /// Task N alone.
    Task(u32),
}

/// A file's path for (task, node index): `--output`, `--error` or
/// `--input` with `%t` or `%n`.
pub type TaskPath = Box<dyn Fn(u32, u32) -> String>;

/// Where a step's output (or its errors) goes.
pub enum Sink {
    /// srun's own.
    Srun,
    /// One file, for every task.
    File(std::fs::File),
    /// A file per task or per node (`--output` with `%t` or `%n`): its
    /// path for (task, node index), opened when the task first writes.
    PerTask(TaskPath),
}

/// The job's nodes as its batch script sees them.
struct JobNodes {
    job: u64,
    names: Vec<String>,
    /// Where each node's task server listens, as the controller told the
    /// job (empty for a job on one node).
    servers: Vec<(String, u16)>,
    key: String,
    /// The job's own `--ntasks` (`SLURM_NTASKS`).
    ntasks: Option<u32>,
    /// An interactive allocation (`YS_ALLOCATION`): srun runs outside
    /// it, and every node, the first included, runs a task server.
    allocation: bool,
}

impl JobNodes {
    fn from_environment() -> Result<JobNodes, CliError> {
        let var = |k: &str| std::env::var(k).ok();
        let job = var("SLURM_JOB_ID")
            .and_then(|j| j.parse().ok())
            .ok_or_else(|| CliError::failed("not inside a job (no SLURM_JOB_ID)"))?;
        let list = var("SLURM_JOB_NODELIST").unwrap_or_default();
        let names = crate::model::hostlist::expand(&list)
            .map_err(|e| CliError::failed(format!("SLURM_JOB_NODELIST={list}: {e}")))?;
        let servers = steps::servers_of_this_job()
            .filter(|s| s.len() == names.len())
            .unwrap_or_default();
        let allocation = var("YS_ALLOCATION").is_some_and(|v| v == "1");
        if (names.len() > 1 || allocation) && servers.is_empty() {
            return Err(CliError::failed(format!(
                "job {job} runs on {} nodes, but its environment does not say where their task servers are (YS_NODE_ADDRS and YS_STEP_PORTS)",
                names.len()
            )));
        }
        Ok(JobNodes {
            job,
            names,
            servers,
            key: var("YS_STEP_KEY").unwrap_or_default(),
            ntasks: var("SLURM_NTASKS").and_then(|n| n.parse().ok()),
            allocation,
        })
    }
}

/// Runs a step of several tasks or nodes: the worst task's status, or
/// why it failed before any task started. Either way the step's end is
/// recorded.
pub fn run_step(mut request: StepRequest) -> Result<i32, CliError> {
    let recorded = request.recorded.take();
    let step = recorded.as_ref().map_or(0, |r| r.step);
    let result = start_and_collect(request, step);
    let ended = match &result {
        Ok(ended) => *ended,
        Err(_) => StepEnded {
            worst: 1,
            signal: 0,
            usage: StepUsage::default(),
        },
    };
    let code = ended.worst.min(255);
    if let Some(recorded) = &recorded {
        // A step whose worst task a signal ended was cancelled (0:SIG),
        // as Slurm records it.
        match ended.signal {
            0 => recorded.end(code, 0, Some(ended.usage)),
            signal => recorded.end(0, signal, Some(ended.usage)),
        }
    }
    result?;
    // The worst task's status is srun's (its output is written already).
    Ok(code)
}

/// How a step's tasks ended: the worst status (128 + the signal for a
/// task killed by one), the signal when that worst was one, and what
/// the tasks used.
#[derive(Clone, Copy, Debug)]
struct StepEnded {
    worst: i32,
    signal: i32,
    usage: StepUsage,
}

/// Starts the step's tasks, here and on the job's other nodes, and waits
/// for them; how they ended.
fn start_and_collect(mut request: StepRequest, step: u32) -> Result<StepEnded, CliError> {
    let job = JobNodes::from_environment()?;
    let counts = layout(&Shape::of(&request), &job)?;
    let orders = orders(&request, &job, &counts, step);
    let (tx, rx) = mpsc::channel();
    // The tasks of the node srun runs on start here; every other node's
    // through its task server (in an allocation srun is on none).
    let here_at = local_node(&job, counts.len());
    let local = match here_at {
        Some(i) => start_local(&orders[i], i, &tx),
        None => RunningTasks::default(),
    };
    let mut links = Vec::new();
    for (i, order) in orders.iter().enumerate() {
        if Some(i) == here_at {
            continue;
        }
        match connect(&job, i, order.clone(), &tx) {
            Ok(link) => links.push(link),
            Err(e) => {
                local.signal(libc::SIGKILL);
                for link in &mut links {
                    let _ = link.signal(libc::SIGKILL);
                }
                return Err(e);
            }
        }
    }
    drop(tx);
    let tasks = Step {
        local,
        links: Arc::new(Mutex::new(links)),
        finished: Arc::default(),
    };
    let total: u32 = counts.iter().sum();
    tasks.pass_on_signals(
        request.signals.take(),
        format!("StepId={}.{step}", job.job),
        total,
        request.quit_on_interrupt,
    );
    // The terminal goes raw while the task on one runs (put back when
    // this returns).
    let _raw = request.pty.then(|| {
        super::pty_session::relay(tasks.links.clone());
        super::pty_session::RawTerminal::enter()
    });
    if !request.pty && request.stdin != StdinFor::Nobody {
        tasks.pass_input();
    }
    let node_of = counts
        .iter()
        .enumerate()
        .flat_map(|(node, &n)| std::iter::repeat_n(node as u32, n as usize))
        .collect();
    let mut output = Output {
        label: request.label,
        unbuffered: request.unbuffered,
        partial: HashMap::new(),
        stdout: Writer::of(std::mem::replace(&mut request.stdout, Sink::Srun), false),
        stderr: Writer::of(std::mem::replace(&mut request.stderr, Sink::Srun), true),
        node_of,
    };
    let step = Identity {
        job: job.job,
        step,
        names: job.names.clone(),
    };
    Ok(tasks.collect(rx, total, &request, &mut output, &step))
}

/// Where a step of this shape runs in the job or allocation srun is in:
/// its nodes and its number of tasks, as its record gives them (`None`
/// where the shape does not fit; the step then fails with why).
pub fn planned(
    ntasks: Option<u32>,
    nodes: Option<(u32, u32)>,
    ntasks_per_node: Option<u32>,
) -> Option<(String, u32)> {
    let job = JobNodes::from_environment().ok()?;
    let shape = Shape {
        ntasks,
        nodes,
        ntasks_per_node,
        gpus_per_task: None,
    };
    let counts = layout(&shape, &job).ok()?;
    let names = crate::model::hostlist::compress(&job.names[..counts.len()]);
    Some((names, counts.iter().sum()))
}

/// What decides a step's layout, of its request.
struct Shape {
    ntasks: Option<u32>,
    nodes: Option<(u32, u32)>,
    ntasks_per_node: Option<u32>,
    gpus_per_task: Option<u32>,
}

impl Shape {
    fn of(request: &StepRequest) -> Shape {
        Shape {
            ntasks: request.ntasks,
            nodes: request.nodes,
            ntasks_per_node: request.ntasks_per_node,
            gpus_per_task: request.gpus_per_task,
        }
    }
}

/// Tasks on each of the step's nodes.
fn layout(request: &Shape, job: &JobNodes) -> Result<Vec<u32>, CliError> {
    let available = job.names.len() as u32;
    let (min, max) = request.nodes.unwrap_or((1, available));
    if min > available {
        return Err(CliError::failed(format!(
            "--nodes={min}: the job has {available} node(s) ({})",
            crate::model::hostlist::compress(&job.names)
        )));
    }
    let ntasks = request
        .ntasks
        .or(match (request.nodes, request.ntasks_per_node) {
            (None, None) => job.ntasks,
            _ => None,
        });
    let nodes = match (request.nodes, ntasks) {
        (Some(_), _) => max.min(available),
        (None, Some(n)) => n.clamp(1, available),
        (None, None) => available,
    };
    let step = TaskLayout {
        nodes_min: nodes,
        nodes_max: nodes,
        ntasks,
        ntasks_per_node: request.ntasks_per_node,
        gpus_per_task: request.gpus_per_task,
    };
    step.check()
        .map_err(|e: LayoutError| CliError::failed(e.to_string()))?;
    Ok(step.tasks_per_node(nodes))
}

/// Each node's part of the step, task ids in block order.
fn orders(request: &StepRequest, job: &JobNodes, counts: &[u32], step: u32) -> Vec<StepOrder> {
    let nodes: Vec<String> = job.names[..counts.len()].to_vec();
    let ntasks = counts.iter().sum();
    let mut next = 0;
    counts
        .iter()
        .enumerate()
        .map(|(i, &count)| {
            let tasks: Vec<u32> = (next..next + count).collect();
            let stdin_tasks = match request.stdin {
                _ if request.pty => Vec::new(),
                StdinFor::Nobody => Vec::new(),
                StdinFor::All => tasks.clone(),
                StdinFor::Task(n) => tasks.iter().copied().filter(|&t| t == n).collect(),
            };
            next += count;
            let inputs = match &request.input {
                Some(input) => tasks.iter().map(|&t| input(t, i as u32)).collect(),
                None => Vec::new(),
            };
            StepOrder {
                step,
                argv: request.argv.clone(),
                env: request.env.clone(),
                cwd: request.cwd.clone(),
                node_index: i as u32,
                tasks,
                ntasks,
                nodes: nodes.clone(),
                gpus_per_task: request.gpus_per_task,
                container: request.container.clone(),
                inputs,
                pty: request.pty.then(super::pty_session::own_size).flatten(),
                stdin_tasks,
            }
        })
        .collect()
}

type Events = Sender<(usize, Relayed)>;

/// Which of the step's first `nodes` nodes srun runs on, if any: a
/// batch job's srun runs on one of its nodes (its first, where the script
/// runs, or another, started by a task); an allocation's, on none.
fn local_node(job: &JobNodes, nodes: usize) -> Option<usize> {
    if job.allocation {
        return None;
    }
    if job.servers.is_empty() {
        // A job on one node: srun is on it.
        return Some(0);
    }
    let here = std::env::var("SLURMD_NODENAME").unwrap_or_default();
    job.names[..nodes].iter().position(|n| *n == here)
}

/// This node's tasks (the step's `index`th node), their events tagged
/// with it.
fn start_local(order: &StepOrder, index: usize, events: &Events) -> RunningTasks {
    let (tx, rx) = mpsc::channel();
    let node_env: Vec<(String, String)> = std::env::vars().collect();
    let running = tasks::start(order, &node_env, &tx);
    let events = events.clone();
    std::thread::spawn(move || {
        for event in rx {
            if events.send((index, Relayed::Task(event))).is_err() {
                return;
            }
        }
    });
    running
}

/// Node `i`'s part of the step, through its task server.
fn connect(
    job: &JobNodes,
    i: usize,
    order: StepOrder,
    events: &Events,
) -> Result<StepLink, CliError> {
    let fail = |e: crate::net::NetError| CliError::failed(format!("node {}: {e}", job.names[i]));
    let (host, port) = &job.servers[i];
    let ports: Vec<u16> = std::iter::once(*port).chain(steps::spare_ports()).collect();
    let (mut link, reader) =
        StepLink::connect((host, &ports), job.job, &job.key, START_WAIT).map_err(fail)?;
    link.launch(order).map_err(fail)?;
    let events = events.clone();
    std::thread::spawn(move || steps::forward_events(reader, i, events));
    Ok(link)
}

/// A started step: its tasks here and its links to the other nodes.
struct Step {
    local: RunningTasks,
    links: Arc<Mutex<Vec<StepLink>>>,
    /// The tasks that have ended, and their statuses.
    finished: Arc<Mutex<BTreeMap<u32, i32>>>,
}

impl Step {
    fn signal(&self, signal: i32) {
        self.local.signal(signal);
        for link in self
            .links
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter_mut()
        {
            let _ = link.signal(signal);
        }
    }

    /// Passes the signals srun gets on to the tasks (`srun_signals`).
    fn pass_on_signals(
        &self,
        caught: Option<super::srun_signals::Caught>,
        step: String,
        total: u32,
        quit_on_interrupt: bool,
    ) {
        let (local, links) = (self.local.clone(), self.links.clone());
        let finished = self.finished.clone();
        let send = move |signal| {
            local.signal(signal);
            for link in links.lock().unwrap_or_else(|p| p.into_inner()).iter_mut() {
                let _ = link.signal(signal);
            }
        };
        let states = move || {
            let finished = finished.lock().unwrap_or_else(|p| p.into_inner()).clone();
            task_states(total, &finished)
        };
        let forwarding = super::srun_signals::Forwarding {
            send: Arc::new(send),
            step,
            states: Box::new(states),
            quit_on_interrupt,
        };
        super::srun_signals::pass_on(caught, forwarding);
    }

    /// Passes srun's standard input on to the tasks that read it, here
    /// and on the other nodes, until it ends; then theirs ends.
    fn pass_input(&self) {
        let (local, links) = (self.local.clone(), self.links.clone());
        std::thread::spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = [0u8; 16 << 10];
            loop {
                match std::io::Read::read(&mut stdin, &mut buf) {
                    Ok(n) if n > 0 => {
                        local.input(&buf[..n]);
                        for link in links.lock().unwrap_or_else(|p| p.into_inner()).iter_mut() {
                            let _ = link.input(buf[..n].to_vec());
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    _ => break,
                }
            }
            local.end_input();
            for link in links.lock().unwrap_or_else(|p| p.into_inner()).iter_mut() {
                let _ = link.end_input();
            }
        });
    }

    /// The tasks that have ended, and their statuses (shared with the
    /// Ctrl-C report).
    fn ended(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, i32>> {
        self.finished.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes every task's output until all `total` tasks have ended,
    /// then says how those that failed ended; the worst exit status (128
    /// + the signal for a task killed by one).
    fn collect(
        &self,
        rx: Receiver<(usize, Relayed)>,
        total: u32,
        request: &StepRequest,
        output: &mut Output,
        step: &Identity,
    ) -> StepEnded {
        let mut usage = StepUsage::default();
        let mut endings: Endings = BTreeMap::new();
        let mut lost_nodes = std::collections::BTreeSet::new();
        let mut kill_at: Option<Instant> = None;
        // `--wait`: when the others are killed, once the first has ended.
        let mut wait_at: Option<Instant> = None;
        let mut stopping = false;
        let mut asked_why = false;
        while (self.ended().len() as u32) < total {
            let next = [kill_at, wait_at].into_iter().flatten().min();
            let wait = next.map_or(Duration::from_secs(3600), |t| {
                t.saturating_duration_since(Instant::now())
            });
            let (node, event) = match rx.recv_timeout(wait) {
                Ok(e) => e,
                Err(RecvTimeoutError::Timeout) => {
                    if let Some(after) = wait_at.take().and(request.wait_after_first) {
                        step.say_waited_out(after, total, &self.ended());
                    }
                    self.signal(libc::SIGKILL);
                    kill_at = None;
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            };
            let status = match event {
                Relayed::Task(TaskEvent::Output { task, stderr, data }) => {
                    output.write(task, stderr, &data);
                    continue;
                }
                Relayed::Task(TaskEvent::Exited {
                    task,
                    code,
                    signal,
                    usage: used,
                }) => {
                    output.flush_task(task);
                    usage.add(task, used);
                    let status = if signal != 0 { 128 + signal } else { code };
                    if signal != 0 {
                        ask_once_if_ending(&mut asked_why, stopping, step.job);
                    }
                    let first = {
                        let mut ended = self.ended();
                        ended.insert(task, status);
                        ended.len() == 1
                    };
                    endings.insert(task, (node, code, signal));
                    if first && !stopping {
                        wait_at = request.wait_after_first.map(|d| Instant::now() + d);
                    }
                    status
                }
                Relayed::Task(TaskEvent::Failed { task, why }) => {
                    super::say(&format!("srun: error: task {task}: {why}"));
                    self.ended().insert(task, 1);
                    1
                }
                Relayed::Lost(why) => {
                    if lost_nodes.insert(node) {
                        // A cancelled job's node may close it first.
                        ask_once_if_ending(&mut asked_why, stopping, step.job);
                        super::say(&format!(
                            "srun: error: lost the tasks of node {node}: {why}"
                        ));
                    }
                    continue;
                }
            };
            if status != 0 && request.kill_on_bad_exit && !stopping {
                stopping = true;
                self.signal(libc::SIGTERM);
                kill_at = Some(Instant::now() + BAD_EXIT_GRACE);
            }
        }
        output.flush_all();
        step.say_endings(&endings);
        let ended = self.ended().clone();
        let unfinished = (ended.len() as u32) < total;
        let worst = ended.values().copied().max().unwrap_or(0);
        let signal = endings
            .values()
            .filter(|&&(_, code, signal)| signal != 0 && 128 + signal == worst && code == 0)
            .map(|&(_, _, signal)| signal)
            .next()
            .unwrap_or(0);
        StepEnded {
            worst: if unfinished { worst.max(1) } else { worst },
            signal,
            usage,
        }
    }
}

/// How each task that ended did: its node's index, exit code, signal.
type Endings = BTreeMap<u32, (usize, i32, i32)>;

/// Which step srun runs, on which nodes, for what it says of its tasks.
struct Identity {
    job: u64,
    step: u32,
    names: Vec<String>,
}

impl Identity {
    /// As Slurm's srun says how its failed tasks ended, a line per node
    /// and outcome: `srun: error: gpu01: tasks 0,2-9: Killed`,
    /// `srun: error: gpu01: task 1: Exited with exit code 66`.
    fn say_endings(&self, endings: &Endings) {
        let mut groups: BTreeMap<(usize, String), Vec<u32>> = BTreeMap::new();
        for (&task, &(node, code, signal)) in endings {
            let outcome = if signal != 0 {
                signal_text(signal)
            } else if code != 0 {
                format!("Exited with exit code {code}")
            } else {
                continue;
            };
            groups.entry((node, outcome)).or_default().push(task);
        }
        for ((node, outcome), tasks) in groups {
            let name = self.names.get(node).map_or("?", String::as_str);
            super::say(&format!(
                "srun: error: {name}: {}: {outcome}",
                tasks_text(&tasks)
            ));
        }
    }

    /// `--wait`'s word when it kills the tasks still running.
    fn say_waited_out(&self, after: Duration, total: u32, ended: &BTreeMap<u32, i32>) {
        let running: Vec<u32> = (0..total).filter(|t| !ended.contains_key(t)).collect();
        let id = format!("StepId={}.{}", self.job, self.step);
        super::say(&format!("srun: First task exited {}s ago", after.as_secs()));
        super::say(&format!("srun: {id} {}: running", tasks_text(&running)));
        super::say(&format!("srun: Terminating {id}"));
    }
}

/// [`say_if_job_ending`], once, unless srun is stopping the step itself.
fn ask_once_if_ending(asked: &mut bool, stopping: bool, job: u64) {
    if !stopping && !*asked {
        *asked = true;
        say_if_job_ending(job);
    }
}

/// Says, as Slurm's srun does, that the step is being aborted when
/// its job is ending (cancelled, out of time) as a signal kills a
/// task; the controller is asked once.
pub(super) fn say_if_job_ending(job: u64) {
    use crate::model::job::JobState;
    let Ok(config) = super::load_config() else {
        return;
    };
    let asked = crate::proto::Query::Job(crate::array::JobRef::Id(job));
    let Ok(crate::proto::Reply::Jobs { jobs, .. }) = super::query("srun", &config, asked) else {
        return;
    };
    let ending = jobs
        .iter()
        .find(|v| v.job.id == job && v.step.is_none())
        .is_some_and(|v| !matches!(v.job.state, JobState::Running | JobState::Suspended));
    if ending {
        super::say(&format!(
            "srun: Job step aborted: Waiting up to {} seconds for job step to finish.",
            config.kill_wait + 2
        ));
    }
}

/// How the step's tasks stand, as Slurm's srun says it at a Ctrl-C: a
/// line for each state (`tasks 0-2: running`, `task 3: exited
/// abnormally`).
fn task_states(total: u32, finished: &BTreeMap<u32, i32>) -> Vec<String> {
    let of = |state: &dyn Fn(Option<&i32>) -> bool| -> Vec<u32> {
        (0..total).filter(|t| state(finished.get(t))).collect()
    };
    let states: [(&str, Vec<u32>); 3] = [
        ("running", of(&|s| s.is_none())),
        ("exited", of(&|s| s == Some(&0))),
        ("exited abnormally", of(&|s| s.is_some_and(|&s| s != 0))),
    ];
    states
        .into_iter()
        .filter(|(_, tasks)| !tasks.is_empty())
        .map(|(state, tasks)| format!("{}: {state}", tasks_text(&tasks)))
        .collect()
}

/// `task 3` or `tasks 0,2-9`.
fn tasks_text(tasks: &[u32]) -> String {
    let list = crate::array::format_ranges(tasks);
    if tasks.len() == 1 {
        format!("task {list}")
    } else {
        format!("tasks {list}")
    }
}

/// The C library's name for a signal (`Segmentation fault`, `Killed`).
fn signal_text(signal: i32) -> String {
    // SAFETY: strsignal returns a string the C library owns, copied at once.
    let text = unsafe { libc::strsignal(signal) };
    if text.is_null() {
        return format!("signal {signal}");
    }
    unsafe { std::ffi::CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned()
}

/// srun's output: each task's streams line by line, so that tasks'
/// lines never mix (with `--label`, each prefixed with its task id);
/// with `--unbuffered`, as it comes.
struct Output {
    label: bool,
    unbuffered: bool,
    partial: HashMap<(u32, bool), Vec<u8>>,
    stdout: Writer,
    stderr: Writer,
    /// Each task's node index in the step (tasks in block order).
    node_of: Vec<u32>,
}

/// Where output goes: one writer, or a file per task opened as needed.
enum Writer {
    One(Box<dyn Write>),
    PerTask {
        path: TaskPath,
        files: HashMap<u32, Option<std::fs::File>>,
    },
}

impl Writer {
    fn of(sink: Sink, stderr: bool) -> Writer {
        match sink {
            Sink::Srun if stderr => Writer::One(Box::new(std::io::stderr())),
            Sink::Srun => Writer::One(Box::new(std::io::stdout())),
            Sink::File(f) => Writer::One(Box::new(f)),
            Sink::PerTask(path) => Writer::PerTask {
                path,
                files: HashMap::new(),
            },
        }
    }

    /// Writes task `task`'s `data` (its node's index `node`); a file
    /// that cannot be opened is said once, and its output dropped.
    fn write(&mut self, task: u32, node: u32, data: &[u8]) {
        let to: &mut dyn Write = match self {
            Writer::One(w) => w.as_mut(),
            Writer::PerTask { path, files } => {
                let file = files.entry(task).or_insert_with(|| {
                    let name = path(task, node);
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&name)
                        .map_err(|e| super::say(&format!("srun: error: cannot open {name}: {e}")))
                        .ok()
                });
                match file {
                    Some(f) => f,
                    None => return,
                }
            }
        };
        let _ = to.write_all(data).and_then(|()| to.flush());
    }
}

impl Output {
    fn write(&mut self, task: u32, stderr: bool, data: &[u8]) {
        if self.unbuffered && !self.label {
            self.emit(task, stderr, data);
            return;
        }
        let mut buffer = self.partial.remove(&(task, stderr)).unwrap_or_default();
        buffer.extend_from_slice(data);
        while let Some(end) = buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            self.emit_line(task, stderr, &line);
        }
        if buffer.len() > MAX_PARTIAL_LINE {
            // A very long line goes out in pieces.
            let piece = std::mem::take(&mut buffer);
            self.emit_line(task, stderr, &piece);
        }
        self.partial.insert((task, stderr), buffer);
    }

    /// What is left of a task's last line once it has ended.
    fn flush_task(&mut self, task: u32) {
        for stderr in [false, true] {
            if let Some(line) = self
                .partial
                .remove(&(task, stderr))
                .filter(|r| !r.is_empty())
            {
                self.emit_line(task, stderr, &line);
            }
        }
    }

    fn emit_line(&mut self, task: u32, stderr: bool, line: &[u8]) {
        if self.label {
            let mut text = labelled(task, line);
            if !text.ends_with(b"\n") {
                text.push(b'\n');
            }
            self.emit(task, stderr, &text);
        } else {
            self.emit(task, stderr, line);
        }
    }

    fn flush_all(&mut self) {
        let tasks: Vec<u32> = self.partial.keys().map(|(t, _)| *t).collect();
        for task in tasks {
            self.flush_task(task);
        }
    }

    fn emit(&mut self, task: u32, stderr: bool, data: &[u8]) {
        let node = self.node_of.get(task as usize).copied().unwrap_or(0);
        let to = if stderr {
            &mut self.stderr
        } else {
            &mut self.stdout
        };
        to.write(task, node, data);
    }
}

fn labelled(task: u32, line: &[u8]) -> Vec<u8> {
    let mut text = format!("{task}: ").into_bytes();
    text.extend_from_slice(line);
    text
}

/// A step as the controller recorded it: its number in the job's run.
pub struct RecordedStep {
    job: u64,
    restart: u32,
    pub step: u32,
}

/// How long srun waits for the controller to number its step before it
/// runs it unrecorded (the request stays in the spool and is applied).
const RECORD_WAIT: Duration = Duration::from_secs(5);

impl RecordedStep {
    /// Asks the controller for the next step of `job`, running `name` on
    /// `nodes` with `tasks` tasks. A step that cannot be recorded runs
    /// all the same, as step 0, and srun says so.
    pub fn begin(job: u64, name: &str, nodes: &str, tasks: u32) -> Option<RecordedStep> {
        let control = Control::StepBegin {
            job_id: job,
            name: name.to_string(),
            nodes: nodes.to_string(),
            tasks,
            // Outside its job (in an allocation) srun is no process of
            // the job's for `scancel N.S` to signal.
            pid: if std::env::var("YS_ALLOCATION").is_ok_and(|v| v == "1") {
                0
            } else {
                std::process::id()
            },
        };
        let asked = super::load_config()
            .and_then(|config| super::ask_within(&config, Request::Control(control), RECORD_WAIT));
        match asked {
            Ok(Reply::StepBegun { step, restart }) => Some(RecordedStep { job, restart, step }),
            Ok(Reply::Rejected { error }) => {
                super::warn("srun", &format!("the step is not recorded: {error}"));
                None
            }
            Ok(other) => {
                super::warn(
                    "srun",
                    &format!("the step is not recorded: unexpected reply {other:?}"),
                );
                None
            }
            Err(e) => {
                super::warn("srun", &format!("the step is not recorded: {}", e.message));
                None
            }
        }
    }

    /// Reports the step's end: its exit code, or the signal that ended
    /// it, and what its tasks used where that was measured.
    pub fn end(&self, code: i32, signal: i32, usage: Option<StepUsage>) {
        let control = Control::StepEnd {
            job_id: self.job,
            restart: self.restart,
            step: self.step,
            exit_code: code,
            signal,
            usage,
        };
        let asked = super::load_config()
            .and_then(|config| super::ask_within(&config, Request::Control(control), RECORD_WAIT));
        if let Err(e) = asked {
            super::warn(
                "srun",
                &format!("the step's end is not recorded yet: {}", e.message),
            );
        }
    }
}
