"""Coflow-level FIFO: coflows in arrival order, each in its own strict-priority class.

The baseline CoflowSim and the Varys paper compare against: the head of the
line takes everything it can use, the next coflow what is left, and so on.
Unlike FIFO-LM nothing ever shares the head's class, so a large coflow at
the head blocks the ones behind it wherever their ports meet. Ties in arrival
time go by coflow key, so the order is total and the same in every run.
"""

from __future__ import annotations

from typing import ClassVar

from control.policies.base import BasePolicy, Ranking, Snapshot


class FifoPolicy(BasePolicy):
    name: ClassVar[str] = "fifo"
    clairvoyant: ClassVar[bool] = False

    def rank(self, snapshot: Snapshot) -> Ranking:
        coflows = sorted(snapshot.coflows, key=lambda c: (c.arrival_s, c.key))
        return Ranking(tuple((coflow.key,) for coflow in coflows))
