"""Quiet events in one compiled call: flow completions that change no coflow's membership.

On a shuffle trace under contention nearly every event is a flow finishing
inside a coflow that goes on: no arrival, no coflow completion, no
re-ranking, only the rates of the classes from the finished flow's class
down. Run event by event from Python, such an event cost about as much in
the calls around the kernels (advance, retire, refill, next completion) as
in the kernels. :func:`quiet_events` runs a stretch of them in one call, the
same kernels in the same order with the same arguments, so every number is
the one the event-by-event loop computes, bit for bit. It stops where Python
has work to do: the next event of the heap is due, a coflow is about to
complete, or the round log wants more rows.

Only the strict-priority allocator runs here
(:meth:`sim.fast.FastSimulation._quiet_events` checks); the rest of the loop
stays in :meth:`sim.engine.Simulation.run`. A coflow's re-ranking threshold
(Aalo, FIFO-LM) due first also stops the stretch: the re-ranking is Python's.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from sim.kernels import (
    _maxmin_classes,
    advance,
    finish_entries,
    first_completion_s,
    first_threshold_s,
    row_rates,
)

MAX_EVENTS = 1024
"""Events per call at most (the default): a signal (Ctrl-C) is handled only between calls,
and an event on the whole FB2010 trace takes up to about 0.4 ms."""

STOP_DUE = 0
"""Stopped before an event that Python runs: the heap's next event is due first, or
nothing moves."""
STOP_COFLOW_DONE = 1
"""Stopped after an advance whose finished flows complete a coflow (Python retires them)."""
STOP_LOG_ROWS = 2
"""Stopped after a filling that wanted more round-log rows than the log has."""
STOP_MAX_EVENTS = 3
STOP_THRESHOLD = 4
"""Stopped before an event at which a coflow's sent bytes reach its re-ranking threshold
(Python runs it, and re-ranks)."""

# Slots of the ``state`` array (in and out).
NUM_MOVING, REACHED, EVENTS, DEAD, NUM_DONE, STOP, STALLED, ROWS_WANTED = range(8)
STATE_SLOTS = 8


@njit(cache=True, nogil=True)
def quiet_events(
    now_s: float,
    next_s: float,
    max_events: int,
    delivered: np.ndarray,
    state: np.ndarray,
    # the advance
    rates: np.ndarray,
    remaining: np.ndarray,
    mult: np.ndarray,
    tolerance: np.ndarray,
    rows: np.ndarray,
    in_entry_order: np.ndarray,
    flow_start: np.ndarray,
    flows: np.ndarray,
    moved: np.ndarray,
    sent: np.ndarray,
    dirty: np.ndarray,
    done: np.ndarray,
    thresholds: np.ndarray,
    # retiring finished entries
    owner: np.ndarray,
    position: np.ndarray,
    mult_sorted: np.ndarray,
    starts: np.ndarray,
    out_owner: np.ndarray,
    out_count: np.ndarray,
    out_position: np.ndarray,
    flows_left: np.ndarray,
    row_changed: np.ndarray,
    # the filling
    src_sorted: np.ndarray,
    dst_sorted: np.ndarray,
    order: np.ndarray,
    run_end: np.ndarray,
    capacity: np.ndarray,
    saturated_below: np.ndarray,
    moving: np.ndarray,
    live: np.ndarray,
    pending: np.ndarray,
    by_port: np.ndarray,
    frozen: np.ndarray,
    bounds: np.ndarray,
    moving_start: np.ndarray,
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
    log_stats: np.ndarray,
    log_max_rows: int,
) -> float:  # pragma: no cover - compiled
    """Run quiet events from ``now_s`` until one of the ``STOP_*`` reasons (at most
    ``max_events``); returns the clock. ``delivered[0]`` (the run's delivered bytes)
    grows by the same additions, in the same order, as event by event.

    Per event, as :meth:`sim.engine.Simulation.run` with :class:`sim.fast.FastSimulation`:
    the next completion (:func:`first_completion_s`, stepping one unit in the last place
    where a completion rounds back onto the clock) unless a threshold of ``thresholds``
    (per coflow row, NaN: none; empty: the policy sets none) or the heap's next event at
    ``next_s`` comes first, the advance, then the retiring of
    the finished entries (:func:`finish_entries`) and the refill from the highest class
    that lost one (as ``FastSimulation._allocate_priority``). ``state`` carries the
    moving entries' count (``moving[:count]``), the classes reached and the stall flag
    in and out, and gives back the events run, the entries retired, the entries done
    by an advance not yet retired (``STOP_COFLOW_DONE``), why it stopped and the log
    rows a filling wanted. ``flows_left`` (per coflow row) loses the retired flows, and
    ``row_changed`` marks their rows. Log arrays of no rows (and an empty
    ``class_base``) fill without a log.
    """
    num_classes = len(starts) - 1
    num_moving = state[NUM_MOVING]
    reached = state[REACHED]
    stalled = state[STALLED] != 0
    logging = class_base.shape[0] >= num_classes
    events = 0
    dead = 0
    stop = STOP_MAX_EVENTS
    num_pending_done = -1
    rows_wanted = 0
    total = delivered[0]
    no_int = np.zeros(0, dtype=np.int64)
    no_float = np.zeros(0)
    has_thresholds = len(thresholds) > 0
    row_rate = no_float
    row_rate_stale = True
    while events < max_events:
        flow_end_s = now_s + first_completion_s(rates, remaining, moving[:num_moving])
        threshold_s = np.inf
        if has_thresholds:
            if row_rate_stale:
                row_rate = row_rates(
                    rates, rows, moving[:num_moving], in_entry_order, flow_start, flows,
                    len(sent),
                )  # fmt: skip
                row_rate_stale = False
            threshold_s = first_threshold_s(thresholds, sent, row_rate, now_s)
        until_s = min(next_s, flow_end_s, threshold_s)
        if until_s >= next_s or until_s == np.inf:
            stop = STOP_DUE
            break
        if until_s <= now_s and (flow_end_s <= now_s or stalled):
            until_s = np.nextafter(now_s, np.inf)
        if until_s == threshold_s:
            stop = STOP_THRESHOLD
            break
        stalled = until_s <= now_s
        dt = until_s - now_s
        num_done = 0
        if dt > 0 and len(remaining) > 0:
            moved_bytes, num_done = advance(
                rates, remaining, mult, tolerance, rows, moving[:num_moving], in_entry_order,
                flow_start, flows, moved, sent, dirty, done, dt,
            )  # fmt: skip
            total += moved_bytes
        now_s = until_s
        events += 1
        if num_done == 0:
            continue
        row_rate_stale = True
        # A coflow that completes goes back to Python (its completion re-ranks).
        for j in range(num_done):
            flows_left[rows[done[j]]] -= mult[done[j]]
        completes = False
        for j in range(num_done):
            if flows_left[rows[done[j]]] == 0:
                completes = True
        if completes:
            for j in range(num_done):
                flows_left[rows[done[j]]] += mult[done[j]]
            num_pending_done = num_done
            stop = STOP_COFLOW_DONE
            break
        for j in range(num_done):
            row_changed[rows[done[j]]] = 1
        held, first = finish_entries(
            done, num_done, remaining, rates, mult, tolerance, owner, position, mult_sorted,
            starts, out_owner, out_count, out_position,
        )  # fmt: skip
        total += held
        dead += num_done
        first = min(first, num_classes)
        if first >= reached and first > 0:
            continue  # every port was full above the classes that changed: no rate moves
        keep = moving_start[first] if first > 0 else 0
        restart = logging and first < reached and class_base[first] >= 0
        start_from = keep
        if restart:
            start_from = moving_start[first + 1] if first + 1 < reached else num_moving
        if start_from == 0:
            rates[:] = 0.0
        else:
            for j in range(start_from, num_moving):
                rates[moving[j]] = 0.0
        residual = bounds[first].copy() if first > 0 else capacity.copy()
        finished = out_position[:num_done].copy() if restart else no_int
        finished_mult = out_count[:num_done].astype(np.float64) if restart else no_float
        num_moving, reached, rows_wanted = _maxmin_classes(
            src_sorted, dst_sorted, mult_sorted, order, starts, run_end, residual,
            saturated_below, rates, moving, live, pending, by_port, frozen, first, keep,
            bounds, moving_start, finished, finished_mult, log_residual, log_load, log_level,
            log_step, log_frozen_before, class_base, class_rounds, class_live, frozen_seq,
            freeze_round, min_logged, log_stats,
        )  # fmt: skip
        if logging and rows_wanted > len(log_level) and len(log_level) < log_max_rows:
            stop = STOP_LOG_ROWS
            break
    delivered[0] = total
    state[NUM_MOVING] = num_moving
    state[REACHED] = reached
    state[EVENTS] = events
    state[DEAD] = dead
    state[NUM_DONE] = num_pending_done
    state[STOP] = stop
    state[STALLED] = 1 if stalled else 0
    state[ROWS_WANTED] = rows_wanted
    return now_s
