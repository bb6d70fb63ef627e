use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = ysched::cli::ysnoded::Args::parse();
    ysched::cli::main("ysnoded", || ysched::cli::ysnoded::run(args))
}
