"""Controls: their locals, extern instances, actions and the apply block."""

from __future__ import annotations

from softswitch.frontend import ast
from softswitch.frontend.emitter import Emitter
from softswitch.frontend.errors import CompileError, SourceLocation
from softswitch.frontend.limits import MAX_EXTERN_CELLS, MAX_TOTAL_EXTERN_CELLS
from softswitch.frontend.lowered import (
    ActionInfo,
    CounterInfo,
    DirectCounterInfo,
    RegisterInfo,
    TableInfo,
)
from softswitch.frontend.p4c_names import control_plane_name
from softswitch.frontend.scope import (
    ControlContext,
    ExternInstance,
    Scope,
    TableEntryRef,
    VarEntry,
)
from softswitch.frontend.tables import TableLowering
from softswitch.frontend.types import (
    Bits,
    ExternT,
)


class ControlLowering(TableLowering):
    """Lowers a control to one Python function plus a function per action and table."""

    def lower_control(self, decl: ast.ControlDecl, role: str) -> None:
        scope, codes = self.block_params(decl.params)
        ctx = ControlContext(decl.name, "control", decl.params, codes)
        self.ctx = ctx
        self.block_fields = 0
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
        qualified = control_plane_name(inst, control)
        pyname = self.fresh("X_")  # the P4Info name may be any text, never code
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
            if not 0 < size <= MAX_EXTERN_CELLS:
                raise CompileError(
                    arg(0).loc, f"counter size {size} is not between 1 and {MAX_EXTERN_CELLS}"
                )
            self.claim_p4info_name("counter", qualified, inst)
            info = CounterInfo(qualified, size, unit(arg(1), "CounterType"), pyname)
            self.lowered.counters.append(info)
            self._check_total_cells(arg(0).loc)
            return ExternInstance(kind, pyname, info, type_args)
        if kind == "direct_counter":
            if len(inst.args) != 1:
                raise CompileError(inst.loc, "direct_counter takes (CounterType)")
            self.claim_p4info_name("direct_counter", qualified, inst)
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
            if not 0 < size <= MAX_EXTERN_CELLS:
                raise CompileError(
                    arg(0).loc, f"register size {size} is not between 1 and {MAX_EXTERN_CELLS}"
                )
            self.claim_p4info_name("register", qualified, inst)
            rinfo = RegisterInfo(qualified, size, value_type.width, pyname)
            self.lowered.registers.append(rinfo)
            self._check_total_cells(arg(0).loc)
            return ExternInstance(kind, pyname, rinfo, type_args)
        if kind in self.extern_types:
            raise CompileError(inst.loc, f"extern {kind} is not supported by this target")
        raise CompileError(inst.loc, f"unknown extern type {kind}")

    def _check_total_cells(self, loc: SourceLocation) -> None:
        """Each array within its limit is not enough: their cells add up at run time."""
        lowered = self.lowered
        total = sum(c.size for c in lowered.counters) + sum(r.size for r in lowered.registers)
        if total > MAX_TOTAL_EXTERN_CELLS:
            raise CompileError(
                loc,
                f"counters and registers hold {total} cells in all, "
                f"more than {MAX_TOTAL_EXTERN_CELLS}",
            )

    def emit_action(
        self, info: ActionInfo, sig: str, scope: Scope, control_locals: Emitter
    ) -> None:
        assert self.ctx is not None
        out = self.out
        params = ", ".join("p_" + n for n, _ in info.params)
        out(f"def {self.action_fn(info)}({sig}{', ' + params if params else ''}):")
        out.indent()
        self.lower_action_body(info, ["p_" + n for n, _ in info.params], scope)
        out("return")
        out.dedent()
