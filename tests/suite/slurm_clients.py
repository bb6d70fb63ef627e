#!/usr/bin/env python3
"""Drives ysched's Slurm commands with the exact command lines and job
scripts of four unmodified Slurm client libraries, as read from their
releases: snakemake-executor-plugin-slurm 2.8 (snakemake 9), parsl's
SlurmProvider, submitit 1.5 and dask-jobqueue 0.9. Standard library only,
so CI needs none of them installed; each step says which library does it.

Run by tests/suite/slurm_compat.rs with PATH holding the shims and YS_CONF naming
a running ysctld's config; argv[1] is a work directory. Exits non-zero
with the reason on the first surprise, prints "ok" at the end."""

import datetime
import getpass
import os
import re
import shlex
import subprocess
import sys
import time
import uuid

WORK = sys.argv[1]
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED")


def run(cmd, shell=False, check=True, stdin=None):
    p = subprocess.run(cmd, shell=shell, input=stdin, capture_output=True, text=True, timeout=60)
    if check and p.returncode != 0:
        sys.exit(f"{cmd!r} exited {p.returncode}: {p.stdout}{p.stderr}")
    return p


def wait_for(what, condition, deadline=45):
    end = time.time() + deadline
    while time.time() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    sys.exit(f"timed out waiting for {what}")


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def snakemake():
    user = getpass.getuser()
    # accounts.py: the account is checked with sacctmgr, then sshare.
    out = run(shlex.split(f'sacctmgr -n -s list user "{user}" format=account%256')).stdout
    accounts = {a.strip().lower() for a in out.split("\n") if a}
    if "default" not in accounts:
        sys.exit(f"sacctmgr gave accounts {accounts!r}")
    out = run(shlex.split("sshare -U --format Account%256 --noheader")).stdout
    if "default" not in {a.strip().lower() for a in out.split("\n") if a}:
        sys.exit(f"sshare -U gave {out!r}")
    run(["scontrol", "show", "config"])
    run_uuid = str(uuid.uuid4())
    logs = os.path.join(WORK, ".snakemake/slurm_logs/rule_make/a")
    os.makedirs(logs, exist_ok=True)
    target = os.path.join(WORK, "snakemake-a.txt")
    # The jobstep plugin runs the rule through srun inside the job.
    step = f"srun -n1 --cpu-bind=q --cpus-per-task=1 --nodes=1 sh -c 'echo a > {target}'"
    call = (
        f"sbatch --parsable --job-name {run_uuid} --output '{logs}/%j.log' --export=ALL "
        f"--comment rule_make_wildcards_a -A default -p ysched -t 5 --mem 1000 --ntasks=1 "
        f"--cpus-per-task=1 -D {WORK} --wrap={shlex.quote(step)}"
    )
    out = run(call, shell=True).stdout.strip()
    jobid = out.split(";")[0]
    if not jobid.isdigit():
        sys.exit(f"sbatch --parsable printed {out!r}")
    start = (datetime.datetime.now() - datetime.timedelta(days=2)).strftime("%Y-%m-%dT%H:00")
    sacct = (
        f"sacct -X --parsable2 --clusters all --noheader --format=JobIdRaw,State "
        f"--starttime {start} --endtime now --name {run_uuid}"
    )

    def done():
        rows = dict(line.split("|")[:2] for line in run(sacct, shell=True).stdout.splitlines() if "|" in line)
        state = rows.get(jobid, "")
        return state if state in FINAL else None

    state = wait_for("the snakemake job", done)
    if state != "COMPLETED" or open(target).read() != "a\n":
        sys.exit(f"snakemake job {jobid}: {state}; log: {open(os.path.join(logs, jobid + '.log')).read()}")


def parsl():
    # __init__: sacct works, so sacct is the status command.
    run("sacct -X", shell=True)
    name = f"parsl.ys.block-0.{time.time()}"
    scripts = os.path.join(WORK, "runinfo/000/submit_scripts")
    script = write(os.path.join(scripts, name), f"""#!/bin/bash

#SBATCH --job-name={name}
#SBATCH --output={scripts}/{name}.stdout
#SBATCH --error={scripts}/{name}.stderr
#SBATCH --nodes=1
#SBATCH --time=10
#SBATCH --ntasks-per-node=1

#SBATCH --exclusive

export JOBNAME="{name}"
set -e
export CORES=$(getconf _NPROCESSORS_ONLN)
[[ "1" == "1" ]] && echo "Found cores : $CORES"
sleep 30
""")
    out = run(f"sbatch {script}", shell=True).stdout
    m = re.search(r"Submitted batch job (\d+)", out)
    if not m:
        sys.exit(f"sbatch printed {out!r}")
    job = m.group(1)
    status = f"sacct -X --noheader --format=jobid,state%20 --job '{job}'"

    def state():
        for line in run(status, shell=True).stdout.split("\n"):
            if line:
                job_id, slurm_state, *ignore = line.split()
                if job_id == job:
                    return slurm_state
        return None

    wait_for("parsl's block to run", lambda: state() == "RUNNING")
    # The fallback status command, as parsl builds it.
    out = run(f"squeue --noheader --format='%i %t' --job '{job}'", shell=True).stdout.split()
    if out != [job, "R"]:
        sys.exit(f"squeue fallback printed {out!r}")
    run(f"scancel {job}", shell=True)
    wait_for("parsl's block to be cancelled", lambda: state() == "CANCELLED")


def submitit():
    folder = os.path.join(WORK, "submitit")
    os.makedirs(folder, exist_ok=True)
    marker = os.path.join(WORK, "submitit-usr2")
    # The step is what submitit runs under srun: its handler gets USR2 at
    # the warning time, and the batch shell must not be killed by it.
    step = (
        f"python3 -u -c 'import signal,sys,time\n"
        f"signal.signal(signal.SIGUSR2, lambda *a: (open(\"{marker}\", \"w\").write(\"got\"), sys.exit(0)))\n"
        f"time.sleep(50)'"
    )
    jobs = []
    for i in range(3):
        script = write(os.path.join(folder, f".submission_file_{uuid.uuid4().hex}.sh"), f"""#!/bin/bash

# Parameters
#SBATCH --error={folder}/%j/%j_0_log.err
#SBATCH --job-name=submitit
#SBATCH --nodes=1
#SBATCH --open-mode=append
#SBATCH --output={folder}/%j/%j_0_log.out
#SBATCH --partition=ysched
#SBATCH --signal=USR2@{58 if i == 0 else 90}
#SBATCH --time={1 if i == 0 else 2}
#SBATCH --wckey=submitit

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered --output {folder}/%j/%j_%t_log.out --error {folder}/%j/%j_%t_log.err {step if i == 0 else "echo done"}
""")
        out = run(["sbatch", script]).stdout
        m = re.search(r"job (\d+)", out)
        if not m:
            sys.exit(f"sbatch printed {out!r}")
        jobs.append(m.group(1))
        # submitit makes the job's folder once it knows the id; the job
        # may have started already.
        time.sleep(0.05)
        os.makedirs(os.path.join(folder, m.group(1)), exist_ok=True)

    def states():
        cmd = ["sacct", "-o", "JobID,State,NodeList", "--parsable2"]
        for j in jobs:
            cmd.extend(["-j", j])
        lines = run(cmd).stdout.splitlines()
        if lines[0] != "JobID|State|NodeList":
            sys.exit(f"sacct header {lines[0]!r}")
        return {l.split("|")[0]: l.split("|")[1] for l in lines[1:]}

    final = wait_for("submitit's jobs", lambda: (lambda s: s if all(s.get(j) in FINAL for j in jobs) else None)(states()))
    if any(final[j] != "COMPLETED" for j in jobs):
        logs = {j: open(os.path.join(folder, j, f"{j}_0_log.err")).read() for j in jobs if os.path.exists(os.path.join(folder, j, f"{j}_0_log.err"))}
        sys.exit(f"submitit jobs ended {final!r}: {logs!r}")
    if not os.path.exists(marker):
        sys.exit("the step never got SIGUSR2 at its warning time")
    for j in jobs[1:]:
        if open(os.path.join(folder, j, f"{j}_0_log.out")).read().strip() != "done":
            sys.exit(f"submitit job {j} wrote nothing to its step's output")


def dask_jobqueue():
    logs = os.path.join(WORK, "dask-logs")
    os.makedirs(logs, exist_ok=True)
    jobs = []
    for _ in range(2):
        script = write(os.path.join(WORK, f"tmp{uuid.uuid4().hex[:8]}.sh"), f"""#!/usr/bin/env bash

#SBATCH -J dask-worker
#SBATCH -e {logs}/dask-worker-%J.err
#SBATCH -o {logs}/dask-worker-%J.out
#SBATCH -n 1
#SBATCH --cpus-per-task=1
#SBATCH --mem=954M
#SBATCH -t 00:05:00

echo worker $SLURM_JOB_ID
""")
        out = run(["sbatch", script]).stdout
        jobs.append(re.search(r"(\d+)", out).group(1))
    for j in jobs:
        path = os.path.join(logs, f"dask-worker-{j}.out")
        wait_for(f"{path}", lambda: os.path.exists(path) and open(path).read() == f"worker {j}\n")
    run(["scancel"] + jobs)


for client in (snakemake, parsl, submitit, dask_jobqueue):
    client()
print("ok")
