use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = ysched::cli::ysqueue::Args::parse();
    ysched::cli::main("ysqueue", || ysched::cli::ysqueue::run(args))
}
