"""Hostile and careless clients of the embedded P4Runtime server: idle streams, slow
readers, huge replies and bytes that are no message. Each gets a clear status, and the
primary controller keeps writing throughout."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from test_p4runtime_server_support import (
    CLASS_TABLE,
    LPM_TABLE,
    SCRATCH,
    SET_CLASS,
    SET_EGRESS,
    STAGE_BYTES,
    StreamSession,
    program_under_test,
    unpaced,
)

from control.p4runtime_client import P4RuntimeClient, WriteError
from softswitch.frontend import CompiledProgram
from softswitch.frontend import program as frontend_program
from softswitch.frontend.errors import CompileError
from softswitch.p4rt import pipeline_config, reads, service
from softswitch.p4rt.rpc import Aborted, BlockingContext
from softswitch.p4rt.status import STATUS_DETAILS_KEY, P4RuntimeError, batch_status, p4_error
from softswitch.p4runtime_server import P4RuntimeServer
from softswitch.switch import Switch

DEVICE_ID = 5
ELECTION = (0, 7)
Update = p4runtime_pb2.Update
SetRequest = p4runtime_pb2.SetForwardingPipelineConfigRequest


@dataclass
class Served:
    server: P4RuntimeServer
    stub: p4runtime_pb2_grpc.P4RuntimeStub
    primary: StreamSession
    others: list[StreamSession]
    channels: list[grpc.Channel]

    def channel(self, *, fixed_window: bool = False) -> grpc.Channel:
        """A connection of its own (a client apart from the primary's). With
        ``fixed_window`` it keeps HTTP/2's initial 64 KiB receive window: gRPC otherwise
        grows the window as data flows and takes megabytes of a reply the application
        never reads."""
        options: list[tuple[str, int]] = [("grpc.max_receive_message_length", 1 << 30)]
        if fixed_window:
            options.append(("grpc.http2.bdp_probe", 0))
        channel = grpc.insecure_channel(self.server.addr, options=options)
        self.channels.append(channel)
        return channel

    def session(self) -> StreamSession:
        session = StreamSession(p4runtime_pb2_grpc.P4RuntimeStub(self.channel()))
        self.others.append(session)
        return session


@pytest.fixture
def served() -> Iterator[Served]:
    """A server running the test program, its primary client arbitrated."""
    switch = Switch()
    switch.load_pipeline(program_under_test())
    server = P4RuntimeServer(switch, DEVICE_ID, "127.0.0.1:0")
    server.servicer.arbitration_timeout_s = 1.0
    server.start()
    channel = grpc.insecure_channel(server.addr)
    stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
    primary = StreamSession(stub)
    primary.arbitrate(DEVICE_ID, ELECTION)
    assert primary.next().arbitration.status.code == code_pb2.OK
    state = Served(server, stub, primary, [], [])
    try:
        yield state
    finally:
        for session in state.others:
            session.outgoing.put(None)
        for other in state.channels:
            other.close()
        primary.close()
        channel.close()
        server.stop(0)
        switch.close()


def class_update(stage: int) -> p4runtime_pb2.Update:
    update = p4runtime_pb2.Update(type=Update.INSERT)
    entry = update.entity.table_entry
    entry.table_id = CLASS_TABLE
    entry.match.add(field_id=1).exact.value = b"\x01"
    entry.match.add(field_id=2).exact.value = bytes([stage])
    entry.action.action.action_id = SET_CLASS
    entry.action.action.params.add(param_id=1, value=b"\x01")
    return update


def lpm_update(third_octet: int) -> p4runtime_pb2.Update:
    update = p4runtime_pb2.Update(type=Update.INSERT)
    entry = update.entity.table_entry
    entry.table_id = LPM_TABLE
    match = entry.match.add(field_id=1)
    match.lpm.value, match.lpm.prefix_len = bytes([10, third_octet, 0, 0]), 16
    entry.action.action.action_id = SET_EGRESS
    entry.action.action.params.add(param_id=1, value=b"\x01")
    return update


def write(served: Served, *updates: p4runtime_pb2.Update) -> None:
    request = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID, updates=updates)
    request.election_id.high, request.election_id.low = ELECTION
    served.stub.Write(request, timeout=5)


def wildcard_read(count: int) -> p4runtime_pb2.ReadRequest:
    """``count`` copies of "every entry of the LPM table"."""
    entity = p4runtime_pb2.Entity()
    entity.table_entry.table_id = LPM_TABLE
    return p4runtime_pb2.ReadRequest(device_id=DEVICE_ID, entities=[entity] * count)


def final_error(session: StreamSession, timeout_s: float = 5.0) -> grpc.RpcError:
    assert session.done.wait(timeout_s), "the stream was not ended"
    assert session.final_error is not None
    return session.final_error


def _backups(served: Served, count: int, first_id: int = 1) -> list[StreamSession]:
    """``count`` streams arbitrated as backups with election ids from ``first_id`` on."""
    sessions = []
    for offset in range(count):
        session = served.session()
        session.arbitrate(DEVICE_ID, (0, first_id + offset) if first_id else None)
        assert session.next().arbitration.status.code != code_pb2.OK
        sessions.append(session)
    return sessions


def test_streams_past_the_limit_must_displace_a_lower_backup_or_are_refused(
    served: Served,
) -> None:
    """Sixteen places; a seventeenth stream may wait for one, but only takes it from a
    backup whose election id is below its own."""
    backups = _backups(served, service.MAX_STREAMS - 1, first_id=0)  # no election id
    time.sleep(0.2)
    assert not any(session.done.is_set() for session in backups)
    # Without an election id of its own, a stream cannot displace anyone.
    reader = served.session()
    reader.arbitrate(DEVICE_ID, None)
    error = final_error(reader, 2.0)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"limit {service.MAX_STREAMS}" in (error.details() or "")
    write(served, class_update(1))
    served.stub.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=2)
    # With one, it takes the place of one backup (without an id: lowest), the oldest.
    newcomer = served.session()
    newcomer.arbitrate(DEVICE_ID, (0, 3))
    assert newcomer.next().arbitration.status.code == code_pb2.ALREADY_EXISTS
    displaced = final_error(backups[0], 2.0)
    assert displaced.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "displaced" in (displaced.details() or "")
    assert not any(session.done.is_set() for session in backups[1:])
    write(served, class_update(2))  # the primary is never displaced


def _controller_writes(served: Served) -> None:
    """A controller (the default role, an election id above every other) connects and
    writes."""
    controller = P4RuntimeClient(served.server.addr, DEVICE_ID, 2 << 64)
    try:
        assert controller.connect() is True
        controller.write([class_update(5)])
    finally:
        controller.close()


def test_a_controller_takes_its_switch_though_tools_hold_every_stream_place(
    served: Served,
) -> None:
    """Sixteen p4runtime-shell sessions left open (backups, election id 1,0) must not lock
    the controller (a higher id) out."""
    served.primary.close()
    tools = [served.session() for _ in range(service.MAX_STREAMS)]
    for number, tool in enumerate(tools):
        tool.arbitrate(DEVICE_ID, (1, number))  # ids must differ; all below the controller
        tool.next()
    _controller_writes(served)
    assert tools[0].done.wait(2.0)  # the lowest made room
    assert not any(tool.done.is_set() for tool in tools[1:])


def test_a_controller_takes_its_switch_though_named_roles_hold_every_stream_place(
    served: Served,
) -> None:
    """Sixteen clients each naming a role of its own are each its primary, whatever their
    election id, and a primary is never displaced: they must not lock the controller (the
    default role) out either."""
    served.primary.close()
    named = [served.session() for _ in range(service.MAX_STREAMS)]
    held = service.MAX_STREAMS - service.DEFAULT_ROLE_PLACES
    for number, session in enumerate(named):  # one after the other: the first ones stay
        session.arbitrate(DEVICE_ID, (0, 1), role=f"r{number}")
        if number < held:
            assert session.next().arbitration.status.code == code_pb2.OK  # its primary
        else:
            error = final_error(session, 2.0)
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "named roles" in (error.details() or "")
    _controller_writes(served)
    assert not any(session.done.is_set() for session in named[:held])


def test_a_stream_that_does_not_arbitrate_in_time_is_ended_and_frees_its_slot(
    served: Served,
) -> None:
    silent = served.session()
    backup = served.session()
    backup.arbitrate(DEVICE_ID, (0, 2))
    assert backup.next().arbitration.status.code == code_pb2.ALREADY_EXISTS
    error = final_error(silent)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "MasterArbitrationUpdate" in (error.details() or "")
    # Streams that did arbitrate stay, past the same time.
    time.sleep(0.5)
    assert not backup.done.is_set() and not served.primary.done.is_set()
    write(served, class_update(2))
    # Every slot but the primary's and the backup's can be opened again.
    rest = [served.session() for _ in range(service.MAX_STREAMS - 2)]
    time.sleep(0.2)
    assert not any(session.done.is_set() for session in rest)


def _frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    """One HTTP/2 frame (RFC 9113 §4.1)."""
    return (
        len(payload).to_bytes(3, "big")
        + bytes([kind, flags])
        + stream_id.to_bytes(4, "big")
        + payload
    )


def _literal(name: str, value: str) -> bytes:
    """An HPACK literal header field without indexing, plain strings (RFC 7541 §6.2.2)."""
    return b"\x00" + bytes([len(name)]) + name.encode() + bytes([len(value)]) + value.encode()


def open_write_that_stops_halfway(addr: str) -> socket.socket:
    """A Write call on a connection of its own whose request stops after 10 of 1000 bytes."""
    host, port = addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    headers = b"".join(
        _literal(name, value)
        for name, value in (
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/p4.v1.P4Runtime/Write"),
            (":authority", "localhost"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        )
    )
    sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(4, 0, 0, b""))
    sock.sendall(_frame(1, 0x4, 1, headers))  # HEADERS, END_HEADERS
    sock.sendall(_frame(0, 0, 1, b"\x00" + (1000).to_bytes(4, "big") + bytes(10)))
    return sock


def ends_stream_one(sock: socket.socket, timeout_s: float) -> bool:
    """Whether the server ends stream 1 (trailers with END_STREAM, or RST_STREAM) within
    ``timeout_s``."""
    sock.settimeout(timeout_s)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
            at = 0
            while at + 9 <= len(data):
                length = int.from_bytes(data[at : at + 3], "big")
                kind, flags = data[at + 3], data[at + 4]
                stream_id = int.from_bytes(data[at + 5 : at + 9], "big") & 0x7FFFFFFF
                if stream_id == 1 and (kind == 3 or (kind == 1 and flags & 0x1)):
                    return True
                at += 9 + length
    except TimeoutError:
        return False
    return False


def test_requests_that_never_arrive_whole_hold_no_thread_and_are_ended(served: Served) -> None:
    """A client that starts requests and never finishes them (a slow-loris) takes no
    worker: the primary keeps writing, and each such call ends at the request deadline."""
    served.server.servicer.request_timeout_s = 1.0
    halfway = [open_write_that_stops_halfway(served.server.addr) for _ in range(40)]
    never_sent = threading.Event()

    def no_request() -> Iterator[bytes]:
        never_sent.wait(10)
        yield from ()

    silent = served.channel().stream_unary("/p4.v1.P4Runtime/Write")
    calls = [silent.future(no_request(), timeout=10) for _ in range(8)]
    try:
        write(served, class_update(4))
        served.stub.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=5)
        for call in calls:
            with pytest.raises(grpc.RpcError) as caught:
                call.result()
            assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert "did not arrive whole within 1 s" in (caught.value.details() or "")
        assert all(ends_stream_one(sock, 5.0) for sock in halfway)
    finally:
        never_sent.set()
        for sock in halfway:
            sock.close()
    write(served, class_update(5))


def test_slow_readers_cannot_take_every_thread(served: Served) -> None:
    """A client that starts a large Read and does not take the reply holds a read slot
    until the server has sent it all; past MAX_READS such Reads are refused, so unread
    replies cannot pile up in the server, and Writes still get through."""
    write(served, *(lpm_update(i) for i in range(16)))
    request = wildcard_read(8000)  # 128,000 entries: more than the transport buffers
    held: list[Iterator[p4runtime_pb2.ReadResponse]] = []
    refused = 0
    for _ in range(service.MAX_READS + 4):
        stub = p4runtime_pb2_grpc.P4RuntimeStub(served.channel(fixed_window=True))
        replies = stub.Read(request, timeout=60)
        try:
            next(replies)  # the first reply only; the rest waits in the server
            held.append(replies)
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "too many Reads" in (error.details() or "")
            refused += 1
    assert refused >= 4
    write(served, class_update(3))
    for replies in held:
        replies.cancel()  # type: ignore[attr-defined]
    # A cancelled read gives its slot back.
    deadline = time.monotonic() + 10
    while True:
        try:
            assert len(list(served.stub.Read(wildcard_read(1), timeout=5))) > 0
            break
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert time.monotonic() < deadline, "the slots of cancelled reads stay taken"
            time.sleep(0.05)


def test_a_read_whose_reply_is_too_large_is_refused_whole(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(served, *(lpm_update(i) for i in range(16)))
    one_table_bytes = sum(
        reply.ByteSize() for reply in served.stub.Read(wildcard_read(1), timeout=5)
    )
    monkeypatch.setattr(reads, "MAX_READ_REPLY_BYTES", 3 * one_table_bytes)
    entities = [e for reply in served.stub.Read(wildcard_read(3)) for e in reply.entities]
    assert len(entities) == 48
    with pytest.raises(grpc.RpcError) as caught:
        list(served.stub.Read(wildcard_read(4), timeout=5))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "entity 3 of 4" in (caught.value.details() or "")
    write(served, class_update(4))


def test_a_read_of_more_entities_than_allowed_is_refused_before_they_are_built(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registers, counters and direct counters are checked against the budget before
    their cells are built (a wildcard over a large register would fill the memory)."""
    write(served, *(lpm_update(i) for i in range(16)))
    register = p4runtime_pb2.Entity()
    register.register_entry.register_id = SCRATCH  # 4 cells
    counter = p4runtime_pb2.Entity()
    counter.counter_entry.counter_id = STAGE_BYTES  # 8 cells
    direct = p4runtime_pb2.Entity()
    direct.direct_counter_entry.table_entry.table_id = CLASS_TABLE
    write(served, class_update(1), class_update(2), class_update(3))  # 3 direct counters
    built: list[int] = []
    original = reads.encode.register_entry_entity

    def counting(register_id: int, index: int, value: int) -> bytes:
        built.append(index)
        return original(register_id, index, value)

    monkeypatch.setattr(reads.encode, "register_entry_entity", counting)
    monkeypatch.setattr(reads, "MAX_READ_ENTITIES", 10)
    for entities, allowed in (
        ([register, register], True),  # 8
        ([register, register, register], False),  # 12
        ([counter, register], False),
        ([counter], True),
        ([direct, counter], False),
        ([direct, register], True),  # 7
        ([register, wildcard_read(1).entities[0]], False),  # 4 + 16
    ):
        request = p4runtime_pb2.ReadRequest(device_id=DEVICE_ID, entities=entities)
        built.clear()
        if allowed:
            replies = served.stub.Read(request, timeout=5)
            assert sum(len(reply.entities) for reply in replies) <= 10
            continue
        with pytest.raises(grpc.RpcError) as caught:
            list(served.stub.Read(request, timeout=5))
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "exceed 10 entities" in (caught.value.details() or "")
        assert len(built) <= 8, "cells were built past the budget"
    # Cells read by index count one each.
    register.register_entry.index.index = 3
    request = p4runtime_pb2.ReadRequest(device_id=DEVICE_ID, entities=[register] * 10)
    cells = [entity for reply in served.stub.Read(request) for entity in reply.entities]
    assert [cell.register_entry.index.index for cell in cells] == [3] * 10
    write(served, class_update(4))


NESTED = b"\x0b" * 100_000 + b"\x0c" * 100_000
STREAM_NESTED = b"\x0b" * 5_000 + b"\x0c" * 5_000
TRUNCATED = b"\x0a\x05\x01"


@pytest.mark.parametrize(
    "method",
    ["Read", "SetForwardingPipelineConfig", "GetForwardingPipelineConfig", "Capabilities"],
)
@pytest.mark.parametrize("data", [NESTED, TRUNCATED], ids=["nested", "truncated"])
def test_a_request_that_does_not_parse_is_invalid_argument(
    served: Served, method: str, data: bytes
) -> None:
    if len(data) > service.MAX_SMALL_REQUEST_BYTES and method in (
        "GetForwardingPipelineConfig",
        "Capabilities",
    ):
        data = STREAM_NESTED  # past the size limit it would not be parsed at all
    channel = served.channel()
    if method == "Read":
        call = channel.unary_stream(f"/p4.v1.P4Runtime/{method}")
        with pytest.raises(grpc.RpcError) as caught:
            list(call(data, timeout=10))
    else:
        with pytest.raises(grpc.RpcError) as caught:
            channel.unary_unary(f"/p4.v1.P4Runtime/{method}")(data, timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "cannot be parsed" in (caught.value.details() or "")
    write(served, class_update(5))


@pytest.mark.parametrize(
    ("method", "limit"),
    [
        ("Capabilities", service.MAX_SMALL_REQUEST_BYTES),
        ("GetForwardingPipelineConfig", service.MAX_SMALL_REQUEST_BYTES),
        ("Read", service.MAX_READ_REQUEST_BYTES),
    ],
)
def test_a_request_larger_than_its_kind_needs_is_refused_unparsed(
    served: Served, method: str, limit: int
) -> None:
    """Unknown fields (varint field 1 of 0, two bytes each): protobuf would parse them for
    seconds a megabyte on a worker thread, holding it from the primary's writes."""
    device = p4runtime_pb2.ReadRequest(device_id=DEVICE_ID).SerializeToString()
    channel = served.channel()

    def call(data: bytes, timeout_s: float) -> object:
        if method == "Read":
            stream = channel.unary_stream(f"/p4.v1.P4Runtime/{method}")
            return list(stream(data, timeout=timeout_s))
        return channel.unary_unary(f"/p4.v1.P4Runtime/{method}")(data, timeout=timeout_s)

    padding = b"\x18\x00" if method == "Capabilities" else b"\x78\x00"  # an unknown field
    at_limit = device + padding * ((limit - len(device)) // 2)
    # Answered (unknown fields are skipped), after parsing them: 2 million at the Read
    # limit take seconds, more on a slow machine. A refusal must not wait for that.
    call(at_limit, timeout_s=120)
    with pytest.raises(grpc.RpcError) as caught:
        call(at_limit + padding, timeout_s=10)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"at most {limit:,} are read" in (caught.value.details() or "")
    write(served, class_update(5))


def test_streams_flooding_costly_messages_do_not_hold_up_the_primarys_writes(
    served: Served,
) -> None:
    """Packet-outs of thousands of empty metadata, each just under the stream message
    limit: ~10 ms of parsing apiece on the loop that serves every RPC. Eight backups
    sending them back to back used to make the primary's writes miss a 5 s deadline."""
    packet = p4runtime_pb2.PacketOut()
    while packet.ByteSize() < service.MAX_STREAM_MESSAGE_BYTES - 16:
        packet.metadata.add()
    costly = p4runtime_pb2.StreamMessageRequest(packet=packet).SerializeToString()
    assert len(costly) <= service.MAX_STREAM_MESSAGE_BYTES
    backup = p4runtime_pb2.StreamMessageRequest(
        arbitration=p4runtime_pb2.MasterArbitrationUpdate(device_id=DEVICE_ID)  # no id
    ).SerializeToString()
    stop = threading.Event()
    sent = [0]
    calls = []

    def messages() -> Iterator[bytes]:  # wire bytes: the client spends no time on them
        yield backup
        while not stop.is_set():
            sent[0] += 1
            yield costly

    def take_replies(call: Iterator[bytes]) -> None:
        with contextlib.suppress(grpc.RpcError):
            for _ in call:  # the refusals of the packets
                pass

    takers = []
    for _ in range(8):
        call = served.channel().stream_stream("/p4.v1.P4Runtime/StreamChannel")(messages())
        calls.append(call)
        takers.append(threading.Thread(target=take_replies, args=(call,), daemon=True))
        takers[-1].start()
    try:
        time.sleep(1.0)
        for _ in range(4):
            update = class_update(1)
            write(served, update)  # a 5 s deadline each
            update.type = Update.DELETE
            write(served, update)
            time.sleep(0.1)
        assert sent[0] > 100  # the flood was on
    finally:
        stop.set()
        for call in calls:
            call.cancel()
        for taker in takers:
            taker.join(timeout=10)


@pytest.mark.parametrize("data", [STREAM_NESTED, TRUNCATED], ids=["nested", "truncated"])
def test_a_stream_message_that_does_not_parse_ends_only_its_stream(
    served: Served, data: bytes
) -> None:
    assert len(data) <= service.MAX_STREAM_MESSAGE_BYTES  # larger ones are not parsed
    call = served.channel().stream_stream("/p4.v1.P4Runtime/StreamChannel")
    with pytest.raises(grpc.RpcError) as caught:
        list(call(iter([data]), timeout=10))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "StreamMessageRequest cannot be parsed" in (caught.value.details() or "")
    assert not served.primary.done.is_set()
    write(served, class_update(6))


def test_the_projects_client_sees_every_error_of_a_large_failed_batch(served: Served) -> None:
    """One p4.v1.Error per update rides in the trailer: 2,000 of them are over 100 KB,
    past gRPC's default limit of 16 KiB, which a default channel turns into a transport
    error. The project's client raises the limit, as the P4Runtime spec advises."""
    updates = [lpm_update(i % 256) for i in range(2000)]
    for update in updates:
        update.entity.table_entry.table_id = 123  # no such table
    request = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID, updates=updates)
    request.election_id.high, request.election_id.low = ELECTION
    with pytest.raises(grpc.RpcError) as caught:
        served.stub.Write(request, timeout=10)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # a default channel
    client = P4RuntimeClient(served.server.addr, DEVICE_ID, election_id=100)
    try:
        assert client.connect()
        with pytest.raises(WriteError) as failed:
            client.write(updates)
    finally:
        client.close()
    assert failed.value.code == grpc.StatusCode.UNKNOWN
    assert [error.index for error in failed.value.errors] == list(range(2000))
    assert {error.code for error in failed.value.errors} == {grpc.StatusCode.INVALID_ARGUMENT}


def test_a_client_that_cancels_or_leaves_mid_reply_costs_no_error_log(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    """gRPC logs a failed write in a handler as an ERROR with a traceback: a client that
    cancels its calls must not be able to fill the server's log that way."""
    write(served, *(lpm_update(i) for i in range(16)))
    stub = p4runtime_pb2_grpc.P4RuntimeStub(served.channel(fixed_window=True))
    for _ in range(3):
        call = stub.Read(wildcard_read(2000))  # 32,000 entities, many replies
        next(call)
        call.cancel()
    session = served.session()
    session.arbitrate(DEVICE_ID, None)
    session.next()
    packet = p4runtime_pb2.StreamMessageRequest()
    packet.packet.payload = b"\x00" * 4096
    for _ in range(200):
        session.outgoing.put(packet)  # echoes it will not wait for
    session.call.cancel()
    time.sleep(1.0)  # the server's writes after the cancellations fail meanwhile
    errors = [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
    assert errors == [], [r.getMessage() for r in errors]
    write(served, class_update(4))  # the primary is unaffected
    assert len([e for r in served.stub.Read(wildcard_read(1)) for e in r.entities]) == 16


def _parses_counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the requests the server parses from now on, in order."""
    parsed: list[str] = []
    decode = service.decode_write_request
    parse = service.parse_or_abort

    def counted_decode(data: bytes) -> object:
        parsed.append("WriteRequest")
        return decode(data)

    def counted_parse(message_type: type, data: bytes, context: object) -> object:
        parsed.append(message_type.DESCRIPTOR.name)
        return parse(message_type, data, context)  # type: ignore[arg-type]

    monkeypatch.setattr(service, "decode_write_request", counted_decode)
    monkeypatch.setattr(service, "parse_or_abort", counted_parse)
    return parsed


def test_a_client_that_may_not_write_is_refused_before_its_request_is_parsed(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pure-Python protobuf takes seconds over a large request: a backup's or a
    stranger's must be refused from its header, holding no worker for the parse."""
    parsed = _parses_counted(monkeypatch)
    request = p4runtime_pb2.WriteRequest(
        device_id=DEVICE_ID, updates=[class_update(s) for s in range(1, 200)]
    )
    request.election_id.low = 1  # not the primary's
    data = request.SerializeToString() + b"\xf8\x06\x01"  # unknown field: the slow path
    with pytest.raises(grpc.RpcError) as caught:
        served.stub.Write.with_call(p4runtime_pb2.WriteRequest.FromString(data), timeout=5)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    config = p4runtime_pb2.SetForwardingPipelineConfigRequest(
        device_id=DEVICE_ID, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY
    )
    config.config.p4_device_config = b"\x00" * (1 << 20)
    with pytest.raises(grpc.RpcError) as caught:
        served.stub.SetForwardingPipelineConfig(config, timeout=5)  # no election id
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert parsed == []
    write(served, class_update(4))  # the primary's request is parsed and applied
    assert parsed == ["WriteRequest"]


def test_unknown_groups_or_broken_bytes_do_not_buy_a_non_primary_a_parse(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request whose header the early check could not read used to be parsed whole
    before the primary check: an unknown group, or one truncated byte, at the end of a
    megabyte of updates from a client that may not write cost seconds of a worker. A
    group is now skipped as protobuf skips it (the client is refused as not primary),
    and bytes that are no message are refused as such, both before the parse."""
    parsed = _parses_counted(monkeypatch)
    request = p4runtime_pb2.WriteRequest(
        device_id=DEVICE_ID, updates=[class_update(s) for s in range(1, 256)] * 8
    )
    request.election_id.low = 1  # not the primary's
    write_raw = served.channel().unary_unary(
        "/p4.v1.P4Runtime/Write",
        request_serializer=None,
        response_deserializer=p4runtime_pb2.WriteResponse.FromString,
    )
    cases = [
        (b"\x7b\x7c", grpc.StatusCode.PERMISSION_DENIED),  # an empty group, field 15
        (b"\xfb\x06\x0b\x08\x05\x0c\xfc\x06", grpc.StatusCode.PERMISSION_DENIED),  # nested
        (b"\x22\x05\x08\xff", grpc.StatusCode.INVALID_ARGUMENT),  # an update cut short
        (b"\x08\xff", grpc.StatusCode.INVALID_ARGUMENT),  # a varint cut short
    ]
    for trailer, code in cases:
        with pytest.raises(grpc.RpcError) as caught:
            write_raw(request.SerializeToString() + trailer, timeout=5)
        assert caught.value.code() == code, (trailer, caught.value.details())
    assert parsed == []
    write(served, class_update(4))  # the primary's request is parsed and applied
    assert parsed == ["WriteRequest"]


def test_a_primary_cut_off_for_not_reading_loses_the_role_at_once(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's write of a reply the client never takes blocks, and the call's end
    waits behind it; the role must not, or the primary keeps writing and no other client
    can take over."""
    from softswitch.p4rt import arbitration

    monkeypatch.setattr(arbitration, "MAX_OUTBOX_BYTES", 256 << 10)
    monkeypatch.setattr(service, "LoopShare", unpaced)  # 1,000 messages, read at once
    served.primary.close()  # the fixture's primary leaves; a new one takes over below
    channel = served.channel(fixed_window=True)
    stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
    sent = threading.Event()
    done = threading.Event()

    def requests() -> Iterator[p4runtime_pb2.StreamMessageRequest]:
        update = p4runtime_pb2.MasterArbitrationUpdate(device_id=DEVICE_ID)
        update.election_id.low = 9
        yield p4runtime_pb2.StreamMessageRequest(arbitration=update)
        time.sleep(0.3)
        request = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID, updates=[class_update(1)])
        request.election_id.low = 9
        stub.Write(request, timeout=5)  # primary: this succeeds
        packet = p4runtime_pb2.StreamMessageRequest()
        packet.packet.payload = b"\x00" * 4096
        for _ in range(1000):
            yield packet
        sent.set()
        done.wait(30)  # keep the stream open, never reading it

    call = stub.StreamChannel(requests())
    assert sent.wait(20)
    deadline = time.monotonic() + 10
    refused = None
    for stage in range(2, 250):  # a new entry each time: only the role can refuse it
        if time.monotonic() > deadline:
            break
        request = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID, updates=[class_update(stage)])
        request.election_id.low = 9
        try:
            stub.Write(request, timeout=5)
        except grpc.RpcError as error:
            refused = error
            break
        time.sleep(0.1)
    assert refused is not None and refused.code() == grpc.StatusCode.PERMISSION_DENIED
    taker = served.session()
    taker.arbitrate(DEVICE_ID, (0, 10))
    assert taker.next().arbitration.status.code == code_pb2.OK
    done.set()
    call.cancel()


def test_a_long_read_lets_the_primary_write_meanwhile(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A legal Read of many entities must not hold the switch's state until it is done:
    the primary's writes (with the controller's deadlines) would time out behind it."""
    write(served, *(lpm_update(i) for i in range(16)))
    read_entity = service.read_entity
    gathered_s: list[float] = []

    def slow_read_entity(*args: object) -> list[bytes]:
        time.sleep(0.001)
        gathered_s.append(time.monotonic())
        return read_entity(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(service, "read_entity", slow_read_entity)
    read_entities: list[int] = []

    def long_read() -> None:
        replies = served.stub.Read(wildcard_read(2000), timeout=30)  # ≥ 2 s of work
        read_entities.append(sum(len(reply.entities) for reply in replies))

    reader = threading.Thread(target=long_read)
    reader.start()
    while not gathered_s:
        time.sleep(0.01)
    write(served, class_update(9))
    written_s = time.monotonic()
    reader.join(30)
    assert read_entities == [2000 * 16]
    # The write went in while the read was still gathering, not after.
    assert written_s < gathered_s[-1] - 0.5


def test_a_read_across_a_pipeline_change_is_aborted_not_mixed(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(served, *(lpm_update(i) for i in range(16)))
    read_entity = service.read_entity
    gathered = threading.Event()

    def slow_read_entity(*args: object) -> list[bytes]:
        time.sleep(0.001)
        gathered.set()
        return read_entity(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(service, "read_entity", slow_read_entity)
    outcome: list[grpc.RpcError | int] = []

    def long_read() -> None:
        try:
            replies = served.stub.Read(wildcard_read(2000), timeout=30)
            outcome.append(sum(len(reply.entities) for reply in replies))
        except grpc.RpcError as error:
            outcome.append(error)

    reader = threading.Thread(target=long_read)
    reader.start()
    assert gathered.wait(10)
    program = program_under_test()
    request = p4runtime_pb2.SetForwardingPipelineConfigRequest(
        device_id=DEVICE_ID,
        action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
    )
    request.election_id.high, request.election_id.low = ELECTION
    request.config.p4info.CopyFrom(program.p4info)
    request.config.p4_device_config = program.device_config()
    served.stub.SetForwardingPipelineConfig(request, timeout=10)  # a new pipeline, empty
    reader.join(30)
    [error] = outcome
    assert isinstance(error, grpc.RpcError)
    assert error.code() == grpc.StatusCode.ABORTED
    assert "pipeline changed during this Read" in (error.details() or "")
    assert [e for r in served.stub.Read(wildcard_read(1)) for e in r.entities] == []


def test_reads_whose_replies_are_not_taken_give_their_slots_back(
    served: Served, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Clients that start Reads and never take the replies must not keep every other
    client from reading for longer than the reply timeout, nor the controller (the
    primary) at all."""
    # Long enough that the held Reads keep their slots until the refusal below, also
    # on a loaded machine (the first must not time out while the last is started).
    monkeypatch.setattr(service, "READ_REPLY_TIMEOUT_S", 12.0)
    write(served, *(lpm_update(i) for i in range(16)))
    held = []
    for _ in range(service.MAX_READS):
        stub = p4runtime_pb2_grpc.P4RuntimeStub(served.channel(fixed_window=True))
        replies = stub.Read(wildcard_read(8000), timeout=60)
        next(replies)  # the first reply only
        held.append(replies)
    other = p4runtime_pb2_grpc.P4RuntimeStub(served.channel())
    with pytest.raises(grpc.RpcError) as caught:
        list(other.Read(wildcard_read(1), timeout=5))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # The primary's connection has a slot of its own.
    for _ in range(3):
        primary_read = [
            e for r in served.stub.Read(wildcard_read(1), timeout=5) for e in r.entities
        ]
        assert len(primary_read) == 16
    deadline = time.monotonic() + 20
    while True:
        try:
            read = [e for r in other.Read(wildcard_read(1), timeout=5) for e in r.entities]
            break
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert time.monotonic() < deadline, "the stalled Reads keep their slots"
            time.sleep(0.1)
    assert len(read) == 16
    # A client that reads on after that gets an error, never a cut reply that looks whole.
    with pytest.raises(grpc.RpcError) as caught:
        list(held[0])
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "incomplete" in (caught.value.details() or "")
    for replies in held[1:]:
        replies.cancel()  # type: ignore[attr-defined]
    time.sleep(0.5)
    errors = [r.getMessage() for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
    assert errors == []
    write(served, class_update(5))


# ----------------------------------------------------------------------------- stream messages


def _counted_stream_parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the stream messages the server parses from now on."""
    sizes: list[int] = []
    parse = service.parse_message

    def counted(message_type: type, data: bytes) -> object:
        if message_type is p4runtime_pb2.StreamMessageRequest:
            sizes.append(len(data))
        return parse(message_type, data)

    monkeypatch.setattr(service, "parse_message", counted)
    return sizes


def test_a_stream_message_over_the_limit_is_refused_unparsed_and_the_stream_stays(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that has not even arbitrated sent one 6 MB packet-out of a million empty
    metadata: parsed and echoed on the event loop, it held every RPC for 22 s."""
    parsed = _counted_stream_parses(monkeypatch)
    session = served.session()
    packet = p4runtime_pb2.StreamMessageRequest()
    packet.packet.payload = b"\x00"
    for _ in range(service.MAX_STREAM_MESSAGE_BYTES // 4 + 1):  # 4 bytes each
        packet.packet.metadata.add(metadata_id=1)
    assert packet.ByteSize() > service.MAX_STREAM_MESSAGE_BYTES
    session.outgoing.put(packet)
    error = session.next().error
    assert error.canonical_code == code_pb2.RESOURCE_EXHAUSTED
    assert f"over the limit of {service.MAX_STREAM_MESSAGE_BYTES} bytes" in error.message
    assert error.WhichOneof("details") == "packet_out"
    assert not error.packet_out.HasField("packet_out")  # nothing of it echoed
    assert parsed == []
    session.arbitrate(DEVICE_ID, (0, 1))  # the stream goes on
    assert session.next().arbitration.status.code == code_pb2.ALREADY_EXISTS
    write(served, class_update(1))


def test_an_arbitration_over_the_limit_ends_only_its_stream(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Arbitration errors end the stream (spec); one too large to read is one."""
    parsed = _counted_stream_parses(monkeypatch)
    session = served.session()
    session.arbitrate(DEVICE_ID, (0, 1), role="r" * (service.MAX_STREAM_MESSAGE_BYTES + 1))
    error = final_error(session)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "over the limit" in (error.details() or "")
    assert parsed == []
    assert not served.primary.done.is_set()
    write(served, class_update(2))


def test_a_packet_out_echo_keeps_a_few_of_its_metadata(served: Served) -> None:
    """The echo identifies the packet; copying and serialising thousands of metadata
    into it took seconds of the event loop."""
    session = served.session()
    packet = p4runtime_pb2.StreamMessageRequest()
    packet.packet.payload = b"\x00" * 64
    for number in range(1000):
        packet.packet.metadata.add(metadata_id=number + 1, value=b"\x01")
    assert packet.ByteSize() <= service.MAX_STREAM_MESSAGE_BYTES
    session.outgoing.put(packet)
    error = session.next().error
    assert error.canonical_code == code_pb2.PERMISSION_DENIED  # not arbitrated
    echo = error.packet_out.packet_out
    assert echo.payload == packet.packet.payload
    assert list(echo.metadata) == list(packet.packet.metadata[: service.ECHO_METADATA])
    assert f"first {service.ECHO_METADATA} of 1000 metadata" in error.message


# ----------------------------------------------------------------------------- large batches


def _raw_write(served: Served, data: bytes) -> grpc.RpcError | None:
    """Send ``data`` as a WriteRequest from a connection of its own."""
    call = served.channel().unary_unary(
        "/p4.v1.P4Runtime/Write",
        request_serializer=None,
        response_deserializer=p4runtime_pb2.WriteResponse.FromString,
    )
    try:
        call(data, timeout=10)
    except grpc.RpcError as error:
        return error
    return None


def test_a_write_of_more_updates_than_allowed_is_refused_before_any_is_decoded(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """300,000 empty updates took 18 s and a gigabyte before they were refused; a
    request may hold 134 million. Past the limit a request is refused from a scan of
    its fields, whoever sends it, before any update is decoded."""
    monkeypatch.setattr(service, "MAX_WRITE_UPDATES", 10)
    decoded: list[int] = []
    decode_updates = service.decode_updates

    def counted(updates: list[bytes]) -> object:
        decoded.append(len(updates))
        return decode_updates(updates)

    monkeypatch.setattr(service, "decode_updates", counted)
    header = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID)
    header.election_id.high, header.election_id.low = ELECTION
    updates = b"".join(
        b"\x22" + bytes([update.ByteSize()]) + update.SerializeToString()
        for update in (lpm_update(i) for i in range(11))
    )
    empty = b"\x22\x00" * 11
    repeated = b"\x08" + bytes([DEVICE_ID])  # a singular field twice: protobuf's path
    for data in (updates, empty, repeated + updates):
        error = _raw_write(served, header.SerializeToString() + data)
        assert error is not None and error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "more than 10 updates" in (error.details() or "")
    assert decoded == []
    assert [e for r in served.stub.Read(wildcard_read(1)) for e in r.entities] == []
    write(served, *(lpm_update(i) for i in range(10)))  # at the limit
    assert decoded == [10]


def _failed_batch_bytes_per_update(data: bytes, count: int) -> float:
    """The peak of memory a Write of ``data`` (``count`` updates, every one failing)
    allocates, per update, and check that it reports one error per update."""
    switch = Switch()
    switch.load_pipeline(program_under_test())
    servicer = service.P4RuntimeServicer(switch, DEVICE_ID)
    servicer.arbitrator.check_primary = lambda *_: 0  # type: ignore[method-assign]
    try:
        tracemalloc.start()
        with pytest.raises(Aborted) as caught:
            servicer.Write(data, BlockingContext("ipv4:127.0.0.1:1"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        switch.close()
    ((key, trailer),) = caught.value.trailing or ()
    status = status_pb2.Status.FromString(trailer)
    assert key == STATUS_DETAILS_KEY and len(status.details) == count
    return peak / count


def test_a_failed_batch_costs_little_memory_per_update() -> None:
    """A failed update's error used to cost ~3.4 KB until the batch reported (its
    traceback's frames, a protobuf Error and Any each): 300,000 of them a gigabyte."""
    count = 20_000
    header = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID).SerializeToString()
    alike = header + b"\x22\x00" * count  # no update type
    assert _failed_batch_bytes_per_update(alike, count) < 600
    # Each update (and its error) different: a type of 5 and up, each its own.
    varied = header + b"".join(
        b"\x22\x04\x08" + bytes([0x80 | (n & 0x7F), 0x80 | ((n >> 7) & 0x7F), (n >> 14) + 5])
        for n in range(count)
    )
    assert _failed_batch_bytes_per_update(varied, count) < 2_000


def test_a_batch_status_is_what_protobuf_would_build() -> None:
    errors = [
        None,
        P4RuntimeError(grpc.StatusCode.INVALID_ARGUMENT, "bad é"),
        None,
        P4RuntimeError(grpc.StatusCode.NOT_FOUND, "x" * 300),
        P4RuntimeError(grpc.StatusCode.ABORTED, ""),
        P4RuntimeError(grpc.StatusCode.INVALID_ARGUMENT, "bad é"),
    ]
    expected = status_pb2.Status(code=code_pb2.UNKNOWN, message="4 of 6 updates failed")
    for error in errors:
        expected.details.add().Pack(p4_error(error))
    assert batch_status("4 of 6 updates failed", errors) == expected.SerializeToString()


# ----------------------------------------------------------------------------- pipeline configs


@dataclass
class HeldVerification:
    """Device configs being loaded wait for ``release``; ``started`` counts them."""

    release: threading.Event
    started: threading.Semaphore

    def wait_started(self, count: int = 1) -> None:
        for _ in range(count):
            assert self.started.acquire(timeout=10), "no verification started"


def _hold_verifications(monkeypatch: pytest.MonkeyPatch) -> HeldVerification:
    held = HeldVerification(threading.Event(), threading.Semaphore(0))

    def load(_config: bytes) -> CompiledProgram:
        held.started.release()
        assert held.release.wait(30)
        return program_under_test()

    monkeypatch.setattr(pipeline_config.CompiledProgram, "from_device_config", load)
    return held


def _set_request(action: int, role: str = "", election: tuple[int, int] = ELECTION) -> bytes:
    request = SetRequest(device_id=DEVICE_ID, role=role, action=action)
    request.election_id.high, request.election_id.low = election
    program = program_under_test()
    request.config.p4info.CopyFrom(program.p4info)
    request.config.p4_device_config = program.device_config()
    return request.SerializeToString()


def _set_in_thread(
    stub: p4runtime_pb2_grpc.P4RuntimeStub, request: bytes, outcome: list[grpc.StatusCode]
) -> threading.Thread:
    def run() -> None:
        try:
            stub.SetForwardingPipelineConfig(SetRequest.FromString(request), timeout=30)
            outcome.append(grpc.StatusCode.OK)
        except grpc.RpcError as error:
            outcome.append(error.code())

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _tool(served: Served, role: str) -> StreamSession:
    """The primary of a role of its own: any client can be one."""
    session = served.session()
    session.arbitrate(DEVICE_ID, (0, 1), role=role)
    assert session.next().arbitration.status.code == code_pb2.OK
    return session


def test_a_config_being_verified_does_not_hold_the_switch(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 3 MB device config took 10 s to compile under the state lock, refused or not,
    and the primary's writes waited all that time."""
    held = _hold_verifications(monkeypatch)
    tool = _tool(served, "tool")
    outcome: list[grpc.StatusCode] = []
    thread = _set_in_thread(tool.stub, _set_request(SetRequest.VERIFY, "tool", (0, 1)), outcome)
    try:
        held.wait_started()
        write(served, lpm_update(1))  # served while the verification is held
        assert len([e for r in served.stub.Read(wildcard_read(1)) for e in r.entities]) == 1
        assert outcome == []
    finally:
        held.release.set()
        thread.join(30)
    assert outcome == [grpc.StatusCode.OK]


def test_a_primary_replaced_while_its_config_is_verified_commits_nothing(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Verified outside the lock, a config is applied only if its sender is still the
    primary it was: else a client that lost the switch meanwhile would clear it."""
    write(served, lpm_update(1))
    held = _hold_verifications(monkeypatch)
    outcome: list[grpc.StatusCode] = []
    request = _set_request(SetRequest.VERIFY_AND_COMMIT)
    thread = _set_in_thread(served.stub, request, outcome)
    try:
        held.wait_started()
        newcomer = served.session()
        newcomer.arbitrate(DEVICE_ID, (0, ELECTION[1] + 1))
        assert newcomer.next().arbitration.status.code == code_pb2.OK
    finally:
        held.release.set()
        thread.join(30)
    assert outcome == [grpc.StatusCode.PERMISSION_DENIED]
    assert len([e for r in served.stub.Read(wildcard_read(1)) for e in r.entities]) == 1


def test_verifications_past_the_limit_are_refused(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each verification holds a worker thread; the rest stay free for the controller."""
    held = _hold_verifications(monkeypatch)
    threads: list[threading.Thread] = []
    outcome: list[grpc.StatusCode] = []
    try:
        for number in range(service.MAX_VERIFICATIONS):
            role = f"tool{number}"
            request = _set_request(SetRequest.VERIFY, role, (0, 1))
            threads.append(_set_in_thread(_tool(served, role).stub, request, outcome))
        held.wait_started(service.MAX_VERIFICATIONS)
        one_more = _tool(served, "one more")
        with pytest.raises(grpc.RpcError) as caught:
            one_more.stub.SetForwardingPipelineConfig(
                SetRequest.FromString(_set_request(SetRequest.VERIFY, "one more", (0, 1))),
                timeout=10,
            )
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "too many pipeline configs being verified" in (caught.value.details() or "")
        commit = SetRequest(device_id=DEVICE_ID, action=SetRequest.COMMIT)
        commit.election_id.high, commit.election_id.low = ELECTION
        with pytest.raises(grpc.RpcError) as caught:
            served.stub.SetForwardingPipelineConfig(commit, timeout=10)
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND  # COMMIT verifies nothing
        write(served, lpm_update(1))
    finally:
        held.release.set()
        for thread in threads:
            thread.join(30)
    assert outcome == [grpc.StatusCode.OK] * service.MAX_VERIFICATIONS


def test_a_p4info_padded_with_bogus_objects_is_refused_before_its_canonical_form(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """100,000 bogus tables took 15 s to refuse: the canonical form copies and sorts."""
    canonical: list[p4info_pb2.P4Info] = []
    monkeypatch.setattr(pipeline_config, "canonical_p4info", canonical.append)
    request = SetRequest.FromString(_set_request(SetRequest.VERIFY))
    for number in range(1000):
        table = request.config.p4info.tables.add()
        table.preamble.id, table.preamble.name = 0x02FF0000 + number, f"bogus{number}"
    with pytest.raises(grpc.RpcError) as caught:
        served.stub.SetForwardingPipelineConfig(request, timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"'tables' differs: bogus0 (id {0x02FF0000}) is not in the program" in (
        caught.value.details() or ""
    )
    twice = SetRequest.FromString(_set_request(SetRequest.VERIFY))
    twice.config.p4info.tables.add().CopyFrom(twice.config.p4info.tables[0])
    with pytest.raises(grpc.RpcError) as caught:
        served.stub.SetForwardingPipelineConfig(twice, timeout=10)
    assert "an id is given to more than one object" in (caught.value.details() or "")
    assert canonical == []


def test_a_config_without_p4info_is_refused_before_it_is_compiled(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded: list[bytes] = []
    monkeypatch.setattr(pipeline_config.CompiledProgram, "from_device_config", loaded.append)
    request = SetRequest.FromString(_set_request(SetRequest.VERIFY))
    request.config.ClearField("p4info")
    with pytest.raises(grpc.RpcError) as caught:
        served.stub.SetForwardingPipelineConfig(request, timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "carries no P4Info" in (caught.value.details() or "")
    assert loaded == []


def test_a_p4info_of_another_config_is_refused_before_the_compile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fingerprint check needs no compile; it came after one (seconds for a large
    program)."""
    config = program_under_test().device_config()
    other = program_under_test(99).p4info

    def no_compile(*_: object) -> None:
        raise AssertionError("compiled")

    monkeypatch.setattr(frontend_program, "parse_and_lower", no_compile)
    with pytest.raises(CompileError, match="P4Info does not belong"):
        CompiledProgram.from_device_config(config, other)


def test_a_streams_loop_share_pauses_it_by_what_it_took_over() -> None:
    from softswitch.p4rt import pacing

    clock = [100.0]
    share = pacing.LoopShare(share=0.02, burst_s=0.05, clock=lambda: clock[0])
    assert share.pause_after(0.04) == 0.0  # within the burst
    assert share.pause_after(0.02) == pytest.approx(0.01 / 0.02)  # 10 ms over: 0.5 s
    clock[0] += 0.5  # the pause: paid back down to the burst
    assert share.pause_after(0.0) == 0.0
    clock[0] += 10.0  # a quiet stream owes nothing
    assert share.pause_after(0.05) == 0.0
