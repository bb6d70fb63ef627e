//! The per-job supervisor; started by ysctld, never by hand.

fn main() -> std::process::ExitCode {
    let mut args = std::env::args_os().skip(1);
    const USAGE: &str = "usage: ysstepd JOB_DIR | ysstepd --server | ysstepd --serve-tasks\n\n\
        The per-job supervisor (like slurmstepd): ysctld starts one for each job, \
        with the job's lock and control socket on descriptors 3 and 4, and one \
        fork server with --server, and on each node of a job over several the task server \
        srun talks to with --serve-tasks. It is not run by hand; see ysstepd(8).";
    match (args.next(), args.next()) {
        (Some(flag), None) if flag == "--help" || flag == "-h" => {
            println!("{USAGE}");
            std::process::ExitCode::SUCCESS
        }
        (Some(flag), None) if flag == "--version" || flag == "-V" => {
            println!("ysstepd {}", env!("CARGO_PKG_VERSION"));
            std::process::ExitCode::SUCCESS
        }
        (Some(flag), None) if flag == "--server" => {
            std::process::ExitCode::from(ysched::exec::forkserver::serve() as u8)
        }
        (Some(flag), None) if flag == "--serve-tasks" => serve_tasks(),
        (Some(dir), None) => std::process::ExitCode::from(ysched::exec::supervisor::run(
            std::path::Path::new(&dir),
        ) as u8),
        _ => {
            eprintln!("{USAGE}");
            std::process::ExitCode::from(2)
        }
    }
}

/// The task server of a job's part on one of its other nodes, as the
/// job's user: the signals meant for the job's tasks are caught and
/// dropped here (they reach the tasks directly); its supervisor ends it.
fn serve_tasks() -> std::process::ExitCode {
    let job = std::env::var("SLURM_JOB_ID")
        .ok()
        .and_then(|j| j.parse::<u64>().ok());
    let key = std::env::var("YS_STEP_KEY").ok();
    let (Some(job), Some(key)) = (job, key) else {
        eprintln!(
            "ysstepd --serve-tasks: runs only as a job's part (no SLURM_JOB_ID or YS_STEP_KEY)"
        );
        return std::process::ExitCode::from(2);
    };
    let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    use signal_hook::consts::*;
    for signal in [SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGTERM] {
        let _ = signal_hook::flag::register(signal, dropped.clone());
    }
    let served = ysched::net::steps::own_addresses()
        .and_then(|addresses| ysched::net::steps::serve(job, &key, &addresses));
    match served {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ysstepd --serve-tasks: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
