"""Emulation with real namespaces, switch and controller processes (root only).

Three hosts on one embedded switch at 20 Mbit/s. Two experiments send into
h3 at once: A (1 s alone) and B (3 s alone). Beamer ranks the smaller
experiment first, so A's class is above B's at the bottleneck (s1 port 3):
A finishes near its alone time while B waits. Fair sharing would give A half
the port, about twice its alone time, which the bounds below exclude.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bmv2_topos import netns, state
from bmv2_topos.agent import ControllerOptional, HostAddress, RunRecord
from bmv2_topos.emulate import alone_times, execute
from bmv2_topos.launcher import EmulatedNetwork
from control.events import EventClient
from control.model import Experiment, Flow, Stage, TrialStage, Workload
from control.topology import Topology, load_topology

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)"),
]

REPO = Path(__file__).resolve().parents[1]
RATE_MBPS = 20
ONE_SECOND_BYTES = RATE_MBPS * 1_000_000 // 8


def _require_policies() -> None:
    if not hasattr(importlib.import_module("control.policies"), "get_policy"):
        pytest.skip("no scheduling policies installed yet (control.policies.get_policy)")


@pytest.fixture
def topology_path(tmp_path: Path) -> Path:
    hosts = (1, 2, 3)
    document = {
        "name": "three_hosts",
        "switches": [{"name": "s1", "device_id": 0, "grpc_addr": "127.0.0.1:9559"}],
        "hosts": [
            {"name": f"h{i}", "ip": f"10.0.0.{i}", "prefix_len": 24, "mac": f"02:00:00:00:00:0{i}"}
            for i in hosts
        ],
        "links": [
            {"node1": f"h{i}", "node2": "s1", "port2": i, "rate_mbps": RATE_MBPS} for i in hosts
        ],
    }
    path = tmp_path / "three_hosts.json"
    path.write_text(json.dumps(document))
    return path


def _contending(iterations: int = 1) -> tuple[Experiment, ...]:
    small = TrialStage(1, iterations, 0.0, (Flow(0, 2, ONE_SECOND_BYTES),))
    large = TrialStage(2, iterations, 0.0, (Flow(1, 2, 3 * ONE_SECOND_BYTES),))
    return (
        Experiment(0, 0.0, (Stage(0, (small,)),)),
        Experiment(1, 0.0, (Stage(0, (large,)),)),
    )


def _run(
    topology: Topology, experiments: tuple[Experiment, ...], kill_controller_after_s: float | None
) -> tuple[RunRecord, ControllerOptional]:
    with EmulatedNetwork(topology, policy="beamer") as network:
        hosts = {
            index: HostAddress(network.host_namespace(host.name), str(host.ip))
            for index, host in enumerate(topology.hosts)
        }
        killer = None
        if kill_controller_after_s is not None:
            killer = threading.Timer(kill_controller_after_s, network.kill_process, ("controller",))
            killer.start()
        try:
            with EventClient(str(network.events_socket)) as client:
                sink = ControllerOptional(client)
                record = execute(
                    hosts,
                    experiments,
                    sink,
                    lambda: network.check_processes(controller_required=False),
                )
        finally:
            if killer is not None:
                killer.cancel()
        return record, sink


def _assert_strict_priority(record: RunRecord, experiments: tuple[Experiment, ...]) -> None:
    workload = Workload(3, RATE_MBPS * 1e6, experiments)
    alone = alone_times(workload)
    sct = {stage.experiment_id: stage.sct_s for stage in record.stages}
    assert set(sct) == {0, 1}
    alone_small, alone_large = alone[0, 0], alone[1, 0]
    # High class: close to alone (fair sharing would take about 2x).
    assert sct[0] <= 1.35 * alone_small, (sct, alone)
    # Low class: waits for most of the high class's transfer on top of its own.
    assert sct[1] >= alone_large + 0.6 * alone_small, (sct, alone)


def test_high_class_coflow_finishes_near_alone_time_low_class_waits(topology_path: Path) -> None:
    _require_policies()
    experiments = _contending()
    record, sink = _run(load_topology(topology_path), experiments, kill_controller_after_s=None)
    assert sink.lost is None
    _assert_strict_priority(record, experiments)


def test_killing_the_controller_keeps_traffic_in_the_installed_classes(
    topology_path: Path,
) -> None:
    _require_policies()
    experiments = _contending()
    record, sink = _run(load_topology(topology_path), experiments, kill_controller_after_s=0.4)
    assert sink.lost is not None, "the controller was killed before the coflows finished"
    _assert_strict_priority(record, experiments)


# --- whole `beamer emulate` processes ------------------------------------------------


@pytest.fixture
def long_workload(tmp_path: Path) -> Path:
    """One trial of 8 one-second iterations: long enough to interfere mid-run."""
    from workloads import json_format

    trial = TrialStage(1, 8, 0.05, (Flow(0, 2, ONE_SECOND_BYTES),))
    workload = Workload(3, RATE_MBPS * 1e6, (Experiment(0, 0.0, (Stage(0, (trial,)),)),))
    path = tmp_path / "long.json"
    json_format.write(workload, path)
    return path


@pytest.fixture
def emulate(topology_path: Path, long_workload: Path) -> Iterator[subprocess.Popen[str]]:
    _require_policies()
    command = [
        sys.executable, "-m", "control.cli", "emulate", "--topo", str(topology_path),
        "--workload", str(long_workload), "--policies", "beamer", "--seed", "1",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    yield process
    if process.poll() is None:
        process.kill()
    process.communicate(timeout=30)


def _wait_for_running_run(owner_pid: int, timeout_s: float = 60.0) -> state.RunState:
    """The run of ``owner_pid`` once its switch and controller are up and traffic flows."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        base = state.runs_dir()
        for directory in base.iterdir() if base.is_dir() else ():
            try:
                run = state.RunState.load(directory)
            except (OSError, ValueError, KeyError):
                continue
            roles = {record.role for record in run.processes}
            ready = (directory / "events.sock").exists()
            if run.owner_pid == owner_pid and {"switch-s1", "controller"} <= roles and ready:
                time.sleep(2.0)  # controller provisioning, then the first iterations
                return run
        time.sleep(0.1)
    raise AssertionError("the emulation did not start its switch and controller in time")


def _assert_nothing_left(run: state.RunState) -> None:
    assert not any(name.startswith(run.prefix) for name in netns.list_namespaces())
    assert not _guards_of(run), "the run's guard is still running"
    assert not run.directory.exists()
    for record in run.processes:
        assert not record.alive(), f"{record.role} (pid {record.pid}) is still running"
    assert run.run_id not in {process.run_id for process in state.tagged_processes()}


def test_killing_the_switch_ends_the_run_with_one_clear_error_and_no_leftovers(
    emulate: subprocess.Popen[str],
) -> None:
    run = _wait_for_running_run(emulate.pid)
    switch = next(record for record in run.processes if record.role == "switch-s1")
    assert switch.alive()
    os.kill(switch.pid, signal.SIGKILL)
    _, stderr = emulate.communicate(timeout=60)
    assert emulate.returncode == 2, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("beamer: error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    assert "switch-s1 killed by signal 9" in errors[0]
    _assert_nothing_left(run)


def _guards_of(run: state.RunState) -> list[int]:
    """Pids of the guard processes watching ``run`` (by their command line)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"bmv2_topos.guard" in argv and str(run.directory).encode() in argv:
            pids.append(int(entry.name))
    return pids


def _wait_until_removed(run: state.RunState, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        namespaces = [name for name in netns.list_namespaces() if name.startswith(run.prefix)]
        if not namespaces and not run.directory.exists() and not _guards_of(run):
            return
        time.sleep(0.2)
    raise AssertionError(f"run {run.run_id} was not removed within {timeout_s} s")


def test_the_guard_removes_what_a_sigkilled_run_left(emulate: subprocess.Popen[str]) -> None:
    run = _wait_for_running_run(emulate.pid)
    assert len(_guards_of(run)) == 1
    emulate.send_signal(signal.SIGKILL)
    # The guard holds the run's standard error until it is done.
    _, stderr = emulate.communicate(timeout=60)
    _wait_until_removed(run)
    _assert_nothing_left(run)
    assert f"beamer: run {run.run_id}: its owner (pid {emulate.pid}) ended" in stderr, stderr
    assert "Traceback" not in stderr, stderr


def test_beamer_clean_removes_what_a_run_and_its_guard_left(
    emulate: subprocess.Popen[str],
) -> None:
    run = _wait_for_running_run(emulate.pid)
    (guard,) = _guards_of(run)
    os.kill(guard, signal.SIGKILL)
    emulate.send_signal(signal.SIGKILL)
    emulate.wait(timeout=10)
    time.sleep(1.0)
    leftovers = [name for name in netns.list_namespaces() if name.startswith(run.prefix)]
    assert len(leftovers) == 4  # h1, h2, h3 and the fabric: no one was left to clean
    cleaned = subprocess.run(
        [sys.executable, "-m", "control.cli", "clean"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cleaned.returncode == 0, cleaned.stderr
    assert f"removed namespace {run.prefix}sw" in cleaned.stdout
    _assert_nothing_left(run)


def test_interrupting_a_run_removes_everything(topology_path: Path) -> None:
    """SIGTERM inside the context manager unwinds like Ctrl-C; nothing stays behind."""
    topology = load_topology(topology_path)
    captured: list[state.RunState] = []
    with pytest.raises(KeyboardInterrupt), EmulatedNetwork(topology, policy=None) as network:
        assert network.state is not None
        captured.append(state.RunState.load(network.run_dir))
        assert len(captured[0].namespaces) == 4
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this returns
    _assert_nothing_left(captured[0])


def test_hosts_connect_with_the_chosen_congestion_control(topology_path: Path) -> None:
    """The option reaches the hosts' sockets, whatever the machine's own default is."""
    topology = load_topology(topology_path)
    with EmulatedNetwork(topology, policy=None, congestion_control="reno") as network:
        sender = topology.hosts[0]
        receiver = topology.hosts[1]
        routes = netns.run(["ip", "-n", network.host_namespace(sender.name), "route", "show"])
        assert routes.count("congctl reno") == 2, routes

        def connect() -> bytes:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.setblocking(False)
                sock.connect_ex((str(receiver.ip), 9))  # the route is chosen at connect
                return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)

        with netns.namespace_executor(network.host_namespace(sender.name)) as executor:
            assert executor.submit(connect).result(timeout=10).rstrip(b"\0") == b"reno"


def test_a_whole_run_reports_the_hosts_retransmission_timeouts(
    topology_path: Path, tmp_path: Path
) -> None:
    """``beamer emulate`` ends with each run's RTO count beside its stage times, read
    from the host namespaces (a count, not ``n/a``), in the table, JSON and CSV alike."""
    _require_policies()
    from workloads import json_format

    experiments = _contending()
    workload = tmp_path / "contending.json"
    json_format.write(Workload(3, RATE_MBPS * 1e6, experiments), workload)
    out = tmp_path / "out"
    command = [
        sys.executable, "-m", "control.cli", "emulate", "--topo", str(topology_path),
        "--workload", str(workload), "--policies", "beamer", "--seed", "1", "--out", str(out),
    ]  # fmt: skip
    finished = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=240, check=False
    )
    assert finished.returncode == 0, finished.stderr
    rows = [line.split() for line in finished.stdout.splitlines() if line.startswith("beamer")]
    assert rows and all(row[-1].isdigit() for row in rows), finished.stdout
    summary_rows = (out / "summary.csv").read_text().splitlines()
    header = summary_rows[0].split(",")
    run = dict(zip(header, summary_rows[1].split(","), strict=True))
    assert run["rtos"] == rows[0][-1]
    assert run["retransmitted_segments"].isdigit()
