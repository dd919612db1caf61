"""Where in a JSON text a value sits, for one-line errors that name the line.

Python's decoder reports its own syntax errors with a position, but not the refusals
made in its hooks (a constant that is no number, a key twice in one object) or in
``int()`` (an integer past the interpreter's limit on digits). These find the refused
token the way the decoder met it: in document order, outside strings. And a validator
of the decoded document names a value by its path: :func:`line_of_path` finds its line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

JsonPath = tuple[str | int, ...]
"""Where a value sits in a JSON document: object keys and array indices from the top."""

_STRING = r'"(?:[^"\\]|\\.)*"'
_TOKENS = re.compile(rf"{_STRING}|[{{}}]|:", re.DOTALL)
_CONSTANT = re.compile(rf"{_STRING}|-?Infinity|NaN", re.DOTALL)
_NUMBER = re.compile(rf"{_STRING}|-?(\d+)(\.\d+)?([eE][-+]?\d+)?", re.DOTALL)


def line_at(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def line_of_constant(text: str) -> int:
    """The line of the first ``NaN``, ``Infinity`` or ``-Infinity`` outside a string."""
    for match in _CONSTANT.finditer(text):
        if not match.group(0).startswith('"'):
            return line_at(text, match.start())
    return 1


def line_of_long_integer(text: str, max_digits: int) -> int:
    """The line of the first integer (no fraction, no exponent: those are floats, which
    have no limit on digits) of more than ``max_digits`` digits outside a string."""
    for match in _NUMBER.finditer(text):
        digits, fraction, exponent = match.groups()
        whole = digits is not None and fraction is None and exponent is None
        if whole and len(digits) > max_digits:
            return line_at(text, match.start())
    return 1


def line_of_duplicate_key(text: str, closed_before: int, key: str) -> int:
    """The line of the second ``key`` in the object the decoder closed after
    ``closed_before`` others (it hands each object over at its closing brace, so the
    objects close in the order of their ``}``)."""
    opened: list[int] = []
    closed = 0
    for match in _TOKENS.finditer(text):
        token = match.group(0)
        if token == "{":
            opened.append(match.start())
        elif token == "}" and opened:
            start = opened.pop()
            if closed == closed_before:
                return _line_of_second_key(text, start, match.end(), key)
            closed += 1
    return 1


def _line_of_second_key(text: str, start: int, end: int, key: str) -> int:
    """In the object ``text[start:end]``, the line of the second member named ``key``."""
    depth = 0
    seen = 0
    previous: re.Match[str] | None = None
    for match in _TOKENS.finditer(text, start, end):
        token = match.group(0)
        if token == "{":
            depth += 1
        elif token == "}":
            depth -= 1
        elif token == ":" and depth == 1 and previous is not None and _names(previous, key):
            seen += 1
            if seen == 2:
                return line_at(text, previous.start())
        previous = match
    return line_at(text, start)


def _names(token: re.Match[str], key: str) -> bool:
    """Whether the string ``token`` spells ``key`` (escapes decoded)."""
    return token.group(0).startswith('"') and json.loads(token.group(0)) == key


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


def line_of_path(text: str, path: JsonPath, *, of_key: bool = False) -> int:
    """The line where the value at ``path`` starts (its nearest found ancestor's): the
    line of a value a validator refused in the decoded document. With ``of_key``, the
    line of the key that names it instead (an unknown key is refused, not its value)."""
    return line_at(text, _offset_of(text, path, of_key))


def member_name(key: str) -> str:
    """How an error names member ``key`` of an object after its parent's name: ``.key``
    for a plain ASCII name, else ``["key"]`` quoted and escaped, so that a newline, a
    control or an invisible character in it cannot break or blank the error's line."""
    return f".{key}" if key.isascii() and key.isidentifier() else f"[{json.dumps(key)}]"


def steps_name(path: JsonPath) -> str:
    """How an error names the value at ``path`` after the document's own name: ``.a[0].b``,
    each key by :func:`member_name`."""
    return "".join(f"[{step}]" if isinstance(step, int) else member_name(step) for step in path)


def _offset_of(text: str, path: JsonPath, of_key: bool) -> int:
    position = _skip(text, 0)
    for number, step in enumerate(path, 1):
        found = _child_offset(text, position, step, of_key and number == len(path))
        if found is None:
            break
        position = found
    return position


def _skip(text: str, position: int) -> int:
    return _WHITESPACE.match(text, position).end()  # type: ignore[union-attr]


def _child_offset(text: str, position: int, step: str | int, of_key: bool) -> int | None:
    """Offset of member ``step`` of the object or array starting at ``position`` (with
    ``of_key``, of the key naming it)."""
    opener = text[position : position + 1]
    if opener not in ("{", "[") or (opener == "{") != isinstance(step, str):
        return None
    closer = "}" if opener == "{" else "]"
    position = _skip(text, position + 1)
    found: int | None = None
    index = 0
    while position < len(text) and text[position] != closer:
        if opener == "{":
            key_offset = position
            key, position = _scanstring(text, position + 1)
            position = _skip(text, _skip(text, position) + 1)  # past ':'
            if key == step:
                # The last duplicate wins, as in json.loads.
                found = key_offset if of_key else position
        elif index == step:
            return position
        _, position = _DECODER.raw_decode(text, position)
        position = _skip(text, position)
        if text[position : position + 1] == ",":
            position = _skip(text, position + 1)
        index += 1
    return found
