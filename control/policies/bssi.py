"""Sincronia's Bottleneck-Select-Scale-Iterate ordering, vectorised with numpy.

Given the remaining demand of n entities (coflows, stages or experiments) on
P ports and their weights, BSSI fills the order from the back: it takes the
most loaded port b, puts last the entity with the smallest weight per byte on
b, charges the others' weights for the share of b that entity used, and
repeats without it. Sincronia (Agarwal et al., SIGCOMM 2018) shows the order
is a 4-approximation of minimum weighted completion time for coflows; we use
the same primal-dual step on any unit with a per-port demand vector.
"""

from __future__ import annotations

import numpy as np


def bssi_order(demand: np.ndarray, weights: np.ndarray | None = None) -> list[int]:
    """Row indices of ``demand`` (n × P bytes) from first to last to schedule.

    Rows with no demand at all are placed first (they cost nobody anything),
    in index order; ties elsewhere resolve to the lowest index.
    """
    n = demand.shape[0]
    if n == 0:
        return []
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float).copy()
    demand = np.asarray(demand, dtype=float)
    by_port = np.ascontiguousarray(demand.T)  # columns as contiguous rows: faster slicing
    load = by_port.sum(axis=1)
    alive = by_port.sum(axis=0) > 0
    empty = [int(i) for i in np.flatnonzero(~alive)]
    reverse: list[int] = []
    ratio = np.empty(n)
    for _ in range(int(alive.sum())):
        b = int(np.argmax(load))
        column = by_port[b]
        uses = alive & (column > 0)
        if not uses.any():
            # Rounding emptied the port; take the port where the live rows still weigh most.
            load = by_port[:, alive].sum(axis=1)
            b = int(np.argmax(load))
            column = by_port[b]
            uses = alive & (column > 0)
        ratio.fill(np.inf)
        np.divide(w, column, out=ratio, where=uses)
        # Among ties the highest index goes last, so read front to back ties keep index order.
        best = float(ratio.min())
        last = int(np.flatnonzero(ratio <= best * (1 + 1e-12))[-1])
        scale = w[last] / column[last]
        w -= scale * column * uses
        np.maximum(w, 0.0, out=w)
        alive[last] = False
        load -= demand[last]
        reverse.append(last)
    reverse.reverse()
    return empty + reverse


def bssi_order_plain(demand: list[list[float]]) -> list[int]:
    """BSSI as Sincronia states it, in plain Python, recomputing every port load at each step.

    The reference that :func:`bssi_order` is checked and benchmarked against:
    same order, same tie rules, no vectorisation.
    """
    alive = [i for i, row in enumerate(demand) if any(row)]
    weights = [1.0] * len(demand)
    reverse = []
    while alive:
        loads = [sum(demand[i][p] for i in alive) for p in range(len(demand[0]))]
        b = max(range(len(loads)), key=lambda p: (loads[p], -p))
        users = [i for i in alive if demand[i][b] > 0]
        last = min(users, key=lambda i: (weights[i] / demand[i][b], -i))
        scale = weights[last] / demand[last][b]
        for i in users:
            weights[i] -= scale * demand[i][b]
        alive.remove(last)
        reverse.append(last)
    return [i for i, row in enumerate(demand) if not any(row)] + reverse[::-1]
