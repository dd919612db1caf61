"""FIFO with limited multiplexing, after Baraat (Dogar et al., SIGCOMM 2014).

Coflows are served in arrival order. A *heavy* coflow at the head would
block everything behind it, so once a coflow has sent more than the heavy
threshold it shares its priority with the next coflow in line (and so on
down a chain of heavy coflows). Baraat derives the threshold from the task
size distribution; we take the ``heavy_quantile`` of the total sizes of every
coflow the policy has seen so far, which needs no clairvoyance about
remaining bytes. (The active coflows alone are a poor sample: large coflows
stay active longest, so on FB2010 their quantile is high and the head of the
line blocks the rest for long.)
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from control.model import CoflowKey
from control.policies.base import BasePolicy, CoflowState, Ranking, Snapshot


class FifoLmPolicy(BasePolicy):
    name: ClassVar[str] = "fifo-lm"
    clairvoyant: ClassVar[bool] = False

    def __init__(self, heavy_quantile: float = 0.8) -> None:
        self.heavy_quantile = heavy_quantile
        self._heavy_bytes = 0.0
        self._seen_bytes: dict[CoflowKey, float] = {}

    def _threshold_bytes(self, coflows: list[CoflowState]) -> float:
        """The heavy threshold over every coflow seen so far (recomputed when one is new)."""
        new = [c for c in coflows if c.key not in self._seen_bytes]
        if new or not self._seen_bytes:
            for coflow in new:
                self._seen_bytes[coflow.key] = coflow.total_bytes
            sizes = np.fromiter(self._seen_bytes.values(), dtype=float)
            self._heavy_bytes = float(np.quantile(sizes, self.heavy_quantile))
        return self._heavy_bytes

    def rank(self, snapshot: Snapshot) -> Ranking:
        coflows = sorted(snapshot.coflows, key=lambda c: (c.arrival_s, c.key))
        if not coflows:
            return Ranking(())
        heavy_bytes = self._threshold_bytes(coflows)
        groups: list[tuple[CoflowKey, ...]] = []
        current: list[CoflowKey] = []
        for coflow in coflows:
            current.append(coflow.key)
            if coflow.sent_bytes < heavy_bytes * (1 - 1e-9) or heavy_bytes <= 0:
                groups.append(tuple(current))
                current = []
        if current:
            groups.append(tuple(current))
        return Ranking(tuple(groups))

    def next_rerank_sent_bytes(self, coflow: CoflowState) -> float | None:
        """A coflow turning heavy changes the grouping: re-rank when it crosses the threshold."""
        if coflow.sent_bytes < self._heavy_bytes * (1 - 1e-9) and self._heavy_bytes > 0:
            return self._heavy_bytes
        return None
