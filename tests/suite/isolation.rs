//! Jobs in their own cgroups, on this host's real kernel (as root): a job
//! opens only its own GPUs' device files, stays within its memory, leaves
//! nothing behind; on cgroup v1 and on v2 (a BPF device program).
//!
//! The GPUs are fake device nodes (`mknod c 195 N`). With no driver,
//! opening an allowed node fails with ENXIO ("No such device or address")
//! while a node the cgroup denies fails with EPERM ("Operation not
//! permitted"): the difference proves the cgroup did it.

use crate::common;

use std::path::Path;
use std::time::Duration;

use crate::common::{stderr, stdout, Cluster};

const LONG: Duration = Duration::from_secs(30);

/// Four fake GPUs: device nodes in a directory that lives with the cluster.
fn cluster_with_fake_gpus(extra: &str) -> (Cluster, tempfile::TempDir) {
    let devices = tempfile::Builder::new()
        .prefix("ysched-dev-")
        .tempdir()
        .unwrap();
    let dir = devices.path();
    for i in 0..4 {
        common::fake_gpu_device(dir, i);
    }
    let gpus = format!(
        "[[gpus]]\ntype = \"a100\"\nmemory = \"80GiB\"\ndevices = \"{}/nvidia[0-3]\"\n",
        dir.display()
    );
    let mut c = Cluster::with_gpus(extra, &gpus);
    c.start();
    std::fs::write(c.work.join("devdir"), dir.display().to_string()).unwrap();
    (c, devices)
}

/// A script that tries every fake GPU and prints what opening it did.
const PROBE: &str = r#"#!/bin/bash
dev=$(cat devdir)
echo "visible=$CUDA_VISIBLE_DEVICES global=$SLURM_JOB_GPUS"
for i in 0 1 2 3; do
  msg=$( (exec 3<"$dev/nvidia$i") 2>&1 )
  case "$msg" in
    *"No such device or address"*) echo "gpu$i allowed" ;;
    *"Operation not permitted"*) echo "gpu$i denied" ;;
    *) echo "gpu$i ?? $msg" ;;
  esac
done
sleep 0.5
"#;

/// The GPUs (global indices) a job's probe found it may open.
fn allowed(c: &Cluster, id: u64) -> (String, Vec<u32>) {
    let out = c.output_of(id);
    let first = out.lines().next().unwrap_or_default().to_string();
    let allowed = out
        .lines()
        .filter(|l| l.ends_with(" allowed"))
        .map(|l| {
            l.trim_start_matches("gpu")
                .trim_end_matches(" allowed")
                .parse()
                .unwrap()
        })
        .collect();
    assert!(!out.contains("??"), "unexpected probe result: {out}");
    (first, allowed)
}

fn device_isolation(extra: &str, layout: &str) {
    let (c, _devices) = cluster_with_fake_gpus(extra);
    assert!(
        c.log().contains(&format!("job isolation: cgroup {layout}")),
        "{}",
        c.log()
    );
    c.script("probe.sh", PROBE);
    let one = c.submit(&["-G", "1", "probe.sh"]);
    let two = c.submit(&["-G", "2", "probe.sh"]);
    let other = c.submit(&["-G", "1", "probe.sh"]);
    for id in [one, two, other] {
        assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    }
    let gpus = |id: u64| -> Vec<u32> {
        let out = c.output_of(id);
        let global = out
            .lines()
            .next()
            .unwrap()
            .split("global=")
            .nth(1)
            .unwrap()
            .to_string();
        global.split(',').map(|g| g.parse().unwrap()).collect()
    };
    for (id, count) in [(one, 1), (two, 2), (other, 1)] {
        let (first, allowed) = allowed(&c, id);
        let own = gpus(id);
        assert_eq!(own.len(), count);
        assert_eq!(
            allowed,
            own,
            "job {id} may open exactly its own GPUs: {}",
            c.output_of(id)
        );
        let numbered: Vec<String> = (0..count).map(|i| i.to_string()).collect();
        assert!(
            first.starts_with(&format!("visible={} ", numbered.join(","))),
            "numbered from 0 inside: {first}"
        );
    }
    // The three ran side by side on four GPUs: no two share one.
    let mut all: Vec<u32> = [one, two, other].iter().flat_map(|id| gpus(*id)).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 4);
    assert!(
        c.field(one, "Cgroup").ends_with(&format!("job_{one}")),
        "{}",
        c.field(one, "Cgroup")
    );
}

#[test]
fn a_job_opens_only_its_own_gpus_on_cgroup_v1() {
    require_root!();
    if !Path::new("/sys/fs/cgroup/devices/cgroup.procs").exists() {
        common::skip(
            module_path!(),
            "no cgroup v1 devices controller on this host",
        );
        return;
    }
    device_isolation("cgroups = \"v1\"", "v1");
}

#[test]
fn a_job_opens_only_its_own_gpus_on_cgroup_v2_through_bpf() {
    require_root!();
    let v2 = [
        "/sys/fs/cgroup/cgroup.controllers",
        "/sys/fs/cgroup/unified/cgroup.controllers",
    ];
    if !v2.iter().any(|p| Path::new(p).exists()) {
        common::skip(module_path!(), "no cgroup2 mount on this host");
        return;
    }
    device_isolation("cgroups = \"v2\"", "v2");
}

#[test]
fn a_job_past_its_memory_ends_out_of_memory() {
    require_root!();
    if !Path::new("/sys/fs/cgroup/memory/cgroup.procs").exists()
        && !Path::new("/sys/fs/cgroup/memory.max").exists()
    {
        common::skip(module_path!(), "no memory controller");
        return;
    }
    let c = Cluster::started("");
    let id = c.submit(&[
        "--mem",
        "64M",
        "--wrap",
        "python3 -c 'x = bytearray(256 * 1024 * 1024)'; echo after",
    ]);
    assert_eq!(c.wait_done(id, LONG), "OUT_OF_MEMORY");
    let reason = c.field(id, "Reason");
    assert!(
        reason.contains("OOM killer") && reason.contains("64M"),
        "{reason}"
    );
    let rss = c.field(id, "MaxRSS");
    assert!(
        rss.ends_with('K') && rss.len() > 1,
        "MaxRSS recorded: {rss}"
    );
    // Asked for, the finished job shows for min_job_age_secs, as in squeue.
    let q = stdout(&c.run("ysqueue", &["-h", "-t", "OOM", "-o", "%i %t"]));
    assert_eq!(q, format!("{id} OOM\n"));
    let fine = c.submit(&[
        "--mem",
        "64M",
        "--wrap",
        "python3 -c 'x = bytearray(8 * 1024 * 1024)'",
    ]);
    assert_eq!(c.wait_done(fine, LONG), "COMPLETED");
    assert!(!c.field(fine, "TotalCPU").is_empty());
}

#[test]
fn nothing_a_job_started_outlives_it_and_its_gpus_wait_for_that() {
    require_root!();
    let c = Cluster::started("");
    // Leaves a daemon behind: a new session, ignoring SIGTERM and SIGHUP.
    let marker = format!("ysmarker{}", std::process::id());
    c.script(
        "leave.sh",
        &format!(
            "#!/bin/bash\nsetsid bash -c 'trap \"\" TERM HUP; exec -a {marker} sleep 1000' </dev/null >/dev/null 2>&1 &\nsleep 0.3\npgrep -f {marker} >/dev/null && echo left\n"
        ),
    );
    let first = c.submit(&["-G", "4", "leave.sh"]);
    let second = c.submit(&[
        "-G",
        "4",
        "--wrap",
        &format!("pgrep -f {marker} || echo none"),
    ]);
    assert_eq!(c.wait_done(first, LONG), "COMPLETED");
    assert_eq!(
        c.output_of(first),
        "left\n",
        "the daemon was running when the script ended"
    );
    assert_eq!(c.wait_done(second, LONG), "COMPLETED");
    assert_eq!(
        c.output_of(second),
        "none\n",
        "the next job on those GPUs found the leftover gone"
    );
    let leftovers = std::process::Command::new("pgrep")
        .args(["-f", &marker])
        .output()
        .unwrap();
    assert_eq!(stdout(&leftovers), "");
}

#[test]
fn a_fork_bomb_stays_inside_its_job() {
    require_root!();
    if !Path::new("/sys/fs/cgroup/pids/cgroup.procs").exists()
        && !Path::new("/sys/fs/cgroup/pids.max").exists()
    {
        common::skip(module_path!(), "no pids controller");
        return;
    }
    let c = Cluster::started("job_pids_max = 40");
    let marker = format!("ysbomb{}", std::process::id());
    c.script(
        "bomb.sh",
        &format!("#!/bin/bash\nfor i in $(seq 200); do (exec -a {marker} sleep 60) & done 2>/dev/null\nsleep 60\n"),
    );
    let id = c.submit(&["bomb.sh"]);
    c.wait_state(id, "RUNNING", LONG);
    let count = || {
        let out = std::process::Command::new("pgrep")
            .args(["-c", "-f", &marker])
            .output()
            .unwrap();
        stdout(&out).trim().parse::<u32>().unwrap_or(0)
    };
    common::wait_for("the forks to reach the cap", LONG, || count() >= 30);
    std::thread::sleep(Duration::from_millis(500));
    let n = count();
    assert!(n < 40, "{n} processes: the cap of 40 held");
    let out = c.run("yscancel", &[&id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(c.wait_done(id, LONG), "CANCELLED");
    assert_eq!(count(), 0, "all killed with the job");
}

#[test]
fn a_job_that_reaches_its_process_limit_says_so() {
    require_root!();
    if !Path::new("/sys/fs/cgroup/pids/cgroup.procs").exists()
        && !Path::new("/sys/fs/cgroup/pids.max").exists()
    {
        common::skip(module_path!(), "no pids controller");
        return;
    }
    let c = Cluster::started("job_pids_max = 20");
    let id = c.submit(&[
        "--wrap",
        "for i in $(seq 40); do sleep 1 & done 2>/dev/null; wait; exit 3",
    ]);
    assert_eq!(c.wait_done(id, LONG), "FAILED");
    let reason = c.field(id, "Reason");
    assert!(
        reason.contains("limit of 20 processes (job_pids_max)"),
        "{reason}"
    );
}

#[test]
fn a_device_file_the_config_names_must_exist() {
    let c = Cluster::with_gpus(
        "",
        "[[gpus]]\ntype = \"a100\"\nmemory = \"80GiB\"\ndevices = \"/dev/no-such-gpu[0-1]\"\n",
    );
    let out = c.run(
        "ysctld",
        &["--foreground", "--config", c.config.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out)
            .contains("GPU 0 (a100): device file /dev/no-such-gpu0: No such file or directory"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("correct `devices` in its [[gpus]] table"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn suspend_stops_a_job_and_resume_lets_it_go_on() {
    require_root!();
    suspend_and_resume("");
}

#[test]
fn suspend_and_resume_through_cgroup_freeze_on_v2() {
    require_root!();
    let v2 = [
        "/sys/fs/cgroup/cgroup.freeze",
        "/sys/fs/cgroup/unified/cgroup.procs",
    ];
    if !v2.iter().any(|p| Path::new(p).exists()) {
        common::skip(module_path!(), "no cgroup2 mount on this host");
        return;
    }
    suspend_and_resume("cgroups = \"v2\"");
}

#[test]
fn a_job_that_stops_itself_is_still_cancelled_within_the_grace() {
    require_root!();
    let c = Cluster::started("");
    let id = c.submit(&["--wrap", "echo stopping; kill -STOP $$; echo resumed"]);
    common::wait_for("the job to stop itself", LONG, || {
        c.output_of(id) == "stopping\n"
    });
    std::thread::sleep(Duration::from_millis(200));
    let started = std::time::Instant::now();
    assert!(c.run("yscancel", &[&id.to_string()]).status.success());
    assert_eq!(c.wait_done(id, LONG), "CANCELLED");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
}

fn suspend_and_resume(extra: &str) {
    let c = Cluster::started(extra);
    c.script(
        "count.sh",
        "#!/bin/bash\nfor i in $(seq 1 40); do echo $i > count; sleep 0.05; done\necho done\n",
    );
    let id = c.submit(&["-G", "1", "-t", "0:04", "count.sh"]);
    c.wait_state(id, "RUNNING", LONG);
    let count = || {
        std::fs::read_to_string(c.work.join("count"))
            .unwrap_or_default()
            .trim()
            .parse::<u32>()
            .unwrap_or(0)
    };
    common::wait_for("the job to count", LONG, || count() >= 3);
    let out = c.run("yscontrol", &["suspend", &id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(c.state(id), "SUSPENDED");
    let q = stdout(&c.run("ysqueue", &["-h", "-o", "%i %t"]));
    assert_eq!(q.trim(), format!("{id} S"));
    let frozen_at = count();
    // Frozen for longer than its whole time limit: that time does not count.
    std::thread::sleep(Duration::from_millis(4500));
    assert_eq!(count(), frozen_at, "no progress while suspended");
    assert_eq!(
        c.state(id),
        "SUSPENDED",
        "suspended time does not count against the limit"
    );
    let out = c.run("yscontrol", &["resume", &id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    common::wait_for("progress after resume", LONG, || count() > frozen_at);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    assert_eq!(c.output_of(id), "done\n");

    let out = c.run("yscontrol", &["resume", &id.to_string()]);
    assert_eq!(out.status.code(), Some(1));
    // A suspended job can be cancelled, and it ends.
    let id = c.submit(&["--wrap", "sleep 60"]);
    c.wait_state(id, "RUNNING", LONG);
    assert!(c
        .run("yscontrol", &["suspend", &id.to_string()])
        .status
        .success());
    assert!(c.run("yscancel", &[&id.to_string()]).status.success());
    assert_eq!(c.wait_done(id, LONG), "CANCELLED");
}

#[test]
fn without_isolation_a_jobs_cpu_time_is_still_recorded() {
    let c = Cluster::started("cgroups = \"off\"");
    // A tenth of a second of CPU in a child of the script, and 0.7 s in an
    // orphan in a session of its own. Both end before the script does, so
    // both count: the orphan's time alone passes the bound.
    let burn = |s: f64| {
        format!("python3 -c 'import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass'")
    };
    let (child, orphan) = (burn(0.1), burn(0.7));
    let done = c.dir.path().join("orphan-done");
    let done = done.display();
    let id = c.submit(&[
        "--wrap",
        &format!(
            "{child}; (setsid sh -c \"{orphan}; touch {done}\" &); \
             while [ ! -e {done} ]; do sleep 0.05; done; sleep 0.2"
        ),
    ]);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    let total = c.field(id, "TotalCPU");
    let (minutes, seconds) = total.split_once(':').expect(&total);
    let seconds = minutes.parse::<f64>().unwrap() * 60.0 + seconds.parse::<f64>().unwrap();
    assert!(
        (0.7..30.0).contains(&seconds),
        "TotalCPU {total} counts the script's child and its orphan"
    );
}

#[test]
fn only_admins_suspend_and_only_with_isolation() {
    let c = Cluster::started("cgroups = \"off\"");
    assert!(
        c.log()
            .contains("job isolation is OFF (off: cgroups = \"off\" in the config)"),
        "{}",
        c.log()
    );
    let id = c.submit(&["--wrap", "sleep 60"]);
    c.wait_state(id, "RUNNING", LONG);
    let out = c.run("yscontrol", &["suspend", &id.to_string()]);
    if common::is_root() {
        assert_eq!(out.status.code(), Some(1));
        assert!(
            stderr(&out).contains("job isolation is off on this server"),
            "{}",
            stderr(&out)
        );
    }
    assert_eq!(c.state(id), "RUNNING");
    assert!(c.run("yscancel", &[&id.to_string()]).status.success());
}

#[test]
fn after_a_crash_a_lost_jobs_processes_and_leftover_cgroups_are_cleaned_up() {
    require_root!();
    let mut c = Cluster::started("");
    let marker = format!("yslost{}", std::process::id());
    c.script(
        "lost.sh",
        &format!("#!/bin/bash\nexec -a {marker} sleep 600\n"),
    );
    let id = c.submit(&["-G", "1", "lost.sh"]);
    c.wait_state(id, "RUNNING", LONG);
    let pgrep = || {
        stdout(
            &std::process::Command::new("pgrep")
                .args(["-f", &marker])
                .output()
                .unwrap(),
        )
    };
    common::wait_for("the job's process", LONG, || !pgrep().is_empty());
    let state = common::started_state(&c.spool, id);
    // The daemon and the job's supervisor die; the job's process lives on.
    c.crash();
    let supervisor = state["supervisor_pid"].as_i64().unwrap() as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(supervisor),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(!pgrep().is_empty(), "the job outlived its supervisor");
    // And a group of a job this daemon never ran, left over from before.
    let parent = common::cgroup_parent_of(c.dir.path());
    let stray = Path::new("/sys/fs/cgroup/pids")
        .join(&parent)
        .join("job_999");
    std::fs::create_dir(&stray).unwrap();
    c.start();
    assert_eq!(c.wait_done(id, LONG), "NODE_FAIL");
    assert!(
        c.field(id, "Reason")
            .contains("1 leftover processes killed"),
        "{}",
        c.field(id, "Reason")
    );
    assert_eq!(pgrep(), "", "its process was killed through its cgroup");
    assert!(!stray.exists(), "the stray group was removed");
    assert!(
        c.log().contains("cleared what job 999 left behind"),
        "{}",
        c.log()
    );
}
