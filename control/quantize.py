"""Map a policy's ranking onto K strict-priority classes (class K−1 is the most urgent).

A switch has few queues (8 on BMv2), a ranking may have hundreds of groups.
Every strategy keeps the ranking's order monotone (a group never lands above
one ranked before it) and, when the groups fit, gives each its own class:

* ``rank``: one class per group while classes last; the rest share class 0.
  Best when the few first groups matter most (Beamer ranks experiments).
* ``exponential``: class K−1 takes 1 group, K−2 the next 2, then 4, …; the
  last class takes the rest. Keeps some separation deep into long rankings.
* ``equal-demand``: cuts the ranking where the cumulative remaining bytes
  cross multiples of total/K, so each class carries about the same demand.

``ideal`` (``num_classes=None``) gives every group its own class, highest first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from control.errors import UserError
from control.model import CoflowKey
from control.policies.base import Ranking

Strategy = Literal["rank", "exponential", "equal-demand"]
STRATEGIES: tuple[Strategy, ...] = ("rank", "exponential", "equal-demand")


def group_classes(
    num_groups: int,
    num_classes: int | None,
    strategy: Strategy = "rank",
    group_bytes: Sequence[float] | None = None,
) -> list[int]:
    """Class of each group (index 0 = most urgent)."""
    if num_classes is None or num_groups <= num_classes:
        top = num_groups - 1 if num_classes is None else num_classes - 1
        return [top - i for i in range(num_groups)]
    if num_classes < 1:
        raise UserError(f"number of priority classes must be >= 1, not {num_classes}")
    k = num_classes
    if strategy == "rank":
        return [max(k - 1 - i, 0) for i in range(num_groups)]
    if strategy == "exponential":
        classes = []
        level, left_in_level, width = k - 1, 1, 1
        for _ in range(num_groups):
            if left_in_level == 0 and level > 0:
                level -= 1
                width *= 2
                left_in_level = width
            classes.append(level)
            left_in_level -= 1
        return classes
    if strategy == "equal-demand":
        if group_bytes is None or len(group_bytes) != num_groups:
            raise ValueError("equal-demand needs the remaining bytes of every group")
        total = float(sum(group_bytes))
        classes = []
        before = 0.0
        for size in group_bytes:
            share = before / total if total > 0 else 0.0
            classes.append(max(k - 1 - int(share * k), 0))
            before += size
        return classes
    raise UserError(f"unknown quantisation strategy {strategy!r} (known: {', '.join(STRATEGIES)})")


def quantize(
    ranking: Ranking,
    num_classes: int | None,
    strategy: Strategy = "rank",
    group_bytes: Sequence[float] | None = None,
) -> dict[CoflowKey, int]:
    """Class per coflow for ``ranking`` on ``num_classes`` classes (None: unlimited)."""
    classes = group_classes(len(ranking.groups), num_classes, strategy, group_bytes)
    return {key: cls for group, cls in zip(ranking.groups, classes, strict=True) for key in group}
