//! The controller daemon: one event loop that owns all state and ties the
//! spool, the database, the scheduler and the supervisors together.
//!
//! Threads only turn outside happenings into [`Event`]s: the spool watcher
//! (inotify through notify), the socket thread (requests on
//! `SPOOL/ysctld.sock`), the exit watcher (pidfds), the signal thread;
//! and the query thread answers read-only views from a snapshot and its own
//! read-only database connection, so a user's `ysacct` never stalls the loop.
//!
//! Each loop turn drains every event that is waiting, applies them in one
//! SQLite transaction, commits, and only then replies and launches: a reply
//! means "durable", and a job is marked running before its process exists,
//! so a crash can never run a job twice.

mod budget;
mod control;
mod depend;
mod jobs;
mod metrics_http;
mod notifications;
mod preempt;
mod query;
mod retention;
mod submit;
mod users;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use thiserror::Error;

use crate::config::{Config, ConfigError};
use crate::db::{self, DbError};
use crate::exec::isolation::Isolation;
use crate::exec::{ExitWatcher, Launcher};
use crate::gpu::Inventory;
use crate::model::isolation::Layout;
use crate::model::job::{Job, JobId, JobState};
use crate::proto::{Reply, Request};
use crate::sched::{self, Reason};
use crate::spool::socket::{self, SocketRequest};
use crate::spool::{Inbound, Ownership, Spool, SpoolError};

pub use query::{answer_offline, QueueSnapshot};

#[derive(Debug, Error)]
pub enum DaemonError {
    #[error(transparent)]
    Spool(#[from] SpoolError),
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot watch {path}: {message}")]
    Watch { path: PathBuf, message: String },
    #[error("the job supervisor {0} is missing; install ysstepd next to ysctld")]
    NoSupervisor(PathBuf),
    #[error("{0}")]
    Isolation(String),
    #[error("cannot serve metrics on {0} (metrics_listen): {1}")]
    MetricsListen(std::net::SocketAddr, std::io::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl DaemonError {
    /// The database could not write (disk full, I/O error): the turn is
    /// lost, the daemon is not.
    pub fn is_storage_failure(&self) -> bool {
        use rusqlite::ErrorCode::{DiskFull, SystemIoFailure};
        matches!(
            self,
            DaemonError::Db(DbError::Sqlite(rusqlite::Error::SqliteFailure(e, _)))
                if matches!(e.code, DiskFull | SystemIoFailure)
        )
    }
}

impl From<rusqlite::Error> for DaemonError {
    fn from(e: rusqlite::Error) -> DaemonError {
        DaemonError::Db(DbError::Sqlite(e))
    }
}

#[derive(Clone, Debug)]
pub struct Options {
    /// The supervisor binary; default: `ysstepd` next to the running binary.
    pub stepd: Option<PathBuf>,
}

/// What the event loop reacts to.
#[derive(Debug)]
pub enum Event {
    /// Names that appeared in `incoming/`.
    Spool(Vec<String>),
    /// A request that came on the daemon's socket.
    Socket(SocketRequest),
    /// The watcher lost events: look at everything in `incoming/`.
    Rescan,
    SupervisorExited(JobId),
    Reload,
    Shutdown,
}

/// Requests processed in at most this many per transaction, so replies to
/// the first of a flood do not wait for the last.
const MAX_BATCH: usize = 2_000;

const MAINTENANCE_EVERY: Duration = Duration::from_secs(600);
const STALE_AFTER: Duration = Duration::from_secs(3_600);
/// How often the idle-while-waiting time is written even if it did not change.
const IDLE_FLUSH_EVERY: Duration = Duration::from_secs(60);
/// How often the drop boxes are looked at for what no user may hold
/// there, and the spool's reserve made again if it was used.
const POLICE_EVERY: Duration = Duration::from_secs(5);

/// The active jobs, each shared with the queue snapshot that may hold it
/// (so that a snapshot costs a pointer per job, not a copy), and the ids
/// of the running ones: what every turn checks for time limits, without
/// walking 100,000 pending jobs each time (which made filling a queue
/// quadratic).
#[derive(Default)]
struct Jobs {
    all: BTreeMap<JobId, Arc<Job>>,
    running: BTreeSet<JobId>,
    /// Jobs handed out by `job_mut` since the running set was last
    /// brought up to date.
    touched: Vec<JobId>,
}

/// Reading is the map's; changes go through `insert`, `remove` and
/// `job_mut`, which keep the running set right.
impl std::ops::Deref for Jobs {
    type Target = BTreeMap<JobId, Arc<Job>>;

    fn deref(&self) -> &Self::Target {
        &self.all
    }
}

impl Jobs {
    fn insert(&mut self, job: Job) {
        self.touched.push(job.id);
        self.all.insert(job.id, Arc::new(job));
    }

    fn remove(&mut self, id: &JobId) -> Option<Arc<Job>> {
        self.running.remove(id);
        self.all.remove(id)
    }

    /// A job to change; copied first if a snapshot still holds it.
    fn job_mut(&mut self, id: &JobId) -> Option<&mut Job> {
        let job = Arc::make_mut(self.all.get_mut(id)?);
        self.touched.push(*id);
        Some(job)
    }

    /// Every job, in id order.
    fn all(&self) -> impl Iterator<Item = &Job> + Clone {
        self.all.values().map(|job| &**job)
    }

    /// The running jobs, in id order.
    fn running(&mut self) -> impl Iterator<Item = &Job> + Clone {
        for id in self.touched.drain(..) {
            if self
                .all
                .get(&id)
                .is_some_and(|j| j.state == JobState::Running)
            {
                self.running.insert(id);
            } else {
                self.running.remove(&id);
            }
        }
        let all = &self.all;
        self.running
            .iter()
            .filter_map(move |id| all.get(id))
            .map(|job| &**job)
    }
}

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// A request waiting in the backlog: a spool file, by name, or one read
/// from the socket.
enum Incoming {
    File(String),
    Socket(SocketRequest),
}

/// Where a reply goes: into the reply file the requester made, or back on
/// its connection.
enum Requester {
    File { name: String, uid: u32 },
    Socket(std::os::unix::net::UnixStream),
}

/// What handling one request leaves to do after the commit.
enum Handled {
    Nothing,
    /// The answer, for whoever sent the request.
    Reply(Reply),
    Query(Box<query::Work>),
}

/// The state the event loop owns.
pub(crate) struct Daemon {
    config: Config,
    spool: Spool,
    ownership: Ownership,
    inventory: Inventory,
    isolation: Isolation,
    cpus: u32,
    mem_mb: u64,
    db: Connection,
    in_transaction: bool,
    launcher: Launcher,
    exits: ExitWatcher,
    users: users::Users,
    /// Pending, running and completing jobs.
    /// Shared with the queue snapshot the views read: a job changed while
    /// a snapshot holds it is copied first (`Arc::make_mut`).
    jobs: Jobs,
    /// From the last scheduling pass.
    reasons: HashMap<JobId, Reason>,
    /// When jobs with a reservation are expected to start, from the last pass.
    expected_starts: HashMap<JobId, i64>,
    /// Each association's usage, as charged and last decayed.
    usage: HashMap<(String, String), sched::fairshare::Usage>,
    /// What each budgeted account spent in its current period.
    budgets: budget::Spending,
    /// Final states of ended jobs that pending dependencies name.
    ended: HashMap<JobId, JobState>,
    /// Running jobs sent their `--signal` warning before their time limit.
    warned: HashSet<JobId>,
    /// Fair-share factors from the last pass.
    fairshare: sched::fairshare::FactorMap,
    /// The last pass's fair-share tree, which the next query snapshot shows
    /// (`ysshare`) instead of building its own: a pass follows every change
    /// to jobs or usage, and building the tree walks every job.
    pass_tree: Option<(sched::fairshare::Tree, Vec<sched::fairshare::NodeShare>)>,
    order: Vec<JobId>,
    wake_at: Option<i64>,
    /// Replies to send once the current transaction is committed.
    replies: Vec<(Requester, Reply)>,
    /// Jobs marked running in this turn, to launch after the commit.
    to_launch: Vec<JobId>,
    /// Jobs whose end was recorded in this turn: their directories go after the commit.
    to_remove: Vec<JobId>,
    /// Requests seen but not yet processed (beyond one batch), and the
    /// spool names among them.
    backlog: Vec<Incoming>,
    backlog_set: HashSet<String>,
    /// The queue as the views see it, until the next change; built on the
    /// query thread the first time a query needs it.
    snapshot: Option<Arc<query::LazySnapshot>>,
    queries: Sender<query::Work>,
    reschedule: bool,
    shutdown: bool,
    /// Where GPU utilisation comes from, and when to sample it next
    /// (`None`: never, without a source or with sampling off).
    gpu_source: Box<dyn crate::gpu::sampling::Source>,
    next_sample: Option<Instant>,
    /// For the metrics: the last samples, the last pass, preemptions so
    /// far, and when to write the file next.
    last_samples: Option<Vec<crate::model::gpu::Sample>>,
    /// Processes on GPUs that were not their holder's, already logged.
    intruders_seen: HashSet<(u32, u32)>,
    last_pass_seconds: f64,
    preemptions_total: u64,
    next_metrics: Option<Instant>,
    /// The text the metrics endpoint serves (`None`: no endpoint).
    metrics_latest: Option<metrics_http::Latest>,
    /// Requests handled from the spool, and their latency summed.
    requests_total: u64,
    ingest_seconds_sum: f64,
    /// Where notifications go, and those to send after this turn's commit.
    notifier: notifications::Notifier,
    notifications: Vec<notifications::Notification>,
    /// GPUs out of service (yscontrol drain), as the database has them.
    drains: BTreeMap<u32, db::Drain>,
    /// GPUs free while jobs wait, charged to the GPUs' hours.
    idle_watch: crate::report::history::IdleWatch,
    next_idle_flush: Instant,
    /// When to take the next retention step (purge_after_months).
    next_retention: Instant,
    /// Jobs whose exit a failed turn took in: looked at again.
    exits_to_retry: Vec<JobId>,
    /// When to look at the drop boxes and the reserve next.
    next_police: Instant,
}

/// Runs the daemon until SIGTERM/SIGINT. `ready` is called once it accepts
/// requests (the point where a daemonizing parent may exit).
pub fn run(config: Config, options: Options, ready: impl FnOnce()) -> Result<(), DaemonError> {
    let ownership = Ownership::of_this_process();
    let spool = Spool::new(&config.spool_dir);
    spool.prepare(ownership)?;
    let _lock = spool.lock_daemon()?;
    let stepd = match options.stepd {
        Some(p) => p,
        None => std::env::current_exe()?.with_file_name("ysstepd"),
    };
    if !stepd.is_file() {
        return Err(DaemonError::NoSupervisor(stepd));
    }
    let db = db::open(&spool.database())?;
    let inventory = Inventory::discover(&config);
    let cpus = config.cpus.unwrap_or_else(host_cpus);
    let mem_mb = config.memory_mb.unwrap_or_else(host_memory_mb);
    tracing::info!(
        target: "ysched::daemon",
        "ysctld {} starting: spool {}, {} mode, GPUs: {} ({}), {} CPUs, {} MiB",
        env!("CARGO_PKG_VERSION"),
        spool.root().display(),
        if ownership == Ownership::System { "system" } else { "personal" },
        inventory.describe(),
        inventory.source,
        cpus,
        mem_mb
    );
    let isolation = Isolation::prepare(&config, &inventory).map_err(DaemonError::Isolation)?;
    // Before anything looks at leftover groups: they are ours only if the
    // subtree is.
    let _subtree = crate::exec::cgroup::lock_subtree(isolation.placement())
        .map_err(|e| DaemonError::Isolation(e.to_string()))?;
    if isolation.placement().layout == Layout::Off {
        tracing::warn!(
            target: "ysched::exec",
            "job isolation is OFF ({}): jobs are not confined to their GPUs, memory and CPUs",
            isolation.detected.description
        );
    } else {
        tracing::info!(target: "ysched::exec", "job isolation: {}", isolation.detected.description);
        for missing in &isolation.detected.missing {
            tracing::warn!(target: "ysched::exec", "not enforced on this host: {missing}");
        }
    }
    let gpu_source: Box<dyn crate::gpu::sampling::Source> = if config.gpu_sample_secs > 0 {
        crate::gpu::sampling::detect()
    } else {
        Box::new(crate::gpu::sampling::NoData)
    };
    tracing::info!(target: "ysched::gpu", "GPU utilisation: {}", gpu_source.describe());
    let config_sample_secs = config.gpu_sample_secs;
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

    let notifier = start_notifier(&config)?;
    let (events, inbox) = mpsc::channel();
    let exit_events = events.clone();
    let exits = ExitWatcher::start(move |id| {
        let _ = exit_events.send(Event::SupervisorExited(id));
    })?;
    let _watcher = watch_incoming(&spool, events.clone())?;
    listen_on_socket(&spool, ownership, config.max_spool_file, events.clone());
    spawn_signal_thread(events.clone())?;
    let queries = query::start(spool.clone(), &spool.database())?;

    let launcher = Launcher::new(spool.clone(), stepd, ownership);
    let mut daemon = Daemon {
        config,
        spool,
        ownership,
        inventory,
        isolation,
        cpus,
        mem_mb,
        db,
        in_transaction: false,
        launcher,
        exits,
        users: users::Users::default(),
        jobs: Jobs::default(),
        reasons: HashMap::new(),
        expected_starts: HashMap::new(),
        usage: HashMap::new(),
        budgets: HashMap::new(),
        ended: HashMap::new(),
        warned: HashSet::new(),
        fairshare: Default::default(),
        pass_tree: None,
        order: Vec::new(),
        wake_at: None,
        replies: Vec::new(),
        to_launch: Vec::new(),
        to_remove: Vec::new(),
        backlog: Vec::new(),
        backlog_set: HashSet::new(),
        snapshot: None,
        queries,
        reschedule: true,
        shutdown: false,
        // The first sample at once: a source without data ends sampling.
        next_sample: (config_sample_secs > 0).then(Instant::now),
        gpu_source,
        last_samples: None,
        intruders_seen: HashSet::new(),
        last_pass_seconds: 0.0,
        preemptions_total: 0,
        next_metrics: metrics_on.then(Instant::now),
        metrics_latest,
        notifier,
        notifications: Vec::new(),
        requests_total: 0,
        ingest_seconds_sum: 0.0,
        drains: BTreeMap::new(),
        idle_watch: Default::default(),
        next_idle_flush: Instant::now() + IDLE_FLUSH_EVERY,
        next_retention: Instant::now(),
        exits_to_retry: Vec::new(),
        next_police: Instant::now(),
    };
    daemon.recover()?;
    tracing::info!(target: "ysched::daemon", "ysctld ready");
    ready();
    let spool = daemon.spool.clone();
    let result = daemon.event_loop(inbox);
    socket::unbind(&spool);
    result
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
fn start_notifier(config: &Config) -> Result<notifications::Notifier, DaemonError> {
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

pub fn host_cpus() -> u32 {
    std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1)
}

pub fn host_memory_mb() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb / 1024)
        .unwrap_or(1024)
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

impl Daemon {
    /// The open transaction, begun on first use in a loop turn.
    fn tx(&mut self) -> Result<&Connection, DaemonError> {
        if !self.in_transaction {
            self.db.execute_batch("BEGIN IMMEDIATE")?;
            self.in_transaction = true;
        }
        Ok(&self.db)
    }

    fn commit(&mut self) -> Result<(), DaemonError> {
        if self.in_transaction {
            self.db.execute_batch("COMMIT")?;
            self.in_transaction = false;
        }
        for id in std::mem::take(&mut self.to_remove) {
            self.launcher.remove(id);
        }
        Ok(())
    }

    /// At start: loads active jobs, re-adopts running ones, and takes in
    /// whatever arrived in the spool while the daemon was down.
    fn recover(&mut self) -> Result<(), DaemonError> {
        if !self.spool.keep_reserve(self.config.spool_reserve) {
            tracing::warn!(
                target: "ysched::spool",
                "no room for the spool's reserve of {} bytes at {}: the filesystem is nearly full",
                self.config.spool_reserve,
                self.spool.reserve_path().display()
            );
        }
        self.usage = db::load_usage(&self.db)?.into_iter().collect();
        self.preemptions_total = db::count_audit(&self.db, "preempt")?;
        self.load_budgets(now())?;
        self.drains = db::drains(&self.db)?;
        for (gpu, d) in &self.drains {
            tracing::warn!(target: "ysched::daemon", "GPU {gpu} is drained since {} by {}: {}", crate::model::units::format_timestamp(d.since), d.by, d.reason);
        }
        let (jobs, unreadable) = db::active_jobs(&self.db)?;
        for job in jobs {
            self.jobs.insert(job);
        }
        for bad in unreadable {
            tracing::error!(
                target: "ysched::daemon",
                "job {} quarantined (marked FAILED): its row does not read back: {}",
                bad.id,
                bad.problem.escape_debug()
            );
            db::quarantine_job(self.tx()?, &bad, now())?;
        }
        // A database from before preemptions were counted: a job with a
        // suspended victim must count as a preemptor, or its end would not
        // resume the victim.
        let preemptors: Vec<JobId> = self
            .jobs
            .all()
            .filter(|j| j.state == JobState::Suspended)
            .filter_map(|j| j.preempted_by)
            .collect();
        for id in preemptors {
            if let Some(job) = self.jobs.job_mut(&id) {
                job.preemptions_caused = job.preemptions_caused.max(1);
            }
        }
        let (pending, running) = self.jobs.all().fold((0, 0), |(p, r), j| {
            if j.state == JobState::Pending {
                (p + 1, r)
            } else {
                (p, r + 1)
            }
        });
        tracing::info!(target: "ysched::daemon", "loaded {pending} pending and {running} running jobs");
        let running: Vec<JobId> = self
            .jobs
            .all()
            .filter(|j| j.state.holds_gpus())
            .map(|j| j.id)
            .collect();
        for id in running {
            self.readopt(id)?;
        }
        // Groups of jobs that are not running any more (their supervisor
        // was killed along with the daemon, say): nothing may stay behind.
        for id in crate::exec::cgroup::existing_jobs(self.isolation.placement()) {
            if !self.jobs.get(&id).is_some_and(|j| j.state.holds_gpus()) {
                let killed = self.kill_remains(id);
                tracing::info!(target: "ysched::exec", "removed the leftover cgroup of job {id} ({killed} processes killed)");
            }
        }
        self.commit()?;
        self.spool.remove_stale(STALE_AFTER);
        self.enqueue(self.spool.list_incoming()?);
        Ok(())
    }

    fn enqueue(&mut self, names: Vec<String>) {
        for name in names {
            if self.backlog_set.insert(name.clone()) {
                self.backlog.push(Incoming::File(name));
            }
        }
    }

    fn event_loop(mut self, inbox: Receiver<Event>) -> Result<(), DaemonError> {
        let mut next_maintenance = Instant::now() + MAINTENANCE_EVERY;
        loop {
            let timeout = self.next_timeout(next_maintenance);
            let first = if self.backlog.is_empty() && !self.reschedule {
                match inbox.recv_timeout(timeout) {
                    Ok(e) => Some(e),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => return Ok(()),
                }
            } else {
                None
            };
            let mut exited = Vec::new();
            for event in first.into_iter().chain(inbox.try_iter()) {
                match event {
                    Event::Spool(names) => self.enqueue(names),
                    Event::Socket(request) => self.backlog.push(Incoming::Socket(request)),
                    Event::Rescan => {
                        tracing::info!(target: "ysched::spool", "rescanning the spool");
                        let names = self.spool.list_incoming()?;
                        self.enqueue(names);
                    }
                    Event::SupervisorExited(id) => exited.push(id),
                    Event::Reload => {
                        let _ = self.reload(None);
                    }
                    Event::Shutdown => self.shutdown = true,
                }
            }
            let mut queries = Vec::new();
            let mut processed = Vec::new();
            exited.append(&mut self.exits_to_retry);
            let exits_taken = exited.clone();
            let applied =
                self.apply_turn(exited, &mut next_maintenance, &mut queries, &mut processed);
            match applied {
                Ok(()) => {}
                Err(e) if e.is_storage_failure() => self.after_failed_commit(&e, exits_taken)?,
                Err(e) => return Err(e),
            }
            for (requester, reply) in std::mem::take(&mut self.replies) {
                match requester {
                    Requester::File { name, uid } => {
                        self.spool.write_reply(&name, uid, &reply);
                    }
                    Requester::Socket(connection) => socket::answer(&connection, &reply),
                }
            }
            for event in std::mem::take(&mut self.notifications) {
                self.notifier.send(event);
            }
            self.spool.discard_all(&processed);
            self.launch_started()?;
            for q in queries {
                // After a change, a query about a few named jobs gets a
                // snapshot of those alone instead of waiting for the whole
                // queue's (60-100 ms at 100,000 jobs).
                let named = self.snapshot.is_none().then(|| q.named_jobs()).flatten();
                let snapshot = match named.and_then(|ids| self.snapshot_of(&ids)) {
                    Some(s) => Arc::new(query::LazySnapshot::ready(s)),
                    None => self.snapshot(),
                };
                let _ = self.queries.send(q.with_snapshot(snapshot));
            }
            if self.shutdown {
                tracing::info!(
                    target: "ysched::daemon",
                    "ysctld stopping; {} running jobs keep running and will be re-adopted",
                    self.jobs.all().filter(|j| j.state.holds_gpus()).count()
                );
                return Ok(());
            }
        }
    }

    /// One turn's work, in one transaction, committed at its end: exits,
    /// requests, time limits, maintenance, the scheduling pass. Replies
    /// wait in `self.replies`; queries and the spool names taken are
    /// handed back through `queries` and `processed`.
    fn apply_turn(
        &mut self,
        exited: Vec<JobId>,
        next_maintenance: &mut Instant,
        queries: &mut Vec<query::Work>,
        processed: &mut Vec<String>,
    ) -> Result<(), DaemonError> {
        let now = now();
        let exited_any = !exited.is_empty();
        for id in exited {
            self.job_exited(id, now)?;
        }
        let take = self.backlog.len().min(MAX_BATCH);
        let mut batch = std::mem::take(&mut self.backlog);
        self.backlog = batch.split_off(take);
        let mut batch = batch.into_iter();
        let taken = self.take_requests(&mut batch, now, queries, processed);
        // Requests not reached stay for the next turn.
        let rest: Vec<Incoming> = batch.collect();
        self.backlog.splice(0..0, rest);
        taken?;
        self.enforce_time_limits(now)?;
        if self.next_sample.is_some_and(|t| Instant::now() >= t) {
            self.sample_gpus()?;
        }
        if self.next_metrics.is_some_and(|t| Instant::now() >= t) {
            self.write_metrics(now);
        }
        if self.config.purge_after_months.is_some() && Instant::now() >= self.next_retention {
            let more = self.retention_step(now)?;
            self.next_retention = if more {
                Instant::now()
            } else {
                Instant::now() + MAINTENANCE_EVERY
            };
        }
        if Instant::now() >= self.next_police {
            self.police_spool();
            self.next_police = Instant::now() + POLICE_EVERY;
        }
        if Instant::now() >= *next_maintenance {
            self.spool.remove_stale(STALE_AFTER);
            *next_maintenance = Instant::now() + MAINTENANCE_EVERY;
        }
        let mut changed = exited_any;
        if self.reschedule || self.wake_at.is_some_and(|w| w <= now) {
            self.schedule(now)?;
            changed = true;
        }
        let flush = self.shutdown || Instant::now() >= self.next_idle_flush;
        if changed || flush {
            self.track_idle(now, flush)?;
            if flush {
                self.next_idle_flush = Instant::now() + IDLE_FLUSH_EVERY;
            }
        }
        self.commit()?;
        Ok(())
    }

    /// Handles the requests of one batch, in order, until one fails.
    fn take_requests(
        &mut self,
        batch: &mut std::vec::IntoIter<Incoming>,
        now: i64,
        queries: &mut Vec<query::Work>,
        processed: &mut Vec<String>,
    ) -> Result<(), DaemonError> {
        for incoming in batch {
            let max = self.config.max_spool_file;
            let (inbound, connection) = match incoming {
                Incoming::File(name) => {
                    self.backlog_set.remove(&name);
                    let inbound = self.spool.read_request(&name, max);
                    processed.push(name);
                    (inbound, None)
                }
                Incoming::Socket(r) => (
                    crate::spool::parse_request(&r.name, r.uid, &r.body, max),
                    Some(r.connection),
                ),
            };
            let requester = match (&inbound, connection) {
                (_, Some(c)) => Some(Requester::Socket(c)),
                (Inbound::Request { name, uid, .. }, None) => Some(Requester::File {
                    name: name.clone(),
                    uid: *uid,
                }),
                (
                    Inbound::Bad {
                        name,
                        uid: Some(uid),
                        ..
                    },
                    None,
                ) => Some(Requester::File {
                    name: name.clone(),
                    uid: *uid,
                }),
                _ => None,
            };
            if let Inbound::Request { name, .. } | Inbound::Bad { name, .. } = &inbound {
                self.requests_total += 1;
                self.ingest_seconds_sum +=
                    crate::spool::age_of_name(name).map_or(0.0, |age| age.as_secs_f64().min(60.0));
            }
            let handled = match self.ingest(inbound, now) {
                Ok(h) => h,
                Err(e) => {
                    // Answered with the turn's failure, if the turn fails.
                    if let Some(r) = requester {
                        let error = "not applied".to_string();
                        self.replies.push((r, Reply::Rejected { error }));
                    }
                    return Err(e);
                }
            };
            match (handled, requester) {
                (Handled::Nothing, _) | (_, None) => {}
                (Handled::Reply(reply), Some(r)) => self.replies.push((r, reply)),
                (Handled::Query(q), Some(Requester::File { .. })) => queries.push(*q),
                // Queries' replies are streamed into reply files.
                (Handled::Query(_), Some(r)) => {
                    let error =
                        "queries are asked through the spool directory, not the daemon's socket"
                            .to_string();
                    self.replies.push((r, Reply::Rejected { error }));
                }
            }
        }
        Ok(())
    }

    /// After a turn whose transaction could not be committed (a full or
    /// failing disk; SQLite has rolled it back): every request of the turn
    /// is refused with the reason, the state goes back to what the
    /// database holds, as at a restart, and the daemon carries on. Exits
    /// the turn had taken in are taken in again next turn; jobs it had
    /// started had not been launched yet, and are pending again.
    fn after_failed_commit(
        &mut self,
        failure: &DaemonError,
        exits_taken: Vec<JobId>,
    ) -> Result<(), DaemonError> {
        if !self.db.is_autocommit() {
            let _ = self.db.execute_batch("ROLLBACK");
        }
        self.in_transaction = false;
        let freed = self.spool.release_reserve();
        tracing::error!(
            target: "ysched::db",
            "a turn could not be recorded, so nothing of it was applied: {failure}{}",
            if freed { "; the spool's reserve was released to make room" } else { "" }
        );
        let error = format!(
            "not applied: ysctld could not record it ({failure}); the spool filesystem may be full. Nothing was changed; try again"
        );
        for (_, reply) in &mut self.replies {
            if !matches!(reply, Reply::Rejected { .. })
                || matches!(reply, Reply::Rejected { error } if error == "not applied")
            {
                *reply = Reply::Rejected {
                    error: error.clone(),
                };
            }
        }
        self.notifications.clear();
        self.to_launch.clear();
        self.to_remove.clear();
        self.exits_to_retry = exits_taken;
        self.reload_state(now())?;
        // The disk may stay full a while: not a turn a millisecond.
        std::thread::sleep(Duration::from_millis(500));
        Ok(())
    }

    /// Removes what no user may hold in the drop boxes, and makes the
    /// reserve again once there is room for it and some to spare.
    fn police_spool(&mut self) {
        for r in self.spool.police(self.config.max_spool_file) {
            tracing::warn!(target: "ysched::spool", "removed {} of uid {}: {}", r.path.display(), r.uid, r.why);
        }
        let reserve = self.config.spool_reserve;
        if reserve > 0 && !self.spool.reserve_path().exists() {
            let room = self.spool.free_bytes().unwrap_or(0);
            if room > reserve.saturating_mul(2) && self.spool.keep_reserve(reserve) {
                tracing::info!(target: "ysched::spool", "the spool's reserve of {reserve} bytes is back");
            }
        }
    }

    /// The jobs, usage, budgets and drains as the database has them.
    fn reload_state(&mut self, now: i64) -> Result<(), DaemonError> {
        self.jobs = Jobs::default();
        let (jobs, _unreadable) = db::active_jobs(&self.db)?;
        for job in jobs {
            self.jobs.insert(job);
        }
        self.usage = db::load_usage(&self.db)?.into_iter().collect();
        self.load_budgets(now)?;
        self.drains = db::drains(&self.db)?;
        self.ended.clear();
        self.pass_tree = None;
        self.snapshot = None;
        self.reschedule = true;
        Ok(())
    }

    /// How long the loop may sleep: until the next time limit, `--begin`
    /// time or maintenance, whichever comes first.
    fn next_timeout(&mut self, next_maintenance: Instant) -> Duration {
        let now_s = now();
        let mut next = next_maintenance.saturating_duration_since(Instant::now());
        let retention = self.config.purge_after_months.map(|_| self.next_retention);
        let police = Some(self.next_police);
        for t in [self.next_sample, self.next_metrics, retention, police]
            .into_iter()
            .flatten()
        {
            next = next.min(t.saturating_duration_since(Instant::now()));
        }
        let mut consider = |at: i64| {
            let wait = Duration::from_secs((at - now_s).max(0) as u64);
            next = next.min(wait);
        };
        for deadline in self.jobs.running().filter_map(Job::deadline) {
            consider(deadline);
        }
        for (id, warn_at) in self
            .jobs
            .running()
            .filter_map(|j| Some((j.id, j.warn_at()?)))
        {
            if !self.warned.contains(&id) {
                consider(warn_at);
            }
        }
        if let Some(w) = self.wake_at {
            consider(w);
        }
        // Whole seconds are what job times are kept in; aim just past one.
        if next < Duration::from_secs(1) {
            next
        } else {
            next + Duration::from_millis(5)
        }
    }

    /// Handles one request. Replies and queries are returned: they go out
    /// after this turn's commit (queries to the query thread).
    fn ingest(&mut self, inbound: Inbound, now: i64) -> Result<Handled, DaemonError> {
        match inbound {
            Inbound::Skip => Ok(Handled::Nothing),
            Inbound::Bad { name, uid, reason } => {
                tracing::warn!(target: "ysched::spool", "rejected request {name} (uid {uid:?}): {reason}");
                Ok(match uid {
                    Some(_) => Handled::Reply(Reply::Rejected { error: reason }),
                    None => Handled::Nothing,
                })
            }
            Inbound::Request {
                name,
                uid,
                envelope,
            } => {
                if self.ownership == Ownership::Personal && uid != nix::unistd::geteuid().as_raw() {
                    let error = "this ysctld runs in personal mode and takes requests from its own user only".to_string();
                    let reply = Reply::Rejected { error };
                    return Ok(Handled::Reply(reply));
                }
                let user = match self.users.get(uid) {
                    Some(u) => u.name.clone(),
                    None => {
                        let error = format!("uid {uid} has no user name on this server");
                        let reply = Reply::Rejected { error };
                        return Ok(Handled::Reply(reply));
                    }
                };
                let request = envelope.request;
                if let Request::Query(q) = request {
                    let admin = self.config.is_admin(uid, &user);
                    let policy = sched::limits::Policy::new(&self.config);
                    let coordinated = self
                        .config
                        .accounts
                        .iter()
                        .filter(|a| sched::approval::may_approve(&policy, &a.name, &user))
                        .map(|a| a.name.clone())
                        .collect();
                    let viewer = query::Viewer {
                        uid,
                        user,
                        admin,
                        coordinated,
                        privacy: self.config.private_data,
                    };
                    return Ok(Handled::Query(Box::new(query::Work::new(
                        name,
                        viewer,
                        self.config.min_job_age_secs,
                        q,
                    ))));
                }
                // A state change: apply it once, whatever crashes happened.
                if let Some((owner, reply)) = db::find_request(self.tx()?, &name)? {
                    let reply = if owner == uid {
                        reply
                    } else {
                        Reply::Rejected {
                            error: "request name already used by another user".into(),
                        }
                    };
                    return Ok(Handled::Reply(reply));
                }
                let kind = request.kind();
                let reply = match request {
                    Request::Submit(job) => self.submit(*job, uid, &user, now)?,
                    Request::Control(c) => self.control(c, uid, &user, now)?,
                    Request::Query(_) => unreachable!("queries returned above"),
                };
                db::record_request(self.tx()?, &name, uid, now, kind, &reply)?;
                Ok(Handled::Reply(reply))
            }
        }
    }

    /// Runs the scheduler and marks the jobs it starts as running.
    fn schedule(&mut self, now: i64) -> Result<(), DaemonError> {
        self.reschedule = false;
        let (tree, shares) = self.fairshare_tree(now);
        self.fairshare = sched::fairshare::factors(&tree, &shares);
        self.pass_tree = Some((tree, shares));
        let mut held_back = self.dependency_waits(now)?;
        for (id, reason) in self.budget_waits(now) {
            held_back.entry(id).or_insert(reason);
        }
        for id in crate::array::throttled(self.jobs.all()) {
            held_back
                .entry(id)
                .or_insert(sched::Reason::JobArrayTaskLimit);
        }
        let ctx = self.priority_context();
        let mut rater = sched::priority::Rater::new(&ctx);
        let pending: Vec<(&Job, i64)> = self
            .jobs
            .all()
            .filter(|j| j.state == JobState::Pending && !held_back.contains_key(&j.id))
            .map(|j| (j, rater.factors(j, now).priority()))
            .collect();
        let running: Vec<&Job> = self.jobs.all().filter(|j| j.state.holds_gpus()).collect();
        let drained: Vec<u32> = self.drains.keys().copied().collect();
        let node = sched::Node {
            gpus: &self.inventory.gpus,
            cpus: self.cpus,
            mem_mb: self.mem_mb,
            drained: &drained,
        };
        let policy = sched::limits::Policy::at(&self.config, now);
        let pass = Instant::now();
        let plan = sched::plan(&pending, &running, &node, &policy, now);
        self.last_pass_seconds = pass.elapsed().as_secs_f64();
        for (id, gpus) in plan.starts.iter().cloned() {
            self.mark_running(id, gpus, now)?;
        }
        let preempting = self.preempt(&plan, now)?;
        self.reasons = plan.reasons;
        for id in preempting {
            self.reasons.insert(id, Reason::Preempting);
        }
        self.expected_starts = plan.expected_starts;
        // A job started now may satisfy an `after` dependency at once.
        if !plan.starts.is_empty() && !held_back.is_empty() {
            self.reschedule = true;
        }
        self.reasons.extend(held_back);
        self.order = plan.order;
        self.wake_at = plan.wake_at;
        self.snapshot = None;
        Ok(())
    }

    /// The association tree with usage decayed to `now`, and what the
    /// fair-share algorithm makes of it.
    fn fairshare_tree(
        &mut self,
        now: i64,
    ) -> (sched::fairshare::Tree, Vec<sched::fairshare::NodeShare>) {
        let usage = self.usage_with_running(now);
        // Runs of jobs of one association pass as one: comparing with the
        // job before is cheaper than hashing every job's pair.
        let mut previous = None;
        let associations = self
            .jobs
            .all()
            .map(|j| (j.account.as_str(), j.user.as_str()))
            .filter(move |pair| previous.replace(*pair) != Some(*pair));
        let tree = sched::fairshare::build_tree(&self.config, associations, &usage, now);
        let shares = tree.compute(self.config.fairshare.algorithm);
        (tree, shares)
    }

    /// The associations' usage as charged, plus what their running jobs
    /// have used so far: an account flooding long jobs weighs in while
    /// they run, not only once they end. Runs are charged to the stored
    /// usage when they end, as before; this is what the pass sees now.
    fn usage_with_running(
        &mut self,
        now: i64,
    ) -> HashMap<(String, String), sched::fairshare::Usage> {
        let fs = &self.config.fairshare;
        let mut usage = self.usage.clone();
        for job in self.jobs.running() {
            if job.state != JobState::Running || job.start_time.is_none() {
                continue;
            }
            let mut so_far = Job::clone(job);
            so_far.end_time = Some(now.max(job.start_time.unwrap_or(now)));
            let billing = sched::fairshare::charge(&so_far, &self.inventory.gpus, &self.config);
            usage
                .entry((job.account.clone(), job.user.clone()))
                .or_default()
                .charge(billing, now, fs.half_life, fs.reset);
        }
        usage
    }

    /// The queue as the views see it; after a change, what to build it
    /// from (the query thread builds it).
    fn snapshot(&mut self) -> Arc<query::LazySnapshot> {
        if let Some(s) = &self.snapshot {
            return s.clone();
        }
        let now = now();
        let policy = sched::limits::Policy::new(&self.config);
        let budgets: HashMap<String, sched::budget::Standing> = self
            .config
            .accounts
            .iter()
            .filter_map(|a| Some((a.name.clone(), self.standing(&a.name, &policy, now)?)))
            .collect();
        let built;
        let (tree, shares) = match &self.pass_tree {
            Some((tree, shares)) => (tree, shares),
            None => {
                built = self.fairshare_tree(now);
                (&built.0, &built.1)
            }
        };
        let inputs = query::SnapshotInputs {
            jobs: self.jobs.values().cloned().collect(),
            reasons: self.reasons.clone(),
            expected_starts: self.expected_starts.clone(),
            queue_order: self.order.clone(),
            weights: self.config.priority.clone(),
            qos: self.config.qos.clone(),
            fairshare: self.fairshare.clone(),
            total_gpus: self.inventory.gpus.len() as u32,
            now,
            shares: query::share_rows(tree, shares, &self.usage, &budgets),
            node: query::NodeFacts {
                name: self.config.node_name.clone(),
                cpus: self.cpus,
                memory_mb: self.mem_mb,
                isolation: self.isolation.detected.description.clone(),
                gpu_source: self.inventory.source.to_string(),
                gpus: self.inventory.gpus.clone(),
                drains: self.drains.clone(),
                samples: self.last_samples.clone(),
            },
        };
        let snapshot = Arc::new(query::LazySnapshot::new(inputs));
        self.snapshot = Some(snapshot.clone());
        snapshot
    }

    /// What a job's priority is computed from, as the last pass left it.
    fn priority_context(&self) -> sched::priority::Context<'_> {
        sched::priority::Context {
            weights: &self.config.priority,
            qos: &self.config.qos,
            fairshare: &self.fairshare,
            total_gpus: self.inventory.gpus.len() as u32,
        }
    }

    /// A snapshot of just the active jobs among `ids`, built without a
    /// pass over the queue; no node or fair-share view. `None` where an id
    /// names an array with tasks still active (its tasks' ids follow it),
    /// which only the whole queue's snapshot answers.
    fn snapshot_of(&self, ids: &[JobId]) -> Option<Arc<QueueSnapshot>> {
        let mut named = Vec::with_capacity(ids.len());
        for &id in ids {
            match self.jobs.range(id..).next() {
                Some((_, job)) if job.array.as_ref().is_some_and(|a| a.job_id == id) => {
                    return None
                }
                Some((&found, job)) if found == id => named.push(job),
                _ => {}
            }
        }
        named.sort_unstable_by_key(|j| j.id);
        named.dedup_by_key(|j| j.id);
        let ctx = self.priority_context();
        Some(Arc::new(QueueSnapshot::build(
            named.into_iter(),
            &self.reasons,
            &self.expected_starts,
            &self.order,
            &ctx,
            now(),
            Vec::new(),
        )))
    }

    /// SIGHUP or `yscontrol reload`: validate first; a bad file changes nothing.
    fn reload(&mut self, requested_by: Option<&str>) -> Result<String, String> {
        let path = self.config.path.clone();
        let who = requested_by
            .map(|u| format!(" (requested by {u})"))
            .unwrap_or_default();
        let result = match Config::load(&path) {
            Err(e) => Err(format!("config not reloaded: {e}")),
            Ok(new) if new.spool_dir != self.config.spool_dir => Err(format!(
                "config not reloaded: spool_dir changed ({} → {}); restart ysctld to move the spool",
                self.config.spool_dir.display(),
                new.spool_dir.display()
            )),
            Ok(new) if new.gpus != self.config.gpus => {
                Err("config not reloaded: [[gpus]] changed; restart ysctld to change the GPU inventory".to_string())
            }
            Ok(new) => {
                let notify_changed = (&new.notify_command, new.notify_timeout_secs)
                    != (&self.config.notify_command, self.config.notify_timeout_secs);
                if notify_changed {
                    match start_notifier(&new) {
                        Ok(n) => self.notifier = n,
                        Err(e) => tracing::error!(target: "ysched::daemon", "notifications stay as they were: {e}"),
                    }
                }
                let later = self.config.needs_restart(&new);
                self.cpus = new.cpus.unwrap_or_else(host_cpus);
                self.mem_mb = new.memory_mb.unwrap_or_else(host_memory_mb);
                self.config = new;
                self.users.clear();
                self.pass_tree = None;
                self.reschedule = true;
                self.snapshot = None;
                let not_applied = if later.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; not applied until ysctld restarts: {}",
                        later.join(", ")
                    )
                };
                match self.load_budgets(now()) {
                    Ok(()) => Ok(format!(
                        "config {} reloaded ({} CPUs, {} MiB){not_applied}",
                        path.display(),
                        self.cpus,
                        self.mem_mb
                    )),
                    Err(e) => Err(format!("config {} reloaded, but budgets could not be summed: {e}", path.display())),
                }
            }
        };
        match &result {
            Ok(m) => tracing::info!(target: "ysched::daemon", "{m}{who}"),
            Err(m) => tracing::error!(target: "ysched::daemon", "{m}{who}"),
        }
        let text = match &result {
            Ok(m) | Err(m) => m.clone(),
        };
        if let Err(e) = self.audit(
            now(),
            requested_by.unwrap_or("SIGHUP"),
            "reload",
            None,
            &text,
        ) {
            tracing::error!(target: "ysched::daemon", "reload not audited: {e}");
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: JobId, state: JobState) -> Job {
        Job {
            state,
            ..crate::model::job::example_job(id)
        }
    }

    fn running_ids(jobs: &mut Jobs) -> Vec<JobId> {
        jobs.running().map(|j| j.id).collect()
    }

    #[test]
    fn the_running_set_follows_every_change() {
        let mut jobs = Jobs::default();
        jobs.insert(job(1, JobState::Pending));
        jobs.insert(job(2, JobState::Running));
        jobs.insert(job(3, JobState::Pending));
        assert_eq!(running_ids(&mut jobs), vec![2]);
        // Started, stopping, suspended, ended.
        jobs.job_mut(&3).unwrap().state = JobState::Running;
        assert_eq!(running_ids(&mut jobs), vec![2, 3]);
        jobs.job_mut(&2).unwrap().state = JobState::Completing;
        assert_eq!(running_ids(&mut jobs), vec![3]);
        jobs.job_mut(&3).unwrap().state = JobState::Suspended;
        jobs.job_mut(&1).unwrap().state = JobState::Running;
        assert_eq!(running_ids(&mut jobs), vec![1]);
        jobs.job_mut(&3).unwrap().state = JobState::Running;
        jobs.remove(&3);
        assert_eq!(running_ids(&mut jobs), vec![1]);
        // Removed before the set caught up with a change.
        jobs.job_mut(&1).unwrap().state = JobState::Pending;
        jobs.remove(&1);
        assert_eq!(running_ids(&mut jobs), Vec::<JobId>::new());
        assert_eq!(jobs.len(), 1, "job 2 is still active");
    }

    #[test]
    fn a_job_held_by_a_snapshot_is_copied_when_changed() {
        let mut jobs = Jobs::default();
        jobs.insert(job(1, JobState::Pending));
        let snapshot = jobs[&1].clone();
        jobs.job_mut(&1).unwrap().state = JobState::Running;
        assert_eq!(
            snapshot.state,
            JobState::Pending,
            "the snapshot keeps its view"
        );
        assert_eq!(jobs[&1].state, JobState::Running);
        drop(snapshot);
        let before = Arc::as_ptr(&jobs[&1]);
        jobs.job_mut(&1).unwrap().nice = 5;
        assert_eq!(Arc::as_ptr(&jobs[&1]), before, "no copy without a snapshot");
    }
}
