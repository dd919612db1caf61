"""The fast flow model: the per-flow fluid answer, computed on merged flows by compiled kernels.

The per-flow model (:class:`sim.engine.Simulation` with :mod:`sim.allocate`)
is slow on shuffle traces and under contention: its allocator loops over
priority classes in Python, one numpy water-fill per class. This model:

* allocates with :mod:`sim.kernels`, the same rules and arithmetic in machine
  code (strict priority between classes, per-flow max-min inside a class;
  MADD then backfill; greedy);
* keeps flows that are identical (same coflow, sender, receiver and size) in
  one entry of ``mult`` flows. Such flows get equal rates under every rule
  but greedy, so their entry never needs to split; greedy keeps one entry
  per flow. Flows of other sizes keep their own entries, even one byte apart
  (an uneven shuffle split): given a common size they would finish together,
  but the answer would no longer be the per-flow model's.

An entry holds *per-flow* amounts (each of its flows' size, remaining bytes
and rate), so each flow moves, and completes, by the very float operations
the per-flow model applies to it. Every sum a policy reads (a coflow's sent
bytes, its remaining bytes per port, its rate towards a re-ranking
threshold, a port's demand under MADD) runs over the flows, an entry counted
once per flow, in the per-flow model's order: the same sums, bit for bit. So
decisions that hang on an exact tie or threshold (Aalo's queues, FIFO-LM's
heavy threshold, twin trials under ``beamer:split_trials``) come out the
same as in the per-flow model.

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
)
from sim import kernels, quiet
from sim.allocate import RELATIVE_TOLERANCE
from sim.engine import COMPLETION_TOLERANCE, Interval, SimConfig, Simulation, _Coflow


def merge_flows(
    network: list[Flow], num_hosts: int, *, merge: bool = True
) -> tuple[np.ndarray, ...]:
    """Entries for one coflow's fabric flows: (src port, dst port, bytes per flow, flows
    per entry, each flow's entry in ``network`` order).

    With ``merge``, identical flows share one entry.
    """
    if not network:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy(), np.zeros(0), empty.copy(), empty.copy()
    src = np.array([f.src_host for f in network], dtype=np.int64)
    dst = np.array([f.dst_host for f in network], dtype=np.int64)
    sizes = np.array([f.size_bytes for f in network], dtype=np.int64).astype(float)
    if not merge:
        flows = np.arange(len(src), dtype=np.int64)
        return src, num_hosts + dst, sizes, np.ones(len(src), dtype=np.int64), flows
    keys = np.stack([src, dst, sizes.view(np.int64)], axis=1)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    counts = np.bincount(inverse, minlength=len(first))
    by_appearance = np.argsort(first)  # entries in the order their first flow appears
    keep = first[by_appearance]
    mult = counts[by_appearance]
    entry_of_key = np.empty(len(first), dtype=np.int64)
    entry_of_key[by_appearance] = np.arange(len(first))
    return (
        src[keep],
        num_hosts + dst[keep],
        sizes[keep],
        mult.astype(np.int64),
        entry_of_key[inverse],
    )


class FastSimulation(Simulation):
    """:class:`Simulation` with merged entries and the compiled allocators."""

    def __init__(
        self,
        workload: Workload,
        policy: BasePolicy,
        config: SimConfig | None = None,
        progress: Callable[[float], None] | None = None,
        *,
        verify: bool = False,
        batch_quiet: bool = True,
        max_quiet_events: int = quiet.MAX_EVENTS,
    ) -> None:
        super().__init__(workload, policy, config, progress)
        self.verify = verify
        """Check every incremental allocation against one from scratch (for tests)."""
        self.batch_quiet = batch_quiet
        """Run quiet events in one compiled call (:mod:`sim.quiet`); off, one by one (the
        same numbers, for tests)."""
        self.max_quiet_events = max_quiet_events
        self._merge = self.allocator != "greedy" and not self.config.record_intervals
        self._saturated_below = self.capacity * RELATIVE_TOLERANCE
        self._flows = np.zeros(0, dtype=np.int64)
        """One entry index per active flow, in the per-flow model's order of flows."""
        self._uids: np.ndarray | None = None
        self._row = np.zeros(0, dtype=np.int64)
        self._sent = np.zeros(0)
        """Per coflow row: its sent bytes (the coflows' ``sent_bytes`` lag until a flush)."""
        self._dirty = np.zeros(0, dtype=np.uint8)
        """Per coflow row: 1 if a flow of it moved since the last flush."""
        self._moved_uids: set[int] = set()
        """Coflows whose sent bytes or flows left changed since the last snapshot."""
        self._moving: np.ndarray | None = None
        """The entries with a rate (None: not known, find them in the rates)."""
        self._row_rate: np.ndarray | None = None
        self._flow_start = np.zeros(1, dtype=np.int64)
        """Per coflow row: where its flows start in ``_flows`` (they are contiguous)."""
        self._in_entry_order = np.zeros(0, dtype=np.bool_)
        """Per coflow row: its flows are its entries in entry order, one each, so that its
        sums over flows can run over its entries."""
        self._entry_in_order = np.zeros(0, dtype=np.bool_)
        """Per entry: that of its coflow."""
        self._done = np.zeros(0, dtype=np.int64)
        self._finished_owner = np.zeros(0, dtype=np.int64)
        """Scratch for :func:`kernels.finish_entries`: each retired entry's owner, flows
        and sorted position."""
        self._finished_count = np.zeros(0, dtype=np.int64)
        self._finished_position = np.zeros(0, dtype=np.int64)
        self._num_done = -1
        """Entries found done by the last :meth:`_advance` (-1: it did not run)."""
        self._scratch = np.zeros(0)
        self._work = kernels.Scratch()
        self._bounds = np.zeros((0, self.num_ports))
        """Per class of the class order: the residual capacities at its start."""
        self._moving_start = np.zeros(0, dtype=np.int64)
        """Per class: where its entries start in the moving list."""
        self._reached = 0
        """Classes whose start the last filling recorded (below, every port was full)."""
        self._first_changed = 0
        """The highest class whose entries changed since the last allocation."""
        self._round_log = kernels.RoundLog(self.num_ports)
        self._logging = False
        """A class of the class order is large enough to be logged (see ``RoundLog``)."""
        self._finished: list[tuple[np.ndarray, np.ndarray]] = []
        """Sorted positions of the entries finished since the last allocation, and their
        flows (the filling restarts inside the class that changed from them)."""
        self._check_all = False
        """True when an entry may have completed without moving (a released flow's size is
        within its completion tolerance): the next check looks at every entry."""
        self._classes: tuple[np.ndarray, ...] | None = None
        self._tol = np.zeros(0)
        """Per entry: remaining bytes at or below which it has completed (-1: finished)."""
        self._dead = 0
        self._members: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        """MADD's flows by coflow row, where each row starts, each flow slot's mark as its
        entry's first, and per row the flow that made it wait last (see
        :func:`kernels._madd`)."""
        self._coflow_order: tuple[tuple[np.ndarray, ...], np.ndarray] | None = None
        """MADD's coflow rows in ranking order, for the class order it was made for."""
        self._coflow_states_by_uid: dict[int, CoflowState] = {}

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
                self._keep_rows(self._mult > 0)
                self._dead = 0
            self._uids = self._active_uids()
            self._row = np.searchsorted(self._uids, self._owner)
            self._sent = np.array([self._coflows[u].sent_bytes for u in self._uids.tolist()])
            self._dirty = np.zeros(len(self._uids), dtype=np.uint8)
            # Released in uid order, each coflow's flows are contiguous in _flows.
            flow_rows = self._row[self._flows]
            self._flow_start = np.zeros(len(self._uids) + 1, dtype=np.int64)
            np.cumsum(np.bincount(flow_rows, minlength=len(self._uids)), out=self._flow_start[1:])
            self._in_entry_order = self._entry_in_order[self._flows[self._flow_start[:-1]]]
            if self.verify and (np.diff(flow_rows) < 0).any():
                raise RuntimeError("the flows of a coflow are not contiguous")
            self._classes = None
            self._members = None
            self._row_rate = None
        return self._uids, self._row

    def _keep_rows(self, keep: np.ndarray) -> None:
        new_index = np.cumsum(keep) - 1
        self._flows = new_index[self._flows[keep[self._flows]]]
        super()._keep_rows(keep)
        self._tol = self._tol[keep]
        self._entry_in_order = self._entry_in_order[keep]
        self._moving = None

    def _flush_sent(self) -> None:
        """Copy the sent bytes of the rows that moved into their coflows' ``sent_bytes``."""
        if self._uids is None:
            return
        moved = np.flatnonzero(self._dirty)
        if len(moved) == 0:
            return
        for uid, amount in zip(self._uids[moved].tolist(), self._sent[moved].tolist(), strict=True):
            coflow = self._coflows.get(uid)
            if coflow is not None:
                coflow.sent_bytes = amount
            self._moved_uids.add(uid)
        self._dirty[moved] = 0

    def _forget_rows(self) -> None:
        self._flush_sent()
        self._uids = None
        self._classes = None
        self._row_rate = None

    def _append_rows(self, parts: list[tuple[np.ndarray, ...]]) -> None:
        self._forget_rows()
        offset = first_new = len(self._owner)
        flows = [self._flows]
        in_order = [self._entry_in_order]
        for entry_src, entry_of_flow in zip(parts[0], parts[6], strict=True):
            flows.append(entry_of_flow + offset)
            offset += len(entry_src)
            simple = len(entry_of_flow) == len(entry_src) and bool(
                (entry_of_flow[1:] > entry_of_flow[:-1]).all()
            )
            in_order.append(np.full(len(entry_src), simple))
        self._flows = np.concatenate(flows)
        self._entry_in_order = np.concatenate(in_order)
        super()._append_rows(parts)
        # New entries move from the next allocation on; until then they have no rate.
        self._rates = np.concatenate([self._rates, np.zeros(len(self._owner) - len(self._rates))])
        tolerance = np.maximum(self._size * COMPLETION_TOLERANCE, 1e-3)
        self._tol = np.where(self._mult > 0, tolerance, -1.0)
        if (self._remaining[first_new:] <= self._tol[first_new:]).any():
            self._check_all = True

    def _finish_flows(self) -> bool:
        """As :meth:`Simulation._finish_flows`, but finished entries only get ``mult`` 0."""
        done = self._done
        if self._check_all:
            done = kernels.completed(
                self._remaining, self._tol, np.arange(len(self._remaining), dtype=np.int64)
            )
            num_done = len(done)
            self._check_all = False
        else:
            # Only an entry that moved can have completed; the advance listed them.
            num_done = max(self._num_done, 0)
        self._num_done = -1
        if num_done == 0:
            return False
        if len(self._finished_owner) < num_done:
            self._finished_owner = np.empty(2 * num_done, dtype=np.int64)
            self._finished_count = np.empty(2 * num_done, dtype=np.int64)
            self._finished_position = np.empty(2 * num_done, dtype=np.int64)
        classes = self._classes
        held_bytes, first = kernels.finish_entries(
            done,
            num_done,
            self._remaining,
            self._rates,
            self._mult,
            self._tol,
            self._owner,
            kernels.NO_INT if classes is None else classes[2],
            kernels.NO_FLOAT if classes is None else classes[5],
            kernels.NO_INT if classes is None else classes[1],
            self._finished_owner,
            self._finished_count,
            self._finished_position,
        )
        self.result.delivered_bytes += held_bytes
        finished_flows = self._finished_count[:num_done]
        if classes is not None:
            if self._logging:
                positions = self._finished_position[:num_done].copy()
                self._finished.append((positions, finished_flows.astype(float)))
            self._first_changed = min(self._first_changed, first)
        self._row_rate = None
        self._dead += num_done
        # Usually one or two entries: plain Python beats numpy's call overhead here.
        finished: dict[int, int] = {}
        owners = self._finished_owner[:num_done].tolist()
        for uid, count in zip(owners, finished_flows.tolist(), strict=True):
            finished[uid] = finished.get(uid, 0) + count
        for uid in sorted(finished):
            count = finished[uid]
            coflow = self._coflows[uid]
            coflow.flows_left -= count
            self._moved_uids.add(uid)  # a flow may finish without moving (see _check_all)
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
        # The rows stay while the same coflows are active (a coflow's coming or going
        # forgets them); the snapshot needs the sent bytes.
        self._flush_sent()
        super()._rerank()
        self._classes = None

    def _moving_entries(self) -> np.ndarray:
        """The entries with a rate (from the allocation, else found in the rates)."""
        if self._moving is None:
            self._moving = np.flatnonzero(self._rates > 0.0)
        return self._moving

    def _advance(self, until_s: float) -> None:
        dt = until_s - self.now_s
        if dt > 0 and len(self._remaining):
            _, rows = self._rows()
            moving = self._moving_entries()
            if len(self._scratch) < len(self._remaining):
                self._scratch = np.zeros(2 * len(self._remaining))
                self._done = np.zeros(2 * len(self._remaining), dtype=np.int64)
            if self.config.record_intervals:
                self.result.intervals.append(
                    Interval.of_moving(
                        self.now_s, until_s, self._flow_id, self._src, self._dst, self._rates
                    )
                )
            delivered, self._num_done = kernels.advance(
                self._rates,
                self._remaining,
                self._mult,
                self._tol,
                rows,
                moving,
                self._in_entry_order,
                self._flow_start,
                self._flows,
                self._scratch,
                self._sent,
                self._dirty,
                self._done,
                dt,
            )
            self.result.delivered_bytes += delivered
        self.now_s = until_s

    def _quiet_events(self, next_s: float, stalled: bool) -> tuple[bool, bool]:
        """Flow completions inside coflows that go on, before ``next_s``, in one compiled
        call (:func:`sim.quiet.quiet_events`), under strict priority, where the allocation
        just made is in the scratch lists."""
        classes = self._classes
        moving = self._moving
        if (
            not self.batch_quiet
            or self.allocator != "priority"
            or classes is None
            or moving is None
            or moving.base is not self._work.moving
            or len(self._rates) != len(classes[0])
            or self._uids is None
            or self._check_all
            or self._finished
            or self._num_done >= 0
            or self.verify
            or self.config.record_intervals
        ):
            return False, stalled
        uids, rows = self._rows()
        count = len(self._remaining)
        if len(self._scratch) < count:
            self._scratch = np.zeros(2 * count)
            self._done = np.zeros(2 * count, dtype=np.int64)
        if len(self._finished_owner) < count:
            self._finished_owner = np.empty(count, dtype=np.int64)
            self._finished_count = np.empty(count, dtype=np.int64)
            self._finished_position = np.empty(count, dtype=np.int64)
        coflows = [self._coflows[uid] for uid in uids.tolist()]
        flows_left = np.array([c.flows_left for c in coflows], dtype=np.int64)
        row_changed = np.zeros(len(uids), dtype=np.uint8)
        log = self._round_log
        log_active = self._logging and len(log.class_base) >= len(classes[1]) - 1
        state = np.zeros(quiet.STATE_SLOTS, dtype=np.int64)
        state[quiet.NUM_MOVING] = len(moving)
        state[quiet.REACHED] = self._reached
        state[quiet.STALLED] = stalled
        delivered = np.array([self.result.delivered_bytes])
        work = self._work
        self.now_s = quiet.quiet_events(
            self.now_s, next_s, self.max_quiet_events, delivered, state,
            self._rates, self._remaining, self._mult, self._tol, rows, self._in_entry_order,
            self._flow_start, self._flows, self._scratch, self._sent, self._dirty, self._done,
            kernels.NO_FLOAT if self._threshold_of_row is None else self._threshold_of_row,
            self._owner, classes[2], classes[5], classes[1], self._finished_owner,
            self._finished_count, self._finished_position, flows_left, row_changed,
            classes[3], classes[4], classes[0], classes[8], self.capacity,
            self._saturated_below, work.moving, work.live, work.pending, work.by_port,
            work.frozen, self._bounds, self._moving_start,
            *(log.kernel_arrays() if log_active else kernels.NO_LOG),
            kernels.RoundLog.MIN_LOGGED if log_active else 0,
            log.stats if log_active else kernels.NO_INT,
            log.max_rows,
        )  # fmt: skip
        events = int(state[quiet.EVENTS])
        if events == 0:
            return False, stalled
        self.result.events += events
        self.result.delivered_bytes = float(delivered[0])
        self._moving = work.moving[: state[quiet.NUM_MOVING]]
        self._reached = int(state[quiet.REACHED])
        self._row_rate = None
        self._dead += int(state[quiet.DEAD])
        for row in np.flatnonzero(row_changed).tolist():
            coflows[row].flows_left = int(flows_left[row])
            self._moved_uids.add(int(uids[row]))
        stop = int(state[quiet.STOP])
        if stop == quiet.STOP_LOG_ROWS:
            log.want_rows(int(state[quiet.ROWS_WANTED]))
        if stop == quiet.STOP_COFLOW_DONE:
            self._num_done = int(state[quiet.NUM_DONE])
            return True, bool(state[quiet.STALLED])
        return False, bool(state[quiet.STALLED])

    def _flow_end_s(self) -> float:
        return self.now_s + kernels.first_completion_s(
            self._rates, self._remaining, self._moving_entries()
        )

    def _next_threshold_s(self) -> float:
        """The first instant a coflow's sent bytes reach its re-ranking threshold."""
        thresholds = self._threshold_of_row
        if thresholds is None or len(self._rates) == 0:
            return np.inf
        uids, rows = self._rows()
        if self._row_rate is None:
            self._row_rate = kernels.row_rates(
                self._rates,
                rows,
                self._moving_entries(),
                self._in_entry_order,
                self._flow_start,
                self._flows,
                len(uids),
            )
        coflow_rate = self._row_rate
        return float(kernels.first_threshold_s(thresholds, self._sent, coflow_rate, self.now_s))

    def _remaining_by_port(self, uids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return kernels.remaining_by_port(
            self._remaining, self._src, self._dst, rows, self._flows, len(uids), self.num_ports
        )

    def _coflow_states(self, uids: np.ndarray, matrix: np.ndarray) -> tuple[CoflowState, ...]:
        """As :meth:`Simulation._coflow_states`; a coflow that has not changed since the
        last snapshot (a blocked coflow, under contention most of them) keeps its state."""
        previous = self._coflow_states_by_uid
        changed = self._moved_uids
        current: dict[int, CoflowState] = {}
        for row, uid in enumerate(uids.tolist()):
            state = previous.get(uid)
            if state is None or uid in changed:
                # A copy of the row: a kept state holding a view would keep its whole
                # matrix alive, one per snapshot (memory of coflows squared: 65,536
                # coflows active at once ran out of memory).
                state = self._coflow_state(uid, matrix[row].copy())
            current[uid] = state
        if self.verify:
            self._check_states(current)
        self._coflow_states_by_uid = current
        changed.clear()
        return tuple(current.values())

    def _experiments_view(self) -> dict[int, ExperimentState]:
        view = super()._experiments_view()
        if self.verify:
            self._check_experiments(view)
        return view

    def _check_experiments(self, view: dict[int, ExperimentState]) -> None:
        """Raise if a kept experiment state differs from its run (a change went unmarked)."""
        running = [e for e, run in enumerate(self._runs) if run.stage_index >= 0]
        if [self.workload.experiments[e].experiment_id for e in running] != list(view):
            raise RuntimeError("the running experiments differ from the snapshot's")
        for e in running:
            run, state = self._runs[e], self._experiment_states[e]
            if (
                state.stage_index != run.stage_index
                or state.stage_release_s != run.stage_release_s
                or state.iterations_done != run.iterations_done
            ):
                raise RuntimeError(f"experiment {e} changed without being marked")

    def _check_states(self, states: dict[int, CoflowState]) -> None:
        """Raise if a kept state differs from its coflow (a change went unmarked)."""
        for uid, state in states.items():
            coflow = self._coflows[uid]
            if state.sent_bytes != coflow.sent_bytes or state.num_flows != coflow.flows_left:
                raise RuntimeError(f"coflow {coflow.key} changed without being marked")

    def _class_order(self) -> tuple[np.ndarray, ...]:
        """Cached until the ranking or the coflows change: entries in class order
        (highest first), where each class starts, each entry's sorted position, sender,
        receiver and flows per entry in that order, and each coflow row's class and rank."""
        if self._classes is None:
            _, rows = self._rows()
            coflow_classes, ranks = self._class_of_row, self._rank_of_row
            order, starts = kernels.class_order(coflow_classes[rows])
            position = np.empty(len(order), dtype=np.int64)
            position[order] = np.arange(len(order))
            dst_sorted = self._dst[order]
            self._classes = (
                order,
                starts,
                position,
                self._src[order],
                dst_sorted,
                self._mult[order].astype(float),
                coflow_classes,
                ranks,
                kernels.run_ends(dst_sorted, starts),
            )
            num_classes = len(starts) - 1
            if len(self._bounds) < num_classes:
                self._bounds = np.empty((2 * num_classes, self.num_ports))
                self._moving_start = np.empty(2 * num_classes, dtype=np.int64)
            self._reached = 0
            self._first_changed = 0
            least = kernels.RoundLog.MIN_LOGGED
            self._logging = len(order) >= least and int(np.diff(starts).max()) >= least
            if self._logging:
                self._round_log.reset(num_classes, len(order))
            self._finished.clear()
        return self._classes

    def _allocate_priority(self, classes: tuple[np.ndarray, ...]) -> None:
        """Strict priority, max-min inside a class, from the highest class that changed.

        The classes above it have the same entries and the same capacities as in the
        last allocation, hence the same rates (the same arithmetic); the filling
        restarts from the residual capacities recorded at that class's start."""
        order, starts, _, src_sorted, dst_sorted, mult_sorted = classes[:6]
        run_end = classes[8]
        first = self._first_changed
        self._first_changed = len(starts) - 1
        finished, self._finished = self._finished, []
        if self._moving is None or len(self._rates) != len(order):
            first = 0
            finished = []
        if first >= self._reached and first > 0:
            return  # every port was full above the classes that changed: no rate moves
        keep = int(self._moving_start[first]) if first > 0 else 0
        previous = self._moving
        work = self._work.fit(len(order))
        # The last filling's moving list is usually a view of the scratch list the next
        # one writes: the kept part is then in place already, no copy of it is needed.
        in_place = previous is not None and previous.base is work.moving
        restart = (
            bool(finished)
            and self._logging
            and previous is not None
            and first < self._reached
            and self._round_log.class_base[first] >= 0
        )
        # The moving entries the kernel starts from: those of the kept classes, and on a
        # restart those of the class that changed too (the kernel takes them up).
        start_from = keep
        if restart:
            assert previous is not None
            start_from = (
                int(self._moving_start[first + 1]) if first + 1 < self._reached else len(previous)
            )
        if len(self._rates) != len(order):
            self._rates = np.zeros(len(order))
        elif previous is None or start_from == 0:
            self._rates.fill(0.0)
        else:
            # Only the entries that moved below those have a rate to clear.
            self._rates[previous[start_from:]] = 0.0
        if start_from and not in_place:
            assert previous is not None
            work.moving[:start_from] = previous[:start_from]
        residual = self._bounds[first].copy() if first > 0 else self.capacity.copy()
        moving, self._reached = kernels.maxmin_into(
            src_sorted,
            dst_sorted,
            mult_sorted,
            order,
            starts,
            run_end,
            residual,
            self._saturated_below,
            self._rates,
            work,
            first,
            keep,
            self._bounds,
            self._moving_start,
            self._round_log if self._logging else None,
            np.concatenate([p for p, _ in finished]) if restart else None,
            np.concatenate([m for _, m in finished]) if restart else None,
        )
        self._moving = moving  # a view of the scratch list, valid until the next filling

    def _check_allocation(self, classes: tuple[np.ndarray, ...]) -> None:
        """Raise if the rates or the moving list differ from a filling from scratch."""
        order, starts, _, src_sorted, dst_sorted, mult_sorted = classes[:6]
        expected = kernels.maxmin_ordered(
            src_sorted, dst_sorted, mult_sorted, order, starts, self.capacity, self._saturated_below
        )
        if not np.array_equal(self._rates, expected):
            wrong = np.flatnonzero(self._rates != expected)
            raise RuntimeError(f"incremental allocation differs at {len(wrong)} entries")
        assert self._moving is not None
        # Holes (finished entries left in a restarted class's slots) have no flows.
        listed = self._moving[self._mult[self._moving] > 0]
        if not np.array_equal(np.sort(listed), np.flatnonzero(expected > 0.0)):
            raise RuntimeError("incremental allocation lists the wrong moving entries")
        if (np.diff(classes[2][self._moving]) <= 0).any():
            raise RuntimeError("the moving entries are not in class order")

    def _allocate_madd(self, classes: tuple[np.ndarray, ...]) -> None:
        """MADD in the ranking's coflow order, then the max-min backfill, from scratch (MADD's
        residual capacities change at every event), into the rates in place."""
        order, starts, _, src_sorted, dst_sorted, mult_sorted, coflow_classes, ranks = classes[:8]
        uids, rows = self._rows()
        if self._members is None:
            # Each coflow's flows in flow order, as the reference's stable sort by coflow,
            # and the coflows in ranking order: both kept until the rows or ranking change.
            by_row = np.argsort(rows[self._flows], kind="stable")
            flows_per_row = np.bincount(rows[self._flows], minlength=len(uids))
            starts_by_row = np.zeros(len(uids) + 1, dtype=np.int64)
            np.cumsum(flows_per_row, out=starts_by_row[1:])
            members = self._flows[by_row]
            self._members = (
                members,
                starts_by_row,
                kernels.first_slots(members),
                np.full(len(uids), -1, dtype=np.int64),
            )
        if self._coflow_order is None or self._coflow_order[0] is not classes:
            self._coflow_order = (classes, np.lexsort((ranks, -coflow_classes)))
        members, starts_by_row, first_slot, blocked_at = self._members
        coflow_order = self._coflow_order[1]

        def allocate(
            rates: np.ndarray, scratch: kernels.Scratch, blocked_at: np.ndarray
        ) -> np.ndarray:
            return kernels.madd_into(
                self._src,
                self._dst,
                self._remaining,
                members,
                starts_by_row,
                coflow_order,
                (order, starts, src_sorted, dst_sorted),
                mult_sorted,
                self.capacity,
                self._saturated_below,
                classes[8],
                rows,
                first_slot,
                blocked_at,
                rates,
                scratch,
            )

        if len(self._rates) != len(order) or self._moving is None:
            self._rates = np.zeros(len(order))
        else:
            self._rates[self._moving] = 0.0  # the only entries with a rate
        self._moving = allocate(self._rates, self._work, blocked_at)
        if self.verify:
            # From scratch: fresh scratch arrays and no remembered waits.
            expected = np.zeros(len(order))
            allocate(expected, kernels.Scratch(), np.full(len(blocked_at), -1, dtype=np.int64))
            if not np.array_equal(self._rates, expected):
                raise RuntimeError("MADD's rates in place differ from a fresh allocation")
            if not np.array_equal(np.sort(self._moving), np.flatnonzero(expected > 0.0)):
                raise RuntimeError("MADD lists the wrong moving entries")

    def _allocate(self) -> None:
        self._row_rate = None
        if len(self._owner) == 0:
            self._rates = np.zeros(0)
            self._moving = None
            return
        _, rows = self._rows()  # first: it may drop finished entries
        classes = self._class_order()
        if self.allocator == "priority":
            self._allocate_priority(classes)
            if self.verify:
                self._check_allocation(classes)
            return
        if self.allocator == "madd":
            self._allocate_madd(classes)
            return
        self._moving = None
        coflow_classes, ranks = classes[6], classes[7]
        flow_class = coflow_classes[rows]
        flow_order = np.lexsort((ranks[rows], -flow_class))
        mult = self._mult.astype(float)
        self._rates = kernels.greedy(self._src, self._dst, mult, flow_order, self.capacity)
