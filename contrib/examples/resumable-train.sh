#!/bin/bash
# A preemptible training job: tiny_trainer.py saves a checkpoint on SIGTERM
# and resumes from it, so when an urgent job preempts this one, it loses
# at most one epoch and ends where an uninterrupted run would. Put
# tiny_trainer.py beside this script in the directory you submit from:
#
#   ysbatch -q low resumable-train.sh
#
# YS_RESTART_COUNT (also SLURM_RESTART_COUNT) counts the runs before this
# one. `exec` makes the trainer the job's main process, so it gets the
# SIGTERM itself and its exit is the job's.
#YS -J tiny-train
#YS -G 1
#YS -t 30
#YS --open-mode=append
exec python3 "${TRAINER:-$SLURM_SUBMIT_DIR/tiny_trainer.py}" \
    --epochs "${EPOCHS:-60}" --dir "$SLURM_SUBMIT_DIR/runs/tiny-$SLURM_JOB_ID"
