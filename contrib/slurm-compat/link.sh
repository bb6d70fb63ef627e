#!/bin/sh
# Makes DIR hold Slurm's command names as links to ysched-slurm, for PATH.
# usage: link.sh DIR [PATH-TO-ysched-slurm]   (default: the one on PATH)
set -eu
dir=${1:?usage: link.sh DIR [ysched-slurm]}
bin=${2:-$(command -v ysched-slurm)} || { echo "link.sh: ysched-slurm is not on PATH; give its path" >&2; exit 1; }
mkdir -p "$dir"
for name in sbatch salloc squeue scancel sacct sshare sinfo scontrol srun sacctmgr seff; do
    ln -sfn "$bin" "$dir/$name"
done
echo "linked sbatch salloc squeue scancel sacct sshare sinfo scontrol srun sacctmgr seff in $dir to $bin"
