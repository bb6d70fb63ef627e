//! `yswebd`: the web server (the JSON API). It runs in the foreground as
//! an unprivileged account (`[web] user`; systemd's `User=`), logging to
//! standard error, and serves until stopped.

use std::path::PathBuf;

use clap::Parser;

use super::{init_logging, CliError, CliResult};
use crate::config::{self, Config};

#[derive(Parser, Debug)]
#[command(
    name = "yswebd",
    version,
    about = "The ysched web server: slurmrestd's JSON API and ysched's own",
    long_about = "The ysched web server. It serves slurmrestd's JSON API on slurmrestd's paths \
                  (/slurm/v0.0.45/jobs, /job/submit, ...), ysched's own (/ysched/v1/budgets, \
                  usage, shares, waste) and the OpenAPI description (/openapi.json), on [web] listen, \
                  over HTTPS when [web] certificate and key are set. Each request carries a token \
                  (ystoken) and is passed to ysctld, which judges it as the token's user by the \
                  command line's rules. It does not run as root."
)]
pub struct Args {
    /// The configuration (default: $YS_CONF, /etc/ysched/ysched.toml, ~/.config/ysched/ysched.toml)
    #[arg(short = 'f', long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Listen here instead of [web] listen (HOST:PORT)
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<std::net::SocketAddr>,
    /// Log more (-v debug, -vv trace); YS_LOG overrides
    #[arg(short = 'v', long, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

pub fn run(args: Args) -> CliResult {
    let path = args.config.unwrap_or_else(|| config::locate().0);
    let mut config = if path.exists() {
        Config::load(&path).map_err(|e| CliError::failed(e.to_string()))?
    } else {
        Config::builtin(&path)
    };
    if let Some(listen) = args.listen {
        config.web.listen = Some(listen);
    }
    if nix::unistd::geteuid().is_root() {
        return Err(CliError::failed(format!(
            "yswebd does not run as root: run it as {} (systemd's User=, or runuser -u USER -- yswebd)",
            config.web.user.as_deref().unwrap_or("an account of its own, named in [web] user")
        )));
    }
    if let Some(user) = &config.web.user {
        let me = super::current_user_name();
        if &me != user {
            super::warn(
                "yswebd",
                &format!("running as {me}, not [web] user {user}: users a proxy names cannot be signed in"),
            );
        }
    }
    init_logging(args.verbose);
    let context = crate::web::Context::new(config).map_err(|e| CliError::failed(e.to_string()))?;
    crate::web::serve(context)?;
    Ok(())
}
