use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = ysched::cli::yscontrol::Args::parse();
    ysched::cli::main("yscontrol", || ysched::cli::yscontrol::run(args))
}
