"""The fast wire paths agree with protobuf: the WriteRequest decoder on every table
entry it accepts (leaving everything else to protobuf), and the ReadResponse encoder
byte for byte."""

from __future__ import annotations

import contextlib

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from p4.v1 import p4runtime_pb2
from test_p4runtime_server_support import CLASS_TABLE, SET_CLASS, program_under_test

from control.p4runtime_client import varint_bytes
from softswitch.p4rt import encode
from softswitch.p4rt.p4info_index import P4InfoIndex
from softswitch.p4rt.pipeline_config import ActivePipeline
from softswitch.p4rt.status import P4RuntimeError
from softswitch.p4rt.wire import (
    RequestHeader,
    decode_table_update,
    decode_write_request,
    request_header,
    table_entry_data,
)
from softswitch.p4rt.writes import apply_decoded_update, decode_update
from softswitch.runtime import (
    ActionCall,
    CounterData,
    ExactMatch,
    FieldMatch,
    LpmMatch,
    OptionalMatch,
    RangeMatch,
    TernaryMatch,
)

small_bytes = st.binary(min_size=0, max_size=6)
uint32 = st.integers(min_value=0, max_value=2**32 - 1)


@st.composite
def field_matches(draw: st.DrawFn) -> p4runtime_pb2.FieldMatch:
    match = p4runtime_pb2.FieldMatch(field_id=draw(uint32))
    kind = draw(st.sampled_from(["exact", "lpm", "ternary", "range", "optional", "none"]))
    if kind == "exact":
        match.exact.value = draw(small_bytes)
    elif kind == "lpm":
        match.lpm.value = draw(small_bytes)
        match.lpm.prefix_len = draw(st.integers(min_value=-(2**31), max_value=2**31 - 1))
    elif kind == "ternary":
        match.ternary.value, match.ternary.mask = draw(small_bytes), draw(small_bytes)
    elif kind == "range":
        match.range.low, match.range.high = draw(small_bytes), draw(small_bytes)
    elif kind == "optional":
        match.optional.value = draw(small_bytes)
    return match


@st.composite
def table_entries(draw: st.DrawFn) -> p4runtime_pb2.TableEntry:
    entry = p4runtime_pb2.TableEntry(
        table_id=draw(uint32),
        priority=draw(st.integers(min_value=-(2**31), max_value=2**31 - 1)),
        controller_metadata=draw(st.integers(min_value=0, max_value=2**64 - 1)),
        metadata=draw(small_bytes),
        is_default_action=draw(st.booleans()),
        is_const=draw(st.booleans()),
        idle_timeout_ns=draw(st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    )
    entry.match.extend(draw(st.lists(field_matches(), max_size=4)))
    action_kind = draw(st.sampled_from(["action", "member", "empty", "none"]))
    if action_kind == "action":
        entry.action.action.action_id = draw(uint32)
        for param_id, value in draw(st.lists(st.tuples(uint32, small_bytes), max_size=3)):
            entry.action.action.params.add(param_id=param_id, value=value)
    elif action_kind == "member":
        entry.action.action_profile_member_id = draw(uint32)
    elif action_kind == "empty":
        entry.action.SetInParent()
    if draw(st.booleans()):
        entry.counter_data.byte_count = draw(st.integers(min_value=-(2**63), max_value=2**63 - 1))
        entry.counter_data.packet_count = draw(st.integers(min_value=0, max_value=2**40))
    if draw(st.booleans()):
        entry.meter_config.cir = 5
    return entry


@settings(max_examples=300, deadline=None)
@given(table_entries(), st.sampled_from([0, 1, 2, 3, 7]))
def test_fast_decoder_matches_protobuf(entry: p4runtime_pb2.TableEntry, update_type: int) -> None:
    update = p4runtime_pb2.Update(type=update_type)
    update.entity.table_entry.CopyFrom(entry)
    decoded = decode_table_update(update.SerializeToString())
    if entry.action.WhichOneof("type") not in (None, "action"):
        assert decoded is None  # action profiles: protobuf's job
        return
    assert decoded is not None
    assert decoded == (update_type, table_entry_data(entry))


def test_other_entities_and_unknown_fields_fall_back_to_protobuf() -> None:
    counter = p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY)
    counter.entity.counter_entry.counter_id = 7
    assert decode_table_update(counter.SerializeToString()) is None
    entry = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
    entry.entity.table_entry.table_id = 1
    entry.entity.table_entry.time_since_last_hit.elapsed_ns = 5
    assert decode_table_update(entry.SerializeToString()) is None


def test_truncated_updates_decode_as_protobuf_reads_them_or_not_at_all() -> None:
    update = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
    update.entity.table_entry.CopyFrom(
        p4runtime_pb2.TableEntry(table_id=300, priority=5, metadata=b"meta")
    )
    match = update.entity.table_entry.match.add(field_id=2)
    match.ternary.value, match.ternary.mask = b"\x01\x02", b"\xff\xff"
    update.entity.table_entry.action.action.action_id = 77
    update.entity.table_entry.action.action.params.add(param_id=1, value=b"\x09")
    whole = update.SerializeToString()
    for cut in range(len(whole)):
        decoded = decode_table_update(whole[:cut])
        try:
            parsed = p4runtime_pb2.Update.FromString(whole[:cut])
        except DecodeError:
            assert decoded is None
            continue
        if decoded is not None:
            assert decoded == (parsed.type, table_entry_data(parsed.entity.table_entry))


def _as_protobuf_reads_it(data: bytes) -> None:
    """The fast decoder gives what protobuf parses, or nothing where protobuf refuses."""
    decoded = decode_table_update(data)
    try:
        parsed = p4runtime_pb2.Update.FromString(data)
    except DecodeError:
        assert decoded is None
        return
    if decoded is not None:
        assert decoded == (parsed.type, table_entry_data(parsed.entity.table_entry))


@pytest.mark.parametrize("size", range(120, 132))
def test_a_length_byte_of_0x80_or_more_is_not_read_as_a_one_byte_length(size: int) -> None:
    """A single byte of 0x80 and above starts a longer varint: the inline reads of an
    update's and an exact match's lengths must not take it for the length itself."""
    entry = p4runtime_pb2.TableEntry(table_id=7, metadata=b"m" * (size - 4)).SerializeToString()
    assert len(entry) == size
    # An update whose two lengths are written as single bytes, whatever their size.
    _as_protobuf_reads_it(bytes([0x08, 0x01, 0x12, (size + 2) & 0xFF, 0x12, size]) + entry)
    # An exact match whose message length is written as one byte.
    value = b"v" * (size - 2)
    match = bytes([0x08, 0x01, 0x12, size & 0xFF, 0x0A, (size - 2) & 0xFF]) + value
    table_entry = b"\x08\x07" + b"\x12" + varint_bytes(len(match)) + match
    entity = b"\x12" + varint_bytes(len(table_entry)) + table_entry
    _as_protobuf_reads_it(b"\x08\x01" + b"\x12" + varint_bytes(len(entity)) + entity)


def test_write_request_header_and_updates_are_split() -> None:
    request = p4runtime_pb2.WriteRequest(device_id=9, role="r", atomicity=1)
    request.election_id.high, request.election_id.low = 2, 3
    for table_id in (1, 2):
        request.updates.add(type=1).entity.table_entry.table_id = table_id
    batch = decode_write_request(request.SerializeToString())
    assert (batch.device_id, batch.role, batch.atomicity) == (9, "r", 1)
    assert batch.election_id == (2 << 64) | 3
    assert [p4runtime_pb2.Update.FromString(u) for u in batch.updates] == list(request.updates)
    unset = decode_write_request(p4runtime_pb2.WriteRequest(device_id=1).SerializeToString())
    assert unset.election_id is None


def _field(number: int, wire: int, body: bytes | int) -> bytes:
    if isinstance(body, int):
        return varint_bytes(number << 3 | wire) + varint_bytes(body)
    return varint_bytes(number << 3 | wire) + varint_bytes(len(body)) + body


WIDE = [2**32 + 7, 2**63 + 2**31 + 5, 2**64 + 3, 2**69 + 2**40 + 1]
"""Varints wider than their fields (up to the 70 bits ten bytes hold)."""


@pytest.mark.parametrize("wide", WIDE)
def test_varints_wider_than_their_field_are_cut_as_protobuf_cuts_them(wide: int) -> None:
    """Protobuf keeps a varint's low 64 bits, and of those the low 32 for a 32-bit field
    (signed for int32 and enums); the fast decoder used to keep them whole, so a table
    id of 2^32 + 7 named no table where protobuf reads table 7."""
    match = _field(1, 0, wide) + _field(2, 2, _field(1, 2, b"\x01"))
    param = _field(2, 0, wide) + _field(3, 2, b"\x02")
    action = _field(1, 2, _field(1, 0, wide) + _field(4, 2, param))
    entry = (
        _field(1, 0, wide)  # table_id, uint32
        + _field(2, 2, match)  # field_id, uint32
        + _field(3, 2, action)  # action_id and param_id, uint32
        + _field(4, 0, wide)  # priority, int32
        + _field(5, 0, wide)  # controller_metadata, uint64
        + _field(7, 2, _field(1, 0, wide) + _field(2, 0, wide))  # counter, int64
        + _field(8, 0, wide)  # is_default_action, bool
        + _field(9, 0, wide)  # idle_timeout_ns, int64
    )
    update = _field(1, 0, wide) + _field(2, 2, _field(2, 2, entry))  # type: an enum
    decoded = decode_table_update(update)
    parsed = p4runtime_pb2.Update.FromString(update)
    assert decoded == (parsed.type, table_entry_data(parsed.entity.table_entry))
    request = _field(1, 0, wide) + _field(3, 2, _field(1, 0, wide)) + _field(5, 0, wide)
    batch = decode_write_request(request)
    parsed_request = p4runtime_pb2.WriteRequest.FromString(request)
    assert (batch.device_id, batch.election_id, batch.atomicity) == (
        parsed_request.device_id,
        parsed_request.election_id.high << 64,
        parsed_request.atomicity,
    )


@st.composite
def claimed_headers(draw: st.DrawFn) -> bytes:
    """A WriteRequest or SetForwardingPipelineConfigRequest, as pieces that protobuf
    merges when concatenated: repeated headers, partial election ids, unknown fields of
    every wire type, and now and then bytes that are no message."""
    kind = draw(
        st.sampled_from(
            [p4runtime_pb2.WriteRequest, p4runtime_pb2.SetForwardingPipelineConfigRequest]
        )
    )
    pieces = []
    for _ in range(draw(st.integers(1, 3))):
        message = kind(
            device_id=draw(st.integers(0, 2**64 - 1)),
            role=draw(st.sampled_from(["", "r", "ré"])),
        )
        if draw(st.booleans()):
            message.election_id.SetInParent()
            if draw(st.booleans()):
                message.election_id.high = draw(st.integers(0, 2**64 - 1))
            if draw(st.booleans()):
                message.election_id.low = draw(st.integers(0, 2**64 - 1))
        if kind is p4runtime_pb2.WriteRequest and draw(st.booleans()):
            message.updates.add(type=1).entity.table_entry.table_id = 7
        elif kind is not p4runtime_pb2.WriteRequest and draw(st.booleans()):
            message.config.p4_device_config = b"x" * 300
        pieces.append(message.SerializeToString())
        unknown = draw(
            st.sampled_from([b"", b"\xf8\x06\x01", b"\xf9\x06" + bytes(8), b"\xfd\x06" + bytes(4),
                             b"\xfa\x06\x02ab", b"\x0a\x01z", b"\x1a\x03\x08\x01\x00",
                             # groups, nested groups, a group that ends another's
                             b"\xfb\x06\xfc\x06", b"\xfb\x06\x0b\x08\x05\x0c\xfc\x06",
                             b"\xfb\x06\xfc\x07", b"\x0c",
                             # election ids with unknown fields, a field of another type
                             b"\x1a\x04\x18\x05\x08\x01", b"\x1a\x03\x0a\x01x",
                             b"\x1a\x04\x0b\x0c\x10\x02",
                             # varints wider than 64 bits, field number 0
                             b"\x08" + b"\xff" * 9 + b"\x01", b"\x08" + b"\xff" * 9 + b"\x7f",
                             b"\x08" + b"\xff" * 10 + b"\x01", b"\x00\x01"])
        )  # fmt: skip
        pieces.append(unknown)
    data = b"".join(pieces)
    cut = draw(st.integers(0, 3))
    return data[: len(data) - cut] if draw(st.booleans()) else data


@settings(max_examples=500, deadline=None)
@given(claimed_headers())
def test_the_header_read_ahead_of_the_parse_is_what_protobuf_reads(data: bytes) -> None:
    """The primary check made before a Write or SetForwardingPipelineConfig is parsed
    sees the request as protobuf will, and refuses only bytes protobuf refuses too."""
    try:
        header: RequestHeader | None = request_header(data)
    except DecodeError:
        header = None
    for kind in (p4runtime_pb2.WriteRequest, p4runtime_pb2.SetForwardingPipelineConfigRequest):
        try:
            parsed = kind.FromString(data)
        except (DecodeError, UnicodeDecodeError):
            continue
        assert header is not None, f"refused bytes that protobuf reads as a {kind.__name__}"
        election = None
        if parsed.HasField("election_id"):
            election = (parsed.election_id.high << 64) | parsed.election_id.low
        assert (header.device_id, header.role, header.election_id) == (
            parsed.device_id,
            parsed.role,
            election,
        )


def test_the_header_of_a_usual_request_is_read() -> None:
    request = p4runtime_pb2.WriteRequest(device_id=9, role="r")
    request.election_id.high, request.election_id.low = 2, 3
    request.updates.add(type=1).entity.table_entry.table_id = 1
    header = request_header(request.SerializeToString() + b"\xf8\x06\x01")
    assert header is not None
    assert (header.device_id, header.role, header.election_id) == (9, "r", (2 << 64) | 3)


# ----------------------------------------------------------------------------- encoder

values = st.integers(min_value=0, max_value=2**48 - 1)


@st.composite
def runtime_matches(draw: st.DrawFn) -> tuple[int, FieldMatch]:
    field_id = draw(st.integers(min_value=1, max_value=300))
    kind = draw(st.sampled_from(["exact", "lpm", "ternary", "range", "optional"]))
    match: FieldMatch
    if kind == "exact":
        match = ExactMatch(draw(values))
    elif kind == "lpm":
        match = LpmMatch(draw(values), draw(st.integers(min_value=1, max_value=128)))
    elif kind == "ternary":
        match = TernaryMatch(draw(values), draw(values))
    elif kind == "range":
        match = RangeMatch(draw(values), draw(values))
    else:
        match = OptionalMatch(draw(values))
    return field_id, match


def canonical(value: int) -> bytes:
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


@settings(max_examples=300, deadline=None)
@given(
    table_id=uint32,
    matches=st.dictionaries(st.integers(1, 300), runtime_matches(), max_size=4),
    action_id=uint32,
    params=st.lists(values, max_size=3),
    priority=st.integers(min_value=-(2**31), max_value=2**31 - 1),
    cookie=st.integers(min_value=0, max_value=2**64 - 1),
    counter=st.one_of(st.none(), st.tuples(st.integers(0, 2**62), st.integers(0, 2**40))),
    metadata=small_bytes,
    flags=st.tuples(st.booleans(), st.booleans()),
)
def test_fast_encoder_writes_what_protobuf_writes(
    table_id: int,
    matches: dict[int, tuple[int, FieldMatch]],
    action_id: int,
    params: list[int],
    priority: int,
    cookie: int,
    counter: tuple[int, int] | None,
    metadata: bytes,
    flags: tuple[bool, bool],
) -> None:
    by_field = {field_id: match for field_id, match in matches.values()}
    param_ids = tuple(range(1, len(params) + 1))
    call = ActionCall(action_id, tuple(params))
    is_default, is_const = flags
    fast = encode.table_entry_entity(
        table_id,
        by_field,
        encode.action(call, param_ids),
        priority=priority,
        controller_metadata=cookie,
        counter=CounterData(*counter) if counter is not None else None,
        is_default_action=is_default,
        metadata=metadata,
        is_const=is_const,
    )
    reference = p4runtime_pb2.Entity()
    entry = reference.table_entry
    entry.table_id = table_id
    for field_id in sorted(by_field):
        match = by_field[field_id]
        out = entry.match.add(field_id=field_id)
        if isinstance(match, ExactMatch):
            out.exact.value = canonical(match.value)
        elif isinstance(match, LpmMatch):
            out.lpm.value, out.lpm.prefix_len = canonical(match.value), match.prefix_len
        elif isinstance(match, TernaryMatch):
            out.ternary.value, out.ternary.mask = canonical(match.value), canonical(match.mask)
        elif isinstance(match, RangeMatch):
            out.range.low, out.range.high = canonical(match.low), canonical(match.high)
        else:
            out.optional.value = canonical(match.value)
    entry.action.action.action_id = action_id
    for param_id, value in zip(param_ids, params, strict=True):
        entry.action.action.params.add(param_id=param_id, value=canonical(value))
    entry.priority = priority
    entry.controller_metadata = cookie
    if counter is not None:
        entry.counter_data.byte_count, entry.counter_data.packet_count = counter
    entry.is_default_action = is_default
    entry.metadata = metadata
    entry.is_const = is_const
    assert fast == reference.SerializeToString()
    reply = p4runtime_pb2.ReadResponse.FromString(encode.read_response([fast, fast]))
    assert list(reply.entities) == [reference, reference]


@settings(max_examples=200, deadline=None)
@given(
    counter_id=uint32,
    index=st.integers(min_value=0, max_value=2**40),
    counts=st.tuples(st.integers(0, 2**62), st.integers(0, 2**40)),
)
def test_fast_counter_entries_are_what_protobuf_writes(
    counter_id: int, index: int, counts: tuple[int, int]
) -> None:
    fast = encode.counter_entry_entity(counter_id, index, CounterData(*counts))
    reference = p4runtime_pb2.Entity()
    out = reference.counter_entry
    out.counter_id = counter_id
    out.index.index = index
    out.data.byte_count, out.data.packet_count = counts
    assert fast == reference.SerializeToString()


@settings(max_examples=200, deadline=None)
@given(
    register_id=uint32,
    index=st.integers(min_value=0, max_value=2**40),
    value=st.integers(min_value=0, max_value=2**2048 - 1),
)
def test_fast_register_entries_are_what_protobuf_writes(
    register_id: int, index: int, value: int
) -> None:
    fast = encode.register_entry_entity(register_id, index, value)
    reference = p4runtime_pb2.Entity()
    out = reference.register_entry
    out.register_id = register_id
    out.index.index = index
    out.data.bitstring = canonical(value)
    assert fast == reference.SerializeToString()


# ----------------------------------------------------------------------------- malformed input


def _valid_update_bytes() -> bytes:
    update = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
    entry = update.entity.table_entry
    entry.table_id = CLASS_TABLE
    entry.match.add(field_id=1).exact.value = b"\x0a\x00\x00\x01"
    entry.match.add(field_id=2).exact.value = b"\x04"
    entry.action.action.action_id = SET_CLASS
    entry.action.action.params.add(param_id=1, value=b"\x03")
    return update.SerializeToString()


VALID_UPDATE = _valid_update_bytes()


@settings(max_examples=400, deadline=None)
@given(
    flips=st.lists(
        st.tuples(st.integers(0, len(VALID_UPDATE) - 1), st.integers(0, 255)), max_size=4
    ),
    cut=st.integers(0, len(VALID_UPDATE)),
)
def test_mangled_updates_are_rejected_cleanly(flips: list[tuple[int, int]], cut: int) -> None:
    """Whatever the bytes, an update is applied or refused with a P4Runtime status."""
    program = program_under_test()
    active = ActivePipeline(P4InfoIndex.build(program.p4info), program.new_runtime_state())
    data = bytearray(VALID_UPDATE)
    for position, value in flips:
        data[position] = value
    with contextlib.suppress(P4RuntimeError, DecodeError):
        apply_decoded_update(active, decode_update(bytes(data[:cut])))
