"""The controller against a switch that is slow, verbose or wrong: megabytes of error
text, a Read that never ends, a PERMISSION_DENIED that is not about election ids, a
stream that keeps failing, and RPCs answered just inside the timeout.

The switch is the embedded P4Runtime server of tests/test_controller_p4runtime.py (real
arbitration and table state), with some of its RPCs replaced by what a hostile switch
does (:class:`Misbehaviour`).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import grpc
import pytest
from controller_helpers import SmallestFirst, one_class_per_rank
from google.protobuf import any_pb2
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2
from test_controller_p4runtime import (
    Rig,
    _class_entries,
    _p4info,
    _Pipeline,
    _plan,
    _Program,
    _start_experiment,
    _Switch,
    _wait_for,
    switch_entries,
    two_embedded_switches,
)

from control.cli import MAX_ERROR_CHARS
from control.controller import (
    Controller,
    ControllerConfig,
    PipelineArtifacts,
    SwitchSession,
    _Connection,
    not_primary_reason,
    read_limits,
)
from control.controller_cli import format_status
from control.p4runtime_client import P4Names, P4RuntimeClient, _update_errors, entity_count
from softswitch.p4rt import pipeline_config
from softswitch.p4rt.rpc import RpcContext
from softswitch.p4runtime_server import P4RuntimeServer

STATUS_DETAILS_KEY = "grpc-status-details-bin"

MESSAGE_BOUND = MAX_ERROR_CHARS + 200
"""The longest a stored or logged message about a switch may be: the switch's text
shortened, plus the controller's own words around it."""

ReadReplies = tuple[Sequence[bytes], status_pb2.Status | None]


@dataclass
class Misbehaviour:
    """What the switch does instead of its job, per RPC (None: its job).

    ``write`` runs before each Write and may end it (``context.abort``) or take its time;
    ``before_read`` runs before each Read (and may take its time); ``read`` gives the
    replies of a Read in place of the switch's own (None: the switch's own)."""

    write: Callable[[p4runtime_pb2.WriteRequest, RpcContext], None] | None = None
    before_read: Callable[[], None] | None = None
    read: Callable[[p4runtime_pb2.ReadRequest], ReadReplies | None] | None = None


def misbehave(server: P4RuntimeServer, misbehaviour: Misbehaviour) -> None:
    """Route ``server``'s Write and Read through ``misbehaviour`` (before it starts: the
    server binds its handlers then)."""
    servicer = server.servicer
    write, read_replies = servicer.Write, servicer.read_replies

    def hostile_write(request: Any, context: RpcContext) -> p4runtime_pb2.WriteResponse:
        if misbehaviour.write is not None:
            parsed = p4runtime_pb2.WriteRequest.FromString(request)
            misbehaviour.write(parsed, context)
        return write(request, context)

    def hostile_read(request: p4runtime_pb2.ReadRequest, context: RpcContext) -> ReadReplies:
        if misbehaviour.before_read is not None:
            misbehaviour.before_read()
        if misbehaviour.read is not None:
            replies = misbehaviour.read(request)
            if replies is not None:
                return replies
        return read_replies(request, context)

    servicer.Write = hostile_write  # type: ignore[method-assign]
    servicer.read_replies = hostile_read  # type: ignore[method-assign]


@dataclass
class HostileRig(Rig):
    misbehaviour: Misbehaviour = field(default_factory=Misbehaviour)

    def restart_switch(self) -> None:
        self.server.stop(0)
        self.switch = _Switch()
        self.server = P4RuntimeServer(self.switch, 0, self.server.addr)
        misbehave(self.server, self.misbehaviour)
        self.server.start()


@pytest.fixture
def hostile(monkeypatch: pytest.MonkeyPatch) -> Iterator[HostileRig]:
    monkeypatch.setattr(pipeline_config, "CompiledProgram", _Program)
    monkeypatch.setattr(pipeline_config, "Pipeline", _Pipeline)
    switch = _Switch()
    server = P4RuntimeServer(switch, 0, "127.0.0.1:0")
    misbehaviour = Misbehaviour()
    misbehave(server, misbehaviour)
    server.start()
    rig = HostileRig.serving(switch, server, _p4info(), misbehaviour=misbehaviour)
    try:
        yield rig
    finally:
        rig.close()


def _said_about_switches(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "control.controller"]


# --- 1. error text from a switch is shortened -------------------------------------------


def test_megabytes_of_error_text_from_a_switch_are_shortened_in_status_and_log(
    hostile: HostileRig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="control.controller")
    controller = hostile.controller()
    controller.start()
    _start_experiment(controller, 1, [100])
    huge = "the switch explains at length: " + "very " * ((8 << 20) // 5) + "the end"

    def refuse(request: p4runtime_pb2.WriteRequest, context: RpcContext) -> None:
        context.abort(grpc.StatusCode.INTERNAL, huge)

    hostile.misbehaviour.write = refuse
    _start_experiment(controller, 2, [50])  # its writes are refused
    session = controller.sessions["s1"]
    assert session.state == "error"
    assert session.error is not None
    assert "the switch explains at length: very very" in session.error
    assert session.error.endswith("the end")
    assert len(session.error) <= MESSAGE_BOUND
    switch_status = controller.status()["switches"][0]
    assert len(switch_status["error"]) <= MESSAGE_BOUND
    said = _said_about_switches(caplog)
    assert any("the switch explains" in line for line in said)
    assert max(map(len, said)) <= MESSAGE_BOUND
    # Supervision goes on: when the switch writes again, the schedule is there.
    hostile.misbehaviour.write = None
    _wait_for(lambda: session.state == "ready", "the switch to be reconciled")
    assert ("stage_class", (2, 0)) in _class_entries(hostile.read_entries())


def test_control_characters_from_a_switch_are_escaped_in_status_and_log(
    hostile: HostileRig, caplog: pytest.LogCaptureFixture
) -> None:
    """A switch's error text that would clear the terminal, retitle it and forge a log
    line reaches the status and the log as visible escapes, on one line."""
    caplog.set_level(logging.INFO, logger="control.controller")
    controller = hostile.controller()
    controller.start()
    _start_experiment(controller, 1, [100])
    hostile_text = "\x1b[2J\x1b[H\x1b]0;owned\x07\x1b[31mred\x9b\r\nforged: line \u202eevil"

    def refuse(request: p4runtime_pb2.WriteRequest, context: RpcContext) -> None:
        context.abort(grpc.StatusCode.INTERNAL, hostile_text)

    hostile.misbehaviour.write = refuse
    _start_experiment(controller, 2, [50])
    session = controller.sessions["s1"]
    assert session.state == "error"
    assert session.error is not None
    assert "\\x1b[2J\\x1b[H\\x1b]0;owned\\x07" in session.error
    assert "\\x0d\\x0aforged: line \\u202eevil" in session.error
    printed = format_status(controller.status())
    said = "\n".join(_said_about_switches(caplog))
    for text in (session.error, printed, said):
        assert "\\x1b[31mred" in text
        unprintable = re.findall("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]", text)
        assert unprintable == [], text
    assert all("\n" not in line for line in _said_about_switches(caplog))


def test_megabytes_of_per_update_error_text_are_shortened(
    hostile: HostileRig, caplog: pytest.LogCaptureFixture
) -> None:
    controller = hostile.controller()
    controller.start()
    _start_experiment(controller, 1, [100])

    def refuse(request: p4runtime_pb2.WriteRequest, context: RpcContext) -> None:
        count = len(request.updates)
        status = status_pb2.Status(
            code=code_pb2.UNKNOWN, message=f"{count} of {count} updates failed"
        )
        for number in range(count):
            packed = any_pb2.Any()
            packed.Pack(
                p4runtime_pb2.Error(
                    canonical_code=code_pb2.INVALID_ARGUMENT,
                    message=f"update {number} is wrong because " + "so " * (1 << 20),
                )
            )
            status.details.append(packed)
        context.set_trailing_metadata(((STATUS_DETAILS_KEY, status.SerializeToString()),))
        context.abort(grpc.StatusCode.UNKNOWN, status.message)

    hostile.misbehaviour.write = refuse
    _start_experiment(controller, 2, [50])
    session = controller.sessions["s1"]
    assert session.error is not None
    assert "update 0: INVALID_ARGUMENT: update 0 is wrong because so so" in session.error
    assert len(session.error) <= MESSAGE_BOUND
    assert max(map(len, _said_about_switches(caplog))) <= MESSAGE_BOUND


def test_more_error_details_than_updates_are_not_read() -> None:
    """A Write refused with 100,000 details for a batch of 3: not one per update, as the
    spec has it, and parsing them took seconds (a 64 MiB trailer, the better part of a
    minute). The refusal is reported with the call's own status."""

    class Refused:
        def __init__(self, details: int) -> None:
            status = status_pb2.Status(code=code_pb2.UNKNOWN, message="refused")
            packed = any_pb2.Any()
            packed.Pack(p4runtime_pb2.Error(canonical_code=code_pb2.INTERNAL, message="no"))
            status.details.extend([packed] * details)
            self.data = status.SerializeToString()

        def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
            return ((STATUS_DETAILS_KEY, self.data),)

    assert _update_errors(Refused(100_000), updates_sent=3) == []  # type: ignore[arg-type]
    assert len(_update_errors(Refused(3), updates_sent=3)) == 3  # type: ignore[arg-type]


def test_megabytes_of_error_text_ending_the_stream_are_shortened(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A switch that ends the arbitration stream with a long status."""
    monkeypatch.setattr(pipeline_config, "CompiledProgram", _Program)
    monkeypatch.setattr(pipeline_config, "Pipeline", _Pipeline)
    server = P4RuntimeServer(_Switch(), 0, "127.0.0.1:0")
    huge = "go away: " + "because " * (1 << 20)

    async def refuse_stream(requests: Any, context: Any) -> None:
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, huge)

    server.servicer.StreamChannel = refuse_stream  # type: ignore[method-assign]
    server.start()
    rig = Rig.serving(_Switch(), server, _p4info())
    try:
        controller = rig.controller()
        controller.start()
        session = controller.sessions["s1"]
        assert session.state == "backup"
        assert session.error is not None and "go away: because because" in session.error
        assert len(session.error) <= MESSAGE_BOUND
    finally:
        rig.close()


# --- 2. a Read has a cap -----------------------------------------------------------------


class EndlessReplies(Sequence[bytes]):
    """A Read reply that does not end: the same ReadResponse, again and again."""

    def __init__(self, reply: p4runtime_pb2.ReadResponse) -> None:
        self.data = reply.SerializeToString()
        self.served = 0

    def __len__(self) -> int:
        return 10**12

    def __getitem__(self, index: Any) -> Any:
        self.served += 1
        return self.data

    def clear(self) -> None:
        """The server drops what a client did not take."""


def _entries_of(names: P4Names, count: int, metadata: bytes = b"") -> p4runtime_pb2.ReadResponse:
    table = names.table("stage_class")
    reply = p4runtime_pb2.ReadResponse()
    for number in range(count):
        entry = reply.entities.add().table_entry
        entry.table_id = table.id
        entry.match.add(field_id=1).exact.value = (number % 60000 + 1).to_bytes(2, "big")
        entry.match.add(field_id=2).exact.value = b"\x00"
        entry.action.action.action_id = names.action("set_class").id
        entry.action.action.params.add(param_id=1, value=b"\x01")
        entry.metadata = metadata
    return reply


def _is_counter_read(request: p4runtime_pb2.ReadRequest) -> bool:
    """The counter poll's Read: one table's entries with their direct counters."""
    entity = request.entities[0]
    return entity.HasField("table_entry") and entity.table_entry.HasField("counter_data")


def test_a_switch_that_sends_entities_without_end_is_cut_off_at_the_limit(
    hostile: HostileRig,
) -> None:
    names = P4Names.build(hostile.artifacts.p4info)
    limit_entities, _ = read_limits(names)
    assert limit_entities == 4096  # the floor: this P4Info's tables hold 1,152 entries
    controller = hostile.controller()
    controller.start()
    _start_experiment(controller, 1, [100])
    session = controller.sessions["s1"]
    reply = _entries_of(names, 1000)
    reads: list[EndlessReplies] = []

    def endless(request: p4runtime_pb2.ReadRequest) -> ReadReplies | None:
        if _is_counter_read(request):
            return None  # capped lower (test_a_counter_read_is_capped_at_twice_the_stage_table)
        reads.append(EndlessReplies(reply))
        return reads[-1], None

    hostile.misbehaviour.read = endless
    hostile.restart_switch()  # its read-back is the Read
    # The restart may also fail a counter Read on its way; the read-back's error follows.
    _wait_for(lambda: "entities in one Read" in (session.error or ""), "the read-back's error")
    assert session.error is not None
    assert "the switch sent more than 4,096 entities in one Read" in session.error
    assert "the Read was cancelled" in session.error
    # Cancelled at the limit: the controller took five replies of 1,000 entities, the
    # switch got to send what the connection's window held besides (100 to 160 replies
    # of 57 KB here), not a stream of 10**12 replies until the deadline.
    assert 5 <= reads[0].served < 1000
    # Supervision goes on: a switch that sends what it holds is read back and written.
    hostile.misbehaviour.read = None
    _wait_for(lambda: session.state == "ready", "the switch to be reconciled")
    _start_experiment(controller, 2, [50])
    assert ("stage_class", (2, 0)) in _class_entries(hostile.read_entries())


def test_a_read_of_few_huge_entities_is_cut_off_at_the_byte_limit(hostile: HostileRig) -> None:
    names = P4Names.build(hostile.artifacts.p4info)
    _, limit_bytes = read_limits(names)
    assert limit_bytes == 4096 * 1024
    controller = hostile.controller()
    controller.start()
    session = controller.sessions["s1"]
    # Three entities of 1 MiB each per reply: far fewer entities than the limit.
    endless = EndlessReplies(_entries_of(names, 3, metadata=b"m" * (1 << 20)))
    hostile.misbehaviour.read = lambda request: (
        None if _is_counter_read(request) else (endless, None)
    )
    hostile.restart_switch()  # its read-back is the Read
    _wait_for(lambda: "bytes in one Read" in (session.error or ""), "the read-back's error")
    assert session.error is not None
    assert "the switch sent more than 4,194,304 bytes in one Read" in session.error
    hostile.misbehaviour.read = None
    _wait_for(lambda: session.state == "ready", "the switch to be reconciled")


def test_a_read_reply_that_does_not_parse_puts_the_switch_in_error(hostile: HostileRig) -> None:
    controller = hostile.controller()
    controller.start()
    session = controller.sessions["s1"]
    hostile.misbehaviour.read = lambda request: ([b"\x0a\xff\xff\xff\xff\x0f"], None)
    _wait_for(lambda: session.state == "error", "the switch to be in error")
    assert session.error is not None and "Read: a reply that does not parse" in session.error
    hostile.misbehaviour.read = None
    _wait_for(lambda: session.state == "ready", "the switch to be reconciled")


def test_a_counter_read_is_capped_at_twice_the_stage_table(hostile: HostileRig) -> None:
    """The counter poll reads the stage table every interval. A switch that answers it
    with more entries than twice the table holds (129 of a 64-entry table here) is in
    error; under the whole pipeline's cap (4,096 here, 16,400 for beamer.p4) the poll
    took them at every interval."""
    names = P4Names.build(hostile.artifacts.p4info)
    table = names.table("stage_class")
    assert table.size == 64 and read_limits(names)[0] == 4096
    controller = hostile.controller()
    controller.start()
    session = controller.sessions["s1"]
    too_many = _entries_of(names, 2 * table.size + 1).SerializeToString()

    def counter_reads(request: p4runtime_pb2.ReadRequest) -> ReadReplies | None:
        return ([too_many], None) if _is_counter_read(request) else None

    hostile.misbehaviour.read = counter_reads
    _wait_for(lambda: session.state == "error", "the switch to be in error")
    assert session.error is not None
    assert "the switch sent more than 128 entities in one Read" in session.error
    # Twice the table is taken: the poll goes on with the switch ready.
    just_enough = _entries_of(names, 2 * table.size).SerializeToString()
    polls = [0]

    def full_counter_reads(request: p4runtime_pb2.ReadRequest) -> ReadReplies | None:
        if counter_reads(request) is None:
            return None
        polls[0] += 1
        return [just_enough], None

    hostile.misbehaviour.read = full_counter_reads
    _wait_for(lambda: session.state == "ready", "the switch to be reconciled")
    _wait_for(lambda: polls[0] >= 3, "three counter reads")
    assert session.state == "ready"


def test_entities_are_counted_from_the_reply_s_bytes() -> None:
    names = P4Names.build(_p4info())
    for count in (0, 1, 2, 999):
        data = _entries_of(names, count).SerializeToString()
        assert entity_count(data) == count
        assert entity_count(data, stop_after=1) == min(count, 1)
    # Unknown fields are skipped, not counted; cut-off bytes count what is whole.
    data = _entries_of(names, 3).SerializeToString()
    assert entity_count(b"\x10\x05" + data + b"\x1a\x01x") == 3
    assert entity_count(data[:-1]) == 2


# --- 3. PERMISSION_DENIED says what the switch said -------------------------------------


def test_a_permission_denied_that_is_not_about_election_ids_is_reported_as_the_switch_said(
    hostile: HostileRig, caplog: pytest.LogCaptureFixture
) -> None:
    """The switch names the controller primary and still refuses its writes (a role it
    may not write with, say): that is no higher election id."""
    controller = hostile.controller()
    controller.start()
    _start_experiment(controller, 1, [100])
    session = controller.sessions["s1"]

    def refuse(request: p4runtime_pb2.WriteRequest, context: RpcContext) -> None:
        context.abort(
            grpc.StatusCode.PERMISSION_DENIED, "role 'beamer' may not write MyIngress.stage_class"
        )

    hostile.misbehaviour.write = refuse
    _start_experiment(controller, 2, [50])
    assert session.client is not None and session.client.is_primary
    assert session.state == "error"
    assert session.error is not None
    assert "PERMISSION_DENIED" in session.error
    assert "role 'beamer' may not write MyIngress.stage_class" in session.error
    assert "higher election id" not in session.error
    said = _said_about_switches(caplog)
    assert any("role 'beamer' may not write" in line for line in said)
    assert not any("higher election id" in line for line in said)
    # The supervisor tries again; once the switch lets it write, it is ready.
    hostile.misbehaviour.write = None
    _wait_for(lambda: session.state == "ready", "the switch to take the writes")
    assert ("stage_class", (2, 0)) in _class_entries(hostile.read_entries())


def test_a_higher_election_id_is_named_only_when_arbitration_says_so(hostile: HostileRig) -> None:
    controller = hostile.controller(election_id=10)
    controller.start()
    _start_experiment(controller, 1, [100])
    session = controller.sessions["s1"]
    intruder = P4RuntimeClient(hostile.server.addr, 0, 20)
    try:
        assert intruder.connect() is True
        _wait_for(lambda: session.state == "backup", "the controller to become a backup")
        assert session.error == (
            f"not primary for device 0 at {hostile.server.addr}: another controller has a "
            "higher election id than 10; this controller will not write"
        )
    finally:
        intruder.close()
    _wait_for(lambda: session.state == "ready", "the controller to take the switch back")


@dataclass
class _Arbitrated:
    """What :func:`not_primary_reason` reads of a client."""

    arbitration_status: tuple[grpc.StatusCode, str] | None
    primary_election_id: int | None
    election_id: int = 10
    is_primary: bool = False


def test_what_arbitration_said_is_the_reason_for_not_being_primary() -> None:
    def reason(status: tuple[grpc.StatusCode, str] | None, highest: int | None) -> str:
        return not_primary_reason(_Arbitrated(status, highest))  # type: ignore[arg-type]

    already = grpc.StatusCode.ALREADY_EXISTS
    assert reason((already, "another client is primary"), 20) == (
        "another controller has a higher election id than 10"
    )
    # A switch that names another primary without a higher id, or no primary at all.
    assert reason((already, "another client is primary"), None) == (
        "the switch's arbitration answered ALREADY_EXISTS: another client is primary"
    )
    assert reason((already, ""), 5) == "the switch's arbitration answered ALREADY_EXISTS"
    assert reason((grpc.StatusCode.NOT_FOUND, "no primary client"), 10) == (
        "the switch's arbitration answered NOT_FOUND: no primary client"
    )
    assert reason(None, None) == "the switch has not named this controller primary"


# --- 4. reconnection backs off, and a repeated line is logged once ----------------------


@dataclass
class FakeClock:
    """The controller's clock, moved by the test only."""

    now_s: float = 1000.0

    def __call__(self) -> float:
        return self.now_s


def _clocked_controller(rig: Rig, clock: FakeClock) -> Controller:
    """A controller on ``clock`` whose supervision runs only when the test calls
    :func:`_supervise` (it is not started); first wait 0.5 s, at most 8 s."""
    config = ControllerConfig(
        topology=rig.topology,
        artifacts={"embedded": rig.artifacts},
        policy_name="smallest-first",
        election_id=10,
        supervise_interval_s=0.5,
        counter_interval_s=3600.0,
        rpc_timeout_s=2.0,
        retry_max_s=8.0,
    )
    controller = Controller(config, SmallestFirst(), one_class_per_rank, clock=clock)
    rig.controllers.append(controller)
    return controller


def _supervise(controller: Controller) -> None:
    """One supervision round, at once (no wait for the interval), and the attempts it
    started in the background, to their end."""
    controller._wake.set()
    controller._supervise_once(time.monotonic())
    for session in controller.sessions.values():
        if session.attempt is not None:
            session.attempt.result(timeout=30)


def test_an_unreachable_switch_is_tried_at_doubling_intervals_up_to_a_cap(
    hostile: HostileRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    controller = _clocked_controller(hostile, clock)
    session = controller.sessions["s1"]
    attempts: list[float] = []
    connect = controller._connect

    def unreachable(session: SwitchSession) -> _Connection:
        attempts.append(clock.now_s - 1000.0)
        return _Connection(
            None, False, f"UNAVAILABLE: no P4Runtime server at {hostile.server.addr}"
        )

    monkeypatch.setattr(controller, "_connect", unreachable)
    # A round every 0.1 s for 40 s: 400 rounds, an attempt at each before.
    for tenth in range(401):
        clock.now_s = 1000.0 + tenth / 10
        _supervise(controller)
    assert attempts == pytest.approx([0.0, 0.5, 1.5, 3.5, 7.5, 15.5, 23.5, 31.5, 39.5])
    assert session.state == "down"
    assert session.error == f"UNAVAILABLE: no P4Runtime server at {hostile.server.addr}"
    switch = controller.status()["switches"][0]
    assert switch["state"] == "down" and switch["retry_in_s"] == pytest.approx(7.5)
    # Reachable again: the next attempt due brings it up.
    monkeypatch.setattr(controller, "_connect", connect)
    clock.now_s += 7.4
    _supervise(controller)
    assert session.state == "down"
    clock.now_s += 0.1
    _supervise(controller)
    assert session.state == "ready"
    assert controller.status()["switches"][0]["retry_in_s"] is None


def test_a_stream_that_breaks_after_each_provisioning_backs_off_and_is_logged_once(
    hostile: HostileRig, caplog: pytest.LogCaptureFixture
) -> None:
    """The switch takes the arbitration and the writes, then the stream breaks, again and
    again: it used to be reconnected at once each time, and "connection lost;
    reconnecting" logged each time, about five times a second."""
    caplog.set_level(logging.INFO, logger="control.controller")
    clock = FakeClock()
    controller = _clocked_controller(hostile, clock)
    session = controller.sessions["s1"]
    _supervise(controller)
    assert session.state == "ready"

    def break_stream() -> None:
        client = session.client
        assert client is not None
        hostile.restart_switch()
        _wait_for(lambda: not client.connected, "the stream to break")

    def lost_lines() -> list[str]:
        return [line for line in _said_about_switches(caplog) if "connection lost" in line]

    for cycle, wait_s in enumerate([0.5, 1.0, 2.0, 4.0, 8.0, 8.0], start=1):
        clock.now_s += 1.0  # ready for a second only: no sign of a healthy switch
        break_stream()
        _supervise(controller)
        # Seen at once, and the status says so; the attempt waits.
        assert session.state == "down"
        assert session.error == "connection lost; reconnecting"
        assert controller.status()["switches"][0]["retry_in_s"] == pytest.approx(wait_s)
        clock.now_s += wait_s - 0.01
        _supervise(controller)
        assert session.state == "down"
        clock.now_s += 0.01
        _supervise(controller)
        assert session.state == "ready", f"cycle {cycle}"
        assert session.provisions == cycle + 1
    assert lost_lines() == ["s1: connection lost; reconnecting"]  # once, not six times
    # Healthy for as long as the longest wait: the next loss is retried at once, and the
    # line is logged again with the count of the times it was not.
    clock.now_s += 60.0
    break_stream()
    _supervise(controller)
    assert session.state == "ready"
    assert lost_lines()[1:] == [
        "s1: connection lost; reconnecting (and 5 more times in the 88 s before)"
    ]


def test_the_status_text_says_when_the_next_attempt_is() -> None:
    switch = {"name": "s1", "address": "127.0.0.1:9559", "state": "down", "entries": []}
    status = {
        "policy": "beamer",
        "queues": 8,
        "election_id": 1,
        "events_applied": 0,
        "switches": [{**switch, "error": "connection lost; reconnecting", "retry_in_s": 3.96}],
        "order": [],
        "stages": [],
    }
    assert (
        "s1       127.0.0.1:9559         down  (connection lost; reconnecting)  "
        "next attempt in 4.0 s"
    ) in format_status(status)


# --- 5. a slow switch's provisioning does not hold up the others ------------------------


@dataclass
class Stall:
    """An RPC that takes its time: it waits until the test releases it (within the
    controller's RPC timeout), or STALL_S at most."""

    inside: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    over: threading.Event = field(default_factory=threading.Event)
    once: bool = True

    def __call__(self, *args: Any) -> None:
        if self.once and self.inside.is_set():
            return
        self.inside.set()
        self.release.wait(STALL_S)
        self.over.set()


STALL_S = 20.0


@dataclass
class StalledWrites:
    """A Write misbehaviour: each Write waits for ``stall``; counts the most Writes that
    were out at once (the controller's writes to one switch must never overlap)."""

    stall: Stall
    in_flight: int = 0
    most_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: p4runtime_pb2.WriteRequest, context: RpcContext) -> None:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            self.stall()
        finally:
            with self.lock:
                self.in_flight -= 1


@dataclass
class TwoSwitches:
    """s1 and s2 in a line (h1 - s1 - s2 - h2); each misbehaves as its
    ``s1_misbehaviour`` or ``s2_misbehaviour`` says, from its restart on."""

    servers: list[P4RuntimeServer]
    artifacts: PipelineArtifacts
    controller: Controller
    s2_misbehaviour: Misbehaviour
    stalls: list[Stall] = field(default_factory=list)
    s1_misbehaviour: Misbehaviour = field(default_factory=Misbehaviour)

    def stall(self) -> Stall:
        """A :class:`Stall`, released at the end of the test whatever happens."""
        self.stalls.append(Stall())
        return self.stalls[-1]

    def restart_s1(self) -> None:
        self.servers[0].stop(0)
        self.servers[0] = P4RuntimeServer(_Switch(), 0, self.servers[0].addr)
        misbehave(self.servers[0], self.s1_misbehaviour)
        self.servers[0].start()

    def restart_s2(self) -> None:
        self.servers[1].stop(0)
        self.servers[1] = P4RuntimeServer(_Switch(), 0, self.servers[1].addr)
        misbehave(self.servers[1], self.s2_misbehaviour)
        self.servers[1].start()

    def class_entries(self, index: int) -> dict[tuple[str, tuple[int, ...]], int]:
        return _class_entries(switch_entries(self.servers[index].addr, self.artifacts.p4info))


@pytest.fixture
def two_switches(monkeypatch: pytest.MonkeyPatch) -> Iterator[TwoSwitches]:
    artifacts, servers, topology = two_embedded_switches(monkeypatch)
    config = ControllerConfig(
        topology=topology,
        artifacts={"embedded": artifacts},
        policy_name="smallest-first",
        supervise_interval_s=0.05,
        # Longer than any stall: the slow switch answers inside the timeout.
        rpc_timeout_s=STALL_S + 10.0,
    )
    controller = Controller(config, SmallestFirst(), one_class_per_rank)
    rig = TwoSwitches(servers, artifacts, controller, Misbehaviour())
    try:
        yield rig
    finally:
        for stall in rig.stalls:
            stall.release.set()
        controller.stop()
        for server in rig.servers:
            server.stop(0)


def test_a_slow_switch_being_provisioned_holds_up_neither_events_nor_status(
    two_switches: TwoSwitches,
) -> None:
    """s2 restarts and answers its provisioning's Read only when released: meanwhile
    events are written to s1 and the status answers. Provisioning used to run under the
    lock every event and the status take, so both waited for s2."""
    controller = two_switches.controller
    controller.start()
    _start_experiment(controller, 1, [100, 200])
    stall = two_switches.stall()
    two_switches.s2_misbehaviour.before_read = stall
    two_switches.restart_s2()
    assert stall.inside.wait(10), "s2's provisioning did not reach its Read"
    reply = controller.handle_event(
        {"type": "trial_stopped", "experiment_id": 1, "stage_id": 0, "trial_id": 1}
    )
    _start_experiment(controller, 2, [50])
    status = controller.status()
    assert not stall.over.is_set(), "the events waited for the slow switch"
    assert reply["pending_switches"] == ["s2"]
    assert [s["state"] for s in status["switches"]] == ["ready", "down"]
    expected = {("stage_class", (1, 0)): 6, ("stage_class", (2, 0)): 7}
    assert two_switches.class_entries(0) == expected
    # Released, s2 is brought to the plan as it is now, events of the meantime included.
    stall.release.set()
    session = controller.sessions["s2"]
    _wait_for(lambda: session.state == "ready", "s2 provisioned")
    assert two_switches.class_entries(1) == expected
    assert _class_entries(session.installed) == expected


def test_events_during_a_slow_switch_s_catch_up_reach_it_in_order(
    two_switches: TwoSwitches,
) -> None:
    """s2's first catch-up Write takes its time; an event changes the plan meanwhile.
    Nothing else is written to s2 while that Write is out, and s2 ends with the plan
    after the event."""
    controller = two_switches.controller
    controller.start()
    _start_experiment(controller, 1, [100, 200])
    stall = two_switches.stall()
    writes = StalledWrites(stall)
    two_switches.s2_misbehaviour.write = writes
    two_switches.restart_s2()
    assert stall.inside.wait(10), "s2's provisioning did not write"
    reply = controller.handle_event(
        {"type": "trial_stopped", "experiment_id": 1, "stage_id": 0, "trial_id": 1}
    )
    assert not stall.over.is_set(), "the event waited for the slow switch"
    assert reply["pending_switches"] == ["s2"]
    stall.release.set()
    session = controller.sessions["s2"]
    _wait_for(lambda: session.state == "ready", "s2 provisioned")
    assert two_switches.class_entries(1) == {("stage_class", (1, 0)): 7}
    assert two_switches.class_entries(0) == {("stage_class", (1, 0)): 7}
    assert writes.most_in_flight == 1


def test_start_up_brings_the_switches_up_at_once(two_switches: TwoSwitches) -> None:
    """s1, the first switch, stalls its provisioning's Read: start-up provisions s2
    meanwhile, and returns once s1 is released. It used to bring the switches up in
    turn, so every switch waited for the ones before it."""
    controller = two_switches.controller
    stall = two_switches.stall()
    two_switches.s1_misbehaviour.before_read = stall
    two_switches.restart_s1()
    starting = threading.Thread(target=controller.start)
    starting.start()
    try:
        assert stall.inside.wait(10), "s1's provisioning did not reach its Read"
        s2 = controller.sessions["s2"]
        _wait_for(lambda: s2.state == "ready", "s2 provisioned while s1 stalls")
        assert starting.is_alive(), "start-up returned before s1 was tried"
        assert controller.sessions["s1"].state == "down"
    finally:
        stall.release.set()
        starting.join(30)
    assert not starting.is_alive()
    assert [s.state for s in controller.sessions.values()] == ["ready", "ready"]


def test_a_slow_switch_being_provisioned_does_not_hold_up_another_s_reconnect(
    two_switches: TwoSwitches,
) -> None:
    """s2 restarts and stalls its provisioning's Read; s1 restarts meanwhile, and is
    reconnected and provisioned while s2's Read is still out. The supervisor used to
    provision one switch at a time, so s1 stayed down until s2 answered."""
    controller = two_switches.controller
    controller.start()
    _start_experiment(controller, 1, [100, 200])
    s1 = controller.sessions["s1"]
    stall = two_switches.stall()
    two_switches.s2_misbehaviour.before_read = stall
    two_switches.restart_s2()
    assert stall.inside.wait(10), "s2's provisioning did not reach its Read"
    two_switches.restart_s1()
    _wait_for(lambda: s1.state == "ready" and s1.provisions == 2, "s1 provisioned again")
    assert not stall.over.is_set(), "s1 waited for s2"
    assert controller.sessions["s2"].state == "down"
    expected = two_switches.class_entries(0)
    assert ("stage_class", (1, 0)) in expected
    assert _class_entries(s1.installed) == expected
    stall.release.set()
    _wait_for(lambda: controller.sessions["s2"].state == "ready", "s2 provisioned")
    assert two_switches.class_entries(1) == expected


# --- 6. a switch that turns slow while ready does not slow every event ------------------

BUDGET_S = 0.3
"""The write budget of the tests below: long for a Write to an idle embedded switch."""


def _with_budget(controller: Controller) -> None:
    controller.config = replace(controller.config, write_budget_s=BUDGET_S)


def test_a_ready_switch_slower_than_the_budget_is_set_lagging_and_caught_up(
    two_switches: TwoSwitches,
) -> None:
    """s2 is ready when its Writes begin to take their time: the event waits for it no
    longer than the budget, the events after it do not write to it while its Write is
    out, and once that Write is acknowledged s2 is brought to the plan of the moment.
    Before, every event waited until s2 answered."""
    controller = two_switches.controller
    _with_budget(controller)
    two_switches.restart_s2()  # so that s2 misbehaves as the test says from now on
    controller.start()
    session = controller.sessions["s2"]
    assert [s.state for s in controller.sessions.values()] == ["ready", "ready"]
    stall = two_switches.stall()
    writes = StalledWrites(stall)
    two_switches.s2_misbehaviour.write = writes
    started = time.monotonic()
    _start_experiment(controller, 1, [100, 200])
    reply = controller.handle_event(
        {"type": "trial_stopped", "experiment_id": 1, "stage_id": 0, "trial_id": 1}
    )
    took_s = time.monotonic() - started
    assert stall.inside.is_set() and not stall.over.is_set(), "the events waited for s2"
    assert took_s < STALL_S / 2
    assert reply["pending_switches"] == ["s2"]
    status = controller.status()["switches"][1]
    assert status["state"] == "lagging"
    assert f"its writes took longer than {BUDGET_S:g} s" in status["error"]
    assert status["retry_in_s"] is None
    expected = {("stage_class", (1, 0)): 7}
    assert two_switches.class_entries(0) == expected
    # Released: s2 takes the Write it held, then catches up with the events since.
    stall.release.set()
    _wait_for(lambda: session.state == "ready", "s2 caught up")
    assert session.error is None
    assert two_switches.class_entries(1) == expected
    assert _class_entries(session.installed) == expected
    assert writes.most_in_flight == 1, "writes to s2 overlapped"
    assert session.provisions == 1, "caught up without provisioning again"
    # Fast again: its held Write took longer than the budget, so the events are not
    # waited for until one of its writes is acknowledged within the budget ...
    two_switches.s2_misbehaviour.write = None
    _start_experiment(controller, 2, [50])
    _wait_for(lambda: session.state == "ready" and not session.slow, "s2 fast again")
    # ... and then s2 gets each event's writes before the reply.
    ids = {"experiment_id": 3, "stage_id": 0, "trial_id": 0}
    replies = [
        controller.handle_event(event)
        for event in (
            {"type": "experiment_released", "experiment": _plan(3, [50])},
            {"type": "stage_released", "experiment_id": 3, "stage_id": 0},
            {"type": "trial_started", **ids},
            {"type": "coflow_started", **ids, "iteration": 0},
        )
    ]
    assert [reply["pending_switches"] for reply in replies] == [[]] * 4
    assert session.state == "ready"
    now_expected = two_switches.class_entries(0)
    assert ("stage_class", (3, 0)) in now_expected
    assert two_switches.class_entries(1) == now_expected


def test_a_lagging_switch_whose_writes_fail_is_read_back_and_brought_to_the_plan(
    two_switches: TwoSwitches, caplog: pytest.LogCaptureFixture
) -> None:
    """s2's Write takes longer than the budget and then fails: s2 is in error, read back,
    and written to the plan as it is then. The failure is said to have come while it
    was lagging (long after the event that sent the write)."""
    caplog.set_level(logging.INFO, logger="control.controller")
    controller = two_switches.controller
    _with_budget(controller)
    two_switches.restart_s2()
    controller.start()
    session = controller.sessions["s2"]
    stall = two_switches.stall()

    def slow_failing_write(request: p4runtime_pb2.WriteRequest, context: RpcContext) -> None:
        if stall.inside.is_set():
            return  # the writes after the failed one go through
        stall()
        context.abort(grpc.StatusCode.INTERNAL, "the table memory is busy")

    two_switches.s2_misbehaviour.write = slow_failing_write
    _start_experiment(controller, 1, [100, 200])
    assert session.state == "lagging"
    reads_before = session.reconciles
    stall.release.set()
    _wait_for(lambda: session.state == "ready", "s2 read back and caught up")
    assert session.reconciles > reads_before
    failed = [line for line in _said_about_switches(caplog) if "write failed" in line]
    assert len(failed) == 1 and "write failed while lagging" in failed[0], failed
    assert "the table memory is busy" in failed[0]
    expected = two_switches.class_entries(0)
    assert ("coflow_class", (1, 0, 65536)) in expected
    assert two_switches.class_entries(1) == expected
    assert _class_entries(session.installed) == expected


def test_a_switch_that_stays_slow_costs_one_event_the_budget(
    two_switches: TwoSwitches,
) -> None:
    """Every Write of s2 takes longer than the budget. The first event that writes waits
    the budget and sets s2 lagging; once s2 is caught up, later events do not wait for it
    again (they used to, one event after each catch-up). A Write of s2 acknowledged
    within the budget ends that, and events wait for s2 again."""
    controller = two_switches.controller
    _with_budget(controller)
    two_switches.restart_s2()
    controller.start()
    session = controller.sessions["s2"]

    def slow_write(request: p4runtime_pb2.WriteRequest, context: RpcContext) -> None:
        time.sleep(1.5 * BUDGET_S)

    two_switches.s2_misbehaviour.write = slow_write
    took_s = []
    for experiment_id in (1, 2, 3):
        started = time.monotonic()
        _start_experiment(controller, experiment_id, [100])
        took_s.append(time.monotonic() - started)
        assert session.state == "lagging"
        _wait_for(lambda: session.state == "ready", "s2 caught up")
        assert two_switches.class_entries(1) == two_switches.class_entries(0)
    assert took_s[0] >= BUDGET_S
    assert max(took_s[1:]) < BUDGET_S, took_s
    assert session.slow
    # Fast again: the next writes are still not waited for, but acknowledged within the
    # budget they end the slow spell.
    two_switches.s2_misbehaviour.write = None
    _start_experiment(controller, 4, [100])
    _wait_for(lambda: session.state == "ready", "s2 caught up")
    assert not session.slow
    reply = controller.handle_event(
        {"type": "trial_stopped", "experiment_id": 4, "stage_id": 0, "trial_id": 0}
    )
    assert reply["pending_switches"] == []
    assert session.state == "ready"
    assert two_switches.class_entries(1) == two_switches.class_entries(0)


def test_a_switch_inside_the_budget_is_waited_for(two_switches: TwoSwitches) -> None:
    """A Write slower than usual but inside the budget: the reply waits for it, and the
    switch holds the event's entries when the reply leaves."""
    controller = two_switches.controller
    two_switches.restart_s2()
    controller.start()

    def slowish_write(request: p4runtime_pb2.WriteRequest, context: RpcContext) -> None:
        time.sleep(0.2)  # the default budget is 2 s

    two_switches.s2_misbehaviour.write = slowish_write
    _start_experiment(controller, 1, [100])
    reply = controller.handle_event(
        {"type": "trial_stopped", "experiment_id": 1, "stage_id": 0, "trial_id": 0}
    )
    assert reply["pending_switches"] == []
    assert controller.sessions["s2"].state == "ready"
    _start_experiment(controller, 2, [100])
    expected = two_switches.class_entries(0)
    assert ("stage_class", (2, 0)) in expected
    assert two_switches.class_entries(1) == expected


# --- 7. counter reads run off the supervisor's loop ------------------------------------


def test_a_slow_counter_read_does_not_hold_up_another_switch_s_reconnect(
    two_switches: TwoSwitches,
) -> None:
    """s2 takes its time over a counter Read; s1 restarts meanwhile and is provisioned
    again before s2 answers. The supervisor used to read the counters in its own loop,
    so it looked at s1 again only once s2 had answered."""
    controller = two_switches.controller
    two_switches.restart_s2()
    controller.start()
    _start_experiment(controller, 1, [100, 200])
    s1 = controller.sessions["s1"]
    stall = two_switches.stall()

    def slow_counter_read(request: p4runtime_pb2.ReadRequest) -> ReadReplies | None:
        if _is_counter_read(request):
            stall()
        return None

    two_switches.s2_misbehaviour.read = slow_counter_read
    assert stall.inside.wait(10), "no counter read of s2"
    two_switches.restart_s1()
    _wait_for(lambda: s1.state == "ready" and s1.provisions == 2, "s1 provisioned again")
    assert not stall.over.is_set(), "s1 waited for s2's counter read"
    assert two_switches.class_entries(0) == _class_entries(s1.installed)


def test_a_counter_reading_that_ends_after_the_switch_turned_lagging_is_dropped(
    two_switches: TwoSwitches,
) -> None:
    """s2's counter Read is out when an event sets s2 lagging; the Read then fails. The
    failure is not taken in: s2 stays lagging, with its Write out, and is caught up when
    that ends. Taken in, it would put s2 in error and start a read-back beside the
    Write still out."""
    controller = two_switches.controller
    _with_budget(controller)
    two_switches.restart_s2()
    controller.start()
    session = controller.sessions["s2"]
    read_stall = two_switches.stall()

    def failing_counter_read(request: p4runtime_pb2.ReadRequest) -> ReadReplies | None:
        if not _is_counter_read(request):
            return None
        read_stall()
        return [b"\x0a\xff\xff\xff\xff\x0f"], None  # a reply that does not parse

    two_switches.s2_misbehaviour.read = failing_counter_read
    assert read_stall.inside.wait(10), "no counter read of s2"
    polling = controller._polling
    assert polling is not None
    write_stall = two_switches.stall()
    writes = StalledWrites(write_stall)
    two_switches.s2_misbehaviour.write = writes
    _start_experiment(controller, 1, [100, 200])
    assert session.state == "lagging"
    two_switches.s2_misbehaviour.read = None
    read_stall.release.set()
    polling.result(timeout=10)
    assert session.state == "lagging", session.error
    write_stall.release.set()
    _wait_for(lambda: session.state == "ready", "s2 caught up")
    assert two_switches.class_entries(1) == two_switches.class_entries(0)
    assert writes.most_in_flight == 1


def test_stop_does_not_wait_for_a_stalled_switch(two_switches: TwoSwitches) -> None:
    """s2's provisioning Read is out, and would be for up to the RPC timeout (30 s here),
    when the controller stops: closing the streams first ends it at once. Stop used to
    wait for the attempts under way before it closed the streams."""
    controller = two_switches.controller
    controller.start()
    stall = two_switches.stall()
    two_switches.s2_misbehaviour.before_read = stall
    two_switches.restart_s2()
    assert stall.inside.wait(10), "s2's provisioning did not reach its Read"
    started = time.monotonic()
    controller.stop()
    took_s = time.monotonic() - started
    assert not stall.over.is_set()
    assert took_s < 5.0, f"stop took {took_s:.1f} s"
    assert [s.state for s in controller.sessions.values()] == ["down", "down"]
    assert all(s.client is None for s in controller.sessions.values())
