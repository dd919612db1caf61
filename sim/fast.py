"""The fast flow model: the per-flow fluid answer, computed on merged flows by compiled kernels.

Two things make the per-flow model (:class:`sim.engine.Simulation` with
:mod:`sim.allocate`) slow on shuffle traces and under contention: its
allocator loops over priority classes in Python, one numpy water-fill per
class, and an even shuffle split leaves the flows into one reducer up to one
byte apart, so they finish nanoseconds apart, one event each. This model:

* allocates with :mod:`sim.kernels`, the same rules and arithmetic in machine
  code (strict priority between classes, per-flow max-min inside a class;
  MADD then backfill; greedy);
* gives the flows of one coflow into one receiver whose sizes differ by at
  most one byte (the rounding of an even split) their mean size, so they can
  finish together (no flow moves by more than one byte; the coflow's bytes
  are unchanged);
* keeps flows that are identical (same coflow, sender, receiver and size) in
  one entry of ``mult`` flows. Such flows get equal rates under every rule
  but greedy, so their entry never needs to split; greedy keeps one entry
  per flow.

Flows that merely share a receiver are *not* grouped: each sender's flow
gets its own max-min rate, so a loaded sender slows only its own flows (the
answer stays work-conserving where senders are loaded unevenly).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from control.model import Flow, Workload
from control.policies.base import (
    BasePolicy,
    CoflowState,
    ExperimentState,
    PortVector,
    Snapshot,
)
from sim import kernels
from sim.allocate import RELATIVE_TOLERANCE
from sim.engine import COMPLETION_TOLERANCE, SimConfig, Simulation, _Coflow


def merge_flows(
    network: list[Flow], num_hosts: int, *, merge: bool = True
) -> tuple[np.ndarray, ...]:
    """Entries for one coflow's fabric flows: (src port, dst port, bytes, flows per entry).

    Sizes into one receiver that differ by at most one byte become their mean;
    with ``merge``, identical flows then share one entry.
    """
    if not network:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy(), np.zeros(0), empty.copy()
    src = np.array([f.src_host for f in network], dtype=np.int64)
    dst = np.array([f.dst_host for f in network], dtype=np.int64)
    size = np.array([f.size_bytes for f in network], dtype=np.int64)
    receivers, group = np.unique(dst, return_inverse=True)
    largest = np.full(len(receivers), np.iinfo(np.int64).min)
    smallest = np.full(len(receivers), np.iinfo(np.int64).max)
    np.maximum.at(largest, group, size)
    np.minimum.at(smallest, group, size)
    even = (largest - smallest <= 1)[group]
    total = np.bincount(group, size.astype(float), len(receivers))
    count = np.bincount(group, minlength=len(receivers))
    sizes = np.where(even, (total / count)[group], size.astype(float))
    if not merge:
        return src, num_hosts + dst, sizes, np.ones(len(src), dtype=np.int64)
    keys = np.stack([src, dst, sizes.view(np.int64)], axis=1)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    counts = np.bincount(inverse.ravel(), minlength=len(first))
    by_appearance = np.argsort(first)  # entries in the order their first flow appears
    keep = first[by_appearance]
    mult = counts[by_appearance]
    return src[keep], num_hosts + dst[keep], sizes[keep] * mult, mult.astype(np.int64)


class FastSimulation(Simulation):
    """:class:`Simulation` with merged entries and the compiled allocators."""

    def __init__(
        self,
        workload: Workload,
        policy: BasePolicy,
        config: SimConfig | None = None,
        progress: Callable[[float], None] | None = None,
    ) -> None:
        super().__init__(workload, policy, config, progress)
        self._merge = self.allocator != "greedy" and not self.config.record_intervals
        self._saturated_below = self.capacity * RELATIVE_TOLERANCE
        self._uids: np.ndarray | None = None
        self._row = np.zeros(0, dtype=np.int64)
        self._sent = np.zeros(0)
        self._classes: tuple[np.ndarray, ...] | None = None
        self._tol = np.zeros(0)
        """Per entry: remaining bytes at or below which it has completed (-1: finished)."""
        self._dead = 0
        self._members: tuple[np.ndarray, np.ndarray] | None = None
        self._thresholds_left: np.ndarray | None = None
        self._coflow_states: dict[int, CoflowState] = {}
        self._experiment_states: dict[int, ExperimentState] = {}

    def _entries(self, network: list[Flow]) -> tuple[np.ndarray, ...]:
        return merge_flows(network, self.num_hosts, merge=self._merge)

    # -- per-coflow bookkeeping in arrays, rebuilt only when the active coflows change --

    def _rows(self) -> tuple[np.ndarray, np.ndarray]:
        """Active uids and each entry's row among them (cached until a coflow comes or goes).

        Finished entries stay in place (``mult`` 0) until then, so that a flow
        completion costs no copy of every array; here they are dropped.
        """
        if self._uids is None:
            if self._dead:
                keep = self._mult > 0
                super()._keep_rows(keep)
                self._tol = self._tol[keep]
                self._dead = 0
            self._uids = self._active_uids()
            self._row = np.searchsorted(self._uids, self._owner)
            self._sent = np.zeros(len(self._uids))
            self._classes = None
            self._members = None
        return self._uids, self._row

    def _flush_sent(self) -> None:
        """Move the bytes sent since the last flush into the coflows' ``sent_bytes``."""
        if self._uids is None:
            return
        moved = np.flatnonzero(self._sent)
        if len(moved) == 0:
            return
        for uid, amount in zip(self._uids[moved].tolist(), self._sent[moved].tolist(), strict=True):
            coflow = self._coflows.get(uid)
            if coflow is not None:
                coflow.sent_bytes += amount
        self._sent[:] = 0.0
        self._thresholds_left = None

    def _forget_rows(self) -> None:
        self._flush_sent()
        self._uids = None
        self._classes = None
        self._thresholds_left = None

    def _append_rows(self, parts: list[tuple[np.ndarray, ...]]) -> None:
        self._forget_rows()
        super()._append_rows(parts)
        # New entries move from the next allocation on; until then they have no rate.
        self._rates = np.concatenate([self._rates, np.zeros(len(self._owner) - len(self._rates))])
        tolerance = np.maximum(self._size * COMPLETION_TOLERANCE, 1e-3)
        self._tol = np.where(self._mult > 0, tolerance, -1.0)

    def _finish_flows(self) -> bool:
        """As :meth:`Simulation._finish_flows`, but finished entries only get ``mult`` 0."""
        done = kernels.completed(self._remaining, self._tol)
        if len(done) == 0:
            return False
        finished_owners = self._owner[done]
        finished_flows = self._mult[done]
        self.result.delivered_bytes += float(self._remaining[done].sum())
        self._remaining[done] = 0.0
        self._rates[done] = 0.0
        self._mult[done] = 0
        self._tol[done] = -1.0
        if self._classes is not None:
            self._classes[5][self._classes[2][done]] = 0.0
        self._dead += len(done)
        uids = np.unique(finished_owners)
        counts = np.bincount(np.searchsorted(uids, finished_owners), finished_flows, len(uids))
        for uid, count in zip(uids.tolist(), counts.astype(np.int64).tolist(), strict=True):
            coflow = self._coflows[uid]
            coflow.flows_left -= count
            if coflow.flows_left == 0:
                self._flush_sent()
                coflow.sent_bytes = coflow.total_bytes
                self._coflow_done(coflow)
        self._rows()  # after a coflow completion, drop its entries now
        return True

    def _coflow_done(self, coflow: _Coflow) -> None:
        self._forget_rows()
        super()._coflow_done(coflow)

    def _rerank(self) -> None:
        self._forget_rows()
        self._rows()  # drops finished entries, whose coflows may be gone
        super()._rerank()
        self._classes = None
        self._thresholds_left = None

    def _advance(self, until_s: float) -> None:
        dt = until_s - self.now_s
        if dt > 0 and len(self._remaining) and not self.config.record_intervals:
            _, rows = self._rows()
            self.result.delivered_bytes += kernels.advance(
                self._rates, self._remaining, rows, self._sent, dt
            )
            self.now_s = until_s
            return
        self._flush_sent()
        super()._advance(until_s)

    def _flow_end_s(self) -> float:
        return self.now_s + kernels.first_completion_s(self._rates, self._remaining)

    def _next_threshold_s(self) -> float:
        """The first instant a coflow's sent bytes reach its re-ranking threshold."""
        if not self._thresholds or len(self._rates) == 0:
            return np.inf
        uids, rows = self._rows()
        if self._thresholds_left is None:
            # Bytes each coflow still has to send to its threshold, as of the last flush.
            left = np.full(len(uids), np.inf)
            for row, uid in enumerate(uids.tolist()):
                threshold = self._thresholds.get(uid)
                if threshold is not None:
                    left[row] = threshold - self._coflows[uid].sent_bytes
            self._thresholds_left = left
        gap = np.maximum(self._thresholds_left - self._sent, 0.0)
        coflow_rate = np.bincount(rows, self._rates, len(uids))
        moving = (coflow_rate > 0) & np.isfinite(gap)
        if not moving.any():
            return np.inf
        return float((self.now_s + gap[moving] / coflow_rate[moving]).min())

    def _snapshot(self, uids: np.ndarray, rows: np.ndarray) -> Snapshot:
        """As :meth:`Simulation._snapshot`; a coflow or experiment that has not changed since
        the last snapshot (a blocked coflow, under contention most of them) keeps its state."""
        matrix = self._remaining_by_port(uids, rows)
        previous = self._coflow_states
        current: dict[int, CoflowState] = {}
        states = []
        for row, uid in enumerate(uids.tolist()):
            coflow = self._coflows[uid]
            state = previous.get(uid)
            if (
                state is None
                or state.sent_bytes != coflow.sent_bytes
                or state.num_flows != coflow.flows_left
            ):
                state = CoflowState(
                    key=coflow.key,
                    arrival_s=coflow.release_s,
                    total_bytes=coflow.total_bytes,
                    sent_bytes=coflow.sent_bytes,
                    remaining_by_port=PortVector(matrix[row]),
                    num_flows=coflow.flows_left,
                )
            current[uid] = state
            states.append(state)
        self._coflow_states = current
        experiments = {}
        for e, run in enumerate(self._runs):
            if run.stage_index < 0:
                continue
            cached = self._experiment_states.get(e)
            if (
                cached is None
                or cached.stage_index != run.stage_index
                or cached.stage_release_s != run.stage_release_s
                or cached.iterations_done != run.iterations_done
            ):
                cached = ExperimentState(
                    experiment=self.workload.experiments[e],
                    stage_index=run.stage_index,
                    stage_release_s=run.stage_release_s,
                    iterations_done=dict(run.iterations_done),
                )
                self._experiment_states[e] = cached
            experiments[cached.experiment.experiment_id] = cached
        return Snapshot(
            now_s=self.now_s,
            num_hosts=self.num_hosts,
            port_capacity_bps=self.capacity_bps,
            coflows=tuple(states),
            experiments=experiments,
        )

    def _class_order(self) -> tuple[np.ndarray, ...]:
        """Cached until the ranking or the coflows change: entries in class order
        (highest first), where each class starts, each entry's sorted position, sender,
        receiver and flows per entry in that order, and each coflow row's class and rank."""
        if self._classes is None:
            uids, rows = self._rows()
            uid_list = uids.tolist()
            coflow_classes = np.array([self._coflow_class[u] for u in uid_list], dtype=np.int64)
            ranks = np.array([self._coflow_rank[u] for u in uid_list], dtype=np.int64)
            order, starts = kernels.class_order(coflow_classes[rows])
            position = np.empty(len(order), dtype=np.int64)
            position[order] = np.arange(len(order))
            self._classes = (
                order,
                starts,
                position,
                self._src[order],
                self._dst[order],
                self._mult[order].astype(float),
                coflow_classes,
                ranks,
            )
        return self._classes

    def _allocate(self) -> None:
        if len(self._owner) == 0:
            self._rates = np.zeros(0)
            return
        uids, rows = self._rows()  # first: it may drop finished entries
        classes = self._class_order()
        order, starts, _, src_sorted, dst_sorted, mult_sorted, coflow_classes, ranks = classes
        mult = self._mult.astype(float)
        if self.allocator == "priority":
            per_flow = kernels.maxmin_ordered(
                src_sorted,
                dst_sorted,
                mult_sorted,
                order,
                starts,
                self.capacity,
                self._saturated_below,
            )
        elif self.allocator == "madd":
            if self._members is None:
                self._members = kernels.coflow_members(rows, len(uids))
            per_flow = kernels.madd_ordered(
                self._src,
                self._dst,
                mult,
                self._remaining,
                *self._members,
                np.lexsort((ranks, -coflow_classes)),
                (order, starts, src_sorted, dst_sorted),
                mult_sorted,
                self.capacity,
                self._saturated_below,
            )
        else:
            flow_class = coflow_classes[rows]
            flow_order = np.lexsort((ranks[rows], -flow_class))
            per_flow = kernels.greedy(self._src, self._dst, mult, flow_order, self.capacity)
        self._rates = per_flow * mult
