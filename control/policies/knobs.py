"""Knobs: the constructor arguments of a tunable policy, each with the values it may take.

A tunable policy declares each knob once, next to its constructor. The constructor
checks its arguments against that declaration, and :mod:`control.policies.spec`
parses a spec's text by it, so that a value the ranking cannot use (a fractional
count, a zero divisor, an exponent that overflows) is refused with one line before
any run instead of failing, or ranking nonsense, in the middle of one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from control.addresses import written_plainly
from control.errors import UserError

KNOB_LIMIT = 1e6
"""Largest magnitude a numeric knob may take unless its declaration says less."""

KnobKind = Literal["int", "float", "bool", "word"]


@dataclass(frozen=True, slots=True)
class Knob:
    """What one knob may be: a whole number, a number, true/false or one of ``words``.

    Numbers lie from ``minimum`` to ``maximum`` (above ``minimum`` with
    ``above_minimum``); a whole number is also a number, true/false is neither.
    """

    kind: KnobKind
    minimum: float = 0.0
    maximum: float = KNOB_LIMIT
    above_minimum: bool = False
    """The minimum itself is refused (a divisor, an exponent that must be positive)."""
    words: tuple[str, ...] = ()
    optional: bool = False
    """None, the constructor's default, turns the knob off (a spec cannot write it)."""

    def describe(self) -> str:
        """The values allowed, as the end of "… is not ___"."""
        if self.kind == "bool":
            return "true or false"
        if self.kind == "word":
            return " or ".join(repr(word) for word in self.words)
        if self.kind == "int":
            return f"a whole number from {self.minimum:.0f} to {self.maximum:.0f}"
        if self.above_minimum:
            return f"a number above {self.minimum:g} and at most {self.maximum:g}"
        return f"a number from {self.minimum:g} to {self.maximum:g}"

    def admits(self, value: object) -> bool:
        """Whether the constructor can take ``value`` for this knob."""
        if value is None:
            return self.optional
        if self.kind == "bool":
            return isinstance(value, bool)
        if self.kind == "word":
            return isinstance(value, str) and value in self.words
        # bool is an int subclass: True must not pass for 1.
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.kind == "int" and not isinstance(value, int):
            return False
        if not math.isfinite(value):
            return False
        above = value > self.minimum if self.above_minimum else value >= self.minimum
        return above and value <= self.maximum

    def parse(self, text: str) -> object:
        """The value a spec's ``text`` stands for; ValueError if this knob cannot take it."""
        value: object
        if self.kind in ("int", "float") and not written_plainly(text):
            raise ValueError(text)
        if self.kind == "bool":
            if text not in ("true", "false"):
                raise ValueError(text)
            value = text == "true"
        elif self.kind == "int":
            value = int(text)
        elif self.kind == "float":
            value = float(text)
        else:
            value = text
        if not self.admits(value):
            raise ValueError(text)
        return value


def check_knobs(knobs: Mapping[str, Knob], values: Mapping[str, object]) -> None:
    """Refuse, as a :class:`UserError` naming the knob, the first of ``values`` (a
    constructor's arguments) that its declaration does not admit."""
    for name, knob in knobs.items():
        value = values[name]
        if not knob.admits(value):
            raise UserError(f"{name}={value!r} is not {knob.describe()}")
