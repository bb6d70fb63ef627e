//! Read-only views (`ysqueue`, `ysacct`, `yscontrol show job`), answered on
//! their own thread: the queue from an immutable snapshot, built here from
//! what the event loop hands over after a change, history from a read-only connection the daemon owns. Users
//! never open the database, so none can stall the loop's writes or pin the
//! WAL; and another user's job comes without its private fields.

mod lean;

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, OnceLock};

use rusqlite::Connection;

use crate::array::JobRef;
use crate::db::{self, DbError};
use crate::model::job::{IdMap, Job, JobId, JobState};
use crate::proto::{JobFilter, Query, Reply, ShareRow};
use crate::report::view::JobView;
use crate::report::{self, Field};
use crate::sched::fairshare::{NodeShare, Tree, Usage};
use crate::sched::{priority, Reason};
use crate::spool::Spool;

/// The most rows one accounting query returns.
const MAX_ROWS: usize = 200_000;

/// What a query snapshot is built from, taken on the event loop: pointers
/// to the jobs and copies of small things. The build itself, a pass over
/// every job, then runs on the query thread, and the loop goes on with
/// its next turn.
pub(crate) struct SnapshotInputs {
    /// In id order.
    pub jobs: Vec<Arc<Job>>,
    pub queue_order: Vec<JobId>,
    pub facts: ViewFacts,
    pub shares: Vec<ShareRow>,
    /// Every node, the controller's own first.
    pub nodes: Vec<NodeFacts>,
}

/// What a job's view adds to the job: the last pass's reasons and
/// expected starts, and what its priority is computed from. The snapshot
/// keeps these whole and makes each view as it is read, so that a rebuild
/// after a change costs a pointer per job and the queue order: a view per
/// job, made up front, was 15 MB at 100,000 jobs and most of a rebuild,
/// and a listing right after a change waited for it.
pub(crate) struct ViewFacts {
    pub reasons: IdMap<Reason>,
    pub expected_starts: IdMap<i64>,
    pub weights: crate::config::PriorityWeights,
    pub qos: Vec<crate::config::Qos>,
    pub fairshare: crate::sched::fairshare::FactorMap,
    pub total_gpus: u32,
    /// When the snapshot was taken: the age factor's clock.
    pub now: i64,
}

impl Default for ViewFacts {
    fn default() -> ViewFacts {
        ViewFacts {
            reasons: IdMap::default(),
            expected_starts: IdMap::default(),
            weights: crate::config::PriorityWeights {
                age: 0,
                fairshare: 0,
                qos: 0,
                size: 0,
                max_age: 0,
            },
            qos: Vec::new(),
            fairshare: Default::default(),
            total_gpus: 0,
            now: 0,
        }
    }
}

impl ViewFacts {
    fn context(&self) -> priority::Context<'_> {
        priority::Context {
            weights: &self.weights,
            qos: &self.qos,
            fairshare: &self.fairshare,
            total_gpus: self.total_gpus,
        }
    }

    /// `job` as the views show it; `rater` remembers the factors of the
    /// job before (jobs read in a row share them).
    /// `reason`, why it waits if it is pending. Without `rated`, its
    /// priority is left at 0 and its factors out: a listing that shows
    /// neither spends a third of its time rating 100,000 jobs otherwise.
    fn view<'j>(
        &self,
        rater: &mut priority::Rater<'_, '_, 'j>,
        job: &'j Arc<Job>,
        reason: Reason,
        rated: bool,
    ) -> JobView {
        let pending = job.state == JobState::Pending;
        let factors = rated.then(|| rater.factors(job, self.now));
        // Few jobs have an expected start; most listings look up none.
        let expected_start = (pending && !self.expected_starts.is_empty())
            .then(|| self.expected_starts.get(&job.id).copied())
            .flatten();
        JobView {
            pending_reason: pending.then(|| Cow::Borrowed(reason.name())),
            priority: factors.as_ref().map_or(0, priority::Factors::priority),
            factors: factors.filter(|_| pending),
            expected_start,
            job: job.clone(),
            redacted: false,
            step: None,
        }
    }
}

/// The server's side of the node view (`ysinfo`), owned.
pub(crate) struct NodeFacts {
    pub name: String,
    pub drain: Option<String>,
    pub down: Option<String>,
    pub cpus: u32,
    pub memory_mb: u64,
    pub tmp_mb: u64,
    pub isolation: String,
    pub gpu_source: String,
    pub gpus: Vec<crate::model::gpu::Gpu>,
    pub drains: std::collections::BTreeMap<u32, crate::report::node::Drain>,
    pub samples: Option<Vec<crate::model::gpu::Sample>>,
}

impl SnapshotInputs {
    fn build(self) -> QueueSnapshot {
        let mut snapshot =
            QueueSnapshot::build(self.jobs, &self.queue_order, self.facts, self.shares);
        let first = self.nodes.first().map(|n| n.name.as_str());
        let jobs = &snapshot.jobs;
        let nodes = self
            .nodes
            .iter()
            .map(|node| {
                // A record from before nodes were recorded is the first
                // node's; a job over several nodes shows its part of each.
                // Only jobs that hold or claim GPUs change the view: the
                // pending ones, most of a long queue, are passed over
                // before any copy is made.
                let shares: Vec<Cow<'_, Job>> = jobs
                    .iter()
                    .filter(|j| shows_on_nodes(j))
                    .filter_map(|j| match j.node.as_deref() {
                        None if first == Some(node.name.as_str()) => Some(Cow::Borrowed(&**j)),
                        _ => j.share_on(&node.name),
                    })
                    .collect();
                let jobs: Vec<&Job> = shares.iter().map(|j| &**j).collect();
                report::node::build(&report::node::Facts {
                    name: &node.name,
                    drain: node.drain.as_deref(),
                    down: node.down.as_deref(),
                    cpus: node.cpus,
                    memory_mb: node.memory_mb,
                    tmp_mb: node.tmp_mb,
                    isolation: &node.isolation,
                    gpu_source: node.gpu_source.clone(),
                    gpus: &node.gpus,
                    jobs: &jobs,
                    drains: &node.drains,
                    samples: node.samples.as_deref(),
                })
            })
            .collect();
        snapshot.nodes = nodes;
        snapshot
    }
}

/// Whether `job` holds GPUs or claims them for its start: what the node
/// view is made of.
fn shows_on_nodes(job: &Job) -> bool {
    job.state.holds_gpus() || (job.state == JobState::Pending && !job.claim.is_empty())
}

/// A query snapshot built by the first query that needs it, on the query
/// thread, and shared by the queries after it until the next change.
pub(crate) struct LazySnapshot {
    inputs: Mutex<Option<SnapshotInputs>>,
    built: OnceLock<Arc<QueueSnapshot>>,
}

impl LazySnapshot {
    pub(crate) fn new(inputs: SnapshotInputs) -> LazySnapshot {
        LazySnapshot {
            inputs: Mutex::new(Some(inputs)),
            built: OnceLock::new(),
        }
    }

    pub(crate) fn ready(snapshot: Arc<QueueSnapshot>) -> LazySnapshot {
        LazySnapshot {
            inputs: Mutex::new(None),
            built: OnceLock::from(snapshot),
        }
    }

    pub(crate) fn get(&self) -> Arc<QueueSnapshot> {
        self.built
            .get_or_init(|| {
                let inputs = self
                    .inputs
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .take();
                // The inputs are taken once, by the one initialisation.
                Arc::new(inputs.map(SnapshotInputs::build).unwrap_or_default())
            })
            .clone()
    }
}

/// Active jobs as of the end of a loop turn, found by id and listed in
/// queue order: running ones by id, then pending ones in the order the
/// scheduler would start them. Each job's view is made as it is read.
#[derive(Default)]
pub struct QueueSnapshot {
    /// In id order.
    jobs: Vec<Arc<Job>>,
    /// Their ids, side by side: a lookup by id reads this array, not a
    /// job behind a pointer at each step of its search (a month's
    /// listing looks up each of its 180,000 jobs).
    ids: Vec<JobId>,
    /// Positions in `jobs`, in queue order.
    order: Vec<u32>,
    /// Each job's place in `order`, by position in `jobs`.
    place: Vec<u32>,
    /// Why each pending job waits, by position in `jobs`: looked up once
    /// here rather than in a map for every job of every listing.
    reasons: Vec<Reason>,
    /// What the views are made from, less the reasons (in `reasons`).
    facts: ViewFacts,
    /// Each node's GPUs and who holds them.
    pub nodes: Vec<crate::report::node::NodeInfo>,
    /// The fair-share tree, every association (filtered per requester).
    pub shares: Vec<ShareRow>,
}

impl QueueSnapshot {
    /// `jobs` in id order; `queue_order`, the pending jobs as the last
    /// scheduling pass ordered them.
    pub(crate) fn build(
        jobs: Vec<Arc<Job>>,
        queue_order: &[JobId],
        facts: ViewFacts,
        shares: Vec<ShareRow>,
    ) -> QueueSnapshot {
        // Whether each job is pending, side by side: ordering reads this
        // small array, not the jobs behind their pointers.
        let is_pending: Vec<bool> = jobs.iter().map(|j| j.state == JobState::Pending).collect();
        // The jobs stay in id order (for finding a job by id); the queue
        // order is a list of their positions: the jobs that are not pending
        // by id, then the pending ones as the last pass ordered them, then
        // those newer than the pass by id. The pass's order, sorted by id
        // (it nearly is), is merged with the jobs to give each ranked job
        // its slot: at 100,000 jobs, a map from id to rank and a sort were
        // most of a rebuild, and a rebuild follows every change a query
        // sees.
        let mut by_id: Vec<(JobId, u32)> = queue_order
            .iter()
            .enumerate()
            .map(|(rank, &id)| (id, rank as u32))
            .collect();
        by_id.sort_unstable();
        let mut slots = vec![u32::MAX; queue_order.len()];
        let mut ranked = vec![false; jobs.len()];
        let mut next = by_id.iter().peekable();
        for (i, job) in jobs.iter().enumerate() {
            let id = job.id;
            while next.next_if(|(ranked_id, _)| *ranked_id < id).is_some() {}
            if let Some(&&(_, rank)) = next.peek().filter(|(ranked_id, _)| *ranked_id == id) {
                if is_pending[i] {
                    slots[rank as usize] = i as u32;
                    ranked[i] = true;
                }
            }
        }
        let mut order: Vec<u32> = Vec::with_capacity(jobs.len());
        order.extend((0..jobs.len() as u32).filter(|&i| !is_pending[i as usize]));
        order.extend(slots.into_iter().filter(|&i| i != u32::MAX));
        order.extend(
            (0..jobs.len() as u32).filter(|&i| is_pending[i as usize] && !ranked[i as usize]),
        );
        let mut place = vec![0u32; jobs.len()];
        for (at, &i) in order.iter().enumerate() {
            place[i as usize] = at as u32;
        }
        let mut facts = facts;
        let by_id = std::mem::take(&mut facts.reasons);
        let reasons = jobs
            .iter()
            .zip(&is_pending)
            .map(|(job, &pending)| match pending {
                true => by_id.get(&job.id).copied().unwrap_or(Reason::None),
                false => Reason::None,
            })
            .collect();
        QueueSnapshot {
            ids: jobs.iter().map(|j| j.id).collect(),
            jobs,
            order,
            place,
            reasons,
            facts,
            nodes: Vec::new(),
            shares,
        }
    }

    /// Every job, in queue order.
    pub fn in_order(&self) -> impl Iterator<Item = &Arc<Job>> {
        self.order.iter().map(|&i| &self.jobs[i as usize])
    }

    /// Where the job `id` is in `jobs`.
    fn position(&self, id: JobId) -> Option<usize> {
        self.ids.binary_search(&id).ok()
    }

    /// The job `id`'s view, if it is in the queue.
    pub fn get(&self, id: JobId) -> Option<JobView> {
        self.get_rated(id, true)
    }

    /// As `get`; `rated`, with its priority (worked out for a pending job).
    fn get_rated(&self, id: JobId, rated: bool) -> Option<JobView> {
        let p = self.position(id)?;
        let ctx = self.facts.context();
        Some(self.view(&mut priority::Rater::new(&ctx), p, rated))
    }

    /// The positions of the jobs `refs` name, in queue order, when their
    /// ids alone find them all: each is a plain id of a job in the queue
    /// that is not the first task of an array (whose id names every task).
    /// `None` when the queue must be scanned instead.
    fn named(&self, refs: &[JobRef]) -> Option<Vec<usize>> {
        let mut positions = Vec::with_capacity(refs.len());
        for r in refs {
            let JobRef::Id(id) = *r else {
                return None;
            };
            let p = self.position(id)?;
            if self.jobs[p].array.as_ref().is_some_and(|a| a.job_id == id) {
                return None;
            }
            positions.push(p);
        }
        positions.sort_unstable_by_key(|&p| self.place[p]);
        positions.dedup();
        Some(positions)
    }

    /// Gives `each` the views of the jobs `filter` matches, in queue
    /// order, until it fails; `rated`, with their priorities.
    pub fn for_each_matching<E>(
        &self,
        filter: &JobFilter,
        rated: bool,
        mut each: impl FnMut(JobView) -> Result<(), E>,
    ) -> Result<(), E> {
        let named = (!filter.job_ids.is_empty())
            .then(|| self.named(&filter.job_ids))
            .flatten();
        let positions: Box<dyn Iterator<Item = usize>> = match named {
            Some(positions) => Box::new(positions.into_iter()),
            None => Box::new(self.order.iter().map(|&i| i as usize)),
        };
        let ctx = self.facts.context();
        let mut rater = priority::Rater::new(&ctx);
        for p in positions {
            if filter.matches(&self.jobs[p]) {
                each(self.view(&mut rater, p, rated))?;
            }
        }
        Ok(())
    }

    /// The view of the job at `p` in `jobs`.
    fn view<'s>(
        &'s self,
        rater: &mut priority::Rater<'_, '_, 's>,
        p: usize,
        rated: bool,
    ) -> JobView {
        self.facts
            .view(rater, &self.jobs[p], self.reasons[p], rated)
    }

    /// The views of the jobs `filter` matches, in queue order.
    pub fn matching(&self, filter: &JobFilter) -> Vec<JobView> {
        let mut views = Vec::new();
        let Ok(()) = self.for_each_matching(filter, true, |v| {
            views.push(v);
            Ok::<(), std::convert::Infallible>(())
        });
        views
    }
}

/// What `user` may see of the tree: admins everything; others the accounts
/// above their own associations, their own rows, and with `all_users` the
/// other users of their accounts. Then `-A` and `-u` narrow it down.
fn visible_shares(
    rows: &[ShareRow],
    user: &str,
    admin: bool,
    all_users: bool,
    accounts: &[String],
    users: &[String],
) -> Vec<ShareRow> {
    // Each row's chain of accounts, from the depth-first order.
    let mut path: Vec<String> = Vec::new();
    let mut mine: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut member_of: std::collections::HashSet<String> = std::collections::HashSet::new();
    for row in rows {
        path.truncate(row.depth.saturating_sub(1));
        match &row.user {
            None => path.push(row.account.clone()),
            Some(u) if u == user => {
                mine.extend(path.iter().cloned());
                member_of.insert(row.account.clone());
            }
            Some(_) => {}
        }
    }
    rows.iter()
        .filter(|r| match &r.user {
            None => admin || mine.contains(&r.account),
            Some(u) => {
                let asked = users.contains(u);
                u == user
                    || (admin && (all_users || asked))
                    || ((all_users || asked) && member_of.contains(&r.account))
            }
        })
        .filter(|r| accounts.is_empty() || accounts.contains(&r.account))
        .filter(|r| users.is_empty() || r.user.as_ref().is_none_or(|u| users.contains(u)))
        .cloned()
        .collect()
}

/// `ysshare`'s rows: the tree depth first, accounts before their children.
pub fn share_rows(
    tree: &Tree,
    shares: &[NodeShare],
    usage: &HashMap<(String, String), Usage>,
    budgets: &HashMap<String, crate::sched::budget::Standing>,
) -> Vec<ShareRow> {
    // Raw usage of each node: its own (users) plus its subtree's.
    let mut raw: Vec<i64> = tree
        .nodes
        .iter()
        .map(|n| match &n.user {
            Some(u) => usage
                .get(&(n.account.clone(), u.clone()))
                .map_or(0, |x| x.raw),
            None => 0,
        })
        .collect();
    for i in (1..tree.nodes.len()).rev() {
        if let Some(p) = tree.nodes[i].parent {
            raw[p] += raw[i];
        }
    }
    tree.depth_first()
        .into_iter()
        .map(|(i, depth)| {
            let n = &tree.nodes[i];
            let s = &shares[i];
            let budget = n.user.is_none().then(|| budgets.get(&n.account)).flatten();
            ShareRow {
                account: n.account.clone(),
                user: n.user.clone(),
                depth,
                raw_shares: n.shares,
                norm_shares: s.norm_shares,
                raw_usage: raw[i],
                usage: s.usage,
                norm_usage: s.norm_usage,
                effective_usage: s.effective_usage,
                level_fs: s.level_fs.is_finite().then_some(s.level_fs),
                budget: budget.map(|b| b.budget as f64 / crate::model::policy::TOKEN),
                budget_left: budget.map(|b| b.left() as f64 / crate::model::policy::TOKEN),
                fairshare: s.fairshare,
            }
        })
        .collect()
}

/// Who asks, and what they may see of other users' jobs.
#[derive(Clone, Debug)]
pub struct Viewer {
    pub uid: u32,
    pub user: String,
    pub admin: bool,
    /// Accounts whose jobs they see as their own: those they coordinate,
    /// and those below.
    pub coordinated: std::collections::HashSet<String>,
    pub privacy: crate::config::PrivateData,
}

impl Viewer {
    /// Whether they see all of the job: its directories, files, comment.
    fn sees_details(&self, job: &Job) -> bool {
        self.admin
            || job.uid == self.uid
            || self.coordinated.contains(&job.account)
            || self.privacy == crate::config::PrivateData::None
    }

    /// Whether they see the job at all.
    fn sees(&self, job: &Job) -> bool {
        self.privacy != crate::config::PrivateData::Jobs || self.sees_details(job)
    }

    /// Whether its usage counts in their reports.
    fn sees_usage(&self, account: &str, user: &str) -> bool {
        self.admin
            || user == self.user
            || self.coordinated.contains(account)
            || self.privacy == crate::config::PrivateData::None
    }
}

pub(crate) struct Work {
    name: String,
    viewer: Viewer,
    /// Whose the reply file is: the sender's (the viewer, or the web
    /// server asking for the user its token names).
    reply_to: u32,
    /// Seconds a finished job still shows in the queue (min_job_age_secs).
    min_job_age: u64,
    query: Query,
    /// The queue as the loop handed it over; on the query thread it is
    /// built if it has not been yet, and becomes `snapshot`.
    lazy: Option<Arc<LazySnapshot>>,
    snapshot: Option<Arc<QueueSnapshot>>,
    /// Where the answer goes instead of a reply file: a pool's node that
    /// passed the query on (a listing's rows in parts, as they come).
    to_node: Option<NodeAnswer>,
}

/// A part of a node's answer.
pub(crate) enum NodePart {
    /// The whole answer.
    Whole(Reply),
    /// Rows of a listing, in order; the last part has `end`: `None` when
    /// every row was sent, or why the listing stopped short.
    Rows {
        now: i64,
        rows: Vec<Vec<String>>,
        end: Option<Option<String>>,
    },
}

/// Sends a node its answer, a part at a time.
pub(crate) type NodeAnswer = Box<dyn FnMut(NodePart) + Send>;

/// About this many bytes of rows go to a node in one part: well within a
/// frame of the pool's link, and large enough that a frame's cost is
/// small beside its rows'.
const NODE_PART_BYTES: usize = 256 << 10;

impl Work {
    pub(crate) fn new(name: String, viewer: Viewer, min_job_age: u64, query: Query) -> Work {
        Work {
            name,
            reply_to: viewer.uid,
            viewer,
            min_job_age,
            query,
            lazy: None,
            snapshot: None,
            to_node: None,
        }
    }

    /// The answer goes to a node, through `answer`.
    pub(crate) fn answering_node(mut self, answer: NodeAnswer) -> Work {
        self.to_node = Some(answer);
        self
    }

    /// The reply goes to `uid` (who sent the request).
    pub(crate) fn replying_to(mut self, uid: u32) -> Work {
        self.reply_to = uid;
        self
    }

    pub(crate) fn with_snapshot(mut self, snapshot: Arc<LazySnapshot>) -> Work {
        self.lazy = Some(snapshot);
        self
    }

    /// The jobs this query is about, when it names them by plain ids and
    /// needs nothing else of the queue: `ysqueue -j`, `ysacct -j`,
    /// `yscontrol show job` (and their Slurm spellings), as workflow tools
    /// poll them. Such a query can be answered from a snapshot of just
    /// those jobs. `None` for anything else.
    pub(crate) fn named_jobs(&self) -> Option<Vec<JobId>> {
        /// More than this and the whole queue's snapshot is as cheap.
        const MAX_NAMED: usize = 64;
        let refs = match &self.query {
            Query::Queue { filter, .. } | Query::Accounting { filter, .. } => &filter.job_ids,
            Query::Job(r) => std::slice::from_ref(r),
            _ => return None,
        };
        if refs.is_empty() || refs.len() > MAX_NAMED {
            return None;
        }
        refs.iter()
            .map(|r| match *r {
                JobRef::Id(id) => Some(id),
                _ => None,
            })
            .collect()
    }
}

/// The thread that answers queries; `fence`, when given, runs before
/// each answer (a controller of two stops there once it may no longer
/// act, rather than answer from what it knew).
pub(crate) fn start(
    spool: Spool,
    database: &Path,
    fence: Option<Box<dyn Fn() + Send>>,
) -> std::io::Result<Sender<Work>> {
    let conn = db::open_readonly(database).map_err(std::io::Error::other)?;
    let (tx, rx) = mpsc::channel::<Work>();
    std::thread::Builder::new()
        .name("queries".into())
        .spawn(move || {
            for mut work in rx {
                if let Some(fence) = &fence {
                    fence();
                }
                if let Some(lazy) = work.lazy.take() {
                    work.snapshot = Some(lazy.get());
                }
                if let Some(mut answer) = work.to_node.take() {
                    answer_node(&work, &conn, &mut answer);
                    continue;
                }
                match &work.query {
                    Query::Accounting {
                        filter,
                        fields: Some(fields),
                        ..
                    } => {
                        stream_accounting(&spool, &work, &conn, filter, fields);
                        continue;
                    }
                    Query::Queue {
                        filter,
                        fields: Some(fields),
                        ..
                    } => {
                        stream_queue(&spool, &work, &conn, filter, fields);
                        continue;
                    }
                    _ => {}
                }
                let reply = match answer(&work, &conn) {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::error!(target: "ysched::db", "query failed: {e}");
                        Reply::Rejected {
                            error: format!("query failed: {e}"),
                        }
                    }
                };
                spool.write_reply(&work.name, work.reply_to, &reply);
            }
        })?;
    Ok(tx)
}

/// Blanks what only the job's owner, its account's coordinators and
/// admins may see (unless `private_data = "none"`): where it runs and
/// writes, and its comment.
fn view_for(mut view: JobView, viewer: &Viewer) -> JobView {
    if !viewer.sees_details(&view.job) {
        let job = std::sync::Arc::make_mut(&mut view.job);
        job.work_dir = Default::default();
        job.submit_dir = Default::default();
        job.std_out = String::new();
        job.std_err = None;
        job.comment = None;
        job.mail_user = None;
        view.redacted = true;
    }
    view
}

/// Jobs that reached a final state the filter asks for within the last
/// `min_job_age` seconds (Slurm's MinJobAge), from the database.
fn recently_finished(
    work: &Work,
    conn: &Connection,
    filter: &JobFilter,
    now: i64,
) -> Result<Vec<JobView>, DbError> {
    let finished: Vec<JobState> = filter
        .states
        .iter()
        .copied()
        .filter(|s| !s.is_active())
        .collect();
    if finished.is_empty() || work.min_job_age == 0 {
        return Ok(Vec::new());
    }
    let recently = JobFilter {
        states: finished,
        start: Some(now - work.min_job_age as i64),
        ..filter.clone()
    };
    Ok(db::find_jobs(conn, &recently, MAX_ROWS)?
        .into_iter()
        .filter(|job| !job.state.is_active())
        .map(JobView::stored)
        .collect())
}

/// Gives `each` the queue's jobs the filter matches, active ones first
/// (in the order the scheduler would start them), then the recently
/// finished, until it fails; `rated`, with their priorities.
fn for_each_queued<E>(
    snapshot: Option<&QueueSnapshot>,
    filter: &JobFilter,
    rated: bool,
    recent: Vec<JobView>,
    mut each: impl FnMut(JobView) -> Result<(), E>,
) -> Result<(), E> {
    // The snapshot may not have seen the end the database has.
    let mut shown = std::collections::HashSet::new();
    if let Some(s) = snapshot {
        s.for_each_matching(filter, rated, |view| {
            if !recent.is_empty() {
                shown.insert(view.job.id);
            }
            each(view)
        })?;
    }
    for view in recent {
        if !shown.contains(&view.job.id) {
            each(view)?;
        }
    }
    Ok(())
}

/// The queue's jobs the filter matches, in the order `for_each_queued`
/// gives them.
fn queue_views(
    snapshot: Option<&QueueSnapshot>,
    filter: &JobFilter,
    recent: Vec<JobView>,
) -> Vec<JobView> {
    let mut views = Vec::new();
    let Ok(()) = for_each_queued(snapshot, filter, true, recent, |view| {
        views.push(view);
        Ok::<(), std::convert::Infallible>(())
    });
    views
}

/// A listing's rows as a viewer may see them: other users' jobs hidden or
/// blanked as `private_data` says, and runs of an array's pending tasks
/// folded into one row (`12_[3-9%2]`), as Slurm shows them.
struct RowMaker<'a, V> {
    folder: report::ArrayFolder<V>,
    /// Every array task a row of its own (`squeue -r`).
    unfolded: bool,
    fields: &'a [Field],
    viewer: &'a Viewer,
    now: i64,
    /// The row being written, its cells' strings reused row after row.
    cells: Vec<String>,
}

impl<'a, V: std::borrow::Borrow<JobView>> RowMaker<'a, V> {
    fn new(fields: &'a [Field], viewer: &'a Viewer, now: i64) -> Self {
        RowMaker {
            folder: report::ArrayFolder::default(),
            unfolded: false,
            fields,
            viewer,
            now,
            cells: Vec::with_capacity(fields.len()),
        }
    }

    /// Takes the next view; gives `emit` the rows that are complete.
    fn push<E>(
        &mut self,
        view: V,
        emit: &mut impl FnMut(&[String]) -> Result<(), E>,
    ) -> Result<(), E> {
        if !self.viewer.sees(&view.borrow().job) {
            return Ok(());
        }
        if self.unfolded {
            return emit(self.cells(&view, None));
        }
        for (v, tasks) in self.folder.push(view) {
            emit(self.cells(&v, tasks))?;
        }
        Ok(())
    }

    /// Gives `emit` the row held back, if any.
    fn finish<E>(mut self, emit: &mut impl FnMut(&[String]) -> Result<(), E>) -> Result<(), E> {
        match self.folder.finish() {
            Some((v, tasks)) => emit(self.cells(&v, tasks)),
            None => Ok(()),
        }
    }

    fn cells(&mut self, view: &V, tasks: Option<String>) -> &[String] {
        let view = view.borrow();
        let redact = !self.viewer.sees_details(&view.job);
        report::folded_cells_into(
            &mut self.cells,
            self.fields,
            view,
            self.now,
            redact,
            tasks.as_deref(),
        );
        &self.cells
    }
}

/// Answers a node's query: a listing's rows in parts of about
/// [`NODE_PART_BYTES`], sent as they are rendered (the node writes them
/// into its reply file as ysctld writes its own), anything else whole.
fn answer_node(work: &Work, conn: &Connection, send: &mut NodeAnswer) {
    let now = crate::model::units::now();
    let mut parts = NodeParts {
        send,
        now,
        rows: Vec::new(),
        bytes: 0,
    };
    let mut emit = |cells: &[String]| -> Result<(), StreamError> {
        parts.push(cells);
        Ok(())
    };
    let listed = match &work.query {
        Query::Queue {
            filter,
            fields: Some(fields),
            ..
        } => queue_rows(work, conn, filter, fields, now, &mut emit),
        Query::Accounting {
            filter,
            fields: Some(fields),
            ..
        } => accounting_rows(work, conn, filter, fields, now, &mut emit),
        _ => {
            let reply = answer(work, conn).unwrap_or_else(|e| Reply::Rejected {
                error: format!("query failed: {e}"),
            });
            return (parts.send)(NodePart::Whole(reply));
        }
    };
    parts.end(listed.err().map(|e| e.to_string()));
}

/// A listing's rows on their way to a node.
struct NodeParts<'a> {
    send: &'a mut NodeAnswer,
    now: i64,
    rows: Vec<Vec<String>>,
    bytes: usize,
}

impl NodeParts<'_> {
    fn push(&mut self, cells: &[String]) {
        self.bytes += cells.iter().map(|c| c.len() + 4).sum::<usize>();
        self.rows.push(cells.to_vec());
        if self.bytes >= NODE_PART_BYTES {
            self.bytes = 0;
            let rows = std::mem::take(&mut self.rows);
            (self.send)(NodePart::Rows {
                now: self.now,
                rows,
                end: None,
            });
        }
    }

    /// Sends the last part: the rows left, and how the listing ended.
    fn end(self, error: Option<String>) {
        (self.send)(NodePart::Rows {
            now: self.now,
            rows: self.rows,
            end: Some(error),
        });
    }
}

/// `ysqueue`'s rows, streamed as they are rendered: the client decodes
/// each row as it comes instead of one whole reply.
fn stream_queue(
    spool: &Spool,
    work: &Work,
    conn: &Connection,
    filter: &JobFilter,
    fields: &[Field],
) {
    let now = crate::model::units::now();
    let written = spool.stream_reply(&work.name, work.reply_to, now, |row| {
        let mut emit = |cells: &[String]| row(cells).map_err(StreamError::Gone);
        queue_rows(work, conn, filter, fields, now, &mut emit)
    });
    if !written {
        tracing::debug!(target: "ysched::spool", "queue for {} not delivered (gone)", work.name);
    }
}

/// The queue's rows for `work`, into `emit`.
fn queue_rows(
    work: &Work,
    conn: &Connection,
    filter: &JobFilter,
    fields: &[Field],
    now: i64,
    mut emit: &mut dyn FnMut(&[String]) -> Result<(), StreamError>,
) -> Result<(), StreamError> {
    let recent = recently_finished(work, conn, filter, now).map_err(StreamError::Db)?;
    let mut rows = RowMaker::new(fields, &work.viewer, now);
    rows.unfolded = matches!(work.query, Query::Queue { unfolded: true, .. });
    let rated = fields.iter().any(|f| f.shows_priority());
    for_each_queued(work.snapshot.as_deref(), filter, rated, recent, |view| {
        rows.push(view, &mut emit)
    })?;
    rows.finish(&mut emit)
}

/// `ysacct`'s rows, streamed into the reply file straight from a cursor:
/// neither side holds the listing. Active jobs come from the snapshot,
/// which may be newer than the last commit this connection saw.
fn stream_accounting(
    spool: &Spool,
    work: &Work,
    conn: &Connection,
    filter: &JobFilter,
    fields: &[Field],
) {
    let now = crate::model::units::now();
    let written = spool.stream_reply(&work.name, work.reply_to, now, |row| {
        let mut emit = |cells: &[String]| row(cells).map_err(StreamError::Gone);
        accounting_rows(work, conn, filter, fields, now, &mut emit)
    });
    if !written {
        tracing::debug!(target: "ysched::spool", "listing for {} not delivered (gone)", work.name);
    }
}

/// The accounting listing's rows for `work`, into `emit`, straight from a
/// cursor.
fn accounting_rows(
    work: &Work,
    conn: &Connection,
    filter: &JobFilter,
    fields: &[Field],
    now: i64,
    mut emit: &mut dyn FnMut(&[String]) -> Result<(), StreamError>,
) -> Result<(), StreamError> {
    let snapshot = work.snapshot.as_deref();
    let batch_steps = match work.query {
        Query::Accounting {
            steps: true,
            batch_steps,
            ..
        } => Some(batch_steps),
        _ => None,
    };
    let stepped = match batch_steps {
        Some(batch) => Some((db::jobs_with_steps(conn)?, batch)),
        None => None,
    };
    let mut rows = RowMaker::new(fields, &work.viewer, now);
    let rated = fields.iter().any(|f| f.shows_priority());
    // Only the columns the fields show, unless a step's row is made from
    // its job's (the batch and extern steps of every job).
    let columns = lean::columns_for(fields).filter(|_| batch_steps != Some(true));
    db::for_each_job_reading(conn, filter, columns.as_ref(), |row| {
        let id = row.id()?;
        // The snapshot may be newer than the last commit seen here.
        let view = match snapshot.and_then(|s| s.get_rated(id, rated)) {
            Some(view) => view,
            // Its srun steps' rows are made from the whole job.
            None if columns.is_some() && stepped.as_ref().is_some_and(|(s, _)| s.contains(&id)) => {
                JobView::stored(db::job(conn, id)?)
            }
            None => JobView::stored(row.job()?),
        };
        let steps = step_views(conn, stepped.as_ref().map(|(s, b)| (s, *b)), &view)?;
        rows.push(view, &mut emit)?;
        steps
            .into_iter()
            .try_for_each(|step| rows.push(step, &mut emit))
    })?;
    rows.finish(&mut emit)
}

/// The jobs `filter` matches in the accounting database (at most
/// `MAX_ROWS`), as the snapshot has them where it is newer, each followed
/// by its steps' views with `steps` (`Some(true)`: its batch and extern
/// steps too).
fn accounting_views(
    conn: &Connection,
    snapshot: Option<&QueueSnapshot>,
    filter: &JobFilter,
    steps: Option<bool>,
) -> Result<Vec<JobView>, DbError> {
    let stored = db::find_jobs(conn, filter, MAX_ROWS)?;
    let stepped = match steps {
        Some(batch) => Some((db::jobs_with_steps(conn)?, batch)),
        None => None,
    };
    let mut views = Vec::with_capacity(stored.len());
    for job in stored {
        // The snapshot may be newer than the last commit seen here.
        let view = snapshot
            .and_then(|s| s.get(job.id))
            .unwrap_or_else(|| JobView::stored(job));
        let steps = step_views(conn, stepped.as_ref().map(|(s, b)| (s, *b)), &view)?;
        views.push(view);
        views.extend(steps);
    }
    Ok(views)
}

/// A row's view for each step of `job`'s, as sacct lists them when
/// steps are asked for (`stepped`: the jobs with srun steps, and whether
/// batch and extern steps are shown; `None`: no steps): its batch
/// script (`N.batch`) and the allocation on its nodes (`N.extern`) once
/// it started, then each srun (`N.0`...). Each is the job, with the
/// step's name, nodes, tasks, times, state, end and use.
fn step_views(
    conn: &Connection,
    stepped: Option<(&std::collections::HashSet<JobId>, bool)>,
    job: &JobView,
) -> Result<Vec<JobView>, DbError> {
    let Some((stepped, batch_steps)) = stepped else {
        return Ok(Vec::new());
    };
    let steps = if stepped.contains(&job.job.id) {
        db::steps_of(conn, job.job.id)?
    } else {
        Vec::new()
    };
    let run = job.job.restart_count;
    let mut views = if batch_steps {
        job_steps(job, &steps)
    } else {
        Vec::new()
    };
    views.extend(steps.into_iter().map(|step| {
        let step = step.as_of(job.job.state, job.job.end_time, run);
        let mut as_job = as_step(job, step.name, &step.nodes);
        as_job.state = step.state;
        as_job.start_time = Some(step.start);
        as_job.end_time = step.end;
        as_job.exit = step.exit;
        as_job.max_rss_bytes = step.usage.map(|u| u.max_rss_bytes);
        as_job.cpu_usec = step.usage.map(|u| u.total_cpu_usec());
        // Its share of the job's readings: while it runs, those since it
        // began; the peaks are the job's, not kept per step.
        let gpu = step.gpu.or_else(|| {
            let begin = step.gpu_begin.filter(|_| step.end.is_none())?;
            Some(crate::model::step::StepGpu::of(&job.job.gpu_usage).since(begin))
        });
        as_job.gpu_usage = crate::model::gpu::JobGpuUsage {
            samples: gpu.map_or(0, |g| g.samples),
            utilization_sum: gpu.map_or(0, |g| g.utilization_sum),
            ..Default::default()
        };
        JobView {
            step: Some(report::view::StepOf {
                id: crate::model::step::StepId::Numbered(step.step),
                tasks: step.tasks,
                usage: step.usage,
            }),
            ..JobView::stored(as_job)
        }
    }));
    Ok(views)
}

/// The batch step (not in an interactive allocation) and the extern step
/// of a job that started, for its current run: the batch step has its
/// job cgroup's peak memory and the CPU time its srun steps did not use;
/// the extern step ran nothing of the job's.
fn job_steps(job: &JobView, steps: &[crate::model::step::Step]) -> Vec<JobView> {
    use crate::model::step::{StepId, StepUsage};
    let Some(start) = job.job.start_time else {
        return Vec::new();
    };
    let ended = |state: JobState| match state {
        s if s.is_active() => s,
        JobState::Timeout | JobState::Cancelled | JobState::Preempted => JobState::Cancelled,
        s => s,
    };
    let mut views = Vec::new();
    if !job.job.interactive {
        let first = job.job.node.clone().unwrap_or_default();
        let mut batch = as_step(job, "batch".into(), &first);
        batch.state = ended(job.job.state);
        batch.start_time = Some(start);
        let by_steps: u64 = steps
            .iter()
            .filter(|s| s.restart == job.job.restart_count)
            .filter_map(|s| s.usage)
            .map(|u| u.total_cpu_usec())
            .sum();
        batch.cpu_usec = job.job.cpu_usec.map(|c| c.saturating_sub(by_steps));
        views.push(JobView {
            step: Some(report::view::StepOf {
                id: StepId::Batch,
                tasks: 1,
                usage: None,
            }),
            ..JobView::stored(batch)
        });
    }
    let nodes = job.job.nodelist();
    let mut external = as_step(job, "extern".into(), &nodes);
    external.state = match job.job.state {
        s if s.is_active() => s,
        JobState::Cancelled | JobState::Timeout | JobState::Preempted => JobState::Cancelled,
        _ => JobState::Completed,
    };
    external.start_time = Some(start);
    external.exit = (!job.job.state.is_active()).then(Default::default);
    external.max_rss_bytes = Some(0);
    external.cpu_usec = Some(0);
    external.gpu_usage = Default::default();
    let count = job.job.node_count();
    views.push(JobView {
        step: Some(report::view::StepOf {
            id: StepId::Extern,
            tasks: count,
            usage: Some(StepUsage {
                tasks: count,
                ..StepUsage::default()
            }),
        }),
        ..JobView::stored(external)
    });
    views
}

/// `job` as one of its steps: named `name`, on `nodes` (a hostlist), at
/// the job's times and state until the caller says otherwise.
fn as_step(job: &JobView, name: String, nodes: &str) -> crate::model::job::Job {
    let mut as_job = (*job.job).clone();
    let mut names = crate::model::hostlist::expand(nodes)
        .unwrap_or_default()
        .into_iter();
    as_job.node = names.next();
    as_job.peers = names.collect();
    as_job.name = name;
    as_job.suspended_secs = 0;
    as_job.suspended_at = None;
    // Who cancelled the job is said on the job's row.
    as_job.reason = None;
    as_job
}

/// Why a streamed listing stopped.
#[derive(Debug, thiserror::Error)]
enum StreamError {
    #[error("{0}")]
    Db(#[from] DbError),
    /// The requester went away: its reply file is gone or full.
    #[error("cannot write the listing: {0}")]
    Gone(std::io::Error),
}

fn answer(work: &Work, conn: &Connection) -> Result<Reply, DbError> {
    let snapshot = work.snapshot.as_deref();
    let now = crate::model::units::now();
    let viewer = &work.viewer;
    let reply = |views: Vec<JobView>, fields: &Option<Vec<Field>>| {
        let unfolded = matches!(work.query, Query::Queue { unfolded: true, .. });
        rows_or_jobs(views, fields, viewer, (now, unfolded))
    };
    match &work.query {
        Query::Queue { filter, fields, .. } => {
            let recent = recently_finished(work, conn, filter, now)?;
            let views = queue_views(snapshot, filter, recent);
            Ok(reply(views, fields))
        }
        Query::QueuePage {
            filter,
            offset,
            limit,
        } => {
            let recent = recently_finished(work, conn, filter, now)?;
            let views = queue_views(snapshot, filter, recent);
            let visible: Vec<JobView> = views.into_iter().filter(|v| viewer.sees(&v.job)).collect();
            let total = visible.len() as u64;
            let jobs = visible
                .into_iter()
                .skip(*offset as usize)
                .take(*limit as usize)
                .map(|v| view_for(v, viewer))
                .collect();
            Ok(Reply::JobPage { jobs, total, now })
        }
        Query::Accounting {
            filter,
            fields,
            steps,
            batch_steps,
        } => {
            let shown = (*steps).then_some(*batch_steps);
            let views = accounting_views(conn, snapshot, filter, shown)?;
            Ok(reply(views, fields))
        }
        Query::Usage {
            period,
            accounts,
            users,
            waste_after_secs,
        } => usage_report(conn, viewer, (period, accounts, users), *waste_after_secs),
        Query::Node => {
            let mut nodes = snapshot.map(|s| s.nodes.clone()).unwrap_or_default();
            // Under private_data = "jobs", others' jobs on a GPU are hidden.
            if viewer.privacy == crate::config::PrivateData::Jobs && !viewer.admin {
                for gpu in nodes.iter_mut().flat_map(|n| n.gpus.iter_mut()) {
                    if gpu.users.iter().any(|u| *u != viewer.user) {
                        gpu.jobs.clear();
                        gpu.users = vec!["(hidden)".into()];
                    }
                }
            }
            Ok(Reply::Nodes { nodes })
        }
        Query::Audit { limit } => {
            if !viewer.admin {
                return Ok(Reply::Rejected {
                    error: "permission denied: only root and the config's admins may read the audit log".into(),
                });
            }
            Ok(Reply::Audit {
                rows: db::audit_tail(conn, *limit)?,
            })
        }
        Query::Shares {
            accounts,
            users,
            all_users,
        } => {
            let rows = snapshot.map(|s| s.shares.as_slice()).unwrap_or_default();
            Ok(Reply::Shares {
                rows: visible_shares(
                    rows,
                    &viewer.user,
                    viewer.admin,
                    *all_users,
                    accounts,
                    users,
                ),
            })
        }
        Query::Job(r) => one_job(conn, snapshot, viewer, *r, now),
        Query::Output { job, bytes } => output_tail(conn, snapshot, viewer, *job, *bytes),
    }
}

/// Cells rendered here, where the jobs are, or whole (redacted) jobs.
fn rows_or_jobs(
    views: Vec<JobView>,
    fields: &Option<Vec<Field>>,
    viewer: &Viewer,
    (now, unfolded): (i64, bool),
) -> Reply {
    match fields {
        Some(fields) => {
            let mut maker = RowMaker::new(fields, viewer, now);
            maker.unfolded = unfolded;
            let mut rows = Vec::new();
            let mut add = |cells: &[String]| -> Result<(), std::convert::Infallible> {
                rows.push(cells.to_vec());
                Ok(())
            };
            for v in views {
                let Ok(()) = maker.push(v, &mut add);
            }
            let Ok(()) = maker.finish(&mut add);
            Reply::Rows { rows, now }
        }
        None => Reply::Jobs {
            jobs: views
                .into_iter()
                .filter(|v| viewer.sees(&v.job))
                .map(|v| view_for(v, viewer))
                .collect(),
            now,
        },
    }
}

/// The usage report of a period, for what the viewer may see of it;
/// purged months come whole from their summaries.
fn usage_report(
    conn: &Connection,
    viewer: &Viewer,
    (period, accounts, users): (&crate::report::usage::Period, &[String], &[String]),
    waste_after_secs: u64,
) -> Result<Reply, DbError> {
    let mut builder = crate::report::usage::Builder::new(period.clone(), waste_after_secs);
    let wanted = |account: &str, user: &str| {
        viewer.sees_usage(account, user)
            && (accounts.is_empty() || accounts.iter().any(|a| a == account))
            && (users.is_empty() || users.iter().any(|u| u == user))
    };
    // Purged months come whole from their summaries.
    let purged = db::purged_months(conn, period.from, period.to)?;
    if let Some(cut) = purged
        .iter()
        .find(|m| m.start < period.from || m.end > period.to)
    {
        return Ok(Reply::Rejected {
            error: format!(
                "the period cuts through {}, whose job rows were purged (purge_after_months): \
                 report it whole, with --month {}",
                cut.month, cut.month
            ),
        });
    }
    let in_purged = |t: i64| purged.iter().any(|m| t >= m.start && t < m.end);
    db::for_each_ended(conn, period.from, period.to, |job| {
        if wanted(&job.account, &job.user) && !in_purged(job.end_time) {
            builder.add(&job);
        }
    })?;
    let mut summarised = Vec::new();
    for month in &purged {
        for (account, user, summary) in db::month_summaries(conn, &month.month)? {
            if wanted(&account, &user) {
                builder.add_summary(&account, &user, &summary);
            }
        }
        builder.add_waste(
            month
                .waste
                .iter()
                .filter(|w| wanted(&w.account, &w.user))
                .cloned(),
        );
        summarised.push(month.month.clone());
    }
    builder.add_gpu_hours(&db::gpu_hours(
        conn,
        crate::report::history::hour_of(period.from),
        period.to,
    )?);
    let mut report = builder.finish();
    report.checkpoints = db::preemptions::lines(conn, period.from, period.to, wanted)?;
    report.complete = viewer.admin && accounts.is_empty() && users.is_empty();
    report.summarised_months = summarised;
    Ok(Reply::Usage {
        report: Box::new(report),
    })
}

/// One job (an array's id: every task), from the snapshot and the
/// database.
fn one_job(
    conn: &Connection,
    snapshot: Option<&QueueSnapshot>,
    viewer: &Viewer,
    r: crate::array::JobRef,
    now: i64,
) -> Result<Reply, DbError> {
    // An array's id shows every task.
    let filter = JobFilter {
        job_ids: vec![r],
        ..JobFilter::default()
    };
    let mut views: Vec<JobView> = snapshot.map(|s| s.matching(&filter)).unwrap_or_default();
    for job in db::find_jobs(conn, &filter, MAX_ROWS)? {
        if !views.iter().any(|v| v.job.id == job.id) {
            views.push(JobView::stored(job));
        }
    }
    let existed = !views.is_empty();
    views.retain(|v| viewer.sees(&v.job));
    if views.is_empty() {
        return Ok(Reply::Rejected {
            error: if existed {
                format!("job {r} is another user's, and private_data = \"jobs\" hides it")
            } else {
                format!("job {r} does not exist")
            },
        });
    }
    views.sort_by_key(|v| v.job.id);
    tracing::debug!(target: "ysched::daemon", "{} looked at job {r}", viewer.user);
    Ok(Reply::Jobs {
        jobs: views.into_iter().map(|v| view_for(v, viewer)).collect(),
        now,
    })
}

/// The end of a job's output file, for one who sees the job's details,
/// read with their own rights (the file's mode decides, as for `tail`).
fn output_tail(
    conn: &Connection,
    snapshot: Option<&QueueSnapshot>,
    viewer: &Viewer,
    r: crate::array::JobRef,
    bytes: u32,
) -> Result<Reply, DbError> {
    let filter = JobFilter {
        job_ids: vec![r],
        ..JobFilter::default()
    };
    let job = match snapshot.and_then(|s| s.matching(&filter).first().map(|v| v.job.clone())) {
        Some(job) => Some((*job).clone()),
        None => db::find_jobs(conn, &filter, 1)?.into_iter().next(),
    };
    let refuse = |error: String| Ok(Reply::Rejected { error });
    let Some(job) = job.filter(|j| viewer.sees(j)) else {
        return refuse(format!("job {r} does not exist"));
    };
    if !viewer.sees_details(&job) {
        return refuse(format!(
            "permission denied: job {r} is {}'s, and so is its output",
            job.user
        ));
    }
    let path = job.stdout_path();
    let Some(gid) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(viewer.uid))
        .ok()
        .flatten()
        .map(|u| u.gid.as_raw())
    else {
        return refuse(format!(
            "uid {} has no user name on this server",
            viewer.uid
        ));
    };
    let bytes = bytes.clamp(1, 1 << 20) as usize;
    match crate::exec::tail::tail_as(&path, &viewer.user, viewer.uid, gid, bytes) {
        Ok((text, truncated)) => Ok(Reply::Output {
            job_id: job.id,
            path: path.display().to_string(),
            text: report::escape_controls(&String::from_utf8_lossy(&text), true).into_owned(),
            truncated,
        }),
        Err(e) => refuse(e.to_string()),
    }
}

/// Answers a query straight from the database, for when no daemon runs
/// (root or the personal-mode owner, who can read the file).
pub fn answer_offline(
    database: &Path,
    query: Query,
    uid: u32,
    admin: bool,
) -> Result<Reply, DbError> {
    let conn = db::open_readonly(database)?;
    let work = Work {
        name: String::new(),
        reply_to: uid,
        min_job_age: 0,
        viewer: Viewer {
            uid,
            user: String::new(),
            admin,
            coordinated: Default::default(),
            privacy: Default::default(),
        },
        query,
        lazy: None,
        snapshot: None,
        to_node: None,
    };
    if work.query == Query::Node {
        return Ok(Reply::Rejected {
            error: "ysctld is not running: only it knows the GPUs' state".into(),
        });
    }
    // Without the daemon, active jobs come from the database as last written.
    if let Query::Queue { filter, fields, .. } = &work.query {
        let mut active = filter.clone();
        if active.states.is_empty() {
            active.states = vec![JobState::Pending, JobState::Running, JobState::Completing];
        }
        let query = Query::Accounting {
            filter: active,
            fields: fields.clone(),
            steps: false,
            batch_steps: false,
        };
        return answer(&Work { query, ..work }, &conn);
    }
    answer(&work, &conn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::job::{example_job, ArrayTask};

    /// Running 5; pending 3, 9 and an array 10 (tasks 10, 11, 12), in the
    /// scheduler's order 12, 9, 3, 10 (11 unranked).
    fn snapshot() -> QueueSnapshot {
        snapshot_in(&[12, 9, 3, 10])
    }

    /// The same jobs, with the scheduler's order given.
    fn snapshot_in(queue_order: &[JobId]) -> QueueSnapshot {
        let mut jobs = std::collections::BTreeMap::new();
        let mut add = |id: JobId, state: JobState, array: Option<u32>| {
            let mut job = example_job(id);
            job.state = state;
            job.array = array.map(|task_id| ArrayTask {
                job_id: 10,
                task_id,
                spec: "0-2".into(),
            });
            jobs.insert(id, std::sync::Arc::new(job));
        };
        add(3, JobState::Pending, None);
        add(5, JobState::Running, None);
        add(9, JobState::Pending, None);
        for (id, task) in [(10, 0), (11, 1), (12, 2)] {
            add(id, JobState::Pending, Some(task));
        }
        QueueSnapshot::build(
            jobs.into_values().collect(),
            queue_order,
            facts(),
            Vec::new(),
        )
    }

    /// No reasons, no weights, 4 GPUs, at time 100.
    fn facts() -> ViewFacts {
        ViewFacts {
            total_gpus: 4,
            now: 100,
            ..ViewFacts::default()
        }
    }

    fn ids(views: &[JobView]) -> Vec<JobId> {
        views.iter().map(|v| v.job.id).collect()
    }

    #[test]
    fn the_snapshot_keeps_queue_order_and_finds_jobs_by_id() {
        let s = snapshot();
        let order: Vec<JobId> = s.in_order().map(|j| j.id).collect();
        assert_eq!(order, vec![5, 12, 9, 3, 10, 11]);
        for id in [3, 5, 9, 10, 11, 12] {
            assert_eq!(s.get(id).map(|v| v.job.id), Some(id));
        }
        assert!(s.get(4).is_none() && s.get(13).is_none() && s.get(0).is_none());
    }

    #[test]
    fn a_lazy_snapshot_is_built_once_and_shared() {
        let inputs = SnapshotInputs {
            jobs: snapshot().jobs.clone(),
            queue_order: vec![12, 9, 3, 10],
            facts: facts(),
            shares: Vec::new(),
            nodes: vec![NodeFacts {
                name: "gpu01".into(),
                drain: None,
                down: None,
                cpus: 8,
                memory_mb: 1024,
                tmp_mb: 0,
                isolation: "off".into(),
                gpu_source: "declared".into(),
                gpus: Vec::new(),
                drains: Default::default(),
                samples: None,
            }],
        };
        let lazy = LazySnapshot::new(inputs);
        let first = lazy.get();
        assert!(Arc::ptr_eq(&first, &lazy.get()), "built once");
        let order: Vec<JobId> = first.in_order().map(|j| j.id).collect();
        assert_eq!(order, vec![5, 12, 9, 3, 10, 11]);
        assert_eq!(first.nodes[0].name, "gpu01");
        let ready = LazySnapshot::ready(first.clone());
        assert!(Arc::ptr_eq(&ready.get(), &first));
    }

    #[test]
    fn a_view_is_made_from_the_facts_when_it_is_read() {
        let mut job = example_job(9);
        job.state = JobState::Pending;
        job.submit_time = 40;
        let mut facts = facts();
        facts.weights.age = 1000;
        facts.weights.max_age = 120;
        facts.reasons.insert(9, Reason::Resources);
        facts.expected_starts.insert(9, 500);
        let expected = priority::factors(&job, &facts.context(), 100);
        let s = QueueSnapshot::build(vec![Arc::new(job)], &[9], facts, Vec::new());
        let view = s.get(9).unwrap();
        assert_eq!(view.pending_reason.as_deref(), Some("Resources"));
        assert_eq!(view.expected_start, Some(500));
        assert_eq!(view.factors, Some(expected));
        assert_eq!(view.priority, 500, "half of max_age, weight 1000");
        assert_eq!(s.matching(&JobFilter::default()), vec![view.clone()]);
        // A listing that shows no priority gets the rest of the view.
        let mut unrated = Vec::new();
        let Ok(()) = s.for_each_matching(&JobFilter::default(), false, |v| {
            unrated.push(v);
            Ok::<(), std::convert::Infallible>(())
        });
        assert_eq!(unrated.len(), 1);
        assert_eq!(
            (unrated[0].priority, unrated[0].factors.as_ref()),
            (0, None)
        );
        assert_eq!(unrated[0].pending_reason, view.pending_reason);
        assert_eq!(unrated[0].expected_start, Some(500));
    }

    #[test]
    fn the_queue_order_passes_over_what_it_cannot_place() {
        // A job gone since the pass (7), one no longer pending (5), and
        // one named twice (12): placed once, where first named.
        let s = snapshot_in(&[7, 12, 5, 9, 12, 3]);
        let order: Vec<JobId> = s.in_order().map(|j| j.id).collect();
        assert_eq!(order, vec![5, 12, 9, 3, 10, 11]);
        // No pass yet: pending jobs by id after the others.
        let s = snapshot_in(&[]);
        let order: Vec<JobId> = s.in_order().map(|j| j.id).collect();
        assert_eq!(order, vec![5, 3, 9, 10, 11, 12]);
    }

    #[test]
    fn looking_up_by_id_finds_what_a_scan_finds() {
        let s = snapshot();
        let refs = |text: &[&str]| -> Vec<JobRef> {
            text.iter()
                .flat_map(|t| JobRef::parse(t).unwrap())
                .collect()
        };
        for (named, expected) in [
            (refs(&["9"]), vec![9]),
            (refs(&["3", "5", "9", "3"]), vec![5, 9, 3]),
            // An array's id names every task; a later task's id itself.
            (refs(&["10"]), vec![12, 10, 11]),
            (refs(&["11"]), vec![11]),
            (refs(&["10_2"]), vec![12]),
            (refs(&["4"]), vec![]),
            (refs(&["4", "9"]), vec![9]),
        ] {
            let filter = JobFilter {
                job_ids: named.clone(),
                ..JobFilter::default()
            };
            let scanned: Vec<JobId> = s
                .in_order()
                .filter(|j| filter.matches(j))
                .map(|j| j.id)
                .collect();
            assert_eq!(ids(&s.matching(&filter)), scanned, "{named:?}");
            assert_eq!(ids(&s.matching(&filter)), expected, "{named:?}");
        }
        // The other criteria still apply to jobs found by id.
        let filter = JobFilter {
            job_ids: refs(&["5", "9"]),
            states: vec![JobState::Pending],
            ..JobFilter::default()
        };
        assert_eq!(ids(&s.matching(&filter)), vec![9]);
    }
}
