"""Event schema validation and the HTTP/JSON transport on TCP and on a Unix socket."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from control.errors import UserError
from control.events import (
    CoflowStarted,
    EventClient,
    EventError,
    EventHandler,
    EventRejected,
    EventServer,
    ExperimentReleased,
    StageReleased,
    event_to_json,
    experiment_to_json,
    parse_event,
)
from control.model import Experiment, Flow, Stage, TrialStage


def _plan() -> dict[str, Any]:
    return {
        "experiment_id": 3,
        "stages": [
            {
                "stage_id": 0,
                "trials": [
                    {
                        "trial_id": 1,
                        "iterations": 2,
                        "compute_s": 0.5,
                        "hosts": ["h1", 1],
                        "flows": [{"src": "h1", "dst": 1, "size_bytes": 1000}],
                    }
                ],
            }
        ],
    }


def _resolve(value: str | int) -> int:
    names = {"h1": 0, "h2": 1}
    if isinstance(value, str):
        return names[value]
    if value not in names.values():
        raise KeyError(value)
    return value


def test_experiment_plan_parses_with_host_names_and_round_trips() -> None:
    event = parse_event({"type": "experiment_released", "experiment": _plan()}, _resolve)
    assert isinstance(event, ExperimentReleased)
    trial = event.experiment.stages[0].trials[0]
    assert trial.sync_flows == (Flow(0, 1, 1000),)
    assert trial.hosts == (0, 1)
    again = parse_event(event_to_json(event), _resolve)
    assert again == event


def test_simple_events_parse() -> None:
    raw = {
        "type": "coflow_started",
        "experiment_id": 1,
        "stage_id": 2,
        "trial_id": 3,
        "iteration": 4,
    }
    assert parse_event(raw) == CoflowStarted(1, 2, 3, 4)
    assert event_to_json(CoflowStarted(1, 2, 3, 4)) == raw


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], r"an event must be a JSON object"),
        ({"type": "launch"}, r"type: \"launch\" is not one of experiment_released, stage_rel"),
        ({"type": [1, 2]}, r"type: a JSON list is not one of experiment_released"),
        ({"type": {}}, r"type: a JSON object is not one of experiment_released"),
        ({"type": None}, r"type: null is not one of experiment_released"),
        ({"type": "stage_released", "experiment_id": 1}, r"stage_id: missing required field"),
        (
            {"type": "stage_released", "experiment_id": 1, "stage_id": 1, "x": 0},
            r"x: unknown field",
        ),
        (
            {"type": "stage_released", "experiment_id": 65536, "stage_id": 1},
            r"experiment_id: 65536 is out of range 0..65535",
        ),
        (
            {"type": "stage_released", "experiment_id": True, "stage_id": 1},
            r"experiment_id: expected an integer, got true",
        ),
        (
            {"type": "experiment_released", "experiment": {**_plan(), "stages": []}},
            r"experiment.stages: an experiment needs at least one stage",
        ),
    ],
)
def test_bad_events_name_the_field(raw: Any, message: str) -> None:
    with pytest.raises(EventError, match=message):
        parse_event(raw, _resolve)


def _plan_with(mutate: Any) -> dict[str, Any]:
    plan = _plan()
    mutate(plan)
    return {"type": "experiment_released", "experiment": plan}


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda p: p["stages"][0]["trials"][0]["flows"][0].update(dst="h9"),
            r"experiment.stages\[0\].trials\[0\].flows\[0\].dst: unknown host \"h9\"",
        ),
        (
            lambda p: p["stages"][0]["trials"][0]["flows"][0].update(size_bytes=0),
            r"flows\[0\].size_bytes: 0 is out of range",
        ),
        (
            lambda p: p["stages"][0]["trials"][0]["flows"][0].update(dst="h1"),
            r"flows\[0\]: a flow needs two different hosts",
        ),
        (
            lambda p: p["stages"][0]["trials"].append(p["stages"][0]["trials"][0]),
            r"trials\[1\].trial_id: duplicate trial id 1",
        ),
        (
            lambda p: p["stages"][0]["trials"][0].update(iterations=0),
            r"trials\[0\].iterations: 0 is out of range 1\.\.",
        ),
        (lambda p: p.update(weight=0), r"experiment.weight: 0 is out of range 1e-06\.\.1e\+06"),
        (lambda p: p.update(weight=float("nan")), r"experiment.weight: NaN is out of range"),
        (lambda p: p.update(weight=float("inf")), r"experiment.weight: Infinity is out of"),
        (lambda p: p.update(weight=1e7), r"experiment.weight: 10000000.0 is out of range"),
        (lambda p: p.update(weight=10**400), r"weight: an integer of 401 digits is out of range"),
        (lambda p: p.update(arrival_s=-1), r"experiment.arrival_s: -1 is out of range 0\.\."),
        (
            lambda p: p.update(kind="k" * 4_000_000),
            r"experiment.kind: 4,000,000 characters, more than 64",
        ),
        (lambda p: p.update(kind="sha\u202e"), r"kind: U\+202E is not a printable character"),
        (
            lambda p: p["stages"][0]["trials"][0].update(compute_s=float("-inf")),
            r"trials\[0\].compute_s: -Infinity is out of range",
        ),
        (
            lambda p: p["stages"][0]["trials"][0].update(compute_s=[[[0]]]),
            r"trials\[0\].compute_s: expected a number, got a JSON list",
        ),
        (
            lambda p: p.update({"x" * 10000: 1}),
            r"experiment.x{37}\.\.\.: unknown field",
        ),
    ],
)
def test_bad_plans_name_the_field(mutate: Any, message: str) -> None:
    with pytest.raises(EventError, match=message):
        parse_event(_plan_with(mutate), _resolve)


def test_experiment_to_json_matches_the_model() -> None:
    experiment = Experiment(
        5, 0.0, (Stage(0, (TrialStage(2, 3, 0.1, (Flow(0, 1, 10),), (0, 1)),)),)
    )
    event = parse_event(
        {"type": "experiment_released", "experiment": experiment_to_json(experiment)}
    )
    assert isinstance(event, ExperimentReleased)
    assert event.experiment == experiment


class _Recorder(EventHandler):
    """Accepts stage_released events and records them; refuses everything else."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.lock = threading.Lock()

    def handle_event(self, raw: Any) -> dict[str, Any]:
        event = parse_event(raw)
        if not isinstance(event, StageReleased):
            raise EventError(f"{event.type} is not accepted here")
        with self.lock:
            self.events.append(event)
        return {"count": len(self.events)}

    def status(self) -> dict[str, Any]:
        return {"events": len(self.events)}


def test_tcp_server_and_client_keep_alive_and_errors() -> None:
    handler = _Recorder()
    server = EventServer(handler, tcp_addr="127.0.0.1:0")
    server.start()
    try:
        with EventClient(server.url) as client:
            assert client.health()
            assert client.stage_released(1, 0)["count"] == 1
            assert client.stage_released(1, 1)["count"] == 2
            with pytest.raises(EventRejected, match="trial_started is not accepted here"):
                client.trial_started(1, 1, 0)
            with pytest.raises(EventRejected, match="stage_id: missing required field"):
                client.send({"type": "stage_released", "experiment_id": 1})
            assert client.status() == {"events": 2}
        assert handler.events == [StageReleased(1, 0), StageReleased(1, 1)]
        # Raw HTTP: a body that is not JSON gets 400 with a message, an unknown path 404.
        host, port = server.tcp_address or ("", 0)
        connection = http.client.HTTPConnection(host, port, timeout=5)
        connection.request(
            "POST", "/v1/events", body=b"{nope", headers={"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        assert response.status == 400
        assert "body is not JSON" in json.loads(response.read())["error"]
        connection.request("GET", "/v2/anything")
        response = connection.getresponse()
        assert response.status == 404
        response.read()
        connection.close()
    finally:
        server.stop()


def test_unix_socket_serves_the_same_protocol(tmp_path: Path) -> None:
    path = tmp_path / "controller.sock"
    handler = _Recorder()
    server = EventServer(handler, tcp_addr=None, unix_path=path)
    server.start()
    try:
        with EventClient(str(path)) as client:
            assert client.stage_released(7, 0)["count"] == 1
            with pytest.raises(EventRejected):
                client.coflow_started(7, 0, 0, 0)
    finally:
        server.stop()
    assert not path.exists()
    assert handler.events == [StageReleased(7, 0)]


def test_stale_socket_is_replaced_but_a_live_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens: what a crash leaves behind
    first = EventServer(_Recorder(), tcp_addr=None, unix_path=path)
    first.start()
    try:
        with pytest.raises(UserError, match="another controller is listening"):
            EventServer(_Recorder(), tcp_addr=None, unix_path=path)
    finally:
        first.stop()
    regular = tmp_path / "file"
    regular.write_text("x")
    with pytest.raises(UserError, match="exists and is not a socket"):
        EventServer(_Recorder(), tcp_addr=None, unix_path=regular)


def test_a_second_controller_on_a_taken_address_leaves_the_first_ones_socket(
    tmp_path: Path,
) -> None:
    """Its TCP bind fails first; cleaning up, it used to remove the socket file it never
    bound, the live controller's."""
    path = tmp_path / "c.sock"
    first = EventServer(_Recorder(), tcp_addr="127.0.0.1:0", unix_path=path)
    first.start()
    try:
        with pytest.raises(UserError, match=r"cannot listen on 127\.0\.0\.1"):
            EventServer(_Recorder(), tcp_addr=first.url, unix_path=path)
        assert path.exists()
        assert EventClient(str(path), timeout_s=5).health() is True
    finally:
        first.stop()
    assert not path.exists()  # the first removes its own


def test_unreachable_controller_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="controller at"):
        EventClient(str(tmp_path / "absent.sock"), timeout_s=1).health()
