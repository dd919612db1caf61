"""Top-level declarations: types, constants, externs, blocks, and the V1Switch main package."""

from __future__ import annotations

from softswitch.frontend import ast
from softswitch.frontend.errors import CompileError
from softswitch.frontend.expressions import ExpressionLowering
from softswitch.frontend.limits import MAX_TYPE_FIELDS
from softswitch.frontend.scope import (
    Scope,
    VarEntry,
)
from softswitch.frontend.types import (
    Bits,
    Bool,
    EnumT,
    ExternT,
    HeaderT,
    P4Type,
    StructT,
    Varbit,
)

V1SWITCH_BLOCKS = ("parser", "verify_checksum", "ingress", "egress", "compute_checksum", "deparser")


class DeclarationPass(ExpressionLowering):
    """Records top-level declarations and checks that main is a well-formed V1Switch."""

    def declare(self, decl: ast.Decl) -> None:
        if isinstance(decl, ast.HeaderDecl | ast.StructDecl):
            fields: list[tuple[str, P4Type]] = []
            seen: set[str] = set()
            total = 1 if isinstance(decl, ast.HeaderDecl) else 0  # its validity
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
                total += self.field_count(ft)
                if total > MAX_TYPE_FIELDS:
                    raise CompileError(
                        f.loc,
                        f"{decl.name} has more than {MAX_TYPE_FIELDS:,} fields with those of "
                        f"the headers and structs in it ({f.name} makes {total:,})",
                    )
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
