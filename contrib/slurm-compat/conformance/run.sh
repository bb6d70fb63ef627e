#!/usr/bin/env bash
# Runs Slurm 22.05.8's own python test suite (atf, local-config mode)
# against ysched's Slurm names, and writes a per-test result table.
#
# usage (as root): run.sh [--suite DIR] [--bin DIR] [--out DIR] [PYTEST-ARGS...]
#   --suite  Slurm's testsuite/python (default: fetch.sh into target/slurm-src)
#   --bin    where ysctld and ysched-slurm are (default: target/debug)
#   --out    where results go (default: target/conformance)
#   PYTEST-ARGS  narrow the run, e.g. tests/commands/squeue
#
# It starts its own ysctld in a fresh directory, writes the slurm.conf
# atf reads with `ysctld export-slurm`, a testsuite.conf, and gives a test
# user what a Slurm site gives its users: the Slurm names on PATH (an
# /etc/profile.d entry, as sites install one for /opt/slurm/bin) and
# password-less sudo (atf runs some commands as root through it). Both
# entries are removed on exit. No test and no part of atf is changed;
# the files scope.tsv leaves out are not collected.
#
# Exit status: 0 when every test in expected-pass.txt passed, 1 when one
# of them did not (a regression), 2 when the run could not be set up.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
suite="" bin="$repo/target/debug" out="$repo/target/conformance"
while [ $# -gt 0 ]; do
    case "$1" in
        --suite) suite=$2; shift 2 ;;
        --bin) bin=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) break ;;
    esac
done
fail() { echo "conformance: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || fail "run as root: it adds a test user, a sudoers entry and a profile entry"
for tool in sudo pytest-3 runuser useradd; do
    command -v "$tool" >/dev/null || fail "$tool is missing (Debian: apt-get install sudo python3-pytest python3-py)"
done
/usr/bin/python3 -c 'import py.io' 2>/dev/null || fail "python3-py is missing (atf's conftest imports py.io)"
[ -x "$bin/ysctld" ] && [ -x "$bin/ysched-slurm" ] || fail "no ysctld or ysched-slurm in $bin (cargo build first)"
bin=$(cd "$bin" && pwd)
[ -n "$suite" ] || suite=$("$here/fetch.sh" "$repo/target/slurm-src")
[ -f "$suite/lib/atf.py" ] || fail "$suite is not Slurm's testsuite/python (no lib/atf.py)"

user=ysatf
id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
# The exported slurm.conf names SlurmUser=slurm; atf reads the config as it.
id slurm >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin slurm

work=$(mktemp -d /tmp/ysched-conformance.XXXXXX)
chmod 755 "$work"
sudoers=/etc/sudoers.d/ysched-conformance
profile=/etc/profile.d/ysched-conformance.sh
daemon=""
# Keeps the run's own exit status: a step of the clean-up that fails must
# not turn a passing run into a failing one (under set -e, a failing last
# command of an && list in a trap ends the script with its status).
cleanup() {
    local status=$?
    if [ -n "$daemon" ]; then
        kill -TERM "$daemon" 2>/dev/null || true
        wait "$daemon" 2>/dev/null || true
    fi
    pkill -u "$user" 2>/dev/null || true
    rm -f "$sudoers" "$profile"
    # The jobs' supervisors may still be removing their own cgroups while
    # find walks the tree: a directory gone under it is not an error here.
    for h in /sys/fs/cgroup /sys/fs/cgroup/*; do
        [ -d "$h/ysched-conformance" ] || continue
        find "$h/ysched-conformance" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    done
    rm -rf "$work" || true
    exit "$status"
}
trap cleanup EXIT

# The controller: one node, as a single GPU server, with declared GPUs.
shims="$work/bin"
mkdir -p "$shims" "$work/etc"
"$here/../link.sh" "$shims" "$bin/ysched-slurm" >/dev/null
node=$(hostname -s)
cat >"$work/ysched.toml" <<CONF
spool_dir = "$work/spool"
node_name = "$node"
kill_wait = 2
cpus = 8
memory = "16GiB"
cgroup_parent = "ysched-conformance"
# Slurm's SlurmUser administers slurmctld; the exported slurm.conf names
# it slurm, and atf runs admin commands (scontrol reconfigure) as it.
admins = ["slurm"]
CONF
chmod 644 "$work/ysched.toml"
"$bin/ysctld" --foreground --config "$work/ysched.toml" >"$work/ysctld.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do
    grep -q "ysctld ready" "$work/ysctld.log" && break
    kill -0 "$daemon" 2>/dev/null || { cat "$work/ysctld.log" >&2; fail "ysctld did not start"; }
    sleep 0.1
done
grep -q "ysctld ready" "$work/ysctld.log" || fail "ysctld was not ready within 10 s"
YS_CONF="$work/ysched.toml" "$bin/ysctld" export-slurm "$work/etc" >/dev/null
chmod -R a+rX "$work/etc"

cat >"$work/testsuite.conf" <<CONF
SlurmInstallDir=/usr
SlurmConfigDir=$work/etc
CONF
cat >"$profile" <<PROFILE
# Slurm's command names for this conformance run (ysched's compat layer).
export PATH="$shims:$bin:\$PATH"
export YS_CONF="$work/ysched.toml"
export SLURM_CONF="$work/etc/slurm.conf"
PROFILE
printf '%s ALL=(ALL) NOPASSWD: ALL\nDefaults:%s !requiretty\n' "$user" "$user" >"$sudoers"
chmod 440 "$sudoers"

# The suite, where the test user may write its temporary files.
cp -r "$suite" "$work/atf"
chown -R "$user" "$work/atf"
# Every test file of the suite is in scope.tsv, in or out.
unlisted=$(cd "$suite" && find tests -name 'test_*.py' | sort \
    | comm -23 - <(grep -v '^#' "$here/scope.tsv" | cut -f1 | sort))
[ -z "$unlisted" ] || fail "test files missing from scope.tsv: $unlisted"
deselect=()
while IFS=$'\t' read -r path scope _reason; do
    case "$path" in ''|'#'*) continue ;; esac
    [ "$scope" = out ] && deselect+=(--ignore="$path")
done <"$here/scope.tsv"
targets=("$@") partial=(--partial)
[ ${#targets[@]} -gt 0 ] || { targets=(tests); partial=(); }

mkdir -p "$out"
set +e
(cd "$work/atf" && runuser -u "$user" -- env -i HOME="/home/$user" USER="$user" LOGNAME="$user" \
    PATH="$shims:$bin:/usr/local/bin:/usr/bin:/bin" YS_CONF="$work/ysched.toml" \
    SLURM_CONF="$work/etc/slurm.conf" SLURM_TESTSUITE_CONF="$work/testsuite.conf" \
    timeout 2400 pytest-3 -v -rfE -p no:cacheprovider --junitxml="$work/atf/junit.xml" \
    "${deselect[@]}" "${targets[@]}") >"$out/pytest.log" 2>&1
set -e
cp "$work/atf/junit.xml" "$out/junit.xml" 2>/dev/null || fail "pytest wrote no results; see $out/pytest.log"
cp "$work/ysctld.log" "$out/ysctld.log"
/usr/bin/python3 "$here/table.py" "$out/junit.xml" "$here/expected-pass.txt" "$out/results.tsv" "${partial[@]}"
