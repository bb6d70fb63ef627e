#!/bin/sh
# Rigid against elastic quotas on the public traces in ../shared/traces (or
# $TRACES): each account guaranteed a share of the GPUs (max_gpus), first
# as a hard cap, then with a borrow_limit up to the whole pool (idle
# guarantees lent, reclaimed by preemption), and without quotas at all.
# Prints the tables of docs/simulation.md's "Elastic quotas".
#
#   cargo build --release && contrib/sim/elastic.sh > /tmp/elastic.md
#
# Needs python3 (for the tables). Takes a few minutes on two cores.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
ysctld=${YSCTLD:-$root/target/release/ysctld}
traces=${TRACES:-$root/../shared/traces}
nasa=$traces/pwa_nasa_ipsc_1993.csv
alibaba=$traces/alibaba_gpu_v2023_openb_default.csv
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# config NAME GPUS MODE ACCOUNT=GUARANTEE... -> a copy of a100-16.toml with
# that many GPUs and the accounts: MODE none (no limits), rigid (max_gpus)
# or elastic (max_gpus and borrow_limit = the rest of the pool).
config() {
    name=$1 gpus=$2 mode=$3
    shift 3
    out=$work/$name-$mode.toml
    sed -e "s/^count = 16/count = $gpus/" "$root/contrib/sim/a100-16.toml" >"$out"
    for pair in "$@"; do
        account=${pair%%=*} guarantee=${pair#*=}
        printf '\n[[accounts]]\nname = "%s"\nusers = ["*"]\n' "$account" >>"$out"
        case $mode in
        rigid) printf 'max_gpus = %s\n' "$guarantee" >>"$out" ;;
        elastic) printf 'max_gpus = %s\nborrow_limit = %s\n' "$guarantee" "$((gpus - guarantee))" >>"$out" ;;
        esac
    done
    echo "$out"
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


cells = [
    os.environ["LABEL"],
    "%.1f %%" % (r["utilization"] * 100),
    "%.1f %%" % (r["utilization_while_waiting"] * 100),
    t(r["wait_mean_s"]), t(r["wait_p95_s"]),
]
for a in os.environ["ACCOUNTS"].split():
    s = r["accounts"].get(a)
    cells.append(t(s["wait_mean_s"]) if s else "-")
cells += [str(r["preempted_jobs"]), str(r["reclaimed_jobs"]), "%.1f s" % r["elapsed_s"]]
print("| " + " | ".join(cells) + " |")
PY

# table TITLE NAME GPUS TRACE_ARGS -- ACCOUNT=GUARANTEE...
table() {
    title=$1 name=$2 gpus=$3 args=$4
    shift 4
    accounts=""
    for pair in "$@"; do accounts="$accounts ${pair%%=*}"; done
    echo
    echo "### $title"
    echo
    printf '| quotas | util. | util. while jobs wait | wait mean | p95 |'
    for a in $accounts; do printf ' %s wait |' "$a"; done
    echo ' preempted | reclaimed | replay |'
    printf '|---|---|---|---|---|'
    for a in $accounts; do printf -- '---|'; done
    echo '---|---|---|'
    for mode in none rigid elastic; do
        # shellcheck disable=SC2086 # the trace arguments are words
        "$ysctld" simulate -f "$(config "$name" "$gpus" "$mode" "$@")" --json $args |
            LABEL=$mode ACCOUNTS=$accounts python3 "$work/row.py"
    done
}

table "NASA iPSC, 16 GPUs (8 processors = 1 GPU), arrivals x1.5, two groups guaranteed 8 each" \
    nasa 16 "--trace $nasa --procs-per-gpu 8 --arrival-scale 1.5" g1=8 g2=8
table "NASA iPSC, 16 GPUs, arrivals x1.5, the heavy group guaranteed 12, the light one 4" \
    nasa12 16 "--trace $nasa --procs-per-gpu 8 --arrival-scale 1.5" g1=12 g2=4
table "Alibaba GPU 2023 (openb), 48 GPUs, accounts = QoS classes, guarantees 24/16/4/4" \
    alibaba 48 "--trace $alibaba" LS=24 BE=16 Burstable=4 Guaranteed=4
