use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = ysched::cli::ysctld::Args::parse();
    ysched::cli::main("ysctld", || ysched::cli::ysctld::run(args))
}
