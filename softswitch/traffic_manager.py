"""Egress traffic manager: per-port strict-priority queues drained at a line rate.

A real switch port holds N queues and one transmitter. The transmitter sends
one packet at a time, always from the highest-priority non-empty queue, and is
busy for ``max(1 / rate_pps, 8 * length / rate_bps)`` seconds per packet: a
token bucket whose bucket holds one packet. That single port-level rate is what
turns priorities into a strict-priority bottleneck, which Beamer relies on.

BMv2's simple_switch works differently: it has no port-level rate and shapes
each priority queue on its own (a packet's send time is fixed on enqueue at
``max(now, previous send time of that queue + 1 / rate)``; the scheduler takes
the highest-priority queue whose head may be sent). Both mechanisms live here:
every queue may carry its own shaper and every port a transmitter rate. The
``per_queue_shaping`` mode only decides where a port-wide rate goes: to the
transmitter (default, a real port) or to each of the port's queues (BMv2).

Queue 0 is the lowest priority, queue N-1 the highest (v1model semantics);
FIFO inside a queue; tail drop at a depth counted in packets. Time is passed in
by the caller, so the same code runs in virtual time (exact tests) and in real
time (Linux interfaces).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Generic, TypeVar

ItemT = TypeVar("ItemT")

DEFAULT_PRIORITY_QUEUES = 8
"""Beamer's classes need eight queues; BMv2 defaults to one unless ``--priority-queues``."""

DEFAULT_QUEUE_DEPTH_PACKETS = 64
"""simple_switch's default egress queue capacity."""


RATE_PPS_RANGE = (1e-3, 1e12)
"""Packets per second a port or queue may be shaped at: below, one packet would hold a
port for hours; above, shaping means nothing to a software switch."""
RATE_BPS_RANGE = (1e3, 1e15)
"""Bits per second, likewise (the workloads' and topologies' link rates)."""


@dataclass(frozen=True, slots=True)
class Rate:
    """A shaping rate; ``None`` in both fields means unlimited."""

    pps: float | None = None
    bps: float | None = None

    def __post_init__(self) -> None:
        for name, value, (low, high) in (
            ("rate_pps", self.pps, RATE_PPS_RANGE),
            ("rate_bps", self.bps, RATE_BPS_RANGE),
        ):
            if value is not None and not low <= value <= high:
                raise ValueError(f"{name} must be a number in {low:g}..{high:g}, got {value!r}")

    @property
    def unlimited(self) -> bool:
        return self.pps is None and self.bps is None

    def transmit_time_s(self, length_bytes: int) -> float:
        """Time one packet of ``length_bytes`` occupies a server of this rate."""
        time_s = 0.0
        if self.pps is not None:
            time_s = 1.0 / self.pps
        if self.bps is not None:
            time_s = max(time_s, 8.0 * length_bytes / self.bps)
        return time_s


UNLIMITED = Rate()


class EnqueueOutcome(Enum):
    QUEUED = "queued"
    TAIL_DROP = "tail_drop"
    PRIORITY_OUT_OF_RANGE = "priority_out_of_range"


@dataclass(slots=True)
class _Entry(Generic[ItemT]):
    item: ItemT
    length_bytes: int
    enqueue_time_s: float
    eligible_time_s: float
    enq_qdepth: int


@dataclass(slots=True)
class Dequeued(Generic[ItemT]):
    """A packet leaving its queue, with the queueing metadata v1model exposes."""

    item: ItemT
    port: int
    priority: int
    length_bytes: int
    start_time_s: float
    """When its transmission starts (departure timestamp of the port)."""
    enqueue_time_s: float
    enq_qdepth: int
    """Packets in its queue when it arrived (before it was added), as simple_switch."""
    deq_qdepth: int
    """Packets left in its queue after it was taken out."""

    @property
    def deq_timedelta_s(self) -> float:
        return self.start_time_s - self.enqueue_time_s


@dataclass(slots=True)
class QueueCounters:
    enqueued_packets: int = 0
    enqueued_bytes: int = 0
    dequeued_packets: int = 0
    dequeued_bytes: int = 0
    tail_drop_packets: int = 0
    tail_drop_bytes: int = 0


@dataclass(slots=True)
class PriorityQueue(Generic[ItemT]):
    """One FIFO with a depth limit and an optional shaper of its own (BMv2 style)."""

    capacity_packets: int
    rate: Rate = UNLIMITED
    entries: deque[_Entry[ItemT]] = field(default_factory=deque)
    last_eligible_s: float = -math.inf
    counters: QueueCounters = field(default_factory=QueueCounters)

    def __len__(self) -> int:
        return len(self.entries)


@dataclass(slots=True)
class PortCounters:
    transmitted_packets: int = 0
    transmitted_bytes: int = 0
    priority_out_of_range_packets: int = 0


class EgressPort(Generic[ItemT]):
    """N strict-priority queues of one port and the transmitter that drains them."""

    def __init__(
        self,
        port: int,
        priority_queues: int,
        capacity_packets: int,
        *,
        max_lag_s: float = 0.0,
    ) -> None:
        if priority_queues < 1:
            raise ValueError(f"priority_queues must be at least 1, got {priority_queues}")
        if capacity_packets < 1:
            raise ValueError(f"queue depth must be at least 1 packet, got {capacity_packets}")
        self.port = port
        self.queues: list[PriorityQueue[ItemT]] = [
            PriorityQueue(capacity_packets) for _ in range(priority_queues)
        ]
        self.rate: Rate = UNLIMITED
        self.free_at_s = -math.inf
        self.max_lag_s = max_lag_s
        self.backlog_packets = 0
        self.counters = PortCounters()
        self._high_first = tuple(range(priority_queues - 1, -1, -1))

    # -- configuration -------------------------------------------------------------

    def set_queue_rate(self, rate: Rate, priority: int | None) -> None:
        """Shape one queue (or, with ``priority=None``, each queue) on its own."""
        targets = self.queues if priority is None else [self._queue(priority)]
        for queue in targets:
            queue.rate = rate

    def set_port_rate(self, rate: Rate) -> None:
        self.rate = rate

    def set_depth(self, capacity_packets: int, priority: int | None) -> None:
        if capacity_packets < 1:
            raise ValueError(f"queue depth must be at least 1 packet, got {capacity_packets}")
        targets = self.queues if priority is None else [self._queue(priority)]
        for queue in targets:
            queue.capacity_packets = capacity_packets

    def _queue(self, priority: int) -> PriorityQueue[ItemT]:
        if not 0 <= priority < len(self.queues):
            raise ValueError(
                f"priority {priority} out of range: port {self.port} has {len(self.queues)} queues"
            )
        return self.queues[priority]

    # -- data path -----------------------------------------------------------------

    def enqueue(
        self, item: ItemT, priority: int, length_bytes: int, now_s: float
    ) -> EnqueueOutcome:
        if not 0 <= priority < len(self.queues):
            self.counters.priority_out_of_range_packets += 1
            return EnqueueOutcome.PRIORITY_OUT_OF_RANGE
        queue = self.queues[priority]
        depth = len(queue.entries)
        if depth >= queue.capacity_packets:
            queue.counters.tail_drop_packets += 1
            queue.counters.tail_drop_bytes += length_bytes
            return EnqueueOutcome.TAIL_DROP
        eligible_s = now_s
        if not queue.rate.unlimited:
            # BMv2: the send time is fixed on arrival from the queue's previous one.
            eligible_s = max(
                now_s, queue.last_eligible_s + queue.rate.transmit_time_s(length_bytes)
            )
            queue.last_eligible_s = eligible_s
        queue.entries.append(_Entry(item, length_bytes, now_s, eligible_s, depth))
        queue.counters.enqueued_packets += 1
        queue.counters.enqueued_bytes += length_bytes
        self.backlog_packets += 1
        return EnqueueOutcome.QUEUED

    def next_departure_s(self) -> float | None:
        """Earliest time a packet may start transmission, ``None`` when nothing is queued."""
        if self.backlog_packets == 0:
            return None
        free_at_s = self.free_at_s
        earliest_s = math.inf
        for queue in self.queues:
            if queue.entries:
                eligible_s = queue.entries[0].eligible_time_s
                if eligible_s <= free_at_s:
                    return free_at_s  # a head is ready: the transmitter decides
                earliest_s = min(earliest_s, eligible_s)
        return earliest_s

    def dequeue(self, now_s: float) -> Dequeued[ItemT] | None:
        """Take the highest-priority packet allowed to start by ``now_s``, if any.

        The caller transmits it and then reports its real length through
        :meth:`transmitted`, which is when the transmitter becomes busy.
        """
        if self.backlog_packets == 0 or self.free_at_s > now_s:
            return None
        queues = self.queues
        for priority in self._high_first:
            entries = queues[priority].entries
            if not entries or entries[0].eligible_time_s > now_s:
                continue
            queue = queues[priority]
            entry = entries.popleft()
            self.backlog_packets -= 1
            counters = queue.counters
            counters.dequeued_packets += 1
            counters.dequeued_bytes += entry.length_bytes
            # Real time: a late service loop catches up on the nominal schedule,
            # but never by more than max_lag_s (a bounded burst) nor before the
            # packet may go (eligible_time_s is never before its arrival).
            start_s = max(self.free_at_s, entry.eligible_time_s, now_s - self.max_lag_s)
            return Dequeued(
                entry.item,
                self.port,
                priority,
                entry.length_bytes,
                start_s,
                entry.enqueue_time_s,
                entry.enq_qdepth,
                len(entries),
            )
        return None

    def transmitted(self, start_s: float, length_bytes: int | None) -> None:
        """Occupy the transmitter for a packet that went out (``None``: egress dropped it)."""
        if length_bytes is None:
            return
        self.counters.transmitted_packets += 1
        self.counters.transmitted_bytes += length_bytes
        if not self.rate.unlimited:
            self.free_at_s = start_s + self.rate.transmit_time_s(length_bytes)

    def clear(self) -> int:
        """Drop every queued packet (pipeline swap); returns how many were dropped."""
        dropped = self.backlog_packets
        for queue in self.queues:
            queue.entries.clear()
        self.backlog_packets = 0
        return dropped


class TrafficManager(Generic[ItemT]):
    """The egress ports of one switch and the rate/depth configuration API."""

    def __init__(
        self,
        priority_queues: int = DEFAULT_PRIORITY_QUEUES,
        queue_depth_packets: int = DEFAULT_QUEUE_DEPTH_PACKETS,
        *,
        per_queue_shaping: bool = False,
        max_lag_s: float = 0.0,
    ) -> None:
        if not 1 <= priority_queues <= 8:
            # standard_metadata.priority is 3 bits wide.
            raise ValueError(f"priority queues must be between 1 and 8, got {priority_queues}")
        if queue_depth_packets < 1:
            raise ValueError(f"queue depth must be at least 1 packet, got {queue_depth_packets}")
        self.priority_queues = priority_queues
        self.per_queue_shaping = per_queue_shaping
        self.max_lag_s = max_lag_s
        self._default_depth_packets = queue_depth_packets
        self._default_rate = UNLIMITED
        self.ports: dict[int, EgressPort[ItemT]] = {}

    def add_port(self, port: int) -> EgressPort[ItemT]:
        if port in self.ports:
            raise ValueError(f"port {port} already exists")
        egress = EgressPort[ItemT](
            port, self.priority_queues, self._default_depth_packets, max_lag_s=self.max_lag_s
        )
        self._apply_rate(egress, self._default_rate, None)
        self.ports[port] = egress
        return egress

    def _targets(self, port: int | None) -> Iterable[EgressPort[ItemT]]:
        if port is None:
            return list(self.ports.values())
        if port not in self.ports:
            raise ValueError(f"no port {port} (ports: {sorted(self.ports)})")
        return [self.ports[port]]

    def _apply_rate(self, egress: EgressPort[ItemT], rate: Rate, priority: int | None) -> None:
        if priority is not None:
            egress.set_queue_rate(rate, priority)
        elif self.per_queue_shaping:
            egress.set_queue_rate(rate, None)
        else:
            egress.set_port_rate(rate)

    def set_rate(self, rate: Rate, port: int | None = None, priority: int | None = None) -> None:
        """Port-wide rate (``priority=None``) or one queue's own shaper.

        A port-wide rate goes to the transmitter, or to every queue of the port in
        per-queue shaping mode (BMv2's ``set_queue_rate R port``). ``port=None``
        applies to every port, present and future.
        """
        if priority is not None and not 0 <= priority < self.priority_queues:
            raise ValueError(
                f"priority {priority} out of range: {self.priority_queues} queues per port"
            )
        if port is None and priority is None:
            self._default_rate = rate
        for egress in self._targets(port):
            self._apply_rate(egress, rate, priority)

    def set_depth(
        self, capacity_packets: int, port: int | None = None, priority: int | None = None
    ) -> None:
        if priority is not None and not 0 <= priority < self.priority_queues:
            raise ValueError(
                f"priority {priority} out of range: {self.priority_queues} queues per port"
            )
        if capacity_packets < 1:
            raise ValueError(f"queue depth must be at least 1 packet, got {capacity_packets}")
        if port is None and priority is None:
            self._default_depth_packets = capacity_packets
        for egress in self._targets(port):
            egress.set_depth(capacity_packets, priority)

    def next_departure_s(self) -> float | None:
        earliest_s: float | None = None
        for port in self.ports.values():
            if port.backlog_packets:
                time_s = port.next_departure_s()
                if time_s is not None and (earliest_s is None or time_s < earliest_s):
                    earliest_s = time_s
        return earliest_s

    @property
    def backlog_packets(self) -> int:
        return sum(port.backlog_packets for port in self.ports.values())

    def clear(self) -> int:
        return sum(port.clear() for port in self.ports.values())
