#!/usr/bin/env bash
# ysctld's restart to its first answered ysqueue, over a history of
# finished jobs (default 1,000,000, the database report_month writes):
# after a clean stop (the database trusted as left), and after a crash
# (the database checked with quick_check first), with the database's size
# and sqlite3's own quick_check of the same file as the baseline, in the
# same run.
#
# usage: bench/restart.sh [JOBS...]      (default: 1000000)
# Needs sqlite3 (Debian: sqlite3).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SIZES=${*:-1000000}
cd "$ROOT"
cargo build --release --quiet --bins --example report_month
bin=$ROOT/target/release
. "$ROOT/bench/lib.sh"
# Seconds from starting ysctld to its first answered ysqueue.
first_answer() {
    local started
    started=$(now)
    "$bin/ysctld" -D >/dev/null 2>>"$dir/ysctld.log" &
    echo $! >"$dir/pid"
    for _ in $(seq 2000); do
        "$bin/ysqueue" >/dev/null 2>&1 && break
        sleep 0.005
    done
    echo "$(now) - $started" | bc
}
printf '%-9s %-10s %-34s %9s\n' jobs "db MB" what seconds
for n in $SIZES; do
    dir=$(mktemp -d /tmp/ysched-restart.XXXXXX)
    "$bin/examples/report_month" "$n" --keep "$dir/spool" >/dev/null 2>&1
    bench_config "$dir"
    export YS_CONF=$dir/ysched.toml
    mb=$(( $(stat -c %s "$dir/spool/ysched.db") / 1048576 ))
    # The daemon is the subshell's child: stop it and wait for its pid
    # file's process to be gone.
    stop() {
        local pid
        pid=$(cat "$dir/pid")
        kill "-$1" "$pid"
        while kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
    }
    first=$(first_answer)
    stop TERM
    clean=$(first_answer)
    stop KILL
    crashed=$(first_answer)
    stop TERM
    started=$(now)
    sqlite3 "$dir/spool/ysched.db" "PRAGMA quick_check" >/dev/null
    baseline=$(echo "$(now) - $started" | bc)
    printf '%-9s %-10s %-34s %9.3f\n' "$n" "$mb" "first start (no clean stop: checks)" "$first"
    printf '%-9s %-10s %-34s %9.3f\n' "$n" "$mb" "restart after a clean stop" "$clean"
    printf '%-9s %-10s %-34s %9.3f\n' "$n" "$mb" "restart after a crash (checks)" "$crashed"
    printf '%-9s %-10s %-34s %9.3f\n' "$n" "$mb" "baseline: sqlite3 quick_check" "$baseline"
    rm -rf "$dir"
done
