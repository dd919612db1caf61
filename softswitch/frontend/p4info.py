"""P4Info generation with p4c's names, ids and aliases.

p4c gives every object the id ``prefix << 24 | (jenkins_one_at_a_time(name)
& 0xffffff)``, probing upwards on a collision, names sorted first so the
result is deterministic; the alias is the shortest dot-separated suffix of
the name that no other object shares. Doing the same means a controller
written against p4c's P4Info works here unchanged.

The objects also come in p4c's order, and with its annotations, so that
``beamer compile`` and p4c write the same P4Info for the same program. p4c
walks the evaluated program breadth first from the V1Switch package: the
blocks in the package's order, each control's instances (tables, counters,
registers) in declaration order. A control's actions come when the control
is visited: first the global actions it uses (p4c copies them into the
control, in the order the control first names them), then its own, in
declaration order. Every annotation except @name, @id, @brief and
@description is carried as written; p4c also writes an empty ``type_info``.
"""

from __future__ import annotations

from collections.abc import Iterable

from p4.config.v1 import p4info_pb2

from softswitch.frontend.lowered import LoweredProgram, TableInfo

PREFIX_ACTION = 0x01
PREFIX_TABLE = 0x02
PREFIX_REGISTER = 0x16  # p4runtime p4ids.h: REGISTER
PREFIX_COUNTER = 0x12
PREFIX_DIRECT_COUNTER = 0x13

_MATCH_TYPES = {
    "exact": p4info_pb2.MatchField.EXACT,
    "lpm": p4info_pb2.MatchField.LPM,
    "ternary": p4info_pb2.MatchField.TERNARY,
    "range": p4info_pb2.MatchField.RANGE,
    "optional": p4info_pb2.MatchField.OPTIONAL,
}
_COUNTER_UNITS = {
    "packets": p4info_pb2.CounterSpec.PACKETS,
    "bytes": p4info_pb2.CounterSpec.BYTES,
    "packets_and_bytes": p4info_pb2.CounterSpec.BOTH,
}


def jenkins_one_at_a_time(text: str) -> int:
    value = 0
    for byte in text.encode():
        value = (value + byte) & 0xFFFFFFFF
        value = (value + (value << 10)) & 0xFFFFFFFF
        value ^= value >> 6
    value = (value + (value << 3)) & 0xFFFFFFFF
    value ^= value >> 11
    return (value + (value << 15)) & 0xFFFFFFFF


def assign_ids(names_by_prefix: dict[int, Iterable[str]]) -> dict[tuple[int, str], int]:
    assigned: set[int] = set()
    ids: dict[tuple[int, str], int] = {}
    for prefix, names in names_by_prefix.items():
        for name in sorted(set(names)):
            low = jenkins_one_at_a_time(name) & 0xFFFFFF
            while (prefix << 24 | low) in assigned:
                low = (low + 1) & 0xFFFFFF
            ids[(prefix, name)] = prefix << 24 | low
            assigned.add(prefix << 24 | low)
    return ids


def aliases(names: Iterable[str]) -> dict[str, str]:
    """Shortest dot-separated suffix of every name that no other name ends with (or is);
    the whole name when every suffix is shared.

    The names' parts go last part first into a trie that counts, per node, the names
    below it: a suffix is unique where its node counts one. That is work in proportion
    to the names' total length, where comparing every name with every other took
    minutes for tens of thousands of tables or actions (and every suffix built as a
    string is quadratic in the parts of one name with many dots)."""
    all_names = sorted(set(names))
    root: _SuffixNode = _SuffixNode()
    for name in all_names:
        node = root
        for part in reversed(name.split(".")):
            child = node.children.get(part)
            if child is None:
                child = node.children[part] = _SuffixNode()
            child.names += 1
            node = child
    result: dict[str, str] = {}
    for name in all_names:
        parts = name.split(".")
        result[name] = name
        node = root
        for count, part in enumerate(reversed(parts), start=1):
            node = node.children[part]
            if node.names == 1:
                result[name] = ".".join(parts[-count:])
                break
    return result


class _SuffixNode:
    """A node of :func:`aliases`' trie: how many names end with the parts leading here."""

    __slots__ = ("children", "names")

    def __init__(self) -> None:
        self.children: dict[str, _SuffixNode] = {}
        self.names = 0


_NOT_CARRIED = frozenset({"name", "id", "brief", "description"})
"""Annotations P4Info holds elsewhere (names, ids, documentation), as p4c leaves them out."""


def carried_annotations(texts: Iterable[str]) -> list[str]:
    """The annotations P4Info carries, in source order (each as written, ``@name(...)``)."""
    return [text for text in texts if text[1:].split("(", 1)[0] not in _NOT_CARRIED]


def p4c_action_order(lowered: LoweredProgram) -> list[str]:
    """The actions tables use, in p4c's order: per control (package order), the global
    actions in the order the control's tables first name them, then the control's own
    actions in declaration order."""
    used = {name for table in lowered.tables for name, _scope in table.actions}
    # Insertion-ordered, so that a membership test is not a walk of a list of
    # tens of thousands of actions.
    order: dict[str, None] = {}
    controls = list(dict.fromkeys(table.control for table in lowered.tables))
    tables_of: dict[str, list[TableInfo]] = {control: [] for control in controls}
    for table in lowered.tables:
        tables_of[table.control].append(table)
    actions_of: dict[str | None, list[str]] = {}
    for name, action_info in lowered.actions.items():
        actions_of.setdefault(action_info.control, []).append(name)
    for control in controls:
        for table in tables_of[control]:
            for name in [n for n, _scope in table.actions] + [table.default_action]:
                info = lowered.actions.get(name)
                is_global = info is not None and info.control is None
                if is_global and name in used:
                    order.setdefault(name)
        for name in actions_of.get(control, []):
            if name in used:
                order.setdefault(name)
    # Anything left (not expected): keep it, after the rest, in a stable order.
    return list(order) + sorted(used.difference(order))


def build_p4info(lowered: LoweredProgram) -> p4info_pb2.P4Info:
    used_actions = p4c_action_order(lowered)
    ids = assign_ids(
        {
            PREFIX_ACTION: used_actions,
            PREFIX_TABLE: [t.name for t in lowered.tables],
            PREFIX_COUNTER: [c.name for c in lowered.counters],
            PREFIX_DIRECT_COUNTER: [c.name for c in lowered.direct_counters],
            PREFIX_REGISTER: [r.name for r in lowered.registers],
        }
    )
    alias = aliases(
        used_actions
        + [t.name for t in lowered.tables]
        + [c.name for c in lowered.counters]
        + [c.name for c in lowered.direct_counters]
        + [r.name for r in lowered.registers]
    )

    def preamble(
        msg: p4info_pb2.Preamble, prefix: int, name: str, annotations: Iterable[str] = ()
    ) -> None:
        msg.id = ids[(prefix, name)]
        msg.name = name
        msg.alias = alias[name]
        msg.annotations.extend(carried_annotations(annotations))

    info = p4info_pb2.P4Info()
    info.pkg_info.arch = "v1model"
    for table in lowered.tables:
        t = info.tables.add()
        preamble(t.preamble, PREFIX_TABLE, table.name, table.annotations)
        for index, key in enumerate(table.keys, start=1):
            mf = t.match_fields.add()
            mf.id = index
            mf.name = key.name
            mf.bitwidth = key.bitwidth
            mf.match_type = _MATCH_TYPES[key.match_kind]
        for name, scope in table.actions:
            ref = t.action_refs.add()
            ref.id = ids[(PREFIX_ACTION, name)]
            if scope == "default":
                ref.scope = p4info_pb2.ActionRef.DEFAULT_ONLY
                ref.annotations.append("@defaultonly")
            elif scope == "table":
                ref.scope = p4info_pb2.ActionRef.TABLE_ONLY
                ref.annotations.append("@tableonly")
        if table.default_is_const:
            t.const_default_action_id = ids[(PREFIX_ACTION, table.default_action)]
        if table.direct_counter is not None:
            t.direct_resource_ids.append(ids[(PREFIX_DIRECT_COUNTER, table.direct_counter)])
        t.size = table.size
        if table.const_entries is not None:
            t.is_const_table = True
            t.has_initial_entries = bool(table.const_entries)
    for name in used_actions:
        action = lowered.actions[name]
        a = info.actions.add()
        preamble(a.preamble, PREFIX_ACTION, name, (x.text for x in action.decl.annotations))
        for index, (param_name, width) in enumerate(action.params, start=1):
            p = a.params.add()
            p.id = index
            p.name = param_name
            p.bitwidth = width
    for counter in lowered.counters:
        c = info.counters.add()
        preamble(c.preamble, PREFIX_COUNTER, counter.name)
        c.spec.unit = _COUNTER_UNITS[counter.unit]
        c.size = counter.size
    # p4c adds a direct counter with its table.
    table_order = {table.name: index for index, table in enumerate(lowered.tables)}
    attached = [d for d in lowered.direct_counters if d.table]
    for direct in sorted(attached, key=lambda d: table_order.get(d.table, len(table_order))):
        d = info.direct_counters.add()
        preamble(d.preamble, PREFIX_DIRECT_COUNTER, direct.name)
        d.spec.unit = _COUNTER_UNITS[direct.unit]
        d.direct_table_id = ids[(PREFIX_TABLE, direct.table)]
    for register in lowered.registers:
        r = info.registers.add()
        preamble(r.preamble, PREFIX_REGISTER, register.name)
        r.type_spec.bitstring.bit.bitwidth = register.bitwidth
        r.size = register.size
    info.type_info.SetInParent()
    return info
