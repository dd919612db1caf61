"""Differential packet tests: the same frames through BMv2 and the embedded target.

For beamer.p4 and four other v1model programs (IPv4 forwarding, a tunnel, a
register-and-hash program with const entries, an Ethernet switch with an ACL
and per-port registers), both targets get the same P4Info (p4c's), the same
table entries over P4Runtime and the same frames, well-formed and malformed;
what comes out of every port must be the same frames, byte for byte (in any
order: frames of different classes may pass each other in the priority queues).
Needs root, p4c and simple_switch_grpc; skipped otherwise.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from bmv2_tools import REPO_ROOT
from diff_harness import switch_under_test
from scapy.layers.inet import IP, TCP, UDP, IPOption
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from control.entries import ActionCall, EntryKey, Exact, Lpm, Ternary

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")

MAC_A = "02:00:00:00:00:aa"
MAC_SW = "02:00:00:00:00:fe"
MAC_B = "02:00:00:00:00:bb"
MAC_C = "02:00:00:00:00:cc"

Entries = list[tuple[EntryKey, ActionCall]]


@dataclass
class Case:
    source: Path
    entries: Entries
    frames: list[tuple[int, bytes]]
    ports: int = 3


def entry(
    table: str,
    match: Sequence[tuple[str, Exact | Lpm | Ternary]],
    action: str,
    params: Sequence[tuple[str, int]] = (),
    priority: int = 0,
) -> tuple[EntryKey, ActionCall]:
    return EntryKey(table, tuple(match), priority), ActionCall(action, tuple(params))


def mac(text: str) -> int:
    return int(text.replace(":", ""), 16)


def ipv4(text: str) -> int:
    return int.from_bytes(bytes(int(x) for x in text.split(".")), "big")


def raw_ipv4(ihl: int, version: int = 4, total: int = 40, payload: bytes = b"\0" * 20) -> bytes:
    """An IPv4 header written by hand (for lengths scapy would correct)."""
    header = struct.pack(
        "!BBHHHBBH4s4s", version << 4 | ihl, 0, total, 1, 0, 64, 17, 0,
        bytes([10, 0, 0, 1]), bytes([10, 0, 1, 2]),
    )  # fmt: skip
    return header + payload


def eth(payload: bytes, ether_type: int = 0x0800) -> bytes:
    return bytes(Ether(src=MAC_A, dst=MAC_SW, type=ether_type)) + payload


def beamer_case() -> Case:
    def tag(coflow: int, stage: int = 2, length: int = 12) -> IPOption:
        body = struct.pack("!BBBBHHI", 0x9E, length, 0x10, 0, 1, stage, coflow)
        return IPOption(body[:length] if length < 12 else body)

    base = Ether(src=MAC_A, dst=MAC_SW)
    frames = [
        base / IP(src="10.0.0.1", dst="10.0.1.2") / UDP(sport=1, dport=2) / Raw(b"x" * 64),
        base / IP(src="10.0.0.1", dst="10.0.1.2", options=[tag(9)]) / UDP() / Raw(b"y" * 32),
        base / IP(src="10.0.0.1", dst="10.0.2.7", options=[tag(8)]) / UDP() / Raw(b"z"),
        base / IP(src="10.0.0.1", dst="10.0.2.7", options=[tag(8, stage=3)]) / TCP(flags="A"),
        base / IP(src="10.0.0.1", dst="10.0.1.2", options=[tag(9)]) / TCP(flags="PA") / b"data",
        base / IP(src="10.0.0.1", dst="10.0.1.2", ttl=1) / UDP(),  # TTL expires: dropped
        base / IP(src="10.0.0.1", dst="10.0.1.2", chksum=0x1234) / UDP(),  # bad checksum
        base / IP(src="10.0.0.1", dst="10.9.9.9") / UDP(),  # no route: dropped
        base / IP(src="10.0.0.1", dst="10.0.1.2", options=[IPOption(b"\x94\x04\0\0")]) / UDP(),
        base
        / IP(src="10.0.0.1", dst="10.0.1.2", options=[tag(9), IPOption(b"\x01" * 4)])
        / UDP(),  # tag then NOPs (IHL 9)
        base / IP(src="10.0.0.1", dst="10.0.1.2", options=[tag(9, length=8)]) / UDP(),
        base / IP(src="10.0.0.1", dst="10.0.1.2", frag=3, proto=17) / Raw(b"f" * 16),
        base / ARP(pdst="10.0.1.2"),  # not IPv4: dropped
    ]
    wire = [bytes(frame) for frame in frames]
    wire += [
        eth(raw_ipv4(ihl=4)),  # IHL < 5: parser error
        eth(raw_ipv4(ihl=5, version=6)),  # version 6 under EtherType IPv4
        eth(raw_ipv4(ihl=5)[:12]),  # IPv4 header cut short
        eth(raw_ipv4(ihl=15, payload=b"\0" * 8)),  # options longer than the frame
        bytes(Ether(src=MAC_A, dst=MAC_SW, type=0x0800))[:13],  # runt: 13 bytes
    ]
    entries = [
        entry("ipv4_lpm", [("hdr.ipv4.dstAddr", Lpm(ipv4("10.0.1.0"), 24))], "ipv4_forward",
              [("dstAddr", mac(MAC_B)), ("port", 1)]),
        entry("ipv4_lpm", [("hdr.ipv4.dstAddr", Lpm(ipv4("10.0.2.0"), 24))], "ipv4_forward",
              [("dstAddr", mac(MAC_C)), ("port", 2)]),
        entry("stage_class", [("hdr.beamer_tag.experiment_id", Exact(1)),
                              ("hdr.beamer_tag.stage_id", Exact(2))], "set_class",
              [("class_id", 5)]),
        entry("coflow_class", [("hdr.beamer_tag.experiment_id", Exact(1)),
                               ("hdr.beamer_tag.stage_id", Exact(2)),
                               ("hdr.beamer_tag.coflow_id", Exact(9))], "set_class",
              [("class_id", 6)]),
    ]  # fmt: skip
    return Case(REPO_ROOT / "p4src" / "beamer.p4", entries, [(0, f) for f in wire])


def basic_case() -> Case:
    base = Ether(src=MAC_A, dst=MAC_SW)
    frames = [
        base / IP(src="10.0.0.1", dst="10.0.1.5") / UDP() / Raw(b"a" * 100),
        base / IP(src="10.0.0.1", dst="10.0.2.5", ttl=2) / TCP() / Raw(b"b" * 10),
        base / IP(src="10.0.0.1", dst="10.0.3.5") / UDP(),  # default action: drop
        base / IP(src="10.0.0.1", dst="10.0.1.5", options=[IPOption(b"\x94\x04\0\0")]) / UDP(),
        base / ARP(),
    ]
    wire = [bytes(frame) for frame in frames] + [
        eth(raw_ipv4(ihl=5)[:10]),
        eth(raw_ipv4(ihl=5, version=6)),
    ]
    entries = [
        entry("ipv4_lpm", [("hdr.ipv4.dstAddr", Lpm(ipv4("10.0.1.0"), 24))], "ipv4_forward",
              [("dstAddr", mac(MAC_B)), ("port", 1)]),
        entry("ipv4_lpm", [("hdr.ipv4.dstAddr", Lpm(ipv4("10.0.2.0"), 24))], "ipv4_forward",
              [("dstAddr", mac(MAC_C)), ("port", 2)]),
    ]  # fmt: skip
    return Case(REPO_ROOT / "tests" / "p4progs" / "basic.p4", entries, [(0, f) for f in wire])


def tunnel_case() -> Case:
    def tunnel(dst_id: int, proto: int, inner: bytes) -> bytes:
        return eth(struct.pack("!HH", proto, dst_id) + inner, ether_type=0x1212)

    inner = bytes(IP(src="10.0.0.1", dst="10.0.1.5") / UDP() / Raw(b"t" * 20))
    wire = [
        tunnel(7, 0x0800, inner),
        tunnel(8, 0x0800, inner),  # no tunnel entry: dropped
        tunnel(7, 0x86DD, b"\x60" + b"\0" * 39),  # not IPv4 inside
        eth(b"\x08\x00\x00", ether_type=0x1212),  # tunnel header cut short
        bytes(Ether(src=MAC_A, dst=MAC_SW) / IP(src="10.0.0.1", dst="10.0.1.5") / UDP()),
    ]
    entries = [
        entry("tunnel_exact", [("hdr.tunnel.dst_id", Exact(7))], "tunnel_forward", [("port", 2)]),
        entry("ipv4_lpm", [("hdr.ipv4.dstAddr", Lpm(ipv4("10.0.1.0"), 24))], "ipv4_forward",
              [("dstAddr", mac(MAC_B)), ("port", 1)]),
    ]  # fmt: skip
    return Case(REPO_ROOT / "tests" / "p4progs" / "tunnel.p4", entries, [(0, f) for f in wire])


def features_case() -> Case:
    def op(opcode: int, flags: int, a: int, b: int) -> bytes:
        return eth(struct.pack("!BBHHI", opcode, flags, a, b, 0), ether_type=0x88B5)

    wire = [
        op(0x01, 0, 0xFFF0, 0x0020),  # add, wrapping
        op(0x01, 1, 0xFFF0, 0x0020),  # add, saturating
        op(0x02, 0, 0x1234, 0x5678),  # swap (writes register slot 4)
        op(0x11, 0, 0xABCD, 0x0001),  # crc32
        op(0x12, 0, 0x0001, 0x0002),  # csum16 + 0x10000
        op(0x13, 0, 0x0003, 0x0004),  # csum16 via the masked entry
        op(0x02, 0, 0x0004, 0x0000),  # same slot: source MAC shows the previous result
        op(0x30, 0, 0x0005, 0x0000),  # no entry: NoAction
        op(0xEE, 0, 0, 0),  # strip the header
        op(0xFF, 0, 0, 0),  # drop
        op(0xF0, 0, 0, 0),  # rejected by the parser
        op(0x01, 0x80, 1, 2),  # bad flags: parser error, dropped
        eth(b"\x01\x00\x00", ether_type=0x88B5),  # op header cut short
        eth(b"\0" * 30, ether_type=0x9000),  # other EtherType: forwarded unchanged
    ]
    entries = [entry("marked_slots", [("meta.slot", Exact(4))], "NoAction")]
    return Case(REPO_ROOT / "tests" / "p4progs" / "features.p4", entries, [(0, f) for f in wire])


def l2_stats_case() -> Case:
    def frame(src: str, dst: str, ether_type: int = 0x0800, body: bytes = b"\0" * 46) -> bytes:
        return bytes(Ether(src=src, dst=dst, type=ether_type)) + body

    probe = struct.pack("!BBII", 1, 0, 0, 0)
    frames = [
        (0, frame(MAC_A, MAC_B)),
        (0, frame(MAC_A, MAC_B, 0x88B6, probe)),  # counts 2 packets on port 0
        (1, frame(MAC_B, MAC_A, 0x88B6, probe + b"\0" * 20)),
        (0, frame(MAC_A, MAC_C, 0x86DD)),  # IPv6 EtherType denied by the ACL
        (0, frame("02:00:00:00:00:66", MAC_C)),  # source denied by a lower-priority rule
        (0, frame(MAC_A, "02:00:00:00:00:77")),  # unknown destination: discarded
        (0, frame(MAC_A, MAC_B, 0x88B6, probe[:3])),  # probe cut short
        (0, frame(MAC_A, MAC_B, 0x88B6, probe)),  # registers kept counting
    ]
    entries = [
        entry("dmac", [("hdr.eth.dst", Exact(mac(MAC_B)))], "to_port", [("port", 1)]),
        entry("dmac", [("hdr.eth.dst", Exact(mac(MAC_A)))], "to_port", [("port", 0)]),
        entry("dmac", [("hdr.eth.dst", Exact(mac(MAC_C)))], "to_port", [("port", 2)]),
        # Don't-care ternary fields are left out (P4Runtime spec 9.1.1).
        entry("acl", [("hdr.eth.type", Ternary(0x86DD, 0xFFFF))], "deny", priority=20),
        entry("acl", [("hdr.eth.src", Ternary(mac("02:00:00:00:00:66"), (1 << 48) - 1))],
              "deny", priority=10),
        entry("port_mac", [("sm.egress_port", Exact(1))], "set_src",
              [("mac", mac("02:00:00:00:01:01"))]),
    ]  # fmt: skip
    return Case(REPO_ROOT / "tests" / "p4progs" / "l2_stats.p4", entries, frames)


CASES: dict[str, Callable[[], Case]] = {
    "beamer": beamer_case,
    "basic": basic_case,
    "tunnel": tunnel_case,
    "features": features_case,
    "l2_stats": l2_stats_case,
}


def run_case(target: str, case: Case) -> dict[int, list[bytes]]:
    with switch_under_test(target, case.source, case.ports) as switch:
        switch.insert(case.entries)
        return switch.exchange(case.frames)


@pytest.mark.parametrize("name", list(CASES))
def test_same_frames_out_of_bmv2_and_the_embedded_target(name: str) -> None:
    case = CASES[name]()
    bmv2 = run_case("bmv2", case)
    embedded = run_case("embedded", case)
    assert sum(len(frames) for frames in bmv2.values()) > 0, "BMv2 forwarded nothing"
    for port in bmv2:
        # Sorted: strict-priority queues may legitimately reorder frames of different
        # classes that meet in a queue; each frame must still be the same bytes.
        assert sorted(f.hex() for f in embedded[port]) == sorted(f.hex() for f in bmv2[port]), (
            f"port {port}"
        )


def _queue_counts_after(
    target: str, case: Case
) -> tuple[dict[int, list[bytes]], dict[int, tuple[int, int]]]:
    with switch_under_test(target, case.source, case.ports) as switch:
        switch.insert(case.entries)
        received = switch.exchange(case.frames)
        counter_id = switch.names.counter("queue_counter").id
        return received, switch.client.read_counter(counter_id)


def test_egress_counts_a_packet_sent_to_a_port_with_no_interface_as_bmv2_does() -> None:
    """beamer.p4's queue counter runs in egress: BMv2 runs egress for a port number
    with no interface and loses the frame after it; so must the embedded target."""
    case = beamer_case()
    case.entries.append(
        entry(
            "ipv4_lpm",
            [("hdr.ipv4.dstAddr", Lpm(ipv4("10.0.6.0"), 24))],
            "ipv4_forward",
            [("dstAddr", mac(MAC_C)), ("port", 7)],
        )
    )
    to_nowhere = bytes(
        Ether(src=MAC_A, dst=MAC_SW) / IP(src="10.0.0.1", dst="10.0.6.6") / UDP() / Raw(b"n" * 10)
    )
    case.frames = [(0, to_nowhere)] * 3
    bmv2_frames, bmv2_counts = _queue_counts_after("bmv2", case)
    embedded_frames, embedded_counts = _queue_counts_after("embedded", case)
    assert all(not frames for frames in bmv2_frames.values())
    assert all(not frames for frames in embedded_frames.values())
    assert bmv2_counts == embedded_counts
    assert bmv2_counts[0] == (3 * len(to_nowhere), 3)
