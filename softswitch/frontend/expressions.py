"""Expressions: P4-16 type rules, implicit conversions, and folding of compile-time constants."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from softswitch.frontend import ast
from softswitch.frontend.emitter import field_attr
from softswitch.frontend.errors import CompileError, SourceLocation
from softswitch.frontend.limits import MAX_BIT_WIDTH, MAX_CONSTANT_BITS
from softswitch.frontend.references import ReferenceResolution
from softswitch.frontend.scope import (
    Scope,
    Val,
    VarEntry,
)
from softswitch.frontend.types import (
    Bits,
    Bool,
    EnumT,
    ErrorT,
    HeaderT,
    IntLiteral,
    P4Type,
    StringT,
    StructT,
    TupleT,
    Varbit,
)


class ExpressionLowering(ReferenceResolution, ABC):
    """Lowers expressions to Python code strings of known P4 type."""

    @abstractmethod
    def lower_call(self, call: ast.Call, scope: Scope, statement: bool) -> Val:
        """A call in expression position; calls need externs and statements, defined above."""

    def const_int(self, expr: ast.Expr, scope: Scope | None = None) -> int:
        value = self.lower_expr(expr, scope or Scope({}, self.globals))
        if value.const is None or isinstance(value.const, bool):
            raise CompileError(expr.loc, "expected an integer compile-time constant")
        return int(value.const)

    def const_of_type(self, expr: ast.Expr, t: P4Type) -> Any:
        value = self.lower_expr(expr, Scope({}, self.globals), expected=t)
        value = self.convert(value, t, expr.loc)
        if value.const is None:
            raise CompileError(expr.loc, "select and entry values must be compile-time constants")
        return value.const

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
            if expr.value.bit_length() > MAX_CONSTANT_BITS:
                raise CompileError(
                    expr.loc, f"an integer literal wider than {MAX_CONSTANT_BITS} bits"
                )
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
            if isinstance(then.type, IntLiteral) and isinstance(other.type, IntLiteral):
                # p4c's rule, whatever the context: the result needs a type of its own
                # (it would be an int of no width, which nothing downstream can hold).
                raise CompileError(
                    expr.then.loc,
                    f"width must be specified for at least one of {then.const} or {other.const}",
                )
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
            if width > MAX_BIT_WIDTH:
                raise CompileError(
                    expr.loc,
                    f"'++' gives bit<{width}>, above the widest supported, {MAX_BIT_WIDTH} bits",
                )
            return self.maybe_fold(
                f"(({left.code} << {right.type.width}) | {right.code})", Bits(width), [left, right]
            )
        if op in ("<<", ">>"):
            if right.const is not None and (
                isinstance(right.const, bool) or not isinstance(right.const, int)
            ):
                raise CompileError(expr.loc, f"shift amount must be unsigned, not {right.type}")
            if right.const is not None and right.const < 0:
                raise CompileError(expr.loc, f"negative shift amount {right.const}")
            if isinstance(left.type, IntLiteral) and right.const is not None:
                if op == "<<" and left.const.bit_length() + right.const > MAX_CONSTANT_BITS:
                    raise CompileError(
                        expr.loc,
                        f"{left.const} << {right.const} is a constant of more than "
                        f"{MAX_CONSTANT_BITS} bits",
                    )
                value = self.fold(f"({left.code} {op} {right.const})")
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
            if right.const is not None and right.const >= left.type.width:
                # Every bit shifted out: fold to 0 rather than build a huge integer.
                return self.maybe_fold(f"({left.code} & 0)", left.type, [left])
            amount = right.code
            if op == "<<" and right.const is None:
                # A packet-borne amount is capped at the width: shifting by W already
                # clears every bit, and a larger amount would only build a huge integer.
                amount = f"min({right.code}, {left.type.width})"
            code = (
                f"(({left.code} << {amount}) & {mask})"
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
            if isinstance(value, int) and value.bit_length() > MAX_CONSTANT_BITS:
                raise CompileError(
                    expr.loc,
                    f"constant folding builds an integer wider than {MAX_CONSTANT_BITS} bits",
                )
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
