#!/usr/bin/env bash
# Installs the package on this (disposable) machine, runs jobs through the
# installed binaries, then upgrades to a second package while a job runs:
# the job must finish and be accounted, the database and the edited config
# kept. Root only. usage: packaging/deb/smoke.sh OLD.deb NEW.deb
set -euo pipefail
OLD=$1 NEW=$2
[ "$(id -u)" = 0 ] || { echo "smoke.sh: run as root" >&2; exit 1; }
user=ysched-smoke
work=/tmp/ysched-smoke-work
say() { echo "smoke: $*"; }
fail() { echo "smoke: FAILED: $*" >&2; exit 1; }
as_user() { runuser -u "$user" -- sh -c "cd $work && $*"; }
state() { ysacct -j "$1" -n -P -o State | head -1; }
wait_state() {  # ID STATE
    for _ in $(seq 150); do [ "$(state "$1")" = "$2" ] && return 0; sleep 0.2; done
    fail "job $1 is $(state "$1"), not $2"
}
stop_daemon() {
    pkill -TERM -x ysctld || true
    for _ in $(seq 100); do pgrep -x ysctld >/dev/null || return 0; sleep 0.1; done
    fail "ysctld did not stop"
}
cleanup() {
    pkill -TERM -x ysctld 2>/dev/null || true
    dpkg --purge ysched >/dev/null 2>&1 || true
    userdel -r "$user" >/dev/null 2>&1 || true
    rm -rf /var/spool/ysched "$work" /etc/ysched
}
trap cleanup EXIT
cleanup

dpkg -i "$OLD" >/dev/null
for f in /usr/sbin/ysctld /usr/sbin/ysstepd /usr/sbin/ysnoded /usr/bin/ysbatch /usr/bin/ysinfo \
         /usr/lib/ysched/slurm-compat/sbatch /lib/systemd/system/ysctld.service \
         /lib/systemd/system/ysnoded.service \
         /usr/share/man/man1/ysbatch.1.gz /usr/share/man/man5/ysched.toml.5.gz; do
    [ -e "$f" ] || fail "$f not installed"
done
# Valid (exit 0), with warnings (3), or with errors that are this
# machine's (4: no /dev/nvidia* here); 1 would be a config that does not parse.
checked=0
/usr/sbin/ysctld --check-config /etc/ysched/ysched.toml >/dev/null 2>&1 || checked=$?
case $checked in 0|3|4) ;; *) fail "the packaged config does not check (exit $checked)" ;; esac
say "installed $(dpkg-query -W -f='${Version}' ysched); the packaged config checks"

# This machine's config: two declared GPUs (an edit the upgrade must keep).
cat > /etc/ysched/ysched.toml <<CONF
spool_dir = "/var/spool/ysched"
gpu_sample_secs = 0
[[gpus]]
type = "t4"
count = 2
memory = "16G"
CONF
useradd -m "$user"
install -d -o "$user" "$work"
ysctld >/dev/null || fail "ysctld did not start"
first=$(as_user "ysbatch --parsable -G 1 --wrap 'echo hello from \$SLURM_JOB_ID'")
wait_state "$first" COMPLETED
grep -q "hello from $first" "$work/ys-$first.out" || fail "job output"
ysinfo -h -o gpu,type,state | grep -q "^0 *t4 *idle" || fail "ysinfo: $(ysinfo)"
out=$(as_user "PATH=/usr/lib/ysched/slurm-compat:\$PATH sbatch --wrap true")
case "$out" in "Submitted batch job "*) ;; *) fail "sbatch printed: $out" ;; esac
say "jobs run through the installed ysctld, ysbatch, ysinfo and sbatch"

# Upgrade while a job runs: stop the daemon as the unit would
# (KillMode=process: the job lives on), install, start the new one.
running=$(as_user "ysbatch --parsable --wrap 'sleep 4; echo survived'")
wait_state "$running" RUNNING
stop_daemon
dpkg -i "$NEW" >/dev/null
[ "$(dpkg-query -W -f='${Version}' ysched)" != "$(dpkg-deb -f "$OLD" Version)" ] || fail "version did not change"
grep -q 't4' /etc/ysched/ysched.toml || fail "the edited config was replaced"
ysctld >/dev/null || fail "the upgraded ysctld did not start"
wait_state "$running" COMPLETED
grep -q survived "$work/ys-$running.out" || fail "the running job's output"
[ "$(state "$first")" = COMPLETED ] || fail "the database lost job $first"
say "upgraded to $(dpkg-query -W -f='${Version}' ysched) with job $running running: it finished and is accounted"
stop_daemon
say "ok"
