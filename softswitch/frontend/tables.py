"""Tables: keys, actions lists, default actions, const entries, and the apply function per table."""

from __future__ import annotations

from softswitch.frontend import ast
from softswitch.frontend.emitter import Emitter, py_name
from softswitch.frontend.errors import CompileError, SourceLocation
from softswitch.frontend.limits import MAX_TABLE_SIZE
from softswitch.frontend.lowered import (
    ActionInfo,
    KeyInfo,
    TableInfo,
)
from softswitch.frontend.p4c_names import control_plane_name, match_field_name
from softswitch.frontend.scope import (
    Scope,
)
from softswitch.frontend.statements import StatementLowering
from softswitch.frontend.types import (
    Bits,
    Bool,
    EnumT,
    ErrorT,
    width_of,
)


class TableLowering(StatementLowering):
    """Checks table declarations and emits one apply function per table."""

    def declare_table(self, decl: ast.TableDecl, control: str, scope: Scope) -> TableInfo:
        assert self.ctx is not None
        name = control_plane_name(decl, control)
        self.claim_p4info_name("table", name, decl)
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
            key_name = match_field_name(key)
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
            info, default_args = self.bound_action(
                decl.default_action, decl, action_infos, scope, "default action"
            )
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
            if not 0 < size <= MAX_TABLE_SIZE:
                raise CompileError(
                    decl.size.loc, f"table size {size} is not between 1 and {MAX_TABLE_SIZE}"
                )
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
        info_t.pyname = self.fresh("T_")
        info_t.annotations = [a.text for a in decl.annotations]
        if decl.entries is not None:
            default_only = {name for name, kind in actions if kind == "default"}
            info_t.const_entries = self.const_entries(decl, keys, action_infos, default_only, scope)
        self.lowered.tables.append(info_t)
        return info_t

    def const_entries(
        self,
        decl: ast.TableDecl,
        keys: list[KeyInfo],
        actions: dict[str, ActionInfo],
        default_only: set[str],
        scope: Scope,
    ) -> list[tuple[list[tuple[str, int, int]], int, str, list[int]]]:
        """The entries as the control plane installs them when the program loads: each is
        checked here as the table will check it then, so that a program that compiles
        also loads (a full table or a duplicate would refuse it with a traceback)."""
        entries: list[tuple[list[tuple[str, int, int]], int, str, list[int]]] = []
        needs_priority = any(k.match_kind in ("ternary", "range", "optional") for k in keys)
        # Per entry key as the table identifies an entry, the line of the first with it.
        seen: dict[tuple[object, ...], SourceLocation] = {}
        for index, entry in enumerate(decl.entries or []):
            # More entries than the size are taken, as p4c takes them (it warns, and makes
            # the BMv2 table as large as its entries): nothing can be added to the table.
            if index == MAX_TABLE_SIZE:
                raise CompileError(
                    entry.loc,
                    f"table {decl.name} has more const entries than a table may hold, "
                    f"{MAX_TABLE_SIZE:,}",
                )
            if entry.priority is not None and not needs_priority:
                raise CompileError(
                    entry.loc,
                    f"entries of table {decl.name} take no priority "
                    "(it has no ternary, range or optional key)",
                )
            if entry.priority is not None and entry.priority <= 0:
                raise CompileError(
                    entry.loc, f"an entry priority must be > 0, not {entry.priority}"
                )
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
                    if key.match_kind == "exact":
                        raise CompileError(
                            value_expr.loc,
                            f"{key.name} is an exact key: an entry needs a value for it, not _",
                        )
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
                    low = self.const_of_type(value_expr.low, t)
                    high = self.const_of_type(value_expr.high, t)
                    if low > high:
                        raise CompileError(value_expr.loc, f"empty range {low} .. {high}")
                    matches.append(("range", low, high))
                else:
                    v = self.const_of_type(value_expr, t)
                    kind = {
                        "lpm": "lpm",
                        "ternary": "ternary",
                        "range": "range",
                        "optional": "optional",
                    }.get(key.match_kind, "exact")
                    if kind == "lpm":
                        matches.append(("lpm", v, key.bitwidth))
                    elif kind == "ternary":
                        matches.append(("ternary", v, full))
                    elif kind == "range":
                        matches.append(("range", v, v))
                    elif kind == "optional":
                        matches.append(("optional", v, 0))
                    else:
                        matches.append(("exact", v, 0))
            action, args = self.bound_action(entry.action, decl, actions, scope, "action")
            if action.name in default_only:
                raise CompileError(
                    entry.action.loc,
                    f"{entry.action.name} is @defaultonly in table {decl.name}: "
                    "entries cannot use it",
                )
            # p4c: earlier entries win; P4Runtime: higher priority wins.
            priority = (
                entry.priority
                if entry.priority is not None
                else (len(decl.entries or []) - index if needs_priority else 0)
            )
            identity = (*map(entry_match, matches), priority)
            first = seen.get(identity)
            if first is not None:
                raise CompileError(
                    entry.loc,
                    f"table {decl.name} already has an entry with this key "
                    f"(the entry at line {first.line}, column {first.column})",
                )
            seen[identity] = entry.loc
            entries.append((matches, priority, action.name, args))
        return entries

    def bound_action(
        self,
        ref: ast.ActionRefDecl,
        table: ast.TableDecl,
        actions: dict[str, ActionInfo],
        scope: Scope,
        what: str,
    ) -> tuple[ActionInfo, list[int]]:
        """An action of the table with constant arguments (a default action or an entry's)."""
        info = self.use_action(ref.name, ref.loc, scope)
        if info.name not in actions:
            raise CompileError(
                ref.loc, f"{what} {ref.name} is not in the actions of table {table.name}"
            )
        if len(ref.args) != len(info.params):
            raise CompileError(
                ref.loc,
                f"action {ref.name} takes {len(info.params)} arguments, got {len(ref.args)}",
            )
        args = [
            self.const_of_type(a, Bits(w)) for a, (_, w) in zip(ref.args, info.params, strict=True)
        ]
        return info, args

    def emit_table(self, decl: ast.TableDecl, info: TableInfo, sig: str, scope: Scope) -> None:
        """``t_<table>()`` for applies whose result is used; the code that statement
        applies inline (a table is applied once, so inlining never duplicates it)."""
        out = self.out
        out(f"def t_{info.pyname}({sig}):")
        out.indent()
        for line in self.table_apply_lines(decl, info, sig, scope, with_result=True):
            out(line)
        out("return _hit, _aid")
        out.dedent()
        self.table_code[info.name] = self.table_apply_lines(
            decl, info, sig, scope, with_result=False
        )
        # A hit or a miss runs one action: the table costs what its costliest one does.
        self.table_fields[info.name] = max(
            (self.action_fields[name] for name, _ in info.actions), default=0
        )

    def table_apply_lines(
        self, decl: ast.TableDecl, info: TableInfo, sig: str, scope: Scope, with_result: bool
    ) -> list[str]:
        """Lookup, direct counter and the chosen action; ``_hit``/``_aid`` when asked for."""
        assert self.ctx is not None
        saved = self.out
        out = self.out = Emitter()
        sm = "_sm"  # the hidden standard_metadata every generated block receives
        hit = "_hit = True" if with_result else None
        miss = "_hit = False" if with_result else None
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
            if miss:
                out(miss)
            out.dedent()
            out("else:")
            out.indent()
            if info.direct_counter is not None:
                out(f"_e.counter.add({sm}.f_packet_length)")
            out("_c = _e.action")
            if hit:
                out(hit)
            out.dedent()
        else:
            # A keyless table always runs its default action (a miss).
            out(f"_c = {info.pyname}.default_action")
            if miss:
                out(miss)
        out("_aid = _c.action_id")
        # Actions without 'return' run inline (no call per packet); others are called.
        first = True
        for action_name, _scope_kind in info.actions:
            action = self.lowered.actions[action_name]
            branch = Emitter()
            self.out = branch
            if contains_return(action.decl.body):
                branch(f"{self.action_fn(action)}({sig}, *_c.params)")
            else:
                self.inline_action(action, scope)
            self.out = out
            if branch.lines == ["pass"]:
                continue  # nothing to do for this action (NoAction)
            action_global = self.lowered.action_globals[action_name]
            out(f"{'if' if first else 'elif'} _aid == {action_global}:")
            first = False
            out.lines.extend("    " * (out.depth + 1) + line for line in branch.lines)
        self.out = saved
        return out.lines

    def inline_action(self, info: ActionInfo, scope: Scope) -> None:
        assert self.ctx is not None
        out = self.out
        codes = {n: self.fresh(py_name("ap_", n) + "_") for n, _ in info.params}
        if len(codes) == 1:
            out(f"{next(iter(codes.values()))}, = _c.params")
        elif codes:
            out(f"{', '.join(codes.values())} = _c.params")
        self.lower_action_body(info, list(codes.values()), scope)


def entry_match(match: tuple[str, int, int]) -> tuple[str, int, int]:
    """A const entry's match as the table tells entries apart: an lpm of length 0 and a
    ternary of mask 0 match anything, as ``_`` does (the control plane omits them)."""
    kind, _a, b = match
    if kind in ("lpm", "ternary") and b == 0:
        return ("dontcare", 0, 0)
    return match


def contains_return(stmt: ast.Stmt) -> bool:
    """Whether an action body returns early (then it is called, not inlined)."""
    if isinstance(stmt, ast.Return):
        return True
    if isinstance(stmt, ast.Block):
        return any(contains_return(s) for s in stmt.stmts)
    if isinstance(stmt, ast.If):
        # An else-if chain may be thousands long: walked in a loop, not recursively.
        link: ast.Stmt | None = stmt
        while isinstance(link, ast.If):
            if contains_return(link.then):
                return True
            link = link.other
        return link is not None and contains_return(link)
    if isinstance(stmt, ast.Switch):
        return any(c.body is not None and contains_return(c.body) for c in stmt.cases)
    return False
