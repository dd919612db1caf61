"""Validate protobuf table entries against the P4Info and translate them both ways.

Requests arrive with P4Runtime binary strings; the runtime state works on integers.
Everything a request can get wrong is checked here, with the status code the spec
assigns, so the runtime state only ever sees well-formed keys and actions. Replies are
built back with canonical binary strings (read-write symmetry).
"""

from __future__ import annotations

from dataclasses import dataclass

from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from softswitch.p4rt.bytestrings import decode_unsigned, encode_unsigned
from softswitch.p4rt.p4info_index import (
    ActionInfo,
    MatchFieldInfo,
    P4InfoIndex,
    TableInfo,
)
from softswitch.p4rt.status import invalid, out_of_range, permission_denied, unimplemented
from softswitch.p4rt.wire import MatchData, TableEntryData
from softswitch.runtime import (
    ActionCall,
    ExactMatch,
    FieldMatch,
    LpmMatch,
    OptionalMatch,
    RangeMatch,
    TernaryMatch,
)


@dataclass(frozen=True, slots=True)
class ParsedKey:
    """What identifies an entry in its table: its matches (don't-cares omitted) and priority."""

    table_id: int
    matches: dict[int, FieldMatch]
    priority: int


def table_info(index: P4InfoIndex, table_id: int) -> TableInfo:
    table = index.tables.get(table_id)
    if table is None:
        raise invalid(f"unknown table id {table_id}")
    if table.indirect:
        raise unimplemented(f"table '{table.name}' uses an action profile, not supported here")
    return table


def parse_key(table: TableInfo, entry: TableEntryData) -> ParsedKey:
    """The validated key of ``entry`` (INVALID_ARGUMENT / OUT_OF_RANGE when malformed)."""
    matches: dict[int, FieldMatch] = {}
    for field_match in entry.matches:
        info = table.match_fields.get(field_match.field_id)
        if info is None:
            raise invalid(f"table '{table.name}' has no match field id {field_match.field_id}")
        if field_match.field_id in matches:
            raise invalid(f"match field '{info.name}' appears twice")
        raw = field_match.value
        if field_match.kind == "exact" == info.kind_name and raw:
            # The common case inline; anything doubtful goes through _parse_field.
            value = int.from_bytes(raw, "big")
            if not value >> info.bitwidth:
                matches[field_match.field_id] = ExactMatch(value)
                continue
        matches[field_match.field_id] = _parse_field(info, field_match)
    for field_id in table.exact_field_ids:
        if field_id not in matches:
            raise invalid(f"exact match field '{table.match_fields[field_id].name}' is missing")
    if table.needs_priority:
        if entry.priority <= 0:
            raise invalid(f"table '{table.name}' needs a priority > 0 (ternary/range/optional)")
    elif entry.priority != 0:
        raise invalid(
            f"table '{table.name}' has no ternary/range/optional field: priority must be 0"
        )
    return ParsedKey(table.table_id, matches, entry.priority)


def _parse_field(info: MatchFieldInfo, field_match: MatchData) -> FieldMatch:
    kind = field_match.kind
    what = info.label
    expected = info.kind_name
    if kind != expected:
        raise invalid(f"{what} is {expected}, request gives {kind or 'nothing'}")
    width = info.bitwidth
    if kind == "exact":
        return ExactMatch(decode_unsigned(field_match.value, width, what))
    if kind == "lpm":
        prefix_len = field_match.prefix_len
        if not 0 < prefix_len <= width:
            raise invalid(f"{what}: prefix length {prefix_len} not in 1..{width} (omit for /0)")
        value = decode_unsigned(field_match.value, width, what)
        host_mask = (1 << (width - prefix_len)) - 1
        if value & host_mask:
            raise invalid(f"{what}: bits past the /{prefix_len} prefix must be zero")
        return LpmMatch(value, prefix_len)
    if kind == "ternary":
        value = decode_unsigned(field_match.value, width, what)
        mask = decode_unsigned(field_match.second, width, f"{what} mask")
        if mask == 0:
            raise invalid(f"{what}: an all-zero mask is a don't-care; omit the field")
        if value & ~mask:
            raise invalid(f"{what}: value has bits set outside the mask")
        return TernaryMatch(value, mask)
    if kind == "range":
        low = decode_unsigned(field_match.value, width, f"{what} low")
        high = decode_unsigned(field_match.second, width, f"{what} high")
        if low > high:
            raise invalid(f"{what}: low bound {low} above high bound {high}")
        if low == 0 and high == (1 << width) - 1:
            raise invalid(f"{what}: the full range is a don't-care; omit the field")
        return RangeMatch(low, high)
    return OptionalMatch(decode_unsigned(field_match.value, width, what))


def parse_action(
    index: P4InfoIndex, table: TableInfo, entry: TableEntryData, *, default_entry: bool
) -> ActionCall:
    """The validated action of an entry; scope violations are PERMISSION_DENIED (spec §9.1.2)."""
    if entry.action_kind != "action":
        raise invalid(
            f"table '{table.name}' is a direct table: give an action, not {entry.action_kind}"
        )
    ref = table.action_refs.get(entry.action_id)
    if ref is None:
        raise invalid(f"action id {entry.action_id} is not an action of table '{table.name}'")
    info: ActionInfo = index.actions[entry.action_id]
    if default_entry and ref.scope == p4info_pb2.ActionRef.TABLE_ONLY:
        raise permission_denied(f"action '{info.name}' may not be the default of '{table.name}'")
    if not default_entry and ref.scope == p4info_pb2.ActionRef.DEFAULT_ONLY:
        raise permission_denied(f"action '{info.name}' may only be the default of '{table.name}'")
    params: dict[int, int] = {}
    for param_id, raw in entry.params:
        param_info = info.params.get(param_id)
        if param_info is None:
            raise invalid(f"action '{info.name}' has no parameter id {param_id}")
        if param_id in params:
            raise invalid(f"parameter '{param_info.name}' of '{info.name}' appears twice")
        value = int.from_bytes(raw, "big")
        if not raw or value >> param_info.bitwidth:
            # Empty or too wide: decode_unsigned raises the OUT_OF_RANGE the spec asks for.
            value = decode_unsigned(raw, param_info.bitwidth, param_info.label)
        params[param_id] = value
    if len(params) != len(info.params):
        missing = [p.name for p in info.params.values() if p.param_id not in params]
        raise invalid(f"action '{info.name}' is missing parameter(s) {', '.join(missing)}")
    # The runtime takes arguments in P4Info parameter order.
    return ActionCall(entry.action_id, tuple(params[pid] for pid in info.params))


def key_to_proto(
    table_id: int,
    matches: dict[int, FieldMatch],
    priority: int,
    entry: p4runtime_pb2.TableEntry,
) -> None:
    """Fill ``entry``'s table id, matches (by field id) and priority with canonical values."""
    entry.table_id = table_id
    entry.priority = priority
    for field_id in sorted(matches):
        match = matches[field_id]
        out = entry.match.add(field_id=field_id)
        if isinstance(match, ExactMatch):
            out.exact.value = encode_unsigned(match.value)
        elif isinstance(match, LpmMatch):
            out.lpm.value = encode_unsigned(match.value)
            out.lpm.prefix_len = match.prefix_len
        elif isinstance(match, TernaryMatch):
            out.ternary.value = encode_unsigned(match.value)
            out.ternary.mask = encode_unsigned(match.mask)
        elif isinstance(match, RangeMatch):
            out.range.low = encode_unsigned(match.low)
            out.range.high = encode_unsigned(match.high)
        else:
            out.optional.value = encode_unsigned(match.value)


def array_index(size: int, entry_index: int, name: str) -> int:
    """Check an index into an array of ``size`` cells (negative: INVALID_ARGUMENT)."""
    if entry_index < 0:
        raise invalid(f"{name}: negative index {entry_index}")
    if entry_index >= size:
        raise out_of_range(f"{name}: index {entry_index} is not below its size {size}")
    return entry_index
