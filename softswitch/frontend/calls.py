"""Calls: table apply, header validity, actions, extern methods and extern functions."""

from __future__ import annotations

from softswitch.frontend import ast
from softswitch.frontend.errors import CompileError
from softswitch.frontend.externs import ExternLowering
from softswitch.frontend.lowered import (
    ActionInfo,
)
from softswitch.frontend.scope import (
    ExternInstance,
    Scope,
    TableEntryRef,
    Val,
    VarEntry,
)
from softswitch.frontend.types import (
    Bits,
    Bool,
    ExternT,
    HeaderT,
    Void,
)


class CallLowering(ExternLowering):
    """Dispatches a call to the rule for what is called."""

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
                    if statement:
                        return Val("\n".join(self.table_code[found.info.name]), Void())
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
                if self.ctx.kind == "parser":
                    # p4c's words; the parser has no copy of the action to call.
                    raise CompileError(call.loc, "action calls are not allowed within parsers")
                info = self.use_action(func.name, func.loc, scope)
                caller = self.ctx.action
                if caller is not None and not self.declared_before(info.decl, caller):
                    # p4c resolves a name only to what is declared before it: an action
                    # cannot call itself or a later one, so actions never recurse.
                    raise CompileError(
                        func.loc,
                        f"{func.name}: declaration not found (an action can only call "
                        "actions declared before it)",
                    )
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
                self.count_fields(self.action_fields[info.name], call.loc, f"calling {func.name}")
                call_args = ", ".join(["_sm", "_cl", *self.ctx.param_codes, *args])
                return Val(f"{self.action_fn(info)}({call_args})", Void())
            if isinstance(found, ast.ExternFunctionDecl):
                return self.lower_extern_function(found, call, scope, statement)
            if found is None:
                raise CompileError(func.loc, f"undefined function {func.name}")
            raise CompileError(func.loc, f"{func.name} is not callable")
        raise CompileError(call.loc, "unsupported call")
