#!/bin/bash
# Checks ysched against a real NVIDIA GPU, as root: what NVML detects, that
# a GPU job gets its GPU and a GPU-less job is denied the device files by
# its cgroup, that utilisation is sampled into the job's accounting, and
# that a process using a held GPU from outside the job is reported.
#
# It needs ysched's binaries, an NVIDIA driver, one free GPU, and a
# python3 with PyTorch (the GPU load; GPU_PYTHON names another python).
# It starts its own ysctld on a scratch spool and stops it at the end.
#
# usage: nvml-check.sh [BIN_DIR [OUT_DIR]]
# BIN_DIR holds the ys* binaries (default: the PATH, as when installed
# from the package). Prints "ok:" or "FAIL:" per check and exits 1 if any
# failed; OUT_DIR gets the daemon log, the jobs' outputs and an HTML report.
set -u
if [ -n "${1:-}" ]; then
    bin=$(cd "$1" && pwd) || exit 2
    export PATH="$bin:$PATH"
else
    export PATH="$PATH:/usr/sbin"
fi
for b in ysctld ysbatch ysqueue ysacct ysinfo ysreport; do
    command -v $b >/dev/null || { echo "nvml-check: $b not found${1:+ in $1}" >&2; exit 2; }
done
command -v nvidia-smi >/dev/null || { echo "nvml-check: nvidia-smi not found: this host has no NVIDIA driver to check" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "nvml-check: run it as root (it starts a system-mode ysctld with cgroups)" >&2; exit 2; }
out=${2:-$(mktemp -d /tmp/ysched-gpu-check.XXXXXX)}
mkdir -p "$out"
py=${GPU_PYTHON:-$(command -v python3)}
failed=0
check() { # check NAME COMMAND...: runs COMMAND, prints ok/FAIL
    local name=$1
    shift
    if "$@"; then echo "ok: $name"; else echo "FAIL: $name"; failed=1; fi
}

echo "== host"
uname -r
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
ls -l /dev/nvidia* 2>&1 | head
grep -E 'cgroup' /proc/mounts
ldconfig -p | grep -q libnvidia-ml.so.1 || export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib:${LD_LIBRARY_PATH:-}

scratch=$(mktemp -d /tmp/ysched-gpu.XXXXXX)
chmod 755 "$scratch"
export YS_CONF="$scratch/ysched.toml"
cat >"$YS_CONF" <<CONF
spool_dir = "$scratch/spool"
allow_root_jobs = true
gpu_sample_secs = 1
CONF

echo "== ysctld --check-config"
ysctld --check-config | tee "$out/check-config.txt"
check "NVML detects the GPUs nvidia-smi lists" \
    grep -q "detected through NVML" "$out/check-config.txt"

# A user for the jobs, so that they run unprivileged; root if useradd fails.
user=root
if id ysgpu >/dev/null 2>&1 || useradd -M -s /bin/sh ysgpu 2>/dev/null; then user=ysgpu; fi
work="$scratch/work"
mkdir -p "$work"
chown "$user" "$work"
as_user() { runuser -u "$user" -- env PATH="$PATH" YS_CONF="$YS_CONF" HOME="$work" "$@"; }

cat >"$work/burn.py" <<'PY'
import os, sys, time
import torch
print("CUDA_VISIBLE_DEVICES=%s" % os.environ.get("CUDA_VISIBLE_DEVICES"))
print("devices=%d" % torch.cuda.device_count())
print("name=%s" % torch.cuda.get_device_name(0))
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn_like(a)
hold = torch.empty(10 << 30, dtype=torch.uint8, device="cuda")  # 10 GiB
end, n = time.time() + float(sys.argv[1]), 0
while time.time() < end:
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
    n += 20
print("products=%d" % n, flush=True)
PY
cat >"$work/denied.py" <<'PY'
import os
print("CUDA_VISIBLE_DEVICES=%r" % os.environ.get("CUDA_VISIBLE_DEVICES"))
try:
    open("/dev/nvidia0", "rb").close()
    print("open /dev/nvidia0: allowed")
except OSError as e:
    print("open /dev/nvidia0: %s" % e.strerror)
os.environ["CUDA_VISIBLE_DEVICES"] = "0"
import torch
print("cuda.is_available=%s" % torch.cuda.is_available())
PY
chown "$user" "$work"/*.py

echo "== ysctld"
ysctld || { echo "FAIL: ysctld did not start"; cat "$scratch/spool/ysctld.log"; exit 1; }
stop() {
    kill "$(cat "$scratch/spool/ysctld.pid")" 2>/dev/null
    cp "$scratch/spool/ysctld.log" "$out/ysctld.log" 2>/dev/null
}
trap stop EXIT
cd "$work"
burn=$(as_user ysbatch --parsable -J burn -G 1 -c 4 --mem 32G -t 5 -D "$work" --wrap "$py burn.py 25")
waiting=$(as_user ysbatch --parsable -J waits -G 1 -c 1 --mem 8G -t 5 -D "$work" --wrap "$py burn.py 3")
denied=$(as_user ysbatch --parsable -J no-gpu -G 0 -c 1 --mem 8G -t 5 -D "$work" --wrap "$py denied.py")
echo "jobs: burn $burn, waits $waiting, no-gpu $denied"
[ -n "$burn" ] && [ -n "$waiting" ] && [ -n "$denied" ] || { echo "FAIL: a submission was refused"; exit 1; }

for _ in $(seq 100); do ysqueue -h -j "$burn" -o %T | grep -q RUNNING && break; sleep 0.2; done
sleep 8
echo "== ysqueue and ysinfo while $burn runs"
ysqueue
ysinfo | tee "$out/ysinfo.txt"
ysinfo --json >"$out/ysinfo.json"
check "ysinfo shows the GPU held by job $burn" grep -q "$burn" "$out/ysinfo.txt"
check "job $waiting waits for the GPU" sh -c "ysqueue -h -j $waiting -o %T | grep -q PENDING"

# A process outside ysched on the GPU that job $burn holds.
"$py" -c 'import torch, time; x = torch.ones(1, device="cuda"); time.sleep(6)' &
intruder=$!
sleep 5
wait "$intruder"

echo "== waiting for the jobs"
for _ in $(seq 300); do ysqueue -h | grep -q . || break; sleep 0.2; done
ysacct -j "$burn,$waiting,$denied" -o JobID,JobName,State,ExitCode,Elapsed,AllocGPUS,GPUUtil,GPUUtilMax,GPUMemMax,GPULowTime,TRESUsageInTot,Cgroup |
    tee "$out/ysacct.txt"
for j in "$burn" "$waiting" "$denied"; do
    cp "$work/ys-$j.out" "$out/" 2>/dev/null
    echo "-- ys-$j.out"
    cat "$work/ys-$j.out"
done
check "job $burn completed" sh -c "ysacct -n -X -j $burn -o State | grep -q COMPLETED"
check "job $burn saw one GPU through CUDA_VISIBLE_DEVICES" grep -q "devices=1" "$work/ys-$burn.out"
check "job $burn's mean utilisation was sampled above 50%" \
    sh -c "ysacct -n -X -P -j $burn -o GPUUtil | awk -F'%' '{ok = \$1 + 0 > 50} END {exit !ok}'"
check "job $burn's peak GPU memory was sampled above 10 GiB" \
    sh -c "ysacct -n -X -P -j $burn -o GPUMemMax | awk '/M\$/ {ok = \$1 + 0 > 10240} /G\$/ {ok = \$1 + 0 > 10} /T\$/ {ok = 1} END {exit !ok}'"
check "job $denied was denied /dev/nvidia0" grep -q "open /dev/nvidia0: Operation not permitted" "$work/ys-$denied.out"
check "job $denied could not use CUDA" grep -q "cuda.is_available=False" "$work/ys-$denied.out"
cp "$scratch/spool/ysctld.log" "$out/ysctld.log"
check "the outside process $intruder was reported" \
    grep -q "used by process $intruder, which is not part of job $burn" "$out/ysctld.log"
check "no process of job $burn was reported" \
    sh -c "! grep 'used by process' '$out/ysctld.log' | grep -v 'process $intruder,'"
ysreport --html "$out/report.html" -S today >/dev/null && echo "report: $out/report.html"
stop
trap - EXIT
echo "== $([ $failed = 0 ] && echo 'all checks passed' || echo 'some checks FAILED'); files in $out"
exit $failed
