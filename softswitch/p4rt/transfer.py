"""Copy control-plane state between two runtime states (COMMIT and RECONCILE_AND_COMMIT).

Every write goes through the destination's own checks, so a destination whose program
cannot hold the source's entries raises :class:`~softswitch.runtime.RuntimeStateError`.
"""

from __future__ import annotations

from softswitch.runtime import CounterData, RuntimeState, TableEntry


def copy_runtime_state(source: RuntimeState, destination: RuntimeState) -> None:
    """Replay ``source``'s entries, defaults, counters and registers onto ``destination``."""
    with destination.lock:
        for table_id, table in source.tables.items():
            target = destination.table(table_id)
            for entry in table.entries.values():
                if entry.is_const:
                    continue
                target.insert(
                    TableEntry(
                        dict(entry.matches),
                        entry.action,
                        entry.priority,
                        CounterData(entry.counter.byte_count, entry.counter.packet_count),
                        entry.controller_metadata,
                        entry.metadata,
                    )
                )
            if table.default_action != table.initial_default:
                target.set_default_action(table.default_action)
            target.default_counter = CounterData(
                table.default_counter.byte_count, table.default_counter.packet_count
            )
        for counter_id, counter in source.counters.items():
            for index, cell in enumerate(counter.cells):
                destination.write_counter(counter_id, index, cell)
        for register_id, register in source.registers.items():
            for index, value in enumerate(register.cells):
                destination.write_register(register_id, index, value)
