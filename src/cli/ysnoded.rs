//! `ysnoded`: the agent of a server in a pool. It joins once, with the
//! line `yscontrol node add NAME` printed on the controller (plus
//! `--config FILE`), and from then on starts with `--config FILE` alone.
//! It runs in the foreground, logging to standard error (systemd's
//! journal, under its unit).

use std::path::PathBuf;

use clap::Parser;

use super::{init_logging, CliError, CliResult};
use crate::agent::{self, JoinLine};
use crate::config::{self, Config};

#[derive(Parser, Debug)]
#[command(
    name = "ysnoded",
    version,
    about = "The ysched node agent: runs a pool's jobs on this server",
    long_about = "The ysched node agent. It keeps one TLS connection to the pool's controller \
                  (ysctld), runs the jobs it is given on this server's GPUs — each under a ysstepd \
                  supervisor, in its own cgroup, as its user — and reports how each ended. Joining \
                  takes the line `yscontrol node add NAME` prints on the controller, with --config; \
                  after that, --config alone starts it. When it loses the controller for longer than \
                  its lease it stops its jobs, so that none runs twice."
)]
pub struct Args {
    /// This node's configuration: node_name, spool_dir (its state directory), [[gpus]], cpus, memory, cgroup_parent (see ysched.toml(5))
    #[arg(short = 'f', long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Join the pool whose controller is at HOST:PORT (from the join line)
    #[arg(long, value_name = "HOST:PORT", requires_all = ["token", "authority"])]
    pub join: Option<String>,
    /// The one-time join token (from the join line)
    #[arg(long, value_name = "TOKEN", requires = "join")]
    pub token: Option<String>,
    /// The fingerprint of the controller's certificate authority (from the join line)
    #[arg(long, value_name = "sha256:HEX", requires = "join")]
    pub authority: Option<String>,
    /// Join, then exit (start the service afterwards) instead of running on
    #[arg(long = "join-only", requires = "join")]
    pub join_only: bool,
    /// Log more (-v debug, -vv trace); YS_LOG overrides
    #[arg(short = 'v', long, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

pub fn run(args: Args) -> CliResult {
    let path = match args.config {
        Some(p) => p,
        None => {
            let (p, exists) = config::locate();
            if !exists {
                return Err(CliError::failed(format!(
                    "no configuration at {}; pass --config FILE (see ysched.toml(5))",
                    p.display()
                )));
            }
            p
        }
    };
    let config = Config::load(&path).map_err(|e| CliError::failed(e.to_string()))?;
    init_logging(args.verbose);
    let join = match (args.join, args.token, args.authority) {
        (Some(controller), Some(token), Some(authority)) => Some(JoinLine {
            controller,
            token,
            authority,
        }),
        _ => None,
    };
    let mut warn = |w: String| super::warn("ysnoded", &w);
    if args.join_only {
        let line = join.expect("clap requires --join");
        let identity = agent::join::join(&config, &line, &mut warn)?;
        println!(
            "node {} joined the pool at {}; start it with: ysnoded --config {}",
            config.node_name,
            identity.controller,
            path.display()
        );
        return Ok(());
    }
    let options = agent::Options {
        config,
        join,
        stepd: None,
    };
    agent::run(options, &mut warn).map_err(CliError::from)
}
