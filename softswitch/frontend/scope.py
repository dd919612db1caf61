"""What the checker knows while it lowers: typed values, names in scope, the block being lowered."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from softswitch.frontend import ast
from softswitch.frontend.lowered import ActionInfo, TableInfo
from softswitch.frontend.types import P4Type


@dataclass
class Val:
    """A lowered expression: Python code, its P4 type, its value if constant."""

    code: str
    type: P4Type
    const: Any = None
    lvalue: bool = False
    writable: bool = True
    header_root: str | None = None  # code of the header whose field this is


@dataclass
class Scope:
    names: dict[str, Any]
    parent: Scope | None = None

    def lookup(self, name: str) -> Any:
        scope: Scope | None = self
        while scope is not None:
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        return None


@dataclass
class VarEntry:
    code: str
    type: P4Type
    writable: bool = True
    const: Any = None


@dataclass
class TableEntryRef:
    info: TableInfo
    decl: ast.TableDecl


@dataclass
class ExternInstance:
    kind: str  # counter, direct_counter, register
    pyname: str
    info: Any
    type_args: list[P4Type]


@dataclass
class ControlContext:
    name: str
    kind: str  # "parser", "control"
    params: list[ast.Param]
    param_codes: list[str]
    actions: dict[str, ActionInfo] = field(default_factory=dict)
    in_action: bool = False
    # The action whose body is being lowered (while in_action).
    action: ast.ActionDecl | None = None
    uses_exit: bool = False
    applied: set[str] = field(default_factory=set)
