use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = ysched::cli::yswebd::Args::parse();
    ysched::cli::main("yswebd", || ysched::cli::yswebd::run(args))
}
