"""Ctrl-C or SIGTERM sent to the command alone (``kill -INT PID``, not the terminal's
process group) while its pool workers run: the command ends them and stops at once,
with one line, exit status 130 or 143, and nothing left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import child_pids, interruptible
from sweep_helpers import write_grid

from sim.executors import _cmdline, _running

REPO = Path(__file__).resolve().parents[1]
BEAMER = [sys.executable, "-c", "from control.cli import main; raise SystemExit(main())"]

SLOW_GRID = """\
policies: [beamer-lookahead]
seeds: [1, 2]
figures:
  - name: f
    vary: {load: [0.8]}
"""
"""Two runs of the lookahead search on the default HP-tuning workload: minutes each,
so neither is done when the signal comes."""


def _signalled_while_workers_run(argv: list[str], stop_signal: int) -> tuple[int, str, list[int]]:
    """Start ``beamer argv``, wait for its two pool workers, send ``stop_signal`` to the
    command's process only; its exit status, stderr, and every child it had."""
    process = subprocess.Popen(
        [*BEAMER, *argv],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=interruptible,
    )
    children: list[int] = []
    try:
        deadline = time.monotonic() + 120
        workers: list[int] = []
        while len(workers) < 2 and time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()[1].decode()
            time.sleep(0.2)
            children = [p for p in child_pids(process.pid) if b"python" in _cmdline(p)]
            workers = [p for p in children if b"spawn_main" in _cmdline(p)]
        assert len(workers) == 2
        time.sleep(1.0)  # into the runs
        os.kill(process.pid, stop_signal)
        # Hang guard: the runs take minutes; a command that waits for them is stuck here.
        err = process.communicate(timeout=60)[1].decode()
        return process.returncode, err, children
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in children:
            if _running(pid) and b"python" in _cmdline(pid):
                os.kill(pid, signal.SIGKILL)


def _none_left(children: list[int]) -> list[int]:
    deadline = time.monotonic() + 20
    while any(_running(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [pid for pid in children if _running(pid)]


STOPS = [(signal.SIGINT, 130), (signal.SIGTERM, 143)]


@pytest.mark.parametrize(("stop_signal", "status"), STOPS, ids=["int", "term"])
def test_simulate_stops_its_runs_and_workers_on_a_signal_to_it_alone(
    tmp_path: Path, stop_signal: int, status: int
) -> None:
    out = tmp_path / "a" / "b"
    argv = ["simulate", "--policies", "beamer-lookahead,fair", "--seeds", "1,2", "--jobs", "2"]
    returncode, err, children = _signalled_while_workers_run(
        [*argv, "--out", str(out)], stop_signal
    )
    assert returncode == status, err
    assert err.strip().splitlines() == ["beamer: interrupted"], err
    assert _none_left(children) == []
    assert not (tmp_path / "a").exists()  # made for the outputs, left empty: removed


@pytest.mark.parametrize(("stop_signal", "status"), STOPS, ids=["int", "term"])
def test_a_local_sweep_stops_its_runs_and_workers_on_a_signal_to_it_alone(
    tmp_path: Path, stop_signal: int, status: int
) -> None:
    grid = write_grid(tmp_path, SLOW_GRID)
    out = tmp_path / "na" / "nb"
    argv = ["sweep", str(grid), "--out", str(out), "--jobs", "2"]
    returncode, err, children = _signalled_while_workers_run(argv, stop_signal)
    assert returncode == status, err
    # No traceback, no semaphores reported leaked by multiprocessing's resource tracker.
    assert err.strip().splitlines() == ["beamer: interrupted"], err
    assert _none_left(children) == []
    assert not (tmp_path / "na").exists()  # no run finished: nothing kept
