use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = ysched::cli::yscancel::Args::parse();
    ysched::cli::main("yscancel", || ysched::cli::yscancel::run(args))
}
