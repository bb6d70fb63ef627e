#!/usr/bin/env bash
# Every benchmark in one run, on this machine, with the date, the machine
# and the commands written at the top of the summary:
#   bench/run.sh ysched slurm ts pueue floor   submissions, latency, throughput, queue,
#                                         cancel; floor: the same loops, no scheduler
#   bench/preempt.sh ysched slurm         preemption
#   bench/acct_stream.sh                  ysacct over 100,000 and 1,000,000 jobs
#   examples/report_month, sched_pass     the monthly report, one scheduling pass
#   examples/pool_bench 64 20             a pool of 64 nodes on loopback
# usage: bench/all.sh [SYSTEMS...]   (default: ysched slurm ts pueue floor; Slurm,
# task-spooler and pueue need root and ../shared/bench). Long: about an hour.
# Output: bench/out/all-DATE.txt
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
OUT=${OUT:-$HERE/out}
SYSTEMS=${*:-ysched slurm ts pueue floor}
mkdir -p "$OUT"
summary=$OUT/all-$(date -u +%Y%m%dT%H%MZ).txt
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "machine: $(uname -srm), $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
    echo "ysched: $(git -C "$ROOT" describe --always --dirty 2>/dev/null)"
    echo "commands: bench/run.sh $SYSTEMS; bench/preempt.sh; bench/acct_stream.sh; examples report_month, sched_pass, pool_bench"
    echo
} >"$summary"
step() { echo "== $*" | tee -a "$summary"; "$@" 2>&1 | tee -a "$summary"; }
step "$HERE/run.sh" $SYSTEMS
preempt_systems=ysched
case " $SYSTEMS " in *" slurm "*) preempt_systems="ysched slurm" ;; esac
step "$HERE/preempt.sh" $preempt_systems
step "$HERE/acct_stream.sh"
(cd "$ROOT" && cargo build --release --quiet --examples)
step "$ROOT/target/release/examples/report_month"
step "$ROOT/target/release/examples/sched_pass"
step "$ROOT/target/release/examples/pool_bench" 64 20
echo "summary: $summary"
