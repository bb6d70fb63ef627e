//! What the core's handlers look up beyond the core itself: the records
//! of jobs no longer active, where jobs were submitted, the tasks of
//! arrays, the next job id, the GPUs and capacity of each node, and when
//! a job last rewrote its checkpoint file. Reads only: a handler changes nothing through it. The
//! running controller reads its database and its nodes' facts
//! (`Edge`); the handlers' tests and the simulation read a map of their
//! own.

use rusqlite::Connection;

use crate::db::{self, DbError};
use crate::exec::spec::ExitRecord;
use crate::model::gpu::Gpu;
use crate::model::job::{Job, JobId, JobState};
use crate::model::step::Step;
use crate::sched::admission::Capacity;
use crate::token::{TokenError, TokenKey, TokenRecord};

use super::error::{DaemonError, Refusal};
use super::nodes::Nodes;
use super::pool_state::PoolState;
use crate::spool::Spool;

/// What a handler may look up.
pub(super) trait Reads {
    /// The record of job `id` if it is known and no longer active.
    fn ended_job(&self, id: JobId) -> Result<Option<Job>, DaemonError>;
    /// The job that is task `task` of array `array`, if there is one.
    fn array_task(&self, array: JobId, task: u32) -> Result<Option<JobId>, DaemonError>;
    /// The node job `id` was submitted on, if it was on one.
    fn submitted_on(&self, id: JobId) -> Result<Option<String>, DaemonError>;
    /// The GPUs of node `node` (`None`: this host), in its numbering.
    fn node_gpus(&self, node: Option<&str>) -> Vec<Gpu>;
    /// When `job` last rewrote its `--checkpoint-file` in this run.
    fn checkpoint_file_time(&self, job: &Job) -> Option<i64>;
    /// Every GPU of the pool, all nodes together, as the pass numbers them.
    fn pool_gpus(&self) -> &[Gpu];
    /// What each node offers a job, as admission sees it.
    fn capacities(&self) -> Vec<Capacity<'_>>;
    /// Whether some node of the pool can run containers.
    fn containers(&self) -> bool {
        !self.container_nodes().is_empty()
    }
    /// The nodes of the pool that run containers, in order.
    fn container_nodes(&self) -> Vec<String>;
    /// The id the next job takes: ids are never reused, and the turn's
    /// transaction holds those given in it.
    fn next_job_id(&self) -> Result<JobId, DaemonError>;
    /// Job `id`'s recorded state, if it is known.
    fn job_state(&self, id: JobId) -> Result<Option<JobState>, DaemonError>;
    /// The recorded states of array `id`'s tasks (none: not an array).
    fn array_states(&self, id: JobId) -> Result<Vec<JobState>, DaemonError>;
    /// The stop of job `id`'s run `restart` for another job, if one is
    /// recorded and its exit is not yet: when, `preempt` or `reclaim`,
    /// and its grace.
    fn pending_stop(
        &self,
        id: JobId,
        restart: u32,
    ) -> Result<Option<(i64, String, u64)>, DaemonError>;
    /// The name of node `node` (`None`: this host's) if it is in the pool.
    fn node_name(&self, node: Option<&str>) -> Option<String>;
    /// The names of the pool's nodes, in order.
    fn node_names(&self) -> Vec<String>;
    /// Whether the pool is the controller's own server alone.
    fn single_server(&self) -> bool;
    /// Whether node `name` is recorded drained.
    fn node_drained(&self, name: &str) -> Result<bool, DaemonError>;
    /// Where the pool's nodes join (its advertised address) and its
    /// authority's fingerprint; `None` when the pool is off.
    fn pool_join(&self) -> Option<(String, String)>;
    /// The record of node `name`, if it was ever expected.
    fn node_record(&self, name: &str) -> Result<Option<db::NodeRecord>, DaemonError>;
    /// Where node `name` is reached from the others (its steps' task
    /// servers).
    fn node_address(&self, name: &str) -> String;
    /// The number the next step of job `job`'s run `restart` takes.
    fn next_step(&self, job: JobId, restart: u32) -> Result<u32, DaemonError>;
    /// Whether that step is recorded running.
    fn step_running(&self, step: (JobId, u32, u32)) -> Result<bool, DaemonError>;
    /// The steps of job `job`, every run's.
    fn steps_of(&self, job: JobId) -> Result<Vec<Step>, DaemonError>;
    /// The key this controller signs tokens with.
    fn token_key(&self) -> Result<TokenKey, TokenError>;
    /// The record of token `jti`, if there is one.
    fn token_record(&self, jti: &str) -> Result<Option<TokenRecord>, DaemonError>;
    /// The tokens of `user` (everyone's when `None`) not expired before
    /// `since`, newest first.
    fn tokens(&self, user: Option<&str>, since: i64) -> Result<Vec<TokenRecord>, DaemonError>;
    /// How many valid tokens a revocation of `jti` (all of `user`'s when
    /// `None`) would end, and how many made with them.
    fn revocable(
        &self,
        jti: Option<&str>,
        user: Option<&str>,
        now: i64,
    ) -> Result<db::Revoked, DaemonError>;
    /// The uid of the account named `name` on this host, if there is one.
    fn uid_of(&self, name: &str) -> Option<u32>;
    /// What each account's jobs that ended at or after `since` were
    /// billed, summed.
    fn billing_since(&self, since: i64) -> Result<Vec<(String, i64)>, DaemonError>;
    /// The CPUs and memory (MiB) this host has.
    fn host_share(&self) -> (u32, u64);
    /// What job `id`'s supervisor on node `node` (`None`: this host)
    /// recorded of its run's end, once it has ended.
    fn exit_record(&self, id: JobId, node: Option<&str>) -> Option<ExitRecord>;
    /// The confinement (its cgroup) job `id` gets on node `node`.
    fn confinement(&self, id: JobId, node: &str) -> Option<String>;
    /// Whether node `name` is heard: in service and, a node of the pool,
    /// heard since it was away (a name the pool lacks counts as heard).
    fn node_heard(&self, name: &str) -> bool;
    /// Whether job `id`'s part on node `node` is lost: its node lost, or
    /// the run gone there without a record; `None` when the node is not
    /// in the pool.
    fn part_lost(&self, id: JobId, node: &str) -> Option<bool>;
    /// Whether every node of `job` can freeze it now (in the pool, able
    /// to suspend, connected); why not.
    fn freezable(&self, job: &Job) -> Result<(), Refusal>;
}

/// The running controller's: its database and its nodes.
pub(super) struct Edge<'a> {
    pub(super) db: &'a Connection,
    pub(super) nodes: &'a Nodes,
    pub(super) spool: &'a Spool,
    pub(super) pool: Option<&'a PoolState>,
    /// Where the pool listens, if the config names it.
    pub(super) listen: Option<std::net::SocketAddr>,
}

impl Reads for Edge<'_> {
    fn ended_job(&self, id: JobId) -> Result<Option<Job>, DaemonError> {
        match db::job(self.db, id) {
            Ok(job) => Ok(Some(job)),
            Err(DbError::NotFound(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn array_task(&self, array: JobId, task: u32) -> Result<Option<JobId>, DaemonError> {
        Ok(db::array_task(self.db, array, task)?)
    }

    fn submitted_on(&self, id: JobId) -> Result<Option<String>, DaemonError> {
        Ok(db::submitted_on(self.db, id)?)
    }

    fn node_gpus(&self, node: Option<&str>) -> Vec<Gpu> {
        self.nodes
            .named_or_local(node)
            .map_or_else(Vec::new, |n| n.facts().inventory.gpus.clone())
    }

    fn checkpoint_file_time(&self, job: &Job) -> Option<i64> {
        checkpoint_file_time(job)
    }

    fn pool_gpus(&self) -> &[Gpu] {
        self.nodes.all_gpus()
    }

    fn capacities(&self) -> Vec<Capacity<'_>> {
        self.nodes.capacities()
    }

    fn container_nodes(&self) -> Vec<String> {
        let nodes = self.nodes.iter().filter(|n| n.facts().containers);
        nodes.map(|n| n.name().to_string()).collect()
    }

    fn next_job_id(&self) -> Result<JobId, DaemonError> {
        // The same connection as the turn's transaction.
        Ok(db::next_job_id(self.db)?)
    }

    fn job_state(&self, id: JobId) -> Result<Option<JobState>, DaemonError> {
        Ok(db::job_state(self.db, id)?)
    }

    fn array_states(&self, id: JobId) -> Result<Vec<JobState>, DaemonError> {
        Ok(db::array_states(self.db, id)?)
    }

    fn pending_stop(
        &self,
        id: JobId,
        restart: u32,
    ) -> Result<Option<(i64, String, u64)>, DaemonError> {
        Ok(db::preemptions::pending_exit(self.db, id, restart)?)
    }

    fn node_name(&self, node: Option<&str>) -> Option<String> {
        Some(self.nodes.named_or_local(node)?.name().to_string())
    }

    fn node_names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name().to_string()).collect()
    }

    fn single_server(&self) -> bool {
        self.nodes.layout().is_single()
    }

    fn node_drained(&self, name: &str) -> Result<bool, DaemonError> {
        Ok(db::node_drained(self.db, name)?)
    }

    fn pool_join(&self) -> Option<(String, String)> {
        let pool = self.pool?;
        Some((pool.advertise.clone(), pool.authority.fingerprint()))
    }

    fn node_record(&self, name: &str) -> Result<Option<db::NodeRecord>, DaemonError> {
        Ok(db::node_record(self.db, name)?)
    }

    /// The address its agent connects from; for the controller's own
    /// node, the address the pool listens on when it names one; else its
    /// name.
    fn node_address(&self, name: &str) -> String {
        let Some(pool) = self.pool else {
            // One server: its steps' links stay on it.
            return "127.0.0.1".to_string();
        };
        if let Some(ip) = pool.addresses.get(name) {
            return ip.to_string();
        }
        let local = self.nodes.local().is_some_and(|n| n.name() == name);
        match self.listen {
            Some(listen) if local && !listen.ip().is_unspecified() => listen.ip().to_string(),
            _ => name.to_string(),
        }
    }

    fn next_step(&self, job: JobId, restart: u32) -> Result<u32, DaemonError> {
        Ok(db::next_step(self.db, job, restart)?)
    }

    fn step_running(&self, step: (JobId, u32, u32)) -> Result<bool, DaemonError> {
        Ok(db::step_running(self.db, step)?)
    }

    fn steps_of(&self, job: JobId) -> Result<Vec<Step>, DaemonError> {
        Ok(db::steps_of(self.db, job)?)
    }

    fn token_key(&self) -> Result<TokenKey, TokenError> {
        // Read each time: tokens are rare.
        TokenKey::load_or_create(&self.spool.token_key())
    }

    fn token_record(&self, jti: &str) -> Result<Option<TokenRecord>, DaemonError> {
        Ok(db::token(self.db, jti)?)
    }

    fn tokens(&self, user: Option<&str>, since: i64) -> Result<Vec<TokenRecord>, DaemonError> {
        Ok(db::tokens(self.db, user, since)?)
    }

    fn revocable(
        &self,
        jti: Option<&str>,
        user: Option<&str>,
        now: i64,
    ) -> Result<db::Revoked, DaemonError> {
        Ok(db::revocable(self.db, jti, user, now)?)
    }

    fn uid_of(&self, name: &str) -> Option<u32> {
        nix::unistd::User::from_name(name)
            .ok()
            .flatten()
            .map(|u| u.uid.as_raw())
    }

    fn billing_since(&self, since: i64) -> Result<Vec<(String, i64)>, DaemonError> {
        Ok(db::billing_since(self.db, since)?)
    }

    fn host_share(&self) -> (u32, u64) {
        let cpus = crate::exec::local::host_cpus();
        (cpus, crate::exec::local::host_memory_mb())
    }

    fn exit_record(&self, id: JobId, node: Option<&str>) -> Option<ExitRecord> {
        self.nodes.named_or_local(node)?.executor.exit_of(id)
    }

    fn confinement(&self, id: JobId, node: &str) -> Option<String> {
        self.nodes.named(node)?.executor.confinement_of(id)
    }

    fn node_heard(&self, name: &str) -> bool {
        self.nodes.named(name).is_none_or(|node| {
            node.down.is_none() && node.remote.as_ref().is_none_or(|r| r.heard_since_away)
        })
    }

    fn part_lost(&self, id: JobId, node: &str) -> Option<bool> {
        let node = self.nodes.named(node)?;
        let lost = |r: &super::nodes::RemoteNode| r.lost || r.link.state().lost.contains(&id);
        Some(node.remote.as_ref().is_some_and(lost))
    }

    fn freezable(&self, job: &Job) -> Result<(), Refusal> {
        let mut names: Vec<Option<&str>> = vec![job.node.as_deref()];
        names.extend(job.peers.iter().map(|p| Some(p.as_str())));
        for name in names {
            let shown = name.unwrap_or("this server");
            let Some(node) = self.nodes.named_or_local(name) else {
                return Err(format!("its node {shown} is not in the pool").into());
            };
            let cannot = !node.facts().isolation.can_suspend;
            match &node.remote {
                None if cannot => return Err(
                    "job isolation is off on this server, and suspending freezes the job's cgroup"
                        .into(),
                ),
                Some(_) if cannot => {
                    return Err(format!("node {} cannot suspend jobs", node.name()).into())
                }
                Some(remote) if remote.link.state().conn.is_none() => {
                    return Err(format!("node {} is not connected", node.name()).into())
                }
                _ => {}
            }
        }
        Ok(())
    }
}

impl super::state::Daemon {
    /// What the handlers read here: this controller's database and nodes.
    pub(super) fn reads(&self) -> Edge<'_> {
        Edge {
            db: &self.store.db,
            nodes: &self.nodes,
            spool: &self.spool,
            pool: self.pool.as_ref(),
            listen: self.core.config.pool.listen,
        }
    }
}

/// When `job` last rewrote its `--checkpoint-file`, if it did in this run.
pub(super) fn checkpoint_file_time(job: &Job) -> Option<i64> {
    let modified = std::fs::metadata(job.checkpoint_path()?)
        .ok()?
        .modified()
        .ok()?;
    let at = modified
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs() as i64;
    (at >= job.start_time?).then_some(at)
}
