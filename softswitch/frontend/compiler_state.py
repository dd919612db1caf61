"""State every lowering layer shares: symbol tables, resolved types and the Python being written."""

from __future__ import annotations

import itertools
from typing import Any

from softswitch.frontend import ast
from softswitch.frontend.emitter import Emitter
from softswitch.frontend.errors import CompileError, SourceLocation
from softswitch.frontend.lowered import (
    LoweredProgram,
)
from softswitch.frontend.scope import (
    ControlContext,
    Scope,
    VarEntry,
)
from softswitch.frontend.types import (
    Bits,
    Bool,
    ErrorT,
    ExternT,
    MatchKindT,
    P4Type,
    Varbit,
    Void,
)


class CompilerState:
    """Symbol tables and output of one compilation; the layers above add the lowering rules."""

    def __init__(self, program: ast.Program) -> None:
        self.program = program
        self.types: dict[str, P4Type] = {}
        self.type_locs: dict[str, SourceLocation] = {}
        self.globals = Scope({})
        self.errors: dict[str, int] = {}
        self.match_kinds: set[str] = set()
        self.extern_types: dict[str, ast.ExternDecl] = {}
        self.extern_functions: dict[str, ast.ExternFunctionDecl] = {}
        self.global_actions: dict[str, ast.ActionDecl] = {}
        self.parsers: dict[str, ast.ParserDecl] = {}
        self.controls: dict[str, ast.ControlDecl] = {}
        self.packages: dict[str, ast.PackageDecl] = {}
        self.block_types: dict[str, ast.ParserTypeDecl] = {}
        self.main: ast.Instantiation | None = None
        self.out = Emitter()
        self.lowered = LoweredProgram("")
        self.const_env: dict[str, Any] = {}
        self.counter = itertools.count()
        self.ctx: ControlContext | None = None
        # Per table (P4Info name), the code a statement ``t.apply();`` inlines.
        self.table_code: dict[str, list[str]] = {}
        # Source order of actions and controls (by id of the declaration): an action may
        # only call one declared before it, as in p4c, so no action can recurse.
        self.declaration_order: dict[int, int] = {}
        # Per header or struct type (by id, the type kept alive), how many fields it holds.
        self.field_counts: dict[int, tuple[P4Type, int]] = {}
        for decl in program.decls:
            self.declaration_order[id(decl)] = len(self.declaration_order)
            if isinstance(decl, ast.ControlDecl):
                for local in decl.locals:
                    self.declaration_order[id(local)] = len(self.declaration_order)

    def declared_before(self, first: ast.Decl, second: ast.Decl) -> bool:
        """Whether ``first`` comes before ``second`` in the source (actions, controls)."""
        order = self.declaration_order
        return order.get(id(first), -1) < order.get(id(second), -1)

    def fresh(self, prefix: str) -> str:
        return f"{prefix}{next(self.counter)}"

    def define_global(self, name: str, value: Any, loc: SourceLocation) -> None:
        if name in self.globals.names or name in self.types:
            raise CompileError(loc, f"{name} is declared twice")
        self.globals.names[name] = value

    def define_type(self, name: str, t: P4Type, loc: SourceLocation) -> None:
        if name in self.types or name in self.globals.names:
            raise CompileError(loc, f"type {name} is declared twice")
        self.types[name] = t
        self.type_locs[name] = loc

    def resolve_type(self, ref: ast.TypeRef) -> P4Type:
        if isinstance(ref, ast.BitType):
            if ref.signed:
                raise CompileError(ref.loc, "signed int<W> is not supported by this target")
            if ref.width <= 0:
                raise CompileError(ref.loc, "bit<W> needs W > 0")
            return Bits(ref.width)
        if isinstance(ref, ast.VarbitType):
            if ref.max_width <= 0 or ref.max_width % 8:
                raise CompileError(ref.loc, "varbit<W> needs W a positive multiple of 8")
            return Varbit(ref.max_width)
        if isinstance(ref, ast.BoolType):
            return Bool()
        if isinstance(ref, ast.VoidType):
            return Void()
        if isinstance(ref, ast.NamedType):
            if ref.name == "error":
                return ErrorT()
            if ref.name == "match_kind":
                return MatchKindT()
            t = self.types.get(ref.name)
            if t is None:
                raise CompileError(ref.loc, f"unknown type {ref.name}")
            return t
        raise CompileError(ref.loc, "unsupported type")

    def fold(self, code: str) -> Any:
        return eval(code, {"__builtins__": {}}, dict(self.const_env))

    def block_params(self, params: list[ast.Param]) -> tuple[Scope, list[str]]:
        scope = Scope({}, self.globals)
        codes: list[str] = []
        for p in params:
            t = self.resolve_type(p.type)
            code = "p_" + p.name
            if p.name in scope.names:
                raise CompileError(p.loc, f"parameter {p.name} is declared twice")
            scope.names[p.name] = VarEntry(
                code, t, writable=p.direction in ("out", "inout") or isinstance(t, ExternT)
            )
            codes.append(code)
        return scope, codes
