//! The config as TOML gives it: every key optional, with its place in the
//! text for messages, before any check.

use serde::{Deserialize, Deserializer};
use toml::Spanned;

use std::path::PathBuf;

use crate::model::units;

use super::types::*;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) spool_dir: Option<PathBuf>,
    pub(super) node_name: Option<String>,
    #[serde(default)]
    pub(super) admins: Vec<String>,
    #[serde(default)]
    pub(super) allow_root_jobs: bool,
    #[serde(default)]
    pub(super) kill_invalid_dependency: bool,
    pub(super) max_array_size: Option<u32>,
    pub(super) backfill_depth: Option<usize>,
    pub(super) gpu_sample_secs: Option<u64>,
    pub(super) metrics_file: Option<PathBuf>,
    pub(super) metrics_every_secs: Option<u64>,
    pub(super) metrics_listen: Option<Spanned<String>>,
    pub(super) notify_command: Option<Spanned<String>>,
    pub(super) notify_timeout_secs: Option<u64>,
    pub(super) purge_after_months: Option<Spanned<u32>>,
    pub(super) keep_payloads_days: Option<u32>,
    #[serde(default)]
    pub(super) private_data: PrivateData,
    pub(super) min_job_age_secs: Option<u64>,
    pub(super) low_utilization_pct: Option<Spanned<u32>>,
    #[serde(default, deserialize_with = "de_time_limit")]
    pub(super) preempt_wait: Option<Option<u64>>,
    pub(super) max_preemptions: Option<u32>,
    pub(super) timezone: Option<Spanned<String>>,
    pub(super) kill_wait: Option<u64>,
    pub(super) requeue_delay: Option<u64>,
    pub(super) max_quick_requeues: Option<u32>,
    #[serde(default, deserialize_with = "de_time_limit")]
    pub(super) default_time: Option<Option<u64>>,
    #[serde(default, deserialize_with = "de_time_limit")]
    pub(super) max_time: Option<Option<u64>>,
    pub(super) default_qos: Option<Spanned<String>>,
    pub(super) cpus: Option<u32>,
    #[serde(default, deserialize_with = "de_memory")]
    pub(super) memory: Option<u64>,
    #[serde(default, deserialize_with = "de_memory")]
    pub(super) max_spool_file: Option<u64>,
    #[serde(default, deserialize_with = "de_memory")]
    pub(super) spool_reserve: Option<u64>,
    pub(super) log_file: Option<PathBuf>,
    pub(super) cgroups: Option<crate::model::isolation::Setting>,
    pub(super) cgroup_root: Option<PathBuf>,
    pub(super) cgroup_parent: Option<Spanned<String>>,
    pub(super) job_pids_max: Option<u64>,
    #[serde(default, deserialize_with = "de_memory")]
    pub(super) default_mem_per_gpu: Option<u64>,
    #[serde(default)]
    pub(super) gpus: Vec<Spanned<RawGpu>>,
    #[serde(default)]
    pub(super) accounts: Vec<RawAccount>,
    #[serde(default)]
    pub(super) qos: Vec<RawQos>,
    #[serde(default)]
    pub(super) fairshare: RawFairshare,
    #[serde(default)]
    pub(super) priority: RawPriority,
    #[serde(default)]
    pub(super) billing: std::collections::BTreeMap<String, Spanned<f64>>,
    #[serde(default)]
    pub(super) pool: RawPool,
    #[serde(default)]
    pub(super) web: RawWeb,
    #[serde(default)]
    pub(super) containers: RawContainers,
    #[serde(default)]
    pub(super) interactive: RawInteractive,
    pub(super) standby: Option<RawStandby>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStandby {
    pub(super) etcd: Spanned<String>,
    pub(super) name: Option<String>,
    pub(super) key: Option<Spanned<String>>,
    pub(super) lease: Option<Spanned<String>>,
    pub(super) etcd_ca: Option<Spanned<String>>,
    pub(super) etcd_cert: Option<Spanned<String>>,
    pub(super) etcd_key: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawInteractive {
    pub(super) max_sessions_per_user: Option<u32>,
    pub(super) max_gpus_per_user: Option<u32>,
    #[serde(default, deserialize_with = "de_time_limit")]
    pub(super) max_time: Option<Option<u64>>,
    #[serde(default, deserialize_with = "de_time_limit")]
    pub(super) default_time: Option<Option<u64>>,
    pub(super) qos: Option<Spanned<String>>,
    pub(super) unwatched_after: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGpu {
    #[serde(rename = "type")]
    pub(super) gpu_type: Spanned<String>,
    pub(super) count: Option<u32>,
    #[serde(deserialize_with = "de_memory_required")]
    pub(super) memory: u64,
    pub(super) devices: Option<Spanned<String>>,
    pub(super) group_size: Option<Spanned<u32>>,
    pub(super) features: Option<Spanned<Vec<String>>>,
    pub(super) shards: Option<Spanned<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAccount {
    pub(super) name: Spanned<String>,
    pub(super) parent: Option<Spanned<String>>,
    pub(super) shares: Option<Spanned<f64>>,
    #[serde(default)]
    pub(super) users: Vec<String>,
    pub(super) max_gpus: Option<u32>,
    #[serde(default)]
    pub(super) max_gpus_windows: Vec<Spanned<RawWindow>>,
    #[serde(default)]
    pub(super) max_gpus_by_type: std::collections::BTreeMap<String, Spanned<u32>>,
    pub(super) max_running_jobs: Option<u32>,
    pub(super) max_submitted_jobs: Option<u32>,
    pub(super) max_gpus_per_job: Option<u32>,
    #[serde(default, deserialize_with = "de_time_limit")]
    pub(super) max_time: Option<Option<u64>>,
    pub(super) max_gpus_per_user: Option<u32>,
    pub(super) max_running_jobs_per_user: Option<u32>,
    pub(super) borrow_limit: Option<Spanned<i64>>,
    pub(super) lend: Option<Spanned<bool>>,
    pub(super) lend_limit: Option<Spanned<i64>>,
    pub(super) budget: Option<Spanned<f64>>,
    pub(super) budget_period: Option<crate::model::policy::Period>,
    pub(super) over_budget: Option<crate::model::policy::OverBudget>,
    pub(super) budget_warning: Option<Spanned<f64>>,
    #[serde(default)]
    pub(super) coordinators: Vec<String>,
    pub(super) approval_above_gpu_hours: Option<Spanned<f64>>,
    #[serde(default)]
    pub(super) approval_gpu_types: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWindow {
    pub(super) days: String,
    pub(super) hours: String,
    pub(super) max_gpus: u32,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFairshare {
    pub(super) algorithm: Option<crate::model::policy::Algorithm>,
    #[serde(default, deserialize_with = "de_time_limit")]
    pub(super) half_life: Option<Option<u64>>,
    pub(super) reset: Option<UsageReset>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPriority {
    pub(super) weight_age: Option<u64>,
    pub(super) weight_fairshare: Option<u64>,
    pub(super) weight_qos: Option<u64>,
    pub(super) weight_size: Option<u64>,
    #[serde(default, deserialize_with = "de_time_limit")]
    pub(super) max_age: Option<Option<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawQos {
    pub(super) name: Spanned<String>,
    pub(super) priority: i64,
    pub(super) usage_factor: Option<Spanned<f64>>,
    pub(super) reserve: Option<Spanned<toml::Value>>,
    pub(super) lend_reserve: Option<bool>,
    pub(super) max_gpus_per_user: Option<u32>,
    #[serde(default, deserialize_with = "de_time_limit")]
    pub(super) default_time: Option<Option<u64>>,
    #[serde(default, deserialize_with = "de_time_limit")]
    pub(super) max_time: Option<Option<u64>>,
    pub(super) preempt: Option<Spanned<Vec<String>>>,
    pub(super) preempt_mode: Option<PreemptMode>,
    #[serde(default, deserialize_with = "de_time_limit")]
    pub(super) grace_time: Option<Option<u64>>,
    pub(super) preemptible: Option<bool>,
    #[serde(default, deserialize_with = "de_time_limit")]
    pub(super) min_run_time: Option<Option<u64>>,
    pub(super) users: Option<Vec<String>>,
    pub(super) accounts: Option<Spanned<Vec<String>>>,
    pub(super) coordinators: Option<bool>,
}

pub(super) fn de_time_limit<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<u64>>, D::Error> {
    let text = String::deserialize(d)?;
    units::parse_time_limit(&text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

pub(super) fn de_memory<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    de_memory_required(d).map(Some)
}

pub(super) fn de_memory_required<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let text = String::deserialize(d)?;
    units::parse_memory_mb(&text).map_err(serde::de::Error::custom)
}

/// Names of GPU types, accounts and QoS: short, and safe in every output format.
pub(super) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWeb {
    pub(super) listen: Option<Spanned<String>>,
    pub(super) certificate: Option<Spanned<std::path::PathBuf>>,
    pub(super) key: Option<Spanned<std::path::PathBuf>>,
    pub(super) user: Option<Spanned<String>>,
    pub(super) proxy_header: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) proxy_addresses: Vec<Spanned<String>>,
    pub(super) proxy_secret_file: Option<Spanned<std::path::PathBuf>>,
    pub(super) max_connections: Option<Spanned<i64>>,
    pub(super) max_body_kb: Option<Spanned<i64>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPool {
    pub(super) listen: Option<Spanned<String>>,
    pub(super) advertise: Option<Spanned<String>>,
    pub(super) lease: Option<Spanned<String>>,
    pub(super) token_lifetime: Option<Spanned<String>>,
    pub(super) certificate_lifetime: Option<Spanned<String>>,
    pub(super) controller: Option<Spanned<String>>,
    pub(super) step_ports: Option<Spanned<String>>,
    pub(super) frozen_limit: Option<Spanned<String>>,
    pub(super) trust_nodes: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawContainers {
    pub(super) runtime: Option<Spanned<std::path::PathBuf>>,
    pub(super) podman: Option<Spanned<std::path::PathBuf>>,
    pub(super) storage: Option<Spanned<std::path::PathBuf>>,
    #[serde(default)]
    pub(super) mounts: Vec<Spanned<String>>,
    pub(super) allowed_registries: Option<Vec<Spanned<String>>>,
    pub(super) allow_root: Option<bool>,
    #[serde(default)]
    pub(super) prefetch: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) insecure_registries: Vec<Spanned<String>>,
    #[serde(default, deserialize_with = "de_memory")]
    pub(super) cache_size: Option<u64>,
    #[serde(default, deserialize_with = "de_memory")]
    pub(super) max_archive_size: Option<u64>,
    pub(super) cdi_dirs: Option<Vec<Spanned<std::path::PathBuf>>>,
    pub(super) pull_timeout: Option<Spanned<String>>,
}
