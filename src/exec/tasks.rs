//! The tasks of a step on this node: what `srun` starts inside a job. Each
//! task is a child process with the step's command and environment, this
//! node's own GPUs and names, and its place in the step (`SLURM_PROCID`,
//! `SLURM_LOCALID`, `SLURM_NODEID`). Its output and its end come back as
//! events on a channel, so that the same code serves `srun` on the batch
//! node and the task server on every other node of the job.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc::Sender;

use std::os::fd::AsFd;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::container;
use super::container::steps::{
    ContainerStep, ContainerStepError, ContainerStepOrder, StepSignaller,
};

/// One step's tasks on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepOrder {
    pub step: u32,
    pub argv: Vec<String>,
    /// The environment `srun` runs with; this node's own variables (its
    /// GPUs, its name) replace those of the node `srun` runs on.
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// This node's place among the step's nodes.
    pub node_index: u32,
    /// The step's task ids on this node, in order (`SLURM_PROCID`).
    pub tasks: Vec<u32>,
    pub ntasks: u32,
    pub nodes: Vec<String>,
    /// `--gpus-per-task`: each task sees only its own share of the
    /// node's GPUs.
    pub gpus_per_task: Option<u32>,
    /// `--container-image` and the other `--container-*` options: each
    /// task runs in its own container of that image, made by this node's
    /// supervisor of the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<crate::model::container::ContainerRequest>,
    /// `--input`: the file each task on this node reads (in `tasks`'s
    /// order; relative to `cwd`); none: /dev/null.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<String>,
    /// `--pty`: the step's one task runs on a pseudo-terminal of this
    /// size, which srun's terminal drives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<super::terminal::TerminalSize>,
    /// The tasks on this node that read srun's own standard input
    /// (`--input=all`, the default, or `--input=N`), sent over as
    /// [`RunningTasks::input`]; the others read `inputs` or /dev/null.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stdin_tasks: Vec<u32>,
}

/// What a task did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskEvent {
    Output {
        task: u32,
        stderr: bool,
        data: Vec<u8>,
    },
    /// Its process ended: its exit code, or the signal that killed it,
    /// and what it used (nothing measured on a terminal or in a
    /// container).
    Exited {
        task: u32,
        code: i32,
        signal: i32,
        #[serde(default)]
        usage: crate::model::step::TaskUsage,
    },
    /// It could not start.
    Failed { task: u32, why: String },
}

impl TaskEvent {
    pub fn task(&self) -> u32 {
        match self {
            TaskEvent::Output { task, .. }
            | TaskEvent::Exited { task, .. }
            | TaskEvent::Failed { task, .. } => *task,
        }
    }
}

/// The variables that describe the node a task runs on: taken from the
/// node's own environment, never from the one `srun` sends.
const NODE_VARIABLES: [&str; 8] = [
    "CUDA_VISIBLE_DEVICES",
    "SLURM_JOB_GPUS",
    "YS_JOB_GPUS",
    "GPU_DEVICE_ORDINAL",
    "SLURMD_NODENAME",
    "SLURM_NODEID",
    "YS_STEP_KEY",
    container::steps::SOCKET_VARIABLE,
];

/// Node variables that are for the task's starter, not the task. The
/// step key is the task's too: a task may start a step of its own (srun
/// in a task, on whichever node it runs), as in Slurm; it is the job's
/// user's, as the batch script's is.
const STARTER_VARIABLES: [&str; 1] = [container::steps::SOCKET_VARIABLE];

/// The tasks started, to signal: bare ones by process group, those in
/// containers through the supervisor.
#[derive(Clone, Default)]
pub struct RunningTasks {
    groups: Vec<i32>,
    containers: Vec<Arc<StepSignaller>>,
    /// The terminal of a task on one (`--pty`).
    terminal: Option<Arc<super::terminal::Terminal>>,
    /// The standard inputs of the tasks that read srun's.
    stdins: Arc<std::sync::Mutex<Vec<std::process::ChildStdin>>>,
}

impl RunningTasks {
    /// Sends `signal` to every task's process group (what it started
    /// too), or to its container; those already gone are skipped.
    pub fn signal(&self, signal: i32) {
        for &group in &self.groups {
            // SAFETY: kill(2) with a negative pid signals a process group.
            unsafe {
                libc::kill(-group, signal);
            }
        }
        for container in &self.containers {
            container.signal(signal);
        }
    }

    /// What srun read on its standard input (what the user typed, on a
    /// terminal): for the task on a terminal, or the tasks that read it.
    pub fn input(&self, data: &[u8]) {
        if let Some(t) = &self.terminal {
            t.input(data);
        }
        let mut stdins = self.stdins.lock().unwrap_or_else(|p| p.into_inner());
        // A task that stopped reading drops out; the others go on.
        stdins.retain_mut(|stdin| std::io::Write::write_all(stdin, data).is_ok());
    }

    /// srun's standard input ended: so do the tasks' that read it.
    pub fn end_input(&self) {
        self.stdins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// The user's terminal's new size, for the task on a terminal.
    pub fn resize(&self, size: super::terminal::TerminalSize) {
        if let Some(t) = &self.terminal {
            t.resize(size);
        }
    }
}

/// A task started: its process group (and the input it reads from srun,
/// if it does), or its container.
enum Started {
    Group(i32, Option<std::process::ChildStdin>),
    Container(Arc<StepSignaller>),
    Terminal(i32, Arc<super::terminal::Terminal>),
}

/// Starts `order`'s tasks here, with `node_env` (this node's part's
/// environment) for the node's own variables; their output and ends go to
/// `events`.
pub fn start(
    order: &StepOrder,
    node_env: &[(String, String)],
    events: &Sender<TaskEvent>,
) -> RunningTasks {
    let mut running = RunningTasks::default();
    let visible: Vec<String> = node_env
        .iter()
        .find(|(k, _)| k == "CUDA_VISIBLE_DEVICES")
        .map(|(_, v)| {
            v.split(',')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    for (localid, &task) in order.tasks.iter().enumerate() {
        let env = task_environment(order, node_env, &visible, task, localid as u32);
        let started =
            input_of(order, localid, task).and_then(|stdin| match (&order.container, order.pty) {
                (None, Some(size)) => spawn_on_terminal(order, env, task, size, events.clone()),
                (None, None) => spawn(order, (env, stdin), task, events.clone()),
                (Some(request), _) => {
                    let socket = node_env
                        .iter()
                        .find(|(k, _)| k == container::steps::SOCKET_VARIABLE)
                        .map(|(_, v)| v.as_str());
                    // srun's input is not passed into containers.
                    let stdin = match stdin {
                        Some(file) => file,
                        None => std::fs::File::open("/dev/null")?,
                    };
                    let stdio = (env, stdin);
                    spawn_in_container(order, request, socket, stdio, task, events.clone())
                        .map(Started::Container)
                }
            });
        match started {
            Ok(Started::Group(group, stdin)) => {
                running.groups.push(group);
                if let Some(stdin) = stdin {
                    running
                        .stdins
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(stdin);
                }
            }
            Ok(Started::Container(c)) => running.containers.push(c),
            Ok(Started::Terminal(group, terminal)) => {
                running.groups.push(group);
                running.terminal = Some(terminal);
            }
            Err(e) => {
                let program = order.argv.first().map_or("", String::as_str);
                let why = format!("{program}: {e}");
                let _ = events.send(TaskEvent::Failed { task, why });
            }
        }
    }
    running
}

/// What the `localid`th task on this node (task `task`) reads: srun's
/// own input (`None`: a pipe srun's input is written to), its `--input`
/// file, opened here (with the rights of whoever starts the task: the
/// job's user), or /dev/null.
fn input_of(
    order: &StepOrder,
    localid: usize,
    task: u32,
) -> std::io::Result<Option<std::fs::File>> {
    if order.stdin_tasks.contains(&task) {
        return Ok(None);
    }
    let Some(name) = order.inputs.get(localid) else {
        return std::fs::File::open("/dev/null").map(Some);
    };
    let path = order.cwd.join(name);
    std::fs::File::open(&path)
        .map(Some)
        .map_err(|e| std::io::Error::new(e.kind(), format!("--input {}: {e}", path.display())))
}

/// The environment of task `task`, the `localid`th on this node.
fn task_environment(
    order: &StepOrder,
    node_env: &[(String, String)],
    visible: &[String],
    task: u32,
    localid: u32,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = order
        .env
        .iter()
        .filter(|(k, _)| !NODE_VARIABLES.contains(&k.as_str()))
        .cloned()
        .collect();
    env.extend(
        node_env
            .iter()
            .filter(|(k, _)| {
                NODE_VARIABLES.contains(&k.as_str()) && !STARTER_VARIABLES.contains(&k.as_str())
            })
            .cloned(),
    );
    let mut set = |k: &str, v: String| {
        env.retain(|(name, _)| name != k);
        env.push((k.to_string(), v));
    };
    let nodelist = crate::model::hostlist::compress(&order.nodes);
    set("SLURM_PROCID", task.to_string());
    set("SLURM_LOCALID", localid.to_string());
    set("SLURM_NODEID", order.node_index.to_string());
    set("SLURM_STEP_ID", order.step.to_string());
    set("SLURM_STEPID", order.step.to_string());
    set("SLURM_STEP_NUM_TASKS", order.ntasks.to_string());
    set("SLURM_STEP_NUM_NODES", order.nodes.len().to_string());
    set("SLURM_STEP_NODELIST", nodelist);
    // Where the task is in the network's topology: its node, in Slurm's
    // flat one (no switches are declared).
    if let Some(node) = order.nodes.get(order.node_index as usize) {
        set("SLURM_TOPOLOGY_ADDR", node.clone());
        set("SLURM_TOPOLOGY_ADDR_PATTERN", "node".to_string());
    }
    if let Some(g) = order.gpus_per_task {
        let from = (localid * g) as usize;
        let mine: Vec<&str> = visible
            .iter()
            .skip(from)
            .take(g as usize)
            .map(String::as_str)
            .collect();
        set("CUDA_VISIBLE_DEVICES", mine.join(","));
    }
    env
}

/// The umask a task runs with: srun's, which it sends as `SLURM_UMASK`
/// (octal), as Slurm's tasks do.
pub fn umask_of(env: &[(String, String)]) -> Option<libc::mode_t> {
    let (_, value) = env.iter().find(|(k, _)| k == "SLURM_UMASK")?;
    libc::mode_t::from_str_radix(value.trim(), 8)
        .ok()
        .filter(|m| *m <= 0o777)
}

/// Starts one task in a process group of its own; its output is read,
/// and its end reported, by a thread of its own.
fn spawn(
    order: &StepOrder,
    (env, stdin): (Vec<(String, String)>, Option<std::fs::File>),
    task: u32,
    events: Sender<TaskEvent>,
) -> std::io::Result<Started> {
    let Some(program) = order.argv.first() else {
        return Err(std::io::Error::other("no command to run"));
    };
    let mask = umask_of(&env);
    // A working directory the task may not enter is left for /tmp, said on
    // its standard error, as Slurm's step daemon does.
    let cwd = match nix::unistd::access(&order.cwd, nix::unistd::AccessFlags::X_OK) {
        Ok(()) => order.cwd.clone(),
        Err(e) => {
            let _ = events.send(TaskEvent::Output {
                task,
                stderr: true,
                data: format!(
                    "ysched: error: couldn't chdir to `{}': {}: going to /tmp instead\n",
                    order.cwd.display(),
                    e.desc()
                )
                .into_bytes(),
            });
            std::path::PathBuf::from("/tmp")
        }
    };
    let mut command = Command::new(program);
    command
        .args(&order.argv[1..])
        .env_clear()
        .envs(env)
        .current_dir(&cwd)
        .stdin(stdin.map_or_else(Stdio::piped, Stdio::from))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    super::task_pid::set_on(&mut command, mask)?;
    let mut child = command.spawn()?;
    let group = child.id() as i32;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    std::thread::spawn(move || {
        let err_events = events.clone();
        let err_reader =
            stderr.map(|s| std::thread::spawn(move || pump(s, task, true, &err_events)));
        if let Some(s) = stdout {
            pump(s, task, false, &events);
        }
        if let Some(r) = err_reader {
            let _ = r.join();
        }
        let measured = super::process::wait_measured(&child);
        let _ = events.send(ended(task, measured));
        // Reaped above: dropping the handle waits for nothing.
        drop(child);
    });
    Ok(Started::Group(group, stdin))
}

/// Starts one task on a terminal of `size` (`--pty`); its output and
/// its end go to `events`.
fn spawn_on_terminal(
    order: &StepOrder,
    env: Vec<(String, String)>,
    task: u32,
    size: super::terminal::TerminalSize,
    events: Sender<TaskEvent>,
) -> std::io::Result<Started> {
    let what = super::terminal::TerminalCommand {
        argv: &order.argv,
        env,
        cwd: &order.cwd,
        size,
    };
    let output = events.clone();
    let (group, terminal) = super::terminal::spawn(
        what,
        move |data| {
            output
                .send(TaskEvent::Output {
                    task,
                    stderr: false,
                    data,
                })
                .is_ok()
        },
        move |status| {
            let _ = events.send(ended(task, status.map(|s| (s, Default::default()))));
        },
    )?;
    Ok(Started::Terminal(group, terminal))
}

/// How task `task` ended, as an event.
fn ended(
    task: u32,
    status: std::io::Result<(std::process::ExitStatus, crate::model::step::TaskUsage)>,
) -> TaskEvent {
    match status {
        Ok((status, usage)) => TaskEvent::Exited {
            task,
            code: status.code().unwrap_or(0),
            signal: status.signal().unwrap_or(0),
            usage,
        },
        Err(e) => TaskEvent::Failed {
            task,
            why: format!("cannot wait for it: {e}"),
        },
    }
}

/// Starts one task in a container through the job's supervisor (named
/// by `socket`); its output is read, and its end reported, by a thread of
/// its own.
fn spawn_in_container(
    order: &StepOrder,
    request: &crate::model::container::ContainerRequest,
    socket: Option<&str>,
    (env, stdin): (Vec<(String, String)>, std::fs::File),
    task: u32,
    events: Sender<TaskEvent>,
) -> std::io::Result<Arc<StepSignaller>> {
    let socket = socket.ok_or_else(|| std::io::Error::other(ContainerStepError::NotHere))?;
    let (out_read, out_write) = std::io::pipe()?;
    let (err_read, err_write) = std::io::pipe()?;
    let container_order = ContainerStepOrder {
        request: request.clone(),
        argv: order.argv.clone(),
        env,
        cwd: order.cwd.clone(),
    };
    let stdio = [stdin.as_fd(), out_write.as_fd(), err_write.as_fd()];
    let step =
        ContainerStep::start(socket, &container_order, stdio).map_err(std::io::Error::other)?;
    drop((out_write, err_write));
    let signaller = Arc::new(step.signaller().map_err(std::io::Error::other)?);
    std::thread::spawn(move || {
        let err_events = events.clone();
        let err_reader = std::thread::spawn(move || pump(err_read, task, true, &err_events));
        pump(out_read, task, false, &events);
        let _ = err_reader.join();
        let event = match step.wait() {
            Ok((code, signal)) => TaskEvent::Exited {
                task,
                code,
                signal,
                usage: Default::default(),
            },
            Err(e) => TaskEvent::Failed {
                task,
                why: e.to_string(),
            },
        };
        let _ = events.send(event);
    });
    Ok(signaller)
}

/// Sends what `from` gives as output events until it ends.
fn pump(mut from: impl Read, task: u32, stderr: bool, events: &Sender<TaskEvent>) {
    let mut buf = vec![0u8; 16 << 10];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let data = buf[..n].to_vec();
                if events
                    .send(TaskEvent::Output { task, stderr, data })
                    .is_err()
                {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(argv: &[&str], tasks: Vec<u32>, gpus_per_task: Option<u32>) -> StepOrder {
        StepOrder {
            step: 0,
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("CUDA_VISIBLE_DEVICES".into(), "elsewhere".into()),
            ],
            cwd: "/".into(),
            node_index: 1,
            tasks,
            ntasks: 4,
            nodes: vec!["gpu01".into(), "gpu02".into()],
            gpus_per_task,
            container: None,
            inputs: Vec::new(),
            pty: None,
            stdin_tasks: Vec::new(),
        }
    }

    /// Every event until each task has ended, per task: output, and how
    /// it ended.
    fn run(order: &StepOrder, node_env: &[(String, String)]) -> Vec<(u32, String, i32)> {
        let (tx, rx) = std::sync::mpsc::channel();
        start(order, node_env, &tx);
        drop(tx);
        let mut seen: std::collections::BTreeMap<u32, (String, i32)> = Default::default();
        for event in rx {
            let entry = seen.entry(event.task()).or_default();
            match event {
                TaskEvent::Output { data, .. } => entry.0 += &String::from_utf8_lossy(&data),
                TaskEvent::Exited { code, .. } => entry.1 = code,
                TaskEvent::Failed { why, .. } => entry.0 += &why,
            }
        }
        seen.into_iter().map(|(t, (o, c))| (t, o, c)).collect()
    }

    #[test]
    fn each_task_knows_its_place_and_its_own_gpus() {
        let node_env = vec![("CUDA_VISIBLE_DEVICES".to_string(), "0,1,2,3".to_string())];
        let script = "echo $SLURM_PROCID/$SLURM_LOCALID/$SLURM_NODEID/$SLURM_STEP_NUM_TASKS:$CUDA_VISIBLE_DEVICES; exit $SLURM_LOCALID";
        let o = order(&["/bin/sh", "-c", script], vec![2, 3], Some(2));
        assert_eq!(
            run(&o, &node_env),
            vec![
                (2, "2/0/1/4:0,1\n".to_string(), 0),
                (3, "3/1/1/4:2,3\n".to_string(), 1)
            ]
        );
        let o = order(
            &["/bin/sh", "-c", "echo $CUDA_VISIBLE_DEVICES"],
            vec![0],
            None,
        );
        assert_eq!(
            run(&o, &node_env)[0].1,
            "0,1,2,3\n",
            "the node's own, not srun's"
        );
        let o = order(&["/no/such/program"], vec![0], None);
        assert!(run(&o, &node_env)[0].1.contains("/no/such/program"));
    }

    #[test]
    fn a_step_in_a_container_where_the_node_runs_none_fails_with_why() {
        let mut o = order(&["/bin/true"], vec![0], None);
        o.container =
            Some(crate::model::container::ContainerRequest::new("localhost/yolo:1").unwrap());
        let (task, why, _) = &run(&o, &[])[0];
        assert_eq!(*task, 0);
        assert!(
            why.contains("this node runs no steps in containers"),
            "{why}"
        );
        let here = vec![(
            container::steps::SOCKET_VARIABLE.to_string(),
            "ysched/job-0/steps-none".to_string(),
        )];
        let (_, why, _) = &run(&o, &here)[0];
        assert!(why.contains("cannot reach the job's supervisor"), "{why}");
    }
}
