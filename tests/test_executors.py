"""Executors: local processes and Ray give the same results; failures stay isolated;
Ray is imported only for ``--executor ray`` and leaves no process behind."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from processes import child_pids
from sweep_helpers import records, write_grid
from test_sim_cli import small_workload

from control.cli import main
from sim.executors import Executor, TaskFailure, _cmdline, _running, run_tasks

ROOT = Path(__file__).resolve().parent.parent


def test_simulate_switch_and_emulate_paths_never_import_ray(tmp_path: Path) -> None:
    workload = small_workload(tmp_path / "chain.json")
    code = f"""
import sys
import bmv2_topos.emulate, bmv2_topos.cli, sim.cli, sim.sweep, sim.executors
from control.cli import build_parser, main
build_parser()
status = main(["simulate", "--workload", {str(workload)!r}, "--policies", "beamer,fair",
               "--jobs", "2", "--json"])
assert status == 0, status
print(sorted(name for name in sys.modules if name == "ray" or name.startswith("ray.")))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("jobs", [1, 2])
def test_local_executor_keeps_other_runs_when_one_fails(jobs: int) -> None:
    found = dict(run_tasks(math.sqrt, [4.0, -1.0, 9.0], Executor("local", jobs), desc="t"))
    assert found[0] == 2.0 and found[2] == 3.0
    failure = found[1]
    assert isinstance(failure, TaskFailure)
    assert failure.error == "ValueError: math domain error"
    assert "Traceback" in failure.details


# --- Ray ------------------------------------------------------------------------------------


def _start_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().rsplit(") ", 1)[1].split()[19])


def _ray_processes_since(ticks: int) -> list[str]:
    """Ray processes started since ``ticks`` that are ours: descendants of this process,
    or orphans (parent 1) left by a Ray instance that went away."""
    parents: dict[int, int] = {}
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(") ", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                command = handle.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fields[0] == "Z":
            continue
        parents[pid] = int(fields[1])
        if int(fields[19]) >= ticks and ("ray" in command.split(" ")[0] or "/ray/" in command):
            found[pid] = command[:80]

    def ours(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == os.getpid():
                return True
        return False

    return [cmd for pid, cmd in found.items() if parents.get(pid) == 1 or ours(pid)]


def _wait_gone(ticks: int) -> list[str]:
    # Ray's GCS and raylet can take a while to exit on a loaded machine.
    deadline = time.monotonic() + 40
    while (left := _ray_processes_since(ticks)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _without_wall(result: dict[str, Any]) -> dict[str, Any]:
    return {label: {k: v for k, v in m.items() if k != "wall_s"} for label, m in result.items()}


def test_sweep_starts_and_stops_its_own_ray_on_loopback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    ticks = _start_ticks(os.getpid())
    out = tmp_path / "out"
    grid = write_grid(
        tmp_path,
        "policies: [beamer, fair]\nseeds: [1]\ndefaults: {jobs: 2, hosts: 10, max_trials: 4}\n"
        "figures:\n  - name: mix\n    vary: {mix: [sha, hyperband]}\n",
    )
    argv = ["sweep", str(grid), "--out", str(out), "--executor", "ray", "--jobs", "2"]
    before = set(Path(tempfile.gettempdir()).glob("beamer-ray-*"))
    assert main(argv) == 0
    assert not ray.is_initialized()
    assert _wait_gone(ticks) == []
    # Its sockets and logs went into a directory of its own, removed at the end.
    assert set(Path(tempfile.gettempdir()).glob("beamer-ray-*")) == before
    assert len(records(out / "runs.jsonl")) == 4


@pytest.fixture(scope="module")
def local_ray() -> Iterator[Any]:
    """One local Ray instance (2 CPUs, loopback) for the tests below; shut down after them."""
    ray = pytest.importorskip("ray")
    from sim.executors import start_local_ray, stop_local_ray

    ticks = _start_ticks(os.getpid())
    start_local_ray(2)
    try:
        yield ray
    finally:
        stop_local_ray()
        assert _wait_gone(ticks) == []


def test_ray_listens_on_loopback_only(local_ray: Any) -> None:
    gcs = local_ray.get_runtime_context().gcs_address
    assert gcs.startswith("127.0.0.1:")
    assert local_ray.cluster_resources()["CPU"] == 2


def test_ray_sweep_gives_the_local_results(local_ray: Any, tmp_path: Path) -> None:
    grid = write_grid(tmp_path)
    assert main(["sweep", str(grid), "--out", str(tmp_path / "local"), "--jobs", "1"]) == 0
    argv = ["sweep", str(grid), "--out", str(tmp_path / "ray"), "--executor", "ray"]
    assert main(argv) == 0
    on_ray = records(tmp_path / "ray" / "runs.jsonl")
    assert len(on_ray) == 18
    assert on_ray == records(tmp_path / "local" / "runs.jsonl")
    for name in ("load.csv", "classes.csv", "table.md"):
        assert (tmp_path / "ray" / name).read_text() == (tmp_path / "local" / name).read_text()
    assert local_ray.is_initialized()  # the sweep used the running instance, did not stop it


def test_ray_simulate_gives_the_local_results(
    local_ray: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = small_workload(tmp_path / "chain.json")
    argv = ["simulate", "--workload", str(workload), "--policies", "beamer,sincronia,fair"]
    argv += ["--queues", "ideal,1", "--json"]
    assert main([*argv, "--jobs", "1"]) == 0
    local = json.loads(capsys.readouterr().out)
    assert main([*argv, "--executor", "ray"]) == 0
    on_ray = json.loads(capsys.readouterr().out)
    assert _without_wall(on_ray) == _without_wall(local)
    assert on_ray["sincronia ideal"]["avg_sct_rel"] == pytest.approx(10 / 9)


def test_ray_executor_keeps_other_runs_when_one_fails(local_ray: Any) -> None:
    found = dict(run_tasks(math.sqrt, [4.0, -1.0, 9.0], Executor("ray", 2), desc="t"))
    assert found[0] == 2.0 and found[2] == 3.0
    failure = found[1]
    assert isinstance(failure, TaskFailure)
    assert failure.error == "ValueError: math domain error"


def _holding_a_file_in(directory: Path) -> subprocess.Popen[bytes]:
    """A process of its own session (as an orphaned Ray worker is) with a file open in
    ``directory``, which it would write again after the directory were removed."""
    code = (
        "import os, sys, time\n"
        "log = open(os.path.join(sys.argv[1], 'worker.log'), 'w')\n"
        "while True:\n"
        "    time.sleep(0.05)\n"
        "    os.makedirs(sys.argv[1], exist_ok=True)\n"
        "    open(os.path.join(sys.argv[1], 'again.log'), 'w').close()\n"
    )
    process = subprocess.Popen([sys.executable, "-c", code, str(directory)], start_new_session=True)
    deadline = time.monotonic() + 10
    while not (directory / "worker.log").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return process


def test_the_ray_directory_is_removed_with_what_holds_files_in_it(tmp_path: Path) -> None:
    from sim.executors import remove_with_holders

    ours, theirs = tmp_path / "beamer-ray-x", tmp_path / "elsewhere"
    ours.mkdir()
    theirs.mkdir()
    holder, bystander = _holding_a_file_in(ours), _holding_a_file_in(theirs)
    try:
        remove_with_holders(str(ours), grace_s=2.0)
        assert holder.wait(timeout=10) != 0  # ended by a signal
        time.sleep(0.3)
        assert not ours.exists()  # and not written back
        assert bystander.poll() is None  # a process holding nothing there is left alone
    finally:
        for process in (holder, bystander):
            if process.poll() is None:
                process.kill()
                process.wait()


def test_a_terminated_ray_sweep_unwinds_and_leaves_nothing(tmp_path: Path) -> None:
    """SIGTERM while the runs go: Ray's own handler would end the process with a crash
    report and no cleanup; the command unwinds as on Ctrl-C instead."""
    pytest.importorskip("ray")
    seeds = ", ".join(str(seed) for seed in range(1, 61))
    grid = write_grid(
        tmp_path,
        f"policies: [beamer, fair, sincronia]\nseeds: [{seeds}]\n"
        "defaults: {jobs: 10, hosts: 32, max_trials: 8}\n"
        "figures:\n  - name: mix\n    vary: {mix: [sha, hyperband]}\n",
    )
    out = tmp_path / "out"
    before = set(Path(tempfile.gettempdir()).glob("beamer-ray-*"))
    argv = [sys.executable, "-c", "from control.cli import main; raise SystemExit(main())"]
    argv += ["sweep", str(grid), "--out", str(out), "--executor", "ray", "--jobs", "2"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    ticks = _start_ticks(process.pid)
    try:
        # Once the first runs are recorded, Ray is up and running tasks.
        deadline = time.monotonic() + 120
        while not (out / "runs.jsonl").exists() and time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()[0].decode()
            time.sleep(0.2)
        process.terminate()
        output = process.communicate(timeout=60)[0].decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 143, output  # 128 + SIGTERM, as a shell shows it
    assert output.strip().splitlines()[-1] == "beamer: interrupted"
    assert _wait_gone(ticks) == []
    assert set(Path(tempfile.gettempdir()).glob("beamer-ray-*")) == before
    assert 0 < len(records(out / "runs.jsonl")) < 360  # stopped part of the way


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGKILL], ids=["term", "kill"])
def test_pool_workers_end_with_the_command_however_it_ends(stop_signal: int) -> None:
    """A command killed by a signal it does not handle runs no ``finally``; its pool
    workers, busy with a run, must not outlive it as orphans."""
    argv = [sys.executable, "-c", "from control.cli import main; raise SystemExit(main())"]
    argv += ["simulate", "--workload", "fb2010", "--policies", "fair,sincronia", "--jobs", "2"]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[int] = []
    helpers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(workers) < 2 and time.monotonic() < deadline:
            assert process.poll() is None
            time.sleep(0.2)
            children = [p for p in child_pids(process.pid) if b"python" in _cmdline(p)]
            # Spawned workers, beside multiprocessing's resource tracker.
            workers = [p for p in children if b"spawn_main" in _cmdline(p)]
            helpers = [p for p in children if p not in workers]
        assert len(workers) == 2
        workers += helpers  # none of them may outlive the command either
        process.send_signal(stop_signal)
        process.wait(timeout=30)
        deadline = time.monotonic() + 20
        while any(_running(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in workers if _running(p)], "pool workers outlived the command"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in workers:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
