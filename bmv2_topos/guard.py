"""A run's guard: removes what the run created when its owner dies without tearing it down.

The owner removes its run itself on exit, Ctrl-C, SIGTERM, SIGHUP and failure. A
SIGKILL gives it no chance, nor does a library that ends the process outright (Ray
ends its driver, ``beamer tune``, when the driver's raylet dies). The run's
processes die with the owner (``setpriv --pdeathsig``); its namespaces and run
directory would stay until ``beamer clean``. So each run starts a guard: a small
process in a session of its own, holding the read end of a pipe whose write end only
the owner holds. The owner writes a line and closes it after its teardown; the
kernel closes it at the owner's death. If it ends without that line and the run's
state file is still there, the guard tears the run down from it, as ``beamer clean``
would, and says so on the run's standard error. A guard killed too leaves the run to
``beamer clean``.

Run as ``python -m bmv2_topos.guard RUN_DIR OWNER_PID OWNER_START_TICKS`` with the
pipe as standard input (:class:`RunGuard` starts it).
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
from pathlib import Path

from bmv2_topos.state import STATE_FILE, RunState, claim_run_id, process_start_ticks

POLL_S = 1.0
"""How often the guard looks at the owner while the pipe is open (a process forked by
the owner without exec would hold the pipe open after the owner's death)."""
STOP_TIMEOUT_S = 10.0
OVER = b"over\n"
"""What the owner writes before it closes the pipe at the end of its run."""


class RunGuard:
    """The owner's handle on its run's guard process."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    @classmethod
    def start(cls, run: RunState) -> RunGuard:
        setsid = shutil.which("setsid") or "/usr/bin/setsid"
        command = [
            setsid,
            sys.executable,
            "-m",
            "bmv2_topos.guard",
            str(run.directory),
            str(run.owner_pid),
            str(run.owner_start_ticks),
        ]
        # Exec'd ``setsid`` instead of ``start_new_session``, and close_fds off (our
        # descriptors are close-on-exec), keep posix_spawn usable: no fork of a process
        # whose gRPC threads may be running (see ``launcher.spawn_prefix``).
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, close_fds=False
        )
        return cls(process)

    def stop(self) -> None:
        """Tell the guard the run is over (its teardown done) and wait for it to exit."""
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


def wait_for_owner(pid: int, start_ticks: int) -> bool:
    """Wait until the owner says the run is over (a line, then the pipe closed) or is
    gone; True if it said so.

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


def guard(directory: Path, pid: int, start_ticks: int) -> int:
    if wait_for_owner(pid, start_ticks) or not (directory / STATE_FILE).exists():
        return 0  # the owner tore the run down, or left the rest to ``beamer clean``
    run_id = directory.name
    claim = claim_run_id(run_id)  # ``beamer clean`` leaves a claimed run alone
    try:
        run = RunState.load(directory)
        removed = run.teardown()
    except Exception as error:
        print(
            f"beamer: run {run_id}: its owner (pid {pid}) ended without removing it, and "
            f"the guard could not remove everything ({error}); beamer clean removes the rest",
            file=sys.stderr,
        )
        return 1
    finally:
        if claim is not None:
            claim.close()
    print(
        f"beamer: run {run_id}: its owner (pid {pid}) ended without removing it; the guard "
        f"removed {len(removed)} leftovers",
        file=sys.stderr,
    )
    return 0


def main(argv: list[str]) -> int:
    # The owner handles the terminal's signals; the guard outlives them to do its job.
    for number in (signal.SIGINT, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)
    directory, pid, start_ticks = Path(argv[0]), int(argv[1]), int(argv[2])
    return guard(directory, pid, start_ticks)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
