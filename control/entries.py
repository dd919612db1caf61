"""Table entries the controller wants, and the smallest safe way to get there.

Entries are kept by *name* with integer values (:class:`Entry`), so desired and
installed sets compare exactly whatever byte padding a switch used; they become
P4Runtime messages only at the edge (:func:`to_table_entry`,
:func:`from_table_entry`).

Classification entries (docs/beamer-p4.md, docs/controller.md): each active stage
gets one stage-level entry (experiment_id, stage_id) → the class most of its
coflows have; a coflow whose class differs gets a coflow-level entry, which the
data plane applies over the stage entry. When the coflow-level entries would not
fit the coflow table (its ``size`` in the P4Info), stages are taken in rank order
and a stage whose overrides no longer fit keeps only its stage-level entry: the schedule
degrades to stage granularity instead of failing.

Make-before-break (:func:`plan_writes`): a key present before and after is
MODIFYed in place; new keys are written before stale ones are deleted, so a
packet always finds either the old or the new entry. Deletions come first only
where a table is so full that the new entries would not fit otherwise.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from p4.v1 import p4runtime_pb2

from control.model import CoflowKey, StageKey
from control.p4runtime_client import P4Names, encode_uint
from control.topology import Route

MAX_UPDATES_PER_WRITE = 1000
"""Batch bound: keeps each Write well under gRPC's 4 MiB default message limit."""


# --- entries by name --------------------------------------------------------------------


class Exact(NamedTuple):
    value: int


class Lpm(NamedTuple):
    value: int
    prefix_len: int


class Ternary(NamedTuple):
    value: int
    mask: int


MatchValue = Exact | Lpm | Ternary


class EntryKey(NamedTuple):
    """What identifies an entry in P4Runtime: table, match and priority.

    Tuples, not dataclasses: keys are hashed and compared by the thousand on every
    event, and tuple hashing runs in C.
    """

    table: str
    match: tuple[tuple[str, MatchValue], ...]
    priority: int = 0

    def __str__(self) -> str:
        parts = []
        for name, value in self.match:
            short = name.rsplit(".", 1)[-1]
            if isinstance(value, Lpm):
                parts.append(f"{short}={value.value:#x}/{value.prefix_len}")
            elif isinstance(value, Ternary):
                parts.append(f"{short}={value.value:#x}&{value.mask:#x}")
            else:
                parts.append(f"{short}={value.value}")
        return f"{self.table.rsplit('.', 1)[-1]}[{', '.join(parts)}]"


class ActionCall(NamedTuple):
    name: str
    params: tuple[tuple[str, int], ...] = ()

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.params)
        return f"{self.name.rsplit('.', 1)[-1]}({args})"


EntryMap = dict[EntryKey, ActionCall]


# --- the program's tables ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PipelineLayout:
    """Names of the tables, fields and actions of ``p4src/beamer.p4`` the controller writes.

    Match-field names map a role (``experiment_id``, ``stage_id``, ``coflow_id``) to
    the P4Info field name; a role left out is simply not part of that table's key.
    """

    forward_table: str = "MyIngress.ipv4_lpm"
    forward_dst_field: str = "hdr.ipv4.dstAddr"
    forward_action: str = "MyIngress.ipv4_forward"
    forward_mac_param: str = "dstAddr"
    forward_port_param: str = "port"
    stage_table: str = "MyIngress.stage_class"
    stage_fields: Mapping[str, str] = field(
        default_factory=lambda: {
            "experiment_id": "hdr.beamer_tag.experiment_id",
            "stage_id": "hdr.beamer_tag.stage_id",
        }
    )
    stage_action: str = "MyIngress.set_class"
    coflow_table: str = "MyIngress.coflow_class"
    coflow_fields: Mapping[str, str] = field(
        default_factory=lambda: {
            "experiment_id": "hdr.beamer_tag.experiment_id",
            "stage_id": "hdr.beamer_tag.stage_id",
            "coflow_id": "hdr.beamer_tag.coflow_id",
        }
    )
    coflow_action: str = "MyIngress.set_class"
    class_param: str = "class_id"
    ack_table: str | None = "MyIngress.ack_class"
    """Keyless table whose default action classes TCP segments without payload; the
    controller points it at the top class the switch has. ``None``: no such table."""
    ack_action: str = "MyIngress.set_class"


def resolve_layout(layout: PipelineLayout, names: P4Names) -> PipelineLayout:
    """The layout with full P4Info names, so planned entries compare with read-back ones
    without per-entry name resolution. Raises ``P4NameError`` for a name not in the P4Info."""
    for table, fields in (
        (layout.stage_table, layout.stage_fields),
        (layout.coflow_table, layout.coflow_fields),
    ):
        for field_name in fields.values():
            names.table(table).match_field(field_name)
    names.table(layout.forward_table).match_field(layout.forward_dst_field)
    for action, param in (
        (layout.stage_action, layout.class_param),
        (layout.coflow_action, layout.class_param),
        (layout.forward_action, layout.forward_mac_param),
        (layout.forward_action, layout.forward_port_param),
    ):
        names.action(action).param(param)
    ack_table, ack_action = None, layout.ack_action
    # A program without an ACK table (not beamer.p4) leaves nothing to point at the top class.
    if layout.ack_table is not None and names.has_table(layout.ack_table):
        ack_table = names.table(layout.ack_table).name
        ack_action = names.action(layout.ack_action).name
        names.action(ack_action).param(layout.class_param)
    return replace(
        layout,
        ack_table=ack_table,
        ack_action=ack_action,
        forward_table=names.table(layout.forward_table).name,
        forward_action=names.action(layout.forward_action).name,
        stage_table=names.table(layout.stage_table).name,
        stage_action=names.action(layout.stage_action).name,
        coflow_table=names.table(layout.coflow_table).name,
        coflow_action=names.action(layout.coflow_action).name,
    )


def coflow_tag(key: CoflowKey) -> int:
    """The 32-bit coflow id carried in the tag: ``trial_id << 16 | iteration``."""
    return ((key.trial_id & 0xFFFF) << 16) | (key.iteration & 0xFFFF)


def _key_for(table: str, fields: Mapping[str, str], values: Mapping[str, int]) -> EntryKey:
    return EntryKey(
        table, tuple(sorted(((fields[role], Exact(values[role])) for role in fields), key=_name))
    )


def _name(item: tuple[str, object]) -> str:
    return item[0]


def stage_entry(layout: PipelineLayout, stage: StageKey, klass: int) -> tuple[EntryKey, ActionCall]:
    values = {"experiment_id": stage.experiment_id, "stage_id": stage.stage_id}
    return (
        _key_for(layout.stage_table, layout.stage_fields, values),
        ActionCall(layout.stage_action, ((layout.class_param, klass),)),
    )


def coflow_entry(
    layout: PipelineLayout, coflow: CoflowKey, klass: int
) -> tuple[EntryKey, ActionCall]:
    values = {
        "experiment_id": coflow.experiment_id,
        "stage_id": coflow.stage_id,
        "coflow_id": coflow_tag(coflow),
    }
    return (
        _key_for(layout.coflow_table, layout.coflow_fields, values),
        ActionCall(layout.coflow_action, ((layout.class_param, klass),)),
    )


class ClassEntries:
    """Stage and coflow entries of one layout, built once and reused: the same keys and
    class actions recur on every event, and building them is most of planning's cost."""

    MAX_CACHED = 200_000
    """Coflow keys are new every iteration; past this many the cache starts afresh."""

    def __init__(self, layout: PipelineLayout) -> None:
        self.layout = layout
        self._stage_keys: dict[StageKey, EntryKey] = {}
        self._coflow_keys: dict[CoflowKey, EntryKey] = {}
        self._stage_actions = {
            k: ActionCall(layout.stage_action, ((layout.class_param, k),)) for k in range(256)
        }
        self._coflow_actions = {
            k: ActionCall(layout.coflow_action, ((layout.class_param, k),)) for k in range(256)
        }

    def stage(self, stage: StageKey, klass: int) -> tuple[EntryKey, ActionCall]:
        key = self._stage_keys.get(stage)
        if key is None:
            if len(self._stage_keys) > self.MAX_CACHED:
                self._stage_keys.clear()
            key = stage_entry(self.layout, stage, 0)[0]
            self._stage_keys[stage] = key
        return key, self._stage_actions[klass]

    def coflow(self, coflow: CoflowKey, klass: int) -> tuple[EntryKey, ActionCall]:
        key = self._coflow_keys.get(coflow)
        if key is None:
            if len(self._coflow_keys) > self.MAX_CACHED:
                self._coflow_keys.clear()
            key = coflow_entry(self.layout, coflow, 0)[0]
            self._coflow_keys[coflow] = key
        return key, self._coflow_actions[klass]


def forwarding_entries(layout: PipelineLayout, routes: Iterable[Route]) -> EntryMap:
    """One ``ipv4_lpm`` entry per route of one switch."""
    entries: EntryMap = {}
    for route in routes:
        key = EntryKey(
            layout.forward_table,
            (
                (
                    layout.forward_dst_field,
                    Lpm(int(route.dst.network_address), route.dst.prefixlen),
                ),
            ),
        )
        mac = int(route.dst_mac.replace(":", ""), 16)
        entries[key] = ActionCall(
            layout.forward_action,
            ((layout.forward_mac_param, mac), (layout.forward_port_param, route.egress_port)),
        )
    return entries


# --- classes → desired classification entries ---------------------------------------------


@dataclass(frozen=True, slots=True)
class ClassPlan:
    """The classification entries wanted, and what had to give way."""

    entries: EntryMap
    stage_classes: dict[StageKey, int]
    overrides: dict[CoflowKey, int]
    fallback_stages: tuple[StageKey, ...]
    """Stages whose coflow-level entries did not fit: they run at stage granularity."""
    dropped_stages: tuple[StageKey, ...]
    """Stages beyond the stage table's size: their packets get the default class."""


def plan_classes(
    ranked: Sequence[tuple[CoflowKey, int]],
    layout: PipelineLayout,
    coflow_table_size: int,
    stage_table_size: int,
    idle_stage_classes: Mapping[StageKey, int] | None = None,
    factory: ClassEntries | None = None,
) -> ClassPlan:
    """Desired classification entries for coflows in rank order (most urgent first).

    ``idle_stage_classes``: stages still running but without an active coflow right
    now keep the class they had, so an iteration boundary does not churn entries.
    """
    entries_of = factory if factory is not None else ClassEntries(layout)
    # One pass, plain dicts: this runs on every event over every active coflow.
    by_stage: dict[StageKey, list[tuple[CoflowKey, int]]] = {}
    for item in ranked:
        coflow = item[0]
        stage = StageKey(coflow[0], coflow[1])
        members = by_stage.get(stage)
        if members is None:
            by_stage[stage] = [item]
        else:
            members.append(item)
    stage_classes: dict[StageKey, int] = {}
    wanted_overrides: dict[StageKey, list[tuple[CoflowKey, int]]] = {}
    for stage, members in by_stage.items():
        if len(members) == 1:
            stage_classes[stage] = members[0][1]
            continue
        counts: dict[int, int] = {}
        for _, klass in members:
            counts[klass] = counts.get(klass, 0) + 1
        top = max(counts.values())
        # Ties go to the class met first in rank order, i.e. the most urgent one.
        chosen = next(k for _, k in members if counts[k] == top)
        stage_classes[stage] = chosen
        if top < len(members):
            wanted_overrides[stage] = [(c, k) for c, k in members if k != chosen]
    for stage, klass in (idle_stage_classes or {}).items():
        stage_classes.setdefault(stage, klass)

    kept_stages = list(stage_classes)[:stage_table_size]
    dropped = tuple(list(stage_classes)[stage_table_size:])
    entries: EntryMap = {}
    for stage in kept_stages:
        key, action = entries_of.stage(stage, stage_classes[stage])
        entries[key] = action

    overrides: dict[CoflowKey, int] = {}
    fallback: list[StageKey] = []
    room = coflow_table_size
    for stage in kept_stages:
        wanted = wanted_overrides.get(stage, [])
        if not wanted:
            continue
        if len(wanted) > room:
            fallback.append(stage)
            continue
        room -= len(wanted)
        for coflow, klass in wanted:
            overrides[coflow] = klass
            key, action = entries_of.coflow(coflow, klass)
            entries[key] = action
    return ClassPlan(
        entries=entries,
        stage_classes={s: stage_classes[s] for s in kept_stages},
        overrides=overrides,
        fallback_stages=tuple(fallback),
        dropped_stages=dropped,
    )


# --- diff and ordering ------------------------------------------------------------------


class Changes(NamedTuple):
    inserts: EntryMap
    modifies: EntryMap
    deletes: EntryMap

    @property
    def empty(self) -> bool:
        return not (self.inserts or self.modifies or self.deletes)

    def __len__(self) -> int:
        return len(self.inserts) + len(self.modifies) + len(self.deletes)


def diff(
    desired: Mapping[EntryKey, ActionCall], installed: Mapping[EntryKey, ActionCall]
) -> Changes:
    """What to write so that ``installed`` becomes ``desired``; unchanged keys are left alone."""
    inserts = {k: a for k, a in desired.items() if k not in installed}
    modifies = {k: a for k, a in desired.items() if k in installed and installed[k] != a}
    deletes = {k: a for k, a in installed.items() if k not in desired}
    return Changes(inserts, modifies, deletes)


@dataclass(frozen=True, slots=True)
class WriteStep:
    """Updates that may be applied in any order among themselves (one or more RPCs)."""

    kind: str
    """``"make-room"``, ``"make"`` or ``"break"``: why this step exists."""
    updates: tuple[tuple[int, EntryKey, ActionCall], ...]


def plan_writes(
    changes: Changes,
    installed_count: Mapping[str, int],
    table_size: Mapping[str, int],
) -> list[WriteStep]:
    """Order the changes make-before-break.

    A Write batch may be applied in any order, so the order is made by steps:
    (1) ``make-room``: deletes only for tables whose new entries would not
    otherwise fit; (2) ``make``: inserts and modifies; (3) ``break``: the other
    deletes. Each step finishes before the next starts.
    """
    insert = p4runtime_pb2.Update.INSERT
    modify = p4runtime_pb2.Update.MODIFY
    delete = p4runtime_pb2.Update.DELETE
    inserts_per_table = Counter(k.table for k in changes.inserts)
    deletes_per_table = Counter(k.table for k in changes.deletes)
    early_tables = {
        table
        for table, adding in inserts_per_table.items()
        if table in table_size
        and deletes_per_table[table]
        and installed_count.get(table, 0) + adding > table_size[table]
    }
    room = tuple((delete, k, a) for k, a in changes.deletes.items() if k.table in early_tables)
    make = tuple(
        [(insert, k, a) for k, a in changes.inserts.items()]
        + [(modify, k, a) for k, a in changes.modifies.items()]
    )
    rest = tuple((delete, k, a) for k, a in changes.deletes.items() if k.table not in early_tables)
    steps = [WriteStep("make-room", room), WriteStep("make", make), WriteStep("break", rest)]
    return [step for step in steps if step.updates]


def batches(
    step: WriteStep, names: P4Names, limit: int = MAX_UPDATES_PER_WRITE
) -> list[list[p4runtime_pb2.Update]]:
    """The P4Runtime updates of one step, split into Write RPCs of at most ``limit``."""
    messages = []
    for kind, key, action in step.updates:
        # Filled in place: copying a finished entry into its Update would cost as much
        # again with protobuf in pure Python.
        message = p4runtime_pb2.Update(type=kind)
        fill_table_entry(message.entity.table_entry, key, action, names)
        messages.append(message)
    return [messages[i : i + limit] for i in range(0, len(messages), limit)]


# --- protobuf edge ----------------------------------------------------------------------


def to_table_entry(key: EntryKey, action: ActionCall, names: P4Names) -> p4runtime_pb2.TableEntry:
    """Name-level entry → P4Runtime TableEntry (canonical byte strings)."""
    entry = p4runtime_pb2.TableEntry()
    fill_table_entry(entry, key, action, names)
    return entry


def fill_table_entry(
    entry: p4runtime_pb2.TableEntry, key: EntryKey, action: ActionCall, names: P4Names
) -> None:
    """Write a name-level entry into an empty TableEntry (as :func:`to_table_entry`)."""
    table = names.table(key.table)
    entry.table_id = table.id
    entry.priority = key.priority
    for field_name, value in key.match:
        ref = table.match_field(field_name)
        match = entry.match.add()
        match.field_id = ref.id
        if isinstance(value, Exact):
            match.exact.value = encode_uint(value.value, ref.bitwidth)
        elif isinstance(value, Lpm):
            match.lpm.value = encode_uint(value.value, ref.bitwidth)
            match.lpm.prefix_len = value.prefix_len
        else:
            match.ternary.value = encode_uint(value.value, ref.bitwidth)
            match.ternary.mask = encode_uint(value.mask, ref.bitwidth)
    _fill_action(entry, action, names)


def _fill_action(entry: p4runtime_pb2.TableEntry, action: ActionCall, names: P4Names) -> None:
    action_ref = names.action(action.name)
    entry.action.action.action_id = action_ref.id
    for param_name, param_value in action.params:
        param_ref = action_ref.param(param_name)
        param = entry.action.action.params.add()
        param.param_id = param_ref.id
        param.value = encode_uint(param_value, param_ref.bitwidth)


def default_action_update(table: str, action: ActionCall, names: P4Names) -> p4runtime_pb2.Update:
    """A MODIFY of ``table``'s default action (P4Runtime: an entry with no match fields and
    ``is_default_action`` set)."""
    entry = p4runtime_pb2.TableEntry(table_id=names.table(table).id, is_default_action=True)
    _fill_action(entry, action, names)
    return p4runtime_pb2.Update(
        type=p4runtime_pb2.Update.MODIFY, entity=p4runtime_pb2.Entity(table_entry=entry)
    )


def from_table_entry(
    entry: p4runtime_pb2.TableEntry, names: P4Names
) -> tuple[EntryKey, ActionCall]:
    """P4Runtime TableEntry (any padding) → name-level entry, matches in key order."""
    table = names.tables_by_id[entry.table_id]
    field_names = {ref.id: ref.name for ref in table.match_fields.values()}
    match: list[tuple[str, MatchValue]] = []
    for item in entry.match:
        name = field_names[item.field_id]
        which = item.WhichOneof("field_match_type")
        value: MatchValue
        if which == "exact":
            value = Exact(int.from_bytes(item.exact.value, "big"))
        elif which == "lpm":
            value = Lpm(int.from_bytes(item.lpm.value, "big"), item.lpm.prefix_len)
        elif which == "ternary":
            value = Ternary(
                int.from_bytes(item.ternary.value, "big"),
                int.from_bytes(item.ternary.mask, "big"),
            )
        else:
            raise ValueError(f"{table.name}: match kind {which} is not used by the controller")
        match.append((name, value))
    action_ref = names.actions_by_id[entry.action.action.action_id]
    values = {p.param_id: int.from_bytes(p.value, "big") for p in entry.action.action.params}
    params = tuple(
        (ref.name, values[ref.id]) for ref in action_ref.params.values() if ref.id in values
    )
    return (
        EntryKey(table.name, tuple(sorted(match, key=_name)), entry.priority),
        ActionCall(action_ref.name, params),
    )


def canonical(key: EntryKey, action: ActionCall, names: P4Names) -> tuple[EntryKey, ActionCall]:
    """Full names and sorted match fields, as :func:`from_table_entry` yields them."""
    table = names.table(key.table).name
    action_ref = names.action(action.name)
    ordered = [(p, v) for p in action_ref.params for n, v in action.params if n == p]
    return (
        EntryKey(table, tuple(sorted(key.match, key=_name)), key.priority),
        ActionCall(action_ref.name, tuple(ordered)),
    )


def canonical_map(entries: Mapping[EntryKey, ActionCall], names: P4Names) -> EntryMap:
    result: EntryMap = {}
    for key, action in entries.items():
        k, a = canonical(key, action, names)
        result[k] = a
    return result
