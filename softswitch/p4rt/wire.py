"""A fast decoder for the hot part of WriteRequest: table-entry updates.

With protobuf 3.20 on Python 3.11 (what p4runtime 1.4.1 and p4runtime-shell allow),
protobuf parses in pure Python at ~170 µs per table-entry update, ten times the cost of
everything else the server does with it. This module reads the protobuf wire format
of WriteRequest → Update → Entity → TableEntry directly into :class:`TableEntryData`.
Anything it does not expect (another entity, an unknown or repeated singular field,
a wire type it does not handle) makes it give up on that update, which is then
parsed by protobuf as usual: the fast path never changes what a request means.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from google.protobuf.message import DecodeError, Message
from p4.v1 import p4runtime_pb2

_M = TypeVar("_M", bound=Message)

# Wire types.
_VARINT = 0
_FIXED64 = 1
_LENGTH_DELIMITED = 2
_START_GROUP = 3
_END_GROUP = 4
_FIXED32 = 5

_UINT32 = (1 << 32) - 1
_UINT64 = (1 << 64) - 1


class NotFastPath(Exception):
    """The bytes hold something this decoder leaves to protobuf."""


@dataclass(slots=True)
class MatchData:
    """One FieldMatch: ``kind`` is the oneof name; ``value``/``second`` hold its bytes
    (ternary value/mask, range low/high), ``prefix_len`` the LPM length."""

    field_id: int
    kind: str | None
    value: bytes = b""
    second: bytes = b""
    prefix_len: int = 0


@dataclass(slots=True)
class TableEntryData:
    """The fields of a TableEntry that the server acts on, decoded from either path."""

    table_id: int = 0
    matches: list[MatchData] = field(default_factory=list)
    has_action: bool = False
    action_kind: str | None = None  # the TableAction oneof; None when unset
    action_id: int = 0
    params: list[tuple[int, bytes]] = field(default_factory=list)
    priority: int = 0
    controller_metadata: int = 0
    metadata: bytes = b""
    is_default_action: bool = False
    is_const: bool = False
    counter: tuple[int, int] | None = None  # (bytes, packets) when counter_data is set
    has_meter: bool = False
    idle_timeout_ns: int = 0


@dataclass(slots=True)
class WriteBatch:
    device_id: int = 0
    election_id: int | None = None
    role: str = ""
    atomicity: int = 0
    updates: list[bytes | p4runtime_pb2.Update] = field(default_factory=list)


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` as protobuf reads it: its low 64 bits (a field of 32 bits
    then keeps the low 32 of those, :func:`_uint32`, :func:`_signed32`)."""
    byte = buf[pos]
    if byte < 0x80:
        return byte, pos + 1
    result = byte & 0x7F
    shift = 7
    pos += 1
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & _UINT64, pos
        shift += 7
        if shift > 63:
            raise NotFastPath("varint longer than 10 bytes")


def _uint32(value: int) -> int:
    return value & _UINT32


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >> 63 else value


def _signed32(value: int) -> int:
    """An int32 or enum field's value, from the 64 bits of its varint."""
    value &= _UINT32
    return value - (1 << 32) if value >> 31 else value


def _tag(buf: bytes, pos: int) -> tuple[int, int, int]:
    key, pos = _varint(buf, pos)
    return key >> 3, key & 7, pos


def _check_end(pos: int, end: int) -> None:
    """A varint that ran past its message's end means malformed input: protobuf decides."""
    if pos != end:
        raise NotFastPath("field runs past the end of its message")


def _span(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Start and end of a length-delimited field whose length starts at ``pos``."""
    length, pos = _varint(buf, pos)
    stop = pos + length
    if stop > end:
        raise NotFastPath("length past the end of the message")
    return pos, stop


def parse_message(message_type: type[_M], data: bytes) -> _M:
    """``message_type.FromString`` that fails on bad input with DecodeError only.

    Pure-Python protobuf raises UnicodeDecodeError for a string that is not UTF-8 and
    RecursionError for deeply nested groups; both are the client's fault, not ours.
    """
    try:
        return message_type.FromString(data)
    except UnicodeDecodeError as error:
        raise DecodeError(f"a string field is not valid UTF-8 ({error})") from None
    except RecursionError:
        raise DecodeError(f"{message_type.DESCRIPTOR.name} is nested too deeply") from None


@dataclass(slots=True)
class RequestHeader:
    """Who a WriteRequest or SetForwardingPipelineConfigRequest claims to come from."""

    device_id: int = 0
    role: str = ""
    election_id: int | None = None


def first_field_number(buf: bytes) -> int | None:
    """The field number of the first field in ``buf`` (None when it cannot be read): what
    a message holds, by a glance rather than a parse."""
    try:
        number, _, _ = _tag(buf, 0)
    except (IndexError, NotFastPath):
        return None
    return number


class TooManyUpdates(Exception):
    """A WriteRequest holds more updates than the server takes in one request."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} updates")
        self.limit = limit


def request_header(buf: bytes, max_updates: int | None = None) -> RequestHeader:
    """The device id, role and election id of a WriteRequest or a
    SetForwardingPipelineConfigRequest (the two number them alike: 1, 6 and 3), read
    without parsing the updates or the pipeline, so that a client that may not write is
    refused before its request costs a full parse. Read as protobuf would: the last of
    repeated values wins, repeated election ids merge field by field, a field of an
    unexpected wire type is an unknown field, and unknown fields (groups too) are
    skipped. Raises DecodeError for bytes that are no valid message: protobuf would
    refuse them too, after the full parse. With ``max_updates`` (a WriteRequest), raises
    TooManyUpdates once it has passed more updates (field 4) than that, before the rest:
    a request of millions of tiny updates must not buy a scan of all of them."""
    try:
        header = RequestHeader()
        high = low = 0
        updates = 0
        pos, end = 0, len(buf)
        while pos < end:
            number, wire, pos = _tag(buf, pos)
            if wire == _LENGTH_DELIMITED and number == 4 and max_updates is not None:
                updates += 1
                if updates > max_updates:
                    raise TooManyUpdates(max_updates)
                _, pos = _span(buf, pos, end)
            elif wire == _VARINT and number == 1:
                header.device_id, pos = _varint(buf, pos)
            elif wire == _LENGTH_DELIMITED and number in (3, 6):
                start, pos = _span(buf, pos, end)
                if number == 6:
                    try:
                        header.role = buf[start:pos].decode("utf-8")
                    except UnicodeDecodeError:
                        raise DecodeError("the role is not valid UTF-8") from None
                else:
                    high, low = _merge_uint128(buf, start, pos, high, low, lenient=True)
                    header.election_id = (high << 64) | low
            else:
                pos = _skip_field(buf, pos, end, number, wire)
        _check_end(pos, end)
        return header
    except IndexError:
        raise DecodeError("the request is cut short") from None
    except NotFastPath as error:
        raise DecodeError(str(error)) from None


MAX_GROUP_DEPTH = 100
"""Unknown groups nested deeper are no valid message here: protobuf's C++ parser (BMv2's)
stops at this depth, its Python one runs out of stack a few hundred levels down."""


def _skip_field(buf: bytes, pos: int, end: int, number: int, wire: int) -> int:
    """The position after an unknown field whose tag ends at ``pos``. A group is skipped
    to its end tag, nested groups too (up to :data:`MAX_GROUP_DEPTH`), without
    recursion."""
    depth = 0  # groups open
    while True:
        if number == 0:
            raise NotFastPath("field number 0")
        if wire == _VARINT:
            _, pos = _varint(buf, pos)
        elif wire == _LENGTH_DELIMITED:
            _, pos = _span(buf, pos, end)
        elif wire == _FIXED64:
            pos += 8
        elif wire == _FIXED32:
            pos += 4
        elif wire == _START_GROUP:
            if depth == MAX_GROUP_DEPTH:
                raise NotFastPath("groups nested too deeply")
            depth += 1
        elif wire == _END_GROUP:
            # Any end tag closes the innermost group, as protobuf's Python parser has it.
            if depth == 0:
                raise NotFastPath("group end without its start")
            depth -= 1
        else:
            raise NotFastPath(f"wire type {wire}")
        if pos > end:
            raise NotFastPath("field runs past the end of its message")
        if depth == 0:
            return pos
        if pos >= end:
            raise NotFastPath("group without its end")
        number, wire, pos = _tag(buf, pos)


def _merge_uint128(
    buf: bytes, pos: int, end: int, high: int, low: int, lenient: bool = False
) -> tuple[int, int]:
    """A Uint128's (high, low) merged into ``high`` and ``low``. Unusual content (an
    unknown field, a wire type not expected) raises NotFastPath, or with ``lenient`` is
    skipped as protobuf skips it."""
    while pos < end:
        number, wire, pos = _tag(buf, pos)
        if wire != _VARINT or number not in (1, 2):
            if not lenient:
                raise NotFastPath("Uint128 field")
            pos = _skip_field(buf, pos, end, number, wire)
            continue
        value, pos = _varint(buf, pos)
        if number == 1:
            high = value
        else:
            low = value
    _check_end(pos, end)
    return high, low


def decode_write_request(data: bytes) -> WriteBatch:
    """Split a WriteRequest into its header and raw updates; protobuf when unusual.

    Raises DecodeError for bytes that are no valid WriteRequest.
    """
    try:
        return _decode_write_request(data)
    except (NotFastPath, IndexError):
        request = parse_message(p4runtime_pb2.WriteRequest, data)
        election = None
        if request.HasField("election_id"):
            election = (request.election_id.high << 64) | request.election_id.low
        return WriteBatch(
            request.device_id, election, request.role, request.atomicity, list(request.updates)
        )


def _decode_write_request(buf: bytes) -> WriteBatch:
    batch = WriteBatch()
    pos, end = 0, len(buf)
    seen: set[int] = set()
    while pos < end:
        number, wire, pos = _tag(buf, pos)
        if number == 4 and wire == _LENGTH_DELIMITED:
            start, pos = _span(buf, pos, end)
            batch.updates.append(buf[start:pos])
            continue
        if number in seen:
            raise NotFastPath("repeated singular field")
        seen.add(number)
        if number == 1 and wire == _VARINT:
            batch.device_id, pos = _varint(buf, pos)
        elif number == 5 and wire == _VARINT:
            atomicity, pos = _varint(buf, pos)
            batch.atomicity = _signed32(atomicity)
        elif number == 6 and wire == _LENGTH_DELIMITED:
            start, pos = _span(buf, pos, end)
            try:
                batch.role = buf[start:pos].decode("utf-8")
            except UnicodeDecodeError:
                raise DecodeError("WriteRequest.role is not valid UTF-8") from None
        elif number == 3 and wire == _LENGTH_DELIMITED:
            start, pos = _span(buf, pos, end)
            batch.election_id = _decode_uint128(buf, start, pos)
        else:
            raise NotFastPath(f"WriteRequest field {number}")
    _check_end(pos, end)
    return batch


def _decode_uint128(buf: bytes, pos: int, end: int) -> int:
    high, low = _merge_uint128(buf, pos, end, 0, 0)
    return (high << 64) | low


def decode_table_update(buf: bytes) -> tuple[int, TableEntryData] | None:
    """(update type, entry) for a table-entry Update, None to leave it to protobuf."""
    try:
        return _decode_table_update(buf)
    except (NotFastPath, IndexError, UnicodeDecodeError):
        return None


def _decode_table_update(buf: bytes) -> tuple[int, TableEntryData]:
    end = len(buf)
    # The usual layout, read inline: type (one byte), then an entity holding nothing but
    # the table entry, both lengths below 128 and reaching exactly to the end.
    if (
        end > 6
        and buf[0] == 0x08
        and buf[1] < 0x80
        and buf[2] == 0x12
        and buf[3] == end - 4
        and buf[4] == 0x12
        and buf[5] == end - 6
        and end - 4 < 0x80  # one-byte lengths: 0x80 and above start a longer varint
    ):
        return buf[1], _decode_table_entry(buf, 6, end)
    update_type = 0
    entity: tuple[int, int] | None = None
    pos = 0
    while pos < end:
        number, wire, pos = _tag(buf, pos)
        if number == 1 and wire == _VARINT:
            value, pos = _varint(buf, pos)
            update_type = _signed32(value)
        elif number == 2 and wire == _LENGTH_DELIMITED and entity is None:
            entity = _span(buf, pos, end)
            pos = entity[1]
        else:
            raise NotFastPath(f"Update field {number}")
    _check_end(pos, end)
    if entity is None:
        raise NotFastPath("no entity")
    pos, end = entity
    if pos == end:
        raise NotFastPath("empty entity")
    number, wire, pos = _tag(buf, pos)
    if number != 2 or wire != _LENGTH_DELIMITED:
        raise NotFastPath("not a table entry")
    start, stop = _span(buf, pos, end)
    if stop != end:
        raise NotFastPath("more than one entity field")
    return update_type, _decode_table_entry(buf, start, stop)


def _decode_table_entry(buf: bytes, pos: int, end: int) -> TableEntryData:
    # Hot path: tags and lengths below 128 (nearly all of them) are read inline.
    entry = TableEntryData()
    seen = 0  # bit n set: singular field n was read
    while pos < end:
        key = buf[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == _LENGTH_DELIMITED:
            length = buf[pos]
            if length < 0x80:
                pos += 1
            else:
                length, pos = _varint(buf, pos)
            start, pos = pos, pos + length
            if pos > end:
                raise NotFastPath("length past the end of the message")
            if number == 2:
                entry.matches.append(_decode_field_match(buf, start, pos))
                continue
        if number > 13:
            raise NotFastPath(f"TableEntry field {number}")
        if seen >> number & 1:
            raise NotFastPath("repeated singular field")
        seen |= 1 << number
        if wire == _VARINT:
            value, pos = _varint(buf, pos)
            if number == 1:
                entry.table_id = _uint32(value)
            elif number == 4:
                entry.priority = _signed32(value)
            elif number == 5:
                entry.controller_metadata = value
            elif number == 8:
                entry.is_default_action = bool(value)
            elif number == 9:
                entry.idle_timeout_ns = _signed64(value)
            elif number == 13:
                entry.is_const = bool(value)
            else:
                raise NotFastPath(f"TableEntry field {number}")
        elif wire == _LENGTH_DELIMITED:
            if number == 3:
                _decode_table_action(buf, start, pos, entry)
            elif number == 11:
                entry.metadata = buf[start:pos]
            elif number == 7:
                entry.counter = _decode_counter_data(buf, start, pos)
            elif number in (6, 12):
                entry.has_meter = True
            else:
                raise NotFastPath(f"TableEntry field {number}")
        else:
            raise NotFastPath(f"wire type {wire}")
    _check_end(pos, end)
    return entry


_MATCH_KINDS = {2: "exact", 3: "ternary", 4: "lpm", 6: "range", 7: "optional"}


def _decode_field_match(buf: bytes, pos: int, end: int) -> MatchData:
    # The common shape, ``field_id`` then an exact value of < 126 bytes, is read inline.
    if end - pos >= 5 and buf[pos] == 0x08 and buf[pos + 1] < 0x80 and buf[pos + 2] == 0x12:
        length = buf[pos + 3]  # below 0x80 (then so is the value's): a one-byte varint
        if (
            length < 0x80
            and buf[pos + 4] == 0x0A
            and length == buf[pos + 5] + 2
            and pos + 4 + length == end
        ):
            return MatchData(buf[pos + 1], "exact", buf[pos + 6 : end])
    match = MatchData(0, None)
    seen_kind = False
    while pos < end:
        key = buf[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 1 and wire == _VARINT:
            field_id, pos = _varint(buf, pos)
            match.field_id = _uint32(field_id)
        elif wire == _LENGTH_DELIMITED and number in _MATCH_KINDS and not seen_kind:
            seen_kind = True
            match.kind = _MATCH_KINDS[number]
            start, pos = _span(buf, pos, end)
            _decode_match_value(buf, start, pos, match)
        else:
            raise NotFastPath(f"FieldMatch field {number}")
    _check_end(pos, end)
    return match


def _decode_match_value(buf: bytes, pos: int, end: int, match: MatchData) -> None:
    lpm = match.kind == "lpm"
    while pos < end:
        key = buf[pos]
        pos += 1
        if key == 0x0A:  # field 1, length-delimited: the value (or low bound)
            length = buf[pos]
            if length < 0x80:
                pos += 1
            else:
                length, pos = _varint(buf, pos)
            match.value = buf[pos : pos + length]
            pos += length
        elif key == 0x10 and lpm:  # field 2, varint: the prefix length
            value, pos = _varint(buf, pos)
            match.prefix_len = _signed32(value)
        elif key == 0x12 and not lpm:  # field 2, length-delimited: mask (or high bound)
            start, pos = _span(buf, pos, end)
            match.second = buf[start:pos]
        else:
            raise NotFastPath(f"match value key {key}")
    _check_end(pos, end)


def _decode_table_action(buf: bytes, pos: int, end: int, entry: TableEntryData) -> None:
    entry.has_action = True
    if pos == end:
        return  # set, but none of the oneof: the validator reports it
    number, wire, pos = _tag(buf, pos)
    if number != 1 or wire != _LENGTH_DELIMITED:
        raise NotFastPath("TableAction other than a direct action")
    start, stop = _span(buf, pos, end)
    if stop != end:
        raise NotFastPath("more than one TableAction field")
    entry.action_kind = "action"
    pos = start
    while pos < stop:
        key = buf[pos]
        pos += 1
        if key == 0x08:  # field 1, varint: action id
            action_id, pos = _varint(buf, pos)
            entry.action_id = _uint32(action_id)
        elif key == 0x22:  # field 4, length-delimited: a parameter
            # Usual shape, read inline: param id (< 128) then a value of < 126 bytes.
            length = buf[pos]
            if (
                4 <= length < 0x80
                and pos + 1 + length <= stop
                and buf[pos + 1] == 0x10
                and buf[pos + 2] < 0x80
                and buf[pos + 3] == 0x1A
                and buf[pos + 4] == length - 4
            ):
                pos += 1 + length
                entry.params.append((buf[pos - length + 1], buf[pos - length + 4 : pos]))
                continue
            param_start, pos = _span(buf, pos, stop)
            entry.params.append(_decode_param(buf, param_start, pos))
        else:
            raise NotFastPath(f"Action key {key}")
    _check_end(pos, stop)


def _decode_param(buf: bytes, pos: int, end: int) -> tuple[int, bytes]:
    param_id, value = 0, b""
    while pos < end:
        key = buf[pos]
        pos += 1
        if key == 0x10:  # field 2, varint: param id
            number, pos = _varint(buf, pos)
            param_id = _uint32(number)
        elif key == 0x1A:  # field 3, length-delimited: the value
            start, pos = _span(buf, pos, end)
            value = buf[start:pos]
        else:
            raise NotFastPath(f"Param key {key}")
    _check_end(pos, end)
    return param_id, value


def _decode_counter_data(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    byte_count = packet_count = 0
    while pos < end:
        number, wire, pos = _tag(buf, pos)
        if wire != _VARINT or number not in (1, 2):
            raise NotFastPath("CounterData field")
        value, pos = _varint(buf, pos)
        if number == 1:
            byte_count = _signed64(value)
        else:
            packet_count = _signed64(value)
    _check_end(pos, end)
    return byte_count, packet_count


def table_entry_data(entry: p4runtime_pb2.TableEntry) -> TableEntryData:
    """The same structure from a parsed protobuf TableEntry (the general path)."""
    matches = []
    for field_match in entry.match:
        kind = field_match.WhichOneof("field_match_type")
        match = MatchData(field_match.field_id, kind)
        if kind == "exact":
            match.value = field_match.exact.value
        elif kind == "lpm":
            match.value, match.prefix_len = field_match.lpm.value, field_match.lpm.prefix_len
        elif kind == "ternary":
            match.value, match.second = field_match.ternary.value, field_match.ternary.mask
        elif kind == "range":
            match.value, match.second = field_match.range.low, field_match.range.high
        elif kind == "optional":
            match.value = field_match.optional.value
        matches.append(match)
    data = TableEntryData(
        table_id=entry.table_id,
        matches=matches,
        priority=entry.priority,
        controller_metadata=entry.controller_metadata,
        metadata=entry.metadata,
        is_default_action=entry.is_default_action,
        is_const=entry.is_const,
        has_meter=entry.HasField("meter_config") or entry.HasField("meter_counter_data"),
        idle_timeout_ns=entry.idle_timeout_ns,
    )
    if entry.HasField("action"):
        data.has_action = True
        data.action_kind = entry.action.WhichOneof("type")
        if data.action_kind == "action":
            data.action_id = entry.action.action.action_id
            data.params = [(p.param_id, p.value) for p in entry.action.action.params]
    if entry.HasField("counter_data"):
        data.counter = (entry.counter_data.byte_count, entry.counter_data.packet_count)
    return data
