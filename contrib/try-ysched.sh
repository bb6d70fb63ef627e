#!/bin/sh
# Runs ysched end to end in personal mode: no root, no GPU. It writes a
# config with four declared (fake) GPUs into a scratch directory, starts
# ysctld, submits a sample job, shows it in ysqueue and ysacct, prints its
# output, and stops the daemon.
#
# usage: contrib/try-ysched.sh [BIN_DIR]   (default: target/release)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "${1:-$here/target/release}" 2>/dev/null && pwd) || { echo "try-ysched: no directory ${1:-$here/target/release}; build first: cargo build --release" >&2; exit 1; }
for b in ysctld ysstepd ysbatch ysqueue ysacct; do
    [ -x "$bin/$b" ] || { echo "try-ysched: $bin/$b not found; build first: cargo build --release" >&2; exit 1; }
done
scratch=$(mktemp -d "${TMPDIR:-/tmp}/ysched-try.XXXXXX")
export YS_CONF="$scratch/ysched.toml"
# A cgroup subtree of its own: run as root on a server with a system
# ysctld, this daemon must never take that one's jobs for its leftovers.
cgroup_parent="ysched-try-${scratch##*.}"
cat > "$YS_CONF" <<CONF
spool_dir = "$scratch/spool"
cgroup_parent = "$cgroup_parent"
# root may try it too; a real server leaves this false
allow_root_jobs = true
[[gpus]]
type = "a100"
count = 4
memory = "80GiB"
CONF
export PATH="$bin:$PATH"
stop() {
    if [ -f "$scratch/spool/ysctld.pid" ]; then
        pid=$(cat "$scratch/spool/ysctld.pid")
        kill "$pid" 2>/dev/null || true
        i=0
        while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    fi
    # Its (empty) cgroup subtree, where it could make one.
    for d in /sys/fs/cgroup/*/"$cgroup_parent" /sys/fs/cgroup/"$cgroup_parent"; do
        [ -d "$d" ] && rmdir "$d" 2>/dev/null || true
    done
}
trap stop EXIT

echo "== ysctld (personal mode unless run as root), config $YS_CONF"
ysctld
cd "$scratch"
echo "== ysbatch: a job on all four GPUs, then hello-gpu.sh, which waits for one"
ysbatch -J all-gpus -G 4 -t 1 --wrap "sleep 1"
job=$(ysbatch --parsable "$here/contrib/examples/hello-gpu.sh")
echo "== ysqueue"
ysqueue
while ysqueue -h | grep -q .; do sleep 0.1; done
echo "== ysacct"
ysacct -S today
echo "== output of job $job (ys-$job.out)"
cat "ys-$job.out"
echo "== done; files are in $scratch"
