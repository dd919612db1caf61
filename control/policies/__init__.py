"""Scheduling policies, one module each, behind :class:`control.policies.base.Policy`.

:func:`get_policy` builds a fresh instance by name (policies may cache plan
data, so each simulation or controller run gets its own).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from control.errors import UserError
from control.policies.aalo import AaloPolicy
from control.policies.base import BasePolicy
from control.policies.beamer import (
    BeamerDutyPolicy,
    BeamerGuardPolicy,
    BeamerStagePolicy,
    BeamerTailPolicy,
    BeamerV1Policy,
    add_iterations,
    chosen_beamer,
)
from control.policies.bssi import bssi_order
from control.policies.fair import FairPolicy
from control.policies.fifo import FifoMaddPolicy, FifoPolicy
from control.policies.fifo_lm import FifoLmPolicy
from control.policies.lookahead import (
    LookaheadP99Policy,
    LookaheadPolicy,
    LookaheadRivalPolicy,
    LookaheadStagesPolicy,
)
from control.policies.sincronia import SincroniaPolicy
from control.policies.varys import VarysPolicy

POLICIES: dict[str, Callable[[], BasePolicy]] = {
    "beamer": chosen_beamer,
    "beamer-v1": BeamerV1Policy,
    "beamer-stage": BeamerStagePolicy,
    "beamer-tail": BeamerTailPolicy,
    "beamer-guard": BeamerGuardPolicy,
    "beamer-duty": BeamerDutyPolicy,
    "beamer-lookahead": LookaheadPolicy,
    "beamer-lookahead-p99": LookaheadP99Policy,
    "beamer-lookahead-rival": LookaheadRivalPolicy,
    "beamer-lookahead-stages": LookaheadStagesPolicy,
    "sincronia": SincroniaPolicy,
    "varys": VarysPolicy,
    "aalo": AaloPolicy,
    "fifo-lm": FifoLmPolicy,
    "fifo": FifoPolicy,
    "fifo-madd": FifoMaddPolicy,
    "fair": FairPolicy,
}


def get_policy(name: str) -> BasePolicy:
    """A new policy instance; unknown names are a :class:`UserError` listing the known ones."""
    factory = POLICIES.get(name)
    if factory is None:
        raise UserError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")
    return factory()


def is_search(name: str) -> bool:
    """A registered lookahead search: it ranks by simulating the rest of the run at each
    arrival, which on a whole trace takes hours, so benchmarks and tests that run every
    policy leave these out unless named."""
    factory = POLICIES[name]
    return isinstance(factory, type) and issubclass(factory, LookaheadPolicy)


def warm_up() -> None:
    """Compile the policies' numba kernels now, or load them from numba's on-disk cache.

    In a fresh install the first call compiles them, which takes about a second: a
    controller warms up before it serves, so its first reaction is not that late.
    """
    bssi_order(np.array([[1.0, 2.0], [2.0, 1.0]]), np.ones(2))
    add_iterations(np.zeros(2), np.ones(1), np.ones((1, 2)))
