//! A controller away for ten leases — killed with -9, stopped with
//! SIGTERM, frozen with SIGSTOP — while a job on one node and a job over
//! two run on a pool in network namespaces: each node freezes its jobs
//! when its lease runs out, and the controller, back, thaws them; every
//! job completes once, each of its steps counted once, the time frozen
//! not counted against it. Root only, as `pool`.

use std::time::{Duration, Instant};

use crate::common::{self, bin_dir};
use crate::pool::{lines_of, Pool};

/// Counts `$1` steps of 0.2 s into file `$2`: `STEP SECONDS` a line.
const COUNTER: &str = "#!/bin/sh\ni=1\nwhile [ $i -le $1 ]; do echo \"$i $(date +%s.%N)\" >> $2; i=$((i+1)); sleep 0.2; done\n";

/// The steps each job counts: 12 s of work.
const STEPS: usize = 60;

enum Outage {
    Killed,
    Stopped,
    Frozen,
}

fn a_controller_away_ten_leases(outage: Outage) {
    if !common::is_root() {
        common::skip(
            module_path!(),
            "pool tests need root (network namespaces, cgroups)",
        );
        return;
    }
    let lease = 2;
    let mut p = Pool::with_lease(3, lease);
    let shims = p.controller.dir.path().join("shims");
    std::fs::create_dir_all(&shims).unwrap();
    let _ = std::os::unix::fs::symlink(bin_dir().join("ysched-slurm"), shims.join("srun"));
    let counter = p.controller.script("count.sh", COUNTER);
    let single = p.controller.submit(&[
        "-G",
        "1",
        "-t",
        "0:30",
        counter.to_str().unwrap(),
        &STEPS.to_string(),
        "single.log",
    ]);
    p.controller.script(
        "multi.sh",
        &format!(
            "#!/bin/sh\n#SBATCH -N 2 --gres=gpu:1 -t 0:30\nexport PATH={}:$PATH\nsrun sh -c '{} {STEPS} multi-$SLURM_PROCID.log'\n",
            shims.display(),
            counter.display()
        ),
    );
    let multi = p.controller.submit(&["multi.sh"]);
    let long = Duration::from_secs(60);
    for id in [single, multi] {
        p.controller.wait_state(id, "RUNNING", long);
    }
    common::wait_for("the jobs to count", long, || {
        ["single.log", "multi-0.log", "multi-1.log"]
            .iter()
            .all(|f| lines_of(&p, f).len() >= 5)
    });
    let away = Duration::from_secs(10 * lease);
    let started = Instant::now();
    match outage {
        Outage::Killed => {
            p.controller.crash();
            std::thread::sleep(away);
            p.controller.start();
        }
        Outage::Stopped => {
            p.controller.stop();
            std::thread::sleep(away.saturating_sub(started.elapsed()));
            p.controller.start();
        }
        Outage::Frozen => {
            let pid = p.controller.daemon_pid();
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
            std::thread::sleep(away);
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
        }
    }
    for id in [single, multi] {
        let state = p.controller.wait_done(id, long);
        assert_eq!(
            state,
            "COMPLETED",
            "job {id}: {}\n{}",
            p.controller.field(id, "Reason"),
            p.controller.log()
        );
        assert_eq!(p.controller.field(id, "Restarts"), "0", "job {id}");
    }
    // Charged for what it worked, once: 12 s, and the lease before its
    // node froze it (the heartbeats that waited in the socket while the
    // controller was stopped each report the freeze: credited once).
    let billed: i64 = p.controller.field(single, "Billing").parse().unwrap();
    let most = STEPS as i64 / 5 + 2 * lease as i64 + 2;
    assert!(
        (STEPS as i64 / 5..=most).contains(&billed),
        "billed {billed} s for {} s of work:\n{}",
        STEPS / 5,
        p.controller.log()
    );
    each_step_ran_once_frozen_not_killed(&p, (single, multi));
}

/// After the outage: each step of the jobs once, in order; the nodes that
/// ran them froze them; the controller thawed them.
fn each_step_ran_once_frozen_not_killed(p: &Pool, (single, multi): (u64, u64)) {
    // Each step once, in order: nothing ran twice, nothing was lost.
    for file in ["single.log", "multi-0.log", "multi-1.log"] {
        let steps: Vec<usize> = lines_of(p, file)
            .iter()
            .map(|l| l.split(' ').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(steps, (1..=STEPS).collect::<Vec<_>>(), "{file}");
    }
    // Frozen, not killed, and thawed once the controller was back; the
    // 30 s limit holds 12 s of work and 20 s away, frozen.
    for agent in &p.agents {
        let ran_jobs = [single, multi]
            .iter()
            .any(|&id| crate::pool::nodes_of(p, id).contains(&agent.name));
        assert_eq!(
            agent.log_text().contains("job(s) frozen here"),
            ran_jobs,
            "{}: {}",
            agent.name,
            agent.log_text()
        );
    }
    assert!(
        p.controller.log().contains("thawed"),
        "{}",
        p.controller.log()
    );
}

#[test]
fn a_controller_killed_for_ten_leases_loses_no_running_job() {
    a_controller_away_ten_leases(Outage::Killed);
}

#[test]
fn a_controller_stopped_for_ten_leases_loses_no_running_job() {
    a_controller_away_ten_leases(Outage::Stopped);
}

#[test]
fn a_controller_frozen_for_ten_leases_loses_no_running_job() {
    a_controller_away_ten_leases(Outage::Frozen);
}

/// The steps of `file`: (step, seconds) a line.
fn steps_of(p: &Pool, file: &str) -> Vec<(usize, f64)> {
    lines_of(p, file)
        .iter()
        .map(|l| {
            let (step, at) = l.split_once(' ').unwrap();
            (step.parse().unwrap(), at.parse().unwrap())
        })
        .collect()
}

#[test]
fn a_controller_that_never_comes_back_has_its_frozen_jobs_ended_after_frozen_limit() {
    if !common::is_root() {
        common::skip(
            module_path!(),
            "pool tests need root (network namespaces, cgroups)",
        );
        return;
    }
    // Set on the controller, the one place: its nodes take it from it.
    let mut p = Pool::with_pool_keys(1, "lease = \"2s\"\nfrozen_limit = \"4s\"\n");
    let counter = p.controller.script("count.sh", COUNTER);
    let id = p
        .controller
        .submit(&["-G", "1", counter.to_str().unwrap(), "40", "steps.log"]);
    let long = Duration::from_secs(60);
    p.controller.wait_state(id, "RUNNING", long);
    common::wait_for("the job to count", long, || {
        lines_of(&p, "steps.log").len() >= 3
    });
    p.controller.crash();
    common::wait_for("the frozen job to be ended", long, || {
        p.agents[0]
            .log_text()
            .contains("frozen longer than frozen_limit")
    });
    let counted = lines_of(&p, "steps.log").len();
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        lines_of(&p, "steps.log").len(),
        counted,
        "ended, not thawed"
    );
    // When a controller comes back at last: NODE_FAIL, requeued, run again.
    p.controller.start();
    assert_eq!(p.controller.wait_done(id, long), "COMPLETED");
    assert_eq!(p.controller.field(id, "Restarts"), "1");
    let events = p.controller.log();
    assert!(
        events.contains("stayed frozen longer than frozen_limit"),
        "{events}"
    );
}

/// A one-way cut of the job's node for `leases` leases of `lease` s.
fn a_cut_of(lease: u64, leases: f64) -> (Pool, u64, usize) {
    let p = Pool::with_lease(2, lease);
    let counter = p.controller.script("count.sh", COUNTER);
    let id = p
        .controller
        .submit(&["-G", "2", counter.to_str().unwrap(), "50", "steps.log"]);
    let long = Duration::from_secs(60);
    p.controller.wait_state(id, "RUNNING", long);
    common::wait_for("the job to count", long, || {
        lines_of(&p, "steps.log").len() >= 3
    });
    let node = p.controller.field(id, "NodeList");
    let cut = p.agents.iter().position(|a| a.name == node).unwrap();
    p.cut_one_way(cut, true);
    std::thread::sleep(Duration::from_secs_f64(lease as f64 * leases));
    p.cut_one_way(cut, false);
    assert_eq!(
        p.controller.wait_done(id, long),
        "COMPLETED",
        "{}",
        p.controller.log()
    );
    (p, id, cut)
}

#[test]
fn a_cut_just_longer_than_a_lease_freezes_the_job_and_thaws_it() {
    if !common::is_root() {
        common::skip(
            module_path!(),
            "pool tests need root (network namespaces, cgroups)",
        );
        return;
    }
    // A lease long enough that TCP's retransmissions after the cut come
    // within the half lease before a rerun, on a loaded machine too.
    let (p, id, cut) = a_cut_of(8, 1.2);
    assert_eq!(p.controller.field(id, "Restarts"), "0");
    let steps: Vec<usize> = steps_of(&p, "steps.log").iter().map(|s| s.0).collect();
    assert_eq!(steps, (1..=50).collect::<Vec<_>>());
    assert!(p.agents[cut].log_text().contains("job(s) frozen here"));
    assert!(
        p.controller.log().contains("thawed"),
        "{}",
        p.controller.log()
    );
}

#[test]
fn a_cut_longer_than_a_lease_and_a_half_reruns_the_job_never_beside_its_frozen_copy() {
    if !common::is_root() {
        common::skip(
            module_path!(),
            "pool tests need root (network namespaces, cgroups)",
        );
        return;
    }
    let (p, id, _) = a_cut_of(3, 1.7);
    assert_eq!(p.controller.field(id, "Restarts"), "1");
    // The first run's steps, then the rerun's from 1: the rerun's first
    // line came after the first run's last.
    let steps = steps_of(&p, "steps.log");
    let restart = steps.iter().skip(1).position(|s| s.0 == 1).unwrap() + 1;
    let (first, rerun) = steps.split_at(restart);
    assert_eq!(
        rerun.iter().map(|s| s.0).collect::<Vec<_>>(),
        (1..=50).collect::<Vec<_>>()
    );
    let last_of_first = first.last().unwrap().1;
    assert!(
        rerun[0].1 > last_of_first,
        "the rerun began at {} before the first run's last step at {last_of_first}",
        rerun[0].1
    );
    // The frozen copy was stopped, never thawed: no step of it after.
    assert!(first.iter().all(|s| s.1 < rerun[0].1));
}

/// A node whose state directory shares a small file system with what its
/// users may write, filled by one of them (`dd` until it is full) while a
/// job runs: the agent renews its lease in place, so the job counts on,
/// unfrozen, and completes once, its end recorded.
#[test]
fn a_file_system_a_user_fills_under_a_nodes_state_freezes_no_job() {
    if !common::is_root() {
        common::skip(
            module_path!(),
            "pool tests need root (network namespaces, cgroups, tmpfs)",
        );
        return;
    }
    let lease = 2;
    let mut p = Pool::with_lease(1, lease);
    let user = common::TestUser::create("full");
    let (state, scratch, _unmount) = state_on_a_small_tmpfs(&mut p);
    let counter = p.controller.script("count.sh", COUNTER);
    let id = p
        .controller
        .submit(&["-G", "1", counter.to_str().unwrap(), "40", "steps.log"]);
    let long = Duration::from_secs(60);
    p.controller.wait_state(id, "RUNNING", long);
    common::wait_for("the job to count", long, || {
        lines_of(&p, "steps.log").len() >= 3
    });
    let fill = scratch.join("fill");
    let out = std::process::Command::new("runuser")
        .args(["-u", &user.name, "--", "dd", "if=/dev/zero", "bs=64k"])
        .arg(format!("of={}", fill.display()))
        .output()
        .unwrap();
    assert!(
        common::stderr(&out).contains("No space left on device"),
        "{}",
        common::stderr(&out)
    );
    let full = nix::sys::statvfs::statvfs(&state).unwrap();
    assert_eq!(full.blocks_available(), 0);
    assert_eq!(
        p.controller.wait_done(id, long),
        "COMPLETED",
        "{}\n{}",
        p.controller.log(),
        p.agents[0].log_text()
    );
    assert_eq!(p.controller.field(id, "Restarts"), "0");
    let steps = steps_of(&p, "steps.log");
    assert_eq!(
        steps.iter().map(|s| s.0).collect::<Vec<_>>(),
        (1..=40).collect::<Vec<_>>()
    );
    // Never frozen: no pause of a lease between two steps of 0.2 s.
    let longest = steps
        .windows(2)
        .map(|w| w[1].1 - w[0].1)
        .fold(0.0, f64::max);
    assert!(
        longest < lease as f64,
        "a pause of {longest} s:\n{}",
        p.agents[0].log_text()
    );
    assert!(
        !p.agents[0].log_text().contains("frozen"),
        "{}",
        p.agents[0].log_text()
    );
    p.agents[0].kill();
}

/// Node 0's state moved onto a tmpfs of 4 MiB, with a directory anyone
/// may write, as /tmp; the agent started again on it. The state
/// directory, that directory, and what unmounts the tmpfs.
fn state_on_a_small_tmpfs(p: &mut Pool) -> (std::path::PathBuf, std::path::PathBuf, Unmount) {
    let state = p.agents[0].state_dir();
    p.agents[0].kill();
    let saved = p.controller.dir.path().join("saved-state");
    let run = |program: &str, args: &[&str]| {
        let out = std::process::Command::new(program)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            common::stderr(&out)
        );
    };
    run(
        "cp",
        &["-a", state.to_str().unwrap(), saved.to_str().unwrap()],
    );
    let mount = ["-t", "tmpfs", "-o", "size=4m,mode=755", "tmpfs"];
    run("mount", &[&mount[..], &[state.to_str().unwrap()]].concat());
    let unmount = Unmount(state.clone());
    let copy = format!("{}/.", saved.display());
    run("cp", &["-a", &copy, state.to_str().unwrap()]);
    let scratch = state.join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&scratch, std::fs::Permissions::from_mode(0o1777)).unwrap();
    p.agents[0].restart();
    p.wait_states(&[(0, "idle")]);
    (state, scratch, unmount)
}

/// Unmounts a test's file system when the test ends, however it ends.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .output();
    }
}

/// A run that ends while the controller is stopped keeps its end: its
/// report waits, unread, in the socket until the controller runs again,
/// and that wait is not the node's clock being late.
#[test]
fn a_run_that_ends_while_the_controller_is_stopped_keeps_its_end() {
    if !common::is_root() {
        common::skip(
            module_path!(),
            "pool tests need root (network namespaces, cgroups)",
        );
        return;
    }
    // A lease longer than the stop: nothing is fenced.
    let p = Pool::with_lease(1, 20);
    let id = p.controller.submit(&["-G", "1", "--wrap", "sleep 2"]);
    let long = Duration::from_secs(60);
    p.controller.wait_state(id, "RUNNING", long);
    let pid = p.controller.daemon_pid();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_secs(8));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    assert_eq!(p.controller.wait_done(id, long), "COMPLETED");
    let elapsed: i64 = p.controller.field(id, "ElapsedRaw").parse().unwrap();
    assert!(
        (2..=4).contains(&elapsed),
        "a 2 s job recorded {elapsed} s:\n{}",
        p.controller.log()
    );
    let billed: i64 = p.controller.field(id, "Billing").parse().unwrap();
    assert!(billed <= 4, "a 2 s job billed {billed} s");
}
