#!/usr/bin/env bash
# Benchmarks ysched the way ../shared/bench/slurm/bench.sh measures Slurm
# 22.05, and (with those scripts at hand) measures Slurm and task-spooler in
# the same run, so that the figures are ratios on one machine on one day.
#
# usage: bench/run.sh [ysched] [slurm] [ts] [pueue] [floor]   (default: ysched)
#   ysched  this tree's release build, personal or system mode (whoever runs it)
#   floor   bench/floor.sh: the same loops with no scheduler (the machine's floor)
#   slurm   ../shared/bench/slurm/{setup,bench}.sh (root; installs slurm-wlm)
#   ts      ../shared/bench/simple-queues/bench.sh ts (root; installs task-spooler)
#   pueue   ../shared/bench/simple-queues/bench.sh pueue (cargo installs pueue: slow)
# env: N=1000 jobs, NHOLD=10000 held jobs, NLAT=20 latency samples,
#      SHARED=../shared, OUT=bench/out
# Output: $OUT/<system>/results.kv (key=value) and a summary table on stdout.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
SHARED=${SHARED:-$ROOT/../shared}
OUT=${OUT:-$HERE/out}
N=${N:-1000}
NHOLD=${NHOLD:-10000}
NLAT=${NLAT:-20}
SYSTEMS=${*:-ysched}
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
mkdir -p "$OUT"

sub() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.3f", a-b}'; }
div() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", a/b}'; }

bench_ysched() {
    local raw=$OUT/ysched kv
    rm -rf "$raw"; mkdir -p "$raw"
    kv=$raw/results.kv
    put() { echo "$1=$2" | tee -a "$kv"; }
    (cd "$ROOT" && cargo build --release --quiet) || { echo "build failed"; return 1; }
    local bin=$ROOT/target/release
    export PATH=$bin:$PATH
    local dir
    dir=$(mktemp -d /tmp/ysched-bench.XXXXXX)
    chmod 755 "$dir"
    export YS_CONF=$dir/ysched.toml
    bench_config "$dir"
    ysctld || return 1
    local pid
    pid=$(cat "$dir/spool/ysctld.pid")
    cd "$dir" || return 1
    active() { ysqueue -h -o %i | wc -l; }
    wait_empty() { while [ "$(active)" -ne 0 ]; do sleep 0.05; done; now; }
    echo "# run $(date -u +%FT%TZ) host=$(hostname -s) nproc=$(nproc) $(ysctld --version)" >> "$kv"

    echo "== ysched: dispatch latency ($NLAT reps)"
    : > "$raw/latency.txt"
    for i in $(seq 1 "$NLAT"); do
        local t0 t1 ts
        t0=$(now)
        ysbatch --parsable -G 1 -t 1 -o /dev/null --wrap "date +%s.%N > $dir/lat_$i.out" >/dev/null
        t1=$(now)
        while [ ! -s "$dir/lat_$i.out" ]; do sleep 0.005; done
        ts=$(cat "$dir/lat_$i.out")
        wait_empty >/dev/null
        echo "$i latency=$(sub "$ts" "$t0") after_return=$(sub "$ts" "$t1")" >> "$raw/latency.txt"
    done
    put lat_median_s "$(sed 's/.*latency=\([^ ]*\).*/\1/' "$raw/latency.txt" | median)"
    put lat_min_s "$(sed 's/.*latency=\([^ ]*\).*/\1/' "$raw/latency.txt" | sort -n | head -1)"
    put lat_max_s "$(sed 's/.*latency=\([^ ]*\).*/\1/' "$raw/latency.txt" | sort -n | tail -1)"
    put lat_after_submit_returned_median_s "$(sed 's/.*after_return=\([^ ]*\).*/\1/' "$raw/latency.txt" | median)"

    echo "== ysched: sequential submit of $N jobs + throughput"
    local t0 t1 t2
    t0=$(now)
    for i in $(seq 1 "$N"); do ysbatch -G 1 -t 1 -o /dev/null --wrap true >/dev/null || echo "ysbatch failed $i"; done
    t1=$(now)
    t2=$(wait_empty)
    put seq_submit_wall_s "$(sub "$t1" "$t0")"
    put seq_submit_rate_jobs_per_s "$(div "$N" "$(sub "$t1" "$t0")")"
    put seq_throughput_wall_s "$(sub "$t2" "$t0")"
    put seq_throughput_jobs_per_s "$(div "$N" "$(sub "$t2" "$t0")")"

    echo "== ysched: 4 parallel submitters, $N jobs + throughput"
    t0=$(now)
    for p in 1 2 3 4; do
        ( for i in $(seq 1 $((N / 4))); do ysbatch -G 1 -t 1 -o /dev/null --wrap true >/dev/null || echo "ysbatch failed $p/$i"; done ) &
    done
    wait
    t1=$(now)
    t2=$(wait_empty)
    put par4_submit_wall_s "$(sub "$t1" "$t0")"
    put par4_submit_rate_jobs_per_s "$(div "$N" "$(sub "$t1" "$t0")")"
    put par4_throughput_wall_s "$(sub "$t2" "$t0")"
    put par4_throughput_jobs_per_s "$(div "$N" "$(sub "$t2" "$t0")")"

    # The same jobs as one array: one submission and one durable commit
    # instead of N, as sbatch --array is the way to submit many jobs.
    echo "== ysched: $N jobs as one array + throughput"
    t0=$(now)
    ysbatch --array="1-$N" -G 1 -t 1 -o /dev/null --wrap true >/dev/null || echo "ysbatch --array failed"
    t1=$(now)
    t2=$(wait_empty)
    put array_submit_wall_s "$(sub "$t1" "$t0")"
    put array_throughput_wall_s "$(sub "$t2" "$t0")"

    echo "== ysched: $NHOLD held jobs"
    put rss_kb_before_hold "$(awk '/^VmRSS/{print $2}' /proc/"$pid"/status)"
    t0=$(now)
    for p in 1 2 3 4; do
        ( for i in $(seq 1 $((NHOLD / 4))); do ysbatch -H -G 1 -t 1 -o /dev/null --wrap true >/dev/null || echo "ysbatch failed $p/$i"; done ) &
    done
    wait
    t1=$(now)
    put hold_par4_submit_wall_s "$(sub "$t1" "$t0")"
    put hold_par4_submit_rate_jobs_per_s "$(div "$NHOLD" "$(sub "$t1" "$t0")")"
    put pending_count "$(ysqueue -h -t PD -o %i | wc -l)"
    put rss_kb_with_hold "$(awk '/^VmRSS/{print $2}' /proc/"$pid"/status)"
    if need_hyperfine; then
        hyperfine -N -w 2 -r 20 --export-json "$raw/hf_squeue.json" 'ysqueue' >/dev/null 2>&1
        hyperfine -N -w 2 -r 20 --export-json "$raw/hf_squeue_one.json" "ysqueue -h -j $(ysqueue -h -t PD -o %i | head -1)" >/dev/null 2>&1
        hyperfine -N -w 1 -r 10 --export-json "$raw/hf_sbatch_at10k.json" 'ysbatch -H -G 1 -t 1 -o /dev/null --wrap true' >/dev/null 2>&1
        for f in hf_squeue hf_squeue_one hf_sbatch_at10k; do
            put "${f}_mean_s" "$(python3 -c "import json;r=json.load(open('$raw/$f.json'))['results'][0];print('%.4f'%r['mean'])")"
            put "${f}_median_s" "$(python3 -c "import json;r=json.load(open('$raw/$f.json'))['results'][0];print('%.4f'%r['median'])")"
        done
    else
        put listing_not_measured "hyperfine missing"
    fi
    t0=$(now)
    yscancel -u "$(id -un)"
    t1=$(now)
    while [ "$(active)" -ne 0 ]; do sleep 0.05; done
    t2=$(now)
    put scancel_cmd_wall_s "$(sub "$t1" "$t0")"
    put scancel_until_queue_empty_s "$(sub "$t2" "$t0")"
    put db_size_kb "$(du -k "$dir/spool/ysched.db" | cut -f1)"
    kill "$pid"
    cd "$ROOT" || true
    rm -rf "$dir"
}

bench_slurm() {
    local s=$SHARED/bench/slurm
    [ -x "$s/setup.sh" ] || { echo "no $s/setup.sh: Slurm not measured"; return 1; }
    [ "$(id -u)" = 0 ] || { echo "Slurm's set-up needs root"; return 1; }
    # setup.sh checksums these before writing them and, under pipefail,
    # stops on a fresh machine where they do not exist yet.
    mkdir -p /etc/slurm && touch /etc/slurm/slurm.conf /etc/slurm/gres.conf
    SCHED_PARAMS=${SCHED_PARAMS:-batch_sched_delay=0,sched_min_interval=0} "$s/setup.sh" > "$OUT/slurm-setup.log" 2>&1 || { echo "Slurm set-up failed: $OUT/slurm-setup.log"; return 1; }
    rm -rf "$OUT/slurm"
    RAW=$OUT/slurm N=$N NHOLD=$NHOLD NLAT=$NLAT "$s/bench.sh" lat seq par hold
}

bench_ts() {
    local s=$SHARED/bench/simple-queues
    [ -x "$s/bench.sh" ] || { echo "no $s/bench.sh: task-spooler not measured"; return 1; }
    rm -rf "$OUT/ts"
    RAW=$OUT/ts N=$N AB_REPEAT=1 "$s/bench.sh" install >/dev/null 2>&1
    RAW=$OUT/ts N=$N AB_REPEAT=1 REPS=$NLAT "$s/bench.sh" ts
}

bench_pueue() {
    local s=$SHARED/bench/simple-queues
    [ -x "$s/bench.sh" ] || { echo "no $s/bench.sh: pueue not measured"; return 1; }
    rm -rf "$OUT/pueue"
    RAW=$OUT/pueue N=$N AB_REPEAT=1 "$s/bench.sh" install >/dev/null 2>&1
    RAW=$OUT/pueue N=$N AB_REPEAT=1 REPS=$NLAT "$s/bench.sh" pueue
}

for system in $SYSTEMS; do
    case $system in
        ysched) bench_ysched ;;
        slurm) bench_slurm ;;
        ts) bench_ts ;;
        pueue) bench_pueue ;;
        floor) OUT=$OUT N=$N NLAT=$NLAT "$HERE/floor.sh" ;;
        *) echo "unknown system $system (ysched, slurm, ts, pueue, floor)"; exit 2 ;;
    esac
done

# Summary: ysched beside whatever else was measured in this run.
# A value, or its median where it is a list of figures ("n=20 median=4.50ms ...").
get() {
    [ -f "$1" ] || return 0
    local v
    v=$(grep "^$2=" "$1" | tail -1 | cut -d= -f2-)
    case $v in *median=*) v=${v#*median=}; v=${v%% *} ;; esac
    echo "$v"
}
Y=$OUT/ysched/results.kv S=$OUT/slurm/results.kv T=$OUT/ts/summary.txt P=$OUT/pueue/summary.txt F=$OUT/floor/results.kv
printf '\n%-44s %12s %12s %12s %12s %12s\n' "metric" "ysched" "slurm" "task-spooler" "pueue" "floor"
# The floor's keys are ysched's.
row() { printf '%-44s %12s %12s %12s %12s %12s\n' "$1" "$(get "$Y" "$2")" "$(get "$S" "$3")" "$(get "$T" "$4")" "$(get "$P" "$5")" "$(get "$F" "$2")"; }
row "submit, sequential (jobs/s)" seq_submit_rate_jobs_per_s seq_submit_rate_jobs_per_s ts_seq_submit_jobs_per_s_r1 pueue_seq_submit_jobs_per_s_r1
row "submit, 4 parallel (jobs/s)" par4_submit_rate_jobs_per_s par4_submit_rate_jobs_per_s ts_par4_submit_jobs_per_s_r1 pueue_par4_submit_jobs_per_s_r1
row "submit to start, idle, median (s)" lat_median_s lat_median_s ts_dispatch_latency pueue_dispatch_latency
row "1000 one-GPU jobs on 4 GPUs (s)" seq_throughput_wall_s seq_throughput_wall_s ts_throughput_all_done_s_r1 pueue_throughput_all_done_s_r1
row "1000 jobs as one array, all done (s)" array_throughput_wall_s - - -
printf '%-44s %12s %12s %12s %12s %12s\n' "1000 jobs, each in its own cgroups (s)" "" "" "" "" "$(get "$F" seq_throughput_cgroups_wall_s)"
row "queue listing, 10k pending, mean (s)" hf_squeue_mean_s hf_squeue_mean_s - -
row "cancel all 10k pending (s)" scancel_until_queue_empty_s scancel_until_queue_empty_s - -
# ysched's daemon memory per held job (NHOLD=100000 for the issue's figure).
if [ -f "$Y" ]; then
    before=$(get "$Y" rss_kb_before_hold) after=$(get "$Y" rss_kb_with_hold) held=$(get "$Y" pending_count)
    if [ -n "$before" ] && [ -n "$after" ] && [ "${held:-0}" -gt 0 ]; then
        printf '%-44s %12s\n' "ysctld memory per pending job (KB)" "$(awk -v a="$after" -v b="$before" -v n="$held" 'BEGIN {printf "%.2f", (a-b)/n}')"
    fi
fi
