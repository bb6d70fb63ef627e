#!/usr/bin/env bash
# Compares two builds' queue listing on the same queue, interleaved, so
# that the VM's drift falls on both alike.
#
# usage: bench/listing.sh OLD_BIN_DIR NEW_BIN_DIR [N]
#   OLD_BIN_DIR, NEW_BIN_DIR  directories with ysctld, ysstepd, ysbatch, ysqueue
#   N                         held jobs in the queue (default 10000)
# env: ROUNDS=2 (alternations), RUNS=20 (hyperfine runs per round),
#      WORK=/tmp/ysched-listing (kept: a later run with the same N reuses
#      the filled queue)
# Prints, per round and build: hyperfine's mean, and the CPU time the
# daemon and the client spent per listing; then, per build, the median
# of `ysqueue -j ID` with the queue unchanged and right after a
# submission (which makes the daemon rebuild its query snapshot first).
set -uo pipefail
OLD=$(cd "${1:?usage: bench/listing.sh OLD_BIN_DIR NEW_BIN_DIR [N]}" && pwd)
NEW=$(cd "${2:?usage: bench/listing.sh OLD_BIN_DIR NEW_BIN_DIR [N]}" && pwd)
N=${3:-10000}
ROUNDS=${ROUNDS:-2}
RUNS=${RUNS:-20}
WORK=${WORK:-/tmp/ysched-listing}
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
need_hyperfine || exit 1

seed=$WORK/seed-$N
fill_seed "$OLD" "$seed" "$N" || exit 1

for build in old new; do
    rm -rf "${WORK:?}/$build"
    bench_config "$WORK/$build"
    cp -a "$seed/spool" "$WORK/$build/spool"
done
YS_CONF=$WORK/old/ysched.toml "$OLD/ysctld" >/dev/null || exit 1
YS_CONF=$WORK/new/ysched.toml "$NEW/ysctld" >/dev/null || exit 1
trap 'kill $(cat "$WORK/old/spool/ysctld.pid" "$WORK/new/spool/ysctld.pid") 2>/dev/null' EXIT

ticks() { awk '{print $14 + $15}' /proc/"$1"/task/*/stat | paste -sd+ | bc; }
hz=$(getconf CLK_TCK)
echo "# $(date -u +%FT%TZ) $(hostname -s) nproc=$(nproc) N=$N"
for round in $(seq "$ROUNDS"); do
    for build in old new; do
        bin=$OLD; [ $build = new ] && bin=$NEW
        export YS_CONF=$WORK/$build/ysched.toml
        pid=$(cat "$WORK/$build/spool/ysctld.pid")
        before=$(ticks "$pid")
        hyperfine -N -w 3 -r "$RUNS" --export-json "$WORK/hf.json" "$bin/ysqueue" >/dev/null 2>&1
        after=$(ticks "$pid")
        # hyperfine's mean wall time, and the client's user + system time.
        read -r mean client < <(python3 -c "import json;r=json.load(open('$WORK/hf.json'))['results'][0];print('%.1f %.1f'%(r['mean']*1000,(r['user']+r['system'])*1000))")
        runs=$((RUNS + 3))
        echo "round $round $build: mean ${mean} ms; per listing: daemon CPU $(echo "($after - $before) * 1000 / $hz / $runs" | bc -l | xargs printf '%.1f') ms, client CPU ${client} ms"
    done
done

median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
for round in $(seq "$ROUNDS"); do
    for build in old new; do
        bin=$OLD; [ $build = new ] && bin=$NEW
        export YS_CONF=$WORK/$build/ysched.toml
        id=$("$bin/ysqueue" -h -o %i | sed -n "$((N / 2))p")
        unchanged="" changed=""
        for i in $(seq 10); do
            "$bin/ysqueue" -j "$id" >/dev/null
            t0=$EPOCHREALTIME; "$bin/ysqueue" -j "$id" >/dev/null; t1=$EPOCHREALTIME
            "$bin/ysbatch" -H --wrap true >/dev/null
            t2=$EPOCHREALTIME; "$bin/ysqueue" -j "$id" >/dev/null; t3=$EPOCHREALTIME
            unchanged+="$(echo "($t1 - $t0) * 1000" | bc) "
            changed+="$(echo "($t3 - $t2) * 1000" | bc) "
        done
        echo "round $round $build: ysqueue -j ID median $(echo "$unchanged" | median) ms unchanged, $(echo "$changed" | median) ms right after a submission"
    done
done
