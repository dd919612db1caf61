"""Aalo's Discretized Coflow-Aware Least-Attained Service (Chowdhury & Stoica, SIGCOMM 2015).

Non-clairvoyant: a coflow starts in the highest queue and moves down as the
bytes it has already sent cross exponentially spaced thresholds
(``first_threshold_bytes`` × ``spacing``^k); inside a queue coflows are served
first-come first-served. Aalo weights its queues; we serve them in strict
priority, as the switch does.
"""

from __future__ import annotations

import math
from typing import ClassVar

from control.policies.base import BasePolicy, CoflowState, Ranking, Snapshot

MIB = 1 << 20


class AaloPolicy(BasePolicy):
    name: ClassVar[str] = "aalo"
    clairvoyant: ClassVar[bool] = False

    def __init__(
        self, num_queues: int = 10, first_threshold_bytes: float = 10 * MIB, spacing: float = 10.0
    ) -> None:
        self.num_queues = num_queues
        self.first_threshold_bytes = first_threshold_bytes
        self.spacing = spacing

    def queue_of(self, sent_bytes: float) -> int:
        """0 is the highest queue; the last queue has no upper threshold."""
        # A relative tolerance so that a coflow stopped exactly at a threshold has crossed it.
        sent = sent_bytes * (1 + 1e-9)
        if sent < self.first_threshold_bytes:
            return 0
        level = 1 + math.floor(math.log(sent / self.first_threshold_bytes, self.spacing))
        return min(level, self.num_queues - 1)

    def rank(self, snapshot: Snapshot) -> Ranking:
        ordered = sorted(
            snapshot.coflows, key=lambda c: (self.queue_of(c.sent_bytes), c.arrival_s, c.key)
        )
        return Ranking(tuple((c.key,) for c in ordered))

    def next_rerank_sent_bytes(self, coflow: CoflowState) -> float | None:
        queue = self.queue_of(coflow.sent_bytes)
        if queue >= self.num_queues - 1:
            return None
        return float(self.first_threshold_bytes * self.spacing**queue)
