use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = ysched::cli::ystoken::Args::parse();
    ysched::cli::main("ystoken", || ysched::cli::ystoken::run(args))
}
