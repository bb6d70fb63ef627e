//! The daemon's state machine on a fake node with a clock the test moves:
//! one small workload (arrivals, a dependency, a preemption, a drain) run
//! through the daemon — admission, the turn's transaction, launches,
//! exits, requeue — and through the simulator gives the same starts at the
//! same times, because both carry out the same `sched::pass`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;

use crate::config::Config;
use crate::db;
use crate::exec::executor::{IsolationFacts, NodeFacts};
use crate::exec::fake::{FakeExecutor, FakeNode};
use crate::gpu::Inventory;
use crate::model::job::{GpuRequest, JobId, JobState};
use crate::proto::Reply;
use crate::sim::engine::{DrainAt, Sim};
use crate::sim::trace::TraceJob;
use crate::sim::Policy;
use crate::spool::{Ownership, Spool};

use super::notifications::Notifier;
use super::state::*;

const CONFIG: &str = "default_qos = \"medium\"\n\
    allow_root_jobs = true\n\
    gpu_sample_secs = 0\n\
    [[gpus]]\ntype = \"a100\"\ncount = 4\nmemory = \"80G\"\n\
    [[qos]]\nname = \"high\"\npriority = 300\npreempt = [\"low\"]\npreemptible = false\n\
    [[qos]]\nname = \"medium\"\npriority = 100\n\
    [[qos]]\nname = \"low\"\npriority = 0\n\
    [[accounts]]\nname = \"a\"\nshares = 1\nusers = [\"*\"]\n\
    [[accounts]]\nname = \"b\"\nshares = 1\nusers = [\"*\"]\n";

/// The daemon on a fake node, the clock it reads, and what it was told.
struct Harness {
    daemon: Daemon,
    fake: FakeNode,
    exits: Arc<Mutex<Vec<JobId>>>,
    clock: Arc<AtomicI64>,
    _queries: mpsc::Receiver<crate::query::Work>,
    _dir: tempfile::TempDir,
}

fn harness(config: &Config) -> Harness {
    harness_in(config, tempfile::tempdir().unwrap(), None)
}

/// A daemon on the spool in `dir`, on a new fake node or (after a
/// restart) on the one that `fake` holds.
fn harness_in(
    config: &Config,
    dir: tempfile::TempDir,
    fake: Option<(FakeNode, Arc<Mutex<Vec<JobId>>>)>,
) -> Harness {
    let spool = Spool::new(dir.path());
    spool.prepare(Ownership::Personal).unwrap();
    let db = db::open(&spool.database()).unwrap();
    let node = NodeFacts {
        name: config.node_name.clone(),
        inventory: Inventory::declared(config),
        cpus: 1_000,
        mem_mb: 1 << 30,
        tmp_mb: 100 << 10,
        containers: false,
        isolation: IsolationFacts {
            confined: true,
            can_suspend: true,
            ..Default::default()
        },
    };
    let (executor, fake, exits) = match fake {
        Some((fake, exits)) => (FakeExecutor::rejoin(node, &fake), fake, exits),
        None => {
            let exits: Arc<Mutex<Vec<JobId>>> = Arc::default();
            let heard = exits.clone();
            let (executor, fake) =
                FakeExecutor::new(node, move |id| heard.lock().unwrap().push(id));
            (executor, fake, exits)
        }
    };
    let clock = Arc::new(AtomicI64::new(0));
    let (queries, receiver) = mpsc::channel();
    let daemon = Daemon::assemble(Parts {
        config: config.clone(),
        spool,
        ownership: Ownership::Personal,
        nodes: super::nodes::Nodes::single(Box::new(executor)),
        pool: None,
        db,
        queries,
        gpu_watch: super::startup::watch_gpus(config),
        stats: super::startup::start_stats(config).unwrap(),
        notifier: Notifier::off(),
        clock: Clock::Manual(clock.clone()),
    });
    Harness {
        daemon,
        fake,
        exits,
        clock,
        _queries: receiver,
        _dir: dir,
    }
}

fn me() -> (u32, String) {
    let uid = nix::unistd::getuid();
    let user = nix::unistd::User::from_uid(uid).unwrap().unwrap();
    (uid.as_raw(), user.name)
}

/// A workload job: (submit, run, GPUs, account, QoS, dependency).
type Row = (
    i64,
    u64,
    u32,
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
);

fn workload() -> (Vec<Row>, Vec<DrainAt>) {
    let rows = vec![
        (0, 100, 2, "a", Some("low"), None),
        (0, 300, 2, "b", Some("low"), None),
        (10, 50, 1, "a", None, Some("afterok:1")),
        (20, 60, 2, "b", Some("high"), None),
        (40, 30, 1, "b", None, None),
        (45, 80, 2, "a", None, None),
    ];
    (rows, vec![DrainAt { time: 30, gpu: 3 }])
}

fn trace_of(rows: &[Row], user: &str) -> Vec<TraceJob> {
    rows.iter()
        .enumerate()
        .map(
            |(i, &(submit, run, gpus, account, qos, dependency))| TraceJob {
                line: i + 1,
                submit,
                run,
                gpus,
                time_limit: run * 2,
                user: user.to_string(),
                account: account.to_string(),
                qos: qos.map(str::to_string),
                dependency: dependency.map(str::to_string),
            },
        )
        .collect()
}

/// One turn as the event loop takes it, then the launches after the
/// commit; again while exits arrive or a pass asks for another.
fn settle(h: &mut Harness, started: &mut Vec<(i64, JobId)>, runs: &mut HashMap<JobId, usize>) {
    let now = h.clock.load(Ordering::SeqCst);
    for _ in 0..16 {
        let exited = std::mem::take(&mut *h.exits.lock().unwrap());
        if exited.is_empty() && !h.daemon.reschedule {
            return;
        }
        let (mut maintenance, mut queries, mut processed) =
            (Instant::now(), Vec::new(), Vec::new());
        h.daemon
            .apply_turn(exited, &mut maintenance, &mut queries, &mut processed)
            .unwrap();
        let before = h.fake.state().launched.len();
        h.daemon.launch_started().unwrap();
        for &id in &h.fake.state().launched[before..] {
            started.push((now, id));
            *runs.entry(id).or_default() += 1;
        }
    }
    panic!("the daemon did not settle at {now}");
}

/// Runs the workload through the daemon; the starts, in order.
fn through_the_daemon(
    config: &Config,
    rows: &[Row],
    drains: &[DrainAt],
    user: &str,
    uid: u32,
) -> Vec<(i64, JobId)> {
    let mut h = harness(config);
    let mut started = Vec::new();
    let mut runs: HashMap<JobId, usize> = HashMap::new();
    // When each run ends: (time, job) -> its run number.
    let mut ends: BTreeMap<(i64, JobId), usize> = BTreeMap::new();
    let mut next = 0;
    loop {
        let arrival = rows.get(next).map(|r| r.0);
        let last = h.clock.load(Ordering::SeqCst);
        let drain = drains.iter().map(|d| d.time).filter(|&t| t > last).min();
        let wake = h.daemon.core.policy.wake_at.filter(|&w| w > last);
        let end = ends.keys().next().map(|(t, _)| *t);
        let Some(now) = [arrival, end, drain, wake].into_iter().flatten().min() else {
            break;
        };
        h.clock.store(now, Ordering::SeqCst);
        while let Some((&(t, id), &run)) = ends.iter().next().filter(|((t, _), _)| *t == now) {
            ends.remove(&(t, id));
            if runs.get(&id) == Some(&run) {
                h.fake.end(id, 0, 0);
            }
        }
        for d in drains.iter().filter(|d| d.time == now) {
            let drain = crate::report::node::Drain {
                reason: "test".into(),
                by: "root".into(),
                since: now,
            };
            let node = h.daemon.core.config.node_name.clone();
            h.daemon.core.policy.drains.insert((node, d.gpu), drain);
            h.daemon.reschedule = true;
        }
        while let Some(&(submit, run, gpus, account, qos, dependency)) =
            rows.get(next).filter(|r| r.0 == now)
        {
            next += 1;
            let mut request = crate::model::job::example_request();
            request.gpus = GpuRequest {
                count: gpus,
                ..GpuRequest::default()
            };
            request.account = Some(account.into());
            request.qos = qos.map(str::to_string);
            request.dependency = dependency.map(str::to_string);
            request.time_limit = Some(Some(run * 2));
            let reply = h.daemon.submit(request, uid, user, submit).unwrap();
            assert!(matches!(reply, Reply::Submitted { .. }), "{reply:?}");
        }
        let before = started.len();
        settle(&mut h, &mut started, &mut runs);
        for &(_, id) in &started[before..] {
            ends.insert((now + rows[id as usize - 1].1 as i64, id), runs[&id]);
        }
    }
    let states: Vec<JobState> = h.daemon.core.jobs.all().map(|j| j.state).collect();
    assert!(states.is_empty(), "every job ended: {states:?}");
    started
}

#[test]
fn the_daemon_and_the_simulator_start_the_same_jobs_at_the_same_times() {
    let (uid, user) = me();
    let config = Config::parse(CONFIG, Path::new("replay.toml")).unwrap();
    let (rows, drains) = workload();
    let daemon = through_the_daemon(&config, &rows, &drains, &user, uid);

    let trace = trace_of(&rows, &user);
    let (outcome, simulated) = Sim::new(&config, &trace, Policy::Ysched, drains.clone()).run();
    assert_eq!(
        daemon, simulated,
        "daemon's starts (time, job) vs the simulator's"
    );

    // The workload did what it is for.
    assert!(
        outcome.counts.preempted >= 1,
        "a preemption happened: {:?}",
        outcome.counts
    );
    let first = |id: JobId| simulated.iter().find(|(_, j)| *j == id).map(|(t, _)| *t);
    assert!(
        first(3) >= Some(100),
        "job 3 waited for job 1 to end (afterok): {simulated:?}"
    );
    assert_eq!(
        first(4),
        Some(20),
        "the high job preempted at once: {simulated:?}"
    );
    let restarted = simulated.iter().filter(|(_, j)| *j == 1 || *j == 2).count();
    assert_eq!(
        restarted, 3,
        "one low job was requeued and ran again: {simulated:?}"
    );
    let after_drain: Vec<_> = outcome
        .done
        .iter()
        .filter(|j| j.start_time.is_some_and(|s| s >= 30) && j.gpus_alloc.contains(&3))
        .map(|j| j.id)
        .collect();
    assert!(
        after_drain.is_empty(),
        "no job started on drained GPU 3: {after_drain:?}"
    );
}

fn submit(h: &mut Harness, gpus: u32, limit: u64) -> JobId {
    let (uid, user) = me();
    let mut request = crate::model::job::example_request();
    request.gpus = GpuRequest {
        count: gpus,
        ..GpuRequest::default()
    };
    request.account = Some("a".into());
    request.time_limit = Some(Some(limit));
    let now = h.clock.load(Ordering::SeqCst);
    match h.daemon.submit(request, uid, &user, now).unwrap() {
        Reply::Submitted { job_id, .. } => job_id,
        other => panic!("{other:?}"),
    }
}

fn stored_state(h: &Harness, id: JobId) -> Option<JobState> {
    db::job_state(&h.daemon.store.db, id).unwrap()
}

#[test]
fn a_restarted_daemon_readopts_what_runs_accounts_what_ended_and_times_out_the_rest() {
    let config = Config::parse(CONFIG, Path::new("replay.toml")).unwrap();
    let mut h = harness(&config);
    let (mut started, mut runs) = (Vec::new(), HashMap::new());
    let long = submit(&mut h, 2, 100);
    let short = submit(&mut h, 1, 100);
    settle(&mut h, &mut started, &mut runs);
    assert_eq!(started, vec![(0, long), (0, short)]);
    assert_eq!(stored_state(&h, long), Some(JobState::Running));

    // The daemon dies; while it is away the short job ends.
    let Harness {
        daemon,
        fake,
        exits,
        clock,
        _queries,
        _dir,
    } = h;
    drop(daemon);
    clock.store(40, Ordering::SeqCst);
    fake.end(short, 0, 0);
    exits.lock().unwrap().clear();

    let mut h = harness_in(&config, _dir, Some((fake, exits)));
    h.clock.store(40, Ordering::SeqCst);
    h.daemon.recover().unwrap();
    assert_eq!(
        stored_state(&h, short),
        Some(JobState::Completed),
        "the end it missed is accounted"
    );
    assert_eq!(
        stored_state(&h, long),
        Some(JobState::Running),
        "the job that runs is readopted"
    );
    assert_eq!(
        h.fake.state().launched,
        vec![long, short],
        "nothing was started twice"
    );

    // At its time limit it is stopped and ends TIMEOUT.
    h.clock.store(100, Ordering::SeqCst);
    h.daemon.reschedule = true;
    settle(&mut h, &mut started, &mut runs);
    assert_eq!(stored_state(&h, long), Some(JobState::Timeout));
    assert!(h.daemon.core.jobs.all().next().is_none());
}

/// Passes spaced as over a long queue: a job queued between them that
/// fits what the last pass left idle starts in the turn that queues it;
/// one that does not fit, or waits on a dependency, waits for the pass.
#[test]
fn between_passes_a_job_that_fits_starts_at_once_and_the_rest_wait_for_the_pass() {
    use super::pace::Pace;
    let config = Config::parse(CONFIG, Path::new("replay.toml")).unwrap();
    let mut h = harness(&config);
    // Passes as told: what each leaves is kept for the jobs queued after.
    h.daemon.between.pace = Pace::Told(true);
    let (mut started, mut runs) = (Vec::new(), HashMap::new());
    let first = submit(&mut h, 2, 100);
    settle(&mut h, &mut started, &mut runs);
    assert_eq!(started, vec![(0, first)]);

    h.daemon.between.pace = Pace::Told(false);
    h.clock.store(10, Ordering::SeqCst);
    let fits = submit(&mut h, 1, 50);
    let after = {
        let (uid, user) = me();
        let mut request = crate::model::job::example_request();
        request.gpus.count = 1;
        request.account = Some("a".into());
        request.dependency = Some(format!("afterok:{first}"));
        match h.daemon.submit(request, uid, &user, 10).unwrap() {
            Reply::Submitted { job_id, .. } => job_id,
            other => panic!("{other:?}"),
        }
    };
    let too_big = submit(&mut h, 2, 50);
    let (mut maintenance, mut queries, mut processed) = (Instant::now(), Vec::new(), Vec::new());
    h.daemon
        .apply_turn(Vec::new(), &mut maintenance, &mut queries, &mut processed)
        .unwrap();
    h.daemon.launch_started().unwrap();
    assert_eq!(h.fake.state().launched, vec![first, fits]);
    assert_eq!(stored_state(&h, fits), Some(JobState::Running));
    assert_eq!(h.daemon.stats.quick_starts_total, 1);
    assert!(h.daemon.reschedule, "the pass is still due");
    for waiting in [after, too_big] {
        assert_eq!(stored_state(&h, waiting), Some(JobState::Pending));
    }

    // The first job ends; its GPUs go to the next pass, not to a job
    // queued before it.
    h.fake.end(first, 0, 0);
    h.clock.store(20, Ordering::SeqCst);
    let (mut maintenance, mut queries, mut processed) = (Instant::now(), Vec::new(), Vec::new());
    let exited = std::mem::take(&mut *h.exits.lock().unwrap());
    h.daemon
        .apply_turn(exited, &mut maintenance, &mut queries, &mut processed)
        .unwrap();
    let late = submit(&mut h, 2, 50);
    h.daemon
        .apply_turn(Vec::new(), &mut maintenance, &mut queries, &mut processed)
        .unwrap();
    assert_eq!(stored_state(&h, late), Some(JobState::Pending));
    h.daemon.between.pace = Pace::Told(true);
    settle(&mut h, &mut started, &mut runs);
    for ran in [after, too_big] {
        assert_eq!(stored_state(&h, ran), Some(JobState::Running), "job {ran}");
    }
    assert_eq!(stored_state(&h, late), Some(JobState::Pending));
}
