//! `ysched-slurm`: Slurm's sbatch, squeue, scancel, sacct, sshare, sinfo,
//! scontrol and srun over ysched, chosen by the name it is called by.

use std::ffi::OsString;
use std::path::Path;

fn main() -> std::process::ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().collect();
    let called = args
        .first()
        .and_then(|a| Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    args.remove(0);
    // `ysched-slurm sbatch ...` works as well as a link named sbatch.
    let name = if ysched::cli::slurm::COMMANDS.contains(&called.as_str()) {
        called
    } else if !args.is_empty() {
        args.remove(0).to_string_lossy().into_owned()
    } else {
        called
    };
    ysched::cli::slurm::main(&name, args)
}
