use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = ysched::cli::ysalloc::Args::parse();
    ysched::cli::main("ysalloc", || ysched::cli::ysalloc::run(args))
}
