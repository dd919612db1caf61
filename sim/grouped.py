"""The per-receiver flow model: a coflow's flows into one receiver move as one group.

In a MapReduce shuffle (the Coflow-Benchmark traces) every mapper sends a
reducer the same share of its bytes, so a coflow of m mappers and r reducers
has m·r flows but only r distinct transfers. The per-flow model simulates
every flow; this model keeps one entry per (coflow, receiver, flow size) and
lets its flows advance together, at one per-flow rate, as if the reducer
fetched from all its mappers in lock-step. Rates follow the same rules as the
per-flow model (:mod:`sim.allocate_grouped`), except that a group stops
growing when *any* of its senders is full, where single flows from the other
senders could still have grown. Whole FB2010 (700,000 flows, about 10,000
groups) becomes a matter of seconds; ``docs/results.md`` compares the two
models where both run.

Flows of one coflow into one receiver form a group when their sizes differ by
at most one byte (the rounding of an even split); otherwise one group per
size. A sender that appears twice for the same receiver starts a second group.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import numpy as np

from control.model import Flow, Workload
from control.policies.base import BasePolicy
from sim.allocate_grouped import GroupSenders, greedy, madd, priority_maxmin
from sim.engine import SimConfig, Simulation, _Coflow


def group_flows(network: list[Flow], num_hosts: int) -> tuple[np.ndarray, ...]:
    """Entries for one trial's fabric flows (see :meth:`GroupedSimulation._entries`)."""
    src = np.array([f.src_host for f in network], dtype=np.int64)
    dst = np.array([f.dst_host for f in network], dtype=np.int64)
    size = np.array([f.size_bytes for f in network], dtype=np.int64)
    shuffle = _shuffle_groups(src, dst, size, num_hosts)
    if shuffle is not None:
        return shuffle
    return _uneven_groups(network, num_hosts)


def _shuffle_groups(
    src: np.ndarray, dst: np.ndarray, size: np.ndarray, num_hosts: int
) -> tuple[np.ndarray, ...] | None:
    """One group per receiver, when no pair repeats and every receiver's split is even."""
    if len(np.unique(dst * num_hosts + src)) != len(src):
        return None
    receivers, group, mult = np.unique(dst, return_inverse=True, return_counts=True)
    largest = np.full(len(receivers), np.iinfo(np.int64).min)
    smallest = np.full(len(receivers), np.iinfo(np.int64).max)
    np.maximum.at(largest, group, size)
    np.minimum.at(smallest, group, size)
    if (largest - smallest > 1).any():
        return None
    membership = np.zeros((len(receivers), num_hosts))
    membership[group, src] = 1.0
    base = np.zeros(num_hosts)
    base[src] = 1.0
    lack_group, lack_port = np.nonzero(base[None, :] - membership > 0.5)
    return (
        np.full(len(receivers), -1, dtype=np.int64),
        num_hosts + receivers,
        np.bincount(group, size.astype(float), len(receivers)),
        mult.astype(np.int64),
        lack_group.astype(np.int64),
        lack_port.astype(np.int64),
        base,
    )


def _uneven_groups(network: list[Flow], num_hosts: int) -> tuple[np.ndarray, ...]:
    """The general rule, flow by flow (repeated pairs, uneven splits)."""
    by_receiver: dict[int, list[Flow]] = defaultdict(list)
    for flow in network:
        by_receiver[flow.dst_host].append(flow)
    groups: list[list[Flow]] = []
    for receiver in sorted(by_receiver):
        flows = by_receiver[receiver]
        sizes = [f.size_bytes for f in flows]
        even_split = max(sizes) - min(sizes) <= 1
        buckets: dict[int, list[Flow]] = defaultdict(list)
        for flow in flows:
            buckets[0 if even_split else flow.size_bytes].append(flow)
        for bucket in buckets.values():
            rounds: list[list[Flow]] = []
            seen: dict[int, int] = defaultdict(int)
            for flow in bucket:
                k = seen[flow.src_host]
                seen[flow.src_host] += 1
                if k == len(rounds):
                    rounds.append([])
                rounds[k].append(flow)
            groups.extend(rounds)
    base = np.zeros(num_hosts)
    for flow in network:
        base[flow.src_host] = 1.0
    lack_group: list[int] = []
    lack_port: list[int] = []
    for index, group in enumerate(groups):
        own = {f.src_host for f in group}
        for host in np.flatnonzero(base).tolist():
            if host not in own:
                lack_group.append(index)
                lack_port.append(host)
    return (
        np.full(len(groups), -1, dtype=np.int64),
        np.array([num_hosts + g[0].dst_host for g in groups], dtype=np.int64),
        np.array([float(sum(f.size_bytes for f in g)) for g in groups]),
        np.array([len(g) for g in groups], dtype=np.int64),
        np.array(lack_group, dtype=np.int64),
        np.array(lack_port, dtype=np.int64),
        base,
    )


class GroupedSimulation(Simulation):
    """:class:`Simulation` with one entry per group of flows (``SimConfig.flow_model``)."""

    def __init__(
        self,
        workload: Workload,
        policy: BasePolicy,
        config: SimConfig | None = None,
        progress: Callable[[float], None] | None = None,
    ) -> None:
        super().__init__(workload, policy, config, progress)
        if self.config.record_intervals:
            raise ValueError("interval recording needs the per-flow model")
        self._base: dict[int, np.ndarray] = {}
        self._base_matrix: np.ndarray | None = None
        """The active coflows' sender sets stacked in uid order; None after a change."""
        self._lack_row = np.zeros(0, dtype=np.int64)
        self._lack_port = np.zeros(0, dtype=np.int64)

    def _entries(self, network: list[Flow]) -> tuple[np.ndarray, ...]:
        """(no sender, receiver port, group bytes, flows, lacking group/port pairs, senders)."""
        return group_flows(network, self.num_hosts)

    def _append_rows(self, parts: list[tuple[np.ndarray, ...]]) -> None:
        first_row = len(self._owner)
        super()._append_rows(parts)
        owners, lack_groups, lack_ports, bases = parts[3], *parts[6:9]
        rows, ports = [self._lack_row], [self._lack_port]
        for owner, lack_group, lack_port, base in zip(
            owners, lack_groups, lack_ports, bases, strict=True
        ):
            if len(owner):
                self._base[int(owner[0])] = base
                rows.append(first_row + lack_group)
                ports.append(lack_port)
            first_row += len(owner)
        self._lack_row = np.concatenate(rows)
        self._lack_port = np.concatenate(ports)
        self._base_matrix = None

    def _keep_rows(self, keep: np.ndarray) -> None:
        super()._keep_rows(keep)
        new_row = np.cumsum(keep) - 1
        still = keep[self._lack_row]
        self._lack_row = new_row[self._lack_row[still]]
        self._lack_port = self._lack_port[still]

    def _coflow_done(self, coflow: _Coflow) -> None:
        self._base.pop(coflow.uid, None)
        self._base_matrix = None
        super()._coflow_done(coflow)

    def _senders(self, uids: np.ndarray, rows: np.ndarray) -> GroupSenders:
        if self._base_matrix is None:
            self._base_matrix = np.stack([self._base[uid] for uid in uids.tolist()])
        return GroupSenders(rows, self._base_matrix, self._lack_row, self._lack_port)

    def _remaining_by_port(self, uids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        ports = self.num_ports
        matrix = np.bincount(rows * ports + self._dst, self._remaining, len(uids) * ports)
        matrix = matrix.reshape(len(uids), ports)
        senders = self._senders(uids, rows)
        matrix[:, : self.num_hosts] += senders.load_by_coflow(self._remaining / self._mult)
        return matrix

    def _allocate(self) -> None:
        if len(self._owner) == 0:
            self._rates = np.zeros(0)
            return
        uids, rows, coflow_classes, ranks = self._class_arrays()
        group_class = coflow_classes[rows]
        senders = self._senders(uids, rows)
        mult = self._mult.astype(float)
        if self.allocator == "priority":
            per_flow = priority_maxmin(self._dst, mult, senders, group_class, self.capacity)
        elif self.allocator == "madd":
            coflow_order = np.lexsort((ranks, -coflow_classes))
            per_flow = madd(
                self._dst,
                mult,
                senders,
                self._remaining / mult,
                coflow_order,
                group_class,
                self.capacity,
            )
        else:
            group_order = np.lexsort((ranks[rows], -group_class))
            per_flow = greedy(self._dst, mult, senders, group_order, self.capacity)
        self._rates = per_flow * mult
