"""Type checking and lowering of a v1model program to Python source.

One pass over the syntax tree checks every construct and emits Python: a
class per header/struct type, an extract and an emit function per header
type, one function per parser, control, action and table. The pipeline
compiles that source once with ``compile()``; packets then run plain Python
functions over ints, with no tree walking at packet time.

Value representation: ``bit<W>`` is an int in [0, 2**W), ``bool`` a bool,
errors and enums small ints, a varbit field two attributes (value and
width in bits), a header an object with a ``_v`` validity flag.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from softswitch.frontend import ast
from softswitch.frontend.codecs import class_name, emit_header_codec, emit_type_classes, zero_code
from softswitch.frontend.emitter import Emitter, field_attr
from softswitch.frontend.errors import CompileError, SourceLocation
from softswitch.frontend.field_lists import bit_string_code, csum16_code
from softswitch.frontend.types import (
    Bits,
    Bool,
    EnumT,
    ErrorT,
    ExternT,
    HeaderT,
    IntLiteral,
    MatchKindT,
    P4Type,
    StringT,
    StructT,
    TupleT,
    Varbit,
    Void,
    width_of,
)

V1SWITCH_BLOCKS = ("parser", "verify_checksum", "ingress", "egress", "compute_checksum", "deparser")
DROP_PORT = 511
SUPPORTED_HASHES = ("crc16", "crc32", "csum16", "identity", "xor16")


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
    pyname: str = ""


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
    headers_class: str = ""
    metadata_class: str = ""


def action_id_global(action_name: str) -> str:
    """Name of the generated code's global holding an action's P4Info id."""
    return "AID_" + action_name.replace(".", "__")


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
    uses_exit: bool = False
    applied: set[str] = field(default_factory=set)


class Compiler:
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

    # ================================================================== entry point

    def compile(self) -> LoweredProgram:
        for decl in self.program.decls:
            self.declare(decl)
        if self.main is None:
            raise CompileError(
                None, "the program has no 'main' package instance (V1Switch(...) main;)"
            )
        blocks = self.resolve_main(self.main)
        self.lowered.errors = dict(self.errors)
        self.emit_prelude()
        for name, block in zip(V1SWITCH_BLOCKS, blocks, strict=True):
            if isinstance(block, ast.ParserDecl):
                self.lower_parser(block, name)
            else:
                self.lower_control(block, name)
        self.lowered.source = self.out.text()
        return self.lowered

    # ================================================================== declarations

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

    def declare(self, decl: ast.Decl) -> None:
        if isinstance(decl, ast.HeaderDecl | ast.StructDecl):
            fields: list[tuple[str, P4Type]] = []
            seen: set[str] = set()
            for f in decl.fields:
                if f.name in seen:
                    raise CompileError(f.loc, f"field {f.name} is declared twice in {decl.name}")
                seen.add(f.name)
                ft = self.resolve_type(f.type)
                if isinstance(decl, ast.HeaderDecl) and not isinstance(ft, Bits | Varbit):
                    if isinstance(ft, EnumT) and ft.underlying is not None:
                        ft = ft.underlying
                    elif isinstance(ft, Bool):
                        raise CompileError(
                            f.loc, f"header field {f.name} must be bit<W> (bool is not allowed)"
                        )
                    else:
                        raise CompileError(
                            f.loc,
                            f"header field {f.name} of type {ft} is not "
                            f"allowed; use bit<W> or varbit<W>",
                        )
                fields.append((f.name, ft))
            if isinstance(decl, ast.HeaderDecl):
                header = HeaderT(decl.name, tuple(fields))
                varbits = [n for n, t in fields if isinstance(t, Varbit)]
                if len(varbits) > 1:
                    raise CompileError(
                        decl.loc, f"header {decl.name} has more than one varbit field"
                    )
                if header.fixed_bits % 8:
                    raise CompileError(
                        decl.loc,
                        f"header {decl.name} is {header.fixed_bits} bits long; "
                        f"headers must be a whole number of bytes",
                    )
                self.define_type(decl.name, header, decl.loc)
            else:
                self.define_type(decl.name, StructT(decl.name, tuple(fields)), decl.loc)
        elif isinstance(decl, ast.TypedefDecl):
            self.define_type(decl.name, self.resolve_type(decl.type), decl.loc)
        elif isinstance(decl, ast.EnumDecl):
            underlying = None
            if decl.underlying is not None:
                ut = self.resolve_type(decl.underlying)
                if not isinstance(ut, Bits):
                    raise CompileError(decl.loc, "enum underlying type must be bit<W>")
                underlying = ut
            enum = EnumT(decl.name, tuple(decl.members), underlying)
            self.define_type(decl.name, enum, decl.loc)
            values: dict[str, int] = {}
            for i, (member, value_expr) in enumerate(zip(decl.members, decl.values, strict=True)):
                if value_expr is not None:
                    values[member] = self.const_int(value_expr)
                else:
                    values[member] = i
            self.globals.names[f"enum:{decl.name}"] = values
        elif isinstance(decl, ast.ErrorDecl):
            for member in decl.members:
                if member in self.errors:
                    raise CompileError(decl.loc, f"error.{member} is declared twice")
                self.errors[member] = len(self.errors)
        elif isinstance(decl, ast.MatchKindDecl):
            self.match_kinds.update(decl.members)
        elif isinstance(decl, ast.ConstDecl):
            t = self.resolve_type(decl.type)
            value = self.lower_expr(decl.value, Scope({}, self.globals), expected=t)
            value = self.convert(value, t, decl.value.loc)
            if value.const is None:
                raise CompileError(
                    decl.value.loc,
                    f"the value of constant {decl.name} is not a compile-time constant",
                )
            self.define_global(
                decl.name, VarEntry(repr(value.const), t, False, value.const), decl.loc
            )
        elif isinstance(decl, ast.ExternDecl):
            self.extern_types[decl.name] = decl
            self.types[decl.name] = ExternT(decl.name)
        elif isinstance(decl, ast.ExternFunctionDecl):
            self.extern_functions[decl.name] = decl
            self.define_global(decl.name, decl, decl.loc)
        elif isinstance(decl, ast.ActionDecl):
            self.define_global(decl.name, decl, decl.loc)
            self.global_actions[decl.name] = decl
        elif isinstance(decl, ast.ParserDecl):
            self.define_global(decl.name, decl, decl.loc)
            self.parsers[decl.name] = decl
        elif isinstance(decl, ast.ControlDecl):
            self.define_global(decl.name, decl, decl.loc)
            self.controls[decl.name] = decl
        elif isinstance(decl, ast.ParserTypeDecl):
            self.block_types[decl.name] = decl
            self.types[decl.name] = ExternT(decl.name)
        elif isinstance(decl, ast.PackageDecl):
            self.packages[decl.name] = decl
        elif isinstance(decl, ast.Instantiation):
            if decl.name != "main":
                raise CompileError(
                    decl.loc, f"top-level instance {decl.name} is not supported (only 'main')"
                )
            self.main = decl
        elif isinstance(decl, ast.FunctionDecl):
            raise CompileError(
                decl.loc, "functions are not supported by this target; use an action"
            )
        else:
            raise CompileError(decl.loc, f"unsupported declaration {type(decl).__name__}")

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

    def resolve_main(self, main: ast.Instantiation) -> list[ast.ParserDecl | ast.ControlDecl]:
        if not isinstance(main.type, ast.NamedType) or main.type.name != "V1Switch":
            raise CompileError(
                main.loc, "main must be a V1Switch(...) instance (v1model architecture)"
            )
        if "V1Switch" not in self.packages:
            raise CompileError(main.loc, "V1Switch is not declared; add #include <v1model.p4>")
        if len(main.args) != 6:
            raise CompileError(main.loc, f"V1Switch takes 6 blocks, got {len(main.args)}")
        blocks: list[ast.ParserDecl | ast.ControlDecl] = []
        for role, arg in zip(V1SWITCH_BLOCKS, main.args, strict=True):
            if not (isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and not arg.args):
                raise CompileError(arg.loc, f"the {role} argument of V1Switch must be Name()")
            name = arg.func.name
            block: ast.ParserDecl | ast.ControlDecl | None
            if role == "parser":
                block = self.parsers.get(name)
                if block is None:
                    raise CompileError(arg.loc, f"{name} is not a parser")
            else:
                block = self.controls.get(name)
                if block is None:
                    raise CompileError(arg.loc, f"{name} is not a control")
            expected = {
                "parser": 4,
                "deparser": 2,
                "verify_checksum": 2,
                "compute_checksum": 2,
            }.get(role, 3)
            if len(block.params) != expected:
                raise CompileError(
                    block.loc,
                    f"{name} used as V1Switch {role} must take {expected} "
                    f"parameters, it takes {len(block.params)}",
                )
            blocks.append(block)
        return blocks

    # ================================================================== constants

    def const_int(self, expr: ast.Expr, scope: Scope | None = None) -> int:
        value = self.lower_expr(expr, scope or Scope({}, self.globals))
        if value.const is None or isinstance(value.const, bool):
            raise CompileError(expr.loc, "expected an integer compile-time constant")
        return int(value.const)

    def fold(self, code: str) -> Any:
        return eval(code, {"__builtins__": {}}, dict(self.const_env))

    # ================================================================== prelude: type classes

    def emit_prelude(self) -> None:
        emit_type_classes(self.out, list(self.types.values()), self.type_locs)
        for t in self.types.values():
            if isinstance(t, HeaderT):
                emit_header_codec(self.out, t, self.errors)
        self.out("")

    # ================================================================== parsers

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

    def lower_parser(self, decl: ast.ParserDecl, role: str) -> None:
        scope, codes = self.block_params(decl.params)
        p = decl.params
        if self.resolve_type(p[0].type) != ExternT("packet_in"):
            raise CompileError(p[0].loc, "the first parser parameter must be packet_in")
        if self.resolve_type(p[3].type) != self.types.get("standard_metadata_t"):
            raise CompileError(p[3].loc, "the last parser parameter must be standard_metadata_t")
        for param in (p[1], p[2]):
            if not isinstance(self.resolve_type(param.type), StructT):
                raise CompileError(param.loc, f"parser parameter {param.name} must be a struct")
        headers_t = self.resolve_type(p[1].type)
        meta_t = self.resolve_type(p[2].type)
        assert isinstance(headers_t, StructT) and isinstance(meta_t, StructT)
        self.lowered.headers_class = class_name(headers_t)
        self.lowered.metadata_class = class_name(meta_t)
        scope.names[p[0].name] = VarEntry("_packet", ExternT("packet_in"))
        self.ctx = ControlContext(decl.name, "parser", decl.params, codes)
        states = {s.name: s for s in decl.states}
        if len(states) != len(decl.states):
            dup = next(s for s in decl.states if sum(x.name == s.name for x in decl.states) > 1)
            raise CompileError(dup.loc, f"state {dup.name} is declared twice")
        if "start" not in states:
            raise CompileError(decl.loc, f"parser {decl.name} has no 'start' state")
        for reserved in ("accept", "reject"):
            if reserved in states:
                raise CompileError(states[reserved].loc, f"state name {reserved} is reserved")
        numbers = {name: i for i, name in enumerate(states)}
        out = self.out
        out(f"def run_{role}(_sm, _pkt, p_{p[1].name}, p_{p[2].name}, p_{p[3].name}):")
        out.indent()
        out("_off = 0")
        out("_plen = len(_pkt)")
        for local in decl.locals:
            self.lower_local(local, scope, out)
        # Checked and lowered as a state machine first; an acyclic parse graph
        # is then lowered again as nested code (no dispatch loop per state).
        machine = Emitter()
        machine.depth = out.depth
        self.out = machine
        self.lower_state_machine(decl, scope, numbers)
        self.out = out
        inline = Emitter()
        inline.depth = out.depth
        if self.parse_graph_is_small_dag(states):
            self.out = inline
            out("try:")
            inline.depth += 1
            self.lower_state_inline(states["start"], states, scope)
            self.out = out
            out.lines.extend(inline.lines)
        else:
            out.lines.extend(machine.lines)
        out("except _Reject as r:")
        out.indent()
        out("_sm.f_parser_error = r.code")
        out("return _off")
        out.dedent()
        out.dedent()
        self.ctx = None

    def lower_state_machine(
        self, decl: ast.ParserDecl, scope: Scope, numbers: dict[str, int]
    ) -> None:
        out = self.out

        def goto(name: str, loc: SourceLocation) -> None:
            out(self.state_target(name, loc, numbers))

        out(f"_st = {numbers['start']}")
        out("try:")
        out.indent()
        out("while True:")
        out.indent()
        for i, state in enumerate(decl.states):
            out(("if" if i == 0 else "elif") + f" _st == {numbers[state.name]}:")
            out.indent()
            state_scope = Scope({}, scope)
            for stmt in state.stmts:
                self.lower_stmt(stmt, state_scope)
            self.lower_transition(state, state_scope, goto)
            out.dedent()
        out.dedent()
        out.dedent()

    def parse_graph_is_small_dag(self, states: dict[str, ast.ParserState]) -> bool:
        """True when inlining every path from start stays small and loop-free."""
        budget = [64]

        def visit(name: str, path: tuple[str, ...]) -> bool:
            if name in ("accept", "reject"):
                return True
            if name in path:
                return False
            budget[0] -= 1
            if budget[0] < 0:
                return False
            tr = states[name].transition
            if tr is None:
                return True
            targets = [tr.target] if tr.target is not None else [t for _, t, _ in tr.cases]
            return all(visit(t, (*path, name)) for t in targets)

        return visit("start", ())

    def lower_state_inline(
        self, state: ast.ParserState, states: dict[str, ast.ParserState], scope: Scope
    ) -> None:
        def goto(name: str, loc: SourceLocation) -> None:
            if name == "accept":
                self.out("return _off")
            elif name == "reject":
                self.out(f"raise _Reject({self.errors['NoError']})")
            else:
                self.lower_state_inline(states[name], states, scope)

        state_scope = Scope({}, scope)
        for stmt in state.stmts:
            self.lower_stmt(stmt, state_scope)
        self.lower_transition(state, state_scope, goto)

    def state_target(self, name: str, loc: SourceLocation, numbers: dict[str, int]) -> str:
        if name == "accept":
            return "return _off"
        if name == "reject":
            return f"raise _Reject({self.errors['NoError']})"
        if name not in numbers:
            raise CompileError(loc, f"unknown parser state {name}")
        return f"_st = {numbers[name]}; continue"

    def lower_transition(
        self, state: ast.ParserState, scope: Scope, goto: Callable[[str, SourceLocation], None]
    ) -> None:
        out = self.out
        tr = state.transition
        if tr is None:
            out(f"raise _Reject({self.errors['NoError']})")
            return
        if tr.target is not None:
            goto(tr.target, tr.loc)
            return
        keys = [self.lower_expr(e, scope) for e in tr.select_on]
        key_names: list[str] = []
        for key, expr in zip(keys, tr.select_on, strict=True):
            if not isinstance(key.type, Bits | Bool | ErrorT | EnumT):
                raise CompileError(expr.loc, f"cannot select on a value of type {key.type}")
            name = self.fresh("_k")
            out(f"{name} = {key.code}")
            key_names.append(name)
        first = True
        has_default = False
        for keyset, target, loc in tr.cases:
            items = keyset.items if isinstance(keyset, ast.ListExpr) else [keyset]
            if isinstance(keyset, ast.Default):
                items = [keyset] * len(keys)
            if len(items) != len(keys):
                raise CompileError(
                    keyset.loc, f"select case has {len(items)} values for {len(keys)} keys"
                )
            conds = [
                c
                for c in (
                    self.keyset_condition(item, key, name)
                    for item, key, name in zip(items, keys, key_names, strict=True)
                )
                if c != "True"
            ]
            cond = " and ".join(conds) if conds else "True"
            if cond == "True":
                has_default = True
            out(("if " if first else "elif ") + cond + ":")
            out.indent()
            goto(target, loc)
            out.dedent()
            first = False
            if has_default:
                break
        if not has_default:
            out(("" if first else "else: ") + f"raise _Reject({self.errors['NoMatch']})")

    def keyset_condition(self, item: ast.Expr, key: Val, name: str) -> str:
        if isinstance(item, ast.Default):
            return "True"
        if isinstance(item, ast.Mask):
            value = self.const_of_type(item.value, key.type)
            mask = self.const_of_type(item.mask, key.type)
            if value & ~mask:
                return "False"
            return f"({name} & {mask}) == {value}"
        if isinstance(item, ast.Range):
            low = self.const_of_type(item.low, key.type)
            high = self.const_of_type(item.high, key.type)
            return f"{low} <= {name} <= {high}"
        value = self.const_of_type(item, key.type)
        return f"{name} == {value!r}"

    def const_of_type(self, expr: ast.Expr, t: P4Type) -> Any:
        value = self.lower_expr(expr, Scope({}, self.globals), expected=t)
        value = self.convert(value, t, expr.loc)
        if value.const is None:
            raise CompileError(expr.loc, "select and entry values must be compile-time constants")
        return value.const

    # ================================================================== controls

    def lower_control(self, decl: ast.ControlDecl, role: str) -> None:
        scope, codes = self.block_params(decl.params)
        ctx = ControlContext(decl.name, "control", decl.params, codes)
        self.ctx = ctx
        for action_name, action_decl in self.global_actions.items():
            ctx.actions[action_name] = self.declare_action(action_decl, None)
        if role == "deparser":
            if self.resolve_type(decl.params[0].type) != ExternT("packet_out"):
                raise CompileError(
                    decl.params[0].loc, "the first deparser parameter must be packet_out"
                )
            scope.names[decl.params[0].name] = VarEntry(codes[0], ExternT("packet_out"))
        elif role in ("ingress", "egress") and self.resolve_type(
            decl.params[2].type
        ) != self.types.get("standard_metadata_t"):
            raise CompileError(
                decl.params[2].loc, f"the third {role} parameter must be standard_metadata_t"
            )
        out = self.out
        control_locals = Emitter()
        control_locals.depth = 1
        tables: list[tuple[ast.TableDecl, TableInfo]] = []
        # Control-level declarations: constants, variables, instances, actions, tables.
        for local in decl.locals:
            if isinstance(local, ast.ActionDecl):
                if local.name in scope.names:
                    raise CompileError(local.loc, f"{local.name} is declared twice")
                info = self.declare_action(local, decl.name)
                scope.names[local.name] = info
                ctx.actions[local.name] = info
            elif isinstance(local, ast.TableDecl):
                if local.name in scope.names:
                    raise CompileError(local.loc, f"{local.name} is declared twice")
                info_t = self.declare_table(local, decl.name, scope)
                scope.names[local.name] = TableEntryRef(info_t, local)
                tables.append((local, info_t))
            elif isinstance(local, ast.Instantiation):
                scope.names[local.name] = self.declare_instance(local, decl.name, scope)
            elif isinstance(local, ast.VarDecl | ast.ConstDecl):
                self.lower_local(local, scope, control_locals, control_level=True)
            else:
                raise CompileError(local.loc, "unsupported declaration in a control")
        # Direct counters attach to tables.
        for table_decl, table_info in tables:
            if table_decl.counters is not None:
                ref = table_decl.counters
                inst = scope.lookup(ref.name) if isinstance(ref, ast.Name) else None
                if not isinstance(inst, ExternInstance) or inst.kind != "direct_counter":
                    raise CompileError(ref.loc, "the counters property must name a direct_counter")
                if inst.info.table:
                    raise CompileError(
                        ref.loc,
                        f"direct counter {inst.info.name} is already attached to {inst.info.table}",
                    )
                inst.info.table = table_info.name
                table_info.direct_counter = inst.info.name
        sig = ", ".join(["_sm", "_cl", *codes])
        # Actions used by this control (its own and global ones referenced by tables/calls).
        for name, info in list(ctx.actions.items()):
            self.emit_action(info, sig, scope, control_locals)
            del name
        for table_decl, table_info in tables:
            self.emit_table(table_decl, table_info, sig, scope)
        self.lowered.action_tables[decl.name] = {
            info.name: self.action_fn(info) for info in ctx.actions.values()
        }
        out(f"def run_{role}({', '.join(['_sm', *codes])}):")
        out.indent()
        if role == "deparser":
            out(f"_out = {codes[0]}")
        if control_locals.lines:
            out("_cl = _Locals()")
            out.lines.extend(control_locals.lines)
        else:
            out("_cl = None")
        body = Emitter()
        body.depth = out.depth + 1
        self.out = body
        self.lower_block(decl.apply, Scope({}, scope))
        self.out = out
        if ctx.uses_exit:
            # P4 exit leaves the whole control, also from inside an action.
            out("try:")
            out.lines.extend(body.lines)
            out("except _Exit:")
            out("    pass")
        else:
            body.depth = out.depth
            out.lines.extend(line[4:] for line in body.lines)
        out("return")
        out.dedent()
        self.ctx = None

    def declare_instance(
        self, inst: ast.Instantiation, control: str, scope: Scope
    ) -> ExternInstance:
        assert isinstance(inst.type, ast.NamedType)
        kind = inst.type.name
        qualified = self.control_plane_name(inst, control)
        pyname = "X_" + qualified.replace(".", "_")
        type_args = [self.resolve_type(a) for a in inst.type.args]

        def arg(i: int) -> ast.Expr:
            if i >= len(inst.args):
                raise CompileError(inst.loc, f"{kind} needs {i + 1} constructor arguments")
            return inst.args[i]

        def unit(expr: ast.Expr, enum: str) -> str:
            if (
                isinstance(expr, ast.Member)
                and isinstance(expr.base, ast.Name)
                and expr.base.name == enum
            ):
                members = self.globals.names.get(f"enum:{enum}", {})
                if expr.member in members:
                    return expr.member
            raise CompileError(expr.loc, f"expected a {enum} value")

        if kind == "counter":
            if len(inst.args) != 2:
                raise CompileError(inst.loc, "counter takes (size, CounterType)")
            size = self.const_int(arg(0), scope)
            if size <= 0:
                raise CompileError(arg(0).loc, "counter size must be positive")
            info = CounterInfo(qualified, size, unit(arg(1), "CounterType"), pyname)
            self.lowered.counters.append(info)
            return ExternInstance(kind, pyname, info, type_args)
        if kind == "direct_counter":
            if len(inst.args) != 1:
                raise CompileError(inst.loc, "direct_counter takes (CounterType)")
            dinfo = DirectCounterInfo(qualified, unit(arg(0), "CounterType"))
            self.lowered.direct_counters.append(dinfo)
            return ExternInstance(kind, pyname, dinfo, type_args)
        if kind == "register":
            if len(inst.args) != 1 or not type_args:
                raise CompileError(inst.loc, "register<T, I> takes (size)")
            value_type = type_args[0]
            if not isinstance(value_type, Bits):
                raise CompileError(inst.loc, "register values must be bit<W>")
            size = self.const_int(arg(0), scope)
            rinfo = RegisterInfo(qualified, size, value_type.width, pyname)
            self.lowered.registers.append(rinfo)
            return ExternInstance(kind, pyname, rinfo, type_args)
        if kind in self.extern_types:
            raise CompileError(inst.loc, f"extern {kind} is not supported by this target")
        raise CompileError(inst.loc, f"unknown extern type {kind}")

    @staticmethod
    def control_plane_name(decl: ast.Decl, control: str | None) -> str:
        """P4Info name as p4c forms it: ``Control.name``; ``@name("x")`` renames the last
        part, ``@name(".x")`` makes it global."""
        annotation = decl.annotation("name")
        name = decl.name
        if annotation is not None:
            if len(annotation.args) != 1 or not isinstance(annotation.args[0], ast.StringLit):
                raise CompileError(annotation.loc, '@name takes one string, e.g. @name("x")')
            name = annotation.args[0].value
            if name.startswith("."):
                return name[1:]
        return f"{control}.{name}" if control else name

    def declare_action(self, decl: ast.ActionDecl, control: str | None) -> ActionInfo:
        name = self.control_plane_name(decl, control)
        params: list[tuple[str, int]] = []
        for p in decl.params:
            if p.direction:
                raise CompileError(
                    p.loc,
                    f"action parameter {p.name}: directions are not supported; "
                    f"use directionless (control-plane) parameters",
                )
            t = self.resolve_type(p.type)
            if not isinstance(t, Bits):
                raise CompileError(p.loc, f"action parameter {p.name} must be bit<W>")
            params.append((p.name, t.width))
        existing = self.lowered.actions.get(name)
        if existing is not None:
            return existing
        info = ActionInfo(name, decl, params, control)
        self.lowered.actions[name] = info
        return info

    def action_fn(self, info: ActionInfo) -> str:
        assert self.ctx is not None
        return "a_" + self.ctx.name + "__" + info.name.replace(".", "__")

    def use_action(self, name: str, loc: SourceLocation, scope: Scope) -> ActionInfo:
        assert self.ctx is not None
        found = scope.lookup(name)
        if isinstance(found, ActionInfo):
            return found
        if isinstance(found, ast.ActionDecl):
            info = self.declare_action(found, None)
            self.ctx.actions.setdefault(name, info)
            return info
        raise CompileError(loc, f"{name} is not an action")

    def emit_action(
        self, info: ActionInfo, sig: str, scope: Scope, control_locals: Emitter
    ) -> None:
        assert self.ctx is not None
        out = self.out
        params = ", ".join("p_" + n for n, _ in info.params)
        out(f"def {self.action_fn(info)}({sig}{', ' + params if params else ''}):")
        out.indent()
        action_scope = Scope(
            {n: VarEntry("p_" + n, Bits(w), writable=True) for n, w in info.params},
            scope if info.control else Scope({}, self.globals),
        )
        self.ctx.in_action = True
        self.lower_block(info.decl.body, action_scope)
        self.ctx.in_action = False
        out("return")
        out.dedent()

    # ------------------------------------------------------------------ tables

    def declare_table(self, decl: ast.TableDecl, control: str, scope: Scope) -> TableInfo:
        assert self.ctx is not None
        name = self.control_plane_name(decl, control)
        keys: list[KeyInfo] = []
        for key in decl.keys or []:
            if key.match_kind not in self.match_kinds:
                raise CompileError(key.loc, f"unknown match kind {key.match_kind}")
            if key.match_kind == "selector":
                raise CompileError(key.loc, "selector match (action selectors) is not supported")
            value = self.lower_expr(key.expr, scope)
            if not isinstance(value.type, Bits | Bool | EnumT | ErrorT):
                raise CompileError(key.loc, f"table key of type {value.type} is not supported")
            if isinstance(value.type, ErrorT | EnumT) and not (
                isinstance(value.type, EnumT) and value.type.underlying
            ):
                raise CompileError(key.loc, f"table key of type {value.type} is not supported")
            key_name = self.key_name(key)
            keys.append(KeyInfo(key_name, key.match_kind, width_of(value.type), key.loc))
        if decl.actions is None:
            raise CompileError(decl.loc, f"table {decl.name} has no actions property")
        actions: list[tuple[str, str]] = []
        action_infos: dict[str, ActionInfo] = {}
        for ref in decl.actions:
            info = self.use_action(ref.name, ref.loc, scope)
            if ref.args:
                raise CompileError(ref.loc, "actions in an actions list take no arguments here")
            scope_kind = ""
            if any(a.name == "defaultonly" for a in ref.annotations):
                scope_kind = "default"
            elif any(a.name == "tableonly" for a in ref.annotations):
                scope_kind = "table"
            if info.name in action_infos:
                raise CompileError(ref.loc, f"action {ref.name} is listed twice")
            actions.append((info.name, scope_kind))
            action_infos[info.name] = info
            self.ctx.actions.setdefault(ref.name, info)
        default_name = "NoAction"
        default_args: list[int] = []
        if decl.default_action is not None:
            ref = decl.default_action
            info = self.use_action(ref.name, ref.loc, scope)
            if info.name not in action_infos:
                raise CompileError(
                    ref.loc, f"default action {ref.name} is not in the actions of table {decl.name}"
                )
            if len(ref.args) != len(info.params):
                raise CompileError(
                    ref.loc,
                    f"action {ref.name} takes {len(info.params)} arguments, got {len(ref.args)}",
                )
            default_args = [
                self.const_of_type(a, Bits(w))
                for a, (_, w) in zip(ref.args, info.params, strict=True)
            ]
            default_name = info.name
        else:
            if "NoAction" not in action_infos:
                raise CompileError(
                    decl.loc,
                    f"table {decl.name} needs a default_action (NoAction is not in its actions)",
                )
        size = 1024
        if decl.size is not None:
            size = self.const_int(decl.size, scope)
            if size <= 0:
                raise CompileError(decl.size.loc, "table size must be positive")
        info_t = TableInfo(
            name,
            control,
            keys,
            actions,
            default_name,
            default_args,
            decl.default_is_const,
            size,
            None,
            None,
        )
        info_t.pyname = "T_" + name.replace(".", "_")
        if decl.entries is not None:
            info_t.const_entries = self.const_entries(decl, keys, action_infos, scope)
        self.lowered.tables.append(info_t)
        return info_t

    def key_name(self, key: ast.KeyElement) -> str:
        for a in key.annotations:
            if a.name == "name" and a.args and isinstance(a.args[0], ast.StringLit):
                return a.args[0].value
        return self.expr_text(key.expr)

    def expr_text(self, expr: ast.Expr) -> str:
        """The key's source text as p4c names the match field (``hdr.ipv4.dstAddr``)."""
        if isinstance(expr, ast.Name):
            return expr.name
        if isinstance(expr, ast.Member):
            return f"{self.expr_text(expr.base)}.{expr.member}"
        if (
            isinstance(expr, ast.Call)
            and not expr.args
            and isinstance(expr.func, ast.Member)
            and expr.func.member == "isValid"
        ):
            return f"{self.expr_text(expr.func.base)}.$valid$"  # p4c's name for validity keys
        if (
            isinstance(expr, ast.Slice)
            and isinstance(expr.high, ast.IntLit)
            and isinstance(expr.low, ast.IntLit)
        ):
            return f"{self.expr_text(expr.base)}[{expr.high.value}:{expr.low.value}]"
        raise CompileError(
            expr.loc, "table keys must be fields, slices or isValid() (or carry @name)"
        )

    def const_entries(
        self, decl: ast.TableDecl, keys: list[KeyInfo], actions: dict[str, ActionInfo], scope: Scope
    ) -> list[tuple[list[tuple[str, int, int]], int, str, list[int]]]:
        entries: list[tuple[list[tuple[str, int, int]], int, str, list[int]]] = []
        needs_priority = any(k.match_kind in ("ternary", "range", "optional") for k in keys)
        for index, entry in enumerate(decl.entries or []):
            if len(entry.keys) != len(keys):
                raise CompileError(
                    entry.loc,
                    f"entry has {len(entry.keys)} key values, table "
                    f"{decl.name} has {len(keys)} keys",
                )
            matches: list[tuple[str, int, int]] = []
            for value_expr, key in zip(entry.keys, keys, strict=True):
                t = Bits(key.bitwidth)
                full = (1 << key.bitwidth) - 1
                if isinstance(value_expr, ast.Default):
                    matches.append(("dontcare", 0, 0))
                elif isinstance(value_expr, ast.Mask):
                    if key.match_kind not in ("ternary", "lpm"):
                        raise CompileError(
                            value_expr.loc,
                            f"a masked value needs a ternary key, {key.name} is {key.match_kind}",
                        )
                    v = self.const_of_type(value_expr.value, t)
                    m = self.const_of_type(value_expr.mask, t)
                    if key.match_kind == "lpm":
                        length = bin(m).count("1")
                        if m != full ^ ((1 << (key.bitwidth - length)) - 1):
                            raise CompileError(value_expr.loc, "an lpm mask must be a prefix")
                        matches.append(("lpm", v & m, length))
                    else:
                        matches.append(("ternary", v & m, m))
                elif isinstance(value_expr, ast.Range):
                    if key.match_kind != "range":
                        raise CompileError(
                            value_expr.loc,
                            f"a range needs a range key, {key.name} is {key.match_kind}",
                        )
                    matches.append(
                        (
                            "range",
                            self.const_of_type(value_expr.low, t),
                            self.const_of_type(value_expr.high, t),
                        )
                    )
                else:
                    v = self.const_of_type(value_expr, t)
                    kind = {
                        "lpm": "lpm",
                        "ternary": "ternary",
                        "range": "range",
                        "optional": "exact",
                    }.get(key.match_kind, "exact")
                    if kind == "lpm":
                        matches.append(("lpm", v, key.bitwidth))
                    elif kind == "ternary":
                        matches.append(("ternary", v, full))
                    elif kind == "range":
                        matches.append(("range", v, v))
                    else:
                        matches.append(("exact", v, 0))
            action = self.use_action(entry.action.name, entry.action.loc, scope)
            if action.name not in actions:
                raise CompileError(
                    entry.action.loc,
                    f"action {entry.action.name} is not in the actions of table {decl.name}",
                )
            if len(entry.action.args) != len(action.params):
                raise CompileError(
                    entry.action.loc,
                    f"action {entry.action.name} takes {len(action.params)} "
                    f"arguments, got {len(entry.action.args)}",
                )
            args = [
                self.const_of_type(a, Bits(w))
                for a, (_, w) in zip(entry.action.args, action.params, strict=True)
            ]
            # p4c: earlier entries win; P4Runtime: higher priority wins.
            priority = (
                entry.priority
                if entry.priority is not None
                else (len(decl.entries or []) - index if needs_priority else 0)
            )
            entries.append((matches, priority, action.name, args))
        return entries

    def emit_table(self, decl: ast.TableDecl, info: TableInfo, sig: str, scope: Scope) -> None:
        assert self.ctx is not None
        out = self.out
        out(f"def t_{info.pyname}({sig}):")
        out.indent()
        sm = "_sm"  # the hidden standard_metadata every generated block receives
        if info.keys:
            codes: list[str] = []
            for key in decl.keys or []:
                value = self.lower_expr(key.expr, scope)
                codes.append(
                    f"(1 if {value.code} else 0)" if isinstance(value.type, Bool) else value.code
                )
            out(f"_e = {info.pyname}.lookup(({', '.join(codes)},))")
            out("if _e is None:")
            out.indent()
            out(f"_c = {info.pyname}.default_action")
            out("_hit = False")
            out.dedent()
            out("else:")
            out.indent()
            if info.direct_counter is not None:
                out(f"_e.counter.add({sm}.f_packet_length)")
            out("_c = _e.action")
            out("_hit = True")
            out.dedent()
        else:
            # A keyless table always runs its default action (a miss).
            out(f"_c = {info.pyname}.default_action")
            out("_hit = False")
        out("_aid = _c.action_id")
        # Actions without 'return' run inline (no call per packet); others are called.
        first = True
        for action_name, _scope_kind in info.actions:
            action = self.lowered.actions[action_name]
            out(f"{'if' if first else 'elif'} _aid == {action_id_global(action_name)}:")
            first = False
            out.indent()
            if self.contains_return(action.decl.body):
                out(f"{self.action_fn(action)}({sig}, *_c.params)")
            else:
                self.inline_action(action, scope)
            out.dedent()
        out("return _hit, _aid")
        out.dedent()

    @staticmethod
    def contains_return(stmt: ast.Stmt) -> bool:
        if isinstance(stmt, ast.Return):
            return True
        if isinstance(stmt, ast.Block):
            return any(Compiler.contains_return(s) for s in stmt.stmts)
        if isinstance(stmt, ast.If):
            return Compiler.contains_return(stmt.then) or (
                stmt.other is not None and Compiler.contains_return(stmt.other)
            )
        if isinstance(stmt, ast.Switch):
            return any(c.body is not None and Compiler.contains_return(c.body) for c in stmt.cases)
        return False

    def inline_action(self, info: ActionInfo, scope: Scope) -> None:
        assert self.ctx is not None
        out = self.out
        codes = {n: self.fresh(f"ap_{n}_") for n, _ in info.params}
        if len(codes) == 1:
            out(f"{next(iter(codes.values()))}, = _c.params")
        elif codes:
            out(f"{', '.join(codes.values())} = _c.params")
        action_scope = Scope(
            {n: VarEntry(codes[n], Bits(w), writable=True) for n, w in info.params},
            scope if info.control else Scope({}, self.globals),
        )
        self.ctx.in_action = True
        self.lower_block(info.decl.body, action_scope)
        self.ctx.in_action = False

    # ================================================================== statements

    def lower_local(
        self, local: ast.Decl | ast.Stmt, scope: Scope, out: Emitter, control_level: bool = False
    ) -> None:
        saved = self.out
        self.out = out
        try:
            if isinstance(local, ast.VarDecl):
                self.lower_var(local, scope, control_level)
            elif isinstance(local, ast.ConstDecl):
                self.lower_var(
                    ast.VarDecl(local.loc, local.type, local.name, local.value, True),
                    scope,
                    control_level,
                )
            elif isinstance(local, ast.Instantiation):
                raise CompileError(local.loc, "extern instances in parsers are not supported")
            else:
                raise CompileError(local.loc, "unsupported local declaration")
        finally:
            self.out = saved

    def lower_var(self, decl: ast.VarDecl, scope: Scope, control_level: bool = False) -> None:
        t = self.resolve_type(decl.type)
        if decl.name in scope.names:
            raise CompileError(decl.loc, f"{decl.name} is declared twice")
        if isinstance(t, Varbit | ExternT | Void):
            raise CompileError(decl.loc, f"variables of type {t} are not supported")
        code = ("_cl." if control_level else "") + self.fresh(f"v_{decl.name}_")
        if decl.is_const and decl.init is not None:
            value = self.convert(self.lower_expr(decl.init, scope, expected=t), t, decl.init.loc)
            if value.const is not None:
                scope.names[decl.name] = VarEntry(repr(value.const), t, False, value.const)
                return
        if decl.init is not None:
            value = self.convert(self.lower_expr(decl.init, scope, expected=t), t, decl.init.loc)
            self.out(f"{code} = {self.copy_code(value)}")
        elif isinstance(t, HeaderT | StructT):
            self.out(f"{code} = {class_name(t)}()")
        else:
            self.out(f"{code} = {zero_code(t)}")
        scope.names[decl.name] = VarEntry(code, t, writable=not decl.is_const)

    def copy_code(self, value: Val) -> str:
        if isinstance(value.type, HeaderT | StructT):
            return f"{value.code}.copy()"
        return value.code

    def lower_block(self, block: ast.Block, scope: Scope) -> None:
        inner = Scope({}, scope)
        before = len(self.out.lines)
        for stmt in block.stmts:
            self.lower_stmt(stmt, inner)
        if len(self.out.lines) == before:
            self.out("pass")

    def lower_stmt(self, stmt: ast.Stmt, scope: Scope) -> None:
        out = self.out
        assert self.ctx is not None
        if isinstance(stmt, ast.Block):
            self.lower_block(stmt, scope)
        elif isinstance(stmt, ast.Empty):
            out("pass")
        elif isinstance(stmt, ast.VarDecl):
            self.lower_var(stmt, scope)
        elif isinstance(stmt, ast.Assign):
            self.lower_assign(stmt, scope)
        elif isinstance(stmt, ast.If):
            cond = self.lower_expr(stmt.cond, scope)
            if not isinstance(cond.type, Bool):
                raise CompileError(stmt.cond.loc, f"an if condition must be bool, not {cond.type}")
            out(f"if {cond.code}:")
            out.indent()
            self.lower_stmt_block(stmt.then, scope)
            out.dedent()
            if stmt.other is not None:
                out("else:")
                out.indent()
                self.lower_stmt_block(stmt.other, scope)
                out.dedent()
        elif isinstance(stmt, ast.ExprStmt):
            assert isinstance(stmt.expr, ast.Call)
            value = self.lower_call(stmt.expr, scope, statement=True)
            for line in value.code.split("\n") if value.code else ["pass"]:
                out(line)
        elif isinstance(stmt, ast.Return):
            if self.ctx.kind == "parser":
                raise CompileError(stmt.loc, "return is not allowed in a parser")
            out("return")
        elif isinstance(stmt, ast.Exit):
            if self.ctx.kind == "parser":
                raise CompileError(stmt.loc, "exit is not allowed in a parser")
            self.ctx.uses_exit = True
            out("raise _Exit()")
        elif isinstance(stmt, ast.Switch):
            self.lower_switch(stmt, scope)
        else:
            raise CompileError(stmt.loc, f"unsupported statement {type(stmt).__name__}")

    def lower_stmt_block(self, stmt: ast.Stmt, scope: Scope) -> None:
        before = len(self.out.lines)
        self.lower_stmt(stmt, Scope({}, scope))
        if len(self.out.lines) == before:
            self.out("pass")

    def lower_switch(self, stmt: ast.Switch, scope: Scope) -> None:
        out = self.out
        subject = stmt.subject
        if not (
            isinstance(subject, ast.Member)
            and subject.member == "action_run"
            and isinstance(subject.base, ast.Call)
        ):
            raise CompileError(stmt.loc, "only switch (table.apply().action_run) is supported")
        table = self.table_of_apply(subject.base, scope)
        var = self.fresh("_ar")
        out(f"{var} = {self.apply_call(table)}[1]")
        pending: list[str] = []
        first = True
        seen: set[str] = set()
        for case in stmt.cases:
            label = case.labels[0]
            if isinstance(label, ast.Default):
                cond = "True"
            else:
                if not isinstance(label, ast.Name):
                    raise CompileError(case.loc, "switch labels must be action names")
                info = self.use_action(label.name, case.loc, scope)
                if info.name not in {a for a, _ in table.info.actions}:
                    raise CompileError(
                        case.loc, f"{label.name} is not an action of table {table.decl.name}"
                    )
                if info.name in seen:
                    raise CompileError(case.loc, f"{label.name} appears twice in the switch")
                seen.add(info.name)
                cond = f"{var} == _AID[{info.name!r}]"
            pending.append(cond)
            if case.body is None:
                continue
            joined = " or ".join(pending)
            out(("if " if first else "elif ") + joined + ":")
            out.indent()
            self.lower_block(case.body, scope)
            out.dedent()
            pending = []
            first = False
        if pending:
            raise CompileError(stmt.cases[-1].loc, "the last switch case needs a body")

    def lower_assign(self, stmt: ast.Assign, scope: Scope) -> None:
        target = self.lower_expr(stmt.target, scope)
        if not target.lvalue:
            raise CompileError(stmt.target.loc, "cannot assign to this expression")
        if not target.writable:
            raise CompileError(
                stmt.target.loc,
                f"cannot assign to read-only "
                f"{self.expr_text_safe(stmt.target)} (an 'in' parameter or a constant)",
            )
        if isinstance(target.type, Varbit):
            raise CompileError(stmt.loc, "assigning varbit fields is not supported")
        value = self.convert(
            self.lower_expr(stmt.value, scope, expected=target.type), target.type, stmt.value.loc
        )
        self.out(f"{target.code} = {self.copy_code(value)}")

    def expr_text_safe(self, expr: ast.Expr) -> str:
        try:
            return self.expr_text(expr)
        except CompileError:
            return "value"

    # ================================================================== expressions

    def convert(self, value: Val, t: P4Type, loc: SourceLocation) -> Val:
        """Implicit conversion for assignment/arguments: only int literals adapt."""
        if value.type == t:
            return value
        if isinstance(value.type, IntLiteral) and isinstance(t, Bits):
            const = value.const & ((1 << t.width) - 1)
            return Val(repr(const), t, const)
        if isinstance(t, EnumT) and t.underlying is not None and value.type == t.underlying:
            return value
        raise CompileError(loc, f"expected a value of type {t}, got {value.type}")

    def lower_expr(self, expr: ast.Expr, scope: Scope, expected: P4Type | None = None) -> Val:
        if isinstance(expr, ast.IntLit):
            if expr.signed:
                raise CompileError(expr.loc, "signed literals are not supported")
            if expr.width is not None:
                value = expr.value & ((1 << expr.width) - 1)
                return Val(repr(value), Bits(expr.width), value)
            return Val(repr(expr.value), IntLiteral(), expr.value)
        if isinstance(expr, ast.BoolLit):
            return Val(repr(expr.value), Bool(), expr.value)
        if isinstance(expr, ast.StringLit):
            return Val(repr(expr.value), StringT(), expr.value)
        if isinstance(expr, ast.Name):
            return self.lower_name(expr, scope)
        if isinstance(expr, ast.Member):
            return self.lower_member(expr, scope)
        if isinstance(expr, ast.Slice):
            base = self.lower_expr(expr.base, scope)
            if not isinstance(base.type, Bits):
                raise CompileError(expr.loc, f"cannot slice a value of type {base.type}")
            high = self.const_int(expr.high, scope)
            low = self.const_int(expr.low, scope)
            if not 0 <= low <= high < base.type.width:
                raise CompileError(
                    expr.loc, f"slice [{high}:{low}] is out of range for {base.type}"
                )
            width = high - low + 1
            code = f"(({base.code} >> {low}) & {(1 << width) - 1})"
            return self.maybe_fold(code, Bits(width), [base])
        if isinstance(expr, ast.Unary):
            return self.lower_unary(expr, scope)
        if isinstance(expr, ast.Binary):
            return self.lower_binary(expr, scope)
        if isinstance(expr, ast.Ternary):
            cond = self.lower_expr(expr.cond, scope)
            if not isinstance(cond.type, Bool):
                raise CompileError(expr.cond.loc, f"the condition must be bool, not {cond.type}")
            then = self.lower_expr(expr.then, scope, expected)
            other = self.lower_expr(expr.other, scope, expected)
            then, other = self.unify(then, other, expr.loc)
            return self.maybe_fold(
                f"({then.code} if {cond.code} else {other.code})", then.type, [cond, then, other]
            )
        if isinstance(expr, ast.Cast):
            return self.lower_cast(expr, scope)
        if isinstance(expr, ast.Call):
            return self.lower_call(expr, scope, statement=False)
        if isinstance(expr, ast.ListExpr):
            items = [self.lower_expr(e, scope) for e in expr.items]
            return Val(
                "(" + "".join(i.code + ", " for i in items) + ")",
                TupleT(tuple(i.type for i in items)),
            )
        if isinstance(expr, ast.Index):
            raise CompileError(expr.loc, "header stacks and indexing are not supported")
        if isinstance(expr, ast.Mask | ast.Range | ast.Default):
            raise CompileError(
                expr.loc, "a key set is only allowed in select cases and table entries"
            )
        raise CompileError(expr.loc, "unsupported expression")

    def maybe_fold(self, code: str, t: P4Type, parts: list[Val]) -> Val:
        if all(p.const is not None for p in parts):
            value = self.fold(code)
            return Val(repr(value), t, value)
        return Val(code, t)

    def lower_name(self, expr: ast.Name, scope: Scope) -> Val:
        found = scope.lookup(expr.name)
        if isinstance(found, VarEntry):
            is_const = found.const is not None
            return Val(
                found.code,
                found.type,
                found.const,
                lvalue=not is_const,
                writable=found.writable and not is_const,
            )
        if found is None:
            if expr.name in self.types:
                raise CompileError(expr.loc, f"{expr.name} is a type, not a value")
            raise CompileError(expr.loc, f"undefined name {expr.name}")
        raise CompileError(expr.loc, f"{expr.name} cannot be used as a value here")

    def lower_member(self, expr: ast.Member, scope: Scope) -> Val:
        base_expr = expr.base
        if isinstance(base_expr, ast.Call) and expr.member in ("hit", "miss"):
            table = self.table_of_apply(base_expr, scope)
            code = f"{self.apply_call(table)}[0]"
            return Val(code if expr.member == "hit" else f"(not {code})", Bool())
        if isinstance(base_expr, ast.Name):
            if base_expr.name == "error" and scope.lookup("error") is None:
                if expr.member not in self.errors:
                    raise CompileError(expr.loc, f"unknown error error.{expr.member}")
                error_code = self.errors[expr.member]
                return Val(repr(error_code), ErrorT(), error_code)
            enum_t = self.types.get(base_expr.name)
            if isinstance(enum_t, EnumT) and scope.lookup(base_expr.name) is None:
                values = self.globals.names[f"enum:{enum_t.name}"]
                if expr.member not in values:
                    raise CompileError(expr.loc, f"{enum_t.name} has no member {expr.member}")
                v = values[expr.member]
                return Val(repr(v), enum_t.underlying or enum_t, v)
        base = self.lower_expr(base_expr, scope)
        t = base.type
        if isinstance(t, HeaderT | StructT):
            ft = t.field_type(expr.member)
            if ft is None:
                kind = "header" if isinstance(t, HeaderT) else "struct"
                raise CompileError(
                    expr.member_loc or expr.loc, f"{kind} {t.name} has no field {expr.member}"
                )
            return Val(
                f"{base.code}.{field_attr(expr.member)}",
                ft,
                lvalue=base.lvalue,
                writable=base.writable,
                header_root=base.code if isinstance(t, HeaderT) else None,
            )
        raise CompileError(expr.loc, f"a value of type {t} has no member {expr.member}")

    def lower_unary(self, expr: ast.Unary, scope: Scope) -> Val:
        operand = self.lower_expr(expr.operand, scope)
        t = operand.type
        if expr.op == "!":
            if not isinstance(t, Bool):
                raise CompileError(expr.loc, f"'!' needs a bool, not {t}")
            return self.maybe_fold(f"(not {operand.code})", Bool(), [operand])
        if isinstance(t, IntLiteral):
            value = -operand.const if expr.op == "-" else ~operand.const
            return Val(repr(value), t, value)
        if not isinstance(t, Bits):
            raise CompileError(expr.loc, f"'{expr.op}' needs bit<W>, not {t}")
        mask = (1 << t.width) - 1
        code = f"({operand.code} ^ {mask})" if expr.op == "~" else f"((-{operand.code}) & {mask})"
        return self.maybe_fold(code, t, [operand])

    def unify(self, a: Val, b: Val, loc: SourceLocation) -> tuple[Val, Val]:
        if isinstance(a.type, IntLiteral) and isinstance(b.type, Bits):
            a = self.convert(a, b.type, loc)
        elif isinstance(b.type, IntLiteral) and isinstance(a.type, Bits):
            b = self.convert(b, a.type, loc)
        if a.type != b.type:
            raise CompileError(loc, f"operands have different types: {a.type} and {b.type}")
        return a, b

    def lower_binary(self, expr: ast.Binary, scope: Scope) -> Val:
        op = expr.op
        left = self.lower_expr(expr.left, scope)
        right = self.lower_expr(expr.right, scope)
        if op in ("&&", "||"):
            for side, e in ((left, expr.left), (right, expr.right)):
                if not isinstance(side.type, Bool):
                    raise CompileError(e.loc, f"'{op}' needs bool operands, not {side.type}")
            py = "and" if op == "&&" else "or"
            return self.maybe_fold(f"({left.code} {py} {right.code})", Bool(), [left, right])
        if op == "++":
            if not (isinstance(left.type, Bits) and isinstance(right.type, Bits)):
                raise CompileError(
                    expr.loc,
                    f"'++' needs bit<W> operands with known widths, "
                    f"not {left.type} and {right.type}",
                )
            width = left.type.width + right.type.width
            return self.maybe_fold(
                f"(({left.code} << {right.type.width}) | {right.code})", Bits(width), [left, right]
            )
        if op in ("<<", ">>"):
            if isinstance(left.type, IntLiteral) and right.const is not None:
                value = self.fold(f"({left.code} {op} {right.code})")
                return Val(repr(value), IntLiteral(), value)
            if not isinstance(left.type, Bits):
                raise CompileError(
                    expr.loc,
                    f"'{op}' needs a bit<W> left operand (give the "
                    f"literal a width), not {left.type}",
                )
            if not isinstance(right.type, Bits | IntLiteral):
                raise CompileError(expr.loc, f"shift amount must be unsigned, not {right.type}")
            mask = (1 << left.type.width) - 1
            code = (
                f"(({left.code} << {right.code}) & {mask})"
                if op == "<<"
                else f"({left.code} >> {right.code})"
            )
            return self.maybe_fold(code, left.type, [left, right])
        left, right = self.unify(left, right, expr.loc)
        t = left.type
        if op in ("==", "!="):
            if isinstance(t, HeaderT | StructT | Varbit | TupleT):
                raise CompileError(expr.loc, f"comparing values of type {t} is not supported")
            return self.maybe_fold(f"({left.code} {op} {right.code})", Bool(), [left, right])
        if isinstance(t, IntLiteral):
            py_op = {"/": "//", "|+|": "+", "|-|": "-"}.get(op, op)
            if op in ("/", "%") and right.const == 0:
                raise CompileError(expr.loc, "division by zero")
            value = self.fold(f"({left.code} {py_op} {right.code})")
            return Val(repr(value), (Bool() if op in ("<", ">", "<=", ">=") else t), value)
        if not isinstance(t, Bits):
            raise CompileError(expr.loc, f"'{op}' needs bit<W> operands, not {t}")
        mask = (1 << t.width) - 1
        if op in ("<", ">", "<=", ">="):
            return self.maybe_fold(f"({left.code} {op} {right.code})", Bool(), [left, right])
        if op in ("&", "|", "^"):
            return self.maybe_fold(f"({left.code} {op} {right.code})", t, [left, right])
        if op in ("+", "-", "*"):
            return self.maybe_fold(f"(({left.code} {op} {right.code}) & {mask})", t, [left, right])
        if op == "|+|":
            return self.maybe_fold(f"min({left.code} + {right.code}, {mask})", t, [left, right])
        if op == "|-|":
            return self.maybe_fold(f"max({left.code} - {right.code}, 0)", t, [left, right])
        if op in ("/", "%"):
            if right.const is None:
                raise CompileError(expr.loc, f"'{op}' needs a compile-time constant divisor")
            if right.const == 0:
                raise CompileError(expr.loc, "division by zero")
            return self.maybe_fold(
                f"({left.code} {'//' if op == '/' else '%'} {right.code})", t, [left, right]
            )
        raise CompileError(expr.loc, f"unsupported operator {op}")

    def lower_cast(self, expr: ast.Cast, scope: Scope) -> Val:
        t = self.resolve_type(expr.type)
        operand = self.lower_expr(expr.operand, scope, expected=t)
        src = operand.type
        if src == t:
            return operand
        if isinstance(t, Bits):
            mask = (1 << t.width) - 1
            if isinstance(src, IntLiteral):
                value = operand.const & mask
                return Val(repr(value), t, value)
            if isinstance(src, Bits):
                code = operand.code if t.width >= src.width else f"({operand.code} & {mask})"
                return self.maybe_fold(code, t, [operand])
            if isinstance(src, Bool):
                if t.width != 1:
                    raise CompileError(expr.loc, "bool can only be cast to bit<1>")
                return self.maybe_fold(f"(1 if {operand.code} else 0)", t, [operand])
            if isinstance(src, EnumT) and src.underlying is not None:
                return Val(operand.code, t, operand.const)
        if isinstance(t, Bool):
            if isinstance(src, Bits) and src.width == 1:
                return self.maybe_fold(f"({operand.code} == 1)", t, [operand])
            if isinstance(src, IntLiteral) and operand.const in (0, 1):
                return Val(repr(operand.const == 1), t, operand.const == 1)
        if (
            isinstance(t, EnumT)
            and t.underlying is not None
            and isinstance(src, Bits)
            and src == t.underlying
        ):
            return Val(operand.code, t, operand.const)
        raise CompileError(expr.loc, f"cannot cast {src} to {t}")

    # ------------------------------------------------------------------ calls

    def table_of_apply(self, call: ast.Call, scope: Scope) -> TableEntryRef:
        func = call.func
        if (
            isinstance(func, ast.Member)
            and func.member == "apply"
            and isinstance(func.base, ast.Name)
        ):
            found = scope.lookup(func.base.name)
            if isinstance(found, TableEntryRef):
                if call.args:
                    raise CompileError(call.loc, "apply() takes no arguments")
                assert self.ctx is not None
                if found.info.name in self.ctx.applied:
                    raise CompileError(
                        call.loc,
                        f"table {func.base.name} is applied more than once "
                        "(p4c's BMv2 backend rejects this)",
                    )
                self.ctx.applied.add(found.info.name)
                return found
        raise CompileError(call.loc, "expected table.apply()")

    def apply_call(self, table: TableEntryRef) -> str:
        assert self.ctx is not None
        return f"t_{table.info.pyname}({', '.join(['_sm', '_cl', *self.ctx.param_codes])})"

    def lower_call(self, call: ast.Call, scope: Scope, statement: bool) -> Val:
        assert self.ctx is not None
        func = call.func
        # t.apply(), t.apply().hit / .miss handled via Member on Call
        if isinstance(func, ast.Member):
            base = func.base
            method = func.member
            if isinstance(base, ast.Name):
                found = scope.lookup(base.name)
                if isinstance(found, TableEntryRef):
                    if method != "apply":
                        raise CompileError(func.loc, f"tables have no method {method}")
                    if self.ctx.in_action:
                        raise CompileError(call.loc, "tables cannot be applied inside actions")
                    self.table_of_apply(call, scope)
                    return Val(self.apply_call(found), Void())
                if isinstance(found, ExternInstance):
                    return self.lower_extern_method(found, method, call, scope)
                if isinstance(found, VarEntry) and found.type == ExternT("packet_in"):
                    return self.lower_packet_in(method, call, scope)
                if isinstance(found, VarEntry) and found.type == ExternT("packet_out"):
                    if method != "emit" or len(call.args) != 1:
                        raise CompileError(call.loc, "packet_out supports emit(header)")
                    return Val(
                        self.emit_code(self.lower_expr(call.args[0], scope), call.args[0].loc),
                        Void(),
                    )
            if method in ("isValid", "setValid", "setInvalid"):
                target = self.lower_expr(base, scope)
                if not isinstance(target.type, HeaderT):
                    raise CompileError(call.loc, f"{method}() needs a header, not {target.type}")
                if call.args:
                    raise CompileError(call.loc, f"{method}() takes no arguments")
                if method == "isValid":
                    return Val(f"{target.code}._v", Bool())
                if not target.writable:
                    raise CompileError(
                        call.loc, f"cannot change the validity of read-only {target.code}"
                    )
                if not statement:
                    raise CompileError(call.loc, f"{method}() has no value")
                return Val(f"{target.code}._v = {method == 'setValid'}", Void())
            if method in ("hit", "miss", "action_run"):
                raise CompileError(call.loc, f"{method} is not a method")
            raise CompileError(func.loc, f"unknown method {method}")
        if isinstance(func, ast.Member) is False and isinstance(func, ast.Name):
            found = scope.lookup(func.name)
            if isinstance(found, ActionInfo | ast.ActionDecl):
                if not statement:
                    raise CompileError(call.loc, "actions have no value")
                info = self.use_action(func.name, func.loc, scope)
                if len(call.args) != len(info.params):
                    raise CompileError(
                        call.loc,
                        f"action {func.name} takes {len(info.params)} "
                        f"arguments, got {len(call.args)}",
                    )
                args = [
                    self.convert(self.lower_expr(a, scope, Bits(w)), Bits(w), a.loc).code
                    for a, (_, w) in zip(call.args, info.params, strict=True)
                ]
                call_args = ", ".join(["_sm", "_cl", *self.ctx.param_codes, *args])
                return Val(f"{self.action_fn(info)}({call_args})", Void())
            if isinstance(found, ast.ExternFunctionDecl):
                return self.lower_extern_function(found, call, scope, statement)
            if found is None:
                raise CompileError(func.loc, f"undefined function {func.name}")
            raise CompileError(func.loc, f"{func.name} is not callable")
        raise CompileError(call.loc, "unsupported call")

    def lower_extern_method(
        self, inst: ExternInstance, method: str, call: ast.Call, scope: Scope
    ) -> Val:
        sm = "_sm"
        if inst.kind == "counter":
            if method != "count" or len(call.args) != 1:
                raise CompileError(call.loc, "counter supports count(index)")
            index = self.lower_expr(call.args[0], scope)
            if not isinstance(index.type, Bits | IntLiteral):
                raise CompileError(call.args[0].loc, "a counter index must be bit<W>")
            return Val(f"_count({inst.pyname}.cells, {index.code}, {sm}.f_packet_length)", Void())
        if inst.kind == "direct_counter":
            if method != "count" or call.args:
                raise CompileError(call.loc, "direct_counter supports count()")
            return Val("", Void())  # counted by the table on every hit, as BMv2 does
        if inst.kind == "register":
            width = inst.info.bitwidth
            if method == "read":
                if len(call.args) != 2:
                    raise CompileError(call.loc, "register.read takes (out result, index)")
                target = self.lower_expr(call.args[0], scope)
                if not (target.lvalue and target.writable) or target.type != Bits(width):
                    raise CompileError(
                        call.args[0].loc, f"register.read needs a writable bit<{width}> result"
                    )
                index = self.lower_expr(call.args[1], scope)
                return Val(f"{target.code} = _reg_read({inst.pyname}.cells, {index.code})", Void())
            if method == "write":
                if len(call.args) != 2:
                    raise CompileError(call.loc, "register.write takes (index, value)")
                index = self.lower_expr(call.args[0], scope)
                value = self.convert(
                    self.lower_expr(call.args[1], scope, Bits(width)), Bits(width), call.args[1].loc
                )
                return Val(f"_reg_write({inst.pyname}.cells, {index.code}, {value.code})", Void())
            raise CompileError(call.loc, f"register has no method {method}")
        raise CompileError(call.loc, f"unsupported extern {inst.kind}")

    def lower_packet_in(self, method: str, call: ast.Call, scope: Scope) -> Val:
        if self.ctx is None or self.ctx.kind != "parser":
            raise CompileError(call.loc, "packet_in is only usable in a parser")
        if method == "extract":
            if len(call.args) not in (1, 2):
                raise CompileError(call.loc, "extract takes (header) or (header, bits)")
            target = self.lower_expr(call.args[0], scope)
            if not isinstance(target.type, HeaderT):
                raise CompileError(call.args[0].loc, f"extract needs a header, not {target.type}")
            if not target.writable:
                raise CompileError(call.args[0].loc, "extract needs a writable header")
            header = target.type
            if header.varbit_field is None:
                if len(call.args) == 2:
                    raise CompileError(
                        call.loc, f"header {header.name} has no varbit field; use extract(hdr)"
                    )
                return Val(f"_off = x_{header.name}({target.code}, _pkt, _off, _plen)", Void())
            if len(call.args) != 2:
                raise CompileError(
                    call.loc, f"header {header.name} has a varbit field; use extract(hdr, bits)"
                )
            bits = self.lower_expr(call.args[1], scope)
            if not isinstance(bits.type, Bits | IntLiteral):
                raise CompileError(call.args[1].loc, "the varbit size must be bit<32>")
            return Val(
                f"_off = x_{header.name}({target.code}, _pkt, _off, _plen, {bits.code})", Void()
            )
        if method == "lookahead":
            if call.args or len(call.type_args) != 1:
                raise CompileError(call.loc, "lookahead<T>() takes one type and no arguments")
            t = self.resolve_type(call.type_args[0])
            if isinstance(t, HeaderT) and t.varbit_field is None:
                # A header value read without moving the cursor (e.g. lookahead<h_t>().field).
                return Val(f"_peek(x_{t.name}, {class_name(t)}(), _pkt, _off, _plen)", t)
            if not isinstance(t, Bits):
                raise CompileError(
                    call.loc, "lookahead<T> supports bit<W> and fixed-size header types"
                )
            return Val(f"_lookahead(_pkt, _off, _plen, {t.width})", t)
        if method == "advance":
            if len(call.args) != 1:
                raise CompileError(call.loc, "advance takes (bits)")
            bits = self.lower_expr(call.args[0], scope)
            return Val(f"_off = _advance(_off, _plen, {bits.code})", Void())
        if method == "length":
            return Val("_plen * 8", Bits(32))
        raise CompileError(call.loc, f"packet_in has no method {method}")

    def emit_code(self, value: Val, loc: SourceLocation) -> str:
        if isinstance(value.type, HeaderT):
            return f"if {value.code}._v: _out.append(e_{value.type.name}({value.code}))"
        if isinstance(value.type, StructT):
            parts = []
            for name, ft in value.type.fields:
                if not isinstance(ft, HeaderT):
                    raise CompileError(
                        loc, f"emit of struct {value.type.name}: field {name} is not a header"
                    )
                parts.append(self.emit_code(Val(f"{value.code}.{field_attr(name)}", ft), loc))
            return "\n".join(parts) if parts else "pass"
        raise CompileError(loc, f"emit needs a header or a struct of headers, not {value.type}")

    def data_items(self, expr: ast.Expr, scope: Scope) -> list[tuple[str | None, str | int, str]]:
        """Per item of a field list: (header validity guard, width or width code, value)."""
        if not isinstance(expr, ast.ListExpr):
            raise CompileError(expr.loc, "checksum/hash data must be a list { a, b, ... }")
        items: list[tuple[str | None, str | int, str]] = []
        for item in expr.items:
            value = self.lower_expr(item, scope)
            if isinstance(value.type, Varbit):
                base, name = value.code.rsplit(".", 1)
                items.append((value.header_root, f"{base}.w_{name[2:]}", value.code))
            elif isinstance(value.type, Bits):
                items.append((value.header_root, value.type.width, value.code))
            elif isinstance(value.type, HeaderT):
                raise CompileError(item.loc, "list whole headers field by field")
            else:
                raise CompileError(
                    item.loc,
                    f"checksum/hash data must be bit<W> or varbit fields, not {value.type}",
                )
        return items

    def lower_extern_function(
        self, decl: ast.ExternFunctionDecl, call: ast.Call, scope: Scope, statement: bool
    ) -> Val:
        assert self.ctx is not None
        name = decl.name
        if len(call.args) != len(decl.params):
            raise CompileError(
                call.loc, f"{name} takes {len(decl.params)} arguments, got {len(call.args)}"
            )
        if name == "mark_to_drop":
            sm = self.lower_expr(call.args[0], scope)
            if sm.type != self.types.get("standard_metadata_t") or not sm.writable:
                raise CompileError(
                    call.args[0].loc, "mark_to_drop needs the standard_metadata parameter"
                )
            return Val(f"{sm.code}.f_egress_spec = {DROP_PORT}; {sm.code}.f_mcast_grp = 0", Void())
        if name == "verify":
            if self.ctx.kind != "parser":
                raise CompileError(call.loc, "verify is only allowed in a parser")
            cond = self.lower_expr(call.args[0], scope)
            err = self.lower_expr(call.args[1], scope)
            if not isinstance(cond.type, Bool) or not isinstance(err.type, ErrorT):
                raise CompileError(call.loc, "verify takes (bool, error)")
            return Val(f"if not {cond.code}: raise _Reject({err.code})", Void())
        if name in ("verify_checksum", "update_checksum"):
            cond = self.lower_expr(call.args[0], scope)
            if not isinstance(cond.type, Bool):
                raise CompileError(call.args[0].loc, f"{name}: the condition must be bool")
            algo = self.hash_algorithm(call.args[3])
            target = self.lower_expr(call.args[2], scope)
            if not isinstance(target.type, Bits):
                raise CompileError(call.args[2].loc, f"{name}: the checksum must be a bit<W> field")
            width = target.type.width
            if algo == "csum16":
                data = csum16_code(self.data_items(call.args[1], scope))
                compute = f"_csum16_finish(_s, _n) & {(1 << width) - 1}"
            else:
                data = bit_string_code(self.data_items(call.args[1], scope))
                compute = f"_hash_{algo}(_d, _n) & {(1 << width) - 1}"
            lines = [f"if {cond.code}:"]
            lines += ["    " + line for line in data.split("\n")]
            if name == "verify_checksum":
                lines.append(f"    if {compute} != {target.code}: _sm.f_checksum_error = 1")
            else:
                if not (target.lvalue and target.writable):
                    raise CompileError(call.args[2].loc, "update_checksum needs a writable field")
                lines.append(f"    {target.code} = {compute}")
            return Val("\n".join(lines), Void())
        if name == "hash":
            target = self.lower_expr(call.args[0], scope)
            if not (target.lvalue and target.writable and isinstance(target.type, Bits)):
                raise CompileError(call.args[0].loc, "hash needs a writable bit<W> result")
            algo = self.hash_algorithm(call.args[1])
            base = self.lower_expr(call.args[2], scope)
            data = bit_string_code(self.data_items(call.args[3], scope))
            max_ = self.lower_expr(call.args[4], scope)
            mask = (1 << target.type.width) - 1
            lines = data.split("\n")
            lines.append(
                f"{target.code} = _hash_result(_hash_{algo}(_d, _n), "
                f"{base.code}, {max_.code}) & {mask}"
            )
            return Val("\n".join(lines), Void())
        if name == "random":
            target = self.lower_expr(call.args[0], scope)
            lo = self.lower_expr(call.args[1], scope)
            hi = self.lower_expr(call.args[2], scope)
            if not (target.lvalue and target.writable and isinstance(target.type, Bits)):
                raise CompileError(call.args[0].loc, "random needs a writable bit<W> result")
            return Val(f"{target.code} = _random({lo.code}, {hi.code})", Void())
        raise CompileError(call.loc, f"extern {name} is not supported by this target")

    def hash_algorithm(self, expr: ast.Expr) -> str:
        if (
            isinstance(expr, ast.Member)
            and isinstance(expr.base, ast.Name)
            and expr.base.name == "HashAlgorithm"
        ):
            if expr.member in SUPPORTED_HASHES:
                return expr.member
            raise CompileError(
                expr.loc,
                f"HashAlgorithm.{expr.member} is not supported (use {', '.join(SUPPORTED_HASHES)})",
            )
        raise CompileError(expr.loc, "expected a HashAlgorithm value")


def lower(program: ast.Program) -> LoweredProgram:
    return Compiler(program).compile()
