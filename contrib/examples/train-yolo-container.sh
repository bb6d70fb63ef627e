#!/bin/bash
# YOLO training in the team's pinned image: the same PyTorch, CUDA and
# OpenCV on every server, whatever each has installed.
#SBATCH -J yolo-container
#SBATCH --gres=gpu:2
#SBATCH -c 16 --mem=64G
#SBATCH -t 12:00:00
#SBATCH --container-image=yolo:v8.2.1-cu12.1
#SBATCH --container-mounts=/datasets/coco:/data:ro,/scratch/runs:/runs
#SBATCH --container-workdir=/runs

# Inside: CUDA_VISIBLE_DEVICES names the job's two GPUs, the only ones
# the container can see.
echo "image: $(cat /etc/os-release 2>/dev/null | head -1), GPUs: $CUDA_VISIBLE_DEVICES"
yolo detect train data=/data/coco.yaml model=yolov8s.pt epochs=100 \
    device="$CUDA_VISIBLE_DEVICES" project=/runs name="job-$SLURM_JOB_ID"
