"""Policies named on a command line: a registered name, or ``beamer:knob=value;...``.

One parser for every command that takes policies (``beamer simulate``, the
held-out and headroom benchmarks), so a Beamer variant measured in one of them
is written the same way in the others. Values are ``true``/``false``, numbers
or words; a number must be finite and within ``±KNOB_LIMIT``, so that a knob
cannot carry NaN or 1e300 into the ranking's arithmetic.
"""

from __future__ import annotations

import inspect
import math

from control.errors import UserError
from control.policies import get_policy
from control.policies.base import BasePolicy
from control.policies.beamer import BeamerPolicy

KNOB_LIMIT = 1e6
"""Largest magnitude a numeric knob may take."""

WORD_KNOBS = frozenset({"ordering", "tail_order"})
"""Beamer knobs whose value is a word; every other knob takes a number or true/false."""


def _knob_value(spec: str, name: str, text: str) -> object:
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            number = kind(text)
        except ValueError:
            continue
        if not math.isfinite(number) or abs(number) > KNOB_LIMIT:
            raise UserError(
                f"policy {spec!r}: {name}={text} is not a finite number within ±{KNOB_LIMIT:g}"
            )
        return number
    if name not in WORD_KNOBS:
        raise UserError(f"policy {spec!r}: {name}={text!r} is not a number or true/false")
    return text


def policy_from_spec(spec: str) -> BasePolicy:
    """A registered policy, or ``beamer:key=value;...`` for a Beamer variant."""
    if ":" not in spec:
        return get_policy(spec)
    base, _, args = spec.partition(":")
    if base != "beamer":
        raise UserError(f"policy {spec!r}: only beamer variants take arguments, not {base!r}")
    known = inspect.signature(BeamerPolicy).parameters
    kwargs: dict[str, object] = {}
    for item in args.split(";"):
        name, equals, value = item.partition("=")
        if not equals or not name:
            raise UserError(f"policy {spec!r}: {item!r} is not key=value")
        if name not in known:
            raise UserError(
                f"policy {spec!r}: unknown beamer knob {name!r} (known: {', '.join(known)})"
            )
        kwargs[name] = _knob_value(spec, name, value)
    return BeamerPolicy(**kwargs)  # type: ignore[arg-type]
