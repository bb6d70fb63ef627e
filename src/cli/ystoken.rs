//! `ystoken`: a signed token for the caller (Slurm's `scontrol token`),
//! printed as `SLURM_JWT=...` for the shell. It proves who submits on a
//! pool's node, where the node's word is not enough, and (later) to the
//! web API. Administrators may make one for a service account.

use clap::Parser;

use super::{ask, load_config, print, CliError, CliResult};
use crate::proto::{Control, Reply, Request};

#[derive(Parser, Debug)]
#[command(
    name = "ystoken",
    version,
    about = "Print a signed token that proves who you are to ysched (SLURM_JWT)",
    after_help = "Examples:\n  export $(ystoken)                 # for ysbatch on a pool's node\n  ystoken --lifespan 8:00:00\n  ystoken -u ci-bot --lifespan 7-00:00:00   # admins: a service account"
)]
pub struct Args {
    /// How long the token lasts: seconds, or a time as for --time (M:S, H:M:S, D-H:M:S); default 1800 s, at most 30 days
    #[arg(long, value_name = "TIME")]
    pub lifespan: Option<String>,
    /// The user the token names (administrators only; default: you)
    #[arg(short = 'u', long = "user", value_name = "USER")]
    pub user: Option<String>,
}

pub fn run(args: Args) -> CliResult {
    let lifespan = args.lifespan.as_deref().map(parse_lifespan).transpose()?;
    let config = load_config()?;
    let control = Control::Token {
        lifespan,
        user: args.user,
    };
    match ask(&config, Request::Control(control))? {
        Reply::Token { token, .. } => print(&format!("SLURM_JWT={token}\n")),
        Reply::Rejected { error } => Err(CliError::failed(error)),
        other => Err(CliError::failed(format!(
            "unexpected reply from ysctld: {other:?}"
        ))),
    }
}

/// Seconds (`3600`, Slurm's `lifespan=`), or a time limit's form.
pub fn parse_lifespan(text: &str) -> Result<u64, CliError> {
    if let Ok(seconds) = text.trim().parse::<u64>() {
        return Ok(seconds);
    }
    match crate::model::units::parse_time_limit(text) {
        Ok(Some(secs)) => Ok(secs),
        _ => Err(CliError::usage(format!(
            "--lifespan '{text}': give seconds (3600) or a time (8:00:00, 7-00:00:00)"
        ))),
    }
}
