# Shared by the bench scripts (sourced, not run).

# bench_config DIR: writes DIR/ysched.toml for a daemon with its spool in
# DIR/spool, set up as Slurm's anchor: 4 declared GPUs and 8 schedulable
# CPUs (each job takes 1 CPU), root's jobs allowed.
bench_config() {
    mkdir -p "$1"
    cat > "$1/ysched.toml" <<CONFIG
spool_dir = "$1/spool"
allow_root_jobs = true
cpus = 8
[[gpus]]
type = "gpu"
count = 4
memory = "16GiB"
$(bench_devices "$1")
CONFIG
}

# bench_devices DIR: the devices line of the four GPUs, so that each job's
# cgroup confines it to its own as on a GPU server: the driver's
# /dev/nvidia0-3 where they exist, else (as root) fake nodes with their
# numbers made in DIR/dev; nothing in personal mode, which confines no
# devices.
bench_devices() {
    if [ -c /dev/nvidia0 ] && [ -c /dev/nvidia3 ]; then
        echo 'devices = "/dev/nvidia[0-3]"'
    elif [ "$(id -u)" = 0 ]; then
        mkdir -p "$1/dev"
        for i in 0 1 2 3; do
            [ -c "$1/dev/nvidia$i" ] || mknod -m 666 "$1/dev/nvidia$i" c 195 "$i"
        done
        echo "devices = \"$1/dev/nvidia[0-3]\""
    fi
}

# need_hyperfine: hyperfine on PATH, installed from Debian's packages as
# root where it is missing; else says so and fails (the listing figures
# need it: no silent skip).
need_hyperfine() {
    command -v hyperfine >/dev/null && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get install -y hyperfine >/dev/null 2>&1 \
            || { apt-get update >/dev/null 2>&1 && apt-get install -y hyperfine >/dev/null 2>&1; }
    fi
    command -v hyperfine >/dev/null && return 0
    echo "hyperfine is needed for the listing figures: apt-get install hyperfine" >&2
    return 1
}

# The time now, in seconds with nanoseconds.
now() { date +%s.%N; }

# The median of numbers, one per line on stdin (nothing for none).
median() { sort -n | awk '{v[NR]=$1} END {if (NR) print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# CPU seconds the whole machine spent busy so far (user, nice, system, irq,
# softirq; not idle or iowait), from /proc/stat.
busy() { awk -v hz="$(getconf CLK_TCK)" '$1 == "cpu" {print ($2 + $3 + $4 + $7 + $8) / hz}' /proc/stat; }

# fill_seed BIN_DIR DIR N: makes DIR a daemon's config and spool holding N
# held jobs (submitted by 4 submitters with BIN_DIR's build), once: a
# later call with the same DIR finds it filled and does nothing.
fill_seed() {
    local bin=$1 seed=$2 n=$3
    [ -s "$seed/filled" ] && return 0
    rm -rf "$seed"
    bench_config "$seed"
    YS_CONF=$seed/ysched.toml "$bin/ysctld" >/dev/null || return 1
    echo "filling $n held jobs (4 submitters)"
    for _ in 1 2 3 4; do
        (for _ in $(seq $((n / 4))); do
            YS_CONF=$seed/ysched.toml "$bin/ysbatch" -H -G 1 -t 1 -o /dev/null --wrap true >/dev/null
        done) &
    done
    wait
    kill "$(cat "$seed/spool/ysctld.pid")"
    while [ -e /proc/"$(cat "$seed/spool/ysctld.pid")" ]; do sleep 0.1; done
    echo "$n" > "$seed/filled"
}
