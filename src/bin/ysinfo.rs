use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = ysched::cli::ysinfo::Args::parse();
    ysched::cli::main("ysinfo", || ysched::cli::ysinfo::run(args))
}
