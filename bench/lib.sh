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
devices = "/dev/nvidia[0-3]"
CONFIG
}
