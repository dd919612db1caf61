"""Where in a JSON text the decoder refused it, for one-line errors that name the line.

Python's decoder reports its own syntax errors with a position, but not the refusals
made in its hooks (a constant that is no number, a key twice in one object) or in
``int()`` (an integer past the interpreter's limit on digits). These find the refused
token the way the decoder met it: in document order, outside strings.
"""

from __future__ import annotations

import json
import re

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
