"""Control-plane names as p4c forms them, so a P4Info from p4c and from here agree."""

from __future__ import annotations

from softswitch.frontend import ast
from softswitch.frontend.errors import CompileError


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


def match_field_name(key: ast.KeyElement) -> str:
    """A table key's P4Info match-field name: its ``@name`` or its source text."""
    for a in key.annotations:
        if a.name == "name" and a.args and isinstance(a.args[0], ast.StringLit):
            return a.args[0].value
    return expr_text(key.expr)


def expr_text(expr: ast.Expr) -> str:
    """The key's source text as p4c names the match field (``hdr.ipv4.dstAddr``)."""
    if isinstance(expr, ast.Name):
        return expr.name
    if isinstance(expr, ast.Member):
        return f"{expr_text(expr.base)}.{expr.member}"
    if (
        isinstance(expr, ast.Call)
        and not expr.args
        and isinstance(expr.func, ast.Member)
        and expr.func.member == "isValid"
    ):
        return f"{expr_text(expr.func.base)}.$valid$"  # p4c's name for validity keys
    if (
        isinstance(expr, ast.Slice)
        and isinstance(expr.high, ast.IntLit)
        and isinstance(expr.low, ast.IntLit)
    ):
        return f"{expr_text(expr.base)}[{expr.high.value}:{expr.low.value}]"
    raise CompileError(expr.loc, "table keys must be fields, slices or isValid() (or carry @name)")


def describe(expr: ast.Expr) -> str:
    """Source text of an expression for an error message, or "value" when it has none."""
    try:
        return expr_text(expr)
    except CompileError:
        return "value"
