"""Ending the processes a test starts, whatever state they are in, and a test's own
process stuck where it must not block."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def end_process(process: subprocess.Popen[Any], timeout_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it has not ended within ``timeout_s``; reaped either way."""
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout_s)


@contextmanager
def unblocked_within(seconds: int, what: str) -> Iterator[None]:
    """Raise TimeoutError in the block if it runs longer than ``seconds`` (SIGALRM): a
    refusal that regressed into opening a FIFO would otherwise hang the test run."""

    def stuck(signum: int, frame: object) -> None:
        raise TimeoutError(f"blocked: {what}")

    previous = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def child_pids(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (from /proc: no library needed)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    if int(handle.read().rsplit(") ", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except OSError:
                continue
    return found


def interruptible() -> None:
    """``preexec_fn`` for a child that a test stops with SIGINT: Ctrl-C at its default,
    as at a terminal. A run started in the background of a script inherits SIGINT
    ignored, and a Python started so ignores Ctrl-C, rightly (as ``nohup`` relies on)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
