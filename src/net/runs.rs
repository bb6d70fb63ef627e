//! The runs a node holds, through this host's executor (the fork server,
//! a `ysstepd` supervisor per job, cgroups — as on a single server):
//! launched at the controller's word, checked against this host's users,
//! each reported when it ends and kept until the controller says it has
//! recorded the end. A job's directory is the journal: an agent killed
//! and restarted finds every run again in its state directory.

use std::collections::{BTreeMap, BTreeSet};

use crate::exec::executor::{Adoption, Executor, ImageStatus, Launch};
use crate::exec::spec::{ExitRecord, SignalTarget, StepCommand};
use crate::model::job::JobId;
use crate::net::message::{FromNode, LaunchOrder, RunKey, ToNode};

/// One run this node holds.
#[derive(Clone, Debug)]
struct Run {
    restart: u32,
    supervisor_pid: i32,
    /// How it ended, until forgotten.
    ended: Option<ExitRecord>,
    /// Its supervisor is gone without a record.
    lost: bool,
}

impl Run {
    fn running(&self) -> bool {
        self.ended.is_none() && !self.lost
    }
}

pub struct Runs {
    executor: Box<dyn Executor>,
    runs: BTreeMap<JobId, Run>,
    /// Container images the controller asked for, until their pulls end.
    images: BTreeSet<String>,
    /// Runs frozen because the lease ran out, and since when (on the
    /// clock's monotonic reading): until the controller thaws them (still
    /// its) or stops them (run elsewhere).
    frozen: BTreeMap<JobId, std::time::Duration>,
    /// Runs this node ended for its fence, and why: their ends say so.
    ended_for_fence: BTreeMap<JobId, String>,
    /// Runs ended while frozen for the fence (past `frozen_limit`), and
    /// how long they had stood frozen: their ends say so.
    ended_frozen: BTreeMap<JobId, u64>,
    /// Runs the controller froze (suspended), until it thaws them: not
    /// the fence's to freeze, nor to report frozen (their time frozen is
    /// the suspension's, which the controller does not charge already).
    suspended: BTreeSet<JobId>,
    /// Freezes of the fence a suspension took over: how long the fence
    /// had held each run then (seconds), and the report that first told
    /// it (`seq`), until one that told it is answered.
    taken_over: BTreeMap<RunKey, (u64, Option<u64>)>,
    clock: AgentClock,
}

/// The clocks a node's runs are told by: the wall clock its reports carry
/// and a monotonic one its fence's freezes are timed on. The host's (its
/// boot clock the monotonic one, as the lease file's), or a
/// simulation's (`daemon::chaos`), whose seconds are both.
#[derive(Clone, Debug, Default)]
pub enum AgentClock {
    #[default]
    System,
    Simulated(std::sync::Arc<std::sync::atomic::AtomicI64>),
}

impl AgentClock {
    /// Now, in Unix seconds.
    pub fn wall(&self) -> i64 {
        match self {
            AgentClock::System => now(),
            AgentClock::Simulated(t) => t.load(std::sync::atomic::Ordering::SeqCst),
        }
    }

    /// Now on the monotonic clock: time since a fixed point.
    fn monotonic(&self) -> std::time::Duration {
        match self {
            // The boot clock, which the lease file is written on: a
            // restarted agent times a freeze from the lease's end.
            AgentClock::System => std::time::Duration::from_nanos(crate::exec::lease::boot_now()),
            AgentClock::Simulated(_) => std::time::Duration::from_secs(self.wall().max(0) as u64),
        }
    }
}

impl Runs {
    /// The executor, and the runs it has `recorded` (job, run) found
    /// again: this host's executor finds them in its job directories.
    pub fn adopt(mut executor: Box<dyn Executor>, recorded: Vec<(JobId, u32)>) -> Runs {
        let mut runs = BTreeMap::new();
        for (id, restart) in recorded {
            let run = |pid, ended, lost| Run {
                restart,
                supervisor_pid: pid,
                ended,
                lost,
            };
            match executor.adopt(id) {
                Adoption::Alive { supervisor_pid } => {
                    runs.insert(id, run(supervisor_pid, None, false));
                }
                Adoption::Exited(record) => {
                    runs.insert(id, run(0, Some(record), false));
                }
                Adoption::Lost => {
                    executor.clear_remains(id);
                    runs.insert(id, run(0, None, true));
                }
                // Its directory was written and nothing started.
                Adoption::NeverStarted | Adoption::Unreachable(_) => executor.forget(id),
            }
        }
        Runs {
            executor,
            runs,
            images: BTreeSet::new(),
            frozen: BTreeMap::new(),
            ended_for_fence: BTreeMap::new(),
            ended_frozen: BTreeMap::new(),
            suspended: BTreeSet::new(),
            taken_over: BTreeMap::new(),
            clock: AgentClock::System,
        }
    }

    /// The same runs, told by `clock`.
    pub fn on_clock(mut self, clock: AgentClock) -> Runs {
        self.clock = clock;
        self
    }

    /// Starts making container image `reference` present here; how that
    /// ends is told by [`Runs::settled_images`].
    pub fn pull_image(&mut self, reference: String) {
        self.executor.ensure_image(&reference);
        self.images.insert(reference);
    }

    /// Whether an image asked for is still being pulled.
    pub fn pulling(&self) -> bool {
        !self.images.is_empty()
    }

    /// The images asked for whose pulls have ended, as reports.
    pub fn settled_images(&mut self) -> Vec<FromNode> {
        let mut reports = Vec::new();
        self.images.retain(|reference| {
            let error = match self.executor.ensure_image(reference) {
                ImageStatus::Pulling => return true,
                ImageStatus::Ready => None,
                ImageStatus::Failed(why) => Some(why),
            };
            reports.push(FromNode::Image {
                reference: reference.clone(),
                error,
            });
            false
        });
        reports
    }

    pub fn executor(&self) -> &dyn Executor {
        self.executor.as_ref()
    }

    /// What a `Hello` says of the runs.
    /// What this node says at a connection, as report `seq` (a hello
    /// counts as a heartbeat).
    pub fn hello(&mut self, version: &str, seq: u64) -> FromNode {
        let key = |id: &JobId, run: &Run| RunKey {
            job: *id,
            restart: run.restart,
        };
        FromNode::Hello {
            facts: self.executor.node().clone(),
            running: self
                .runs
                .iter()
                .filter(|(_, r)| r.running())
                .map(|(id, r)| (key(id, r), r.supervisor_pid))
                .collect(),
            ended: self
                .runs
                .iter()
                .filter_map(|(id, r)| Some((key(id, r), r.ended.clone()?)))
                .collect(),
            lost: self
                .runs
                .iter()
                .filter(|(_, r)| r.lost)
                .map(|(id, r)| key(id, r))
                .collect(),
            version: version.to_string(),
            clock: self.clock.wall(),
            frozen: self.frozen_runs(),
            taken_over: self.taken_over(seq),
            suspended: self
                .runs
                .iter()
                .filter(|(id, r)| r.running() && self.suspended.contains(id))
                .map(|(id, r)| key(id, r))
                .collect(),
        }
    }

    /// The fence's freezes a suspension took over, told in report `seq`.
    pub fn taken_over(&mut self, seq: u64) -> Vec<(RunKey, u64)> {
        self.taken_over
            .iter_mut()
            .map(|(run, (secs, told_in))| {
                told_in.get_or_insert(seq);
                (*run, *secs)
            })
            .collect()
    }

    /// The controller answered report `seq`: what it told is known.
    pub fn heard(&mut self, seq: u64) {
        self.taken_over
            .retain(|_, (_, told_in)| told_in.is_none_or(|told| told > seq));
    }

    /// The runs frozen for the fence, and for how long (seconds).
    pub fn frozen_runs(&self) -> Vec<(RunKey, u64)> {
        self.frozen
            .iter()
            .filter(|(id, _)| !self.suspended.contains(id))
            .filter_map(|(id, since)| {
                let run = self.runs.get(id).filter(|r| r.running())?;
                let key = RunKey {
                    job: *id,
                    restart: run.restart,
                };
                Some((key, self.clock.monotonic().saturating_sub(*since).as_secs()))
            })
            .collect()
    }

    /// The runs whose processes run.
    pub fn running(&self) -> Vec<RunKey> {
        self.runs
            .iter()
            .filter(|(_, r)| r.running())
            .map(|(id, r)| RunKey {
                job: *id,
                restart: r.restart,
            })
            .collect()
    }

    /// Carries out an order of the controller; what to tell it.
    pub fn order(&mut self, order: ToNode, fenced: bool) -> Vec<FromNode> {
        match order {
            ToNode::Launch(launch) => self.launch(*launch, fenced),
            ToNode::Command { run, command } if self.is_current(run) => {
                if let Err(e) = self.executor.command(run.job, &command) {
                    tracing::warn!(target: "ysched::agent", "{run}: {e}");
                }
                Vec::new()
            }
            ToNode::Freeze { run, frozen } if self.is_current(run) => {
                if frozen {
                    // Frozen for the fence: the suspension holds it from
                    // now, and the fence's part is told as it stands
                    // (found by the simulation of the pool, seeds 28 and
                    // 105: it was told no more, and charged).
                    if let Some(secs) = self.fence_frozen_secs(run.job) {
                        self.frozen.remove(&run.job);
                        self.taken_over.insert(run, (secs, None));
                    }
                    self.suspended.insert(run.job);
                } else {
                    self.suspended.remove(&run.job);
                }
                if !frozen && fenced && self.suspended_frozen(run.job) {
                    // A node that lost its lease runs nothing: a run
                    // resumed now stays frozen, the fence's from now on,
                    // reported and thawed as the fence's runs are (found
                    // by the simulation of the pool, seed 167: a resume
                    // that reached a fenced node ran the job there while
                    // its controller gave it up).
                    self.frozen.insert(run.job, self.clock.monotonic());
                    tracing::info!(target: "ysched::agent", "{run} resumed while this node has no lease: it stays frozen until the controller is heard");
                    return Vec::new();
                }
                if let Err(e) = self.executor.set_frozen(run.job, frozen) {
                    tracing::warn!(target: "ysched::agent", "{run}: {e}");
                }
                if !frozen && self.frozen.remove(&run.job).is_some() {
                    tracing::info!(target: "ysched::agent", "{run} thawed: the controller says it is still this node's");
                }
                Vec::new()
            }
            ToNode::Clear { run } if self.is_current(run) => {
                self.frozen.remove(&run.job);
                let _ = self.executor.command(run.job, &kill_now());
                self.executor.clear_remains(run.job);
                Vec::new()
            }
            ToNode::Forget { run } if self.is_current(run) => {
                if self.runs.get(&run.job).is_some_and(Run::running) {
                    // Forgetting a live run would leave it unaccounted.
                    tracing::warn!(target: "ysched::agent", "{run} still runs: not forgotten");
                } else {
                    self.executor.forget(run.job);
                    self.runs.remove(&run.job);
                }
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    fn is_current(&self, run: RunKey) -> bool {
        self.runs
            .get(&run.job)
            .is_some_and(|r| r.restart == run.restart)
    }

    /// Starts a run, once: a launch of a run this node holds already is
    /// answered with what it knows of it.
    fn launch(&mut self, order: LaunchOrder, fenced: bool) -> Vec<FromNode> {
        let run = RunKey::of(&order.job);
        if let Some(known) = self.runs.get(&run.job) {
            if known.restart == run.restart {
                return vec![self.report(run)];
            }
            if known.running() {
                tracing::error!(target: "ysched::agent", "{run}: an earlier run of the job still runs here");
                return vec![FromNode::Lost { run }];
            }
            // An earlier run's end, recorded by now: the controller only
            // launches again after it did.
            self.executor.forget(run.job);
            self.runs.remove(&run.job);
        }
        if fenced {
            let why = "its node has lost its lease".to_string();
            tracing::warn!(target: "ysched::agent", "{run} not started: {why}");
            return vec![FromNode::NotStarted { run, why }];
        }
        let user = match same_user(&order, &self.executor.node().name) {
            Ok(user) => user,
            Err(why) => return vec![self.refused(run, why.to_string())],
        };
        let launched = self.executor.launch(Launch {
            job: &order.job,
            script: &order.script,
            args: &order.args,
            environment: &order.environment,
            home: &user.dir,
            shell: &user.shell,
            part: order.part.as_ref(),
        });
        match launched {
            Ok(started) => {
                self.runs.insert(
                    run.job,
                    Run {
                        restart: run.restart,
                        supervisor_pid: started.supervisor_pid,
                        ended: None,
                        lost: false,
                    },
                );
                tracing::info!(target: "ysched::agent", "{run} started for {} (supervisor pid {})", order.job.user, started.supervisor_pid);
                vec![FromNode::Started {
                    run,
                    supervisor_pid: started.supervisor_pid,
                }]
            }
            Err(e) => vec![self.refused(run, e.to_string())],
        }
    }

    /// A run that could not start: it ends at once, saying why.
    fn refused(&mut self, run: RunKey, why: String) -> FromNode {
        tracing::warn!(target: "ysched::agent", "{run} not started: {why}");
        let record = ExitRecord {
            exit: Default::default(),
            end_time: self.clock.wall(),
            launch_error: Some(why),
            terminated: false,
            usage: Default::default(),
            stuck: 0,
            image: None,
            fenced: None,
            fence_frozen_secs: None,
        };
        self.runs.insert(
            run.job,
            Run {
                restart: run.restart,
                supervisor_pid: 0,
                ended: Some(record.clone()),
                lost: false,
            },
        );
        FromNode::Exited {
            run,
            record,
            clock: self.clock.wall(),
        }
    }

    /// What this node knows of a run it holds.
    fn report(&self, run: RunKey) -> FromNode {
        match self.runs.get(&run.job) {
            Some(Run {
                ended: Some(record),
                ..
            }) => FromNode::Exited {
                run,
                record: record.clone(),
                clock: self.clock.wall(),
            },
            Some(Run { lost: true, .. }) | None => FromNode::Lost { run },
            Some(r) => FromNode::Started {
                run,
                supervisor_pid: r.supervisor_pid,
            },
        }
    }

    /// How long run `id` has stood frozen for the fence (seconds), if it
    /// is the fence's.
    fn fence_frozen_secs(&self, id: JobId) -> Option<u64> {
        let since = self
            .frozen
            .get(&id)
            .filter(|_| !self.suspended.contains(&id))?;
        Some(self.clock.monotonic().saturating_sub(*since).as_secs())
    }

    /// A supervisor exited: how its run ended, to tell the controller,
    /// with the fence's freeze it ended in (no heartbeat reports a run
    /// that no longer runs).
    pub fn exited(&mut self, id: JobId) -> Option<FromNode> {
        let fence_frozen = self
            .fence_frozen_secs(id)
            .or_else(|| self.ended_frozen.get(&id).copied());
        self.frozen.remove(&id);
        self.ended_frozen.remove(&id);
        self.suspended.remove(&id);
        let fenced = self.ended_for_fence.remove(&id);
        let record = self.executor.exit_of(id).map(|mut r| {
            r.fenced = fenced;
            r.fence_frozen_secs = fence_frozen;
            r
        });
        let run = self.runs.get_mut(&id)?;
        let key = RunKey {
            job: id,
            restart: run.restart,
        };
        match record {
            Some(record) => {
                run.ended = Some(record.clone());
                Some(FromNode::Exited {
                    run: key,
                    record,
                    clock: self.clock.wall(),
                })
            }
            None => {
                run.lost = true;
                self.executor.clear_remains(id);
                Some(FromNode::Lost { run: key })
            }
        }
    }

    /// Whether run `job` is held frozen (a controller's suspension, or
    /// the fence's) and not already the fence's.
    fn suspended_frozen(&self, job: JobId) -> bool {
        self.runs.get(&job).is_some_and(Run::running) && !self.frozen.contains_key(&job)
    }

    /// The lease ran out, `lapsed` ago: every run is frozen where it is
    /// (its cgroup's freezer), so that none makes progress while the
    /// controller, which stopped hearing this node, may run the job
    /// elsewhere; the controller thaws those still its own when it hears
    /// the node again. Each stands frozen since the lease ran out: its
    /// supervisor froze it then, if this agent was late (or restarted).
    /// A run that cannot be frozen (no cgroup) is killed. How many were
    /// frozen, and killed.
    pub fn fence(&mut self, lapsed: std::time::Duration) -> (usize, usize) {
        let since = self.clock.monotonic().saturating_sub(lapsed);
        // A run that ended after the lease ran out, before this agent
        // fenced (it restarted, and found the end), ended frozen since
        // then: its supervisor froze it when the lease ran out.
        let lapsed_at = self.clock.wall() - lapsed.as_secs() as i64;
        for run in self.runs.values_mut() {
            if let Some(record) = run
                .ended
                .as_mut()
                .filter(|r| r.fence_frozen_secs.is_none() && r.end_time > lapsed_at)
            {
                record.fence_frozen_secs = Some((record.end_time - lapsed_at) as u64);
            }
        }
        let (mut frozen, mut killed) = (0, 0);
        for run in self.running() {
            if self.frozen.contains_key(&run.job) || self.suspended.contains(&run.job) {
                continue;
            }
            match self.executor.set_frozen(run.job, true) {
                Ok(()) => {
                    self.frozen.insert(run.job, since);
                    frozen += 1;
                }
                Err(e) => {
                    tracing::warn!(target: "ysched::agent", "{run} cannot be frozen ({e}): killed");
                    let _ = self.executor.command(run.job, &kill_now());
                    let why =
                        format!("its node lost its lease, and the job could not be frozen ({e})");
                    self.ended_for_fence.insert(run.job, why);
                    killed += 1;
                }
            }
        }
        (frozen, killed)
    }

    /// Ends the runs frozen longer than `limit` (no controller claimed
    /// them in time); how many.
    pub fn end_frozen_beyond(&mut self, limit: std::time::Duration) -> usize {
        let over: Vec<JobId> = self
            .frozen
            .iter()
            .filter(|(_, since)| self.clock.monotonic().saturating_sub(**since) > limit)
            .map(|(id, _)| *id)
            .collect();
        for id in &over {
            let _ = self.executor.command(*id, &kill_now());
            let _ = self.executor.set_frozen(*id, false);
            if let Some(secs) = self.fence_frozen_secs(*id) {
                self.ended_frozen.insert(*id, secs);
            }
            self.frozen.remove(id);
            let why = format!(
                "it stayed frozen longer than frozen_limit ({}) with no controller to claim it",
                humantime::format_duration(limit)
            );
            self.ended_for_fence.insert(*id, why);
        }
        over.len()
    }
}

/// SIGKILL to the whole job, with no grace.
fn kill_now() -> StepCommand {
    StepCommand::Terminate {
        grace_secs: 0,
        signal: Some(libc::SIGKILL),
        target: SignalTarget::Job,
    }
}

/// Why a job's user is not the same user on this node.
#[derive(Debug, thiserror::Error)]
enum OtherUser {
    #[error("user {user} is uid {here} on node {node} and uid {there} on the controller; a job runs only where its user is the same")]
    Uid {
        user: String,
        here: u32,
        there: u32,
        node: String,
    },
    #[error("user {user} does not exist on node {node}")]
    Missing { user: String, node: String },
}

/// The job's user here, if it is the same user (name and uid) as on the
/// controller.
fn same_user(order: &LaunchOrder, node: &str) -> Result<nix::unistd::User, OtherUser> {
    let job = &order.job;
    match nix::unistd::User::from_name(&job.user) {
        Ok(Some(user)) if user.uid.as_raw() == job.uid => Ok(user),
        Ok(Some(user)) => Err(OtherUser::Uid {
            user: job.user.clone(),
            here: user.uid.as_raw(),
            there: job.uid,
            node: node.to_string(),
        }),
        Ok(None) | Err(_) => Err(OtherUser::Missing {
            user: job.user.clone(),
            node: node.to_string(),
        }),
    }
}

pub(crate) fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::executor::{IsolationFacts, NodeFacts};

    /// Runs over a fake node, with job 7 of this user running.
    fn one_run() -> (Runs, RunKey) {
        let (runs, run, _node) = one_run_on_a_node();
        (runs, run)
    }

    /// The fake node's facts: one GPU, its runs confined and frozen.
    fn gpu02() -> NodeFacts {
        NodeFacts {
            name: "gpu02".into(),
            inventory: crate::gpu::Inventory::declared(
                &crate::config::Config::parse(
                    "[[gpus]]\ntype = \"a100\"\ncount = 1\nmemory = \"80G\"\n",
                    std::path::Path::new("node.toml"),
                )
                .unwrap(),
            ),
            cpus: 8,
            mem_mb: 1 << 14,
            tmp_mb: 100 << 10,
            containers: false,
            isolation: IsolationFacts {
                confined: true,
                can_suspend: true,
                ..Default::default()
            },
        }
    }

    /// The same, with the fake node that runs it.
    fn one_run_on_a_node() -> (Runs, RunKey, crate::exec::fake::FakeNode) {
        let (executor, node) = crate::exec::fake::FakeExecutor::new(gpu02(), |_| {});
        let mut runs = Runs::adopt(Box::new(executor), Vec::new());
        let uid = nix::unistd::getuid();
        let user = nix::unistd::User::from_uid(uid).unwrap().unwrap();
        let job = crate::model::job::Job {
            uid: uid.as_raw(),
            user: user.name,
            ..crate::model::job::example_job(7)
        };
        let run = RunKey::of(&job);
        let order = LaunchOrder {
            job,
            script: String::new(),
            args: Vec::new(),
            environment: Vec::new(),
            part: None,
        };
        let started = runs.order(ToNode::Launch(Box::new(order)), false);
        assert!(
            matches!(started[..], [FromNode::Started { .. }]),
            "{started:?}"
        );
        (runs, run, node)
    }

    /// Found by the simulation of the pool (seed 8): a run the controller
    /// had suspended was frozen again by the node's fence and reported
    /// frozen for it; a report read after the job was resumed had the
    /// suspension's time credited a second time, and the job charged less
    /// than it ran.
    #[test]
    fn a_suspended_run_is_not_the_fences_to_report() {
        let (mut runs, run) = one_run();
        let freeze = |frozen| ToNode::Freeze { run, frozen };
        runs.order(freeze(true), false);
        assert_eq!(runs.fence(std::time::Duration::ZERO), (0, 0));
        assert!(runs.frozen_runs().is_empty());
        // Resumed: the next fence is the fence's.
        runs.order(freeze(false), false);
        assert_eq!(runs.fence(std::time::Duration::ZERO), (1, 0));
        assert_eq!(runs.frozen_runs().len(), 1);
    }

    /// Found by the simulation of the pool (seed 167 over 2 hours): a
    /// resume that reached a node after its lease ran out thawed the run
    /// there, and it ran while its controller, no longer hearing the
    /// node, gave it up. The run stays frozen, the fence's, until the
    /// controller is heard again and thaws it.
    #[test]
    fn a_run_resumed_while_its_node_has_no_lease_stays_frozen_the_fences() {
        let (mut runs, run, node) = one_run_on_a_node();
        let freeze = |frozen| ToNode::Freeze { run, frozen };
        let frozen = |node: &crate::exec::fake::FakeNode| node.state().frozen.contains(&run.job);
        runs.order(freeze(true), false);
        assert_eq!(runs.fence(std::time::Duration::ZERO), (0, 0));
        runs.order(freeze(false), true);
        assert!(frozen(&node), "it ran with no lease");
        assert_eq!(runs.frozen_runs().len(), 1, "the fence's to report");
        assert_eq!(
            runs.fence(std::time::Duration::ZERO),
            (0, 0),
            "frozen already"
        );
        // Heard again: the controller's thaw runs it.
        runs.order(freeze(false), false);
        assert!(!frozen(&node));
        assert!(runs.frozen_runs().is_empty());
    }

    /// Found by the simulation of the pool (seeds 68, 48 and 145 over 2
    /// hours): a run its node ended while frozen for its lost lease (a
    /// cancel reached it; or its agent restarted and found the end) was
    /// no longer in any report of frozen runs, and its freeze was
    /// charged. Its end says how long it stood frozen, from when the
    /// lease ran out (its supervisor froze it then, if the agent was late
    /// or away).
    #[test]
    fn a_run_that_ended_frozen_for_the_fence_says_so_with_its_end() {
        use std::sync::atomic::{AtomicI64, Ordering::SeqCst};
        use std::time::Duration;
        let (runs, run, node) = one_run_on_a_node();
        let t = std::sync::Arc::new(AtomicI64::new(10_000));
        let mut runs = runs.on_clock(AgentClock::Simulated(t.clone()));
        // The lease ran out 30 s before this agent fenced.
        assert_eq!(runs.fence(Duration::from_secs(30)), (1, 0));
        t.store(10_060, SeqCst);
        node.state().now = 10_060;
        node.end(run.job, 0, 15);
        let Some(FromNode::Exited { record, .. }) = runs.exited(run.job) else {
            panic!("no end told");
        };
        assert_eq!(record.fence_frozen_secs, Some(90));
        // A restarted agent finds the end; its node's lease ran out at
        // 9_990, 100 s before it starts.
        let executor = crate::exec::fake::FakeExecutor::rejoin(gpu02(), &node);
        let t = std::sync::Arc::new(AtomicI64::new(10_090));
        let mut again = Runs::adopt(Box::new(executor), vec![(run.job, run.restart)])
            .on_clock(AgentClock::Simulated(t));
        assert_eq!(again.fence(Duration::from_secs(100)), (0, 0));
        let FromNode::Hello { ended, .. } = again.hello("test", 1) else {
            unreachable!()
        };
        assert_eq!(ended[0].1.fence_frozen_secs, Some(70));
    }

    /// Found by the simulation of the pool (seed 28): a run its node's
    /// fence froze, then suspended by the controller before it heard of
    /// the freeze, was reported frozen no more, and the fence's part was
    /// charged. It is told as it stood when the suspension took over,
    /// until a report that told it is answered.
    #[test]
    fn a_suspension_that_takes_over_a_fences_freeze_tells_its_part_until_heard() {
        use std::sync::atomic::{AtomicI64, Ordering::SeqCst};
        let (runs, run) = one_run();
        let t = std::sync::Arc::new(AtomicI64::new(1_000));
        let mut runs = runs.on_clock(AgentClock::Simulated(t.clone()));
        assert_eq!(runs.fence(std::time::Duration::ZERO), (1, 0));
        t.store(1_065, SeqCst);
        runs.order(ToNode::Freeze { run, frozen: true }, false);
        assert!(runs.frozen_runs().is_empty(), "the suspension's now");
        assert_eq!(runs.taken_over(7), [(run, 65)]);
        // Resumed: the fence's part is still to be told.
        runs.order(ToNode::Freeze { run, frozen: false }, false);
        assert_eq!(runs.taken_over(8), [(run, 65)]);
        runs.heard(6);
        assert_eq!(runs.taken_over(9).len(), 1, "an earlier answer");
        runs.heard(7);
        assert!(runs.taken_over(10).is_empty());
    }
}
