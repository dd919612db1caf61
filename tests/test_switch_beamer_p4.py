"""``p4src/beamer.p4`` on the embedded switch, programmed through ``switch.pipeline.runtime``.

scapy builds tagged packets; the installed classes decide the order in which
they leave a rate-limited port; scapy parses the bytes that come out.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP, IPOption
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from softswitch.frontend import CompiledProgram, compile_file
from softswitch.runtime import EntryExistsError, InvalidEntryError
from softswitch.switch import Switch, VirtualClock

P4_SOURCE = Path(__file__).resolve().parents[1] / "p4src" / "beamer.p4"
NEXT_HOP_MAC = "02:00:00:00:00:02"
SWITCH_MAC = "02:00:00:00:00:fe"
EXPERIMENT, STAGE, COFLOW = 1, 0, 7
STAGE_CLASS, COFLOW_CLASS = 2, 6


@pytest.fixture(scope="module")
def program() -> CompiledProgram:
    return compile_file(P4_SOURCE)


@pytest.fixture
def switch(program: CompiledProgram) -> Iterator[Switch]:
    with Switch(clock=VirtualClock(), priority_queues=8) as switch:
        switch.add_memory_port(1)
        switch.add_memory_port(2)
        switch.load_pipeline(program)
        tables = switch.tables
        tables.table_add("ipv4_lpm", {"hdr.ipv4.dstAddr": ("10.0.2.0", 24)}, "ipv4_forward",
                         [NEXT_HOP_MAC, 2])  # fmt: skip
        stage_key = {"hdr.beamer_tag.experiment_id": EXPERIMENT,
                     "hdr.beamer_tag.stage_id": STAGE}  # fmt: skip
        tables.table_add("MyIngress.stage_class", stage_key, "set_class", [STAGE_CLASS])
        coflow_key = {**stage_key, "hdr.beamer_tag.coflow_id": COFLOW}
        tables.table_add("coflow_class", coflow_key, "MyIngress.set_class", [COFLOW_CLASS])
        yield switch


def beamer_tag(experiment_id: int, stage_id: int, coflow_id: int) -> IPOption:
    return IPOption(struct.pack("!BBBBHHI", 0x9E, 12, 0x10, 0, experiment_id, stage_id, coflow_id))


def packet(sequence: int, coflow_id: int | None) -> bytes:
    options = [] if coflow_id is None else [beamer_tag(EXPERIMENT, STAGE, coflow_id)]
    return bytes(
        Ether(src="02:00:00:00:00:01", dst=SWITCH_MAC)
        / IP(src="10.0.1.1", dst="10.0.2.2", ttl=64, options=options)
        / UDP(sport=1234, dport=5678)
        / Raw(f"seq={sequence:03d}".encode())
    )


def test_programmed_classes_decide_departure_order_under_a_port_rate(switch: Switch) -> None:
    switch.set_queue_rate(rate_pps=1000, port=2)
    kinds = {None: 0, 3: STAGE_CLASS, COFLOW: COFLOW_CLASS}  # coflow 3: stage entry only
    sent: list[tuple[int, int]] = []  # (sequence, expected class)
    for sequence in range(18):
        coflow = [None, 3, COFLOW][sequence % 3]
        switch.send(1, packet(sequence, coflow))
        sent.append((sequence, kinds[coflow]))
    switch.run_until_idle()
    departures = switch.ports[2].take()  # type: ignore[attr-defined]
    assert len(departures) == len(sent)
    received = [Ether(d.frame) for d in departures]
    classes = [p[IP].tos >> 5 for p in received]
    sequences = [int(p[Raw].load.decode().split("=")[1]) for p in received]
    # Packet 0 found the port idle; the rest left strictly by class, FIFO inside each.
    expected = [sent[0], *sorted(sent[1:], key=lambda s: (-s[1], s[0]))]
    assert list(zip(sequences, classes, strict=True)) == expected
    assert [d.time_s for d in departures] == pytest.approx([i / 1000 for i in range(18)])
    for p in received:
        assert p[Ether].dst == NEXT_HOP_MAC and p[Ether].src == SWITCH_MAC
        assert p[IP].ttl == 63
        assert p[IP].tos & 0x1F == 0  # DSCP = 8 * class, ECN untouched
        checksum = p[IP].chksum
        del p[IP].chksum
        assert IP(bytes(p[IP]))[IP].chksum == checksum
        assert Ether(bytes(p)).haslayer(UDP)


def test_tail_drop_and_queue_counters_with_beamer_p4(switch: Switch) -> None:
    switch.set_queue_rate(rate_pps=100, port=2)
    switch.set_queue_depth(3, port=2)
    for sequence in range(10):
        switch.send(1, packet(sequence, COFLOW))
    switch.run_until_idle()
    departures = switch.ports[2].take()  # type: ignore[attr-defined]
    assert [Ether(d.frame)[Raw].load for d in departures] == [
        f"seq={i:03d}".encode() for i in range(4)
    ]
    assert switch.counters.tail_drops == 6
    assert switch.queue_counters(2, COFLOW_CLASS).tail_drop_packets == 6
    # beamer.p4 counts in egress what left through each class's queue.
    assert switch.pipeline is not None
    runtime = switch.pipeline.runtime
    (queue_counter,) = [c for c in runtime.counters.values() if c.name.endswith("queue_counter")]
    cell = queue_counter.read(COFLOW_CLASS)
    assert cell.packet_count == 4
    assert cell.byte_count == sum(len(d.frame) for d in departures)


def test_a_packet_to_a_port_with_no_interface_still_runs_egress(switch: Switch) -> None:
    """simple_switch runs egress for any egress port and loses the frame on transmit:
    beamer.p4's queue counter counts it, the switch counts the frame lost."""
    switch.tables.table_add("ipv4_lpm", {"hdr.ipv4.dstAddr": ("10.0.6.0", 24)}, "ipv4_forward",
                            [NEXT_HOP_MAC, 7])  # fmt: skip
    to_nowhere = bytes(
        Ether(src="02:00:00:00:00:01", dst=SWITCH_MAC)
        / IP(src="10.0.1.1", dst="10.0.6.6", options=[beamer_tag(EXPERIMENT, STAGE, COFLOW)])
        / UDP(sport=1234, dport=5678)
    )
    for _ in range(3):
        switch.send(1, to_nowhere)
    switch.run_until_idle()
    assert switch.pipeline is not None
    runtime = switch.pipeline.runtime
    (queue_counter,) = [c for c in runtime.counters.values() if c.name.endswith("queue_counter")]
    cell = queue_counter.read(COFLOW_CLASS)
    assert (cell.packet_count, cell.byte_count) == (3, 3 * len(to_nowhere))
    assert switch.counters.unknown_port_drops == 3
    assert switch.ports[2].take() == []  # type: ignore[attr-defined]


def test_malformed_and_fuzzed_frames_never_stop_the_switch(switch: Switch) -> None:
    import random

    rng = random.Random(7)
    good = packet(0, COFLOW)
    for _ in range(2000):
        length = rng.randrange(0, len(good) + 8)
        if rng.random() < 0.5:
            frame = bytes(rng.randrange(256) for _ in range(length))
        else:  # mutate a valid packet: more likely to get past the parser
            data = bytearray(good[:length])
            for _ in range(rng.randrange(1, 4)):
                if data:
                    data[rng.randrange(len(data))] = rng.randrange(256)
            frame = bytes(data)
        switch.send(1, frame)
    switch.run_until_idle()
    assert switch.counters.pipeline_errors == 0
    switch.ports[2].take()  # type: ignore[attr-defined]
    switch.send(1, packet(1, COFLOW))
    (departure,) = switch.ports[2].take()  # type: ignore[attr-defined]
    assert Ether(departure.frame)[IP].tos >> 5 == COFLOW_CLASS


def test_untagged_class_follows_the_default_action(switch: Switch) -> None:
    switch.tables.table_set_default("default_class", "set_class", [4])
    switch.send(1, packet(0, None))
    (departure,) = switch.ports[2].take()  # type: ignore[attr-defined]
    assert Ether(departure.frame)[IP].tos >> 5 == 4


def test_table_writer_reports_wrong_names_and_values(switch: Switch) -> None:
    tables = switch.tables
    with pytest.raises(KeyError, match="no table named 'nope'"):
        tables.table_add("nope", {}, "set_class", [1])
    with pytest.raises(KeyError, match=r"no key field 'hdr\.ipv4\.srcAddr'"):
        tables.table_add("ipv4_lpm", {"hdr.ipv4.srcAddr": ("10.0.0.0", 8)}, "drop")
    with pytest.raises(KeyError, match=r"no action of MyIngress\.stage_class named 'drop'"):
        tables.table_add("stage_class", {"hdr.beamer_tag.experiment_id": 9}, "drop")
    with pytest.raises(ValueError, match="needs a pair"):
        tables.table_add("ipv4_lpm", {"hdr.ipv4.dstAddr": "10.0.0.0"}, "drop")
    with pytest.raises(InvalidEntryError):
        tables.table_add("default_class", {}, "set_class", [8])  # class is 3 bits
    key = {"hdr.beamer_tag.experiment_id": EXPERIMENT, "hdr.beamer_tag.stage_id": STAGE}
    with pytest.raises(EntryExistsError):
        tables.table_add("stage_class", key, "set_class", [1])
