//! The per-job supervisor; started by ysctld, never by hand.

fn main() -> std::process::ExitCode {
    let mut args = std::env::args_os().skip(1);
    match (args.next(), args.next()) {
        (Some(dir), None) => std::process::ExitCode::from(ysched::exec::supervisor::run(
            std::path::Path::new(&dir),
        ) as u8),
        _ => {
            eprintln!("usage: ysstepd JOB_DIR (started by ysctld, not by hand)");
            std::process::ExitCode::from(2)
        }
    }
}
