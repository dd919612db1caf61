"""The one error the frontend raises: where in the source, and what is wrong."""

from __future__ import annotations

from dataclasses import dataclass

from control.errors import UserError


@dataclass(frozen=True, slots=True)
class SourceLocation:
    """A position in a (possibly included) source file; line and column count from 1."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class CompileError(UserError):
    """An unsupported or wrong construct, reported as ``file:line:col: message``."""

    def __init__(self, location: SourceLocation | None, message: str) -> None:
        self.location = location
        self.message = message
        super().__init__(f"{location}: {message}" if location else message)
