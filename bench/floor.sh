#!/usr/bin/env bash
# The machine's floor for each of bench/run.sh's submission figures: the
# same shell loops with no scheduler at all, so that a target can be read
# against what the machine allows in the same run.
#   seq    a shell loop running /bin/true N times: the most processes per
#          second that any command-line client submitted from a loop can
#          reach (ysbatch, sbatch and tsp are each one process);
#   par4   4 such loops at once;
#   lat    /bin/true (the client), then `sh -c 'date +%s.%N'` (the job's
#          shell printing the time): submit-to-start as bench/run.sh
#          measures it, with nothing between the client and the job;
#   jobs   N times /bin/true, each followed by `sh -c true` started in the
#          background (the job), until all have ended: N separate `true`
#          jobs with no scheduler;
#   jobs with cgroups (as root, with gcc): bench/floor_jobs.c, the same
#          with each job in its own cgroups and at most 4 at once;
#   lat with cgroups (as root, with gcc): `lat` from a C harness, reps
#          100 ms apart as ysched's are: without cgroups, with the job in
#          fresh groups of the hierarchies ysched uses (v1 here), and on
#          cgroup2 moved into its group after its fork, or started in it
#          with clone3(CLONE_INTO_CGROUP).
#
# usage: bench/floor.sh   env: N=1000, NLAT=20, OUT=bench/out
# Output: $OUT/floor/results.kv, with bench/run.sh's keys.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
N=${N:-1000}
NLAT=${NLAT:-20}
OUT=${OUT:-$HERE/out}
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
raw=$OUT/floor
rm -rf "$raw"; mkdir -p "$raw"
kv=$raw/results.kv
put() { echo "$1=$2" | tee -a "$kv"; }
rate() { awk -v n="$1" -v a="$2" -v b="$3" 'BEGIN {printf "%.1f", n / (b - a)}'; }
echo "# run $(date -u +%FT%TZ) host=$(hostname -s) nproc=$(nproc)" >> "$kv"

echo "== floor: a process per submission, sequential and 4 at once"
t0=$(now)
for _ in $(seq 1 "$N"); do /bin/true; done
t1=$(now)
put seq_submit_rate_jobs_per_s "$(rate "$N" "$t0" "$t1")"
t0=$(now)
for _ in 1 2 3 4; do
    (for _ in $(seq 1 $((N / 4))); do /bin/true; done) &
done
wait
t1=$(now)
put par4_submit_rate_jobs_per_s "$(rate "$N" "$t0" "$t1")"

echo "== floor: a client process, then the job's shell printing the time ($NLAT reps)"
: > "$raw/latency.txt"
for i in $(seq 1 "$NLAT"); do
    t0=$(now)
    /bin/true
    ts=$(sh -c 'date +%s.%N')
    awk -v a="$t0" -v b="$ts" 'BEGIN {printf "%.6f\n", b - a}' >> "$raw/latency.txt"
done
put lat_median_s "$(median < "$raw/latency.txt")"

echo "== floor: $N separate \`true\` jobs, each after a client process"
t0=$(now)
for _ in $(seq 1 "$N"); do
    /bin/true
    sh -c true &
done
wait
t1=$(now)
put seq_throughput_wall_s "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')"

if [ "$(id -u)" = 0 ] && command -v gcc >/dev/null; then
    echo "== floor: $N separate \`true\` jobs, each in its own cgroups, 4 at once"
    if gcc -O2 -o "$raw/floor_jobs" "$HERE/floor_jobs.c"; then
        c0=$(busy)
        put seq_throughput_cgroups_wall_s "$("$raw/floor_jobs" "$N" 4)"
        c1=$(busy)
        put cgroups_cpu_ms_per_job "$(awk -v a="$c0" -v b="$c1" -v n="$N" 'BEGIN {printf "%.2f", (b - a) * 1000 / n}')"
        echo "== floor: submit to start with the job in fresh cgroups ($NLAT reps)"
        put lat_harness_median_s "$("$raw/floor_jobs" lat "$NLAT" none)"
        put lat_cgroups_median_s "$("$raw/floor_jobs" lat "$NLAT")"
        # cgroup2 (the whole tree, or a hybrid host's unified mount): the
        # job moved into its group after its fork, or started there.
        v2=/sys/fs/cgroup
        [ -e $v2/cgroup.controllers ] || v2=/sys/fs/cgroup/unified
        if [ -e $v2/cgroup.controllers ]; then
            put lat_cgroup2_median_s "$("$raw/floor_jobs" lat "$NLAT" $v2)"
            put lat_cgroup2_clone3_median_s "$("$raw/floor_jobs" lat "$NLAT" $v2 clone3)"
        fi
    fi
else
    echo "(not root, or no gcc: the floor with cgroups is not measured)"
fi
