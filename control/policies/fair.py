"""Per-flow fair sharing: every coflow in one group, so max-min across all flows."""

from __future__ import annotations

from typing import ClassVar

from control.policies.base import BasePolicy, Ranking, Snapshot


class FairPolicy(BasePolicy):
    name: ClassVar[str] = "fair"
    clairvoyant: ClassVar[bool] = False

    def rank(self, snapshot: Snapshot) -> Ranking:
        keys = tuple(coflow.key for coflow in snapshot.coflows)
        return Ranking((keys,) if keys else ())
