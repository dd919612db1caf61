"""Rate allocation on a big switch: every flow crosses its sender's uplink port and
its receiver's downlink port, each with a capacity in bytes per second.

* :func:`priority_maxmin`: strict priority across classes, per-flow max-min
  fairness inside a class (a priority-queueing switch with TCP in each queue).
* :func:`madd`: Varys' Minimum-Allocation-for-Desired-Duration in ranking
  order (a coflow's flows all finish together at its bottleneck), then
  backfill with :func:`priority_maxmin` so no capacity idles.
* :func:`greedy`: Sincronia's greedy rule: flows in coflow order each take
  all they can.

All return rates in bytes per second and never exceed a port's capacity.
"""

from __future__ import annotations

import numpy as np

RELATIVE_TOLERANCE = 1e-9
"""A port whose residual capacity is below this fraction of its capacity is saturated."""


def waterfill(
    src: np.ndarray, dst: np.ndarray, residual: np.ndarray, saturated_below: np.ndarray
) -> np.ndarray:
    """Max-min fair rates for one class's flows on ``residual`` capacity (updated in place).

    Progressive filling: all unfrozen flows grow together until a port runs
    out; the flows through it freeze; repeat. Each round saturates at least
    one port, so it ends within the number of ports.
    """
    num_ports = len(residual)
    rates = np.zeros(len(src))
    live = (residual[src] > saturated_below[src]) & (residual[dst] > saturated_below[dst])
    while live.any():
        s = src[live]
        d = dst[live]
        load = np.bincount(s, minlength=num_ports) + np.bincount(d, minlength=num_ports)
        used = load > 0
        share = np.full(num_ports, np.inf)
        np.divide(residual, load, out=share, where=used)
        level = float(share.min())
        rates[live] += level
        residual -= level * load
        full = used & (share <= level * (1 + 1e-12))
        residual[full] = 0.0
        full |= residual <= saturated_below
        residual[full] = np.maximum(residual[full], 0.0)
        live[live] = ~(full[s] | full[d])
    return rates


SMALL_CLASS_FLOWS = 48
"""Classes with fewer flows than this are filled in plain Python (numpy's call
overhead dominates on a handful of flows, and most classes are that small)."""


def _waterfill_small(
    src: list[int], dst: list[int], residual: np.ndarray, saturated_below: np.ndarray
) -> list[float]:
    """:func:`waterfill` for a few flows, in plain Python, same rules and results."""
    ports = set(src) | set(dst)
    left = {p: float(residual[p]) for p in ports}
    floor = {p: float(saturated_below[p]) for p in ports}
    rates = [0.0] * len(src)
    live = [
        i for i in range(len(src)) if left[src[i]] > floor[src[i]] and left[dst[i]] > floor[dst[i]]
    ]
    while live:
        load: dict[int, int] = {}
        for i in live:
            load[src[i]] = load.get(src[i], 0) + 1
            load[dst[i]] = load.get(dst[i], 0) + 1
        level = min(left[p] / n for p, n in load.items())
        full = set()
        for p, n in load.items():
            share = left[p] / n
            left[p] -= level * n
            if share <= level * (1 + 1e-12) or left[p] <= floor[p]:
                left[p] = 0.0
                full.add(p)
        for i in live:
            rates[i] += level
        live = [i for i in live if src[i] not in full and dst[i] not in full]
    for p in ports:
        residual[p] = left[p]
    return rates


def priority_maxmin(
    src: np.ndarray,
    dst: np.ndarray,
    flow_class: np.ndarray,
    capacity: np.ndarray,
    residual: np.ndarray | None = None,
) -> np.ndarray:
    """Strict priority by ``flow_class`` (higher first), max-min inside each class."""
    residual = capacity.astype(float).copy() if residual is None else residual
    saturated_below = capacity * RELATIVE_TOLERANCE
    rates = np.zeros(len(src))
    if len(src) == 0:
        return rates
    order = np.argsort(-flow_class, kind="stable")
    sorted_classes = flow_class[order]
    starts = np.flatnonzero(np.r_[True, sorted_classes[1:] != sorted_classes[:-1]])
    ends = np.r_[starts[1:], len(order)]
    src_sorted = src[order]
    dst_sorted = dst[order]
    is_open = residual > saturated_below
    open_count = int(is_open.sum())
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        if open_count == 0:
            break
        members = order[start:end]
        if end - start < SMALL_CLASS_FLOWS:
            s = src_sorted[start:end].tolist()
            d = dst_sorted[start:end].tolist()
            movable = [i for i in range(end - start) if is_open[s[i]] and is_open[d[i]]]
            if not movable:
                continue
            class_rates = _waterfill_small(
                [s[i] for i in movable], [d[i] for i in movable], residual, saturated_below
            )
            rates[members[movable]] = class_rates
            for port in {s[i] for i in movable} | {d[i] for i in movable}:
                if is_open[port] and residual[port] <= saturated_below[port]:
                    is_open[port] = False
                    open_count -= 1
        else:
            movable_mask = is_open[src_sorted[start:end]] & is_open[dst_sorted[start:end]]
            if not movable_mask.any():
                continue
            chosen = members[movable_mask]
            rates[chosen] = waterfill(src[chosen], dst[chosen], residual, saturated_below)
            is_open = residual > saturated_below
            open_count = int(is_open.sum())
    return rates


def madd(
    src: np.ndarray,
    dst: np.ndarray,
    remaining: np.ndarray,
    flow_coflow: np.ndarray,
    coflow_order: np.ndarray,
    flow_class: np.ndarray,
    capacity: np.ndarray,
) -> np.ndarray:
    """MADD for coflows in ``coflow_order`` (row ids of ``flow_coflow``), then backfill.

    A coflow that cannot get some port it needs gets nothing from MADD (Varys
    would not admit it) and only what backfilling leaves it.
    """
    num_ports = len(capacity)
    residual = capacity.astype(float).copy()
    saturated_below = capacity * RELATIVE_TOLERANCE
    rates = np.zeros(len(src))
    by_coflow = np.argsort(flow_coflow, kind="stable")
    rows_sorted = flow_coflow[by_coflow]
    for row in coflow_order.tolist():
        lo = int(np.searchsorted(rows_sorted, row, "left"))
        hi = int(np.searchsorted(rows_sorted, row, "right"))
        if lo == hi:
            continue
        members = by_coflow[lo:hi]
        demand = np.bincount(src[members], remaining[members], num_ports) + np.bincount(
            dst[members], remaining[members], num_ports
        )
        needed = demand > 0
        if (residual[needed] <= saturated_below[needed]).any():
            continue
        alpha = float((residual[needed] / demand[needed]).min())
        rates[members] = alpha * remaining[members]
        residual -= alpha * demand
        np.maximum(residual, 0.0, out=residual)
    rates += priority_maxmin(src, dst, flow_class, capacity, residual)
    return rates


def greedy(
    src: np.ndarray, dst: np.ndarray, flow_order: np.ndarray, capacity: np.ndarray
) -> np.ndarray:
    """Each flow in ``flow_order`` takes min(residual at its two ports)."""
    residual = capacity.astype(float).tolist()
    rates = np.zeros(len(src))
    src_list = src.tolist()
    dst_list = dst.tolist()
    for flow in flow_order.tolist():
        s, d = src_list[flow], dst_list[flow]
        rate = min(residual[s], residual[d])
        if rate > 0:
            rates[flow] = rate
            residual[s] -= rate
            residual[d] -= rate
    return rates
