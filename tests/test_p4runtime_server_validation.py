"""The server validates each table write once, against the P4Info, then hands the entry
to the runtime's methods for valid entries, which check nothing again. That is safe only
if everything the server accepts also passes the runtime's own checks, and if the
runtime's integer keys tell entries apart exactly when their matches differ. Both are
checked here on random entries over every match kind."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from softswitch.frontend import CompiledProgram, compile_source
from softswitch.p4rt.entries import ParsedKey, parse_action, parse_key
from softswitch.p4rt.p4info_index import P4InfoIndex, TableInfo
from softswitch.p4rt.status import P4RuntimeError
from softswitch.p4rt.wire import MatchData, TableEntryData
from softswitch.runtime import (
    ActionCall,
    EntryKey,
    ExactMatch,
    FieldMatch,
    InvalidEntryError,
    LpmMatch,
    OptionalMatch,
    RangeMatch,
    RuntimeState,
    TableState,
    TernaryMatch,
)

# Narrow fields so that random values often fit, collide, and sit on the edges.
SHAPES_P4 = """
#include <core.p4>
#include <v1model.p4>
header h_t { bit<4> a; bit<4> b; bit<8> c; bit<8> d; }
struct headers { h_t h; }
struct metadata { bit<8> m; }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    action pair(bit<4> x, bit<8> y) { meta.m = (bit<8>)x + y; }
    action drop() { mark_to_drop(sm); }
    table exact_only {
        key = { hdr.h.a: exact; hdr.h.c: exact; }
        actions = { pair; @defaultonly drop; }
        size = 3;
        default_action = drop();
    }
    table with_lpm {
        key = { hdr.h.a: exact; hdr.h.c: lpm; }
        actions = { pair; @tableonly drop; NoAction; }
    }
    table every_kind {
        key = { hdr.h.a: ternary; hdr.h.b: range; hdr.h.c: optional; hdr.h.d: exact; }
        actions = { pair; drop; NoAction; }
        default_action = drop();
    }
    apply { exact_only.apply(); with_lpm.apply(); every_kind.apply(); }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""

TABLES = ("I.exact_only", "I.with_lpm", "I.every_kind")


@functools.cache
def program() -> CompiledProgram:
    return compile_source(SHAPES_P4, "shapes.p4")


@functools.cache
def index() -> P4InfoIndex:
    return P4InfoIndex.build(program().p4info)


def table_pair(name: str, state: RuntimeState) -> tuple[TableInfo, TableState]:
    table_id = program().table_ids[name]
    return index().tables[table_id], state.table(table_id)


# Mostly values that fit the narrow fields, some that reach past every width (4 and 8
# bits), never an empty string: that is a wire-only mistake the runtime, which takes
# integers, cannot see.
numbers = st.one_of(*[st.integers(0, 15)] * 6, st.integers(0, 0x1FF))


def as_bytes(value: int) -> bytes:
    return value.to_bytes(1 if value < 256 else 2, "big")


@st.composite
def entries(draw: st.DrawFn, table: TableInfo) -> TableEntryData:
    data = TableEntryData(table_id=table.table_id, has_action=True, action_kind="action")
    for info in table.match_fields.values():
        if draw(st.integers(0, 9)) == 0:
            continue  # omitted: a don't-care (or a missing exact field)
        kind = draw(st.sampled_from([info.kind_name] * 18 + ["exact", "ternary"]))
        value, second = draw(numbers), draw(numbers)
        # Each kind's own rules hold more often than not, so both verdicts are common.
        mostly = draw(st.integers(0, 4)) > 0
        if kind == "ternary" and mostly:
            second |= 1 << draw(st.integers(0, 3))  # a non-zero mask
            value &= second
        if kind == "range" and mostly:
            value, second = min(value, second), max(value, second)
        prefix_len = draw(st.integers(1, info.bitwidth) if mostly else st.sampled_from([-1, 0, 9]))
        if kind == "lpm" and draw(st.integers(0, 4)) > 0:
            value &= ~((1 << max(0, info.bitwidth - prefix_len)) - 1)
        match = MatchData(info.field_id, kind, as_bytes(value))
        if kind in ("ternary", "range"):
            match.second = as_bytes(second)
        if kind == "lpm":
            match.prefix_len = prefix_len
        data.matches.append(match)
    data.priority = draw(st.integers(1, 7)) if table.needs_priority else 0
    if draw(st.integers(0, 9)) == 0:
        data.priority = draw(st.sampled_from([0, 3]))
    data.action_id = draw(st.sampled_from(sorted(table.action_refs)))
    for param_id in index().actions[data.action_id].params:
        if draw(st.integers(0, 19)):
            data.params.append((param_id, as_bytes(draw(numbers))))
    return data


def server_verdict(table: TableInfo, data: TableEntryData) -> tuple[ParsedKey, ActionCall] | None:
    """What the server makes of the entry: its key and action, or None when refused."""
    try:
        return parse_key(table, data), parse_action(index(), table, data, default_entry=False)
    except P4RuntimeError:
        return None


def as_integers(data: TableEntryData) -> tuple[dict[int, FieldMatch], ActionCall]:
    """The same entry as a caller of the runtime's own API would give it."""
    matches: dict[int, FieldMatch] = {}
    for match in data.matches:
        value = int.from_bytes(match.value, "big")
        second = int.from_bytes(match.second, "big")
        kinds: dict[str, FieldMatch] = {
            "exact": ExactMatch(value),
            "lpm": LpmMatch(value, match.prefix_len),
            "ternary": TernaryMatch(value, second),
            "range": RangeMatch(value, second),
            "optional": OptionalMatch(value),
        }
        matches[match.field_id] = kinds[str(match.kind)]
    params = dict(data.params)
    order = index().actions[data.action_id].params
    # A missing parameter leaves the call short, which the runtime refuses.
    call = ActionCall(
        data.action_id, tuple(int.from_bytes(params[p], "big") for p in order if p in params)
    )
    return matches, call


def runtime_verdict(
    state: TableState, matches: dict[int, FieldMatch], priority: int, call: ActionCall
) -> EntryKey | None:
    try:
        key = state.check_key(matches, priority)
        state.check_action(call)
    except InvalidEntryError:
        return None
    return key


def full_range(table: TableInfo, matches: dict[int, FieldMatch]) -> bool:
    """A full-width range: refused by the server only (P4Runtime says omit the field)."""
    return any(
        isinstance(m, RangeMatch)
        and m.low == 0
        and m.high == (1 << table.match_fields[f].bitwidth) - 1
        for f, m in matches.items()
    )


@pytest.mark.parametrize("name", TABLES)
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_server_and_runtime_accept_the_same_entries(name: str, data: st.DataObject) -> None:
    state = program().new_runtime_state()
    table, table_state = table_pair(name, state)
    entry = data.draw(entries(table))
    served = server_verdict(table, entry)
    matches, call = as_integers(entry)
    checked = runtime_verdict(table_state, matches, entry.priority, call)
    if served is None:
        assert checked is None or full_range(table, matches)
        return
    key, served_call = served
    assert (key.matches, served_call) == (matches, call)
    assert checked == table_state.key_of(key.matches, key.priority)


@pytest.mark.parametrize("name", TABLES)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_keys_are_equal_exactly_when_matches_and_priorities_are(
    name: str, data: st.DataObject
) -> None:
    table, table_state = table_pair(name, program().new_runtime_state())
    entry = data.draw(entries(table))
    other = data.draw(entries(table))
    kinship = data.draw(st.sampled_from(["unrelated", "same match", "same match, any priority"]))
    if kinship != "unrelated":  # the same match, its fields in another order
        other = TableEntryData(
            table_id=entry.table_id,
            matches=entry.matches[::-1],
            priority=entry.priority if kinship == "same match" else other.priority,
            has_action=True,
            action_kind="action",
            action_id=other.action_id,
            params=other.params,
        )
    first, second = server_verdict(table, entry), server_verdict(table, other)
    if first is None or second is None:
        return
    (a, _), (b, _) = first, second
    same = (a.matches, a.priority) == (b.matches, b.priority)
    key_a = table_state.key_of(a.matches, a.priority)
    assert (key_a == table_state.key_of(b.matches, b.priority)) == same
