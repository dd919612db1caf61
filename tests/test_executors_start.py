"""A private Ray instance that fails to start leaves nothing behind.

In a module of its own: the Ray tests of test_executors.py share one instance for
the whole module, and a second start in the same process would stand in its way.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest


def test_a_local_ray_that_fails_to_start_leaves_no_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    from sim.executors import start_local_ray

    def refuse(**kwargs: Any) -> None:
        raise RuntimeError("the node timed out during startup")

    before = set(Path(tempfile.gettempdir()).glob("beamer-ray-*"))
    monkeypatch.setattr(ray, "init", refuse)
    with pytest.raises(RuntimeError, match="timed out"):
        start_local_ray(2)
    assert set(Path(tempfile.gettempdir()).glob("beamer-ray-*")) == before


def test_a_start_that_fails_once_is_cleaned_up_and_tried_again(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    from sim import executors

    directories: list[str] = []

    def fail_first(**kwargs: Any) -> None:
        directories.append(kwargs["_temp_dir"])
        assert Path(kwargs["_temp_dir"]).is_dir()
        if len(directories) == 1:
            raise RuntimeError("The current node timed out during startup.")

    monkeypatch.setattr(ray, "init", fail_first)
    executors.start_local_ray(2)
    assert len(directories) == 2 and directories[0] != directories[1]
    assert not Path(directories[0]).exists()  # the failed start's directory went first
    assert "Ray did not start (RuntimeError: The current node timed out" in capsys.readouterr().err
    executors.stop_local_ray(grace_s=0.1)
    assert not Path(directories[1]).exists()


def test_a_start_cut_short_by_ctrl_c_kills_what_it_began_after_a_short_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Ctrl-C while Ray starts: its half-started processes would never exit by
    themselves, so the wait for them is the failed start's grace, not a run's."""
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    from sim import executors

    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
    stragglers: list[subprocess.Popen[bytes]] = []
    directories: list[str] = []

    def interrupted(**kwargs: Any) -> None:
        directories.append(kwargs["_temp_dir"])
        stragglers.append(subprocess.Popen([sys.executable, "-c", code, "raylet"]))
        time.sleep(0.3)  # running, with its command line in place
        raise KeyboardInterrupt

    graces: list[float] = []
    kill_lingering = executors._kill_lingering

    def recording(pids: set[int], grace_s: float, **kwargs: Any) -> None:
        graces.append(grace_s)
        kill_lingering(pids, grace_s, **kwargs)

    monkeypatch.setattr(ray, "init", interrupted)
    monkeypatch.setattr(executors, "_kill_lingering", recording)
    try:
        with pytest.raises(KeyboardInterrupt):
            executors.start_local_ray(2)
        assert stragglers[0].wait(timeout=10) == -signal.SIGKILL
    finally:
        for straggler in stragglers:
            if straggler.poll() is None:
                straggler.kill()
                straggler.wait()
    assert graces[0] == executors.FAILED_START_GRACE_S < 5.0
    assert len(directories) == 1 and not Path(directories[0]).exists()


def test_stop_kills_a_ray_process_that_outlives_shutdown() -> None:
    pytest.importorskip("ray")
    from sim.executors import stop_local_ray

    # Stands for a raylet of a start that failed half-way: ray.shutdown() does not know
    # it, and it ignores SIGTERM.
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
    straggler = subprocess.Popen([sys.executable, "-c", code, "raylet"])
    try:
        time.sleep(0.3)  # running, with its command line in place
        stop_local_ray(grace_s=0.2)
        assert straggler.wait(timeout=10) == -signal.SIGKILL
    finally:
        if straggler.poll() is None:
            straggler.kill()
            straggler.wait()


def test_the_directory_of_a_killed_commands_ray_is_removed_by_its_guard() -> None:
    pytest.importorskip("ray")
    # A command killed outright (SIGKILL; or Ray ending its driver when the raylet died)
    # runs no stop_local_ray: its guard removes the instance's directory once Ray's
    # processes, which die with their driver, are gone.
    code = (
        "import sys, time\n"
        "from sim import executors\n"
        "executors.start_local_ray(1)\n"
        "print(executors._LOCAL_TEMP_DIR, flush=True)\n"
        "time.sleep(300)\n"
    )
    repo = Path(__file__).resolve().parents[1]
    command = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert command.stdout is not None
        directory = Path(command.stdout.readline().strip())
        assert directory.name.startswith("beamer-ray-") and directory.is_dir()
        command.send_signal(signal.SIGKILL)
        command.wait(timeout=10)
        deadline = time.monotonic() + 60
        while directory.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not directory.exists()
    finally:
        if command.poll() is None:
            command.kill()
        command.communicate(timeout=60)
