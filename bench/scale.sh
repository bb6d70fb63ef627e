#!/usr/bin/env bash
# ysched at a busy site's scale (issue 49): FINISHED jobs of history (a
# year) and PENDING jobs waiting behind a running one, then what users
# and tools feel, each figure beside its baseline in the same run.
#
# usage (as root): bench/scale.sh [FINISHED [PENDING]]   (default 1000000 100000)
#   BIN=DIR  use the binaries in DIR (default: build release, target/release)
#   KEEP=1   leave the database and the daemon's log in /tmp
# Needs sqlite3 and python3.
#
# The generator: the daemon itself writes three template jobs (one run to
# COMPLETED, one holding every GPU, one waiting for them), and sqlite3
# clones them, row for row and column for column, into FINISHED finished
# jobs over the last year (users, names, times and a tenth FAILED varied;
# every clone shares its template's stored payload, as an array's tasks
# do) and PENDING jobs waiting for GPUs; each with the events the daemon
# writes. The clones are read back through ysacct before anything is
# measured.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
FINISHED=${1:-1000000}
PENDING=${2:-100000}
if [ -z "${BIN:-}" ]; then
    (cd "$ROOT" && cargo build --release --quiet --bins)
    BIN=$ROOT/target/release
fi
dir=$(mktemp -d /tmp/ysched-scale.XXXXXX)
bench_config "$dir"
# The daemon's own timing of its last pass, written every second.
{
    printf 'metrics_file = "%s"\nmetrics_every_secs = 1\n' "$dir/metrics.prom"
    cat "$dir/ysched.toml"
} >"$dir/conf.toml" && mv "$dir/conf.toml" "$dir/ysched.toml"
export YS_CONF=$dir/ysched.toml PATH=$BIN:$PATH
db=$dir/spool/ysched.db
# Whatever happens, the jobs still running are cancelled and the daemon
# stopped before the directory goes.
cleanup() {
    if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
        # Every job, the pending too: none may start once the GPUs free.
        yscancel -u "$(id -un)" >/dev/null 2>&1 || true
        for _ in $(seq 200); do
            [ -z "$(ysqueue -h -t RUNNING,COMPLETING -o %i)" ] && break
            sleep 0.05
        done
        stop_daemon
    fi
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT

answering() {
    for _ in $(seq 6000); do
        ysqueue -h -j 1 >/dev/null 2>&1 && return 0
        sleep 0.005
    done
    echo "scale: ysctld did not answer; its log: $dir/ysctld.log" >&2
    return 1
}
start_daemon() {
    ysctld -D >/dev/null 2>>"$dir/ysctld.log" &
    echo $! >"$dir/pid"
    answering
}
stop_daemon() {
    local pid
    pid=$(cat "$dir/pid")
    kill -TERM "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
}
state_of() { ysacct -j "$1" -n -P -o State 2>/dev/null | head -1; }
seconds() { echo "$(now) - $1" | bc; }

# 1. The templates, written by the daemon.
start_daemon
done_id=$(ysbatch --parsable -o /dev/null --wrap true)
blocker=$(ysbatch --parsable -G 4 -t 600 -o /dev/null --wrap "sleep 3600")
waiting=$(ysbatch --parsable -G 4 -t 60 -o /dev/null --wrap "sleep 1")
for _ in $(seq 600); do [ "$(state_of "$done_id")" = COMPLETED ] && break; sleep 0.05; done
stop_daemon

# 2. The clones.
started=$(now)
python3 - "$db" "$done_id" "$waiting" "$FINISHED" "$PENDING" <<'PY'
import sqlite3, sys, time
path, done, waiting, finished, pending = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
conn = sqlite3.connect(path)
cols = [r[1] for r in conn.execute("PRAGMA table_info(jobs)") if r[1] != "id"]
now = int(time.time())
year = 365 * 86400
varied_finished = {
    "user": "'user' || (n.i % 200)",
    "name": "'sweep-' || (n.i % 1000)",
    "submit_time": f"{now - year} + n.i * {year - 7200} / {max(finished, 1)}",
    "start_time": f"{now - year} + n.i * {year - 7200} / {max(finished, 1)} + n.i % 600",
    "end_time": f"{now - year} + n.i * {year - 7200} / {max(finished, 1)} + n.i % 600 + 60 + n.i % 3600",
    "state": "CASE WHEN n.i % 10 = 0 THEN 'FAILED' ELSE t.state END",
    "exit_code": "CASE WHEN n.i % 10 = 0 THEN 1 ELSE t.exit_code END",
}
varied_pending = {
    "user": "'user' || (n.i % 200)",
    "name": "'sweep-' || (n.i % 1000)",
    "submit_time": f"{now} - {pending} + n.i",
}
def clone(template, count, varied):
    first = conn.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM jobs").fetchone()[0]
    select = ", ".join(varied.get(c, "t." + c) for c in cols)
    conn.execute(
        f"WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {count}) "
        f"INSERT INTO jobs ({', '.join(cols)}) SELECT {select} FROM n, jobs t WHERE t.id = {template}")
    payload = conn.execute("SELECT payload_id FROM job_payload_refs WHERE job_id = ?", (template,)).fetchone()[0]
    conn.execute("INSERT INTO job_payload_refs (job_id, payload_id) SELECT id, ? FROM jobs WHERE id >= ?", (payload, first))
    return first
conn.execute("BEGIN")
first = clone(done, finished, varied_finished)
for column, state in (("submit_time", "'PENDING'"), ("start_time", "'RUNNING'"), ("end_time", "state")):
    conn.execute(f"INSERT INTO job_events (job_id, time, state) SELECT id, {column}, {state} FROM jobs WHERE id >= ?", (first,))
first = clone(waiting, pending, varied_pending)
conn.execute("INSERT INTO job_events (job_id, time, state) SELECT id, submit_time, 'PENDING' FROM jobs WHERE id >= ?", (first,))
conn.execute("COMMIT")
PY
fill=$(seconds "$started")
year_ago=$(date -d @$(( $(date +%s) - 365 * 86400 )) +%Y-%m-%dT%H:%M:%S)
mb=$(( $(stat -c %s "$db") / 1048576 ))

# 3. Restarts: after the clone (the file changed: checked), then after a
# clean stop.
started=$(now); start_daemon; checked=$(seconds "$started")
stop_daemon
started=$(now); start_daemon; clean=$(seconds "$started")
listed=$(ysacct -a -S "$year_ago" -n -P -o JobID | wc -l)
queued=$(ysqueue -h -t PD | wc -l)
if [ "$listed" -lt "$FINISHED" ] || [ "$queued" -lt "$PENDING" ]; then
    echo "scale: read back $listed finished (of $FINISHED) and $queued pending (of $PENDING)" >&2
    exit 1
fi

# 4. Listings, each a median of 5, beside sqlite3 reading the same rows.
median_of() {
    local t
    for _ in 1 2 3 4 5; do
        t=$(now)
        "$@" >/dev/null
        seconds "$t"
    done | median
}
queue=$(median_of ysqueue -t PD)
month_from=$(date -d @$(( $(date +%s) - 30 * 86400 )) +%Y-%m-%dT%H:%M:%S)
month_to=$(date +%Y-%m-%dT%H:%M:%S)
acct=$(median_of ysacct -a -S "$month_from" -E "$month_to" -P -n \
    -o JobID,JobName,User,Account,State,ExitCode,Elapsed)
from_s=$(date -d "$month_from" +%s)
to_s=$(date -d "$month_to" +%s)
sql=$(median_of sqlite3 "$db" "SELECT id, name, user, account, state, exit_code, end_time - start_time \
    FROM jobs WHERE (end_time IS NULL OR end_time >= $from_s) AND submit_time <= $to_s ORDER BY id")

# 5. A job that can run (no GPU, a minute), submitted behind the pending:
# from just before ysbatch starts to the job's first command, as the job
# itself notes it (no poller's processes in the figure), median of 5.
mark=$dir/started
for _ in 1 2 3 4 5; do
    rm -f "$mark"
    started=$(now)
    ysbatch --parsable -c 1 -t 1 -o /dev/null --wrap "date +%s.%N > $mark.t; mv $mark.t $mark; sleep 30" >/dev/null
    for _ in $(seq 2000); do [ -s "$mark" ] && break; sleep 0.002; done
    echo "$(cat "$mark") - $started" | bc
done | median >"$dir/to_start"
to_start=$(cat "$dir/to_start")

# 6. A full pass over the pending jobs, as the daemon times it: each
# submission of a job that waits for the GPUs brings one (median of 5).
for _ in 1 2 3 4 5; do
    ysbatch --parsable -G 1 -t 1 -o /dev/null --wrap true >/dev/null
    sleep 1.5
    awk '$1 == "ysched_schedule_pass_seconds" { print $2 }' "$dir/metrics.prom"
done | median >"$dir/pass"
pass=$(cat "$dir/pass")

printf 'finished %s, pending %s: database %s MB (%s bytes a job), filled in %.1f s\n' \
    "$FINISHED" "$PENDING" "$mb" "$(( $(stat -c %s "$db") / (FINISHED + PENDING) ))" "$fill"
printf '%-52s %9s %9s\n' what seconds baseline
printf '%-52s %9.3f %9s\n' "restart to first answer, the file changed (checked)" "$checked" ""
printf '%-52s %9.3f %9s\n' "restart to first answer, after a clean stop" "$clean" ""
printf '%-52s %9.3f %9s\n' "ysqueue -t PD ($queued jobs), median of 5" "$queue" ""
printf '%-52s %9.3f %9.3f\n' "ysacct, the last 30 days, all users (sqlite3)" "$acct" "$sql"
printf '%-52s %9.3f %9s\n' "a job that can run: submit to its first command, median of 5" "$to_start" ""
printf '%-52s %9.3f %9s\n' "the daemon's full pass ($queued pending), median of 5" "$pass" ""
