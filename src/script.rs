//! Job scripts: the submit options (shared by `ysbatch`'s command line and the
//! script's `#YS` / `#SBATCH` directives), directive parsing with line
//! numbers, and resolution into a [`JobRequest`].

use std::path::Path;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Args, Parser, ValueEnum};
use thiserror::Error;

use crate::model::job::{GpuRequest, JobRequest};
use crate::model::units;

pub use crate::validate::{MAX_CPUS_PER_JOB, MAX_GPUS_PER_JOB, MAX_NICE, MAX_NODES, MAX_TASKS};

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ScriptError {
    /// A problem on one line of the script (1-based).
    #[error("{source_name}: line {line}: {message}")]
    Line {
        source_name: String,
        line: usize,
        message: String,
    },
    /// A problem with a command-line option.
    #[error("{0}")]
    Option(String),
    #[error("{0}")]
    Script(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OpenMode {
    Append,
    Truncate,
}

/// Options a job can be given on the command line or in directives.
#[derive(Args, Clone, Debug, Default)]
pub struct SubmitOptions {
    /// Name of the job (default: the script's file name)
    #[arg(short = 'J', long = "job-name", value_name = "NAME")]
    pub job_name: Option<String>,
    /// Account to charge (default: your first account)
    #[arg(short = 'A', long, value_name = "ACCOUNT")]
    pub account: Option<String>,
    /// Quality of service: critical, high, medium, low (default: the config's)
    #[arg(short = 'q', long, value_name = "QOS")]
    pub qos: Option<String>,
    /// GPUs for the job: a count, or TYPE:COUNT (e.g. a100:2)
    #[arg(short = 'G', long, value_name = "[TYPE:]N")]
    pub gpus: Option<String>,
    /// Generic resources, Slurm style: gpu[:TYPE][:N]
    #[arg(long, value_name = "gpu[:TYPE]:N")]
    pub gres: Option<String>,
    /// GPUs per node (the same as --gpus on a single server)
    #[arg(long = "gpus-per-node", value_name = "[TYPE:]N")]
    pub gpus_per_node: Option<String>,
    /// Time limit: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or UNLIMITED
    #[arg(short = 't', long, value_name = "TIME")]
    pub time: Option<String>,
    /// CPUs for the job
    #[arg(short = 'c', long = "cpus-per-task", value_name = "N")]
    pub cpus_per_task: Option<String>,
    /// At least N CPUs on each node of the job (its CPUs per node are raised to N)
    #[arg(long = "mincpus", value_name = "N")]
    pub mincpus: Option<String>,
    /// Temporary disk each node of the job must have (its /tmp), with a unit K, M, G, T (default M)
    #[arg(long = "tmp", value_name = "SIZE")]
    pub tmp: Option<String>,
    /// Memory for the job: a size with unit K, M, G, T (default unit M)
    #[arg(long, value_name = "SIZE")]
    pub mem: Option<String>,
    /// What each GPU must have: features joined by '&' and gpumem>=SIZE (e.g. nvlink&gpumem>=40G)
    #[arg(short = 'C', long, value_name = "LIST")]
    pub constraint: Option<String>,
    /// Memory per GPU asked for (instead of --mem)
    #[arg(long = "mem-per-gpu", value_name = "SIZE")]
    pub mem_per_gpu: Option<String>,
    /// Output file (patterns %j %x %u %A %a %N; default ys-%j.out)
    #[arg(short = 'o', long, value_name = "PATTERN")]
    pub output: Option<String>,
    /// Error file (default: with the output)
    #[arg(short = 'e', long, value_name = "PATTERN")]
    pub error: Option<String>,
    /// Append to or truncate the output files
    #[arg(long = "open-mode", value_name = "MODE")]
    pub open_mode: Option<OpenMode>,
    /// Working directory of the job (default: where ysbatch runs)
    #[arg(short = 'D', long, value_name = "DIR")]
    pub chdir: Option<String>,
    /// Environment to pass: ALL (default), NONE, or [ALL,]VAR[=VALUE],...
    #[arg(long, value_name = "VARS")]
    pub export: Option<String>,
    /// Submit the job held; release it with `yscontrol release`
    #[arg(short = 'H', long)]
    pub hold: bool,
    /// Start no earlier than: now+N[units], HH:MM[:SS], YYYY-MM-DD[THH:MM[:SS]]
    #[arg(long, value_name = "TIME")]
    pub begin: Option<String>,
    /// A comment kept with the job
    #[arg(long, value_name = "TEXT")]
    pub comment: Option<String>,
    /// Lower the job's priority by N (a negative N, raising it, is for admins)
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub nice: Option<String>,
    /// A job array: task indices such as 0-99, 1,3,5-9 or 0-30:10, with %N to run at most N at once
    #[arg(short = 'a', long, value_name = "INDICES[%N]")]
    pub array: Option<String>,
    /// Start only after other jobs: after|afterany|afterok|afternotok:ID[:ID...][,...], or singleton
    #[arg(short = 'd', long, value_name = "TYPE:ID[:ID]")]
    pub dependency: Option<String>,
    /// A signal the job gets SECONDS (default 60) before its time limit, and when it is preempted: [B:]SIG[@SECONDS]
    #[arg(long, value_name = "[B:]SIG[@SECONDS]")]
    pub signal: Option<String>,
    /// A file the job rewrites at each checkpoint (patterns as for --output); its time tells how much work preempting the job would lose
    #[arg(long = "checkpoint-file", value_name = "PATTERN")]
    pub checkpoint_file: Option<String>,
    /// When preempted, be killed this long after SIGTERM, if shorter than the QoS's grace_time (M:S, or seconds with a unit: 30s)
    #[arg(long, value_name = "TIME")]
    pub grace: Option<String>,
    /// The tasks share the CPUs: each node gets --cpus-per-task CPUs, not one set per task
    #[arg(short = 'O', long)]
    pub overcommit: bool,
    /// When preempted, end the job (PREEMPTED) rather than requeue it
    #[arg(long = "no-requeue", conflicts_with = "requeue")]
    pub no_requeue: bool,
    /// When preempted, requeue the job (the default)
    #[arg(long)]
    pub requeue: bool,
    /// Print only the job id
    #[arg(long)]
    pub parsable: bool,
    /// The partition: ysched has one, ysched (or a list naming it); another is refused
    #[arg(short = 'p', long, value_name = "NAME", hide_short_help = true)]
    pub partition: Option<String>,
    /// Servers the job runs on at once: N, or MIN-MAX (GPUs, CPUs and memory are then per server); the script runs on the first, srun starts tasks on all
    #[arg(short = 'N', long, value_name = "N[-MAX]")]
    pub nodes: Option<String>,
    /// Tasks srun starts in all (default: one per node, or --ntasks-per-node each)
    #[arg(short = 'n', long, value_name = "N")]
    pub ntasks: Option<String>,
    /// Tasks srun starts on each node
    #[arg(long = "ntasks-per-node", value_name = "N")]
    pub ntasks_per_node: Option<String>,
    /// GPUs of each task (its CUDA_VISIBLE_DEVICES under srun); with no other GPU request, the job's GPUs per node are this times the tasks per node
    #[arg(long = "gpus-per-task", value_name = "N")]
    pub gpus_per_task: Option<String>,
    /// Accepted for Slurm scripts (ignored: ysched keeps no workload keys)
    #[arg(long, value_name = "KEY", hide_short_help = true)]
    pub wckey: Option<String>,
    /// Events to be told of through the config's notify_command: NONE, BEGIN, END, FAIL, REQUEUE, TIME_LIMIT, ALL (comma-separated)
    #[arg(long = "mail-type", value_name = "TYPE[,TYPE]")]
    pub mail_type: Option<String>,
    /// Who is told of them (default: you)
    #[arg(long = "mail-user", value_name = "ADDRESS")]
    pub mail_user: Option<String>,
    /// The whole server: all its CPUs and memory, and all its GPUs (of the type asked for); the job waits until nothing else runs there
    #[arg(long, value_name = "user|mcs|topo", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub exclusive: Option<String>,
    /// Run on this node of the pool (a name, or a hostlist such as gpu[02])
    #[arg(short = 'w', long, value_name = "NODE")]
    pub nodelist: Option<String>,
    /// Never run on these nodes (names or a hostlist such as gpu[01-02])
    #[arg(short = 'x', long, value_name = "NODES")]
    pub exclude: Option<String>,
    #[command(flatten)]
    pub container: ContainerArgs,
}

/// The `--container-*` options (pyxis's), for `ysbatch` and `srun`.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct ContainerArgs {
    /// Run in this container image: a registry reference (nvcr.io/nvidia/pytorch:24.01-py3, or nvcr.io#nvidia/pytorch:24.01-py3), a local image's name, or the path of an image archive
    #[arg(long = "container-image", value_name = "IMAGE")]
    pub container_image: Option<String>,
    /// Mounted into the container with your rights: SRC:DST[:ro|rw], comma-separated
    #[arg(long = "container-mounts", value_name = "SRC:DST[:ro],...")]
    pub container_mounts: Option<String>,
    /// Where the script or task starts in the container (default: its working directory if mounted, else the image's)
    #[arg(long = "container-workdir", value_name = "DIR")]
    pub container_workdir: Option<String>,
    /// Variables whose value from the job wins over the image's (comma-separated names)
    #[arg(long = "container-env", value_name = "NAME[,NAME]")]
    pub container_env: Option<String>,
    /// Do not mount your home directory in the container
    #[arg(long = "no-container-mount-home")]
    pub no_container_mount_home: bool,
    /// Mount your home directory in the container (the default)
    #[arg(long = "container-mount-home", hide_short_help = true)]
    pub container_mount_home: bool,
    /// The container's files may change, in a layer thrown away at the end (the default)
    #[arg(long = "container-writable", hide_short_help = true)]
    pub container_writable: bool,
    /// The container's files are read-only (mounts as declared)
    #[arg(long = "container-readonly")]
    pub container_readonly: bool,
}

/// The `--container-*` options of one line or the command line, checked;
/// `None`: not given there.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerOptions {
    pub image: Option<String>,
    pub mounts: Option<Vec<crate::model::container::ContainerMount>>,
    pub workdir: Option<String>,
    pub env: Option<Vec<String>>,
    pub mount_home: Option<bool>,
    pub writable: Option<bool>,
}

impl ContainerOptions {
    pub fn of(o: &ContainerArgs) -> Result<ContainerOptions, OptionError> {
        use crate::model::container as c;
        let either = |yes: bool, no: bool, flags: &'static str| match (yes, no) {
            (true, true) => Err(OptionError::Conflict(flags)),
            (true, false) => Ok(Some(true)),
            (false, true) => Ok(Some(false)),
            (false, false) => Ok(None),
        };
        Ok(ContainerOptions {
            image: o
                .container_image
                .as_deref()
                .map(|i| c::ContainerRequest::new(i).map(|r| r.image))
                .transpose()?,
            mounts: o
                .container_mounts
                .as_deref()
                .map(c::parse_mounts)
                .transpose()?,
            workdir: o
                .container_workdir
                .as_deref()
                .map(c::parse_workdir)
                .transpose()?,
            env: o
                .container_env
                .as_deref()
                .map(c::parse_env_names)
                .transpose()?,
            mount_home: either(
                o.container_mount_home,
                o.no_container_mount_home,
                "--container-mount-home and --no-container-mount-home",
            )?,
            writable: either(
                o.container_writable,
                o.container_readonly,
                "--container-writable and --container-readonly",
            )?,
        })
    }

    fn overridden_by(self, later: ContainerOptions) -> ContainerOptions {
        ContainerOptions {
            image: later.image.or(self.image),
            mounts: later.mounts.or(self.mounts),
            workdir: later.workdir.or(self.workdir),
            env: later.env.or(self.env),
            mount_home: later.mount_home.or(self.mount_home),
            writable: later.writable.or(self.writable),
        }
    }

    /// The request, with an archive path made absolute against `cwd`;
    /// `--container-*` options without an image are refused.
    pub fn request(
        self,
        cwd: &Path,
    ) -> Result<Option<crate::model::container::ContainerRequest>, ScriptError> {
        let Some(image) = self.image else {
            let given = [
                (self.mounts.is_some(), "--container-mounts"),
                (self.workdir.is_some(), "--container-workdir"),
                (self.env.is_some(), "--container-env"),
                (self.mount_home.is_some(), "--[no-]container-mount-home"),
                (
                    self.writable.is_some(),
                    "--container-writable/--container-readonly",
                ),
            ];
            return match given.iter().find(|(set, _)| *set) {
                Some((_, flag)) => Err(ScriptError::Option(format!(
                    "{flag} needs --container-image (the image the job runs in)"
                ))),
                None => Ok(None),
            };
        };
        let image = match image.strip_prefix("./") {
            Some(relative) => cwd.join(relative).to_string_lossy().into_owned(),
            None => image,
        };
        let mut request = crate::model::container::ContainerRequest::new(&image)
            .map_err(|e| ScriptError::Option(e.to_string()))?;
        request.mounts = self.mounts.unwrap_or_default();
        request.workdir = self.workdir;
        request.env = self.env.unwrap_or_default();
        request.mount_home = self.mount_home.unwrap_or(true);
        request.writable = self.writable.unwrap_or(true);
        Ok(Some(request))
    }
}

/// One directive line, parsed with the same options as the command line.
#[derive(Parser, Debug)]
#[command(
    name = "directive",
    no_binary_name = true,
    disable_help_flag = true,
    disable_version_flag = true
)]
struct DirectiveLine {
    #[command(flatten)]
    options: SubmitOptions,
}

/// A memory request: for the whole job, or per GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    Total(u64),
    PerGpu(u64),
}

/// Options after their values were checked; `None` means "not given here".
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Partial {
    pub name: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub gpus: Option<GpuRequest>,
    pub constraint: Option<crate::model::job::GpuConstraint>,
    pub time_limit: Option<Option<u64>>,
    pub cpus: Option<u32>,
    /// `--mincpus`: the fewest CPUs the job takes on each node.
    pub min_cpus: Option<u32>,
    /// `--tmp`: MiB of temporary disk each node must have.
    pub tmp_mb: Option<u64>,
    pub mem: Option<Memory>,
    pub output: Option<String>,
    pub error: Option<String>,
    pub open_mode: Option<OpenMode>,
    pub chdir: Option<String>,
    pub export: Option<String>,
    pub hold: bool,
    /// `--overcommit`: CPUs per node as for one task.
    pub overcommit: bool,
    pub begin: Option<String>,
    pub comment: Option<String>,
    pub nice: Option<i64>,
    /// Canonical form of `--dependency`.
    pub dependency: Option<String>,
    /// Canonical form of `--array`.
    pub array: Option<String>,
    /// `--no-requeue` (true) or `--requeue` (false).
    pub no_requeue: Option<bool>,
    pub warn_signal: Option<crate::model::job::WarnSignal>,
    pub checkpoint_file: Option<String>,
    /// `--grace`, in seconds.
    pub grace: Option<u64>,
    pub mail_type: Option<crate::model::job::MailTypes>,
    pub mail_user: Option<String>,
    /// `--exclusive`.
    pub exclusive: bool,
    /// `--nodelist` and `--exclude`, expanded.
    pub nodelist: Option<Vec<String>>,
    pub exclude: Option<Vec<String>>,
    /// `--nodes`, `--ntasks`, `--ntasks-per-node`, `--gpus-per-task`.
    pub tasks: TaskOptions,
    /// `--container-image` and the other `--container-*` options.
    pub container: ContainerOptions,
    /// The GPU request came from `--gpus`, which Slurm counts for the
    /// whole job (the others count per node).
    pub gpus_for_job: bool,
    pub parsable: bool,
    /// Messages about options accepted but ignored.
    pub warnings: Vec<String>,
}

/// `--nodes` as (MIN, MAX), `--ntasks`, `--ntasks-per-node` and
/// `--gpus-per-task`, where given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskOptions {
    pub nodes: Option<(u32, u32)>,
    pub ntasks: Option<u32>,
    pub ntasks_per_node: Option<u32>,
    pub gpus_per_task: Option<u32>,
}

impl TaskOptions {
    fn of(o: &SubmitOptions) -> Result<TaskOptions, OptionError> {
        Ok(TaskOptions {
            nodes: o.nodes.as_deref().map(nodes).transpose()?,
            ntasks: count_of(&o.ntasks, "--ntasks", MAX_TASKS)?,
            ntasks_per_node: count_of(&o.ntasks_per_node, "--ntasks-per-node", MAX_TASKS)?,
            gpus_per_task: count_of(&o.gpus_per_task, "--gpus-per-task", MAX_GPUS_PER_JOB)?,
        })
    }

    fn overridden_by(self, later: TaskOptions) -> TaskOptions {
        TaskOptions {
            nodes: later.nodes.or(self.nodes),
            ntasks: later.ntasks.or(self.ntasks),
            ntasks_per_node: later.ntasks_per_node.or(self.ntasks_per_node),
            gpus_per_task: later.gpus_per_task.or(self.gpus_per_task),
        }
    }
}

/// Why a submission option (on the command line or a directive line) is
/// refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OptionError {
    #[error("invalid partition specified: {0} (the one partition here is {part})", part = crate::slurm_options::PARTITION)]
    Partition(String),
    #[error("{flag}: {value} is out of range ({min} to {max})")]
    OutOfRange {
        flag: String,
        value: i64,
        min: i64,
        max: i64,
    },
    #[error("{flag}: '{value}' is not a number")]
    NotANumber { flag: String, value: String },
    #[error("invalid GPU type in '{0}'")]
    GpuType(String),
    #[error("{flag} {spec}: a shard request needs at least 1 shard")]
    NoShards { flag: String, spec: String },
    #[error("--gres={0}: only the 'gpu' and 'shard' resources are known (e.g. --gres=gpu:2, --gres=gpu:a100:2 or --gres=shard:1)")]
    GresResource(String),
    #[error("--gres={0}: expected gpu[:TYPE][:N]")]
    Gres(String),
    #[error("conflicting GPU requests: {flag_a} asks for {a} but {flag_b} for {b}")]
    ConflictingGpus {
        flag_a: &'static str,
        a: String,
        flag_b: &'static str,
        b: String,
    },
    #[error("--mem and --mem-per-gpu exclude each other")]
    MemoryTwice,
    #[error("{0} exclude each other")]
    Conflict(&'static str),
    #[error(transparent)]
    Container(#[from] crate::model::container::ContainerError),
    #[error("{flag}: {source}")]
    Unit {
        flag: &'static str,
        source: crate::model::units::UnitError,
    },
    #[error("{flag}: invalid path '{path}'")]
    Path { flag: &'static str, path: String },
    #[error("--nice: {0} is out of range (-{MAX_NICE} to {MAX_NICE})")]
    Nice(i64),
    #[error("--nice: '{0}' is not a number")]
    NiceNotANumber(String),
    #[error("--grace: '{0}' is not a duration such as 30s, 2m or 1:30")]
    Grace(String),
    #[error("--dependency: {0}")]
    Dependency(#[from] crate::sched::dependency::DependencyError),
    #[error("--array: {0}")]
    Array(#[from] crate::array::ArrayError),
    #[error("--nodes={0}: expected N or MIN-MAX, from 1 to {MAX_NODES}")]
    Nodes(String),
    #[error("{flag}={value}: {why}")]
    Hostlist {
        flag: &'static str,
        value: String,
        why: String,
    },
    #[error("{flag}: {source}")]
    Value {
        flag: &'static str,
        source: crate::model::job::RequestValueError,
    },
    #[error(transparent)]
    Constraint(crate::model::job::RequestValueError),
    /// A name, comment or mail address that breaks the field rules.
    #[error(transparent)]
    Field(#[from] crate::validate::InvalidField),
}

impl Partial {
    /// Checks the values of one set of options (a directive line or the
    /// command line). Errors are plain messages; the caller adds the line.
    pub fn from_options(o: SubmitOptions) -> Result<Partial, OptionError> {
        let gpu = gpu_request(&o)?;
        let time_limit = o
            .time
            .as_deref()
            .map(units::parse_time_limit)
            .transpose()
            .map_err(|source| OptionError::Unit {
                flag: "--time",
                source,
            })?;
        let (cpus, min_cpus) = cpus(&o)?;
        let tmp_mb = tmp_disk(&o)?;
        let mem = memory(&o)?;
        check_texts(&o)?;
        let nice = nice(&o)?;
        let dependency = o
            .dependency
            .as_deref()
            .map(crate::sched::dependency::Dependency::parse)
            .transpose()?
            .map(|d| d.to_string());
        let array = array(&o)?;
        let mut warnings = Vec::new();
        ignored(&o, &mut warnings)?;
        let tasks = TaskOptions::of(&o)?;
        if let Some(user) = &o.mail_user {
            crate::validate::mail(Default::default(), Some(user))?;
        }
        Ok(Partial {
            // Before the fields below move out of `o`.
            container: ContainerOptions::of(&o.container)?,
            name: o.job_name,
            account: o.account,
            qos: o.qos,
            gpus: gpu,
            constraint: o
                .constraint
                .as_deref()
                .map(crate::model::job::GpuConstraint::parse)
                .transpose()
                .map_err(OptionError::Constraint)?,
            time_limit,
            cpus,
            min_cpus,
            tmp_mb,
            mem,
            output: o.output,
            error: o.error,
            open_mode: o.open_mode,
            chdir: o.chdir,
            export: o.export,
            hold: o.hold,
            overcommit: o.overcommit,
            begin: o.begin,
            comment: o.comment,
            nice,
            dependency,
            array,
            checkpoint_file: o.checkpoint_file,
            grace: o.grace.as_deref().map(parse_grace).transpose()?,
            warn_signal: o
                .signal
                .as_deref()
                .map(crate::model::job::WarnSignal::parse)
                .transpose()
                .map_err(|source| OptionError::Value {
                    flag: "--signal",
                    source,
                })?,
            no_requeue: (o.no_requeue || o.requeue).then_some(o.no_requeue),
            mail_type: o
                .mail_type
                .as_deref()
                .map(crate::model::job::MailTypes::parse)
                .transpose()
                .map_err(|source| OptionError::Value {
                    flag: "--mail-type",
                    source,
                })?,
            mail_user: o.mail_user,
            exclusive: o.exclusive.is_some(),
            nodelist: o
                .nodelist
                .as_deref()
                .map(|h| hostnames("--nodelist", h))
                .transpose()?,
            exclude: o
                .exclude
                .as_deref()
                .map(|h| hostnames("--exclude", h))
                .transpose()?,
            tasks,
            gpus_for_job: o.gpus.is_some(),
            parsable: o.parsable,
            warnings,
        })
    }

    /// `later` wins where it gives a value (later directives, then the
    /// command line over all directives).
    pub fn overridden_by(self, later: Partial) -> Partial {
        let mut warnings = self.warnings;
        warnings.extend(later.warnings);
        let gpus_for_job = if later.gpus.is_some() {
            later.gpus_for_job
        } else {
            self.gpus_for_job
        };
        Partial {
            name: later.name.or(self.name),
            account: later.account.or(self.account),
            qos: later.qos.or(self.qos),
            gpus: later.gpus.or(self.gpus),
            constraint: later.constraint.or(self.constraint),
            time_limit: later.time_limit.or(self.time_limit),
            cpus: later.cpus.or(self.cpus),
            min_cpus: later.min_cpus.or(self.min_cpus),
            tmp_mb: later.tmp_mb.or(self.tmp_mb),
            mem: later.mem.or(self.mem),
            output: later.output.or(self.output),
            error: later.error.or(self.error),
            open_mode: later.open_mode.or(self.open_mode),
            chdir: later.chdir.or(self.chdir),
            export: later.export.or(self.export),
            hold: later.hold || self.hold,
            overcommit: later.overcommit || self.overcommit,
            begin: later.begin.or(self.begin),
            comment: later.comment.or(self.comment),
            nice: later.nice.or(self.nice),
            dependency: later.dependency.or(self.dependency),
            array: later.array.or(self.array),
            no_requeue: later.no_requeue.or(self.no_requeue),
            warn_signal: later.warn_signal.or(self.warn_signal),
            checkpoint_file: later.checkpoint_file.or(self.checkpoint_file),
            grace: later.grace.or(self.grace),
            mail_type: later.mail_type.or(self.mail_type),
            mail_user: later.mail_user.or(self.mail_user),
            exclusive: later.exclusive || self.exclusive,
            nodelist: later.nodelist.or(self.nodelist),
            exclude: later.exclude.or(self.exclude),
            tasks: self.tasks.overridden_by(later.tasks),
            container: self.container.overridden_by(later.container),
            gpus_for_job,
            parsable: later.parsable || self.parsable,
            warnings,
        }
    }
}

/// The GPUs asked for, by `--gpus`, `--gpus-per-node` or `--gres`, which
/// must agree where several are given.
fn gpu_request(o: &SubmitOptions) -> Result<Option<GpuRequest>, OptionError> {
    let gpu_specs: Vec<(&str, GpuRequest)> = [
        ("--gpus", o.gpus.as_deref().map(parse_gpus).transpose()?),
        (
            "--gpus-per-node",
            o.gpus_per_node.as_deref().map(parse_gpus).transpose()?,
        ),
        ("--gres", o.gres.as_deref().map(parse_gres).transpose()?),
    ]
    .into_iter()
    .filter_map(|(flag, req)| req.map(|r| (flag, r)))
    .collect();
    if let [(flag_a, a), rest @ ..] = gpu_specs.as_slice() {
        if let Some((flag_b, b)) = rest.iter().find(|(_, b)| b != a) {
            return Err(OptionError::ConflictingGpus {
                flag_a,
                a: a.to_string(),
                flag_b,
                b: b.to_string(),
            });
        }
    }
    Ok(gpu_specs.into_iter().next().map(|(_, r)| r))
}

/// `--mem` or `--mem-per-gpu`, not both.
fn memory(o: &SubmitOptions) -> Result<Option<Memory>, OptionError> {
    Ok(match (o.mem.as_deref(), o.mem_per_gpu.as_deref()) {
        (Some(_), Some(_)) => return Err(OptionError::MemoryTwice),
        (Some(m), None) => Some(Memory::Total(units::parse_memory_mb(m).map_err(
            |source| OptionError::Unit {
                flag: "--mem",
                source,
            },
        )?)),
        (None, Some(m)) => Some(Memory::PerGpu(units::parse_memory_mb(m).map_err(
            |source| OptionError::Unit {
                flag: "--mem-per-gpu",
                source,
            },
        )?)),
        (None, None) => None,
    })
}

/// Names, comments and paths: one line each, of bounded length.
fn check_texts(o: &SubmitOptions) -> Result<(), OptionError> {
    if let Some(name) = &o.job_name {
        check_text(name, "--job-name", 200)?;
    }
    if let Some(comment) = &o.comment {
        check_text(comment, "--comment", 1000)?;
    }
    for (flag, value) in [
        ("--checkpoint-file", &o.checkpoint_file),
        ("--output", &o.output),
        ("--error", &o.error),
        ("--chdir", &o.chdir),
    ] {
        if let Some(v) = value {
            if v.is_empty() || v.contains('\0') || v.contains('\n') {
                return Err(OptionError::Path {
                    flag,
                    path: v.escape_debug().to_string(),
                });
            }
        }
    }
    Ok(())
}

/// `--nice`, within Slurm's range.
fn nice(o: &SubmitOptions) -> Result<Option<i64>, OptionError> {
    Ok(match o.nice.as_deref().map(str::trim) {
        None => None,
        Some(n) => match n.parse::<i64>() {
            Ok(v) if v.abs() <= MAX_NICE => Some(v),
            Ok(v) => return Err(OptionError::Nice(v)),
            Err(_) => return Err(OptionError::NiceNotANumber(n.to_string())),
        },
    })
}

/// `--array`, in canonical form.
fn array(o: &SubmitOptions) -> Result<Option<String>, OptionError> {
    Ok(match o.array.as_deref() {
        None => None,
        Some(a) => match crate::array::ArraySpec::parse(a, crate::array::UNBOUNDED) {
            Ok(spec) => Some(spec.to_string()),
            // Too many for any array: said with the configured
            // max_array_size once the config is read.
            Err(e) if e.is_too_many() => Some(a.trim().to_string()),
            Err(e) => return Err(OptionError::Array(e)),
        },
    })
}

/// `--tmp`, in MiB, when given.
fn tmp_disk(o: &SubmitOptions) -> Result<Option<u64>, OptionError> {
    o.tmp
        .as_deref()
        .map(|t| {
            units::parse_memory_mb(t).map_err(|source| OptionError::Unit {
                flag: "--tmp",
                source,
            })
        })
        .transpose()
}

/// `--cpus-per-task` and `--mincpus`, when given.
fn cpus(o: &SubmitOptions) -> Result<(Option<u32>, Option<u32>), OptionError> {
    let count = |text: &Option<String>, flag: &str, min: u32| {
        text.as_deref()
            .map(|c| parse_count(c, flag, min, MAX_CPUS_PER_JOB))
            .transpose()
    };
    Ok((
        count(&o.cpus_per_task, "--cpus-per-task", 1)?,
        count(&o.mincpus, "--mincpus", 0)?,
    ))
}

/// `--nodes`: N or MIN-MAX, within bounds.
fn nodes(text: &str) -> Result<(u32, u32), OptionError> {
    crate::model::tasks::parse_nodes(text)
        .filter(|&(min, max)| min >= 1 && max <= MAX_NODES)
        .ok_or_else(|| OptionError::Nodes(text.trim().to_string()))
}

/// A count option, when given.
fn count_of(text: &Option<String>, flag: &str, max: u32) -> Result<Option<u32>, OptionError> {
    text.as_deref()
        .map(|t| parse_count(t, flag, 1, max))
        .transpose()
}

/// Slurm options ysched takes and ignores (with a warning); a partition
/// other than its one is refused, as Slurm refuses an unknown one (a
/// list is good when it names it).
fn ignored(o: &SubmitOptions, warnings: &mut Vec<String>) -> Result<(), OptionError> {
    if let Some(p) = &o.partition {
        if !p
            .split(',')
            .any(|name| name.trim() == crate::slurm_options::PARTITION)
        {
            return Err(OptionError::Partition(p.clone()));
        }
    }
    if let Some(k) = &o.wckey {
        warnings.push(format!(
            "--wckey={k} ignored: ysched keeps no workload keys"
        ));
    }
    Ok(())
}

fn check_text(text: &str, flag: &'static str, max: usize) -> Result<(), OptionError> {
    Ok(crate::validate::text(text, flag, max)?)
}

fn parse_count(text: &str, what: &str, min: u32, max: u32) -> Result<u32, OptionError> {
    let t = text.trim();
    match t.parse::<i64>() {
        Ok(n) if n >= min as i64 && n <= max as i64 => Ok(n as u32),
        Ok(n) => Err(OptionError::OutOfRange {
            flag: what.to_string(),
            value: n,
            min: min.into(),
            max: max.into(),
        }),
        Err(_) => Err(OptionError::NotANumber {
            flag: what.to_string(),
            value: t.to_string(),
        }),
    }
}

fn check_gpu_type(t: &str, spec: &str) -> Result<String, OptionError> {
    if t.is_empty()
        || t.len() > 64
        || !t
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
    {
        return Err(OptionError::GpuType(spec.to_string()));
    }
    Ok(t.to_string())
}

/// `--grace`: `90s`, `2m`, or `M:S` as a time limit is written.
fn parse_grace(text: &str) -> Result<u64, OptionError> {
    let t = text.trim();
    let seconds = if let Some(s) = t.strip_suffix('s') {
        s.trim().parse::<u64>().ok()
    } else if let Some(m) = t.strip_suffix('m') {
        m.trim().parse::<u64>().ok().map(|m| m * 60)
    } else {
        crate::model::units::parse_time_limit(t).ok().flatten()
    };
    seconds
        .filter(|&s| s <= 86_400)
        .ok_or_else(|| OptionError::Grace(t.to_string()))
}

/// `--gpus` / `-G`: `N`, `TYPE:N`, or `shard:N` / `shard:TYPE:N` for
/// slots of one shared GPU.
pub fn parse_gpus(spec: &str) -> Result<GpuRequest, OptionError> {
    let spec = spec.trim();
    if let Some(rest) = spec.strip_prefix("shard:") {
        let mut request = parse_gpus(rest)?;
        if request.count == 0 {
            return Err(OptionError::NoShards {
                flag: "--gpus".into(),
                spec: spec.to_string(),
            });
        }
        request.shard = true;
        return Ok(request);
    }
    match spec.rsplit_once(':') {
        Some((t, n)) => Ok(GpuRequest {
            count: parse_count(n, "--gpus", 0, MAX_GPUS_PER_JOB)?,
            gpu_type: Some(check_gpu_type(t, spec)?),
            ..GpuRequest::default()
        }),
        None => Ok(GpuRequest {
            count: parse_count(spec, "--gpus", 0, MAX_GPUS_PER_JOB)?,
            gpu_type: None,
            ..GpuRequest::default()
        }),
    }
}

/// A shard request given as `--gres=shard:...`, named as given.
fn as_gres(e: OptionError) -> OptionError {
    match e {
        OptionError::NoShards { spec, .. } => OptionError::NoShards {
            flag: "--gres".into(),
            spec,
        },
        OptionError::OutOfRange {
            value, min, max, ..
        } => OptionError::OutOfRange {
            flag: "--gres".into(),
            value,
            min,
            max,
        },
        OptionError::NotANumber { value, .. } => OptionError::NotANumber {
            flag: "--gres".into(),
            value,
        },
        other => other,
    }
}

/// `--gres`: `gpu`, `gpu:N`, `gpu:TYPE`, `gpu:TYPE:N`.
pub fn parse_gres(spec: &str) -> Result<GpuRequest, OptionError> {
    let spec = spec.trim();
    let parts: Vec<&str> = spec.split(':').collect();
    if parts[0] == "shard" {
        return match parts.as_slice() {
            [_] => parse_gpus("shard:1"),
            [_, rest @ ..] => parse_gpus(&format!("shard:{}", rest.join(":"))).map_err(as_gres),
            [] => unreachable!("split yields one part at least"),
        };
    }
    if parts[0] != "gpu" {
        return Err(OptionError::GresResource(spec.to_string()));
    }
    let is_number = |s: &str| {
        s.trim_start_matches('-')
            .bytes()
            .all(|b| b.is_ascii_digit())
            && !s.is_empty()
    };
    match parts.as_slice() {
        [_] => Ok(GpuRequest {
            count: 1,
            gpu_type: None,
            ..GpuRequest::default()
        }),
        [_, n] if is_number(n) => Ok(GpuRequest {
            count: parse_count(n, "--gres", 0, MAX_GPUS_PER_JOB)?,
            gpu_type: None,
            ..GpuRequest::default()
        }),
        [_, t] => Ok(GpuRequest {
            count: 1,
            gpu_type: Some(check_gpu_type(t, spec)?),
            ..GpuRequest::default()
        }),
        [_, t, n] => Ok(GpuRequest {
            count: parse_count(n, "--gres", 0, MAX_GPUS_PER_JOB)?,
            gpu_type: Some(check_gpu_type(t, spec)?),
            ..GpuRequest::default()
        }),
        _ => Err(OptionError::Gres(spec.to_string())),
    }
}

/// The directives of a script: every `#YS` or `#SBATCH` line before the first
/// command, parsed in order. `source_name` is used in messages.
pub fn parse_directives(script: &str, source_name: &str) -> Result<Partial, ScriptError> {
    let mut merged = Partial::default();
    for (index, line) in script.lines().enumerate() {
        let number = index + 1;
        let trimmed = line.trim();
        if number == 1 && trimmed.starts_with("#!") {
            continue;
        }
        if trimmed.is_empty() {
            continue;
        }
        if !trimmed.starts_with('#') {
            break; // directives end at the first command, as in Slurm
        }
        let rest = match directive_body(trimmed) {
            Some(rest) => rest,
            None => continue,
        };
        let line_error = |message: String| ScriptError::Line {
            source_name: source_name.to_string(),
            line: number,
            message,
        };
        let mut words =
            shlex::split(rest).ok_or_else(|| line_error("unbalanced quotes".to_string()))?;
        if let Some(comment) = words.iter().position(|w| w.starts_with('#')) {
            words.truncate(comment);
        }
        // Slurm's options ysched accepts or refuses, with why.
        let mut warnings = Vec::new();
        let words: Vec<String> = crate::slurm_options::screen(
            "sbatch",
            words.into_iter().map(Into::into).collect(),
            &mut warnings,
        )
        .map_err(|e| line_error(e.to_string()))?
        .into_iter()
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
        let parsed = DirectiveLine::try_parse_from(&words)
            .map_err(|e| line_error(describe_clap_error(&e)))?;
        let mut partial =
            Partial::from_options(parsed.options).map_err(|e| line_error(e.to_string()))?;
        partial.warnings.extend(
            warnings
                .into_iter()
                .map(|w| format!("{source_name}: line {number}: {w}")),
        );
        merged = merged.overridden_by(partial);
    }
    Ok(merged)
}

/// `#YS -G 2` → `Some("-G 2")`; `#SBATCHX` or `# SBATCH` → `None` (a comment).
fn directive_body(line: &str) -> Option<&str> {
    for prefix in ["#YS", "#SBATCH"] {
        if let Some(rest) = line.strip_prefix(prefix) {
            if rest.is_empty() || rest.starts_with(char::is_whitespace) {
                return Some(rest);
            }
        }
    }
    None
}

/// Turns clap's multi-line error into one line: `unknown directive --gpu (did
/// you mean --gpus?)`.
pub fn describe_clap_error(e: &clap::Error) -> String {
    let context = |kind: ContextKind| -> Option<String> {
        match e.get(kind)? {
            ContextValue::String(s) => Some(s.clone()),
            ContextValue::Strings(v) => v.first().cloned(),
            _ => None,
        }
    };
    match e.kind() {
        ErrorKind::UnknownArgument => {
            let arg = context(ContextKind::InvalidArg).unwrap_or_default();
            match context(ContextKind::SuggestedArg) {
                Some(s) => format!("unknown option {arg} (did you mean {s}?)"),
                None => format!("unknown option {arg}"),
            }
        }
        _ => {
            let rendered = e.to_string();
            let first = rendered.lines().next().unwrap_or("invalid option");
            first.trim_start_matches("error: ").to_string()
        }
    }
}

/// What resolution needs from the submitter's side.
pub struct SubmitContext<'a> {
    pub cwd: &'a Path,
    pub environment: Vec<(String, String)>,
    /// The clock, read only for `--begin`: finding the local time zone
    /// scans the zoneinfo database, which would dominate every submission.
    pub now: &'a dyn Fn() -> jiff::Zoned,
    /// The script's file name, for the default job name.
    pub default_name: String,
}

/// Completes a request: defaults, the working directory, the environment to
/// pass (`--export`), `--begin` resolved against the submit time.
pub fn resolve(
    partial: Partial,
    script: String,
    args: Vec<String>,
    ctx: SubmitContext,
) -> Result<JobRequest, ScriptError> {
    let opt_err = ScriptError::Option;
    let work_dir = match &partial.chdir {
        Some(d) => ctx.cwd.join(d),
        None => ctx.cwd.to_path_buf(),
    };
    let begin_time = partial
        .begin
        .as_deref()
        .map(|b| units::parse_begin_time(b, (ctx.now)()))
        .transpose()
        .map_err(|e| opt_err(format!("--begin: {e}")))?;
    let environment = export_environment(partial.export.as_deref(), ctx.environment)
        .map_err(|e| opt_err(e.to_string()))?;
    let tasks = task_layout(&partial)?;
    let container = partial.container.clone().request(&work_dir)?;
    let mut gpus = gpus_per_node(&partial, &tasks)?;
    if let Some(constraint) = partial.constraint {
        if gpus.count == 0 {
            return Err(opt_err(format!(
                "--constraint={constraint} applies to GPUs, and the job asks for none (--gpus or --gres)"
            )));
        }
        gpus.constraint = Some(constraint);
    }
    let mem_mb = match partial.mem {
        Some(Memory::Total(mb)) => Some(mb),
        Some(Memory::PerGpu(_)) if gpus.count == 0 => {
            return Err(opt_err(
                "--mem-per-gpu needs GPUs (--gpus or --gres)".to_string(),
            ))
        }
        Some(Memory::PerGpu(mb)) => Some(mb * u64::from(gpus.gpus_held())),
        None => None,
    };
    Ok(JobRequest {
        name: partial.name.unwrap_or(ctx.default_name),
        account: partial.account,
        qos: partial.qos,
        gpus,
        // Overcommitted, the tasks of a node share one task's CPUs; as
        // Slurm's cons_tres, `--mincpus` raises what each node gives.
        cpus: (partial.cpus.unwrap_or(1)
            * if partial.overcommit {
                1
            } else {
                tasks.max_tasks_per_node(tasks.nodes_min)
            })
        .max(partial.min_cpus.unwrap_or(0)),
        mem_mb,
        time_limit: partial.time_limit,
        output: partial.output,
        error: partial.error,
        open_append: partial.open_mode == Some(OpenMode::Append),
        work_dir,
        submit_dir: ctx.cwd.to_path_buf(),
        environment,
        hold: partial.hold,
        begin_time,
        comment: partial.comment,
        nice: partial.nice.unwrap_or(0),
        dependency: partial.dependency,
        array: partial.array,
        script,
        args,
        test_only: false,
        interactive: false,
        no_requeue: partial.no_requeue.unwrap_or(false),
        warn_signal: partial.warn_signal,
        checkpoint_file: partial.checkpoint_file,
        grace: partial.grace,
        mail_type: partial.mail_type.unwrap_or_default(),
        mail_user: partial.mail_user,
        exclusive: partial.exclusive,
        nodelist: partial.nodelist.unwrap_or_default(),
        exclude: partial.exclude.unwrap_or_default(),
        tmp_mb: partial.tmp_mb,
        tasks,
        container,
    })
}

/// The nodes and tasks asked for, checked against each other.
fn task_layout(partial: &Partial) -> Result<crate::model::tasks::TaskLayout, ScriptError> {
    let t = &partial.tasks;
    let (nodes_min, nodes_max) = t.nodes.unwrap_or((1, 1));
    let layout = crate::model::tasks::TaskLayout {
        nodes_min,
        nodes_max,
        ntasks: t.ntasks,
        ntasks_per_node: t.ntasks_per_node,
        gpus_per_task: t.gpus_per_task,
    };
    layout
        .check()
        .map_err(|e| ScriptError::Option(e.to_string()))?;
    Ok(layout)
}

/// The GPUs each node gives the job: `--gres` and `--gpus-per-node` as
/// they are; `--gpus`, for the whole job, split evenly over its nodes;
/// else `--gpus-per-task` times the tasks each node runs.
fn gpus_per_node(
    partial: &Partial,
    tasks: &crate::model::tasks::TaskLayout,
) -> Result<GpuRequest, ScriptError> {
    let refuse = |why: String| Err(ScriptError::Option(why));
    let per_task = tasks.gpus_per_task;
    let Some(mut gpus) = partial.gpus.clone() else {
        let Some(per_task) = per_task else {
            return Ok(GpuRequest::default());
        };
        let counts = tasks.tasks_per_node(tasks.nodes_min);
        let even = counts.iter().all(|&c| c == counts[0])
            && (tasks.nodes_min == tasks.nodes_max || tasks.ntasks.is_none());
        if !even {
            return refuse(format!(
                "--gpus-per-task={per_task}: the nodes would run different numbers of tasks \
                 ({}); give --ntasks-per-node, or --gres=gpu:N per node",
                crate::model::tasks::tasks_per_node_text(&counts)
            ));
        }
        return Ok(GpuRequest {
            count: per_task * counts[0],
            ..GpuRequest::default()
        });
    };
    if partial.gpus_for_job && tasks.is_multi_node() && !gpus.shard {
        let nodes = tasks.nodes_min;
        if tasks.nodes_max != nodes || gpus.count % nodes != 0 {
            return refuse(format!(
                "--gpus={} counts the whole job's GPUs, which must split evenly over a fixed \
                 --nodes ({}); give --gpus-per-node or --gres=gpu:N per node instead",
                gpus.count,
                tasks.nodes_text()
            ));
        }
        gpus.count /= nodes;
    }
    if let Some(per_task) = per_task {
        let most = tasks.max_tasks_per_node(tasks.nodes_min);
        if gpus.count < per_task * most {
            return refuse(format!(
                "--gpus-per-task={per_task} with {most} task(s) on a node needs {} GPUs per \
                 node, and the job asks for {}",
                per_task * most,
                gpus.count
            ));
        }
    }
    Ok(gpus)
}

/// The node names a hostlist (`gpu[01-03],cpu1`) stands for, each once,
/// in order.
fn hostnames(flag: &'static str, hostlist: &str) -> Result<Vec<String>, OptionError> {
    let fail = |why: String| OptionError::Hostlist {
        flag,
        value: hostlist.to_string(),
        why,
    };
    let mut names = crate::model::hostlist::expand(hostlist).map_err(|e| fail(e.to_string()))?;
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    if names.is_empty() {
        return Err(fail("names no node".to_string()));
    }
    Ok(names)
}

/// An `--export` list that does not read.
#[derive(Debug, Error, PartialEq)]
pub enum ExportError {
    #[error("--export={spec}: {item} may only come first")]
    NotFirst { spec: String, item: String },
    #[error("--export={spec}: '{name}' is not a variable name")]
    BadName { spec: String, name: String },
}

/// Slurm's `--export`: `ALL` (default), `NONE`, or a list of `VAR` (from the
/// submitter's environment) and `VAR=VALUE`, optionally starting with `ALL`.
pub fn export_environment(
    spec: Option<&str>,
    env: Vec<(String, String)>,
) -> Result<Vec<(String, String)>, ExportError> {
    let spec = spec.unwrap_or("ALL").trim();
    if spec.eq_ignore_ascii_case("ALL") {
        return Ok(env);
    }
    if spec.eq_ignore_ascii_case("NONE") {
        return Ok(Vec::new());
    }
    let mut out: Vec<(String, String)> = Vec::new();
    let set = |k: String, v: String, out: &mut Vec<(String, String)>| {
        out.retain(|(name, _)| *name != k);
        out.push((k, v));
    };
    for (i, item) in spec.split(',').enumerate() {
        let item = item.trim();
        if i == 0 && item.eq_ignore_ascii_case("ALL") {
            out = env.clone();
            continue;
        }
        if item.eq_ignore_ascii_case("NONE") || item.eq_ignore_ascii_case("ALL") {
            return Err(ExportError::NotFirst {
                spec: spec.to_string(),
                item: item.to_string(),
            });
        }
        let (name, value) = match item.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (item, None),
        };
        if name.is_empty()
            || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            || name.as_bytes()[0].is_ascii_digit()
        {
            return Err(ExportError::BadName {
                spec: spec.to_string(),
                name: name.to_string(),
            });
        }
        let value = match value {
            Some(v) => v,
            None => match env.iter().find(|(k, _)| k == name) {
                Some((_, v)) => v.clone(),
                None => continue, // Slurm passes nothing for an unset variable
            },
        };
        set(name.to_string(), value, &mut out);
    }
    Ok(out)
}

/// Slurm insists on an interpreter line, since the script is executed
/// directly; so does ysched.
pub fn check_interpreter_line(script: &str, source_name: &str) -> Result<(), ScriptError> {
    if script.starts_with("#!") {
        return Ok(());
    }
    Err(ScriptError::Line {
        source_name: source_name.to_string(),
        line: 1,
        message: "the first line must start with #! followed by the path to an interpreter (e.g. #!/bin/bash)".into(),
    })
}

/// The script `--wrap CMD` submits.
pub fn wrap_command(command: &str) -> String {
    format!("#!/bin/sh\n# This script was created by ysbatch --wrap.\n\n{command}\n")
}

/// The job name a script path gives: its file name.
pub fn name_from_path(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "ysbatch".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn directives(script: &str) -> Result<Partial, ScriptError> {
        parse_directives(script, "train.sh")
    }

    #[test]
    fn ys_and_sbatch_directives_before_the_first_command() {
        let p = directives(
            "#!/bin/bash\n#SBATCH -J yolo --gres=gpu:a100:2\n# plain comment\n#YS -t 1:00:00\n\n#SBATCH --mem=8G # eight gigs\npython train.py\n#YS -t 5\n",
        )
        .unwrap();
        assert_eq!(p.name.as_deref(), Some("yolo"));
        assert_eq!(
            p.gpus,
            Some(GpuRequest {
                count: 2,
                gpu_type: Some("a100".into()),
                ..GpuRequest::default()
            })
        );
        assert_eq!(
            p.time_limit,
            Some(Some(3_600)),
            "directive after the first command must be ignored"
        );
        assert_eq!(p.mem, Some(Memory::Total(8_192)));
    }

    #[test]
    fn disabled_directives_are_comments() {
        let p =
            directives("#!/bin/sh\n# SBATCH -t 5\n##SBATCH -t 6\n#SBATCHX -t 7\ntrue\n").unwrap();
        assert_eq!(p.time_limit, None);
    }

    #[test]
    fn later_directives_and_the_command_line_win() {
        let p = directives("#!/bin/sh\n#YS -t 10\n#YS -t 20 -G 1\n").unwrap();
        assert_eq!(p.time_limit, Some(Some(1_200)));
        let cli = Partial {
            gpus: Some(GpuRequest {
                count: 3,
                gpu_type: None,
                ..GpuRequest::default()
            }),
            ..Partial::default()
        };
        let merged = p.overridden_by(cli);
        assert_eq!(merged.gpus.unwrap().count, 3);
        assert_eq!(merged.time_limit, Some(Some(1_200)));
    }

    #[test]
    fn errors_name_the_line() {
        let e = directives("#!/bin/sh\n#SBATCH -J ok\n\n#SBATCH --gpu 2\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "train.sh: line 4: unknown option --gpu (did you mean --gpus?)"
        );
        let e = directives("#!/bin/sh\n#YS -t soon\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("train.sh: line 2: --time: invalid time limit 'soon'"),
            "{e}"
        );
        let e = directives("#!/bin/sh\n#YS -G -3\n").unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        let e = directives("#!/bin/sh\n#YS -G 100000\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "train.sh: line 2: --gpus: 100000 is out of range (0 to 1024)"
        );
        let e = directives("#!/bin/sh\n#YS -J 'unterminated\n").unwrap_err();
        assert_eq!(e.to_string(), "train.sh: line 2: unbalanced quotes");
        let e = directives("#!/bin/sh\n#YS -G 2 --gres gpu:4\n").unwrap_err();
        assert!(e.to_string().contains("conflicting GPU requests"), "{e}");
        let e = directives("#!/bin/sh\n#SBATCH -N 0\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "train.sh: line 2: --nodes=0: expected N or MIN-MAX, from 1 to 4096"
        );
    }

    fn resolved(script: &str) -> Result<JobRequest, ScriptError> {
        let partial = directives(script)?;
        resolve(
            partial,
            script.to_string(),
            Vec::new(),
            SubmitContext {
                cwd: Path::new("/tmp"),
                environment: Vec::new(),
                default_name: "train.sh".into(),
                now: &jiff::Zoned::now,
            },
        )
    }

    #[test]
    fn nodes_and_tasks_make_a_layout_with_resources_per_node() {
        let r =
            resolved("#!/bin/sh\n#SBATCH -N 3 --gres=gpu:8 --ntasks-per-node=8 -c 4\n").unwrap();
        assert_eq!((r.tasks.nodes_min, r.tasks.nodes_max), (3, 3));
        assert_eq!((r.gpus.count, r.cpus), (8, 32), "per node");
        let r = resolved("#!/bin/sh\n#SBATCH -N 2 --gpus=16\n").unwrap();
        assert_eq!(r.gpus.count, 8, "--gpus counts the whole job");
        let r = resolved("#!/bin/sh\n#SBATCH -N 2 --ntasks=8 --gpus-per-task=1\n").unwrap();
        assert_eq!(r.gpus.count, 4);
        let e = resolved("#!/bin/sh\n#SBATCH -N 2 --gpus=3\n").unwrap_err();
        assert!(e.to_string().contains("must split evenly"), "{e}");
        let e = resolved("#!/bin/sh\n#SBATCH -N 3 -n 2\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("--ntasks=2 is fewer than --nodes=3: every node needs a task"),
            "{e}"
        );
        let e = resolved("#!/bin/sh\n#SBATCH -N 2 --ntasks=3 --gpus-per-task=1\n").unwrap_err();
        assert!(
            e.to_string().contains("different numbers of tasks (2,1)"),
            "{e}"
        );
    }

    #[test]
    fn slurm_only_options_warn_instead_of_failing() {
        let p = directives("#!/bin/sh\n#SBATCH -p ysched -N 1 -n 1 --mail-type=END\n").unwrap();
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        assert_eq!(
            p.mail_type,
            Some(crate::model::job::MailTypes::END),
            "mail is supported"
        );
    }

    #[test]
    fn a_partition_ysched_has_not_is_refused_as_slurm_refuses_it() {
        let e = directives("#!/bin/sh\n#SBATCH -p gpu\n").unwrap_err();
        assert!(
            e.to_string().contains("invalid partition specified: gpu"),
            "{e}"
        );
        assert!(directives("#!/bin/sh\n#SBATCH -p gpu,ysched\n").is_ok());
    }

    #[test]
    fn gpu_specs() {
        assert_eq!(parse_gpus("2").unwrap().count, 2);
        assert_eq!(
            parse_gpus("a100:4").unwrap().gpu_type.as_deref(),
            Some("a100")
        );
        assert!(parse_gpus("two").is_err());
        assert!(parse_gpus("-1").is_err());
        assert_eq!(parse_gres("gpu").unwrap().count, 1);
        assert_eq!(parse_gres("gpu:3").unwrap().count, 3);
        assert_eq!(
            parse_gres("gpu:v100").unwrap().gpu_type.as_deref(),
            Some("v100")
        );
        assert_eq!(parse_gres("gpu:v100:2").unwrap().count, 2);
        assert!(parse_gres("mps:100").is_err());
        assert!(parse_gres("gpu:a:b:c").is_err());
    }

    #[test]
    fn export_rules() {
        let env = vec![
            ("PATH".to_string(), "/bin".to_string()),
            ("HOME".to_string(), "/h".to_string()),
        ];
        assert_eq!(export_environment(None, env.clone()).unwrap(), env);
        assert!(export_environment(Some("NONE"), env.clone())
            .unwrap()
            .is_empty());
        assert_eq!(
            export_environment(Some("PATH,X=1,UNSET"), env.clone()).unwrap(),
            vec![
                ("PATH".to_string(), "/bin".to_string()),
                ("X".to_string(), "1".to_string())
            ]
        );
        let all = export_environment(Some("ALL,HOME=/x"), env.clone()).unwrap();
        assert!(all.contains(&("HOME".to_string(), "/x".to_string())));
        assert!(all.contains(&("PATH".to_string(), "/bin".to_string())));
        assert!(export_environment(Some("A,NONE"), env.clone()).is_err());
        assert!(export_environment(Some("1BAD"), env).is_err());
    }

    #[test]
    fn interpreter_line_is_required() {
        assert!(check_interpreter_line("#!/bin/sh\ntrue\n", "a.sh").is_ok());
        let e = check_interpreter_line("python train.py\n", "a.sh").unwrap_err();
        assert!(e
            .to_string()
            .starts_with("a.sh: line 1: the first line must start with #!"));
    }
}
