"""The controller against the embedded P4Runtime server: provisioning, make-before-break
writes, fallback, and recovery of switch and controller, read back over P4Runtime.

The server and its table state are real; only the device-config loader is a double
(a program known by its P4Info, with beamer.p4's table names), so these tests cover
the control plane whatever the state of the P4 frontend.
"""

from __future__ import annotations

import inspect
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Self

import grpc
import pytest
from controller_helpers import SmallestFirst, one_class_per_rank
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2
from p4runtime_sh import shell as p4runtime_shell

from control.controller import Controller, ControllerConfig, PipelineArtifacts
from control.entries import EntryMap, from_table_entry
from control.errors import UserError
from control.events import EventError
from control.p4runtime_client import NotPrimaryError, P4Names, P4RuntimeClient
from control.policies.base import Ranking, Snapshot
from control.topology import Topology, parse_topology
from softswitch.p4rt import pipeline_config
from softswitch.p4runtime_server import P4RuntimeServer
from softswitch.runtime import RuntimeState

P4INFO = """
pkg_info { arch: "v1model" }
tables {
  preamble { id: 37375156 name: "MyIngress.ipv4_lpm" alias: "ipv4_lpm" }
  match_fields { id: 1 name: "hdr.ipv4.dstAddr" bitwidth: 32 match_type: LPM }
  action_refs { id: 28792405 }
  action_refs { id: 25652968 }
  initial_default_action { action_id: 25652968 }
  size: 1024
}
tables {
  preamble { id: 41000001 name: "MyIngress.stage_class" alias: "stage_class" }
  match_fields { id: 1 name: "hdr.beamer_tag.experiment_id" bitwidth: 16 match_type: EXACT }
  match_fields { id: 2 name: "hdr.beamer_tag.stage_id" bitwidth: 16 match_type: EXACT }
  action_refs { id: 23000001 }
  action_refs { id: 21257015 }
  initial_default_action { action_id: 21257015 }
  direct_resource_ids: 330000001
  size: 64
}
tables {
  preamble { id: 41000002 name: "MyIngress.coflow_class" alias: "coflow_class" }
  match_fields { id: 1 name: "hdr.beamer_tag.experiment_id" bitwidth: 16 match_type: EXACT }
  match_fields { id: 2 name: "hdr.beamer_tag.stage_id" bitwidth: 16 match_type: EXACT }
  match_fields { id: 3 name: "hdr.beamer_tag.coflow_id" bitwidth: 32 match_type: EXACT }
  action_refs { id: 23000001 }
  action_refs { id: 21257015 }
  initial_default_action { action_id: 21257015 }
  size: COFLOW_SIZE
}
actions {
  preamble { id: 28792405 name: "MyIngress.ipv4_forward" alias: "ipv4_forward" }
  params { id: 1 name: "dstAddr" bitwidth: 48 }
  params { id: 2 name: "port" bitwidth: 9 }
}
actions { preamble { id: 25652968 name: "MyIngress.drop" alias: "drop" } }
actions {
  preamble { id: 23000001 name: "MyIngress.set_class" alias: "set_class" }
  params { id: 1 name: "class_id" bitwidth: 3 }
}
actions { preamble { id: 21257015 name: "NoAction" alias: "NoAction" } }
direct_counters {
  preamble { id: 330000001 name: "MyIngress.stage_counter" alias: "stage_counter" }
  spec { unit: BOTH }
  direct_table_id: 41000001
}
"""


def _p4info(coflow_size: int = 64) -> p4info_pb2.P4Info:
    return text_format.Parse(P4INFO.replace("COFLOW_SIZE", str(coflow_size)), p4info_pb2.P4Info())


class _Program:
    """Device-config double: the config is the serialised P4Info."""

    MAGIC = b"p4info:"

    def __init__(self, p4info: p4info_pb2.P4Info) -> None:
        self.p4info = p4info

    def device_config(self) -> bytes:
        return self.MAGIC + self.p4info.SerializeToString(deterministic=True)

    @classmethod
    def from_device_config(cls, data: bytes) -> _Program:
        return cls(p4info_pb2.P4Info.FromString(data[len(cls.MAGIC) :]))

    def new_runtime_state(self) -> RuntimeState:
        return RuntimeState(self.p4info)


class _Pipeline:
    def __init__(self, program: _Program) -> None:
        self.program = program
        self.runtime = program.new_runtime_state()


class _Switch:
    def __init__(self) -> None:
        self.pipeline: _Pipeline | None = None

    def set_pipeline(self, pipeline: _Pipeline) -> None:
        self.pipeline = pipeline


@dataclass
class Rig:
    switch: _Switch
    server: P4RuntimeServer
    topology: Topology
    artifacts: PipelineArtifacts
    controllers: list[Controller] = field(default_factory=list)

    @classmethod
    def serving(
        cls, switch: _Switch, server: P4RuntimeServer, p4info: p4info_pb2.P4Info, **more: Any
    ) -> Self:
        """A rig around a started server, its controllers running ``p4info``'s program."""
        program = _Program(p4info)
        artifacts = PipelineArtifacts(program.p4info, program.device_config())
        return cls(switch, server, _topology(server.addr), artifacts, **more)

    def close(self) -> None:
        """Stop every controller the test made, then the switch."""
        for controller in self.controllers:
            controller.stop()
        self.server.stop(0)

    def controller(self, **overrides: Any) -> Controller:
        settings: dict[str, Any] = {
            "topology": self.topology,
            "artifacts": {"embedded": self.artifacts},
            "policy_name": "smallest-first",
            "election_id": 10,
            "supervise_interval_s": 0.05,
            "counter_interval_s": 0.1,
            "rpc_timeout_s": 2.0,
        }
        settings.update(overrides)
        controller = Controller(ControllerConfig(**settings), SmallestFirst(), one_class_per_rank)
        self.controllers.append(controller)
        return controller

    def restart_switch(self) -> None:
        """A switch restart: the server goes away with all state; a blank one comes back."""
        self.server.stop(0)
        self.switch = _Switch()
        self.server = P4RuntimeServer(self.switch, 0, self.server.addr)
        self.server.start()

    def read_entries(self) -> EntryMap:
        """What the switch holds, read over P4Runtime by an independent client."""
        return switch_entries(self.server.addr, self.artifacts.p4info)


def switch_entries(address: str, p4info: p4info_pb2.P4Info) -> EntryMap:
    """What the switch at ``address`` holds, read over P4Runtime by an independent client."""
    names = P4Names.build(p4info)
    client = P4RuntimeClient(address, 0).read_only()
    try:
        entries = client.read_table(0)
    finally:
        client.close()
    return dict(from_table_entry(e, names) for e in entries if not e.is_default_action)


def _topology(addr: str) -> Topology:
    return parse_topology(
        {
            "name": "t",
            "switches": [{"name": "s1", "device_id": 0, "grpc_addr": addr}],
            "hosts": [
                {"name": f"h{i}", "ip": f"10.0.0.{i}", "mac": f"02:00:00:00:00:0{i}"}
                for i in (1, 2, 3)
            ],
            "links": [{"node1": f"h{i}", "node2": "s1", "port2": i} for i in (1, 2, 3)],
        }
    )


def _make_rig(monkeypatch: pytest.MonkeyPatch, coflow_size: int) -> Iterator[Rig]:
    monkeypatch.setattr(pipeline_config, "CompiledProgram", _Program)
    monkeypatch.setattr(pipeline_config, "Pipeline", _Pipeline)
    switch = _Switch()
    server = P4RuntimeServer(switch, 0, "127.0.0.1:0")
    server.start()
    rig = Rig.serving(switch, server, _p4info(coflow_size))
    try:
        yield rig
    finally:
        rig.close()


@pytest.fixture
def rig(monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    yield from _make_rig(monkeypatch, coflow_size=64)


@pytest.fixture
def small_rig(monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    yield from _make_rig(monkeypatch, coflow_size=2)


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _plan(experiment_id: int, sizes: list[int], iterations: int = 3) -> dict[str, Any]:
    """One stage, one trial per size; trial t sends ``size`` bytes h1 → h2 per iteration."""
    return {
        "experiment_id": experiment_id,
        "stages": [
            {
                "stage_id": 0,
                "trials": [
                    {
                        "trial_id": t,
                        "iterations": iterations,
                        "flows": [{"src": "h1", "dst": "h2", "size_bytes": size}],
                    }
                    for t, size in enumerate(sizes)
                ],
            },
            {
                "stage_id": 1,
                "trials": [
                    {
                        "trial_id": 0,
                        "iterations": 1,
                        "flows": [{"src": 1, "dst": 0, "size_bytes": 1}],
                    }
                ],
            },
        ],
    }


def _start_experiment(controller: Controller, experiment_id: int, sizes: list[int]) -> None:
    controller.handle_event(
        {"type": "experiment_released", "experiment": _plan(experiment_id, sizes)}
    )
    controller.handle_event(
        {"type": "stage_released", "experiment_id": experiment_id, "stage_id": 0}
    )
    for trial in range(len(sizes)):
        ids = {"experiment_id": experiment_id, "stage_id": 0, "trial_id": trial}
        controller.handle_event({"type": "trial_started", **ids})
        controller.handle_event({"type": "coflow_started", **ids, "iteration": 0})


def _class_entries(entries: EntryMap) -> dict[tuple[str, tuple[int, ...]], int]:
    """(table, key values) → class, for the two class tables."""
    result = {}
    for key, action in entries.items():
        if key.table.endswith("_class"):
            match = {name.rsplit(".", 1)[-1]: v.value for name, v in key.match}  # type: ignore[union-attr]
            values = tuple(
                match[f] for f in ("experiment_id", "stage_id", "coflow_id") if f in match
            )
            result[key.table.rsplit(".", 1)[-1], values] = dict(action.params)["class_id"]
    return result


def test_provisioning_installs_forwarding_read_back_over_p4runtime(rig: Rig) -> None:
    controller = rig.controller()
    controller.start()
    session = controller.sessions["s1"]
    assert session.state == "ready"
    assert session.provisions == 1
    installed = rig.read_entries()
    lpm = {
        dict(key.match)["hdr.ipv4.dstAddr"].value: dict(action.params)
        for key, action in installed.items()
        if key.table == "MyIngress.ipv4_lpm"
    }
    assert lpm == {
        0x0A000001: {"dstAddr": 0x020000000001, "port": 1},
        0x0A000002: {"dstAddr": 0x020000000002, "port": 2},
        0x0A000003: {"dstAddr": 0x020000000003, "port": 3},
    }
    assert installed == session.installed


def test_events_become_stage_and_coflow_entries(rig: Rig) -> None:
    controller = rig.controller()
    controller.start()
    _start_experiment(controller, 1, [100, 300, 300])
    # Trial 0 is smallest (class 7); trials 1, 2 get 6 and 5: the stage takes the most
    # urgent of the tied classes (7) and the other two get coflow entries.
    assert _class_entries(rig.read_entries()) == {
        ("stage_class", (1, 0)): 7,
        ("coflow_class", (1, 0, 1 << 16)): 6,
        ("coflow_class", (1, 0, 2 << 16)): 5,
    }
    status = controller.status()
    assert [item["class"] for item in status["order"]] == [7, 6, 5]
    assert status["switches"][0]["state"] == "ready"


def test_the_policy_sees_the_switch_s_class_count(rig: Rig) -> None:
    controller = rig.controller(queues=4)
    seen: list[int | None] = []
    rank = controller.policy.rank

    def recording(snapshot: Snapshot) -> Ranking:
        seen.append(snapshot.num_classes)
        return rank(snapshot)

    controller.policy.rank = recording
    controller.start()
    _start_experiment(controller, 1, [100, 300])
    assert seen and set(seen) == {4}


def test_policy_change_modifies_live_keys_without_deleting_them(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    controller = rig.controller()
    controller.start()
    _start_experiment(controller, 1, [500])
    _start_experiment(controller, 2, [300])
    assert _class_entries(rig.read_entries()) == {
        ("stage_class", (1, 0)): 6,
        ("stage_class", (2, 0)): 7,
    }
    sent: list[list[tuple[int, int]]] = []
    original = P4RuntimeClient.write

    def recording(client: P4RuntimeClient, updates: Any, *args: Any) -> None:
        sent.append([(u.type, u.entity.table_entry.table_id) for u in updates])
        original(client, updates, *args)

    monkeypatch.setattr(P4RuntimeClient, "write", recording)
    # A smaller experiment arrives: it takes class 7, the others move down one class each.
    reply = controller.handle_event({"type": "experiment_released", "experiment": _plan(3, [100])})
    assert reply["writes"] == {"insert": 0, "modify": 0, "delete": 0, "rpcs": 0}
    controller.handle_event({"type": "stage_released", "experiment_id": 3, "stage_id": 0})
    controller.handle_event(
        {"type": "trial_started", "experiment_id": 3, "stage_id": 0, "trial_id": 0}
    )
    reply = controller.handle_event(
        {"type": "coflow_started", "experiment_id": 3, "stage_id": 0, "trial_id": 0, "iteration": 0}
    )
    assert reply["coflow_id"] == 0
    assert reply["writes"] == {"insert": 1, "modify": 2, "delete": 0, "rpcs": 1}
    assert sorted(kind for batch in sent for kind, _ in batch) == [
        p4runtime_pb2.Update.INSERT,
        p4runtime_pb2.Update.MODIFY,
        p4runtime_pb2.Update.MODIFY,
    ]
    assert _class_entries(rig.read_entries()) == {
        ("stage_class", (1, 0)): 5,
        ("stage_class", (2, 0)): 6,
        ("stage_class", (3, 0)): 7,
    }
    # The iteration ends and the next starts: the stage keeps its entry (no churn).
    sent.clear()
    ids = {"experiment_id": 3, "stage_id": 0, "trial_id": 0}
    controller.handle_event({"type": "coflow_finished", **ids, "iteration": 0})
    controller.handle_event({"type": "coflow_started", **ids, "iteration": 1})
    assert [
        kind for batch in sent for kind, _ in batch if kind == p4runtime_pb2.Update.DELETE
    ] == []
    # The stage completes: its entry goes and the others keep their classes. Moving
    # them up would change no order, only reorder their queued packets.
    sent.clear()
    controller.handle_event({"type": "coflow_finished", **ids, "iteration": 1})
    controller.handle_event({"type": "stage_completed", "experiment_id": 3, "stage_id": 0})
    kinds = [kind for batch in sent for kind, _ in batch]
    assert kinds == [p4runtime_pb2.Update.DELETE]
    assert _class_entries(rig.read_entries()) == {
        ("stage_class", (1, 0)): 5,
        ("stage_class", (2, 0)): 6,
    }


def test_too_many_coflow_entries_fall_back_to_stage_level(small_rig: Rig) -> None:
    controller = small_rig.controller()
    controller.start()
    # Four trials, four classes: three coflow entries wanted, the table holds two.
    _start_experiment(controller, 1, [100, 200, 300, 400])
    assert controller.sessions["s1"].state == "ready"
    classes = _class_entries(small_rig.read_entries())
    assert classes == {("stage_class", (1, 0)): 7}
    status = controller.status()
    assert status["stages"] == [{"experiment_id": 1, "stage_id": 0, "class": 7, "fallback": True}]
    # Once fewer overrides are needed they fit again and are installed.
    for trial in (2, 3):
        ids = {"experiment_id": 1, "stage_id": 0, "trial_id": trial}
        controller.handle_event({"type": "trial_stopped", **ids})
    classes = _class_entries(small_rig.read_entries())
    assert classes == {("stage_class", (1, 0)): 7, ("coflow_class", (1, 0, 1 << 16)): 6}


def test_invalid_event_changes_nothing_on_the_switch(rig: Rig) -> None:
    controller = rig.controller()
    controller.start()
    _start_experiment(controller, 1, [100])
    before = rig.read_entries()
    with pytest.raises(EventError, match="stage 5 of experiment 1 is not running"):
        controller.handle_event({"type": "stage_completed", "experiment_id": 1, "stage_id": 5})
    assert rig.read_entries() == before
    assert controller.events_applied == 4  # released, stage, trial, coflow


def test_switch_restart_is_detected_reprovisioned_and_reconciled(rig: Rig) -> None:
    controller = rig.controller()
    controller.start()
    _start_experiment(controller, 1, [100, 200])
    expected = rig.read_entries()
    assert len(expected) == 3 + 2
    rig.restart_switch()
    session = controller.sessions["s1"]
    _wait_for(lambda: session.provisions == 2 and session.state == "ready", "re-provisioning")
    assert rig.read_entries() == expected
    # And it keeps following events afterwards.
    ids = {"experiment_id": 1, "stage_id": 0, "trial_id": 1}
    controller.handle_event({"type": "trial_stopped", **ids})
    assert _class_entries(rig.read_entries()) == {("stage_class", (1, 0)): 7}


def test_pipeline_replaced_behind_the_controller_s_back_is_restored(rig: Rig) -> None:
    controller = rig.controller()
    controller.start()
    _start_experiment(controller, 1, [100])
    expected = rig.read_entries()
    # Same address, same stream, but the device lost its pipeline (a cold reload).
    rig.switch.pipeline = None
    session = controller.sessions["s1"]
    _wait_for(lambda: session.provisions == 2, "pipeline re-push")
    _wait_for(lambda: rig.read_entries() == expected, "entries restored")


def test_restarted_controller_with_journal_writes_nothing_new(
    rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = tmp_path / "events.jsonl"
    first = rig.controller(journal_path=journal)
    first.start()
    _start_experiment(first, 1, [100, 200])
    _start_experiment(first, 2, [50])
    first.handle_event({"type": "trial_stopped", "experiment_id": 2, "stage_id": 0, "trial_id": 0})
    first.handle_event({"type": "stage_completed", "experiment_id": 2, "stage_id": 0})
    first.handle_event({"type": "experiment_finished", "experiment_id": 2})
    expected = rig.read_entries()
    first.stop()
    # Experiment 2 is over: the journal kept only experiment 1's events (after the line
    # that records the hosts).
    header, *events = journal.read_text().splitlines()
    assert json.loads(header)["beamer_journal"] == 1
    assert events and all('"experiment_id": 1' in line for line in events)

    writes: list[int] = []
    original = P4RuntimeClient.write

    def counting(client: P4RuntimeClient, updates: Any, *args: Any) -> None:
        writes.append(len(updates))
        original(client, updates, *args)

    monkeypatch.setattr(P4RuntimeClient, "write", counting)
    second = rig.controller(journal_path=journal)
    second.start()
    assert second.sessions["s1"].provisions == 0  # same pipeline cookie: not pushed again
    assert writes == []
    assert rig.read_entries() == expected
    # It continues where the first one stopped.
    second.handle_event(
        {
            "type": "coflow_finished",
            "experiment_id": 1,
            "stage_id": 0,
            "trial_id": 0,
            "iteration": 0,
        }
    )
    # Trial 1's coflow, alone now, keeps the class number the first controller gave it
    # (an override below its stage's class then): the stage entry takes it over.
    kept = _class_entries(expected)[("coflow_class", (1, 0, 1 << 16))]
    assert _class_entries(rig.read_entries()) == {("stage_class", (1, 0)): kept}


def test_restarted_controller_without_journal_removes_stale_class_entries(rig: Rig) -> None:
    first = rig.controller()
    first.start()
    _start_experiment(first, 1, [100, 200])
    first.stop()
    second = rig.controller()
    second.start()
    installed = rig.read_entries()
    assert _class_entries(installed) == {}
    assert len(installed) == 3  # forwarding kept, never duplicated


def _primary_then_second(rig: Rig, second_id: int) -> tuple[Controller, Controller, EntryMap]:
    """A primary at election id 10 that has written entries, then a second controller
    with ``second_id``, which must be a backup; and what the switch held before it."""
    primary = rig.controller(election_id=10)
    primary.start()
    _start_experiment(primary, 1, [100])
    expected = rig.read_entries()
    second = rig.controller(election_id=second_id)
    second.start()
    assert second.sessions["s1"].state == "backup"
    return primary, second, expected


def test_lower_election_id_cannot_write_and_says_so(rig: Rig) -> None:
    _, backup, expected = _primary_then_second(rig, 5)
    session = backup.sessions["s1"]
    assert session.error is not None and "higher election id than 5" in session.error
    reply = backup.handle_event({"type": "experiment_released", "experiment": _plan(9, [1])})
    assert reply["pending_switches"] == ["s1"]
    backup.handle_event({"type": "stage_released", "experiment_id": 9, "stage_id": 0})
    backup.handle_event({"type": "trial_started", "experiment_id": 9, "stage_id": 0, "trial_id": 0})
    backup.handle_event(
        {"type": "coflow_started", "experiment_id": 9, "stage_id": 0, "trial_id": 0, "iteration": 0}
    )
    assert rig.read_entries() == expected
    assert backup.status()["switches"][0]["state"] == "backup"


def test_a_second_controller_with_the_same_election_id_is_refused_and_changes_nothing(
    rig: Rig,
) -> None:
    primary, second, expected = _primary_then_second(rig, 10)
    session = second.sessions["s1"]
    assert session.error is not None
    assert "INVALID_ARGUMENT: arbitration refused: election id 10 is already used" in session.error
    assert "this controller will not write" in session.error
    reply = second.handle_event({"type": "experiment_released", "experiment": _plan(9, [1])})
    assert reply["pending_switches"] == ["s1"]
    assert rig.read_entries() == expected
    assert primary.sessions["s1"].state == "ready"
    # When the first leaves, the second takes the switch over at its next attempt.
    primary.stop()
    _wait_for(lambda: second.sessions["s1"].state == "ready", "the second controller to take over")


def _controller_default_election_id() -> int:
    default: int = next(f.default for f in fields(ControllerConfig) if f.name == "election_id")
    return default


def _shell_default_election_id() -> int:
    """p4runtime-shell's own default, read from the installed tool: (1, 0) = 2**64."""
    high, low = inspect.signature(p4runtime_shell.setup).parameters["election_id"].default
    return int(high) << 64 | int(low)


def _delete_class_entries(client: P4RuntimeClient) -> int:
    updates = []
    for entry in client.read_table(0):
        if entry.table_id in (41000001, 41000002) and not entry.is_default_action:
            update = p4runtime_pb2.Update(type=p4runtime_pb2.Update.DELETE)
            update.entity.table_entry.CopyFrom(entry)
            updates.append(update)
    client.write(updates)
    return len(updates)


def test_a_tool_with_its_default_election_id_does_not_take_the_switch(rig: Rig) -> None:
    controller = rig.controller(election_id=_controller_default_election_id())
    controller.start()
    _start_experiment(controller, 1, [100, 200])
    expected = rig.read_entries()
    assert _class_entries(expected)
    shell_id = _shell_default_election_id()
    assert shell_id < _controller_default_election_id()
    tool = P4RuntimeClient(rig.server.addr, 0, shell_id)
    try:
        assert tool.connect() is False  # a backup
        with pytest.raises(NotPrimaryError):
            _delete_class_entries(tool)
    finally:
        tool.close()
    assert controller.sessions["s1"].state == "ready"
    assert rig.read_entries() == expected
    _start_experiment(controller, 2, [50])  # the controller still writes
    assert ("stage_class", (2, 0)) in _class_entries(rig.read_entries())


def test_the_controller_takes_the_switch_back_when_a_higher_client_leaves(rig: Rig) -> None:
    controller = rig.controller(election_id=_controller_default_election_id())
    controller.start()
    _start_experiment(controller, 1, [100, 200])
    expected = rig.read_entries()
    session = controller.sessions["s1"]
    higher = 3 << 64  # e.g. p4runtime-shell --election-id 3,0
    intruder = P4RuntimeClient(rig.server.addr, 0, higher)
    try:
        assert intruder.connect() is True
        _wait_for(lambda: session.state == "backup", "the controller to become a backup")
        assert _delete_class_entries(intruder) > 0
        assert _class_entries(rig.read_entries()) == {}
    finally:
        intruder.close()
    # The server has no primary now and keeps 3,0 as the highest id it has seen: the
    # controller arbitrates with it, becomes primary and rewrites what was changed.
    _wait_for(
        lambda: session.state == "ready" and rig.read_entries() == expected,
        "the controller to take the switch back and restore its entries",
    )
    assert session.client is not None and session.client.election_id == higher
    assert controller.status()["switches"][0]["election_id"] == higher
    _start_experiment(controller, 2, [50])
    assert ("stage_class", (2, 0)) in _class_entries(rig.read_entries())


def test_a_higher_client_demotes_the_controller_on_the_stream_it_holds(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """Demoted, the controller keeps its stream as a backup: a second stream with its own
    election id would be refused, and closing the first would leave no primary."""
    controller = rig.controller(election_id=_controller_default_election_id())
    controller.start()
    _start_experiment(controller, 1, [100])
    session = controller.sessions["s1"]
    stream = session.client
    intruder = P4RuntimeClient(rig.server.addr, 0, 3 << 64)
    try:
        assert intruder.connect() is True
        _wait_for(lambda: session.state == "backup", "the controller to become a backup")
        time.sleep(0.3)  # several supervisor rounds as a backup
        assert session.client is stream and stream is not None and stream.connected
        assert session.state == "backup"
        assert session.error is not None and "will not write" in session.error
    finally:
        intruder.close()
    _wait_for(lambda: session.state == "ready", "the controller to take the switch back")
    assert session.client is stream
    said = caplog.text
    assert "reconnecting" not in said and "already used" not in said


def test_a_failed_read_is_recovered_on_the_same_stream(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A Read refused once (a busy switch) puts the session in error; the supervisor reads
    back and reconciles over the stream it holds, primary all along."""
    from softswitch.p4rt.service import P4RuntimeServicer

    controller = rig.controller()
    controller.start()
    _start_experiment(controller, 1, [100, 200])
    expected = rig.read_entries()
    session = controller.sessions["s1"]
    stream = session.client
    reconciles = session.reconciles
    refused = threading.Event()
    read_replies = P4RuntimeServicer.read_replies

    def refuse_once(self: P4RuntimeServicer, request: Any, context: Any) -> Any:
        if not refused.is_set():
            refused.set()
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "too busy, once")
        return read_replies(self, request, context)

    monkeypatch.setattr(P4RuntimeServicer, "read_replies", refuse_once)
    _wait_for(refused.is_set, "a refused Read")
    _wait_for(
        lambda: session.state == "ready" and session.reconciles > reconciles,
        "the read-back after the refused Read",
    )
    assert session.client is stream
    assert rig.read_entries() == expected
    assert "already used" not in caplog.text
    _start_experiment(controller, 2, [50])  # and it still writes
    assert ("stage_class", (2, 0)) in _class_entries(rig.read_entries())


def test_an_entry_the_controller_cannot_read_puts_the_switch_in_error_not_the_controller_down(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading back an entry its program cannot describe raised KeyError or ValueError:
    at start a traceback, later a dead supervisor thread that nothing restarted."""
    import control.controller

    read = control.controller.from_table_entry
    unreadable = threading.Event()

    def from_table_entry(entry: Any, names: Any) -> Any:
        if unreadable.is_set():
            raise KeyError(77)  # e.g. a match field id the P4Info does not have
        return read(entry, names)

    monkeypatch.setattr(control.controller, "from_table_entry", from_table_entry)
    controller = rig.controller()
    controller.start()
    _start_experiment(controller, 1, [100])  # entries to read back
    session = controller.sessions["s1"]
    unreadable.set()  # the counter poll, then every read-back, meets it
    message = "the switch holds an entry this controller cannot read: KeyError(77)"
    _wait_for(lambda: session.error == message, "the switch to be in error")
    time.sleep(0.3)  # several supervision rounds meet it again
    assert session.state == "error" and controller._supervisor is not None
    assert controller._supervisor.is_alive()
    unreadable.clear()
    _wait_for(lambda: session.state == "ready", "supervision to go on and recover")
    _start_experiment(controller, 2, [100])
    assert ("stage_class", (2, 0)) in _class_entries(rig.read_entries())


def two_embedded_switches(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[PipelineArtifacts, list[P4RuntimeServer], Topology]:
    """Two started servers of the test pipeline, s1 and s2 on a line between h1 and h2."""
    monkeypatch.setattr(pipeline_config, "CompiledProgram", _Program)
    monkeypatch.setattr(pipeline_config, "Pipeline", _Pipeline)
    program = _Program(_p4info())
    artifacts = PipelineArtifacts(program.p4info, program.device_config())
    servers = [P4RuntimeServer(_Switch(), 0, "127.0.0.1:0") for _ in range(2)]
    for server in servers:
        server.start()
    topology = parse_topology(
        {
            "name": "line",
            "switches": [
                {"name": f"s{i + 1}", "device_id": 0, "grpc_addr": server.addr}
                for i, server in enumerate(servers)
            ],
            "hosts": [
                {"name": "h1", "ip": "10.0.0.1", "mac": "02:00:00:00:00:01"},
                {"name": "h2", "ip": "10.0.0.2", "mac": "02:00:00:00:00:02"},
            ],
            "links": [
                {"node1": "h1", "node2": "s1", "port2": 1},
                {"node1": "s1", "port1": 2, "node2": "s2", "port2": 2},
                {"node1": "h2", "node2": "s2", "port2": 1},
            ],
        }
    )
    return artifacts, servers, topology


def test_two_switches_written_together_and_one_down_does_not_block_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    artifacts, servers, topology = two_embedded_switches(monkeypatch)
    config = ControllerConfig(
        topology=topology,
        artifacts={"embedded": artifacts},
        policy_name="smallest-first",
        supervise_interval_s=0.05,
        rpc_timeout_s=2.0,
    )
    controller = Controller(config, SmallestFirst(), one_class_per_rank)

    def entries(server: P4RuntimeServer) -> EntryMap:
        return switch_entries(server.addr, artifacts.p4info)

    try:
        controller.start()
        _start_experiment(controller, 1, [100, 200])
        for server in servers:
            assert _class_entries(entries(server)) == {
                ("stage_class", (1, 0)): 7,
                ("coflow_class", (1, 0, 1 << 16)): 6,
            }
        # s1 → h2 leaves on the inter-switch port; s2 → h2 on the host port.
        lpm = {
            s.spec.name: {
                dict(k.match)["hdr.ipv4.dstAddr"].value: dict(a.params)["port"]
                for k, a in s.installed.items()
                if k.table.endswith("ipv4_lpm")
            }
            for s in controller.sessions.values()
        }
        assert lpm == {"s1": {0x0A000001: 1, 0x0A000002: 2}, "s2": {0x0A000001: 2, 0x0A000002: 1}}
        # s2 goes away: events are still accepted at once and written to s1.
        servers[1].stop(0)
        session = controller.sessions["s2"]
        _wait_for(lambda: session.state != "ready", "s2 seen down")
        started = time.monotonic()
        reply = controller.handle_event(
            {"type": "trial_stopped", "experiment_id": 1, "stage_id": 0, "trial_id": 1}
        )
        assert time.monotonic() - started < config.rpc_timeout_s
        assert reply["pending_switches"] == ["s2"]
        assert _class_entries(entries(servers[0])) == {("stage_class", (1, 0)): 7}
        # s2 comes back blank on the same address and is brought up to date.
        servers[1] = P4RuntimeServer(_Switch(), 0, servers[1].addr)
        servers[1].start()
        _wait_for(lambda: session.state == "ready", "s2 re-provisioned")
        assert _class_entries(entries(servers[1])) == {("stage_class", (1, 0)): 7}
    finally:
        controller.stop()
        for server in servers:
            server.stop(0)


class GatedSmallestFirst(SmallestFirst):
    """Blocks inside rank while ``gate`` is closed, to hold a reschedule open."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.inside = threading.Event()

    def rank(self, snapshot: Snapshot) -> Ranking:
        self.inside.set()
        self.gate.wait(10)
        return super().rank(snapshot)


def test_events_arriving_during_a_reschedule_are_applied_and_group_committed(
    rig: Rig,
) -> None:
    controller = rig.controller()
    policy = GatedSmallestFirst()
    controller.policy = policy
    controller.start()
    for experiment_id in range(5):
        _start_experiment(controller, experiment_id, [100 * (experiment_id + 1), 10_000])
    policy.gate.clear()
    policy.inside.clear()
    replies: dict[int, dict[str, Any]] = {}

    def stop_trial(experiment_id: int) -> None:
        replies[experiment_id] = controller.handle_event(
            {"type": "trial_stopped", "experiment_id": experiment_id, "stage_id": 0, "trial_id": 1}
        )

    first = threading.Thread(target=stop_trial, args=(0,))
    first.start()
    assert policy.inside.wait(10)  # experiment 0's reschedule is now inside the policy
    applied = controller.events_applied
    rest = [threading.Thread(target=stop_trial, args=(e,)) for e in range(1, 5)]
    for thread in rest:
        thread.start()
    # The other events are applied while that reschedule is still running...
    _wait_for(lambda: controller.events_applied == applied + 4, "events applied meanwhile")
    assert replies == {}
    reschedules = controller.reschedules
    policy.gate.set()
    first.join()
    for thread in rest:
        thread.join()
    # ...and one more reschedule reflects all four: three of them were folded into it.
    assert controller.reschedules == reschedules + 1
    assert sorted(r["folded"] for r in replies.values()) == [False, False, True, True, True]
    assert _class_entries(rig.read_entries()) == {("stage_class", (e, 0)): 7 - e for e in range(5)}
    assert controller.sessions["s1"].installed == rig.read_entries()


def test_more_classes_than_the_pipeline_holds_is_refused(rig: Rig) -> None:
    with pytest.raises(UserError, match="9 classes do not fit the pipeline's 3-bit class"):
        rig.controller(queues=9)
