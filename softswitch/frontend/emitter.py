"""Python source under construction: indented lines, and how P4 names map to Python."""

from __future__ import annotations


def field_attr(name: str) -> str:
    """Attribute holding a P4 field or member (prefixed: P4 names may be Python keywords)."""
    return "f_" + name


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
