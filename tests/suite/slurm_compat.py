#!/usr/bin/env python3
"""Drives ysched through its Slurm commands the way workflow tools do: run
sbatch with a generated #SBATCH header and read the id from "Submitted
batch job N", poll sacct --parsable2 until a final state, cancel with
scancel, run an array and read each task's output. Standard library only.

Run by tests/suite/slurm_compat.rs with PATH holding the shims (sbatch, squeue,
...) and YS_CONF naming a running ysctld's config; exits non-zero with the
reason on the first surprise."""

import os
import re
import subprocess
import sys
import time

FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED")


def run(*args, stdin=None, check=True):
    p = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=60)
    if check and p.returncode != 0:
        sys.exit(f"{' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p


def submit(*args, stdin=None):
    out = run("sbatch", *args, stdin=stdin).stdout
    m = re.fullmatch(r"Submitted batch job (\d+)\n", out)
    if not m:
        sys.exit(f"sbatch printed {out!r}")
    return m.group(1)


def states(job):
    """JobID -> State for the job (and its array tasks), as sacct gives them."""
    out = run("sacct", "--parsable2", "--noheader", "-X", "-j", job, "-o", "JobID,State,ExitCode").stdout
    rows = {}
    for line in out.splitlines():
        fields = line.split("|")
        if len(fields) != 3:
            sys.exit(f"sacct --parsable2 line {line!r} has not 3 fields")
        rows[fields[0]] = (fields[1], fields[2])
    return rows


def wait_final(job, count=1, deadline=30):
    end = time.time() + deadline
    while time.time() < end:
        rows = states(job)
        if len(rows) >= count and all(s.split()[0] in FINAL for s, _ in rows.values()):
            return rows
        time.sleep(0.2)
    sys.exit(f"job {job} not final after {deadline} s: {states(job)}")


def main():
    os.chdir(sys.argv[1])

    # A script with a Slurm header, as a launcher writes one.
    with open("job.sh", "w") as f:
        f.write(
            "#!/bin/bash\n"
            "#SBATCH --job-name=compat\n"
            "#SBATCH -o %x-%j.out\n"
            "#SBATCH -t 0:05:00\n"
            "#SBATCH --gres=gpu:1\n"
            "#SBATCH -p ysched\n"
            "#SBATCH --nodes=1 --ntasks=1 --cpus-per-task=1\n"
            "#SBATCH --wckey=project-x\n"
            "echo hello $SLURM_JOB_ID\n"
            "srun -o step-%j-%t.out --unbuffered bash -c 'echo task $SLURM_PROCID of $SLURM_NTASKS'\n"
        )
    # A partition ysched has not is refused, as Slurm refuses it.
    refused = run("sbatch", "-p", "gpu", "--wrap", "true", check=False)
    if refused.returncode != 1 or "invalid partition specified: gpu" not in refused.stderr:
        sys.exit(f"sbatch -p gpu: {refused.returncode} {refused.stderr!r}")
    job = submit("job.sh")
    rows = wait_final(job)
    if rows[job] != ("COMPLETED", "0:0"):
        sys.exit(f"job {job}: {rows}")
    if open(f"compat-{job}.out").read() != f"hello {job}\n":
        sys.exit(f"compat-{job}.out: {open(f'compat-{job}.out').read()!r}")
    if open(f"step-{job}-0.out").read() != "task 0 of 1\n":
        sys.exit(f"step-{job}-0.out: {open(f'step-{job}-0.out').read()!r}")

    # Several tasks on this one server: srun starts them all, labels
    # their lines and exits as the worst did.
    with open("tasks.sh", "w") as f:
        f.write(
            "#!/bin/sh\n"
            "#SBATCH --ntasks=3 -o tasks.out\n"
            "srun --label sh -c 'echo $SLURM_PROCID/$SLURM_LOCALID of $SLURM_NTASKS'\n"
            "srun -K0 sh -c 'exit $SLURM_PROCID'; echo worst=$?\n"
        )
    wait_final(submit("tasks.sh"))
    lines = sorted(open("tasks.out").read().splitlines())
    # srun says how each failed task ended, as Slurm's does.
    if lines != [
        "0: 0/0 of 3",
        "1: 1/1 of 3",
        "2: 2/2 of 3",
        "srun: error: gpu01: task 1: Exited with exit code 1",
        "srun: error: gpu01: task 2: Exited with exit code 2",
        "worst=2",
    ]:
        sys.exit(f"tasks.out: {lines!r}")

    # The same script on stdin, and --parsable.
    out = run("sbatch", "--parsable", stdin=open("job.sh").read()).stdout.strip()
    if not re.fullmatch(r"\d+(;\w+)?", out):
        sys.exit(f"sbatch --parsable printed {out!r}")
    wait_final(out.split(";")[0])

    # A long job: seen by squeue, cancelled by scancel.
    long = run("sbatch", "--parsable", "-J", "sleeper", "--wrap", "sleep 300").stdout.strip()
    end = time.time() + 20
    while True:
        q = run("squeue", "--states=all", "--format=%i|%T", "--name=sleeper", "-h").stdout
        if q.strip() == f"{long}|RUNNING":
            break
        if time.time() > end:
            sys.exit(f"squeue never showed {long} running: {q!r}")
        time.sleep(0.2)
    run("scancel", long)
    state, _ = wait_final(long)[long]
    if state != f"CANCELLED by {os.getuid()}":
        sys.exit(f"cancelled job {long} is {state!r}")
    q = run("squeue", "--states=all", "--format=%i|%T", "--name=sleeper", "-h").stdout
    if q.strip() != f"{long}|CANCELLED":
        sys.exit(f"squeue --states=all right after the end: {q!r}")

    # An array: task ids as sbatch printed them, one output per task.
    array = submit("--array=0-3", "-o", "arr-%A_%a.out", "--wrap", "echo $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID")
    rows = wait_final(array, count=4)
    if sorted(rows) != [f"{array}_{i}" for i in range(4)]:
        sys.exit(f"array {array} rows: {sorted(rows)}")
    for i in range(4):
        text = open(f"arr-{array}_{i}.out").read()
        if text != f"{array} {i}\n":
            sys.exit(f"arr-{array}_{i}.out: {text!r}")
    # A held array's pending tasks fold into one id, throttle included.
    held = submit("-H", "--array=0-9%2", "--wrap", "true")
    for command in (["squeue", "-h", "-o", "%i", "-j", held], ["sacct", "-n", "-P", "-X", "-o", "JobID", "-j", held]):
        out = run(*command).stdout
        if out != f"{held}_[0-9%2]\n":
            sys.exit(f"{command}: {out!r}")
    run("scancel", held)

    # sacct with repeated -j and --parsable (trailing |).
    out = run("sacct", "-p", "-n", "-j", job, "-j", long, "-o", "JobID,JobName").stdout
    # Under each job its batch and extern steps, then its srun, step 0.
    expected = [
        f"{job}|compat|", f"{job}.batch|batch|", f"{job}.extern|extern|", f"{job}.0|bash|",
        f"{long}|sleeper|", f"{long}.batch|batch|", f"{long}.extern|extern|",
    ]
    if out.splitlines() != expected:
        sys.exit(f"sacct -p: {out!r}")

    # The partition, the controller, a job in full.
    if run("sinfo", "-o", "%P").stdout != "PARTITION\nysched*\n":
        sys.exit("sinfo -o %P: " + run("sinfo", "-o", "%P").stdout)
    # One line per node, NAME STATE, as pool scripts read it.
    lines = run("sinfo", "-N", "-h", "-o", "%N %t").stdout.splitlines()
    if len(lines) != 1 or len(lines[0].split()) != 2:
        sys.exit("sinfo -N -h -o '%N %t': " + repr(lines))
    if "is UP" not in run("scontrol", "ping").stdout:
        sys.exit("scontrol ping")
    if f"JobId={job} JobName=compat" not in run("scontrol", "show", "job", job).stdout:
        sys.exit("scontrol show job")
    if "MinJobAge" not in run("scontrol", "show", "config").stdout:
        sys.exit("scontrol show config")
    # A token, as `scontrol token` prints it: SLURM_JWT=header.claims.signature.
    token = run("scontrol", "token", "lifespan=60").stdout.strip()
    if not token.startswith("SLURM_JWT=") or token.count(".") != 2:
        sys.exit("scontrol token: " + repr(token))

    # srun outside a job: an allocation of its own, its one step run in it.
    out = run("srun", "-t", "5", "sh", "-c", "echo job=$SLURM_JOB_ID step=$SLURM_STEP_ID").stdout
    if not re.fullmatch(r"job=\d+ step=0\n", out):
        sys.exit("srun outside a job: " + repr(out))

    # Unsupported or wrong: exit 1 and a message, never a silent result.
    for args in (["sbatch", "--no-such-option", "job.sh"], ["scontrol", "create", "reservation"],
                 ["srun", "--pty", "true"], ["sbatch", "--nodes=2", "--wrap", "true"]):
        p = run(*args, check=False)
        if p.returncode != 1 or not p.stderr.strip():
            sys.exit(f"{args}: exit {p.returncode}, stderr {p.stderr!r}")
    print("ok")


if __name__ == "__main__":
    main()
