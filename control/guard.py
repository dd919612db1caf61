"""Guards: small processes that clean up after a command that dies without doing so.

A command removes what it made itself on exit, Ctrl-C, SIGTERM, SIGHUP and failure.
A SIGKILL gives it no chance, nor does a library that ends the process outright (Ray
ends its driver when the driver's raylet dies). So a command starts a guard for
what it makes: a process in a session of its own, holding the read end of a pipe whose
write end only the command holds. The command writes a line on the pipe and closes it
once it has removed everything itself (:meth:`Guard.stop`). A pipe that ends without
that line means the command died (the kernel closed it): once the command's process
is gone, the guard removes what it guards.

This module is the mechanism, and the guard of directories (``python -m control.guard
OWNER_PID OWNER_START_TICKS DIR...``: a command's temporary directories, such as a
private Ray instance's). :mod:`bmv2_topos.guard` guards an emulated run.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

POLL_S = 1.0
"""How often a guard looks at its owner while the pipe is open (a process forked by the
owner without exec would hold the pipe open after the owner's death)."""
STOP_TIMEOUT_S = 10.0
OVER = b"over\n"
"""What the owner writes before it closes the pipe, once it removed everything itself."""
REMOVE_TRIES = 50
"""A dead owner's children (a private Ray's processes die with their driver) may write
into a guarded directory for a moment: removals are tried this often, 0.1 s apart."""


def process_start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot, or None if it is gone.

    A pid plus its start time names one process for good: a recycled pid has a
    different start time, so nothing here ever mistakes a stranger for an owner.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may contain spaces and parentheses: split after it.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def owner_alive(pid: int, start_ticks: int) -> bool:
    """The owner still runs: same pid and start time, and not a zombie (a killed owner
    stays one until its parent reaps it, which may be never)."""
    if process_start_ticks(pid) != start_ticks:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] not in ("Z", "X")


class Guard:
    """The owner's handle on a guard process."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    @classmethod
    def start(cls, module: str, arguments: list[str]) -> Guard:
        """Run ``python -m module OWNER_PID OWNER_START_TICKS *arguments`` as the guard of
        this process."""
        pid = os.getpid()
        setsid = shutil.which("setsid") or "/usr/bin/setsid"
        command = [
            setsid,
            sys.executable,
            "-m",
            module,
            str(pid),
            str(process_start_ticks(pid) or 0),
            *arguments,
        ]
        # Exec'd ``setsid`` instead of ``start_new_session``, and close_fds off (our
        # descriptors are close-on-exec), keep posix_spawn usable: no fork of a process
        # whose gRPC or Ray threads may be running (see ``launcher.spawn_prefix``).
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, close_fds=False
        )
        return cls(process)

    def stop(self) -> None:
        """Tell the guard that everything is removed, and wait for it to exit."""
        stdin = self.process.stdin
        if stdin is not None:
            with contextlib.suppress(OSError):  # a broken pipe: the guard is gone already
                stdin.write(OVER)
                stdin.flush()
            with contextlib.suppress(OSError):
                stdin.close()
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextlib.contextmanager
def directories_guarded(*directories: str | Path) -> Iterator[None]:
    """Inside: ``directories`` are removed if this process dies without leaving the
    block (the block's owner removes them itself otherwise)."""
    guard = Guard.start("control.guard", [str(d) for d in directories])
    try:
        yield
    finally:
        guard.stop()


def wait_for_owner(pid: int, start_ticks: int) -> bool:
    """In a guard: wait until the owner says it is over (a line, then the pipe closed)
    or is gone; True if it said so.

    The pipe ending is not enough: a killed process's descriptors close before it
    turns into a zombie, so at that instant it may still look alive."""
    said_over = False
    while True:
        readable, _, _ = select.select([sys.stdin.buffer], [], [], POLL_S)
        if readable:
            data = os.read(sys.stdin.fileno(), 4096)
            if data:
                said_over = said_over or OVER in data
                continue
            if said_over:
                return True
            while owner_alive(pid, start_ticks):  # dying: wait until it is gone
                time.sleep(0.05)
            return False
        if not owner_alive(pid, start_ticks):
            return False


def serve(argv: list[str], clean_up: Callable[[int, list[str]], int]) -> int:
    """A guard's life, ``argv`` being ``OWNER_PID OWNER_START_TICKS *arguments``: outlive
    the terminal's signals (the owner handles them), wait for the owner, and if it died
    without saying it is over, return ``clean_up(owner_pid, arguments)``."""
    for number in (signal.SIGINT, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)
    pid, start_ticks = int(argv[0]), int(argv[1])
    if wait_for_owner(pid, start_ticks):
        return 0
    return clean_up(pid, argv[2:])


def remove_directories(directories: list[Path]) -> list[Path]:
    """Remove ``directories`` (tried :data:`REMOVE_TRIES` times); those left."""
    for _ in range(REMOVE_TRIES):
        for directory in directories:
            shutil.rmtree(directory, ignore_errors=True)
        left = [directory for directory in directories if directory.exists()]
        if not left:
            return []
        time.sleep(0.1)
    return left


def _remove_left_directories(pid: int, arguments: list[str]) -> int:
    """A dead owner's directories, removed."""
    present = [Path(a) for a in arguments if Path(a).exists()]
    if not present:
        return 0
    left = remove_directories(present)
    for directory in left:
        print(
            f"beamer: could not remove {directory}, left by process {pid}, which ended "
            "without removing it",
            file=sys.stderr,
        )
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:], _remove_left_directories))
