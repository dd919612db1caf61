"""Traffic manager: strict priority, FIFO, tail drop, port rate and BMv2 per-queue shaping."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from softswitch.traffic_manager import (
    Dequeued,
    EgressPort,
    EnqueueOutcome,
    Rate,
    TrafficManager,
)


def drain(port: EgressPort[str], until_s: float = math.inf) -> list[Dequeued[str]]:
    """Run the port's transmitter in virtual time until empty (or ``until_s``)."""
    departures = []
    while (next_s := port.next_departure_s()) is not None and next_s <= until_s:
        dequeued = port.dequeue(next_s)
        assert dequeued is not None, "next_departure_s promised a packet"
        port.transmitted(dequeued.start_time_s, dequeued.length_bytes)
        departures.append(dequeued)
    return departures


def make_port(rate: Rate, queues: int = 8, depth: int = 64) -> EgressPort[str]:
    port = EgressPort[str](1, queues, depth)
    port.set_port_rate(rate)
    return port


def test_backlogged_high_class_leaves_before_lower_classes() -> None:
    port = make_port(Rate(pps=1000))
    for i in range(5):
        port.enqueue(f"low{i}", 0, 100, 0.0)
        port.enqueue(f"mid{i}", 3, 100, 0.0)
        port.enqueue(f"high{i}", 7, 100, 0.0)
    names = [d.item for d in drain(port)]
    assert names == [f"high{i}" for i in range(5)] + [f"mid{i}" for i in range(5)] + [
        f"low{i}" for i in range(5)
    ]


def test_high_class_arriving_later_overtakes_queued_low_class() -> None:
    port = make_port(Rate(pps=100))
    for i in range(4):
        port.enqueue(f"low{i}", 1, 100, 0.0)
    departures = drain(port, until_s=0.015)  # low0 at 0 s, low1 at 0.01 s
    port.enqueue("high", 6, 100, 0.015)
    departures += drain(port)
    assert [d.item for d in departures] == ["low0", "low1", "high", "low2", "low3"]
    assert [d.start_time_s for d in departures] == pytest.approx([0.0, 0.01, 0.02, 0.03, 0.04])


def test_packets_per_second_spaces_departures_exactly() -> None:
    port = make_port(Rate(pps=250))
    for i in range(10):
        port.enqueue(str(i), 2, 1500, 0.0)
    times = [d.start_time_s for d in drain(port)]
    assert times == pytest.approx([i / 250 for i in range(10)], abs=1e-12)


def test_bits_per_second_charges_each_packet_its_length() -> None:
    port = make_port(Rate(bps=8_000_000))  # 1 byte per microsecond
    lengths = [1000, 64, 1500, 200]
    for i, length in enumerate(lengths):
        port.enqueue(str(i), 0, length, 0.0)
    times = [d.start_time_s for d in drain(port)]
    assert times == pytest.approx([0.0, 1000e-6, 1064e-6, 2564e-6], abs=1e-12)
    assert port.counters.transmitted_bytes == sum(lengths)


def test_both_rates_take_the_slower_of_the_two() -> None:
    rate = Rate(pps=1000, bps=8_000_000)
    assert rate.transmit_time_s(100) == pytest.approx(1e-3)  # pps binds
    assert rate.transmit_time_s(2000) == pytest.approx(2e-3)  # bps binds


def test_idle_port_sends_an_arrival_at_once() -> None:
    port = make_port(Rate(pps=10))
    port.enqueue("a", 0, 100, 0.0)
    assert [d.start_time_s for d in drain(port)] == [0.0]
    port.enqueue("b", 0, 100, 5.0)
    assert [d.start_time_s for d in drain(port)] == [5.0]


def test_tail_drop_counts_per_queue() -> None:
    port = make_port(Rate(pps=1), depth=3)
    outcomes = [port.enqueue(str(i), 4, 100, 0.0) for i in range(5)]
    assert outcomes == [EnqueueOutcome.QUEUED] * 3 + [EnqueueOutcome.TAIL_DROP] * 2
    assert port.queues[4].counters.tail_drop_packets == 2
    assert port.queues[4].counters.tail_drop_bytes == 200
    assert port.queues[3].counters.tail_drop_packets == 0
    # Another class still has room: depth is per queue.
    assert port.enqueue("other", 5, 100, 0.0) is EnqueueOutcome.QUEUED
    assert [d.item for d in drain(port)] == ["other", "0", "1", "2"]


def test_priority_beyond_the_queue_count_is_dropped() -> None:
    port = make_port(Rate(), queues=4)
    assert port.enqueue("x", 4, 100, 0.0) is EnqueueOutcome.PRIORITY_OUT_OF_RANGE
    assert port.counters.priority_out_of_range_packets == 1
    assert port.next_departure_s() is None


def test_queue_depth_metadata_matches_simple_switch() -> None:
    port = make_port(Rate(pps=1))
    for i in range(3):
        port.enqueue(str(i), 0, 100, 0.0)
    departures = drain(port)
    assert [d.enq_qdepth for d in departures] == [0, 1, 2]
    assert [d.deq_qdepth for d in departures] == [2, 1, 0]
    assert [d.deq_timedelta_s for d in departures] == pytest.approx([0.0, 1.0, 2.0])


def test_egress_drop_leaves_the_transmitter_free() -> None:
    port = make_port(Rate(pps=10))
    port.enqueue("dropped", 0, 100, 0.0)
    port.enqueue("kept", 0, 100, 0.0)
    first = port.dequeue(0.0)
    assert first is not None
    port.transmitted(first.start_time_s, None)
    second = port.dequeue(0.0)
    assert second is not None and second.item == "kept"


def test_per_queue_shaping_gives_each_backlogged_class_its_own_rate() -> None:
    """BMv2: set_queue_rate R port shapes every class at R; two classes get 2R in total."""
    manager = TrafficManager[str](8, 1000, per_queue_shaping=True)
    port = manager.add_port(1)
    manager.set_rate(Rate(pps=100), port=1)
    for i in range(300):
        port.enqueue(f"hi{i}", 7, 100, 0.0)
        port.enqueue(f"lo{i}", 2, 100, 0.0)
    departures = drain(port, until_s=1.0 - 1e-9)
    high = [d for d in departures if d.priority == 7]
    low = [d for d in departures if d.priority == 2]
    assert len(high) == 100
    assert len(low) == 100


def test_port_rate_shares_one_line_rate_strictly() -> None:
    """The same load on a real port: the high class takes the whole line, low waits."""
    manager = TrafficManager[str](8, 1000)
    port = manager.add_port(1)
    manager.set_rate(Rate(pps=100), port=1)
    for i in range(300):
        port.enqueue(f"hi{i}", 7, 100, 0.0)
        port.enqueue(f"lo{i}", 2, 100, 0.0)
    departures = drain(port, until_s=1.0 - 1e-9)
    assert len(departures) == 100
    assert all(d.priority == 7 for d in departures)


def test_queue_shaper_inside_a_rate_limited_port() -> None:
    """A per-priority rate caps that class; the port's line rate still binds the sum."""
    manager = TrafficManager[str](8, 1000)
    port = manager.add_port(1)
    manager.set_rate(Rate(pps=100), port=1)
    manager.set_rate(Rate(pps=25), port=1, priority=7)
    for i in range(200):
        port.enqueue(f"hi{i}", 7, 100, 0.0)
        port.enqueue(f"lo{i}", 0, 100, 0.0)
    departures = drain(port, until_s=1.0 - 1e-9)
    assert len(departures) == 100
    assert sum(d.priority == 7 for d in departures) == 25


def test_rate_and_depth_apply_to_future_ports_too() -> None:
    manager = TrafficManager[str](2, 64)
    manager.set_rate(Rate(pps=50))
    manager.set_depth(2)
    port = manager.add_port(3)
    assert port.rate == Rate(pps=50)
    assert [q.capacity_packets for q in port.queues] == [2, 2]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.set_rate(Rate(pps=1), port=9), "no port 9"),
        (lambda m: m.set_rate(Rate(pps=1), priority=8), "priority 8 out of range"),
        (lambda m: m.set_depth(0), "at least 1 packet"),
        (lambda m: Rate(pps=-1), "rate_pps must be a number in 0.001..1e"),
        (lambda m: Rate(bps=math.nan), "rate_bps must be a number in 1000..1e"),
        (lambda m: Rate(bps=1e-300), "rate_bps must be a number in"),
        (lambda m: Rate(pps=math.inf), "rate_pps must be a number in"),
        (lambda m: TrafficManager[str](9), "between 1 and 8"),
    ],
)
def test_bad_configuration_is_rejected(call: object, message: str) -> None:
    manager = TrafficManager[str](8, 64)
    manager.add_port(1)
    with pytest.raises(ValueError, match=message):
        call(manager)  # type: ignore[operator]


arrivals = st.lists(
    st.tuples(
        st.integers(0, 50),  # arrival in ms
        st.integers(0, 7),  # priority
        st.integers(60, 1500),  # length
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(arrivals=arrivals, rate_bps=st.sampled_from([1e6, 1e7, 1e8]))
def test_strict_priority_invariants_on_random_arrivals(
    arrivals: list[tuple[int, int, int]], rate_bps: float
) -> None:
    """Work-conserving strict priority: never idle with a backlog, never serve a lower class
    while a higher one waits, FIFO per class, departures spaced by the line rate."""
    rate = Rate(bps=rate_bps)
    port = make_port(rate, depth=1000)
    ordered = sorted(enumerate(arrivals), key=lambda item: (item[1][0], item[0]))
    departures: list[Dequeued[str]] = []
    arrival_s: dict[str, float] = {}
    for index, (arrival_ms, priority, length) in ordered:
        now_s = arrival_ms / 1000
        departures += drain(port, until_s=now_s)
        name = f"{index}"
        arrival_s[name] = now_s
        assert port.enqueue(name, priority, length, now_s) is EnqueueOutcome.QUEUED
        departures += drain(port, until_s=now_s)
    departures += drain(port)
    assert len(departures) == len(arrivals)
    for before, after in itertools.pairwise(departures):
        busy_until_s = before.start_time_s + rate.transmit_time_s(before.length_bytes)
        # Spaced by the line rate, and never idle while something waited.
        assert after.start_time_s >= busy_until_s - 1e-12
        if arrival_s[after.item] <= busy_until_s + 1e-12:
            assert after.start_time_s == pytest.approx(busy_until_s, abs=1e-12)
    for dep in departures:
        waiting = [
            other
            for other in departures
            if arrival_s[other.item] <= dep.start_time_s - 1e-12
            and other.start_time_s > dep.start_time_s
        ]
        assert all(other.priority <= dep.priority for other in waiting)
    for priority in range(8):
        in_class = [d.item for d in departures if d.priority == priority]
        assert in_class == sorted(in_class, key=lambda n: (arrival_s[n], int(n)))
