#!/usr/bin/env bash
# Splits an idle job start in two: the submission (ysbatch from exec to
# its answer: the client and the daemon's turn) and the start (from that
# answer to the job's first command: launch, supervisor, cgroups, the
# job's shell), each the median of N samples, with a fresh daemon in the
# bench config (bench/lib.sh), as root for cgroups. The submission
# figure includes a `date` process for its timestamps (about 1 ms here).
#
# usage: bench/start_parts.sh BIN_DIR    (ysctld, ysstepd, ysbatch, ysqueue)
# env: N=20
set -uo pipefail
BIN=$(cd "${1:?usage: bench/start_parts.sh BIN_DIR}" && pwd)
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
dir=$(mktemp -d /tmp/ysched-parts.XXXXXX)
chmod 755 "$dir"
bench_config "$dir"
export YS_CONF=$dir/ysched.toml
"$BIN/ysctld" >/dev/null || exit 1
submit=()
start=()
for i in $(seq 1 "${N:-20}"); do
    t0=$(now)
    "$BIN/ysbatch" -G 1 -t 1 -o /dev/null --wrap "date +%s.%N > $dir/lat_$i.out" >/dev/null
    t1=$(now)
    while [ ! -s "$dir/lat_$i.out" ]; do sleep 0.001; done
    ts=$(cat "$dir/lat_$i.out")
    submit+=("$(echo "($t1 - $t0) * 1000" | bc -l)")
    start+=("$(echo "($ts - $t1) * 1000" | bc -l)")
    while [ -n "$("$BIN/ysqueue" -h -o %i)" ]; do sleep 0.01; done
done
printf 'submission (ysbatch, exec to answer): median %.2f ms\n' "$(printf '%s\n' "${submit[@]}" | median)"
printf 'start (answer to the job'"'"'s first command): median %.2f ms\n' "$(printf '%s\n' "${start[@]}" | median)"
kill "$(cat "$dir/spool/ysctld.pid")"
while [ -e /proc/"$(cat "$dir/spool/ysctld.pid")" ]; do sleep 0.05; done
rm -rf "$dir"
