//! The daemon over a pool of fake nodes: one pass places each job on one
//! node (its GPUs, CPUs and memory there), `--nodelist` and `--exclude`
//! choose nodes, a drained node takes nothing new, each launch and exit
//! goes through the job's own node, and the records and views say where
//! each job ran.

use std::path::Path;
use std::sync::atomic::AtomicI64;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;

use crate::config::Config;
use crate::db;
use crate::exec::executor::{IsolationFacts, NodeFacts};
use crate::exec::fake::{FakeExecutor, FakeNode};
use crate::gpu::Inventory;
use crate::model::job::{GpuRequest, JobId, JobRequest, JobState};
use crate::proto::{Control, Reply};
use crate::spool::{Ownership, Spool};

use super::error::Refusal;
use super::nodes::{Node, Nodes};
use super::notifications::Notifier;
use super::state::*;

const CONFIG: &str = "node_name = \"gpu01\"\n\
    allow_root_jobs = true\n\
    gpu_sample_secs = 0\n\
    admins = [\"*\"]\n\
    [[gpus]]\ntype = \"a100\"\ncount = 4\nmemory = \"80G\"\n\
    [[accounts]]\nname = \"a\"\nshares = 1\nusers = [\"*\"]\n";

struct Pool {
    daemon: Daemon,
    nodes: Vec<FakeNode>,
    exits: Arc<Mutex<Vec<JobId>>>,
    _queries: mpsc::Receiver<crate::query::Work>,
    _dir: tempfile::TempDir,
}

/// A daemon over fake nodes named gpu01, gpu02…, each with 4 A100s and
/// `cpus[i]` CPUs.
fn pool(cpus: &[u32]) -> Pool {
    pool_with(CONFIG, cpus)
}

/// The same, under the config `text`.
fn pool_with(text: &str, cpus: &[u32]) -> Pool {
    let config = Config::parse(text, Path::new("pool.toml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::new(dir.path());
    spool.prepare(Ownership::Personal).unwrap();
    let exits: Arc<Mutex<Vec<JobId>>> = Arc::default();
    let (mut members, mut fakes) = (Vec::new(), Vec::new());
    for (i, &n) in cpus.iter().enumerate() {
        let facts = NodeFacts {
            name: format!("gpu{:02}", i + 1),
            inventory: Inventory::declared(&config),
            cpus: n,
            mem_mb: 1 << 20,
            tmp_mb: 100 << 10,
            containers: false,
            isolation: IsolationFacts {
                confined: true,
                can_suspend: true,
                ..Default::default()
            },
        };
        let heard = exits.clone();
        let (executor, fake) = FakeExecutor::new(facts, move |id| heard.lock().unwrap().push(id));
        members.push(Node::new(Box::new(executor)));
        fakes.push(fake);
    }
    let (queries, receiver) = mpsc::channel();
    let mut daemon = Daemon::assemble(Parts {
        config: config.clone(),
        db: db::open(&spool.database()).unwrap(),
        spool,
        ownership: Ownership::Personal,
        nodes: Nodes::new(members),
        pool: None,
        queries,
        gpu_watch: super::startup::watch_gpus(&config),
        stats: super::startup::start_stats(&config).unwrap(),
        notifier: Notifier::off(),
        clock: Clock::Manual(Arc::new(AtomicI64::new(0))),
    });
    daemon.recover().unwrap();
    Pool {
        daemon,
        nodes: fakes,
        exits,
        _queries: receiver,
        _dir: dir,
    }
}

fn me() -> (u32, String) {
    let uid = nix::unistd::getuid();
    let user = nix::unistd::User::from_uid(uid).unwrap().unwrap();
    (uid.as_raw(), user.name)
}

fn request(gpus: u32) -> JobRequest {
    let mut request = crate::model::job::example_request();
    request.gpus = GpuRequest {
        count: gpus,
        ..GpuRequest::default()
    };
    request.account = Some("a".into());
    request
}

impl Pool {
    fn submit(&mut self, request: JobRequest) -> Result<JobId, Refusal> {
        let (uid, user) = me();
        match self.daemon.submit(request, uid, &user, 0).unwrap() {
            Reply::Submitted { job_id, .. } => Ok(job_id),
            Reply::Rejected { error } => Err(Refusal(error)),
            other => panic!("{other:?}"),
        }
    }

    /// Turns until nothing is left to do, launching after each.
    fn settle(&mut self) {
        for _ in 0..16 {
            let exited = std::mem::take(&mut *self.exits.lock().unwrap());
            if exited.is_empty() && !self.daemon.reschedule {
                return;
            }
            let (mut maintenance, mut queries, mut processed) =
                (Instant::now(), Vec::new(), Vec::new());
            self.daemon
                .apply_turn(exited, &mut maintenance, &mut queries, &mut processed)
                .unwrap();
            self.daemon.launch_started().unwrap();
        }
        panic!("the daemon did not settle");
    }

    /// Where job `id` runs: its node and GPUs, as recorded.
    fn placed(&self, id: JobId) -> (Option<String>, Vec<u32>, JobState) {
        let job = db::job(&self.daemon.store.db, id).unwrap();
        (job.node, job.gpus_alloc, job.state)
    }

    fn control(&mut self, control: Control) -> Reply {
        let (uid, user) = me();
        let reply = self
            .daemon
            .control(control, (uid, &user), super::requester::Proven::Kernel, 0)
            .unwrap();
        self.daemon.commit().unwrap();
        reply
    }
}

#[test]
fn jobs_spread_over_the_nodes_each_on_its_own_node_numbers() {
    let mut p = pool(&[16, 16]);
    let ids: Vec<JobId> = (0..3).map(|_| p.submit(request(3)).unwrap()).collect();
    p.settle();
    assert_eq!(
        p.placed(ids[0]),
        (Some("gpu01".into()), vec![0, 1, 2], JobState::Running)
    );
    assert_eq!(
        p.placed(ids[1]),
        (Some("gpu02".into()), vec![0, 1, 2], JobState::Running),
        "the second node, numbered as it numbers its GPUs"
    );
    assert_eq!(
        p.placed(ids[2]).2,
        JobState::Pending,
        "3 GPUs fit on no node"
    );
    assert_eq!(p.nodes[0].state().launched, vec![ids[0]]);
    assert_eq!(p.nodes[1].state().launched, vec![ids[1]]);

    // The job on gpu02 ends there: the third starts in its place.
    assert!(p.nodes[1].end(ids[1], 0, 0));
    p.settle();
    assert_eq!(p.placed(ids[1]).2, JobState::Completed);
    assert_eq!(
        p.placed(ids[2]),
        (Some("gpu02".into()), vec![0, 1, 2], JobState::Running)
    );
    assert_eq!(p.nodes[1].state().launched, vec![ids[1], ids[2]]);

    // A cancel reaches the job on its node only.
    let (uid, user) = me();
    let cancel = Control::Cancel {
        selector: crate::proto::JobSelector {
            job_ids: vec![crate::array::JobRef::Id(ids[2])],
            ..Default::default()
        },
        signal: None,
        to: crate::proto::SignalTo::Job,
    };
    p.daemon
        .control(cancel, (uid, &user), super::requester::Proven::Kernel, 0)
        .unwrap();
    // Nothing leaves before the commit.
    assert!(p.nodes.iter().all(|n| n.state().commands.is_empty()));
    p.daemon.commit().unwrap();
    assert!(p.nodes[0].state().commands.is_empty());
    assert_eq!(p.nodes[1].state().commands.len(), 1);
}

/// A turn whose commit fails (a full disk, say) sends nothing: no stop
/// reaches the job, and the job runs on as the database has it.
#[test]
fn a_cancel_whose_commit_fails_sends_nothing_and_changes_nothing() {
    let mut p = pool(&[16]);
    let id = p.submit(request(1)).unwrap();
    p.settle();
    assert_eq!(p.placed(id).2, JobState::Running);
    let (uid, user) = me();
    let cancel = Control::Cancel {
        selector: crate::proto::JobSelector {
            job_ids: vec![crate::array::JobRef::Id(id)],
            ..Default::default()
        },
        signal: None,
        to: crate::proto::SignalTo::Job,
    };
    p.daemon
        .control(cancel, (uid, &user), super::requester::Proven::Kernel, 0)
        .unwrap();
    fail_the_commit(&mut p);
    assert!(p.nodes[0].state().commands.is_empty(), "no stop left");
    assert_eq!(p.placed(id).2, JobState::Running);
    assert_eq!(p.daemon.core.jobs[&id].state, JobState::Running);
}

/// Makes the turn's commit fail (a row it refuses), and the daemon carry
/// on as after a full disk.
/// Makes the open turn's commit fail: a deferred foreign key that holds
/// nothing.
fn poison_the_commit(p: &mut Pool) {
    p.daemon
        .tx()
        .unwrap()
        .execute_batch(
            "PRAGMA defer_foreign_keys = ON;
             INSERT INTO job_events (job_id, time, state) VALUES (999999, 0, 'X');",
        )
        .unwrap();
}

/// One turn of the daemon, exits aside.
fn turn(p: &mut Pool) -> Result<(), super::error::DaemonError> {
    let (mut maintenance, mut queries, mut processed) = (Instant::now(), Vec::new(), Vec::new());
    p.daemon
        .apply_turn(Vec::new(), &mut maintenance, &mut queries, &mut processed)
}

fn fail_the_commit(p: &mut Pool) {
    poison_the_commit(p);
    let failure = p.daemon.commit().unwrap_err();
    assert!(failure.to_string().contains("FOREIGN KEY"), "{failure}");
    p.daemon.after_failed_commit(&failure, Vec::new()).unwrap();
}

/// Found by the simulation (seed 28): a suspension froze the job before
/// its record was committed; when the commit failed, the job stayed
/// frozen while its record said it ran, and was charged for the time.
#[test]
fn a_suspension_whose_commit_fails_freezes_nothing() {
    let mut p = pool(&[16]);
    let id = p.submit(request(1)).unwrap();
    p.settle();
    let suspend = || Control::Suspend {
        job_ids: vec![crate::array::JobRef::Id(id)],
    };
    let (uid, user) = me();
    p.daemon
        .control(suspend(), (uid, &user), super::requester::Proven::Kernel, 0)
        .unwrap();
    fail_the_commit(&mut p);
    assert!(
        p.nodes[0].state().frozen.is_empty(),
        "frozen before its commit"
    );
    assert_eq!(p.daemon.core.jobs[&id].state, JobState::Running);
    p.control(suspend());
    assert!(p.nodes[0].state().frozen.contains(&id));
    assert_eq!(p.daemon.core.jobs[&id].state, JobState::Suspended);
}

/// Found while moving drains through the seam: a node's drain whose
/// commit failed stayed on the node in memory (the pass kept jobs off
/// it, while the records said it was in service).
#[test]
fn a_drain_whose_commit_fails_leaves_the_node_in_service() {
    let mut p = pool(&[16, 16]);
    let drain = || Control::NodeDrain {
        node: "gpu01".into(),
        reason: "new fans".into(),
    };
    let (uid, user) = me();
    p.daemon
        .control(drain(), (uid, &user), super::requester::Proven::Kernel, 0)
        .unwrap();
    assert!(p.daemon.nodes.named("gpu01").unwrap().drain.is_some());
    fail_the_commit(&mut p);
    assert!(
        p.daemon.nodes.named("gpu01").unwrap().drain.is_none(),
        "a drain left with its failed turn"
    );
    p.control(drain());
    assert!(p.daemon.nodes.named("gpu01").unwrap().drain.is_some());
}

#[test]
fn a_frame_to_a_node_leaves_only_once_its_turn_is_committed() {
    let mut p = pool(&[16]);
    let id = p.submit(request(1)).unwrap();
    p.settle();
    let (server, recorder) = crate::net::server::Recorder::new().unwrap();
    let link = crate::net::remote::Link::default();
    link.state().conn = Some((server, 1));
    p.daemon.nodes.change("gpu01", |node| {
        node.remote = Some(super::nodes::RemoteNode {
            link: link.clone(),
            last_heard: std::time::Instant::now(),
            lease_from: 0,
            lost: false,
            heard_since_away: true,
            lapsed_at: None,
        })
    });
    // The node reports a run of the job that is not its current one:
    // forgotten there, once that is recorded.
    let stale = crate::net::message::RunKey {
        job: id,
        restart: 7,
    };
    p.daemon.settle_run("gpu01", &link, stale, &mut Vec::new());
    fail_the_commit(&mut p);
    assert!(recorder.frames().is_empty(), "nothing leaves a failed turn");
    p.daemon.settle_run("gpu01", &link, stale, &mut Vec::new());
    assert!(
        recorder.frames().is_empty(),
        "nothing leaves before the commit"
    );
    p.daemon.commit().unwrap();
    let sent = recorder.frames();
    assert_eq!(sent.len(), 1);
    let body = String::from_utf8_lossy(&sent[0]);
    assert!(body.contains("Forget"), "{body}");
}

#[test]
fn nodelist_exclude_and_a_drained_node_choose_where_jobs_go() {
    let mut p = pool(&[16, 16, 16]);
    let mut pinned = request(1);
    pinned.nodelist = vec!["gpu03".into()];
    let mut avoiding = request(4);
    avoiding.exclude = vec!["gpu01".into()];
    let pinned = p.submit(pinned).unwrap();
    let avoiding = p.submit(avoiding).unwrap();
    p.settle();
    assert_eq!(p.placed(pinned).0.as_deref(), Some("gpu03"));
    assert_eq!(p.placed(avoiding).0.as_deref(), Some("gpu02"));

    let mut unknown = request(1);
    unknown.nodelist = vec!["gpu09".into()];
    assert_eq!(
        p.submit(unknown).unwrap_err().0,
        "unknown node 'gpu09' (nodes: gpu01, gpu02, gpu03)"
    );

    // gpu01 drained: a 4-GPU job fits nowhere else and waits.
    let drained = p.control(Control::NodeDrain {
        node: "gpu01".into(),
        reason: "new fans".into(),
    });
    assert!(
        matches!(&drained, Reply::Control { message: Some(m), .. } if m == "node gpu01 drained: new fans"),
        "{drained:?}"
    );
    let waits = p.submit(request(4)).unwrap();
    p.settle();
    assert_eq!(p.placed(waits).2, JobState::Pending);
    let snapshot = p.daemon.snapshot().get();
    let states: Vec<(&str, &str)> = snapshot
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n.state.as_str()))
        .collect();
    assert_eq!(
        states,
        vec![("gpu01", "drain"), ("gpu02", "alloc"), ("gpu03", "mix")]
    );
    p.control(Control::NodeResume {
        node: "gpu01".into(),
    });
    p.settle();
    assert_eq!(
        p.placed(waits),
        (Some("gpu01".into()), vec![0, 1, 2, 3], JobState::Running)
    );
    assert!(
        db::node_drains(&p.daemon.store.db).unwrap().is_empty(),
        "the drain's end is recorded"
    );
}

#[test]
fn a_job_too_big_for_every_node_is_refused_with_what_each_lacks() {
    let mut p = pool(&[4, 8]);
    let mut wide = request(1);
    wide.cpus = 12;
    let error = p.submit(wide).unwrap_err().0;
    assert_eq!(
        error,
        "no node can run it: gpu01: 12 CPUs requested but this server offers 4; \
         gpu02: 12 CPUs requested but this server offers 8"
    );
    let mut fits = request(1);
    fits.cpus = 8;
    let id = p.submit(fits).unwrap();
    p.settle();
    assert_eq!(p.placed(id).0.as_deref(), Some("gpu02"));
}

#[test]
fn a_job_whose_processes_outlive_sigkill_drains_its_node() {
    let mut p = pool(&[16, 16]);
    let id = p.submit(request(1)).unwrap();
    p.settle();
    let (node, _, _) = p.placed(id);
    let node = node.unwrap();
    let slot = if node == "gpu01" { 0 } else { 1 };
    assert!(p.nodes[slot].end_stuck(id, 2));
    p.settle();
    let drains = db::node_drains(&p.daemon.store.db).unwrap();
    let drain = drains.get(&node).expect("the node is drained");
    assert_eq!(
        drain.reason,
        format!("job {id} left 2 process(es) SIGKILL does not end")
    );
    // Nothing new starts there.
    let next = p.submit(request(4)).unwrap();
    p.settle();
    let other = if slot == 0 { "gpu02" } else { "gpu01" };
    assert_eq!(p.placed(next).0.as_deref(), Some(other));
}

fn usage(p: &Pool, id: JobId) -> crate::model::gpu::JobGpuUsage {
    db::job(&p.daemon.store.db, id).unwrap().gpu_usage
}

#[test]
fn a_nodes_gpu_readings_are_charged_to_its_own_jobs_only() {
    use crate::gpu::sampling::{GpuProcess, ProcessOwner, Reading};
    use crate::model::gpu::Sample;
    let mut p = pool(&[16, 16]);
    let mut on = |node: &str| {
        let mut r = request(2);
        r.nodelist = vec![node.into()];
        p.submit(r).unwrap()
    };
    let (here, there) = (on("gpu01"), on("gpu02"));
    p.settle();
    let sample = |gpu, pct| Sample {
        gpu,
        utilization_pct: pct,
        memory_used_mb: 1_000,
    };
    // gpu02's GPUs 0 and 1 (its job's), and a GPU 9 it does not have.
    let reading = Reading {
        samples: vec![sample(0, 90), sample(1, 70), sample(9, 100)],
        processes: Some(vec![GpuProcess {
            gpu: 1,
            pid: 4242,
            owner: ProcessOwner {
                cgroup: "0::/user.slice/session-1.scope\n".into(),
                uid: 0,
            },
        }]),
    };
    p.daemon.take_reading("gpu02", reading, 30).unwrap();
    p.daemon.commit().unwrap();

    assert_eq!(usage(&p, there).samples, 1);
    assert_eq!(usage(&p, there).mean(), Some(80.0));
    assert_eq!(
        usage(&p, here).samples,
        0,
        "gpu01's job shares GPU numbers, not GPUs"
    );
    // The hour's history in pool numbers: gpu02's GPUs follow gpu01's 4.
    let hours = db::gpu_hours(&p.daemon.store.db, 0, 3_600).unwrap();
    let gpus: Vec<u32> = hours.iter().map(|h| h.gpu).collect();
    assert_eq!(gpus, vec![4, 5], "GPU 9 of gpu02 does not exist: dropped");
    // Processes not the holder's are named once, with their node.
    assert!(p
        .daemon
        .gpu_watch
        .intruders_seen
        .contains(&("gpu02".to_string(), 1, 4242)));
    // The node's view shows its GPUs' utilisation; gpu01's has none.
    let snapshot = p.daemon.snapshot().get();
    let utilization = |node: usize| -> Vec<Option<u32>> {
        let gpus = &snapshot.nodes[node].gpus;
        gpus.iter().map(|g| g.utilization_pct).collect()
    };
    assert_eq!(utilization(1), vec![Some(90), Some(70), None, None]);
    assert_eq!(utilization(0), vec![None; 4]);
    // A node's reading about a node not in the pool changes nothing.
    let stranger = Reading {
        samples: vec![sample(0, 5)],
        processes: None,
    };
    p.daemon.take_reading("gpu09", stranger, 30).unwrap();
    assert_eq!(usage(&p, there).samples, 1);
}

#[test]
fn a_lender_takes_its_guarantee_back_on_one_node_when_borrowers_are_spread() {
    let config = "node_name = \"gpu01\"\nallow_root_jobs = true\ngpu_sample_secs = 0\n\
        [[gpus]]\ntype = \"a100\"\ncount = 4\nmemory = \"80G\"\n\
        [[accounts]]\nname = \"a\"\nusers = [\"*\"]\nmax_gpus = 4\nborrow_limit = 4\n\
        [[accounts]]\nname = \"b\"\nusers = [\"*\"]\nmax_gpus = 4\n";
    let mut p = pool_with(config, &[16, 16]);
    // a: 1-4 on gpu01, 5-6 on gpu02; 3 ends; 7 takes its place on gpu01.
    let mut a: Vec<JobId> = (0..6).map(|_| p.submit(request(1)).unwrap()).collect();
    p.settle();
    assert!(p.nodes[0].end(a[2], 0, 0));
    p.settle();
    a.push(p.submit(request(1)).unwrap());
    p.settle();
    assert_eq!(p.placed(a[6]).0.as_deref(), Some("gpu01"));
    // a holds 6 of its 4 + 4: the last two started borrow, one per node.
    let marked: Vec<JobId> = a
        .iter()
        .copied()
        .filter(|id| db::job(&p.daemon.store.db, *id).unwrap().borrowed)
        .collect();
    assert_eq!(marked, vec![a[5], a[6]]);
    // b wants 4 GPUs on one node: the borrowers alone free 3 on gpu02;
    // two of a's jobs on gpu02 (a's 2 beyond its guarantee) free 4.
    let mut within = request(4);
    within.account = Some("b".into());
    let b = p.submit(within).unwrap();
    p.settle();
    assert_eq!(
        p.placed(b),
        (Some("gpu02".into()), vec![0, 1, 2, 3], JobState::Running)
    );
    let requeued: Vec<JobId> = a
        .iter()
        .copied()
        .filter(|id| p.placed(*id).2 == JobState::Pending)
        .collect();
    assert_eq!(requeued, vec![a[4], a[5]], "a keeps its guarantee of 4");
    let audit = db::audit_tail(&p.daemon.store.db, 10).unwrap();
    assert!(audit.iter().any(|r| r.action == "reclaim"), "{audit:?}");
}

/// A request for `per_node` GPUs on each of `nodes` nodes.
fn over_nodes(nodes: u32, per_node: u32) -> JobRequest {
    let mut r = request(per_node);
    r.tasks.nodes_min = nodes;
    r.tasks.nodes_max = nodes;
    r
}

#[test]
fn a_job_over_three_nodes_holds_all_and_ends_once_every_part_has() {
    // Its rerun after a quick NODE_FAIL at once (`sched::requeue` has the
    // backoff's own tests).
    let mut p = pool_with(&format!("requeue_delay = 0\n{CONFIG}"), &[16, 16, 16]);
    let id = p.submit(over_nodes(3, 2)).unwrap();
    p.settle();
    let job = db::job(&p.daemon.store.db, id).unwrap();
    assert_eq!(job.state, JobState::Running);
    assert_eq!(job.nodelist(), "gpu[01-03]");
    assert_eq!(job.gpus_alloc, vec![0, 1, 0, 1, 0, 1]);
    for (i, node) in p.nodes.iter().enumerate() {
        let state = node.state();
        assert_eq!(state.running.get(&id), Some(&vec![0, 1]), "node {i}");
        let (script, part) = &state.parts[&id];
        assert_eq!(part.index as usize, i);
        assert_eq!(part.tasks_per_node, vec![1, 1, 1]);
        assert_eq!(i > 0, script == super::peers::HOLDER_SCRIPT, "node {i}");
    }
    // A 2-GPU job still fits beside it; 2 × 3 more do not.
    let beside = p.submit(request(2)).unwrap();
    let waits = p.submit(over_nodes(3, 2)).unwrap();
    p.settle();
    assert_eq!(p.placed(beside).2, JobState::Running);
    assert_eq!(p.placed(waits).2, JobState::Pending);

    // Suspended and resumed on every node.
    let ids = vec![crate::array::JobRef::Id(id)];
    p.control(Control::Suspend {
        job_ids: ids.clone(),
    });
    assert!(p.nodes.iter().all(|n| n.state().frozen.contains(&id)));
    p.control(Control::Resume { job_ids: ids });
    assert!(p.nodes.iter().all(|n| n.state().frozen.is_empty()));

    // The batch script ends: the other parts stop at once, the job keeps
    // its GPUs until they have, then completes.
    assert!(p.nodes[0].end(id, 0, 0));
    p.settle();
    assert_eq!(p.placed(id).2, JobState::Completed);
    for node in &p.nodes[1..] {
        let state = node.state();
        assert!(
            state.commands.iter().any(|(j, c)| *j == id
                && matches!(
                    c,
                    crate::exec::spec::StepCommand::Terminate { grace_secs: 0, .. }
                )),
            "{:?}",
            state.commands
        );
        assert!(!state.running.contains_key(&id));
    }
    assert_eq!(p.placed(waits).2, JobState::Running);

    // A part that ends before the batch script ends the whole job
    // NODE_FAIL, and it runs again.
    assert!(p.nodes[1].end(waits, 1, 0));
    p.settle();
    let job = db::job(&p.daemon.store.db, waits).unwrap();
    assert!(p
        .nodes
        .iter()
        .all(|n| n.state().launched.iter().filter(|&&j| j == waits).count() == 2));
    assert_eq!(job.restart_count, 1, "{job:?}");
    assert_eq!(job.state, JobState::Running);
}

#[test]
fn a_job_over_more_nodes_than_the_pool_has_is_refused_with_its_size() {
    let mut p = pool(&[16, 16]);
    assert_eq!(
        p.submit(over_nodes(3, 1)).unwrap_err().0,
        "--nodes=3: the pool has 2 node(s) (gpu[01-02])"
    );
    let mut wide = over_nodes(2, 1);
    wide.cpus = 12;
    let mut p = pool(&[16, 8]);
    assert_eq!(
        p.submit(wide).unwrap_err().0,
        "--nodes=2: only 1 node(s) can hold what it asks of each (gpu02: 12 CPUs requested but this server offers 8)"
    );
}

#[test]
fn a_job_over_several_nodes_preempted_for_an_urgent_one_requeues_whole() {
    let mut p = pool(&[16, 16]);
    let wide = p.submit(over_nodes(2, 4)).unwrap();
    p.settle();
    assert_eq!(p.placed(wide).2, JobState::Running);
    let mut urgent = request(4);
    urgent.qos = Some("critical".into());
    let urgent = p.submit(urgent).unwrap();
    p.settle();
    let job = db::job(&p.daemon.store.db, wide).unwrap();
    assert_eq!(
        (job.state, job.restart_count),
        (JobState::Pending, 1),
        "{job:?}"
    );
    assert!(job.peers.is_empty() && job.gpus_alloc.is_empty());
    for node in &p.nodes {
        assert!(
            !node.state().running.contains_key(&wide),
            "stopped on every node"
        );
    }
    assert_eq!(p.placed(urgent).2, JobState::Running);
}

/// A node's removal is a decision of its turn: a turn whose commit fails
/// keeps the node in the pool, its link open and untold; the committed
/// one drops it and tells it why.
#[test]
fn a_removal_whose_commit_fails_keeps_the_node_and_tells_it_nothing() {
    let mut p = pool(&[16, 16]);
    let sent = connect_remote(&mut p, "gpu02");
    let remove = || Control::NodeRemove {
        node: "gpu02".into(),
    };
    let refused = |sent: &crate::net::server::Recorder| {
        sent.frames()
            .iter()
            .filter(|f| String::from_utf8_lossy(f).contains("was removed from the pool"))
            .count()
    };
    let (uid, user) = me();
    p.daemon
        .control(remove(), (uid, &user), super::requester::Proven::Kernel, 0)
        .unwrap();
    fail_the_commit(&mut p);
    assert!(
        p.daemon.nodes.named("gpu02").is_some(),
        "a removal left with its failed turn"
    );
    assert_eq!(refused(&sent), 0, "a refusal left with its failed turn");
    let record = db::node_record(&p.daemon.store.db, "gpu02")
        .unwrap()
        .unwrap();
    assert!(record.removed.is_none());
    p.control(remove());
    assert!(p.daemon.nodes.named("gpu02").is_none());
    assert_eq!(refused(&sent), 1);
    assert!(
        p.daemon.pool.as_ref().unwrap().conns.is_empty(),
        "its link is cut"
    );
}

/// Makes node `name` of `p` one of the pool's, connected on connection 1
/// (what it is sent goes to the returned recorder), its certificate of
/// serial `name` recorded.
fn connect_remote(p: &mut Pool, name: &str) -> crate::net::server::Recorder {
    let (server, recorder) = crate::net::server::Recorder::new().unwrap();
    let authority = crate::net::pki::Authority::load_or_create(p._dir.path(), name).unwrap();
    let mut pool = super::pool_state::PoolState::new(
        (server.clone(), authority),
        (7, std::time::Duration::from_secs(30)),
        "gpu01:6820".into(),
        (0, Default::default()),
        p.daemon.core.clock.instant(),
    );
    pool.conns.insert(1, name.to_string());
    p.daemon.pool = Some(pool);
    let db = &p.daemon.store.db;
    db::expect_node(db, name, "-", i64::MAX, "test", 0).unwrap();
    db::node_joined(db, name, name).unwrap();
    let link = crate::net::remote::Link::default();
    {
        let mut state = link.state();
        state.conn = Some((server, 1));
        state.epoch = 7;
    }
    p.daemon.nodes.change(name, |node| {
        node.remote = Some(super::nodes::RemoteNode {
            link: link.clone(),
            last_heard: std::time::Instant::now(),
            lease_from: 0,
            lost: false,
            heard_since_away: true,
            lapsed_at: None,
        })
    });
    recorder
}

/// Node `name` says, on connection 1, that it holds `frozen` frozen for
/// its fence (at `clock`, the controller's time too).
fn frozen_report(
    p: &mut Pool,
    name: &str,
    frozen: Vec<(crate::net::message::RunKey, u64)>,
    clock: i64,
) {
    let running = frozen.iter().map(|(run, _)| *run).collect();
    heartbeat(p, name, running, frozen, clock);
}

/// Node `name`'s heartbeat on connection 1: the runs it holds, those of
/// them frozen for its fence, its clock (the controller's time too).
fn heartbeat(
    p: &mut Pool,
    name: &str,
    running: Vec<crate::net::message::RunKey>,
    frozen: Vec<(crate::net::message::RunKey, u64)>,
    clock: i64,
) {
    let heartbeat = crate::net::message::FromNode::Heartbeat {
        seq: 1,
        running,
        fenced: false,
        frozen,
        clock,
        taken_over: Vec::new(),
    };
    let peer = crate::net::pki::Subject {
        name: name.to_string(),
        serial: name.to_string(),
        not_before: 0,
        not_after: i64::MAX,
    };
    arrives(p, (1, Some(peer)), 7, heartbeat);
}

/// `body` arrives on connection `conn` (from the certified `peer`, if
/// one), in epoch `epoch`, for the pool's next turn.
fn arrives(
    p: &mut Pool,
    (conn, peer): (u64, Option<crate::net::pki::Subject>),
    epoch: u64,
    body: crate::net::message::FromNode,
) {
    let envelope = crate::net::message::Envelope {
        protocol: crate::net::message::PROTOCOL,
        epoch,
        incarnation: 0,
        body,
    };
    let frame = crate::net::frame::encode(&envelope).unwrap();
    let event = crate::net::server::ServerEvent::Frame {
        conn,
        peer,
        address: None,
        body: frame[4..].to_vec(),
    };
    p.daemon.pool.as_mut().unwrap().events.push(event);
}

/// Found by the simulation of the pool: a node's report of a freeze
/// taken in a turn whose commit failed was credited in the controller's
/// memory only, and the next report added nothing (the run was charged
/// its freeze); and what the nodes sent in such a turn was lost (a run's
/// end reported then never taken in). The turn's reports are taken in
/// again after a failed commit, and credited again.
#[test]
fn a_freeze_reported_in_a_turn_whose_commit_fails_is_credited_after_all() {
    let mut p = pool(&[16]);
    let id = p.submit(request(1)).unwrap();
    p.settle();
    let _sent = connect_remote(&mut p, "gpu01");
    let run = crate::net::message::RunKey {
        job: id,
        restart: 0,
    };
    p.daemon.core.clock = Clock::Manual(Arc::new(AtomicI64::new(100)));
    frozen_report(&mut p, "gpu01", vec![(run, 40)], 100);
    poison_the_commit(&mut p);
    let failure = turn(&mut p).unwrap_err();
    p.daemon.after_failed_commit(&failure, Vec::new()).unwrap();
    assert_eq!(p.daemon.core.jobs.get(&id).unwrap().suspended_secs, 0);
    turn(&mut p).unwrap();
    let job = db::job(&p.daemon.store.db, id).unwrap();
    assert_eq!(
        job.suspended_secs, 40,
        "the freeze is credited once it is recorded"
    );
}

/// Found by the simulation of the pool (seed 35 over 2 hours): a node
/// whose heartbeats were held on their way froze its runs when its lease
/// ran out unanswered; the held heartbeats, all sent before that, made it
/// heard when they came, and a run's time limit was reached while its
/// node held it frozen, its freeze never told (and charged). Its jobs'
/// clocks wait for a report sent since its lease ran out.
#[test]
fn a_time_limit_waits_for_what_a_node_sent_after_its_lease_ran_out_unanswered() {
    let (mut p, id, run) = a_job_heard_at_ten();
    // Nothing of it comes for a while (the controller finds it down, not
    // yet lost); then what it sent at 20 is read, past the job's limit.
    for t in [20, 30, 40, 50] {
        at(&mut p, t);
        turn(&mut p).unwrap();
    }
    heartbeat(&mut p, "gpu01", vec![run], Vec::new(), 20);
    turn(&mut p).unwrap();
    assert_eq!(
        p.daemon.core.jobs[&id].state,
        JobState::Running,
        "stopped on a report older than its node's freeze"
    );
    // Sent at 48: frozen since 40.
    frozen_report(&mut p, "gpu01", vec![(run, 8)], 48);
    turn(&mut p).unwrap();
    let job = &p.daemon.core.jobs[&id];
    // 8 s by its count and the 1 s (a second short) its report waited.
    assert_eq!((job.state, job.suspended_secs), (JobState::Running, 9));
    at(&mut p, 55);
    heartbeat(&mut p, "gpu01", vec![run], Vec::new(), 55);
    turn(&mut p).unwrap();
    assert_eq!(p.daemon.core.jobs[&id].state, JobState::Completing);
}

/// A node whose clock stays behind (a liar, or a broken clock) holds its
/// jobs' time limits a lease past its lapse at most.
#[test]
fn a_node_whose_reports_stay_older_than_its_lapse_holds_its_jobs_limits_a_lease_at_most() {
    let (mut p, id, run) = a_job_heard_at_ten();
    // Every report says it was sent at 20; its lease, from then, ran
    // out at 50.
    for t in [20, 30, 40, 50, 60, 70, 80] {
        at(&mut p, t);
        heartbeat(&mut p, "gpu01", vec![run], Vec::new(), 20);
        turn(&mut p).unwrap();
    }
    assert_eq!(
        p.daemon.core.jobs[&id].state,
        JobState::Running,
        "within a lease of the lapse"
    );
    at(&mut p, 90);
    heartbeat(&mut p, "gpu01", vec![run], Vec::new(), 20);
    turn(&mut p).unwrap();
    assert_eq!(p.daemon.core.jobs[&id].state, JobState::Completing);
}

/// Found by the simulation of the pool (seeds 26 and 27 over 2 hours): a
/// node reconnected while the controller was stopped; its hello, sent
/// before its lease ran out, was read after and taken as its good
/// standing then, so the freeze it reported next was credited nothing.
/// A hello is taken as of when it was sent, and, sent before the node's
/// lease ran out unanswered, its jobs' clocks wait for a later report.
#[test]
fn a_hello_read_late_is_as_old_as_it_is_and_the_freeze_reported_after_it_is_credited() {
    let (mut p, id, run) = a_job_heard_at_ten();
    // The controller stops from 10 to 60; the node reconnects at 12 (its
    // lease runs out at 40 and it freezes its run).
    at(&mut p, 60);
    hello_with(&mut p, vec![run], 12);
    turn(&mut p).unwrap();
    assert_eq!(
        p.daemon.core.jobs[&id].state,
        JobState::Running,
        "stopped on a hello older than its node's freeze"
    );
    frozen_report(&mut p, "gpu01", vec![(run, 20)], 60);
    turn(&mut p).unwrap();
    let job = &p.daemon.core.jobs[&id];
    assert_eq!((job.state, job.suspended_secs), (JobState::Running, 20));
}

/// The same when the controller ran all along and the node's hello, sent
/// before its lease ran out unanswered, was held on its way: its jobs'
/// clocks wait for a report sent since.
#[test]
fn a_hello_sent_before_a_nodes_lease_ran_out_holds_its_jobs_clocks() {
    let (mut p, id, run) = a_job_heard_at_ten();
    for t in [20, 30, 40, 50] {
        at(&mut p, t);
        turn(&mut p).unwrap();
    }
    hello_with(&mut p, vec![run], 35);
    turn(&mut p).unwrap();
    assert_eq!(p.daemon.core.jobs[&id].state, JobState::Running);
    frozen_report(&mut p, "gpu01", vec![(run, 9)], 49);
    turn(&mut p).unwrap();
    let job = &p.daemon.core.jobs[&id];
    assert_eq!((job.state, job.suspended_secs), (JobState::Running, 9));
}

/// Found by the simulation of the pool (seed 80 over 2 hours): a job was
/// cancelled while its node, out of reach, held it frozen; a later turn's
/// commit failed, and the stop was forgotten with it (stops were kept in
/// memory only), so the freeze report read after was credited up to its
/// read, beyond the run's end. Stops are read back from the records.
#[test]
fn a_freeze_read_after_a_failed_turn_is_credited_no_further_than_its_jobs_stop() {
    let (mut p, id, run) = a_job_heard_at_ten();
    p.daemon.core.jobs.job_mut(&id).unwrap().time_limit = None;
    at(&mut p, 30);
    let cancel = Control::Cancel {
        selector: crate::proto::JobSelector {
            job_ids: vec![crate::array::JobRef::Id(id)],
            ..Default::default()
        },
        signal: None,
        to: crate::proto::SignalTo::Job,
    };
    let (uid, user) = me();
    let proven = super::requester::Proven::Kernel;
    p.daemon.control(cancel, (uid, &user), proven, 30).unwrap();
    p.daemon.commit().unwrap();
    assert_eq!(p.daemon.core.jobs[&id].state, JobState::Completing);
    at(&mut p, 35);
    poison_the_commit(&mut p);
    let failure = turn(&mut p).unwrap_err();
    p.daemon.after_failed_commit(&failure, Vec::new()).unwrap();
    // Sent at 20, frozen 5 s then; read at 50.
    at(&mut p, 50);
    frozen_report(&mut p, "gpu01", vec![(run, 5)], 20);
    turn(&mut p).unwrap();
    // 5 s by its count, and its wait until the stop at 30 (a second
    // short): 9 s.
    assert_eq!(p.daemon.core.jobs[&id].suspended_secs, 14);
}

/// A job's last suspension, like its stop, is read back from the records
/// after a failed commit: a run charged until before its resumption (its
/// node lost, frozen since its lease ran out) has only the part of the
/// suspension within it taken off (fix 15 of the pool's simulation).
#[test]
fn a_resumption_read_back_after_a_failed_commit_bounds_a_lost_runs_suspension() {
    let mut p = pool(&[16]);
    let id = p.submit(request(1)).unwrap();
    p.settle();
    let job_ids = || vec![crate::array::JobRef::Id(id)];
    let (uid, user) = me();
    let proven = super::requester::Proven::Kernel;
    let suspend = Control::Suspend { job_ids: job_ids() };
    p.daemon.control(suspend, (uid, &user), proven, 20).unwrap();
    p.daemon.commit().unwrap();
    let resume = Control::Resume { job_ids: job_ids() };
    p.daemon.control(resume, (uid, &user), proven, 40).unwrap();
    p.daemon.commit().unwrap();
    at(&mut p, 41);
    poison_the_commit(&mut p);
    let failure = turn(&mut p).unwrap_err();
    p.daemon.after_failed_commit(&failure, Vec::new()).unwrap();
    // Its node froze it at 30, suspended; lost at 60.
    p.daemon
        .handle_with(|core, reads, fx| {
            super::node_loss::on_node_lost(core, reads, ("gpu01", 30), 60, fx)
        })
        .unwrap();
    p.daemon.commit().unwrap();
    // It ran from 0 to 20 on one GPU.
    assert_eq!(p.daemon.core.jobs[&id].gpu_seconds, 20);
}

/// A pool of gpu01 alone, connected, running a job with a limit of 45 s
/// since 0, heard at once at 10 (its clock is the controller's; its lease
/// of 30 s runs out at 40): the pool, the job and its run.
fn a_job_heard_at_ten() -> (Pool, JobId, crate::net::message::RunKey) {
    let mut p = pool(&[16]);
    let id = p.submit(request(1)).unwrap();
    p.settle();
    let _sent = connect_remote(&mut p, "gpu01");
    p.daemon.core.jobs.job_mut(&id).unwrap().time_limit = Some(45);
    let run = crate::net::message::RunKey {
        job: id,
        restart: 0,
    };
    at(&mut p, 10);
    heartbeat(&mut p, "gpu01", vec![run], Vec::new(), 10);
    turn(&mut p).unwrap();
    (p, id, run)
}

/// The controller's clock set to `t`.
fn at(p: &mut Pool, t: i64) {
    p.daemon.core.clock = Clock::Manual(Arc::new(AtomicI64::new(t)));
}

/// Node gpu01's agent says hello on connection 1: it runs `running`,
/// nothing of it frozen; its clock reads `clock`.
fn hello_with(p: &mut Pool, running: Vec<crate::net::message::RunKey>, clock: i64) {
    let facts = p.daemon.nodes.named("gpu01").unwrap().facts().clone();
    let hello = crate::net::message::FromNode::Hello {
        facts,
        running: running.into_iter().map(|run| (run, 4242)).collect(),
        ended: Vec::new(),
        lost: Vec::new(),
        version: "test".into(),
        clock,
        frozen: Vec::new(),
        taken_over: Vec::new(),
        suspended: Vec::new(),
    };
    let peer = crate::net::pki::Subject {
        name: "gpu01".into(),
        serial: "gpu01".into(),
        not_before: 0,
        not_after: i64::MAX,
    };
    arrives(p, (1, Some(peer)), 7, hello);
}

/// A join's certificate leaves once the node's joining is committed: a
/// turn whose commit fails sends none (the node would hold a certificate
/// its controller has no record of), and the join, taken in again, is
/// answered once it is recorded.
#[test]
fn a_join_whose_commit_fails_sends_no_certificate_until_it_is_recorded() {
    let mut p = pool(&[16]);
    let sent = connect_remote(&mut p, "gpu01");
    let token = "the-join-token";
    db::expect_node(
        &p.daemon.store.db,
        "gpu09",
        &crate::net::pki::hash_token(token),
        i64::MAX,
        "test",
        0,
    )
    .unwrap();
    let (_key, request_pem) = crate::net::pki::new_request("gpu09").unwrap();
    let join = crate::net::message::FromNode::Join {
        node: "gpu09".into(),
        token: token.into(),
        request_pem,
    };
    arrives(&mut p, (2, None), 0, join);
    let joined = |sent: &crate::net::server::Recorder| {
        sent.frames()
            .iter()
            .filter(|f| String::from_utf8_lossy(f).contains("Joined"))
            .count()
    };
    poison_the_commit(&mut p);
    let failure = turn(&mut p).unwrap_err();
    p.daemon.after_failed_commit(&failure, Vec::new()).unwrap();
    assert_eq!(joined(&sent), 0, "a certificate left a failed turn");
    let record = db::node_record(&p.daemon.store.db, "gpu09")
        .unwrap()
        .unwrap();
    assert!(record.token_hash.is_some(), "its token is unused still");
    turn(&mut p).unwrap();
    assert_eq!(joined(&sent), 1);
    let record = db::node_record(&p.daemon.store.db, "gpu09")
        .unwrap()
        .unwrap();
    assert!(record.token_hash.is_none(), "its token is used");
}

/// Found by the simulation of the pool (seeds 68 and 85, once a node no
/// longer reports a suspended run frozen for its fence): a node lost and
/// heard again without a new hello kept a run of a job requeued
/// meanwhile, and another job was started on its GPUs. A run a node's
/// heartbeat lists that is no job's current run there is stopped and
/// forgotten, after the commit.
#[test]
fn a_run_a_heartbeat_lists_that_is_no_jobs_current_run_is_cleared() {
    let mut p = pool(&[16]);
    let id = p.submit(request(1)).unwrap();
    p.settle();
    let sent = connect_remote(&mut p, "gpu01");
    let current = crate::net::message::RunKey {
        job: id,
        restart: 0,
    };
    let stale = crate::net::message::RunKey {
        job: id,
        restart: 3,
    };
    heartbeat(&mut p, "gpu01", vec![current, stale], Vec::new(), 0);
    turn(&mut p).unwrap();
    let frames: Vec<String> = sent
        .frames()
        .iter()
        .map(|f| String::from_utf8_lossy(&f[4..]).into_owned())
        .filter(|f| !f.contains("HeartbeatAck"))
        .collect();
    let of = |kind: &str, restart: u32| {
        frames
            .iter()
            .any(|f| f.contains(kind) && f.contains(&format!("\"restart\":{restart}")))
    };
    assert!(of("Clear", 3) && of("Forget", 3), "{frames:?}");
    assert!(!of("Clear", 0), "the current run is left alone: {frames:?}");
}
