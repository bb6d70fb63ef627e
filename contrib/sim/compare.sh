#!/bin/sh
# Replays the public traces in ../shared/traces (or $TRACES) under FIFO and
# under ysched's policy and prints the tables of docs/simulation.md.
#
#   cargo build --release && contrib/sim/compare.sh > /tmp/tables.md
#
# Needs python3 (for the tables). Takes about a minute on two cores.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
ysctld=${YSCTLD:-$root/target/release/ysctld}
traces=${TRACES:-$root/../shared/traces}
nasa=$traces/pwa_nasa_ipsc_1993.csv
alibaba=$traces/alibaba_gpu_v2023_openb_default.csv
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# config GPUS SIZE_WEIGHT -> path of a copy of a100-16.toml with those values
config() {
    out=$work/gpus$1-size$2.toml
    sed -e "s/^count = 16/count = $1/" -e "s/^weight_size = 0/weight_size = $2/" \
        "$root/contrib/sim/a100-16.toml" >"$out"
    echo "$out"
}

# row LABEL GPUS SIZE_WEIGHT POLICY ARGS...: one table row
row() {
    label=$1 gpus=$2 size=$3 policy=$4
    shift 4
    "$ysctld" simulate -f "$(config "$gpus" "$size")" --policy "$policy" --json "$@" |
        LABEL=$label python3 "$work/row.py"
}

cat >"$work/row.py" <<'PY'
import json, os, sys

r = json.load(sys.stdin)


def t(s):
    if s >= 86400:
        return "%.1f d" % (s / 86400)
    if s >= 3600:
        return "%.1f h" % (s / 3600)
    return "%.0f min" % (s / 60)


def size(k, f):
    return t(r["by_size"][k][f]) if k in r["by_size"] else "-"


cells = [
    os.environ["LABEL"],
    "%.1f %%" % (r["utilization"] * 100),
    "%.1f %%" % (r["utilization_while_waiting"] * 100),
    t(r["wait_mean_s"]), t(r["wait_p50_s"]), t(r["wait_p95_s"]),
    "%.0f" % r["bounded_slowdown_mean"], "%.3f" % r["jain_fairness_daily"],
    str(r["backfilled_jobs"]),
    size("1 GPU", "wait_mean_s"), size("2-4 GPUs", "wait_mean_s"),
    size("5-16 GPUs", "wait_mean_s"), size("5-16 GPUs", "wait_p95_s"),
    "%.1f s" % r["elapsed_s"],
]
print("| " + " | ".join(cells) + " |")
PY

header() {
    echo
    echo "### $1"
    echo
    echo "| policy | util. | util. while jobs wait | wait mean | p50 | p95 | bsld | Jain/day | backfilled | 1 GPU mean | 2-4 mean | 5-16 mean | 5-16 p95 | replay |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
}

for scale in 1 1.5 2; do
    header "NASA iPSC, 16 GPUs (8 processors = 1 GPU), arrivals x$scale, accounts = groups"
    for p in fifo ysched; do
        row "$p" 16 0 "$p" --trace "$nasa" --procs-per-gpu 8 --arrival-scale "$scale"
    done
    row "ysched, weight_size 10000" 16 10000 ysched --trace "$nasa" --procs-per-gpu 8 --arrival-scale "$scale"
done

header "NASA iPSC, 16 GPUs, arrivals x2, accounts = users (69 accounts)"
for p in fifo ysched; do
    row "$p" 16 0 "$p" --trace "$nasa" --procs-per-gpu 8 --arrival-scale 2 --accounts-from user
done

header "NASA iPSC, 64 GPUs (2 processors = 1 GPU), arrivals x2"
for p in fifo ysched; do
    row "$p" 64 0 "$p" --trace "$nasa" --procs-per-gpu 2 --arrival-scale 2
done

for gpus in 32 40 48; do
    header "Alibaba GPU 2023 (openb), $gpus GPUs, accounts = QoS classes"
    for p in fifo ysched; do
        row "$p" "$gpus" 0 "$p" --trace "$alibaba"
    done
    row "ysched, weight_size 10000" "$gpus" 10000 ysched --trace "$alibaba"
done
