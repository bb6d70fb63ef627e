#!/bin/bash
# A first job: shows what ysched gives a job. Submit with: ysbatch hello-gpu.sh
#YS -J hello-gpu
#YS -G 1
#YS -t 1
echo "job $SLURM_JOB_ID ($SLURM_JOB_NAME) of $USER, account $SLURM_JOB_ACCOUNT"
echo "GPUs: CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES on $SLURM_JOB_NODELIST"
echo "running in $PWD, submitted from $SLURM_SUBMIT_DIR"
