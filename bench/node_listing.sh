#!/usr/bin/env bash
# A listing on a pool's node against the same listing on the controller,
# interleaved, in the same run: `ysqueue` (and `ysacct -a`) over N held
# jobs, asked on the controller and on a node joined on loopback (its
# own ysnoded, state and cgroup parent), with the user's token, so that
# both answer the same rows.
#
# usage: bench/node_listing.sh BIN_DIR [N]   (as root)
#   BIN_DIR  ysctld, ysnoded, ysbatch, ysqueue, ysacct, yscontrol, ystoken
#   N        held jobs (default 100000)
# env: RUNS=5 (hyperfine runs per command and side), WORK=/tmp/ysched-node-listing
# Prints hyperfine's mean per command and side, and the node's ratio.
set -uo pipefail
BIN=$(cd "${1:?usage: bench/node_listing.sh BIN_DIR [N]}" && pwd)
N=${2:-100000}
RUNS=${RUNS:-5}
WORK=${WORK:-/tmp/ysched-node-listing}
PORT=${PORT:-16820}
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
need_hyperfine || exit 1
[ "$(id -u)" = 0 ] || { echo "run as root: the node's agent is root's" >&2; exit 1; }

seed=$WORK/seed-$N
fill_seed "$BIN" "$seed" "$N" || exit 1
rm -rf "${WORK:?}/ctl" "$WORK/node"
cp -a "$seed" "$WORK/ctl"
sed -i "s|$seed|$WORK/ctl|" "$WORK/ctl/ysched.toml"
printf '[pool]\nlisten = "127.0.0.1:%s"\n' "$PORT" >> "$WORK/ctl/ysched.toml"
mkdir -p "$WORK/node"
cat > "$WORK/node/ysched.toml" <<CONFIG
spool_dir = "$WORK/node/state"
node_name = "benchnode"
cgroup_parent = "ysbench-node"
cpus = 8
[[gpus]]
type = "gpu"
count = 4
memory = "16GiB"
CONFIG
export YS_CONF=$WORK/ctl/ysched.toml
"$BIN/ysctld" >/dev/null || exit 1
agent=""
cleanup() {
    [ -n "$agent" ] && kill "$agent" 2>/dev/null && wait "$agent" 2>/dev/null
    kill "$(cat "$WORK/ctl/spool/ysctld.pid")" 2>/dev/null
}
trap cleanup EXIT
read -r -a line < <("$BIN/yscontrol" node add benchnode | grep -- --join)
YS_CONF=$WORK/node/ysched.toml "$BIN/ysnoded" --join-only "${line[@]:1}" >/dev/null || exit 1
YS_CONF=$WORK/node/ysched.toml "$BIN/ysnoded" >"$WORK/node/log" 2>&1 &
agent=$!
for _ in $(seq 100); do
    "$BIN/ysinfo" -N -h -o '%N %t' 2>/dev/null | grep -q '^benchnode idle' && break
    sleep 0.2
done
SLURM_JWT=$("$BIN/ystoken" --audience node --lifespan 3600 | sed 's/^SLURM_JWT=//')
export SLURM_JWT
on_node() { YS_CONF=$WORK/node/ysched.toml "$@"; }
[ "$("$BIN/ysqueue" -h | wc -l)" = "$(on_node "$BIN/ysqueue" -h | wc -l)" ] \
    || { echo "the node's listing differs from the controller's" >&2; exit 1; }

echo "# $(date -u +%FT%TZ) $(hostname -s) nproc=$(nproc) N=$N"
for command in "ysqueue" "ysacct -a"; do
    read -r -a argv <<< "$command"
    hyperfine -N -w 1 -r "$RUNS" --export-json "$WORK/hf.json" \
        -n controller "env YS_CONF=$WORK/ctl/ysched.toml $BIN/${argv[*]}" \
        -n node "env YS_CONF=$WORK/node/ysched.toml $BIN/${argv[*]}" >/dev/null 2>&1 \
        || { echo "hyperfine failed on $command" >&2; exit 1; }
    python3 - "$WORK/hf.json" "$command" <<'PY'
import json, sys
r = {x["command"]: x["mean"] * 1000 for x in json.load(open(sys.argv[1]))["results"]}
print(f"{sys.argv[2]}: controller {r['controller']:.0f} ms, node {r['node']:.0f} ms, node/controller {r['node'] / r['controller']:.2f}")
PY
done
