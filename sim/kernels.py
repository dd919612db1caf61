"""Compiled rate-allocation kernels: the rules of :mod:`sim.allocate`, one call per allocation.

:mod:`sim.allocate` states the fluid model in numpy, one water-fill per
priority class; with hundreds of classes that is a Python loop of hundreds of
numpy calls per event, and it dominated every run. These kernels run the same
arithmetic, step for step, in machine code (numba): no per-class call
overhead, and each water-filling round touches only the live entries and
their ports. They also take *entries* that stand for ``mult`` identical flows
(same coflow, sender, receiver and size): such flows always get the same rate
under strict priority and max-min, so the rates are per flow and an entry
loads each of its ports with ``mult`` flows.

All rates are bytes per second per flow; residual capacities are updated in
place. Ports are saturated when their residual falls to ``saturated_below``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from sim.allocate import RELATIVE_TOLERANCE

SHARE_SLACK = 1e-12
"""A port whose fair share is within this fraction of the water level fills with it."""


@njit(cache=True, nogil=True)
def _replay_before_restart(
    src: np.ndarray,
    dst: np.ndarray,
    lo: int,
    hi: int,
    residual: np.ndarray,
    saturated_below: np.ndarray,
    finished: np.ndarray,
    finished_mult: np.ndarray,
    log_residual: np.ndarray,
    log_load: np.ndarray,
    log_step: np.ndarray,
    base: int,
    rounds: int,
    freeze_round: np.ndarray,
    gone: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """The round a class's filling can restart at once the ``finished`` entries in
    positions [lo, hi) are gone, or -1 if it must start over.

    That round is the earliest one a finished entry froze in. Before it, the gone
    flows only raised their ports' fair shares; the rounds are replayed for those
    ports alone, with the logged steps and their loads less the gone flows
    (``gone``, per port), to check that none of them fills before that round and
    to patch their logged residual capacities and loads. ``residual`` holds the
    class's starting capacities. On success ``gone`` keeps the flows gone per port
    (the caller subtracts them at the restart round and clears it), else it is
    cleared here."""
    restart = rounds
    for j in range(len(finished)):
        i = finished[j]
        if i < lo or i >= hi:
            continue
        r = freeze_round[i]
        if r < 0 or r >= rounds:
            restart = -1
            break
        restart = min(restart, r)
        gone[src[i]] += finished_mult[j]
        gone[dst[i]] += finished_mult[j]
    ok = restart >= 0 and restart < rounds
    if ok:
        for p in range(len(gone)):
            if gone[p] == 0.0:
                continue
            left = residual[p]
            for r in range(restart):
                row = base + r
                load = log_load[row, p] - gone[p]
                log_residual[row, p] = left
                log_load[row, p] = load
                if load <= 0.0:
                    continue
                step = log_step[row]
                share = left / load
                left -= step * load
                if share <= step * (1.0 + SHARE_SLACK) or left <= saturated_below[p]:
                    ok = False
                    break
            if not ok:
                break
            log_residual[base + restart, p] = left
    if not ok:
        gone[:] = 0.0
        return -1
    return restart


@njit(cache=True, nogil=True)
def _maxmin_classes(
    src: np.ndarray,
    dst: np.ndarray,
    mult: np.ndarray,
    order: np.ndarray,
    starts: np.ndarray,
    run_end: np.ndarray,
    residual: np.ndarray,
    saturated_below: np.ndarray,
    rates: np.ndarray,
    moving: np.ndarray,
    live: np.ndarray,
    pending: np.ndarray,
    by_port: np.ndarray,
    frozen: np.ndarray,
    first_class: int,
    num_moving: int,
    bounds: np.ndarray,
    moving_start: np.ndarray,
    finished: np.ndarray,
    finished_mult: np.ndarray,
    log_residual: np.ndarray,
    log_load: np.ndarray,
    log_level: np.ndarray,
    log_step: np.ndarray,
    log_frozen_before: np.ndarray,
    class_base: np.ndarray,
    class_rounds: np.ndarray,
    class_live: np.ndarray,
    frozen_seq: np.ndarray,
    freeze_round: np.ndarray,
    min_logged: int,
    stats: np.ndarray,
) -> tuple[int, int, int]:  # pragma: no cover - compiled
    """Progressive filling class by class, as :func:`sim.allocate.priority_maxmin`.

    Each round raises every live flow of the class by the smallest fair share
    among its ports; the ports that fill freeze their flows. Instead of adding
    the increment to every live flow and recounting every port's load each
    round, the water level is kept as a running sum (a flow's rate is the level
    at which it froze, the same sum in the same order) and a freezing flow
    takes itself off its other port's load: a round costs the ports, not the
    flows.

    ``src``, ``dst`` and ``mult`` are in class order (``order[j]`` is the entry at
    sorted position j, whose rate goes to ``rates[order[j]]``), so that the scan
    of a class reads memory in sequence. ``run_end[j]`` is where the run of
    positions with the receiver of position j ends (within its class): the scan
    skips a full receiver's run in one step, so it costs the entries at open
    receivers, not every entry. Inside a class the order of the entries changes
    nothing: port loads are sums of whole flow counts (exact in any order) and
    the rounds work port by port.

    Only the entries that get a rate are written: ``rates`` must be zero
    elsewhere. Those entries go to ``moving`` in class order (the sorted
    positions' order) and their count is returned; a class restarted after
    flows finished keeps its finished entries in their slots there, with no
    rate and no flows (holes, which every reader of the list skips), until it is
    filled from its start: shifting the rest of the class down over them cost
    as much as a pass over it. ``live`` and ``pending`` (one slot
    per entry), ``by_port`` (two) and ``frozen`` (one, all False, left so) are
    scratch, kept by the caller: fresh arrays of that size on every call cost page
    faults.

    A round freezes the entries at the ports it fills. While a round freezes a good
    share of the entries still growing, a sweep over those entries finds them (and
    keeps the rest); once rounds freeze few, the entries are sorted by port once
    and each filled port's entries are visited directly. Either way the same
    entries freeze at the same level and the loads lose the same whole counts.

    Strict priority makes a class's rates depend only on the classes above it, so
    the filling can start at ``first_class`` from its recorded state: ``residual``
    must then be the residual capacities at that class's start, and the first
    ``num_moving`` slots of ``moving`` the moving entries of the classes above. If
    ``bounds`` has rows, the residual capacities at the start of each class k
    filled are recorded in ``bounds[k]`` and its first slot in ``moving`` in
    ``moving_start[k]``.

    Inside a class the filling can also restart at a later round. A class with at
    least ``min_logged`` live entries is logged (while ``log_*`` have rows left):
    each round's water level, step, residual capacities and loads at its start
    (``class_base[k]`` is its first row, -1 if not logged), the round each entry
    froze in (``freeze_round``, by sorted position) and the entries in the order
    they froze (``frozen_seq``, from ``moving_start[k]``). ``finished`` lists the
    sorted positions whose entries finished (``mult`` now 0) since the filling
    that wrote the log; the caller has then left the moving entries of
    ``first_class`` in ``moving`` after the first ``num_moving`` slots. Removing a
    flow that froze in round r only raises its two ports' fair shares, so rounds
    before r fill the same ports at the same steps: the filling replays those
    rounds for the finished entries' ports alone, and if none of them would fill
    earlier than r (else it fills the class from its start), takes up round r with
    the logged state (the finished entries' slots in ``moving`` become holes).
    Every rate is the same sum in the same order as a filling from scratch.
    ``stats`` counts restarts (0) and fillings from a class's start after a failed
    replay (1).

    Returns the number of moving entries, the number of classes whose start was
    recorded (the filling stops where every port is full) and the log rows this
    filling wanted (more than ``log_level`` holds: classes it could not log).
    """
    num_ports = len(residual)
    load = np.zeros(num_ports)
    full = np.zeros(num_ports, dtype=np.bool_)
    touched = np.empty(num_ports, dtype=np.int64)
    filled = np.empty(num_ports, dtype=np.int64)
    port_start = np.zeros(num_ports + 1, dtype=np.int64)
    port_fill = np.zeros(num_ports, dtype=np.int64)
    is_open = residual > saturated_below
    open_count = 0
    record = bounds.shape[0] > 0
    num_classes = len(starts) - 1
    logging = record and class_base.shape[0] >= num_classes
    gone = np.zeros(num_ports if logging else 0)
    log_rows = log_level.shape[0]
    next_row = 0
    rows_wanted = 0
    reached = first_class
    if logging and first_class > 0:
        # The classes kept above keep their log rows; new rows go after theirs.
        for k in range(first_class):
            if class_base[k] >= 0:
                next_row = max(next_row, class_base[k] + class_rounds[k])
        rows_wanted = next_row
    for p in range(num_ports):
        if is_open[p]:
            open_count += 1
    for k in range(first_class, num_classes):
        if open_count == 0:
            break
        if record:
            bounds[k, :] = residual
            moving_start[k] = num_moving
        reached = k + 1
        segment = num_moving
        restart_round = -1
        if logging and k == first_class and len(finished) > 0 and class_base[k] >= 0:
            restart_round = _replay_before_restart(
                src, dst, starts[k], starts[k + 1], residual, saturated_below, finished,
                finished_mult, log_residual, log_load, log_step, class_base[k], class_rounds[k],
                freeze_round, gone,
            )  # fmt: skip
            if restart_round < 0:
                stats[1] += 1
                # Fill the class from its start: its old moving entries lose their rates.
                for j in range(segment, segment + class_live[k]):
                    rates[moving[j]] = 0.0
        n = 0
        nt = 0
        level = 0.0
        num_pending = 0
        frozen_count = 0
        restart_frozen = 0
        round_index = 0
        base = -1
        if restart_round >= 0:
            stats[0] += 1
            base = class_base[k]
            row = base + restart_round
            # The class's moving entries stay in place: a finished one keeps its slot with
            # no rate and no flows (a hole, skipped by every reader of the moving list)
            # until the class is filled from its start. In the freeze order it moves up
            # to the restart round, so that it is never taken up again.
            n = class_live[k]
            frozen_count = log_frozen_before[row]
            restart_frozen = frozen_count
            for j in range(segment + frozen_count, segment + n):
                i = frozen_seq[j]
                if mult[i] > 0.0:
                    pending[num_pending] = i
                    num_pending += 1
                else:
                    frozen_seq[segment + frozen_count] = i
                    frozen_count += 1
            # The rows hold every port at the class's first round, its touched ports after.
            open_count = 0
            for p in range(num_ports):
                if log_load[base, p] > 0.0:
                    # Touched at the class's start: logged in every round since.
                    residual[p] = log_residual[row, p]
                    load[p] = log_load[row, p] - gone[p]
                    is_open[p] = residual[p] > saturated_below[p]
                    touched[nt] = p
                    nt += 1
                gone[p] = 0.0
                if is_open[p]:
                    open_count += 1
            level = log_level[row]
            round_index = restart_round
        else:
            i = starts[k]
            end = starts[k + 1]
            while i < end:
                d = dst[i]
                stop = run_end[i]
                if not is_open[d]:
                    i = stop
                    continue
                # The run of one receiver: its load is summed in a register and added
                # once (whole flow counts: exact in any order), not carried through
                # memory from one entry to the next.
                run_load = 0.0
                while i < stop:
                    s = src[i]
                    m = mult[i]
                    if m > 0.0 and is_open[s]:
                        live[n] = i
                        n += 1
                        if load[s] == 0.0:
                            touched[nt] = s
                            nt += 1
                        load[s] += m
                        run_load += m
                    i += 1
                if run_load > 0.0:
                    if load[d] == 0.0:
                        touched[nt] = d
                        nt += 1
                    load[d] += run_load
            if n == 0:
                if logging:
                    class_base[k] = -1
                continue
            for j in range(n):
                pending[j] = live[j]
            num_pending = n
            if logging:
                base = next_row if n >= min_logged else -1
        # A logged class lists its entries in the order they freeze (fixed for the class,
        # even if the log runs out of rows on the way: a restart resets from that list).
        track = base >= 0
        by_ports = False
        while num_pending > 0:
            row = -1
            if base >= 0:
                row = base + round_index
                rows_wanted = max(rows_wanted, row + 1)
                if row < log_rows:
                    if round_index == 0:
                        for p in range(num_ports):
                            log_residual[row, p] = residual[p]
                            log_load[row, p] = load[p]
                    else:
                        for t in range(nt):
                            p = touched[t]
                            log_residual[row, p] = residual[p]
                            log_load[row, p] = load[p]
                    log_level[row] = level
                    log_frozen_before[row] = frozen_count
                else:
                    base = -1
                    row = -1
            step = np.inf
            for t in range(nt):
                p = touched[t]
                if load[p] > 0.0:
                    step = min(step, residual[p] / load[p])
            if row >= 0:
                log_step[row] = step
            level += step
            nf = 0
            for t in range(nt):
                p = touched[t]
                if load[p] <= 0.0:
                    continue
                share = residual[p] / load[p]
                residual[p] -= step * load[p]
                if share <= step * (1.0 + SHARE_SLACK):
                    residual[p] = 0.0
                    full[p] = True
                elif residual[p] <= saturated_below[p]:
                    residual[p] = max(residual[p], 0.0)
                    full[p] = True
                if full[p]:
                    open_count -= 1
                    is_open[p] = False
                    filled[nf] = p
                    nf += 1
            if by_ports:
                for f in range(nf):
                    p = filled[f]
                    # port_fill[p] is now the end of p's slice in by_port.
                    for j in range(port_start[p], port_fill[p]):
                        i = by_port[j]
                        if frozen[i]:
                            continue
                        frozen[i] = True
                        rates[order[i]] = level
                        if track:
                            freeze_round[i] = round_index
                            frozen_seq[segment + frozen_count] = i
                            frozen_count += 1
                        num_pending -= 1
                        load[src[i]] -= mult[i]
                        load[dst[i]] -= mult[i]
                    load[p] = 0.0
                round_index += 1
                continue
            kept = 0
            for j in range(num_pending):
                i = pending[j]
                if is_open[src[i]] and is_open[dst[i]]:
                    pending[kept] = i
                    kept += 1
                else:
                    rates[order[i]] = level
                    if track:
                        freeze_round[i] = round_index
                        frozen_seq[segment + frozen_count] = i
                        frozen_count += 1
                    load[src[i]] -= mult[i]
                    load[dst[i]] -= mult[i]
            if kept > 0 and 8 * (num_pending - kept) < num_pending:
                # Few froze: sort the rest by port (counting sort), visit filled ports.
                by_ports = True
                for t in range(nt):
                    port_fill[touched[t]] = 0
                for j in range(kept):
                    i = pending[j]
                    port_fill[src[i]] += 1
                    port_fill[dst[i]] += 1
                total = 0
                for t in range(nt):
                    p = touched[t]
                    port_start[p] = total
                    total += port_fill[p]
                    port_fill[p] = port_start[p]
                for j in range(kept):
                    i = pending[j]
                    by_port[port_fill[src[i]]] = i
                    port_fill[src[i]] += 1
                    by_port[port_fill[dst[i]]] = i
                    port_fill[dst[i]] += 1
            num_pending = kept
            round_index += 1
        if restart_round < 0:
            for j in range(n):
                frozen[live[j]] = False
                moving[num_moving] = order[live[j]]
                num_moving += 1
        else:
            # The moving list was compacted above; only the entries frozen in the rounds
            # run here can be marked.
            for j in range(segment + restart_frozen, segment + n):
                frozen[frozen_seq[j]] = False
            num_moving += n
        if logging:
            class_base[k] = base
            class_rounds[k] = round_index
            class_live[k] = n
            if base >= 0:
                next_row = base + round_index
        for t in range(nt):
            p = touched[t]
            load[p] = 0.0
            full[p] = False
    if logging:
        for k in range(reached, num_classes):
            class_base[k] = -1
    return num_moving, reached, rows_wanted


@njit(cache=True, nogil=True)
def _maxmin_classes_unlogged(*filling: Any) -> tuple[int, int]:  # pragma: no cover - compiled
    """:func:`_maxmin_classes` without a log: ``filling`` is its first 18 arguments,
    ``src`` to ``moving_start``. Each array argument costs a type check on every call
    from Python, and most fillings (small classes) log nothing."""
    no_int = np.zeros(0, dtype=np.int64)
    no_float = np.zeros(0)
    no_rows = np.zeros((0, 0))
    no_log = (
        no_int, no_float, no_rows, no_rows, no_float, no_float, no_int, no_int, no_int,
        no_int, no_int, no_int, 0, no_int,
    )  # fmt: skip
    count, reached, _ = _maxmin_classes(*(filling + no_log))
    return count, reached


LogArrays = tuple[
    np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
    np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
]  # fmt: skip
"""A round log's arrays, ``log_residual`` to ``freeze_round`` of :func:`_maxmin_classes`."""


class Scratch:
    """Work arrays for :func:`_maxmin_classes`, grown as needed and reused."""

    def __init__(self) -> None:
        self.moving = np.zeros(0, dtype=np.int64)
        self.live = np.zeros(0, dtype=np.int64)
        self.pending = np.zeros(0, dtype=np.int64)
        self.by_port = np.zeros(0, dtype=np.int64)
        self.frozen = np.zeros(0, dtype=np.bool_)
        self.backfill = np.zeros(0)
        """For :func:`madd_into`: the backfill's rates (zero but where the last filling
        wrote, cleared behind), the moving entries, the admitted coflow rows, and marks
        per row (zero, left so)."""
        self.combined = np.zeros(0, dtype=np.int64)
        self.admitted = np.zeros(0, dtype=np.int64)
        self.row_mark = np.zeros(0, dtype=np.uint8)

    def fit_madd(self, num_entries: int, num_rows: int) -> Scratch:
        if len(self.backfill) < num_entries:
            size = max(2 * num_entries, 1024)
            self.backfill = np.zeros(size)
            self.combined = np.zeros(size, dtype=np.int64)
        if len(self.admitted) < num_rows:
            size = max(2 * num_rows, 1024)
            self.admitted = np.zeros(size, dtype=np.int64)
            self.row_mark = np.zeros(size, dtype=np.uint8)
        return self

    def fit(self, count: int) -> Scratch:
        if len(self.live) < count:
            size = max(2 * count, 1024)
            self.moving = np.zeros(size, dtype=np.int64)
            self.live = np.zeros(size, dtype=np.int64)
            self.pending = np.zeros(size, dtype=np.int64)
            self.by_port = np.zeros(2 * size, dtype=np.int64)
            self.frozen = np.zeros(size, dtype=np.bool_)
        return self


class RoundLog:
    """What :func:`_maxmin_classes` logs of the large classes it fills, kept from one
    allocation to the next so that the next can restart a class at a later round.

    Valid while the entries' class order stays the same; :meth:`reset` when it
    changes. Rows are added (up to ``MAX_BYTES`` of them) when a filling wanted more."""

    MIN_LOGGED = 256
    """Live entries a class needs to be logged: below, a filling from its start is cheap."""
    MAX_BYTES = 32 << 20
    """The rows' memory at most (each row: a residual and a load per port)."""

    def __init__(self, num_ports: int) -> None:
        self.num_ports = num_ports
        self.max_rows = max(64, self.MAX_BYTES // (16 * max(num_ports, 1)))
        self.stats = np.zeros(2, dtype=np.int64)
        """Restarts inside a class, and replays that found a port filling sooner."""
        self._grow(0, 0, 0)

    def _grow(self, rows: int, classes: int, entries: int) -> None:
        self.residual = np.zeros((rows, self.num_ports))
        self.load = np.zeros((rows, self.num_ports))
        self.level = np.zeros(rows)
        self.step = np.zeros(rows)
        self.frozen_before = np.zeros(rows, dtype=np.int64)
        self.class_base = np.full(classes, -1, dtype=np.int64)
        self.class_rounds = np.zeros(classes, dtype=np.int64)
        self.class_live = np.zeros(classes, dtype=np.int64)
        self.frozen_seq = np.zeros(entries, dtype=np.int64)
        self.freeze_round = np.full(entries, -1, dtype=np.int64)

    def reset(self, num_classes: int, num_entries: int) -> None:
        """Forget every class (a new class order of ``num_entries`` entries)."""
        if len(self.class_base) < num_classes or len(self.frozen_seq) < num_entries:
            rows = len(self.level)
            self._grow(rows, 2 * num_classes, 2 * num_entries)
        else:
            self.class_base[:] = -1

    def kernel_arrays(self) -> LogArrays:
        """The log as :func:`_maxmin_classes` takes it, ``log_residual`` to
        ``freeze_round`` (:data:`NO_LOG`: no log)."""
        return (
            self.residual,
            self.load,
            self.level,
            self.step,
            self.frozen_before,
            self.class_base,
            self.class_rounds,
            self.class_live,
            self.frozen_seq,
            self.freeze_round,
        )

    def want_rows(self, rows: int) -> None:
        """A filling wanted ``rows`` rows: grow (forgetting the classes) if room is left."""
        if rows > len(self.level) and len(self.level) < self.max_rows:
            size = min(max(2 * rows, 64), self.max_rows)
            self._grow(size, len(self.class_base), len(self.frozen_seq))


NO_INT = np.zeros(0, dtype=np.int64)
"""An empty array standing for "none" in a compiled call (one type for every call)."""
NO_FLOAT = np.zeros(0)
_NO_ROWS = np.zeros((0, 0))
NO_LOG: LogArrays = (
    _NO_ROWS, _NO_ROWS, NO_FLOAT, NO_FLOAT, NO_INT, NO_INT, NO_INT, NO_INT, NO_INT, NO_INT
)  # fmt: skip
""":meth:`RoundLog.kernel_arrays` of no log: a filling without one."""


def maxmin_into(
    src_sorted: np.ndarray,
    dst_sorted: np.ndarray,
    mult_sorted: np.ndarray,
    order: np.ndarray,
    starts: np.ndarray,
    run_end: np.ndarray,
    residual: np.ndarray,
    saturated_below: np.ndarray,
    rates: np.ndarray,
    scratch: Scratch,
    first_class: int = 0,
    num_moving: int = 0,
    bounds: np.ndarray | None = None,
    moving_start: np.ndarray | None = None,
    log: RoundLog | None = None,
    finished: np.ndarray | None = None,
    finished_mult: np.ndarray | None = None,
) -> tuple[np.ndarray, int]:
    """:func:`_maxmin_classes` with ``scratch``'s arrays; returns the moving entries (a
    view into ``scratch``, valid until its next use) and the classes reached.

    With ``log`` (and ``bounds``), large classes are logged; with ``finished`` (sorted
    positions) and their former ``finished_mult`` too, ``first_class`` restarts at the
    round its first finished entry froze in, its moving entries left in
    ``scratch.moving`` after the first ``num_moving`` (there, the finished ones stay
    as holes: see :func:`_maxmin_classes`)."""
    scratch.fit(len(order))
    if bounds is None or moving_start is None:
        bounds = np.zeros((0, len(residual)))
        moving_start = np.zeros(0, dtype=np.int64)
    filling = (
        src_sorted,
        dst_sorted,
        mult_sorted,
        order,
        starts,
        run_end,
        residual,
        saturated_below,
        rates,
        scratch.moving,
        scratch.live,
        scratch.pending,
        scratch.by_port,
        scratch.frozen,
        first_class,
        num_moving,
        bounds,
        moving_start,
    )
    if log is None or bounds.shape[0] == 0 or len(log.class_base) < len(starts) - 1:
        count, reached = _maxmin_classes_unlogged(*filling)
        return scratch.moving[:count], reached
    count, reached, rows_wanted = _maxmin_classes(
        *filling,
        NO_INT if finished is None else finished,
        NO_FLOAT if finished_mult is None else finished_mult,
        *log.kernel_arrays(),
        RoundLog.MIN_LOGGED,
        log.stats,
    )
    log.want_rows(rows_wanted)
    return scratch.moving[:count], reached


@njit(cache=True, nogil=True)
def run_ends(dst_sorted: np.ndarray, starts: np.ndarray) -> np.ndarray:  # pragma: no cover
    """For each sorted position, the end of the run of positions with its receiver, cut
    at class boundaries (see :func:`_maxmin_classes`)."""
    out = np.empty(len(dst_sorted), dtype=np.int64)
    for k in range(len(starts) - 1):
        end = starts[k + 1]
        j = end - 1
        while j >= starts[k]:
            out[j] = end
            if j > starts[k] and dst_sorted[j - 1] != dst_sorted[j]:
                end = j
            j -= 1
    return out


def class_order(flow_class: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Entries by class, highest first (stable), and where each class starts (CSR)."""
    if flow_class.dtype != np.int64:
        flow_class = flow_class.astype(np.int64)  # classes are whole numbers
    return _class_order(flow_class)


@njit(cache=True, nogil=True)
def _class_order(flow_class: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """:func:`class_order` as a counting sort over the classes present (a numpy stable
    argsort and its boundary search cost more than the sort itself on the few hundred
    entries of a re-ranking)."""
    n = len(flow_class)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    top = flow_class.max()
    span = top - flow_class.min() + 1
    if span > 4 * n + 64:
        order = np.argsort(-flow_class, kind="mergesort").astype(np.int64)
    else:
        count = np.zeros(span + 1, dtype=np.int64)
        for i in range(n):
            count[top - flow_class[i] + 1] += 1
        for b in range(span):
            count[b + 1] += count[b]
        order = np.empty(n, dtype=np.int64)
        for i in range(n):
            b = top - flow_class[i]
            order[count[b]] = i
            count[b] += 1
    starts = np.empty(n + 1, dtype=np.int64)
    starts[0] = 0
    k = 1
    for j in range(1, n):
        if flow_class[order[j]] != flow_class[order[j - 1]]:
            starts[k] = j
            k += 1
    starts[k] = n
    return order, starts[: k + 1].copy()


def coflow_members(flow_coflow: np.ndarray, num_coflows: int) -> tuple[np.ndarray, np.ndarray]:
    """Entries grouped by coflow row (stable) and where each row starts (CSR)."""
    members = np.argsort(flow_coflow, kind="stable").astype(np.int64)
    starts = np.zeros(num_coflows + 1, dtype=np.int64)
    np.cumsum(np.bincount(flow_coflow, minlength=num_coflows), out=starts[1:])
    return members, starts


def maxmin_ordered(
    src_sorted: np.ndarray,
    dst_sorted: np.ndarray,
    mult_sorted: np.ndarray,
    order: np.ndarray,
    starts: np.ndarray,
    capacity: np.ndarray,
    saturated_below: np.ndarray,
    residual: np.ndarray | None = None,
    run_end: np.ndarray | None = None,
    scratch: Scratch | None = None,
) -> np.ndarray:
    """:func:`priority_maxmin` on entries already in class order (see :func:`class_order`):
    ``src_sorted = src[order]`` and so on. Rates come back in entry order."""
    rates = np.zeros(len(order))
    residual = capacity.astype(float).copy() if residual is None else residual
    maxmin_into(
        src_sorted,
        dst_sorted,
        mult_sorted,
        order,
        starts,
        run_ends(dst_sorted, starts) if run_end is None else run_end,
        residual,
        saturated_below,
        rates,
        Scratch() if scratch is None else scratch,
    )
    return rates


def priority_maxmin(
    src: np.ndarray,
    dst: np.ndarray,
    mult: np.ndarray,
    flow_class: np.ndarray,
    capacity: np.ndarray,
    residual: np.ndarray | None = None,
    saturated_below: np.ndarray | None = None,
) -> np.ndarray:
    """Strict priority by ``flow_class`` (higher first), per-flow max-min inside a class."""
    residual = capacity.astype(float).copy() if residual is None else residual
    if saturated_below is None:
        saturated_below = capacity * RELATIVE_TOLERANCE
    if len(src) == 0:
        return np.zeros(0)
    order, starts = class_order(flow_class)
    return maxmin_ordered(
        src[order].astype(np.int64),
        dst[order].astype(np.int64),
        mult[order].astype(float),
        order,
        starts,
        capacity,
        saturated_below.astype(float),
        residual,
    )


@njit(cache=True, nogil=True)
def _madd(
    src: np.ndarray,
    dst: np.ndarray,
    remaining: np.ndarray,
    members: np.ndarray,
    starts: np.ndarray,
    coflow_order: np.ndarray,
    residual: np.ndarray,
    saturated_below: np.ndarray,
    rates: np.ndarray,
    admitted: np.ndarray,
    blocked_at: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """MADD as :func:`sim.allocate.madd`: ``members`` lists one entry index per *flow*
    (an entry of ``mult`` flows appears ``mult`` times), in the reference's flow order,
    and ``remaining`` is per flow, so that each port's demand is the same sum in the
    same order as the per-flow model's.

    A coflow with a flow still to send at a saturated port gets nothing, so it is
    found by one scan that stops at the first such flow, before any demand is
    summed; where most coflows wait behind the first few (a trace under
    contention), that scan is most of the work. Once every port is saturated, no
    later coflow gets anything and the loop stops.

    ``blocked_at`` keeps, per coflow row, the slot in ``members`` of the flow that
    made it wait the last time (-1: none). That flow is checked first: a flow at a
    saturated port usually stays there from one event to the next, and a coflow
    that waits sums nothing, so where the scan finds its reason changes nothing
    but the time (on the whole FB2010 trace, the scans of waiting coflows were
    three quarters of MADD's flow visits).

    Only the admitted coflows' entries are written in ``rates``; the admitted coflow
    rows are listed in ``admitted``, and their count is returned."""
    num_ports = len(residual)
    demand = np.zeros(num_ports)
    touched = np.empty(num_ports, dtype=np.int64)
    listed = np.zeros(num_ports, dtype=np.bool_)
    num_admitted = 0
    open_count = 0
    for p in range(num_ports):
        if residual[p] > saturated_below[p]:
            open_count += 1
    for row in coflow_order:
        if open_count == 0:
            break
        lo = starts[row]
        hi = starts[row + 1]
        if lo == hi:
            continue
        hint = blocked_at[row]
        if hint >= 0:
            i = members[hint]
            if remaining[i] > 0.0:
                s = src[i]
                d = dst[i]
                if residual[s] <= saturated_below[s] or residual[d] <= saturated_below[d]:
                    continue  # it still waits
        # One pass checks the coflow's ports and sums its demand (flow by flow, as the
        # reference); a coflow that waits has its partial sums dropped. Its flows run
        # receiver by receiver: the receiver's demand is carried in a register over its
        # run (the same additions in the same order), not through memory from one flow
        # to the next.
        nt = 0
        wanted = False
        waits = False
        receiver = -1
        receiver_demand = 0.0
        for j in range(lo, hi):
            i = members[j]
            left = remaining[i]
            s = src[i]
            d = dst[i]
            if left > 0.0:
                wanted = True
                if residual[s] <= saturated_below[s] or residual[d] <= saturated_below[d]:
                    waits = True
                    blocked_at[row] = j
                    break
            if s == receiver:
                receiver_demand += left
            else:
                demand[s] += left
            if not listed[s]:
                listed[s] = True
                touched[nt] = s
                nt += 1
            if d != receiver:
                if receiver >= 0:
                    demand[receiver] = receiver_demand
                receiver = d
                receiver_demand = demand[d]
                if not listed[d]:
                    listed[d] = True
                    touched[nt] = d
                    nt += 1
            receiver_demand += left
        if receiver >= 0:
            demand[receiver] = receiver_demand
        if waits or not wanted:
            for t in range(nt):
                p = touched[t]
                demand[p] = 0.0
                listed[p] = False
            continue
        # Every port with demand is open here: each has a flow with bytes left,
        # and the scan above found all of those at open ports.
        alpha = np.inf
        for t in range(nt):
            p = touched[t]
            if demand[p] > 0.0:
                alpha = min(alpha, residual[p] / demand[p])
        for j in range(lo, hi):
            i = members[j]
            rates[i] = alpha * remaining[i]
        admitted[num_admitted] = row
        num_admitted += 1
        for t in range(nt):
            p = touched[t]
            if demand[p] > 0.0:
                residual[p] = max(residual[p] - alpha * demand[p], 0.0)
                if residual[p] <= saturated_below[p]:
                    open_count -= 1
            demand[p] = 0.0
            listed[p] = False
    return num_admitted


@njit(cache=True, nogil=True)
def _add_backfill(
    rates: np.ndarray,
    backfill: np.ndarray,
    backfill_moving: np.ndarray,
    admitted: np.ndarray,
    num_admitted: int,
    members: np.ndarray,
    starts: np.ndarray,
    rows: np.ndarray,
    first_slot: np.ndarray,
    row_mark: np.ndarray,
    moving: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """Add the backfill's rates to MADD's in ``rates`` (the reference's elementwise
    ``madd + backfill``; where MADD gave nothing that is ``0.0 + x``, which is ``x``) and
    list the entries with a positive rate in ``moving``, each coflow row's adjacent;
    return their count.

    Only the entries either part moved are visited: the backfill's ``backfill_moving``
    (in class order) and the flows of the ``admitted`` coflow rows
    (``members[starts[row]:starts[row + 1]]``, an entry of several flows as often;
    only its first appearance, marked in ``first_slot``, is listed). An admitted row's
    backfill entries are its flows too, so they are listed with the row. ``rows`` maps
    an entry to its row. ``row_mark`` (per row) is scratch, all zero, left so;
    ``backfill`` is cleared behind, so that it is all zero for the next filling."""
    for a in range(num_admitted):
        row_mark[admitted[a]] = 1
    count = 0
    for i in backfill_moving:
        rates[i] = rates[i] + backfill[i]
        backfill[i] = 0.0
        if row_mark[rows[i]] == 0 and rates[i] > 0.0:
            moving[count] = i
            count += 1
    for a in range(num_admitted):
        row = admitted[a]
        row_mark[row] = 0
        for j in range(starts[row], starts[row + 1]):
            i = members[j]
            if first_slot[j] and rates[i] > 0.0:
                moving[count] = i
                count += 1
    return count


def madd(
    src: np.ndarray,
    dst: np.ndarray,
    mult: np.ndarray,
    remaining: np.ndarray,
    flow_coflow: np.ndarray,
    coflow_order: np.ndarray,
    flow_class: np.ndarray,
    capacity: np.ndarray,
    blocked_at: np.ndarray | None = None,
) -> np.ndarray:
    """Varys' MADD in ``coflow_order`` (rows of ``flow_coflow``), then max-min backfill.

    ``remaining`` and the result are per flow (each of an entry's ``mult`` flows).
    ``blocked_at`` (per row, see :func:`_madd`; the flows of a row in flow order, one
    slot per flow) is read and updated if given.
    """
    if len(src) == 0:
        return np.zeros(0)
    flows = np.repeat(np.arange(len(src), dtype=np.int64), mult.astype(np.int64))
    # A row of ``coflow_order`` with no flows gets an empty slice (as in the reference),
    # never a read past the end.
    rows = int(max(flow_coflow.max(), coflow_order.max(initial=0))) + 1
    members, starts = coflow_members(flow_coflow[flows], rows)
    members = flows[members]
    if blocked_at is not None:
        # The kernel reads the remembered slots unchecked: one outside its row's flows
        # would read past them.
        inside = (blocked_at >= starts[:-1]) & (blocked_at < starts[1:])
        if len(blocked_at) != rows or not ((blocked_at == -1) | inside).all():
            raise ValueError("blocked_at: one slot of the row's flows (or -1) per row")
    order, class_starts = class_order(flow_class)
    mult = mult.astype(float)
    src_sorted = src[order].astype(np.int64)
    dst_sorted = dst[order].astype(np.int64)
    rates = np.zeros(len(src))
    madd_into(
        src.astype(np.int64),
        dst.astype(np.int64),
        remaining.astype(float),
        members,
        starts,
        coflow_order.astype(np.int64),
        (order, class_starts, src_sorted, dst_sorted),
        mult[order],
        capacity,
        capacity * RELATIVE_TOLERANCE,
        run_ends(dst_sorted, class_starts),
        flow_coflow.astype(np.int64),
        first_slots(members),
        np.full(rows, -1, dtype=np.int64) if blocked_at is None else blocked_at,
        rates,
        Scratch(),
    )
    return rates


def first_slots(members: np.ndarray) -> np.ndarray:
    """Per slot of ``members`` (entry indices, one per flow): True where its entry
    appears for the first time, so that an entry of several flows is listed once."""
    first = np.zeros(len(members), dtype=np.bool_)
    first[np.unique(members, return_index=True)[1]] = True
    return first


def madd_into(
    src: np.ndarray,
    dst: np.ndarray,
    remaining: np.ndarray,
    members: np.ndarray,
    starts: np.ndarray,
    coflow_order: np.ndarray,
    classes: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    mult_sorted: np.ndarray,
    capacity: np.ndarray,
    saturated_below: np.ndarray,
    run_end: np.ndarray,
    rows: np.ndarray,
    first_slot: np.ndarray,
    blocked_at: np.ndarray,
    rates: np.ndarray,
    scratch: Scratch,
) -> np.ndarray:
    """:func:`madd` with each coflow's flows (``members``: entry indices, one per flow, in
    flow order, grouped by coflow row; ``starts``: where each row starts; ``rows``: each
    entry's row; ``first_slot``: per slot of ``members``, whether it is the entry's
    first (see :func:`first_slots`); ``blocked_at``: per row, see :func:`_madd`,
    kept by the caller while ``members`` stays the same) and the class order for the backfill
    (``classes``: order, class starts, sorted senders and receivers) given.
    ``remaining`` and the rates are per flow.

    The rates go to ``rates``, which must be zero everywhere (only the moving entries
    are written); the moving entries are returned, a view into ``scratch`` valid until
    its next use. Where each row's entries are contiguous in entry order (as the
    simulator keeps them), a row's moving entries are adjacent and in entry order.
    Nothing of the size of every entry is allocated or swept: at an event of a trace
    under contention MADD admits a few coflows and the backfill moves a fraction of
    the entries."""
    order, class_starts, src_sorted, dst_sorted = classes
    scratch.fit_madd(len(order), len(starts) - 1)
    residual = capacity.astype(float)  # a copy: MADD and the backfill use it up
    num_admitted = _madd(
        src,
        dst,
        remaining,
        members,
        starts,
        coflow_order,
        residual,
        saturated_below,
        rates,
        scratch.admitted,
        blocked_at,
    )
    backfill_moving, _ = maxmin_into(
        src_sorted,
        dst_sorted,
        mult_sorted,
        order,
        class_starts,
        run_end,
        residual,
        saturated_below,
        scratch.backfill,
        scratch,
    )
    count = _add_backfill(
        rates,
        scratch.backfill,
        backfill_moving,
        scratch.admitted,
        num_admitted,
        members,
        starts,
        rows,
        first_slot,
        scratch.row_mark,
        scratch.combined,
    )
    return scratch.combined[:count]


@njit(cache=True, nogil=True)
def _greedy(
    src: np.ndarray,
    dst: np.ndarray,
    mult: np.ndarray,
    order: np.ndarray,
    residual: np.ndarray,
    rates: np.ndarray,
) -> None:  # pragma: no cover - compiled
    for i in order:
        if mult[i] <= 0.0:
            continue
        s = src[i]
        d = dst[i]
        rate = min(residual[s], residual[d])
        if rate > 0.0:
            rates[i] = rate
            residual[s] -= rate
            residual[d] -= rate


def greedy(
    src: np.ndarray,
    dst: np.ndarray,
    mult: np.ndarray,
    flow_order: np.ndarray,
    capacity: np.ndarray,
) -> np.ndarray:
    """Each flow in ``flow_order`` takes min(residual at its two ports).

    Entries must stand for one flow each (``mult`` 1), or 0 for none: of
    identical flows the first would take what the others cannot.
    """
    residual = capacity.astype(float).copy()
    rates = np.zeros(len(src))
    _greedy(
        src.astype(np.int64),
        dst.astype(np.int64),
        mult.astype(float),
        flow_order.astype(np.int64),
        residual,
        rates,
    )
    return rates


@njit(cache=True, nogil=True)
def advance(
    rates: np.ndarray,
    remaining: np.ndarray,
    mult: np.ndarray,
    tolerance: np.ndarray,
    rows: np.ndarray,
    moving: np.ndarray,
    in_entry_order: np.ndarray,
    flow_start: np.ndarray,
    flows: np.ndarray,
    moved: np.ndarray,
    sent: np.ndarray,
    dirty: np.ndarray,
    done: np.ndarray,
    dt: float,
) -> tuple[float, int]:  # pragma: no cover - compiled
    """Move each flow of the ``moving`` entries ``rates × dt`` bytes (at most what it has
    left), as the per-flow model does; add to ``sent[row]`` each coflow's bytes of this
    interval, summed over its flows in the reference's flow order from zero and then
    added, as the reference's ``bincount`` does; mark the rows that moved in ``dirty``;
    list in ``done`` the entries that completed (at or below their ``tolerance``).
    Returns the bytes moved (all flows, added row by row: a total for the books, which
    nothing compares bit for bit) and the number of entries done.

    Entries without a rate (holes: see :func:`_maxmin_classes`) are skipped. The
    moving entries of a coflow row must be adjacent in ``moving`` and in entry
    order (the allocation gives them so). Where a row's flows are its entries in entry
    order, one entry per flow (``in_entry_order[row]``), the sum runs over those
    moving entries; otherwise over the row's flows, ``flows[flow_start[row]:
    flow_start[row + 1]]`` (entry indices, one per flow, in flow order), skipping
    those without a rate. The flows that do not move would add exact zeros.
    ``moved`` is scratch, one slot per entry."""
    total = 0.0
    num_done = 0
    count = len(moving)
    k = 0
    while k < count:
        row = rows[moving[k]]
        end = k
        acc = 0.0
        any_moved = False
        if in_entry_order[row]:
            # One flow per entry, in flow order: the row's sum is its flows' sum, and
            # its delivered bytes (one flow per entry) are that sum too. One running
            # sum per entry instead of two: the loop is bound by their additions.
            while end < count:
                i = moving[end]
                if rows[i] != row:
                    break
                end += 1
                rate = rates[i]
                if rate <= 0.0:
                    continue
                any_moved = True
                left = remaining[i]
                step = min(rate * dt, left)
                left -= step
                remaining[i] = left
                acc += step
                if left <= tolerance[i]:
                    done[num_done] = i
                    num_done += 1
            total += acc
        else:
            while end < count:
                i = moving[end]
                if rows[i] != row:
                    break
                end += 1
                if rates[i] <= 0.0:
                    continue
                any_moved = True
                step = min(rates[i] * dt, remaining[i])
                remaining[i] -= step
                moved[i] = step
                total += step * mult[i]
                if remaining[i] <= tolerance[i]:
                    done[num_done] = i
                    num_done += 1
            if any_moved:
                for j in range(flow_start[row], flow_start[row + 1]):
                    f = flows[j]
                    if rates[f] > 0.0:
                        acc += moved[f]
        if any_moved:
            sent[row] += acc
            dirty[row] = 1
        k = end
    return total, num_done


@njit(cache=True, nogil=True)
def row_rates(
    rates: np.ndarray,
    rows: np.ndarray,
    moving: np.ndarray,
    in_entry_order: np.ndarray,
    flow_start: np.ndarray,
    flows: np.ndarray,
    num_rows: int,
) -> np.ndarray:  # pragma: no cover - compiled
    """Each row's rate: the sum over its moving flows in flow order (as in
    :func:`advance`), which is ``numpy.bincount`` over the per-flow model's flows, bit for
    bit; rows without a moving entry get 0.

    As in :func:`advance`, a row whose flows are its entries in entry order, one each
    (``in_entry_order[row]``), sums its run of moving entries, which are those flows
    with a rate, in that order; holes add nothing. Other rows sum over all their flows,
    skipping those without a rate."""
    out = np.zeros(num_rows)
    done = np.zeros(num_rows, dtype=np.uint8)
    count = len(moving)
    k = 0
    while k < count:
        i = moving[k]
        row = rows[i]
        if in_entry_order[row]:
            acc = 0.0
            while k < count and rows[moving[k]] == row:
                rate = rates[moving[k]]
                if rate > 0.0:
                    acc += rate
                k += 1
            out[row] += acc  # from 0: the same sum
            continue
        k += 1
        if rates[i] <= 0.0 or done[row]:
            continue
        done[row] = 1
        acc = 0.0
        for j in range(flow_start[row], flow_start[row + 1]):
            f = flows[j]
            if rates[f] > 0.0:
                acc += rates[f]
        out[row] = acc
    return out


@njit(cache=True, nogil=True)
def first_threshold_s(
    thresholds: np.ndarray, sent: np.ndarray, row_rate: np.ndarray, now_s: float
) -> float:  # pragma: no cover - compiled
    """The first instant a moving row's sent bytes reach its threshold (NaN: none), as the
    per-flow model computes it: ``now + max(threshold - sent, 0) / rate``."""
    best = np.inf
    for row in range(len(thresholds)):
        if np.isnan(thresholds[row]) or row_rate[row] <= 0.0:
            continue
        gap = max(thresholds[row] - sent[row], 0.0)
        best = min(best, now_s + gap / row_rate[row])
    return best


@njit(cache=True, nogil=True)
def remaining_by_port(
    remaining: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    rows: np.ndarray,
    flows: np.ndarray,
    num_rows: int,
    num_ports: int,
) -> np.ndarray:  # pragma: no cover - compiled
    """Rows × ports: each flow's remaining bytes on its sender and receiver port, summed
    over ``flows`` in order (the reference's two ``bincount`` calls, whose port sets are
    disjoint, bit for bit)."""
    out = np.zeros(num_rows * num_ports)
    for i in flows:
        base = rows[i] * num_ports
        out[base + src[i]] += remaining[i]
        out[base + dst[i]] += remaining[i]
    return out.reshape(num_rows, num_ports)


@njit(cache=True, nogil=True)
def first_completion_s(
    rates: np.ndarray, remaining: np.ndarray, moving: np.ndarray
) -> float:  # pragma: no cover - compiled
    """The shortest time to completion among the ``moving`` entries (inf: none moves).

    An entry whose remaining bytes exceed its rate times the best time so far by a
    relative margin far above rounding cannot improve on it (its exact quotient is
    larger, so its rounded one is no smaller): it is skipped without the division."""
    best = np.inf
    for i in moving:
        rate = rates[i]
        if rate > 0.0 and remaining[i] <= best * rate * (1.0 + 1e-9):
            best = min(best, remaining[i] / rate)
    return best


@njit(cache=True, nogil=True)
def finish_entries(
    done: np.ndarray,
    num_done: int,
    remaining: np.ndarray,
    rates: np.ndarray,
    mult: np.ndarray,
    tolerance: np.ndarray,
    owner: np.ndarray,
    position: np.ndarray,
    mult_sorted: np.ndarray,
    class_starts: np.ndarray,
    out_owner: np.ndarray,
    out_count: np.ndarray,
    out_position: np.ndarray,
) -> tuple[float, int]:  # pragma: no cover - compiled
    """Retire the first ``num_done`` entries of ``done`` (sorted here, in place): each
    one's owner, flows and sorted position go to ``out_*``, its remaining bytes, rate
    and flows to zero and its tolerance to -1. With a class order (``position`` not
    empty) its flows leave ``mult_sorted`` too. Returns the bytes the retired flows
    still held and the highest class that lost an entry (``len(class_starts)``
    without a class order; pass :data:`NO_INT` and :data:`NO_FLOAT` for it). One call
    instead of a dozen numpy calls per completion."""
    for a in range(1, num_done):  # insertion sort: usually one or two entries
        value = done[a]
        b = a - 1
        while b >= 0 and done[b] > value:
            done[b + 1] = done[b]
            b -= 1
        done[b + 1] = value
    held = 0.0
    lowest = -1
    for j in range(num_done):
        i = done[j]
        count = mult[i]
        out_owner[j] = owner[i]
        out_count[j] = count
        held += remaining[i] * count
        remaining[i] = 0.0
        rates[i] = 0.0
        mult[i] = 0
        tolerance[i] = -1.0
        if len(position) > 0:
            where = position[i]
            out_position[j] = where
            mult_sorted[where] = 0.0
            if lowest < 0 or where < lowest:
                lowest = where
    first = len(class_starts)
    if lowest >= 0:
        # The class whose range holds the lowest position: the last start at or below it.
        lo, hi = 0, len(class_starts)
        while lo < hi:
            mid = (lo + hi) // 2
            if class_starts[mid] <= lowest:
                lo = mid + 1
            else:
                hi = mid
        first = lo - 1
    return held, first


@njit(cache=True, nogil=True)
def completed(
    remaining: np.ndarray, tolerance: np.ndarray, candidates: np.ndarray
) -> np.ndarray:  # pragma: no cover - compiled
    """The ``candidates`` whose remaining bytes are at or below their tolerance, sorted."""
    count = 0
    for i in candidates:
        if remaining[i] <= tolerance[i]:
            count += 1
    out = np.empty(count, dtype=np.int64)
    count = 0
    for i in candidates:
        if remaining[i] <= tolerance[i]:
            out[count] = i
            count += 1
    out.sort()
    return out
