#!/usr/bin/env python3
"""A small trainer that behaves like a real one under a scheduler that
preempts: it saves a checkpoint when told to stop (SIGTERM) and resumes
from it when run again, so an interrupted run ends where an uninterrupted
one does. It fits y = 3x + 2 by stochastic gradient descent, in pure
Python; an epoch takes about --epoch-seconds, standing in for real work.

    python3 tiny_trainer.py --epochs 60 --dir runs/tiny

writes runs/tiny/checkpoint.json while it runs and runs/tiny/result.json
at the end. Used by resumable-train.sh; see ysbatch(1), PREEMPTION.
"""

import argparse
import json
import os
import random
import signal
import sys
import time

stop_requested = False


def on_sigterm(signum, frame):
    # Finish the step in hand, then save: a checkpoint is never half a step.
    global stop_requested
    stop_requested = True


def save_atomically(path, state):
    """Write to a temporary file, flush it to disk, rename it over the old
    one: a kill at any moment leaves either the old or the new checkpoint."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def data(n=200):
    rng = random.Random(1234)
    xs = [rng.uniform(-1.0, 1.0) for _ in range(n)]
    return [(x, 3.0 * x + 2.0 + rng.gauss(0.0, 0.1)) for x in xs]


def train_epoch(state, samples, lr=0.05):
    # The order of an epoch depends on the epoch only, never on restarts.
    order = list(range(len(samples)))
    random.Random(state["epoch"]).shuffle(order)
    w, b = state["w"], state["b"]
    for i in order:
        x, y = samples[i]
        err = w * x + b - y
        w -= lr * err * x
        b -= lr * err
    state["w"], state["b"] = w, b
    state["epoch"] += 1


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--dir", required=True)
    p.add_argument("--epoch-seconds", type=float, default=0.05)
    args = p.parse_args()
    signal.signal(signal.SIGTERM, on_sigterm)
    os.makedirs(args.dir, exist_ok=True)
    ckpt = os.path.join(args.dir, "checkpoint.json")
    restarts = int(os.environ.get("YS_RESTART_COUNT", "0"))
    if os.path.exists(ckpt):
        with open(ckpt) as f:
            state = json.load(f)
        print(f"resuming at epoch {state['epoch']} (restart {restarts})", flush=True)
    else:
        state = {"epoch": 0, "w": 0.0, "b": 0.0}
        print("starting from scratch", flush=True)
    samples = data()
    while state["epoch"] < args.epochs:
        train_epoch(state, samples)
        time.sleep(args.epoch_seconds)
        if stop_requested:
            save_atomically(ckpt, state)
            print(f"stopped at epoch {state['epoch']}: checkpoint saved", flush=True)
            return 0
    save_atomically(os.path.join(args.dir, "result.json"), state)
    print(f"done: w={state['w']:.6f} b={state['b']:.6f} after {state['epoch']} epochs", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
