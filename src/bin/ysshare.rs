use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = ysched::cli::ysshare::Args::parse();
    ysched::cli::main("ysshare", || ysched::cli::ysshare::run(args))
}
