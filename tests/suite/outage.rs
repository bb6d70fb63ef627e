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
    // Each step once, in order: nothing ran twice, nothing was lost.
    for file in ["single.log", "multi-0.log", "multi-1.log"] {
        let steps: Vec<usize> = lines_of(&p, file)
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
            .any(|&id| crate::pool::nodes_of(&p, id).contains(&agent.name));
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
