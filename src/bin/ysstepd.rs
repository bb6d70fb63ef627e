//! The per-job supervisor; started by ysctld, never by hand.

fn main() -> std::process::ExitCode {
    let mut args = std::env::args_os().skip(1);
    const USAGE: &str = "usage: ysstepd JOB_DIR | ysstepd --server\n\n\
        The per-job supervisor (like slurmstepd): ysctld starts one for each job, \
        with the job's lock and control socket on descriptors 3 and 4, and one \
        fork server with --server. It is not run by hand; see ysstepd(8).";
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
        (Some(dir), None) => std::process::ExitCode::from(ysched::exec::supervisor::run(
            std::path::Path::new(&dir),
        ) as u8),
        _ => {
            eprintln!("{USAGE}");
            std::process::ExitCode::from(2)
        }
    }
}
