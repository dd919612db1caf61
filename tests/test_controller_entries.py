"""Desired classification entries, diffing, make-before-break ordering, fallback."""

from __future__ import annotations

import ipaddress

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from control.entries import (
    ActionCall,
    EntryKey,
    EntryMap,
    Exact,
    Lpm,
    PipelineLayout,
    batches,
    canonical_map,
    coflow_entry,
    coflow_tag,
    diff,
    forwarding_entries,
    from_table_entry,
    plan_classes,
    plan_writes,
    stage_entry,
    to_table_entry,
)
from control.model import CoflowKey, StageKey
from control.p4runtime_client import P4NameError, P4Names, decode_uint, encode_uint
from control.topology import Route

LAYOUT = PipelineLayout()

# A P4Info with the layout's tables, written by hand so these tests stand alone.
P4INFO_TEXT = """
tables {
  preamble { id: 1 name: "MyIngress.ipv4_lpm" alias: "ipv4_lpm" }
  match_fields { id: 1 name: "hdr.ipv4.dstAddr" bitwidth: 32 match_type: LPM }
  action_refs { id: 11 }
  size: 1024
}
tables {
  preamble { id: 2 name: "MyIngress.stage_class" alias: "stage_class" }
  match_fields { id: 1 name: "hdr.beamer_tag.experiment_id" bitwidth: 16 match_type: EXACT }
  match_fields { id: 2 name: "hdr.beamer_tag.stage_id" bitwidth: 16 match_type: EXACT }
  action_refs { id: 12 }
  direct_resource_ids: 31
  size: 8
}
tables {
  preamble { id: 3 name: "MyIngress.coflow_class" alias: "coflow_class" }
  match_fields { id: 1 name: "hdr.beamer_tag.experiment_id" bitwidth: 16 match_type: EXACT }
  match_fields { id: 2 name: "hdr.beamer_tag.stage_id" bitwidth: 16 match_type: EXACT }
  match_fields { id: 3 name: "hdr.beamer_tag.coflow_id" bitwidth: 32 match_type: EXACT }
  action_refs { id: 12 }
  size: 4
}
actions {
  preamble { id: 11 name: "MyIngress.ipv4_forward" alias: "ipv4_forward" }
  params { id: 1 name: "dstAddr" bitwidth: 48 }
  params { id: 2 name: "port" bitwidth: 9 }
}
actions {
  preamble { id: 12 name: "MyIngress.set_class" alias: "set_class" }
  params { id: 1 name: "class_id" bitwidth: 3 }
}
direct_counters {
  preamble { id: 31 name: "MyIngress.stage_bytes" }
  spec { unit: BOTH }
  direct_table_id: 2
}
"""


def _names() -> P4Names:
    return P4Names.build(text_format.Parse(P4INFO_TEXT, p4info_pb2.P4Info()))


def _c(e: int, s: int, t: int, i: int = 0) -> CoflowKey:
    return CoflowKey(e, s, t, i)


def test_canonical_bytes_are_shortest_and_checked() -> None:
    assert encode_uint(0, 16) == b"\x00"
    assert encode_uint(255, 16) == b"\xff"
    assert encode_uint(256, 16) == b"\x01\x00"
    assert encode_uint(511, 9) == b"\x01\xff"
    with pytest.raises(ValueError, match="bit<9>"):
        encode_uint(512, 9)
    with pytest.raises(ValueError):
        encode_uint(-1, 8)
    assert decode_uint(b"\x00\x00\x01\x00") == 256


def test_names_resolve_full_names_and_aliases() -> None:
    names = _names()
    assert names.table("stage_class").id == 2
    assert names.table("MyIngress.coflow_class").size == 4
    assert names.table("stage_class").direct_counter_id == 31
    assert names.action("set_class").param("class_id").bitwidth == 3
    assert names.counter("stage_bytes").direct_table_id == 2
    with pytest.raises(P4NameError, match="table 'nope' is not in the P4Info"):
        names.table("nope")
    with pytest.raises(P4NameError, match="no match field 'x'"):
        names.table("ipv4_lpm").match_field("x")


def test_coflow_tag_packs_trial_and_iteration() -> None:
    assert coflow_tag(_c(1, 2, 3, 4)) == (3 << 16) | 4
    assert coflow_tag(_c(1, 2, 0x1234, 0x10005)) == 0x12340005


def test_one_class_per_stage_gives_stage_entries_only() -> None:
    ranked = [(_c(1, 0, t), 7) for t in range(3)] + [(_c(2, 0, t), 6) for t in range(2)]
    plan = plan_classes(ranked, LAYOUT, coflow_table_size=4, stage_table_size=8)
    assert plan.stage_classes == {StageKey(1, 0): 7, StageKey(2, 0): 6}
    assert plan.overrides == {}
    assert dict(
        [stage_entry(LAYOUT, StageKey(1, 0), 7), stage_entry(LAYOUT, StageKey(2, 0), 6)]
    ) == (plan.entries)


def test_mixed_stage_gets_majority_stage_entry_and_coflow_overrides() -> None:
    ranked = [(_c(1, 0, 0), 7), (_c(1, 0, 1), 5), (_c(1, 0, 2), 5)]
    plan = plan_classes(ranked, LAYOUT, coflow_table_size=4, stage_table_size=8)
    assert plan.stage_classes == {StageKey(1, 0): 5}
    assert plan.overrides == {_c(1, 0, 0): 7}
    key, action = coflow_entry(LAYOUT, _c(1, 0, 0), 7)
    assert plan.entries[key] == action
    assert len(plan.entries) == 2


def test_tie_goes_to_the_more_urgent_class() -> None:
    ranked = [(_c(1, 0, 0), 4), (_c(1, 0, 1), 3)]
    plan = plan_classes(ranked, LAYOUT, coflow_table_size=4, stage_table_size=8)
    assert plan.stage_classes[StageKey(1, 0)] == 4
    assert plan.overrides == {_c(1, 0, 1): 3}


def test_fallback_to_stage_level_when_coflow_table_is_too_small() -> None:
    # Stage (1,0) needs 2 overrides, stage (2,0) needs 3; the coflow table holds 4.
    ranked = [
        (_c(1, 0, 0), 7),
        (_c(1, 0, 1), 7),
        (_c(1, 0, 2), 6),
        (_c(1, 0, 3), 6),
        (_c(1, 0, 4), 6),
        (_c(2, 0, 0), 5),
        (_c(2, 0, 1), 4),
        (_c(2, 0, 2), 4),
        (_c(2, 0, 3), 3),
        (_c(2, 0, 4), 3),
        (_c(2, 0, 5), 3),
    ]
    plan = plan_classes(ranked, LAYOUT, coflow_table_size=4, stage_table_size=8)
    assert plan.overrides == {_c(1, 0, 0): 7, _c(1, 0, 1): 7}
    assert plan.fallback_stages == (StageKey(2, 0),)
    assert plan.stage_classes[StageKey(2, 0)] == 3
    coflow_keys = [k for k in plan.entries if k.table == LAYOUT.coflow_table]
    assert len(coflow_keys) == 2


def test_stage_table_overflow_drops_the_least_urgent_stages() -> None:
    ranked = [(_c(e, 0, 0), 7 - e) for e in range(4)]
    plan = plan_classes(ranked, LAYOUT, coflow_table_size=4, stage_table_size=3)
    assert list(plan.stage_classes) == [StageKey(0, 0), StageKey(1, 0), StageKey(2, 0)]
    assert plan.dropped_stages == (StageKey(3, 0),)


def test_idle_stages_keep_their_class() -> None:
    ranked = [(_c(1, 0, 0), 7)]
    plan = plan_classes(
        ranked, LAYOUT, 4, 8, idle_stage_classes={StageKey(2, 1): 3, StageKey(1, 0): 0}
    )
    assert plan.stage_classes == {StageKey(1, 0): 7, StageKey(2, 1): 3}


def _entry(table: str, value: int, klass: int) -> tuple[EntryKey, ActionCall]:
    return EntryKey(table, (("f", Exact(value)),)), ActionCall("a", (("class_id", klass),))


def test_diff_sends_only_changes() -> None:
    installed: EntryMap = dict([_entry("t", 1, 1), _entry("t", 2, 2), _entry("t", 3, 3)])
    desired: EntryMap = dict([_entry("t", 1, 1), _entry("t", 2, 5), _entry("t", 4, 4)])
    changes = diff(desired, installed)
    assert list(changes.inserts) == [_entry("t", 4, 4)[0]]
    assert changes.modifies == dict([_entry("t", 2, 5)])
    assert list(changes.deletes) == [_entry("t", 3, 3)[0]]
    assert diff(desired, desired).empty


def test_make_before_break_inserts_and_modifies_before_deletes() -> None:
    installed: EntryMap = dict([_entry("t", 1, 1), _entry("t", 2, 2)])
    desired: EntryMap = dict([_entry("t", 1, 6), _entry("t", 3, 3)])
    steps = plan_writes(diff(desired, installed), {"t": 2}, {"t": 100})
    assert [s.kind for s in steps] == ["make", "break"]
    make_kinds = sorted(kind for kind, _, _ in steps[0].updates)
    assert make_kinds == sorted([p4runtime_pb2.Update.INSERT, p4runtime_pb2.Update.MODIFY])
    assert [kind for kind, _, _ in steps[1].updates] == [p4runtime_pb2.Update.DELETE]
    # A live key is modified in place, never deleted and re-inserted.
    live = _entry("t", 1, 6)[0]
    live_updates = [kind for step in steps for kind, key, _ in step.updates if key == live]
    assert live_updates == [p4runtime_pb2.Update.MODIFY]


def test_full_table_deletes_first_only_in_that_table() -> None:
    installed: EntryMap = dict([_entry("full", 1, 1), _entry("full", 2, 1), _entry("roomy", 1, 1)])
    desired: EntryMap = dict([_entry("full", 3, 1), _entry("full", 4, 1), _entry("roomy", 2, 1)])
    steps = plan_writes(diff(desired, installed), {"full": 2, "roomy": 1}, {"full": 2, "roomy": 9})
    assert [s.kind for s in steps] == ["make-room", "make", "break"]
    assert {key.table for _, key, _ in steps[0].updates} == {"full"}
    assert {key.table for _, key, _ in steps[2].updates} == {"roomy"}


def test_protobuf_round_trip_and_padding_tolerance() -> None:
    names = _names()
    routes = [
        Route(ipaddress.IPv4Network("10.0.0.2/32"), 2, "02:00:00:00:00:02", "h2"),
    ]
    entries = forwarding_entries(LAYOUT, routes)
    entries.update(
        [coflow_entry(LAYOUT, _c(1, 2, 3, 4), 6), stage_entry(LAYOUT, StageKey(1, 2), 0)]
    )
    entries = canonical_map(entries, names)
    for key, action in entries.items():
        message = to_table_entry(key, action, names)
        assert from_table_entry(message, names) == (key, action)
    # A server may answer with padded byte strings; the decoded entry is the same.
    key, action = stage_entry(LAYOUT, StageKey(1, 2), 0)
    message = to_table_entry(key, action, names)
    for match in message.match:
        match.exact.value = match.exact.value.rjust(2, b"\x00")
    assert from_table_entry(message, names) == next(
        (k, a) for k, a in entries.items() if k.table == LAYOUT.stage_table
    )
    lpm_key = next(k for k in entries if k.table == LAYOUT.forward_table)
    assert lpm_key.match == (("hdr.ipv4.dstAddr", Lpm(0x0A000002, 32)),)
    assert entries[lpm_key].params == (("dstAddr", 0x020000000002), ("port", 2))


def test_batches_split_large_steps_and_encode_updates() -> None:
    names = _names()
    desired = canonical_map(dict(stage_entry(LAYOUT, StageKey(e, 0), 1) for e in range(5)), names)
    steps = plan_writes(diff(desired, {}), {}, {})
    rpcs = batches(steps[0], names, limit=2)
    assert [len(r) for r in rpcs] == [2, 2, 1]
    assert all(u.type == p4runtime_pb2.Update.INSERT for r in rpcs for u in r)
    assert rpcs[0][0].entity.table_entry.table_id == 2
