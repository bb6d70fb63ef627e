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
        conf.contains("NodeName=gpu01 CPUs=16 RealMemory=65536 Gres=gpu:a100:4"),
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
