"""What lowering hands on: the generated Python and the control-plane objects it declares.

P4Info generation and the pipeline read these; neither needs the syntax
tree nor the checker's scopes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from softswitch.frontend import ast
from softswitch.frontend.errors import SourceLocation

# v1model: egress_spec 511 drops the packet (BMv2's default drop port with 9-bit ports).
# The generated code writes it and the pipeline tests for it.
DROP_PORT = 511


@dataclass
class ActionInfo:
    name: str  # fully qualified P4Info name
    decl: ast.ActionDecl
    params: list[tuple[str, int]]  # control-plane params: (name, bitwidth)
    control: str | None


@dataclass
class KeyInfo:
    name: str
    match_kind: str
    bitwidth: int
    loc: SourceLocation


@dataclass
class TableInfo:
    name: str
    control: str
    keys: list[KeyInfo]
    actions: list[tuple[str, str]]  # (action P4Info name, scope: ""/"table"/"default")
    default_action: str
    default_args: list[int]
    default_is_const: bool
    size: int
    direct_counter: str | None
    const_entries: list[tuple[list[tuple[str, int, int]], int, str, list[int]]] | None
    # const entries: ([(kind, a, b) per key], priority, action name, args)
    pyname: str = ""  # the generated code's global for the table, numbered (never the name)
    annotations: list[str] = field(default_factory=list)  # as written, e.g. '@foo("x")'


@dataclass
class CounterInfo:
    name: str
    size: int
    unit: str  # "packets", "bytes", "packets_and_bytes"
    pyname: str = ""


@dataclass
class DirectCounterInfo:
    name: str
    unit: str
    table: str = ""


@dataclass
class RegisterInfo:
    name: str
    size: int
    bitwidth: int
    pyname: str = ""


@dataclass
class LoweredProgram:
    source: str
    tables: list[TableInfo] = field(default_factory=list)
    actions: dict[str, ActionInfo] = field(default_factory=dict)
    counters: list[CounterInfo] = field(default_factory=list)
    direct_counters: list[DirectCounterInfo] = field(default_factory=list)
    registers: list[RegisterInfo] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    # per control's Python function name, the action ids dispatch table is built at load
    action_tables: dict[str, dict[str, str]] = field(default_factory=dict)
    # Per action (P4Info name), the generated code's global holding its id: numbered,
    # since an @name's text is no Python identifier (and could be code).
    action_globals: dict[str, str] = field(default_factory=dict)
    headers_class: str = ""
    metadata_class: str = ""
