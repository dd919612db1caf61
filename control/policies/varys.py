"""Varys: Smallest Effective Bottleneck First, rates by MADD.

A coflow's effective bottleneck is the time its busiest port needs for its
remaining bytes at full capacity (Chowdhury et al., SIGCOMM 2014). The
simulator gives each coflow in this order the minimum rates that finish all
its flows together (MADD) and backfills what is left.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from control.policies.base import Allocator, BasePolicy, Ranking, Snapshot, demand_matrix


class VarysPolicy(BasePolicy):
    name: ClassVar[str] = "varys"
    allocator: ClassVar[Allocator] = "madd"

    def rank(self, snapshot: Snapshot) -> Ranking:
        coflows = snapshot.coflows
        capacity_bytes_per_s = np.asarray(snapshot.port_capacity_bps) / 8.0
        demand = demand_matrix(coflows, len(capacity_bytes_per_s))
        bottleneck_s = (demand / capacity_bytes_per_s).max(axis=1, initial=0.0)
        order = np.lexsort((np.arange(len(coflows)), bottleneck_s))
        return Ranking(tuple((coflows[int(i)].key,) for i in order))
