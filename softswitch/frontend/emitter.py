"""Python source under construction: indented lines, and how P4 names map to Python.

Only two kinds of text become Python identifiers: P4 identifiers, behind a prefix
(:func:`py_name`), and names the compiler numbers itself (``CompilerState.fresh``).
Anything else a program writes (an ``@name``'s text, a string literal, a key's name)
stays data: a string literal made with ``repr()``, or a field of the lowered program.
"""

from __future__ import annotations

import re

# The lexer's rule for a P4 identifier: ASCII letters, digits and '_' only.
_P4_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def py_name(prefix: str, name: str) -> str:
    """The Python identifier for P4 identifier ``name``: the prefix keeps it clear of
    Python keywords and of the generated code's own names. Text that is not a P4
    identifier is a bug here (it could be code), never written into the source."""
    if not _P4_IDENTIFIER.fullmatch(name):
        raise ValueError(f"not a P4 identifier, cannot name generated code: {name!r}")
    return prefix + name


def field_attr(name: str) -> str:
    """Attribute holding a P4 field or member (prefixed: P4 names may be Python keywords)."""
    return py_name("f_", name)


class Emitter:
    """Indented Python source lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def indent(self) -> Emitter:
        self.depth += 1
        return self

    def dedent(self) -> None:
        self.depth -= 1

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"
