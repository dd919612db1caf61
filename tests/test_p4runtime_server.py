"""The embedded target's P4Runtime server over real gRPC on loopback: Write, Read,
pipeline config and the error codes of the P4Runtime 1.4 spec."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from test_p4runtime_server_support import (
    ACL_TABLE,
    CLASS_TABLE,
    DROP,
    LPM_TABLE,
    NO_ACTION,
    SCRATCH,
    SET_CLASS,
    SET_EGRESS,
    STAGE_BYTES,
    StreamSession,
    program_under_test,
    write_error_details,
)

from control.p4runtime_client import varint_bytes
from softswitch.frontend import CompiledProgram
from softswitch.p4rt import service
from softswitch.p4runtime_server import P4RuntimeServer
from softswitch.ports import MemoryPort
from softswitch.switch import Switch

DEVICE_ID = 3
ELECTION = (0, 10)

Update = p4runtime_pb2.Update
SetAction = p4runtime_pb2.SetForwardingPipelineConfigRequest
GetType = p4runtime_pb2.GetForwardingPipelineConfigRequest


@dataclass
class Target:
    switch: Switch
    server: P4RuntimeServer
    stub: p4runtime_pb2_grpc.P4RuntimeStub
    primary: StreamSession


@pytest.fixture
def bare() -> Iterator[Target]:
    """A running server whose switch has no pipeline yet, with a primary client."""
    switch = Switch()
    switch.add_memory_port(0)
    switch.add_memory_port(1)
    server = P4RuntimeServer(switch, DEVICE_ID, "127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(server.addr)
    stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
    primary = StreamSession(stub)
    primary.arbitrate(DEVICE_ID, ELECTION)
    assert primary.next().arbitration.status.code == code_pb2.OK
    try:
        yield Target(switch, server, stub, primary)
    finally:
        primary.close()
        channel.close()
        server.stop(0)
        switch.close()


def set_config(
    stub: p4runtime_pb2_grpc.P4RuntimeStub,
    program: CompiledProgram,
    action: int = SetAction.VERIFY_AND_COMMIT,
    cookie: int | None = None,
    election: tuple[int, int] = ELECTION,
) -> None:
    request = SetAction(device_id=DEVICE_ID, action=action)
    request.election_id.high, request.election_id.low = election
    request.config.p4info.CopyFrom(program.p4info)
    request.config.p4_device_config = program.device_config()
    if cookie is not None:
        request.config.cookie.cookie = cookie
    stub.SetForwardingPipelineConfig(request)


@pytest.fixture
def target(bare: Target) -> Target:
    set_config(bare.stub, program_under_test())
    return bare


def lpm_entry(prefix: bytes, prefix_len: int, port: bytes = b"\x01") -> p4runtime_pb2.TableEntry:
    entry = p4runtime_pb2.TableEntry(table_id=LPM_TABLE)
    match = entry.match.add(field_id=1)
    match.lpm.value, match.lpm.prefix_len = prefix, prefix_len
    entry.action.action.action_id = SET_EGRESS
    entry.action.action.params.add(param_id=1, value=port)
    return entry


def class_entry(experiment: int, stage: int, class_id: int = 1) -> p4runtime_pb2.TableEntry:
    entry = p4runtime_pb2.TableEntry(table_id=CLASS_TABLE)
    entry.match.add(field_id=1).exact.value = experiment.to_bytes(2, "big")
    entry.match.add(field_id=2).exact.value = stage.to_bytes(2, "big")
    entry.action.action.action_id = SET_CLASS
    entry.action.action.params.add(param_id=1, value=bytes([class_id]))
    return entry


def class_entry_for(src: bytes, tos: int, class_id: int) -> p4runtime_pb2.TableEntry:
    entry = p4runtime_pb2.TableEntry(table_id=CLASS_TABLE)
    entry.match.add(field_id=1).exact.value = src
    entry.match.add(field_id=2).exact.value = bytes([tos])
    entry.action.action.action_id = SET_CLASS
    entry.action.action.params.add(param_id=1, value=bytes([class_id]))
    return entry


def acl_entry(value: bytes, mask: bytes, priority: int) -> p4runtime_pb2.TableEntry:
    entry = p4runtime_pb2.TableEntry(table_id=ACL_TABLE, priority=priority)
    match = entry.match.add(field_id=1)
    match.ternary.value, match.ternary.mask = value, mask
    entry.action.action.action_id = DROP
    return entry


def write(
    stub: p4runtime_pb2_grpc.P4RuntimeStub,
    *updates: tuple[int, p4runtime_pb2.Entity | p4runtime_pb2.TableEntry],
    election: tuple[int, int] | None = ELECTION,
    device_id: int = DEVICE_ID,
    atomicity: int = p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR,
) -> None:
    request = p4runtime_pb2.WriteRequest(device_id=device_id, atomicity=atomicity)
    if election is not None:
        request.election_id.high, request.election_id.low = election
    for update_type, thing in updates:
        update = request.updates.add(type=update_type)
        if isinstance(thing, p4runtime_pb2.TableEntry):
            update.entity.table_entry.CopyFrom(thing)
        else:
            update.entity.CopyFrom(thing)
    stub.Write(request)


def write_codes(
    stub: p4runtime_pb2_grpc.P4RuntimeStub,
    *updates: tuple[int, p4runtime_pb2.Entity | p4runtime_pb2.TableEntry],
) -> list[int]:
    """Canonical code of each update of a batch that must fail as a whole with UNKNOWN."""
    with pytest.raises(grpc.RpcError) as caught:
        write(stub, *updates)
    assert caught.value.code() == grpc.StatusCode.UNKNOWN
    return [error.canonical_code for error in write_error_details(caught.value)]


def read(
    stub: p4runtime_pb2_grpc.P4RuntimeStub, *entities: p4runtime_pb2.Entity
) -> list[p4runtime_pb2.Entity]:
    request = p4runtime_pb2.ReadRequest(device_id=DEVICE_ID, entities=entities)
    return [entity for reply in stub.Read(request) for entity in reply.entities]


def table_read(table_id: int = 0, **fields: object) -> p4runtime_pb2.Entity:
    entity = p4runtime_pb2.Entity()
    entity.table_entry.table_id = table_id
    for name, value in fields.items():
        if name == "counter_data":
            entity.table_entry.counter_data.SetInParent()
        else:
            setattr(entity.table_entry, name, value)
    return entity


def counter_entity(
    counter_id: int, index: int | None = None, data: tuple[int, int] | None = None
) -> p4runtime_pb2.Entity:
    entity = p4runtime_pb2.Entity()
    entity.counter_entry.counter_id = counter_id
    if index is not None:
        entity.counter_entry.index.index = index
    if data is not None:
        entity.counter_entry.data.byte_count, entity.counter_entry.data.packet_count = data
    return entity


# ----------------------------------------------------------------------------- Write and Read


def test_insert_read_modify_delete_round_trip_with_canonical_bytes(target: Target) -> None:
    # Non-canonical but valid input (zero-padded) is accepted and read back canonical.
    write(target.stub, (Update.INSERT, lpm_entry(b"\x0a\x00\x00\x00", 8, port=b"\x00\x02")))
    entries = read(target.stub, table_read(LPM_TABLE))
    assert len(entries) == 1
    params = entries[0].table_entry.action.action.params
    assert params[0].value == b"\x02"
    assert entries[0].table_entry.match[0].lpm.value == b"\x0a\x00\x00\x00"

    write(target.stub, (Update.MODIFY, lpm_entry(b"\x0a\x00\x00\x00", 8, port=b"\x07")))
    (entry,) = read(target.stub, table_read(LPM_TABLE))
    assert entry.table_entry.action.action.params[0].value == b"\x07"
    runtime_entry = next(iter(target.switch.pipeline.runtime.table(LPM_TABLE).entries.values()))
    assert runtime_entry.action.params == (7,)

    write(target.stub, (Update.DELETE, lpm_entry(b"\x0a\x00\x00\x00", 8)))
    assert read(target.stub, table_read(LPM_TABLE)) == []


def test_read_back_equals_what_was_written(target: Target) -> None:
    written = lpm_entry(b"\xc0\xa8\x01\x00", 24, port=b"\x05")
    written.controller_metadata = 42
    written.metadata = b"opaque"
    write(target.stub, (Update.INSERT, written))
    (entry,) = read(target.stub, table_read(LPM_TABLE))
    assert entry.table_entry == written


def test_batch_with_failures_reports_one_error_per_update_and_applies_the_good_ones(
    target: Target,
) -> None:
    write(target.stub, (Update.INSERT, class_entry(1, 1)))
    codes = write_codes(
        target.stub,
        (Update.INSERT, class_entry(1, 2)),
        (Update.INSERT, class_entry(1, 1)),
        (Update.DELETE, class_entry(9, 9)),
        (Update.INSERT, class_entry(1, 3)),
    )
    assert codes == [code_pb2.OK, code_pb2.ALREADY_EXISTS, code_pb2.NOT_FOUND, code_pb2.OK]
    stages = {
        int.from_bytes(e.table_entry.match[1].exact.value, "big")
        for e in read(target.stub, table_read(CLASS_TABLE))
    }
    assert stages == {1, 2, 3}


def test_a_write_request_with_one_unparsable_update_applies_none(target: Target) -> None:
    """Bytes that are no valid WriteRequest are INVALID_ARGUMENT as a whole, even where
    the update that breaks them comes after a good one: the good one used to be
    applied, and the bad one reported as a failed update of the batch."""
    request = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID)
    request.election_id.high, request.election_id.low = ELECTION
    request.updates.add(type=Update.INSERT).entity.table_entry.CopyFrom(class_entry(1, 1))
    cut_short = b"\x08\x01\x12\x05\x12\x03\x08\xff"  # entity > table entry > half a varint
    data = request.SerializeToString() + b"\x22" + bytes([len(cut_short)]) + cut_short
    with grpc.insecure_channel(target.server.addr) as channel:
        write_raw = channel.unary_unary(
            "/p4.v1.P4Runtime/Write",
            request_serializer=None,
            response_deserializer=p4runtime_pb2.WriteResponse.FromString,
        )
        with pytest.raises(grpc.RpcError) as caught:
            write_raw(data, timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "cannot be parsed" in (caught.value.details() or "")
    assert read(target.stub, table_read(CLASS_TABLE)) == []
    write(target.stub, (Update.INSERT, class_entry(1, 1)))  # the same update, well formed
    assert len(read(target.stub, table_read(CLASS_TABLE))) == 1


def test_modify_of_missing_entry_is_not_found(target: Target) -> None:
    assert write_codes(target.stub, (Update.MODIFY, class_entry(5, 5))) == [code_pb2.NOT_FOUND]


def test_table_size_is_enforced_with_resource_exhausted(target: Target) -> None:
    write(target.stub, *[(Update.INSERT, class_entry(1, stage)) for stage in range(4)])
    assert write_codes(target.stub, (Update.INSERT, class_entry(2, 0))) == [
        code_pb2.RESOURCE_EXHAUSTED
    ]


def _with(
    entry: p4runtime_pb2.TableEntry, change: Callable[[p4runtime_pb2.TableEntry], object]
) -> p4runtime_pb2.TableEntry:
    copy = p4runtime_pb2.TableEntry()
    copy.CopyFrom(entry)
    change(copy)
    return copy


INVALID_ENTRIES = {
    "unknown table": _with(class_entry(1, 1), lambda e: setattr(e, "table_id", 0x02FFFFFF)),
    "unknown field id": _with(class_entry(1, 1), lambda e: setattr(e.match[1], "field_id", 9)),
    "missing exact field": _with(class_entry(1, 1), lambda e: e.match.pop()),
    "duplicate field": _with(class_entry(1, 1), lambda e: e.match.append(e.match[0])),
    "wrong match kind": _with(
        class_entry(1, 1),
        lambda e: e.match[0].lpm.SetInParent() or setattr(e.match[0].lpm, "value", b"\x01"),
    ),
    "bits past the prefix": lpm_entry(b"\x0a\x00\x00\x01", 24),
    "zero prefix length": lpm_entry(b"\x00", 0),
    "prefix longer than field": lpm_entry(b"\x0a\x00\x00\x00", 33),
    "priority on exact table": _with(class_entry(1, 1), lambda e: setattr(e, "priority", 5)),
    "ternary without priority": acl_entry(b"\x06", b"\xff", priority=0),
    "ternary value outside mask": acl_entry(b"\x07", b"\x06", priority=1),
    "ternary zero mask": acl_entry(b"\x00", b"\x00", priority=1),
    "action not of this table": _with(
        class_entry(1, 1), lambda e: setattr(e.action.action, "action_id", SET_EGRESS)
    ),
    "missing parameter": _with(class_entry(1, 1), lambda e: e.action.action.params.pop()),
    "unknown parameter": _with(
        class_entry(1, 1), lambda e: setattr(e.action.action.params[0], "param_id", 7)
    ),
    "no action on insert": _with(class_entry(1, 1), lambda e: e.ClearField("action")),
    "is_const in a write": _with(class_entry(1, 1), lambda e: setattr(e, "is_const", True)),
}


@pytest.mark.parametrize("name", sorted(INVALID_ENTRIES))
def test_malformed_entries_are_invalid_argument(target: Target, name: str) -> None:
    assert write_codes(target.stub, (Update.INSERT, INVALID_ENTRIES[name])) == [
        code_pb2.INVALID_ARGUMENT
    ]
    assert read(target.stub, table_read()) == []


@pytest.mark.parametrize(
    "entry",
    [
        class_entry(1, 1, class_id=8),  # class_id is bit<3>
        _with(
            class_entry(1, 1), lambda e: setattr(e.match[1].exact, "value", b"\x01\x00")
        ),  # bit<8>
        _with(class_entry(1, 1), lambda e: setattr(e.match[0].exact, "value", b"")),
    ],
    ids=["param wider than bitwidth", "match wider than bitwidth", "empty byte string"],
)
def test_values_that_do_not_fit_are_out_of_range(
    target: Target, entry: p4runtime_pb2.TableEntry
) -> None:
    assert write_codes(target.stub, (Update.INSERT, entry)) == [code_pb2.OUT_OF_RANGE]


def test_longer_byte_strings_holding_a_fitting_value_are_accepted(target: Target) -> None:
    entry = _with(
        class_entry(1, 1), lambda e: setattr(e.match[0].exact, "value", b"\x00\x00\x00\x01")
    )
    write(target.stub, (Update.INSERT, entry))
    (read_back,) = read(target.stub, table_read(CLASS_TABLE))
    assert read_back.table_entry.match[0].exact.value == b"\x01"


def test_action_scope_violations_are_permission_denied(target: Target) -> None:
    default_only = _with(class_entry(1, 1), lambda e: e.action.action.ClearField("params"))
    default_only.action.action.action_id = NO_ACTION
    assert write_codes(target.stub, (Update.INSERT, default_only)) == [code_pb2.PERMISSION_DENIED]


def test_default_entry_modify_read_and_reset(target: Target) -> None:
    default = p4runtime_pb2.TableEntry(table_id=LPM_TABLE, is_default_action=True)
    default.action.action.action_id = SET_EGRESS
    default.action.action.params.add(param_id=1, value=b"\x09")
    write(target.stub, (Update.MODIFY, default))
    (entry,) = read(target.stub, table_read(LPM_TABLE, is_default_action=True))
    assert entry.table_entry.is_default_action
    assert entry.table_entry.action.action.params[0].value == b"\x09"

    reset = p4runtime_pb2.TableEntry(table_id=LPM_TABLE, is_default_action=True)
    write(target.stub, (Update.MODIFY, reset))
    (entry,) = read(target.stub, table_read(LPM_TABLE, is_default_action=True))
    assert entry.table_entry.action.action.action_id == DROP  # the program's default


@pytest.mark.parametrize(
    "atomicity",
    [p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR, p4runtime_pb2.WriteRequest.ROLLBACK_ON_ERROR],
)
def test_a_refused_default_entry_modify_changes_nothing(target: Target, atomicity: int) -> None:
    """A valid action with a negative counter value: refused, and the default action
    stays the program's (it used to be set before the counter was checked)."""
    (before,) = read(target.stub, table_read(CLASS_TABLE, is_default_action=True))
    assert before.table_entry.action.action.action_id != SET_CLASS
    default = p4runtime_pb2.TableEntry(table_id=CLASS_TABLE, is_default_action=True)
    default.action.action.action_id = SET_CLASS
    default.action.action.params.add(param_id=1, value=b"\x04")
    default.counter_data.byte_count = -5
    with pytest.raises(grpc.RpcError) as caught:
        write(target.stub, (Update.MODIFY, default), atomicity=atomicity)
    (error,) = write_error_details(caught.value)
    assert error.canonical_code == code_pb2.INVALID_ARGUMENT
    assert "negative" in error.message
    (after,) = read(target.stub, table_read(CLASS_TABLE, is_default_action=True))
    assert after == before
    default.counter_data.byte_count = 5  # the same update, valid: taken
    write(target.stub, (Update.MODIFY, default), atomicity=atomicity)
    (taken,) = read(target.stub, table_read(CLASS_TABLE, is_default_action=True))
    assert taken.table_entry.action.action.action_id == SET_CLASS


def test_default_entry_rules(target: Target) -> None:
    default = p4runtime_pb2.TableEntry(table_id=LPM_TABLE, is_default_action=True)
    default.action.action.action_id = DROP
    const_default = p4runtime_pb2.TableEntry(table_id=ACL_TABLE, is_default_action=True)
    const_default.action.action.action_id = DROP
    with_match = _with(default, lambda e: e.match.add(field_id=1).lpm.SetInParent())
    assert write_codes(
        target.stub,
        (Update.INSERT, default),
        (Update.DELETE, default),
        (Update.MODIFY, const_default),
        (Update.MODIFY, with_match),
        (Update.MODIFY, default),
    ) == [
        code_pb2.INVALID_ARGUMENT,
        code_pb2.INVALID_ARGUMENT,
        code_pb2.PERMISSION_DENIED,
        code_pb2.INVALID_ARGUMENT,
        code_pb2.OK,
    ]


def test_ternary_entries_with_priorities_and_priority_filtered_read(target: Target) -> None:
    write(
        target.stub,
        (Update.INSERT, acl_entry(b"\x06", b"\xff", priority=10)),
        (Update.INSERT, acl_entry(b"\x06", b"\xff", priority=20)),  # same match, other key
    )
    assert len(read(target.stub, table_read(ACL_TABLE))) == 2
    (entry,) = read(target.stub, table_read(ACL_TABLE, priority=20))
    assert entry.table_entry.priority == 20


def test_exact_read_of_one_key_and_wildcard_read_of_all_tables(target: Target) -> None:
    write(
        target.stub,
        (Update.INSERT, class_entry(1, 1)),
        (Update.INSERT, class_entry(1, 2)),
        (Update.INSERT, lpm_entry(b"\x0a\x00\x00\x00", 8)),
    )
    one = p4runtime_pb2.Entity()
    one.table_entry.CopyFrom(class_entry(1, 2))
    one.table_entry.ClearField("action")
    (entry,) = read(target.stub, one)
    assert entry.table_entry.match[1].exact.value == b"\x02"
    assert {e.table_entry.table_id for e in read(target.stub, table_read())} == {
        CLASS_TABLE,
        LPM_TABLE,
    }


@pytest.mark.parametrize(
    "name, value",
    [("priority", 3), ("controller_metadata", 5), ("metadata", b"\x01")],
)
def test_a_read_of_all_tables_takes_no_other_filter(
    target: Target, name: str, value: object
) -> None:
    """The spec: table_id 0 selects every table "and no other filter can be used". A
    priority used to filter the read, which then found nothing (BMv2 ignores it)."""
    write(target.stub, (Update.INSERT, acl_entry(b"\x06", b"\xff", priority=3)))
    with pytest.raises(grpc.RpcError) as caught:
        read(target.stub, table_read(0, **{name: value}))
    assert caught.value.code() == grpc.StatusCode.UNKNOWN  # one read request failed
    (error,) = write_error_details(caught.value)
    assert error.canonical_code == code_pb2.INVALID_ARGUMENT
    assert f"takes no other filter; this one filters by {name}" in error.message
    assert len(read(target.stub, table_read(0, counter_data=True))) == 1  # not a filter


def test_counter_entries_write_and_read_by_index_and_wildcard(target: Target) -> None:
    write(target.stub, (Update.MODIFY, counter_entity(STAGE_BYTES, 3, (1500, 1))))
    (cell,) = read(target.stub, counter_entity(STAGE_BYTES, 3))
    assert (cell.counter_entry.data.byte_count, cell.counter_entry.data.packet_count) == (1500, 1)
    cells = read(target.stub, counter_entity(STAGE_BYTES))
    assert [c.counter_entry.index.index for c in cells] == list(range(8))
    assert sum(c.counter_entry.data.byte_count for c in cells) == 1500
    assert len(read(target.stub, counter_entity(0))) == 8
    # No index: every cell is set.
    write(target.stub, (Update.MODIFY, counter_entity(STAGE_BYTES, None, (0, 0))))
    assert all(c.counter_entry.data.byte_count == 0 for c in read(target.stub, counter_entity(0)))


def test_counter_entry_errors(target: Target) -> None:
    assert write_codes(
        target.stub,
        (Update.INSERT, counter_entity(STAGE_BYTES, 1, (1, 1))),
        (Update.MODIFY, counter_entity(STAGE_BYTES, 8, (1, 1))),
        (Update.MODIFY, counter_entity(STAGE_BYTES, -1, (1, 1))),
        (Update.MODIFY, counter_entity(0x12FFFFFF, 0, (1, 1))),
    ) == [
        code_pb2.INVALID_ARGUMENT,
        code_pb2.OUT_OF_RANGE,
        code_pb2.INVALID_ARGUMENT,
        code_pb2.INVALID_ARGUMENT,
    ]


def test_direct_counters_through_direct_counter_entry_and_counter_data(target: Target) -> None:
    initial = class_entry(1, 1)
    initial.counter_data.byte_count, initial.counter_data.packet_count = 100, 2
    write(target.stub, (Update.INSERT, initial))
    (entry,) = read(target.stub, table_read(CLASS_TABLE, counter_data=True))
    assert entry.table_entry.counter_data.byte_count == 100
    (without,) = read(target.stub, table_read(CLASS_TABLE))
    assert not without.table_entry.HasField("counter_data")

    direct = p4runtime_pb2.Entity()
    direct.direct_counter_entry.table_entry.CopyFrom(class_entry(1, 1))
    direct.direct_counter_entry.table_entry.ClearField("action")
    direct.direct_counter_entry.data.byte_count = 7
    direct.direct_counter_entry.data.packet_count = 1
    write(target.stub, (Update.MODIFY, direct))
    (counted,) = read(target.stub, direct)
    assert counted.direct_counter_entry.data.byte_count == 7

    wildcard = p4runtime_pb2.Entity()
    wildcard.direct_counter_entry.table_entry.table_id = CLASS_TABLE
    assert len(read(target.stub, wildcard)) == 1

    missing = p4runtime_pb2.Entity()
    missing.direct_counter_entry.table_entry.CopyFrom(class_entry(2, 2))
    missing.direct_counter_entry.table_entry.ClearField("action")
    assert write_codes(target.stub, (Update.INSERT, direct), (Update.MODIFY, missing)) == [
        code_pb2.INVALID_ARGUMENT,
        code_pb2.NOT_FOUND,
    ]


def test_packets_through_the_switch_count_and_are_read_over_p4runtime(target: Target) -> None:
    write(
        target.stub,
        (Update.INSERT, lpm_entry(b"\x0a\x00\x00\x00", 8, port=b"\x01")),
        (Update.INSERT, class_entry_for(src=b"\x0a\x00\x00\x01", tos=0, class_id=5)),
    )
    frame = bytes(
        Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")
        / IP(src="10.0.0.1", dst="10.1.2.3", tos=0)
        / UDP(sport=1000, dport=2000)
        / (b"x" * 100)
    )
    target.switch.send(0, frame)
    port = target.switch.ports[1]
    assert isinstance(port, MemoryPort)
    (departure,) = port.take()
    assert Ether(departure.frame)[IP].dst == "10.1.2.3"

    direct = p4runtime_pb2.Entity()
    direct.direct_counter_entry.table_entry.CopyFrom(
        class_entry_for(src=b"\x0a\x00\x00\x01", tos=0, class_id=5)
    )
    direct.direct_counter_entry.table_entry.ClearField("action")
    (hits,) = read(target.stub, direct)
    assert hits.direct_counter_entry.data.packet_count == 1
    assert hits.direct_counter_entry.data.byte_count == len(frame)
    (cell,) = read(target.stub, counter_entity(STAGE_BYTES, 5))
    assert cell.counter_entry.data.packet_count == 1
    assert sum(c.counter_entry.data.packet_count for c in read(target.stub, counter_entity(0))) == 1


def test_register_entries_write_and_read(target: Target) -> None:
    entity = p4runtime_pb2.Entity()
    entity.register_entry.register_id = SCRATCH
    entity.register_entry.index.index = 2
    entity.register_entry.data.bitstring = b"\x00\x00\x01\x00"
    write(target.stub, (Update.MODIFY, entity))
    (cell,) = read(target.stub, entity)
    assert cell.register_entry.data.bitstring == b"\x01\x00"
    assert target.switch.pipeline is not None
    assert target.switch.pipeline.runtime.read_register(SCRATCH, 2) == [256]
    too_wide = p4runtime_pb2.Entity()
    too_wide.CopyFrom(entity)
    too_wide.register_entry.data.bitstring = b"\x01\x00\x00\x00\x00"
    assert write_codes(target.stub, (Update.MODIFY, too_wide)) == [code_pb2.OUT_OF_RANGE]


def test_counter_data_on_a_table_without_direct_counter_is_invalid(target: Target) -> None:
    entry = lpm_entry(b"\x0a\x00\x00\x00", 8)
    entry.counter_data.byte_count = 1
    assert write_codes(target.stub, (Update.INSERT, entry)) == [code_pb2.INVALID_ARGUMENT]


def test_read_batch_with_a_bad_request_streams_the_good_ones_then_fails(target: Target) -> None:
    write(target.stub, (Update.INSERT, class_entry(1, 1)))
    request = p4runtime_pb2.ReadRequest(
        device_id=DEVICE_ID, entities=[table_read(CLASS_TABLE), table_read(0x02FFFFFF)]
    )
    stream = target.stub.Read(request)
    first = next(stream)
    assert len(first.entities) == 1
    with pytest.raises(grpc.RpcError) as caught:
        next(stream)
    assert caught.value.code() == grpc.StatusCode.UNKNOWN
    codes = [e.canonical_code for e in write_error_details(caught.value)]
    assert codes == [code_pb2.OK, code_pb2.INVALID_ARGUMENT]


def test_unsupported_atomicity_and_entities_are_unimplemented(target: Target) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        write(
            target.stub,
            (Update.INSERT, class_entry(1, 1)),
            atomicity=p4runtime_pb2.WriteRequest.DATAPLANE_ATOMIC,
        )
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
    meter = p4runtime_pb2.Entity()
    meter.meter_entry.meter_id = 1
    assert write_codes(target.stub, (Update.MODIFY, meter)) == [code_pb2.UNIMPLEMENTED]


def test_wrong_device_id_is_not_found(target: Target) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        write(target.stub, (Update.INSERT, class_entry(1, 1)), device_id=DEVICE_ID + 1)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as caught:
        list(target.stub.Read(p4runtime_pb2.ReadRequest(device_id=DEVICE_ID + 1)))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


# ----------------------------------------------------------------------------- pipeline config


def test_before_any_pipeline_writes_and_reads_fail_precondition(bare: Target) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        write(bare.stub, (Update.INSERT, class_entry(1, 1)))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as caught:
        read(bare.stub, table_read())
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    reply = bare.stub.GetForwardingPipelineConfig(
        GetType(device_id=DEVICE_ID, response_type=GetType.ALL)
    )
    assert not reply.HasField("config")


def test_get_pipeline_config_response_types(bare: Target) -> None:
    program = program_under_test()
    set_config(bare.stub, program, cookie=77)

    def get(response_type: int) -> p4runtime_pb2.ForwardingPipelineConfig:
        request = GetType(device_id=DEVICE_ID, response_type=response_type)
        return bare.stub.GetForwardingPipelineConfig(request).config

    full = get(GetType.ALL)
    assert full.p4info == program.p4info
    assert full.p4_device_config == program.device_config()
    assert full.cookie.cookie == 77
    cookie_only = get(GetType.COOKIE_ONLY)
    assert cookie_only.cookie.cookie == 77
    assert not cookie_only.HasField("p4info") and not cookie_only.p4_device_config
    p4info_only = get(GetType.P4INFO_AND_COOKIE)
    assert p4info_only.HasField("p4info") and not p4info_only.p4_device_config
    device_only = get(GetType.DEVICE_CONFIG_AND_COOKIE)
    assert device_only.p4_device_config and not device_only.HasField("p4info")


def test_verify_checks_without_changing_the_switch(bare: Target) -> None:
    set_config(bare.stub, program_under_test(), action=SetAction.VERIFY)
    assert bare.switch.pipeline is None
    bad = SetAction(device_id=DEVICE_ID, action=SetAction.VERIFY)
    bad.election_id.low = ELECTION[1]
    bad.config.p4_device_config = b"not a device config"
    with pytest.raises(grpc.RpcError) as caught:
        bare.stub.SetForwardingPipelineConfig(bad)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_p4info_must_match_the_device_config(bare: Target) -> None:
    request = SetAction(device_id=DEVICE_ID, action=SetAction.VERIFY_AND_COMMIT)
    request.election_id.low = ELECTION[1]
    request.config.p4info.CopyFrom(program_under_test(99).p4info)
    request.config.p4_device_config = program_under_test().device_config()
    with pytest.raises(grpc.RpcError) as caught:
        bare.stub.SetForwardingPipelineConfig(request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "tables" in (caught.value.details() or "")
    assert bare.switch.pipeline is None


def test_verify_and_commit_clears_the_forwarding_state(target: Target) -> None:
    write(target.stub, (Update.INSERT, class_entry(1, 1)))
    set_config(target.stub, program_under_test())
    assert read(target.stub, table_read()) == []


def test_verify_and_save_then_commit(target: Target) -> None:
    running = target.switch.pipeline
    set_config(target.stub, program_under_test(32), SetAction.VERIFY_AND_SAVE)
    write(target.stub, (Update.INSERT, lpm_entry(b"\x0a\x00\x00\x00", 8)))
    assert target.switch.pipeline is running  # the data plane still runs the old program
    assert running is not None and not running.runtime.table(LPM_TABLE).entries

    commit = SetAction(device_id=DEVICE_ID, action=SetAction.COMMIT)
    commit.election_id.low = ELECTION[1]
    target.stub.SetForwardingPipelineConfig(commit)
    assert target.switch.pipeline is not running
    assert len(target.switch.pipeline.runtime.table(LPM_TABLE).entries) == 1
    assert target.switch.pipeline.runtime.table(LPM_TABLE).size == 32

    with pytest.raises(grpc.RpcError) as caught:
        target.stub.SetForwardingPipelineConfig(commit)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_saved_config_is_dropped_when_its_primary_leaves(target: Target) -> None:
    """A primary saves a config and leaves without committing it. The next primary's
    Writes go to the running pipeline, where the packets are: they used to go to the
    saved one, which Get does not report and which never ran, so the new primary's
    entries silently did nothing."""
    running = target.switch.pipeline
    assert running is not None
    set_config(target.stub, program_under_test(32), SetAction.VERIFY_AND_SAVE)
    target.primary.close()  # leaves, the config saved and not committed
    newcomer = StreamSession(target.stub)
    newcomer.arbitrate(DEVICE_ID, (0, 11))
    assert newcomer.next().arbitration.status.code == code_pb2.OK
    try:
        write(target.stub, (Update.INSERT, class_entry(1, 1)), election=(0, 11))
        assert target.switch.pipeline is running
        assert len(running.runtime.table(CLASS_TABLE).entries) == 1
        assert len(read(target.stub, table_read(CLASS_TABLE))) == 1
        commit = SetAction(device_id=DEVICE_ID, action=SetAction.COMMIT)
        commit.election_id.low = 11
        with pytest.raises(grpc.RpcError) as caught:
            target.stub.SetForwardingPipelineConfig(commit)  # nothing of its own to commit
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
        assert target.switch.pipeline is running
    finally:
        newcomer.close()


def test_a_saved_config_stays_while_its_primary_does(target: Target) -> None:
    """The primary that saved keeps its saved config while another client arbitrates
    as a backup: only a change of primary drops it."""
    set_config(target.stub, program_under_test(32), SetAction.VERIFY_AND_SAVE)
    backup = StreamSession(target.stub)
    backup.arbitrate(DEVICE_ID, (0, 3))
    assert backup.next().arbitration.status.code == code_pb2.ALREADY_EXISTS
    try:
        commit = SetAction(device_id=DEVICE_ID, action=SetAction.COMMIT)
        commit.election_id.low = ELECTION[1]
        target.stub.SetForwardingPipelineConfig(commit)
        assert target.switch.pipeline is not None
        assert target.switch.pipeline.runtime.table(LPM_TABLE).size == 32
    finally:
        backup.close()


def test_reconcile_and_commit_keeps_the_state(target: Target) -> None:
    write(
        target.stub,
        (Update.INSERT, class_entry(1, 1)),
        (Update.INSERT, lpm_entry(b"\x0a\x00\x00\x00", 8)),
    )
    running = target.switch.pipeline
    set_config(target.stub, program_under_test(), SetAction.RECONCILE_AND_COMMIT, 5)
    assert target.switch.pipeline is running  # the same program keeps running untouched
    # A different program that can hold the entries gets a copy of them.
    set_config(target.stub, program_under_test(64), SetAction.RECONCILE_AND_COMMIT)
    assert target.switch.pipeline is not running
    assert len(read(target.stub, table_read())) == 2


def test_reconcile_with_the_running_program_keeps_the_p4info_as_sent(target: Target) -> None:
    """Get returns the P4Info as the client sent it, also when only the P4Info changed
    (reordered, annotated: the same program); the old one used to stay."""
    write(target.stub, (Update.INSERT, class_entry(1, 1)))
    running = target.switch.pipeline
    program = program_under_test()
    sent = p4info_pb2.P4Info()
    sent.CopyFrom(program.p4info)
    tables = list(sent.tables)[::-1]
    del sent.tables[:]
    sent.tables.extend(tables)
    sent.tables[0].preamble.annotations.append('@brief("from another compiler")')
    assert sent != program.p4info
    request = SetAction(device_id=DEVICE_ID, action=SetAction.RECONCILE_AND_COMMIT)
    request.election_id.high, request.election_id.low = ELECTION
    request.config.p4info.CopyFrom(sent)
    request.config.p4_device_config = program.device_config()
    request.config.cookie.cookie = 9
    target.stub.SetForwardingPipelineConfig(request)
    assert target.switch.pipeline is running  # untouched
    got = target.stub.GetForwardingPipelineConfig(GetType(device_id=DEVICE_ID)).config
    assert got.p4info == sent
    assert got.cookie.cookie == 9
    assert len(read(target.stub, table_read(CLASS_TABLE))) == 1


def test_reconcile_that_cannot_keep_the_state_changes_nothing(target: Target) -> None:
    write(
        target.stub,
        (Update.INSERT, lpm_entry(b"\x0a\x00\x00\x00", 8)),
        (Update.INSERT, lpm_entry(b"\x0b\x00\x00\x00", 8)),
    )
    running = target.switch.pipeline
    with pytest.raises(grpc.RpcError) as caught:
        set_config(target.stub, program_under_test(1), SetAction.RECONCILE_AND_COMMIT)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert target.switch.pipeline is running
    assert len(read(target.stub, table_read(LPM_TABLE))) == 2


def test_commit_rules(target: Target) -> None:
    commit = SetAction(device_id=DEVICE_ID, action=SetAction.COMMIT)
    commit.election_id.low = ELECTION[1]
    with pytest.raises(grpc.RpcError) as caught:
        target.stub.SetForwardingPipelineConfig(commit)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    commit.config.p4_device_config = b"x"
    with pytest.raises(grpc.RpcError) as caught:
        target.stub.SetForwardingPipelineConfig(commit)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_capabilities_reports_the_api_version(target: Target) -> None:
    reply = target.stub.Capabilities(p4runtime_pb2.CapabilitiesRequest())
    assert reply.p4runtime_api_version == "1.4.1"


def test_a_server_fault_in_one_update_is_internal_and_spares_the_rest(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_apply = service.apply_decoded_update
    calls = []

    def faulty(active: Any, update: Any) -> None:
        calls.append(update)
        if len(calls) == 2:
            raise KeyError("a bug")
        real_apply(active, update)

    monkeypatch.setattr(service, "apply_decoded_update", faulty)
    codes = write_codes(
        target.stub,
        (Update.INSERT, class_entry(1, 1)),
        (Update.INSERT, class_entry(1, 2)),
        (Update.INSERT, class_entry(1, 3)),
    )
    assert codes == [code_pb2.OK, code_pb2.INTERNAL, code_pb2.OK]
    assert len(read(target.stub, table_read(CLASS_TABLE))) == 2


def test_rollback_on_error_restores_everything_the_batch_changed(target: Target) -> None:
    write(
        target.stub,
        (Update.INSERT, class_entry(1, 1, class_id=1)),
        (Update.INSERT, lpm_entry(b"\x0a\x00\x00\x00", 8, port=b"\x01")),
        (Update.MODIFY, counter_entity(STAGE_BYTES, 2, (500, 5))),
    )
    default = p4runtime_pb2.TableEntry(table_id=LPM_TABLE, is_default_action=True)
    default.action.action.action_id = SET_EGRESS
    default.action.action.params.add(param_id=1, value=b"\x04")
    before = read(target.stub, table_read(), counter_entity(0))
    modified = class_entry(1, 1, class_id=6)
    modified.counter_data.byte_count = 99
    request_updates = [
        (Update.INSERT, class_entry(1, 2)),
        (Update.MODIFY, modified),
        (Update.DELETE, lpm_entry(b"\x0a\x00\x00\x00", 8)),
        (Update.MODIFY, counter_entity(STAGE_BYTES, None, (7, 7))),
        (Update.MODIFY, default),
        (Update.INSERT, class_entry(1, 2)),  # fails: inserted above in this batch
        (Update.INSERT, class_entry(1, 3)),  # never attempted
    ]
    with pytest.raises(grpc.RpcError) as caught:
        write(target.stub, *request_updates, atomicity=p4runtime_pb2.WriteRequest.ROLLBACK_ON_ERROR)
    codes = [e.canonical_code for e in write_error_details(caught.value)]
    assert codes == [code_pb2.ABORTED] * 5 + [code_pb2.ALREADY_EXISTS, code_pb2.ABORTED]
    assert read(target.stub, table_read(), counter_entity(0)) == before
    (class_hits,) = read(target.stub, table_read(CLASS_TABLE, counter_data=True))
    assert class_hits.table_entry.counter_data.byte_count == 0
    (lpm_default,) = read(target.stub, table_read(LPM_TABLE, is_default_action=True))
    assert lpm_default.table_entry.action.action.action_id == DROP

    # The same batch without the failing update applies whole.
    good = request_updates[:5] + request_updates[6:]
    write(target.stub, *good, atomicity=p4runtime_pb2.WriteRequest.ROLLBACK_ON_ERROR)
    assert len(read(target.stub, table_read(CLASS_TABLE))) == 3


# ----------------------------------------------------------------------------- hostile input


def raw_write(target: Target, data: bytes) -> grpc.RpcError:
    """Send ``data`` as a WriteRequest's wire bytes; the call must fail."""
    channel = grpc.insecure_channel(target.server.addr)
    call = channel.unary_unary("/p4.v1.P4Runtime/Write")
    try:
        with pytest.raises(grpc.RpcError) as caught:
            call(data, timeout=30)
    finally:
        channel.close()
    return caught.value


def write_header() -> bytes:
    request = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID)
    request.election_id.high, request.election_id.low = ELECTION
    return request.SerializeToString()


def test_a_role_that_is_not_utf8_is_invalid_argument(target: Target) -> None:
    error = raw_write(target, write_header() + b"\x32\x01\xff")
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "role" in (error.details() or "")


def test_deeply_nested_groups_are_invalid_argument(target: Target) -> None:
    error = raw_write(target, b"\x0b" * 100_000 + b"\x0c" * 100_000)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    update = p4runtime_pb2.Update(type=Update.INSERT).SerializeToString()
    nested = b"\x0b" * 100_000 + b"\x0c" * 100_000
    request = write_header() + b"\x22" + varint_bytes(len(update) + len(nested)) + update + nested
    error = raw_write(target, request)  # no valid WriteRequest: nothing of it is applied
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "nested too deeply" in (error.details() or "")


def test_errors_do_not_echo_huge_values(target: Target) -> None:
    """A trailer over the client's 16 KiB limit would hide the real status code."""
    huge = b"\x01" * 20_000
    entry = _with(class_entry(1, 1), lambda e: setattr(e.match[0].exact, "value", huge))
    with pytest.raises(grpc.RpcError) as caught:
        write(target.stub, (Update.INSERT, entry))
    assert caught.value.code() == grpc.StatusCode.UNKNOWN
    (detail,) = write_error_details(caught.value)
    assert detail.canonical_code == code_pb2.OUT_OF_RANGE
    assert "(20000 bytes)" in detail.message and len(detail.message) < 200
    request = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID, role="r" * 20_000)
    with pytest.raises(grpc.RpcError) as caught:
        target.stub.Write(request)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert len(caught.value.details() or "") < 200
    program = program_under_test()
    config = SetAction(device_id=DEVICE_ID, action=SetAction.VERIFY)
    config.election_id.high, config.election_id.low = ELECTION
    config.config.p4info.CopyFrom(program.p4info)
    device_config = json.loads(program.device_config())
    device_config["source"] = [["f" * 1_000_000, 10**4000, "x"]]
    config.config.p4_device_config = json.dumps(device_config).encode()
    with pytest.raises(grpc.RpcError) as caught:
        target.stub.SetForwardingPipelineConfig(config)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert len(caught.value.details() or "") <= 2048
