"""Policies named on a command line: a registered name, or ``name:knob=value;...``.

One parser for every command that takes policies (``beamer simulate``, the
held-out and headroom benchmarks), so a Beamer variant measured in one of them
is written the same way in the others. ``beamer`` variants start from the first
design's constructor (:class:`BeamerPolicy`), ``beamer-lookahead`` variants from
:class:`LookaheadPolicy`'s defaults. Values are ``true``/``false``, numbers
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
from control.policies.lookahead import LookaheadPolicy

KNOB_LIMIT = 1e6
"""Largest magnitude a numeric knob may take."""

TUNABLE: dict[str, type[BasePolicy]] = {
    "beamer": BeamerPolicy,
    "beamer-lookahead": LookaheadPolicy,
}
"""The policies that take knobs, and the class whose constructor arguments they are."""

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
    """A registered policy, or ``name:key=value;...`` for a variant of a tunable one."""
    if ":" not in spec:
        return get_policy(spec)
    base, _, args = spec.partition(":")
    factory = TUNABLE.get(base)
    if factory is None:
        raise UserError(f"policy {spec!r}: only {', '.join(TUNABLE)} take arguments, not {base!r}")
    known = inspect.signature(factory).parameters
    kwargs: dict[str, object] = {}
    for item in args.split(";"):
        name, equals, value = item.partition("=")
        if not equals or not name:
            raise UserError(f"policy {spec!r}: {item!r} is not key=value")
        if name not in known:
            raise UserError(
                f"policy {spec!r}: unknown {base} knob {name!r} (known: {', '.join(known)})"
            )
        kwargs[name] = _knob_value(spec, name, value)
    try:
        return factory(**kwargs)
    except (TypeError, ValueError) as error:
        raise UserError(f"policy {spec!r}: {error}") from None
