"""Switch in virtual time: ingress → strict-priority queues → egress → in-memory ports.

The pipeline here is a minimal one that reads the egress port and the class
from the first two bytes of a frame, so these tests exercise the switch's own
job (queues, rates, drops, clocks) independently of the P4 pipeline.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass

import pytest

from softswitch.switch import RealClock, Switch, VirtualClock


@dataclass(slots=True)
class TwoByteQueued:
    egress_port: int
    priority: int
    length_bytes: int
    frame: bytes


class TwoBytePipeline:
    """Frame byte 0 = egress port, byte 1 = class; 0xFF in byte 0 drops; empty frames raise."""

    def __init__(self) -> None:
        self.egress_qdepths: list[int] = []

    def ingress(self, ingress_port: int, packet: bytes) -> list[TwoByteQueued]:
        if not packet:
            raise ValueError("empty frame")
        if packet[0] == 0xFF:
            return []
        return [TwoByteQueued(packet[0], packet[1], len(packet), packet)]

    def egress(self, queued: TwoByteQueued, enq_qdepth: int = 0) -> bytes | None:
        self.egress_qdepths.append(enq_qdepth)
        return queued.frame


def frame(port: int, priority: int, tag: int, length: int = 100) -> bytes:
    return bytes([port, priority, tag]) + bytes(length - 3)


def make_switch(**options: object) -> tuple[Switch, TwoBytePipeline]:
    switch = Switch(clock=VirtualClock(), **options)  # type: ignore[arg-type]
    for number in (0, 1, 2):
        switch.add_memory_port(number)
    pipeline = TwoBytePipeline()
    switch.set_pipeline(pipeline)
    return switch, pipeline


def out(switch: Switch, port: int) -> list[tuple[float, int, int]]:
    """(departure time, class, tag) of what left ``port``."""
    memory = switch.ports[port]
    return [(d.time_s, d.frame[1], d.frame[2]) for d in memory.take()]  # type: ignore[attr-defined]


def test_backlogged_high_class_leaves_before_lower_classes_fifo_inside() -> None:
    switch, _ = make_switch()
    switch.set_queue_rate(rate_pps=1000, port=1)
    for tag in range(6):
        switch.send(0, frame(1, 1, tag))  # low class
    for tag in range(10, 16):
        switch.send(2, frame(1, 6, tag))  # high class, queued behind the first low
    switch.run_until_idle()
    departures = out(switch, 1)
    # The first low packet found the port idle; then all high ones, then the rest, FIFO.
    assert [(c, t) for _, c, t in departures] == [(1, 0)] + [(6, t) for t in range(10, 16)] + [
        (1, t) for t in range(1, 6)
    ]
    assert [time for time, _, _ in departures] == pytest.approx([i / 1000 for i in range(12)])


def test_port_rate_in_bits_per_second_uses_the_emitted_length() -> None:
    switch, _ = make_switch()
    switch.set_queue_rate(rate_bps=800_000, port=1)  # 100 bytes per millisecond
    for tag, length in enumerate([100, 300, 50, 100]):
        switch.send(0, frame(1, 0, tag, length))
    switch.run_until_idle()
    assert [time for time, _, _ in out(switch, 1)] == pytest.approx([0.0, 1e-3, 4e-3, 4.5e-3])


def test_tail_drop_is_counted() -> None:
    switch, _ = make_switch(queue_depth_packets=4)
    switch.set_queue_rate(rate_pps=10)
    for tag in range(10):
        switch.send(0, frame(1, 3, tag))
    # One leaves at once, four wait, five find the queue full.
    assert switch.counters.tail_drops == 5
    assert switch.queue_counters(1, 3).tail_drop_packets == 5
    assert switch.queue_depth(1, 3) == 4
    switch.run_until_idle()
    assert [t for _, _, t in out(switch, 1)] == [0, 1, 2, 3, 4]


def test_enq_qdepth_reaches_egress() -> None:
    switch, pipeline = make_switch()
    switch.set_queue_rate(rate_pps=100, port=1)
    for tag in range(4):
        switch.send(0, frame(1, 2, tag))
    switch.run_until_idle()
    assert pipeline.egress_qdepths == [0, 0, 1, 2]


def test_advance_releases_only_what_is_due() -> None:
    switch, _ = make_switch()
    switch.set_queue_rate(rate_pps=100, port=1)
    for tag in range(5):
        switch.send(0, frame(1, 0, tag))
    assert len(out(switch, 1)) == 1
    switch.advance(0.025)  # departures at 10 ms and 20 ms
    assert [t for _, _, t in out(switch, 1)] == [1, 2]
    assert switch.clock.now_s() == pytest.approx(0.025)
    switch.advance(1.0)
    assert [t for _, _, t in out(switch, 1)] == [3, 4]


def test_ports_are_independent_bottlenecks() -> None:
    switch, _ = make_switch()
    switch.set_queue_rate(rate_pps=100, port=1)
    switch.set_queue_rate(rate_pps=50, port=2)
    for tag in range(3):
        switch.send(0, frame(1, 0, tag))
        switch.send(0, frame(2, 0, tag))
    switch.run_until_idle()
    assert [time for time, _, _ in out(switch, 1)] == pytest.approx([0.0, 0.01, 0.02])
    assert [time for time, _, _ in out(switch, 2)] == pytest.approx([0.0, 0.02, 0.04])


def test_per_queue_shaping_mode_behaves_like_bmv2() -> None:
    """Two backlogged classes at rate R each both get R (no port-level bottleneck)."""
    switch, _ = make_switch(per_queue_shaping=True, queue_depth_packets=1000)
    switch.set_queue_rate(rate_pps=200, port=1)
    for tag in range(250):
        switch.send(0, frame(1, 7, tag % 256))
        switch.send(0, frame(1, 1, tag % 256))
    switch.advance(1.0 - 1e-9)
    classes = [c for _, c, _ in out(switch, 1)]
    assert classes.count(7) == 200
    assert classes.count(1) == 200


def test_unlimited_rate_forwards_immediately() -> None:
    switch, _ = make_switch()
    for tag in range(3):
        switch.send(0, frame(2, 5, tag))
    assert [(time, t) for time, _, t in out(switch, 2)] == [(0.0, 0), (0.0, 1), (0.0, 2)]


def test_drops_are_counted_by_cause_and_the_switch_keeps_forwarding() -> None:
    switch, _ = make_switch(priority_queues=4)
    switch.send(0, b"\xff\x00\x00")  # ingress drop
    switch.send(0, frame(9, 0, 0))  # no such port
    switch.send(0, frame(1, 5, 0))  # class 5 with 4 queues
    switch.send(0, b"")  # the pipeline raises
    switch.send(0, frame(1, 0xEE, 0))  # out of range too
    switch.send(0, frame(1, 3, 7))
    counters = switch.counters
    assert counters.received_packets == 6
    assert counters.ingress_drops == 1
    assert counters.unknown_port_drops == 1
    assert counters.priority_drops == 2
    assert counters.pipeline_errors == 1
    assert [t for _, _, t in out(switch, 1)] == [7]


def test_a_packet_to_no_port_goes_through_egress_unless_its_priority_has_no_queue() -> None:
    """As on simple_switch: egress runs for a port with no interface (the frame is lost
    after it), a priority beyond the queues drops first, and an egress drop counts as
    such."""
    switch, _ = make_switch(priority_queues=4)
    seen: list[int] = []

    class Counting(TwoBytePipeline):
        drop_in_egress = False

        def egress(self, queued: TwoByteQueued, enq_qdepth: int = 0) -> bytes | None:
            seen.append(queued.egress_port)
            return None if self.drop_in_egress else super().egress(queued, enq_qdepth)

    pipeline = Counting()
    switch.set_pipeline(pipeline)
    switch.send(0, frame(9, 3, 0))
    switch.send(0, frame(9, 5, 0))  # no queue 5 of 4
    pipeline.drop_in_egress = True
    switch.send(0, frame(9, 0, 0))
    counters = switch.counters
    assert seen == [9, 9]
    assert (counters.unknown_port_drops, counters.priority_drops, counters.egress_drops) == (
        1,
        1,
        1,
    )


def test_egress_drop_is_counted() -> None:
    switch, _ = make_switch()

    class DropInEgress(TwoBytePipeline):
        def egress(self, queued: TwoByteQueued, enq_qdepth: int = 0) -> bytes | None:
            return None

    switch.set_pipeline(DropInEgress())
    switch.send(0, frame(1, 0, 0))
    assert switch.counters.egress_drops == 1
    assert out(switch, 1) == []


def test_without_a_program_packets_are_dropped_and_counted() -> None:
    switch = Switch(clock=VirtualClock())
    switch.add_memory_port(0)
    switch.send(0, frame(0, 0, 0))
    assert switch.counters.no_pipeline_drops == 1
    assert switch.pipeline is None


def test_new_program_flushes_the_queues() -> None:
    switch, _ = make_switch()
    switch.set_queue_rate(rate_pps=1)
    for tag in range(4):
        switch.send(0, frame(1, 0, tag))
    switch.set_pipeline(TwoBytePipeline())
    assert switch.counters.flushed_packets == 3
    switch.run_until_idle()
    assert [t for _, _, t in out(switch, 1)] == [0]


def test_port_numbers_are_checked() -> None:
    switch = Switch(clock=VirtualClock())
    switch.add_memory_port(3)
    with pytest.raises(ValueError, match="already attached"):
        switch.add_memory_port(3)
    with pytest.raises(ValueError, match="between 0 and 510"):
        switch.add_memory_port(511)


def test_virtual_and_real_time_apis_do_not_mix() -> None:
    with pytest.raises(RuntimeError, match="VirtualClock"):
        Switch(clock=RealClock()).advance(1.0)
    with pytest.raises(RuntimeError, match="virtual-time switch"):
        Switch(clock=VirtualClock()).start()


def test_real_time_switch_starts_and_stops_with_memory_ports() -> None:
    """The pipeline thread paces a rate-limited port on the wall clock, then stops cleanly."""
    with Switch() as switch:
        memory = switch.add_memory_port(1)
        switch.add_memory_port(0)
        switch.set_pipeline(TwoBytePipeline())
        switch.set_queue_rate(rate_pps=200, port=1)
        switch.start()
        for tag in range(5):
            switch.send(0, frame(1, 0, tag))
        deadline_s = time.monotonic() + 10.0
        while len(memory.departures) < 5 and time.monotonic() < deadline_s:
            time.sleep(0.005)
        switch.stop()
        assert not switch.running
    assert [d.frame[2] for d in memory.departures] == [0, 1, 2, 3, 4]
    times = [d.time_s for d in memory.departures]
    # Never faster than the rate (a loaded machine may only make it slower).
    assert all(b - a >= 0.005 - 1e-9 for a, b in itertools.pairwise(times))


def test_start_stop_and_close_leave_no_descriptor_open() -> None:
    def open_descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = open_descriptors()
    for _ in range(20):
        switch = Switch()
        switch.add_memory_port(0)
        switch.start()
        switch.stop()
        switch.start()
        switch.close()
        assert not switch.running
        Switch(clock=VirtualClock()).add_memory_port(1)  # never started: nothing to close
    assert open_descriptors() == before
