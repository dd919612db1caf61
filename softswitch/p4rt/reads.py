"""Answer one entity of a ReadRequest: exact and wildcard reads (spec §9.1.5 and §13).

Replies use canonical binary strings, so what a client wrote reads back equal.
The caller holds the runtime lock, so one request sees one consistent state.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import grpc
from p4.v1 import p4runtime_pb2

from softswitch.p4rt import encode
from softswitch.p4rt.entries import (
    array_index,
    key_to_proto,
    parse_key,
    table_info,
)
from softswitch.p4rt.p4info_index import TableInfo
from softswitch.p4rt.pipeline_config import ActivePipeline
from softswitch.p4rt.status import P4RuntimeError, invalid, not_found, unimplemented
from softswitch.p4rt.wire import table_entry_data
from softswitch.runtime import CounterData, TableState
from softswitch.runtime import TableEntry as RuntimeEntry

Entity: TypeAlias = p4runtime_pb2.Entity

# What one Read may reply with. A request of many wildcards over large tables, registers
# or counters is refused rather than built in memory while the switch's state is locked
# (a million table entries take about 7 s to encode here).
MAX_READ_ENTITIES = 1 << 20
MAX_READ_REPLY_BYTES = 128 << 20


class ReplyTooLarge(P4RuntimeError):
    """The reply of one Read would pass its budget."""

    def __init__(self, max_entities: int, max_bytes: int) -> None:
        super().__init__(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"the reply would exceed {max_entities} entities or {max_bytes} bytes",
        )


def _max_entities() -> int:
    return MAX_READ_ENTITIES


def _max_bytes() -> int:
    return MAX_READ_REPLY_BYTES


@dataclass(slots=True)
class ReplyBudget:
    """What one Read's reply may hold; going past it raises :class:`ReplyTooLarge`."""

    max_entities: int = field(default_factory=_max_entities)
    max_bytes: int = field(default_factory=_max_bytes)
    entities: int = 0
    size_bytes: int = 0

    def reserve(self, count: int) -> None:
        """Refuse before building ``count`` more entities that could not all fit."""
        if self.entities + count > self.max_entities:
            raise ReplyTooLarge(self.max_entities, self.max_bytes)

    def take(self, item: bytes) -> bytes:
        self.entities += 1
        self.size_bytes += len(item)
        if self.entities > self.max_entities or self.size_bytes > self.max_bytes:
            raise ReplyTooLarge(self.max_entities, self.max_bytes)
        return item


def read_entity(
    active: ActivePipeline, entity: p4runtime_pb2.Entity, budget: ReplyBudget | None = None
) -> list[bytes]:
    """Every entity ``entity`` selects, serialised; raises P4RuntimeError for a bad request
    and :class:`ReplyTooLarge` once ``budget`` is spent.

    Table, counter and register entries are encoded straight to wire bytes (``encode``);
    direct counter entries via protobuf.
    """
    budget = budget if budget is not None else ReplyBudget()
    kind = entity.WhichOneof("entity")
    if kind == "table_entry":
        return _read_table_entries(active, entity.table_entry, budget)
    if kind == "counter_entry":
        return _read_counter_entries(active, entity.counter_entry, budget)
    if kind == "register_entry":
        return _read_register_entries(active, entity.register_entry, budget)
    if kind == "direct_counter_entry":
        found = _read_direct_counter_entries(active, entity.direct_counter_entry, budget)
        return [budget.take(message.SerializeToString()) for message in found]
    if kind is None:
        raise invalid("the entity to read is not set (wildcards need a typed entity)")
    raise unimplemented(f"{kind} is not supported by this target")


def _counter_proto(data: CounterData, out: p4runtime_pb2.CounterData) -> None:
    out.byte_count = data.byte_count
    out.packet_count = data.packet_count


def _entry_bytes(
    active: ActivePipeline, table: TableInfo, entry: RuntimeEntry, with_counter: bool
) -> bytes:
    call = entry.action
    info = active.index.actions.get(call.action_id)
    return encode.table_entry_entity(
        table.table_id,
        entry.matches,
        encode.action(call, info.param_ids if info is not None else ()),
        priority=entry.priority,
        controller_metadata=entry.controller_metadata,
        counter=entry.counter if with_counter and table.direct_counter_id is not None else None,
        metadata=entry.metadata,
        is_const=entry.is_const,
    )


def _default_bytes(
    active: ActivePipeline, table: TableInfo, state: TableState, with_counter: bool
) -> bytes:
    call = state.default_action
    info = active.index.actions.get(call.action_id)
    action_bytes = None
    if call.action_id and info is not None:
        action_bytes = encode.action(call, info.param_ids)
    counter = state.default_counter if with_counter and table.direct_counter_id else None
    return encode.table_entry_entity(
        table.table_id, {}, action_bytes, counter=counter, is_default_action=True
    )


def _selected_entries(
    table: TableInfo, state: TableState, request: p4runtime_pb2.TableEntry
) -> Iterable[RuntimeEntry]:
    """The entries of one table that pass the request's filters."""
    if len(request.match):
        key = parse_key(table, table_entry_data(request))
        found = state.find(state.key_of(key.matches, key.priority))
        candidates: Iterable[RuntimeEntry] = [found] if found is not None else []
    else:
        candidates = state.entries.values()
    action_id = request.action.action.action_id if request.HasField("action") else 0
    for entry in candidates:
        if request.priority and entry.priority != request.priority:
            continue
        if action_id and entry.action.action_id != action_id:
            continue
        if request.controller_metadata and entry.controller_metadata != request.controller_metadata:
            continue
        if request.metadata and entry.metadata != request.metadata:
            continue
        yield entry


def _filters(request: p4runtime_pb2.TableEntry) -> list[str]:
    """The filters a table-entry read sets besides its table id (counter_data is none:
    it asks for the direct counters along)."""
    filters = []
    if len(request.match):
        filters.append("match")
    if request.HasField("action"):
        filters.append("action")
    if request.priority:
        filters.append("priority")
    if request.controller_metadata:
        filters.append("controller_metadata")
    if request.metadata:
        filters.append("metadata")
    if request.is_default_action:
        filters.append("is_default_action")
    return filters


def _read_table_entries(
    active: ActivePipeline, request: p4runtime_pb2.TableEntry, budget: ReplyBudget
) -> list[bytes]:
    with_counter = request.HasField("counter_data")
    if request.table_id == 0:
        filters = _filters(request)
        if filters:
            raise invalid(
                "a read of all tables (table_id 0) takes no other filter; this one "
                f"filters by {', '.join(filters)}"
            )
        tables = [table_info(active.index, table_id) for table_id in active.index.tables]
    else:
        tables = [table_info(active.index, request.table_id)]
    results: list[bytes] = []
    for table in tables:
        state = active.runtime.table(table.table_id)
        if request.is_default_action:
            if len(request.match) or request.priority:
                raise invalid("the default entry takes no match and no priority")
            results.append(budget.take(_default_bytes(active, table, state, with_counter)))
            continue
        for entry in _selected_entries(table, state, request):
            results.append(budget.take(_entry_bytes(active, table, entry, with_counter)))
    return results


def _read_counter_entries(
    active: ActivePipeline, request: p4runtime_pb2.CounterEntry, budget: ReplyBudget
) -> list[bytes]:
    if request.counter_id == 0:
        counter_ids = list(active.index.counters)
    elif request.counter_id in active.index.counters:
        counter_ids = [request.counter_id]
    else:
        raise invalid(f"unknown counter id {request.counter_id}")
    results: list[bytes] = []
    for counter_id in counter_ids:
        state = active.runtime.counter(counter_id)
        indexes = requested_indexes(
            request, request.counter_id, state.size, f"counter '{state.name}'"
        )
        budget.reserve(len(indexes))
        for index in indexes:
            entity = encode.counter_entry_entity(counter_id, index, state.cells[index])
            results.append(budget.take(entity))
    return results


def _read_direct_counter_entries(
    active: ActivePipeline, request: p4runtime_pb2.DirectCounterEntry, budget: ReplyBudget
) -> list[Entity]:
    selector = request.table_entry
    if selector.table_id == 0:
        tables = [
            table_info(active.index, table_id) for table_id in active.index.direct_counters.values()
        ]
    else:
        table = table_info(active.index, selector.table_id)
        if table.direct_counter_id is None:
            raise invalid(f"table '{table.name}' has no direct counter")
        tables = [table]
    results: list[Entity] = []
    for table in tables:
        state = active.runtime.table(table.table_id)
        if selector.is_default_action:
            result = Entity()
            result.direct_counter_entry.table_entry.table_id = table.table_id
            result.direct_counter_entry.table_entry.is_default_action = True
            _counter_proto(state.default_counter, result.direct_counter_entry.data)
            results.append(result)
            continue
        if len(selector.match):
            key = parse_key(table, table_entry_data(selector))
            found = state.find(state.key_of(key.matches, key.priority))
            if found is None:
                raise not_found(f"table '{table.name}' has no such entry")
            entries: Iterable[RuntimeEntry] = [found]
        else:
            entries = state.entries.values()
            budget.reserve(len(state.entries))
        for entry in entries:
            result = Entity()
            key_to_proto(
                table.table_id,
                entry.matches,
                entry.priority,
                result.direct_counter_entry.table_entry,
            )
            _counter_proto(entry.counter, result.direct_counter_entry.data)
            results.append(result)
    return results


def _read_register_entries(
    active: ActivePipeline, request: p4runtime_pb2.RegisterEntry, budget: ReplyBudget
) -> list[bytes]:
    runtime = active.runtime
    if request.register_id == 0:
        register_ids = list(runtime.registers)
    elif request.register_id in runtime.registers:
        register_ids = [request.register_id]
    else:
        raise invalid(f"unknown register id {request.register_id}")
    results: list[bytes] = []
    for register_id in register_ids:
        state = runtime.register(register_id)
        indexes = requested_indexes(
            request, request.register_id, state.size, f"register '{state.name}'"
        )
        budget.reserve(len(indexes))
        for index in indexes:
            entity = encode.register_entry_entity(register_id, index, state.cells[index])
            results.append(budget.take(entity))
    return results


def requested_indexes(request: Any, entity_id: int, size: int, what: str) -> Sequence[int]:
    """The one index a read of one counter or register names, else all of them."""
    if entity_id and request.HasField("index"):
        return [array_index(size, request.index.index, what)]
    return range(size)
