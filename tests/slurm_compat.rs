//! The Slurm command layer as tools drive it: tests/slurm_compat.py (the
//! standard library only) runs sbatch, squeue, scancel, sacct, sinfo,
//! scontrol and srun — links to ysched-slurm — against a real daemon.

mod common;

use common::{bin_dir, stderr, stdout, Cluster};

#[test]
fn a_python_tool_drives_ysched_through_the_slurm_commands() {
    let c = Cluster::started("");
    let shims = c.dir.path().join("slurm-compat");
    std::fs::create_dir_all(&shims).unwrap();
    for name in ysched::cli::slurm::COMMANDS {
        std::os::unix::fs::symlink(bin_dir().join("ysched-slurm"), shims.join(name)).unwrap();
    }
    let path = format!(
        "{}:{}:{}",
        shims.display(),
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slurm_compat.py");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg(&c.work)
        .env("PATH", path)
        .env("YS_CONF", &c.config)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "slurm_compat.py: {}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(stdout(&out), "ok\n");
}
