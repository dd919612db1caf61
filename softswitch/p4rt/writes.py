"""Apply one ``Update`` of a WriteRequest to the runtime state (spec §9 and §12).

Each function raises :class:`P4RuntimeError` with the code the spec gives the
mistake, or returns an :data:`Undo` that puts back what it changed (for
ROLLBACK_ON_ERROR batches); the servicer collects one outcome per update.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeAlias

import grpc
from p4.v1 import p4runtime_pb2

from softswitch.p4rt.bytestrings import decode_unsigned
from softswitch.p4rt.entries import array_index, parse_action, parse_key, table_info
from softswitch.p4rt.p4info_index import TableInfo
from softswitch.p4rt.pipeline_config import ActivePipeline
from softswitch.p4rt.status import (
    P4RuntimeError,
    invalid,
    not_found,
    permission_denied,
    unimplemented,
)
from softswitch.p4rt.wire import (
    TableEntryData,
    decode_table_update,
    parse_message,
    table_entry_data,
)
from softswitch.runtime import (
    CounterData,
    RuntimeState,
    RuntimeStateError,
    TableEntry,
)

Update = p4runtime_pb2.Update

Undo = Callable[[], None]
"""Restores the state an applied update changed; run in reverse order of application."""


DecodedUpdate: TypeAlias = tuple[int, TableEntryData] | p4runtime_pb2.Update
"""An update ready to apply: a table entry read straight from the wire (type, entry), or
a parsed protobuf Update."""


def decode_update(update: bytes | p4runtime_pb2.Update) -> DecodedUpdate:
    """An update as received, decoded: table entries straight from the wire when possible.
    Raises DecodeError for bytes that are no valid Update (a Write decodes all of its
    updates before it applies any: such a request is no valid WriteRequest)."""
    if isinstance(update, bytes):
        decoded = decode_table_update(update)
        if decoded is not None:
            return decoded
        return parse_message(p4runtime_pb2.Update, update)
    return update


# Distinct protobuf-parsed updates one batch shares (see :func:`decode_updates`).
MAX_SHARED_UPDATES = 1024


def decode_updates(updates: Sequence[bytes | p4runtime_pb2.Update]) -> list[DecodedUpdate]:
    """Every update of a batch decoded (:func:`decode_update`). Updates that protobuf
    parses share one message when their bytes are equal: a pure-Python ``Update`` costs
    ~650 bytes, and a batch of one repeated update must not cost that per update."""
    parsed: dict[bytes, p4runtime_pb2.Update] = {}
    decoded: list[DecodedUpdate] = []
    for update in updates:
        shared = parsed.get(update) if parsed and isinstance(update, bytes) else None
        if shared is not None:
            decoded.append(shared)
            continue
        result = decode_update(update)
        if (
            isinstance(update, bytes)
            and isinstance(result, p4runtime_pb2.Update)
            and len(parsed) < MAX_SHARED_UPDATES
        ):
            parsed[update] = result
        decoded.append(result)
    return decoded


def apply_decoded_update(active: ActivePipeline, update: DecodedUpdate) -> Undo:
    """Apply one decoded update (:func:`decode_update`) or raise."""
    if isinstance(update, tuple):
        update_type, entry = update
        _check_type(update_type)
        try:
            return _write_table_entry(active, update_type, entry)
        except RuntimeStateError as error:
            raise P4RuntimeError(grpc.StatusCode[error.status], str(error)) from None
    return apply_update(active, update)


def _check_type(update_type: int) -> None:
    if update_type not in (Update.INSERT, Update.MODIFY, Update.DELETE):
        raise invalid(f"update type {update_type} is not INSERT, MODIFY or DELETE")


def apply_update(active: ActivePipeline, update: p4runtime_pb2.Update) -> Undo:
    """Apply ``update`` or raise; the runtime's own errors keep their status code."""
    _check_type(update.type)
    kind = update.entity.WhichOneof("entity")
    entity = update.entity
    try:
        if kind == "table_entry":
            return _write_table_entry(active, update.type, table_entry_data(entity.table_entry))
        if kind == "counter_entry":
            return _write_counter_entry(active, update.type, entity.counter_entry)
        if kind == "direct_counter_entry":
            return _write_direct_counter_entry(active, update.type, entity.direct_counter_entry)
        if kind == "register_entry":
            return _write_register_entry(active, update.type, entity.register_entry)
        if kind is None:
            raise invalid("the update's entity is not set")
        raise unimplemented(f"{kind} is not supported by this target")
    except RuntimeStateError as error:
        raise P4RuntimeError(grpc.StatusCode[error.status], str(error)) from None


def counter_data(data: p4runtime_pb2.CounterData) -> CounterData:
    if data.byte_count < 0 or data.packet_count < 0:
        raise invalid("counter values must not be negative")
    return CounterData(data.byte_count, data.packet_count)


def _check_no_unsupported_resources(table: TableInfo, entry: TableEntryData) -> None:
    if entry.has_meter:
        raise invalid(f"table '{table.name}' has no direct meter")
    if entry.idle_timeout_ns:
        raise invalid(f"table '{table.name}' does not support idle timeout")
    if entry.counter is not None and table.direct_counter_id is None:
        raise invalid(f"table '{table.name}' has no direct counter")


def _counter_of(counter: tuple[int, int]) -> CounterData:
    byte_count, packet_count = counter
    if byte_count < 0 or packet_count < 0:
        raise invalid("counter values must not be negative")
    return CounterData(byte_count, packet_count)


def _copy(counter: CounterData) -> CounterData:
    return CounterData(counter.byte_count, counter.packet_count)


def _write_table_entry(active: ActivePipeline, update_type: int, entry: TableEntryData) -> Undo:
    if entry.is_const:
        raise invalid("is_const must be false in a write")
    table = table_info(active.index, entry.table_id)
    _check_no_unsupported_resources(table, entry)
    runtime = active.runtime
    if entry.is_default_action:
        return _write_default_entry(active, table, update_type, entry)
    if not table.match_fields and update_type == Update.INSERT:
        raise invalid(f"table '{table.name}' has no key: only its default entry can be written")
    key = parse_key(table, entry)
    # parse_key and parse_action validated the update against the P4Info: the table's
    # methods for valid entries take it from here without checking it again.
    state = runtime.table(key.table_id)
    entry_key = state.key_of(key.matches, key.priority)
    if update_type == Update.DELETE:
        if table.is_const_table:
            raise permission_denied(f"table '{table.name}' has const entries")
        removed = state.delete_valid(entry_key)
        return lambda: state.insert_valid(entry_key, removed)
    if update_type == Update.INSERT:
        if table.is_const_table:
            raise permission_denied(f"table '{table.name}' has const entries")
        if not entry.has_action:
            raise invalid("INSERT needs an action")
        call = parse_action(active.index, table, entry, default_entry=False)
        state.insert_valid(
            entry_key,
            TableEntry(
                key.matches,
                call,
                key.priority,
                CounterData() if entry.counter is None else _counter_of(entry.counter),
                entry.controller_metadata,
                entry.metadata,
            ),
        )

        def undo_insert() -> None:
            state.delete_valid(entry_key)

        return undo_insert
    # MODIFY: the action may be left out (kept); the counter is written only when given.
    new_counter = _counter_of(entry.counter) if entry.counter is not None else None
    existing = state.find(entry_key)
    if existing is None:
        raise not_found(f"table '{table.name}' has no such entry")
    before = (existing.action, existing.controller_metadata, existing.metadata, existing.counter)
    if table.is_const_table:
        if entry.has_action:
            raise permission_denied(f"table '{table.name}' has const entries")
    else:
        if entry.has_action:
            # One attribute store: a packet sees the old action or the new one.
            existing.action = parse_action(active.index, table, entry, default_entry=False)
        existing.controller_metadata = entry.controller_metadata
        existing.metadata = entry.metadata
    if new_counter is not None:
        existing.counter = new_counter

    def undo() -> None:
        # Entries are looked up by key; their action and data change in place.
        existing.action, existing.controller_metadata, existing.metadata, existing.counter = before

    return undo


def _write_default_entry(
    active: ActivePipeline, table: TableInfo, update_type: int, entry: TableEntryData
) -> Undo:
    if update_type != Update.MODIFY:
        raise invalid("the default entry can only be modified (no INSERT or DELETE)")
    if entry.matches or entry.priority:
        raise invalid("the default entry takes no match and no priority")
    if table.const_default_action_id:
        raise permission_denied(f"table '{table.name}' has a const default action")
    # Everything that can be refused is checked before anything changes.
    action = (
        parse_action(active.index, table, entry, default_entry=True) if entry.has_action else None
    )
    counter = _counter_of(entry.counter) if entry.counter is not None else None
    runtime = active.runtime
    with runtime.lock:
        state = runtime.table(table.table_id)
        before = (state.default_action, _copy(state.default_counter))
        # An unset action restores the program's default and resets its resources.
        state.set_default_action(action)
        if action is None:
            state.default_counter = CounterData()
        if counter is not None:
            state.default_counter = counter

    def undo() -> None:
        state.default_action, state.default_counter = before

    return undo


def _nothing() -> None:
    """The undo of an update that changed nothing."""


def _write_counter_entry(
    active: ActivePipeline, update_type: int, entry: p4runtime_pb2.CounterEntry
) -> Undo:
    if update_type != Update.MODIFY:
        raise invalid("counter entries can only be modified")
    info = active.index.counters.get(entry.counter_id)
    if info is None:
        raise invalid(f"unknown counter id {entry.counter_id}")
    indexes = (
        [array_index(info.size, entry.index.index, f"counter '{info.name}'")]
        if entry.HasField("index")
        else range(info.size)
    )
    if not entry.HasField("data"):
        return _nothing
    data = counter_data(entry.data)
    runtime: RuntimeState = active.runtime
    counter_id = entry.counter_id
    with runtime.lock:
        before = [(index, runtime.read_counter(counter_id, index)[0]) for index in indexes]
        for index in indexes:
            runtime.write_counter(counter_id, index, data)

    def undo() -> None:
        for index, old in before:
            runtime.write_counter(counter_id, index, old)

    return undo


def _write_direct_counter_entry(
    active: ActivePipeline, update_type: int, entry: p4runtime_pb2.DirectCounterEntry
) -> Undo:
    if update_type != Update.MODIFY:
        raise invalid("direct counter entries can only be modified")
    table = table_info(active.index, entry.table_entry.table_id)
    if table.direct_counter_id is None:
        raise invalid(f"table '{table.name}' has no direct counter")
    runtime = active.runtime
    with runtime.lock:
        state = runtime.table(table.table_id)
        if entry.table_entry.is_default_action:
            old_default = _copy(state.default_counter)
            if entry.HasField("data"):
                state.default_counter = counter_data(entry.data)

            def undo_default() -> None:
                state.default_counter = old_default

            return undo_default
        key = parse_key(table, table_entry_data(entry.table_entry))
        existing = state.get(key.matches, key.priority)  # NOT_FOUND when missing
        old = _copy(existing.counter)
        if entry.HasField("data"):
            existing.counter = counter_data(entry.data)

    def undo() -> None:
        existing.counter = old

    return undo


def _write_register_entry(
    active: ActivePipeline, update_type: int, entry: p4runtime_pb2.RegisterEntry
) -> Undo:
    if update_type != Update.MODIFY:
        raise invalid("register entries can only be modified")
    runtime = active.runtime
    register = runtime.registers.get(entry.register_id)
    if register is None:
        raise invalid(f"unknown register id {entry.register_id}")
    if entry.data.WhichOneof("data") != "bitstring":
        raise invalid(f"register '{register.name}' holds a bit string")
    value = decode_unsigned(entry.data.bitstring, register.bitwidth, f"register '{register.name}'")
    if entry.HasField("index"):
        indexes = [array_index(register.size, entry.index.index, f"register '{register.name}'")]
    else:
        indexes = list(range(register.size))
    register_id = entry.register_id
    with runtime.lock:
        before = [(index, runtime.read_register(register_id, index)[0]) for index in indexes]
        for index in indexes:
            runtime.write_register(register_id, index, value)

    def undo() -> None:
        for index, old in before:
            runtime.write_register(register_id, index, old)

    return undo
