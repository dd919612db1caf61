"""State every lowering layer shares: symbol tables, resolved types and the Python being written."""

from __future__ import annotations

import itertools
from typing import Any

from softswitch.frontend import ast
from softswitch.frontend.emitter import Emitter, py_name
from softswitch.frontend.errors import CompileError, SourceLocation
from softswitch.frontend.limits import MAX_FIELDS_PER_BLOCK
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
    HeaderT,
    MatchKindT,
    P4Type,
    StructT,
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
        # Per (block, action P4Info name), the function running the action in that block.
        self.action_fns: dict[tuple[str, str], str] = {}
        # Source order of actions and controls (by id of the declaration): an action may
        # only call one declared before it, as in p4c, so no action can recurse.
        self.declaration_order: dict[int, int] = {}
        # Per kind of P4Info object and name: the declaration that has it, and where.
        self.p4info_names: dict[tuple[str, str], tuple[int, SourceLocation]] = {}
        # Per header or struct type (by id, the type kept alive), how many fields it holds.
        self.field_counts: dict[int, tuple[P4Type, int]] = {}
        # Header and struct fields the block being lowered creates or copies per packet
        # (MAX_FIELDS_PER_BLOCK), and what one more counts for: PARSER_BASE_TRANSITIONS
        # in a parser state that can repeat, 0 while code is lowered a second time.
        self.block_fields = 0
        self.field_weight = 1
        # The same per action body (by P4Info name) and per table (its costliest action).
        self.action_fields: dict[str, int] = {}
        self.table_fields: dict[str, int] = {}
        for decl in program.decls:
            self.declaration_order[id(decl)] = len(self.declaration_order)
            if isinstance(decl, ast.ControlDecl):
                for local in decl.locals:
                    self.declaration_order[id(local)] = len(self.declaration_order)

    def field_count(self, t: P4Type) -> int:
        """Fields a value of ``t`` holds (MAX_TYPE_FIELDS), nested ones counted in full.

        Counted once per declared type and looked up by identity: walking (or hashing)
        a struct of structs again at every use takes time exponential in its depth."""
        if not isinstance(t, HeaderT | StructT):
            return 1
        known = self.field_counts.get(id(t))
        if known is not None:
            return known[1]
        count = (1 if isinstance(t, HeaderT) else 0) + sum(
            self.field_count(ft) for _, ft in t.fields
        )
        self.field_counts[id(t)] = (t, count)
        return count

    def count_fields(self, fields: int, loc: SourceLocation, what: str) -> None:
        """Add what a construct creates or copies to the budget of the block being lowered
        (MAX_FIELDS_PER_BLOCK): ``fields`` header and struct fields, ``what`` names the
        construct. Each runs per packet, as often as its parser state can repeat."""
        self.block_fields += fields * self.field_weight
        if self.block_fields > MAX_FIELDS_PER_BLOCK:
            assert self.ctx is not None
            if self.ctx.action is not None:
                block = f"action {self.ctx.action.name}"
            else:
                block = f"{self.ctx.kind} {self.ctx.name}"
            raise CompileError(
                loc,
                f"{block} creates or copies more than {MAX_FIELDS_PER_BLOCK:,} header and "
                f"struct fields per packet ({what} makes {self.block_fields:,})",
            )

    def declared_before(self, first: ast.Decl, second: ast.Decl) -> bool:
        """Whether ``first`` comes before ``second`` in the source (actions, controls)."""
        order = self.declaration_order
        return order.get(id(first), -1) < order.get(id(second), -1)

    def claim_p4info_name(self, kind: str, name: str, decl: ast.Decl) -> None:
        """Give ``decl`` the P4Info name ``name`` among the ``kind`` objects, or refuse a
        second declaration of that name: P4Info names are unique per kind (p4c refuses a
        repeated table or counter name), and two objects of one name would share one
        entry, the control plane reaching only one of them."""
        first = self.p4info_names.setdefault((kind, name), (id(decl), decl.loc))
        if first[0] != id(decl):
            raise CompileError(
                decl.loc,
                f"name '{name}' is used for multiple {kind} objects (the other is declared "
                f"at line {first[1].line}); give each its own @name",
            )

    def fresh(self, prefix: str) -> str:
        """A new identifier of the generated code: ``prefix`` (a constant, or made by
        :func:`py_name`) and a number no other identifier has."""
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
            code = py_name("p_", p.name)
            if p.name in scope.names:
                raise CompileError(p.loc, f"parameter {p.name} is declared twice")
            scope.names[p.name] = VarEntry(
                code, t, writable=p.direction in ("out", "inout") or isinstance(t, ExternT)
            )
            codes.append(code)
        return scope, codes
