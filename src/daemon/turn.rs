//! The event loop and its turn: take events, apply them in one
//! transaction, commit, then reply, notify and launch.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::db::{self};
use crate::exec::executor::ImageStatus;
use crate::model::job::{IdMap, Job, JobId, JobState};
use crate::proto::{Channel, Control, Reply, Request};
use crate::sched::{self, Reason};
use crate::spool::socket::{self};
use crate::spool::Inbound;

use super::effects::Row;
use super::error::DaemonError;
use super::state::*;
use crate::query::{self, QueueSnapshot};

impl Daemon {
    /// At start: loads active jobs, re-adopts running ones, and takes in
    /// whatever arrived in the spool while the daemon was down.
    pub(super) fn recover(&mut self) -> Result<(), DaemonError> {
        if !self.spool.keep_reserve(self.core.config.spool_reserve) {
            tracing::warn!(
                target: "ysched::spool",
                "no room for the spool's reserve of {} bytes at {}: the filesystem is nearly full",
                self.core.config.spool_reserve,
                self.spool.reserve_path().display()
            );
        }
        self.core.policy.usage = db::load_usage(&self.store.db)?.into_iter().collect();
        self.stats.preemptions_total = db::count_audit(&self.store.db, "preempt")?;
        let now = self.now();
        self.handle_with(|core, reads, _| core.load_budgets(reads, now))?;
        self.load_gpu_drains()?;
        self.load_node_drains()?;
        for ((node, gpu), d) in &self.core.policy.drains {
            tracing::warn!(target: "ysched::daemon", "GPU {gpu} of {node} is drained since {} by {}: {}", crate::model::units::format_timestamp(d.since), d.by, d.reason);
        }
        let jobs = &mut self.core.jobs;
        let unreadable = db::for_each_active_job(&self.store.db, |job| jobs.insert(job))?;
        self.load_stops()?;
        for bad in unreadable {
            tracing::error!(
                target: "ysched::daemon",
                "job {} quarantined (marked FAILED): its row does not read back: {}",
                bad.id,
                bad.problem.escape_debug()
            );
            let time = self.now();
            self.write(Row::Quarantined {
                bad: Box::new(bad),
                time,
            })?;
        }
        // A database from before preemptions were counted: a job with a
        // suspended victim must count as a preemptor, or its end would not
        // resume the victim.
        let preemptors: Vec<JobId> = self
            .core
            .jobs
            .all()
            .filter(|j| j.state == JobState::Suspended)
            .filter_map(|j| j.preempted_by)
            .collect();
        for id in preemptors {
            if let Some(job) = self.core.jobs.job_mut(&id) {
                job.preemptions_caused = job.preemptions_caused.max(1);
            }
        }
        let (pending, running) = self.core.jobs.all().fold((0, 0), |(p, r), j| {
            if j.state == JobState::Pending {
                (p + 1, r)
            } else {
                (p, r + 1)
            }
        });
        tracing::info!(target: "ysched::daemon", "loaded {pending} pending and {running} running jobs");
        let running: Vec<JobId> = self
            .core
            .jobs
            .all()
            .filter(|j| j.state.holds_gpus())
            .map(|j| j.id)
            .collect();
        for id in running {
            self.readopt(id)?;
        }
        self.refreeze_local();
        // Groups of jobs that are not running any more (their supervisor
        // was killed along with the daemon, say): nothing may stay behind.
        self.clear_leftovers();
        self.commit()?;
        self.spool.remove_stale(STALE_AFTER);
        self.enqueue(self.spool.list_incoming()?);
        Ok(())
    }

    pub(super) fn enqueue(&mut self, names: Vec<String>) {
        for name in names {
            if self.inbox.backlog_set.insert(name.clone()) {
                self.inbox.backlog.push(Incoming::File(name));
            }
        }
    }

    pub(super) fn event_loop(
        mut self,
        inbox: Receiver<Event>,
    ) -> Result<super::leading::Stopped, DaemonError> {
        let mut next_maintenance = Instant::now() + MAINTENANCE_EVERY;
        loop {
            if let Some(watchdog) = &mut self.timers.watchdog {
                watchdog.pet();
            }
            let timeout = self.next_timeout(next_maintenance);
            let pass_now = self.reschedule && self.between.pass_due();
            let first = if self.inbox.backlog.is_empty() && !pass_now {
                match inbox.recv_timeout(timeout) {
                    Ok(e) => Some(e),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => {
                        return Ok(super::leading::Stopped::Stopped)
                    }
                }
            } else {
                None
            };
            // Still leading? Before what came during a stall is taken in.
            self.fence();
            let mut exited = Vec::new();
            for event in first.into_iter().chain(inbox.try_iter()) {
                match event {
                    Event::Spool(names) => self.enqueue(names),
                    Event::Socket(request) => self.inbox.backlog.push(Incoming::Socket(request)),
                    Event::Rescan => {
                        tracing::info!(target: "ysched::spool", "rescanning the spool");
                        let names = self.spool.list_incoming()?;
                        self.enqueue(names);
                    }
                    Event::SupervisorExited(id) => exited.push(id),
                    Event::Pool(e) => {
                        if let Some(pool) = &mut self.pool {
                            pool.events.push(e);
                        }
                    }
                    Event::Reload => {
                        let _ = self.reload(None);
                    }
                    Event::Shutdown => self.shutdown = true,
                }
            }
            let mut queries = Vec::new();
            let mut processed = Vec::new();
            exited.append(&mut self.turn.exits_to_retry);
            let exits_taken = exited.clone();
            let applied =
                self.apply_turn(exited, &mut next_maintenance, &mut queries, &mut processed);
            match applied {
                Ok(()) => {}
                Err(e) if e.is_storage_failure() => self.after_failed_commit(&e, exits_taken)?,
                Err(e) => return Err(e),
            }
            for (requester, reply) in std::mem::take(&mut self.turn.replies) {
                match requester {
                    Requester::File { name, uid } => {
                        self.spool.write_reply(&name, uid, &reply);
                    }
                    Requester::Socket(connection) => socket::answer(&connection, &reply),
                    Requester::Node { node, name } => self.answer_node(&node, name, reply),
                }
            }
            self.spool.discard_all(&processed);
            self.launch_started()?;
            queries.append(&mut self.turn.node_queries);
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
                    self.core.jobs.all().filter(|j| j.state.holds_gpus()).count()
                );
                // The next start may trust the file without reading it all.
                if let Err(e) = crate::db::clean_stop::mark(&self.store.db, &self.spool.database())
                {
                    tracing::warn!(target: "ysched::db", "cannot mark the clean stop: {e}");
                }
                // Nothing is written after this: the lead may go.
                return Ok(match &self.store.leadership {
                    Some(l) if l.handing_over => l.resign(),
                    _ => super::leading::Stopped::Stopped,
                });
            }
        }
    }

    /// One turn's work, in one transaction, committed at its end: exits,
    /// requests, time limits, maintenance, the scheduling pass. Replies
    /// wait in `self.turn.replies`; queries and the spool names taken are
    /// handed back through `queries` and `processed`.
    pub(super) fn apply_turn(
        &mut self,
        exited: Vec<JobId>,
        next_maintenance: &mut Instant,
        queries: &mut Vec<query::Work>,
        processed: &mut Vec<String>,
    ) -> Result<(), DaemonError> {
        let now = self.now();
        let mut exited = exited;
        exited.extend(self.take_pool_events(now)?);
        let exited_any = !exited.is_empty();
        for id in exited {
            self.job_exited(id, now)?;
        }
        self.unfreezable(now)?;
        self.check_leases(now)?;
        let take = self.inbox.backlog.len().min(MAX_BATCH);
        let mut batch = std::mem::take(&mut self.inbox.backlog);
        self.inbox.backlog = batch.split_off(take);
        let mut batch = batch.into_iter();
        let taken = self.take_requests(&mut batch, now, queries, processed);
        // Requests not reached stay for the next turn.
        let rest: Vec<Incoming> = batch.collect();
        self.inbox.backlog.splice(0..0, rest);
        taken?;
        self.handle_with(|core, reads, fx| {
            super::time_limits::on_clock(core, reads, now, fx);
            Ok(())
        })?;
        if self
            .gpu_watch
            .next_sample
            .is_some_and(|t| Instant::now() >= t)
        {
            self.sample_gpus()?;
        }
        if self.stats.next_metrics.is_some_and(|t| Instant::now() >= t) {
            self.write_metrics(now);
        }
        let retains = self.core.config.purge_after_months.is_some()
            || self.core.config.keep_payloads_days.is_some();
        if retains && Instant::now() >= self.timers.next_retention {
            let more = self.retention_step(now)?;
            self.timers.next_retention = if more {
                Instant::now()
            } else {
                Instant::now() + MAINTENANCE_EVERY
            };
        }
        if Instant::now() >= self.timers.next_police {
            self.police_spool();
            self.prefetch_images();
            self.end_unwatched_allocations(now)?;
            self.timers.next_police = Instant::now() + POLICE_EVERY;
        }
        if Instant::now() >= *next_maintenance {
            self.spool.remove_stale(STALE_AFTER);
            *next_maintenance = Instant::now() + MAINTENANCE_EVERY;
        }
        let mut changed = exited_any;
        let woken = self.core.policy.wake_at.is_some_and(|w| w <= now);
        let last_pass = Duration::from_secs_f64(self.stats.last_pass_seconds);
        match self.between.next(self.reschedule || woken, last_pass) {
            super::pace::Next::Pass => {
                self.schedule(now)?;
                changed = true;
            }
            super::pace::Next::Quick => {
                self.quick_starts(now)?;
                changed = true;
            }
            super::pace::Next::Nothing => {}
        }
        let flush = self.shutdown || Instant::now() >= self.stats.next_idle_flush;
        if changed || flush {
            self.track_idle(now, flush)?;
            if flush {
                self.stats.next_idle_flush = Instant::now() + IDLE_FLUSH_EVERY;
            }
        }
        self.commit()?;
        Ok(())
    }

    /// Handles the requests of one batch, in order, until one fails.
    pub(super) fn take_requests(
        &mut self,
        batch: &mut std::vec::IntoIter<Incoming>,
        now: i64,
        queries: &mut Vec<query::Work>,
        processed: &mut Vec<String>,
    ) -> Result<(), DaemonError> {
        for incoming in batch {
            let max = self.core.config.max_spool_file;
            let (inbound, connection) = match incoming {
                Incoming::File(name) => {
                    self.inbox.backlog_set.remove(&name);
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
                self.stats.requests_total += 1;
                self.stats.ingest_seconds_sum +=
                    crate::spool::age_of_name(name).map_or(0.0, |age| age.as_secs_f64().min(60.0));
            }
            let handled = match self.ingest(inbound, now) {
                Ok(h) => h,
                Err(e) => {
                    // Answered with the turn's failure, if the turn fails.
                    if let Some(r) = requester {
                        let error = "not applied".to_string();
                        self.turn.replies.push((r, Reply::Rejected { error }));
                    }
                    return Err(e);
                }
            };
            match (handled, requester) {
                (Handled::Nothing, _) | (_, None) => {}
                (Handled::Reply(reply), Some(r)) => self.turn.replies.push((r, reply)),
                (Handled::Query(q), Some(Requester::File { .. })) => queries.push(*q),
                // Queries' replies are streamed into reply files.
                (Handled::Query(_), Some(r)) => {
                    let error =
                        "queries are asked through the spool directory, not the daemon's socket"
                            .to_string();
                    self.turn.replies.push((r, Reply::Rejected { error }));
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
    pub(super) fn after_failed_commit(
        &mut self,
        failure: &DaemonError,
        exits_taken: Vec<JobId>,
    ) -> Result<(), DaemonError> {
        self.roll_back_turn(failure, exits_taken)?;
        // The disk may stay full a while: not a turn a millisecond.
        std::thread::sleep(Duration::from_millis(500));
        Ok(())
    }

    /// What a failed commit undoes (see `after_failed_commit`, which
    /// then pauses; the simulation calls this alone).
    pub(super) fn roll_back_turn(
        &mut self,
        failure: &DaemonError,
        exits_taken: Vec<JobId>,
    ) -> Result<(), DaemonError> {
        if !self.store.db.is_autocommit() {
            let _ = self.store.db.execute_batch("ROLLBACK");
        }
        self.store.in_transaction = false;
        let freed = self.spool.release_reserve();
        tracing::error!(
            target: "ysched::db",
            "a turn could not be recorded, so nothing of it was applied: {failure}{}",
            if freed { "; the spool's reserve was released to make room" } else { "" }
        );
        let error = format!(
            "not applied: ysctld could not record it ({failure}); the spool filesystem may be full. Nothing was changed; try again"
        );
        for (_, reply) in &mut self.turn.replies {
            if !matches!(reply, Reply::Rejected { .. })
                || matches!(reply, Reply::Rejected { error } if error == "not applied")
            {
                *reply = Reply::Rejected {
                    error: error.clone(),
                };
            }
        }
        // Nothing of the turn leaves: no command, no notification; what
        // the nodes sent is taken in again, and what it credited of their
        // freezes is credited again.
        if let Some(pool) = &mut self.pool {
            pool.freezes = pool.freezes_committed.clone();
            let taken = std::mem::take(&mut pool.taken);
            pool.events.splice(0..0, taken);
        }
        self.turn.out.clear();
        self.turn.to_launch.clear();
        self.turn.exits_to_retry = exits_taken;
        self.reload_state(self.now())
    }

    /// Removes what no user may hold in the drop boxes, and makes the
    /// reserve again once there is room for it and some to spare.
    pub(super) fn police_spool(&mut self) {
        for r in self.spool.police(self.core.config.max_spool_file) {
            tracing::warn!(target: "ysched::spool", "removed {} of uid {}: {}", r.path.display(), r.uid, r.why);
        }
        let reserve = self.core.config.spool_reserve;
        if reserve > 0 && !self.spool.reserve_path().exists() {
            let room = self.spool.free_bytes().unwrap_or(0);
            if room > reserve.saturating_mul(2) && self.spool.keep_reserve(reserve) {
                tracing::info!(target: "ysched::spool", "the spool's reserve of {reserve} bytes is back");
            }
        }
    }

    /// The jobs, usage, budgets and drains as the database has them.
    pub(super) fn reload_state(&mut self, now: i64) -> Result<(), DaemonError> {
        self.core.jobs = Jobs::default();
        let jobs = &mut self.core.jobs;
        db::for_each_active_job(&self.store.db, |job| jobs.insert(job))?;
        self.core.policy.usage = db::load_usage(&self.store.db)?.into_iter().collect();
        self.handle_with(|core, reads, _| core.load_budgets(reads, now))?;
        self.load_gpu_drains()?;
        self.load_node_drains()?;
        self.core.policy.ended.clear();
        // Stops this turn made are undone with it; those made before are
        // read back from the records.
        self.load_stops()?;
        self.core.policy.pass_tree = None;
        self.snapshot = None;
        self.replan();
        Ok(())
    }

    /// When each job stopping was told to stop, as recorded: a freeze its
    /// node reports later is credited no further than that (found by the
    /// simulation of the pool, seed 80 over 2 hours: a stop forgotten
    /// with a later turn's failed commit let a freeze read after it be
    /// credited to its read, beyond the run's end).
    /// So is each running job's last suspension that ended in its run
    /// (`PolicyState::resumed`).
    fn load_stops(&mut self) -> Result<(), DaemonError> {
        self.core.policy.stopping.clear();
        self.core.policy.resumed.clear();
        self.core.policy.resumed_again.clear();
        let stopping: Vec<JobId> = self
            .core
            .jobs
            .all()
            .filter(|j| j.state == JobState::Completing)
            .map(|j| j.id)
            .collect();
        for id in stopping {
            if let Some(at) = db::stopped_at(&self.store.db, id)? {
                self.core.policy.stopping.insert(id, at);
            }
        }
        let resumed: Vec<(JobId, i64)> = self
            .core
            .jobs
            .running()
            .filter(|j| j.suspended_secs > 0 && j.suspended_at.is_none())
            .filter_map(|j| Some((j.id, j.start_time?)))
            .collect();
        for (id, start) in resumed {
            if let Some(last) = db::last_resumption(&self.store.db, id, start)? {
                self.core.policy.resumed.insert(id, last);
            }
        }
        Ok(())
    }

    /// How long the loop may sleep: until the next time limit, `--begin`
    /// time or maintenance, whichever comes first.
    pub(super) fn next_timeout(&mut self, next_maintenance: Instant) -> Duration {
        let now_s = self.now();
        let mut next = next_maintenance.saturating_duration_since(Instant::now());
        let config = &self.core.config;
        let retention = (config.purge_after_months.is_some()
            || config.keep_payloads_days.is_some())
        .then_some(self.timers.next_retention);
        let police = Some(self.timers.next_police);
        for t in [
            self.gpu_watch.next_sample,
            self.stats.next_metrics,
            retention,
            police,
            self.timers
                .watchdog
                .as_ref()
                .map(super::watchdog::Watchdog::next),
            self.next_lease_deadline(),
            self.reschedule
                .then(|| self.between.until_pass())
                .flatten()
                .map(|wait| Instant::now() + wait),
        ]
        .into_iter()
        .flatten()
        {
            next = next.min(t.saturating_duration_since(Instant::now()));
        }
        let mut consider = |at: i64| {
            let wait = Duration::from_secs((at - now_s).max(0) as u64);
            next = next.min(wait);
        };
        for deadline in self.core.jobs.running().filter_map(Job::deadline) {
            consider(deadline);
        }
        for (id, warn_at) in self
            .core
            .jobs
            .running()
            .filter_map(|j| Some((j.id, j.warn_at()?)))
        {
            if !self.core.policy.warned.contains(&id) {
                consider(warn_at);
            }
        }
        if let Some(w) = self.core.policy.wake_at {
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
    pub(super) fn ingest(&mut self, inbound: Inbound, now: i64) -> Result<Handled, DaemonError> {
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
                uid: sender,
                envelope,
            } => {
                let identity = match self.identify(sender, &envelope, now) {
                    Ok(identity) => identity,
                    Err(refusal) => {
                        self.audit_unauthenticated(&envelope, &refusal, now)?;
                        return Ok(Handled::Reply(refusal));
                    }
                };
                self.turn.channel = identity.channel;
                let handled = self.handle(name, identity, sender, envelope.request, now);
                self.turn.channel = Channel::Cli;
                handled
            }
        }
    }

    /// Handles a request from `identity`: a query goes to the query
    /// thread; a state change is applied once and recorded.
    fn handle(
        &mut self,
        name: String,
        identity: super::identity::Identity,
        sender: u32,
        request: Request,
        now: i64,
    ) -> Result<Handled, DaemonError> {
        let super::identity::Identity {
            uid,
            user,
            channel,
            token,
        } = identity;
        let proven = match &token {
            Some(claims) => super::requester::Proven::Token(claims),
            None => super::requester::Proven::Kernel,
        };
        if let Request::Query(q) = request {
            let viewer = self.viewer(uid, user);
            let min_age = self.core.config.min_job_age_secs;
            let work = query::Work::new(name, viewer, min_age, q).replying_to(sender);
            return Ok(Handled::Query(Box::new(work)));
        }
        // A look at an allocation changes nothing, is asked every second
        // of a session, and its answer holds the step key: not recorded.
        if let Request::Control(c @ Control::Attach { .. }) = request {
            return Ok(Handled::Reply(self.control(
                c,
                (uid, &user),
                proven,
                now,
            )?));
        }
        // A state change: apply it once, whatever crashes happened.
        if let Some(reply) = self.applied_before(&name, uid)? {
            return Ok(Handled::Reply(reply));
        }
        let kind = request.kind();
        let action = match &request {
            Request::Control(c) => c.action(),
            _ => "submit",
        };
        let join_line = matches!(request, Request::Control(Control::NodeAdd { .. }));
        let reply = match request {
            Request::Submit(job) => self.submit(*job, uid, &user, now)?,
            Request::Control(c) => self.control(c, (uid, &user), proven, now)?,
            Request::Query(_) => unreachable!("queries returned above"),
        };
        if matches!(channel, Channel::Rest | Channel::Portal) {
            self.audit_web(now, &user, action, &reply)?;
        }
        self.write(Row::Request {
            key: name,
            uid,
            time: now,
            kind: kind.to_string(),
            reply: Box::new(reply.kept_for_retry(join_line)),
        })?;
        Ok(Handled::Reply(reply))
    }

    /// Who `user` is to the read-only views: an administrator, the
    /// coordinator of which accounts.
    pub(super) fn viewer(&self, uid: u32, user: String) -> query::Viewer {
        let admin = self.core.config.is_admin(uid, &user);
        let policy = sched::limits::Policy::new(&self.core.config);
        let coordinated = self
            .core
            .config
            .accounts
            .iter()
            .filter(|a| sched::approval::may_approve(&policy, &a.name, &user))
            .map(|a| a.name.clone())
            .collect();
        query::Viewer {
            uid,
            user,
            admin,
            coordinated,
            privacy: self.core.config.private_data,
        }
    }

    /// The reply recorded for request `name` if it was applied before
    /// (sent again after a crash or a lost answer), or the refusal of a
    /// name another user's request took.
    pub(super) fn applied_before(
        &mut self,
        name: &str,
        uid: u32,
    ) -> Result<Option<Reply>, DaemonError> {
        Ok(db::find_request(self.tx()?, name)?.map(|(owner, reply)| {
            if owner == uid {
                reply
            } else {
                Reply::Rejected {
                    error: "request name already used by another user".into(),
                }
            }
        }))
    }

    /// Runs the scheduler and marks the jobs it starts as running.
    pub(super) fn schedule(&mut self, now: i64) -> Result<(), DaemonError> {
        self.reschedule = false;
        let named = self.dependency_states()?;
        let usage = self.usage_with_running(now);
        let checkpoints = self.checkpoint_times();
        let drained = self.drained_pool_gpus();
        let (jobs, numbered) = self.core.jobs.numbered();
        let state = sched::pass::State {
            jobs: &jobs,
            named: &named,
            layout: self.nodes.layout(),
            drained: &drained,
            usage: &usage,
            spent: &self.core.policy.budgets,
            checkpoints: &checkpoints,
            can_suspend: self.nodes.iter().all(|n| n.facts().isolation.can_suspend),
            now,
            numbered: Some(&numbered),
        };
        let started = Instant::now();
        let mut decisions = sched::pass(&state, &self.core.config);
        let took = started.elapsed();
        self.stats.last_pass_seconds = took.as_secs_f64();
        let kept = decisions
            .spare
            .take()
            .filter(|_| self.between.keeps_spare(took))
            .map(|spare| super::pace::Kept {
                spare,
                layout: self.nodes.layout().clone(),
                drained: drained.clone(),
            });
        self.between.passed(took, kept);
        // The images the starts need, their pulls begun where they are
        // not present (an urgent job's too, so that it comes while its
        // victims stop).
        let images: HashMap<JobId, ImageStatus> = decisions
            .starts
            .iter()
            .map(|start| (start.job, self.image_readiness(start)))
            .collect();
        for preemption in &decisions.preemptions {
            self.image_readiness_on(preemption.job, std::iter::once(&preemption.node));
        }
        let channel = self.turn.channel;
        let passed = self.handle_with(|core, reads, fx| {
            super::pass::on_pass(core, reads, (decisions, &images), (now, channel), fx)
        })?;
        self.stats.preemptions_total += passed.preemptions;
        self.turn.to_launch.extend(passed.launch);
        Ok(())
    }

    /// The association tree with usage decayed to `now`, and what the
    /// fair-share algorithm makes of it.
    pub(super) fn fairshare_tree(
        &mut self,
        now: i64,
    ) -> (sched::fairshare::Tree, Vec<sched::fairshare::NodeShare>) {
        let usage = self.usage_with_running(now);
        // Runs of jobs of one association pass as one: comparing with the
        // job before is cheaper than hashing every job's pair.
        let mut previous = None;
        let associations = self
            .core
            .jobs
            .all()
            .map(|j| (j.account.as_str(), j.user.as_str()))
            .filter(move |pair| previous.replace(*pair) != Some(*pair));
        let tree = sched::fairshare::build_tree(&self.core.config, associations, &usage, now);
        let shares = tree.compute(self.core.config.fairshare.algorithm);
        (tree, shares)
    }

    /// The associations' usage as charged, plus what their running jobs
    /// have used so far: an account flooding long jobs weighs in while
    /// they run, not only once they end. Runs are charged to the stored
    /// usage when they end, as before; this is what the pass sees now.
    pub(super) fn usage_with_running(
        &mut self,
        now: i64,
    ) -> HashMap<(String, String), sched::fairshare::Usage> {
        let fs = &self.core.config.fairshare;
        let mut usage = self.core.policy.usage.clone();
        for job in self.core.jobs.running() {
            if job.state != JobState::Running || job.start_time.is_none() {
                continue;
            }
            let mut so_far = Job::clone(job);
            so_far.end_time = Some(now.max(job.start_time.unwrap_or(now)));
            let billing =
                sched::fairshare::charge(&so_far, self.nodes.gpus_of(job), &self.core.config);
            usage
                .entry((job.account.clone(), job.user.clone()))
                .or_default()
                .charge(billing, now, fs.half_life, fs.reset);
        }
        usage
    }

    /// The queue as the views see it; after a change, what to build it
    /// from (the query thread builds it).
    pub(super) fn snapshot(&mut self) -> Arc<query::LazySnapshot> {
        if let Some(s) = &self.snapshot {
            return s.clone();
        }
        let now = self.now();
        let policy = sched::limits::Policy::new(&self.core.config);
        let budgets: HashMap<String, sched::budget::Standing> = self
            .core
            .config
            .accounts
            .iter()
            .filter_map(|a| {
                let standing = self
                    .core
                    .standing(self.nodes.all_gpus(), &a.name, &policy, now)?;
                Some((a.name.clone(), standing))
            })
            .collect();
        let built;
        let (tree, shares) = match &self.core.policy.pass_tree {
            Some((tree, shares)) => (tree, shares),
            None => {
                built = self.fairshare_tree(now);
                (&built.0, &built.1)
            }
        };
        let inputs = query::SnapshotInputs {
            jobs: self.core.jobs.values().cloned().collect(),
            queue_order: self.core.policy.order.clone(),
            facts: self.view_facts(self.core.policy.reasons.clone(), now),
            shares: query::share_rows(tree, shares, &self.core.policy.usage, &budgets),
            nodes: self.node_facts(),
        };
        let snapshot = Arc::new(query::LazySnapshot::new(inputs));
        self.snapshot = Some(snapshot.clone());
        snapshot
    }

    /// Each node's side of the node view, with its GPU drains and samples.
    fn node_facts(&self) -> Vec<query::NodeFacts> {
        self.nodes
            .iter()
            .map(|node| {
                let facts = node.facts();
                query::NodeFacts {
                    name: facts.name.clone(),
                    drain: node
                        .drain
                        .as_ref()
                        .map(|d| format!("{} ({})", d.reason, d.by)),
                    down: node.down.clone(),
                    cpus: node.cpus,
                    memory_mb: node.mem_mb,
                    tmp_mb: facts.tmp_mb,
                    isolation: facts.isolation.description.clone(),
                    gpu_source: facts.inventory.source.to_string(),
                    gpus: facts.inventory.gpus.clone(),
                    drains: self
                        .core
                        .policy
                        .drains
                        .iter()
                        .filter(|((n, _), _)| n == node.name())
                        .map(|((_, gpu), d)| (*gpu, d.clone()))
                        .collect(),
                    samples: node.samples.clone(),
                }
            })
            .collect()
    }

    /// What the views add to the jobs, as the last pass left it, with
    /// `reasons` (all of them, or those of the jobs a snapshot holds).
    fn view_facts(&self, reasons: IdMap<Reason>, now: i64) -> query::ViewFacts {
        query::ViewFacts {
            reasons,
            expected_starts: self.core.policy.expected_starts.clone(),
            weights: self.core.config.priority.clone(),
            qos: self.core.config.qos.clone(),
            fairshare: self.core.policy.fairshare.clone(),
            total_gpus: self.nodes.all_gpus().len() as u32,
            now,
        }
    }

    /// A snapshot of just the active jobs among `ids`, built without a
    /// pass over the queue; no node or fair-share view. `None` where an id
    /// names an array with tasks still active (its tasks' ids follow it),
    /// which only the whole queue's snapshot answers.
    pub(super) fn snapshot_of(&self, ids: &[JobId]) -> Option<Arc<QueueSnapshot>> {
        let mut named: Vec<Arc<Job>> = Vec::with_capacity(ids.len());
        for &id in ids {
            match self.core.jobs.range(id..).next() {
                Some((_, job)) if job.array.as_ref().is_some_and(|a| a.job_id == id) => {
                    return None
                }
                Some((&found, job)) if found == id => named.push(job.clone()),
                _ => {}
            }
        }
        named.sort_unstable_by_key(|j| j.id);
        named.dedup_by_key(|j| j.id);
        let reasons = named
            .iter()
            .filter_map(|j| Some((j.id, *self.core.policy.reasons.get(&j.id)?)))
            .collect();
        let order: Vec<JobId> = self
            .core
            .policy
            .order
            .iter()
            .copied()
            .filter(|id| named.binary_search_by_key(id, |j| j.id).is_ok())
            .collect();
        let facts = self.view_facts(reasons, self.now());
        Some(Arc::new(QueueSnapshot::build(
            named,
            &order,
            facts,
            Vec::new(),
        )))
    }
}
