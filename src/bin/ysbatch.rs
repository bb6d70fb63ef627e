use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = ysched::cli::ysbatch::Args::parse();
    ysched::cli::main("ysbatch", || ysched::cli::ysbatch::run(args))
}
