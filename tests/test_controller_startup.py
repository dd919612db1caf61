"""The controller's events API answers while the switches are still being brought up."""

from __future__ import annotations

import itertools
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from controller_process import controller_argv, started_controller

from control.events import EventClient

SWITCHES = 4


@pytest.fixture
def silent_switches() -> Iterator[list[str]]:
    """Addresses that accept a connection and never say anything: each one costs the
    controller's start-up its whole connection timeout."""
    listeners = []
    for _ in range(SWITCHES):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        listeners.append(listener)
    try:
        yield [f"127.0.0.1:{listener.getsockname()[1]}" for listener in listeners]
    finally:
        for listener in listeners:
            listener.close()


def _line_topology(directory: Path, addresses: list[str]) -> Path:
    names = [f"s{i + 1}" for i in range(len(addresses))]
    links = [{"node1": "h1", "node2": names[0], "port2": 1}]
    links += [
        {"node1": a, "port1": 2, "node2": b, "port2": 3} for a, b in itertools.pairwise(names)
    ]
    links.append({"node1": "h2", "node2": names[-1], "port2": 1})
    topology = {
        "name": "silent",
        "switches": [
            {"name": name, "device_id": 0, "grpc_addr": address}
            for name, address in zip(names, addresses, strict=True)
        ],
        "hosts": [
            {"name": "h1", "ip": "10.0.0.1", "mac": "02:00:00:00:00:01"},
            {"name": "h2", "ip": "10.0.0.2", "mac": "02:00:00:00:00:02"},
        ],
        "links": links,
    }
    path = directory / "topo.json"
    path.write_text(json.dumps(topology))
    return path


def test_status_answers_while_switches_are_brought_up(
    tmp_path: Path, silent_switches: list[str]
) -> None:
    socket_path = tmp_path / "controller.sock"
    argv = controller_argv(_line_topology(tmp_path, silent_switches), socket_path)
    with started_controller(argv) as started:
        deadline = time.monotonic() + 60
        status = None
        while status is None:
            assert started.process.poll() is None, "".join(started.lines)
            assert time.monotonic() < deadline, "no answer: " + "".join(started.lines)
            if socket_path.exists():
                with EventClient(socket_path, timeout_s=5) as client:
                    status = client.status()
            else:
                time.sleep(0.05)
        # Answered before the start-up had tried every switch (each one costs it a
        # connection timeout): the API did not wait for it.
        assert not started.announced.is_set(), "".join(started.lines)
        states = {switch["name"]: switch["state"] for switch in status["switches"]}
        assert set(states) == {f"s{i + 1}" for i in range(SWITCHES)}
        assert "ready" not in states.values()
        assert started.announced.wait(60), "".join(started.lines)
    assert not socket_path.exists()
