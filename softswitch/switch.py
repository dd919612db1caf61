"""The embedded switch: ports → pipeline ingress → traffic manager → egress → ports.

Two clocks drive it. In virtual time (:class:`VirtualClock`) nothing happens
until the caller moves time on with :meth:`Switch.advance` or
:meth:`Switch.run_until_idle`; every departure then happens at its exact
nominal instant, so rate-limited ordering is tested exactly, not timed. In real
time (:class:`RealClock`) :meth:`Switch.start` runs one pipeline thread that
waits on every Linux port with ``epoll``, runs ingress for what arrives and
transmits what the traffic manager releases when it is due.

Tables are programmed by P4 names through ``switch.tables`` (a
:class:`TableWriter`, simple_switch_CLI style) or by P4Info ids through
``switch.pipeline.runtime`` (a :class:`softswitch.runtime.RuntimeState`), the
same state the P4Runtime server writes to.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import math
import os
import select
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from softswitch.ports import DROP_PORT, LinuxPort, MemoryPort, Port
from softswitch.runtime import (
    MATCH_EXACT,
    MATCH_LPM,
    MATCH_OPTIONAL,
    MATCH_RANGE,
    MATCH_TERNARY,
    ActionCall,
    ExactMatch,
    FieldMatch,
    LpmMatch,
    OptionalMatch,
    RangeMatch,
    RuntimeState,
    TableEntry,
    TableState,
    TernaryMatch,
)
from softswitch.traffic_manager import (
    DEFAULT_PRIORITY_QUEUES,
    DEFAULT_QUEUE_DEPTH_PACKETS,
    EgressPort,
    EnqueueOutcome,
    QueueCounters,
    Rate,
    TrafficManager,
)

if TYPE_CHECKING:
    from softswitch.frontend import CompiledProgram
    from softswitch.pipeline import Pipeline

log = logging.getLogger(__name__)

RECEIVE_BATCH_FRAMES = 64
"""Frames read from one socket before the loop lets egress run again."""
IDLE_WAIT_S = 0.2
"""Longest epoll wait; stop() also wakes the loop at once through a pipe."""
REAL_TIME_MAX_LAG_S = 0.005
"""How far a late loop may catch up on a port's schedule (bounds the burst it sends)."""


class Clock(Protocol):
    def now_s(self) -> float: ...


class RealClock:
    """Monotonic wall-clock time, for Linux interfaces."""

    def now_s(self) -> float:
        return time.monotonic()


class VirtualClock:
    """Time that moves only when told to: exact, repeatable tests."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._now_s = start_s

    def now_s(self) -> float:
        return self._now_s

    def set(self, time_s: float) -> None:
        if time_s < self._now_s:
            raise ValueError(f"virtual time cannot go back from {self._now_s} to {time_s}")
        self._now_s = time_s


class QueuedPacket(Protocol):
    """What the traffic manager reads of a packet between ingress and egress."""

    @property
    def egress_port(self) -> int: ...
    @property
    def priority(self) -> int: ...
    @property
    def length_bytes(self) -> int: ...


class PacketPipeline(Protocol):
    """The pipeline interface the switch drives (``softswitch.pipeline.Pipeline``)."""

    def ingress(self, ingress_port: int, packet: bytes) -> Sequence[QueuedPacket]: ...

    def egress(self, queued: Any, enq_qdepth: int = 0) -> bytes | None:
        """``queued`` is one of the objects this pipeline's ingress returned."""
        ...


@dataclass(slots=True)
class SwitchCounters:
    """Where packets went that never reached a queue or a wire."""

    received_packets: int = 0
    no_pipeline_drops: int = 0
    """Arrived before any program was loaded (``--no-p4`` until configured)."""
    ingress_drops: int = 0
    """The program dropped them in ingress (mark_to_drop, egress_spec 511, parse errors)."""
    unknown_port_drops: int = 0
    """Sent to a port number that no interface is attached to (egress ran, as on
    simple_switch, then the frame was lost)."""
    priority_drops: int = 0
    """Priority at or above the number of queues, dropped like simple_switch does."""
    tail_drops: int = 0
    egress_drops: int = 0
    transmit_errors: int = 0
    pipeline_errors: int = 0
    """Exceptions raised inside the pipeline: the packet is dropped, the switch lives on."""
    flushed_packets: int = 0
    """Queued packets discarded when a new program replaced the old one."""


class Switch:
    """Ports, a loaded P4 pipeline and a strict-priority traffic manager."""

    def __init__(
        self,
        *,
        priority_queues: int = DEFAULT_PRIORITY_QUEUES,
        queue_depth_packets: int = DEFAULT_QUEUE_DEPTH_PACKETS,
        per_queue_shaping: bool = False,
        clock: Clock | None = None,
        device_id: int = 0,
    ) -> None:
        self.clock: Clock = clock if clock is not None else RealClock()
        self.virtual_time = isinstance(self.clock, VirtualClock)
        self.device_id = device_id
        self.traffic_manager = TrafficManager[QueuedPacket](
            priority_queues,
            queue_depth_packets,
            per_queue_shaping=per_queue_shaping,
            max_lag_s=0.0 if self.virtual_time else REAL_TIME_MAX_LAG_S,
        )
        self.ports: dict[int, Port] = {}
        self.counters = SwitchCounters()
        self._pipeline: PacketPipeline | None = None
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        # The wake-up pipe exists only while the pipeline thread runs.
        self._wake_fds: tuple[int, int] | None = None
        self._wake_lock = threading.Lock()
        self._closed = False
        self.failure: BaseException | None = None
        """Set when the pipeline thread died of an unexpected error (the thread has ended)."""

    # -- ports ---------------------------------------------------------------------

    def add_port(self, number: int, port: Port) -> Port:
        """Attach ``port`` as port ``number`` (before :meth:`start`)."""
        if not 0 <= number < DROP_PORT:
            raise ValueError(f"port number must be between 0 and {DROP_PORT - 1}, got {number}")
        if self._thread is not None:
            raise RuntimeError("add ports before starting the switch")
        with self._lock:
            if number in self.ports:
                raise ValueError(f"port {number} is already attached to {self.ports[number].name}")
            self.traffic_manager.add_port(number)
            self.ports[number] = port
        return port

    def add_memory_port(self, number: int) -> MemoryPort:
        port = MemoryPort(f"mem{number}")
        self.add_port(number, port)
        return port

    def add_interface(self, number: int, interface: str, netns: str | None = None) -> LinuxPort:
        """Attach a Linux interface (optionally one inside network namespace ``netns``)."""
        port = LinuxPort(interface, netns=netns)
        try:
            self.add_port(number, port)
        except BaseException:
            port.close()
            raise
        return port

    # -- pipeline ------------------------------------------------------------------

    def load_pipeline(self, program: CompiledProgram) -> None:
        """Build an executable pipeline from a compiled program and swap it in."""
        from softswitch.pipeline import Pipeline

        self.set_pipeline(Pipeline(program))

    def set_pipeline(self, pipeline: PacketPipeline | None) -> None:
        """Swap the program; packets queued under the old one are discarded, as on BMv2."""
        with self._lock:
            self._pipeline = pipeline
            self.counters.flushed_packets += self.traffic_manager.clear()
        self._wake()

    @property
    def tables(self) -> TableWriter:
        """Program the loaded pipeline's tables by P4 names (see :class:`TableWriter`)."""
        pipeline = self.pipeline
        if pipeline is None:
            raise RuntimeError("no P4 program loaded: load_pipeline first")
        return TableWriter(pipeline.runtime)

    @property
    def pipeline(self) -> Pipeline | None:
        """The loaded pipeline (None before any); program its tables through ``.runtime``."""
        # Anything set_pipeline accepted; only tests install pipelines other than Pipeline.
        return self._pipeline  # type: ignore[return-value]

    # -- queue configuration (simple_switch_CLI's set_queue_rate / set_queue_depth) -

    def set_queue_rate(
        self,
        rate_pps: float | None = None,
        rate_bps: float | None = None,
        port: int | None = None,
        priority: int | None = None,
    ) -> None:
        """Line rate of ``port`` (all ports when None); both None removes the limit.

        With ``priority``, or in per-queue shaping mode, the rate shapes queues
        one by one as BMv2 does instead of the port's transmitter.
        """
        rate = Rate(rate_pps, rate_bps)
        with self._lock:
            self.traffic_manager.set_rate(rate, port, priority)
        self._wake()

    def set_queue_depth(
        self, packets: int, port: int | None = None, priority: int | None = None
    ) -> None:
        with self._lock:
            self.traffic_manager.set_depth(packets, port, priority)

    def queue_counters(self, port: int, priority: int) -> QueueCounters:
        with self._lock:
            return self._egress_port(port).queues[priority].counters

    def queue_depth(self, port: int, priority: int) -> int:
        with self._lock:
            return len(self._egress_port(port).queues[priority])

    def _egress_port(self, port: int) -> EgressPort[QueuedPacket]:
        try:
            return self.traffic_manager.ports[port]
        except KeyError:
            raise ValueError(f"no port {port}") from None

    # -- data path -----------------------------------------------------------------

    def send(self, port: int, frame: bytes) -> None:
        """Inject ``frame`` as if it arrived on ``port`` now, and send what is due."""
        now_s = self.clock.now_s()
        with self._lock:
            for egress in self._ingress(port, frame, now_s):
                # Other ports were served up to now already (advance / the loop).
                self._drain(egress, now_s)
        self._wake()

    def _ingress(
        self, ingress_port: int, frame: bytes, now_s: float
    ) -> list[EgressPort[QueuedPacket]]:
        """Run ingress and enqueue; returns the egress ports that got a packet."""
        counters = self.counters
        counters.received_packets += 1
        pipeline = self._pipeline
        if pipeline is None:
            counters.no_pipeline_drops += 1
            return []
        try:
            copies = pipeline.ingress(ingress_port, frame)
        except Exception:
            counters.pipeline_errors += 1
            log.exception("ingress failed: %d-byte frame from port %d", len(frame), ingress_port)
            return []
        if not copies:
            counters.ingress_drops += 1
            return []
        ports = self.traffic_manager.ports
        touched = []
        for queued in copies:
            egress = ports.get(queued.egress_port)
            if egress is None:
                self._egress_to_no_port(pipeline, queued)
                continue
            outcome = egress.enqueue(queued, queued.priority, queued.length_bytes, now_s)
            if outcome is EnqueueOutcome.QUEUED:
                touched.append(egress)
            elif outcome is EnqueueOutcome.TAIL_DROP:
                counters.tail_drops += 1
            else:
                counters.priority_drops += 1
        return touched

    def _egress_to_no_port(self, pipeline: PacketPipeline, queued: QueuedPacket) -> None:
        """A packet sent to a port with no interface: as on simple_switch, a priority
        beyond the queues drops it at once; otherwise egress runs (its counters and
        registers see the packet) and the frame is lost where it would be sent."""
        counters = self.counters
        if not 0 <= queued.priority < self.traffic_manager.priority_queues:
            counters.priority_drops += 1
            return
        if self._egress(pipeline, queued, queued.egress_port) is None:
            counters.egress_drops += 1
        else:
            counters.unknown_port_drops += 1

    def _egress(
        self, pipeline: PacketPipeline | None, queued: QueuedPacket, port: int, enq_qdepth: int = 0
    ) -> bytes | None:
        """The egress pipeline's frame; None when it dropped the packet or failed (an
        exception drops that packet only, and is counted and logged)."""
        if pipeline is None:
            return None
        try:
            return pipeline.egress(queued, enq_qdepth=enq_qdepth)
        except Exception:
            self.counters.pipeline_errors += 1
            log.exception("egress failed on a packet to port %d", port)
            return None

    def _service(self, now_s: float) -> None:
        """Run egress for every packet whose transmission may start by ``now_s``."""
        for egress in self.traffic_manager.ports.values():
            if egress.backlog_packets:
                self._drain(egress, now_s)

    def _drain(self, egress: EgressPort[QueuedPacket], now_s: float) -> None:
        """Send what ``egress`` may start by ``now_s``: egress pipeline, then the wire."""
        pipeline = self._pipeline
        counters = self.counters
        port = self.ports[egress.port]
        while egress.backlog_packets and egress.free_at_s <= now_s:
            dequeued = egress.dequeue(now_s)
            if dequeued is None:
                return  # per-queue shapers hold every head back
            frame = self._egress(pipeline, dequeued.item, egress.port, dequeued.enq_qdepth)
            if frame is None:
                counters.egress_drops += 1
                egress.transmitted(dequeued.start_time_s, None)
                continue
            egress.transmitted(dequeued.start_time_s, len(frame))
            if not port.transmit(frame, dequeued.start_time_s):
                counters.transmit_errors += 1

    # -- virtual time --------------------------------------------------------------

    def _require_virtual(self) -> VirtualClock:
        if not isinstance(self.clock, VirtualClock):
            raise RuntimeError("advance/run_until_idle need a switch built with VirtualClock")
        return self.clock

    def advance(self, seconds: float) -> None:
        """Move virtual time on by ``seconds``, sending each packet at its instant."""
        clock = self._require_virtual()
        if seconds < 0 or not math.isfinite(seconds):
            raise ValueError(f"cannot advance by {seconds} s")
        end_s = clock.now_s() + seconds
        with self._lock:
            while (
                next_s := self.traffic_manager.next_departure_s()
            ) is not None and next_s <= end_s:
                clock.set(max(next_s, clock.now_s()))
                self._service(clock.now_s())
            clock.set(end_s)

    def run_until_idle(self, limit_s: float = 3600.0) -> float:
        """Advance virtual time until every queue is empty; returns the time reached."""
        clock = self._require_virtual()
        deadline_s = clock.now_s() + limit_s
        with self._lock:
            while (next_s := self.traffic_manager.next_departure_s()) is not None:
                if next_s > deadline_s:
                    raise RuntimeError(f"queues still busy after {limit_s} s of virtual time")
                clock.set(max(next_s, clock.now_s()))
                self._service(clock.now_s())
        return clock.now_s()

    # -- real time -----------------------------------------------------------------

    def start(self) -> None:
        """Start the pipeline thread that serves the Linux ports in real time."""
        if self.virtual_time:
            raise RuntimeError("a virtual-time switch runs through advance(), not start()")
        if self._closed:
            raise RuntimeError("the switch was closed")
        if self._thread is not None:
            return
        self._stopping.clear()
        with self._wake_lock:
            self._wake_fds = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._thread = threading.Thread(
            target=self._serve, args=(self._wake_fds[0],), name="beamer-switch", daemon=True
        )
        self._thread.start()

    @property
    def running(self) -> bool:
        """True while the pipeline thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Stop the pipeline thread (idempotent); ports stay open until :meth:`close`."""
        thread = self._thread
        if thread is None:
            return
        self._stopping.set()
        self._wake()
        thread.join()
        self._thread = None
        with self._wake_lock:
            if self._wake_fds is not None:
                for fd in self._wake_fds:
                    os.close(fd)
                self._wake_fds = None

    def close(self) -> None:
        """Stop and close every port and descriptor (idempotent)."""
        self.stop()
        if self._closed:
            return
        self._closed = True
        for port in self.ports.values():
            try:
                port.close()
            except OSError:
                log.exception("closing port %s", port.name)

    def __enter__(self) -> Switch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _wake(self) -> None:
        """Make the pipeline thread re-plan now (new packets, rates or program)."""
        with self._wake_lock:
            if self._wake_fds is not None:
                with contextlib.suppress(BlockingIOError):
                    os.write(self._wake_fds[1], b"\0")

    def _serve(self, wake_fd: int) -> None:
        readable: dict[int, tuple[int, LinuxPort]] = {
            port.fileno(): (number, port)
            for number, port in self.ports.items()
            if isinstance(port, LinuxPort)
        }
        with select.epoll() as poller:
            poller.register(wake_fd, select.EPOLLIN)
            for fd in readable:
                poller.register(fd, select.EPOLLIN)
            log.info("switch running on %d port(s)", len(self.ports))
            try:
                self._serve_loop(poller, readable, wake_fd)
            except Exception as error:
                # Reported through .failure; whoever runs the switch decides what to do.
                self.failure = error
                log.exception("switch loop failed")
            finally:
                log.info("switch loop stopped")

    def _serve_loop(
        self, poller: select.epoll, readable: dict[int, tuple[int, LinuxPort]], wake_fd: int
    ) -> None:
        clock = self.clock
        traffic_manager = self.traffic_manager
        while not self._stopping.is_set():
            with self._lock:
                next_s = traffic_manager.next_departure_s()
            timeout_s = IDLE_WAIT_S
            if next_s is not None:
                timeout_s = min(IDLE_WAIT_S, max(0.0, next_s - clock.now_s()))
            for fd, _ in poller.poll(timeout_s):
                if fd == wake_fd:
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_fd, 4096)
                    continue
                number, port = readable[fd]
                frames = port.receive(RECEIVE_BATCH_FRAMES)
                if frames:
                    now_s = clock.now_s()
                    with self._lock:
                        for frame in frames:
                            self._ingress(number, frame, now_s)
            with self._lock:
                self._service(clock.now_s())


# -- programming tables by name --------------------------------------------------------

MatchValue = int | str | tuple[int | str, int | str]
"""An exact/optional value, or a pair: (value, prefix_len) for lpm, (value, mask) for
ternary, (low, high) for range. Values may be integers, dotted IPv4 addresses or
colon-separated MAC addresses."""


def parse_value(value: int | str) -> int:
    """An integer, an IPv4 address (``10.0.2.0``) or a MAC address (``02:00:00:00:00:01``)."""
    if isinstance(value, int):
        return value
    if value.count(":") == 5:
        return int(value.replace(":", ""), 16)
    if value.count(".") == 3:
        return int(ipaddress.IPv4Address(value))
    return int(value, 0)


class TableWriter:
    """simple_switch_CLI-style table programming on a :class:`RuntimeState`.

    ``table_add("ipv4_lpm", {"hdr.ipv4.dstAddr": ("10.0.2.0", 24)}, "ipv4_forward",
    ["02:00:00:00:00:02", 2])``. Table and action names may be given in full
    (``MyIngress.ipv4_lpm``) or by their last component when that is unique. Writes
    go through the same RuntimeState the P4Runtime server uses, so they obey the
    same checks (widths, allowed actions, table size).
    """

    def __init__(self, runtime: RuntimeState) -> None:
        self.runtime = runtime

    def _table(self, name: str) -> TableState:
        return _by_name(self.runtime.tables_by_name, name, "table")

    def _action(self, table: TableState, name: str, params: Sequence[int | str]) -> ActionCall:
        actions = {self.runtime.actions[ref.id].name: ref.id for ref in table.info.action_refs}
        action_id = _by_name(actions, name, f"action of {table.name}")
        return ActionCall(action_id, tuple(parse_value(p) for p in params))

    def table_add(
        self,
        table: str,
        match: Mapping[str, MatchValue],
        action: str,
        params: Sequence[int | str] = (),
        priority: int = 0,
    ) -> None:
        """Insert an entry; ``match`` maps key field names (``hdr.ipv4.dstAddr``) to values."""
        state = self._table(table)
        fields = {field.name: field for field in state.key_fields}
        matches: dict[int, FieldMatch] = {}
        for name, value in match.items():
            key_field = fields.get(name)
            if key_field is None:
                raise KeyError(f"{state.name} has no key field {name!r} (has {sorted(fields)})")
            matches[key_field.field_id] = _field_match(key_field.match_type, name, value)
        entry = TableEntry(matches, self._action(state, action, params), priority)
        self.runtime.insert_entry(state.table_id, entry)

    def table_set_default(self, table: str, action: str, params: Sequence[int | str] = ()) -> None:
        state = self._table(table)
        self.runtime.set_default_action(state.table_id, self._action(state, action, params))


ValueT = TypeVar("ValueT")


def _by_name(items: Mapping[str, ValueT], name: str, kind: str) -> ValueT:
    if name in items:
        return items[name]
    found = [full for full in items if full.rsplit(".", 1)[-1] == name]
    if len(found) == 1:
        return items[found[0]]
    if found:
        raise KeyError(f"{kind} name {name!r} is ambiguous: {sorted(found)}")
    raise KeyError(f"no {kind} named {name!r} (have {sorted(items)})")


def _field_match(match_type: int, name: str, value: MatchValue) -> FieldMatch:
    if match_type in (MATCH_EXACT, MATCH_OPTIONAL):
        if isinstance(value, tuple):
            raise ValueError(f"{name}: exact match takes one value, got {value!r}")
        number = parse_value(value)
        return ExactMatch(number) if match_type == MATCH_EXACT else OptionalMatch(number)
    if not isinstance(value, tuple) or len(value) != 2:
        raise ValueError(f"{name}: needs a pair (lpm: value, prefix_len; ternary: value, mask;"
                         f" range: low, high), got {value!r}")  # fmt: skip
    first, second = parse_value(value[0]), parse_value(value[1])
    if match_type == MATCH_LPM:
        return LpmMatch(first, second)
    if match_type == MATCH_TERNARY:
        return TernaryMatch(first, second)
    if match_type == MATCH_RANGE:
        return RangeMatch(first, second)
    raise ValueError(f"{name}: unsupported match type {match_type}")
