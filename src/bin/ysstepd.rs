//! The per-job supervisor; started by ysctld, never by hand.

fn main() -> std::process::ExitCode {
    let mut args = std::env::args_os().skip(1);
    match (args.next(), args.next()) {
        (Some(flag), None) if flag == "--server" => {
            std::process::ExitCode::from(ysched::exec::forkserver::serve() as u8)
        }
        (Some(dir), None) => std::process::ExitCode::from(ysched::exec::supervisor::run(
            std::path::Path::new(&dir),
        ) as u8),
        _ => {
            eprintln!("usage: ysstepd JOB_DIR | ysstepd --server (started by ysctld, not by hand)");
            std::process::ExitCode::from(2)
        }
    }
}
