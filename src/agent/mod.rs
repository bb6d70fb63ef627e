//! `ysnoded`, the agent on each server of a pool: it joins once (a
//! one-time token, the controller's authority checked by fingerprint,
//! a certificate for its own key), then keeps one connection to the
//! controller and runs the jobs it is given with this host's executor —
//! the same supervisors, cgroups and device rules as a single server —
//! reporting each run's end until the controller has recorded it, and
//! stopping its jobs when its lease runs out without an answer.

pub mod error;
pub mod identity;
pub mod join;
pub mod requests;

pub mod sampler;
pub mod session;

use std::path::PathBuf;
use std::sync::{mpsc, Arc};

use nix::sys::eventfd::{EfdFlags, EventFd};

pub use error::AgentError;
pub use join::JoinLine;

use crate::config::Config;
use crate::exec::local::LocalExecutor;
use crate::spool::{Ownership, Spool};

pub struct Options {
    pub config: Config,
    /// Join first, with the line `yscontrol node add` printed.
    pub join: Option<JoinLine>,
    /// The supervisor binary; default: `ysstepd` next to this binary.
    pub stepd: Option<PathBuf>,
}

/// Joins if asked to, then runs the node until the controller refuses it
/// (removed from the pool, its certificate revoked); warnings of the
/// join (users whose uids differ) go to `warn`.
pub fn run(options: Options, warn: &mut dyn FnMut(String)) -> Result<(), AgentError> {
    let config = options.config;
    let ownership = Ownership::of_this_process();
    let spool = Spool::new(&config.spool_dir);
    spool.prepare(ownership)?;
    let _lock = spool.lock_daemon()?;
    let dir = identity::dir_of(&config.spool_dir);
    let identity = match &options.join {
        Some(line) => {
            let identity = join::join(&config, line, warn)?;
            tracing::info!(target: "ysched::agent", "node {} joined the pool at {}", config.node_name, identity.controller);
            identity
        }
        None => identity::load(&dir)?,
    };
    let identity = match &config.pool.controller {
        Some(address) => identity::Identity {
            controller: address.clone(),
            ..identity
        },
        None => identity,
    };
    let stepd = match options.stepd {
        Some(p) => p,
        None => std::env::current_exe()
            .map_err(AgentError::io("cannot find this program"))?
            .with_file_name("ysstepd"),
    };
    let wake = Arc::new(
        EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(|e| AgentError::io("cannot make an eventfd")(e.into()))?,
    );
    let (exits, ended) = mpsc::channel();
    let waker = wake.clone();
    let mut executor = LocalExecutor::start(&config, &spool, ownership, stepd, move |id| {
        let _ = exits.send(id);
        let _ = waker.write(1);
    })?;
    let lease_file = dir.join("lease");
    executor.watch_lease(lease_file.clone());
    let recorded = executor.recorded_runs();
    let runs = crate::net::runs::Runs::adopt(Box::new(executor), recorded);
    let facts = runs.executor().node();
    tracing::info!(
        target: "ysched::agent",
        "ysnoded {} for node {}: GPUs {}, {} CPUs, {} MiB; controller {}",
        env!("CARGO_PKG_VERSION"),
        config.node_name,
        facts.inventory.describe(),
        facts.cpus,
        facts.mem_mb,
        identity.controller
    );
    let controller = identity.controller.clone();
    // Commands run here (ysbatch) find out they are on a node.
    if let Err(e) = spool.mark_pool_node(&controller) {
        warn(format!(
            "cannot write {}: {e}; ysbatch here will not know it is on a pool's node",
            spool.pool_node_file().display()
        ));
    }
    let mut session = session::Session::new(
        runs,
        identity,
        dir,
        config.pool.lease,
        lease_file,
        ended,
        wake,
    )?
    .with_frozen_limit(config.pool.frozen_limit);
    session.forward_requests(requests::Requests::new(
        spool,
        config.max_spool_file,
        &config.node_name,
    ));
    if config.gpu_sample_secs > 0 {
        let source = crate::gpu::sampling::detect();
        tracing::info!(target: "ysched::agent", "GPU utilisation: {}", source.describe());
        let every = std::time::Duration::from_secs(config.gpu_sample_secs);
        session.sample_gpus_with(sampler::Sampler::new(source, every));
    }
    session.run()
}
