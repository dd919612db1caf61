"""A small C-style preprocessor: ``#include``, object-like ``#define``, ``#ifdef``.

Comments are blanked first (newlines kept) so that directives inside
comments are ignored and every output line keeps its origin. Anything else
starting with ``#`` is a CompileError, not silently dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from control.errors import UserError
from control.files import read_bytes
from softswitch.frontend.errors import CompileError, SourceLocation
from softswitch.frontend.limits import (
    MAX_INCLUDES,
    MAX_LINE_CHARS,
    MAX_PROGRAM_CHARS,
    MAX_PROGRAM_LINES,
    MAX_SOURCE_BYTES,
)

SYSTEM_INCLUDE_DIR = Path(__file__).resolve().parent.parent / "p4include"
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_INCLUDE_DEPTH = 32


@dataclass(frozen=True, slots=True)
class Line:
    """One output line and where it came from."""

    text: str
    file: str
    number: int


_COMMENT_OR_STRING = re.compile(r'"|//|/\*')


def strip_comments(text: str, filename: str = "<string>") -> str:
    """Blank ``//`` and ``/* */`` comments, keeping newlines and string literals.

    Plain text between them is copied in one piece (a character at a time takes seconds
    on a large file). A ``/*`` never closed is a CompileError at it, as in p4c, not a
    comment that silently swallows the rest of the file."""
    out: list[str] = []
    i, n = 0, len(text)
    while True:
        match = _COMMENT_OR_STRING.search(text, i)
        if match is None:
            out.append(text[i:])
            return "".join(out)
        start = match.start()
        out.append(text[i:start])
        found = match.group(0)
        if found == '"':
            j = start + 1
            while j < n and text[j] != '"' and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[start : j + 1])
            i = j + 1
        elif found == "//":
            j = text.find("\n", start)
            j = n if j < 0 else j
            out.append(" " * (j - start))
            i = j
        else:
            j = text.find("*/", start + 2)
            if j < 0:
                line_start = text.rfind("\n", 0, start) + 1
                where = SourceLocation(
                    filename, text.count("\n", 0, start) + 1, start - line_start + 1
                )
                raise CompileError(where, "unterminated comment: '/*' without '*/'")
            j += 2
            comment = text[start:j]
            out.append(re.sub(r"[^\n]", " ", comment))
            i = j


def read_program(path: Path) -> str:
    """The text of the P4 program in ``path``; a CompileError of one line when it is
    missing, not a regular file (a FIFO is refused without being waited on), too large,
    unreadable (:func:`control.files.read_bytes`), or not UTF-8."""
    try:
        data = read_bytes(
            path, what="P4 program", missing="no such P4 program", max_bytes=MAX_SOURCE_BYTES
        )
    except UserError as error:
        raise CompileError(None, str(error)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line_start = data.rfind(b"\n", 0, error.start) + 1
        where = SourceLocation(
            str(path), data.count(b"\n", 0, error.start) + 1, error.start - line_start + 1
        )
        raise CompileError(
            where, f"not UTF-8 text (byte 0x{data[error.start]:02x}: {error.reason})"
        ) from None


class Preprocessor:
    def __init__(self, include_dirs: list[Path] | None = None) -> None:
        self.include_dirs = [*(include_dirs or []), SYSTEM_INCLUDE_DIR]
        self.macros: dict[str, str] = {}
        self.once: set[Path] = set()
        self.lines = 0  # of the whole program so far, every included file counted
        self.chars = 0
        self.includes = 0

    def run_file(self, path: Path) -> list[Line]:
        return self.run_text(read_program(path), str(path), path.parent, 0)

    def run_text(self, text: str, filename: str, directory: Path, depth: int) -> list[Line]:
        if depth > _MAX_INCLUDE_DEPTH:
            raise CompileError(SourceLocation(filename, 1, 1), "#include nested too deeply")
        out: list[Line] = []
        # Stack of (active, seen_else) for #ifdef blocks.
        conditions: list[tuple[bool, bool]] = []
        raw_lines = strip_comments(text, filename).split("\n")
        number = 0
        while number < len(raw_lines):
            line = raw_lines[number]
            number += 1
            if line.endswith("\\") and number < len(raw_lines):
                line, number = self._joined(out, raw_lines, number, filename)
            stripped = line.strip()
            active = all(c[0] for c in conditions)
            where = SourceLocation(filename, number, line.find("#") + 1)
            if stripped.startswith("#"):
                self._emit(out, Line("", filename, number))
                directive = stripped[1:].strip()
                word = _IDENT.match(directive)
                name = word.group(0) if word else ""
                rest = directive[len(name) :].strip()
                if name in ("ifdef", "ifndef"):
                    defined = rest in self.macros
                    conditions.append((defined if name == "ifdef" else not defined, False))
                elif name == "else":
                    if not conditions or conditions[-1][1]:
                        raise CompileError(where, "#else without #ifdef")
                    conditions[-1] = (not conditions[-1][0], True)
                elif name == "endif":
                    if not conditions:
                        raise CompileError(where, "#endif without #ifdef")
                    conditions.pop()
                elif not active:
                    continue
                elif name == "define":
                    match = _IDENT.match(rest)
                    if not match:
                        raise CompileError(where, "#define needs a name")
                    body = rest[match.end() :]
                    if body.startswith("("):
                        raise CompileError(where, "function-like macros are not supported")
                    self.macros[match.group(0)] = self._expanded(body.strip(), where)
                elif name == "undef":
                    self.macros.pop(rest, None)
                elif name == "include":
                    out.extend(self._include(rest, where, directory, depth))
                elif name == "pragma" and rest == "once":
                    continue
                else:
                    raise CompileError(where, f"unsupported preprocessor directive #{name}")
                continue
            self._emit(
                out,
                Line(
                    self._expanded(line, SourceLocation(filename, number, 1)) if active else "",
                    filename,
                    number,
                ),
            )
        if conditions:
            raise CompileError(SourceLocation(filename, number, 1), "#ifdef without #endif")
        return out

    def _joined(
        self, out: list[Line], raw_lines: list[str], number: int, filename: str
    ) -> tuple[str, int]:
        """The line ``raw_lines[number - 1]`` ends with ``\\``: that line joined with those it
        continues into, and the number of the line after them. The parts are joined once (joining
        one at a time is quadratic) and the length is checked as it grows."""
        parts = [raw_lines[number - 1]]
        length = len(parts[0])
        while parts[-1].endswith("\\") and number < len(raw_lines):
            parts[-1] = parts[-1][:-1]
            part = raw_lines[number]
            number += 1
            length += len(part)  # the '\\' becomes a space
            if length > MAX_LINE_CHARS:
                raise CompileError(
                    SourceLocation(filename, number, 1),
                    f"a line longer than {MAX_LINE_CHARS:,} characters (joined by '\\' "
                    "continuations)",
                )
            parts.append(part)
            self._emit(out, Line("", filename, number - 1))
        return " ".join(parts), number

    def _emit(self, out: list[Line], line: Line) -> None:
        """Add ``line`` to the program, refused once the program grows past the limits
        (includes and macros can multiply a few kilobytes into gigabytes)."""
        self.lines += 1
        self.chars += len(line.text)
        if self.lines > MAX_PROGRAM_LINES or self.chars > MAX_PROGRAM_CHARS:
            raise CompileError(
                SourceLocation(line.file, line.number, 1),
                f"the program grows past {MAX_PROGRAM_LINES:,} lines or {MAX_PROGRAM_CHARS:,} "
                "characters through #include and #define",
            )
        out.append(line)

    def _include(self, rest: str, where: SourceLocation, directory: Path, depth: int) -> list[Line]:
        match = re.fullmatch(r'<([^>]+)>|"([^"]+)"', rest)
        if not match:
            raise CompileError(where, f"malformed #include {rest}")
        self.includes += 1
        if self.includes > MAX_INCLUDES:
            raise CompileError(where, f"more than {MAX_INCLUDES:,} #include directives followed")
        system_name, local_name = match.group(1), match.group(2)
        name = system_name or local_name
        if "\0" in name:
            # No file name holds one (the OS would refuse it; Path raises ValueError).
            raise CompileError(where, "an #include file name cannot hold a NUL character")
        candidates = ([] if system_name else [directory]) + self.include_dirs
        for base in candidates:
            try:
                path = (base / name).resolve()
                found = path.is_file()
            except (OSError, RuntimeError) as error:  # RuntimeError: a loop of symlinks
                raise CompileError(where, f"cannot open include file {name}: {error}") from None
            if found:
                if path in self.once:
                    return []
                if path.parent == SYSTEM_INCLUDE_DIR:
                    self.once.add(path)
                shown = path.name if path.parent == SYSTEM_INCLUDE_DIR else str(base / name)
                try:
                    text = read_bytes(
                        path, what="P4 include file", max_bytes=MAX_SOURCE_BYTES
                    ).decode("utf-8")
                except (UserError, UnicodeDecodeError) as error:
                    raise CompileError(where, f"cannot read include file {name}: {error}") from None
                return self.run_text(text, shown, path.parent, depth + 1)
        raise CompileError(where, f"cannot find include file {name}")

    def _expanded(self, line: str, where: SourceLocation) -> str:
        """:meth:`expand`, refused once a line grows past MAX_LINE_CHARS (macros built
        from macros double a line's length with every definition)."""
        if len(line) > MAX_LINE_CHARS:
            raise CompileError(where, f"a line longer than {MAX_LINE_CHARS:,} characters")
        if not self.macros:
            return line
        grown = 0
        for match in _IDENT.finditer(line):
            body = self.macros.get(match.group(0))
            if body is not None:
                grown += len(body) - len(match.group(0))
                if len(line) + grown > MAX_LINE_CHARS:
                    raise CompileError(
                        where,
                        f"macro expansion makes this line longer than {MAX_LINE_CHARS} characters",
                    )
        return self.expand(line)

    def expand(self, line: str) -> str:
        if not self.macros:
            return line
        return _IDENT.sub(lambda m: self.macros.get(m.group(0), m.group(0)), line)
