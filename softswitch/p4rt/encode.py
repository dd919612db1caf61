"""A fast encoder for the bulk of ReadResponses: table, counter and register entries as
protobuf wire bytes.

Building and serialising protobuf messages in pure Python costs tens of microseconds
to a millisecond per entity, which made reading back a few thousand table entries, or a
large register, take seconds. These entities are therefore written straight into the
wire format, field by field in field-number order as protobuf itself does (so the bytes
equal ``SerializeToString``'s), with canonical binary strings. Direct counter entries
keep the protobuf path.
"""

from __future__ import annotations

from softswitch.p4rt.bytestrings import encode_unsigned
from softswitch.p4rt.varints import BYTE, length_delimited, varint
from softswitch.runtime import (
    ActionCall,
    CounterData,
    ExactMatch,
    FieldMatch,
    LpmMatch,
    RangeMatch,
    TernaryMatch,
)


def _bytes_field(key: int, value: int) -> bytes:
    data = encode_unsigned(value)
    return BYTE[key] + varint(len(data)) + data


def field_match(field_id: int, match: FieldMatch) -> bytes:
    if isinstance(match, ExactMatch):
        body = length_delimited(0x12, _bytes_field(0x0A, match.value))
    elif isinstance(match, LpmMatch):
        inner = _bytes_field(0x0A, match.value)
        if match.prefix_len:
            inner += b"\x10" + varint(match.prefix_len)
        body = length_delimited(0x22, inner)
    elif isinstance(match, TernaryMatch):
        inner = _bytes_field(0x0A, match.value) + _bytes_field(0x12, match.mask)
        body = length_delimited(0x1A, inner)
    elif isinstance(match, RangeMatch):
        inner = _bytes_field(0x0A, match.low) + _bytes_field(0x12, match.high)
        body = length_delimited(0x32, inner)
    else:
        body = length_delimited(0x3A, _bytes_field(0x0A, match.value))
    return b"\x08" + varint(field_id) + body


def action(call: ActionCall, param_ids: tuple[int, ...]) -> bytes:
    """A TableAction holding ``call``; ``param_ids`` in P4Info order, like ``call.params``."""
    inner = b"\x08" + varint(call.action_id) if call.action_id else b""
    for param_id, value in zip(param_ids, call.params, strict=False):
        inner += length_delimited(0x22, b"\x10" + varint(param_id) + _bytes_field(0x1A, value))
    return length_delimited(0x0A, inner)


def counter_data(data: CounterData) -> bytes:
    inner = b""
    if data.byte_count:
        inner += b"\x08" + varint(data.byte_count)
    if data.packet_count:
        inner += b"\x10" + varint(data.packet_count)
    return inner


def table_entry_entity(
    table_id: int,
    matches: dict[int, FieldMatch],
    action_bytes: bytes | None,
    priority: int = 0,
    controller_metadata: int = 0,
    counter: CounterData | None = None,
    is_default_action: bool = False,
    metadata: bytes = b"",
    is_const: bool = False,
) -> bytes:
    """An ``Entity`` holding one TableEntry, as serialised bytes."""
    parts = [b"\x08" + varint(table_id)] if table_id else []
    for field_id in sorted(matches):
        parts.append(length_delimited(0x12, field_match(field_id, matches[field_id])))
    if action_bytes is not None:
        parts.append(length_delimited(0x1A, action_bytes))
    if priority:
        parts.append(b"\x20" + varint(priority))
    if controller_metadata:
        parts.append(b"\x28" + varint(controller_metadata))
    if counter is not None:
        parts.append(length_delimited(0x3A, counter_data(counter)))
    if is_default_action:
        parts.append(b"\x40\x01")
    if metadata:
        parts.append(length_delimited(0x5A, metadata))
    if is_const:
        parts.append(b"\x68\x01")
    return length_delimited(0x12, b"".join(parts))


def _index(index: int) -> bytes:
    """An ``Index`` field (number 2) of a counter or register entry, always present."""
    return length_delimited(0x12, b"\x08" + varint(index) if index else b"")


def counter_entry_entity(counter_id: int, index: int, data: CounterData) -> bytes:
    """An ``Entity`` holding one CounterEntry (its data always present), as bytes."""
    head = b"\x08" + varint(counter_id) if counter_id else b""
    return length_delimited(0x3A, head + _index(index) + length_delimited(0x1A, counter_data(data)))


def register_entry_entity(register_id: int, index: int, value: int) -> bytes:
    """An ``Entity`` holding one RegisterEntry whose data is the bitstring ``value``."""
    head = b"\x08" + varint(register_id) if register_id else b""
    return length_delimited(
        0x5A, head + _index(index) + length_delimited(0x1A, _bytes_field(0x0A, value))
    )


def read_response(entities: list[bytes]) -> bytes:
    """A ReadResponse whose ``entities`` are the given serialised Entity messages."""
    return b"".join([length_delimited(0x0A, entity) for entity in entities])
