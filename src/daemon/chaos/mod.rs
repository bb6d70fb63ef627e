//! A deterministic simulation of the whole controller under faults, as
//! FoundationDB and TigerBeetle test their cores: the real core,
//! handlers, scheduling pass, effect seam, turn and recovery, over a real
//! SQLite database, driven by a seeded generator on a simulated clock.
//! The nodes are simulated (`node`): their runs start, hold GPUs, end by
//! themselves or when stopped. Users submit, cancel, hold, release and
//! requeue; the controller crashes at any step (everything in memory
//! dropped, the state rebuilt from the database and the nodes, as a
//! restart does); a turn's commit fails (a full disk). After every step
//! the invariants are checked (`check`); after the faults stop, every job
//! must reach a final state within a bounded time. A seed replays a run
//! exactly, and a failing seed's report has its steps.

mod check;
mod net;
pub mod node;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;

use crate::config::Config;
use crate::exec::executor::{IsolationFacts, NodeFacts};
use crate::gpu::Inventory;
use crate::model::job::JobId;
use crate::proto::{Control, JobSelector, Reply};
use crate::spool::{Ownership, Spool};

use super::error::DaemonError;
use super::nodes::{Node, Nodes};
use super::notifications::Notifier;
use super::requester::Proven;
use super::state::{Clock, Daemon, Parts};
use node::SimNode;

pub use check::Invariant;
use node::Run;

/// The pool the simulation runs: three nodes of four A100s, two accounts,
/// usage that never decays (so that it sums the charges exactly), quick
/// requeues held after three; QoS high preempts medium (suspended: frozen
/// in place) and low (requeued after a 30 s grace).
const CONFIG: &str = "node_name = \"sim01\"\n\
    allow_root_jobs = true\n\
    gpu_sample_secs = 0\n\
    kill_wait = 30\n\
    max_quick_requeues = 3\n\
    default_qos = \"low\"\n\
    [[qos]]\nname = \"high\"\npriority = 200\npreempt = [\"medium\", \"low\"]\n\
    [[qos]]\nname = \"medium\"\npriority = 100\npreempt_mode = \"suspend\"\n\
    [[qos]]\nname = \"low\"\npriority = 0\ngrace_time = \"0:30\"\n\
    [[gpus]]\ntype = \"a100\"\ncount = 4\nmemory = \"80G\"\n\
    [pool]\nlease = \"240s\"\n\
    [fairshare]\nhalf_life = \"UNLIMITED\"\n\
    [[accounts]]\nname = \"vision\"\nshares = 2\nusers = [\"*\"]\n\
    [[accounts]]\nname = \"speech\"\nshares = 1\nusers = [\"*\"]\n";

/// The last draw of `act` that does something (the others: nothing).
const LAST_ACTION: u32 = 79;
/// Every how many steps the records are checked (and after each crash,
/// and at the end): each check reads every job's record.
const RECORDS_EVERY: u64 = 25;
/// How many nodes the simulated pool has: the controller's own server,
/// and the others' agents over the simulated network.
const NODES: usize = 3;
/// Simulated seconds after the faults stop within which every job must
/// have ended, beyond each active job's time limit and `MOST_PER_JOB`.
const SETTLE_WITHIN: i64 = 3 * 3_600;
/// What a job may take beyond its time limit: a requeue's longest wait
/// (10 minutes), a stop's grace, and a step's time.
const MOST_PER_JOB: i64 = 600 + 30 + 60;

/// When every seed's run starts: a seed's run is the same whenever it
/// runs.
const STARTED: i64 = 1_800_000_000;

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    pub first_seed: u64,
    pub seeds: u64,
    /// Simulated hours of faults per seed.
    pub hours: f64,
    /// The other nodes are the pool's, over the simulated network (`net`);
    /// else every node is at the controller's hand.
    pub pool: bool,
}

/// How the seeds went.
#[derive(Debug, Default)]
pub struct Report {
    pub seeds: u64,
    pub steps: u64,
    /// Simulated seconds, all seeds together.
    pub simulated_secs: i64,
    pub wall_secs: f64,
    /// Each invariant and how many times it was checked.
    pub checked: BTreeMap<Invariant, u64>,
    pub jobs: u64,
    pub crashes: u64,
    pub failed_commits: u64,
    /// Jobs started between passes, the moment they were queued.
    pub quick_starts: u64,
    pub failures: Vec<Failure>,
    /// What a rerun of one seed adds to `--first-seed N --seeds 1`: the
    /// mode and the hours.
    pub rerun_with: String,
}

/// A seed whose run broke an invariant.
#[derive(Debug, Clone)]
pub struct Failure {
    pub seed: u64,
    pub step: u64,
    pub invariant: Invariant,
    pub detail: String,
    /// The steps up to it, in order.
    pub trace: Vec<String>,
    /// The shortest trace found that still breaks the same invariant
    /// (`shrink`): how many of the run's actions it keeps, of how many,
    /// and its steps.
    pub shrunk: Option<Box<Shrunk>>,
}

/// A failing run with as many of its actions left out as still fail.
#[derive(Debug, Clone)]
pub struct Shrunk {
    pub of: usize,
    /// The steps whose actions it keeps.
    pub kept: Vec<u64>,
    pub trace: Vec<String>,
}

impl Report {
    /// One line per invariant, then the run's figures.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for invariant in Invariant::ALL {
            let checked = self.checked.get(&invariant).copied().unwrap_or(0);
            let broken = self
                .failures
                .iter()
                .filter(|f| f.invariant == invariant)
                .count();
            let verdict = if broken == 0 { "held" } else { "BROKEN" };
            out.push_str(&format!(
                "{verdict:6} {:28} checked {checked}, broken in {broken} seed(s)\n",
                invariant.name()
            ));
        }
        let hours = self.simulated_secs as f64 / 3_600.0;
        out.push_str(&format!(
            "{} seed(s), {} steps, {} jobs ({} started between passes), {} controller crashes, {} failed commits; {hours:.1} simulated controller-hours in {:.1} s ({:.1} simulated hours per wall second)\n",
            self.seeds,
            self.steps,
            self.jobs,
            self.quick_starts,
            self.crashes,
            self.failed_commits,
            self.wall_secs,
            hours / self.wall_secs.max(1e-9),
        ));
        for f in &self.failures {
            out.push_str(&format!(
                "seed {} broke {} at step {}: {}\n  rerun: ysctld simulate --chaos{} --first-seed {} --seeds 1\n",
                f.seed,
                f.invariant.name(),
                f.step,
                f.detail,
                self.rerun_with,
                f.seed
            ));
            let (trace, said) = match &f.shrunk {
                Some(s) => (
                    &s.trace,
                    format!(
                        "the shortest failing trace found: {} of the run's {} actions (those of steps {})",
                        s.kept.len(),
                        s.of,
                        crate::array::format_ranges(
                            &s.kept.iter().map(|&n| n as u32).collect::<Vec<_>>()
                        )
                    ),
                ),
                None => (&f.trace, "every step".to_string()),
            };
            out.push_str(&format!("  {said}:\n"));
            for line in trace {
                out.push_str(&format!("    {line}\n"));
            }
        }
        out
    }
}

/// Runs every seed of `options`.
pub fn run(options: &Options) -> Result<Report, DaemonError> {
    let started = Instant::now();
    let mut report = Report {
        rerun_with: format!(
            "{} --hours {}",
            if options.pool { " --pool" } else { "" },
            options.hours
        ),
        ..Report::default()
    };
    for seed in options.first_seed..options.first_seed.saturating_add(options.seeds) {
        let secs = (options.hours * 3_600.0) as i64;
        let mut world = World::new(seed, options.pool)?;
        let outcome = world.run(secs);
        report.seeds += 1;
        report.steps += world.step;
        report.simulated_secs += world.now() - STARTED;
        report.jobs += world.submitted.len() as u64;
        report.crashes += world.counts.crashes;
        report.failed_commits += world.counts.failed_commits;
        report.quick_starts += world.counts.quick_starts;
        for (invariant, n) in &world.checked {
            *report.checked.entry(*invariant).or_default() += n;
        }
        if let Err(mut failure) = outcome {
            failure.shrunk = shrink(
                &|| World::new(seed, options.pool),
                secs,
                &failure,
                &world.acted,
            )?;
            report.failures.push(failure);
        }
    }
    report.wall_secs = started.elapsed().as_secs_f64();
    Ok(report)
}

/// At most this many reruns to shrink a failing trace.
const SHRINK_TRIES: usize = 96;

/// The shortest trace of seed `seed` found that still breaks `invariant`:
/// its actions (`acted`, by step) left out a chunk at a time, halving the
/// chunks, each rerun from the start (delta debugging). Each step draws
/// from its own stream, so leaving one out changes no other's draws.
fn shrink(
    make: &dyn Fn() -> Result<World, DaemonError>,
    secs: i64,
    failure: &Failure,
    acted: &[u64],
) -> Result<Option<Box<Shrunk>>, DaemonError> {
    let invariant = failure.invariant;
    let mut kept: Vec<u64> = acted.to_vec();
    let mut skipped = BTreeSet::new();
    let mut best = None;
    let mut chunk = kept.len().div_ceil(2).max(1);
    let mut tries = 0;
    while tries < SHRINK_TRIES && !kept.is_empty() {
        let (mut at, mut removed) = (0, false);
        while at < kept.len() && tries < SHRINK_TRIES {
            let end = (at + chunk).min(kept.len());
            let mut trial = skipped.clone();
            trial.extend(kept[at..end].iter().copied());
            tries += 1;
            let mut world = make()?;
            world.variant.skip = trial.clone();
            // No action beyond those of the failing run.
            world.variant.faults_until_step = Some(failure.step);
            match world.run(secs) {
                Err(f) if f.invariant == invariant => {
                    kept.drain(at..end);
                    skipped = trial;
                    best = Some(f.trace);
                    removed = true;
                }
                _ => at = end,
            }
        }
        if !removed {
            if chunk == 1 {
                break;
            }
            chunk = chunk.div_ceil(2);
        }
    }
    Ok(best.map(|trace| {
        Box::new(Shrunk {
            of: acted.len(),
            kept,
            trace,
        })
    }))
}

/// How a run differs from its seed's own: to shrink a failing trace, or
/// to break a rule on purpose.
#[derive(Default)]
struct Variant {
    /// Steps whose action is left out.
    skip: BTreeSet<u64>,
    /// The step after which the faults stop, whatever the time.
    faults_until_step: Option<u64>,
    /// Each controller breaks the seam's rule on purpose (a test that the
    /// simulation finds it).
    #[cfg(test)]
    send_before_commit: bool,
    /// Each controller charges each run twice, on purpose.
    #[cfg(test)]
    charge_twice: bool,
}

/// One seed's controller, nodes and users.
struct World {
    seed: u64,
    rng: fastrand::Rng,
    dir: tempfile::TempDir,
    config: Config,
    clock: Arc<AtomicI64>,
    nodes: Vec<SimNode>,
    durations: Arc<Mutex<BTreeMap<JobId, i64>>>,
    exits: Arc<Mutex<Vec<JobId>>>,
    /// The network between the controller and the other nodes' agents,
    /// and what the controller sends onto it.
    net: net::Network,
    /// When the controller gave each run (job, restart) its GPUs: a run
    /// holds them from then, though its node may start it a frame's
    /// transit later.
    allocated: BTreeMap<(JobId, u32), i64>,
    daemon: Option<Daemon>,
    _queries: mpsc::Receiver<crate::query::Work>,
    /// Every job a submission was acknowledged for.
    submitted: BTreeSet<JobId>,
    /// The steps at which a user or the world did something.
    acted: Vec<u64>,
    /// How this run differs from its seed's own.
    variant: Variant,
    step: u64,
    trace: Vec<String>,
    checked: BTreeMap<Invariant, u64>,
    counts: Counts,
}

/// What happened in a run, for the report.
#[derive(Default)]
struct Counts {
    crashes: u64,
    failed_commits: u64,
    /// Jobs started between passes, the moment they were queued.
    quick_starts: u64,
}

impl World {
    fn new(seed: u64, pool: bool) -> Result<World, DaemonError> {
        let config = Config::parse(CONFIG, Path::new("simulation.toml"))?;
        let dir = tempfile::Builder::new()
            .prefix("ysched-simulation-")
            .tempdir()?;
        // A fixed start: a seed's run is the same whenever it runs.
        let clock = Arc::new(AtomicI64::new(STARTED));
        let durations: Arc<Mutex<BTreeMap<JobId, i64>>> = Arc::default();
        let exits: Arc<Mutex<Vec<JobId>>> = Arc::default();
        let nodes: Vec<SimNode> = (0..NODES)
            .map(|i| {
                let facts = NodeFacts {
                    name: format!("sim{:02}", i + 1),
                    inventory: Inventory::declared(&config),
                    cpus: 32,
                    mem_mb: 256 << 10,
                    tmp_mb: 100 << 10,
                    containers: false,
                    isolation: IsolationFacts {
                        confined: true,
                        can_suspend: true,
                        ..Default::default()
                    },
                };
                // The controller's own node tells it its ends; the pool's
                // tell their agents.
                let heard = if i == 0 || !pool {
                    exits.clone()
                } else {
                    Arc::default()
                };
                SimNode::new(facts, clock.clone(), durations.clone(), heard)
            })
            .collect();
        let remote = if pool { &nodes[1..] } else { &[] };
        let agents = remote
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let clock = crate::net::runs::AgentClock::Simulated(clock.clone());
                net::SimAgent::new(node.clone(), node.heard(), clock, i as u64 + 1)
            })
            .collect();
        let net = net::Network::new(agents, 1);
        record_pool(dir.path(), &net, STARTED)?;
        let (queries, receiver) = mpsc::channel();
        let mut world = World {
            seed,
            rng: fastrand::Rng::with_seed(seed),
            dir,
            config,
            clock,
            nodes,
            durations,
            exits,
            net,
            allocated: BTreeMap::new(),
            daemon: None,
            _queries: receiver,
            submitted: BTreeSet::new(),
            acted: Vec::new(),
            variant: Variant::default(),
            step: 0,
            trace: Vec::new(),
            checked: BTreeMap::new(),
            counts: Counts::default(),
        };
        world.daemon = Some(world.start_controller(queries)?);
        Ok(world)
    }

    fn now(&self) -> i64 {
        self.clock.load(Ordering::SeqCst)
    }

    /// A controller over this world's database and nodes, recovered from
    /// them as at a start: its own node's executor at hand, the others'
    /// agents to say hello over the network.
    fn start_controller(
        &mut self,
        queries: mpsc::Sender<crate::query::Work>,
    ) -> Result<Daemon, DaemonError> {
        let spool = Spool::new(self.dir.path());
        spool.prepare(Ownership::Personal)?;
        let at_hand = if self.net.agents.is_empty() {
            &self.nodes[..]
        } else {
            &self.nodes[..1]
        };
        let members = at_hand
            .iter()
            .map(|n| Node::new(Box::new(n.executor())))
            .collect();
        self.net.starts += 1;
        let (server, sent) = crate::net::server::Recorder::new()?;
        self.net.recorder = Some(sent);
        let clock = Clock::Manual(self.clock.clone());
        let db = crate::db::open(&spool.database())?;
        // As a start does: what nodes froze while it was away is bounded
        // by the last moment its records show it alive.
        let alive_before = crate::db::last_event_time(&db)?.unwrap_or_else(|| self.now());
        let good = crate::db::nodes_good(&db)?.into_iter().collect();
        let authority = crate::net::pki::Authority::load_or_create(
            &spool.root().join("pool"),
            &self.config.node_name,
        )?;
        let pool = super::pool_state::PoolState::new(
            (server, authority),
            (self.net.starts, self.config.pool.lease),
            "sim01:6820".into(),
            (alive_before, good),
            clock.instant(),
        );
        // Its crashes drop the process's memory, not the machine's: what
        // is written is not lost, and need not wait for the disk.
        db.execute_batch("PRAGMA synchronous = OFF")?;
        let mut daemon = Daemon::assemble(Parts {
            config: self.config.clone(),
            db,
            spool,
            ownership: Ownership::Personal,
            nodes: Nodes::new(members),
            pool: (!self.net.agents.is_empty()).then_some(pool),
            queries,
            gpu_watch: super::startup::watch_gpus(&self.config),
            stats: super::startup::start_stats(&self.config)?,
            notifier: Notifier::off(),
            clock,
        });
        #[cfg(test)]
        {
            daemon.turn.send_before_commit = self.variant.send_before_commit;
            daemon.core.policy.charge_twice = self.variant.charge_twice;
        }
        daemon.load_pool_nodes()?;
        daemon.recover()?;
        Ok(daemon)
    }

    fn daemon(&mut self) -> &mut Daemon {
        self.daemon
            .as_mut()
            .expect("a controller runs between steps")
    }

    /// The faults for `secs` simulated seconds, then none until every job
    /// has ended; the first broken invariant stops it.
    fn run(&mut self, secs: i64) -> Result<(), Failure> {
        let until = self.now() + secs;
        while self.now() < until && self.variant.faults_until_step.is_none_or(|s| self.step < s) {
            let crashes = self.counts.crashes;
            self.step(true)
                .map_err(|e| self.failure(Invariant::Runs, e.to_string()))?;
            self.check(self.counts.crashes > crashes || self.step.is_multiple_of(RECORDS_EVERY))?;
        }
        self.trace
            .push("faults stop; held jobs released, suspended ones resumed".into());
        // Held and suspended jobs wait for their users and administrators:
        // they release and resume them now.
        self.control_all(|job_ids| Control::Release { job_ids })
            .map_err(|e| self.failure(Invariant::Runs, e.to_string()))?;
        self.control_all(|job_ids| Control::Resume { job_ids })
            .map_err(|e| self.failure(Invariant::Runs, e.to_string()))?;
        // The worst case: every active job runs alone, to its limit, after
        // its longest wait.
        let work: i64 = self
            .daemon()
            .core
            .jobs
            .all()
            .map(|j| j.time_limit.map_or(SETTLE_WITHIN, |l| l as i64) + MOST_PER_JOB)
            .sum();
        let deadline = self.now() + work + SETTLE_WITHIN;
        while self.active_jobs() > 0 {
            if self.now() > deadline {
                let left: Vec<String> = self
                    .daemon()
                    .core
                    .jobs
                    .all()
                    .take(4)
                    .map(|j| {
                        format!(
                            "job {} {} hold {:?} reason {:?} begin {:?} restarts {}",
                            j.id, j.state, j.hold, j.reason, j.begin_time, j.restart_count
                        )
                    })
                    .collect();
                let count = self.active_jobs();
                return Err(self.failure(
                    Invariant::Ends,
                    format!(
                        "{count} job(s) still active past the time their limits allow after the faults stopped: {}",
                        left.join("; ")
                    ),
                ));
            }
            self.step(false)
                .map_err(|e| self.failure(Invariant::Runs, e.to_string()))?;
            self.check(self.step.is_multiple_of(RECORDS_EVERY))?;
        }
        self.check(true)?;
        self.count(Invariant::Ends);
        Ok(())
    }

    /// The invariants: those of what runs at every step; those of the
    /// records (every job's, the usage) when `records` says (after a
    /// crash, every few steps, at the end: every job's record is read).
    fn check(&mut self, records: bool) -> Result<(), Failure> {
        if let Some((name, why)) = self
            .net
            .agents
            .iter()
            .find_map(|a| Some((a.node.facts.name.clone(), a.refused.clone()?)))
        {
            return Err(self.failure(
                Invariant::Runs,
                format!("the controller refused node {name}: {why}"),
            ));
        }
        let keep = |r: &Run| records || r.ended.is_none();
        let allocated = &self.allocated;
        // Each run held its GPUs from when the controller gave them.
        let held = |r: &Run| Run {
            start: allocated
                .get(&(r.job, r.restart))
                .copied()
                .unwrap_or(r.start),
            ..r.clone()
        };
        let runs: Vec<(String, Run)> = self
            .nodes
            .iter()
            .flat_map(|n| {
                let name = n.facts.name.clone();
                n.state()
                    .runs
                    .iter()
                    .filter(|r| keep(r))
                    .map(|r| (name.clone(), held(r)))
                    .collect::<Vec<_>>()
            })
            .collect();
        let (mut recorded, mut usage, mut lost_slack) =
            (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        if records {
            let daemon = self
                .daemon
                .as_ref()
                .expect("a controller runs between steps");
            for &id in &self.submitted {
                if let Ok(job) = crate::db::job(&daemon.store.db, id) {
                    recorded.insert(id, job);
                }
            }
            for (association, u) in &daemon.core.policy.usage {
                usage.insert(association.clone(), u.raw);
            }
            let lease = self.config.pool.lease.as_secs() as i64;
            // Only the pool's nodes are lost (and reading each job's
            // events is a query per job).
            let pool = !self.net.agents.is_empty();
            for job in recorded.values().filter(|_| pool) {
                let events = crate::db::job_events(&daemon.store.db, job.id).unwrap_or_default();
                let count =
                    |of: &str| events.iter().filter(|(_, name, _)| name == of).count() as i64;
                // A freeze is credited a second short of the wait its last
                // report had (whole-second clocks): up to a second more
                // charged per freeze.
                let slack = count("NODE_FAIL") * lease + count("THAWED") + count("FROZEN");
                if slack > 0 {
                    lost_slack.insert(job.id, slack * i64::from(job.gpus.count));
                }
            }
        }
        let facts = check::Facts {
            runs: &runs,
            submitted: &self.submitted,
            records: &recorded,
            usage: &usage,
            lost_slack: &lost_slack,
        };
        let checks = check::LIVE
            .iter()
            .chain(check::RECORDS.iter().filter(|_| records));
        let mut broken = None;
        let mut counted = Vec::new();
        for (invariant, holds) in checks {
            counted.push(*invariant);
            if let Err(e) = holds(&facts) {
                broken = Some((*invariant, e.to_string()));
                break;
            }
        }
        for invariant in counted {
            self.count(invariant);
        }
        match broken {
            Some((invariant, detail)) => Err(self.failure(invariant, detail)),
            None => Ok(()),
        }
    }

    fn failure(&self, invariant: Invariant, detail: String) -> Failure {
        let mut trace = self.trace.clone();
        // What the controller believed then, to read the steps against.
        if let Some(daemon) = &self.daemon {
            trace.push("the controller's active jobs then:".into());
            for job in daemon.core.jobs.all() {
                trace.push(format!(
                    "  job {} {} ({}) on {} GPUs {:?} claim {:?}, run {}{}",
                    job.id,
                    job.state,
                    job.qos,
                    job.node.as_deref().unwrap_or("-"),
                    job.gpus_alloc,
                    job.claim,
                    job.restart_count,
                    job.reason
                        .as_deref()
                        .map_or(String::new(), |r| format!(": {r}"))
                ));
            }
        }
        Failure {
            seed: self.seed,
            step: self.step,
            invariant,
            detail,
            trace,
            shrunk: None,
        }
    }

    fn count(&mut self, invariant: Invariant) {
        *self.checked.entry(invariant).or_default() += 1;
    }

    fn active_jobs(&mut self) -> usize {
        self.daemon().core.jobs.len()
    }

    /// One step: time passes, what is due happens, and (with `faults`)
    /// one thing a user or the world does.
    fn step(&mut self, faults: bool) -> Result<(), DaemonError> {
        self.step += 1;
        // Each step draws from a stream of its own: a step's action left
        // out changes no other step's draws.
        let mixed = self.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ self.step;
        self.rng = fastrand::Rng::with_seed(mixed);
        let dt = self.rng.i64(1..=60);
        self.advance_to(self.now() + dt, Some(faults))?;
        if faults {
            self.act()?;
        }
        self.settle(faults)?;
        self.count(Invariant::Runs);
        Ok(())
    }

    /// Time passes until `until`: runs end when their time comes, and the
    /// agents fence and send their heartbeats at their own moments; a
    /// controller that runs (`awake`: with faults or not) reads what they
    /// send as it comes, one that is stalled (`None`) reads nothing.
    fn advance_to(&mut self, until: i64, awake: Option<bool>) -> Result<(), DaemonError> {
        loop {
            let now = self.now();
            let next = self
                .net
                .next_deadline(now)
                .filter(|&t| t < until)
                .unwrap_or(until);
            self.clock.store(next.max(now), Ordering::SeqCst);
            for node in &self.nodes {
                node.end_due();
            }
            if next >= until {
                return Ok(());
            }
            match awake {
                Some(faults) => self.settle(faults)?,
                None => {
                    self.pump();
                }
            }
        }
    }

    /// The controller's turns and the network's deliveries, until what is
    /// due has arrived and been answered (a frame on a link that is not
    /// stalled arrives within the second).
    fn settle(&mut self, faults: bool) -> Result<(), DaemonError> {
        self.pump();
        for _ in 0..16 {
            self.turns(faults)?;
            if !self.pump() {
                break;
            }
        }
        Ok(())
    }

    /// What the controller sent goes onto the network; what has arrived
    /// by now is delivered, to the controller's pool and to the agents.
    /// Whether anything moved.
    fn pump(&mut self) -> bool {
        let now = self.now();
        let Some(daemon) = self.daemon.as_mut() else {
            return false;
        };
        self.net.take_sent(now);
        let Some(pool) = daemon.pool.as_mut() else {
            return false;
        };
        self.net.pump(now, &mut pool.events)
    }

    /// A fault of the pool's network, or of a node's agent.
    fn network_fault(&mut self, action: u32) -> Result<(), DaemonError> {
        let now = self.now();
        let index = self.rng.usize(0..self.net.agents.len());
        let name = self.net.agents[index].node.facts.name.clone();
        let Some(pool) = self.daemon.as_mut().and_then(|d| d.pool.as_mut()) else {
            return Ok(());
        };
        match action {
            73..=74 => {
                if let Some(conn) = self.net.conn_of(index) {
                    self.trace
                        .push(format!("t={now} {name}'s connection breaks"));
                    self.net.break_conn(conn, now, &mut pool.events);
                }
            }
            75..=76 => {
                // What the node sends is held (the controller hears it
                // late, or the node loses its lease meanwhile); what the
                // controller sends still arrives.
                let until = now + self.rng.i64(60..=480);
                self.trace.push(format!(
                    "t={now} {name}'s link stalls to the controller until t={until}"
                ));
                self.net.stall(index, until);
            }
            77 => {
                self.net.starts += 1;
                self.trace.push(format!("t={now} {name}'s agent restarts"));
                self.net
                    .restart_agent(index, self.net.starts, now, &mut pool.events);
            }
            _ => {
                // The controller stalls (a stopped process, a stalled
                // disk): time passes, its nodes run on and send, and it
                // reads nothing until it runs again.
                let until = now + self.rng.i64(120..=360);
                self.trace
                    .push(format!("t={now} the controller stalls until t={until}"));
                // What is due now at the nodes (a fence, whose runs'
                // supervisors freeze them on time) happens now.
                self.pump();
                self.advance_to(until, None)?;
                self.pump();
            }
        }
        Ok(())
    }

    /// What a user or the world does this step.
    fn act(&mut self) -> Result<(), DaemonError> {
        let action = self.rng.u32(0..100);
        if action <= LAST_ACTION {
            self.acted.push(self.step);
        }
        if self.variant.skip.contains(&self.step) {
            return Ok(());
        }
        match action {
            0..=34 => self.submit(),
            35..=44 => self.control(|ids| Control::Cancel {
                selector: JobSelector {
                    job_ids: ids,
                    ..Default::default()
                },
                signal: None,
                to: crate::proto::SignalTo::Job,
            }),
            45..=49 => self.control(|job_ids| Control::Hold { job_ids }),
            50..=54 => self.control(|job_ids| Control::Release { job_ids }),
            55..=59 => self.control(|job_ids| Control::Requeue { job_ids }),
            60..=63 => self.crash(),
            64..=66 => self.control(|job_ids| Control::Suspend { job_ids }),
            67..=69 => self.control(|job_ids| Control::Resume { job_ids }),
            70..=72 => {
                let changes = self.shorter_limit();
                self.control(move |job_ids| Control::Update {
                    job_ids,
                    changes: changes.clone(),
                })
            }
            73..=79 if !self.net.agents.is_empty() => self.network_fault(action),
            _ => Ok(()),
        }
    }

    /// A user submits a job: 1-4 GPUs, a limit of 5 minutes to 2 hours,
    /// running by itself 1 minute to past its limit.
    fn submit(&mut self) -> Result<(), DaemonError> {
        let mut request = crate::model::job::example_request();
        request.gpus.count = self.rng.u32(1..=4);
        let limit = self.rng.u64(5..=120) * 60;
        request.time_limit = Some(Some(limit));
        request.account = Some(["vision", "speech"][self.rng.usize(0..2)].to_string());
        // Mostly work that may be stopped; now and then an urgent job.
        let qos = match self.rng.u32(0..10) {
            0 => "high",
            1..=4 => "medium",
            _ => "low",
        };
        request.qos = Some(qos.to_string());
        let runs_for = self.rng.i64(60..=(limit as i64 + 600));
        let (uid, user) = (nix::unistd::getuid().as_raw(), current_user());
        let now = self.now();
        let reply = self.daemon().submit(request, uid, &user, now)?;
        match reply {
            Reply::Submitted { job_id, .. } => {
                self.durations
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(job_id, runs_for);
                self.trace
                    .push(format!("t={now} submit job {job_id} ({runs_for} s)"));
                if self.commit_or_fail()? {
                    self.submitted.insert(job_id);
                }
            }
            other => self
                .trace
                .push(format!("t={now} submit refused: {other:?}")),
        }
        Ok(())
    }

    /// A change a user may make to their own job: a shorter time limit
    /// (what is left of it, or less), or a lower priority.
    fn shorter_limit(&mut self) -> crate::proto::JobUpdate {
        let mut changes = crate::proto::JobUpdate::default();
        if self.rng.bool() {
            changes.time_limit = Some(Some(self.rng.u64(1..=60) * 60));
        } else {
            changes.priority = Some(self.rng.i64(0..=10));
        }
        changes
    }

    /// A user acts on a job chosen among those submitted.
    fn control(
        &mut self,
        make: impl Fn(Vec<crate::array::JobRef>) -> Control,
    ) -> Result<(), DaemonError> {
        let ids: Vec<JobId> = self.submitted.iter().copied().collect();
        if ids.is_empty() {
            return Ok(());
        }
        let id = ids[self.rng.usize(0..ids.len())];
        let control = make(vec![crate::array::JobRef::Id(id)]);
        let (uid, user) = (nix::unistd::getuid().as_raw(), current_user());
        let now = self.now();
        let action = control.action();
        let reply = self
            .daemon()
            .control(control, (uid, &user), Proven::Kernel, now)?;
        let refused = match reply {
            Reply::Control { outcomes, .. } => outcomes.into_iter().find_map(|o| o.error),
            Reply::Rejected { error } => Some(error),
            _ => None,
        };
        let said = refused.map_or(String::new(), |e| format!(": {e}"));
        self.trace.push(format!("t={now} {action} job {id}{said}"));
        self.commit_or_fail()?;
        Ok(())
    }

    /// A user (root here) acts on every active job at once.
    fn control_all(
        &mut self,
        make: impl Fn(Vec<crate::array::JobRef>) -> Control,
    ) -> Result<(), DaemonError> {
        let ids: Vec<crate::array::JobRef> = self
            .daemon()
            .core
            .jobs
            .all()
            .map(|j| crate::array::JobRef::Id(j.id))
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        let (uid, user) = (nix::unistd::getuid().as_raw(), current_user());
        let now = self.now();
        self.daemon()
            .control(make(ids), (uid, &user), Proven::Kernel, now)?;
        self.daemon().commit()?;
        self.settle(false)
    }

    /// Commits the open turn, or (one time in twenty) makes its commit
    /// fail as a full disk would; whether it committed.
    fn commit_or_fail(&mut self) -> Result<bool, DaemonError> {
        if self.rng.u32(0..20) == 0 {
            self.counts.failed_commits += 1;
            self.trace.push("  its commit fails".into());
            let daemon = self.daemon();
            daemon.tx()?.execute_batch(
                "PRAGMA defer_foreign_keys = ON;
                 INSERT INTO job_events (job_id, time, state) VALUES (-1, 0, 'X');",
            )?;
            let failure = daemon
                .commit()
                .expect_err("a dangling key fails the commit");
            daemon.after_failed_commit_quietly(&failure)?;
            return Ok(false);
        }
        self.daemon().commit()?;
        Ok(true)
    }

    /// The controller dies (kill -9: what is in memory is gone) and
    /// starts again on the same database and nodes.
    fn crash(&mut self) -> Result<(), DaemonError> {
        self.counts.crashes += 1;
        self.trace
            .push(format!("t={} the controller crashes", self.now()));
        // An open transaction is lost with the process, and so are its
        // connections.
        self.daemon = None;
        let now = self.now();
        self.net.controller_died(now);
        let (queries, receiver) = mpsc::channel();
        self._queries = receiver;
        self.daemon = Some(self.start_controller(queries)?);
        Ok(())
    }

    /// Turns until nothing is left to do: exits taken in, time limits,
    /// the scheduling pass, launches (after each commit). Passes are
    /// spaced as over a long queue, by the seed: a pass may still be owed
    /// when the turns end, so that the jobs of the next steps start on
    /// what the last pass left idle, several on one spare.
    fn turns(&mut self, faults: bool) -> Result<(), DaemonError> {
        // A turn at least: the loop wakes for time limits and the like,
        // and time passed.
        let now = self.now();
        for turn in 0..32 {
            let exited = std::mem::take(&mut *self.exits.lock().unwrap_or_else(|p| p.into_inner()));
            let pass_due = self.rng.u32(0..3) > 0;
            let daemon = self.daemon.as_mut().expect("running");
            if turn > 0 && exited.is_empty() && !(daemon.reschedule && pass_due) {
                return Ok(());
            }
            if !exited.is_empty() {
                self.trace
                    .push(format!("  exits of jobs {exited:?} taken in"));
            }
            let fail = faults && self.rng.u32(0..40) == 0;
            let daemon = self.daemon.as_mut().expect("running");
            daemon.between.pace = super::pace::Pace::Told(pass_due);
            let quick_before = daemon.stats.quick_starts_total;
            let (mut maintenance, mut queries, mut processed) =
                (Instant::now(), Vec::new(), Vec::new());
            if fail {
                self.counts.failed_commits += 1;
                self.trace.push("  a turn's commit fails".into());
                daemon.tx()?.execute_batch(
                    "PRAGMA defer_foreign_keys = ON;
                     INSERT INTO job_events (job_id, time, state) VALUES (-1, 0, 'X');",
                )?;
            }
            match daemon.apply_turn(
                exited.clone(),
                &mut maintenance,
                &mut queries,
                &mut processed,
            ) {
                Ok(()) => {
                    self.counts.quick_starts += daemon.stats.quick_starts_total - quick_before;
                    for id in &daemon.turn.to_launch {
                        if let Some(job) = daemon.core.jobs.get(id) {
                            self.allocated.insert((*id, job.restart_count), now);
                            self.trace.push(format!(
                                "  job {id} ({}) starts on {} GPUs {:?}",
                                job.qos,
                                job.node.as_deref().unwrap_or("?"),
                                job.gpus_alloc
                            ));
                        }
                    }
                    for job in daemon.core.jobs.all().filter(|j| !j.claim.is_empty()) {
                        if job.state == crate::model::job::JobState::Pending {
                            self.trace.push(format!(
                                "  job {} ({}) claims GPUs {:?} of {}",
                                job.id,
                                job.qos,
                                job.claim,
                                job.node.as_deref().unwrap_or("?")
                            ));
                        }
                    }
                    daemon.launch_started()?
                }
                Err(e) if fail => {
                    daemon.after_failed_commit_quietly(&e)?;
                    self.exits
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .extend(exited);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// The user the simulation submits as: this process's.
/// Records the nodes whose agents connect over the network as joined,
/// with their certificates and facts, as `yscontrol node add` and their
/// joins would have.
fn record_pool(dir: &Path, net: &net::Network, now: i64) -> Result<(), DaemonError> {
    let spool = Spool::new(dir);
    spool.prepare(Ownership::Personal)?;
    let db = crate::db::open(&spool.database())?;
    for agent in &net.agents {
        let name = &agent.node.facts.name;
        let facts = serde_json::to_string(&agent.node.facts).map_err(crate::net::NetError::from)?;
        crate::db::expect_node(&db, name, "simulated", i64::MAX, "simulation", now)?;
        crate::db::node_joined(&db, name, agent.serial())?;
        crate::db::set_node_facts(&db, name, &facts)?;
    }
    Ok(())
}

fn current_user() -> String {
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map_or_else(|| "root".into(), |u| u.name)
}

impl Daemon {
    /// After a turn whose commit failed: the state back to what the
    /// database holds, nothing of the turn sent (the simulation's own
    /// way to the daemon's, without its pause).
    fn after_failed_commit_quietly(&mut self, failure: &DaemonError) -> Result<(), DaemonError> {
        // The simulation takes the turn's exits in again itself.
        self.roll_back_turn(failure, Vec::new())?;
        self.turn.replies.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A few hundred seeds of half an hour each, as `cargo test` runs
    /// them; `ysctld simulate --chaos` runs long ones.
    #[test]
    fn the_controller_keeps_its_invariants_under_faults() {
        let options = Options {
            first_seed: 1,
            seeds: 200,
            hours: 0.5,
            pool: false,
        };
        let report = run(&options).unwrap();
        assert!(report.failures.is_empty(), "{}", report.render());
        assert!(
            report.crashes > 0 && report.failed_commits > 0,
            "{}",
            report.render()
        );
        assert!(report.jobs > 1_000, "{}", report.render());
        assert!(report.quick_starts > 100, "{}", report.render());
    }

    /// Seeds that found the bugs (with the fixes undone), each as long
    /// as it took: 46, a job frozen by a suspension whose commit failed,
    /// charged as if it ran; 47, two urgent jobs kept the same GPUs
    /// (one of them started by the same pass), both started on them.
    #[test]
    fn the_seeds_that_found_bugs_keep_their_invariants() {
        for seed in [46, 47] {
            let options = Options {
                first_seed: seed,
                seeds: 1,
                hours: 2.0,
                pool: false,
            };
            let report = run(&options).unwrap();
            assert!(report.failures.is_empty(), "{}", report.render());
        }
    }

    /// Seeds of the pool's simulation that found bugs, each failing with
    /// its fix undone: 1, the last part of a fence's freeze (between the
    /// node's last report and the thaw) charged; 45, a lost node's runs
    /// charged until the controller gave up on it rather than until its
    /// lease ran out; 7, a run's end that a node reported in a turn whose
    /// commit failed never taken in again (its job COMPLETING for ever);
    /// 8, a suspended run reported frozen by its node's fence, its
    /// suspension credited twice; 151, a freeze of under a second left
    /// no trace in its job's history (so its charge was not known to be
    /// a second over, its wait credited a second short); 61, a freeze
    /// report read after its job was cancelled credited to its read, not
    /// to the stop (the job charged less than its run worked); 9 and 96,
    /// a controller restarted while a node it could not hear had frozen
    /// its runs credited the freeze only from its own last record; 85,
    /// a job suspended when its node was lost charged for its suspension;
    /// 35 (over 2 hours), a time limit reached on a run its node held
    /// frozen, on heartbeats sent before its lease ran out unanswered
    /// and read late; 26 and 27 (over 2 hours), a hello read late taken
    /// as the node's good standing when it was read, so the freeze
    /// reported next was credited nothing; 167 (over 2 hours), a resume
    /// that reached a node with no lease ran the job there, and a job
    /// resumed after its node froze it charged less the whole
    /// suspension; 80 and 134 (over 2 hours), a stop forgotten with a
    /// later turn's failed commit, so a freeze read after it was credited
    /// beyond the run's end; 68, 48 and 145 (over 2 hours), a run its
    /// node ended while frozen for its lost lease (cancelled; or its agent
    /// restarted, found the end, and forgot the freeze) was charged its
    /// freeze; 178 (over 2 hours), the simulation's own: a fence due the
    /// moment the controller stalled came late, so its run was frozen
    /// later than its lease ran out, as a node's supervisors never let
    /// it; 28, a fence's freeze a suspension took over before the
    /// controller heard of it charged; 105 (over 2 hours), a victim
    /// resumed as of its preemptor's end, read after a stall, charged the
    /// time it stood frozen since; 297 (over 2 hours), a resume lost
    /// with a broken connection, the job frozen and charged until its
    /// time limit; 303 (over 2 hours), a freeze report of a suspended
    /// job counted as credited though it was not, and taken off what the
    /// suspension took over. (A freeze credit lost with a
    /// failed commit, and a lost node's stale run left running, are unit
    /// tests:
    /// `pool_tests::a_freeze_reported_in_a_turn_whose_commit_fails_is_credited_after_all`,
    /// `a_run_a_heartbeat_lists_that_is_no_jobs_current_run_is_cleared`.)
    #[test]
    fn the_pool_seeds_that_found_bugs_keep_their_invariants() {
        for (seed, hours) in [
            (1, 0.5),
            (45, 0.5),
            (7, 0.5),
            (8, 0.5),
            (151, 0.5),
            (61, 0.5),
            (9, 0.5),
            (96, 0.5),
            (85, 0.5),
            (35, 2.0),
            (26, 2.0),
            (27, 2.0),
            (167, 2.0),
            (80, 2.0),
            (134, 2.0),
            (68, 2.0),
            (48, 2.0),
            (145, 2.0),
            (178, 2.0),
            (28, 0.5),
            (105, 2.0),
            (297, 2.0),
            (303, 2.0),
        ] {
            let options = Options {
                first_seed: seed,
                seeds: 1,
                hours,
                pool: true,
            };
            let report = run(&options).unwrap();
            assert!(report.failures.is_empty(), "{}", report.render());
        }
    }

    /// The seam's rule broken on purpose (what leaves sent before the
    /// commit) is found within a few seeds, and the failing trace shrunk
    /// to the few actions that break it: a suspension whose commit fails.
    #[test]
    fn a_command_sent_before_its_commit_is_found_and_its_trace_shrunk() {
        let breaking = |seed: u64| {
            move || -> Result<World, DaemonError> {
                let mut world = World::new(seed, false)?;
                world.variant.send_before_commit = true;
                world.daemon = Some(world.start_controller(mpsc::channel().0)?);
                Ok(world)
            }
        };
        let found = (1..=100).find_map(|seed| {
            let mut world = breaking(seed)().unwrap();
            let failure = world.run(7_200).err()?;
            Some((seed, failure, world.acted))
        });
        let (seed, failure, acted) = found.expect("the broken rule is found within 100 seeds");
        assert_eq!(failure.invariant, Invariant::ExactCharges, "{failure:?}");
        let shrunk = shrink(&breaking(seed), 7_200, &failure, &acted)
            .unwrap()
            .expect("it fails again: a seed replays");
        let trace = shrunk.trace.join("\n");
        assert!(shrunk.kept.len() <= 3, "{trace}");
        assert!(
            trace.contains("suspend job") && trace.contains("commit fails"),
            "{trace}"
        );
    }

    /// A charge taken twice on purpose is found at once: the first run
    /// charged makes its association's usage more than its jobs' charges.
    #[test]
    fn a_charge_taken_twice_is_found() {
        let mut world = World::new(1, false).unwrap();
        world.variant.charge_twice = true;
        world.daemon = Some(world.start_controller(mpsc::channel().0).unwrap());
        let failure = world.run(1_800).expect_err("a double charge is found");
        assert_eq!(
            failure.invariant,
            Invariant::UsageSumsCharges,
            "{failure:?}"
        );
        assert!(failure.detail.contains("has usage"), "{failure:?}");
    }

    #[test]
    fn a_seed_replays_its_run_exactly() {
        let once = |seed| {
            let mut world = World::new(seed, false).unwrap();
            world.run(1_800).unwrap();
            world.trace.clone()
        };
        assert_eq!(once(7), once(7));
        assert_ne!(once(7), once(8));
    }
}
