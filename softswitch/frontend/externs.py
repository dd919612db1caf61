"""v1model externs: counters, registers, checksums, hashes, packet_in and packet_out."""

from __future__ import annotations

from softswitch.frontend import ast
from softswitch.frontend.codecs import (
    class_name,
    emit_fn,
    extract_fn,
    fixed_emit_lines,
    fixed_extract_lines,
    width_attr,
)
from softswitch.frontend.emitter import field_attr
from softswitch.frontend.errors import CompileError, SourceLocation
from softswitch.frontend.expressions import ExpressionLowering
from softswitch.frontend.field_lists import bit_string_code, csum16_code
from softswitch.frontend.lowered import DROP_PORT
from softswitch.frontend.scope import (
    ExternInstance,
    Scope,
    Val,
)
from softswitch.frontend.types import (
    Bits,
    Bool,
    ErrorT,
    HeaderT,
    IntLiteral,
    StructT,
    Varbit,
    Void,
)

SUPPORTED_HASHES = ("crc16", "crc32", "csum16", "identity", "xor16")


class ExternLowering(ExpressionLowering):
    """Lowers extern methods and extern functions to calls of the pipeline's helpers."""

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
                too_short = self.errors["PacketTooShort"]
                lines = [f"_h = {target.code}"]
                lines += fixed_extract_lines(header, "_h", "_pkt", "_off", "_plen", too_short)
                lines.append(f"_off += {header.fixed_bits // 8}")
                return Val("\n".join(lines), Void())
            if len(call.args) != 2:
                raise CompileError(
                    call.loc, f"header {header.name} has a varbit field; use extract(hdr, bits)"
                )
            bits = self.lower_expr(call.args[1], scope)
            if not isinstance(bits.type, Bits | IntLiteral):
                raise CompileError(call.args[1].loc, "the varbit size must be bit<32>")
            return Val(
                f"_off = {extract_fn(header)}({target.code}, _pkt, _off, _plen, {bits.code})",
                Void(),
            )
        if method == "lookahead":
            if call.args or len(call.type_args) != 1:
                raise CompileError(call.loc, "lookahead<T>() takes one type and no arguments")
            t = self.resolve_type(call.type_args[0])
            if isinstance(t, HeaderT) and t.varbit_field is None:
                # A header value read without moving the cursor (e.g. lookahead<h_t>().field).
                self.count_fields(self.field_count(t), call.loc, f"lookahead<{t}>")
                return Val(f"_peek({extract_fn(t)}, {class_name(t)}(), _pkt, _off, _plen)", t)
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
        if isinstance(value.type, HeaderT) and value.type.varbit_field is not None:
            return f"if {value.code}._v: _out.append({emit_fn(value.type)}({value.code}))"
        if isinstance(value.type, HeaderT):
            lines = [f"_h = {value.code}", "if _h._v:"]
            lines += ["    " + line for line in fixed_emit_lines(value.type, "_h", "_out")]
            return "\n".join(lines)
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
                items.append((value.header_root, f"{base}.{width_attr(name[2:])}", value.code))
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
