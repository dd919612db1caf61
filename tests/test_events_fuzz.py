"""Fuzz of the event API: 10,000 random and mutated events against a running controller.

A model of the schedule rules, written here independently of the controller, says for
each event whether it must be accepted. Every reply must agree with it (200 or a
4xx, never a 500, never a hang), and at the end ``beamer status`` must show exactly
the coflows, running stages and event count the model predicts, with the switch
holding what the status lists.
"""

from __future__ import annotations

import http.client
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from controller_process import HOSTS, ControllerProcess, controller_process, embedded_switch

from control.cli import main
from control.p4runtime_client import P4RuntimeClient
from softswitch.p4runtime_server import P4RuntimeServer

EVENTS = 10_000
SEED = 20261203
REPLY_TIMEOUT_S = 60.0
"""A reply slower than this is a hang."""

# --- the model ----------------------------------------------------------------------------


@dataclass
class _Trial:
    iterations: int
    started: bool = False
    stopped: bool = False
    done: int = 0
    active: int | None = None


@dataclass
class _Experiment:
    stages: list[tuple[int, dict[int, int]]]  # (stage id, {trial id: iterations})
    index: int = -1
    running: bool = False
    trials: dict[int, _Trial] = field(default_factory=dict)

    @property
    def stage_id(self) -> int:
        return self.stages[self.index][0]


class Model:
    """The schedule rules of docs/controller.md, for events whose fields are valid."""

    def __init__(self) -> None:
        self.experiments: dict[int, _Experiment] = {}
        self.accepted = 0

    def _running(self, e: int, s: int) -> _Experiment | None:
        record = self.experiments.get(e)
        if record is None or not record.running or record.stage_id != s:
            return None
        return record

    def apply(self, event: dict[str, Any]) -> bool:
        """Apply the event if the rules accept it; returns whether they do."""
        ok = self._apply(event)
        self.accepted += ok
        return ok

    def _apply(self, ev: dict[str, Any]) -> bool:
        kind = ev["type"]
        if kind == "experiment_released":
            plan = ev["experiment"]
            if plan["experiment_id"] in self.experiments:
                return False
            stages = [
                (s["stage_id"], {t["trial_id"]: t["iterations"] for t in s["trials"]})
                for s in plan["stages"]
            ]
            self.experiments[plan["experiment_id"]] = _Experiment(stages)
            return True
        e = ev["experiment_id"]
        if kind == "experiment_finished":
            return self.experiments.pop(e, None) is not None
        record = self.experiments.get(e)
        if record is None:
            return False
        s = ev["stage_id"]
        if kind == "stage_released":
            nxt = record.index + 1
            if record.running or nxt >= len(record.stages) or record.stages[nxt][0] != s:
                return False
            record.index, record.running = nxt, True
            record.trials = {t: _Trial(n) for t, n in record.stages[nxt][1].items()}
            return True
        record = self._running(e, s)
        if record is None:
            return False
        if kind == "stage_completed":
            if any(t.active is not None for t in record.trials.values()):
                return False
            record.running = False
            if record.index == len(record.stages) - 1:
                del self.experiments[e]
            return True
        trial = record.trials.get(ev["trial_id"])
        if trial is None:
            return False
        if kind == "trial_started":
            if trial.started:
                return False
            trial.started = True
        elif kind == "trial_stopped":
            if not trial.started or trial.stopped:
                return False
            trial.stopped, trial.active = True, None
        elif kind == "coflow_started":
            i = ev["iteration"]
            if not trial.started or trial.stopped or trial.active is not None:
                return False
            if i != trial.done or i >= trial.iterations:
                return False
            trial.active = i
        else:  # coflow_finished
            if trial.active != ev["iteration"]:
                return False
            trial.active, trial.done = None, trial.done + 1
        return True

    def coflows(self) -> set[tuple[int, int, int, int]]:
        return {
            (e, record.stage_id, t, trial.active)
            for e, record in self.experiments.items()
            if record.running
            for t, trial in record.trials.items()
            if trial.active is not None
        }

    def running_stages(self) -> set[tuple[int, int]]:
        return {(e, r.stage_id) for e, r in self.experiments.items() if r.running}


# --- event generation ---------------------------------------------------------------------


def _host(rng: random.Random) -> str | int:
    index = rng.randrange(HOSTS)
    return f"h{index + 1}" if rng.random() < 0.5 else index


def _plan(rng: random.Random, experiment_id: int) -> dict[str, Any]:
    extreme = rng.random() < 0.1
    stage_ids = rng.sample(range(6), rng.randint(1, 3))
    stages = []
    for stage_id in stage_ids:
        trials = []
        for trial_id in rng.sample(range(5), rng.randint(1, 3)):
            flows = []
            for _ in range(rng.randint(1, 2)):
                src, dst = rng.sample(range(HOSTS), 2)
                size = rng.choice([2**62, 1]) if extreme else rng.randint(1, 10**9)
                flows.append(
                    {
                        "src": f"h{src + 1}" if rng.random() < 0.5 else src,
                        "dst": dst,
                        "size_bytes": size,
                    }
                )
            trials.append(
                {
                    "trial_id": trial_id,
                    "iterations": (2**31 - 1) if extreme else rng.randint(1, 3),
                    "compute_s": rng.choice([0, 0.5, 1e9]) if extreme else rng.random(),
                    "hosts": [_host(rng)],
                    "flows": flows,
                }
            )
        stages.append({"stage_id": stage_id, "trials": trials})
    return {
        "experiment_id": experiment_id,
        "kind": rng.choice(["sha", "hyperband"]),
        "weight": rng.choice([1e-6, 1e6, 1]) if extreme else rng.uniform(0.5, 4.0),
        "arrival_s": rng.uniform(0, 100),
        "stages": stages,
    }


def _sensible(rng: random.Random, model: Model) -> dict[str, Any]:
    """An event that follows the state often enough that most runs go far."""
    if not model.experiments or rng.random() < 0.08:
        e = rng.randrange(6)
        return {"type": "experiment_released", "experiment": _plan(rng, e)}
    e = rng.choice(sorted(model.experiments))
    record = model.experiments[e]
    if not record.running:
        nxt = min(record.index + 1, len(record.stages) - 1)
        if rng.random() < 0.03:
            return {"type": "experiment_finished", "experiment_id": e}
        return {"type": "stage_released", "experiment_id": e, "stage_id": record.stages[nxt][0]}
    s = record.stage_id
    t = rng.choice(sorted(record.trials))
    trial = record.trials[t]
    ids = {"experiment_id": e, "stage_id": s, "trial_id": t}
    roll = rng.random()
    if roll < 0.05:
        return {"type": "stage_completed", "experiment_id": e, "stage_id": s}
    if roll < 0.08:
        return {"type": "trial_stopped", **ids}
    if not trial.started:
        return {"type": "trial_started", **ids}
    if trial.active is not None:
        return {"type": "coflow_finished", **ids, "iteration": trial.active}
    if trial.done >= trial.iterations or trial.stopped or roll < 0.15:
        return {"type": "stage_completed", "experiment_id": e, "stage_id": s}
    return {"type": "coflow_started", **ids, "iteration": trial.done}


def _perturb(rng: random.Random, event: dict[str, Any]) -> None:
    """A valid but possibly impossible change: the model decides."""
    keys = [k for k in event if k.endswith("_id") or k == "iteration"]
    if keys:
        key = rng.choice(keys)
        event[key] = max(0, event[key] + rng.choice([-1, 1, 2]))


BAD_NUMBERS: list[Any] = [-1, 65536, 1.5, "1", None, True, [1], {"a": 1}, 2**70]
BAD_PLAN_CHANGES: list[tuple[str, Any]] = [
    ("weight", 0),
    ("weight", -1.0),
    ("weight", 1e7),
    ("weight", "1"),
    ("arrival_s", -0.5),
    ("arrival_s", 1e10),
    ("experiment_id", 70000),
    ("stages", []),
    ("stages", {}),
    ("extra", 1),
]
BAD_TRIAL_CHANGES: list[tuple[str, Any]] = [
    ("iterations", 0),
    ("iterations", 2**31),
    ("compute_s", -1),
    ("compute_s", 1e10),
    ("flows", []),
    ("hosts", ["h99"]),
    ("hosts", [HOSTS]),
    ("trial_id", -3),
]
BAD_FLOW_CHANGES: list[tuple[str, Any]] = [
    ("size_bytes", 0),
    ("size_bytes", 2**62 + 1),
    ("src", "h99"),
    ("dst", HOSTS + 3),
    ("src", 1.0),
]


@dataclass
class Request:
    body: bytes
    headers: dict[str, str]
    expect: int | None
    """The status the request must get; None: what the model says (200 or 400)."""
    event: dict[str, Any] | None = None


def _invalid(rng: random.Random, event: dict[str, Any]) -> Request:
    """A mutation the controller must refuse, with the status it must refuse it with."""
    json_headers = {"Content-Type": "application/json"}
    body = json.dumps(event).encode()
    roll = rng.randrange(12)
    if roll == 0:
        return Request(body[: rng.randrange(len(body))], json_headers, 400)
    if roll == 1:
        cut = rng.randrange(len(body))
        return Request(body[:cut] + b"\xff" + body[cut + 1 :], json_headers, 400)
    if roll == 2:
        nan = rng.choice(["NaN", "Infinity", "-Infinity", "1e400", "7" * 5000])
        return Request(
            body.replace(b"}", b', "experiment_id": ' + nan.encode() + b"}", 1), json_headers, 400
        )
    if roll == 3:
        depth = rng.choice([2000, 100_000])
        return Request(b"[" * depth + b"]" * depth, json_headers, 400)
    if roll == 4:
        kind = rng.choice(["text/plain", "application/x-www-form-urlencoded", ""])
        return Request(body, {"Content-Type": kind} if kind else {}, 415)
    if roll == 5:
        origin = rng.choice(["http://evil.example", "null", "https://127.0.0.1"])
        return Request(body, {**json_headers, "Origin": origin}, 403)
    mutated = json.loads(body)
    if mutated["type"] == "experiment_released":
        plan = mutated["experiment"]
        trial = rng.choice(rng.choice(plan["stages"])["trials"])
        target, changes = rng.choice(
            [
                (plan, BAD_PLAN_CHANGES),
                (trial, BAD_TRIAL_CHANGES),
                (rng.choice(trial["flows"]), BAD_FLOW_CHANGES),
            ]
        )
        key, value = rng.choice(changes)
        target[key] = value
    elif roll < 9:
        key = rng.choice([k for k in mutated if k != "type"])
        mutated[key] = rng.choice(BAD_NUMBERS)
    elif roll == 9:
        del mutated[rng.choice([k for k in mutated if k != "type"])]
    elif roll == 10:
        mutated["surplus"] = 0
    else:
        mutated["type"] = rng.choice(["stage_start", "", 3, None])
    return Request(json.dumps(mutated).encode(), json_headers, 400)


def requests(rng: random.Random, model: Model) -> Iterator[Request]:
    """Endless requests; the model's state is read as it changes."""
    while True:
        event = _sensible(rng, model)
        roll = rng.random()
        if roll < 0.25:
            yield _invalid(rng, event)
            continue
        if roll < 0.45:
            _perturb(rng, event)
        elif roll < 0.5:
            event = {
                "type": rng.choice(["stage_released", "trial_started", "coflow_finished"]),
                "experiment_id": rng.randrange(6),
                "stage_id": rng.randrange(6),
                "trial_id": rng.randrange(5),
                "iteration": rng.randrange(4),
            }
            if event["type"] == "stage_released":
                del event["trial_id"], event["iteration"]
            elif event["type"] == "trial_started":
                del event["iteration"]
        yield Request(json.dumps(event).encode(), {"Content-Type": "application/json"}, None, event)


# --- the run ------------------------------------------------------------------------------


class _Client:
    def __init__(self, controller: ControllerProcess) -> None:
        self.controller = controller
        self.connection: http.client.HTTPConnection | None = None

    def post(self, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if self.connection is None:
            self.connection = http.client.HTTPConnection(
                self.controller.host, self.controller.port, timeout=REPLY_TIMEOUT_S
            )
        self.connection.request("POST", "/v1/events", body=body, headers=headers)
        response = self.connection.getresponse()
        reply = json.loads(response.read())
        if response.getheader("Connection", "").lower() == "close":
            self.connection.close()
            self.connection = None
        return response.status, reply


@pytest.fixture(scope="module")
def switch() -> Iterator[P4RuntimeServer]:
    with embedded_switch() as server:
        yield server


@pytest.mark.slow
def test_ten_thousand_random_and_mutated_events(
    tmp_path: Path, switch: P4RuntimeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(SEED)
    model = Model()
    statuses: dict[int, int] = {}
    with controller_process(tmp_path, switch.addr) as controller:
        client = _Client(controller)
        source = requests(rng, model)
        for number in range(EVENTS):
            request = next(source)
            status, reply = client.post(request.body, request.headers)
            statuses[status] = statuses.get(status, 0) + 1
            where = f"seed {SEED}, request {number}: {request.body[:200]!r} -> {status} {reply}"
            assert status != 500, where
            if request.expect is not None:
                assert status == request.expect, where
                continue
            assert request.event is not None
            expected = model.apply(request.event)
            assert status == (200 if expected else 400), where
            if request.event["type"] == "coflow_started" and expected:
                assert reply["coflow_id"] == request.event["trial_id"] << 16 | (
                    request.event["iteration"] & 0xFFFF
                )
        capsys.readouterr()
        assert main(["status", "--events-addr", controller.address, "--json"]) == 0
        status_now = json.loads(capsys.readouterr().out)
    assert statuses.get(200, 0) == model.accepted
    assert model.accepted > EVENTS // 4, statuses  # the run went far into the schedule
    assert status_now["events_applied"] == model.accepted
    assert {tuple(item["coflow"]) for item in status_now["order"]} == model.coflows()
    stages = {(s["experiment_id"], s["stage_id"]) for s in status_now["stages"]}
    busy = {(e, s) for e, s, _, _ in model.coflows()}
    assert busy <= stages <= model.running_stages()
    (switch_status,) = status_now["switches"]
    assert switch_status["state"] == "ready"
    reader = P4RuntimeClient(switch.addr, 0).read_only()
    try:
        assert len(reader.read_table(0)) == len(switch_status["entries"])
    finally:
        reader.close()
