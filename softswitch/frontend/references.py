"""Actions and tables a block refers to: P4Info names and the functions that run them."""

from __future__ import annotations

from softswitch.frontend import ast
from softswitch.frontend.compiler_state import CompilerState
from softswitch.frontend.errors import CompileError, SourceLocation
from softswitch.frontend.lowered import (
    ActionInfo,
)
from softswitch.frontend.p4c_names import control_plane_name
from softswitch.frontend.scope import (
    Scope,
    TableEntryRef,
)
from softswitch.frontend.types import (
    Bits,
)


class ReferenceResolution(CompilerState):
    """Resolves action and table references inside the block being lowered."""

    def declare_action(self, decl: ast.ActionDecl, control: str | None) -> ActionInfo:
        name = control_plane_name(decl, control)
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
            # p4c gives actions of one name one P4Info entry (translated programs repeat
            # @name(".NoAction") on copies); an entry has one list of parameters.
            if existing.decl is not decl and existing.params != params:
                raise CompileError(
                    decl.loc,
                    f"name '{name}' is used for multiple action objects with different "
                    f"parameters (the other is declared at line {existing.decl.loc.line}); "
                    "give each its own @name",
                )
            return existing
        info = ActionInfo(name, decl, params, control)
        self.lowered.actions[name] = info
        self.lowered.action_globals[name] = self.fresh("AID_")
        return info

    def action_fn(self, info: ActionInfo) -> str:
        """The function running ``info`` in the block being lowered (each block has its
        own copy, bound to its parameters); numbered, as the P4Info name may be any text."""
        assert self.ctx is not None
        key = (self.ctx.name, info.name)
        fn = self.action_fns.get(key)
        if fn is None:
            fn = self.action_fns[key] = self.fresh("a_")
        return fn

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
                self.count_fields(
                    self.table_fields[found.info.name], call.loc, f"applying {func.base.name}"
                )
                return found
        raise CompileError(call.loc, "expected table.apply()")

    def apply_call(self, table: TableEntryRef) -> str:
        assert self.ctx is not None
        return f"t_{table.info.pyname}({', '.join(['_sm', '_cl', *self.ctx.param_codes])})"
