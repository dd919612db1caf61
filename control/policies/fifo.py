"""Coflow-level FIFO: coflows in arrival order, each in its own strict-priority class.

``fifo`` is FIFO as a strict-priority switch does it: the head of the line takes
everything it can use (max-min among its flows), the next coflow what is left, and
so on. Unlike FIFO-LM nothing ever shares the head's class, so a large coflow at
the head blocks the ones behind it wherever their ports meet, on ports its own
bottleneck does not need too. Ties in arrival time go by coflow key, so the order
is total and the same in every run.

``fifo-madd`` is the FIFO of CoflowSim, which the Varys paper compares against:
the same order, but each coflow in turn gets the smallest rates that finish all
its flows together (MADD, as under Varys), and what is left is backfilled. A
switch's classes cannot set those rates, so it is a simulator baseline; the
controller ranks it as ``fifo``.
"""

from __future__ import annotations

from typing import ClassVar

from control.policies.base import Allocator, BasePolicy, Ranking, Snapshot


class FifoPolicy(BasePolicy):
    name: ClassVar[str] = "fifo"
    clairvoyant: ClassVar[bool] = False

    def rank(self, snapshot: Snapshot) -> Ranking:
        coflows = sorted(snapshot.coflows, key=lambda c: (c.arrival_s, c.key))
        return Ranking(tuple((coflow.key,) for coflow in coflows))


class FifoMaddPolicy(FifoPolicy):
    name: ClassVar[str] = "fifo-madd"
    clairvoyant: ClassVar[bool] = True  # MADD reads the flows' remaining bytes
    allocator: ClassVar[Allocator] = "madd"
