#!/usr/bin/env bash
# Preemption latency, measured the way ../shared/bench/slurm-policy/
# bench-preempt.sh measures Slurm 22.05 (and, with `slurm`, Slurm in the
# same run): 4 one-GPU `low` jobs fill 4 GPUs; 2 s after they all run, a
# 2-GPU `critical` job is submitted. Each victim traps SIGTERM, writes the
# time, sleeps 1 s ("checkpoint") and exits 0; the low QoS's grace is 5 s.
#
# usage: bench/preempt.sh [ysched] [slurm]     (default: ysched; run as root)
# env: REPS=5, OUT=bench/out
# Output: $OUT/preempt-<system>/results.txt and medians on stdout.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
SHARED=${SHARED:-$ROOT/../shared}
OUT=${OUT:-$HERE/out}
REPS=${REPS:-5}
SYSTEMS=${*:-ysched}

now() { date +%s.%N; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.3f", a-b}'; }
median() { sort -n | awk '{v[NR]=$1} END {if (NR) print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

bench_ysched() {
    local raw=$OUT/preempt-ysched
    rm -rf "$raw"; mkdir -p "$raw"
    (cd "$ROOT" && cargo build --release --quiet) || { echo "build failed"; return 1; }
    export PATH=$ROOT/target/release:$PATH
    local dir
    dir=$(mktemp -d /tmp/ysched-preempt.XXXXXX)
    chmod 755 "$dir"
    export YS_CONF=$dir/ysched.toml
    cat > "$YS_CONF" <<CONF
spool_dir = "$dir/spool"
allow_root_jobs = true
cpus = 8
default_qos = "low"
[[gpus]]
type = "gpu"
count = 4
memory = "16GiB"
[[qos]]
name = "critical"
priority = 1000
preempt = ["low"]
[[qos]]
name = "low"
priority = 0
grace_time = "0:05"
CONF
    ysctld || return 1
    local pid
    pid=$(cat "$dir/spool/ysctld.pid")
    cat > "$dir/victim.sh" <<'V'
#!/bin/bash
D=$1
rc=${SLURM_RESTART_COUNT:-0}
trap 'echo "$(date +%s.%N) $SLURM_JOB_ID $rc" >> $D/term.log; sleep 1; exit 0' TERM
echo "$(date +%s.%N) $SLURM_JOB_ID $rc $CUDA_VISIBLE_DEVICES" >> $D/vstart.log
( trap '' TERM; exec sleep 600 ) &
wait
V
    cat > "$dir/crit.sh" <<'C'
#!/bin/bash
echo "$(date +%s.%N) $SLURM_JOB_ID $CUDA_VISIBLE_DEVICES" >> $1/cstart.log
sleep 3
C
    chmod 755 "$dir"/*.sh
    local out=$raw/results.txt
    : > "$out"
    for r in $(seq 1 "$REPS"); do
        local D=$dir/rep$r
        mkdir -p "$D"
        for i in 1 2 3 4; do
            ysbatch --parsable -q low -G 1 -t 10 -o /dev/null "$dir/victim.sh" "$D" >/dev/null
        done
        for i in $(seq 1 200); do
            [ "$(cat "$D/vstart.log" 2>/dev/null | wc -l)" -ge 4 ] && break; sleep 0.05; done
        sleep 2
        local t0 cid
        t0=$(now)
        cid=$(ysbatch --parsable -q critical -G 2 -t 10 -o /dev/null "$dir/crit.sh" "$D")
        for i in $(seq 1 1200); do [ -s "$D/cstart.log" ] && break; sleep 0.01; done
        sleep 1.5
        # The victims run again once GPUs are free (the 2 idle ones at once).
        local nterm rerun
        nterm=$(cut -d' ' -f2 "$D/term.log" 2>/dev/null | sort -u | wc -l)
        for i in $(seq 1 600); do
            rerun=$(awk '$3>=1' "$D/vstart.log" 2>/dev/null | wc -l)
            [ "$rerun" -ge "$nterm" ] && break; sleep 0.05
        done
        local first_term last_term cstart first_rerun last_exit
        first_term=$(sort -n "$D/term.log" | head -1 | cut -d' ' -f1)
        last_term=$(sort -n "$D/term.log" | tail -1 | cut -d' ' -f1)
        cstart=$(head -1 "$D/cstart.log" | cut -d' ' -f1)
        first_rerun=$(awk '$3>=1{print $1}' "$D/vstart.log" | sort -n | head -1)
        # A victim exits 1 s after its SIGTERM: the last exit is last_term + 1.
        last_exit=$(awk -v t="$last_term" 'BEGIN{printf "%.3f", t+1}')
        echo "rep=$r cid=$cid submit_to_first_sigterm_s=$(sub "$first_term" "$t0") submit_to_crit_start_s=$(sub "$cstart" "$t0") last_victim_exit_to_crit_start_s=$(sub "$cstart" "$last_exit") victims_signalled=$nterm victims_rerun=$rerun submit_to_first_rerun_s=$(sub "$first_rerun" "$t0")" | tee -a "$out"
        yscancel -u "$(id -un)" >/dev/null
        while [ "$(ysqueue -h -o %i | wc -l)" -ne 0 ]; do sleep 0.05; done
    done
    for k in submit_to_first_sigterm_s submit_to_crit_start_s last_victim_exit_to_crit_start_s victims_signalled submit_to_first_rerun_s; do
        echo "median $k = $(grep -o "$k=[0-9.-]*" "$out" | cut -d= -f2 | median)" | tee -a "$out"
    done
    kill "$pid"
    rm -rf "$dir"
}

bench_slurm() {
    local base=$SHARED/bench/slurm s=$SHARED/bench/slurm-policy
    [ -x "$s/bench-preempt.sh" ] || { echo "no $s/bench-preempt.sh"; return 1; }
    [ "$(id -u)" = 0 ] || { echo "Slurm's set-up needs root"; return 1; }
    mkdir -p "$OUT" /etc/slurm && touch /etc/slurm/slurm.conf /etc/slurm/gres.conf
    echo "== slurm: single-node set-up ($base/setup.sh), then accounting and QoS"
    "$base/setup.sh" > "$OUT/slurm-setup.log" 2>&1 || { echo "Slurm set-up failed: $OUT/slurm-setup.log"; return 1; }
    "$s/setup-accounting.sh" >> "$OUT/slurm-setup.log" 2>&1 || { echo "accounting set-up failed: $OUT/slurm-setup.log"; return 1; }
    RAW=$OUT/preempt-slurm "$s/bench-preempt.sh" default "$REPS"
}

for system in $SYSTEMS; do
    echo "== $system: preemption latency ($REPS reps)"
    "bench_$system"
done
