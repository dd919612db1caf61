"""Apply one ``Update`` of a WriteRequest to the runtime state (spec §9 and §12).

Each function raises :class:`P4RuntimeError` with the code the spec gives the
mistake; the servicer collects one outcome per update.
"""

from __future__ import annotations

import grpc
from p4.v1 import p4runtime_pb2

from softswitch.p4rt.bytestrings import decode_unsigned
from softswitch.p4rt.entries import array_index, parse_action, parse_key, table_info
from softswitch.p4rt.p4info_index import TableInfo
from softswitch.p4rt.pipeline_config import ActivePipeline
from softswitch.p4rt.status import (
    P4RuntimeError,
    invalid,
    permission_denied,
    unimplemented,
)
from softswitch.runtime import (
    ActionCall,
    CounterData,
    RuntimeState,
    RuntimeStateError,
    TableEntry,
)

Update = p4runtime_pb2.Update


def apply_update(active: ActivePipeline, update: p4runtime_pb2.Update) -> None:
    """Apply ``update`` or raise; the runtime's own errors keep their status code."""
    if update.type not in (Update.INSERT, Update.MODIFY, Update.DELETE):
        raise invalid(f"update type {update.type} is not INSERT, MODIFY or DELETE")
    kind = update.entity.WhichOneof("entity")
    try:
        if kind == "table_entry":
            _write_table_entry(active, update.type, update.entity.table_entry)
        elif kind == "counter_entry":
            _write_counter_entry(active, update.type, update.entity.counter_entry)
        elif kind == "direct_counter_entry":
            _write_direct_counter_entry(active, update.type, update.entity.direct_counter_entry)
        elif kind == "register_entry":
            _write_register_entry(active, update.type, update.entity.register_entry)
        elif kind is None:
            raise invalid("the update's entity is not set")
        else:
            raise unimplemented(f"{kind} is not supported by this target")
    except RuntimeStateError as error:
        raise P4RuntimeError(grpc.StatusCode[error.status], str(error)) from None


def counter_data(data: p4runtime_pb2.CounterData) -> CounterData:
    if data.byte_count < 0 or data.packet_count < 0:
        raise invalid("counter values must not be negative")
    return CounterData(data.byte_count, data.packet_count)


def _check_no_unsupported_resources(table: TableInfo, entry: p4runtime_pb2.TableEntry) -> None:
    if entry.HasField("meter_config") or entry.HasField("meter_counter_data"):
        raise invalid(f"table '{table.name}' has no direct meter")
    if entry.idle_timeout_ns:
        raise invalid(f"table '{table.name}' does not support idle timeout")
    if entry.HasField("counter_data") and table.direct_counter_id is None:
        raise invalid(f"table '{table.name}' has no direct counter")


def _entry_action(
    active: ActivePipeline, table: TableInfo, entry: p4runtime_pb2.TableEntry, *, default: bool
) -> ActionCall:
    kind = entry.action.WhichOneof("type")
    if kind != "action":
        raise invalid(f"table '{table.name}' is a direct table: give an action, not {kind}")
    return parse_action(active.index, table, entry.action.action, default_entry=default)


def _write_table_entry(
    active: ActivePipeline, update_type: int, entry: p4runtime_pb2.TableEntry
) -> None:
    if entry.is_const:
        raise invalid("is_const must be false in a write")
    table = table_info(active.index, entry.table_id)
    _check_no_unsupported_resources(table, entry)
    runtime = active.runtime
    if entry.is_default_action:
        _write_default_entry(active, table, update_type, entry)
        return
    if not table.match_fields and update_type == Update.INSERT:
        raise invalid(f"table '{table.name}' has no key: only its default entry can be written")
    key = parse_key(table, entry)
    if update_type == Update.DELETE:
        if table.is_const_table:
            raise permission_denied(f"table '{table.name}' has const entries")
        runtime.delete_entry(key.table_id, key.matches, key.priority)
        return
    if update_type == Update.INSERT:
        if table.is_const_table:
            raise permission_denied(f"table '{table.name}' has const entries")
        if not entry.HasField("action"):
            raise invalid("INSERT needs an action")
        call = _entry_action(active, table, entry, default=False)
        initial = counter_data(entry.counter_data) if entry.HasField("counter_data") else None
        runtime.insert_entry(
            key.table_id,
            TableEntry(
                key.matches,
                call,
                key.priority,
                initial if initial is not None else CounterData(),
                entry.controller_metadata,
                entry.metadata,
            ),
        )
        return
    # MODIFY: the action may be left out (kept); the counter is written only when given.
    new_counter = counter_data(entry.counter_data) if entry.HasField("counter_data") else None
    with runtime.lock:
        state = runtime.table(key.table_id)
        existing = state.get(key.matches, key.priority)
        if table.is_const_table:
            if entry.HasField("action"):
                raise permission_denied(f"table '{table.name}' has const entries")
        else:
            if entry.HasField("action"):
                call = _entry_action(active, table, entry, default=False)
                state.modify(key.matches, key.priority, call)
            existing.controller_metadata = entry.controller_metadata
            existing.metadata = entry.metadata
        if new_counter is not None:
            existing.counter = new_counter


def _write_default_entry(
    active: ActivePipeline, table: TableInfo, update_type: int, entry: p4runtime_pb2.TableEntry
) -> None:
    if update_type != Update.MODIFY:
        raise invalid("the default entry can only be modified (no INSERT or DELETE)")
    if len(entry.match) or entry.priority:
        raise invalid("the default entry takes no match and no priority")
    if table.const_default_action_id:
        raise permission_denied(f"table '{table.name}' has a const default action")
    runtime = active.runtime
    with runtime.lock:
        state = runtime.table(table.table_id)
        if entry.HasField("action"):
            state.set_default_action(_entry_action(active, table, entry, default=True))
        else:
            # An unset action restores the program's default and resets its resources.
            state.set_default_action(None)
            state.default_counter = CounterData()
        if entry.HasField("counter_data"):
            state.default_counter = counter_data(entry.counter_data)


def _write_counter_entry(
    active: ActivePipeline, update_type: int, entry: p4runtime_pb2.CounterEntry
) -> None:
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
        return
    data = counter_data(entry.data)
    runtime: RuntimeState = active.runtime
    with runtime.lock:
        for index in indexes:
            runtime.write_counter(entry.counter_id, index, data)


def _write_direct_counter_entry(
    active: ActivePipeline, update_type: int, entry: p4runtime_pb2.DirectCounterEntry
) -> None:
    if update_type != Update.MODIFY:
        raise invalid("direct counter entries can only be modified")
    table = table_info(active.index, entry.table_entry.table_id)
    if table.direct_counter_id is None:
        raise invalid(f"table '{table.name}' has no direct counter")
    runtime = active.runtime
    with runtime.lock:
        state = runtime.table(table.table_id)
        if entry.table_entry.is_default_action:
            if entry.HasField("data"):
                state.default_counter = counter_data(entry.data)
            return
        key = parse_key(table, entry.table_entry)
        existing = state.get(key.matches, key.priority)  # NOT_FOUND when missing
        if entry.HasField("data"):
            existing.counter = counter_data(entry.data)


def _write_register_entry(
    active: ActivePipeline, update_type: int, entry: p4runtime_pb2.RegisterEntry
) -> None:
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
    with runtime.lock:
        for index in indexes:
            runtime.write_register(entry.register_id, index, value)
