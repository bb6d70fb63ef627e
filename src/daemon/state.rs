//! What the event loop owns: the active jobs, the policy's inputs and
//! outputs, what a turn leaves to do after its commit, and the timers.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::config::Config;
use crate::model::job::{IdMap, Job, JobId, JobState};
use crate::proto::Reply;
use crate::sched::{self, Reason};
use crate::spool::socket::SocketRequest;
use crate::spool::{Ownership, Spool};

use super::nodes::Nodes;
use super::{metrics_http, notifications, users};
use crate::query::{self};

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
    /// A node's agent sent something, or its connection ended.
    Pool(crate::net::server::ServerEvent),
    Reload,
    Shutdown,
}

/// Requests processed in at most this many per transaction, so replies to
/// the first of a flood do not wait for the last.
pub(super) const MAX_BATCH: usize = 2_000;

pub(super) const MAINTENANCE_EVERY: Duration = Duration::from_secs(600);
pub(super) const STALE_AFTER: Duration = Duration::from_secs(3_600);
/// How often the idle-while-waiting time is written even if it did not change.
pub(super) const IDLE_FLUSH_EVERY: Duration = Duration::from_secs(60);
/// How often the drop boxes are looked at for what no user may hold
/// there, and the spool's reserve made again if it was used.
pub(super) const POLICE_EVERY: Duration = Duration::from_secs(5);

/// The active jobs, each shared with the queue snapshot that may hold it
/// (so that a snapshot costs a pointer per job, not a copy), and indexes
/// that spare every turn a walk of 100,000 pending jobs (which made
/// filling a queue quadratic, and cost 7 ms a submission behind such a
/// queue): the ids of the jobs holding GPUs (what each turn checks
/// for time limits and counts as taken), of the pending jobs that want
/// GPUs and are not held (whether GPUs idle while jobs wait), and of the
/// pending jobs with dependencies (whose states each pass looks up) and
/// of the pending jobs of each QoS (whether one that may preempt waits);
/// and each job's association and QoS as numbers, for the pass.
#[derive(Default)]
pub(super) struct Jobs {
    pub(super) all: BTreeMap<JobId, Arc<Job>>,
    holding: BTreeSet<JobId>,
    wanting_gpus: BTreeSet<JobId>,
    depending: BTreeSet<JobId>,
    /// By QoS name: a few (the config's), so a job whose QoS changed is
    /// taken out of each.
    pending_by_qos: HashMap<String, BTreeSet<JobId>>,
    names: Names,
    /// Jobs inserted, removed or handed out by `job_mut` since the
    /// indexes were last brought up to date.
    touched: Vec<JobId>,
    /// What the active interactive allocations need besides their records.
    pub(super) sessions: Sessions,
}

/// Each job's association and QoS as numbers ([`sched::pass::Numbered`]):
/// the names, numbered as they first come (a daemon's lifetime sees a
/// few hundred associations and the config's QoS), and the numbers of
/// every job, in id order as the jobs are.
#[derive(Default)]
struct Names {
    associations: Vec<(String, String)>,
    association_numbers: HashMap<String, HashMap<String, u32>>,
    qos: Vec<String>,
    qos_numbers: HashMap<String, u32>,
    of_job: BTreeMap<JobId, (u32, u32)>,
}

impl Names {
    /// `job`'s numbers, its names numbered if they are new.
    fn number(&mut self, job: &Job) -> (u32, u32) {
        // Looked up before anything is copied: most jobs' names are known.
        let known = self
            .association_numbers
            .get(&job.account)
            .and_then(|users| users.get(&job.user));
        let association = match known {
            Some(&n) => n,
            None => {
                let n = self.associations.len() as u32;
                self.associations
                    .push((job.account.clone(), job.user.clone()));
                self.association_numbers
                    .entry(job.account.clone())
                    .or_default()
                    .insert(job.user.clone(), n);
                n
            }
        };
        let level = match self.qos_numbers.get(&job.qos) {
            Some(&n) => n,
            None => {
                let n = self.qos.len() as u32;
                self.qos.push(job.qos.clone());
                self.qos_numbers.insert(job.qos.clone(), n);
                n
            }
        };
        (association, level)
    }
}

/// The step links of running interactive allocations, for their users'
/// `salloc` and `srun` (kept in memory only: see `allocations`), and when
/// each allocation's holder last looked at it.
#[derive(Default)]
pub(super) struct Sessions {
    pub(super) links: HashMap<JobId, super::run_link::RunLink>,
    pub(super) seen: HashMap<JobId, Instant>,
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
    pub(super) fn insert(&mut self, job: Job) {
        self.touched.push(job.id);
        self.all.insert(job.id, Arc::new(job));
    }

    pub(super) fn remove(&mut self, id: &JobId) -> Option<Arc<Job>> {
        // Gone from the indexes when they are next brought up to date.
        self.touched.push(*id);
        self.sessions.links.remove(id);
        self.all.remove(id)
    }

    /// A job to change; copied first if a snapshot still holds it.
    pub(super) fn job_mut(&mut self, id: &JobId) -> Option<&mut Job> {
        let job = Arc::make_mut(self.all.get_mut(id)?);
        self.touched.push(*id);
        Some(job)
    }

    /// Every job, in id order.
    pub(super) fn all(&self) -> impl Iterator<Item = &Job> + Clone {
        self.all.values().map(|job| &**job)
    }

    /// The running jobs, in id order.
    pub(super) fn running(&mut self) -> impl Iterator<Item = &Job> + Clone {
        self.holding().filter(|j| j.state == JobState::Running)
    }

    /// The jobs holding GPUs (running, completing, suspended), in id order.
    pub(super) fn holding(&mut self) -> impl Iterator<Item = &Job> + Clone {
        self.bring_up_to_date();
        jobs_in(&self.all, &self.holding)
    }

    /// The first pending job that waits for GPUs (not held), if any.
    pub(super) fn first_wanting_gpus(&mut self) -> Option<Arc<Job>> {
        self.bring_up_to_date();
        let id = self.wanting_gpus.first()?;
        self.all.get(id).cloned()
    }

    /// The pending jobs with a dependency, in id order.
    pub(super) fn depending(&mut self) -> impl Iterator<Item = &Job> + Clone {
        self.bring_up_to_date();
        jobs_in(&self.all, &self.depending)
    }

    /// Every job, in id order, with its association and QoS numbered.
    pub(super) fn numbered(&mut self) -> (Vec<&Job>, sched::pass::Numbered<'_>) {
        self.bring_up_to_date();
        let names = &self.names;
        debug_assert!(self.all.keys().eq(names.of_job.keys()));
        let numbered = sched::pass::Numbered {
            associations: names
                .associations
                .iter()
                .map(|(account, user)| (account.as_str(), user.as_str()))
                .collect(),
            qos: names.qos.iter().map(String::as_str).collect(),
            jobs: names.of_job.values().copied().collect(),
        };
        (self.all().collect(), numbered)
    }

    /// Whether a job of QoS `qos` is pending.
    pub(super) fn any_pending_in(&mut self, qos: &str) -> bool {
        self.bring_up_to_date();
        self.pending_by_qos.get(qos).is_some_and(|p| !p.is_empty())
    }

    fn bring_up_to_date(&mut self) {
        for id in self.touched.drain(..) {
            let job = self.all.get(&id);
            let holds = job.is_some_and(|j| j.state.holds_gpus());
            let wants = job.is_some_and(|j| crate::report::history::waits_for_gpus(j));
            let depends =
                job.is_some_and(|j| j.state == JobState::Pending && j.dependency.is_some());
            let sets = [
                (&mut self.holding, holds),
                (&mut self.wanting_gpus, wants),
                (&mut self.depending, depends),
            ];
            for (set, member) in sets {
                if member {
                    set.insert(id);
                } else {
                    set.remove(&id);
                }
            }
            for pending in self.pending_by_qos.values_mut() {
                pending.remove(&id);
            }
            if let Some(job) = job.filter(|j| j.state == JobState::Pending) {
                self.pending_by_qos
                    .entry(job.qos.clone())
                    .or_default()
                    .insert(id);
            }
            match job {
                Some(job) => {
                    let numbers = self.names.number(job);
                    self.names.of_job.insert(id, numbers);
                }
                None => {
                    self.names.of_job.remove(&id);
                }
            }
        }
    }
}

/// The jobs an index holds, in id order.
fn jobs_in<'a>(
    all: &'a BTreeMap<JobId, Arc<Job>>,
    ids: &'a BTreeSet<JobId>,
) -> impl Iterator<Item = &'a Job> + Clone {
    ids.iter()
        .filter_map(move |id| all.get(id))
        .map(|job| &**job)
}

/// A request waiting in the backlog: a spool file, by name, or one read
/// from the socket.
pub(super) enum Incoming {
    File(String),
    Socket(SocketRequest),
}

/// Where a reply goes: into the reply file the requester made, or back on
/// its connection.
pub(super) enum Requester {
    File {
        name: String,
        uid: u32,
    },
    Socket(std::os::unix::net::UnixStream),
    /// A pool's node, for a request made there.
    Node {
        node: String,
        name: String,
    },
}

/// What handling one request leaves to do after the commit.
pub(super) enum Handled {
    Nothing,
    /// The answer, for whoever sent the request.
    Reply(Reply),
    Query(Box<query::Work>),
}

/// Spent billing-seconds of one account, in the period starting at `.0`.
pub(super) type Spending = HashMap<String, (i64, i64)>;

/// What a daemon is made of; the rest starts empty.
pub(super) struct Parts {
    pub(super) config: Config,
    pub(super) spool: Spool,
    pub(super) ownership: Ownership,
    pub(super) nodes: Nodes,
    pub(super) pool: Option<super::pool_state::PoolState>,
    pub(super) db: Connection,
    pub(super) queries: Sender<query::Work>,
    pub(super) gpu_watch: GpuWatch,
    pub(super) stats: Stats,
    pub(super) notifier: notifications::Notifier,
    pub(super) clock: Clock,
}

impl Daemon {
    /// Now, as the records have it.
    pub(super) fn now(&self) -> i64 {
        self.core.clock.now()
    }

    /// A daemon of `parts` with no jobs loaded yet (`recover` loads them).
    pub(super) fn assemble(parts: Parts) -> Daemon {
        Daemon {
            core: Core {
                config: parts.config,
                users: users::Users::default(),
                jobs: Jobs::default(),
                policy: PolicyState::default(),
                clock: parts.clock,
            },
            spool: parts.spool,
            ownership: parts.ownership,
            nodes: parts.nodes,
            pool: parts.pool,
            store: Store {
                db: parts.db,
                in_transaction: false,
                leadership: None,
            },
            turn: TurnWork::default(),
            inbox: Backlog::default(),
            snapshot: None,
            queries: parts.queries,
            reschedule: true,
            between: Default::default(),
            shutdown: false,
            gpu_watch: parts.gpu_watch,
            stats: parts.stats,
            notifier: parts.notifier,
            timers: Timers {
                next_retention: Instant::now(),
                next_police: Instant::now(),
                watchdog: super::watchdog::Watchdog::from_env(),
            },
            unauthenticated: Default::default(),
        }
    }
}

/// What the controller's decisions read and change: the configuration,
/// the active jobs, the policy's state, the users, and the clock of the
/// records. Handlers take it, with what they ask and who asks, and push
/// what must leave the process as effects (`effects`); nothing in it
/// touches the disk, a process or the network.
pub(super) struct Core {
    pub(super) config: Config,
    pub(super) users: users::Users,
    /// Pending, running and completing jobs.
    /// Shared with the queue snapshot the views read: a job changed while
    /// a snapshot holds it is copied first (`Arc::make_mut`).
    pub(super) jobs: Jobs,
    pub(super) policy: PolicyState,
    pub(super) clock: Clock,
}

/// The state the event loop owns: the core the handlers change, and the
/// edge the turn alone owns (the store, the executors and node links,
/// the spool, the notifier, the query channel).
pub(super) struct Daemon {
    pub(super) core: Core,
    pub(super) spool: Spool,
    pub(super) ownership: Ownership,
    /// The servers that run the jobs, each behind its executor: this
    /// host's supervisors and cgroups, and in a pool the nodes' agents.
    pub(super) nodes: Nodes,
    /// The pool's server, certificate authority and connections, when
    /// the config turns the pool on.
    pub(super) pool: Option<super::pool_state::PoolState>,
    pub(super) store: Store,
    pub(super) turn: TurnWork,
    pub(super) inbox: Backlog,
    /// The queue as the views see it, until the next change; built on the
    /// query thread the first time a query needs it.
    pub(super) snapshot: Option<Arc<query::LazySnapshot>>,
    pub(super) queries: Sender<query::Work>,
    pub(super) reschedule: bool,
    /// What the last pass left, and when the next may run.
    pub(super) between: super::pace::BetweenPasses,
    pub(super) shutdown: bool,
    pub(super) gpu_watch: GpuWatch,
    pub(super) stats: Stats,
    /// Where notifications go, and those to send after this turn's commit.
    pub(super) notifier: notifications::Notifier,
    pub(super) timers: Timers,
    /// Web actions refused for a token that is not taken, recorded a few
    /// a minute (anyone on the network can send them).
    pub(super) unauthenticated: super::refusals::RefusalLimit<()>,
}

/// The scheduling policy's inputs kept between passes, and what the last pass decided.
#[derive(Default)]
pub(super) struct PolicyState {
    /// From the last scheduling pass.
    pub(super) reasons: IdMap<Reason>,
    /// When jobs with a reservation are expected to start, from the last pass.
    pub(super) expected_starts: IdMap<i64>,
    /// Each association's usage, as charged and last decayed.
    pub(super) usage: HashMap<(String, String), sched::fairshare::Usage>,
    /// What each budgeted account spent in its current period.
    pub(super) budgets: Spending,
    /// Final states of ended jobs that pending dependencies name.
    pub(super) ended: HashMap<JobId, JobState>,
    /// Running jobs sent their `--signal` warning before their time limit.
    pub(super) warned: HashSet<JobId>,
    /// Fair-share factors from the last pass.
    pub(super) fairshare: sched::fairshare::FactorMap,
    /// The last pass's fair-share tree, which the next query snapshot shows
    /// (`ysshare`) instead of building its own: a pass follows every change
    /// to jobs or usage, and building the tree walks every job.
    pub(super) pass_tree: Option<(sched::fairshare::Tree, Vec<sched::fairshare::NodeShare>)>,
    pub(super) order: Vec<JobId>,
    pub(super) wake_at: Option<i64>,
    /// GPUs out of service (yscontrol drain), as the database has them.
    /// Parts of jobs over several nodes found gone without a record of
    /// their end (after a restart): job, its run, node.
    pub(super) lost_parts: HashSet<(JobId, u32, String)>,
    /// When each job now COMPLETING was told to stop (read back from the
    /// records at a start and after a failed commit): a freeze its node
    /// reports later is credited no further than that.
    pub(super) stopping: HashMap<JobId, i64>,
    /// Each running job's last suspension that ended (read back from the
    /// records at a start and after a failed commit): from, to. A run charged until before
    /// its end (its node lost, frozen since its lease ran out while the
    /// job was suspended) stood suspended only until then.
    pub(super) resumed: HashMap<JobId, (i64, i64)>,
    /// Jobs whose last resume a node missed and that was made again at
    /// its hello (`suspend::on_resume_missed`), by when that suspension
    /// began: made again once, however often a node says it missed it.
    pub(super) resumed_again: HashMap<JobId, i64>,
    /// Drained GPUs: (node, its GPU number).
    pub(super) drains: BTreeMap<crate::db::DrainKey, crate::report::node::Drain>,
    /// Each run's charge taken twice, on purpose (a test that the
    /// simulation finds it).
    #[cfg(test)]
    pub(super) charge_twice: bool,
}

/// What a turn leaves to do after its commit.
#[derive(Default)]
pub(super) struct TurnWork {
    /// Replies to send once the current transaction is committed.
    pub(super) replies: Vec<(Requester, Reply)>,
    /// Jobs marked running in this turn, to launch after the commit.
    pub(super) to_launch: Vec<JobId>,
    /// What leaves the process once this turn is committed (see
    /// `effects`): commands to jobs' processes, freezes and thaws,
    /// notifications, what executors kept of ended jobs.
    pub(super) out: Vec<super::effects::Out>,
    /// Jobs whose exit a failed turn took in: looked at again.
    pub(super) exits_to_retry: Vec<JobId>,
    /// Jobs recorded suspended that a node could not freeze after the
    /// commit, and why: resumed in the record next turn.
    pub(super) unfreezable: Vec<(JobId, String)>,
    /// The seam's rule broken on purpose, for the simulation's test that
    /// finds it: what leaves is sent as it is applied, before the commit.
    #[cfg(test)]
    pub(super) send_before_commit: bool,
    /// How the request being handled came, for the audit log.
    pub(super) channel: crate::proto::Channel,
    /// Queries a pool's nodes passed on, for the query thread after the
    /// commit (their answers go back over the nodes' links).
    pub(super) node_queries: Vec<crate::query::Work>,
}

/// Requests seen but not yet processed (beyond one batch), and the spool names among them.
#[derive(Default)]
pub(super) struct Backlog {
    /// Requests seen but not yet processed (beyond one batch), and the
    /// spool names among them.
    pub(super) backlog: Vec<Incoming>,
    pub(super) backlog_set: HashSet<String>,
}

/// Where this server's GPU utilisation comes from, and when to sample it
/// next (`None`: never, without a source or with sampling off). Each
/// node keeps its own last reading.
pub(super) struct GpuWatch {
    pub(super) gpu_source: Box<dyn crate::gpu::sampling::Source>,
    pub(super) next_sample: Option<Instant>,
    /// Processes on GPUs that were not their holder's, already logged:
    /// (node, GPU, pid).
    pub(super) intruders_seen: HashSet<(String, u32, u32)>,
}

/// For the metrics: the last samples' pass time, preemptions and requests so far, GPUs idle while jobs wait, and when to write them next.
pub(super) struct Stats {
    pub(super) last_pass_seconds: f64,
    pub(super) preemptions_total: u64,
    /// Jobs started between passes (see `quick`), since the start.
    pub(super) quick_starts_total: u64,
    pub(super) next_metrics: Option<Instant>,
    /// The text the metrics endpoint serves (`None`: no endpoint).
    pub(super) metrics_latest: Option<metrics_http::Latest>,
    /// Requests handled from the spool, and their latency summed.
    pub(super) requests_total: u64,
    pub(super) ingest_seconds_sum: f64,
    /// GPUs free while jobs wait, charged to the GPUs' hours.
    pub(super) idle_watch: crate::report::history::IdleWatch,
    pub(super) next_idle_flush: Instant,
    /// How many were free while jobs waited at the last look.
    pub(super) idle_while_waiting: usize,
}

/// The clock of the records: the system's, or one a test or the
/// simulation moves.
#[derive(Clone, Debug, Default)]
pub(super) enum Clock {
    #[default]
    System,
    Manual(Arc<std::sync::atomic::AtomicI64>),
}

impl Clock {
    pub(super) fn now(&self) -> i64 {
        match self {
            Clock::System => crate::model::units::now(),
            Clock::Manual(t) => t.load(std::sync::atomic::Ordering::SeqCst),
        }
    }

    /// Now on the monotonic clock the pool's leases are timed on: the
    /// host's; a manual clock's seconds after a fixed instant, so that
    /// the simulation times leases, and a controller's stalls, on its own
    /// clock.
    pub(super) fn instant(&self) -> Instant {
        static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        match self {
            Clock::System => Instant::now(),
            Clock::Manual(_) => {
                let origin = *ORIGIN.get_or_init(Instant::now);
                origin + std::time::Duration::from_secs(self.now().max(0) as u64)
            }
        }
    }
}

/// When to take the next maintenance steps.
pub(super) struct Timers {
    /// When to take the next retention step (purge_after_months).
    pub(super) next_retention: Instant,
    /// When to look at the drop boxes and the reserve next.
    pub(super) next_police: Instant,
    /// systemd's watchdog, when it set one.
    pub(super) watchdog: Option<super::watchdog::Watchdog>,
}

/// The database, and whether a turn's transaction is open.
pub(super) struct Store {
    pub(super) db: Connection,
    pub(super) in_transaction: bool,
    /// With `[standby]`: the term this controller leads in; nothing is
    /// written once its lease is no longer proven.
    pub(super) leadership: Option<super::leading::Leadership>,
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
    fn the_holders_and_the_jobs_waiting_for_gpus_follow_every_change() {
        let holding = |jobs: &mut Jobs| jobs.holding().map(|j| j.id).collect::<Vec<_>>();
        let wanting = |jobs: &mut Jobs| jobs.first_wanting_gpus().map(|j| j.id);
        let mut jobs = Jobs::default();
        let mut cpu_only = job(1, JobState::Pending);
        cpu_only.gpus.count = 0;
        jobs.insert(cpu_only);
        assert_eq!(
            wanting(&mut jobs),
            None,
            "a job without GPUs waits for none"
        );
        let mut gpu_job = job(2, JobState::Pending);
        gpu_job.gpus.count = 2;
        jobs.insert(gpu_job);
        assert_eq!(wanting(&mut jobs), Some(2));
        jobs.job_mut(&2).unwrap().hold = Some(crate::model::job::Hold::User);
        assert_eq!(wanting(&mut jobs), None, "a held job waits for nothing");
        jobs.job_mut(&2).unwrap().hold = None;
        jobs.job_mut(&2).unwrap().state = JobState::Running;
        assert_eq!(wanting(&mut jobs), None);
        assert_eq!(holding(&mut jobs), vec![2]);
        // Stopping and frozen jobs still hold their GPUs; running() is
        // the running ones alone.
        jobs.job_mut(&2).unwrap().state = JobState::Completing;
        jobs.insert(job(3, JobState::Suspended));
        assert_eq!(holding(&mut jobs), vec![2, 3]);
        assert_eq!(running_ids(&mut jobs), Vec::<JobId>::new());
        jobs.remove(&2);
        assert_eq!(holding(&mut jobs), vec![3]);
        // Pending with a dependency, until it starts.
        let depending = |jobs: &mut Jobs| jobs.depending().map(|j| j.id).collect::<Vec<_>>();
        let mut after = job(4, JobState::Pending);
        after.dependency = Some("afterok:3".into());
        jobs.insert(after);
        assert_eq!(depending(&mut jobs), vec![4]);
        assert!(jobs.any_pending_in(&jobs.all[&4].qos.clone()));
        jobs.job_mut(&4).unwrap().qos = "critical".into();
        assert!(jobs.any_pending_in("critical"));
        jobs.job_mut(&4).unwrap().state = JobState::Running;
        assert_eq!(depending(&mut jobs), Vec::<JobId>::new());
        assert!(!jobs.any_pending_in("critical"), "started: pending no more");
    }

    /// Each job's numbers, read back as the names they stand for.
    fn named_by_numbers(jobs: &mut Jobs) -> Vec<(JobId, String, String, String)> {
        let (all, numbered) = jobs.numbered();
        all.iter()
            .zip(&numbered.jobs)
            .map(|(job, &(association, level))| {
                let (account, user) = numbered.associations[association as usize];
                let qos = numbered.qos[level as usize];
                (job.id, account.into(), user.into(), qos.into())
            })
            .collect()
    }

    #[test]
    fn each_jobs_numbers_stand_for_its_association_and_qos_through_every_change() {
        let mut jobs = Jobs::default();
        let names = |jobs: &Jobs| -> Vec<(JobId, String, String, String)> {
            jobs.all()
                .map(|j| (j.id, j.account.clone(), j.user.clone(), j.qos.clone()))
                .collect()
        };
        for id in 1..=4 {
            let mut job = job(id, JobState::Pending);
            job.user = format!("user{}", id % 2);
            jobs.insert(job);
        }
        assert_eq!(named_by_numbers(&mut jobs), names(&jobs));
        let changed = jobs.job_mut(&2).unwrap();
        changed.qos = "critical".into();
        changed.account = "physics".into();
        jobs.job_mut(&3).unwrap().state = JobState::Running;
        jobs.remove(&1);
        let mut late = job(9, JobState::Pending);
        late.user = "user0".into();
        jobs.insert(late);
        assert_eq!(named_by_numbers(&mut jobs), names(&jobs));
        assert_eq!(
            jobs.numbered().1.associations.len(),
            3,
            "a pair seen before keeps its number"
        );
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
