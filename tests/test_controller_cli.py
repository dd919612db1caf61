"""``beamer controller`` and ``beamer status`` as users run them: a real process, a real
switch server, events over the Unix socket, clean exit on SIGTERM, one-line errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from controller_process import REPO, controller_argv, embedded_switch, write_topology
from google.protobuf import text_format

from control.cli import main
from control.controller import Controller, ControllerConfig
from control.controller_cli import (
    DEFAULT_P4,
    bmv2_artifacts,
    embedded_artifacts,
    format_status,
    load_policy,
)
from control.errors import UserError
from control.events import EventClient
from control.p4runtime_client import P4RuntimeClient
from control.topology import parse_topology
from softswitch.p4runtime_server import P4RuntimeServer


@pytest.fixture
def switch_server() -> Iterator[P4RuntimeServer]:
    with embedded_switch() as server:
        yield server


def test_bad_arguments_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.json"
    assert main(["controller", "--topo", str(missing), "--policy", "beamer"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"beamer: error: {missing}: no such topology file"
    ]
    assert main(["controller", "--topo", "x.json", "--policy", "beamer", "--queues", "9"]) == 2
    assert "--queues: 9 is out of range 1..8" in capsys.readouterr().err
    topo = str(write_topology(tmp_path, "127.0.0.1:9", hosts=2))
    spec = "beamer-lookahead:tail_power=0.5"
    assert main(["controller", "--topo", topo, "--policy", spec]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"beamer: error: policy {spec!r}: tail_power=0.5 is not a number from 1 to 10"
    ]
    for option in ("--counter-interval", "--write-budget", "--events-timeout"):
        for seconds in ("0", "-1", "nan", "inf", "1e300", "1e-9", "1e-320", "0.0009"):
            argv = ["controller", "--topo", topo, "--policy", "fair", option, seconds]
            assert main(argv) == 2
            assert f"{option}: {float(seconds)} is not in [0.001, 3600] seconds" in (
                capsys.readouterr().err
            )
    assert main(["status", "--events-socket", str(tmp_path / "absent.sock")]) == 2
    assert capsys.readouterr().err.startswith("beamer: error: controller at ")


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--events-addr", "127.0.0.1:99999", "--events-addr: '127.0.0.1:99999' is not HOST:PORT"),
        ("--events-addr", "[]:9100", "--events-addr: '[]:9100' is not HOST:PORT"),
        (
            "--events-addr",
            "127.0.0.1\n:9100",
            "--events-addr: '127.0.0.1\\n:9100': the host '127.0.0.1\\n' holds a space or a "
            "control character",
        ),
        (  # taken as not given, it would serve the default socket instead
            "--events-socket",
            "",
            "--events-socket: an empty path (leave the option out for the default)",
        ),
        (  # a newline in the socket's name split the line that logs it
            "--events-socket",
            "ev\nents.sock",
            "--events-socket: 'ev\\nents.sock' holds a control character ('\\n')",
        ),
    ],
)
def test_event_api_options_are_refused_up_front_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str, message: str
) -> None:
    """Checked before the topology is read (absent here) and the switches are reached."""
    argv = ["controller", "--topo", str(tmp_path / "absent.json"), "--policy", "fair"]
    assert main([*argv, option, value]) == 2
    assert capsys.readouterr().err.splitlines() == [f"beamer: error: {message}"]


def test_a_topology_whose_routes_overflow_the_forwarding_table_is_refused() -> None:
    """One /32 route per host on every switch: with more hosts than ``ipv4_lpm`` holds,
    every switch would stay in error for ever."""
    hosts = [
        {
            "name": f"h{i}",
            "ip": f"10.0.{i >> 8}.{i & 255}",
            "prefix_len": 16,
            "mac": f"02:00:00:00:{i >> 8:02x}:{i & 255:02x}",
        }
        for i in range(1, 1198)
    ]
    links = [
        {"node1": "s0", "port1": 500, "node2": "s1", "port2": 500},
        {"node1": "s1", "port1": 501, "node2": "s2", "port2": 501},
    ]
    links += [{"node1": f"h{i}", "node2": f"s{i % 3}", "port2": i // 3} for i in range(1, 1198)]
    switches = [
        {"name": f"s{k}", "device_id": k, "grpc_addr": f"127.0.0.1:{19560 + k}"} for k in range(3)
    ]
    topology = parse_topology(
        {"name": "big", "switches": switches, "hosts": hosts, "links": links}, source="big.json"
    )
    policy, assign = load_policy("fair", 8)
    config = ControllerConfig(topology, {"embedded": embedded_artifacts(DEFAULT_P4)}, "fair")
    with pytest.raises(UserError) as refused:
        Controller(config, policy, assign)
    assert str(refused.value) == (
        "big.json: switch s0 needs 1,197 routes (one per host), more than the pipeline's "
        "MyIngress.ipv4_lpm holds (1,024 entries)"
    )


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGHUP], ids=["term", "hup"])
def test_controller_process_serves_events_and_status_and_cleans_up(
    tmp_path: Path,
    switch_server: P4RuntimeServer,
    capsys: pytest.CaptureFixture[str],
    stop_signal: int,
) -> None:
    topo = write_topology(tmp_path, switch_server.addr, hosts=2)
    socket_path = tmp_path / "controller.sock"
    process = subprocess.Popen(
        controller_argv(topo, socket_path),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not socket_path.exists():
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "controller did not open its socket"
            time.sleep(0.05)
        with EventClient(str(socket_path)) as client:
            # The API answers while the switch is brought up; it is ready soon after.
            while client.status()["switches"][0]["state"] != "ready":
                assert time.monotonic() < deadline, "the switch did not become ready"
                time.sleep(0.05)
            client.experiment_released(
                {
                    "experiment_id": 4,
                    "stages": [
                        {
                            "stage_id": 0,
                            "trials": [
                                {
                                    "trial_id": 2,
                                    "iterations": 3,
                                    "flows": [{"src": "h1", "dst": "h2", "size_bytes": 10**6}],
                                }
                            ],
                        }
                    ],
                }
            )
            client.stage_released(4, 0)
            client.trial_started(4, 0, 2)
            assert client.coflow_started(4, 0, 2, 0) == 2 << 16
        capsys.readouterr()
        assert main(["status", "--events-socket", str(socket_path)]) == 0
        shown = capsys.readouterr().out
        assert "experiment 4 stage 0: class 7" in shown
        assert "stage_class[experiment_id=4, stage_id=0] -> set_class(class_id=7)" in shown
        assert main(["status", "--events-socket", str(socket_path), "--json"]) == 0
        as_json = json.loads(capsys.readouterr().out)
        assert as_json["order"][0]["coflow"] == [4, 0, 2, 0]
        # The switch holds what the status says, read over P4Runtime independently.
        reader = P4RuntimeClient(switch_server.addr, 0).read_only()
        try:
            assert len(reader.read_table(0)) == len(as_json["switches"][0]["entries"])
        finally:
            reader.close()
        process.send_signal(stop_signal)
        assert process.wait(timeout=20) == 0
        assert not socket_path.exists()
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
        if process.stderr is not None:
            process.stderr.close()


def test_format_status_lists_order_stages_and_entries() -> None:
    status = {
        "policy": "beamer",
        "queues": 8,
        "election_id": 1,
        "events_applied": 3,
        "last_reaction_ms": 1.5,
        "switches": [
            {
                "name": "s1",
                "address": "127.0.0.1:9559",
                "state": "backup",
                "election_id": 3 << 64,
                "error": "not primary",
                "entries": ["stage_class[experiment_id=1, stage_id=0] -> set_class(class_id=7)"],
            }
        ],
        "order": [
            {"coflow": [1, 0, 3, 2], "coflow_id": (3 << 16) | 2, "class": 7, "override": True}
        ],
        "stages": [{"experiment_id": 1, "stage_id": 0, "class": 6, "fallback": True}],
    }
    text = format_status(status)
    assert "s1       127.0.0.1:9559         backup  election id 3,0  (not primary)" in text
    assert "election id 0,1," in text
    assert "(1, 0, 3, 2)" in text and "0x00030002" in text and "coflow entry" in text
    assert "experiment 1 stage 0: class 6  (fallback: stage-level only)" in text
    assert "entries on s1 (1):" in text


def test_bmv2_artifacts_come_from_p4c_outputs(tmp_path: Path) -> None:
    embedded = embedded_artifacts(DEFAULT_P4)
    p4info_path = tmp_path / "beamer.p4info.txtpb"
    p4info_path.write_text(text_format.MessageToString(embedded.p4info))
    json_path = tmp_path / "beamer.json"
    json_path.write_bytes(b'{"program": "beamer.p4"}')
    artifacts = bmv2_artifacts(json_path, p4info_path)
    assert artifacts.p4info == embedded.p4info
    assert artifacts.device_config == b'{"program": "beamer.p4"}'
    assert artifacts.cookie != embedded.cookie
    with pytest.raises(UserError, match="needs --bmv2-json and --p4info"):
        bmv2_artifacts(json_path, None)
    with pytest.raises(UserError, match=r"absent\.json: no such file$"):
        bmv2_artifacts(tmp_path / "absent.json", p4info_path)
    p4info_path.write_text("tables { preamble { id: nope } }")
    with pytest.raises(UserError, match=r"beamer\.p4info\.txtpb:1:"):
        bmv2_artifacts(json_path, p4info_path)
