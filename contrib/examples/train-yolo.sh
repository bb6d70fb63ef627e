#!/bin/bash
# Training a YOLO detector on two GPUs, resumable: when ysched stops the job
# (yscancel, time limit) it sends SIGTERM first and SIGKILL kill_wait seconds
# later, so the trap saves a checkpoint in time. Ultralytics' `resume=True`
# picks up from the last checkpoint when the job runs again.
#SBATCH --job-name=yolov8s-coco
#SBATCH --gres=gpu:2
#SBATCH --cpus-per-task=8
#SBATCH --mem=32G
#SBATCH --time=1-00:00:00
#SBATCH --output=logs/%x-%j.out

set -euo pipefail
run_dir=runs/detect/$SLURM_JOB_NAME
trap 'echo "stopping: checkpoint is in $run_dir/weights/last.pt"; kill -TERM "$trainer"; wait "$trainer"' TERM

if [ -f "$run_dir/weights/last.pt" ]; then
    yolo detect train resume model="$run_dir/weights/last.pt" &
else
    yolo detect train data=coco.yaml model=yolov8s.pt epochs=300 imgsz=640 \
        device="$CUDA_VISIBLE_DEVICES" project=runs/detect name="$SLURM_JOB_NAME" exist_ok=True &
fi
trainer=$!
wait "$trainer"
