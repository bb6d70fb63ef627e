#!/usr/bin/env bash
# Compares two builds' job starts, interleaved, so that the VM's drift
# falls on both alike: submit-to-start latency on an idle server, and
# 1,000 `true` jobs submitted as one array on 4 GPUs (first submission to
# all done), each build with its own fresh daemon in system-mode-like
# config (bench/lib.sh), as root or as a user.
#
# usage: bench/starts.sh OLD_BIN_DIR NEW_BIN_DIR
#   OLD_BIN_DIR, NEW_BIN_DIR  directories with ysctld, ysstepd, ysbatch, ysqueue
# env: ROUNDS=3 (alternations), NLAT=20 (latency samples), N=1000 (jobs),
#      BASE_OLD=/tmp, BASE_NEW=/tmp (where each build's spool goes: the
#      same build twice with two bases compares two filesystems)
# Prints per round and build: the latency median, the array's time and
# the machine's busy CPU time per job during it (every process: daemon,
# supervisors, jobs, kernel); then per build the medians over the rounds.
set -uo pipefail
OLD=$(cd "${1:?usage: bench/starts.sh OLD_BIN_DIR NEW_BIN_DIR}" && pwd)
NEW=$(cd "${2:?usage: bench/starts.sh OLD_BIN_DIR NEW_BIN_DIR}" && pwd)
ROUNDS=${ROUNDS:-3}
NLAT=${NLAT:-20}
N=${N:-1000}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"


# BIN_DIR BASE: prints "latency_ms array_s array_cpu_ms_per_job"
measure() {
    local bin=$1 dir
    dir=$(mktemp -d "$2/ysched-starts.XXXXXX")
    chmod 755 "$dir"
    bench_config "$dir"
    export YS_CONF=$dir/ysched.toml
    "$bin/ysctld" >/dev/null || return 1
    local lat=()
    for i in $(seq 1 "$NLAT"); do
        local t0 ts
        t0=$(now)
        "$bin/ysbatch" -G 1 -t 1 -o /dev/null --wrap "date +%s.%N > $dir/lat_$i.out" >/dev/null
        while [ ! -s "$dir/lat_$i.out" ]; do sleep 0.002; done
        ts=$(cat "$dir/lat_$i.out")
        lat+=("$(echo "($ts - $t0) * 1000" | bc -l)")
        while [ -n "$("$bin/ysqueue" -h -o %i)" ]; do sleep 0.01; done
    done
    local t0 t1 c0 c1
    c0=$(busy)
    t0=$(now)
    "$bin/ysbatch" --array="1-$N" -G 1 -t 1 -o /dev/null --wrap true >/dev/null
    while [ -n "$("$bin/ysqueue" -h -o %i)" ]; do sleep 0.02; done
    t1=$(now)
    c1=$(busy)
    kill "$(cat "$dir/spool/ysctld.pid")"
    while [ -e /proc/"$(cat "$dir/spool/ysctld.pid")" ]; do sleep 0.05; done
    rm -rf "$dir"
    printf '%.2f %.2f %.2f\n' "$(printf '%s\n' "${lat[@]}" | median)" "$(echo "$t1 - $t0" | bc -l)" \
        "$(echo "($c1 - $c0) * 1000 / $N" | bc -l)"
}

: > /tmp/ysched-starts.old
: > /tmp/ysched-starts.new
for r in $(seq 1 "$ROUNDS"); do
    for build in old new; do
        bin=$OLD base=${BASE_OLD:-/tmp}
        [ "$build" = new ] && bin=$NEW base=${BASE_NEW:-/tmp}
        result=$(measure "$bin" "$base") || exit 1
        read -r lat array cpu <<< "$result"
        echo "round $r $build: submit-to-start median $lat ms, $N-job array $array s, $cpu ms of machine CPU per job"
        echo "$result" >> /tmp/ysched-starts.$build
    done
done
for build in old new; do
    echo "$build: medians of the rounds: latency $(cut -d' ' -f1 /tmp/ysched-starts.$build | median) ms," \
        "array $(cut -d' ' -f2 /tmp/ysched-starts.$build | median) s," \
        "$(cut -d' ' -f3 /tmp/ysched-starts.$build | median) ms CPU per job"
done
