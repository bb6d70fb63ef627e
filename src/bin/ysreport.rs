use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = ysched::cli::ysreport::Args::parse();
    ysched::cli::main("ysreport", || ysched::cli::ysreport::run(args))
}
