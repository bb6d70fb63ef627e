//! From the raw config to the validated one: every key checked, each
//! error naming its line and key.

use std::path::{Path, PathBuf};

use toml::Spanned;

use super::error::{ConfigError, Source};
use super::raw::*;
use super::types::*;
use super::values::{parse_command, parse_listen};
use super::{accounts, gpus, pool, qos};
use crate::model::units;

impl RawConfig {
    pub(super) fn validate(self, text: &str, path: &Path) -> Result<Config, ConfigError> {
        let src = Source { text, path };
        let fail = |span, key: &str, message| src.fail(span, key, message);
        let gpus = gpus::decls(&self.gpus, &src)?;
        let pool_size = declared_pool_size(self.pool.listen.is_some(), &gpus);
        let accounts = accounts::accounts(self.accounts, &self.gpus, pool_size, &src)?;
        let qos = qos::levels(self.qos, &accounts, &src)?;
        let default_qos = default_qos_of(self.default_qos, &qos, &src)?;
        let (default_time, max_time) = (self.default_time.flatten(), self.max_time.flatten());
        check_times(default_time, max_time, &qos, &src)?;
        check_capacity(self.cpus, self.memory, &src)?;
        let node_name = node_name_of(self.node_name, &src)?;
        let cgroup_parent = cgroup_parent_of(self.cgroup_parent, &src)?;
        let spool_dir = spool_dir_of(self.spool_dir, &src)?;
        let billing = billing_of(self.billing, &gpus, &src)?;
        let fairshare = fairshare_of(&self.fairshare);
        let priority = PriorityWeights {
            age: self.priority.weight_age.unwrap_or(1_000),
            fairshare: self.priority.weight_fairshare.unwrap_or(10_000),
            qos: self.priority.weight_qos.unwrap_or(100_000),
            size: self.priority.weight_size.unwrap_or(0),
            max_age: self.priority.max_age.flatten().unwrap_or(7 * 86_400),
        };
        let timezone = timezone_of(self.timezone.as_ref(), &src)?;
        let notify_command = self
            .notify_command
            .map(|c| {
                parse_command(c.get_ref())
                    .map_err(|e| fail(Some(c.span()), "notify_command", e.to_string()))
            })
            .transpose()?;
        let metrics_listen = self
            .metrics_listen
            .map(|l| {
                parse_listen("metrics_listen", l.get_ref())
                    .map_err(|e| fail(Some(l.span()), "metrics_listen", e.to_string()))
            })
            .transpose()?;
        let pool = pool::pool(self.pool, &src)?;
        Ok(Config {
            pool,
            web: super::web::web(self.web, &src)?,
            containers: super::containers::containers(self.containers, &src)?,
            interactive: super::interactive::interactive(self.interactive, &qos, &src)?,
            standby: self
                .standby
                .map(|raw| super::standby::standby(raw, &node_name, &src))
                .transpose()?,
            path: path.to_path_buf(),
            spool_dir,
            timezone,
            node_name,
            admins: self.admins,
            allow_root_jobs: self.allow_root_jobs,
            kill_invalid_dependency: self.kill_invalid_dependency,
            max_array_size: self.max_array_size.unwrap_or(DEFAULT_MAX_ARRAY_SIZE),
            backfill_depth: self.backfill_depth.unwrap_or(DEFAULT_BACKFILL_DEPTH),
            gpu_sample_secs: self.gpu_sample_secs.unwrap_or(30),
            metrics_file: self.metrics_file,
            metrics_every_secs: self.metrics_every_secs.unwrap_or(15).max(1),
            notify_command,
            notify_timeout_secs: self.notify_timeout_secs.unwrap_or(30).max(1),
            private_data: self.private_data,
            min_job_age_secs: self.min_job_age_secs.unwrap_or(300),
            purge_after_months: purge_after_months(self.purge_after_months, &src)?,
            keep_payloads_days: self.keep_payloads_days,
            metrics_listen,
            low_utilization_pct: low_utilization_pct(self.low_utilization_pct, &src)?,
            preempt_wait: self.preempt_wait.flatten().unwrap_or(60),
            max_preemptions: self.max_preemptions.unwrap_or(3),
            kill_wait: self.kill_wait.unwrap_or(30),
            requeue_delay: self.requeue_delay.unwrap_or(DEFAULT_REQUEUE_DELAY),
            max_quick_requeues: self
                .max_quick_requeues
                .unwrap_or(DEFAULT_MAX_QUICK_REQUEUES),
            default_time,
            max_time,
            default_qos,
            cpus: self.cpus,
            memory_mb: self.memory,
            max_spool_file: self.max_spool_file.map_or(4 << 20, |mb| mb << 20),
            spool_reserve: self.spool_reserve.map_or(16 << 20, |mb| mb << 20),
            log_file: self.log_file,
            cgroups: self
                .cgroups
                .unwrap_or(crate::model::isolation::Setting::Auto),
            cgroup_root: self
                .cgroup_root
                .unwrap_or_else(|| PathBuf::from(crate::model::isolation::DEFAULT_ROOT)),
            cgroup_parent,
            job_pids_max: self.job_pids_max.unwrap_or(4096),
            default_mem_per_gpu: self.default_mem_per_gpu,
            gpus,
            accounts,
            qos,
            fairshare,
            priority,
            billing,
        })
    }
}

/// The `[fairshare]` table, with its defaults: Fair Tree, a week's
/// half-life, usage never reset.
fn fairshare_of(raw: &super::raw::RawFairshare) -> Fairshare {
    Fairshare {
        algorithm: raw
            .algorithm
            .unwrap_or(crate::model::policy::Algorithm::FairTree),
        half_life: raw.half_life.unwrap_or(Some(7 * 86_400)),
        reset: raw.reset.unwrap_or(UsageReset::None),
    }
}

/// CPUs and memory the config declares instead of the host's: some.
fn check_capacity(cpus: Option<u32>, memory: Option<u64>, src: &Source) -> Result<(), ConfigError> {
    if cpus == Some(0) {
        return Err(src.fail(None, "cpus", "cpus must be at least 1".into()));
    }
    if memory == Some(0) {
        return Err(src.fail(None, "memory", "memory must be more than 0".into()));
    }
    Ok(())
}

/// Months of records to keep: 1 or more.
fn purge_after_months(
    months: Option<Spanned<u32>>,
    src: &Source,
) -> Result<Option<u32>, ConfigError> {
    match months {
        Some(m) if *m.get_ref() == 0 => Err(src.fail(
            Some(m.span()),
            "purge_after_months",
            "purge_after_months = 0 would purge the month in progress; give 1 or more (or leave it out to keep every job)".into(),
        )),
        m => Ok(m.map(|m| *m.get_ref())),
    }
}

/// The GPU utilisation below which a job counts as idle, in percent.
fn low_utilization_pct(pct: Option<Spanned<u32>>, src: &Source) -> Result<u32, ConfigError> {
    match pct {
        Some(p) if *p.get_ref() > 100 => Err(src.fail(
            Some(p.span()),
            "low_utilization_pct",
            format!(
                "low_utilization_pct = {} is not a percentage (0 to 100)",
                p.get_ref()
            ),
        )),
        p => Ok(p.map_or(20, |p| *p.get_ref())),
    }
}

/// The QoS of jobs that name none: the config's, else `medium`, else
/// the only one.
fn default_qos_of(
    chosen: Option<Spanned<String>>,
    qos: &[Qos],
    src: &Source,
) -> Result<String, ConfigError> {
    Ok(match chosen {
        Some(spanned) => {
            let name = spanned.get_ref().clone();
            if !qos.iter().any(|q| q.name == name) {
                let known: Vec<&str> = qos.iter().map(|q| q.name.as_str()).collect();
                return Err(src.fail(
                    Some(spanned.span()),
                    "default_qos",
                    format!("unknown QoS '{name}' (known: {})", known.join(", ")),
                ));
            }
            name
        }
        None if qos.iter().any(|q| q.name == "medium") => "medium".to_string(),
        None if qos.len() == 1 => qos[0].name.clone(),
        // Not the first table's, silently: that could be the highest.
        None => {
            let known: Vec<&str> = qos.iter().map(|q| q.name.as_str()).collect();
            return Err(src.fail(
                None,
                "default_qos",
                format!(
                    "the [[qos]] tables replace the built-in levels and define no 'medium', the default; set default_qos to one of {}",
                    known.join(", ")
                ),
            ));
        }
    })
}

/// Default time limits within the maximum, the config's and each QoS's.
fn check_times(
    default_time: Option<u64>,
    max_time: Option<u64>,
    qos: &[Qos],
    src: &Source,
) -> Result<(), ConfigError> {
    if let (Some(d), Some(m)) = (default_time, max_time) {
        if d > m {
            return Err(src.fail(
                None,
                "default_time",
                format!(
                    "default_time ({}) exceeds max_time ({})",
                    units::format_duration(d),
                    units::format_duration(m)
                ),
            ));
        }
    }
    if let (Some(q), Some(m)) = (
        qos.iter().find(|q| {
            q.default_time
                .is_some_and(|d| d > max_time.unwrap_or(u64::MAX))
        }),
        max_time,
    ) {
        return Err(src.fail(
            None,
            "default_time",
            format!(
                "QoS '{}': default_time ({}) exceeds the config's max_time ({})",
                q.name,
                units::format_duration(q.default_time.unwrap_or(0)),
                units::format_duration(m)
            ),
        ));
    }
    Ok(())
}

/// The pool's size, where the config alone says it: its own GPUs when
/// declared and no other node may join.
fn declared_pool_size(pool_on: bool, gpus: &[GpuDecl]) -> Option<u32> {
    (!pool_on && !gpus.is_empty()).then(|| gpus.iter().map(|g| g.count).sum())
}

/// This server's name in the pool: the config's, else the host's.
fn node_name_of(name: Option<String>, src: &Source) -> Result<String, ConfigError> {
    Ok(match name {
        Some(n) if !valid_name(&n) => {
            return Err(src.fail(None, "node_name", format!("invalid node name '{n}'")));
        }
        Some(n) => n,
        None => nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .map(|h| h.split('.').next().unwrap_or("localhost").to_string())
            .filter(|h| valid_name(h))
            .unwrap_or_else(|| "localhost".to_string()),
    })
}

/// The cgroup that holds the jobs' groups.
fn cgroup_parent_of(parent: Option<Spanned<String>>, src: &Source) -> Result<String, ConfigError> {
    Ok(match parent {
        Some(p) if !valid_name(p.get_ref()) => {
            return Err(src.fail(
                Some(p.span()),
                "cgroup_parent",
                format!(
                    "invalid cgroup name '{}' (letters, digits, '-', '_', '.')",
                    p.get_ref()
                ),
            ))
        }
        Some(p) => p.into_inner(),
        None => crate::model::isolation::DEFAULT_PARENT.to_string(),
    })
}

/// The spool directory, which must be absolute.
fn spool_dir_of(dir: Option<PathBuf>, src: &Source) -> Result<PathBuf, ConfigError> {
    let spool_dir = dir.unwrap_or_else(|| PathBuf::from(DEFAULT_SPOOL_DIR));
    if !spool_dir.is_absolute() {
        return Err(src.fail(
            None,
            "spool_dir",
            format!(
                "spool_dir must be an absolute path, not '{}'",
                spool_dir.display()
            ),
        ));
    }
    Ok(spool_dir)
}

/// Billing weights per GPU type: 0 or more, for declared types.
fn billing_of(
    weights: std::collections::BTreeMap<String, Spanned<f64>>,
    gpus: &[GpuDecl],
    src: &Source,
) -> Result<std::collections::BTreeMap<String, f64>, ConfigError> {
    let mut billing = std::collections::BTreeMap::new();
    for (gpu_type, weight) in weights {
        if !weight.get_ref().is_finite() || *weight.get_ref() < 0.0 {
            return Err(src.fail(
                Some(weight.span()),
                &gpu_type,
                format!(
                    "a billing weight must be 0 or more, not {}",
                    weight.get_ref()
                ),
            ));
        }
        if !gpus.is_empty() && !gpus.iter().any(|g| g.gpu_type == gpu_type) {
            let known: Vec<&str> = gpus.iter().map(|g| g.gpu_type.as_str()).collect();
            return Err(src.fail(
                Some(weight.span()),
                &gpu_type,
                format!("[billing] names GPU type '{gpu_type}', which no [[gpus]] table declares (declared: {})", known.join(", ")),
            ));
        }
        billing.insert(gpu_type, *weight.get_ref());
    }
    Ok(billing)
}

/// The time zone of reports and limit windows (the system's when first
/// asked for, unless the config names one).
fn timezone_of(
    name: Option<&Spanned<String>>,
    src: &Source,
) -> Result<std::sync::OnceLock<jiff::tz::TimeZone>, ConfigError> {
    Ok(match name {
        Some(name) => {
            std::sync::OnceLock::from(jiff::tz::TimeZone::get(name.get_ref()).map_err(|e| {
                src.fail(
                    Some(name.span()),
                    "timezone",
                    format!(
                        "unknown time zone '{}' ({e}); use a name such as Europe/Berlin or UTC",
                        name.get_ref()
                    ),
                )
            })?)
        }
        // The system's, found when first asked for.
        None => std::sync::OnceLock::new(),
    })
}
