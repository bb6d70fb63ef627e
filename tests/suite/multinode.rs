//! Jobs over several nodes of a pool (network namespaces, as in `pool`):
//! one job holds GPUs on three nodes at once, its batch script runs on the
//! first, `srun` starts its tasks on all three (each as the job's user, in
//! the job's cgroup on its node, with its own GPUs and place), and a node
//! lost under it ends the whole job NODE_FAIL with nothing of it left
//! running anywhere. Root only, as `pool`.

use std::time::{Duration, Instant};

use crate::common::{self, bin_dir, stderr};
use crate::pool::{ip, lines_of, Pool, LONG};

/// A directory with `srun` (the compat layer), for job scripts' PATH.
fn shims(p: &Pool) -> String {
    let dir = p.controller.dir.path().join("srun-shims");
    let _ = std::fs::create_dir(&dir);
    let _ = std::os::unix::fs::symlink(bin_dir().join("ysched-slurm"), dir.join("srun"));
    let _ = std::os::unix::fs::symlink(bin_dir().join("ysched-slurm"), dir.join("scontrol"));
    let _ = std::os::unix::fs::symlink(bin_dir().join("ysched-slurm"), dir.join("salloc"));
    dir.display().to_string()
}

/// The processes left in the job cgroups under each agent's parent, in
/// every hierarchy (cgroup v2's one, or v1's per controller).
fn processes_left(p: &Pool) -> Vec<String> {
    let root = std::path::Path::new("/sys/fs/cgroup");
    let mut parents = Vec::new();
    for agent in &p.agents {
        parents.push(root.join(agent.cgroup_parent()));
        for hierarchy in std::fs::read_dir(root).into_iter().flatten().flatten() {
            parents.push(hierarchy.path().join(agent.cgroup_parent()));
        }
    }
    let mut left = Vec::new();
    for parent in parents {
        let Ok(groups) = std::fs::read_dir(&parent) else {
            continue;
        };
        for group in groups.flatten().filter(|g| g.path().is_dir()) {
            let procs =
                std::fs::read_to_string(group.path().join("cgroup.procs")).unwrap_or_default();
            left.extend(
                procs
                    .lines()
                    .map(|pid| format!("{}: {pid}", group.path().display())),
            );
        }
    }
    left
}

macro_rules! require_root_for_nodes {
    () => {
        if !common::is_root() {
            common::skip(
                module_path!(),
                "multi-node tests need root (network namespaces, cgroups)",
            );
            return;
        }
    };
}

#[test]
fn a_three_node_job_runs_srun_tasks_on_every_node_with_their_own_place_and_gpus() {
    require_root_for_nodes!();
    let p = Pool::new(3, "");
    let path = shims(&p);
    p.controller.script(
        "ddp.sh",
        &format!(
            "#!/bin/sh\n#SBATCH -N 3 --gres=gpu:2 --ntasks-per-node=2 --gpus-per-task=1 -t 5\n\
             export PATH={path}:$PATH\n\
             echo \"list=$SLURM_JOB_NODELIST nodes=$SLURM_NNODES ntasks=$SLURM_NTASKS per_node=$SLURM_TASKS_PER_NODE\"\n\
             echo \"hosts=$(scontrol show hostnames $SLURM_JOB_NODELIST | tr '\\n' ' ')\"\n\
             srun --label sh -c 'echo \"rank=$SLURM_PROCID local=$SLURM_LOCALID node=$SLURM_NODEID on=$SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES world=$SLURM_NTASKS master=$MASTER_ADDR:$MASTER_PORT cg=$(grep -c job_$SLURM_JOB_ID /proc/self/cgroup)\"' | sed 's/cg=[1-9][0-9]*$/cg=yes/'\n\
             echo srun=$?\n\
             srun --kill-on-bad-exit=0 -n 3 sh -c 'exit $SLURM_PROCID'\n\
             echo worst=$?\n\
             srun -K -n 2 sh -c '[ $SLURM_PROCID = 0 ] && exit 3; exec sleep 60'\n\
             echo bad=$?\n\
             srun -N 2 -n 2 sh -c 'if [ $SLURM_NODEID = 1 ]; then srun -N 2 -n 2 --label sh -c \"echo inner on=\\$SLURMD_NODENAME\"; fi'\n\
             echo nested=$?\n"
        ),
    );
    let id = p.controller.submit(&["ddp.sh"]);
    assert_eq!(
        p.controller.wait_done(id, LONG),
        "COMPLETED",
        "{}",
        p.controller.log()
    );
    assert_eq!(p.controller.field(id, "NodeList"), "gpu[10-12]");
    let lines = lines_of(&p, &format!("ys-{id}.out"));
    let text = lines.join("\n");
    assert!(
        text.contains("list=gpu[10-12] nodes=3 ntasks=6 per_node=2(x3)"),
        "{text}"
    );
    assert!(text.contains("hosts=gpu10 gpu11 gpu12 "), "{text}");
    let master = p.net_address(0);
    // The rendezvous port: the controller's choice for this run, from
    // [pool] step_ports, the same on every node.
    let port: u16 = text
        .split(&format!("master={master}:"))
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no master={master}:PORT in:\n{text}"));
    assert!((20_000..=32_767).contains(&port), "{port}");
    for rank in 0..6u32 {
        let (node, local) = (rank / 2, rank % 2);
        let line = format!(
            "{rank}: rank={rank} local={local} node={node} on=gpu1{node} gpus={local} world=6 master={master}:{port} cg=yes"
        );
        assert!(lines.contains(&line), "no {line:?} in:\n{text}");
    }
    assert!(text.contains("srun=0"), "{text}");
    assert!(
        text.contains("worst=2"),
        "srun exits as its worst task:\n{text}"
    );
    assert!(
        text.contains("bad=143"),
        "a task that fails stops the others (SIGTERM):\n{text}"
    );
    // srun in a task on the second node: its tasks start there and, through
    // the first node's task server, there.
    assert!(
        lines.contains(&"0: inner on=gpu10".to_string())
            && lines.contains(&"1: inner on=gpu11".to_string()),
        "{text}"
    );
    assert!(text.contains("nested=0"), "{text}");
    assert!(processes_left(&p).is_empty(), "{:?}", processes_left(&p));
}

/// The TCP sockets listening in node `i`'s namespace: `ADDRESS:PORT
/// PROGRAM` each.
fn listening_on(p: &Pool, i: usize) -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", p.agents[i].ns(), "ss", "-tlnpH"])
        .output()
        .unwrap();
    stdout_of(&out)
        .lines()
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            format!(
                "{} {}",
                words.get(3).unwrap_or(&""),
                words.get(5).unwrap_or(&"")
            )
        })
        .collect()
}

fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn srun_runs_on_a_pool_whose_nodes_are_unevenly_busy_from_the_first_node_of_the_list() {
    require_root_for_nodes!();
    let p = Pool::new(3, "");
    let path = shims(&p);
    // gpu11 is the fullest node (one of its two GPUs taken), which the
    // scheduler places first: the batch script must still run on the
    // list's first node, and srun pair each name with its own address.
    let busy = p.controller.submit(&[
        "-w",
        "gpu11",
        "--gres=gpu:1",
        "-t",
        "5",
        "--wrap",
        "sleep 300",
    ]);
    p.controller.wait_state(busy, "RUNNING", LONG);
    p.controller.script(
        "spread.sh",
        &format!(
            "#!/bin/sh\n#SBATCH -N 3 --gres=gpu:1 -t 5\n\
             export PATH={path}:$PATH\n\
             echo batch=$SLURMD_NODENAME list=$SLURM_JOB_NODELIST\n\
             srun --label sh -c 'echo on=$SLURMD_NODENAME'\n\
             echo srun=$?\n\
             srun -w gpu99 sh -c 'echo ran-outside' 2>&1\n\
             echo outside=$?\n\
             i=0; while [ ! -e checked ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done\n"
        ),
    );
    let id = p.controller.submit(&["spread.sh"]);
    let out = format!("ys-{id}.out");
    let deadline = Instant::now() + LONG;
    while !lines_of(&p, &out).iter().any(|l| l.starts_with("srun=")) {
        assert!(
            Instant::now() < deadline,
            "{:?}\n{}",
            lines_of(&p, &out),
            p.controller.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The task servers listen on their node's pool address alone, on the
    // port the controller chose, never on every address.
    for i in 1..3 {
        let servers: Vec<String> = listening_on(&p, i)
            .into_iter()
            .filter(|l| l.contains("ysstepd"))
            .collect();
        assert_eq!(servers.len(), 1, "node {i}: {servers:?}");
        assert!(
            servers[0].starts_with(&format!("{}:", p.net_address(i))),
            "node {i}: {servers:?}"
        );
    }
    std::fs::write(p.controller.work.join("checked"), "").unwrap();
    assert_eq!(p.controller.wait_done(id, LONG), "COMPLETED");
    let lines = lines_of(&p, &out);
    assert_eq!(lines[0], "batch=gpu10 list=gpu[10-12]", "{lines:?}");
    for node in 0..3 {
        let line = format!("{node}: on=gpu1{node}");
        assert!(lines.contains(&line), "no {line:?} in {lines:?}");
    }
    assert!(lines.contains(&"srun=0".to_string()), "{lines:?}");
    // A node outside the allocation is refused, once said.
    assert!(lines.contains(&"outside=1".to_string()), "{lines:?}");
    assert!(
        lines.contains(&format!(
            "srun: error: -w gpu99: gpu99 not in job {id}'s allocation (gpu[10-12]); a step runs on its job's nodes"
        )),
        "{lines:?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("ran-outside")),
        "{lines:?}"
    );
}

#[test]
fn a_node_lost_mid_job_ends_it_node_fail_with_nothing_left_on_any_node() {
    require_root_for_nodes!();
    let p = Pool::new(3, "");
    let path = shims(&p);
    p.controller.script(
        "long.sh",
        &format!(
            "#!/bin/sh\n#SBATCH -N 3 --gres=gpu:1 --no-requeue -t 5\n\
             export PATH={path}:$PATH\n\
             srun sh -c 'echo up $SLURM_PROCID >> up.log; sleep 300'\n"
        ),
    );
    let id = p.controller.submit(&["long.sh"]);
    p.controller.wait_state(id, "RUNNING", LONG);
    let deadline = Instant::now() + LONG;
    while lines_of(&p, "up.log").len() < 3 {
        assert!(
            Instant::now() < deadline,
            "tasks did not start: {:?}",
            lines_of(&p, "up.log")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    ip(&["link", "set", &p.net.veth(2), "down"]);
    assert_eq!(p.controller.wait_done(id, LONG), "NODE_FAIL");
    let reason = p.controller.field(id, "Reason");
    assert!(reason.contains("gpu12 was lost"), "{reason}");
    // The lost node's agent froze its part when its lease ran out, and
    // stops it when the controller, heard again, says it is not current;
    // the others were stopped by the controller.
    ip(&["link", "set", &p.net.veth(2), "up"]);
    p.wait_states(&[(2, "idle")]);
    let deadline = Instant::now() + LONG;
    while !processes_left(&p).is_empty() {
        assert!(Instant::now() < deadline, "left: {:?}", processes_left(&p));
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = stderr;
}

#[test]
fn a_pool_too_small_is_refused_with_the_reason() {
    require_root_for_nodes!();
    let mut p = Pool::new(2, "");
    let out = p.controller.run("ysbatch", &["-N", "3", "--wrap", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("--nodes=3: the pool has 2 node(s) (gpu[10-11])"),
        "{}",
        stderr(&out)
    );
    let out = std::process::Command::new(bin_dir().join("ysched-slurm"))
        .arg0_srun()
        .args(["-N", "3", "true"])
        .env("YS_CONF", &p.controller.config)
        .env_remove("SLURM_JOB_ID")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("--nodes=3: the pool has 2 node(s)"),
        "srun outside a job asks for an allocation, judged as a job is: {}",
        stderr(&out)
    );
    // With the controller down, a job over two nodes waits in the spool:
    // how many nodes there are, only the controller knows.
    p.controller.stop();
    let out = p
        .controller
        .run("ysbatch", &["-N", "2", "--parsable", "--wrap", "true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        crate::common::stdout(&out).starts_with("queued for the daemon: job-"),
        "{}",
        crate::common::stdout(&out)
    );
    p.controller.start();
    let deadline = Instant::now() + LONG;
    while !crate::common::stdout(
        &p.controller
            .run("ysacct", &["-n", "-X", "-P", "-o", "NNodes,State"]),
    )
    .contains("2|COMPLETED")
    {
        assert!(Instant::now() < deadline, "{}", p.controller.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `command` as `user` from the controller's host (outside every node's
/// namespace), with the compat layer first in its PATH.
fn as_user(p: &Pool, user: &str, command: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new("runuser");
    cmd.args(["-u", user, "--", "env"])
        .arg(format!("YS_CONF={}", p.controller.config.display()))
        .arg(format!("PATH={}:/usr/local/bin:/usr/bin:/bin", shims(p)))
        .args(command)
        .current_dir(&p.controller.work);
    cmd
}

#[test]
fn an_interactive_shell_runs_on_the_node_chosen_and_a_sessions_steps_span_the_pool() {
    require_root_for_nodes!();
    let p = Pool::new(2, "");
    let user = common::TestUser::create("ipo");
    // The shell is on gpu11; the terminal stays here.
    let shown = crate::interactive::on_terminal_with(
        as_user(
            &p,
            &user.name,
            &[
                "srun", "-v", "-w", "gpu11", "-G", "1", "-t", "5", "--pty", "/bin/sh", "-i",
            ],
        ),
        &[
            "expect=$ ",
            "send=stty size; echo on=$SLURMD_NODENAME as=$(id -un) gpus=$CUDA_VISIBLE_DEVICES.\\r",
            "expect=gpus=0.",
            "resize=33x99",
            "sleep=0.5",
            "send=stty size\\r",
            "expect=33 99",
            "send=exit 4\\r",
            "wait",
        ],
    );
    assert!(shown.ends_with("EXIT 4\n"), "{shown}");
    assert!(
        shown.contains(&format!("on=gpu11 as={} gpus=0.", user.name)),
        "{shown}"
    );
    assert!(shown.contains("24 80"), "{shown}");
    let id = crate::interactive::granted(&shown);
    assert_eq!(p.controller.wait_done(id, LONG), "FAILED");
    assert_eq!(p.controller.field(id, "NodeList"), "gpu11");
    // A session over both nodes: each srun's tasks on both, from here.
    let out = as_user(
        &p,
        &user.name,
        &[
            "salloc", "-N", "2", "--gres=gpu:1", "-t", "5", "sh", "-c",
            "srun --label sh -c 'echo $SLURMD_NODENAME $SLURM_PROCID/$SLURM_NTASKS'; srun -N 1 sh -c 'echo alone on $SLURMD_NODENAME'",
        ],
    )
    .stdin(std::process::Stdio::null())
    .output()
    .unwrap();
    let text = stdout_of(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(
        text.contains("0: gpu10 0/2") && text.contains("1: gpu11 1/2"),
        "{text}"
    );
    assert!(text.contains("alone on gpu10"), "{text}");
    let id = crate::interactive::granted(&stderr(&out));
    assert_eq!(p.controller.wait_done(id, LONG), "COMPLETED");
    let fields = "JobID,State,NodeList,NTasks";
    let steps = crate::interactive::records(&p.controller, &user.name, id, fields);
    assert_eq!(
        steps,
        [
            format!("{id}|COMPLETED|gpu[10-11]|"),
            format!("{id}.0|COMPLETED|gpu[10-11]|2"),
            format!("{id}.1|COMPLETED|gpu10|1"),
        ]
    );
    a_session_from_a_node_needs_the_users_token(&p, &user);
    assert!(processes_left(&p).is_empty(), "{:?}", processes_left(&p));
}

/// salloc on a node of the pool (through its agent): refused on the
/// node's word alone, granted with the user's token for nodes, and its
/// steps run as from the controller's host.
fn a_session_from_a_node_needs_the_users_token(p: &Pool, user: &common::TestUser) {
    let made = p
        .controller
        .run_as(&user.name, "ystoken", &["--audience", "node"]);
    assert!(made.status.success(), "{}", stderr(&made));
    let token = stdout_of(&made).trim().to_string();
    let session = |token: Option<&str>| {
        let mut command = as_user(p, &user.name, &[]);
        command.arg(format!("YS_CONF={}", p.agents[0].config.display()));
        if let Some(t) = token {
            command.arg(t);
        }
        command
            .args(["salloc", "-G", "1", "-t", "5", "sh", "-c"])
            .arg("srun sh -c 'echo via-node on=$SLURMD_NODENAME'")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let refused = session(None);
    assert_eq!(refused.status.code(), Some(1), "{}", stdout_of(&refused));
    assert!(
        stderr(&refused).contains("needs your token"),
        "{}",
        stderr(&refused)
    );
    let out = session(Some(&token));
    assert!(out.status.success(), "{}{}", stdout_of(&out), stderr(&out));
    assert!(
        stdout_of(&out).contains("via-node on=gpu1"),
        "{}",
        stdout_of(&out)
    );
    let id = crate::interactive::granted(&stderr(&out));
    assert_eq!(p.controller.wait_done(id, LONG), "COMPLETED");
}

trait Arg0 {
    fn arg0_srun(&mut self) -> &mut Self;
}

impl Arg0 for std::process::Command {
    fn arg0_srun(&mut self) -> &mut Self {
        use std::os::unix::process::CommandExt;
        self.arg0("srun")
    }
}

/// A python with PyTorch, or why the test is skipped (`.ci/run`
/// installs the wheel and sets YSCHED_REQUIRE_TORCH, so CI never skips).
fn torch_python() -> Option<String> {
    let found = std::process::Command::new("python3")
        .args([
            "-c",
            "import torch.distributed as d; assert d.is_gloo_available()",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some("python3".into());
    }
    assert!(
        std::env::var_os("YSCHED_REQUIRE_TORCH").is_none(),
        "YSCHED_REQUIRE_TORCH is set but python3 cannot import torch with gloo"
    );
    None
}

const TRAIN: &str = r#"import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(
    f"rank={dist.get_rank()} world={dist.get_world_size()} sum={int(t.item())}"
    f" procid={os.environ['SLURM_PROCID']} node={os.environ['SLURMD_NODENAME']}"
    f" gpus={os.environ.get('CUDA_VISIBLE_DEVICES')}",
    flush=True,
)
dist.destroy_process_group()
"#;

#[test]
fn torchrun_over_three_nodes_all_reduces_with_gloo() {
    require_root_for_nodes!();
    let Some(python) = torch_python() else {
        common::skip(
            module_path!(),
            "no PyTorch with gloo for python3 (pip install torch)",
        );
        return;
    };
    let p = Pool::of_hosts(3);
    let path = shims(&p);
    p.controller.script("train.py", TRAIN);
    p.controller.script(
        "ddp.sh",
        &format!(
            "#!/bin/sh\n#SBATCH -N 3 --gres=gpu:2 -t 10\n\
             export PATH={path}:$PATH\n\
             srun {python} -m torch.distributed.run --nnodes=$SLURM_NNODES --nproc-per-node=1 \
             --rdzv-backend=c10d --rdzv-id=$SLURM_JOB_ID --rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT train.py\n"
        ),
    );
    let id = p.controller.submit(&["ddp.sh"]);
    let state = p.controller.wait_done(id, Duration::from_secs(240));
    let lines = lines_of(&p, &format!("ys-{id}.out"));
    let text = lines.join("\n");
    assert_eq!(state, "COMPLETED", "{text}");
    let mut ranks: Vec<String> = Vec::new();
    for procid in 0..3 {
        let line = lines
            .iter()
            .find(|l| l.contains(&format!(" procid={procid} node=gpu1{procid} gpus=0,1")))
            .unwrap_or_else(|| panic!("no line of task {procid} in:\n{text}"));
        assert!(line.contains("world=3 sum=6"), "{line}");
        ranks.push(
            line.split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string(),
        );
    }
    ranks.sort();
    assert_eq!(ranks, vec!["rank=0", "rank=1", "rank=2"], "{text}");
}

#[test]
fn a_cancel_reaches_every_task_on_every_node_and_the_job_ends_once_all_have() {
    require_root_for_nodes!();
    let p = Pool::new(2, "");
    let path = shims(&p);
    p.controller.script(
        "trap.sh",
        &format!(
            "#!/bin/sh\n#SBATCH -N 2 --ntasks-per-node=2 -t 5\n\
             export PATH={path}:$PATH\n\
             srun sh -c 'trap \"echo term $SLURM_PROCID >> term.log; exit 0\" TERM; \
             echo up $SLURM_PROCID >> up.log; while :; do sleep 0.1; done'\n"
        ),
    );
    let id = p.controller.submit(&["trap.sh"]);
    let deadline = Instant::now() + LONG;
    while lines_of(&p, "up.log").len() < 4 {
        assert!(
            Instant::now() < deadline,
            "tasks did not start: {:?}",
            lines_of(&p, "up.log")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = p.controller.run("yscancel", &[&id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(p.controller.wait_done(id, LONG), "CANCELLED");
    let mut got: Vec<String> = lines_of(&p, "term.log");
    got.sort();
    assert_eq!(got, vec!["term 0", "term 1", "term 2", "term 3"]);
    assert!(processes_left(&p).is_empty(), "{:?}", processes_left(&p));
}

#[test]
fn a_controller_killed_during_a_two_node_job_finds_both_parts_again_and_records_one_end() {
    require_root_for_nodes!();
    let mut p = Pool::new(2, "");
    let path = shims(&p);
    p.controller.script(
        "nap.sh",
        &format!(
            "#!/bin/sh\n#SBATCH -N 2 -t 5\n\
             export PATH={path}:$PATH\n\
             echo $SLURM_JOB_ID >> runs.log\n\
             srun sh -c 'sleep 4; echo done $SLURM_PROCID >> done.log'\n"
        ),
    );
    let id = p.controller.submit(&["nap.sh"]);
    p.controller.wait_state(id, "RUNNING", LONG);
    std::thread::sleep(Duration::from_millis(500));
    p.controller.crash();
    std::thread::sleep(Duration::from_millis(1_000));
    p.controller.start();
    assert_eq!(
        p.controller.wait_done(id, LONG),
        "COMPLETED",
        "{}",
        p.controller.log()
    );
    assert_eq!(lines_of(&p, "runs.log"), vec![id.to_string()], "ran once");
    let mut done = lines_of(&p, "done.log");
    done.sort();
    assert_eq!(done, vec!["done 0", "done 1"]);
    assert_eq!(p.controller.field(id, "Restarts"), "0");
    p.wait_states(&[(0, "idle"), (1, "idle")]);
    assert!(processes_left(&p).is_empty(), "{:?}", processes_left(&p));
}

/// Connections from `addresses` (each of the namespace `ns`'s own), 40
/// per address (more than all of a task server's handshake slots), to `target`, each trickling its handshake a byte every
/// 2 s (under the old per-read timeout of 5 s), opened again as soon as
/// the server lets one go, until `stop`: the attack that once held every
/// handshake slot of a task server for ever.
fn trickle_from(
    ns: &str,
    addresses: Vec<String>,
    target: std::net::SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    let netns = std::fs::File::open(format!("/var/run/netns/{ns}")).unwrap();
    std::thread::spawn(move || {
        // This thread alone enters the namespace.
        nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let connect = |from: &str| {
            use nix::sys::socket::SockaddrIn;
            use nix::sys::socket::{bind, connect, socket, AddressFamily, SockFlag, SockType};
            use std::os::fd::AsRawFd;
            let fd = socket(
                AddressFamily::Inet,
                SockType::Stream,
                SockFlag::SOCK_CLOEXEC,
                None,
            )
            .ok()?;
            let source: std::net::SocketAddrV4 = format!("{from}:0").parse().ok()?;
            bind(fd.as_raw_fd(), &SockaddrIn::from(source)).ok()?;
            let std::net::SocketAddr::V4(to) = target else {
                return None;
            };
            connect(fd.as_raw_fd(), &SockaddrIn::from(to)).ok()?;
            let mut stream = std::net::TcpStream::from(fd);
            use std::io::Write;
            stream.write_all(&[0, 48]).ok()?;
            Some(stream)
        };
        let mut held: Vec<(String, std::net::TcpStream)> = Vec::new();
        let mut opened = 0;
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            for from in &addresses {
                while held.iter().filter(|(a, _)| a == from).count() < 40 {
                    match connect(from) {
                        Some(stream) => {
                            opened += 1;
                            held.push((from.clone(), stream));
                        }
                        None => break,
                    }
                }
            }
            use std::io::Write;
            held.retain_mut(|(_, s)| s.write_all(&[0]).is_ok());
            for (_, s) in &held {
                let _ = s.set_nonblocking(true);
            }
            // Let go by the server (its answer, then its close): open another.
            held.retain(|(_, s)| {
                let mut byte = [0u8; 8];
                matches!(std::io::Read::read(&mut &*s, &mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
            });
            std::thread::sleep(Duration::from_millis(2_000));
        }
        opened
    })
}

/// Anyone on the network can reach a task server's port (found by a
/// scan): a host that trickles its handshakes on many connections takes
/// its own share of the handshake slots only, and the job's srun runs its
/// step over both nodes while the attack goes on.
#[test]
fn a_trickle_of_handshakes_from_the_network_does_not_keep_the_jobs_srun_out() {
    require_root_for_nodes!();
    let mut p = Pool::new(2, "");
    let path = shims(&p);
    p.controller.script(
        "steps.sh",
        &format!(
            "#!/bin/sh\n#SBATCH -N 2 -t 5\n\
             export PATH={path}:$PATH\n\
             echo \"ports=$YS_STEP_PORTS addrs=$YS_NODE_ADDRS\" > ports.txt\n\
             while [ ! -e go ]; do sleep 0.1; done\n\
             srun -N 2 -n 2 --label sh -c 'echo step on=$SLURMD_NODENAME'\n\
             echo srun=$?\n"
        ),
    );
    let id = p.controller.submit(&["steps.sh"]);
    let deadline = Instant::now() + LONG;
    let line = loop {
        if let Some(line) = lines_of(&p, "ports.txt").pop() {
            break line;
        }
        assert!(Instant::now() < deadline, "{}", p.controller.log());
        std::thread::sleep(Duration::from_millis(100));
    };
    // The second node's task server, from a host of the pool's network.
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {line}"))
            .split(',')
            .nth(1)
            .unwrap()
            .to_string()
    };
    let target: std::net::SocketAddr = format!("{}:{}", field("addrs="), field("ports="))
        .parse()
        .unwrap();
    let (ns, addresses) = p.net.add_crowd(1);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let attack = trickle_from(&ns, addresses, target, stop.clone());
    std::thread::sleep(Duration::from_millis(1_500));
    std::fs::write(p.controller.work.join("go"), "").unwrap();
    let state = p.controller.wait_done(id, LONG);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let opened = attack.join().unwrap();
    let out = lines_of(&p, &format!("ys-{id}.out")).join("\n");
    assert_eq!(state, "COMPLETED", "{out}\n{}", p.controller.log());
    assert!(
        out.contains("0: step on=gpu10")
            && out.contains("1: step on=gpu11")
            && out.contains("srun=0"),
        "{out}"
    );
    assert!(opened >= 40, "the attack opened {opened} connections");
}

/// After a controller restart, the node of a two-node job's batch script
/// comes back first and says the script ended: the stop for the other
/// part is sent while that node is still away, and lost. When it comes
/// back, its part is told again, and the job completes, its GPUs free on
/// both nodes (it stayed COMPLETING for good).
#[test]
fn a_stop_lost_while_a_part_was_away_reaches_it_when_it_comes_back() {
    require_root_for_nodes!();
    let mut p = Pool::with_lease(2, 10);
    p.controller.script(
        "waits.sh",
        "#!/bin/sh\n#SBATCH -N 2 -t 5\nwhile [ ! -e end-$SLURM_JOB_ID ]; do sleep 0.1; done\n",
    );
    let id = p.controller.submit(&["waits.sh"]);
    p.controller.wait_state(id, "RUNNING", LONG);
    let show = crate::common::stdout(
        &p.controller
            .run("yscontrol", &["show", "job", &id.to_string()]),
    );
    let batch = show
        .split_whitespace()
        .find_map(|w| w.strip_prefix("BatchHost="))
        .unwrap()
        .to_string();
    let other = p.agents.iter().position(|a| a.name != batch).unwrap();
    p.controller.crash();
    p.cut_one_way(other, true);
    std::fs::write(p.controller.work.join(format!("end-{id}")), "").unwrap();
    std::thread::sleep(Duration::from_millis(1_500));
    p.controller.start();
    let deadline = Instant::now() + LONG;
    while !p
        .controller
        .log()
        .contains(&format!("node {batch} connected"))
    {
        assert!(Instant::now() < deadline, "{}", p.controller.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(1_000));
    p.cut_one_way(other, false);
    assert_eq!(
        p.controller.wait_done(id, LONG),
        "COMPLETED",
        "{}",
        p.controller.log()
    );
    assert_eq!(p.controller.field(id, "Restarts"), "0");
    p.wait_states(&[(0, "idle"), (1, "idle")]);
    assert!(processes_left(&p).is_empty(), "{:?}", processes_left(&p));
}

/// A job submitted from inside a running job of two nodes keeps nothing
/// of that run: not its step key, its step ports, its nodes' addresses,
/// nor any `SLURM_*` of it, stored with the new job (where it would sit
/// in the database for as long as the job's record).
#[test]
fn a_job_submitted_from_inside_a_job_stores_nothing_of_that_run() {
    require_root_for_nodes!();
    let p = Pool::trusting(2);
    let ysbatch = bin_dir().join("ysbatch");
    p.controller.script(
        "inner.sh",
        &format!(
            "#!/bin/sh\n#SBATCH -N 2 -t 5\n\
             echo \"key=${{#YS_STEP_KEY}}\" > outer-env.txt\n\
             MINE=kept {} --parsable -H --wrap true > inner.txt\n",
            ysbatch.display()
        ),
    );
    let id = p.controller.submit(&["inner.sh"]);
    assert_eq!(
        p.controller.wait_done(id, LONG),
        "COMPLETED",
        "{}",
        p.controller.log()
    );
    assert_ne!(
        lines_of(&p, "outer-env.txt"),
        vec!["key=0"],
        "the outer run had a step key"
    );
    let inner: u64 = lines_of(&p, "inner.txt")[0].trim().parse().unwrap();
    let db = rusqlite::Connection::open(p.controller.spool.join("ysched.db")).unwrap();
    let environment: String = db
        .query_row(
            "SELECT p.environment FROM job_payload_refs r JOIN payloads p \
             ON p.id = r.payload_id WHERE r.job_id = ?1",
            [inner as i64],
            |r| r.get(0),
        )
        .unwrap();
    // The submitter's umask is its own, not the run's: it passes.
    assert!(environment.contains("SLURM_UMASK"), "{environment}");
    let environment = environment.replace("SLURM_UMASK", "");
    for secret in [
        "YS_STEP_KEY",
        "YS_STEP_PORTS",
        "YS_NODE_ADDRS",
        "SLURM_JOB_ID",
        "SLURM_",
    ] {
        assert!(
            !environment.contains(secret),
            "{secret} stored: {environment}"
        );
    }
    assert!(environment.contains("MINE"), "{environment}");
    p.controller.run("yscancel", &[&inner.to_string()]);
}

/// A two-node job whose batch script has ended is over: its other node,
/// lost before its part's end reached the controller, does not make it
/// NODE_FAIL, and it never runs again (it was failed and rerun).
#[test]
fn a_job_whose_batch_script_ended_is_not_failed_by_its_other_node_lost_after() {
    require_root_for_nodes!();
    let p = Pool::with_lease(2, 3);
    p.controller.script(
        "ends.sh",
        "#!/bin/sh\n#SBATCH -N 2 -t 5\necho run >> runs-$SLURM_JOB_ID\nwhile [ ! -e end-$SLURM_JOB_ID ]; do sleep 0.1; done\n",
    );
    let id = p.controller.submit(&["ends.sh"]);
    p.controller.wait_state(id, "RUNNING", LONG);
    let show = crate::common::stdout(
        &p.controller
            .run("yscontrol", &["show", "job", &id.to_string()]),
    );
    let batch = show
        .split_whitespace()
        .find_map(|w| w.strip_prefix("BatchHost="))
        .unwrap()
        .to_string();
    let other = p.agents.iter().position(|a| a.name != batch).unwrap();
    // The other node is heard no more; the batch script ends.
    p.cut_one_way(other, true);
    std::fs::write(p.controller.work.join(format!("end-{id}")), "").unwrap();
    let state = p.controller.wait_done(id, LONG);
    p.cut_one_way(other, false);
    assert_eq!(state, "COMPLETED", "{}", p.controller.log());
    assert_eq!(p.controller.field(id, "Restarts"), "0");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(lines_of(&p, &format!("runs-{id}")), vec!["run"], "ran once");
}
