"""RuntimeState: P4Runtime write semantics and lookups, on beamer.p4 and features.p4."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from softswitch.frontend import CompiledProgram, compile_file
from softswitch.pipeline import Pipeline
from softswitch.runtime import (
    ActionCall,
    CounterData,
    EntryExistsError,
    EntryNotFoundError,
    ExactMatch,
    FieldMatch,
    ImmutableError,
    InvalidEntryError,
    LpmMatch,
    RuntimeState,
    TableEntry,
    TableFullError,
    TernaryMatch,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def beamer() -> CompiledProgram:
    return compile_file(ROOT / "p4src" / "beamer.p4")


@pytest.fixture
def state(beamer: CompiledProgram) -> RuntimeState:
    return beamer.new_runtime_state()


def ids(beamer: CompiledProgram) -> tuple[int, int, int, int, int]:
    return (
        beamer.table_ids["MyIngress.ipv4_lpm"],
        beamer.table_ids["MyIngress.stage_class"],
        beamer.action_ids["MyIngress.ipv4_forward"],
        beamer.action_ids["MyIngress.set_class"],
        beamer.action_ids["NoAction"],
    )


def route(prefix: int, length: int, port: int, forward: int) -> TableEntry:
    return TableEntry({1: LpmMatch(prefix, length)}, ActionCall(forward, (0x02AA, port)))


def test_insert_duplicate_modify_delete(beamer: CompiledProgram, state: RuntimeState) -> None:
    lpm, _stage, forward, _set_class, _noop = ids(beamer)
    state.insert_entry(lpm, route(0x0A000000, 8, 1, forward))
    with pytest.raises(EntryExistsError):
        state.insert_entry(lpm, route(0x0A000000, 8, 2, forward))
    state.modify_entry(lpm, {1: LpmMatch(0x0A000000, 8)}, 0, ActionCall(forward, (0x02BB, 3)))
    [entry] = state.read_entries(lpm)
    assert entry.action.params == (0x02BB, 3)
    state.delete_entry(lpm, {1: LpmMatch(0x0A000000, 8)}, 0)
    assert state.read_entries(lpm) == []
    with pytest.raises(EntryNotFoundError):
        state.delete_entry(lpm, {1: LpmMatch(0x0A000000, 8)}, 0)
    with pytest.raises(EntryNotFoundError):
        state.modify_entry(lpm, {1: LpmMatch(0x0A000000, 8)}, 0, ActionCall(forward, (1, 1)))


def test_writes_of_valid_entries_share_the_checked_api_state(
    beamer: CompiledProgram, state: RuntimeState
) -> None:
    """The methods for validated entries (the P4Runtime server's) keep the table, its
    lookup structure and the checked API consistent, and still refuse duplicates."""
    lpm, stage, forward, set_class, _noop = ids(beamer)
    table = state.tables[stage]
    matches: dict[int, FieldMatch] = {1: ExactMatch(7), 2: ExactMatch(2)}
    key = table.key_of(matches, 0)
    assert key == table.check_key(dict(reversed(matches.items())), 0)
    entry = TableEntry(matches, ActionCall(set_class, (4,)))
    table.insert_valid(key, entry)
    assert table.lookup((7, 2)) is entry
    assert table.get({1: ExactMatch(7), 2: ExactMatch(2)}, 0) is entry
    with pytest.raises(EntryExistsError):
        table.insert_valid(key, TableEntry(dict(matches), ActionCall(set_class, (5,))))
    with pytest.raises(EntryExistsError):
        state.insert_entry(stage, TableEntry(dict(matches), ActionCall(set_class, (5,))))
    assert table.delete_valid(key) is entry
    assert table.lookup((7, 2)) is None and table.find(key) is None
    with pytest.raises(EntryNotFoundError):
        table.delete_valid(key)
    routes = state.tables[lpm]
    short, long = {1: LpmMatch(0x0A000000, 8)}, {1: LpmMatch(0x0A010000, 16)}
    routes.insert_valid(routes.key_of(short, 0), route(0x0A000000, 8, 1, forward))
    routes.insert_valid(routes.key_of(long, 0), route(0x0A010000, 16, 2, forward))
    assert routes.key_of(short, 0) != routes.key_of(long, 0)
    assert routes.lookup((0x0A01FF01,)).action.params[1] == 2  # type: ignore[union-attr]
    state.delete_entry(lpm, long, 0)
    assert routes.lookup((0x0A01FF01,)).action.params[1] == 1  # type: ignore[union-attr]


def test_lpm_longest_prefix_and_default(beamer: CompiledProgram, state: RuntimeState) -> None:
    lpm, _stage, forward, _set_class, _noop = ids(beamer)
    table = state.tables[lpm]
    state.insert_entry(lpm, route(0x0A000000, 8, 1, forward))
    state.insert_entry(lpm, route(0x0A010000, 16, 2, forward))
    state.insert_entry(lpm, route(0x0A010200, 24, 3, forward))
    assert table.lookup((0x0A010203,)).action.params[1] == 3  # type: ignore[union-attr]
    assert table.lookup((0x0A01FF01,)).action.params[1] == 2  # type: ignore[union-attr]
    assert table.lookup((0x0AFFFFFF,)).action.params[1] == 1  # type: ignore[union-attr]
    assert table.lookup((0x0B000000,)) is None
    state.delete_entry(lpm, {1: LpmMatch(0x0A010000, 16)}, 0)
    assert table.lookup((0x0A01FF01,)).action.params[1] == 1  # type: ignore[union-attr]


def test_value_widths_and_prefix_validity(beamer: CompiledProgram, state: RuntimeState) -> None:
    lpm, stage, forward, set_class, _noop = ids(beamer)
    with pytest.raises(InvalidEntryError, match="bits set beyond its /8"):
        state.insert_entry(lpm, route(0x0A000001, 8, 1, forward))
    with pytest.raises(InvalidEntryError, match="prefix length 33"):
        state.insert_entry(lpm, route(0x0A000000, 33, 1, forward))
    with pytest.raises(InvalidEntryError, match="does not fit in 9 bits"):
        state.insert_entry(lpm, route(0x0A000000, 8, 512, forward))
    with pytest.raises(InvalidEntryError, match="does not fit in 16 bits"):
        state.insert_entry(
            stage,
            TableEntry({1: ExactMatch(1 << 16), 2: ExactMatch(0)}, ActionCall(set_class, (1,))),
        )
    with pytest.raises(InvalidEntryError, match="does not fit in 3 bits"):
        state.insert_entry(
            stage, TableEntry({1: ExactMatch(1), 2: ExactMatch(0)}, ActionCall(set_class, (8,)))
        )
    with pytest.raises(
        InvalidEntryError, match=r"exact field hdr\.beamer_tag\.stage_id needs a value"
    ):
        state.insert_entry(stage, TableEntry({1: ExactMatch(1)}, ActionCall(set_class, (1,))))
    with pytest.raises(InvalidEntryError, match="not an action of this table"):
        state.insert_entry(
            stage, TableEntry({1: ExactMatch(1), 2: ExactMatch(0)}, ActionCall(forward, (1, 1)))
        )
    with pytest.raises(InvalidEntryError, match="take no priority"):
        state.insert_entry(
            stage,
            TableEntry(
                {1: ExactMatch(1), 2: ExactMatch(0)}, ActionCall(set_class, (1,)), priority=5
            ),
        )
    assert state.read_entries(stage) == [] and state.read_entries(lpm) == []


def test_table_full(beamer: CompiledProgram, state: RuntimeState) -> None:
    _lpm, stage, _forward, set_class, _noop = ids(beamer)
    size = state.tables[stage].size
    assert size == 1024
    for index in range(size):
        state.insert_entry(
            stage,
            TableEntry({1: ExactMatch(index), 2: ExactMatch(0)}, ActionCall(set_class, (1,))),
        )
    with pytest.raises(TableFullError):
        state.insert_entry(
            stage, TableEntry({1: ExactMatch(size), 2: ExactMatch(0)}, ActionCall(set_class, (1,)))
        )


def test_default_entry_modify_and_reset(beamer: CompiledProgram, state: RuntimeState) -> None:
    default_table = beamer.table_ids["MyIngress.default_class"]
    set_class = beamer.action_ids["MyIngress.set_class"]
    assert state.read_default_action(default_table) == ActionCall(set_class, (0,))
    state.set_default_action(default_table, ActionCall(set_class, (6,)))
    assert state.read_default_action(default_table).params == (6,)
    state.set_default_action(default_table, None)
    assert state.read_default_action(default_table).params == (0,)
    with pytest.raises(InvalidEntryError):
        state.set_default_action(default_table, ActionCall(set_class, (9,)))


def test_action_call_orders_parameters_by_id(beamer: CompiledProgram, state: RuntimeState) -> None:
    forward = beamer.action_ids["MyIngress.ipv4_forward"]
    assert state.action_call(forward, {2: 7, 1: 0xAB}) == ActionCall(forward, (0xAB, 7))
    with pytest.raises(InvalidEntryError, match="parameter id 2 is missing"):
        state.action_call(forward, {1: 1})
    with pytest.raises(InvalidEntryError, match="no parameter with id 3"):
        state.action_call(forward, {1: 1, 2: 2, 3: 3})


def test_direct_and_indirect_counters(beamer: CompiledProgram, state: RuntimeState) -> None:
    _lpm, stage, _forward, set_class, _noop = ids(beamer)
    key = {1: ExactMatch(1), 2: ExactMatch(2)}
    state.insert_entry(stage, TableEntry(dict(key), ActionCall(set_class, (1,))))
    state.write_direct_counter(stage, key, 0, CounterData(100, 2))
    assert state.read_direct_counter(stage, key, 0) == CounterData(100, 2)
    with pytest.raises(InvalidEntryError, match="has no direct counter"):
        state.read_direct_counter(beamer.table_ids["MyIngress.coflow_class"], key, 0)
    queue = beamer.counter_ids["MyEgress.queue_counter"]
    state.write_counter(queue, 3, CounterData(10, 1))
    assert state.read_counter(queue, 3) == [CounterData(10, 1)]
    assert len(state.read_counter(queue)) == 8
    with pytest.raises(InvalidEntryError, match="index 8"):
        state.read_counter(queue, 8)


def test_const_entries_registers_and_ternary_priority() -> None:
    program = compile_file(ROOT / "tests" / "p4progs" / "features.p4")
    state = program.new_runtime_state()
    ops = program.table_ids["MyIngress.ops"]
    entries = state.read_entries(ops)
    assert len(entries) == 5 and all(e.is_const for e in entries)
    # Earlier const entries win (higher priority), as in p4c.
    assert entries[0].priority > entries[-1].priority
    table = state.tables[ops]
    hit = table.lookup((0x12,))
    assert hit is not None and hit.action.params == (0x10000,)
    hit = table.lookup((0x1F,))
    assert hit is not None and hit.action.params == (0,)
    with pytest.raises(ImmutableError):
        state.insert_entry(
            ops,
            TableEntry(
                {1: TernaryMatch(0x20, 0xFF)}, ActionCall(program.action_ids["NoAction"]), 1
            ),
        )
    register = program.register_ids["MyIngress.last_result"]
    state.write_register(register, 2, 0xFFFFFFFF)
    assert state.read_register(register, 2) == [0xFFFFFFFF]
    with pytest.raises(InvalidEntryError, match="does not fit in 32 bits"):
        state.write_register(register, 2, 1 << 32)


def test_writes_while_packets_flow(beamer: CompiledProgram) -> None:
    """Concurrent writes never break the packet path (entries swap atomically)."""
    from scapy.layers.inet import IP
    from scapy.layers.l2 import Ether

    pipeline = Pipeline(beamer)
    lpm, _stage, forward, _set_class, _noop = ids(beamer)
    pipeline.runtime.insert_entry(lpm, route(0x0A000000, 8, 1, forward))
    packet = bytes(Ether() / IP(dst="10.1.1.1", ttl=9))
    stop = threading.Event()

    def writer() -> None:
        index = 0
        while not stop.is_set():
            prefix = 0x0B000000 + (index % 200 << 8)
            pipeline.runtime.insert_entry(lpm, route(prefix, 24, 2, forward))
            pipeline.runtime.delete_entry(lpm, {1: LpmMatch(prefix, 24)}, 0)
            index += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        ports = {pipeline.process(0, packet)[0][0] for _ in range(3000)}
    finally:
        stop.set()
        thread.join()
    assert ports == {1}
    assert pipeline.internal_errors == 0
