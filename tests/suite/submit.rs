//! Submitting jobs and seeing them run: directives, the environment a job
//! gets, outputs, states, and the errors a user sees for bad input.

use crate::common;

use std::time::Duration;

use crate::common::{stderr, stdout, Cluster};

const LONG: Duration = Duration::from_secs(20);

#[test]
fn a_script_runs_with_its_directives_and_slurm_environment() {
    let c = Cluster::started("");
    c.script(
        "train.sh",
        "#!/bin/bash\n#YS -J yolo-train\n#SBATCH --gres=gpu:2 -t 10\n#SBATCH --comment 'first run'\necho \"id=$SLURM_JOB_ID ys=$YS_JOB_ID name=$SLURM_JOB_NAME gpus=$CUDA_VISIBLE_DEVICES\"\necho \"account=$SLURM_JOB_ACCOUNT restarts=$SLURM_RESTART_COUNT nodes=$SLURM_JOB_NODELIST ntasks=$SLURM_NTASKS\"\necho \"args=$*\"\necho \"submit_dir=$SLURM_SUBMIT_DIR pwd=$PWD\"\n",
    );
    let out = c.run("ysbatch", &["train.sh", "a b", "c"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let line = stdout(&out);
    assert!(line.starts_with("Submitted batch job "), "{line}");
    let id: u64 = line.trim().rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    let output = c.output_of(id);
    let work = c.work.display().to_string();
    assert!(
        output.contains(&format!("id={id} ys={id} name=yolo-train gpus=0,1")),
        "{output}"
    );
    assert!(
        output.contains("account=default restarts=0 nodes=gpu01 ntasks=1"),
        "{output}"
    );
    assert!(output.contains("args=a b c"), "{output}");
    assert!(
        output.contains(&format!("submit_dir={work} pwd={work}")),
        "{output}"
    );
    assert_eq!(c.field(id, "JobName"), "yolo-train");
    assert_eq!(c.field(id, "ExitCode"), "0:0");
    assert_eq!(c.field(id, "AllocTRES"), "cpu=1,gres/gpu=2,node=1");
    assert_eq!(c.field(id, "Timelimit"), "10:00");
    assert_eq!(c.field(id, "Comment"), "first run");
    assert_eq!(c.field(id, "NodeList"), "gpu01");
}

#[test]
fn wrap_parsable_stdin_and_command_line_options_win() {
    let c = Cluster::started("");
    let id = c.submit(&["-G", "1", "-J", "wrapped", "--wrap", "echo hello from wrap"]);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    assert_eq!(c.output_of(id), "hello from wrap\n");

    let mut child = c
        .command("ysbatch")
        .args(["--parsable", "-J", "from-cli", "-o", "piped-%j-%x.txt"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"#!/bin/sh\n#YS -J from-script\necho piped\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let id: u64 = stdout(&out).trim().parse().unwrap();
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    assert_eq!(c.field(id, "JobName"), "from-cli");
    let file = c.work.join(format!("piped-{id}-from-cli.txt"));
    assert_eq!(std::fs::read_to_string(file).unwrap(), "piped\n");
}

#[test]
fn a_failing_script_is_failed_with_its_exit_code() {
    let c = Cluster::started("");
    let id = c.submit(&["--wrap", "echo oops >&2; exit 3"]);
    assert_eq!(c.wait_done(id, LONG), "FAILED");
    assert_eq!(c.field(id, "ExitCode"), "3:0");
    assert_eq!(
        c.output_of(id),
        "oops\n",
        "stderr goes with stdout by default"
    );

    let id = c.submit(&["-e", "err-%j.txt", "--wrap", "kill -USR1 $$"]);
    assert_eq!(c.wait_done(id, LONG), "FAILED");
    assert_eq!(c.field(id, "ExitCode"), format!("0:{}", libc::SIGUSR1));
}

#[test]
fn a_job_that_cannot_start_fails_with_the_reason() {
    let c = Cluster::started("");
    // Under a file, no directory can be made for the output.
    let file = c.work.join("plain-file");
    std::fs::write(&file, "").unwrap();
    let out = format!("{}/out.txt", file.display());
    let id = c.submit(&["-o", &out, "--wrap", "true"]);
    assert_eq!(c.wait_done(id, LONG), "FAILED");
    let reason = c.field(id, "Reason");
    assert!(
        reason.contains(&format!("cannot open the output file {out}")),
        "{reason}"
    );
    assert_eq!(c.field(id, "ExitCode"), "1:0", "a launch failure is no 0:0");

    // A missing directory is made, as the job's user, for its output.
    let nested = c.work.join("made/by/%j/out.txt");
    let id = c.submit(&["-o", nested.to_str().unwrap(), "--wrap", "echo made"]);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    let written = c.work.join(format!("made/by/{id}/out.txt"));
    assert_eq!(std::fs::read_to_string(written).unwrap(), "made\n");
}

#[test]
fn bad_scripts_and_options_are_refused_with_the_line_or_option() {
    let c = Cluster::started("");
    c.script(
        "bad.sh",
        "#!/bin/sh\n#YS -J ok\n\n#SBATCH --gpu 2\necho hi\n",
    );
    let out = c.run("ysbatch", &["bad.sh"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "ysbatch: error: bad.sh: line 4: unknown option --gpu (did you mean --gpus?)\n"
    );

    c.script("notime.sh", "#!/bin/sh\n#SBATCH -t soon\n");
    let out = c.run("ysbatch", &["notime.sh"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("notime.sh: line 2: --time: invalid time limit 'soon'"),
        "{}",
        stderr(&out)
    );

    c.script("nobang.sh", "echo no interpreter\n");
    let out = c.run("ysbatch", &["nobang.sh"]);
    assert!(
        stderr(&out).contains("nobang.sh: line 1: the first line must start with #!"),
        "{}",
        stderr(&out)
    );

    let out = c.run("ysbatch", &["-G", "-2", "--wrap", "true"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a bad option value is a usage error: {}",
        stderr(&out)
    );

    let out = c.run("ysbatch", &["-G", "5000", "--wrap", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--gpus: 5000 is out of range (0 to 1024)"),
        "{}",
        stderr(&out)
    );

    let out = c.run("ysbatch", &["--bogus", "--wrap", "true"]);
    assert_eq!(out.status.code(), Some(2));

    let out = c.run("ysbatch", &["no-such-script.sh"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("cannot read no-such-script.sh"),
        "{}",
        stderr(&out)
    );

    // Nothing of the above reached the queue.
    let q = c.run("ysqueue", &["-h"]);
    assert_eq!(stdout(&q), "");
}

#[test]
fn requests_the_server_cannot_satisfy_are_refused_at_submit() {
    let c = Cluster::started("");
    let cases: [(&[&str], &str); 5] = [
        (
            &["-G", "8"],
            "8 GPUs requested but this server has at most 4 (GPUs: a100 x4)",
        ),
        (
            &["-G", "v100:1"],
            "no GPU of type 'v100' on this server (it has: a100 x4)",
        ),
        (
            &["-A", "physics"],
            "may not use account 'physics' (allowed: default)",
        ),
        (
            &["-q", "urgent"],
            "unknown QoS 'urgent' (known: critical, high, medium, low)",
        ),
        (&["-c", "64"], "64 CPUs requested but this server offers 16"),
    ];
    for (args, message) in cases {
        let out = c.run("ysbatch", &[args, &["--wrap", "true"]].concat());
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(stderr(&out).contains(message), "{args:?}: {}", stderr(&out));
    }
    // The daemon is unharmed and takes the next job.
    let id = c.submit(&["-G", "a100:4", "--wrap", "true"]);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
}

#[test]
fn accounts_and_qos_from_the_config() {
    let me = ysched::cli::current_user_name();
    let c = Cluster::started(&format!(
        "[[accounts]]\nname = \"vision\"\nusers = [\"{me}\"]\n[[accounts]]\nname = \"nlp\"\nusers = [\"{me}\"]\n[[accounts]]\nname = \"physics\"\nusers = [\"nobody-else\"]\n"
    ));
    let id = c.submit(&["--wrap", "true"]);
    assert_eq!(
        c.field(id, "Account"),
        "vision",
        "the first account is the default"
    );
    let id = c.submit(&["-A", "nlp", "-q", "high", "--wrap", "true"]);
    assert_eq!(c.field(id, "Account"), "nlp");
    assert_eq!(c.field(id, "QOS"), "high");
    let out = c.run("ysbatch", &["-A", "physics", "--wrap", "true"]);
    assert!(
        stderr(&out).contains("may not use account 'physics' (allowed: vision, nlp)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn held_jobs_wait_until_released_and_begin_times_are_kept() {
    let c = Cluster::started("");
    let held = c.submit(&["-H", "--wrap", "true"]);
    let later = c.submit(&["--begin", "now+2", "--wrap", "true"]);
    let q = c.run("ysqueue", &["-h", "-o", "%i %t %r"]);
    let text = stdout(&q);
    assert!(text.contains(&format!("{held} PD JobHeldUser")), "{text}");
    assert!(text.contains(&format!("{later} PD BeginTime")), "{text}");

    let out = c.run("yscontrol", &["release", &held.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(c.wait_done(held, LONG), "COMPLETED");
    assert_eq!(c.wait_done(later, LONG), "COMPLETED");

    let out = c.run("yscontrol", &["release", &held.to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!("job {held} has already finished (COMPLETED)")),
        "{}",
        stderr(&out)
    );

    let id = c.submit(&["-H", "--wrap", "true"]);
    let out = c.run("yscontrol", &["hold", &id.to_string()]);
    assert!(out.status.success());
    let out = c.run("yscontrol", &["show", "job", &id.to_string()]);
    let text = stdout(&out);
    assert!(
        text.contains("JobState=PENDING Reason=JobHeldAdmin Hold=admin"),
        "root holds as an admin: {text}"
    );
    assert!(text.contains(&format!("JobId={id} JobName=wrap")), "{text}");
}

#[test]
fn the_queue_and_accounting_views() {
    let c = Cluster::started("");
    let running = c.submit(&["-G", "3", "-J", "long", "--wrap", "sleep 30"]);
    let waiting = c.submit(&["-G", "2", "-J", "yolo-s", "-t", "30", "--wrap", "true"]);
    c.wait_state(running, "RUNNING", LONG);
    let q = stdout(&c.run("ysqueue", &[]));
    let lines: Vec<&str> = q.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        [
            "JOBID",
            "NAME",
            "USER",
            "ACCOUNT",
            "ST",
            "TIME",
            "GPUS",
            "NODELIST(REASON)"
        ]
    );
    assert!(
        lines[1].starts_with(&format!("{running} "))
            && lines[1].contains(" R ")
            && lines[1].ends_with("gpu01"),
        "{q}"
    );
    assert!(
        lines[2].starts_with(&format!("{waiting} "))
            && lines[2].contains(" PD ")
            && lines[2].ends_with("(Resources)"),
        "{q}"
    );

    let json: serde_json::Value =
        serde_json::from_str(&stdout(&c.run("ysqueue", &["--json"]))).unwrap();
    assert_eq!(json["jobs"][1]["pending_reason"], "Resources");
    assert_eq!(json["jobs"][0]["gpus_alloc"], serde_json::json!([0, 1, 2]));

    let only = stdout(&c.run("ysqueue", &["-h", "-t", "PD", "-o", "%i|%j|%l|%b"]));
    assert_eq!(only, format!("{waiting}|yolo-s|30:00|gres/gpu:2\n"));
    let none = stdout(&c.run("ysqueue", &["-h", "-n", "nothing-by-this-name"]));
    assert_eq!(none, "");

    let out = c.run("yscancel", &[&running.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(c.wait_done(running, LONG), "CANCELLED");
    assert_eq!(c.wait_done(waiting, LONG), "COMPLETED");

    let acct = stdout(&c.run(
        "ysacct",
        &[
            "-j",
            &format!("{running},{waiting}"),
            "-P",
            "-o",
            "JobID,JobName,State,NodeList",
        ],
    ));
    assert_eq!(acct, format!("JobID|JobName|State|NodeList\n{running}|long|CANCELLED by 0|gpu01\n{waiting}|yolo-s|COMPLETED|gpu01\n"));
    let by_state = stdout(&c.run("ysacct", &["-s", "CA", "-n", "-P", "-o", "JobID"]));
    assert_eq!(by_state, format!("{running}\n"));
    let future = stdout(&c.run("ysacct", &["-S", "now+1hours", "-n", "-P", "-o", "JobID"]));
    assert_eq!(future, "", "nothing ended after a time in the future");
    let json: serde_json::Value = serde_json::from_str(&stdout(
        &c.run("ysacct", &["-j", &waiting.to_string(), "--json"]),
    ))
    .unwrap();
    assert_eq!(json["jobs"][0]["state"], "COMPLETED");
    let bad = c.run("ysacct", &["-o", "JobID,Nonsense"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("unknown field 'Nonsense'"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn a_job_spooled_while_the_daemon_is_down_runs_when_it_starts() {
    let mut c = Cluster::new("");
    c.start();
    c.stop();
    let out = c.run("ysbatch", &["-J", "offline", "--wrap", "echo ran"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("ysctld is not running; the job is spooled as job-"),
        "{}",
        stderr(&out)
    );
    // Checks that need no daemon still refuse a job that could never run.
    let out = c.run("ysbatch", &["-G", "9", "--wrap", "true"]);
    assert_eq!(out.status.code(), Some(1));
    let out = c.run("ysqueue", &[]);
    assert!(
        stderr(&out).contains("ysctld is not running"),
        "{}",
        stderr(&out)
    );
    c.start();
    let mut id = 0;
    common::wait_for("the spooled job to be taken in", LONG, || {
        let out = stdout(&c.run(
            "ysacct",
            &["-n", "-P", "-o", "JobID,JobName", "--name", "offline"],
        ));
        id = out
            .split('|')
            .next()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        id > 0
    });
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    assert_eq!(c.output_of(id), "ran\n");
}
