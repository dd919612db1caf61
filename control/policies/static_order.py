"""A fixed experiment order: the offline reference that ``bench/bench_headroom.py`` searches.

Every active coflow is ranked by the position of its experiment in a given
permutation of experiment ids; one group (one strict-priority class) per
experiment, as Beamer has. The order never changes while a run goes on: an
experiment that arrives later and stands earlier in the order preempts the
ones behind it, exactly as a fixed priority would. Searching over these
orders in the simulator says how much a better experiment order could gain
on an instance, whatever rule produced it.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from typing import ClassVar

from control.errors import UserError
from control.model import CoflowKey
from control.policies.base import BasePolicy, Ranking, Snapshot


class StaticOrderPolicy(BasePolicy):
    """Rank experiments by their position in ``order`` (experiment ids, most urgent first)."""

    name: ClassVar[str] = "static-order"

    def __init__(self, order: Sequence[int]) -> None:
        if len(set(order)) != len(order):
            raise UserError(f"static order repeats an experiment: {list(order)}")
        self.order = tuple(order)
        self._position = {experiment: i for i, experiment in enumerate(self.order)}

    def rank(self, snapshot: Snapshot) -> Ranking:
        groups: dict[int, list[CoflowKey]] = defaultdict(list)
        for coflow in snapshot.coflows:
            experiment = coflow.key.experiment_id
            if experiment not in self._position:
                raise UserError(f"experiment {experiment} is not in the static order")
            groups[experiment].append(coflow.key)
        ranked = sorted(groups, key=self._position.__getitem__)
        return Ranking(tuple(tuple(sorted(groups[e])) for e in ranked))


def neighbours(order: tuple[int, ...], window: int | None = None) -> list[tuple[int, ...]]:
    """Every order one insertion or one swap away (without repeats); with ``window``, only
    the moves of at most that many places (on large instances the full neighbourhood
    costs more simulations than the search has, and far moves seldom pay)."""
    found: dict[tuple[int, ...], None] = {}
    n = len(order)
    reach = n if window is None else window
    for i in range(n):
        rest = order[:i] + order[i + 1 :]
        for j in range(max(0, i - reach), min(n, i + reach + 1)):
            if j != i:
                found[(*rest[:j], order[i], *rest[j:])] = None
    for i, j in itertools.combinations(range(n), 2):
        if j - i > reach:
            continue
        swapped = list(order)
        swapped[i], swapped[j] = swapped[j], swapped[i]
        found[tuple(swapped)] = None
    found.pop(order, None)
    return list(found)
