#!/usr/bin/env bash
# Compares two builds on a long queue that someone keeps listing: how long
# a held submission takes while a shell loop runs `ysqueue -h -u nobody`
# without pause (a whole query snapshot each time after a change, nothing
# printed), and how long a whole listing takes right after a submission.
# Each round and build gets a fresh daemon on a fresh copy of one filled
# spool (made once, as bench/listing.sh makes its, and kept).
#
# usage: bench/poller.sh OLD_BIN_DIR NEW_BIN_DIR [N]
#   N  held jobs in the queue (default 100000)
# env: ROUNDS=2, SUBMITS=30 (timed submissions), LISTINGS=9 (timed listings),
#      WORK=/tmp/ysched-listing (shared with bench/listing.sh)
set -uo pipefail
OLD=$(cd "${1:?usage: bench/poller.sh OLD_BIN_DIR NEW_BIN_DIR [N]}" && pwd)
NEW=$(cd "${2:?usage: bench/poller.sh OLD_BIN_DIR NEW_BIN_DIR [N]}" && pwd)
N=${3:-100000}
ROUNDS=${ROUNDS:-2}
SUBMITS=${SUBMITS:-30}
LISTINGS=${LISTINGS:-9}
WORK=${WORK:-/tmp/ysched-listing}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

seed=$WORK/seed-$N
fill_seed "$OLD" "$seed" "$N" || exit 1

# BIN_DIR: prints "ms_per_submission_while_polled median_ms_listing_after_change"
measure() {
    local bin=$1 dir=$WORK/poller
    rm -rf "$dir"
    bench_config "$dir"
    cp -a "$seed/spool" "$dir/spool"
    export YS_CONF=$dir/ysched.toml
    "$bin/ysctld" >/dev/null || return 1
    (while [ ! -e "$dir/stop" ]; do "$bin/ysqueue" -h -u nobody >/dev/null; done) &
    sleep 1
    local t0 t1
    t0=$(now)
    for _ in $(seq "$SUBMITS"); do "$bin/ysbatch" -H --wrap true >/dev/null; done
    t1=$(now)
    touch "$dir/stop"
    wait
    local submit_ms
    submit_ms=$(echo "($t1 - $t0) * 1000 / $SUBMITS" | bc -l)
    local listings=()
    for _ in $(seq "$LISTINGS"); do
        "$bin/ysbatch" -H --wrap true >/dev/null
        t0=$(now)
        "$bin/ysqueue" >/dev/null
        listings+=("$(echo "($(now) - $t0) * 1000" | bc -l)")
    done
    kill "$(cat "$dir/spool/ysctld.pid")"
    while [ -e /proc/"$(cat "$dir/spool/ysctld.pid")" ]; do sleep 0.1; done
    rm -rf "$dir"
    printf '%.1f %.1f\n' "$submit_ms" "$(printf '%s\n' "${listings[@]}" | median)"
}

echo "# $(date -u +%FT%TZ) $(hostname -s) nproc=$(nproc) N=$N"
for round in $(seq "$ROUNDS"); do
    for build in old new; do
        bin=$OLD
        [ "$build" = new ] && bin=$NEW
        read -r submit listing < <(measure "$bin")
        echo "round $round $build: a held submission while polled ${submit} ms; a listing right after a submission ${listing} ms"
    done
done
