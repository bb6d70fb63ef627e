//! The GPUs' use: readings of each node's GPUs charged to the jobs
//! holding them (and processes on GPUs their holder does not own named),
//! GPUs idle while jobs wait, and the metrics file.

use crate::gpu::sampling::Reading;
use crate::model::job::{JobId, JobState};

use super::effects::{Effects, Row};
use super::error::DaemonError;
use super::state::Daemon;

impl Daemon {
    /// Reads this server's GPUs and charges the jobs running here (see
    /// `take_reading`). A source without data stops sampling.
    pub(super) fn sample_gpus(&mut self) -> Result<(), DaemonError> {
        let interval = self.core.config.gpu_sample_secs;
        let Some(reading) = crate::gpu::sampling::read(self.gpu_watch.gpu_source.as_mut()) else {
            self.gpu_watch.next_sample = None;
            return Ok(());
        };
        self.gpu_watch.next_sample =
            Some(std::time::Instant::now() + std::time::Duration::from_secs(interval));
        let Some(local) = self.nodes.local().map(|n| n.name().to_string()) else {
            return Ok(());
        };
        self.take_reading(&local, reading, interval)
    }

    /// A reading of node `name`'s GPUs (in its own numbers), taken every
    /// `interval` seconds there: kept for the views, processes on GPUs
    /// their holder does not own logged, each job running there charged
    /// its GPUs' share, and the samples added to the hour's history (in
    /// pool numbers, as the idle time is). Committed with the turn.
    pub(super) fn take_reading(
        &mut self,
        name: &str,
        mut reading: Reading,
        interval: u64,
    ) -> Result<(), DaemonError> {
        let Some(slot) = self.nodes.layout().slot(name) else {
            return Ok(());
        };
        let room = &self.nodes.layout().nodes[slot];
        let (first_gpu, gpu_count) = (room.first_gpu, room.gpu_count);
        reading.samples.retain(|s| s.gpu < gpu_count);
        // A record from before nodes were recorded ran on the controller.
        let local = self.nodes.local().map(|n| n.name().to_string());
        let here = |j: &&crate::model::job::Job| {
            j.node.as_ref().or(local.as_ref()).map(String::as_str) == Some(name) || j.runs_on(name)
        };
        if let Some(processes) = &reading.processes {
            let shares: Vec<crate::model::job::Job> = self
                .core
                .jobs
                .all()
                .filter(here)
                .map(|j| {
                    j.share_on(name)
                        .map_or_else(|| j.clone(), |s| s.into_owned())
                })
                .collect();
            let found = crate::gpu::sampling::intruders(processes, shares.iter());
            self.log_intruders(name, local.as_deref() == Some(name), found);
        }
        let hour = crate::report::history::hour_of(self.now());
        let in_pool: Vec<crate::model::gpu::Sample> = reading
            .samples
            .iter()
            .map(|s| crate::model::gpu::Sample {
                gpu: s.gpu + first_gpu,
                ..*s
            })
            .collect();
        self.write(Row::GpuSamples {
            hour,
            samples: in_pool,
        })?;
        let low = self.core.config.low_utilization_pct;
        let ids: Vec<JobId> = self
            .core
            .jobs
            .all()
            .filter(|j| j.state == JobState::Running && !j.gpus_alloc.is_empty())
            .filter(here)
            .map(|j| j.id)
            .collect();
        for id in ids {
            let job = self.core.jobs.job_mut(&id).expect("listed above");
            let gpus = match job.share_on(name) {
                Some(share) => share.gpus_alloc.clone(),
                None => job.gpus_alloc.clone(),
            };
            job.gpu_usage
                .add(&reading.samples, (name, &gpus), interval, low);
            let mut fx = Effects::default();
            fx.job(job);
            self.apply(fx)?;
        }
        if let Some(node) = self.nodes.iter_mut().find(|n| n.name() == name) {
            node.samples = Some(reading.samples);
        }
        self.snapshot = None;
        Ok(())
    }

    /// Logs each process on a GPU of node `name` that its holder does
    /// not own, once per process and GPU rather than at every reading.
    fn log_intruders(
        &mut self,
        name: &str,
        local: bool,
        found: Vec<crate::gpu::sampling::Intruder>,
    ) {
        if self.gpu_watch.intruders_seen.len() > 10_000 {
            self.gpu_watch.intruders_seen.clear();
        }
        for intruder in found {
            let key = (name.to_string(), intruder.gpu, intruder.pid);
            if !self.gpu_watch.intruders_seen.insert(key) {
                continue;
            }
            let gpu = if local {
                format!("GPU {}", intruder.gpu)
            } else {
                format!("GPU {} of node {name}", intruder.gpu)
            };
            tracing::warn!(
                target: "ysched::gpu",
                "{gpu} is used by process {}, which {}",
                intruder.pid,
                match intruder.holder {
                    Some(job) => format!("is not part of job {job}, the GPU's holder"),
                    None => "no job started: no job holds that GPU".to_string(),
                }
            );
        }
    }

    /// Notes which GPUs sit free while jobs wait, charging each stretch to
    /// its GPUs' hours when the set changes or on `flush` (so a crash loses
    /// at most a flush interval).
    pub(super) fn track_idle(&mut self, now: i64, flush: bool) -> Result<(), DaemonError> {
        // In pool numbers: one GPU of the pool, one number. The holders
        // and one waiting job, from the jobs' indexes: a walk of every
        // job here cost each turn that changed something 7 ms behind
        // 100,000 pending jobs.
        let layout = self.nodes.layout();
        let in_pool: Vec<crate::model::job::Job> = if layout.is_single() {
            Vec::new()
        } else {
            self.core
                .jobs
                .holding()
                .map(|j| layout.to_pool(j))
                .collect()
        };
        let waiting = self.core.jobs.first_wanting_gpus();
        let holders: Vec<&crate::model::job::Job> = if layout.is_single() {
            self.core.jobs.holding().collect()
        } else {
            in_pool.iter().collect()
        };
        let jobs = holders.into_iter().chain(waiting.as_deref());
        let mut idle =
            crate::report::history::idle_while_waiting(jobs, self.nodes.all_gpus().len());
        // Out of service is not idle: drained GPUs, nodes drained or down.
        let closed: std::collections::HashSet<u32> = layout
            .gpus
            .iter()
            .filter(|g| !layout.nodes[g.node as usize].open)
            .map(|g| g.index)
            .collect();
        let drained = self.drained_pool_gpus();
        idle.retain(|g| !drained.contains(g) && !closed.contains(g));
        self.stats.idle_while_waiting = idle.len();
        let owed = self.stats.idle_watch.observe(now, idle, flush);
        if !owed.is_empty() {
            self.write(Row::IdleWaiting(owed))?;
        }
        Ok(())
    }

    /// Writes the metrics file (temporary file, then rename: a scraper
    /// never reads half of it). A failure is logged; it stops nothing.
    pub(super) fn write_metrics(&mut self, now: i64) {
        self.stats.next_metrics = Some(
            std::time::Instant::now()
                + std::time::Duration::from_secs(self.core.config.metrics_every_secs),
        );
        let policy = crate::sched::limits::Policy::new(&self.core.config);
        let budget_left: Vec<(String, f64)> = self
            .core
            .config
            .accounts
            .iter()
            .filter_map(|a| {
                let standing = self
                    .core
                    .standing(self.nodes.all_gpus(), &a.name, &policy, now)?;
                Some((
                    a.name.clone(),
                    standing.left() as f64 / crate::model::policy::TOKEN,
                ))
            })
            .collect();
        let jobs: Vec<&crate::model::job::Job> = self.core.jobs.all().collect();
        let checkpoints = crate::db::preemptions::lines(&self.store.db, 0, i64::MAX, |_, _| true)
            .unwrap_or_else(|e| {
                tracing::warn!(target: "ysched::daemon", "the metrics leave out preemption outcomes: {e}");
                Vec::new()
            });
        let text = crate::report::metrics::render(&crate::report::metrics::Inputs {
            jobs: &jobs,
            gpus: self.nodes.all_gpus(),
            samples: &self.gpu_samples(),
            last_pass_seconds: self.stats.last_pass_seconds,
            preemptions_total: self.stats.preemptions_total,
            quick_starts_total: self.stats.quick_starts_total,
            budget_left: &budget_left,
            drained: &self.drained_pool_gpus(),
            requests_total: self.stats.requests_total,
            ingest_seconds_sum: self.stats.ingest_seconds_sum,
            idle_while_waiting: self.stats.idle_while_waiting,
            nodes: &self.node_loads(),
            checkpoints: &checkpoints,
        });
        if let Some(latest) = &self.stats.metrics_latest {
            if let Ok(mut served) = latest.lock() {
                served.clone_from(&text);
            }
        }
        let Some(path) = self.core.config.metrics_file.clone() else {
            return;
        };
        let tmp = path.with_extension("prom.tmp");
        let written = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = written {
            tracing::warn!(target: "ysched::daemon", "cannot write metrics to {}: {e}", path.display());
        }
    }

    /// Each node's GPUs at their last reading, for the metrics.
    fn gpu_samples(&self) -> Vec<crate::report::metrics::GpuSample<'_>> {
        let mut out = Vec::new();
        for node in self.nodes.iter() {
            let gpus = &node.facts().inventory.gpus;
            for sample in node.samples.iter().flatten() {
                out.push(crate::report::metrics::GpuSample {
                    node: node.name(),
                    gpu_type: gpus
                        .get(sample.gpu as usize)
                        .map_or("", |g| g.gpu_type.as_str()),
                    sample: *sample,
                });
            }
        }
        out
    }

    /// Each node's load, for the metrics.
    fn node_loads(&self) -> Vec<crate::report::metrics::NodeLoad> {
        self.nodes
            .iter()
            .map(|node| {
                let name = node.name();
                let on_it: Vec<&crate::model::job::Job> = self
                    .core
                    .jobs
                    .all()
                    .filter(|j| j.state.holds_gpus())
                    .filter(|j| self.nodes.of(j).is_some_and(|n| n.name() == name))
                    .collect();
                let gpus = node.facts().inventory.gpus.len();
                let held: std::collections::HashSet<u32> = on_it
                    .iter()
                    .flat_map(|j| j.gpus_alloc.iter().copied())
                    .collect();
                let state = if node.down.is_some() {
                    "down"
                } else if node.drain.is_some() {
                    if on_it.is_empty() {
                        "drain"
                    } else {
                        "drng"
                    }
                } else if gpus > 0 && held.len() >= gpus {
                    "alloc"
                } else if on_it.is_empty() {
                    "idle"
                } else {
                    "mix"
                };
                crate::report::metrics::NodeLoad {
                    name: name.to_string(),
                    state: state.to_string(),
                    gpus,
                    gpus_allocated: held.len(),
                }
            })
            .collect()
    }
}
