#!/bin/bash
# Training a YOLO detector (Ultralytics) on two GPUs, resumable: when ysched
# stops the job it sends SIGTERM first and SIGKILL later (kill_wait seconds
# for yscancel and time limits; the QoS's grace_time, default 2 minutes,
# when an urgent job preempts it), so the trap lets Ultralytics finish the
# epoch's last.pt. Preempted, the job is requeued with the same id and
# YS_RESTART_COUNT one higher; `yolo ... resume` then picks up from
# last.pt. Ultralytics saves last.pt at the end of every epoch: an epoch
# longer than the grace loses its progress since the last one. Documented,
# not run in CI (it needs the ultralytics package, a dataset and GPUs);
# resumable-train.sh with tiny_trainer.py is the one the tests run.
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
