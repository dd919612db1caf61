"""Event-driven fluid simulation of tuning experiments on a big switch.

Time jumps from event to event: an experiment arrives, a coflow is released
(its trial finished computing), a flow or coflow completes, or (for Aalo) a
coflow's sent bytes cross a queue threshold. Between events every flow runs
at a constant rate, so each interval is exact arithmetic, not a time step.

Trials are bulk-synchronous: a stage releases every trial; a trial computes
for ``compute_s`` and then synchronises (one coflow), ``iterations`` times;
iteration i+1's computation starts when iteration i's coflow completes. A
stage completes when its last trial does, and successive halving releases
the next stage at that instant.

The policy re-ranks on arrivals, releases and completions (and threshold
crossings); :mod:`control.quantize` maps the ranking onto classes; a flow
completion alone only re-divides the rates under the same classes.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from control.errors import UserError
from control.model import WEIGHT_RANGE, CoflowKey, Flow, StageKey, Workload
from control.policies.base import (
    Allocator,
    BasePolicy,
    CoflowState,
    ExperimentState,
    PortVector,
    Snapshot,
)
from control.quantize import Strategy, group_classes
from sim.allocate import greedy, madd, priority_maxmin

FlowModel = Literal["fast", "per-flow"]
FLOW_MODELS: tuple[FlowModel, ...] = ("fast", "per-flow")

COMPLETION_TOLERANCE = 1e-9
"""A flow with less than this fraction of its size (or 1e-3 bytes) left has completed."""


@dataclass(frozen=True, slots=True)
class SimConfig:
    """``num_classes`` None = ideal (one class per ranking group)."""

    num_classes: int | None = None
    strategy: Strategy = "rank"
    allocator: Allocator | None = None
    """None: the policy's own allocator."""
    record_intervals: bool = False
    flow_model: FlowModel = "fast"
    """``fast``: compiled allocators on merged identical flows (:mod:`sim.fast`), the same
    answer as ``per-flow``, the reference: one entry per flow, numpy allocators."""


@dataclass(frozen=True, slots=True)
class Interval:
    """Rates held constant over [start_s, end_s) (recorded only when asked, for checks)."""

    start_s: float
    end_s: float
    flow_ids: np.ndarray
    src_ports: np.ndarray
    dst_ports: np.ndarray
    rates_bytes_per_s: np.ndarray

    @classmethod
    def of_moving(
        cls,
        start_s: float,
        end_s: float,
        flow_ids: np.ndarray,
        src_ports: np.ndarray,
        dst_ports: np.ndarray,
        rates_bytes_per_s: np.ndarray,
    ) -> Interval:
        """The interval of the flows with a positive rate (copies: the arrays change)."""
        live = rates_bytes_per_s > 0
        return cls(
            start_s,
            end_s,
            flow_ids[live].copy(),
            src_ports[live].copy(),
            dst_ports[live].copy(),
            rates_bytes_per_s[live].copy(),
        )


@dataclass(slots=True)
class SimResult:
    policy: str
    stage_release_s: dict[StageKey, float] = field(default_factory=dict)
    sct_s: dict[StageKey, float] = field(default_factory=dict)
    coflow_release_s: dict[CoflowKey, float] = field(default_factory=dict)
    cct_s: dict[CoflowKey, float] = field(default_factory=dict)
    coflow_bytes: dict[CoflowKey, float] = field(default_factory=dict)
    experiment_completion_s: dict[int, float] = field(default_factory=dict)
    delivered_bytes: float = 0.0
    events: int = 0
    reranks: int = 0
    wall_s: float = 0.0
    end_s: float = 0.0
    intervals: list[Interval] = field(default_factory=list)
    flow_sizes: dict[int, float] = field(default_factory=dict)
    """Network flow id → bytes (recorded with the intervals)."""


@dataclass(slots=True)
class _Coflow:
    uid: int
    key: CoflowKey
    release_s: float
    total_bytes: float
    sent_bytes: float
    flows_left: int
    experiment: int
    trial: int


@dataclass(slots=True)
class _ExperimentRun:
    stage_index: int = -1
    stage_release_s: float = 0.0
    trials_left: int = 0
    iterations_done: dict[int, int] = field(default_factory=dict)


_ARRIVAL, _RELEASE = 0, 1


def unsimulable(workload: Workload) -> str | None:
    """What in a workload built in code no run can take, or None (the readers refuse it in
    a file, with their tighter limits). A NaN arrival never comes due, so the event loop
    waited for ever; an infinite one, or a link of 0, infinite or NaN bit/s, left flows
    with no rate and no event to wait for; a NaN weight leaves a weighted order
    undefined."""
    if not workload.link_bps > 0 or not math.isfinite(workload.link_bps):
        return f"link_bps {workload.link_bps!r} is not a finite rate above 0"
    low, high = WEIGHT_RANGE
    for experiment in workload.experiments:
        where = f"experiment {experiment.experiment_id}"
        if not 0 <= experiment.arrival_s < math.inf:
            return f"{where}: arrival_s {experiment.arrival_s!r} is not a finite time >= 0"
        if not low <= experiment.weight <= high:
            return f"{where}: weight {experiment.weight!r} is not between {low:g} and {high:g}"
        for stage in experiment.stages:
            for trial in stage.trials:
                if not 0 <= trial.compute_s < math.inf:
                    return (
                        f"{where} stage {stage.stage_id} trial {trial.trial_id}: compute_s "
                        f"{trial.compute_s!r} is not a finite time >= 0"
                    )
    return None


class Simulation:
    """One run of one policy over one workload; call :meth:`run` once."""

    def __init__(
        self,
        workload: Workload,
        policy: BasePolicy,
        config: SimConfig | None = None,
        progress: Callable[[float], None] | None = None,
    ) -> None:
        problem = workload.duplicate_id() or unsimulable(workload)
        if problem is not None:
            raise UserError(f"workload: {problem}")
        self.workload = workload
        self.policy = policy
        self._progress_thresholds = (
            type(policy).next_rerank_sent_bytes is not BasePolicy.next_rerank_sent_bytes
        )
        """The policy may re-rank on a coflow's progress (else no threshold is asked)."""
        self.config = config or SimConfig()
        self.allocator: Allocator = self.config.allocator or policy.allocator
        self.progress = progress
        self.num_hosts = workload.num_hosts
        self.num_ports = workload.num_ports
        self.capacity_bps = (float(workload.link_bps),) * self.num_ports
        self.capacity = np.full(self.num_ports, workload.link_bps / 8.0)
        self.result = SimResult(policy=policy.name)
        self.now_s = 0.0
        self._heap: list[tuple[float, int, int, tuple[int, int, int]]] = []
        self._seq = 0
        self._coflows: dict[int, _Coflow] = {}
        self._next_uid = 0
        self._next_flow_id = 0
        self._runs = [_ExperimentRun() for _ in workload.experiments]
        self._changed_runs: set[int] = set()
        """Experiments whose run (stage, release or iterations done) changed since the
        last snapshot (only their states are rebuilt)."""
        self._experiment_states: dict[int, ExperimentState] = {}
        """The running experiments' states by index in the workload."""
        self._experiment_order: list[int] = []
        self._trial_flows: dict[tuple[int, int, int], tuple[np.ndarray, ...]] = {}
        self._trial_bytes: dict[tuple[int, int, int], float] = {}
        # Active flows, one entry per flow, in release order.
        self._src = np.zeros(0, dtype=np.int64)
        self._dst = np.zeros(0, dtype=np.int64)
        self._remaining = np.zeros(0)
        self._size = np.zeros(0)
        self._owner = np.zeros(0, dtype=np.int64)
        self._flow_id = np.zeros(0, dtype=np.int64)
        self._mult = np.zeros(0, dtype=np.int64)
        """Flows each entry stands for: 1 here, more in :mod:`sim.fast`."""
        self._pending: list[tuple[np.ndarray, ...]] = []
        self._rates = np.zeros(0)
        self._flow_class = np.zeros(0, dtype=np.int64)
        self._class_of_row = np.zeros(0, dtype=np.int64)
        """Per active coflow row (as of the last ranking; a coflow's coming or going
        re-ranks before the next allocation): its class, highest first."""
        self._rank_of_row = np.zeros(0, dtype=np.int64)
        """Per active coflow row: its position in the ranking."""
        self._threshold_of_row: np.ndarray | None = None
        """Per active coflow row: sent bytes at which to re-rank (NaN: none); None when
        the policy sets no threshold."""
        self._rerank_needed = True

    # -- workload plumbing --

    def _push(self, at_s: float, kind: int, payload: tuple[int, int, int]) -> None:
        heapq.heappush(self._heap, (at_s, self._seq, kind, payload))
        self._seq += 1

    def _flows_of(self, e: int, s: int, t: int) -> tuple[np.ndarray, ...]:
        """The trial's network flows: (src port, dst port, bytes per flow, flows per entry,
        and whatever else the flow model keeps per coflow)."""
        key = (e, s, t)
        cached = self._trial_flows.get(key)
        if cached is None:
            network = self._network_flows(e, s, t)
            cached = self._entries(network)
            self._trial_flows[key] = cached
            # Summed over the flows as given, whatever entries the flow model makes of
            # them: merged entries sum in another order, and past 2**53 bytes another
            # total turns a tie on remaining bytes (twin trials) the other way.
            self._trial_bytes[key] = float(np.array([float(f.size_bytes) for f in network]).sum())
        return cached

    def _network_flows(self, e: int, s: int, t: int) -> list[Flow]:
        """The trial's flows that cross the fabric, checked."""
        trial = self.workload.experiments[e].stages[s].trials[t]
        network = [f for f in trial.sync_flows if f.src_host != f.dst_host]
        for flow in network:
            hosts = range(self.num_hosts)
            if flow.src_host not in hosts or flow.dst_host not in hosts:
                raise UserError(
                    f"experiment {self.workload.experiments[e].experiment_id}: flow "
                    f"{flow.src_host}->{flow.dst_host} names a host outside "
                    f"0..{self.num_hosts - 1}"
                )
            if flow.size_bytes < 0:
                raise UserError(f"flow {flow.src_host}->{flow.dst_host}: negative size")
            if not isinstance(flow.size_bytes, int | np.integer) or flow.size_bytes >= 1 << 63:
                # The flow models keep sizes as 64-bit integers (the fast model's merging
                # compares them): 1000.7 would be 1000 there and 1000.7 in the other.
                raise UserError(
                    f"flow {flow.src_host}->{flow.dst_host}: size {flow.size_bytes!r} is not a "
                    "whole number of bytes below 2**63"
                )
        return [f for f in network if f.size_bytes > 0]

    def _entries(self, network: list[Flow]) -> tuple[np.ndarray, ...]:
        """One entry per flow."""
        return (
            np.array([f.src_host for f in network], dtype=np.int64),
            np.array([self.num_hosts + f.dst_host for f in network], dtype=np.int64),
            np.array([float(f.size_bytes) for f in network]),
            np.ones(len(network), dtype=np.int64),
        )

    def _release_stage(self, e: int, stage_index: int) -> None:
        experiment = self.workload.experiments[e]
        run = self._runs[e]
        self._changed_runs.add(e)
        if stage_index >= len(experiment.stages):
            self.result.experiment_completion_s[experiment.experiment_id] = (
                self.now_s - experiment.arrival_s
            )
            run.stage_index = -1
            return
        stage = experiment.stages[stage_index]
        run.stage_index = stage_index
        run.stage_release_s = self.now_s
        run.iterations_done = {trial.trial_id: 0 for trial in stage.trials}
        run.trials_left = len(stage.trials)
        self.result.stage_release_s[StageKey(experiment.experiment_id, stage.stage_id)] = self.now_s
        self._rerank_needed = True
        for t, trial in enumerate(stage.trials):
            if trial.iterations <= 0:
                self._trial_done(e)
            else:
                self._push(self.now_s + trial.compute_s, _RELEASE, (e, stage_index, t))
        if run.trials_left == 0 and run.stage_index == stage_index:
            self._stage_done(e)

    def _trial_done(self, e: int) -> None:
        run = self._runs[e]
        run.trials_left -= 1

    def _stage_done(self, e: int) -> None:
        experiment = self.workload.experiments[e]
        run = self._runs[e]
        stage = experiment.stages[run.stage_index]
        key = StageKey(experiment.experiment_id, stage.stage_id)
        self.result.sct_s[key] = self.now_s - run.stage_release_s
        self._release_stage(e, run.stage_index + 1)

    def _release_coflow(self, e: int, s: int, t: int) -> None:
        experiment = self.workload.experiments[e]
        stage = experiment.stages[s]
        trial = stage.trials[t]
        run = self._runs[e]
        iteration = run.iterations_done[trial.trial_id]
        key = CoflowKey(experiment.experiment_id, stage.stage_id, trial.trial_id, iteration)
        entries = self._flows_of(e, s, t)
        src, dst, size, mult = entries[:4]
        uid = self._next_uid
        self._next_uid += 1
        total = self._trial_bytes[(e, s, t)]
        self.result.coflow_release_s[key] = self.now_s
        self.result.coflow_bytes[key] = total
        coflow = _Coflow(uid, key, self.now_s, total, 0.0, int(mult.sum()), e, t)
        self._rerank_needed = True
        if len(size) == 0:
            self._coflow_done(coflow)
            return
        self._coflows[uid] = coflow
        ids = np.arange(self._next_flow_id, self._next_flow_id + len(size), dtype=np.int64)
        self._next_flow_id += len(size)
        if self.config.record_intervals:
            for flow_id, flow_size in zip(ids.tolist(), size.tolist(), strict=True):
                self.result.flow_sizes[flow_id] = flow_size
        owner = np.full(len(size), uid, dtype=np.int64)
        self._pending.append((src, dst, size, owner, ids, *entries[3:]))

    def _coflow_done(self, coflow: _Coflow) -> None:
        self.result.cct_s[coflow.key] = self.now_s - coflow.release_s
        self._coflows.pop(coflow.uid, None)
        self._rerank_needed = True
        e, t = coflow.experiment, coflow.trial
        experiment = self.workload.experiments[e]
        run = self._runs[e]
        stage_index = run.stage_index
        trial = experiment.stages[stage_index].trials[t]
        run.iterations_done[trial.trial_id] += 1
        self._changed_runs.add(e)
        if run.iterations_done[trial.trial_id] < trial.iterations:
            self._push(self.now_s + trial.compute_s, _RELEASE, (e, stage_index, t))
            return
        self._trial_done(e)
        if run.trials_left == 0:
            self._stage_done(e)

    def _absorb_pending(self) -> None:
        if not self._pending:
            return
        parts = list(zip(*self._pending, strict=True))
        self._pending = []
        self._append_rows(parts)

    def _append_rows(self, parts: list[tuple[np.ndarray, ...]]) -> None:
        """Add released entries (``parts[i]``: one array per coflow of field i)."""
        self._src = np.concatenate([self._src, *parts[0]])
        self._dst = np.concatenate([self._dst, *parts[1]])
        self._size = np.concatenate([self._size, *parts[2]])
        self._remaining = np.concatenate([self._remaining, *parts[2]])
        self._owner = np.concatenate([self._owner, *parts[3]])
        self._flow_id = np.concatenate([self._flow_id, *parts[4]])
        self._mult = np.concatenate([self._mult, *parts[5]])

    # -- scheduling --

    def _active_uids(self) -> np.ndarray:
        # uids grow with release order and dicts keep insertion order: already sorted.
        return np.fromiter(self._coflows, dtype=np.int64, count=len(self._coflows))

    def _snapshot(self, uids: np.ndarray, rows: np.ndarray) -> Snapshot:
        return Snapshot(
            now_s=self.now_s,
            num_hosts=self.num_hosts,
            port_capacity_bps=self.capacity_bps,
            coflows=self._coflow_states(uids, self._remaining_by_port(uids, rows)),
            experiments=self._experiments_view(),
            num_classes=self.config.num_classes,
            class_strategy=self.config.strategy,
        )

    def _coflow_state(self, uid: int, remaining_by_port: np.ndarray) -> CoflowState:
        coflow = self._coflows[uid]
        return CoflowState(
            key=coflow.key,
            arrival_s=coflow.release_s,
            total_bytes=coflow.total_bytes,
            sent_bytes=coflow.sent_bytes,
            remaining_by_port=PortVector(remaining_by_port),
            num_flows=coflow.flows_left,
        )

    def _coflow_states(self, uids: np.ndarray, matrix: np.ndarray) -> tuple[CoflowState, ...]:
        """The active coflows' states, in uid order (``matrix``: remaining bytes by port)."""
        return tuple(self._coflow_state(uid, matrix[row]) for row, uid in enumerate(uids.tolist()))

    def _experiments_view(self) -> dict[int, ExperimentState]:
        """The running experiments' states by id, in workload order; only the runs
        marked changed get a new state."""
        changed = sorted(self._changed_runs)
        self._changed_runs.clear()
        states = self._experiment_states
        membership = False
        for e in changed:
            run = self._runs[e]
            if run.stage_index < 0:
                membership |= states.pop(e, None) is not None
                continue
            membership |= e not in states
            states[e] = ExperimentState(
                experiment=self.workload.experiments[e],
                stage_index=run.stage_index,
                stage_release_s=run.stage_release_s,
                iterations_done=dict(run.iterations_done),
            )
        if membership:
            self._experiment_order = sorted(states)
        return {states[e].experiment.experiment_id: states[e] for e in self._experiment_order}

    def _remaining_by_port(self, uids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Coflows × ports: each flow's remaining bytes weigh on its sender and its receiver
        port (``rows``: each entry's row in ``uids``)."""
        ports = self.num_ports
        size = len(uids) * ports
        flat = rows * ports
        matrix = np.bincount(flat + self._src, self._remaining, size) + np.bincount(
            flat + self._dst, self._remaining, size
        )
        return matrix.reshape(len(uids), ports)

    def _rows(self) -> tuple[np.ndarray, np.ndarray]:
        """Active uids and each entry's row among them."""
        uids = self._active_uids()
        return uids, np.searchsorted(uids, self._owner)

    def _rerank(self) -> None:
        self.result.reranks += 1
        uids, rows = self._rows()
        snapshot = self._snapshot(uids, rows)
        ranking = self.policy.rank(snapshot)
        row_of_key = {state.key: row for row, state in enumerate(snapshot.coflows)}
        group_bytes = None
        if self.config.strategy == "equal-demand":
            left = {c.key: c.remaining_bytes for c in snapshot.coflows}
            group_bytes = [sum(left[key] for key in group) for group in ranking.groups]
        classes = group_classes(
            len(ranking.groups), self.config.num_classes, self.config.strategy, group_bytes
        )
        # Each row's class and place in the ranking, in plain lists: a few dozen coflows
        # a ranking, where numpy's per-call cost would outweigh the work.
        class_of_row = [0] * len(uids)
        rank_of_row = [-1] * len(uids)
        place = 0
        for group, cls in zip(ranking.groups, classes, strict=True):
            for key in group:
                row = row_of_key[key]
                rank_of_row[row] = place
                class_of_row[row] = cls
                place += 1
        if place != len(uids) or (place and min(rank_of_row) < 0):
            ranked = sum(1 for rank in rank_of_row if rank >= 0)
            raise RuntimeError(
                f"policy {self.policy.name} ranked {ranked} of {len(uids)} coflows"
                + (" (one twice)" if place > ranked else "")
            )
        self._class_of_row = np.array(class_of_row, dtype=np.int64)
        self._rank_of_row = np.array(rank_of_row, dtype=np.int64)
        self._threshold_of_row = None
        if self._progress_thresholds:
            thresholds = [self.policy.next_rerank_sent_bytes(c) for c in snapshot.coflows]
            if any(t is not None for t in thresholds):
                self._threshold_of_row = np.array(
                    [np.nan if t is None else t for t in thresholds], dtype=float
                )
        self._rerank_needed = False

    def _class_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Active uids, each entry's coflow row, and each coflow's class and rank."""
        uids, rows = self._rows()
        return uids, rows, self._class_of_row, self._rank_of_row

    def _allocate(self) -> None:
        if len(self._owner) == 0:
            self._rates = np.zeros(0)
            return
        _, rows, coflow_classes, ranks = self._class_arrays()
        flow_class = coflow_classes[rows]
        if self.allocator == "priority":
            self._rates = priority_maxmin(self._src, self._dst, flow_class, self.capacity)
            return
        flow_rank = ranks[rows]
        if self.allocator == "madd":
            coflow_order = np.lexsort((ranks, -coflow_classes))
            self._rates = madd(
                self._src,
                self._dst,
                self._remaining,
                rows,
                coflow_order,
                flow_class,
                self.capacity,
            )
            return
        flow_order = np.lexsort((flow_rank, -flow_class))
        self._rates = greedy(self._src, self._dst, flow_order, self.capacity)

    # -- the loop --

    def _advance(self, until_s: float) -> None:
        dt = until_s - self.now_s
        if dt > 0 and len(self._remaining):
            moved = self._rates * dt
            moved = np.minimum(moved, self._remaining)
            self._remaining -= moved
            self.result.delivered_bytes += float(moved.sum())
            if self.config.record_intervals:
                self.result.intervals.append(
                    Interval.of_moving(
                        self.now_s, until_s, self._flow_id, self._src, self._dst, self._rates
                    )
                )
            uids, rows = self._rows()
            sent = np.bincount(rows, moved, len(uids))
            for uid, amount in zip(uids.tolist(), sent.tolist(), strict=True):
                self._coflows[uid].sent_bytes += amount
        self.now_s = until_s

    def _finish_flows(self) -> bool:
        """Retire the flows that have completed; True if any did."""
        done = self._remaining <= np.maximum(self._size * COMPLETION_TOLERANCE, 1e-3)
        if not done.any():
            return False
        finished_owners = self._owner[done]
        finished_flows = self._mult[done]
        self.result.delivered_bytes += float(self._remaining[done].sum())
        self._keep_rows(~done)
        uids = np.unique(finished_owners)
        counts = np.bincount(np.searchsorted(uids, finished_owners), finished_flows, len(uids))
        for uid, count in zip(uids.tolist(), counts.astype(np.int64).tolist(), strict=True):
            coflow = self._coflows[uid]
            coflow.flows_left -= count
            if coflow.flows_left == 0:
                coflow.sent_bytes = coflow.total_bytes
                self._coflow_done(coflow)
        return True

    def _keep_rows(self, keep: np.ndarray) -> None:
        """Drop the entries not in ``keep`` (finished flows)."""
        self._src = self._src[keep]
        self._dst = self._dst[keep]
        self._remaining = self._remaining[keep]
        self._size = self._size[keep]
        self._owner = self._owner[keep]
        self._flow_id = self._flow_id[keep]
        self._rates = self._rates[keep]
        self._mult = self._mult[keep]

    def _flow_end_s(self) -> float:
        """When the next flow completes at the current rates (inf: none is moving)."""
        moving = self._rates > 0
        if not moving.any():
            return np.inf
        return self.now_s + float((self._remaining[moving] / self._rates[moving]).min())

    def _next_threshold_s(self) -> float:
        thresholds = self._threshold_of_row
        if thresholds is None or len(self._rates) == 0:
            return np.inf
        uids, rows = self._rows()
        coflow_rate = np.bincount(rows, self._rates, len(uids))
        best = np.inf
        for uid, threshold, rate in zip(
            uids.tolist(), thresholds.tolist(), coflow_rate.tolist(), strict=True
        ):
            if math.isnan(threshold) or rate <= 0:
                continue
            gap = threshold - self._coflows[uid].sent_bytes
            best = min(best, self.now_s + max(gap, 0.0) / rate)
        return best

    def _quiet_events(self, next_s: float, stalled: bool) -> tuple[bool, bool]:
        """Run the events before ``next_s`` that a flow model can run on its own (here:
        none). Returns whether it ended with an advance whose finished flows are still
        to be retired, and the stall flag (see :meth:`run`)."""
        return False, stalled

    def run(self) -> SimResult:
        started = time.perf_counter()
        for e, experiment in enumerate(self.workload.experiments):
            self._push(experiment.arrival_s, _ARRIVAL, (e, 0, 0))
        last_report = 0.0
        stale = True
        stalled = False
        while self._heap or len(self._remaining) or self._pending:
            self._absorb_pending()
            if self._rerank_needed:
                if self._coflows:
                    self._rerank()
                self._rerank_needed = False
                stale = True
            if stale:
                self._allocate()
                stale = False
            next_s = self._heap[0][0] if self._heap else np.inf
            advanced, stalled = self._quiet_events(next_s, stalled)
            threshold_due = False
            if not advanced:
                flow_end_s = self._flow_end_s()
                threshold_s = self._next_threshold_s()
                until_s = min(next_s, flow_end_s, threshold_s)
                if until_s == np.inf:
                    raise RuntimeError(
                        f"{self.policy.name}: active flows with no rate and no event"
                    )
                if until_s <= self.now_s < next_s and (flow_end_s <= self.now_s or stalled):
                    # What is due (a flow end, or a threshold that a re-ranking did not
                    # move) is under half a unit in the last place of the clock away:
                    # ``now + bytes / rate`` rounds back to now, and steps of zero would
                    # never end. One unit moves more than those bytes.
                    until_s = float(np.nextafter(self.now_s, np.inf))
                stalled = until_s <= self.now_s < next_s
                self._advance(until_s)
                self.result.events += 1
                threshold_due = until_s == threshold_s
            stale = self._finish_flows()
            while self._heap and self._heap[0][0] <= self.now_s:
                _, _, kind, (e, s, t) = heapq.heappop(self._heap)
                if kind == _ARRIVAL:
                    self._release_stage(e, 0)
                else:
                    self._release_coflow(e, s, t)
            if threshold_due:
                self._rerank_needed = True
            if self.progress is not None and self.now_s > last_report:
                self.progress(self.now_s)
                last_report = self.now_s
        self.result.end_s = self.now_s
        self.result.wall_s = time.perf_counter() - started
        return self.result


def simulate(workload: Workload, policy: BasePolicy, config: SimConfig | None = None) -> SimResult:
    """Run ``policy`` over ``workload``; see :class:`SimConfig` for the queue and flow model."""
    if config is not None and config.flow_model == "per-flow":
        return Simulation(workload, policy, config).run()
    from sim.fast import FastSimulation

    return FastSimulation(workload, policy, config).run()
