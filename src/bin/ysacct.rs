use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = ysched::cli::ysacct::Args::parse();
    ysched::cli::main("ysacct", || ysched::cli::ysacct::run(args))
}
