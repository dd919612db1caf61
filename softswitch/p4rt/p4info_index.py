"""Look-ups over a P4Info by id, built once per committed pipeline."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from p4.config.v1 import p4info_pb2


class MatchKind(Enum):
    EXACT = "exact"
    LPM = "lpm"
    TERNARY = "ternary"
    RANGE = "range"
    OPTIONAL = "optional"


_MATCH_KINDS = {
    p4info_pb2.MatchField.EXACT: MatchKind.EXACT,
    p4info_pb2.MatchField.LPM: MatchKind.LPM,
    p4info_pb2.MatchField.TERNARY: MatchKind.TERNARY,
    p4info_pb2.MatchField.RANGE: MatchKind.RANGE,
    p4info_pb2.MatchField.OPTIONAL: MatchKind.OPTIONAL,
}

# Match kinds that make a table need a non-zero priority on its entries (spec §9.1).
PRIORITY_KINDS = frozenset({MatchKind.TERNARY, MatchKind.RANGE, MatchKind.OPTIONAL})


@dataclass(frozen=True)
class MatchFieldInfo:
    field_id: int
    name: str
    bitwidth: int
    kind: MatchKind | None  # None: an architecture-specific match kind we do not execute
    # Precomputed for the write path: the FieldMatch oneof name, and how errors name it.
    kind_name: str = field(init=False)
    label: str = field(init=False)

    def __post_init__(self) -> None:
        kind_name = self.kind.value if self.kind is not None else "unsupported"
        object.__setattr__(self, "kind_name", kind_name)
        object.__setattr__(self, "label", f"match field '{self.name}'")


@dataclass(frozen=True)
class ActionRefInfo:
    action_id: int
    scope: int  # p4info_pb2.ActionRef.Scope


@dataclass(frozen=True)
class TableInfo:
    table_id: int
    name: str
    match_fields: dict[int, MatchFieldInfo]
    action_refs: dict[int, ActionRefInfo]
    size: int
    const_default_action_id: int
    is_const_table: bool
    indirect: bool  # an action profile implementation (not supported by this target)
    direct_counter_id: int | None
    needs_priority: bool = field(init=False)
    exact_field_ids: tuple[int, ...] = field(init=False)  # no don't-care: always given

    def __post_init__(self) -> None:
        kinds = [f.kind for f in self.match_fields.values()]
        object.__setattr__(self, "needs_priority", any(k in PRIORITY_KINDS for k in kinds))
        exact = tuple(f.field_id for f in self.match_fields.values() if f.kind is MatchKind.EXACT)
        object.__setattr__(self, "exact_field_ids", exact)


@dataclass(frozen=True)
class ParamInfo:
    param_id: int
    name: str
    bitwidth: int
    label: str  # how errors name it: parameter 'p' of 'action'


@dataclass(frozen=True)
class ActionInfo:
    action_id: int
    name: str
    params: dict[int, ParamInfo]  # in P4Info order, the order of runtime arguments
    param_ids: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "param_ids", tuple(self.params))


@dataclass(frozen=True)
class CounterInfo:
    counter_id: int
    name: str
    size: int


@dataclass
class P4InfoIndex:
    """Everything the service checks requests against, keyed by P4Info id."""

    p4info: p4info_pb2.P4Info
    tables: dict[int, TableInfo] = field(default_factory=dict)
    actions: dict[int, ActionInfo] = field(default_factory=dict)
    counters: dict[int, CounterInfo] = field(default_factory=dict)
    direct_counters: dict[int, int] = field(default_factory=dict)  # counter id -> table id

    @classmethod
    def build(cls, p4info: p4info_pb2.P4Info) -> P4InfoIndex:
        index = cls(p4info=p4info)
        direct_counter_ids = {c.preamble.id for c in p4info.direct_counters}
        for action in p4info.actions:
            params = {
                p.id: ParamInfo(
                    param_id=p.id,
                    name=p.name,
                    bitwidth=p.bitwidth,
                    label=f"parameter '{p.name}' of '{action.preamble.name}'",
                )
                for p in action.params
            }
            index.actions[action.preamble.id] = ActionInfo(
                action_id=action.preamble.id, name=action.preamble.name, params=params
            )
        for table in p4info.tables:
            fields = {
                m.id: MatchFieldInfo(
                    field_id=m.id,
                    name=m.name,
                    bitwidth=m.bitwidth,
                    kind=_MATCH_KINDS.get(m.match_type),
                )
                for m in table.match_fields
            }
            refs = {r.id: ActionRefInfo(action_id=r.id, scope=r.scope) for r in table.action_refs}
            direct = [i for i in table.direct_resource_ids if i in direct_counter_ids]
            index.tables[table.preamble.id] = TableInfo(
                table_id=table.preamble.id,
                name=table.preamble.name,
                match_fields=fields,
                action_refs=refs,
                size=table.size,
                const_default_action_id=table.const_default_action_id,
                is_const_table=table.is_const_table,
                indirect=table.implementation_id != 0,
                direct_counter_id=direct[0] if direct else None,
            )
        for counter in p4info.counters:
            index.counters[counter.preamble.id] = CounterInfo(
                counter_id=counter.preamble.id, name=counter.preamble.name, size=counter.size
            )
        for direct_counter in p4info.direct_counters:
            index.direct_counters[direct_counter.preamble.id] = direct_counter.direct_table_id
        return index
