"""``stop_local_ray`` (the end of ``beamer tune``): a signal while Ray shuts down (a
second Ctrl-C, SIGTERM) waits until Ray's private directory is removed, then unwinds
the command as it would have."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from control.interrupts import HELD_SIGNALS, unwind_on_termination
from sim import executors

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def handlers() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt, as in a command; every handler given back after."""
    saved = {signum: signal.getsignal(signum) for signum in HELD_SIGNALS}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


@pytest.mark.usefixtures("handlers")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_a_signal_while_ray_shuts_down_is_raised_once_its_directory_is_gone(
    signum: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "beamer-ray-test"
    (directory / "logs").mkdir(parents=True)
    (directory / "logs" / "raylet.out").write_text("log\n")

    def shutdown() -> None:  # the signal comes while Ray goes down
        os.kill(os.getpid(), signum)

    fake_ray = types.ModuleType("ray")
    fake_ray.shutdown = shutdown  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ray", fake_ray)
    monkeypatch.setattr(executors, "_LOCAL_TEMP_DIR", str(directory))
    term_before = signal.getsignal(signal.SIGTERM)
    executors._PREVIOUS_HANDLERS.update(unwind_on_termination())  # as start_local_ray does

    with pytest.raises(KeyboardInterrupt):  # SIGTERM unwinds as Ctrl-C does
        executors.stop_local_ray(grace_s=0.1)

    assert not directory.exists()
    assert executors._LOCAL_TEMP_DIR is None
    assert signal.getsignal(signal.SIGTERM) is term_before
    assert executors._PREVIOUS_HANDLERS == {}


SIGTERM_AFTER_SHUTDOWN = """
import ctypes, os, signal, sys, types
from control.interrupts import unwind_on_termination
from sim import executors

directory = sys.argv[1]
libc = ctypes.CDLL(None)
libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)


def shutdown():  # as Ray's does: SIGTERM back to its default action, in C
    libc.signal(signal.SIGTERM, None)


ray = types.ModuleType("ray")
ray.shutdown = shutdown
sys.modules["ray"] = ray
executors._LOCAL_TEMP_DIR = directory
executors._PREVIOUS_HANDLERS.update(unwind_on_termination())
remove = executors.remove_with_holders


def remove_when_signalled(path, *args, **kwargs):  # the signal comes after shutdown()
    os.kill(os.getpid(), signal.SIGTERM)
    remove(path, *args, **kwargs)


executors.remove_with_holders = remove_when_signalled
try:
    executors.stop_local_ray(grace_s=0.1)
except KeyboardInterrupt:
    print("unwound")
"""


def test_a_sigterm_after_ray_shut_down_unwinds_once_the_directory_is_gone(
    tmp_path: Path,
) -> None:
    """Ray's shutdown() resets SIGTERM in C, where Python does not see it: the signal
    must still be held, not kill the command before Ray's directory is removed."""
    directory = tmp_path / "beamer-ray-test"
    (directory / "logs").mkdir(parents=True)
    result = subprocess.run(
        [sys.executable, "-c", SIGTERM_AFTER_SHUTDOWN, str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert (result.returncode, result.stdout) == (0, "unwound\n"), result.stderr
    assert not directory.exists()


@pytest.mark.usefixtures("handlers")
def test_after_stop_sigterm_has_its_handler_from_before_ray_not_rays(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """ray.init installs a SIGTERM handler of its own (a crash report, an exit that runs
    no ``finally``); after Ray is gone the command's own handler must be back."""

    def rays_handler(_signum: int, _frame: object) -> None:
        raise AssertionError("Ray's handler")

    def init(**_kwargs: object) -> None:
        signal.signal(signal.SIGTERM, rays_handler)

    private = types.ModuleType("ray._private")
    private.ray_constants = types.SimpleNamespace()  # type: ignore[attr-defined]
    fake_ray = types.ModuleType("ray")
    fake_ray.init = init  # type: ignore[attr-defined]
    fake_ray.shutdown = lambda: None  # type: ignore[attr-defined]
    fake_ray._private = private  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ray", fake_ray)
    monkeypatch.setitem(sys.modules, "ray._private", private)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # start_local_ray sets them
    monkeypatch.setenv("RAY_worker_niceness", "0")

    def commands_handler(_signum: int, _frame: object) -> None:
        raise AssertionError("the command's handler")

    signal.signal(signal.SIGTERM, commands_handler)
    executors.start_local_ray(num_cpus=1)
    assert signal.getsignal(signal.SIGTERM) is not rays_handler
    executors.stop_local_ray(grace_s=0.1)
    assert signal.getsignal(signal.SIGTERM) is commands_handler
    assert list(tmp_path.glob("beamer-ray-*")) == []


SIGTERM_DURING_REAL_SHUTDOWN = """
import ctypes, signal, sys
from control.interrupts import unwind_on_termination
from sim import executors

unwind_on_termination()  # as beamer tune does
executors.start_local_ray(num_cpus=1)
import ray

libc = ctypes.CDLL(None)
shutdown = ray.shutdown
seen = []


def shutdown_and_look():  # what a SIGTERM right after Ray's shutdown would meet
    shutdown()
    action = ctypes.create_string_buffer(256)
    libc.sigaction(signal.SIGTERM, None, action)
    seen.append(int.from_bytes(action.raw[:8], sys.byteorder))


ray.shutdown = shutdown_and_look
executors.stop_local_ray()
print("default action" if seen == [0] else "handled")
"""


def test_rays_shutdown_does_not_leave_sigterm_to_its_default_action() -> None:
    """With a real Ray: its crash handler, taken down by ray.shutdown(), would set SIGTERM
    back to the default action (a silent kill) while the shutdown goes on."""
    pytest.importorskip("ray")
    ray_dirs_before = set(Path(tempfile.gettempdir()).glob("beamer-ray-*"))
    result = subprocess.run(
        [sys.executable, "-c", SIGTERM_DURING_REAL_SHUTDOWN],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert (result.returncode, result.stdout) == (0, "handled\n"), result.stderr[-2000:]
    assert set(Path(tempfile.gettempdir()).glob("beamer-ray-*")) - ray_dirs_before == set()
