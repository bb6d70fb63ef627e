//! Starting the daemon: the spool, the database, the executor, the
//! threads that turn outside happenings into events; then the loop.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::mpsc::{self, Sender};
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::db::{self};
use crate::exec::local::LocalExecutor;
use crate::exec::Executor;
use crate::spool::socket::{self};
use crate::spool::{Ownership, Spool};

use super::error::DaemonError;
use super::nodes::Nodes;
use super::state::*;
use super::{metrics_http, notifications};
use crate::query::{self};

#[derive(Clone, Debug)]
pub struct Options {
    /// The supervisor binary; default: `ysstepd` next to the running binary.
    pub stepd: Option<PathBuf>,
}

/// The controller's own server as a node, behind the local executor; a
/// pool's controller without `[[gpus]]` has none (a pure controller).
fn own_node(
    config: &Config,
    spool: &Spool,
    ownership: Ownership,
    stepd: PathBuf,
    events: Sender<Event>,
) -> Result<Nodes, DaemonError> {
    if config.pool.listen.is_some() && config.gpus.is_empty() {
        tracing::info!(
            target: "ysched::daemon",
            "ysctld {} starting: spool {}, a pure controller (a pool without [[gpus]] of its own)",
            env!("CARGO_PKG_VERSION"),
            spool.root().display()
        );
        return Ok(Nodes::none());
    }
    let executor = LocalExecutor::start(config, spool, ownership, stepd, move |id| {
        let _ = events.send(Event::SupervisorExited(id));
    })?;
    let node = executor.node();
    tracing::info!(
        target: "ysched::daemon",
        "ysctld {} starting: spool {}, {} mode, GPUs: {} ({}), {} CPUs, {} MiB",
        env!("CARGO_PKG_VERSION"),
        spool.root().display(),
        if ownership == Ownership::System { "system" } else { "personal" },
        node.inventory.describe(),
        node.inventory.source,
        node.cpus,
        node.mem_mb
    );
    Ok(Nodes::single(Box::new(executor)))
}

/// Runs the daemon until SIGTERM/SIGINT. `ready` is called once it accepts
/// requests (the point where a daemonizing parent may exit).
pub fn run(
    config: Config,
    options: Options,
    ready: impl FnOnce(),
) -> Result<super::leading::Stopped, DaemonError> {
    let ownership = Ownership::of_this_process();
    let spool = Spool::new(&config.spool_dir);
    spool.prepare(ownership)?;
    // A controller of two leads before it touches the spool or the
    // database: the other may still be using them until it stops.
    let leadership = config
        .standby
        .as_ref()
        .map(super::leading::lead)
        .transpose()?;
    let _lock = match &leadership {
        Some(leadership) => leadership.lock_spool(&spool)?,
        None => spool.lock_daemon()?,
    };
    let stepd = match options.stepd {
        Some(p) => p,
        None => std::env::current_exe()?.with_file_name("ysstepd"),
    };
    let db = db::open(&spool.database())?;
    let (events, inbox) = mpsc::channel();
    let nodes = own_node(&config, &spool, ownership, stepd, events.clone())?;
    // What nodes say they froze while this controller was away is
    // bounded by when it last wrote anything.
    let alive_before = db::last_event_time(&db)?.unwrap_or_else(crate::model::units::now);
    let good = db::nodes_good(&db)?.into_iter().collect();
    let pool = super::pool::start(&config, &spool, events.clone(), (alive_before, good))?;
    let gpu_watch = watch_gpus(&config);
    let stats = start_stats(&config)?;
    let notifier = start_notifier(&config)?;
    let _watcher = watch_incoming(&spool, events.clone())?;
    listen_on_socket(&spool, ownership, config.max_spool_file, events.clone());
    spawn_signal_thread(events.clone())?;
    let fence = leadership.as_ref().map(super::leading::Leadership::fence);
    let queries = query::start(spool.clone(), &spool.database(), fence)?;

    let mut daemon = Daemon::assemble(Parts {
        config,
        spool,
        ownership,
        nodes,
        pool,
        db,
        queries,
        gpu_watch,
        stats,
        notifier,
        clock: Clock::System,
    });
    daemon.store.leadership = leadership;
    daemon.load_pool_nodes()?;
    daemon.recover()?;
    tracing::info!(target: "ysched::daemon", "ysctld ready");
    super::watchdog::ready();
    ready();
    let spool = daemon.spool.clone();
    let result = daemon.event_loop(inbox);
    socket::unbind(&spool);
    result
}

/// The GPU utilisation source: NVML where a driver answers and sampling
/// is on; the first sample at once (a source without data ends sampling).
pub(super) fn watch_gpus(config: &Config) -> GpuWatch {
    let gpu_source: Box<dyn crate::gpu::sampling::Source> = if config.gpu_sample_secs > 0 {
        crate::gpu::sampling::detect()
    } else {
        Box::new(crate::gpu::sampling::NoData)
    };
    tracing::info!(target: "ysched::gpu", "GPU utilisation: {}", gpu_source.describe());
    GpuWatch {
        next_sample: (config.gpu_sample_secs > 0).then(Instant::now),
        gpu_source,
        intruders_seen: HashSet::new(),
    }
}

/// The metrics' counters, with the endpoint started if `metrics_listen`
/// asks for one.
pub(super) fn start_stats(config: &Config) -> Result<Stats, DaemonError> {
    let metrics_on = config.metrics_file.is_some() || config.metrics_listen.is_some();
    let metrics_latest = match config.metrics_listen {
        Some(addr) => {
            let latest = metrics_http::Latest::default();
            metrics_http::start(addr, latest.clone())
                .map_err(|e| DaemonError::MetricsListen(addr, e))?;
            Some(latest)
        }
        None => None,
    };
    Ok(Stats {
        last_pass_seconds: 0.0,
        preemptions_total: 0,
        quick_starts_total: 0,
        next_metrics: metrics_on.then(Instant::now),
        metrics_latest,
        requests_total: 0,
        ingest_seconds_sum: 0.0,
        idle_watch: Default::default(),
        idle_while_waiting: 0,
        next_idle_flush: Instant::now() + IDLE_FLUSH_EVERY,
    })
}

/// Takes requests on the daemon's socket too, in a thread of its own.
/// Without the socket the daemon still works, through the spool files.
fn listen_on_socket(spool: &Spool, ownership: Ownership, max_size: u64, events: Sender<Event>) {
    let started = socket::bind(spool, ownership).and_then(|listener| {
        std::thread::Builder::new()
            .name("socket".into())
            .spawn(move || {
                socket::serve(listener, max_size, |request| {
                    events.send(Event::Socket(request)).is_ok()
                })
            })
    });
    if let Err(e) = started {
        tracing::warn!(
            target: "ysched::spool",
            "requests come through the spool files only: cannot listen on {}: {e}",
            spool.socket_path().display()
        );
    }
}

/// The notification thread for the config's `notify_command`, if any.
pub(super) fn start_notifier(config: &Config) -> Result<notifications::Notifier, DaemonError> {
    match &config.notify_command {
        Some(command) => {
            tracing::info!(target: "ysched::daemon", "notifications go to {}", command.join(" "));
            Ok(notifications::Notifier::start(
                command.clone(),
                Duration::from_secs(config.notify_timeout_secs),
            )?)
        }
        None => Ok(notifications::Notifier::off()),
    }
}

fn watch_incoming(
    spool: &Spool,
    events: Sender<Event>,
) -> Result<notify::RecommendedWatcher, DaemonError> {
    use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
    use notify::{EventKind, RecursiveMode, Watcher};
    let mut watcher = notify::recommended_watcher(move |result: notify::Result<notify::Event>| {
        let event = match result {
            Ok(e) => e,
            Err(_) => {
                let _ = events.send(Event::Rescan);
                return;
            }
        };
        if event.need_rescan() {
            let _ = events.send(Event::Rescan);
            return;
        }
        // A request is complete when renamed into place, or closed after
        // writing by a client that wrote it in place. A plain file merely
        // created is still being written; anything else created (a symlink,
        // FIFO, directory or hard link) will never be completed, so it is
        // looked at (and refused) at once.
        let complete = matches!(
            event.kind,
            EventKind::Modify(ModifyKind::Name(RenameMode::To))
                | EventKind::Access(AccessKind::Close(AccessMode::Write))
        );
        let created = matches!(event.kind, EventKind::Create(_));
        if !complete && !created {
            return;
        }
        let cannot_be_a_request = |p: &std::path::Path| {
            use std::os::unix::fs::MetadataExt;
            std::fs::symlink_metadata(p).is_ok_and(|m| !m.is_file() || m.nlink() != 1)
        };
        let names: Vec<String> = event
            .paths
            .iter()
            .filter(|p| complete || cannot_be_a_request(p))
            .filter_map(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect();
        if !names.is_empty() {
            let _ = events.send(Event::Spool(names));
        }
    })
    .map_err(|e| DaemonError::Watch {
        path: spool.incoming(),
        message: e.to_string(),
    })?;
    watcher
        .watch(&spool.incoming(), RecursiveMode::NonRecursive)
        .map_err(|e| DaemonError::Watch {
            path: spool.incoming(),
            message: e.to_string(),
        })?;
    Ok(watcher)
}

fn spawn_signal_thread(events: Sender<Event>) -> Result<(), DaemonError> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGHUP, SIGINT, SIGTERM])?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                let event = if signal == SIGHUP {
                    Event::Reload
                } else {
                    Event::Shutdown
                };
                if events.send(event).is_err() {
                    return;
                }
            }
        })?;
    Ok(())
}
