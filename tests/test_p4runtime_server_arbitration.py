"""StreamChannel arbitration of the embedded P4Runtime server (P4Runtime 1.4 §5):
primary by highest election id, backups, primary changes and their notifications."""

from __future__ import annotations

import gc
import queue
import threading
import time
import weakref
from collections.abc import Iterator

import grpc
import pytest
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from test_p4runtime_server_support import (
    CLASS_TABLE,
    SET_CLASS,
    StreamSession,
    program_under_test,
    unpaced,
)

from control.errors import UserError
from softswitch.p4rt import arbitration, service
from softswitch.p4rt.arbitration import Arbitrator, ClientStream
from softswitch.p4rt.status import P4RuntimeError
from softswitch.p4runtime_server import P4RuntimeServer
from softswitch.switch import Switch

DEVICE_ID = 1


@pytest.fixture
def stub() -> Iterator[p4runtime_pb2_grpc.P4RuntimeStub]:
    switch = Switch()
    switch.load_pipeline(program_under_test())
    server = P4RuntimeServer(switch, DEVICE_ID, "127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(server.addr)
    try:
        yield p4runtime_pb2_grpc.P4RuntimeStub(channel)
    finally:
        channel.close()
        server.stop(0)
        switch.close()


@pytest.fixture
def sessions(stub: p4runtime_pb2_grpc.P4RuntimeStub) -> Iterator[list[StreamSession]]:
    opened: list[StreamSession] = []
    yield opened
    for session in opened:
        session.close()


def open_session(
    stub: p4runtime_pb2_grpc.P4RuntimeStub,
    sessions: list[StreamSession],
    election: tuple[int, int] | None,
    device_id: int = DEVICE_ID,
) -> tuple[StreamSession, p4runtime_pb2.StreamMessageResponse]:
    session = StreamSession(stub)
    sessions.append(session)
    session.arbitrate(device_id, election)
    return session, session.next()


def insert_class_entry(
    stub: p4runtime_pb2_grpc.P4RuntimeStub, election: tuple[int, int] | None, stage: int = 1
) -> None:
    request = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID)
    if election is not None:
        request.election_id.high, request.election_id.low = election
    entry = request.updates.add(type=p4runtime_pb2.Update.INSERT).entity.table_entry
    entry.table_id = CLASS_TABLE
    entry.match.add(field_id=1).exact.value = b"\x01"
    entry.match.add(field_id=2).exact.value = bytes([stage])
    entry.action.action.action_id = SET_CLASS
    entry.action.action.params.add(param_id=1, value=b"\x01")
    stub.Write(request)


def denied(stub: p4runtime_pb2_grpc.P4RuntimeStub, election: tuple[int, int] | None) -> bool:
    try:
        insert_class_entry(stub, election, stage=200)
    except grpc.RpcError as error:
        return error.code() == grpc.StatusCode.PERMISSION_DENIED
    return False


def test_first_client_is_primary_and_can_write(
    stub: p4runtime_pb2_grpc.P4RuntimeStub, sessions: list[StreamSession]
) -> None:
    _, reply = open_session(stub, sessions, (0, 5))
    assert reply.arbitration.status.code == code_pb2.OK
    assert reply.arbitration.election_id.low == 5
    insert_class_entry(stub, (0, 5))


def test_lower_election_id_is_backup_and_cannot_write(
    stub: p4runtime_pb2_grpc.P4RuntimeStub, sessions: list[StreamSession]
) -> None:
    open_session(stub, sessions, (0, 5))
    _, reply = open_session(stub, sessions, (0, 3))
    assert reply.arbitration.status.code == code_pb2.ALREADY_EXISTS
    assert reply.arbitration.election_id.low == 5  # the primary's id
    assert denied(stub, (0, 3))
    assert denied(stub, None)
    assert denied(stub, (0, 6))  # an id no live client holds
    insert_class_entry(stub, (0, 5))


def test_higher_election_id_takes_over_and_everyone_is_told(
    stub: p4runtime_pb2_grpc.P4RuntimeStub, sessions: list[StreamSession]
) -> None:
    first, _ = open_session(stub, sessions, (0, 5))
    backup, _ = open_session(stub, sessions, (0, 2))
    _, reply = open_session(stub, sessions, (1, 0))  # high word counts
    assert reply.arbitration.status.code == code_pb2.OK
    for session in (first, backup):
        note = session.next().arbitration
        assert note.status.code == code_pb2.ALREADY_EXISTS
        assert (note.election_id.high, note.election_id.low) == (1, 0)
    assert denied(stub, (0, 5))
    insert_class_entry(stub, (1, 0))


def test_primary_leaving_is_announced_and_a_backup_can_take_over(
    stub: p4runtime_pb2_grpc.P4RuntimeStub, sessions: list[StreamSession]
) -> None:
    primary, _ = open_session(stub, sessions, (0, 5))
    backup, _ = open_session(stub, sessions, (0, 4))
    primary.close()
    note = backup.next().arbitration
    assert note.status.code == code_pb2.NOT_FOUND  # no primary now
    assert note.election_id.low == 5  # the highest id seen stays
    assert denied(stub, (0, 5))
    # Re-arbitrating below the highest id seen does not make a primary ...
    backup.arbitrate(DEVICE_ID, (0, 4))
    assert backup.next().arbitration.status.code == code_pb2.NOT_FOUND
    # ... at least as high does.
    backup.arbitrate(DEVICE_ID, (0, 5))
    assert backup.next().arbitration.status.code == code_pb2.OK
    insert_class_entry(stub, (0, 5))


def test_primary_downgrading_itself_leaves_no_primary(
    stub: p4runtime_pb2_grpc.P4RuntimeStub, sessions: list[StreamSession]
) -> None:
    primary, _ = open_session(stub, sessions, (0, 5))
    other, _ = open_session(stub, sessions, (0, 1))
    primary.arbitrate(DEVICE_ID, (0, 2))
    assert primary.next().arbitration.status.code == code_pb2.NOT_FOUND
    assert other.next().arbitration.status.code == code_pb2.NOT_FOUND
    assert denied(stub, (0, 2))


def test_unset_election_id_is_a_backup_that_never_becomes_primary(
    stub: p4runtime_pb2_grpc.P4RuntimeStub, sessions: list[StreamSession]
) -> None:
    _, reply = open_session(stub, sessions, None)
    assert reply.arbitration.status.code == code_pb2.NOT_FOUND
    assert not reply.arbitration.HasField("election_id")  # no primary ever
    assert denied(stub, None)
    assert denied(stub, (0, 0))


def test_duplicate_election_id_terminates_the_stream(
    stub: p4runtime_pb2_grpc.P4RuntimeStub, sessions: list[StreamSession]
) -> None:
    open_session(stub, sessions, (0, 5))
    duplicate = StreamSession(stub)
    sessions.append(duplicate)
    duplicate.arbitrate(DEVICE_ID, (0, 5))
    assert duplicate.done.wait(5)
    assert duplicate.final_error is not None
    assert duplicate.final_error.code() == grpc.StatusCode.INVALID_ARGUMENT
    insert_class_entry(stub, (0, 5))  # the primary is unaffected


def test_unknown_device_terminates_the_stream_with_not_found(
    stub: p4runtime_pb2_grpc.P4RuntimeStub, sessions: list[StreamSession]
) -> None:
    session = StreamSession(stub)
    sessions.append(session)
    session.arbitrate(DEVICE_ID + 7, (0, 1))
    assert session.done.wait(5)
    assert session.final_error is not None
    assert session.final_error.code() == grpc.StatusCode.NOT_FOUND


def test_changing_device_or_role_on_a_live_stream_fails_precondition(
    stub: p4runtime_pb2_grpc.P4RuntimeStub, sessions: list[StreamSession]
) -> None:
    session, _ = open_session(stub, sessions, (0, 5))
    session.arbitrate(DEVICE_ID, (0, 5), role="other")
    assert session.done.wait(5)
    assert session.final_error is not None
    assert session.final_error.code() == grpc.StatusCode.FAILED_PRECONDITION
    # The stream is gone, so is its primary status.
    assert denied(stub, (0, 5))


def test_packet_out_is_reported_unimplemented_or_denied(
    stub: p4runtime_pb2_grpc.P4RuntimeStub, sessions: list[StreamSession]
) -> None:
    primary, _ = open_session(stub, sessions, (0, 5))
    backup, _ = open_session(stub, sessions, (0, 1))
    packet = p4runtime_pb2.StreamMessageRequest()
    packet.packet.payload = b"\x00" * 14
    primary.outgoing.put(packet)
    backup.outgoing.put(packet)
    assert primary.next().error.canonical_code == code_pb2.UNIMPLEMENTED
    error = backup.next().error
    assert error.canonical_code == code_pb2.PERMISSION_DENIED
    assert error.packet_out.packet_out.payload == packet.packet.payload


def test_a_large_packet_out_is_refused_with_a_short_echo_and_the_stream_stays(
    stub: p4runtime_pb2_grpc.P4RuntimeStub,
    sessions: list[StreamSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Echoed whole, a packet larger than the outbox would end the sender's stream (and
    cost a primary its role) though the client reads every reply."""
    monkeypatch.setattr(arbitration, "MAX_OUTBOX_BYTES", 8 << 10)
    primary, _ = open_session(stub, sessions, (0, 5))
    packet = p4runtime_pb2.StreamMessageRequest()
    packet.packet.payload = bytes(range(256)) * 40  # 10 KiB, a jumbo frame
    packet.packet.metadata.add(metadata_id=1, value=b"\x07")
    primary.outgoing.put(packet)
    error = primary.next().error
    assert error.canonical_code == code_pb2.UNIMPLEMENTED
    echo = error.packet_out.packet_out
    assert echo.payload == packet.packet.payload[: service.ECHO_PAYLOAD_BYTES]
    assert list(echo.metadata) == list(packet.packet.metadata)
    assert f"first {service.ECHO_PAYLOAD_BYTES} of {40 * 256} payload bytes" in error.message
    insert_class_entry(stub, (0, 5))  # still the primary, on a live stream
    assert primary.final_error is None


def test_stopping_the_server_ends_open_streams() -> None:
    switch = Switch()
    server = P4RuntimeServer(switch, DEVICE_ID, "127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(server.addr)
    session = StreamSession(p4runtime_pb2_grpc.P4RuntimeStub(channel))
    session.arbitrate(DEVICE_ID, (0, 1))
    session.next()
    server.stop(1)
    assert session.done.wait(5)
    with pytest.raises(queue.Empty):
        session.next(timeout_s=0.1)
    channel.close()
    switch.close()


def test_stop_leaves_no_server_thread_and_frees_the_port() -> None:
    before = set(threading.enumerate())
    switch = Switch()
    server = P4RuntimeServer(switch, DEVICE_ID, "127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(server.addr)
    session = StreamSession(p4runtime_pb2_grpc.P4RuntimeStub(channel))
    session.arbitrate(DEVICE_ID, (0, 1))
    session.next()
    server.stop(1)
    session.close()
    channel.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        left = [t for t in set(threading.enumerate()) - before if t.name.startswith("p4rt")]
        if not left:
            break
        time.sleep(0.05)
    assert not left
    # The address can be served again at once (a switch restart).
    again = P4RuntimeServer(switch, DEVICE_ID, server.addr)
    again.start()
    again.stop(0)
    switch.close()


def test_an_address_in_use_is_a_user_error() -> None:
    switch = Switch()
    first = P4RuntimeServer(switch, DEVICE_ID, "127.0.0.1:0")
    first.start()
    try:
        with pytest.raises(UserError, match=r"cannot serve P4Runtime on 127\.0\.0\.1:"):
            P4RuntimeServer(switch, DEVICE_ID, first.addr).start()
    finally:
        first.stop(0)
        switch.close()


def test_a_write_with_the_primarys_id_but_no_stream_of_its_own_is_refused(
    stub: p4runtime_pb2_grpc.P4RuntimeStub, sessions: list[StreamSession]
) -> None:
    """Every backup is told the primary's election id; a client on another connection
    that copies it into a Write (or a SetForwardingPipelineConfig) is not the primary."""
    _, reply = open_session(stub, sessions, (0, 5))
    assert reply.arbitration.status.code == code_pb2.OK
    _, reply = open_session(stub, sessions, (0, 2))
    assert (reply.arbitration.election_id.high, reply.arbitration.election_id.low) == (0, 5)
    server_addr = stub.Write._channel.target().decode()  # type: ignore[attr-defined]
    # Its own connection, as another process has (channels of one process with the same
    # target and options would share one).
    intruder = grpc.insecure_channel(server_addr, options=[("grpc.use_local_subchannel_pool", 1)])
    try:
        intruder_stub = p4runtime_pb2_grpc.P4RuntimeStub(intruder)
        with pytest.raises(grpc.RpcError) as refused:
            insert_class_entry(intruder_stub, (0, 5), stage=7)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "primary's connection" in (refused.value.details() or "")
        config = p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=DEVICE_ID,
            action=p4runtime_pb2.SetForwardingPipelineConfigRequest.COMMIT,
        )
        config.election_id.low = 5
        with pytest.raises(grpc.RpcError) as refused:
            intruder_stub.SetForwardingPipelineConfig(config)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        intruder.close()
    # The primary's own connection writes as before, and the entry the intruder tried
    # to insert is not there (inserting it now succeeds).
    insert_class_entry(stub, (0, 5), stage=7)


def _arbitration(role: str, election: int | None) -> p4runtime_pb2.MasterArbitrationUpdate:
    update = p4runtime_pb2.MasterArbitrationUpdate(device_id=DEVICE_ID)
    update.role.name = role
    if election is not None:
        update.election_id.low = election
    return update


def test_a_role_is_forgotten_when_its_last_stream_leaves_unless_it_saw_an_election_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Role names are the client's to choose: each must not be kept forever."""
    arbitrator = Arbitrator(DEVICE_ID)
    for number in range(1000):
        stream = ClientStream()
        arbitrator.arbitrate(stream, _arbitration(f"role-{number}" + "x" * 1000, None))
        arbitrator.remove(stream)
        arbitrator.remove(stream)  # the reader and the RPC end both remove
    assert arbitrator._groups == {}

    # A highest election id outlives the role's streams, so such roles are bounded.
    monkeypatch.setattr(arbitration, "MAX_ROLES", 3)
    for number in range(3):
        stream = ClientStream()
        arbitrator.arbitrate(stream, _arbitration(f"kept-{number}", 5))
        arbitrator.remove(stream)
    with pytest.raises(P4RuntimeError) as caught:
        arbitrator.arbitrate(ClientStream(), _arbitration("one-too-many", 1))
    assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    # Roles others left behind never lock the default role's controller out.
    controller = ClientStream()
    arbitrator.arbitrate(controller, _arbitration("", 7))
    assert arbitrator.is_primary(controller)
    returning = ClientStream()
    arbitrator.arbitrate(returning, _arbitration("kept-0", 4))
    assert not arbitrator.is_primary(returning)  # 5 was seen: 4 does not take over
    arbitrator.arbitrate(returning, _arbitration("kept-0", 5))
    assert arbitrator.is_primary(returning)


def test_role_names_are_bounded() -> None:
    """A kept role keeps its name: 256 names of 256 MiB each would fill the memory."""
    arbitrator = Arbitrator(DEVICE_ID)
    too_long = "r" * (arbitration.MAX_ROLE_NAME_BYTES + 1)
    with pytest.raises(P4RuntimeError) as caught:
        arbitrator.arbitrate(ClientStream(), _arbitration(too_long, None))
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert f"at most {arbitration.MAX_ROLE_NAME_BYTES}" in caught.value.message
    longest = ClientStream()
    fresh = Arbitrator(DEVICE_ID)
    fresh.arbitrate(longest, _arbitration("é" * (arbitration.MAX_ROLE_NAME_BYTES // 2), 1))
    assert fresh.is_primary(longest)


def test_a_client_that_never_reads_is_cut_off_with_resource_exhausted(
    stub: p4runtime_pb2_grpc.P4RuntimeStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each denied packet-out is echoed back: unread, they must not pile up without bound."""
    monkeypatch.setattr(arbitration, "MAX_OUTBOX_BYTES", 1 << 20)
    monkeypatch.setattr(service, "LoopShare", unpaced)  # 4,000 messages, read at once
    sent = threading.Event()
    count = 4000

    def requests() -> Iterator[p4runtime_pb2.StreamMessageRequest]:
        update = p4runtime_pb2.MasterArbitrationUpdate(device_id=DEVICE_ID)
        yield p4runtime_pb2.StreamMessageRequest(arbitration=update)  # a backup
        packet = p4runtime_pb2.StreamMessageRequest()
        packet.packet.payload = b"\x00" * service.ECHO_PAYLOAD_BYTES  # echoed whole
        for _ in range(count):
            yield packet
        sent.set()

    call = stub.StreamChannel(requests())
    assert sent.wait(30)
    time.sleep(0.5)  # let the server handle what it received
    received = 0
    with pytest.raises(grpc.RpcError) as caught:
        for _ in call:
            received += 1
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert received < count


def test_a_stream_cut_off_for_not_reading_cannot_arbitrate_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(arbitration, "MAX_OUTBOX_MESSAGES", 3)
    arbitrator = Arbitrator(DEVICE_ID)
    cut_off: list[ClientStream] = []
    stream = ClientStream()
    stream.on_cut_off = cut_off.append
    arbitrator.arbitrate(stream, _arbitration("", 5))
    assert arbitrator.is_primary(stream)
    reply = p4runtime_pb2.StreamMessageResponse()
    for _ in range(5):
        stream.send(reply)
    assert cut_off == [stream]  # once, though more came after
    arbitrator.remove(stream)  # what the server does on the cut-off
    with pytest.raises(P4RuntimeError) as caught:
        arbitrator.arbitrate(stream, _arbitration("", 6))
    assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert not arbitrator.is_primary(stream)


def test_an_ended_stream_drops_what_it_never_sent() -> None:
    stream = ClientStream()
    reply = p4runtime_pb2.StreamMessageResponse()
    reply.error.packet_out.packet_out.payload = b"\x00" * 1000
    for _ in range(10):
        stream.send(reply)
    stream.end()
    stream.send(reply)
    assert stream.outbox.qsize() == 1
    assert isinstance(stream.poll(), arbitration.StreamClosed)


def test_a_stream_whose_client_left_is_freed_without_the_garbage_collector(
    stub: p4runtime_pb2_grpc.P4RuntimeStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reference counting alone must free a gone client's stream and what it queued."""
    created: list[weakref.ref[ClientStream]] = []

    def recorded(peer: str | None = None) -> ClientStream:
        stream = ClientStream(peer=peer)
        created.append(weakref.ref(stream))
        return stream

    monkeypatch.setattr(service, "ClientStream", recorded)
    leave = threading.Event()

    def requests() -> Iterator[p4runtime_pb2.StreamMessageRequest]:
        update = p4runtime_pb2.MasterArbitrationUpdate(device_id=DEVICE_ID)
        yield p4runtime_pb2.StreamMessageRequest(arbitration=update)
        packet = p4runtime_pb2.StreamMessageRequest()
        packet.packet.payload = b"\x00" * 1000
        for _ in range(10):
            yield packet
        leave.wait(30)

    gc.disable()
    try:
        call = stub.StreamChannel(requests())
        deadline = time.monotonic() + 5
        while not created and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        call.cancel()
        leave.set()
        deadline = time.monotonic() + 5
        while created[0]() is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert created[0]() is None
    finally:
        gc.enable()


def test_stream_places_admit_a_few_more_to_wait_and_never_displace_a_primary() -> None:
    from softswitch.p4rt.places import StreamPlaces

    places = StreamPlaces(limit=2, spare=1)
    arbitrator = Arbitrator(DEVICE_ID)
    primary, backup, waiting = ClientStream(), ClientStream(), ClientStream()
    assert places.enter(primary) and places.enter(backup) and places.enter(waiting)
    assert not places.enter(ClientStream())  # the spare room is taken too
    arbitrator.arbitrate(primary, _arbitration("", 9))
    arbitrator.arbitrate(backup, _arbitration("", 4))
    refused = places.make_room(waiting, 4, arbitrator)  # not above the backup's 4
    assert refused is not None and refused.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert places.make_room(waiting, 10, arbitrator) is None  # above 4: the backup goes
    assert backup.closed and not primary.closed and arbitrator.is_primary(primary)
    assert places.enter(ClientStream())  # the displaced stream no longer counts
    assert places.make_room(primary, None, arbitrator) is None  # has a place: nothing to do


def test_named_roles_hold_only_their_share_of_the_stream_places() -> None:
    """A client that names a role no one uses is its primary, and a primary is never
    displaced: the named roles together hold only part of the places."""
    from softswitch.p4rt.places import StreamPlaces

    places = StreamPlaces(limit=4, spare=1, default_places=2)
    arbitrator = Arbitrator(DEVICE_ID)
    primary, backup, third = ClientStream(), ClientStream(), ClientStream()
    for stream, role, election in ((primary, "r0", 5), (backup, "r0", 1)):
        assert places.enter(stream)
        assert places.make_room(stream, election, arbitrator, role) is None
        arbitrator.arbitrate(stream, _arbitration(role, election))
    assert arbitrator.is_primary(primary) and not arbitrator.is_primary(backup)
    # A third named stream has a place, but the named share is taken: it must displace a
    # named backup below its id, or go.
    assert places.enter(third)
    refused = places.make_room(third, 1, arbitrator, "r1")
    assert refused is not None and refused.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "named roles" in str(refused) and not backup.closed
    assert places.make_room(third, 2, arbitrator, "r1") is None  # above the backup's 1
    assert backup.closed and not primary.closed
    places.leave(backup)
    # The default role's places are its own: a controller with any id gets one.
    controller = ClientStream()
    assert places.enter(controller)
    assert places.make_room(controller, 1, arbitrator) is None
