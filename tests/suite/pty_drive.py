#!/usr/bin/env python3
"""Drives a command on a pseudo-terminal, as a person at a terminal would.

    pty_drive.py STEP... -- COMMAND [ARG...]

Steps, in order:
  expect=TEXT     wait (at most 30 s) until the output shows TEXT
  send=TEXT       type TEXT (Python escapes: \\r is Enter, \\x03 Ctrl-C)
  resize=RxC      the terminal becomes R rows by C columns (SIGWINCH)
  sleep=SECONDS
  close           hang up: close the terminal, as a dropped ssh does
  wait            wait (at most 30 s) for the command to exit

Prints everything the command wrote, then one line: `EXIT N`, `SIGNAL N`,
`TIMEOUT` (it did not exit in time; it is killed) or `EXPECT FAILED: TEXT`.
"""
import codecs
import fcntl
import os
import pty
import select
import signal
import struct
import sys
import termios
import time

WAIT = 30.0


def main():
    split = sys.argv.index("--")
    steps, command = sys.argv[1:split], sys.argv[split + 1:]
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(command[0], command)
    set_size(fd, 24, 80)
    seen = bytearray()
    closed = False
    for step in steps:
        verb, _, arg = step.partition("=")
        if verb == "expect":
            if not read_until(fd, seen, arg.encode()):
                finish(pid, seen, f"EXPECT FAILED: {arg}")
        elif verb == "send":
            os.write(fd, codecs.decode(arg, "unicode_escape").encode("latin-1"))
        elif verb == "resize":
            rows, cols = arg.split("x")
            set_size(fd, int(rows), int(cols))
        elif verb == "sleep":
            end = time.time() + float(arg)
            while time.time() < end:
                read_some(fd, seen, end - time.time())
        elif verb == "close":
            os.close(fd)
            closed = True
        elif verb == "wait":
            pass
        else:
            finish(pid, seen, f"EXPECT FAILED: unknown step {step}")
    end = time.time() + WAIT
    while time.time() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            if not closed:
                read_some(fd, seen, 0.3)
            sys.stdout.write(seen.decode(errors="replace"))
            if os.WIFEXITED(status):
                print(f"\nEXIT {os.WEXITSTATUS(status)}")
            else:
                print(f"\nSIGNAL {os.WTERMSIG(status)}")
            return
        if not closed:
            read_some(fd, seen, 0.1)
        else:
            time.sleep(0.1)
    finish(pid, seen, "TIMEOUT")


def set_size(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def read_some(fd, seen, timeout):
    ready, _, _ = select.select([fd], [], [], max(timeout, 0))
    if not ready:
        return False
    try:
        data = os.read(fd, 4096)
    except OSError:
        return False
    seen.extend(data)
    return bool(data)


def read_until(fd, seen, marker):
    end = time.time() + WAIT
    while marker not in seen and time.time() < end:
        read_some(fd, seen, 0.2)
    return marker in seen


def finish(pid, seen, last):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    sys.stdout.write(seen.decode(errors="replace"))
    print(f"\n{last}")
    sys.exit(0)


if __name__ == "__main__":
    main()
