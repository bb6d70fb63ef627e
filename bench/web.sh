#!/usr/bin/env bash
# The web server at 10,000 and 100,000 queued jobs: how long a client
# waits for slurmrestd's job list (GET /slurm/v0.0.45/jobs), the portal's
# queue page and its live refresh (one page of 200 rows), and a one-job
# query, and how many bytes each is. The queue is one held array per size,
# so filling it takes seconds.
#
# usage: bench/web.sh [BIN_DIR] [SIZES...]   (as root: yswebd runs as nobody)
#   BIN_DIR  ysctld, ysstepd, ysbatch, ystoken, yswebd (default target/release)
#   SIZES    default 10000 100000
# env: RUNS=10 (requests per figure), WORK=/tmp/ysched-web
# Prints per size and request: median and max seconds, and bytes.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$(cd "${1:-$HERE/../target/release}" && pwd)
shift || true
SIZES=${*:-10000 100000}
RUNS=${RUNS:-10}
WORK=${WORK:-/tmp/ysched-web}
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
[ "$(id -u)" = 0 ] || { echo "bench/web.sh runs as root (yswebd as nobody)"; exit 1; }
command -v curl >/dev/null || { echo "bench/web.sh needs curl"; exit 1; }

median_max() { sort -n | awk '{v[NR] = $1} END {printf "median %.3f s, max %.3f s", v[int((NR + 1) / 2)], v[NR]}'; }

# measure NAME CURL_ARGS...: RUNS requests; their times and the size.
measure() {
    local name=$1
    shift
    local times=() size=0 status
    for _ in $(seq "$RUNS"); do
        read -r t size status < <(curl -s -o /dev/null -w '%{time_total} %{size_download} %{http_code}\n' "$@")
        [ "$status" = 200 ] || { echo "  $name: HTTP $status"; return 1; }
        times+=("$t")
    done
    printf '  %-34s %s, %s bytes\n' "$name" "$(printf '%s\n' "${times[@]}" | median_max)" "$size"
}

echo "# $(date -u +%FT%TZ) $(hostname -s) nproc=$(nproc) ysched $(git -C "$HERE/.." describe --always --dirty 2>/dev/null)"
for n in $SIZES; do
    dir=$WORK/$n
    rm -rf "$dir"
    bench_config "$dir"
    port=$((20000 + RANDOM % 20000))
    sed -i "1i max_array_size = $((n + 1))" "$dir/ysched.toml"
    printf '[web]\nuser = "nobody"\n' >>"$dir/ysched.toml"
    chmod 755 "$WORK" "$dir"
    export YS_CONF=$dir/ysched.toml
    "$BIN/ysctld" >/dev/null || exit 1
    "$BIN/ysbatch" -H -t 1 -o /dev/null --array=1-"$n" --wrap true >/dev/null || exit 1
    runuser -u nobody -- env YS_CONF="$YS_CONF" "$BIN/yswebd" --listen 127.0.0.1:$port 2>"$dir/yswebd.log" &
    web=$!
    for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/api" && break; sleep 0.1; done
    token=$("$BIN/ystoken" --lifespan 3600 | sed 's/^SLURM_JWT=//')
    base=http://127.0.0.1:$port
    echo "$n held jobs:"
    measure "GET /slurm/v0.0.45/jobs" -H "X-SLURM-USER-TOKEN: $token" "$base/slurm/v0.0.45/jobs"
    measure "GET /slurm/v0.0.45/job/ID" -H "X-SLURM-USER-TOKEN: $token" "$base/slurm/v0.0.45/job/$((n / 2))"
    measure "GET /queue (portal, 200 rows)" -b "ysched_session=$token" "$base/queue"
    measure "GET /queue?page=last (refresh)" -b "ysched_session=$token" -H "X-Fragment: 1" "$base/queue?page=$(((n + 199) / 200))"
    kill "$web" 2>/dev/null
    kill "$(cat "$dir/spool/ysctld.pid")" 2>/dev/null
    while [ -e /proc/"$(cat "$dir/spool/ysctld.pid")" ]; do sleep 0.1; done
done
