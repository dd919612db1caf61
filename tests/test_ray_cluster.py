"""``--ray-address``: a sweep on a running Ray cluster (a head started with ``ray start
--head`` on loopback) gives the local executor's results, and leaves the cluster running."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sweep_helpers import records, write_grid

from control.cli import main

pytest.importorskip("ray")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _processes_of(*marks: str) -> list[int]:
    """Processes whose command line names one of ``marks`` (the head's temp dir, its
    address), and their descendants (Ray renames its agents and workers ``ray::...``)."""
    parents: dict[int, int] = {}
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                command = handle.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(") ", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z":
            continue
        parents[int(entry)] = int(fields[1])
        if any(mark in command for mark in marks):
            found.add(int(entry))
    grew = True
    while grew:
        children = {pid for pid, parent in parents.items() if parent in found} - found
        found |= children
        grew = bool(children)
    return sorted(found)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(") ", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _stop(*marks: str) -> list[int]:
    """Stop every process of the head by pid (``ray stop`` would stop any Ray on the machine).
    The tree is taken first: once the raylet is gone its agents are nobody's children."""
    pids = _processes_of(*marks)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        deadline = time.monotonic() + 15
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
    return [pid for pid in pids if _alive(pid)] + _processes_of(*marks)


@pytest.fixture
def ray_head(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A one-node Ray cluster on loopback, 2 CPUs, its own temp dir; stopped by pid after."""
    temp_dir = tempfile.mkdtemp(prefix="bray", dir="/tmp")  # short: Ray's socket paths
    port = _free_port()
    env = {
        **os.environ,
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_AUTH_MODE": "disabled",
        "RAY_worker_niceness": "0",
    }
    ray_cli = str(Path(sys.executable).with_name("ray"))
    command = [ray_cli, "start", "--head", f"--port={port}", "--num-cpus=2"]
    command += ["--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp_dir}"]
    try:
        subprocess.run(command, env=env, capture_output=True, check=True, timeout=180)
        monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
        yield f"127.0.0.1:{port}"
    finally:
        # The head's client server names the address, not the temp dir.
        left = _stop(temp_dir, f"--address=127.0.0.1:{port} ")
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert left == []


def test_sweep_on_a_running_cluster_gives_the_local_results(ray_head: str, tmp_path: Path) -> None:
    import ray

    grid = write_grid(tmp_path)
    assert main(["sweep", str(grid), "--out", str(tmp_path / "local"), "--jobs", "1"]) == 0
    argv = ["sweep", str(grid), "--out", str(tmp_path / "cluster"), "--executor", "ray"]
    assert main([*argv, "--ray-address", ray_head]) == 0
    assert records(tmp_path / "cluster" / "runs.jsonl") == records(
        tmp_path / "local" / "runs.jsonl"
    )
    assert not ray.is_initialized()  # disconnected from the cluster ...
    port = int(ray_head.rpartition(":")[2])
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # ... which is still running
