"""Sincronia: BSSI on every active coflow's remaining bytes, blind to stages."""

from __future__ import annotations

from typing import ClassVar

from control.policies.base import BasePolicy, Ranking, Snapshot, demand_matrix
from control.policies.bssi import bssi_order


class SincroniaPolicy(BasePolicy):
    """One group per coflow in BSSI order; rates by strict priority (or greedy)."""

    name: ClassVar[str] = "sincronia"

    def rank(self, snapshot: Snapshot) -> Ranking:
        coflows = snapshot.coflows
        demand = demand_matrix(coflows, len(snapshot.port_capacity_bps))
        order = bssi_order(demand)
        return Ranking(tuple((coflows[i].key,) for i in order))
