//! The schema, as numbered migrations. `PRAGMA user_version` is the number of
//! migrations applied. A released migration is never edited: a change is a
//! new migration at the end.

pub const MIGRATIONS: &[&str] = &[
    // 1: jobs, their scripts, their state history, and the request log.
    r#"
CREATE TABLE jobs (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    uid             INTEGER NOT NULL,
    gid             INTEGER NOT NULL,
    user            TEXT    NOT NULL,
    account         TEXT    NOT NULL,
    qos             TEXT    NOT NULL,
    name            TEXT    NOT NULL,
    state           TEXT    NOT NULL,
    hold            TEXT,
    gpu_count       INTEGER NOT NULL,
    gpu_type        TEXT,
    cpus            INTEGER NOT NULL,
    mem_mb          INTEGER,
    time_limit      INTEGER,
    submit_time     INTEGER NOT NULL,
    begin_time      INTEGER,
    start_time      INTEGER,
    end_time        INTEGER,
    gpus_alloc      TEXT    NOT NULL DEFAULT '',
    node            TEXT,
    exit_code       INTEGER,
    exit_signal     INTEGER,
    restart_count   INTEGER NOT NULL DEFAULT 0,
    reason          TEXT,
    kill_reason     TEXT,
    work_dir        TEXT    NOT NULL,
    submit_dir      TEXT    NOT NULL,
    std_out         TEXT    NOT NULL,
    std_err         TEXT,
    open_append     INTEGER NOT NULL DEFAULT 0,
    comment         TEXT
);
CREATE INDEX jobs_active ON jobs(state) WHERE state IN ('PENDING', 'RUNNING', 'COMPLETING');
CREATE INDEX jobs_by_user ON jobs(user, submit_time);
CREATE INDEX jobs_by_end ON jobs(end_time);

-- What the job runs; private to the daemon.
CREATE TABLE job_payloads (
    job_id          INTEGER PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,
    script          TEXT    NOT NULL,
    args            TEXT    NOT NULL,
    environment     TEXT    NOT NULL
);

-- Every state change, for ysacct's history and the audit trail.
CREATE TABLE job_events (
    id              INTEGER PRIMARY KEY,
    job_id          INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    time            INTEGER NOT NULL,
    state           TEXT    NOT NULL,
    detail          TEXT
);
CREATE INDEX job_events_by_job ON job_events(job_id);

-- Every state-changing request taken from the spool, keyed by its unique
-- file name: a file found again after a crash between commit and unlink is
-- answered from here instead of being applied twice.
CREATE TABLE requests (
    spool_name      TEXT    PRIMARY KEY,
    uid             INTEGER NOT NULL,
    received        INTEGER NOT NULL,
    kind            TEXT    NOT NULL,
    reply           TEXT    NOT NULL
) WITHOUT ROWID;
"#,
    // 2: what a job's cgroup measured, and where the cgroup was.
    r#"
ALTER TABLE jobs ADD COLUMN max_rss_bytes INTEGER;
ALTER TABLE jobs ADD COLUMN cpu_usec INTEGER;
ALTER TABLE jobs ADD COLUMN cgroup TEXT;
"#,
    // 3: suspension (yscontrol suspend).
    r#"
ALTER TABLE jobs ADD COLUMN suspended_secs INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN suspended_at INTEGER;
DROP INDEX jobs_active;
CREATE INDEX jobs_active ON jobs(state) WHERE state IN ('PENDING', 'RUNNING', 'COMPLETING', 'SUSPENDED');
"#,
    // 4: fair-share: nice values, what each job was charged, and each
    // association's usage (raw, and decayed as of a time).
    r#"
ALTER TABLE jobs ADD COLUMN nice INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN billing INTEGER;
CREATE TABLE usage (
    account         TEXT    NOT NULL,
    user            TEXT    NOT NULL,
    raw             INTEGER NOT NULL,
    decayed         REAL    NOT NULL,
    as_of           INTEGER NOT NULL,
    PRIMARY KEY (account, user)
) WITHOUT ROWID;
"#,
    // 5: job dependencies (`--dependency`, canonical form).
    r#"
ALTER TABLE jobs ADD COLUMN dependency TEXT;
"#,
    // 6: job arrays: each task is a job; the array is its first task's id.
    r#"
ALTER TABLE jobs ADD COLUMN array_job_id INTEGER;
ALTER TABLE jobs ADD COLUMN array_task_id INTEGER;
ALTER TABLE jobs ADD COLUMN array_spec TEXT;
CREATE INDEX jobs_array ON jobs(array_job_id) WHERE array_job_id IS NOT NULL;
"#,
    // 7: approval: who approved a job that needed it.
    r#"
ALTER TABLE jobs ADD COLUMN approved_by TEXT;
"#,
    // 8: GPU shards (`--gpus shard:N`) and `--constraint` on GPUs.
    r#"
ALTER TABLE jobs ADD COLUMN gpu_shard INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN gpu_constraint TEXT;
"#,
    // 9: preemption: who preempts a job, the GPUs a preempting job is kept,
    // how often a job was preempted, --no-requeue; and the audit log.
    r#"
ALTER TABLE jobs ADD COLUMN preempted_by INTEGER;
ALTER TABLE jobs ADD COLUMN claimed_gpus TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN preempt_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN no_requeue INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN checkpoint_at INTEGER;
ALTER TABLE jobs ADD COLUMN priority_override INTEGER;
ALTER TABLE jobs ADD COLUMN warn_signal TEXT;
ALTER TABLE jobs ADD COLUMN checkpoint_file TEXT;
ALTER TABLE jobs ADD COLUMN grace INTEGER;
ALTER TABLE jobs ADD COLUMN gpu_seconds INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN gpu_samples INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN gpu_util_sum INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN gpu_util_max INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN gpu_mem_max_mb INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN gpu_low_secs INTEGER NOT NULL DEFAULT 0;
CREATE TABLE audit (
    id      INTEGER PRIMARY KEY,
    time    INTEGER NOT NULL,
    actor   TEXT    NOT NULL,
    action  TEXT    NOT NULL,
    job_id  INTEGER,
    detail  TEXT    NOT NULL
);
CREATE INDEX audit_time ON audit(time);
"#,
    // 10: accounting history. How many jobs a job preempted; each GPU's
    // hours (utilisation samples, and time idle while jobs waited); and
    // the monthly summaries that outlive purged job rows.
    r#"
ALTER TABLE jobs ADD COLUMN preemptions_caused INTEGER NOT NULL DEFAULT 0;
CREATE TABLE gpu_hours (
    hour              INTEGER NOT NULL,
    gpu               INTEGER NOT NULL,
    samples           INTEGER NOT NULL DEFAULT 0,
    util_sum          INTEGER NOT NULL DEFAULT 0,
    mem_max_mb        INTEGER NOT NULL DEFAULT 0,
    idle_waiting_secs INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (hour, gpu)
) WITHOUT ROWID;
CREATE TABLE month_summaries (
    month   TEXT    NOT NULL,
    account TEXT    NOT NULL,
    user    TEXT    NOT NULL,
    summary TEXT    NOT NULL,
    PRIMARY KEY (month, account, user)
) WITHOUT ROWID;
CREATE TABLE purged_months (
    month   TEXT    PRIMARY KEY,
    start   INTEGER NOT NULL,
    end     INTEGER NOT NULL,
    jobs    INTEGER NOT NULL,
    waste   TEXT    NOT NULL,
    purged_at INTEGER NOT NULL
);
"#,
    // 11: --mail-type (a bit set) and --mail-user.
    r#"
ALTER TABLE jobs ADD COLUMN mail_type INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN mail_user TEXT;
"#,
    // 12: -w/--nodelist and -x/--exclude, node names joined by commas.
    r#"
ALTER TABLE jobs ADD COLUMN nodelist TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN exclude_nodes TEXT NOT NULL DEFAULT '';
"#,
    // 13: the pool's nodes: how each joins (a one-time token, kept as a
    // hash), the certificate it was given, what it last reported, and
    // whether it is drained or removed.
    r#"
CREATE TABLE nodes (
    name          TEXT    PRIMARY KEY,
    added         INTEGER NOT NULL,
    added_by      TEXT    NOT NULL,
    token_hash    TEXT,
    token_expires INTEGER,
    certificate   TEXT,
    facts         TEXT,
    drain_reason  TEXT,
    drain_by      TEXT,
    drain_since   INTEGER,
    removed       INTEGER
);
"#,
    // 12: GPUs taken out of service (yscontrol drain).
    r#"
CREATE TABLE gpu_drains (
    gpu     INTEGER PRIMARY KEY,
    reason  TEXT    NOT NULL,
    by      TEXT    NOT NULL,
    since   INTEGER NOT NULL
);
"#,
    // 15: elastic quotas: whether a running job borrows beyond its
    // account's guarantee; every run stopped by a preemption or reclaim,
    // and how it went (checkpoint success).
    r#"
ALTER TABLE jobs ADD COLUMN borrowed INTEGER NOT NULL DEFAULT 0;
CREATE TABLE preemptions (
    job           INTEGER NOT NULL,
    restart       INTEGER NOT NULL,
    at            INTEGER NOT NULL,
    kind          TEXT    NOT NULL,
    by_job        INTEGER,
    account       TEXT    NOT NULL,
    user          TEXT    NOT NULL,
    gpus          INTEGER NOT NULL,
    grace         INTEGER NOT NULL,
    exited_at     INTEGER,
    clean         INTEGER,
    lost_gpu_secs INTEGER,
    resumed       INTEGER,
    PRIMARY KEY (job, restart)
);
CREATE INDEX preemptions_at ON preemptions (at);
"#,
    // 16: GPU drains on any node of a pool: (node, GPU). Drains recorded
    // before are the controller's own server's (node '').
    r#"
CREATE TABLE gpu_drains_by_node (
    node    TEXT    NOT NULL,
    gpu     INTEGER NOT NULL,
    reason  TEXT    NOT NULL,
    by      TEXT    NOT NULL,
    since   INTEGER NOT NULL,
    PRIMARY KEY (node, gpu)
) WITHOUT ROWID;
INSERT INTO gpu_drains_by_node (node, gpu, reason, by, since)
    SELECT '', gpu, reason, by, since FROM gpu_drains;
DROP TABLE gpu_drains;
ALTER TABLE gpu_drains_by_node RENAME TO gpu_drains;
"#,
    // 17: a node's certificate before its renewal, good until the node
    // connects with the new one.
    r#"
ALTER TABLE nodes ADD COLUMN previous_certificate TEXT;
"#,
    // 18: how each audited request came: cli, node, rest or portal.
    r#"
ALTER TABLE audit ADD COLUMN channel TEXT NOT NULL DEFAULT 'cli';
"#,
    // 19: jobs over several nodes: the layout asked for (-N, --ntasks,
    // --ntasks-per-node, --gpus-per-task, as JSON; '' for one task on
    // one node) and the nodes after the first it holds, joined by commas.
    r#"
ALTER TABLE jobs ADD COLUMN task_layout TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN peers TEXT NOT NULL DEFAULT '';
"#,
    // 20: containers: the `--container-*` request as JSON ('' for none),
    // and the image its last run resolved it to.
    r#"
ALTER TABLE jobs ADD COLUMN container TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN image_reference TEXT;
ALTER TABLE jobs ADD COLUMN image_digest TEXT;
"#,
    // 21: who may act on what from a pool's node: the node each job
    // submitted there came from (its word acts on those jobs), and every
    // token made (its use, its life, whether it was revoked).
    r#"
CREATE TABLE node_submissions (
    job     INTEGER PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,
    node    TEXT    NOT NULL
);
CREATE TABLE tokens (
    jti       TEXT    PRIMARY KEY,
    user      TEXT    NOT NULL,
    audience  TEXT    NOT NULL,
    issued    INTEGER NOT NULL,
    expires   INTEGER NOT NULL,
    made_by   TEXT    NOT NULL,
    revoked   INTEGER
) WITHOUT ROWID;
CREATE INDEX tokens_by_user ON tokens (user, expires);
"#,
    // 22: job steps (each `srun` in a job): numbered from 0 per run of
    // the job, with their name, nodes, tasks, times, end and state, and
    // the process of the srun that runs it (what `scancel N.S` signals).
    r#"
CREATE TABLE steps (
    job         INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    restart     INTEGER NOT NULL,
    step        INTEGER NOT NULL,
    name        TEXT    NOT NULL,
    nodes       TEXT    NOT NULL,
    tasks       INTEGER NOT NULL,
    start       INTEGER NOT NULL,
    end_time    INTEGER,
    state       TEXT    NOT NULL,
    exit_code   INTEGER,
    exit_signal INTEGER,
    srun_pid    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job, restart, step)
) WITHOUT ROWID;
"#,
    // 23: interactive allocations (`salloc`, `srun` outside a job),
    // for the reports' share of interactive use.
    r#"
ALTER TABLE jobs ADD COLUMN interactive INTEGER NOT NULL DEFAULT 0;
"#,
    // 24: the token each token was made with (NULL: made on the kernel's
    // word), so that revoking a token revokes what was made with it.
    r#"
ALTER TABLE tokens ADD COLUMN parent TEXT;
CREATE INDEX tokens_by_parent ON tokens (parent) WHERE parent IS NOT NULL;
"#,
    // 25: how many runs of a job in a row were requeued soon after they
    // started: the backoff before its next run, and the hold after too
    // many.
    r#"
ALTER TABLE jobs ADD COLUMN quick_requeues INTEGER NOT NULL DEFAULT 0;
"#,
    // 26: when each node was last heard in good standing (unfenced, with
    // nothing frozen), on the controller's clock: what a node says it
    // froze while the controller was away is bounded by it after a
    // restart.
    r#"
ALTER TABLE nodes ADD COLUMN good_at INTEGER;
"#,
    // 27: what a step's tasks used (as srun measured them: the largest
    // task's peak memory and which task, the sum of the tasks' peaks,
    // their CPU time), and its share of its job's GPU readings (the
    // job's sums when it began; its share once it ended).
    r#"
ALTER TABLE steps ADD COLUMN usage_tasks INTEGER;
ALTER TABLE steps ADD COLUMN max_rss INTEGER;
ALTER TABLE steps ADD COLUMN max_rss_task INTEGER;
ALTER TABLE steps ADD COLUMN rss_sum INTEGER;
ALTER TABLE steps ADD COLUMN user_usec INTEGER;
ALTER TABLE steps ADD COLUMN system_usec INTEGER;
ALTER TABLE steps ADD COLUMN gpu_begin_samples INTEGER;
ALTER TABLE steps ADD COLUMN gpu_begin_util INTEGER;
ALTER TABLE steps ADD COLUMN gpu_samples INTEGER;
ALTER TABLE steps ADD COLUMN gpu_util INTEGER;
-- Each of a job's GPUs on its own (JSON: node, index, readings,
-- utilisation sum, peak memory, idle readings and seconds).
ALTER TABLE jobs ADD COLUMN gpu_devices TEXT;
"#,
    // 28: what jobs run stored once by content: an array's tasks, and a
    // script submitted again as it was, share one payload; each job
    // points at its own (see db::payloads). `payload_digest` is the
    // daemon's (db::digest), registered on the connection.
    r#"
CREATE TABLE payloads (
    id              INTEGER PRIMARY KEY,
    digest          BLOB    NOT NULL UNIQUE,
    script          TEXT    NOT NULL,
    args            TEXT    NOT NULL,
    environment     TEXT    NOT NULL
);
INSERT OR IGNORE INTO payloads (digest, script, args, environment)
    SELECT payload_digest(script, args, environment), script, args, environment
    FROM job_payloads ORDER BY job_id;
CREATE TABLE job_payload_refs (
    job_id          INTEGER PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,
    payload_id      INTEGER NOT NULL REFERENCES payloads(id)
);
INSERT INTO job_payload_refs (job_id, payload_id)
    SELECT j.job_id, p.id FROM job_payloads j
    JOIN payloads p ON p.digest = payload_digest(j.script, j.args, j.environment);
DROP TABLE job_payloads;
CREATE INDEX job_payload_refs_by_payload ON job_payload_refs(payload_id);
"#,
];

/// For the tests of the database's modules: a database in `dir` with
/// every migration applied (not through `db::open`, which the modules it
/// calls may not be imported back from).
#[cfg(test)]
pub(super) fn migrated(dir: &std::path::Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(dir.join("db")).unwrap();
    super::digest::register(&conn).unwrap();
    for migration in MIGRATIONS {
        conn.execute_batch(migration).unwrap();
    }
    conn
}

/// For the tests of the database's modules: a job row with id `id`
/// (steps and node submissions are a job's, foreign keys enforced).
#[cfg(test)]
pub(super) fn a_job(conn: &rusqlite::Connection, id: i64) {
    conn.execute(
        "INSERT INTO jobs (id, uid, gid, user, account, qos, name, state, gpu_count, cpus, \
         submit_time, work_dir, submit_dir, std_out) \
         VALUES (?1, 1000, 1000, 'alice', 'a', 'normal', 'j', 'RUNNING', 1, 1, 0, '/', '/', 'o')",
        [id],
    )
    .unwrap();
}
