//! The validated configuration: what the rest of ysched reads.

use std::path::PathBuf;

use serde::Deserialize;

/// The most tasks one `--array` may make, unless the config says otherwise
/// (Slurm's MaxArraySize is 1001: indices 0 to 1000).
/// The wait after a job's first requeue soon after its start, by
/// default (`requeue_delay`; it doubles with each in a row).
pub const DEFAULT_REQUEUE_DELAY: u64 = 5;
/// Requeues in a row soon after the start that hold a job, by default
/// (`max_quick_requeues`; Slurm's `MaxBatchRequeue` is 5 as well).
pub const DEFAULT_MAX_QUICK_REQUEUES: u32 = 5;
pub const DEFAULT_MAX_ARRAY_SIZE: u32 = 1001;

pub const DEFAULT_CONFIG_PATH: &str = "/etc/ysched/ysched.toml";
/// A pool node's config, as its packaged `ysnoded` unit reads it.
pub const NODE_CONFIG_PATH: &str = "/etc/ysched/ysnoded.toml";
pub const DEFAULT_SPOOL_DIR: &str = "/var/spool/ysched";
/// The account every user may use when the config lists none.
pub const DEFAULT_ACCOUNT: &str = "default";
/// Reservations per pass unless the config says (`backfill_depth`).
pub const DEFAULT_BACKFILL_DEPTH: usize = 100;
/// Seconds a preempted job has to checkpoint, unless its QoS says.
pub const DEFAULT_GRACE_TIME: u64 = 120;

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
    /// Elastic quota: GPUs its jobs may hold beyond `max_gpus` (its
    /// guarantee) on GPUs others leave idle, given back when reclaimed.
    /// `None`: max_gpus is a hard cap.
    pub borrow_limit: Option<u32>,
    /// How much of its idle guarantee other accounts' jobs may borrow at
    /// once (`lend = false` is 0; `None`: all of it).
    pub lend_limit: Option<u32>,
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
    /// `[pool]`: several servers under this controller, or where this
    /// node's controller is.
    pub pool: Pool,
    /// `[web]`: the web server's settings (`yswebd`).
    pub web: Web,
    /// `[containers]`: the runtime and images of jobs' containers.
    pub containers: Containers,
    /// `[interactive]`.
    pub interactive: Interactive,
    /// `[standby]`: another controller may lead; etcd decides which.
    pub standby: Option<Standby>,
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
    /// Days a finished job's script and environment are kept after it
    /// ended (its accounting row stays); `None`: as long as its row.
    pub keep_payloads_days: Option<u32>,
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
    /// Seconds a job requeued soon after it started waits (by default
    /// `DEFAULT_REQUEUE_DELAY`) before it may
    /// run again, doubled for each such requeue in a row
    /// (`sched::requeue`).
    pub requeue_delay: u64,
    /// Requeues in a row soon after the start that hold the job (0:
    /// never held).
    pub max_quick_requeues: u32,
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
    /// The time zone of reports and limit windows.
    pub fn timezone(&self) -> &jiff::tz::TimeZone {
        self.timezone.get_or_init(jiff::tz::TimeZone::system)
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
        check("[pool] listen", self.pool.listen != new.pool.listen);
        check("[pool] lease", self.pool.lease != new.pool.lease);
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
pub(super) fn default_qos(name: &str, priority: i64) -> Qos {
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

/// How long a node may go unheard before it is down, unless the config
/// says: three missed heartbeats' worth of a 10 s heartbeat.
pub const DEFAULT_LEASE_SECS: f64 = 30.0;
/// How long a join token is good for, unless the config says.
pub const DEFAULT_TOKEN_LIFETIME_SECS: u64 = 3_600;

/// The pool as configured.
#[derive(Clone, Debug, PartialEq)]
pub struct Pool {
    /// Where the controller listens for nodes; `None`: no pool.
    pub listen: Option<std::net::SocketAddr>,
    /// The address the join line names (`HOST:PORT`, or several
    /// separated by commas: every controller of a pool with a standby);
    /// by default the listening address, or this host's name when that
    /// is a wildcard.
    pub advertise: Option<String>,
    /// A node unheard for this long is down; a node that has not heard
    /// back for this long stops its jobs.
    pub lease: std::time::Duration,
    pub token_lifetime_secs: u64,
    /// How long the certificates the controller gives nodes last (they
    /// renew them when a third is left).
    pub certificate_lifetime: std::time::Duration,
    /// On a node: the controller's `HOST:PORT` (or the controllers',
    /// separated by commas, tried in turn), over what it learnt at its
    /// join.
    pub controller: Option<String>,
    /// The ports, inclusive, the controller chooses from at random for a
    /// job over several nodes: each part's task server, and `MASTER_PORT`.
    pub step_ports: (u16, u16),
    /// On a node: how long jobs frozen when its lease ran out wait for a
    /// controller to claim them before they are ended.
    pub frozen_limit: std::time::Duration,
    /// Slurm's model (munge): a node's word on who a user is holds
    /// everywhere, for every request, as it does on the node itself.
    /// Off: a node vouches only for queries at the public level and for
    /// changes to the jobs it runs or took in; more needs the user's
    /// token.
    pub trust_nodes: bool,
}

/// A day: a controller down over a night still finds its jobs.
pub const DEFAULT_FROZEN_LIMIT: std::time::Duration = std::time::Duration::from_secs(86_400);

/// The `[standby]` table: this controller is one of two (or more) that
/// share a pool, and leads only while etcd says so (`leader`).
#[derive(Clone, Debug, PartialEq)]
pub struct Standby {
    /// etcd's client URL (`http://10.0.0.1:2379`).
    pub etcd: String,
    /// This controller's name in the election (the host's by default).
    pub name: String,
    /// The leader key.
    pub key: String,
    /// How long a leader leads without proving its lease; a standby
    /// takes over at most about this long after the leader stopped.
    pub lease: std::time::Duration,
    /// With an `https://` URL: how etcd is checked and this controller
    /// known to it.
    pub tls: Option<EtcdTls>,
}

/// TLS towards etcd: the authority its certificate must chain to, and
/// this controller's client certificate and key (for etcd's
/// `--client-cert-auth`), PEM files.
#[derive(Clone, Debug, PartialEq)]
pub struct EtcdTls {
    pub ca: std::path::PathBuf,
    pub client: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// The `[interactive]` table: limits and QoS of interactive sessions.
#[derive(Clone, Debug, PartialEq)]
pub struct Interactive {
    /// Sessions (pending or running) a user may hold at once.
    pub max_sessions_per_user: Option<u32>,
    /// GPUs a user's sessions may hold (or ask for) at once.
    pub max_gpus_per_user: Option<u32>,
    /// The longest session, in seconds.
    pub max_time: Option<u64>,
    /// A session's time limit when it names none.
    pub default_time: Option<u64>,
    /// The QoS of sessions that name none.
    pub qos: Option<String>,
    /// How long a session may go without its salloc (or srun) looking
    /// at it before the controller ends it.
    pub unwatched_after: std::time::Duration,
}

impl Default for Interactive {
    fn default() -> Interactive {
        Interactive {
            max_sessions_per_user: None,
            max_gpus_per_user: None,
            max_time: None,
            default_time: None,
            qos: None,
            unwatched_after: std::time::Duration::from_secs(60),
        }
    }
}

/// `[containers]`: how jobs run in container images (`--container-image`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Containers {
    /// The OCI runtime (crun).
    pub runtime: PathBuf,
    /// The image store's tool: pulls, loads and describes images.
    pub podman: PathBuf,
    /// Where images are kept (podman's `--root`); `None`: podman's own
    /// default, /var/lib/containers/storage.
    pub storage: Option<PathBuf>,
    /// Mounted into every container, with the job's user's rights.
    pub mounts: Vec<crate::model::container::ContainerMount>,
    /// Registries images may be pulled from (`*`: any); none unless the
    /// admin lists them (`insecure_registries` are listed too), so that a
    /// job's image name cannot send root's podman to any host and port.
    pub allowed_registries: Vec<String>,
    /// Jobs of root may run in containers (as root inside).
    pub allow_root: bool,
    /// Images kept present on every node that runs containers.
    pub prefetch: Vec<String>,
    /// Registries reached over plain HTTP or with a certificate no
    /// authority vouches for (a lab's own registry).
    pub insecure_registries: Vec<String>,
    /// The most the images pulled here may take, in MiB: beyond it, the
    /// least recently used pulled image no job uses goes.
    pub cache_size_mb: Option<u64>,
    /// The largest image archive a job may name, in MiB.
    pub max_archive_mb: u64,
    /// Where CDI specs of the node's GPUs are looked for.
    pub cdi_dirs: Vec<PathBuf>,
    /// How long a pull may take before it is given up.
    pub pull_timeout: std::time::Duration,
}

impl Default for Containers {
    fn default() -> Containers {
        Containers {
            runtime: PathBuf::from("/usr/bin/crun"),
            podman: PathBuf::from("/usr/bin/podman"),
            storage: None,
            mounts: Vec::new(),
            allowed_registries: Vec::new(),
            allow_root: false,
            prefetch: Vec::new(),
            insecure_registries: Vec::new(),
            cache_size_mb: None,
            max_archive_mb: 32 << 10,
            cdi_dirs: vec![PathBuf::from("/etc/cdi"), PathBuf::from("/var/run/cdi")],
            pull_timeout: std::time::Duration::from_secs(30 * 60),
        }
    }
}

impl Containers {
    /// Whether images may be pulled from `registry`.
    pub fn may_pull_from(&self, registry: &str) -> bool {
        self.allowed_registries
            .iter()
            .any(|r| r == "*" || r == registry)
            || self.is_insecure(registry)
    }

    /// Whether `registry` is reached without checking its TLS.
    pub fn is_insecure(&self, registry: &str) -> bool {
        self.insecure_registries.iter().any(|r| r == registry)
    }

    /// What is missing to run containers on this host, as a message
    /// naming the package; `None` when both tools are there.
    pub fn missing(&self) -> Option<String> {
        let lacking: Vec<String> = [(&self.runtime, "crun"), (&self.podman, "podman")]
            .into_iter()
            .filter(|(path, _)| !path.is_file())
            .map(|(path, package)| format!("{} (package {package})", path.display()))
            .collect();
        (!lacking.is_empty()).then(|| {
            format!(
                "no container runtime on this server: {} not installed (Debian: apt install crun podman)",
                lacking.join(" and ")
            )
        })
    }
}

/// `[web]`: where `yswebd` listens, with which certificate, and whom it
/// trusts to say who a user is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Web {
    /// `None`: no web server (the default).
    pub listen: Option<std::net::SocketAddr>,
    /// A PEM certificate chain and its key: HTTPS. Without: plain HTTP.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// The account `yswebd` runs as. It may make tokens for others, which
    /// it does for the users a trusted proxy names.
    pub user: Option<String>,
    /// A header a reverse proxy sets to the signed-in user's name
    /// (`X-Remote-User`), believed only from `proxy_addresses` and with
    /// the secret of `proxy_secret_file` in [`PROXY_SECRET_HEADER`].
    pub proxy_header: Option<String>,
    pub proxy_addresses: Vec<std::net::IpAddr>,
    /// A file, readable by yswebd's account alone, holding the secret the
    /// proxy sends with every request.
    pub proxy_secret_file: Option<PathBuf>,
    /// Connections served at once; more wait in the kernel's backlog or
    /// are answered 503.
    pub max_connections: usize,
    /// The largest request body taken, in bytes.
    pub max_body: usize,
}

/// The header a trusted proxy proves itself with: the secret of
/// `[web] proxy_secret_file`. Any other sender of the user header is
/// another local account or a job on the web host, which shares the
/// proxy's address.
pub const PROXY_SECRET_HEADER: &str = "x-ysched-proxy-secret";

impl Default for Web {
    fn default() -> Web {
        Web {
            listen: None,
            tls: None,
            user: None,
            proxy_header: None,
            proxy_addresses: Vec::new(),
            proxy_secret_file: None,
            max_connections: 64,
            max_body: 1 << 20,
        }
    }
}

/// A node's certificate: a year.
pub const DEFAULT_CERTIFICATE_LIFETIME: std::time::Duration =
    std::time::Duration::from_secs(365 * 86_400);

/// Below Linux's default range for outgoing connections' ports
/// (32768-60999), so that none of them is ever in the way.
pub const DEFAULT_STEP_PORTS: (u16, u16) = (20_000, 32_767);

impl Default for Pool {
    fn default() -> Pool {
        Pool {
            listen: None,
            advertise: None,
            lease: std::time::Duration::from_secs_f64(DEFAULT_LEASE_SECS),
            token_lifetime_secs: DEFAULT_TOKEN_LIFETIME_SECS,
            certificate_lifetime: DEFAULT_CERTIFICATE_LIFETIME,
            controller: None,
            step_ports: DEFAULT_STEP_PORTS,
            frozen_limit: DEFAULT_FROZEN_LIMIT,
            trust_nodes: false,
        }
    }
}
