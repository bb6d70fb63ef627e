//! `ysched.toml`: parsing and validating the configuration into typed structs.
//!
//! Every error names the file, the line and the key, so that a bad reload can
//! be refused with a message an administrator can act on.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

/// The most tasks one `--array` may make, unless the config says otherwise
/// (Slurm's MaxArraySize is 1001: indices 0 to 1000).
pub const DEFAULT_MAX_ARRAY_SIZE: u32 = 1001;

use serde::{Deserialize, Deserializer};
use thiserror::Error;
use toml::Spanned;

use crate::model::units;

pub const DEFAULT_CONFIG_PATH: &str = "/etc/ysched/ysched.toml";
pub const DEFAULT_SPOOL_DIR: &str = "/var/spool/ysched";
/// The account every user may use when the config lists none.
pub const DEFAULT_ACCOUNT: &str = "default";
/// Reservations per pass unless the config says (`backfill_depth`).
pub const DEFAULT_BACKFILL_DEPTH: usize = 100;
/// Seconds a preempted job has to checkpoint, unless its QoS says.
pub const DEFAULT_GRACE_TIME: u64 = 120;

#[derive(Debug, Error)]
pub struct ConfigError {
    pub path: PathBuf,
    pub line: Option<usize>,
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ": line {line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": key '{key}'")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// One GPU type declared in the config: `count` devices of one model.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuDecl {
    pub gpu_type: String,
    pub count: u32,
    pub memory_mb: u64,
    /// One device file per GPU, when given.
    pub devices: Vec<PathBuf>,
    /// GPUs come in groups of this many consecutive ones that share an
    /// NVLink or PCIe switch; `None`: the table is one group.
    pub group_size: Option<u32>,
    /// Names `--constraint` may ask for (`nvlink`, `sxm4`, ...).
    pub features: Vec<String>,
    /// Slots each GPU is shared in by `--gpus shard:N` jobs (0: not shared).
    pub shards: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Account {
    pub name: String,
    /// The account it is part of (`None`: directly under the root).
    pub parent: Option<String>,
    /// Its claim relative to its siblings.
    pub shares: f64,
    /// User names; `*` admits everyone.
    pub users: Vec<String>,
    pub limits: AccountLimits,
    pub budget: Option<Budget>,
    /// Users who may approve its jobs (and those of accounts below it).
    pub coordinators: Vec<String>,
    /// Which of its jobs wait for a coordinator's approval.
    pub approval: Approval,
}

/// Jobs that need a coordinator's approval before they may run: above a
/// size in GPU-hours (GPUs x time limit), or on given GPU types.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Approval {
    pub above_gpu_hours: Option<f64>,
    pub gpu_types: Vec<String>,
}

/// Tokens an account (with everything below it) may spend per period.
#[derive(Clone, Debug, PartialEq)]
pub struct Budget {
    /// In billing-seconds (the config gives tokens: billing-hours).
    pub amount: i64,
    pub period: crate::model::policy::Period,
    pub over: crate::model::policy::OverBudget,
    /// The used fraction at which its users are warned.
    pub warning: f64,
}

/// What an account (with everything below it) and each of its users may
/// use. `None`: no limit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccountLimits {
    /// GPUs its running jobs hold at once, all types.
    pub max_gpus: Option<u32>,
    /// Other values of max_gpus at some times of the week (the first
    /// window that holds wins).
    pub max_gpus_windows: Vec<crate::model::policy::Window>,
    /// The same, by GPU type.
    pub max_gpus_by_type: std::collections::BTreeMap<String, u32>,
    pub max_running_jobs: Option<u32>,
    /// Pending and running jobs at once (refused at submit beyond it).
    pub max_submitted_jobs: Option<u32>,
    pub max_gpus_per_job: Option<u32>,
    /// The longest time limit a job of it may have (seconds).
    pub max_time: Option<u64>,
    /// The same limits for each user of the account.
    pub max_gpus_per_user: Option<u32>,
    pub max_running_jobs_per_user: Option<u32>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Qos {
    pub name: String,
    /// Higher runs first.
    pub priority: i64,
    /// Multiplies the usage charged for its jobs.
    pub usage_factor: f64,
    /// GPUs kept free for its jobs, which other QoS may not use.
    pub reserve: Option<Reserve>,
    /// Jobs it may preempt may use its reserve meanwhile: they are
    /// preempted when its own jobs need the GPUs.
    pub lend_reserve: bool,
    /// The time limit of its jobs that give none (before the config's).
    pub default_time: Option<u64>,
    /// The longest time limit its jobs may ask for (Slurm's MaxWall).
    pub max_time: Option<u64>,
    /// GPUs one user's running jobs of this QoS may hold at once.
    pub max_gpus_per_user: Option<u32>,
    /// QoS levels whose running jobs its jobs may preempt.
    pub preempt: Vec<String>,
    /// What happens to its jobs when they are preempted.
    pub preempt_mode: PreemptMode,
    /// Seconds its preempted jobs get between the signal and SIGKILL.
    pub grace_time: u64,
    /// Whether its jobs may be preempted at all.
    pub preemptible: bool,
    /// Seconds its jobs run before they may be preempted (Slurm's
    /// PreemptExemptTime), so that no job is stopped as soon as it starts.
    pub min_run_time: u64,
    /// Who may submit with it; `None`: everyone.
    pub allowed: Option<QosAccess>,
}

/// What a preempted job of a QoS becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PreemptMode {
    /// Signalled, given its grace, and put back in the queue with its id.
    Requeue,
    /// Signalled, given its grace, and ended as PREEMPTED.
    Cancel,
    /// Its cgroup frozen until the GPUs are free again; keeps GPU memory.
    Suspend,
}

impl PreemptMode {
    pub fn name(self) -> &'static str {
        match self {
            PreemptMode::Requeue => "requeue",
            PreemptMode::Cancel => "cancel",
            PreemptMode::Suspend => "suspend",
        }
    }
}

/// Who may use a restricted QoS: users and accounts named, and the
/// coordinators of the job's account where `coordinators` says so.
/// Admins always may.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QosAccess {
    pub users: Vec<String>,
    pub accounts: Vec<String>,
    pub coordinators: bool,
}

/// A QoS's reserve: a number of GPUs, or a fraction of the server's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reserve {
    Gpus(u32),
    Fraction(f64),
}

impl Reserve {
    /// The GPUs reserved on a server of `total` GPUs (a fraction rounds up).
    pub fn gpus(self, total: u32) -> u32 {
        match self {
            Reserve::Gpus(n) => n.min(total),
            Reserve::Fraction(f) => ((f * f64::from(total)).ceil() as u32).min(total),
        }
    }
}

/// When decayed usage starts again from zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UsageReset {
    None,
    Daily,
    Weekly,
    Monthly,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Fairshare {
    pub algorithm: crate::model::policy::Algorithm,
    /// Seconds; `None`: usage never decays.
    pub half_life: Option<u64>,
    pub reset: UsageReset,
}

/// The multifactor priority's weights: each factor is in [0, 1], and a
/// job's priority is the weighted sum (minus its nice value).
#[derive(Clone, Debug, PartialEq)]
pub struct PriorityWeights {
    pub age: u64,
    pub fairshare: u64,
    pub qos: u64,
    pub size: u64,
    /// The age at which the age factor reaches 1.
    pub max_age: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The file this was read from (for messages).
    pub path: PathBuf,
    pub spool_dir: PathBuf,
    pub node_name: String,
    pub admins: Vec<String>,
    pub allow_root_jobs: bool,
    /// Cancel a pending job whose dependency can never be satisfied
    /// (Slurm's kill_invalid_depend) instead of leaving it pending.
    pub kill_invalid_dependency: bool,
    /// Array task indices go from 0 to this minus one (Slurm's MaxArraySize).
    pub max_array_size: u32,
    /// How many of the highest-priority jobs that cannot start now get a
    /// reservation that later jobs may not delay (Slurm's bf_max_job_test).
    pub backfill_depth: usize,
    /// Seconds between GPU utilisation samples (0: none).
    pub gpu_sample_secs: u64,
    /// Where the daemon writes its metrics (Prometheus text), if anywhere.
    pub metrics_file: Option<PathBuf>,
    /// Seconds between writes of the metrics file.
    pub metrics_every_secs: u64,
    /// Where the daemon serves its metrics over HTTP (`/metrics`), if anywhere.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// The program (and its arguments) run with each notification's JSON on
    /// its stdin; `None`: no notifications.
    pub notify_command: Option<Vec<String>>,
    /// Seconds a notification command may run before it is killed.
    pub notify_timeout_secs: u64,
    /// What users see of other users' jobs.
    pub private_data: PrivateData,
    /// Seconds `ysqueue` still lists a finished job when asked for its
    /// state (Slurm's MinJobAge).
    pub min_job_age_secs: u64,
    /// Months a finished job's row is kept after the month it ended in
    /// (then summarised and purged); `None`: forever.
    pub purge_after_months: Option<u32>,
    /// Mean utilisation (percent) below which a job's GPUs count as idle.
    pub low_utilization_pct: u32,
    /// A job that may preempt does not when it would start within this
    /// many seconds anyway (a running job about to end).
    pub preempt_wait: u64,
    /// A job preempted this many times is not preempted again.
    pub max_preemptions: u32,
    /// The zone of limit windows' days and hours and of reports' months
    /// (default: the system's). Looked up on first use: finding the
    /// system's zone's name scans the zone database, which most commands
    /// never need. Read it with `timezone()`.
    pub(crate) timezone: std::sync::OnceLock<jiff::tz::TimeZone>,
    /// Seconds between SIGTERM and SIGKILL when a job is stopped.
    pub kill_wait: u64,
    pub default_time: Option<u64>,
    pub max_time: Option<u64>,
    pub default_qos: String,
    /// CPUs and memory (MiB) the scheduler hands out; `None`: what the host has.
    pub cpus: Option<u32>,
    pub memory_mb: Option<u64>,
    pub max_spool_file: u64,
    /// Bytes kept free on the spool's filesystem for recording what the
    /// daemon holds when users fill it (0: none); see `spool::space`.
    pub spool_reserve: u64,
    pub log_file: Option<PathBuf>,
    /// Job isolation: auto-detected cgroup v1 or v2, forced, or off.
    pub cgroups: crate::model::isolation::Setting,
    pub cgroup_root: PathBuf,
    /// The group, in each hierarchy, that holds this daemon's job groups.
    pub cgroup_parent: String,
    /// The most processes one job may have (0: no limit).
    pub job_pids_max: u64,
    /// Memory (MiB) per GPU for jobs that give neither --mem nor --mem-per-gpu.
    pub default_mem_per_gpu: Option<u64>,
    pub gpus: Vec<GpuDecl>,
    pub accounts: Vec<Account>,
    pub qos: Vec<Qos>,
    pub fairshare: Fairshare,
    pub priority: PriorityWeights,
    /// Billing weight (tokens per GPU-hour) by GPU type; others weigh 1.
    pub billing: std::collections::BTreeMap<String, f64>,
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            path: path.to_path_buf(),
            line: None,
            key: None,
            message: format!("cannot read: {e}"),
        })?;
        Config::parse(&text, path)
    }

    /// Parses config text; `path` is used in messages only.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start));
            ConfigError {
                path: path.to_path_buf(),
                line,
                key: e.span().and_then(|s| key_at(text, s.start)),
                message: e.message().trim().to_string(),
            }
        })?;
        raw.validate(text, path)
    }

    /// The built-in config used when no file exists (personal mode, tests).
    /// The time zone of reports and limit windows.
    pub fn timezone(&self) -> &jiff::tz::TimeZone {
        self.timezone.get_or_init(jiff::tz::TimeZone::system)
    }

    pub fn builtin(path: &Path) -> Config {
        Config::parse("", path).expect("the empty config is valid")
    }

    /// Accounts `user` may charge, in config order; the first is the default.
    pub fn accounts_for(&self, user: &str) -> Vec<&str> {
        if self.accounts.is_empty() {
            return vec![DEFAULT_ACCOUNT];
        }
        self.accounts
            .iter()
            .filter(|a| a.users.iter().any(|u| u == user || u == "*"))
            .map(|a| a.name.as_str())
            .collect()
    }

    pub fn qos_named(&self, name: &str) -> Option<&Qos> {
        self.qos.iter().find(|q| q.name == name)
    }

    /// The QoS names in the config's order, joined by `separator`.
    pub fn qos_names(&self, separator: &str) -> String {
        self.qos
            .iter()
            .map(|q| q.name.as_str())
            .collect::<Vec<_>>()
            .join(separator)
    }

    /// The keys whose change a running daemon takes only at its next
    /// start (`yscontrol reload` says which were not applied).
    pub fn needs_restart(&self, new: &Config) -> Vec<&'static str> {
        let mut keys = Vec::new();
        let mut check = |key: &'static str, changed: bool| {
            if changed {
                keys.push(key);
            }
        };
        check("node_name", self.node_name != new.node_name);
        check("cgroups", self.cgroups != new.cgroups);
        check("cgroup_root", self.cgroup_root != new.cgroup_root);
        check("cgroup_parent", self.cgroup_parent != new.cgroup_parent);
        check("job_pids_max", self.job_pids_max != new.job_pids_max);
        check("metrics_listen", self.metrics_listen != new.metrics_listen);
        check("log_file", self.log_file != new.log_file);
        check("max_spool_file", self.max_spool_file != new.max_spool_file);
        check(
            "gpu_sample_secs",
            self.gpu_sample_secs != new.gpu_sample_secs,
        );
        keys
    }

    /// Root, and the users named in `admins`, may act on every job.
    pub fn is_admin(&self, uid: u32, user: &str) -> bool {
        uid == 0 || self.admins.iter().any(|a| a == user)
    }

    pub fn database_path(&self) -> PathBuf {
        self.spool_dir.join("ysched.db")
    }
}

/// Finds the config file as every command does: `$YS_CONF`, else
/// `/etc/ysched/ysched.toml`, else the user's `~/.config/ysched/ysched.toml`
/// (personal mode). Returns the path and whether it exists.
pub fn locate() -> (PathBuf, bool) {
    if let Some(path) = std::env::var_os("YS_CONF").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        let exists = path.exists();
        return (path, exists);
    }
    let system = PathBuf::from(DEFAULT_CONFIG_PATH);
    if system.exists() {
        return (system, true);
    }
    let user_dir = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
    if let Some(dir) = user_dir {
        let personal = dir.join("ysched").join("ysched.toml");
        if personal.exists() {
            return (personal, true);
        }
    }
    (system, false)
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())]
        .bytes()
        .filter(|&b| b == b'\n')
        .count()
        + 1
}

/// The key on the line holding `offset` (`count` in `count = "x"`), if any.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let offset = offset.min(text.len());
    let start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line = text[start..].lines().next().unwrap_or("");
    let (key, _) = line.split_once('=')?;
    let key = key.trim().trim_matches('"');
    (!key.is_empty() && !key.starts_with('[')).then(|| key.to_string())
}

// ---------------------------------------------------------------- raw form

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    spool_dir: Option<PathBuf>,
    node_name: Option<String>,
    #[serde(default)]
    admins: Vec<String>,
    #[serde(default)]
    allow_root_jobs: bool,
    #[serde(default)]
    kill_invalid_dependency: bool,
    max_array_size: Option<u32>,
    backfill_depth: Option<usize>,
    gpu_sample_secs: Option<u64>,
    metrics_file: Option<PathBuf>,
    metrics_every_secs: Option<u64>,
    metrics_listen: Option<Spanned<String>>,
    notify_command: Option<Spanned<String>>,
    notify_timeout_secs: Option<u64>,
    purge_after_months: Option<Spanned<u32>>,
    #[serde(default)]
    private_data: PrivateData,
    min_job_age_secs: Option<u64>,
    low_utilization_pct: Option<Spanned<u32>>,
    #[serde(default, deserialize_with = "de_time_limit")]
    preempt_wait: Option<Option<u64>>,
    max_preemptions: Option<u32>,
    timezone: Option<Spanned<String>>,
    kill_wait: Option<u64>,
    #[serde(default, deserialize_with = "de_time_limit")]
    default_time: Option<Option<u64>>,
    #[serde(default, deserialize_with = "de_time_limit")]
    max_time: Option<Option<u64>>,
    default_qos: Option<Spanned<String>>,
    cpus: Option<u32>,
    #[serde(default, deserialize_with = "de_memory")]
    memory: Option<u64>,
    #[serde(default, deserialize_with = "de_memory")]
    max_spool_file: Option<u64>,
    #[serde(default, deserialize_with = "de_memory")]
    spool_reserve: Option<u64>,
    log_file: Option<PathBuf>,
    cgroups: Option<crate::model::isolation::Setting>,
    cgroup_root: Option<PathBuf>,
    cgroup_parent: Option<Spanned<String>>,
    job_pids_max: Option<u64>,
    #[serde(default, deserialize_with = "de_memory")]
    default_mem_per_gpu: Option<u64>,
    #[serde(default)]
    gpus: Vec<Spanned<RawGpu>>,
    #[serde(default)]
    accounts: Vec<RawAccount>,
    #[serde(default)]
    qos: Vec<RawQos>,
    #[serde(default)]
    fairshare: RawFairshare,
    #[serde(default)]
    priority: RawPriority,
    #[serde(default)]
    billing: std::collections::BTreeMap<String, Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGpu {
    #[serde(rename = "type")]
    gpu_type: Spanned<String>,
    count: Option<u32>,
    #[serde(deserialize_with = "de_memory_required")]
    memory: u64,
    devices: Option<Spanned<String>>,
    group_size: Option<Spanned<u32>>,
    features: Option<Spanned<Vec<String>>>,
    shards: Option<Spanned<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAccount {
    name: Spanned<String>,
    parent: Option<Spanned<String>>,
    shares: Option<Spanned<f64>>,
    #[serde(default)]
    users: Vec<String>,
    max_gpus: Option<u32>,
    #[serde(default)]
    max_gpus_windows: Vec<Spanned<RawWindow>>,
    #[serde(default)]
    max_gpus_by_type: std::collections::BTreeMap<String, Spanned<u32>>,
    max_running_jobs: Option<u32>,
    max_submitted_jobs: Option<u32>,
    max_gpus_per_job: Option<u32>,
    #[serde(default, deserialize_with = "de_time_limit")]
    max_time: Option<Option<u64>>,
    max_gpus_per_user: Option<u32>,
    max_running_jobs_per_user: Option<u32>,
    budget: Option<Spanned<f64>>,
    budget_period: Option<crate::model::policy::Period>,
    over_budget: Option<crate::model::policy::OverBudget>,
    budget_warning: Option<Spanned<f64>>,
    #[serde(default)]
    coordinators: Vec<String>,
    approval_above_gpu_hours: Option<Spanned<f64>>,
    #[serde(default)]
    approval_gpu_types: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWindow {
    days: String,
    hours: String,
    max_gpus: u32,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFairshare {
    algorithm: Option<crate::model::policy::Algorithm>,
    #[serde(default, deserialize_with = "de_time_limit")]
    half_life: Option<Option<u64>>,
    reset: Option<UsageReset>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPriority {
    weight_age: Option<u64>,
    weight_fairshare: Option<u64>,
    weight_qos: Option<u64>,
    weight_size: Option<u64>,
    #[serde(default, deserialize_with = "de_time_limit")]
    max_age: Option<Option<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQos {
    name: Spanned<String>,
    priority: i64,
    usage_factor: Option<Spanned<f64>>,
    reserve: Option<Spanned<toml::Value>>,
    lend_reserve: Option<bool>,
    max_gpus_per_user: Option<u32>,
    #[serde(default, deserialize_with = "de_time_limit")]
    default_time: Option<Option<u64>>,
    #[serde(default, deserialize_with = "de_time_limit")]
    max_time: Option<Option<u64>>,
    preempt: Option<Spanned<Vec<String>>>,
    preempt_mode: Option<PreemptMode>,
    #[serde(default, deserialize_with = "de_time_limit")]
    grace_time: Option<Option<u64>>,
    preemptible: Option<bool>,
    #[serde(default, deserialize_with = "de_time_limit")]
    min_run_time: Option<Option<u64>>,
    users: Option<Vec<String>>,
    accounts: Option<Spanned<Vec<String>>>,
    coordinators: Option<bool>,
}

fn de_time_limit<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
    let text = String::deserialize(d)?;
    units::parse_time_limit(&text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn de_memory<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    de_memory_required(d).map(Some)
}

fn de_memory_required<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let text = String::deserialize(d)?;
    units::parse_memory_mb(&text).map_err(serde::de::Error::custom)
}

/// Names of GPU types, accounts and QoS: short, and safe in every output format.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

impl RawConfig {
    fn validate(self, text: &str, path: &Path) -> Result<Config, ConfigError> {
        let fail = |span: Option<std::ops::Range<usize>>, key: &str, message: String| ConfigError {
            path: path.to_path_buf(),
            line: span.map(|s| line_of(text, s.start)),
            key: Some(key.to_string()),
            message,
        };

        let mut gpus = Vec::new();
        let mut seen_types = HashSet::new();
        for spanned in &self.gpus {
            let span = spanned.span();
            let raw = spanned.get_ref();
            let gpu_type = raw.gpu_type.get_ref().clone();
            if !valid_name(&gpu_type) {
                return Err(fail(
                    Some(raw.gpu_type.span()),
                    "type",
                    format!("invalid GPU type '{gpu_type}' (letters, digits, '-', '_', '.')"),
                ));
            }
            if !seen_types.insert(gpu_type.clone()) {
                return Err(fail(
                    Some(raw.gpu_type.span()),
                    "type",
                    format!(
                        "GPU type '{gpu_type}' is declared twice; give one [[gpus]] table per type"
                    ),
                ));
            }
            let devices = match &raw.devices {
                Some(pattern) => expand_device_pattern(pattern.get_ref())
                    .map_err(|m| fail(Some(pattern.span()), "devices", m))?,
                None => Vec::new(),
            };
            let count = match (raw.count, devices.len()) {
                (Some(0), _) => {
                    return Err(fail(Some(span), "count", "count must be at least 1".into()))
                }
                (Some(c), 0) => c,
                (Some(c), n) if c as usize == n => c,
                (Some(c), n) => {
                    return Err(fail(
                        Some(span),
                        "count",
                        format!("count = {c} but devices names {n} device files"),
                    ))
                }
                (None, 0) => {
                    return Err(fail(
                        Some(span),
                        "count",
                        "missing count (or devices)".into(),
                    ))
                }
                (None, n) => n as u32,
            };
            if count > 1024 {
                return Err(fail(
                    Some(span),
                    "count",
                    format!("count = {count} is not a plausible number of GPUs"),
                ));
            }
            let group_size = match &raw.group_size {
                Some(g) if *g.get_ref() == 0 || *g.get_ref() > count => {
                    return Err(fail(
                        Some(g.span()),
                        "group_size",
                        format!("group_size = {} must be 1 to count ({count})", g.get_ref()),
                    ))
                }
                Some(g) => Some(*g.get_ref()),
                None => None,
            };
            let features = raw
                .features
                .as_ref()
                .map(|f| f.get_ref().clone())
                .unwrap_or_default();
            if let Some(bad) = features.iter().find(|f| !valid_name(f)) {
                return Err(fail(
                    raw.features.as_ref().map(|f| f.span()),
                    "features",
                    format!("invalid feature name '{bad}' (letters, digits, '-', '_', '.')"),
                ));
            }
            let shards = match &raw.shards {
                Some(s) if !(2..=128).contains(s.get_ref()) => {
                    return Err(fail(
                        Some(s.span()),
                        "shards",
                        format!(
                        "shards = {} must be 2 to 128 (leave it out for GPUs that are not shared)",
                        s.get_ref()
                    ),
                    ))
                }
                Some(s) => *s.get_ref(),
                None => 0,
            };
            gpus.push(GpuDecl {
                gpu_type,
                count,
                memory_mb: raw.memory,
                devices,
                group_size,
                features,
                shards,
            });
        }

        let mut accounts = Vec::new();
        let mut seen = HashSet::new();
        for raw in self.accounts {
            let name = raw.name.get_ref().clone();
            if !valid_name(&name) {
                return Err(fail(
                    Some(raw.name.span()),
                    "name",
                    format!("invalid account name '{name}' (letters, digits, '-', '_', '.')"),
                ));
            }
            if !seen.insert(name.clone()) {
                return Err(fail(
                    Some(raw.name.span()),
                    "name",
                    format!("account '{name}' is declared twice"),
                ));
            }
            let shares = match raw.shares {
                Some(s) if !s.get_ref().is_finite() || *s.get_ref() < 0.0 => {
                    return Err(fail(
                        Some(s.span()),
                        "shares",
                        format!("shares must be a number of 0 or more, not {}", s.get_ref()),
                    ))
                }
                Some(s) => *s.get_ref(),
                None => 1.0,
            };
            let mut max_gpus_by_type = std::collections::BTreeMap::new();
            for (gpu_type, max) in raw.max_gpus_by_type {
                if !self.gpus.is_empty()
                    && !self
                        .gpus
                        .iter()
                        .any(|g| *g.get_ref().gpu_type.get_ref() == gpu_type)
                {
                    return Err(fail(
                        Some(max.span()),
                        "max_gpus_by_type",
                        format!("account '{name}' limits GPU type '{gpu_type}', which no [[gpus]] table declares"),
                    ));
                }
                max_gpus_by_type.insert(gpu_type, max.into_inner());
            }
            let mut max_gpus_windows = Vec::new();
            for w in raw.max_gpus_windows {
                let span = w.span();
                let w = w.into_inner();
                max_gpus_windows.push(
                    crate::model::policy::Window::parse(&w.days, &w.hours, w.max_gpus).map_err(
                        |e| {
                            fail(
                                Some(span),
                                "max_gpus_windows",
                                format!("account '{name}': {e}"),
                            )
                        },
                    )?,
                );
            }
            let limits = AccountLimits {
                max_gpus: raw.max_gpus,
                max_gpus_windows,
                max_gpus_by_type,
                max_running_jobs: raw.max_running_jobs,
                max_submitted_jobs: raw.max_submitted_jobs,
                max_gpus_per_job: raw.max_gpus_per_job,
                max_time: raw.max_time.flatten(),
                max_gpus_per_user: raw.max_gpus_per_user,
                max_running_jobs_per_user: raw.max_running_jobs_per_user,
            };
            let budget = match raw.budget {
                Some(b) if !b.get_ref().is_finite() || *b.get_ref() < 0.0 => {
                    return Err(fail(Some(b.span()), "budget", format!("a budget is a number of tokens, 0 or more, not {}", b.get_ref())))
                }
                Some(b) => {
                    let warning = match raw.budget_warning {
                        Some(w) if !(0.0..=1.0).contains(w.get_ref()) => {
                            return Err(fail(
                                Some(w.span()),
                                "budget_warning",
                                format!("budget_warning is a fraction from 0 to 1, not {}", w.get_ref()),
                            ))
                        }
                        Some(w) => *w.get_ref(),
                        None => 0.8,
                    };
                    Some(Budget {
                        amount: (b.get_ref() * crate::model::policy::TOKEN).round() as i64,
                        period: raw.budget_period.unwrap_or(crate::model::policy::Period::Month),
                        over: raw.over_budget.unwrap_or(crate::model::policy::OverBudget::Refuse),
                        warning,
                    })
                }
                None if raw.budget_period.is_some() || raw.over_budget.is_some() || raw.budget_warning.is_some() => {
                    return Err(fail(
                        Some(raw.name.span()),
                        "budget",
                        format!("account '{name}' sets budget_period, over_budget or budget_warning but no budget"),
                    ))
                }
                None => None,
            };
            let above_gpu_hours = match raw.approval_above_gpu_hours {
                Some(h) if !h.get_ref().is_finite() || *h.get_ref() < 0.0 => {
                    return Err(fail(
                        Some(h.span()),
                        "approval_above_gpu_hours",
                        format!(
                            "approval_above_gpu_hours is a number of GPU-hours, 0 or more, not {}",
                            h.get_ref()
                        ),
                    ))
                }
                h => h.map(|h| h.into_inner()),
            };
            let mut gpu_types = Vec::new();
            for t in raw.approval_gpu_types {
                if !self
                    .gpus
                    .iter()
                    .any(|g| g.get_ref().gpu_type.get_ref() == t.get_ref())
                {
                    return Err(fail(
                        Some(t.span()),
                        "approval_gpu_types",
                        format!("account '{name}' names GPU type '{}', which no [[gpus]] table declares", t.get_ref()),
                    ));
                }
                gpu_types.push(t.into_inner());
            }
            accounts.push((
                Account {
                    name,
                    parent: raw.parent.as_ref().map(|p| p.get_ref().clone()),
                    shares,
                    users: raw.users,
                    limits,
                    budget,
                    coordinators: raw.coordinators,
                    approval: Approval {
                        above_gpu_hours,
                        gpu_types,
                    },
                },
                raw.parent.map(|p| p.span()),
            ));
        }
        // Parents must exist, and the accounts must form a tree.
        for (account, span) in &accounts {
            let Some(parent) = &account.parent else {
                continue;
            };
            if !accounts.iter().any(|(a, _)| &a.name == parent) {
                return Err(fail(
                    span.clone(),
                    "parent",
                    format!(
                        "account '{}' names an unknown parent account '{parent}'",
                        account.name
                    ),
                ));
            }
            let mut seen_on_path = HashSet::new();
            let mut at = Some(account.name.clone());
            while let Some(name) = at {
                if !seen_on_path.insert(name.clone()) {
                    return Err(fail(
                        span.clone(),
                        "parent",
                        format!("accounts form a cycle through '{}'", account.name),
                    ));
                }
                at = accounts
                    .iter()
                    .find(|(a, _)| a.name == name)
                    .and_then(|(a, _)| a.parent.clone());
            }
        }
        let accounts: Vec<Account> = accounts.into_iter().map(|(a, _)| a).collect();

        let mut qos = Vec::new();
        let mut seen = HashSet::new();
        // Names each QoS refers to, checked once all are known.
        let mut qos_preempt_refs = Vec::new();
        for raw in self.qos {
            let name = raw.name.get_ref().clone();
            if !valid_name(&name) {
                return Err(fail(
                    Some(raw.name.span()),
                    "name",
                    format!("invalid QoS name '{name}' (letters, digits, '-', '_', '.')"),
                ));
            }
            if !seen.insert(name.clone()) {
                return Err(fail(
                    Some(raw.name.span()),
                    "name",
                    format!("QoS '{name}' is declared twice"),
                ));
            }
            let usage_factor = match raw.usage_factor {
                Some(f) if !f.get_ref().is_finite() || *f.get_ref() < 0.0 => {
                    return Err(fail(
                        Some(f.span()),
                        "usage_factor",
                        format!("usage_factor must be 0 or more, not {}", f.get_ref()),
                    ))
                }
                Some(f) => *f.get_ref(),
                None => 1.0,
            };
            let reserve = match raw.reserve {
                None => None,
                Some(r) => {
                    let bad = |why: String| fail(Some(r.span()), "reserve", why);
                    match r.get_ref() {
                        toml::Value::Integer(n) => Some(Reserve::Gpus(u32::try_from(*n).map_err(|_| {
                            bad(format!("reserve is a number of GPUs (0 or more) or a percentage like \"25%\", not {n}"))
                        })?)),
                        toml::Value::String(s) => {
                            let fraction = s
                                .trim()
                                .strip_suffix('%')
                                .and_then(|p| p.trim().parse::<f64>().ok())
                                .filter(|p| (0.0..=100.0).contains(p))
                                .ok_or_else(|| bad(format!("reserve is a number of GPUs or a percentage from 0% to 100%, not \"{s}\"")))?;
                            Some(Reserve::Fraction(fraction / 100.0))
                        }
                        other => return Err(bad(format!(
                            "reserve is a number of GPUs or a percentage like \"25%\", not {other}"
                        ))),
                    }
                }
            };
            let (default_time, max_time) = (raw.default_time.flatten(), raw.max_time.flatten());
            if let (Some(d), Some(m)) = (default_time, max_time) {
                if d > m {
                    return Err(fail(
                        Some(raw.name.span()),
                        "default_time",
                        format!(
                            "QoS '{name}': default_time ({}) is above its max_time ({})",
                            units::format_duration(d),
                            units::format_duration(m)
                        ),
                    ));
                }
            }
            let defaults = default_qos_levels()
                .into_iter()
                .find(|q| q.name == name)
                .unwrap_or_else(|| default_qos(&name, raw.priority));
            let allowed =
                if raw.users.is_some() || raw.accounts.is_some() || raw.coordinators.is_some() {
                    Some(QosAccess {
                        users: raw.users.clone().unwrap_or_default(),
                        accounts: raw
                            .accounts
                            .as_ref()
                            .map(|a| a.get_ref().clone())
                            .unwrap_or_default(),
                        coordinators: raw.coordinators.unwrap_or(false),
                    })
                } else {
                    defaults.allowed.clone()
                };
            let grace_time = match raw.grace_time {
                Some(None) => {
                    return Err(fail(
                        Some(raw.name.span()),
                        "grace_time",
                        format!("QoS '{name}': grace_time must be a duration, not UNLIMITED"),
                    ))
                }
                Some(Some(g)) => g,
                None => defaults.grace_time,
            };
            qos_preempt_refs.push((name.clone(), raw.preempt.clone(), raw.accounts.clone()));
            qos.push(Qos {
                name,
                priority: raw.priority,
                usage_factor,
                reserve,
                lend_reserve: raw.lend_reserve.unwrap_or(false),
                default_time,
                max_time,
                max_gpus_per_user: raw.max_gpus_per_user,
                preempt: raw
                    .preempt
                    .map(|p| p.into_inner())
                    .unwrap_or(defaults.preempt),
                preempt_mode: raw.preempt_mode.unwrap_or(defaults.preempt_mode),
                grace_time,
                preemptible: raw.preemptible.unwrap_or(defaults.preemptible),
                min_run_time: raw.min_run_time.flatten().unwrap_or(defaults.min_run_time),
                allowed,
            });
        }
        if qos.is_empty() {
            qos = default_qos_levels();
        }
        // Defaults name the default levels; keep those that exist here.
        let names: Vec<String> = qos.iter().map(|q| q.name.clone()).collect();
        for q in &mut qos {
            q.preempt.retain(|p| names.contains(p));
        }
        for (name, preempt, accounts_allowed) in qos_preempt_refs {
            if let Some(p) = preempt {
                if let Some(bad) = p
                    .get_ref()
                    .iter()
                    .find(|v| !qos.iter().any(|q| q.name == **v))
                {
                    return Err(fail(
                        Some(p.span()),
                        "preempt",
                        format!(
                            "QoS '{name}' preempts unknown QoS '{bad}' (known: {})",
                            qos.iter()
                                .map(|q| q.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
                if p.get_ref().contains(&name) {
                    return Err(fail(
                        Some(p.span()),
                        "preempt",
                        format!("QoS '{name}' may not preempt its own jobs"),
                    ));
                }
            }
            if let Some(a) = accounts_allowed {
                if let Some(bad) = a
                    .get_ref()
                    .iter()
                    .find(|v| !accounts.iter().any(|x| x.name == **v))
                {
                    return Err(fail(
                        Some(a.span()),
                        "accounts",
                        format!("QoS '{name}' names unknown account '{bad}'"),
                    ));
                }
            }
        }

        let default_qos = match self.default_qos {
            Some(spanned) => {
                let name = spanned.get_ref().clone();
                if !qos.iter().any(|q| q.name == name) {
                    let known: Vec<&str> = qos.iter().map(|q| q.name.as_str()).collect();
                    return Err(fail(
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
                return Err(fail(
                    None,
                    "default_qos",
                    format!(
                        "the [[qos]] tables replace the built-in levels and define no 'medium', the default; set default_qos to one of {}",
                        known.join(", ")
                    ),
                ));
            }
        };

        let default_time = self.default_time.flatten();
        let max_time = self.max_time.flatten();
        if let (Some(d), Some(m)) = (default_time, max_time) {
            if d > m {
                return Err(fail(
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
            return Err(fail(
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
        if self.cpus == Some(0) {
            return Err(fail(None, "cpus", "cpus must be at least 1".into()));
        }
        if self.memory == Some(0) {
            return Err(fail(None, "memory", "memory must be more than 0".into()));
        }
        let node_name = match self.node_name {
            Some(n) if !valid_name(&n) => {
                return Err(fail(None, "node_name", format!("invalid node name '{n}'")));
            }
            Some(n) => n,
            None => nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
                .map(|h| h.split('.').next().unwrap_or("localhost").to_string())
                .filter(|h| valid_name(h))
                .unwrap_or_else(|| "localhost".to_string()),
        };
        let cgroup_parent = match self.cgroup_parent {
            Some(p) if !valid_name(p.get_ref()) => {
                return Err(fail(
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
        };
        let spool_dir = self
            .spool_dir
            .unwrap_or_else(|| PathBuf::from(DEFAULT_SPOOL_DIR));
        if !spool_dir.is_absolute() {
            return Err(fail(
                None,
                "spool_dir",
                format!(
                    "spool_dir must be an absolute path, not '{}'",
                    spool_dir.display()
                ),
            ));
        }
        let mut billing = std::collections::BTreeMap::new();
        for (gpu_type, weight) in self.billing {
            if !weight.get_ref().is_finite() || *weight.get_ref() < 0.0 {
                return Err(fail(
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
                return Err(fail(
                    Some(weight.span()),
                    &gpu_type,
                    format!("[billing] names GPU type '{gpu_type}', which no [[gpus]] table declares (declared: {})", known.join(", ")),
                ));
            }
            billing.insert(gpu_type, *weight.get_ref());
        }
        let fairshare = Fairshare {
            algorithm: self
                .fairshare
                .algorithm
                .unwrap_or(crate::model::policy::Algorithm::FairTree),
            half_life: match self.fairshare.half_life {
                Some(h) => h,
                None => Some(7 * 86_400),
            },
            reset: self.fairshare.reset.unwrap_or(UsageReset::None),
        };
        let priority = PriorityWeights {
            age: self.priority.weight_age.unwrap_or(1_000),
            fairshare: self.priority.weight_fairshare.unwrap_or(10_000),
            qos: self.priority.weight_qos.unwrap_or(100_000),
            size: self.priority.weight_size.unwrap_or(0),
            max_age: self.priority.max_age.flatten().unwrap_or(7 * 86_400),
        };
        let timezone = match &self.timezone {
            Some(name) => {
                std::sync::OnceLock::from(jiff::tz::TimeZone::get(name.get_ref()).map_err(|e| {
                    fail(
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
        };
        Ok(Config {
            path: path.to_path_buf(),
            spool_dir,
            timezone,
            node_name,
            admins: self.admins,
            allow_root_jobs: self.allow_root_jobs,
            kill_invalid_dependency: self.kill_invalid_dependency,
            max_array_size: self
                .max_array_size
                .unwrap_or(DEFAULT_MAX_ARRAY_SIZE),
            backfill_depth: self.backfill_depth.unwrap_or(DEFAULT_BACKFILL_DEPTH),
            gpu_sample_secs: self.gpu_sample_secs.unwrap_or(30),
            metrics_file: self.metrics_file,
            metrics_every_secs: self.metrics_every_secs.unwrap_or(15).max(1),
            notify_command: match self.notify_command {
                None => None,
                Some(command) => Some(
                    parse_command(command.get_ref())
                        .map_err(|e| fail(Some(command.span()), "notify_command", e))?,
                ),
            },
            notify_timeout_secs: self.notify_timeout_secs.unwrap_or(30).max(1),
            private_data: self.private_data,
            min_job_age_secs: self.min_job_age_secs.unwrap_or(300),
            purge_after_months: match self.purge_after_months {
                Some(m) if *m.get_ref() == 0 => {
                    return Err(fail(
                        Some(m.span()),
                        "purge_after_months",
                        "purge_after_months = 0 would purge the month in progress; give 1 or more (or leave it out to keep every job)".into(),
                    ))
                }
                Some(m) => Some(*m.get_ref()),
                None => None,
            },
            metrics_listen: match self.metrics_listen {
                None => None,
                Some(listen) => Some(
                    parse_listen(listen.get_ref())
                        .map_err(|e| fail(Some(listen.span()), "metrics_listen", e))?,
                ),
            },
            low_utilization_pct: match self.low_utilization_pct {
                Some(p) if *p.get_ref() > 100 => {
                    return Err(fail(
                        Some(p.span()),
                        "low_utilization_pct",
                        format!(
                            "low_utilization_pct = {} is not a percentage (0 to 100)",
                            p.get_ref()
                        ),
                    ))
                }
                Some(p) => *p.get_ref(),
                None => 20,
            },
            preempt_wait: self.preempt_wait.flatten().unwrap_or(60),
            max_preemptions: self.max_preemptions.unwrap_or(3),
            kill_wait: self.kill_wait.unwrap_or(30),
            default_time,
            max_time,
            default_qos,
            cpus: self.cpus,
            memory_mb: self.memory,
            max_spool_file: self.max_spool_file.map_or(4 << 20, |mb| mb << 20),
            spool_reserve: self.spool_reserve.map_or(16 << 20, |mb| mb << 20),
            log_file: self.log_file,
            cgroups: self.cgroups.unwrap_or(crate::model::isolation::Setting::Auto),
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

/// The QoS levels used when the config lists none.
pub fn default_qos_levels() -> Vec<Qos> {
    [
        ("critical", 300),
        ("high", 200),
        ("medium", 100),
        ("low", 0),
    ]
    .into_iter()
    .map(|(name, priority)| {
        let mut q = default_qos(name, priority);
        match name {
            // Urgent work: only coordinators and admins, and never stopped.
            "critical" => {
                q.preempt = vec!["high".into(), "medium".into(), "low".into()];
                q.preemptible = false;
                q.allowed = Some(QosAccess {
                    coordinators: true,
                    ..QosAccess::default()
                });
            }
            "high" => q.preempt = vec!["low".into()],
            _ => {}
        }
        q
    })
    .collect()
}

/// A QoS with no preemption rights, open to everyone, preemptible with a
/// 120 s grace, requeued.
fn default_qos(name: &str, priority: i64) -> Qos {
    Qos {
        name: name.to_string(),
        priority,
        usage_factor: 1.0,
        reserve: None,
        lend_reserve: false,
        default_time: None,
        max_time: None,
        max_gpus_per_user: None,
        preempt: Vec::new(),
        preempt_mode: PreemptMode::Requeue,
        grace_time: DEFAULT_GRACE_TIME,
        preemptible: true,
        min_run_time: 0,
        allowed: None,
    }
}

/// Expands `/dev/nvidia[0-3]` or `/dev/nvidia[0,2-3]` into one path per device.
pub fn expand_device_pattern(pattern: &str) -> Result<Vec<PathBuf>, String> {
    let bad =
        |why: &str| format!("invalid device pattern '{pattern}': {why} (e.g. /dev/nvidia[0-3])");
    let Some(open) = pattern.find('[') else {
        if pattern.contains(']') {
            return Err(bad("unmatched ']'"));
        }
        return Ok(vec![PathBuf::from(pattern)]);
    };
    let close = pattern[open..]
        .find(']')
        .map(|i| i + open)
        .ok_or_else(|| bad("missing ']'"))?;
    let (prefix, ranges, suffix) = (
        &pattern[..open],
        &pattern[open + 1..close],
        &pattern[close + 1..],
    );
    if suffix.contains('[') || suffix.contains(']') {
        return Err(bad("only one [...] range is supported"));
    }
    let mut out = Vec::new();
    for part in ranges.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo, hi),
            None => (part, part),
        };
        let lo: u32 = lo
            .trim()
            .parse()
            .map_err(|_| bad("range bounds must be numbers"))?;
        let hi: u32 = hi
            .trim()
            .parse()
            .map_err(|_| bad("range bounds must be numbers"))?;
        if lo > hi || hi - lo > 1024 {
            return Err(bad("range is empty or too large"));
        }
        for n in lo..=hi {
            out.push(PathBuf::from(format!("{prefix}{n}{suffix}")));
        }
    }
    let unique: HashSet<&PathBuf> = out.iter().collect();
    if unique.len() != out.len() {
        return Err(bad("a device is listed twice"));
    }
    Ok(out)
}

/// What a user sees of other users' jobs (Slurm's PrivateData): their
/// coordinators and admins see everything of the accounts they look after.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrivateData {
    /// Others' jobs are listed, without where they run and write, their
    /// comment and mail address; reports cover one's own jobs.
    #[default]
    Details,
    /// Others' jobs are not shown at all.
    Jobs,
    /// Everyone sees every job whole, and reports cover everyone.
    None,
}

/// `notify_command`: a program with arguments, split as a shell would
/// (quotes, no expansion); the program an absolute path.
fn parse_command(text: &str) -> Result<Vec<String>, String> {
    let words = shlex::split(text)
        .ok_or_else(|| format!("notify_command = '{text}' has an unclosed quote"))?;
    match words.first() {
        None => Err("notify_command is empty; leave it out for no notifications".into()),
        Some(program) if !program.starts_with('/') => Err(format!(
            "notify_command: '{program}' is not an absolute path (ysctld runs it without a shell or PATH search)"
        )),
        Some(_) => Ok(words),
    }
}

/// `metrics_listen`: `ADDRESS:PORT`, or a bare port on 127.0.0.1.
fn parse_listen(text: &str) -> Result<std::net::SocketAddr, String> {
    let text = text.trim();
    if let Ok(port) = text.parse::<u16>() {
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse().map_err(|_| {
        format!(
            "metrics_listen = '{text}' is not an address and port such as 127.0.0.1:9464 or [::1]:9464 (or a port alone, on 127.0.0.1)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/ysched/ysched.toml"))
    }

    #[test]
    fn empty_config_has_defaults() {
        let c = parse("").unwrap();
        assert_eq!(c.spool_dir, PathBuf::from(DEFAULT_SPOOL_DIR));
        assert_eq!(c.default_qos, "medium");
        assert_eq!(c.qos.len(), 4);
        assert_eq!(c.kill_wait, 30);
        assert_eq!(c.accounts_for("anyone"), vec!["default"]);
        assert!(c.gpus.is_empty());
    }

    #[test]
    fn gpus_accounts_and_qos() {
        let c = parse(
            r#"
spool_dir = "/tmp/spool"
admins = ["carol"]
default_qos = "urgent"
[[gpus]]
type = "a100"
memory = "80GiB"
devices = "/dev/nvidia[0-3]"
[[gpus]]
type = "rtx3090"
count = 2
memory = "24G"
[[accounts]]
name = "vision"
users = ["alice", "bob"]
[[accounts]]
name = "nlp"
users = ["bob"]
[[qos]]
name = "urgent"
priority = 10
[[qos]]
name = "normal"
priority = 1
"#,
        )
        .unwrap();
        assert_eq!(c.gpus[0].count, 4);
        assert_eq!(c.gpus[0].memory_mb, 80 * 1024);
        assert_eq!(c.gpus[0].devices[3], PathBuf::from("/dev/nvidia3"));
        assert_eq!(c.gpus[1].count, 2);
        assert_eq!(c.accounts_for("bob"), vec!["vision", "nlp"]);
        assert!(c.accounts_for("eve").is_empty());
        assert_eq!(c.default_qos, "urgent");
        assert!(c.is_admin(1234, "carol"));
        assert!(c.is_admin(0, "root"));
        assert!(!c.is_admin(1000, "alice"));
    }

    #[test]
    fn qos_tables_without_medium_must_name_the_default() {
        let two =
            "[[qos]]\nname = \"critical\"\npriority = 300\n[[qos]]\nname = \"low\"\npriority = 0\n";
        let e = parse(two).unwrap_err().to_string();
        assert!(
            e.contains("default_qos") && e.contains("critical, low"),
            "{e}"
        );
        let c = parse(&format!("default_qos = \"low\"\n{two}")).unwrap();
        assert_eq!(c.default_qos, "low");
    }

    #[test]
    fn errors_name_line_and_key() {
        let e = parse(
            "spool_dir = \"/x\"\n[[gpus]]\ntype = \"a100\"\ncount = \"four\"\nmemory = \"8G\"\n",
        )
        .unwrap_err();
        assert_eq!(e.line, Some(4), "{e}");
        assert_eq!(e.key.as_deref(), Some("count"), "{e}");

        let e = parse("[[gpus]]\ntype = \"a100\"\ncount = 2\nmemory = \"lots\"\n").unwrap_err();
        assert_eq!(e.line, Some(4));
        assert!(e.to_string().contains("invalid memory size 'lots'"), "{e}");

        let e = parse("spool_dir = \"/x\"\nspoll = 3\n").unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(e.to_string().contains("unknown field `spoll`"), "{e}");

        let e = parse("spool_dir = \"/x\"\nmetrics_listen = \"localhost\"\n").unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(
            e.to_string()
                .contains("'localhost' is not an address and port"),
            "{e}"
        );
        let c = parse("metrics_listen = \"9464\"\n").unwrap();
        assert_eq!(c.metrics_listen, Some(([127, 0, 0, 1], 9464).into()));

        let e = parse("default_qos = \"urgent\"\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("unknown QoS 'urgent' (known: critical, high, medium, low)"),
            "{e}"
        );

        let e = parse("[[gpus]]\ntype = \"a100\"\ncount = 3\nmemory = \"8G\"\ndevices = \"/dev/nvidia[0-3]\"\n").unwrap_err();
        assert!(
            e.to_string().contains("count = 3 but devices names 4"),
            "{e}"
        );

        let e = parse("default_time = \"forever\"\n").unwrap_err();
        assert_eq!(e.line, Some(1));

        let e = parse("cgroups = \"v3\"\n").unwrap_err();
        assert_eq!(e.line, Some(1));
        assert!(
            e.to_string()
                .contains("unknown variant `v3`, expected one of `auto`, `v1`, `v2`, `off`"),
            "{e}"
        );

        let e = parse("spool_dir = \"relative/spool\"\n").unwrap_err();
        assert!(e.to_string().contains("absolute"), "{e}");
    }

    #[test]
    fn account_trees_shares_and_weights() {
        let c = parse(
            "[[accounts]]\nname = \"research\"\nshares = 3\n[[accounts]]\nname = \"vision\"\nparent = \"research\"\nshares = 2.5\nusers = [\"alice\"]\n[fairshare]\nalgorithm = \"classic\"\nhalf_life = \"1-00:00:00\"\nreset = \"monthly\"\n[priority]\nweight_age = 5\nmax_age = \"2-0\"\n",
        )
        .unwrap();
        assert_eq!(c.accounts[1].parent.as_deref(), Some("research"));
        assert_eq!(c.accounts[1].shares, 2.5);
        assert_eq!(
            c.fairshare.algorithm,
            crate::model::policy::Algorithm::Classic
        );
        assert_eq!(c.fairshare.half_life, Some(86_400));
        assert_eq!(c.fairshare.reset, UsageReset::Monthly);
        assert_eq!(c.priority.age, 5);
        assert_eq!(c.priority.max_age, 2 * 86_400);
        assert_eq!(
            c.priority.fairshare, 10_000,
            "defaults for what is not given"
        );
        let d = parse("").unwrap();
        assert_eq!(d.fairshare.half_life, Some(7 * 86_400));
        assert_eq!(
            d.fairshare.algorithm,
            crate::model::policy::Algorithm::FairTree
        );
    }

    #[test]
    fn bad_trees_shares_and_weights_name_line_and_key() {
        let e = parse("[[accounts]]\nname = \"a\"\nshares = -2\n").unwrap_err();
        assert_eq!((e.line, e.key.as_deref()), (Some(3), Some("shares")), "{e}");
        let e = parse("[[accounts]]\nname = \"a\"\nshares = \"lots\"\n").unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        let e = parse("[[accounts]]\nname = \"a\"\nparent = \"nowhere\"\n").unwrap_err();
        assert_eq!((e.line, e.key.as_deref()), (Some(3), Some("parent")), "{e}");
        assert!(
            e.to_string().contains("unknown parent account 'nowhere'"),
            "{e}"
        );
        let e = parse("[[accounts]]\nname = \"a\"\nparent = \"b\"\n[[accounts]]\nname = \"b\"\nparent = \"a\"\n").unwrap_err();
        assert!(e.to_string().contains("accounts form a cycle"), "{e}");
        let e = parse("[[qos]]\nname = \"q\"\npriority = 1\nusage_factor = -1\n").unwrap_err();
        assert_eq!(
            (e.line, e.key.as_deref()),
            (Some(4), Some("usage_factor")),
            "{e}"
        );
        let e =
            parse("[[gpus]]\ntype = \"a100\"\ncount = 1\nmemory = \"8G\"\n[billing]\nv100 = 3\n")
                .unwrap_err();
        assert_eq!(e.line, Some(6), "{e}");
        assert!(e.to_string().contains("[billing] names GPU type 'v100', which no [[gpus]] table declares (declared: a100)"), "{e}");
        let e = parse("[priority]\nweight_age = -3\n").unwrap_err();
        assert_eq!(
            (e.line, e.key.as_deref()),
            (Some(2), Some("weight_age")),
            "{e}"
        );
        let e = parse("[fairshare]\nalgorithm = \"fifo\"\n").unwrap_err();
        assert!(e.to_string().contains("unknown variant `fifo`"), "{e}");
        for (value, says) in [
            ("-1", "not -1"),
            ("\"150%\"", "from 0% to 100%, not \"150%\""),
            ("\"half\"", "not \"half\""),
            ("true", "not true"),
        ] {
            let e = parse(&format!(
                "[[qos]]\nname = \"q\"\npriority = 1\nreserve = {value}\n"
            ))
            .unwrap_err();
            assert_eq!(
                (e.line, e.key.as_deref()),
                (Some(4), Some("reserve")),
                "{e}"
            );
            assert!(e.to_string().contains(says), "{e}");
        }
        let c = parse("[[qos]]\nname = \"q\"\npriority = 1\nreserve = \"12.5%\"\n").unwrap();
        assert_eq!(c.qos[0].reserve.map(|r| r.gpus(16)), Some(2));
        let e = parse("[[gpus]]\ntype = \"a100\"\ncount = 1\nmemory = \"8G\"\n[[accounts]]\nname = \"a\"\napproval_gpu_types = [\"h100\"]\n").unwrap_err();
        assert_eq!(
            (e.line, e.key.as_deref()),
            (Some(7), Some("approval_gpu_types")),
            "{e}"
        );
        let e = parse("[[accounts]]\nname = \"a\"\napproval_above_gpu_hours = -4\n").unwrap_err();
        assert_eq!(
            (e.line, e.key.as_deref()),
            (Some(3), Some("approval_above_gpu_hours")),
            "{e}"
        );
    }

    #[test]
    fn device_patterns() {
        assert_eq!(
            expand_device_pattern("/dev/nvidia[0,2-3]").unwrap().len(),
            3
        );
        assert_eq!(
            expand_device_pattern("/dev/nvidia0").unwrap(),
            vec![PathBuf::from("/dev/nvidia0")]
        );
        assert!(expand_device_pattern("/dev/nvidia[0-").is_err());
        assert!(expand_device_pattern("/dev/nvidia[3-1]").is_err());
        assert!(expand_device_pattern("/dev/nvidia[0,0]").is_err());
    }
}
