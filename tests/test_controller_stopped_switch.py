"""The controller against a switch process that stops answering while ready (SIGSTOP: a
paused or swapped-out switch), then resumes (SIGCONT).

A real ``beamer switch`` process runs beamer.p4 behind its P4Runtime server on
loopback; the controller runs in the test's process. While the switch is stopped,
an event waits for it no longer than the write budget and later events not at all;
once it resumes, it is brought to the plan of that moment.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from controller_helpers import SmallestFirst, one_class_per_rank
from processes import end_process
from test_controller_p4runtime import (
    _class_entries,
    _plan,
    _start_experiment,
    _topology,
    _wait_for,
    switch_entries,
)

from control.controller import Controller, ControllerConfig
from control.controller_cli import DEFAULT_P4, embedded_artifacts

REPO = Path(__file__).resolve().parent.parent
BUDGET_S = 0.5
RPC_TIMEOUT_S = 3.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def switch_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``beamer switch --no-p4`` serving P4Runtime on a loopback port; let go on exit,
    stopped or not."""
    address = f"127.0.0.1:{_free_port()}"
    log = (tmp_path / "switch.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "control.cli", "switch", "--no-p4", "--device-id", "0",
         "--grpc-server-addr", address, "--log-level", "warning"],
        cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        host, port = address.rsplit(":", 1)
        while True:
            assert process.poll() is None, (tmp_path / "switch.log").read_text()
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the switch did not listen"
                time.sleep(0.05)
        yield process, address
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)
            end_process(process)
        log.close()


def test_a_stopped_switch_costs_one_event_the_budget_and_catches_up_when_it_resumes(
    switch_process: tuple[subprocess.Popen[bytes], str],
) -> None:
    process, address = switch_process
    artifacts = embedded_artifacts(DEFAULT_P4)
    config = ControllerConfig(
        topology=_topology(address),
        artifacts={"embedded": artifacts},
        policy_name="smallest-first",
        supervise_interval_s=0.1,
        counter_interval_s=3600.0,  # no counter reads: only the events' writes wait
        rpc_timeout_s=RPC_TIMEOUT_S,
        write_budget_s=BUDGET_S,
    )
    controller = Controller(config, SmallestFirst(), one_class_per_rank)
    session = controller.sessions["s1"]
    try:
        controller.start()
        assert session.state == "ready"
        _start_experiment(controller, 1, [100, 200])
        os.kill(process.pid, signal.SIGSTOP)
        ids = {"experiment_id": 2, "stage_id": 0, "trial_id": 0}
        events = [
            {"type": "experiment_released", "experiment": _plan(2, [50])},
            {"type": "stage_released", "experiment_id": 2, "stage_id": 0},
            {"type": "trial_started", **ids},
            {"type": "coflow_started", **ids, "iteration": 0},
            {"type": "trial_stopped", "experiment_id": 1, "stage_id": 0, "trial_id": 1},
        ]
        took_s = []
        replies = []
        for event in events:
            started = time.monotonic()
            replies.append(controller.handle_event(event))
            took_s.append(time.monotonic() - started)
        # The first event with writes waited the budget; the others did not wait.
        assert max(took_s) < RPC_TIMEOUT_S, took_s
        assert sum(took_s) < BUDGET_S + 1.0, took_s
        assert replies[-1]["pending_switches"] == ["s1"]
        assert session.state in ("lagging", "error")  # error: its Write's deadline passed
        os.kill(process.pid, signal.SIGCONT)
        _wait_for(lambda: session.state == "ready", "the switch caught up", timeout_s=30)
        planned = _class_entries(session.installed)
        assert ("stage_class", (2, 0)) in planned
        assert _class_entries(switch_entries(address, artifacts.p4info)) == planned
        reply = controller.handle_event(
            {"type": "trial_stopped", "experiment_id": 1, "stage_id": 0, "trial_id": 0}
        )
        assert reply["pending_switches"] == []
        held = _class_entries(switch_entries(address, artifacts.p4info))
        assert held == _class_entries(session.installed)
    finally:
        os.kill(process.pid, signal.SIGCONT)
        controller.stop()
