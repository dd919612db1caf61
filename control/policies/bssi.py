"""Sincronia's Bottleneck-Select-Scale-Iterate ordering, compiled with numba.

Given the remaining demand of n entities (coflows, stages or experiments) on
P ports and their weights, BSSI fills the order from the back: it takes the
most loaded port b, puts last the entity with the smallest weight per byte on
b, charges the others' weights for the share of b that entity used, and
repeats without it. Sincronia (Agarwal et al., SIGCOMM 2018) shows the order
is a 4-approximation of minimum weighted completion time for coflows; we use
the same primal-dual step on any unit with a per-port demand vector.

:func:`bssi_order` runs the whole ordering as one compiled kernel (demand with
a negative entry, which no byte count has, goes to the numpy version);
:func:`bssi_order_numpy` is the same loop step by step in numpy (every arithmetic
operation the same, its sums included, so both give the same order bit for bit),
and :func:`bssi_order_plain` states the algorithm in plain Python. Tests and
``bench.bench_bssi`` check one against the others.
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


@njit(cache=True, nogil=True)
def _block_sum(values: np.ndarray, start: int, count: int) -> float:
    """numpy's sum of a run of at most 128: plain below 8, else eight running sums."""
    if count < 8:
        total = 0.0
        for i in range(start, start + count):
            total += values[i]
        return total
    r0, r1, r2, r3 = values[start], values[start + 1], values[start + 2], values[start + 3]
    r4, r5, r6, r7 = values[start + 4], values[start + 5], values[start + 6], values[start + 7]
    i = 8
    whole = count - count % 8
    while i < whole:
        base = start + i
        r0 += values[base]
        r1 += values[base + 1]
        r2 += values[base + 2]
        r3 += values[base + 3]
        r4 += values[base + 4]
        r5 += values[base + 5]
        r6 += values[base + 6]
        r7 += values[base + 7]
        i += 8
    total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < count:
        total += values[start + i]
        i += 1
    return total


@njit(cache=True, nogil=True)
def pairwise_sum(values: np.ndarray, start: int, count: int) -> float:
    """``values[start:start + count]`` summed as numpy's ``add.reduce`` sums a contiguous
    run (pairwise: blocks of up to 128, each with eight running sums; above that the
    halves, the first rounded down to a multiple of 8, summed apart and then added), so
    that a compiled loop gets numpy's roundings. ``tests/test_policies.py`` holds it to
    numpy's own sums. The halving runs on an explicit stack: a cached numba function
    that calls itself crashes when loaded from the cache."""
    if count <= 128:
        return _block_sum(values, start, count)
    # Post-order over the halving tree: each node is (start, count, children pushed).
    node_start = np.empty(64, dtype=np.int64)
    node_count = np.empty(64, dtype=np.int64)
    node_stage = np.empty(64, dtype=np.int64)
    sums = np.empty(64)
    done = 0
    node_start[0], node_count[0], node_stage[0] = start, count, 0
    depth = 1
    while depth > 0:
        top = depth - 1
        first, size = node_start[top], node_count[top]
        if size <= 128:
            sums[done] = _block_sum(values, first, size)
            done += 1
            depth -= 1
            continue
        half = size // 2
        half -= half % 8
        if node_stage[top] == 0:
            node_stage[top] = 1
            node_start[depth], node_count[depth], node_stage[depth] = first, half, 0
            depth += 1
        elif node_stage[top] == 1:
            node_stage[top] = 2
            node_start[depth], node_count[depth], node_stage[depth] = first + half, size - half, 0
            depth += 1
        else:
            done -= 1
            sums[done - 1] = sums[done - 1] + sums[done]
            depth -= 1
    return sums[0]


@njit(cache=True, nogil=True, error_model="numpy")
def _bssi_compiled(demand: np.ndarray, w: np.ndarray) -> np.ndarray:
    """:func:`bssi_order` for demand without negative entries, whole in compiled code
    (empty if an entry is negative: the caller then takes the numpy path). A row is
    live if it has any positive entry, which for such demand is numpy's ``sum > 0``;
    the port loads are numpy's sums of the rows, computed as numpy computes them."""
    n, ports = demand.shape
    by_port = np.empty((ports, n))
    alive = np.zeros(n, dtype=np.bool_)
    for i in range(n):
        for p in range(ports):
            value = demand[i, p]
            if value < 0.0:
                return np.empty(0, dtype=np.int64)
            by_port[p, i] = value
            if value > 0.0:
                alive[i] = True
    load = np.empty(ports)
    for p in range(ports):
        load[p] = pairwise_sum(by_port[p], 0, n)
    had_demand = alive.copy()  # the steps clear ``alive`` as they place rows
    live = int(had_demand.sum())
    reverse = np.empty(live, dtype=np.int64)
    placed = _bssi_steps(demand, by_port, w, load, alive, reverse, 0, True)
    buffer = np.empty(n)
    while placed < 0:
        # Rounding emptied the busiest port; the loads again over the live rows only.
        for p in range(ports):
            count = 0
            for i in range(n):
                if alive[i]:
                    buffer[count] = by_port[p, i]
                    count += 1
            load[p] = pairwise_sum(buffer, 0, count)
        placed = _bssi_steps(demand, by_port, w, load, alive, reverse, -1 - placed, False)
    order = np.empty(n, dtype=np.int64)
    k = 0
    for i in range(n):  # rows without demand first, in index order
        if not had_demand[i]:
            order[k] = i
            k += 1
    for j in range(live - 1, -1, -1):
        order[k] = reverse[j]
        k += 1
    return order


def bssi_order(demand: np.ndarray, weights: np.ndarray | None = None) -> list[int]:
    """Row indices of ``demand`` (n × P bytes) from first to last to schedule.

    Rows with no demand at all are placed first (they cost nobody anything),
    in index order; ties elsewhere resolve to the lowest index.
    """
    n = demand.shape[0]
    if n == 0:
        return []
    w = np.ones(n) if weights is None else np.array(weights, dtype=float)
    order = _bssi_compiled(np.ascontiguousarray(demand, dtype=float), w)
    if len(order) < n:
        # A negative entry (never a byte count): the numpy statement, which the kernel
        # reproduces bit for bit where entries are not negative.
        return bssi_order_numpy(demand, weights)
    return order.tolist()


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
