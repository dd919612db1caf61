"""Rate allocation for flow *groups*: the per-receiver flow model of :mod:`sim.grouped`.

A group is ``mult`` flows of one coflow into one receiver port, each from a
different sender port, all of one size and all moving at one per-flow rate
``x``. The group loads its receiver with ``mult · x`` and each of its senders
with ``x``. A coflow's groups mostly share their senders (a shuffle: every
mapper sends to every reducer), so :class:`GroupSenders` keeps one sender set
per coflow and, per group, the few senders it lacks.

The rules are those of :mod:`sim.allocate` applied under that constraint:

* :func:`priority_maxmin`: strict priority across classes; inside a class,
  progressive filling of the per-flow rates (a group counts ``mult`` times at
  its receiver), and a group stops growing when its receiver or any of its
  senders runs out.
* :func:`madd`: Varys' MADD per coflow in ranking order, then backfill.
* :func:`greedy`: groups in order each take the largest per-flow rate left.

All return per-flow rates in bytes per second (multiply by ``mult`` for a
group's bytes per second); no port's capacity is ever exceeded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim.allocate import RELATIVE_TOLERANCE


@dataclass(frozen=True, slots=True)
class GroupSenders:
    """Group g sends from ``base[coflow[g]]`` less the ports paired with g in ``lack_*``."""

    coflow: np.ndarray
    """Row of each group's coflow in ``base``."""
    base: np.ndarray
    """0/1 float matrix, coflows × sender ports: the senders of a coflow's groups."""
    lack_group: np.ndarray
    lack_port: np.ndarray
    num_senders: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_senders", int(self.base.shape[1]))

    def load(self, weight: np.ndarray) -> np.ndarray:
        """Per sender port: the sum of ``weight`` over the groups sending through it."""
        per_coflow = np.bincount(self.coflow, weight, len(self.base))
        lacking = np.bincount(self.lack_port, weight[self.lack_group], self.num_senders)
        return per_coflow @ self.base - lacking

    def load_by_coflow(self, weight: np.ndarray) -> np.ndarray:
        """Coflows × sender ports: the sum of ``weight`` over each coflow's groups per sender."""
        coflows, senders = self.base.shape
        per_coflow = np.bincount(self.coflow, weight, coflows)
        lacking = np.bincount(
            self.coflow[self.lack_group] * senders + self.lack_port,
            weight[self.lack_group],
            coflows * senders,
        )
        return per_coflow[:, None] * self.base - lacking.reshape(coflows, senders)

    def touches(self, ports: np.ndarray) -> np.ndarray:
        """Groups with at least one sender among the sender ports flagged in ``ports``."""
        flags = ports.astype(float)
        per_coflow = self.base @ flags
        lacking = np.bincount(self.lack_group, flags[self.lack_port], len(self.coflow))
        return per_coflow[self.coflow] - lacking > 0.5


def _unit_load(
    live: np.ndarray, recv: np.ndarray, mult: np.ndarray, senders: GroupSenders, num_ports: int
) -> np.ndarray:
    """Every port's load when each live group's per-flow rate grows by one."""
    load = np.bincount(recv[live], mult[live], num_ports)
    load[: senders.num_senders] += senders.load(live.astype(float))
    return load


def _blocked(recv: np.ndarray, senders: GroupSenders, saturated: np.ndarray) -> np.ndarray:
    """Groups that touch a saturated port (their receiver or any sender)."""
    return saturated[recv] | senders.touches(saturated[: senders.num_senders])


def waterfill(
    recv: np.ndarray,
    mult: np.ndarray,
    senders: GroupSenders,
    live: np.ndarray,
    residual: np.ndarray,
    saturated_below: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Max-min per-flow rates of the ``live`` groups on ``residual`` (updated in place).

    ``live`` must hold only groups whose ports all have capacity left. Returns
    the rates and the ports this call filled. (Written with whole-array
    operations and no boolean indexing: this loop is the simulator's hot spot.)
    """
    num_ports = len(residual)
    num_senders = senders.num_senders
    rates = np.zeros(len(recv))
    filled = np.zeros(num_ports, dtype=bool)
    weight = live.astype(float)
    share = np.empty(num_ports)
    while True:
        load = np.bincount(recv, weight * mult, num_ports)
        load[:num_senders] += senders.load(weight)
        used = load > 0
        if not used.any():
            return rates, filled
        share.fill(np.inf)
        np.divide(residual, load, out=share, where=used)
        level = float(share.min())
        rates += level * weight
        residual -= level * load
        full = used & (share <= level * (1 + 1e-12))
        residual[full] = 0.0
        full |= residual <= saturated_below
        residual[full] = np.maximum(residual[full], 0.0)
        filled |= full
        weight[_blocked(recv, senders, full)] = 0.0


def priority_maxmin(
    recv: np.ndarray,
    mult: np.ndarray,
    senders: GroupSenders,
    group_class: np.ndarray,
    capacity: np.ndarray,
    residual: np.ndarray | None = None,
) -> np.ndarray:
    """Strict priority by ``group_class`` (higher first), max-min inside each class."""
    residual = capacity.astype(float).copy() if residual is None else residual
    saturated_below = capacity * RELATIVE_TOLERANCE
    rates = np.zeros(len(recv))
    # Groups with a full port stay stuck for every lower class: track them once.
    blocked = _blocked(recv, senders, residual <= saturated_below)
    for cls in np.unique(group_class)[::-1].tolist():
        if blocked.all():
            break
        live = (group_class == cls) & ~blocked
        if not live.any():
            continue
        class_rates, filled = waterfill(recv, mult, senders, live, residual, saturated_below)
        rates += class_rates
        blocked |= _blocked(recv, senders, filled)
    return rates


def madd(
    recv: np.ndarray,
    mult: np.ndarray,
    senders: GroupSenders,
    remaining_per_flow: np.ndarray,
    coflow_order: np.ndarray,
    group_class: np.ndarray,
    capacity: np.ndarray,
) -> np.ndarray:
    """MADD for coflows in ``coflow_order`` (rows of ``senders.base``), then backfill.

    Every flow of a coflow gets rate α × its remaining bytes, α the largest
    that fits every port the coflow uses; a coflow that finds one of its ports
    full gets nothing from MADD, only what backfilling leaves it.
    """
    num_ports = len(capacity)
    residual = capacity.astype(float).copy()
    saturated_below = capacity * RELATIVE_TOLERANCE
    rates = np.zeros(len(recv))
    for row in coflow_order.tolist():
        members = senders.coflow == row
        if not members.any():
            continue
        left = np.where(members, remaining_per_flow, 0.0)
        demand = np.bincount(recv, mult * left, num_ports)
        demand[: senders.num_senders] += senders.load(left)
        needed = demand > 0
        if (residual[needed] <= saturated_below[needed]).any():
            continue
        alpha = float((residual[needed] / demand[needed]).min())
        rates[members] = alpha * left[members]
        residual -= alpha * demand
        np.maximum(residual, 0.0, out=residual)
    rates += priority_maxmin(recv, mult, senders, group_class, capacity, residual)
    return rates


def greedy(
    recv: np.ndarray,
    mult: np.ndarray,
    senders: GroupSenders,
    group_order: np.ndarray,
    capacity: np.ndarray,
) -> np.ndarray:
    """Each group in ``group_order`` takes the largest per-flow rate its ports have left."""
    residual = capacity.astype(float).copy()
    rates = np.zeros(len(recv))
    for group in group_order.tolist():
        one = np.zeros(len(recv))
        one[group] = 1.0
        ports = np.flatnonzero(senders.load(one) > 0.5)
        rate = min(float(residual[ports].min()), float(residual[recv[group]]) / mult[group])
        if rate > 0:
            rates[group] = rate
            residual[ports] -= rate
            residual[recv[group]] -= rate * mult[group]
    return rates
