"""Sincronia's Bottleneck-Select-Scale-Iterate ordering, compiled with numba.

Given the remaining demand of n entities (coflows, stages or experiments) on
P ports and their weights, BSSI fills the order from the back: it takes the
most loaded port b, puts last the entity with the smallest weight per byte on
b, charges the others' weights for the share of b that entity used, and
repeats without it. Sincronia (Agarwal et al., SIGCOMM 2018) shows the order
is a 4-approximation of minimum weighted completion time for coflows; we use
the same primal-dual step on any unit with a per-port demand vector.

:func:`bssi_order` runs the loop as one compiled kernel; :func:`bssi_order_numpy`
is the same loop step by step in numpy (every arithmetic operation the same, so
both give the same order bit for bit), and :func:`bssi_order_plain` states the
algorithm in plain Python. Tests and ``bench.bench_bssi`` check one against the others.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, error_model="numpy")
def _bssi_steps(
    demand: np.ndarray,
    by_port: np.ndarray,
    w: np.ndarray,
    load: np.ndarray,
    alive: np.ndarray,
    reverse: np.ndarray,
    placed: int,
    recheck: bool,
) -> int:
    """Place rows from the back into ``reverse[placed:]`` until every live row is placed
    (returns the count) or the busiest port has no live user (returns ``-1 - count`` so
    the caller recomputes ``load`` over the live rows exactly as numpy sums it, then
    resumes with ``recheck=False``). The arithmetic is :func:`bssi_order_numpy`'s, element
    by element: the same products, quotients, comparisons and first-index argmax."""
    n, ports = demand.shape
    ratio = np.empty(n)
    total = placed
    remaining = 0
    for i in range(n):
        if alive[i]:
            remaining += 1
    while remaining > 0:
        b = 0
        for p in range(1, ports):
            if load[p] > load[b]:
                b = p
        any_use = False
        for i in range(n):
            if alive[i] and by_port[b, i] > 0:
                any_use = True
                break
        if not any_use and recheck:
            return -1 - total
        recheck = True
        best = np.inf
        for i in range(n):
            if alive[i] and by_port[b, i] > 0:
                r = w[i] / by_port[b, i]
                ratio[i] = r
                if r < best:
                    best = r
            else:
                ratio[i] = np.inf
        bound = best * (1 + 1e-12)
        last = -1
        for i in range(n):
            if ratio[i] <= bound:
                last = i
        scale = w[last] / by_port[b, last]
        for i in range(n):
            # numpy's ``w -= scale * column * uses``: the product with False is a zero.
            if alive[i] and by_port[b, i] > 0:
                w[i] -= scale * by_port[b, i]
            else:
                w[i] -= scale * by_port[b, i] * 0.0
            if w[i] < 0.0:
                w[i] = 0.0
        alive[last] = False
        for p in range(ports):
            load[p] -= demand[last, p]
        reverse[total] = last
        total += 1
        remaining -= 1
    return total


def bssi_order(demand: np.ndarray, weights: np.ndarray | None = None) -> list[int]:
    """Row indices of ``demand`` (n × P bytes) from first to last to schedule.

    Rows with no demand at all are placed first (they cost nobody anything),
    in index order; ties elsewhere resolve to the lowest index.
    """
    n = demand.shape[0]
    if n == 0:
        return []
    w = np.ones(n) if weights is None else np.array(weights, dtype=float)
    demand = np.ascontiguousarray(demand, dtype=float)
    by_port = np.ascontiguousarray(demand.T)
    # Sums by numpy (pairwise), as bssi_order_numpy does them: the loads must match bit for bit.
    load = by_port.sum(axis=1)
    alive = by_port.sum(axis=0) > 0
    empty = np.flatnonzero(~alive).tolist()
    reverse = np.empty(int(alive.sum()), dtype=np.int64)
    placed = _bssi_steps(demand, by_port, w, load, alive, reverse, 0, True)
    while placed < 0:
        # Rounding emptied the busiest port; take the port where the live rows still weigh most.
        load = by_port[:, alive].sum(axis=1)
        placed = _bssi_steps(demand, by_port, w, load, alive, reverse, -1 - placed, False)
    return empty + reverse[::-1].tolist()


def bssi_order_numpy(demand: np.ndarray, weights: np.ndarray | None = None) -> list[int]:
    """:func:`bssi_order` step by step in numpy: the reference the kernel is checked against."""
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
