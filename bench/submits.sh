#!/usr/bin/env bash
# Compares two builds' submissions, interleaved, so that the VM's drift
# falls on both alike. Each round and build gets a fresh daemon
# (bench/lib.sh's config: 4 GPUs) and measures, the way bench/run.sh does:
#   - N held jobs from one submitter (jobs/s), and the machine's busy CPU
#     per submission meanwhile (every process: ysbatch, the shell, daemon,
#     kernel);
#   - N held jobs from 4 submitters at once (jobs/s);
#   - N `true` jobs from one submitter, running as they come (jobs/s while
#     submitting, and seconds until the last has ended).
#
# usage: bench/submits.sh OLD_BIN_DIR NEW_BIN_DIR
# env: ROUNDS=3 (alternations), N=500 (jobs per measurement)
set -uo pipefail
OLD=$(cd "${1:?usage: bench/submits.sh OLD_BIN_DIR NEW_BIN_DIR}" && pwd)
NEW=$(cd "${2:?usage: bench/submits.sh OLD_BIN_DIR NEW_BIN_DIR}" && pwd)
ROUNDS=${ROUNDS:-3}
N=${N:-500}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"


# BIN_DIR: prints "held_per_s cpu_ms_per_submission par4_held_per_s running_per_s running_all_done_s"
measure() {
    local bin=$1 dir
    dir=$(mktemp -d /tmp/ysched-submits.XXXXXX)
    chmod 755 "$dir"
    bench_config "$dir"
    export YS_CONF=$dir/ysched.toml
    "$bin/ysctld" >/dev/null || return 1
    local t0 t1 t2 c0 c1
    c0=$(busy)
    t0=$(now)
    for _ in $(seq 1 "$N"); do "$bin/ysbatch" -H -G 1 -t 1 -o /dev/null --wrap true >/dev/null; done
    t1=$(now)
    c1=$(busy)
    local held cpu
    held=$(echo "$N / ($t1 - $t0)" | bc -l)
    cpu=$(echo "($c1 - $c0) * 1000 / $N" | bc -l)
    "$bin/yscancel" -u "$(id -un)" >/dev/null

    t0=$(now)
    for _ in 1 2 3 4; do
        (for _ in $(seq 1 $((N / 4))); do "$bin/ysbatch" -H -G 1 -t 1 -o /dev/null --wrap true >/dev/null; done) &
    done
    wait
    t1=$(now)
    local par4
    par4=$(echo "$N / ($t1 - $t0)" | bc -l)
    "$bin/yscancel" -u "$(id -un)" >/dev/null
    while [ -n "$("$bin/ysqueue" -h -o %i)" ]; do sleep 0.05; done

    t0=$(now)
    for _ in $(seq 1 "$N"); do "$bin/ysbatch" -G 1 -t 1 -o /dev/null --wrap true >/dev/null; done
    t1=$(now)
    while [ -n "$("$bin/ysqueue" -h -o %i)" ]; do sleep 0.02; done
    t2=$(now)
    local running done_s
    running=$(echo "$N / ($t1 - $t0)" | bc -l)
    done_s=$(echo "$t2 - $t0" | bc -l)

    kill "$(cat "$dir/spool/ysctld.pid")"
    while [ -e /proc/"$(cat "$dir/spool/ysctld.pid")" ]; do sleep 0.05; done
    rm -rf "$dir"
    printf '%.0f %.2f %.0f %.0f %.2f\n' "$held" "$cpu" "$par4" "$running" "$done_s"
}

: > /tmp/ysched-submits.old
: > /tmp/ysched-submits.new
for r in $(seq 1 "$ROUNDS"); do
    for build in old new; do
        bin=$OLD
        [ "$build" = new ] && bin=$NEW
        result=$(measure "$bin") || exit 1
        read -r held cpu par4 running done_s <<< "$result"
        echo "round $r $build: held $held/s ($cpu ms machine CPU each), 4 submitters held $par4/s," \
            "running $running/s (all $N done in $done_s s)"
        echo "$result" >> /tmp/ysched-submits.$build
    done
done
for build in old new; do
    f=/tmp/ysched-submits.$build
    echo "$build: medians: held $(cut -d' ' -f1 "$f" | median)/s, $(cut -d' ' -f2 "$f" | median) ms CPU each," \
        "4 submitters $(cut -d' ' -f3 "$f" | median)/s, running $(cut -d' ' -f4 "$f" | median)/s," \
        "all done $(cut -d' ' -f5 "$f" | median) s"
done
