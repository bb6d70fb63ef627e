//! `ystoken`: a signed token for the caller (Slurm's `scontrol token`),
//! printed as `SLURM_JWT=...` for the shell, or kept in the caller's
//! home for the commands on the pool's nodes (`--save`). Each token is
//! for a use (its audience: the REST API, the portal, the pool's nodes
//! or one node), has an id, and can be listed and revoked.
//! Administrators may make, list and revoke any user's.

use clap::Parser;

use super::{ask, load_config, print, CliError, CliResult};
use crate::proto::{Control, Reply, Request};
use crate::token::TokenRecord;

#[derive(Parser, Debug)]
#[command(
    name = "ystoken",
    version,
    about = "Make, keep, list and revoke the signed tokens that prove who you are to ysched (SLURM_JWT)",
    after_help = "Examples:\n  ystoken --save                    # once a week: commands on the pool's nodes use it\n  ystoken --lifespan 8:00:00        # for the REST API and the portal\n  export $(ystoken --audience node:gpu02)\n  ystoken --list\n  ystoken --revoke 3f2a…            # or: --revoke all\n  ystoken -u ci-bot --lifespan 7-00:00:00   # admins: a service account"
)]
pub struct Args {
    /// How long the token lasts: seconds, or a time as for --time (M:S, H:M:S, D-H:M:S); default 1800 s (7 days with --save), at most 30 days (7 for nodes)
    #[arg(long, value_name = "TIME")]
    pub lifespan: Option<String>,
    /// The user the token names (administrators only; default: you)
    #[arg(short = 'u', long = "user", value_name = "USER")]
    pub user: Option<String>,
    /// What the token is for, comma-separated: rest, portal, node (any node of the pool), node:NAME; default rest,portal (node with --save)
    #[arg(long, value_name = "USES")]
    pub audience: Option<String>,
    /// Keep the token in ~/.config/ysched/token (mode 600) instead of printing it: the commands on the pool's nodes send it when SLURM_JWT is not set
    #[arg(long, conflicts_with_all = ["list", "revoke"])]
    pub save: bool,
    /// List your tokens (with -u, that user's; with --all, everyone's: administrators) made lately: id, use, life, whether revoked
    #[arg(long, conflicts_with = "revoke")]
    pub list: bool,
    /// With --list: every user's tokens (administrators)
    #[arg(long, requires = "list")]
    pub all: bool,
    /// Revoke token ID (as --list shows it), or all of yours (with -u, that user's: administrators)
    #[arg(long, value_name = "ID|all")]
    pub revoke: Option<String>,
}

pub fn run(args: Args) -> CliResult {
    let config = load_config()?;
    if args.list {
        let control = Control::Tokens {
            user: args.user,
            all_users: args.all,
        };
        return match ask(&config, Request::Control(control))? {
            Reply::Tokens { tokens, now } => print(&render(&tokens, now)),
            other => Err(refusal(other)),
        };
    }
    if let Some(which) = args.revoke {
        let jti = (which.trim() != "all").then(|| which.trim().to_string());
        let control = Control::RevokeTokens {
            jti,
            user: args.user,
        };
        return match ask(&config, Request::Control(control))? {
            Reply::Control { message, .. } => print(&format!("{}\n", message.unwrap_or_default())),
            other => Err(refusal(other)),
        };
    }
    let lifespan = match (&args.lifespan, args.save) {
        (Some(text), _) => Some(parse_lifespan(text)?),
        (None, true) => Some(crate::token::MAX_NODE_LIFESPAN),
        (None, false) => None,
    };
    let audience = match (args.audience, args.save) {
        (None, true) => Some("node".to_string()),
        (audience, _) => audience,
    };
    let control = Control::Token {
        lifespan,
        user: args.user,
        audience,
    };
    let reply = ask(&config, Request::Control(control))?;
    if let (Reply::Token { expires, .. }, Some(asked)) = (&reply, lifespan) {
        // A token made with a token ends no later than it.
        let asked_end = crate::model::units::now().saturating_add(asked as i64);
        if *expires + 60 < asked_end {
            super::warn(
                "ystoken",
                &format!(
                    "the token ends at {}, with the token that proved you (run ystoken on the controller for a longer one)",
                    crate::model::units::format_timestamp(*expires)
                ),
            );
        }
    }
    match reply {
        Reply::Token {
            token,
            user,
            expires,
        } if args.save => {
            let path =
                super::token_file::save(&token).map_err(|e| CliError::failed(e.to_string()))?;
            print(&format!(
                "a token for {user} is kept in {} until {}\n",
                path.display(),
                crate::model::units::format_timestamp(expires)
            ))
        }
        Reply::Token { token, .. } => print(&format!("SLURM_JWT={token}\n")),
        other => Err(refusal(other)),
    }
}

fn refusal(reply: Reply) -> CliError {
    match reply {
        Reply::Rejected { error } | Reply::Unauthenticated { error } => CliError::failed(error),
        other => CliError::failed(format!("unexpected reply from ysctld: {other:?}")),
    }
}

/// `--list`'s table.
fn render(tokens: &[TokenRecord], now: i64) -> String {
    use crate::model::units::format_timestamp;
    let mut rows = vec![[
        "ID",
        "USER",
        "AUDIENCE",
        "ISSUED",
        "EXPIRES",
        "STATE",
        "MADE_BY",
        "MADE_WITH",
    ]
    .map(String::from)
    .to_vec()];
    for t in tokens {
        let state = match t.revoked {
            Some(_) => "revoked",
            None if t.expires <= now => "expired",
            None => "valid",
        };
        rows.push(vec![
            t.jti.clone(),
            t.user.clone(),
            t.audience.clone(),
            format_timestamp(t.issued),
            format_timestamp(t.expires),
            state.to_string(),
            t.made_by.clone(),
            t.parent.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    crate::report::table::plain(&rows)
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
