"""Parsers: states, select transitions, and the choice between inlined paths and a state machine."""

from __future__ import annotations

from collections.abc import Callable

from softswitch.frontend import ast
from softswitch.frontend.codecs import class_name
from softswitch.frontend.emitter import Emitter
from softswitch.frontend.errors import CompileError, SourceLocation
from softswitch.frontend.limits import PARSER_BASE_TRANSITIONS, PARSER_TRANSITIONS_PER_BYTE
from softswitch.frontend.scope import (
    ControlContext,
    Scope,
    Val,
    VarEntry,
)
from softswitch.frontend.statements import StatementLowering
from softswitch.frontend.types import (
    Bits,
    Bool,
    EnumT,
    ErrorT,
    ExternT,
    StructT,
)

# Most states the state machine tells apart by ``if``s in a row; above it, halves.
_DISPATCH_LEAF = 8


class ParserLowering(StatementLowering):
    """Lowers a parser to one Python function."""

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
        self.block_fields = 0
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
        out(f"def run_{role}(_sm, _pkt, {', '.join(codes[1:])}):")
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
            # Counted once already (MAX_FIELDS_PER_BLOCK): a state on two paths is
            # inlined twice, but a packet takes one path.
            self.field_weight = 0
            self.lower_state_inline(states["start"], states, scope)
            self.field_weight = 1
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

        timeout = self.errors.get("ParserTimeout")
        if timeout is None:
            raise CompileError(decl.loc, "a parser needs error.ParserTimeout (core.p4)")
        out(f"_st = {numbers['start']}")
        out(f"_steps = {PARSER_BASE_TRANSITIONS} + {PARSER_TRANSITIONS_PER_BYTE} * _plen")
        out("try:")
        out.indent()
        out("while True:")
        out.indent()
        out("_steps -= 1")
        out(f"if _steps < 0: raise _Reject({timeout})")
        repeating = states_on_cycles(decl.states)

        def lower_state(state: ast.ParserState) -> None:
            state_scope = Scope({}, scope)
            # A state on a loop runs up to PARSER_BASE_TRANSITIONS times on a packet
            # (more on a long one, as extracting does): its copies count that often.
            self.field_weight = PARSER_BASE_TRANSITIONS if state.name in repeating else 1
            for stmt in state.stmts:
                self.lower_stmt(stmt, state_scope)
            self.field_weight = 1
            self.lower_transition(state, state_scope, goto)

        self.dispatch(decl.states, 0, len(decl.states), lower_state)
        out.dedent()
        out.dedent()

    def dispatch(
        self,
        states: list[ast.ParserState],
        low: int,
        high: int,
        lower_state: Callable[[ast.ParserState], None],
    ) -> None:
        """The code of states number ``low`` to ``high - 1``, chosen by ``_st``.

        Every state's code ends in a jump (the next state, accept or reject), so the
        choice needs no ``elif``: a few ``if``s in a row, and halves chosen by ``_st <
        middle`` above that. An ``elif`` chain nests one level per state in Python's
        compiler, which thousands of states take past its recursion limit; this nests
        log2 of the number of states deep, and finds a state in as many comparisons."""
        out = self.out
        if high - low <= _DISPATCH_LEAF:
            for number in range(low, high):
                out(f"if _st == {number}:")
                out.indent()
                lower_state(states[number])
                out.dedent()
            return
        middle = (low + high) // 2
        out(f"if _st < {middle}:")
        out.indent()
        self.dispatch(states, low, middle, lower_state)
        out.dedent()
        self.dispatch(states, middle, high, lower_state)

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
        # Each case's code ends in a jump, so the cases are ``if``s in a row, never an
        # ``elif`` chain (which nests one level per case: thousands of cases would take
        # Python's compiler past its recursion limit).
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
            if not conds:
                goto(target, loc)  # matches anything: the cases after it never run
                has_default = True
                break
            out(f"if {' and '.join(conds)}:")
            out.indent()
            goto(target, loc)
            out.dedent()
        if not has_default:
            out(f"raise _Reject({self.errors['NoMatch']})")

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


def states_on_cycles(states: list[ast.ParserState]) -> set[str]:
    """The states a packet can visit more than once: those in a cycle of transitions.

    Tarjan's strongly connected components, with an explicit stack (a chain of
    thousands of states would pass Python's recursion limit)."""
    names = {state.name for state in states}
    successors: dict[str, list[str]] = {}
    for state in states:
        tr = state.transition
        targets: list[str] = []
        if tr is not None:
            targets = [tr.target] if tr.target is not None else [t for _, t, _ in tr.cases]
        successors[state.name] = [t for t in targets if t in names]
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cyclic: set[str] = set()
    for root in successors:
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            targets = successors[node]
            if child < len(targets):
                work.append((node, child + 1))
                target = targets[child]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in targets:
                    cyclic.update(component)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return cyclic
