//! The Slurm command layer as tools drive it: tests/suite/slurm_compat.py (the
//! standard library only) runs sbatch, squeue, scancel, sacct, sinfo,
//! scontrol and srun — links to ysched-slurm — against a real daemon, and
//! tests/suite/slurm_clients.py does so with the exact command lines and job
//! scripts of snakemake's, parsl's, submitit's and dask-jobqueue's Slurm
//! support.

use crate::common::{bin_dir, stderr, stdout, Cluster};

/// Runs `tests/SCRIPT` with the shims first on PATH; it prints "ok".
fn drive(c: &Cluster, script: &str) {
    let shims = c.dir.path().join("slurm-compat");
    std::fs::create_dir_all(&shims).unwrap();
    for name in ysched::cli::slurm::COMMANDS {
        let _ = std::os::unix::fs::symlink(bin_dir().join("ysched-slurm"), shims.join(name));
    }
    let path = format!(
        "{}:{}:{}",
        shims.display(),
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/suite")
        .join(script);
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg(&c.work)
        .env("PATH", path)
        .env("YS_CONF", &c.config)
        .current_dir(&c.work)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}: {}{}\nysctld's log:\n{}",
        script.display(),
        stdout(&out),
        stderr(&out),
        c.log()
    );
    assert_eq!(stdout(&out), "ok\n");
}

#[test]
fn a_python_tool_drives_ysched_through_the_slurm_commands() {
    let c = Cluster::started("");
    drive(&c, "slurm_compat.py");
}

#[test]
fn snakemake_parsl_submitit_and_dask_jobqueue_work_unmodified() {
    let c = Cluster::started("");
    drive(&c, "slurm_clients.py");
}

#[test]
fn scontrol_expands_and_compresses_hostlists_as_slurm_does() {
    let scontrol = |args: &[&str], env: Option<&str>| {
        let mut command = std::process::Command::new(bin_dir().join("ysched-slurm"));
        command
            .arg("scontrol")
            .args(args)
            .env_remove("SLURM_JOB_NODELIST");
        if let Some(list) = env {
            command.env("SLURM_JOB_NODELIST", list);
        }
        command.output().unwrap()
    };
    let out = scontrol(&["show", "hostnames", "gpu[01-03],cpu1"], None);
    assert_eq!(
        stdout(&out),
        "gpu01\ngpu02\ngpu03\ncpu1\n",
        "{}",
        stderr(&out)
    );
    let out = scontrol(&["show", "hostnames"], Some("n[8-10]"));
    assert_eq!(stdout(&out), "n8\nn9\nn10\n");
    let out = scontrol(&["show", "hostlist", "gpu01,gpu02,gpu03,gpu05"], None);
    assert_eq!(stdout(&out), "gpu[01-03,05]\n");
    let out = scontrol(&["show", "hostnames", "gpu[01-"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("unclosed '['"), "{}", stderr(&out));
    let out = scontrol(&["show", "hostnames"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("SLURM_JOB_NODELIST"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn export_slurm_writes_slurms_files_and_keeps_what_is_there() {
    let c = Cluster::new(
        "[[accounts]]\nname = \"vision\"\nshares = 60\nusers = [\"alice\"]\nmax_gpus = 2\n",
    );
    let dir = c.dir.path().join("slurm");
    let export = |extra: &[&str]| {
        let mut args = vec![
            "--config",
            c.config.to_str().unwrap(),
            "export-slurm",
            dir.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        c.run("ysctld", &args)
    };
    let out = export(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let conf = std::fs::read_to_string(dir.join("slurm.conf")).unwrap();
    assert!(
        conf.contains("NodeName=gpu01 CPUs=16 RealMemory=65536 TmpDisk=")
            && conf.contains(" Gres=gpu:a100:4 State=UNKNOWN"),
        "{conf}"
    );
    let load = std::fs::read_to_string(dir.join("sacctmgr.cfg")).unwrap();
    assert!(load.contains("Account - 'vision':Description='vision':Organization='vision':Fairshare=60:GrpTRES=gres/gpu=2"), "{load}");
    assert!(
        load.contains("User - 'alice':DefaultAccount='vision'"),
        "{load}"
    );
    assert!(std::fs::read_to_string(dir.join("qos.sh"))
        .unwrap()
        .contains("sacctmgr -i add qos"));
    // A second export does not overwrite what is there without --force.
    std::fs::write(dir.join("slurm.conf"), "edited").unwrap();
    let out = export(&[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("already exist"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(dir.join("slurm.conf")).unwrap(),
        "edited"
    );
    assert!(export(&["--force"]).status.success());
    assert_ne!(
        std::fs::read_to_string(dir.join("slurm.conf")).unwrap(),
        "edited"
    );
}

/// The rows of contrib/slurm-compat/README.md's table between `start`
/// and `end`, as their cells.
fn readme_rows(start: &str, end: &str) -> Vec<Vec<String>> {
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/slurm-compat/README.md"),
    )
    .unwrap();
    let from = readme.find(start).expect("the table's start marker");
    let to = readme[from..].find(end).expect("the table's end marker") + from;
    readme[from..to]
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| command") && !l.starts_with("|---"))
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

/// One Slurm command line, as a tool runs it: its exit code and stderr.
fn slurm(c: &Cluster, command: &str, args: &[&str]) -> (Option<i32>, String) {
    let (code, _, err) = slurm_out(c, command, args);
    (code, err)
}

#[test]
fn every_documented_slurm_option_does_what_the_compat_table_says() {
    let running = Cluster::started("");
    // salloc would be granted allocations: against a controller that is
    // not running, it stops after reading its options.
    let stopped = Cluster::new("");
    let table = readme_rows("<!-- options:", "<!-- end of options -->");
    assert!(table.len() > 350, "{} rows", table.len());
    let mut wrong = Vec::new();
    for row in &table {
        let (command, decision) = (row[0].as_str(), row[2].as_str());
        for name in row[1].split(", ").map(|n| n.trim_matches('`')) {
            // A value where the option takes one: a wrong value is the
            // option's own error, never "unexpected argument".
            let with = [name, "1"];
            let operands: &[&str] = match command {
                "sbatch" => &["-H", "--wrap", "true"],
                "salloc" => &["true"],
                "srun" => &["true"],
                "scancel" => &["999999"],
                "scontrol" => &["ping"],
                "sacctmgr" => &["list", "qos"],
                _ => &[],
            };
            let c = if command == "salloc" {
                &stopped
            } else {
                &running
            };
            let (mut code, mut err) = table_row(c, command, &[&with[..], operands].concat());
            // scontrol reads a word after a flag as its command.
            let as_command = command == "scontrol" && err.contains("'1 ping' is not supported");
            if err.contains("unexpected argument '1'")
                || err.contains("unknown option 1")
                || as_command
            {
                (code, err) = table_row(c, command, &[&[name][..], operands].concat());
            }
            // An option scontrol's parser does not know is read as its
            // command, refused as one: it must not come to that.
            let unknown = err.contains("unexpected argument")
                || err.contains("unknown option")
                || (command == "scontrol" && err.contains("is not supported by ysched's scontrol"));
            let warned = err.contains(&format!("warning: {name} is accepted"));
            let refused = err.contains(&format!("error: {name} is not supported here: "));
            let right = match decision {
                "honoured" | "honoured as" => !unknown && !warned && !refused,
                "accepted" => !unknown && !warned && !refused,
                "accepted, with a warning" => warned && !unknown,
                "refused" => refused && code == Some(1),
                other => panic!("a decision the table does not know: {other}"),
            };
            if !right {
                wrong.push(format!(
                    "{command} {name} ({decision}): exit {code:?}: {}",
                    err.trim()
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_format_letter_and_field_of_slurms_is_shown() {
    let c = Cluster::started("");
    let id = c.submit(&["-H", "--wrap", "true"]);
    for row in readme_rows("<!-- letters:", "<!-- end of letters -->") {
        let command = row[0].as_str();
        for item in row[2].split(' ').chain(row[3].split(' ')) {
            let args: Vec<String> = match command {
                "sacct" => vec!["-j".into(), id.to_string(), "-o".into(), item.into()],
                _ => vec!["-o".into(), item.into()],
            };
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (code, err) = slurm(&c, command, &args);
            assert_eq!(code, Some(0), "{command} -o {item}: {err}");
        }
    }
    let _ = stdout;
}

/// A command line of the compat table's: srun's rows are srun's in a
/// job (outside one it would ask for an allocation, where the options a
/// step leaves to its job are the allocation's).
fn table_row(c: &Cluster, command: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(bin_dir().join("ysched-slurm"))
        .arg(command)
        .args(args)
        .env("YS_CONF", &c.config)
        .env("SLURM_JOB_ID", "999999")
        .env_remove("YS_ALLOCATION")
        .current_dir(&c.work)
        .output()
        .unwrap();
    (out.status.code(), stderr(&out))
}

/// A Slurm command's exit code, stdout and stderr.
fn slurm_out(c: &Cluster, command: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(bin_dir().join("ysched-slurm"))
        .arg(command)
        .args(args)
        .env("YS_CONF", &c.config)
        .env_remove("SLURM_JOB_ID")
        .current_dir(&c.work)
        .output()
        .unwrap();
    (out.status.code(), stdout(&out), stderr(&out))
}

#[test]
fn the_lines_real_tools_stopped_on_now_work() {
    let c = Cluster::started("");
    // A GPU partition found from sinfo -a with %p.
    let (code, out, err) = slurm_out(&c, "sinfo", &["-a", "-h", "-o", "%P %G %l %p %c %m"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.starts_with("ysched* gpu:a100:4 infinite 1 16 65536"),
        "{out}"
    );
    // sbatch -W waits and exits as the job did.
    let (code, out, err) = slurm_out(&c, "sbatch", &["-W", "--wrap", "sleep 0.5; exit 3"]);
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(out.starts_with("Submitted batch job "), "{out}");
    let waited: u64 = out.trim().rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(c.state(waited), "FAILED");
    let (code, _, err) = slurm_out(&c, "sbatch", &["--wait", "--wrap", "true"]);
    assert_eq!(code, Some(0), "{err}");
    // Step ids as their job's: the job and its steps.
    for ids in [format!("{waited}.batch"), format!("{waited}.0,{waited}.1")] {
        let (code, out, err) =
            slurm_out(&c, "sacct", &["-n", "-P", "-j", &ids, "-o", "JobID,State"]);
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(
            out.trim(),
            format!("{waited}|FAILED\n{waited}.batch|FAILED\n{waited}.extern|COMPLETED"),
            "{ids}"
        );
    }
    // scontrol show job with no id: every job.
    let held: Vec<u64> = (0..2)
        .map(|_| c.submit(&["-H", "--wrap", "true"]))
        .collect();
    let (code, out, err) = slurm_out(&c, "scontrol", &["show", "job"]);
    assert_eq!(code, Some(0), "{err}");
    for id in &held {
        assert!(out.contains(&format!("JobId={id} ")), "{out}");
    }
    // scancel -Q cancels, quietly.
    let (code, out, err) = slurm_out(&c, "scancel", &["-Q", &held[0].to_string()]);
    assert_eq!((code, out.as_str(), err.as_str()), (Some(0), "", ""));
    assert_eq!(
        c.wait_done(held[0], std::time::Duration::from_secs(10)),
        "CANCELLED"
    );
    let (code, _, _) = slurm_out(&c, "scancel", &["--quiet", &held[1].to_string()]);
    assert_eq!(code, Some(0));
    // #SBATCH lines go through the same table, with their line numbers.
    c.script(
        "bb.sh",
        "#!/bin/sh\n#SBATCH --acctg-freq=30\n#SBATCH --bb=capacity=1G\ntrue\n",
    );
    let (code, _, err) = slurm_out(&c, "sbatch", &["bb.sh"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("bb.sh: line 3: --bb is not supported here: there are no burst buffers here"),
        "{err}"
    );
    c.script("freq.sh", "#!/bin/sh\n#SBATCH --acctg-freq=30 -H\ntrue\n");
    let (code, _, err) = slurm_out(&c, "sbatch", &["freq.sh"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("freq.sh: line 2: --acctg-freq is accepted and changes nothing here"),
        "{err}"
    );
}

/// Slurm's own test suite reads every job with `scontrol -d -o show
/// jobs`: one line a job, among them a job that ended moments ago
/// (slurmctld keeps it MinJobAge), and with `-d` where a running job's
/// GPUs are. Without `-o`, each record is followed by one blank line.
#[test]
fn scontrol_shows_every_job_one_a_line_with_details_and_those_just_ended() {
    let c = Cluster::started("");
    let long = std::time::Duration::from_secs(30);
    let done = c.submit(&["--wrap", "true"]);
    assert_eq!(c.wait_done(done, long), "COMPLETED");
    let running = c.submit(&["-G", "1", "--wrap", "sleep 60"]);
    c.wait_state(running, "RUNNING", long);
    let (code, out, err) = slurm_out(&c, "scontrol", &["-d", "-o", "show", "jobs"]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let line_of = |id: u64| {
        let start = format!("JobId={id} ");
        *lines.iter().find(|l| l.starts_with(&start)).unwrap()
    };
    assert!(line_of(done).contains(" JobState=COMPLETED "), "{out}");
    let live = line_of(running);
    assert!(live.contains(" JobState=RUNNING "), "{live}");
    assert!(live.contains(" GRES=gpu:1(IDX:"), "-d's details: {live}");
    // One job, one line, as atf asks for it.
    let (code, one, err) = slurm_out(&c, "scontrol", &["-o", "show", "job", &done.to_string()]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(one.lines().count(), 1, "{one}");
    // Records apart by one blank line.
    let (_, all, _) = slurm_out(&c, "scontrol", &["show", "jobs"]);
    assert_eq!(all.matches("\n\nJobId=").count(), 1, "{all}");
    assert!(!all.contains("\n\n\n"), "{all}");
    assert!(!all.contains(" GRES=gpu:"), "details only with -d: {all}");
}

/// atf (Slurm's test library) reads the nodes as `scontrol show nodes -o`,
/// the option after the command: one line per node, with Slurm's fields;
/// the partition it names is the one `sinfo` and `export-slurm` name.
#[test]
fn scontrol_shows_each_node_on_one_line_with_options_after_the_command() {
    let c = Cluster::started("");
    let (code, out, err) = slurm_out(&c, "scontrol", &["show", "nodes", "-o"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    for field in [
        "NodeName=gpu01 ",
        " CPUTot=16 ",
        " RealMemory=65536 ",
        " Gres=gpu:a100:4 ",
        " State=IDLE ",
        " Partitions=ysched ",
        " CfgTRES=cpu=16,mem=65536M,gres/gpu=4 ",
    ] {
        assert!(out.contains(field), "{field} in {out}");
    }
    assert!(
        !out.contains("GPU=0"),
        "one line leaves out the GPU lines: {out}"
    );
    // Without -o: one record over several lines, the GPUs below.
    let (_, full, _) = slurm_out(&c, "scontrol", &["show", "node", "gpu01"]);
    assert!(
        full.lines().count() > 4 && full.contains("\n   GPU=0 Type=a100"),
        "{full}"
    );
    // One partition name in sinfo, scontrol and the export to Slurm.
    let (_, sinfo, _) = slurm_out(&c, "sinfo", &["-h", "-o", "%R"]);
    assert_eq!(sinfo, "ysched\n");
    let export = c.dir.path().join("export");
    let out = c.run("ysctld", &["export-slurm", export.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let conf = std::fs::read_to_string(export.join("slurm.conf")).unwrap();
    assert!(conf.contains("\nPartitionName=ysched "), "{conf}");
}

/// `--help` and `--usage` in Slurm's layout, as tools and Slurm's own
/// test suite read them: the usage a run of bracketed options ending with
/// what the command takes; sacct's and scontrol's help their own shape;
/// ysched's own options in a section of their own; a `--help` after
/// srun's command is the command's.
#[test]
fn slurm_names_answer_help_and_usage_in_slurms_layout() {
    let c = Cluster::new("");
    let usage = |command: &str| {
        let (code, out, err) = slurm_out(&c, command, &["--usage"]);
        assert_eq!(code, Some(0), "{command}: {err}");
        out
    };
    for (command, tail) in [
        ("squeue", ""),
        ("sinfo", ""),
        ("sbatch", " executable [args...]"),
        ("srun", " executable [args...]"),
        ("salloc", " [command [args...]]"),
        ("scancel", " [job_id[_array_id][.step_id]]"),
    ] {
        let text = usage(command);
        let lead = format!("Usage: {command} [");
        assert!(text.starts_with(&lead), "{text}");
        let options = text[lead.len() - 1..]
            .trim_end()
            .strip_suffix(tail)
            .unwrap();
        // Each item a bracketed option: `[-t STATE]`, `[--me]`.
        for item in options.split(']').map(str::trim).filter(|i| !i.is_empty()) {
            assert!(item.starts_with("[-"), "{command}: '{item}' in {text}");
        }
        assert!(
            text.contains("[-V]") || text.contains("[--version]"),
            "{text}"
        );
    }
    assert!(
        !usage("sbatch").contains("--bb"),
        "refused options are not offered"
    );
    let help = |command: &str| slurm_out(&c, command, &["--help"]).1;
    let squeue = help("squeue");
    assert!(squeue.starts_with("Usage: squeue [OPTIONS]\n"), "{squeue}");
    assert!(squeue.contains("\nHelp options:\n"), "{squeue}");
    let srun = help("srun");
    for line in [
        "-N, --nodes=N",
        "-G, --gpus=n",
        "-q, --qos=qos",
        "--mincpus=n",
    ] {
        assert!(srun.contains(line), "{line} in {srun}");
    }
    let sacct = help("sacct");
    assert!(
        sacct.starts_with("sacct [<OPTION>]\n    Valid <OPTION> values are:\n"),
        "{sacct}"
    );
    assert!(sacct.contains("     -S, --starttime:\n"), "{sacct}");
    let scontrol = help("scontrol");
    assert!(scontrol.contains("show <ENTITY> [<ID>]"), "{scontrol}");
    assert_eq!(slurm_out(&c, "scontrol", &["version"]).1, "slurm 22.05.8\n");
    assert!(
        help("sbatch").contains("\nOptions of ysched's own:\n")
            && help("sbatch").contains("--container-image=IMAGE"),
        "{}",
        help("sbatch")
    );
    let (_, manager, _) = slurm_out(&c, "sacctmgr", &["--usage"]);
    assert!(manager.contains("Valid <COMMAND> values are:"), "{manager}");
}

/// srun outside a job speaks as Slurm's srun: nothing when its allocation
/// comes at once, `-v` the options it was given, its job and its step;
/// the other tasks run on when one fails (kill-on-bad-exit is off unless
/// asked for) and srun exits with the worst status; a memory request too
/// small for the step's own processes (`--mem=1`) still runs.
#[test]
fn srun_outside_a_job_speaks_as_slurms_srun() {
    let c = Cluster::started("");
    let (code, out, err) = slurm_out(&c, "srun", &["echo", "hello"]);
    assert_eq!((code, out.as_str(), err.as_str()), (Some(0), "hello\n", ""));
    let (code, _, err) = slurm_out(&c, "srun", &["-v", "--job-name=named", "-n1", "true"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("srun: job-name            : named\n"), "{err}");
    assert!(err.contains("srun: ntasks              : 1\n"), "{err}");
    assert!(err.contains("srun: verbose             : 1\n"), "{err}");
    let id: u64 = err
        .split("srun: jobid ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no jobid line: {err}"));
    assert!(
        err.contains(&format!("srun: launching StepId={id}.0 on host gpu01")),
        "{err}"
    );
    assert_eq!(c.field(id, "JobName"), "named");
    let (_, _, err) = slurm_out(&c, "srun", &["-vvv", "true"]);
    assert!(err.contains("srun: verbose             : 3\n"), "{err}");
    // Task 1 fails at once; task 0 runs on and writes its mark.
    let mark = c.work.join("task0-ran");
    let script = format!(
        "if [ $SLURM_PROCID = 1 ]; then exit 66; fi; sleep 1; touch {}",
        mark.display()
    );
    let (code, _, err) = slurm_out(&c, "srun", &["-n", "2", "sh", "-c", &script]);
    assert_eq!(code, Some(66), "{err}");
    assert!(mark.exists(), "task 0 was stopped: {err}");
    let (code, _, err) = slurm_out(&c, "srun", &["--mem=1", "true"]);
    assert_eq!(code, Some(0), "{err}");
    // --immediate waits for nothing: a held allocation is given up.
    let (code, _, err) = slurm_out(&c, "srun", &["--immediate", "--hold", "true"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("srun: error: Unable to allocate resources"),
        "{err}"
    );
    let (_, listed, _) = slurm_out(&c, "squeue", &["-h", "-t", "PD"]);
    assert_eq!(listed, "", "the held allocation was withdrawn");
    let (code, _, err) = slurm_out(&c, "srun", &["-I", "true"]);
    assert_eq!(code, Some(0), "{err}");
}

/// srun says how its failed tasks ended, grouped as Slurm's srun groups
/// them; `-W/--wait=SECONDS` kills the rest that long after the first
/// task ends, saying so; `-O` lets more tasks than CPUs share them.
#[test]
fn srun_says_how_tasks_ended_and_waits_out_the_rest() {
    let c = Cluster::started("");
    let (code, _, err) = slurm_out(&c, "srun", &["sh", "-c", "kill -11 $$"]);
    assert_eq!(code, Some(139), "{err}");
    assert!(
        err.contains("srun: error: gpu01: task 0: Segmentation fault"),
        "{err}"
    );
    // 18 tasks on 16 CPUs: task 1 ends at once, the others are killed
    // a second later.
    let started = std::time::Instant::now();
    let (code, _, err) = slurm_out(
        &c,
        "srun",
        &[
            "-n18",
            "-O",
            "-W1",
            "sh",
            "-c",
            "[ $SLURM_PROCID = 1 ] && exit 0; exec sleep 30",
        ],
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{err}"
    );
    assert_eq!(code, Some(137), "{err}");
    assert!(err.contains("srun: First task exited 1s ago"), "{err}");
    assert!(err.contains(" tasks 0,2-17: running"), "{err}");
    assert!(
        err.contains("srun: error: gpu01: tasks 0,2-17: Killed"),
        "{err}"
    );
    // Without -O the 18 tasks need 18 CPUs.
    let (code, _, err) = slurm_out(&c, "srun", &["-n18", "true"]);
    assert_eq!(code, Some(1), "{err}");
}

/// `scancel --signal` signals a job's steps, not its batch shell, as
/// Slurm's does; `-b` the batch shell alone; yscancel every process.
#[test]
fn scancel_signals_the_steps_and_with_batch_the_shell() {
    let c = Cluster::started("");
    let long = std::time::Duration::from_secs(30);
    let mark = c.work.join("got-usr1");
    let stop = c.work.join("stop");
    let body = format!(
        "#!/bin/sh\n{slurm} srun sh -c 'trap \"echo usr1 >> {mark}\" USR1; while [ ! -e {stop} ]; do sleep 0.1; done'\n",
        slurm = bin_dir().join("ysched-slurm").display(),
        mark = mark.display(),
        stop = stop.display()
    );
    let script = c.script("trapper.sh", &body);
    let id = c.submit(&[script.to_str().unwrap()]);
    c.wait_state(id, "RUNNING", long);
    // The step's shell is up once its srun is recorded.
    crate::common::wait_for("the step", long, || {
        let (_, out, _) = slurm_out(&c, "squeue", &["-s", "-h", "-j", &id.to_string()]);
        !out.trim().is_empty()
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (code, _, err) = slurm_out(&c, "scancel", &["--signal=USR1", &id.to_string()]);
    assert_eq!(code, Some(0), "{err}");
    crate::common::wait_for("the step to get USR1", long, || mark.exists());
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(
        c.state(id),
        "RUNNING",
        "the batch shell survives a USR1 sent to its steps"
    );
    // -b: the batch shell alone, which USR1 ends.
    let (code, _, err) = slurm_out(&c, "scancel", &["-b", "--signal=USR1", &id.to_string()]);
    assert_eq!(code, Some(0), "{err}");
    std::fs::write(&stop, "").unwrap();
    assert_ne!(c.wait_done(id, long), "COMPLETED");
    assert_eq!(std::fs::read_to_string(&mark).unwrap(), "usr1\n");
}

/// `squeue -r` lists each pending task of an array on a line of its own,
/// as Slurm's does; without it a run of them is one line.
#[test]
fn squeue_r_lists_each_array_task_on_its_own_line() {
    let c = Cluster::started("");
    let id = c.submit(&["-H", "--array=0-4", "--wrap", "true"]);
    let (code, folded, err) = slurm_out(&c, "squeue", &["-h", "-o", "%i %t"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(folded, format!("{id}_[0-4] PD\n"));
    let (code, each, err) = slurm_out(&c, "squeue", &["-r", "-h", "-o", "%i %t"]);
    assert_eq!(code, Some(0), "{err}");
    let expected: String = (0..5).map(|t| format!("{id}_{t} PD\n")).collect();
    assert_eq!(each, expected);
}

/// `command` of the Slurm names run by a shell with umask 023 and the
/// variables `env` set: its status, output and errors.
fn slurm_with(
    c: &Cluster,
    env: &[(&str, &str)],
    command: &str,
    args: &[&str],
) -> (Option<i32>, String, String) {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("umask 023; exec \"$0\" \"$@\"")
        .arg(bin_dir().join("ysched-slurm"))
        .arg(command)
        .args(args)
        .env("YS_CONF", &c.config)
        .env_remove("SLURM_JOB_ID")
        .envs(env.iter().copied())
        .current_dir(&c.work)
        .output()
        .unwrap();
    (out.status.code(), stdout(&out), stderr(&out))
}

/// Slurm's input variables stand for their options (the command line
/// wins), a refused option's variable is refused by name, jobs and steps
/// run with their submitter's umask, a step's tasks are told where srun
/// runs and where they are, and a held job shows priority 0.
#[test]
fn input_variables_umask_and_step_variables_as_slurm_sets_them() {
    let c = Cluster::started("");
    let long = std::time::Duration::from_secs(30);
    let (code, out, err) = slurm_with(
        &c,
        &[
            ("SBATCH_JOB_NAME", "from-env"),
            ("SBATCH_OUTPUT", "env-%j.out"),
        ],
        "sbatch",
        &["--parsable", "--wrap", "umask"],
    );
    assert_eq!(code, Some(0), "{err}");
    let id: u64 = out.trim().parse().unwrap();
    assert_eq!(c.wait_done(id, long), "COMPLETED");
    assert_eq!(c.field(id, "JobName"), "from-env");
    let written = std::fs::read_to_string(c.work.join(format!("env-{id}.out"))).unwrap();
    assert_eq!(written, "0023\n", "the job runs with its submitter's umask");
    // The command line wins over the variable.
    let (_, out, _) = slurm_with(
        &c,
        &[("SBATCH_JOB_NAME", "from-env")],
        "sbatch",
        &["--parsable", "-J", "from-line", "--wrap", "true"],
    );
    assert_eq!(c.field(out.trim().parse().unwrap(), "JobName"), "from-line");
    let (code, _, err) = slurm_with(
        &c,
        &[("SBATCH_CONSTRAINT", "x"), ("SBATCH_BATCH", "y")],
        "sbatch",
        &["--wrap", "true"],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("SBATCH_BATCH (as --batch) is not supported here"),
        "{err}"
    );
    // srun outside a job: SLURM_NPROCS tasks, each with srun's umask and
    // the step's variables, its own pid among them.
    let (code, out, err) = slurm_with(
        &c,
        &[("SLURM_NPROCS", "3")],
        "srun",
        &["sh", "-c", "echo $SLURM_PROCID $(umask) $SLURM_TOPOLOGY_ADDR $SLURM_TOPOLOGY_ADDR_PATTERN $SLURM_SRUN_COMM_HOST $SLURM_CPUS_ON_NODE $SLURM_TASK_PID $$"],
    );
    assert_eq!(code, Some(0), "{err}");
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(lines.len(), 3, "{out}");
    for (rank, line) in lines.iter().enumerate() {
        let words: Vec<&str> = line.split(' ').collect();
        assert_eq!(
            words[..4],
            [rank.to_string().as_str(), "0023", "gpu01", "node"],
            "{line}"
        );
        assert!(words[4].parse::<std::net::IpAddr>().is_ok(), "{line}");
        assert!(words[5].parse::<u32>().is_ok_and(|n| n > 0), "{line}");
        assert!(words[6].parse::<u32>().is_ok_and(|n| n > 1), "{line}");
        assert_eq!(
            words[6], words[7],
            "SLURM_TASK_PID is the task's pid: {line}"
        );
    }
    let held = c.submit(&["-H", "--wrap", "true"]);
    let (_, shown, _) = slurm_out(&c, "scontrol", &["show", "job", &held.to_string()]);
    assert!(
        shown.contains(" Priority=0\n") || shown.contains(" Priority=0 "),
        "{shown}"
    );
}

/// Tools read the Slurm release from `-V` (`slurm 22.05.8`): each Slurm
/// name answers as Slurm's commands do; ysched's own names keep theirs.
#[test]
fn each_slurm_name_answers_its_version_as_slurm_does() {
    let c = Cluster::new("");
    for command in [
        "sbatch", "salloc", "srun", "squeue", "sacct", "scancel", "sinfo", "scontrol", "sshare",
        "sacctmgr",
    ] {
        for flag in ["-V", "--version"] {
            let (code, out, err) = slurm_out(&c, command, &[flag]);
            assert_eq!(code, Some(0), "{command} {flag}: {err}");
            assert_eq!(out, "slurm 22.05.8\n", "{command} {flag}");
        }
    }
    let own = std::process::Command::new(bin_dir().join("ysqueue"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(stdout(&own).starts_with("ysqueue "), "{}", stdout(&own));
}

/// A job sbatch submits with no `-o` writes `slurm-%j.out` in its
/// working directory, as Slurm's does (ysbatch's own is `ys-%j.out`);
/// an `#SBATCH -o` in the script still wins.
#[test]
fn sbatch_writes_slurm_out_files_where_no_output_is_named() {
    let c = Cluster::started("");
    let long = std::time::Duration::from_secs(30);
    let (code, out, err) = slurm_out(&c, "sbatch", &["--parsable", "--wrap", "echo plain"]);
    assert_eq!(code, Some(0), "{err}");
    let id: u64 = out.trim().parse().unwrap();
    assert_eq!(c.wait_done(id, long), "COMPLETED");
    let file = c.work.join(format!("slurm-{id}.out"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "plain\n");
    assert!(!c.work.join(format!("ys-{id}.out")).exists());
    std::fs::write(
        c.work.join("named.sh"),
        "#!/bin/sh\n#SBATCH -o named-%j.txt\necho named\n",
    )
    .unwrap();
    let (code, out, err) = slurm_out(&c, "sbatch", &["--parsable", "named.sh"]);
    assert_eq!(code, Some(0), "{err}");
    let id: u64 = out.trim().parse().unwrap();
    assert_eq!(c.wait_done(id, long), "COMPLETED");
    let named = c.work.join(format!("named-{id}.txt"));
    assert_eq!(std::fs::read_to_string(named).unwrap(), "named\n");
    assert!(!c.work.join(format!("slurm-{id}.out")).exists());
}

/// sacct lists a job's batch and extern steps beside each srun, each
/// step with what its tasks used (peak memory, CPU time), a step
/// stopped by `scancel N.S` CANCELLED; `seff` reports the job in Slurm's
/// seff layout.
#[test]
fn sacct_lists_every_step_with_its_usage_and_seff_reports_the_job() {
    let c = Cluster::started("");
    let long = std::time::Duration::from_secs(40);
    let slurm = bin_dir().join("ysched-slurm");
    // Two tasks that each hold 64 MiB and use a second of CPU; then a
    // step cancelled on its own.
    let body = format!(
        "#!/bin/sh\n\
         {slurm} srun python3 -c 'import time; x = bytearray(64 << 20)\n\
while time.process_time() < 1.0: pass'\n\
         {slurm} srun sleep 60 &\n\
         while ! {slurm} squeue -s -h -j $SLURM_JOB_ID | grep -q sleep; do sleep 0.2; done\n\
         {slurm} scancel $SLURM_JOB_ID.1\n\
         wait\n\
         exit 0\n",
        slurm = slurm.display()
    );
    let script = c.script("used.sh", &body);
    let id = c.submit(&["-n", "2", "--mem=1G", script.to_str().unwrap()]);
    assert_eq!(c.wait_done(id, long), "COMPLETED", "{}", c.output_of(id));
    let (code, rows, err) = slurm_out(
        &c,
        "sacct",
        &[
            "-j",
            &id.to_string(),
            "-n",
            "-P",
            "-o",
            "JobID,JobName,State,ExitCode,NTasks",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        rows.lines().collect::<Vec<_>>(),
        [
            format!("{id}|used.sh|COMPLETED|0:0|"),
            format!("{id}.batch|batch|COMPLETED|0:0|1"),
            format!("{id}.extern|extern|COMPLETED|0:0|1"),
            format!("{id}.0|python3|COMPLETED|0:0|2"),
            format!("{id}.1|sleep|CANCELLED|0:15|2"),
        ]
    );
    let (_, used, _) = slurm_out(
        &c,
        "sacct",
        &[
            "-j",
            &format!("{id}.0"),
            "-n",
            "-P",
            "-o",
            "JobID,MaxRSS,AveRSS,MaxRSSTask,TotalCPU,UserCPU,AveCPU,TRESUsageInTot",
        ],
    );
    let step = used
        .lines()
        .find(|l| l.starts_with(&format!("{id}.0|")))
        .unwrap_or_else(|| panic!("no step 0 in {used}"));
    let cells: Vec<&str> = step.split('|').collect();
    let kib = |cell: &str| -> u64 { cell.trim_end_matches('K').parse().unwrap() };
    assert!(kib(cells[1]) >= 64 << 10, "MaxRSS holds 64 MiB: {step}");
    assert!(kib(cells[2]) >= 64 << 10, "AveRSS too: {step}");
    assert!(["0", "1"].contains(&cells[3]), "{step}");
    let seconds = |cell: &str| -> f64 {
        let (m, s) = cell.split_once(':').unwrap();
        m.parse::<f64>().unwrap() * 60.0 + s.parse::<f64>().unwrap()
    };
    assert!(
        seconds(cells[4]) >= 2.0,
        "two tasks of a CPU second: {step}"
    );
    assert!(seconds(cells[5]) > 0.0, "some in user mode: {step}");
    assert!(seconds(cells[6]) >= 1.0, "each task's: {step}");
    assert!(
        cells[7].starts_with("cpu=") && cells[7].contains(",mem="),
        "{step}"
    );
    seff_reports(&c, id);
}

/// `seff ID` of the job of two tasks above, and its errors.
fn seff_reports(c: &Cluster, id: u64) {
    let (code, seff, err) = slurm_out(c, "seff", &[&id.to_string()]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = seff.lines().collect();
    let expected = [
        format!("Job ID: {id}"),
        "Cluster: gpu01".to_string(),
        format!("User/Group: {}/{}", whoami(), group_name()),
        "State: COMPLETED (exit code 0)".to_string(),
        "Nodes: 1".to_string(),
        "Cores per node: 2".to_string(),
    ];
    assert_eq!(lines[..6], expected, "{seff}");
    let utilized = lines[6].strip_prefix("CPU Utilized: ").unwrap();
    assert!(utilized >= "00:00:02", "{seff}");
    assert!(lines[7].starts_with("CPU Efficiency: ") && lines[7].ends_with(" core-walltime"));
    assert!(lines[8].starts_with("Job Wall-clock time: "), "{seff}");
    assert!(lines[9].starts_with("Memory Utilized: "), "{seff}");
    assert!(lines[10].starts_with("Memory Efficiency: ") && lines[10].contains("% of 1.00 GB"));
    let (code, _, err) = slurm_out(c, "seff", &["999999"]);
    assert_eq!((code, err.as_str()), (Some(2), "Job not found.\n"));
    let (code, usage, _) = slurm_out(c, "seff", &[]);
    assert_eq!(code, Some(1));
    assert!(
        usage.starts_with("Usage: seff [Options] <Jobid>\n"),
        "{usage}"
    );
}

fn whoami() -> String {
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .unwrap()
        .name
}

fn group_name() -> String {
    nix::unistd::Group::from_gid(nix::unistd::getgid())
        .unwrap()
        .unwrap()
        .name
}

/// Slurm's commands print reasons as Slurm's one-word codes, which
/// parsers split on spaces read; ysacct keeps the words, and gives the
/// code too.
#[test]
fn reasons_are_slurms_one_word_codes_and_the_words_stay_in_ysacct() {
    let c = Cluster::started("");
    let long = std::time::Duration::from_secs(30);
    let failed = c.submit(&["--wrap", "exit 3"]);
    let timed = c.submit(&["-t", "0:02", "--wrap", "sleep 30"]);
    let cancelled = c.submit(&["--wrap", "sleep 30"]);
    c.wait_state(cancelled, "RUNNING", long);
    let (code, err) = slurm(&c, "scancel", &[&cancelled.to_string()]);
    assert_eq!(code, Some(0), "{err}");
    for id in [failed, timed, cancelled] {
        c.wait_done(id, long);
    }
    let ids = format!("{failed},{timed},{cancelled}");
    let (code, rows, err) = slurm_out(
        &c,
        "sacct",
        &[
            "-n",
            "-P",
            "-X",
            "-j",
            &ids,
            "-o",
            "JobID,Reason,ReasonText",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let rows: Vec<&str> = rows.lines().collect();
    assert!(
        rows[0].starts_with(&format!("{failed}|NonZeroExitCode|")),
        "{rows:?}"
    );
    assert!(
        rows[1].starts_with(&format!("{timed}|TimeLimit|")),
        "{rows:?}"
    );
    assert!(
        rows[2].starts_with(&format!("{cancelled}|None|cancelled by ")),
        "{rows:?}"
    );
    let words = c.field(cancelled, "Reason");
    assert!(words.starts_with("cancelled by "), "ysacct: {words}");
    assert_eq!(c.field(timed, "ReasonCode"), "TimeLimit");
    let held = c.submit(&["-H", "--wrap", "true"]);
    let (_, shown, _) = slurm_out(
        &c,
        "squeue",
        &["-h", "-j", &held.to_string(), "-o", "%i %r"],
    );
    assert_eq!(shown, format!("{held} JobHeldUser\n"));
    let (_, job, _) = slurm_out(
        &c,
        "scontrol",
        &["-o", "show", "job", &cancelled.to_string()],
    );
    assert!(
        job.contains(" Reason=None ReasonText=\"cancelled by "),
        "{job}"
    );
    let (_, job, _) = slurm_out(&c, "scontrol", &["-o", "show", "job", &failed.to_string()]);
    assert!(job.contains(" Reason=NonZeroExitCode Hold="), "{job}");
}

/// squeue's long format (`-O FIELD:[.]SIZE`), `%B` (the batch host), and
/// `--helpformat` of squeue and sacct, as Slurm's.
#[test]
fn squeue_long_format_batch_host_and_helpformat_as_slurms() {
    let c = Cluster::started("");
    let id = c.submit(&["--wrap", "sleep 30"]);
    c.wait_state(id, "RUNNING", std::time::Duration::from_secs(20));
    let held = c.submit(&["-H", "--wrap", "true"]);
    let (code, out, err) = slurm_out(
        &c,
        "squeue",
        &[
            "-O",
            "JobID:8,StateCompact:.3 ,BatchHost,Reason",
            "-j",
            &format!("{id},{held}"),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    let words = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(words(lines[0]), ["JOBID", "ST", "EXEC_HOST", "REASON"]);
    assert!(lines[1].starts_with(&format!("{id:<8}  R gpu01 ")), "{out}");
    assert_eq!(words(lines[1])[1..], ["R", "gpu01", "None"]);
    assert!(lines[2].starts_with(&format!("{held:<8} PD")), "{out}");
    assert_eq!(words(lines[2])[1..], ["PD", "n/a", "JobHeldUser"]);
    let (_, batch_host, _) = slurm_out(&c, "squeue", &["-h", "-j", &id.to_string(), "-o", "%B"]);
    assert_eq!(batch_host.trim(), "gpu01");
    let (code, _, err) = slurm_out(&c, "squeue", &["-O", "JobID,Bogus"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("Invalid job format specification: Bogus"),
        "{err}"
    );
    for (command, field) in [("sacct", "MaxRSS"), ("squeue", "BatchHost")] {
        let (code, fields, err) = slurm_out(&c, command, &["--helpformat"]);
        assert_eq!(code, Some(0), "{err}");
        assert!(fields.starts_with("Account "), "{fields}");
        assert!(fields.split_whitespace().any(|f| f == field), "{fields}");
    }
}

/// scontrol keeps an array's pending tasks as one record (`JobId=N
/// ArrayTaskId=0-7`), as slurmctld does; a pending task cancelled leaves
/// it, and the array cancelled whole shows cancelled.
#[test]
fn scontrol_folds_an_arrays_pending_tasks_into_one_record() {
    let c = Cluster::started("");
    let id = c.submit(&["--array=0-7", "--begin=now+1hour", "--wrap", "true"]);
    let show = |what: &str| slurm_out(&c, "scontrol", &["-o", "show", "job", what]);
    let (code, out, err) = show(&id.to_string());
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.starts_with(&format!("JobId={id} ")), "{out}");
    assert!(out.contains(" ArrayTaskId=0-7 "), "{out}");
    let (code, err) = slurm(&c, "scancel", &[&format!("{id}_7")]);
    assert_eq!(code, Some(0), "{err}");
    let (code, _, _) = show(&format!("{id}_7"));
    assert_ne!(code, Some(0), "a pending task cancelled is no record");
    let (_, out, _) = show(&id.to_string());
    assert!(out.contains(" ArrayTaskId=0-6 "), "{out}");
    let (code, err) = slurm(&c, "scancel", &[&id.to_string()]);
    assert_eq!(code, Some(0), "{err}");
    let (_, out, _) = show(&id.to_string());
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.contains(" JobState=CANCELLED ") && out.contains(" ArrayTaskId=0-7 "),
        "{out}"
    );
    let (_, all, _) = slurm_out(&c, "scontrol", &["-o", "show", "jobs"]);
    assert_eq!(all.lines().count(), 1, "{all}");
}

/// squeue, scontrol, sinfo and sacct `--json` answer in Slurm 22.05's
/// data_parser layout: `meta`, `errors`, and `jobs` or `nodes` (sacct's
/// jobs with their steps in them).
#[test]
fn the_json_of_slurms_commands_is_slurms_layout() {
    let c = Cluster::started("");
    let id = c.submit(&["-J", "json-job", "--wrap", "true"]);
    c.wait_done(id, std::time::Duration::from_secs(20));
    let held = c.submit(&["-H", "-J", "held-job", "--wrap", "true"]);
    let json = |command: &str, args: &[&str]| -> serde_json::Value {
        let (code, out, err) = slurm_out(&c, command, args);
        assert_eq!(code, Some(0), "{command} {args:?}: {err}");
        let value: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{command} {args:?}: {e}: {out}"));
        assert!(value["meta"]["plugin"].is_object(), "{value}");
        assert_eq!(value["errors"], serde_json::json!([]), "{value}");
        value
    };
    let queue = json("squeue", &["--json"]);
    let names: Vec<&str> = queue["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["held-job"], "{queue}");
    assert_eq!(queue["jobs"][0]["job_id"], held);
    let shown = json("scontrol", &["--json", "show", "job", &id.to_string()]);
    assert_eq!(shown["jobs"][0]["job_id"], id);
    assert_eq!(shown["jobs"][0]["job_state"][0], "COMPLETED", "{shown}");
    let nodes = json("sinfo", &["--json"]);
    assert_eq!(nodes["nodes"][0]["name"], "gpu01", "{nodes}");
    let node = json("scontrol", &["show", "node", "gpu01", "--json"]);
    assert_eq!(node["nodes"].as_array().unwrap().len(), 1);
    let accounted = json("sacct", &["--json", "-j", &id.to_string()]);
    let job = &accounted["jobs"][0];
    assert_eq!(job["name"], "json-job", "{accounted}");
    let steps: Vec<&str> = job["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["batch", "extern"], "{accounted}");
    let (code, _, err) = slurm_out(&c, "sinfo", &["--yaml"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("--yaml is not supported here: use --json"),
        "{err}"
    );
}

/// `scontrol show steps` lists the steps running in the running jobs,
/// the batch and extern steps beside each srun's, a record each.
#[test]
fn scontrol_shows_the_running_steps() {
    let c = Cluster::started("");
    let long = std::time::Duration::from_secs(20);
    let body = format!(
        "#!/bin/sh\n{} srun sleep 30\n",
        bin_dir().join("ysched-slurm").display()
    );
    let script = c.script("stepper.sh", &body);
    let id = c.submit(&[script.to_str().unwrap()]);
    c.wait_state(id, "RUNNING", long);
    crate::common::wait_for("the step", long, || {
        let (_, out, _) = slurm_out(&c, "scontrol", &["-o", "show", "steps"]);
        out.contains(&format!("StepId={id}.0 "))
    });
    let (code, out, err) = slurm_out(&c, "scontrol", &["-o", "show", "steps"]);
    assert_eq!(code, Some(0), "{err}");
    let ids: Vec<&str> = out
        .lines()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    let expected = [".batch", ".extern", ".0"].map(|s| format!("StepId={id}{s}"));
    assert_eq!(ids, expected, "{out}");
    assert!(
        out.contains(" State=RUNNING Partition=ysched NodeList=gpu01 "),
        "{out}"
    );
    let (code, one, _) = slurm_out(&c, "scontrol", &["show", "step", &format!("{id}.0")]);
    assert_eq!(code, Some(0));
    assert!(one.starts_with(&format!("StepId={id}.0 UserId=")), "{one}");
    assert!(
        one.contains("\n   Nodes=1 CPUs=1 Tasks=1 Name=sleep "),
        "{one}"
    );
    let (code, _, _) = slurm_out(&c, "scontrol", &["show", "step", &format!("{id}.5")]);
    assert_eq!(code, Some(1));
    // squeue -s with squeue's step letters: %A is the step's tasks.
    let (code, steps, err) = slurm_out(&c, "squeue", &["-s", "-o", "%i %j %A %P"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        steps,
        format!("STEPID NAME TASKS PARTITION\n{id}.0 sleep 1 ysched\n")
    );
    let (_, plain, _) = slurm_out(&c, "squeue", &["-s", "-h"]);
    assert!(
        plain.trim_start().starts_with(&format!("{id}.0 ")),
        "{plain}"
    );
    let _ = slurm(&c, "scancel", &[&id.to_string()]);
    c.wait_done(id, long);
    let (_, none, _) = slurm_out(&c, "scontrol", &["show", "steps"]);
    assert_eq!(none, "No job steps in the system\n");
}

/// sinfo's long format (`-O FIELD:[.]SIZE`) and `--helpformat`, as
/// Slurm's.
#[test]
fn sinfo_long_format_and_helpformat_as_slurms() {
    let c = Cluster::started("");
    let (code, out, err) = slurm_out(
        &c,
        "sinfo",
        &["-N", "-O", "NodeList:8,StateLong:.6 ,CPUs:5,Features"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "NODELIST STATE CPUS N/A\ngpu01     idle 16   N/A\n");
    let (code, _, err) = slurm_out(&c, "sinfo", &["-O", "NodeList,Bogus"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("Invalid node format specification: Bogus"),
        "{err}"
    );
    let (code, fields, _) = slurm_out(&c, "sinfo", &["--helpformat"]);
    assert_eq!(code, Some(0));
    assert!(
        fields.split_whitespace().any(|f| f == "StateLong"),
        "{fields}"
    );
}

/// `srun SCRIPT MARK` outside a job, its standard error piped.
fn srun_outside_a_job(
    c: &Cluster,
    script: &std::path::Path,
    mark: &std::path::Path,
) -> std::process::Child {
    std::process::Command::new(bin_dir().join("ysched-slurm"))
        .arg("srun")
        .arg(script)
        .arg(mark)
        .env("YS_CONF", &c.config)
        .env_remove("SLURM_JOB_ID")
        .current_dir(&c.work)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// A Ctrl-C reaches srun's tasks as Slurm's srun passes it: the first
/// says how the tasks stand, a second within a second sends them SIGINT
/// and ends the step (tasks that ignore it are killed); with
/// `--quit-on-interrupt` the first kills them. Both for a step srun
/// starts through a task server (outside a job) and for the one task it
/// runs itself (in a batch job).
#[test]
fn ctrl_c_reports_then_aborts_and_quit_on_interrupt_kills_at_once() {
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;
    let c = Cluster::started("");
    let script = c.work.join("deaf.sh");
    std::fs::write(
        &script,
        "#!/bin/bash\ntrap '' INT\ntouch \"$1\"\nsleep 1000\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    fn interrupt_with(signal: &str, pid: u32) {
        let _ = std::process::Command::new("kill")
            .args([signal, &pid.to_string()])
            .status();
    }
    let interrupt = |pid: u32| interrupt_with("-INT", pid);
    let started = |mark: &std::path::Path| {
        crate::common::wait_for("the task to start", Duration::from_secs(30), || {
            mark.exists()
        })
    };
    // Outside a job: twice within a second.
    let mark = c.work.join("outside.started");
    let srun = srun_outside_a_job(&c, &script, &mark);
    started(&mark);
    interrupt(srun.id());
    std::thread::sleep(Duration::from_millis(300));
    interrupt(srun.id());
    // Bounded: a srun that does not end is killed, and the test fails.
    let pid = srun.id();
    let ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let waited = ended.clone();
    let guard = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(30));
        if !waited.load(std::sync::atomic::Ordering::SeqCst) {
            interrupt_with("-KILL", pid);
        }
    });
    let out = srun.wait_with_output().unwrap();
    ended.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(!guard.is_finished(), "srun did not end within 30 s");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(137), "{err}");
    for line in [
        "srun: interrupt (one more within 1 sec to abort)\n",
        ".0 task 0: running\n",
        "srun: sending Ctrl-C to StepId=",
        "srun: Job step aborted: Waiting up to 5 seconds for job step to finish.\n",
        "srun: error: gpu01: task 0: Killed\n",
    ] {
        assert!(err.contains(line), "no {line:?} in: {err}");
    }
    // In a batch job, the one task srun runs itself: the first Ctrl-C
    // kills it.
    let mark = c.work.join("inside.started");
    let pid_file = c.work.join("srun.pid");
    let srun_name = c.work.join("srun");
    let _ = std::os::unix::fs::symlink(bin_dir().join("ysched-slurm"), &srun_name);
    let wrap = format!(
        "{} --quit-on-interrupt {} {} & echo $! > {}; wait",
        srun_name.display(),
        script.display(),
        mark.display(),
        pid_file.display()
    );
    let id = c.submit(&["--wrap", &wrap]);
    started(&mark);
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    interrupt(pid);
    c.wait_state(id, "COMPLETED", Duration::from_secs(30));
    let log = c.output_of(id);
    assert!(log.contains("srun: forcing job termination\n"), "{log}");
    // Its job cancelled, srun says its step is aborted, as Slurm's does.
    let mark = c.work.join("cancelled.started");
    let srun = srun_outside_a_job(&c, &script, &mark);
    started(&mark);
    let (_, running, _) = slurm_out(&c, "squeue", &["-h", "-t", "R", "-o", "%i"]);
    let (code, _, err) = slurm_out(&c, "scancel", &[running.trim()]);
    assert_eq!(code, Some(0), "{err}");
    let out = srun.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(
        err.contains("srun: Job step aborted: Waiting up to "),
        "{err}"
    );
    assert!(
        err.contains("srun: error: gpu01: task 0: Terminated"),
        "{err}"
    );
}

/// `scontrol listpids` lists the running jobs' processes on this machine:
/// the batch script's as `batch`, each task of a step with its local and
/// global id; `N.S` one step's; a job that is not running is refused.
#[test]
fn scontrol_listpids_lists_a_jobs_processes_by_step_and_task() {
    use std::time::Duration;
    let c = Cluster::started("");
    let srun_name = c.work.join("srun");
    let _ = std::os::unix::fs::symlink(bin_dir().join("ysched-slurm"), &srun_name);
    let id = c.submit(&["--wrap", &format!("{} -n2 sleep 60", srun_name.display())]);
    let mut listed = String::new();
    crate::common::wait_for("both tasks listed", Duration::from_secs(30), || {
        listed = slurm_out(&c, "scontrol", &["listpids", &format!("{id}.0")]).1;
        let task = |n: &str| format!(" {id:<8} 0        {n:<7} {n:<8}");
        listed.contains(&task("0")) && listed.contains(&task("1"))
    });
    assert!(
        listed.starts_with("PID      JOBID    STEPID   LOCALID GLOBALID\n"),
        "{listed}"
    );
    let (code, all, err) = slurm_out(&c, "scontrol", &["listpids", &id.to_string()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        all.contains(&format!(" {id:<8} batch    -       -")),
        "{all}"
    );
    assert!(all.lines().count() > 3, "{all}");
    let (_, _, _) = slurm_out(&c, "scancel", &[&id.to_string()]);
    let (code, _, err) = slurm_out(&c, "scontrol", &["listpids", "99999"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("job 99999 is not running"), "{err}");
}

/// `--mincpus` raises the CPUs a job takes on each node, as Slurm's
/// cons_tres does; more than the node has is refused at submit.
#[test]
fn mincpus_raises_the_cpus_per_node_and_more_than_a_node_has_is_refused() {
    let c = Cluster::started("");
    let (code, _, err) = slurm_out(&c, "srun", &["--mincpus=17", "true"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("17 CPUs requested but this server offers 16"),
        "{err}"
    );
    let (code, _, err) = slurm_out(&c, "srun", &["--mincpus=1", "true"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, out, err) = slurm_out(
        &c,
        "sbatch",
        &[
            "--parsable",
            "--hold",
            "--mincpus=4",
            "-c",
            "2",
            "--wrap",
            "true",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let (_, cpus, _) = slurm_out(&c, "squeue", &["-h", "-j", out.trim(), "-o", "%C"]);
    assert_eq!(cpus.trim(), "4");
}

/// `--tmp` is held against each node's temporary disk (its /tmp, shown
/// as TmpDisk): more than the node has is refused at submit, as Slurm
/// refuses a node configuration it has not.
#[test]
fn tmp_is_held_against_the_nodes_temporary_disk() {
    let c = Cluster::started("");
    let (code, shown, err) = slurm_out(&c, "scontrol", &["show", "node", "-o"]);
    assert_eq!(code, Some(0), "{err}");
    let tmp_disk: u64 = shown
        .split_whitespace()
        .find_map(|w| w.strip_prefix("TmpDisk="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no TmpDisk in {shown}"));
    assert!(tmp_disk > 0, "{shown}");
    let (_, listed, _) = slurm_out(&c, "sinfo", &["-h", "-o", "%d"]);
    assert_eq!(listed.trim(), tmp_disk.to_string());
    let too_much = format!("--tmp={}", tmp_disk + 1);
    let (code, _, err) = slurm_out(&c, "srun", &[&too_much, "true"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("its TmpDisk) holds"), "{err}");
    let (code, _, err) = slurm_out(&c, "srun", &["--tmp=0", "true"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = slurm_out(&c, "srun", &[&format!("--tmp={tmp_disk}"), "true"]);
    assert_eq!(code, Some(0), "{err}");
}
