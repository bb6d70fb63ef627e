//! Job steps: each `srun` in a job is a step numbered from 0, recorded
//! with its name, tasks, times, state and exit code, and listed by
//! `ysacct`/`sacct` under its job unless `-X`.

use std::time::Duration;

use crate::common::{self, bin_dir, stderr, stdout, Cluster, TestUser};

const LONG: Duration = Duration::from_secs(20);

/// A directory with `srun` (the compat layer) for job scripts' PATH.
fn shims(c: &Cluster) -> String {
    let dir = c.dir.path().join("shims");
    std::fs::create_dir_all(&dir).unwrap();
    let _ = std::os::unix::fs::symlink(bin_dir().join("ysched-slurm"), dir.join("srun"));
    let _ = std::os::unix::fs::symlink(bin_dir().join("ysched-slurm"), dir.join("sacct"));
    dir.display().to_string()
}

fn submit_as(c: &Cluster, user: &TestUser, args: &[&str]) -> u64 {
    let out = c.run_as(&user.name, "ysbatch", &[&["--parsable"], args].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out).trim().parse().unwrap()
}

#[test]
fn each_srun_is_a_step_with_its_own_record() {
    require_root!();
    let user = TestUser::create("stp");
    let c = Cluster::started("");
    let script = c.script(
        "steps.sh",
        &format!(
            "#!/bin/bash\nexport PATH={}:$PATH\n\
             srun sh -c 'echo step=$SLURM_STEP_ID'\n\
             srun sh -c 'exit 3'\n\
             srun -n 2 --label sh -c 'echo step=$SLURM_STEP_ID'\n\
             srun --output=out-%j.%s.txt sh -c 'echo to-file'\n\
             exit 0\n",
            shims(&c)
        ),
    );
    std::fs::set_permissions(&c.work, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let id = submit_as(&c, &user, &["-c", "2", script.to_str().unwrap()]);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED", "{}", c.output_of(id));
    let output = c.output_of(id);
    assert!(output.contains("step=0\n"), "{output}");
    assert!(
        output.contains("0: step=2\n") && output.contains("1: step=2\n"),
        "{output}"
    );
    let file = std::fs::read_to_string(c.work.join(format!("out-{id}.3.txt"))).unwrap();
    assert_eq!(file, "to-file\n", "%s is the step's number");
    let listed = |args: &[&str]| {
        let out = c.run_as(&user.name, "ysacct", args);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let id_text = id.to_string();
    // NTasks is a step's, as in Slurm: empty on the job's own row.
    let rows = listed(&[
        "-j",
        &id_text,
        "-n",
        "-P",
        "-o",
        "JobID,JobName,State,ExitCode,NTasks",
    ]);
    let rows: Vec<&str> = rows.lines().collect();
    assert_eq!(
        rows,
        [
            format!("{id}|steps.sh|COMPLETED|0:0|"),
            format!("{id}.0|sh|COMPLETED|0:0|1"),
            format!("{id}.1|sh|FAILED|3:0|1"),
            format!("{id}.2|sh|COMPLETED|0:0|2"),
            format!("{id}.3|sh|COMPLETED|0:0|1"),
        ],
    );
    // Each step has its own times, within the job's.
    let times = listed(&["-j", &id_text, "-n", "-P", "-o", "JobID,Start,End,NodeList"]);
    for line in times.lines() {
        let cells: Vec<&str> = line.split('|').collect();
        assert!(cells[1] <= cells[2], "{line}");
        assert_ne!(cells[3], "", "{line}");
    }
    // -X: the job alone; Slurm's sacct the same.
    assert_eq!(
        listed(&["-j", &id_text, "-n", "-X", "-o", "JobID"]).trim(),
        id_text
    );
    // Slurm's sacct lists the batch and extern steps too.
    let sacct = c.run_as(
        &user.name,
        "ysched-slurm",
        &["sacct", "-j", &id_text, "-n", "-P", "-o", "JobID"],
    );
    let ids: Vec<String> = stdout(&sacct).lines().map(str::to_string).collect();
    let expected: Vec<String> = ["", ".batch", ".extern", ".0", ".1", ".2", ".3"]
        .iter()
        .map(|s| format!("{id}{s}"))
        .collect();
    assert_eq!(ids, expected, "{}", stderr(&sacct));
}

#[test]
fn a_step_running_when_its_job_is_cancelled_ends_with_it() {
    require_root!();
    let user = TestUser::create("stq");
    let c = Cluster::started("");
    let script = c.script(
        "long.sh",
        &format!(
            "#!/bin/bash\nexport PATH={}:$PATH\nsrun true\nsrun sleep 300\n",
            shims(&c)
        ),
    );
    std::fs::set_permissions(&c.work, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let id = submit_as(&c, &user, &[script.to_str().unwrap()]);
    c.wait_state(id, "RUNNING", LONG);
    let id_text = id.to_string();
    let rows = || {
        let out = c.run_as(
            &user.name,
            "ysacct",
            &["-j", &id_text, "-n", "-P", "-o", "JobID,State"],
        );
        stdout(&out)
    };
    let deadline = std::time::Instant::now() + LONG;
    while !rows().contains(&format!("{id}.1|RUNNING")) {
        assert!(std::time::Instant::now() < deadline, "{}", rows());
        std::thread::sleep(Duration::from_millis(100));
    }
    // The running step, as squeue -s lists it; the ended one is not.
    let out = c.run_as(&user.name, "ysched-slurm", &["squeue", "-s"]);
    let listed = stdout(&out);
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2, "{listed}{}", stderr(&out));
    assert!(lines[0].starts_with("STEPID"), "{listed}");
    let cells: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(cells[0], format!("{id}.1"), "{listed}");
    assert_eq!(
        (cells[1], cells[3]),
        ("sleep", user.name.as_str()),
        "{listed}"
    );
    let out = c.run_as(&user.name, "yscancel", &[&id_text]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(c.wait_done(id, LONG), "CANCELLED");
    assert_eq!(
        rows(),
        format!(
            "{id}|CANCELLED by {}\n{id}.0|COMPLETED\n{id}.1|CANCELLED\n",
            user.uid
        )
    );
}

#[test]
fn a_step_is_cancelled_alone_by_its_user_only() {
    require_root!();
    let (user, other) = (TestUser::create("stc"), TestUser::create("std"));
    let c = Cluster::started("");
    let script = c.script(
        "one.sh",
        &format!(
            "#!/bin/bash\nexport PATH={}:$PATH\nsrun sleep 300\necho after=$?\nsrun true\n",
            shims(&c)
        ),
    );
    std::fs::set_permissions(&c.work, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let id = submit_as(&c, &user, &[script.to_str().unwrap()]);
    let state_of = |step: &str| {
        let out = c.run_as(
            &user.name,
            "ysacct",
            &[
                "-j",
                &id.to_string(),
                "-n",
                "-P",
                "-o",
                "JobID,State,ExitCode",
            ],
        );
        stdout(&out)
            .lines()
            .find(|l| l.starts_with(&format!("{id}.{step}|")))
            .unwrap_or_default()
            .to_string()
    };
    let deadline = std::time::Instant::now() + LONG;
    while !state_of("0").contains("RUNNING") {
        assert!(std::time::Instant::now() < deadline, "{}", c.output_of(id));
        std::thread::sleep(Duration::from_millis(100));
    }
    let step = format!("{id}.0");
    let scancel =
        |who: &TestUser, what: &str| c.run_as(&who.name, "ysched-slurm", &["scancel", what]);
    let out = scancel(&other, &step);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("permission denied"),
        "{}",
        stderr(&out)
    );
    let out = scancel(&user, &format!("{id}.7"));
    assert!(
        stderr(&out).contains(&format!("step {id}.7 is not running")),
        "{}",
        stderr(&out)
    );
    let out = scancel(&user, &step);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(c.wait_done(id, LONG), "COMPLETED", "{}", c.output_of(id));
    assert!(c.output_of(id).contains("after=143"), "{}", c.output_of(id));
    assert_eq!(state_of("0"), format!("{id}.0|CANCELLED|0:15"));
    assert_eq!(state_of("1"), format!("{id}.1|COMPLETED|0:0"));
}

#[test]
fn a_steps_output_goes_to_a_file_per_task_with_t_and_per_node_with_n() {
    let c = Cluster::started("");
    let script = c.script(
        "ranks.sh",
        &format!(
            "#!/bin/bash\nexport PATH={}:$PATH\n\
             srun -n 3 --output=rank-%j-%t.out --error=err-%2t.out sh -c 'echo rank=$SLURM_PROCID; echo oops >&2'\n\
             srun -n 2 --output=node-%n.out sh -c 'echo rank=$SLURM_PROCID'\n",
            shims(&c)
        ),
    );
    let id = c.submit(&["-c", "3", script.to_str().unwrap()]);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED", "{}", c.output_of(id));
    let read = |name: &str| std::fs::read_to_string(c.work.join(name)).unwrap_or_default();
    for task in 0..3 {
        assert_eq!(
            read(&format!("rank-{id}-{task}.out")),
            format!("rank={task}\n")
        );
        assert_eq!(read(&format!("err-0{task}.out")), "oops\n");
    }
    let mut both: Vec<String> = read("node-0.out").lines().map(String::from).collect();
    both.sort();
    assert_eq!(both, ["rank=0", "rank=1"]);
    assert_eq!(c.output_of(id), "", "nothing went to the job's own output");
}

#[test]
fn each_task_reads_its_own_input_file() {
    let c = Cluster::started("");
    for task in 0..2 {
        std::fs::write(
            c.work.join(format!("in-{task}.txt")),
            format!("data-{task}\n"),
        )
        .unwrap();
    }
    let script = c.script(
        "inputs.sh",
        &format!(
            "#!/bin/bash\nexport PATH={}:$PATH\n\
             srun -n 2 --label --input=in-%t.txt cat\n\
             echo fed | srun -n 2 --label --input=all cat\n\
             echo one | srun -n 2 --label --input=1 cat\n",
            shims(&c)
        ),
    );
    let id = c.submit(&["-c", "2", script.to_str().unwrap()]);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED", "{}", c.output_of(id));
    let out = c.output_of(id);
    assert!(
        out.contains("0: data-0\n") && out.contains("1: data-1\n"),
        "{out}"
    );
    // srun's own input: to every task, or to the one named.
    assert!(
        out.contains("0: fed\n") && out.contains("1: fed\n"),
        "{out}"
    );
    assert!(
        out.contains("1: one\n") && !out.contains("0: one\n"),
        "{out}"
    );
    let rows = c.run(
        "ysacct",
        &["-j", &id.to_string(), "-n", "-P", "-o", "JobID,State"],
    );
    assert_eq!(
        stdout(&rows),
        format!("{id}|COMPLETED\n{id}.0|COMPLETED\n{id}.1|COMPLETED\n{id}.2|COMPLETED\n")
    );
}

/// Drops `control` into the spool as `user` (the files are theirs, as a
/// hand-made request's would be) and returns the daemon's answer.
pub(crate) fn forged(
    c: &Cluster,
    user: &TestUser,
    control: ysched::proto::Control,
) -> serde_json::Value {
    use ysched::proto::{Envelope, Request};
    let name = format!("ctl-forged-{}", std::process::id());
    let reply = c.spool.join("replies").join(&name);
    std::fs::write(&reply, b"").unwrap();
    let body = serde_json::to_vec(&Envelope::new(Request::Control(control))).unwrap();
    let temp = c.spool.join("incoming").join(format!(".{name}"));
    std::fs::write(&temp, body).unwrap();
    for path in [&reply, &temp] {
        nix::unistd::chown(path, Some(user.uid.into()), None).unwrap();
    }
    std::fs::rename(&temp, c.spool.join("incoming").join(&name)).unwrap();
    let mut answer = serde_json::Value::Null;
    common::wait_for("the forged request's answer", LONG, || {
        answer = std::fs::read(&reply)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(serde_json::Value::Null);
        !answer.is_null()
    });
    answer
}

#[test]
fn a_step_forged_with_a_process_outside_its_job_signals_nothing() {
    require_root!();
    let (user, other) = (TestUser::create("stf"), TestUser::create("stg"));
    let c = Cluster::started("");
    let id = submit_as(&c, &user, &["--wrap", "sleep 300"]);
    c.wait_state(id, "RUNNING", LONG);
    // Another user's process, and the user's own outside the job.
    let mut victims: Vec<std::process::Child> = [&other, &user]
        .iter()
        .map(|who| {
            std::process::Command::new("runuser")
                .args(["-u", &who.name, "--", "sleep", "300"])
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    for victim in &victims {
        // runuser's child: the sleep itself.
        let children = format!("/proc/{0}/task/{0}/children", victim.id());
        let pid = std::fs::read_to_string(children)
            .ok()
            .and_then(|c| c.split_whitespace().next().and_then(|p| p.parse().ok()))
            .unwrap_or(victim.id());
        let begun = forged(
            &c,
            &user,
            ysched::proto::Control::StepBegin {
                job_id: id,
                name: "forged".into(),
                nodes: "here".into(),
                tasks: 1,
                pid,
            },
        );
        let step = begun["step"].as_u64().unwrap_or_else(|| panic!("{begun}"));
        let out = c.run_as(
            &user.name,
            "ysched-slurm",
            &["scancel", &format!("{id}.{step}")],
        );
        assert!(out.status.success(), "{}", stderr(&out));
    }
    std::thread::sleep(Duration::from_millis(500));
    for victim in &mut victims {
        assert!(
            victim.try_wait().unwrap().is_none(),
            "a process outside the job was signalled"
        );
        let _ = victim.kill();
        let _ = victim.wait();
    }
    assert_eq!(c.state(id), "RUNNING");
    c.run("yscancel", &[&id.to_string()]);
}
