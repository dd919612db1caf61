"""Test policies shared by the controller tests: small, predictable rankings."""

from __future__ import annotations

from typing import ClassVar

from control.model import CoflowKey
from control.policies.base import Ranking, Snapshot


class SmallestFirst:
    """Test policy: smallest remaining coflow first, one coflow per group."""

    name: ClassVar[str] = "smallest-first"
    clairvoyant: ClassVar[bool] = True
    allocator: ClassVar[str] = "priority"

    def rank(self, snapshot: Snapshot) -> Ranking:
        ordered = sorted(snapshot.coflows, key=lambda c: (c.remaining_bytes, c.key))
        return Ranking(tuple((c.key,) for c in ordered))


def one_class_per_rank(ranking: Ranking, k: int) -> list[tuple[CoflowKey, int]]:
    return [(key, max(k - 1 - rank, 0)) for rank, key in enumerate(ranking.order())]
