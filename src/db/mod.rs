//! The SQLite accounting database: schema, migrations and every query.
//! Policy never lives here; this module stores and finds.

pub mod clean_stop;
mod digest;
mod error;
mod migrations;
mod nodes;
mod payloads;
pub mod preemptions;
mod steps;
mod tokens;

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OpenFlags, OptionalExtension, Row};
use thiserror::Error;

use crate::array::JobRef;
use crate::model::job::{ArrayTask, ExitStatus, GpuRequest, Hold, Job, JobId, JobState};
use crate::proto::{JobFilter, Reply};

use clean_stop::sidecar;
pub use error::DbError;
pub use migrations::MIGRATIONS;
pub use nodes::{
    certificate_used, expect_node, joined_nodes, node_drained, node_drains, node_joined,
    node_record, nodes_good, remove_node, set_node_certificate, set_node_drain, set_node_facts,
    set_node_good, NodeRecord,
};
pub use steps::{begin_step, end_step, jobs_with_steps, next_step, step_running, steps_of};
pub use tokens::{
    record_node_submission, record_token, revocable, revoke_tokens, submitted_on, token, tokens,
    Revoked,
};

/// What a job runs, kept apart from the record every view may read.
#[derive(Clone, Debug, PartialEq)]
pub struct Payload {
    pub script: String,
    pub args: Vec<String>,
    pub environment: Vec<(String, String)>,
}

/// Opens (creating if needed) and migrates the daemon's database: WAL so the
/// daemon's query thread reads while the main loop writes, `synchronous=FULL`
/// because a reply to `ysbatch` promises the job survives power loss. It
/// is checked (`quick_check`) unless the last controller stopped cleanly
/// and nothing touched it since (`clean_stop`).
pub fn open(path: &Path) -> Result<Connection, DbError> {
    create_private(path)?;
    let trusted = clean_stop::take(path);
    let conn = Connection::open(path)?;
    let corrupt = |e: rusqlite::Error| DbError::Corrupt {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .map_err(corrupt)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(DbError::Corrupt {
            path: path.to_path_buf(),
            message: format!("cannot switch to WAL mode (got {mode})"),
        });
    }
    conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;")?;
    digest::register(&conn)?;
    if !trusted {
        let started = std::time::Instant::now();
        let check: String = conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .map_err(corrupt)?;
        if check != "ok" {
            return Err(DbError::Corrupt {
                path: path.to_path_buf(),
                message: check,
            });
        }
        tracing::info!(
            target: "ysched::db",
            "{}: no clean stop recorded; quick_check found it sound in {} ms",
            path.display(),
            started.elapsed().as_millis()
        );
    }
    migrate(&conn, path)?;
    // Files made by an older release, before the database was private.
    for file in [
        path.to_path_buf(),
        sidecar(path, "-wal"),
        sidecar(path, "-shm"),
    ] {
        use std::os::unix::fs::PermissionsExt;
        if file.exists() {
            let _ = std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600));
        }
    }
    Ok(conn)
}

/// Makes the database file private (0600) from its first byte: SQLite
/// gives its WAL and shared-memory files the database's mode, and they
/// hold every job's script and environment. An existing empty file is
/// refused: a database always has its schema, so an empty one means its
/// history was lost (truncated, or restored badly), and starting afresh
/// over it would restart job ids at 1.
fn create_private(path: &Path) -> Result<(), DbError> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::metadata(path) {
        Ok(meta) if meta.len() == 0 => Err(DbError::Corrupt {
            path: path.to_path_buf(),
            message: "the file is empty (0 bytes), so its job history is gone; if this spool \
                      is new and has never run a job, remove the file and start again"
                .into(),
        }),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let created = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path);
            match created {
                Ok(_) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
                Err(e) => Err(DbError::Create {
                    path: path.to_path_buf(),
                    source: e,
                }),
            }
        }
        Err(e) => Err(DbError::Create {
            path: path.to_path_buf(),
            source: e,
        }),
    }
}

/// How much of the database the read-only connections map.
const READ_MAP_BYTES: i64 = 4 << 30;

/// A read-only connection for views: never writes, never migrates.
pub fn open_readonly(path: &Path) -> Result<Connection, DbError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let known = MIGRATIONS.len() as i64;
    if version > known {
        return Err(DbError::TooNew {
            path: path.to_path_buf(),
            found: version,
            known,
        });
    }
    // History is read through a mapping of the file (read-only, as the
    // connection is), not copied page by page out of the kernel's cache:
    // a month's listing scans the whole table, and those copies were a
    // quarter of it. Past the first GiBs SQLite reads as before.
    conn.pragma_update(None, "mmap_size", READ_MAP_BYTES)?;
    Ok(conn)
}

fn migrate(conn: &Connection, path: &Path) -> Result<(), DbError> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let known = MIGRATIONS.len() as i64;
    if version > known {
        return Err(DbError::TooNew {
            path: path.to_path_buf(),
            found: version,
            known,
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        let tx = conn.unchecked_transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
        tracing::debug!(target: "ysched::db", "database schema migrated to version {}", i + 1);
    }
    // One line for the whole upgrade (a new database goes through all).
    match version {
        v if v == known => {}
        0 => {
            tracing::info!(target: "ysched::db", "new database {} (schema version {known})", path.display())
        }
        v => {
            tracing::info!(target: "ysched::db", "database schema upgraded from version {v} to {known}")
        }
    }
    Ok(())
}

const JOB_COLUMNS: &str = "id, uid, gid, user, account, qos, name, state, hold, gpu_count, gpu_type, cpus, \
     mem_mb, time_limit, submit_time, begin_time, start_time, end_time, gpus_alloc, node, exit_code, \
     exit_signal, restart_count, reason, kill_reason, work_dir, submit_dir, std_out, std_err, \
     open_append, comment, max_rss_bytes, cpu_usec, cgroup, suspended_secs, suspended_at, nice, billing, dependency, \
     array_job_id, array_task_id, array_spec, approved_by, gpu_shard, gpu_constraint, preempted_by, claimed_gpus, \
     preempt_count, no_requeue, checkpoint_at, priority_override, warn_signal, \
     checkpoint_file, grace, gpu_seconds, gpu_samples, gpu_util_sum, gpu_util_max, gpu_mem_max_mb, \
     gpu_low_secs, preemptions_caused, mail_type, mail_user, nodelist, exclude_nodes, borrowed, task_layout, peers, \
     container, image_reference, image_digest, interactive, quick_requeues, gpu_devices";

/// A job's row and which of its columns were selected, in their order:
/// each other one reads as its empty value (see [`JobColumns`]), neither
/// copied by SQLite nor decoded (74 columns a row were most of a month's
/// listing).
struct JobRow<'a, 'r> {
    row: &'a Row<'r>,
    /// Bit `i`: column `i` was selected.
    read: u128,
}

impl JobRow<'_, '_> {
    fn is_read(&self, i: usize) -> bool {
        self.read & (1 << i) != 0
    }

    /// Where column `i` is in the row: after the columns read before it.
    fn at(&self, i: usize) -> usize {
        (self.read & ((1 << i) - 1)).count_ones() as usize
    }

    fn get<T: rusqlite::types::FromSql + Default>(&self, i: usize) -> rusqlite::Result<T> {
        match self.is_read(i) {
            true => self.row.get(self.at(i)),
            false => Ok(T::default()),
        }
    }

    /// Column `i`, text that `parse` makes a value of; what it cannot
    /// parse is the row's error, naming the column.
    fn required<T>(
        &self,
        i: usize,
        parse: impl FnOnce(&str) -> Result<T, ColumnError>,
    ) -> rusqlite::Result<T> {
        let text: String = self.get(i)?;
        parse(&text).map_err(|what| invalid_column(i, what))
    }

    /// The same for a column that may be NULL.
    fn optional<T>(
        &self,
        i: usize,
        parse: impl FnOnce(&str) -> Result<T, ColumnError>,
    ) -> rusqlite::Result<Option<T>> {
        match self.get::<Option<String>>(i)? {
            Some(text) => parse(&text)
                .map(Some)
                .map_err(|what| invalid_column(i, what)),
            None => Ok(None),
        }
    }
}

fn job_from_row(row: &Row) -> rusqlite::Result<Job> {
    job_from(&JobRow {
        row,
        read: u128::MAX,
    })
}

/// A job from `row`, reading only the columns it says.
fn job_from(row: &JobRow) -> rusqlite::Result<Job> {
    let state = row.required(7, |s| {
        JobState::parse(s).ok_or_else(|| ColumnError::unknown("job state", s))
    })?;
    let hold = row.optional(8, |h| {
        Hold::parse(h).ok_or_else(|| ColumnError::unknown("hold", h))
    })?;
    let gpus_alloc = row.required(18, parse_index_list)?;
    let constraint = row.optional(44, |c| {
        crate::model::job::GpuConstraint::parse(c).map_err(ColumnError::invalid("GPU constraint"))
    })?;
    let kill_reason = row.optional(24, |k| {
        JobState::parse(k).ok_or_else(|| ColumnError::unknown("kill reason", k))
    })?;
    let warn_signal = row.optional(51, |w| {
        crate::model::job::WarnSignal::parse(w).map_err(ColumnError::invalid("--signal"))
    })?;
    Ok(Job {
        id: row.get::<i64>(0)? as JobId,
        uid: row.get(1)?,
        gid: row.get(2)?,
        user: row.get(3)?,
        account: row.get(4)?,
        qos: row.get(5)?,
        name: row.get(6)?,
        state,
        hold,
        gpus: GpuRequest {
            count: row.get(9)?,
            gpu_type: row.get(10)?,
            shard: row.get(43)?,
            constraint,
        },
        cpus: row.get(11)?,
        mem_mb: row.get::<Option<i64>>(12)?.map(|m| m as u64),
        time_limit: row.get::<Option<i64>>(13)?.map(|t| t as u64),
        submit_time: row.get(14)?,
        begin_time: row.get(15)?,
        start_time: row.get(16)?,
        end_time: row.get(17)?,
        gpus_alloc,
        node: row.get(19)?,
        exit: exit_of(row)?,
        restart_count: row.get(22)?,
        reason: row.get(23)?,
        kill_reason,
        work_dir: PathBuf::from(row.get::<String>(25)?),
        submit_dir: PathBuf::from(row.get::<String>(26)?),
        std_out: row.get(27)?,
        std_err: row.get(28)?,
        open_append: row.get(29)?,
        comment: row.get(30)?,
        max_rss_bytes: row.get::<Option<i64>>(31)?.map(|b| b as u64),
        cpu_usec: row.get::<Option<i64>>(32)?.map(|u| u as u64),
        cgroup: row.get(33)?,
        suspended_secs: row.get::<i64>(34)? as u64,
        suspended_at: row.get(35)?,
        nice: row.get(36)?,
        billing: row.get(37)?,
        dependency: row.get(38)?,
        array: array_task_of(row)?,
        approved_by: row.get(42)?,
        preempted_by: row.get::<Option<i64>>(45)?.map(|j| j as JobId),
        claim: row.required(46, parse_index_list)?,
        preempt_count: row.get(47)?,
        no_requeue: row.get(48)?,
        checkpoint_at: row.get(49)?,
        priority_override: row.get(50)?,
        checkpoint_file: row.get(52)?,
        grace: row.get::<Option<i64>>(53)?.map(|g| g as u64),
        gpu_seconds: row.get(54)?,
        gpu_usage: gpu_usage(row)?,
        preemptions_caused: row.get(60)?,
        mail_type: row.get(61)?,
        mail_user: row.get(62)?,
        warn_signal,
        nodelist: names(&row.get::<String>(63)?),
        exclude: names(&row.get::<String>(64)?),
        borrowed: row.get(65)?,
        tasks: tasks_of(row)?,
        peers: names(&row.get::<String>(67)?),
        container: container_of(row)?,
        image: image_of(row)?,
        interactive: row.get(71)?,
        quick_requeues: row.get(72)?,
    })
}

/// How its last run ended: a code (and the signal that killed it), or
/// nothing yet.
fn exit_of(row: &JobRow) -> rusqlite::Result<Option<ExitStatus>> {
    let code = row.get::<Option<i32>>(20)?;
    let signal = row.get::<Option<i32>>(21)?;
    Ok(code.map(|code| ExitStatus {
        code,
        signal: signal.unwrap_or(0),
    }))
}

/// Its tasks and nodes, stored as JSON ('' for the default: one task).
fn tasks_of(row: &JobRow) -> rusqlite::Result<crate::model::tasks::TaskLayout> {
    row.required(66, |t| {
        if t.is_empty() {
            return Ok(Default::default());
        }
        serde_json::from_str(t).map_err(|_| ColumnError::unknown("task layout", t))
    })
}

/// Its `--container-*` request, stored as JSON ('' for none).
fn container_of(
    row: &JobRow,
) -> rusqlite::Result<Option<crate::model::container::ContainerRequest>> {
    row.required(68, |c| {
        if c.is_empty() {
            return Ok(None);
        }
        serde_json::from_str(c)
            .map(Some)
            .map_err(|_| ColumnError::unknown("container request", c))
    })
}

/// The image its last run resolved its request to.
fn image_of(row: &JobRow) -> rusqlite::Result<Option<crate::model::container::ImageRecord>> {
    Ok(match (row.get::<Option<String>>(69)?, row.get(70)?) {
        (Some(reference), Some(digest)) => {
            Some(crate::model::container::ImageRecord { reference, digest })
        }
        _ => None,
    })
}

/// A job's container request as stored: '' for none.
fn container_text(container: &Option<crate::model::container::ContainerRequest>) -> String {
    container
        .as_ref()
        .and_then(|c| serde_json::to_string(c).ok())
        .unwrap_or_default()
}

/// A job's task layout as stored: '' for the plain one (one task on one
/// node), which most jobs have.
fn task_layout_text(layout: &crate::model::tasks::TaskLayout) -> String {
    if *layout == Default::default() {
        return String::new();
    }
    serde_json::to_string(layout).unwrap_or_default()
}

/// Node names as stored: joined by commas (a name holds none).
fn names(text: &str) -> Vec<String> {
    text.split(',')
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect()
}

/// A stored column's text that does not read back as its type.
#[derive(Debug, Error)]
enum ColumnError {
    #[error("{what} '{text}'")]
    Unknown { what: &'static str, text: String },
    #[error("{what}: {why}")]
    Invalid {
        what: &'static str,
        why: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl ColumnError {
    fn unknown(what: &'static str, text: &str) -> ColumnError {
        ColumnError::Unknown {
            what,
            text: text.to_string(),
        }
    }

    fn invalid<E: std::error::Error + Send + Sync + 'static>(
        what: &'static str,
    ) -> impl FnOnce(E) -> ColumnError {
        move |e| ColumnError::Invalid {
            what,
            why: Box::new(e),
        }
    }
}

fn invalid_column(i: usize, what: ColumnError) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        i,
        rusqlite::types::Type::Text,
        Box::new(DbError::Invalid(what.to_string())),
    )
}

/// The array task a row is, if it is one.
fn array_task_of(row: &JobRow) -> rusqlite::Result<Option<ArrayTask>> {
    Ok(match row.get::<Option<i64>>(39)? {
        Some(array_id) => Some(ArrayTask {
            job_id: array_id as JobId,
            task_id: row.get(40)?,
            spec: row.get::<Option<String>>(41)?.unwrap_or_default(),
        }),
        None => None,
    })
}

/// The job's GPU use, summed over its samples.
fn gpu_usage(row: &JobRow) -> rusqlite::Result<crate::model::gpu::JobGpuUsage> {
    Ok(crate::model::gpu::JobGpuUsage {
        samples: row.get(55)?,
        utilization_sum: row.get::<i64>(56)? as u64,
        utilization_max: row.get(57)?,
        memory_max_mb: row.get::<i64>(58)? as u64,
        low_secs: row.get::<i64>(59)? as u64,
        // Written by this module only; unreadable JSON shows no devices
        // rather than hiding the job.
        devices: row
            .get::<Option<String>>(73)?
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default(),
    })
}

pub fn format_index_list(indices: &[u32]) -> String {
    indices
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn parse_index_list(text: &str) -> Result<Vec<u32>, ColumnError> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|s| {
            s.parse()
                .map_err(|_| ColumnError::unknown("GPU list", text))
        })
        .collect()
}

/// Inserts a new job with its payload; returns its id: `job.id` when it
/// has one (`next_job_id` gave it), else the one SQLite gives it. An
/// array task whose array id is 0 is the array's first task: the array
/// takes its id.
pub fn insert_job(conn: &Connection, job: &Job, payload: &Payload) -> Result<JobId, DbError> {
    conn.prepare_cached(
        "INSERT INTO jobs (uid, gid, user, account, qos, name, state, hold, gpu_count, gpu_type, cpus, mem_mb, \
         time_limit, submit_time, begin_time, work_dir, submit_dir, std_out, std_err, open_append, comment, nice, dependency, \
         array_job_id, array_task_id, array_spec, gpu_shard, gpu_constraint, no_requeue, warn_signal, checkpoint_file, grace, \
         mail_type, mail_user, nodelist, exclude_nodes, task_layout, container, interactive, id) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, \
         ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34, ?35, ?36, ?37, ?38, ?39, NULLIF(?40, 0))",
    )?
    .execute(params![
        job.uid,
        job.gid,
        job.user,
        job.account,
        job.qos,
        job.name,
        job.state.name(),
        job.hold.map(Hold::name),
        job.gpus.count,
        job.gpus.gpu_type,
        job.cpus,
        job.mem_mb.map(|m| m as i64),
        job.time_limit.map(|t| t as i64),
        job.submit_time,
        job.begin_time,
        job.work_dir.to_string_lossy(),
        job.submit_dir.to_string_lossy(),
        job.std_out,
        job.std_err,
        job.open_append,
        job.comment,
        job.nice,
        job.dependency,
        job.array.as_ref().map(|a| a.job_id as i64),
        job.array.as_ref().map(|a| a.task_id),
        job.array.as_ref().map(|a| a.spec.as_str()),
        job.gpus.shard,
        job.gpus.constraint.as_ref().map(|c| c.to_string()),
        job.no_requeue,
        job.warn_signal.map(|w| w.to_string()),
        job.checkpoint_file,
        job.grace.map(|g| g as i64),
        job.mail_type,
        job.mail_user,
        job.nodelist.join(","),
        job.exclude.join(","),
        task_layout_text(&job.tasks),
        container_text(&job.container),
        job.interactive,
        job.id as i64,
    ])?;
    let id = conn.last_insert_rowid() as JobId;
    if job.array.as_ref().is_some_and(|a| a.job_id == 0) {
        conn.prepare_cached("UPDATE jobs SET array_job_id = ?1 WHERE id = ?1")?
            .execute([id as i64])?;
    }
    let args = serde_json::to_string(&payload.args).map_err(|e| DbError::Invalid(e.to_string()))?;
    let env =
        serde_json::to_string(&payload.environment).map_err(|e| DbError::Invalid(e.to_string()))?;
    payloads::store(conn, id, (&payload.script, &args, &env))?;
    add_event(conn, id, job.submit_time, job.state, None)?;
    Ok(id)
}

/// Writes every field that changes over a job's life.
pub fn update_job(conn: &Connection, job: &Job) -> Result<(), DbError> {
    let changed = conn
        .prepare_cached(
            "UPDATE jobs SET state = ?2, hold = ?3, start_time = ?4, end_time = ?5, gpus_alloc = ?6, node = ?7, \
             exit_code = ?8, exit_signal = ?9, restart_count = ?10, reason = ?11, kill_reason = ?12, \
             begin_time = ?13, max_rss_bytes = ?14, cpu_usec = ?15, cgroup = ?16, \
             suspended_secs = ?17, suspended_at = ?18, billing = ?19, approved_by = ?20, \
             preempted_by = ?21, claimed_gpus = ?22, preempt_count = ?23, checkpoint_at = ?24, \
             priority_override = ?25, qos = ?26, time_limit = ?27, gpu_seconds = ?28, \
             gpu_samples = ?29, gpu_util_sum = ?30, gpu_util_max = ?31, gpu_mem_max_mb = ?32, \
             gpu_low_secs = ?33, preemptions_caused = ?34, borrowed = ?35, peers = ?36, \
             image_reference = ?37, image_digest = ?38, quick_requeues = ?39, gpu_devices = ?40 \
             WHERE id = ?1",
        )?
        .execute(params![
            job.id as i64,
            job.state.name(),
            job.hold.map(Hold::name),
            job.start_time,
            job.end_time,
            format_index_list(&job.gpus_alloc),
            job.node,
            job.exit.map(|e| e.code),
            job.exit.map(|e| e.signal),
            job.restart_count,
            job.reason,
            job.kill_reason.map(JobState::name),
            job.begin_time,
            job.max_rss_bytes.map(|b| b as i64),
            job.cpu_usec.map(|u| u as i64),
            job.cgroup,
            job.suspended_secs as i64,
            job.suspended_at,
            job.billing,
            job.approved_by,
            job.preempted_by.map(|j| j as i64),
            format_index_list(&job.claim),
            job.preempt_count,
            job.checkpoint_at,
            job.priority_override,
            job.qos,
            job.time_limit.map(|t| t as i64),
            job.gpu_seconds,
            job.gpu_usage.samples,
            job.gpu_usage.utilization_sum as i64,
            job.gpu_usage.utilization_max,
            job.gpu_usage.memory_max_mb as i64,
            job.gpu_usage.low_secs as i64,
            job.preemptions_caused,
            job.borrowed,
            job.peers.join(","),
            job.image.as_ref().map(|i| i.reference.as_str()),
            job.image.as_ref().map(|i| i.digest.as_str()),
            job.quick_requeues,
            (!job.gpu_usage.devices.is_empty())
                .then(|| serde_json::to_string(&job.gpu_usage.devices).ok())
                .flatten(),
        ])?;
    if changed == 0 {
        return Err(DbError::NotFound(job.id));
    }
    Ok(())
}

/// When the last event was written (the newest row): the last moment the
/// controller that wrote it is known to have been alive.
pub fn last_event_time(conn: &Connection) -> Result<Option<i64>, DbError> {
    Ok(conn
        .prepare_cached("SELECT time FROM job_events ORDER BY id DESC LIMIT 1")?
        .query_row([], |r| r.get(0))
        .optional()?)
}

pub fn add_event(
    conn: &Connection,
    id: JobId,
    time: i64,
    state: JobState,
    detail: Option<&str>,
) -> Result<(), DbError> {
    add_event_named(conn, id, time, state.name(), detail)
}

/// An event under a name that is not a job state (`REQUEUED`).
pub fn add_event_named(
    conn: &Connection,
    id: JobId,
    time: i64,
    name: &str,
    detail: Option<&str>,
) -> Result<(), DbError> {
    conn.prepare_cached(
        "INSERT INTO job_events (job_id, time, state, detail) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![id as i64, time, name, detail])?;
    Ok(())
}

/// A text column, borrowed from the row.
fn text<'r>(row: &'r Row, i: usize) -> Result<&'r str, DbError> {
    Ok(row.get_ref(i)?.as_str().map_err(rusqlite::Error::from)?)
}

/// Calls `each` for every job that ended in [from, to), oldest end first,
/// a row at a time (a month of a million jobs is never all in memory).
pub fn for_each_ended(
    conn: &Connection,
    from: i64,
    to: i64,
    mut each: impl FnMut(crate::report::usage::EndedJob),
) -> Result<(), DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT account, user, state, submit_time, begin_time, start_time, gpu_seconds, \
         COALESCE(billing, 0), preempt_count, id, name, gpus_alloc, gpu_samples, gpu_util_sum, \
         gpu_util_max, gpu_mem_max_mb, gpu_low_secs, end_time, preemptions_caused, node, gpu_type, \
         image_reference, image_digest, interactive, gpu_devices \
         FROM jobs WHERE end_time >= ?1 AND end_time < ?2 ORDER BY end_time",
    )?;
    let mut rows = stmt.query(params![from, to])?;
    while let Some(row) = rows.next()? {
        let state = text(row, 2)?;
        let Some(state) = JobState::parse(state) else {
            return Err(DbError::Invalid(format!("job state '{state}'")));
        };
        let low_secs = row.get::<_, i64>(16)? as u64;
        each(crate::report::usage::EndedJob {
            account: row.get(0)?,
            user: row.get(1)?,
            state,
            submit_time: row.get(3)?,
            begin_time: row.get(4)?,
            start_time: row.get(5)?,
            gpu_seconds: row.get(6)?,
            billing: row.get(7)?,
            preempt_count: row.get(8)?,
            id: row.get::<_, i64>(9)? as JobId,
            interactive: row.get(23)?,
            // Reports name only jobs ranked as waste: idle while sampled.
            name: if low_secs > 0 {
                row.get(10)?
            } else {
                String::new()
            },
            gpus: {
                let alloc = text(row, 11)?;
                if alloc.is_empty() {
                    0
                } else {
                    alloc.split(',').count() as u32
                }
            },
            gpu_usage: crate::model::gpu::JobGpuUsage {
                samples: row.get(12)?,
                utilization_sum: row.get::<_, i64>(13)? as u64,
                utilization_max: row.get(14)?,
                memory_max_mb: row.get::<_, i64>(15)? as u64,
                low_secs,
                // Read for the waste ranking's jobs alone.
                devices: if low_secs > 0 {
                    row.get::<_, Option<String>>(24)?
                        .and_then(|text| serde_json::from_str(&text).ok())
                        .unwrap_or_default()
                } else {
                    Vec::new()
                },
            },
            end_time: row.get(17)?,
            preemptions_caused: row.get(18)?,
            node: row.get(19)?,
            gpu_type: row.get(20)?,
            image: match (
                row.get::<_, Option<String>>(21)?,
                row.get::<_, Option<String>>(22)?,
            ) {
                (Some(reference), Some(digest)) => Some(format!("{reference}@{digest}")),
                (Some(reference), None) => Some(reference),
                _ => None,
            },
        });
    }
    Ok(())
}

/// Adds one round of GPU samples to each GPU's hour.
pub fn add_gpu_samples(
    conn: &Connection,
    hour: i64,
    samples: &[crate::model::gpu::Sample],
) -> Result<(), DbError> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO gpu_hours (hour, gpu, samples, util_sum, mem_max_mb) VALUES (?1, ?2, 1, ?3, ?4) \
         ON CONFLICT (hour, gpu) DO UPDATE SET samples = samples + 1, \
         util_sum = util_sum + excluded.util_sum, mem_max_mb = max(mem_max_mb, excluded.mem_max_mb)",
    )?;
    for s in samples {
        stmt.execute(params![
            hour,
            s.gpu,
            s.utilization_pct,
            s.memory_used_mb as i64
        ])?;
    }
    Ok(())
}

/// Adds seconds a GPU sat free while jobs waited: (hour, GPU, seconds).
pub fn add_idle_waiting(conn: &Connection, owed: &[(i64, u32, u64)]) -> Result<(), DbError> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO gpu_hours (hour, gpu, idle_waiting_secs) VALUES (?1, ?2, ?3) \
         ON CONFLICT (hour, gpu) DO UPDATE SET idle_waiting_secs = idle_waiting_secs + excluded.idle_waiting_secs",
    )?;
    for &(hour, gpu, secs) in owed {
        stmt.execute(params![hour, gpu, secs as i64])?;
    }
    Ok(())
}

/// Every GPU's hours in [from, to), by hour then GPU.
pub fn gpu_hours(
    conn: &Connection,
    from: i64,
    to: i64,
) -> Result<Vec<crate::report::history::GpuHour>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT hour, gpu, samples, util_sum, mem_max_mb, idle_waiting_secs FROM gpu_hours \
         WHERE hour >= ?1 AND hour < ?2 ORDER BY hour, gpu",
    )?;
    let rows = stmt.query_map(params![from, to], |r| {
        Ok(crate::report::history::GpuHour {
            hour: r.get(0)?,
            gpu: r.get(1)?,
            samples: r.get(2)?,
            util_sum: r.get::<_, i64>(3)? as u64,
            mem_max_mb: r.get::<_, i64>(4)? as u64,
            idle_waiting_secs: r.get::<_, i64>(5)? as u64,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

use crate::report::node::Drain;

/// A drained GPU: its node (empty for the controller's own server, as
/// drains were recorded before the pool) and its number there.
pub type DrainKey = (String, u32);

/// The drained GPUs.
pub fn drains(conn: &Connection) -> Result<std::collections::BTreeMap<DrainKey, Drain>, DbError> {
    let mut stmt = conn.prepare_cached("SELECT node, gpu, reason, by, since FROM gpu_drains")?;
    let rows = stmt.query_map([], |r| {
        Ok((
            (r.get(0)?, r.get(1)?),
            Drain {
                reason: r.get(2)?,
                by: r.get(3)?,
                since: r.get(4)?,
            },
        ))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub fn set_drain(conn: &Connection, (node, gpu): &DrainKey, drain: &Drain) -> Result<(), DbError> {
    conn.prepare_cached(
        "INSERT INTO gpu_drains (node, gpu, reason, by, since) VALUES (?1, ?2, ?3, ?4, ?5) \
         ON CONFLICT (node, gpu) DO UPDATE SET reason = excluded.reason, by = excluded.by",
    )?
    .execute(params![node, gpu, drain.reason, drain.by, drain.since])?;
    Ok(())
}

/// Whether the GPU was drained.
pub fn clear_drain(conn: &Connection, (node, gpu): &DrainKey) -> Result<bool, DbError> {
    Ok(conn
        .prepare_cached("DELETE FROM gpu_drains WHERE node = ?1 AND gpu = ?2")?
        .execute(params![node, gpu])?
        > 0)
}

/// A month whose job rows were purged, its summary kept.
#[derive(Clone, Debug, PartialEq)]
pub struct PurgedMonth {
    /// `2025-03`.
    pub month: String,
    pub start: i64,
    pub end: i64,
    pub jobs: u64,
    pub waste: Vec<crate::report::usage::Waste>,
}

/// The purged months that overlap [from, to), oldest first.
pub fn purged_months(conn: &Connection, from: i64, to: i64) -> Result<Vec<PurgedMonth>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT month, start, end, jobs, waste FROM purged_months WHERE start < ?2 AND end > ?1 ORDER BY start",
    )?;
    let rows = stmt.query_map(params![from, to], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
            r.get::<_, i64>(3)?,
            r.get::<_, String>(4)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (month, start, end, jobs, waste) = row?;
        out.push(PurgedMonth {
            waste: serde_json::from_str(&waste)
                .map_err(|e| DbError::Invalid(format!("waste ranking of {month}: {e}")))?,
            month,
            start,
            end,
            jobs: jobs as u64,
        });
    }
    Ok(out)
}

/// A purged month's summaries: (account, user, summary).
pub fn month_summaries(
    conn: &Connection,
    month: &str,
) -> Result<Vec<(String, String, crate::report::usage::Summary)>, DbError> {
    let mut stmt =
        conn.prepare_cached("SELECT account, user, summary FROM month_summaries WHERE month = ?1")?;
    let rows = stmt.query_map([month], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (account, user, text) = row?;
        let summary = serde_json::from_str(&text).map_err(|e| {
            DbError::Invalid(format!("summary of {month} for {account}/{user}: {e}"))
        })?;
        out.push((account, user, summary));
    }
    Ok(out)
}

/// Keeps a month's summaries and marks it purged: from now on reports
/// take it from here, whatever job rows of it are still being deleted.
pub fn save_month_summary(
    conn: &Connection,
    month: &PurgedMonth,
    summaries: &std::collections::BTreeMap<(String, String), crate::report::usage::Summary>,
    now: i64,
) -> Result<(), DbError> {
    let mut insert = conn.prepare_cached(
        "INSERT INTO month_summaries (month, account, user, summary) VALUES (?1, ?2, ?3, ?4)",
    )?;
    for ((account, user), summary) in summaries {
        let text = serde_json::to_string(summary).map_err(|e| DbError::Invalid(e.to_string()))?;
        insert.execute(params![month.month, account, user, text])?;
    }
    let waste = serde_json::to_string(&month.waste).map_err(|e| DbError::Invalid(e.to_string()))?;
    conn.prepare_cached(
        "INSERT INTO purged_months (month, start, end, jobs, waste, purged_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![month.month, month.start, month.end, month.jobs as i64, waste, now])?;
    Ok(())
}

/// When the oldest job that ended before `cutoff` ended.
pub fn oldest_end_before(conn: &Connection, cutoff: i64) -> Result<Option<i64>, DbError> {
    Ok(conn
        .prepare_cached("SELECT min(end_time) FROM jobs WHERE end_time < ?1")?
        .query_row([cutoff], |r| r.get(0))?)
}

/// A purged month that still has job rows: (start, end).
pub fn purged_month_with_rows(conn: &Connection) -> Result<Option<(i64, i64)>, DbError> {
    Ok(conn
        .prepare_cached(
            "SELECT start, end FROM purged_months p WHERE EXISTS \
             (SELECT 1 FROM jobs WHERE end_time >= p.start AND end_time < p.end) LIMIT 1",
        )?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?)
}

/// Deletes up to `limit` finished jobs (with their scripts and events)
/// that ended in [start, end); how many went.
pub fn purge_jobs(conn: &Connection, start: i64, end: i64, limit: u32) -> Result<usize, DbError> {
    let pointed_at = payloads::of_jobs_ended(conn, (start, end), limit)?;
    let purged = conn
        .prepare_cached(
            "DELETE FROM jobs WHERE id IN \
             (SELECT id FROM jobs WHERE end_time >= ?1 AND end_time < ?2 ORDER BY id LIMIT ?3)",
        )?
        .execute(params![start, end, limit])?;
    payloads::delete_unused(conn, &pointed_at)?;
    Ok(purged)
}

/// Lets go of the scripts and environments of at most `limit` finished
/// jobs that ended by `before` (`keep_payloads_days`); their
/// accounting rows stay. How many jobs let go.
pub fn let_go_payloads(conn: &Connection, before: i64, limit: u32) -> Result<usize, DbError> {
    payloads::let_go_ended_before(conn, before, limit)
}

/// Whether a finished job that ended by `before` still has its
/// script and environment.
pub fn payloads_ended_before(conn: &Connection, before: i64) -> Result<bool, DbError> {
    payloads::any_ended_before(conn, before)
}

/// Forgets request records older than `before` (their spool files are long gone).
pub fn forget_requests_before(conn: &Connection, before: i64) -> Result<usize, DbError> {
    Ok(conn
        .prepare_cached("DELETE FROM requests WHERE received < ?1")?
        .execute([before])?)
}

/// The last `limit` lines of the audit log, oldest first.
pub fn audit_tail(conn: &Connection, limit: u32) -> Result<Vec<crate::proto::AuditRow>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT time, actor, action, job_id, detail, channel FROM \
         (SELECT * FROM audit ORDER BY id DESC LIMIT ?1) ORDER BY id",
    )?;
    let rows = stmt.query_map([limit], |r| {
        Ok(crate::proto::AuditRow {
            time: r.get(0)?,
            actor: r.get(1)?,
            action: r.get(2)?,
            job_id: r.get::<_, Option<i64>>(3)?.map(|j| j as JobId),
            detail: r.get(4)?,
            channel: crate::proto::Channel::from_name(&r.get::<_, String>(5)?),
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// How many audit lines record `action` (the preemption counter survives
/// restarts).
pub fn count_audit(conn: &Connection, action: &str) -> Result<u64, DbError> {
    let n: i64 = conn
        .prepare_cached("SELECT count(*) FROM audit WHERE action = ?1")?
        .query_row([action], |r| r.get(0))?;
    Ok(n as u64)
}

/// One line of the audit log: who did what to which job, through which
/// channel.
pub fn add_audit(
    conn: &Connection,
    time: i64,
    actor: &str,
    action: &str,
    job: Option<JobId>,
    detail: &str,
    channel: crate::proto::Channel,
) -> Result<(), DbError> {
    conn.prepare_cached(
        "INSERT INTO audit (time, actor, action, job_id, detail, channel) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        time,
        actor,
        action,
        job.map(|j| j as i64),
        detail,
        channel.as_str()
    ])?;
    Ok(())
}

/// The id the next job inserted will get (ids are never reused).
pub fn next_job_id(conn: &Connection) -> Result<JobId, DbError> {
    let last: Option<i64> = conn
        .prepare_cached("SELECT seq FROM sqlite_sequence WHERE name = 'jobs'")?
        .query_row([], |r| r.get(0))
        .optional()?;
    Ok(last.unwrap_or(0) as JobId + 1)
}

/// A job's state history: (time, state, detail), oldest first.
pub fn job_events(
    conn: &Connection,
    id: JobId,
) -> Result<Vec<(i64, String, Option<String>)>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT time, state, detail FROM job_events WHERE job_id = ?1 ORDER BY id",
    )?;
    let rows = stmt.query_map([id as i64], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// When job `id` was last told to stop (its last COMPLETING or PREEMPTED
/// event), if it ever was.
pub fn stopped_at(conn: &Connection, id: JobId) -> Result<Option<i64>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT MAX(time) FROM job_events WHERE job_id = ?1 AND state IN ('COMPLETING', 'PREEMPTED')",
    )?;
    Ok(stmt.query_row([id as i64], |r| r.get(0))?)
}

/// Job `id`'s last suspension since `since` that has ended: when it was
/// suspended, and when it ran again (the last resumption recorded: one
/// made again when its node missed the first counts).
pub fn last_resumption(
    conn: &Connection,
    id: JobId,
    since: i64,
) -> Result<Option<(i64, i64)>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT s.time, (SELECT MAX(r.time) FROM job_events r
                          WHERE r.job_id = s.job_id AND r.id > s.id AND r.state = 'RUNNING')
           FROM job_events s
          WHERE s.job_id = ?1 AND s.state = 'SUSPENDED' AND s.time >= ?2
          ORDER BY s.id DESC LIMIT 1",
    )?;
    let row: Option<(i64, Option<i64>)> = stmt
        .query_row(rusqlite::params![id as i64, since], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    Ok(row.and_then(|(from, to)| Some((from, to?))))
}

pub fn payload(conn: &Connection, id: JobId) -> Result<Payload, DbError> {
    let (script, args, env) = payloads::load(conn, id)?.ok_or(DbError::NotFound(id))?;
    Ok(Payload {
        script,
        args: serde_json::from_str(&args)
            .map_err(|e| DbError::Invalid(format!("job {id} args: {e}")))?,
        environment: serde_json::from_str(&env)
            .map_err(|e| DbError::Invalid(format!("job {id} environment: {e}")))?,
    })
}

pub fn job(conn: &Connection, id: JobId) -> Result<Job, DbError> {
    conn.prepare_cached(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1"))?
        .query_row([id as i64], job_from_row)
        .optional()?
        .ok_or(DbError::NotFound(id))
}

/// The id of task `task` of array `array`, if there is one.
pub fn array_task(conn: &Connection, array: JobId, task: u32) -> Result<Option<JobId>, DbError> {
    Ok(conn
        .prepare_cached("SELECT id FROM jobs WHERE array_job_id = ?1 AND array_task_id = ?2")?
        .query_row(params![array as i64, task], |row| row.get::<_, i64>(0))
        .optional()?
        .map(|id| id as JobId))
}

/// The states of every task of array `array` (empty if it is no array).
pub fn array_states(conn: &Connection, array: JobId) -> Result<Vec<JobState>, DbError> {
    let mut stmt = conn.prepare_cached("SELECT state FROM jobs WHERE array_job_id = ?1")?;
    let rows = stmt.query_map([array as i64], |row| row.get::<_, String>(0))?;
    let mut states = Vec::new();
    for s in rows {
        let s = s?;
        states.push(
            JobState::parse(&s)
                .ok_or_else(|| DbError::Invalid(format!("array {array} state '{s}'")))?,
        );
    }
    Ok(states)
}

/// A job's state, or `None` when there is no such job.
pub fn job_state(conn: &Connection, id: JobId) -> Result<Option<JobState>, DbError> {
    let state: Option<String> = conn
        .prepare_cached("SELECT state FROM jobs WHERE id = ?1")?
        .query_row([id as i64], |row| row.get(0))
        .optional()?;
    match state {
        None => Ok(None),
        Some(s) => JobState::parse(&s)
            .map(Some)
            .ok_or_else(|| DbError::Invalid(format!("job {id} state '{s}'"))),
    }
}

/// An active job's row that does not read back as a job: its id, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Unreadable {
    pub id: JobId,
    pub problem: String,
}

/// Pending, running and completing jobs, handed to `each` as they are
/// read: what the daemon loads at start (into its map by id: a list of
/// 100,000 jobs first would be copied as it grows), and the rows among
/// them that do not read as jobs (one bad row must not keep the daemon
/// from starting; see [`quarantine_job`]). In the active-state index's
/// order (by state, then id), not by id: sorting whole rows in SQLite's
/// temporary tree cost most of a start over 100,000 pending jobs.
pub fn for_each_active_job(
    conn: &Connection,
    mut each: impl FnMut(Job),
) -> Result<Vec<Unreadable>, DbError> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE state IN ('PENDING', 'RUNNING', 'COMPLETING', 'SUSPENDED')"
    ))?;
    let mut rows = stmt.query([])?;
    let mut bad = Vec::new();
    while let Some(row) = rows.next()? {
        match job_from_row(row) {
            Ok(job) => each(job),
            Err(e) => bad.push(Unreadable {
                id: row.get::<_, i64>(0)? as JobId,
                problem: describe_row_error(&e),
            }),
        }
    }
    Ok(bad)
}

/// "column warn_signal: --signal: invalid signal number 99999".
fn describe_row_error(e: &rusqlite::Error) -> String {
    let column = |i: usize| JOB_COLUMNS.split(", ").nth(i).unwrap_or("?").trim();
    match e {
        rusqlite::Error::FromSqlConversionFailure(i, _, inner) => {
            format!("column {}: {inner}", column(*i))
        }
        rusqlite::Error::InvalidColumnType(i, _, t) => {
            format!("column {}: unexpected {t}", column(*i))
        }
        rusqlite::Error::IntegralValueOutOfRange(i, v) => {
            format!("column {}: {v} is out of range", column(*i))
        }
        other => other.to_string(),
    }
}

/// The column index a row error names, if any.
fn error_column(e: &rusqlite::Error) -> Option<usize> {
    match e {
        rusqlite::Error::FromSqlConversionFailure(i, ..)
        | rusqlite::Error::InvalidColumnType(i, ..)
        | rusqlite::Error::IntegralValueOutOfRange(i, _) => Some(*i),
        _ => None,
    }
}

/// What a column is reset to when its value cannot be read: its empty
/// value where the schema wants one, else NULL.
fn column_default(column: &str) -> &'static str {
    match column {
        "user" | "account" | "qos" | "name" | "gpus_alloc" | "claimed_gpus" | "std_out"
        | "nodelist" | "exclude_nodes" | "task_layout" | "peers" | "container" => "''",
        "work_dir" | "submit_dir" => "'/'",
        "uid" | "gid" | "gpu_count" | "cpus" | "submit_time" | "restart_count" | "open_append"
        | "suspended_secs" | "nice" | "gpu_shard" | "preempt_count" | "no_requeue"
        | "gpu_seconds" | "gpu_samples" | "gpu_util_sum" | "gpu_util_max" | "gpu_mem_max_mb"
        | "gpu_low_secs" | "preemptions_caused" | "mail_type" | "borrowed" | "interactive"
        | "quick_requeues" => "0",
        _ => "NULL",
    }
}

/// Sets an unreadable job aside: FAILED with the problem as its reason,
/// and each value that kept it from reading reset, so that `ysacct` and
/// the next start read it like any ended job.
pub fn quarantine_job(conn: &Connection, bad: &Unreadable, now: i64) -> Result<(), DbError> {
    let reason = format!("quarantined at start: {}", bad.problem);
    conn.execute(
        "UPDATE jobs SET state = 'FAILED', reason = ?2, kill_reason = NULL, \
         end_time = COALESCE(end_time, ?3), exit_code = COALESCE(exit_code, 1) WHERE id = ?1",
        params![bad.id as i64, reason, now],
    )?;
    // Each pass resets the column the read stopped at; a row has fewer
    // bad columns than columns.
    for _ in 0..JOB_COLUMNS.split(", ").count() {
        let e = match job(conn, bad.id) {
            Ok(_) => break,
            Err(DbError::Sqlite(e)) => e,
            Err(other) => return Err(other),
        };
        let Some(column) = error_column(&e).and_then(|i| JOB_COLUMNS.split(", ").nth(i)) else {
            return Err(DbError::Sqlite(e));
        };
        let column = column.trim();
        conn.execute(
            &format!(
                "UPDATE jobs SET {column} = {} WHERE id = ?1",
                column_default(column)
            ),
            params![bad.id as i64],
        )?;
    }
    add_event(conn, bad.id, now, JobState::Failed, Some(&reason))
}

/// Jobs for `ysacct`: those matching the filter that were active at some
/// point in [start, end] (submitted before `end`, not ended before `start`).
pub fn find_jobs(conn: &Connection, filter: &JobFilter, limit: usize) -> Result<Vec<Job>, DbError> {
    let (mut sql, values) = job_query(filter, JOB_COLUMNS);
    let limit = filter.limit.map_or(limit, |l| limit.min(l as usize));
    sql.push_str(&format!(" LIMIT {limit}"));
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query_map(rusqlite::params_from_iter(values), job_from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Calls `each` for every job the filter matches, by id, a row at a time
/// (a listing of a million jobs is never all in memory); stops at the
/// first error `each` returns.
pub fn for_each_job<E: From<DbError>>(
    conn: &Connection,
    filter: &JobFilter,
    mut each: impl FnMut(Job) -> Result<(), E>,
) -> Result<(), E> {
    for_each_job_reading(conn, filter, None, |row| each(row.job()?))
}

/// The columns a listing reads of each job (see [`for_each_job_reading`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobColumns {
    /// The select list: the columns read, in [`JOB_COLUMNS`]' order.
    select: String,
    /// Bit `i`: column `i` is read.
    read: u128,
}

impl JobColumns {
    /// Only the columns `names`, and the id and state that make a row a
    /// job; a name that is not a column of jobs is ignored.
    pub fn only(names: &[&str]) -> JobColumns {
        let mut read = 0u128;
        let mut select = Vec::new();
        for (i, column) in JOB_COLUMNS.split(", ").map(str::trim).enumerate() {
            if ["id", "state"].contains(&column) || names.contains(&column) {
                read |= 1 << i;
                select.push(column);
            }
        }
        JobColumns {
            select: select.join(", "),
            read,
        }
    }
}

/// Whether `name` is a column a job is read from.
pub fn is_job_column(name: &str) -> bool {
    JOB_COLUMNS.split(", ").any(|c| c.trim() == name)
}

/// As [`for_each_job`], reading only `columns` (all when `None`), and
/// each row only when asked: `each` gets its id at once and its job from
/// [`StoredJob::job`], the other fields empty, unread. A month's listing
/// shows a few fields of 180,000 jobs, most of them pending and shown as
/// the queue has them; decoding all 74 columns of each was most of its
/// cost.
pub fn for_each_job_reading<E: From<DbError>>(
    conn: &Connection,
    filter: &JobFilter,
    columns: Option<&JobColumns>,
    mut each: impl FnMut(&StoredJob) -> Result<(), E>,
) -> Result<(), E> {
    let select = columns.map_or(JOB_COLUMNS, |c| c.select.as_str());
    let read = columns.map_or(u128::MAX, |c| c.read);
    let (mut sql, values) = job_query(filter, select);
    if let Some(limit) = filter.limit {
        sql.push_str(&format!(" LIMIT {limit}"));
    }
    let mut stmt = conn.prepare(&sql).map_err(DbError::from)?;
    let mut rows = stmt
        .query(rusqlite::params_from_iter(values))
        .map_err(DbError::from)?;
    while let Some(row) = rows.next().map_err(DbError::from)? {
        each(&StoredJob(JobRow { row, read }))?;
    }
    Ok(())
}

/// A job's row, as [`for_each_job_reading`] walks them.
pub struct StoredJob<'a, 'r>(JobRow<'a, 'r>);

impl StoredJob<'_, '_> {
    pub fn id(&self) -> Result<JobId, DbError> {
        Ok(self.0.row.get::<_, i64>(0)? as JobId)
    }

    /// The job, its columns that were not read empty.
    pub fn job(&self) -> Result<Job, DbError> {
        Ok(job_from(&self.0)?)
    }
}

/// The SELECT of `select` for a filter, ordered by id.
fn job_query(filter: &JobFilter, select: &str) -> (String, Vec<rusqlite::types::Value>) {
    let mut sql = format!("SELECT {select} FROM jobs WHERE 1 = 1");
    let mut values: Vec<rusqlite::types::Value> = Vec::new();
    if !filter.job_ids.is_empty() {
        // An array's id names all its tasks; `12_3` one task.
        let mut alternatives = Vec::new();
        for r in &filter.job_ids {
            match *r {
                JobRef::Id(id) => {
                    alternatives.push("(id = ? OR array_job_id = ?)");
                    values.push((id as i64).into());
                    values.push((id as i64).into());
                }
                JobRef::Task(array, task) => {
                    alternatives.push("(array_job_id = ? AND array_task_id = ?)");
                    values.push((array as i64).into());
                    values.push(i64::from(task).into());
                }
            }
        }
        sql.push_str(&format!(" AND ({})", alternatives.join(" OR ")));
    }
    let mut push_in = |sql: &mut String, column: &str, items: Vec<rusqlite::types::Value>| {
        if items.is_empty() {
            return;
        }
        let marks = vec!["?"; items.len()].join(", ");
        sql.push_str(&format!(" AND {column} IN ({marks})"));
        values.extend(items);
    };
    push_in(
        &mut sql,
        "user",
        filter.users.iter().map(|u| u.clone().into()).collect(),
    );
    push_in(
        &mut sql,
        "account",
        filter.accounts.iter().map(|a| a.clone().into()).collect(),
    );
    push_in(
        &mut sql,
        "name",
        filter.names.iter().map(|n| n.clone().into()).collect(),
    );
    push_in(
        &mut sql,
        "state",
        filter
            .states
            .iter()
            .map(|s| s.name().to_string().into())
            .collect(),
    );
    if let Some(start) = filter.start {
        sql.push_str(" AND (end_time IS NULL OR end_time >= ?)");
        values.push(start.into());
    }
    if let Some(end) = filter.end {
        sql.push_str(" AND submit_time <= ?");
        values.push(end.into());
    }
    if let Some(after) = filter.after {
        sql.push_str(" AND id > ?");
        values.push((after as i64).into());
    }
    sql.push_str(" ORDER BY id");
    (sql, values)
}

/// Billing-seconds charged per account for jobs that ended at or after `since`.
pub fn billing_since(conn: &Connection, since: i64) -> Result<Vec<(String, i64)>, DbError> {
    let mut stmt = conn.prepare_cached(
        "SELECT account, SUM(billing) FROM jobs WHERE end_time >= ?1 AND billing IS NOT NULL GROUP BY account",
    )?;
    let rows = stmt.query_map([since], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Every association's usage.
pub fn load_usage(
    conn: &Connection,
) -> Result<
    Vec<(
        crate::model::policy::Association,
        crate::sched::fairshare::Usage,
    )>,
    DbError,
> {
    let mut stmt = conn.prepare("SELECT account, user, raw, decayed, as_of FROM usage")?;
    let rows = stmt.query_map([], |r| {
        Ok((
            (r.get(0)?, r.get(1)?),
            crate::sched::fairshare::Usage {
                raw: r.get(2)?,
                decayed: r.get(3)?,
                as_of: r.get(4)?,
            },
        ))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub fn save_usage(
    conn: &Connection,
    account: &str,
    user: &str,
    usage: &crate::sched::fairshare::Usage,
) -> Result<(), DbError> {
    conn.prepare_cached(
        "INSERT INTO usage (account, user, raw, decayed, as_of) VALUES (?1, ?2, ?3, ?4, ?5) \
         ON CONFLICT (account, user) DO UPDATE SET raw = ?3, decayed = ?4, as_of = ?5",
    )?
    .execute(params![
        account,
        user,
        usage.raw,
        usage.decayed,
        usage.as_of
    ])?;
    Ok(())
}

/// Records a state-changing request and the reply it got.
pub fn record_request(
    conn: &Connection,
    name: &str,
    uid: u32,
    now: i64,
    kind: &str,
    reply: &Reply,
) -> Result<(), DbError> {
    let reply = serde_json::to_string(reply).map_err(|e| DbError::Invalid(e.to_string()))?;
    conn.prepare_cached(
        "INSERT INTO requests (spool_name, uid, received, kind, reply) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![name, uid, now, kind, reply])?;
    Ok(())
}

/// The uid and reply of a request already taken, if it was.
pub fn find_request(conn: &Connection, name: &str) -> Result<Option<(u32, Reply)>, DbError> {
    let row: Option<(u32, String)> = conn
        .prepare_cached("SELECT uid, reply FROM requests WHERE spool_name = ?1")?
        .query_row([name], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    match row {
        Some((uid, reply)) => {
            let reply = serde_json::from_str(&reply)
                .map_err(|e| DbError::Invalid(format!("stored reply: {e}")))?;
            Ok(Some((uid, reply)))
        }
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The active jobs as a list, and the rows that do not read.
    fn active_jobs(conn: &Connection) -> Result<(Vec<Job>, Vec<Unreadable>), DbError> {
        let mut jobs = Vec::new();
        let bad = for_each_active_job(conn, |job| jobs.push(job))?;
        Ok((jobs, bad))
    }

    fn sample_job() -> Job {
        crate::model::job::example_job(0)
    }

    fn payload() -> Payload {
        Payload {
            script: "#!/bin/sh\ntrue\n".into(),
            args: vec!["a b".into()],
            environment: vec![("PATH".into(), "/bin".into())],
        }
    }

    #[test]
    fn an_unreadable_active_row_is_quarantined_and_then_reads_as_failed() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("t.db")).unwrap();
        let good = insert_job(&conn, &sample_job(), &payload()).unwrap();
        let bad = insert_job(&conn, &sample_job(), &payload()).unwrap();
        conn.execute(
            "UPDATE jobs SET mail_type = 255, warn_signal = 'USR1@99999', gpu_constraint = '' WHERE id = ?1",
            [bad as i64],
        )
        .unwrap();
        let (jobs, unreadable) = active_jobs(&conn).unwrap();
        assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![good]);
        assert_eq!(unreadable.len(), 1);
        assert_eq!(unreadable[0].id, bad);
        assert!(
            unreadable[0].problem.contains("column"),
            "{:?}",
            unreadable[0]
        );
        quarantine_job(&conn, &unreadable[0], 2_000).unwrap();
        let (jobs, unreadable) = active_jobs(&conn).unwrap();
        assert_eq!((jobs.len(), unreadable.len()), (1, 0));
        let quarantined = job(&conn, bad).unwrap();
        assert_eq!(quarantined.state, JobState::Failed);
        assert_eq!(quarantined.end_time, Some(2_000));
        assert!(quarantined
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with("quarantined at start: column")));
    }

    #[test]
    fn each_column_has_an_empty_value_its_schema_takes_and_that_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("t.db")).unwrap();
        let mut stmt = conn.prepare("PRAGMA table_info(jobs)").unwrap();
        let not_null: Vec<(String, bool)> = stmt
            .query_map([], |r| Ok((r.get(1)?, r.get::<_, i64>(3)? == 1)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        for (column, required) in &not_null {
            if !["id", "state"].contains(&column.as_str()) && is_job_column(column) {
                assert_eq!(column_default(column) != "NULL", *required, "{column}");
            }
        }
        // A row of nothing but empty values is a job.
        let id = insert_job(&conn, &sample_job(), &payload()).unwrap();
        let mut jobs = Vec::new();
        let none = JobColumns::only(&[]);
        for_each_job_reading(&conn, &JobFilter::default(), Some(&none), |j| {
            jobs.push(j.job()?);
            Ok::<(), DbError>(())
        })
        .unwrap();
        assert_eq!((jobs[0].id, jobs[0].user.as_str()), (id, ""));
    }

    #[test]
    fn jobs_round_trip_through_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("t.db")).unwrap();
        let id = insert_job(&conn, &sample_job(), &payload()).unwrap();
        assert_eq!(id, 1);
        let mut job = job(&conn, id).unwrap();
        assert_eq!(job, Job { id, ..sample_job() });
        job.state = JobState::Running;
        job.start_time = Some(1_010);
        job.gpus_alloc = vec![2, 3];
        job.node = Some("gpu01".into());
        update_job(&conn, &job).unwrap();
        assert_eq!(active_jobs(&conn).unwrap(), (vec![job.clone()], Vec::new()));
        job.state = JobState::Failed;
        job.exit = Some(ExitStatus { code: 3, signal: 0 });
        job.end_time = Some(1_020);
        update_job(&conn, &job).unwrap();
        assert!(active_jobs(&conn).unwrap().0.is_empty());
        assert_eq!(super::job(&conn, id).unwrap(), job);
        assert_eq!(super::payload(&conn, id).unwrap(), payload());
        assert!(matches!(super::job(&conn, 99), Err(DbError::NotFound(99))));
        let filter = JobFilter {
            states: vec![JobState::Failed],
            start: Some(1_015),
            ..JobFilter::default()
        };
        assert_eq!(find_jobs(&conn, &filter, 100).unwrap().len(), 1);
        let filter = JobFilter {
            start: Some(1_021),
            ..JobFilter::default()
        };
        assert!(find_jobs(&conn, &filter, 100).unwrap().is_empty());
    }

    #[test]
    fn gpu_hours_add_up_samples_and_idle_time() {
        use crate::model::gpu::Sample;
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("t.db")).unwrap();
        let sample = |gpu, pct, mb| Sample {
            gpu,
            utilization_pct: pct,
            memory_used_mb: mb,
        };
        add_gpu_samples(&conn, 3_600, &[sample(0, 40, 100), sample(1, 0, 5)]).unwrap();
        add_gpu_samples(&conn, 3_600, &[sample(0, 80, 50)]).unwrap();
        add_idle_waiting(&conn, &[(3_600, 1, 30), (3_600, 1, 15), (7_200, 1, 5)]).unwrap();
        let rows = gpu_hours(&conn, 0, 7_200).unwrap();
        assert_eq!(rows.len(), 2, "the hour at 7200 is outside [0, 7200)");
        assert_eq!(
            (rows[0].samples, rows[0].util_sum, rows[0].mem_max_mb),
            (2, 120, 100)
        );
        assert_eq!(rows[0].util_mean(), Some(60.0));
        assert_eq!((rows[1].samples, rows[1].idle_waiting_secs), (1, 45));
    }

    #[test]
    fn requests_are_remembered() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("t.db")).unwrap();
        let reply = Reply::Submitted {
            job_id: 4,
            warning: None,
        };
        record_request(&conn, "job-1-2-3", 1000, 5, "job", &reply).unwrap();
        assert_eq!(
            find_request(&conn, "job-1-2-3").unwrap(),
            Some((1000, reply))
        );
        assert_eq!(find_request(&conn, "job-9").unwrap(), None);
    }

    #[test]
    fn a_database_of_an_older_schema_is_upgraded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        {
            // What the first release wrote: schema 1, one finished job.
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(MIGRATIONS[0]).unwrap();
            conn.pragma_update(None, "user_version", 1).unwrap();
            conn.execute(
                "INSERT INTO jobs (uid, gid, user, account, qos, name, state, gpu_count, cpus, submit_time, \
                 work_dir, submit_dir, std_out) VALUES (1000, 1000, 'alice', 'default', 'medium', 'old', \
                 'COMPLETED', 1, 1, 5, '/w', '/w', 'ys-%j.out')",
                [],
            )
            .unwrap();
        }
        let conn = open(&path).unwrap();
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, MIGRATIONS.len() as i64);
        let old = job(&conn, 1).unwrap();
        assert_eq!(old.name, "old");
        assert_eq!(old.max_rss_bytes, None, "new columns start empty");
    }

    #[test]
    fn gpu_drains_of_before_the_pool_are_the_controllers_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        {
            let conn = Connection::open(&path).unwrap();
            for sql in &MIGRATIONS[..15] {
                conn.execute_batch(sql).unwrap();
            }
            conn.pragma_update(None, "user_version", 15).unwrap();
            conn.execute(
                "INSERT INTO gpu_drains (gpu, reason, by, since) VALUES (2, 'ECC', 'root', 7)",
                [],
            )
            .unwrap();
        }
        let conn = open(&path).unwrap();
        let drains = drains(&conn).unwrap();
        let old = &drains[&(String::new(), 2)];
        assert_eq!((old.reason.as_str(), old.since), ("ECC", 7));
        let remote = ("gpu02".to_string(), 2);
        set_drain(&conn, &remote, old).unwrap();
        assert_eq!(
            super::drains(&conn).unwrap().len(),
            2,
            "same GPU, two nodes"
        );
        assert!(clear_drain(&conn, &remote).unwrap());
        assert!(!clear_drain(&conn, &remote).unwrap());
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.pragma_update(None, "user_version", 99).unwrap();
        }
        let err = open(&path).unwrap_err();
        assert!(matches!(err, DbError::TooNew { found: 99, .. }), "{err}");
        assert!(err.to_string().contains("newer than this ysched knows"));
    }

    #[test]
    fn the_database_and_its_wal_are_private_from_the_start() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let conn = open(&path).unwrap();
        insert_job(&conn, &sample_job(), &payload()).unwrap();
        for file in [path.clone(), sidecar(&path, "-wal"), sidecar(&path, "-shm")] {
            let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", file.display());
        }
    }

    #[test]
    fn an_empty_database_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        std::fs::write(&path, "").unwrap();
        let e = open(&path).unwrap_err().to_string();
        assert!(e.contains("empty (0 bytes)"), "{e}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "left as it was");
    }

    #[test]
    fn a_corrupt_file_is_refused_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        std::fs::write(&path, vec![0x42u8; 8192]).unwrap();
        let err = open(&path).unwrap_err();
        assert!(err.to_string().contains("restore"), "{err}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            vec![0x42u8; 8192],
            "the file must be left alone"
        );
    }
}
