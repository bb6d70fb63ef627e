#!/usr/bin/env bash
# ysacct over a month of finished jobs, through a running ysctld: wall time
# and peak memory of ysacct and of the daemon, for 100,000 and 1,000,000
# jobs (streaming: the peaks should not grow with the listing), against
# sqlite3 printing the same columns of the same rows from the same file in
# the same run.
#
# usage: bench/acct_stream.sh [JOBS...]      (default: 100000 1000000)
# Needs /usr/bin/time and sqlite3 (Debian: time, sqlite3).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SIZES=${*:-100000 1000000}
cd "$ROOT"
cargo build --release --quiet --bins --example report_month
bin=$ROOT/target/release
printf '%-9s %-22s %9s %12s\n' jobs what seconds "peak RSS KB"
for n in $SIZES; do
    dir=$(mktemp -d /tmp/ysched-acct.XXXXXX)
    "$bin/examples/report_month" "$n" --keep "$dir/spool" 2>/dev/null
    cat > "$dir/ysched.toml" <<CONF
spool_dir = "$dir/spool"
cpus = 16
memory = "64G"
gpu_sample_secs = 0
[[gpus]]
type = "a100"
count = 4
memory = "80G"
CONF
    export YS_CONF=$dir/ysched.toml
    "$bin/ysctld" -D 2>"$dir/ysctld.log" &
    daemon=$!
    for _ in $(seq 100); do "$bin/ysqueue" >/dev/null 2>&1 && break; sleep 0.1; done
    hwm() { awk '/VmHWM/ {print $2}' "/proc/$daemon/status"; }
    before=$(hwm)
    /usr/bin/time -f '%e %M' -o "$dir/t" "$bin/ysacct" -a -S 2026-11-01 -E 2026-12-03 -P -n \
        -o JobID,JobName,User,Account,State,ExitCode,Elapsed >"$dir/out"
    read -r secs rss <"$dir/t"
    lines=$(wc -l <"$dir/out")
    printf '%-9s %-22s %9s %12s\n' "$n" "ysacct ($lines rows)" "$secs" "$rss"
    printf '%-9s %-22s %9s %12s\n' "$n" "ysctld (peak growth)" "-" "$(( $(hwm) - before ))"
    /usr/bin/time -f '%e %M' -o "$dir/t" sqlite3 -separator '|' "$dir/spool/ysched.db" \
        "SELECT id, name, user, account, state, exit_code, end_time - start_time FROM jobs \
         WHERE end_time >= 1793491200 ORDER BY id" >"$dir/out"
    read -r secs rss <"$dir/t"
    printf '%-9s %-22s %9s %12s\n' "$n" "sqlite3 (baseline)" "$secs" "$rss"
    kill "$daemon"; wait "$daemon" 2>/dev/null || true
    rm -rf "$dir"
done
