//! The server as `ysinfo` and `yscontrol show node` see it: each GPU with
//! its state (idle, allocated, shared, claimed, draining, drained) and the
//! jobs and users holding it, the CPUs and memory in use, and how jobs are
//! isolated. Built by the daemon from its state; rendered by the commands.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::gpu::Gpu;
use crate::model::gpu::Sample;
use crate::model::job::Job;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub name: String,
    /// Slurm's word for the node: `idle`, `mix`, `alloc`, `drain` (drained
    /// and empty), `drng` (drained, jobs still on it), `down`.
    #[serde(default)]
    pub state: String,
    /// Why it is drained or down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub cpus: u32,
    pub cpus_allocated: u32,
    pub memory_mb: u64,
    pub memory_allocated_mb: u64,
    /// Its temporary filesystem (`/tmp`), MiB: Slurm's TmpDisk.
    #[serde(default)]
    pub tmp_mb: u64,
    /// How jobs are confined here (cgroup layout, or off).
    pub isolation: String,
    /// Where the GPU list comes from (NVML, the config).
    pub gpu_source: String,
    pub gpus: Vec<GpuInfo>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    pub index: u32,
    pub gpu_type: String,
    pub memory_mb: u64,
    pub group: u32,
    pub features: Vec<String>,
    pub shards: u32,
    /// idle, allocated, shared (shards in use), claimed (kept for a job
    /// that preempted others), draining, drained.
    pub state: String,
    /// The jobs on it (`12`, `12_3`) and their users.
    pub jobs: Vec<String>,
    pub users: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain: Option<Drain>,
    /// At the last sample, where sampled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub utilization_pct: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_used_mb: Option<u64>,
}

/// What the daemon knows of one server, at one moment.
pub struct Facts<'a> {
    pub name: &'a str,
    /// The node drained by an administrator, and why.
    pub drain: Option<&'a str>,
    /// The node not answering, and why.
    pub down: Option<&'a str>,
    pub cpus: u32,
    pub memory_mb: u64,
    pub tmp_mb: u64,
    pub isolation: &'a str,
    pub gpu_source: String,
    pub gpus: &'a [Gpu],
    pub jobs: &'a [&'a Job],
    pub drains: &'a BTreeMap<u32, Drain>,
    pub samples: Option<&'a [Sample]>,
}

/// `f.jobs` are the jobs on this node (and those claiming its GPUs).
pub fn build(f: &Facts) -> NodeInfo {
    // One pass over the jobs, however many GPUs: a queue may be 100,000
    // pending jobs long.
    let mut holding: Vec<&&Job> = Vec::new();
    let mut claimed_gpus: std::collections::BTreeSet<u32> = std::collections::BTreeSet::new();
    for job in f.jobs {
        if job.state.holds_gpus() {
            holding.push(job);
        } else if job.state == crate::model::job::JobState::Pending {
            claimed_gpus.extend(job.claim.iter().copied());
        }
    }
    let gpus: Vec<GpuInfo> = f
        .gpus
        .iter()
        .map(|g| {
            let on: Vec<&&&Job> = holding
                .iter()
                .filter(|j| j.gpus_alloc.contains(&g.index))
                .collect();
            let claimed = claimed_gpus.contains(&g.index);
            let drain = f.drains.get(&g.index).cloned();
            let state = match (&drain, on.is_empty()) {
                (Some(_), true) => "drained",
                (Some(_), false) => "draining",
                (None, false) if on.iter().all(|j| j.gpus.shard) => "shared",
                (None, false) => "allocated",
                (None, true) if claimed => "claimed",
                (None, true) => "idle",
            };
            let mut users: Vec<String> = on.iter().map(|j| j.user.clone()).collect();
            users.dedup();
            let sample = f.samples.and_then(|s| s.iter().find(|s| s.gpu == g.index));
            GpuInfo {
                index: g.index,
                gpu_type: g.gpu_type.clone(),
                memory_mb: g.memory_mb,
                group: g.group,
                features: g.features.clone(),
                shards: g.shards,
                state: state.to_string(),
                jobs: on.iter().map(|j| j.display_id()).collect(),
                users,
                drain,
                utilization_pct: sample.map(|s| s.utilization_pct),
                memory_used_mb: sample.map(|s| s.memory_used_mb),
            }
        })
        .collect();
    let cpus_allocated = holding.iter().map(|j| j.cpus).sum::<u32>().min(f.cpus);
    NodeInfo {
        name: f.name.to_string(),
        state: node_state(f, &gpus, cpus_allocated).to_string(),
        reason: f.down.or(f.drain).map(str::to_string),
        cpus: f.cpus,
        cpus_allocated,
        memory_mb: f.memory_mb,
        tmp_mb: f.tmp_mb,
        memory_allocated_mb: holding.iter().filter_map(|j| j.mem_mb).sum(),
        isolation: f.isolation.to_string(),
        gpu_source: f.gpu_source.clone(),
        gpus,
    }
}

/// Slurm's state word for a node with `gpus` as built: down before
/// drained, drained before how full it is; a node whose every GPU is
/// drained is drained too.
fn node_state(f: &Facts, gpus: &[GpuInfo], cpus_allocated: u32) -> &'static str {
    let allocated = gpus.iter().filter(|g| !g.jobs.is_empty()).count();
    let drained = gpus.iter().filter(|g| g.drain.is_some()).count();
    let busy = allocated > 0 || cpus_allocated > 0;
    if f.down.is_some() {
        "down"
    } else if f.drain.is_some() || (!gpus.is_empty() && drained == gpus.len()) {
        if busy {
            "drng"
        } else {
            "drain"
        }
    } else if (!gpus.is_empty() && allocated == gpus.len())
        || (f.cpus > 0 && cpus_allocated >= f.cpus)
    {
        "alloc"
    } else if busy {
        "mix"
    } else {
        "idle"
    }
}

/// `ysinfo`'s columns, by name.
pub const FIELDS: [&str; 11] = [
    "node", "gpu", "type", "memory", "group", "features", "state", "jobs", "users", "util",
    "reason",
];

/// One cell of a GPU's row.
pub fn cell(gpu: &GpuInfo, field: &str) -> String {
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(",")
        }
    };
    match field {
        "gpu" => gpu.index.to_string(),
        "type" => gpu.gpu_type.clone(),
        "memory" => crate::model::units::format_memory_mb(gpu.memory_mb),
        "group" => gpu.group.to_string(),
        "features" => {
            let mut f = gpu.features.clone();
            if gpu.shards > 0 {
                f.push(format!("shards:{}", gpu.shards));
            }
            list(&f)
        }
        "state" => gpu.state.clone(),
        "jobs" => list(&gpu.jobs),
        "users" => list(&gpu.users),
        "util" => gpu
            .utilization_pct
            .map_or("n/a".into(), |u| format!("{u}%")),
        "reason" => gpu
            .drain
            .as_ref()
            .map_or("-".into(), |d| format!("{} ({})", d.reason, d.by)),
        _ => String::new(),
    }
}

/// A GPU taken out of service: why, by whom, since when.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Drain {
    pub reason: String,
    pub by: String,
    pub since: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::job::JobState;

    #[test]
    fn gpu_states_follow_jobs_claims_and_drains() {
        let gpus = crate::gpu::test_a100s(5);
        let mut running = crate::model::job::example_job(7);
        running.state = JobState::Running;
        running.gpus_alloc = vec![0, 1];
        running.user = "alice".into();
        let mut urgent = crate::model::job::example_job(9);
        urgent.claim = vec![2];
        let mut drains = BTreeMap::new();
        let drain = Drain {
            reason: "ECC errors".into(),
            by: "root".into(),
            since: 1,
        };
        drains.insert(1, drain.clone());
        drains.insert(3, drain);
        let jobs = [&running, &urgent];
        let info = build(&Facts {
            name: "gpu01",
            drain: None,
            down: None,
            cpus: 16,
            memory_mb: 1024,
            tmp_mb: 0,
            isolation: "cgroup v2",
            gpu_source: "declared".into(),
            gpus: &gpus,
            jobs: &jobs,
            drains: &drains,
            samples: None,
        });
        let states: Vec<&str> = info.gpus.iter().map(|g| g.state.as_str()).collect();
        assert_eq!(
            states,
            vec!["allocated", "draining", "claimed", "drained", "idle"]
        );
        assert_eq!(info.gpus[0].jobs, vec!["7"]);
        assert_eq!(info.gpus[0].users, vec!["alice"]);
        assert_eq!(cell(&info.gpus[3], "reason"), "ECC errors (root)");
        assert_eq!(cell(&info.gpus[4], "util"), "n/a");
        assert_eq!(info.cpus_allocated, running.cpus);
    }
}
