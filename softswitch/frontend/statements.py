"""Statements and local variables of parsers, controls and actions."""

from __future__ import annotations

from softswitch.frontend import ast
from softswitch.frontend.calls import CallLowering
from softswitch.frontend.codecs import class_name, zero_code
from softswitch.frontend.emitter import Emitter, py_name
from softswitch.frontend.errors import CompileError
from softswitch.frontend.lowered import ActionInfo
from softswitch.frontend.p4c_names import describe
from softswitch.frontend.scope import (
    Scope,
    Val,
    VarEntry,
)
from softswitch.frontend.types import (
    Bits,
    Bool,
    ExternT,
    HeaderT,
    StructT,
    Varbit,
    Void,
)

# Longest else-if chain lowered to ``elif``s (Python's compiler recurses once per link).
ELIF_CHAIN = 32


class StatementLowering(CallLowering):
    """Lowers statements; blocks nest as Python indentation."""

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
        code = ("_cl." if control_level else "") + self.fresh(py_name("v_", decl.name) + "_")
        if isinstance(t, HeaderT | StructT):
            self.count_fields(self.field_count(t), decl.loc, f"local {decl.name} of type {t}")
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

    def lower_action_body(self, info: ActionInfo, param_codes: list[str], scope: Scope) -> None:
        """An action's body with its parameters bound to ``param_codes``, called or inlined.

        A control's own action sees the control's scope; a global one only globals.
        """
        assert self.ctx is not None
        action_scope = Scope(
            {
                # Directionless: the control plane's value, read-only (p4c refuses writes).
                name: VarEntry(code, Bits(width), writable=False)
                for (name, width), code in zip(info.params, param_codes, strict=True)
            },
            scope if info.control else Scope({}, self.globals),
        )
        in_action, self.ctx.in_action = self.ctx.in_action, True
        caller, self.ctx.action = self.ctx.action, info.decl
        # The body has a budget of its own; where it runs (a call, a table) adds its count.
        outer_fields, self.block_fields = self.block_fields, 0
        self.lower_block(info.decl.body, action_scope)
        self.action_fields[info.name] = self.block_fields
        self.block_fields = outer_fields
        self.ctx.in_action = in_action
        self.ctx.action = caller

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
            self.lower_if_chain(stmt, scope)
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

    def lower_if_chain(self, stmt: ast.If, scope: Scope) -> None:
        """An ``if`` and the ``else if``s after it, in a loop (a chain may be thousands
        long): ``elif``s up to ELIF_CHAIN links; past that, ``if``s in a row behind a
        flag, since Python's compiler nests an ``elif`` chain one level per link."""
        links = [stmt]
        while isinstance(links[-1].other, ast.If):
            links.append(links[-1].other)
        flag = self.fresh("_pending") if len(links) > ELIF_CHAIN else None
        if flag is not None:
            self.out(f"{flag} = True")
        for index, link in enumerate(links):
            cond = self.lower_expr(link.cond, scope)
            if not isinstance(cond.type, Bool):
                raise CompileError(link.cond.loc, f"an if condition must be bool, not {cond.type}")
            if flag is None:
                self.out(f"{'if' if index == 0 else 'elif'} {cond.code}:")
            else:
                self.out(f"if {flag} and ({cond.code}):")
            self.out.indent()
            if flag is not None:
                self.out(f"{flag} = False")
            self.lower_stmt_block(link.then, scope)
            self.out.dedent()
        other = links[-1].other
        if other is not None:
            self.out("else:" if flag is None else f"if {flag}:")
            self.out.indent()
            self.lower_stmt_block(other, scope)
            self.out.dedent()

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
                cond = f"{var} == {self.lowered.action_globals[info.name]}"
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
                f"{describe(stmt.target)} (an 'in' or directionless parameter, or a constant)",
            )
        if isinstance(target.type, Varbit):
            raise CompileError(stmt.loc, "assigning varbit fields is not supported")
        value = self.convert(
            self.lower_expr(stmt.value, scope, expected=target.type), target.type, stmt.value.loc
        )
        if isinstance(target.type, HeaderT | StructT):
            fields = self.field_count(target.type)
            self.count_fields(fields, stmt.loc, f"assigning {describe(stmt.target)}")
        self.out(f"{target.code} = {self.copy_code(value)}")
