"""802.1Q tags survive the trip from a Linux interface into the P4 program.

Linux strips the outer VLAN tag of every received frame and keeps it beside
the packet; a P4 target must put it back, as libpcap (and so BMv2) does,
or the program parses another EtherType than the one on the wire. Needs root
(a throwaway network namespace with veth pairs ``sw0``–``h0`` and
``sw1``–``h1``, deleted when the test ends, pass or fail); the differential
check also needs p4c and simple_switch_grpc.
"""

from __future__ import annotations

import os
import select
import shutil
import time
from collections.abc import Iterator

import pytest
from bmv2_tools import REPO_ROOT
from netns_helpers import two_veth_pairs
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Dot1AD, Dot1Q, Ether
from scapy.packet import Raw

from softswitch.frontend import compile_file
from softswitch.ports import LinuxPort
from softswitch.switch import Switch

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("ip") is None,
        reason="needs root and iproute2 for network namespaces",
    ),
]

MAC_A = "02:00:00:00:00:aa"
MAC_B = "02:00:00:00:00:bb"
NEXT_HOP_MAC = "02:00:00:00:00:cc"
L2_PROGRAM = REPO_ROOT / "tests" / "p4progs" / "l2_stats.p4"


@pytest.fixture
def netns() -> Iterator[str]:
    with two_veth_pairs("bmvlan") as name:
        yield name


def frames_on_the_wire() -> list[bytes]:
    """Tagged frames of every kind Linux untags on receive, and an untagged one."""
    body = IP(src="10.0.0.1", dst="10.0.1.2") / UDP(sport=1, dport=2) / Raw(b"v" * 40)
    frames = [
        Ether(src=MAC_A, dst=MAC_B) / Dot1Q(vlan=5) / body,
        Ether(src=MAC_A, dst=MAC_B) / Dot1Q(prio=3, vlan=0) / body,  # priority tag only
        Ether(src=MAC_A, dst=MAC_B) / Dot1Q(prio=7, dei=1, vlan=4094) / ARP(),
        Ether(src=MAC_A, dst=MAC_B) / Dot1AD(vlan=100) / Dot1Q(vlan=5) / body,  # QinQ
        Ether(src=MAC_A, dst=MAC_B) / body,
    ]
    return [bytes(frame) for frame in frames]


def read(port: LinuxPort, count: int) -> list[bytes]:
    """Wait for ``count`` frames on ``port`` (or give up after a generous while)."""
    frames: list[bytes] = []
    deadline_s = time.monotonic() + 10.0
    while len(frames) < count and time.monotonic() < deadline_s:
        select.select([port], [], [], 0.05)
        frames += port.receive(64)
    return frames


def test_a_port_hands_over_frames_with_their_vlan_tags(netns: str) -> None:
    """What the program gets is what was on the wire: tag, priority bits, QinQ TPID 0x88a8."""
    sent = frames_on_the_wire()
    switch_side = LinuxPort("sw0", netns=netns)
    host = LinuxPort("h0", netns=netns)
    try:
        for frame in sent:
            assert host.transmit(frame, 0.0)
        received = read(switch_side, len(sent))
    finally:
        host.close()
        switch_side.close()
    assert [frame.hex() for frame in received] == [frame.hex() for frame in sent]
    assert received[3][12:14] == b"\x88\xa8"
    assert switch_side.counters.received_bytes == sum(len(frame) for frame in sent)


def test_the_switch_forwards_tagged_frames_with_their_tags(netns: str) -> None:
    """An L2 program forwarding on the destination MAC emits each frame unchanged."""
    sent = frames_on_the_wire()
    with Switch() as switch:
        switch.add_interface(0, "sw0", netns=netns)
        switch.add_interface(1, "sw1", netns=netns)
        switch.load_pipeline(compile_file(L2_PROGRAM))
        switch.tables.table_add("dmac", {"hdr.eth.dst": MAC_B}, "to_port", [1])
        switch.start()
        host0 = LinuxPort("h0", netns=netns)
        host1 = LinuxPort("h1", netns=netns)
        try:
            for frame in sent:
                assert host0.transmit(frame, 0.0)
            received = read(host1, len(sent))
        finally:
            host0.close()
            host1.close()
        switch.stop()
        assert switch.failure is None
    assert [frame.hex() for frame in received] == [frame.hex() for frame in sent]


def test_beamer_p4_drops_a_tagged_ipv4_packet_as_bmv2_does(netns: str) -> None:
    """beamer.p4 parses only untagged IPv4: a tagged packet is not routed, the same one untagged is.

    Both take the same queue, so had the tagged one been routed it would arrive first.
    """
    packet = IP(src="10.0.0.1", dst="10.0.1.2") / UDP(sport=1, dport=2)
    tagged = bytes(Ether(src=MAC_A, dst=MAC_B) / Dot1Q(vlan=5) / packet / Raw(b"tagged"))
    untagged = bytes(Ether(src=MAC_A, dst=MAC_B) / packet / Raw(b"untagged"))
    with Switch() as switch:
        switch.add_interface(0, "sw0", netns=netns)
        switch.add_interface(1, "sw1", netns=netns)
        switch.load_pipeline(compile_file(REPO_ROOT / "p4src" / "beamer.p4"))
        switch.tables.table_add("ipv4_lpm", {"hdr.ipv4.dstAddr": ("10.0.1.0", 24)},
                                "ipv4_forward", [NEXT_HOP_MAC, 1])  # fmt: skip
        switch.start()
        host0 = LinuxPort("h0", netns=netns)
        host1 = LinuxPort("h1", netns=netns)
        try:
            assert host0.transmit(tagged, 0.0)
            assert host0.transmit(untagged, 0.0)
            received = read(host1, 1)
        finally:
            host0.close()
            host1.close()
        switch.stop()
        assert switch.failure is None
    routed = Ether(received[0])
    assert routed[Raw].load == b"untagged"
    assert routed.type == 0x0800 and routed.dst == NEXT_HOP_MAC and routed[IP].ttl == 63


def test_bmv2_and_the_embedded_target_see_the_same_tags() -> None:
    """The L2 program forwards the tags unchanged on both; beamer.p4 drops them on both."""
    import test_bmv2_packets as packets  # a module import: its tests are not collected twice

    tagged = [frame for frame in frames_on_the_wire() if frame[12:14] != b"\x08\x00"]
    to_b = packets.entry("dmac", [("hdr.eth.dst", packets.Exact(packets.mac(MAC_B)))],
                         "to_port", [("port", 1)])  # fmt: skip
    l2_case = packets.Case(L2_PROGRAM, [to_b], [(0, frame) for frame in tagged])
    bmv2 = packets.run_case("bmv2", l2_case)
    assert bmv2 == {0: [], 1: tagged, 2: []}
    assert packets.run_case("embedded", l2_case) == bmv2
    # beamer.p4 routes the IPv4 packet inside the first frame when the tag is lost.
    beamer = packets.beamer_case()
    beamer_case = packets.Case(beamer.source, beamer.entries, l2_case.frames)
    bmv2 = packets.run_case("bmv2", beamer_case)
    assert bmv2 == {0: [], 1: [], 2: []}
    assert packets.run_case("embedded", beamer_case) == bmv2
