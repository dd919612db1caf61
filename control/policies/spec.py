"""Policies named on a command line: a registered name, or ``name:knob=value;...``.

One parser for every command that takes policies (``beamer simulate``, the
held-out and headroom benchmarks), so a Beamer variant measured in one of them
is written the same way in the others. ``beamer`` variants start from the first
design's constructor (:class:`BeamerPolicy`), ``beamer-lookahead`` variants from
:class:`LookaheadPolicy`'s defaults. Each value is parsed and checked by the
knob's declaration on that class (``knobs``: a whole number, a number,
``true``/``false`` or a word, and its range), so a bad one is refused here, in one
line naming it, before any run starts.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from control.errors import UserError
from control.options import comma_items, refuse_repeats
from control.policies import get_policy
from control.policies.base import BasePolicy
from control.policies.beamer import BeamerPolicy
from control.policies.lookahead import LookaheadPolicy

TUNABLE: dict[str, type[BeamerPolicy] | type[LookaheadPolicy]] = {
    "beamer": BeamerPolicy,
    "beamer-lookahead": LookaheadPolicy,
}
"""The policies that take knobs, and the class whose constructor arguments they are."""


def policy_from_spec(spec: str) -> BasePolicy:
    """A registered policy, or ``name:key=value;...`` for a variant of a tunable one."""
    if ":" not in spec:
        return get_policy(spec)
    factory, kwargs = _variant(spec)
    try:
        return factory(**kwargs)
    except (TypeError, ValueError, UserError) as error:
        raise UserError(f"policy {spec!r}: {error}") from None


def _variant(spec: str) -> tuple[type[BeamerPolicy] | type[LookaheadPolicy], dict[str, Any]]:
    """The class and the parsed knobs of ``name:key=value;...``, each value checked."""
    base, _, args = spec.partition(":")
    factory = TUNABLE.get(base)
    if factory is None:
        raise UserError(f"policy {spec!r}: only {', '.join(TUNABLE)} take arguments, not {base!r}")
    knobs = factory.knobs
    kwargs: dict[str, Any] = {}  # each of the kind its declaration gives
    for item in args.split(";"):
        name, equals, value = item.partition("=")
        if not equals or not name:
            raise UserError(f"policy {spec!r}: {item!r} is not key=value")
        knob = knobs.get(name)
        if knob is None:
            raise UserError(
                f"policy {spec!r}: unknown {base} knob {name!r} (known: {', '.join(knobs)})"
            )
        if name in kwargs:
            raise UserError(f"policy {spec!r}: {name} given more than once")
        try:
            kwargs[name] = knob.parse(value)
        except ValueError:
            raise UserError(f"policy {spec!r}: {name}={value} is not {knob.describe()}") from None
    return factory, kwargs


def _identity(spec: str) -> tuple[object, ...]:
    """What a spec runs, whatever its spelling: a registered name, or a tunable policy
    and the knobs it sets away from the constructor's defaults, in the declaration's
    order (``beamer:coflow_tail=00;max_groups=01`` is ``beamer:max_groups=1;coflow_tail=0``)."""
    if ":" not in spec:
        return (spec,)
    factory, kwargs = _variant(spec)
    parameters = inspect.signature(factory).parameters
    changed = tuple(
        (name, kwargs[name])
        for name in factory.knobs
        if name in kwargs and (name not in parameters or kwargs[name] != parameters[name].default)
    )
    return (spec.partition(":")[0], *changed)


def parse_policy_list(
    text: str, option: str = "--policies", check: Callable[[str], object] = policy_from_spec
) -> tuple[str, ...]:
    """Comma-separated policies, each known to ``check`` and each given once: a policy
    given twice, in the same or another spelling, would run twice and count twice in
    every comparison."""
    names = comma_items(text, option, "policy")
    refuse_repeats(names, option)
    for name in names:
        try:
            check(name)
        except UserError as error:
            raise UserError(f"{option}: {error}") from None
    seen: dict[tuple[object, ...], str] = {}
    for name in names:
        identity = _identity(name)
        if identity in seen:
            raise UserError(f"{option}: {seen[identity]!r} and {name!r} are the same policy")
        seen[identity] = name
    return tuple(names)
