"""The switch on real Linux interfaces: veth pairs inside a throwaway network namespace.

Needs root (namespaces, raw sockets); skipped otherwise. Each test gets a
namespace with a unique name holding two veth pairs, ``sw0``–``h0`` and
``sw1``–``h1``: the switch owns ``sw0``/``sw1`` as ports 0/1, the test plays
the hosts on ``h0``/``h1``. The namespace (and with it every veth) is deleted
when the test ends, pass or fail.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from netns_helpers import two_veth_pairs
from scapy.layers.inet import IP, UDP, IPOption
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from softswitch.frontend import CompiledProgram, compile_file
from softswitch.ports import LinuxPort
from softswitch.switch import Switch

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("ip") is None,
        reason="needs root and iproute2 for network namespaces",
    ),
]

REPO_ROOT = Path(__file__).resolve().parent.parent
P4_SOURCE = REPO_ROOT / "p4src" / "beamer.p4"
HOST_MAC = "02:00:00:00:00:aa"
SWITCH_MAC = "02:00:00:00:00:fe"
NEXT_HOP_MAC = "02:00:00:00:00:bb"


@pytest.fixture
def netns() -> Iterator[str]:
    with two_veth_pairs("bmsw") as name:
        yield name


@pytest.fixture(scope="module")
def program() -> CompiledProgram:
    return compile_file(P4_SOURCE)


def tagged_frame(stage_id: int, sequence: int) -> bytes:
    """A UDP packet with a Beamer tag (experiment 1, ``stage_id``, coflow 9)."""
    tag = IPOption(struct.pack("!BBBBHHI", 0x9E, 12, 0x10, 0, 1, stage_id, 9))
    packet = (
        Ether(src=HOST_MAC, dst=SWITCH_MAC)
        / IP(src="10.0.0.1", dst="10.0.1.2", options=[tag])
        / UDP(sport=4000 + stage_id, dport=5000)
        / Raw(f"stage={stage_id} seq={sequence}".encode())
    )
    return bytes(packet)


def collect(port: LinuxPort, count: int, timeout_s: float) -> list[bytes]:
    frames: list[bytes] = []
    deadline_s = time.monotonic() + timeout_s
    while len(frames) < count and time.monotonic() < deadline_s:
        frames += port.receive(64)
        time.sleep(0.002)
    return frames


def test_beamer_p4_on_veth_sends_the_high_class_first(netns: str, program: CompiledProgram) -> None:
    with Switch() as switch:
        switch.add_interface(0, "sw0", netns=netns)
        switch.add_interface(1, "sw1", netns=netns)
        switch.load_pipeline(program)
        tables = switch.tables
        tables.table_add("ipv4_lpm", {"hdr.ipv4.dstAddr": ("10.0.1.0", 24)}, "ipv4_forward",
                         [NEXT_HOP_MAC, 1])  # fmt: skip
        for stage_id, klass in ((1, 1), (2, 6)):
            key = {"hdr.beamer_tag.experiment_id": 1, "hdr.beamer_tag.stage_id": stage_id}
            tables.table_add("stage_class", key, "set_class", [klass])
        switch.set_queue_rate(rate_pps=100, port=1)
        switch.start()
        host0 = LinuxPort("h0", netns=netns)
        host1 = LinuxPort("h1", netns=netns)
        try:
            sent = [tagged_frame(1, i) for i in range(8)] + [tagged_frame(2, i) for i in range(8)]
            for frame in sent:
                assert host0.transmit(frame, 0.0)
            received = collect(host1, len(sent), timeout_s=10.0)
        finally:
            host0.close()
            host1.close()
        switch.stop()
        assert switch.failure is None
        # Exactly what h0 sent arrived on sw0: the switch's own output was not read back.
        assert switch.counters.received_packets == len(sent)
    packets = [Ether(frame) for frame in received]
    assert len(packets) == len(sent)
    classes = [p[IP].tos >> 5 for p in packets]
    first_high = classes.index(6)
    # Once the port is busy, every waiting high-class packet overtakes the low ones.
    assert classes[first_high : first_high + 8] == [6] * 8
    assert all(c == 1 for c in classes[:first_high] + classes[first_high + 8 :])
    for p in packets:
        assert p[Ether].dst == NEXT_HOP_MAC and p[IP].ttl == 63
        checksum = p[IP].chksum
        del p[IP].chksum
        assert IP(bytes(p[IP])).chksum == checksum
    for stage_id, klass in ((1, 1), (2, 6)):
        payloads = [bytes(p[Raw].load) for p in packets if p[IP].tos >> 5 == klass]
        assert payloads == [f"stage={stage_id} seq={i}".encode() for i in range(8)]


@pytest.mark.parametrize(
    ("with_config", "stop_signal"),
    [(False, signal.SIGINT), (True, signal.SIGTERM), (True, signal.SIGHUP)],
    ids=["no-p4-sigint", "config-sigterm", "config-sighup"],
)
def test_cli_runs_on_interfaces_and_stops_cleanly_on_a_signal(
    netns: str, program: CompiledProgram, tmp_path: Path, with_config: bool, stop_signal: int
) -> None:
    config = tmp_path / "beamer.softswitch.json"
    config.write_bytes(program.device_config())
    command = [
        "ip", "netns", "exec", netns, sys.executable, "-m", "control.cli", "switch",
        "-i", "0@sw0", "-i", "1@sw1", "--priority-queues", "8", "--queue-rate-pps", "1000",
        str(config) if with_config else "--no-p4",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=REPO_ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    try:
        assert process.stderr is not None
        lines = []
        deadline_s = time.monotonic() + 30
        while time.monotonic() < deadline_s:
            line = process.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "ready:" in line:
                break
        ready = [line for line in lines if "ready: ports 0@sw0, 1@sw1" in line]
        assert ready, lines
        assert (str(config) in ready[0]) == with_config
        process.send_signal(stop_signal)
        _, rest = process.communicate(timeout=30)
        assert process.returncode == 0, rest
        assert f"{signal.Signals(stop_signal).name} received" in rest
        assert "stopped; counters" in rest
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_port_rate_holds_on_the_wall_clock_through_veth(
    netns: str, program: CompiledProgram
) -> None:
    """30 frames sent at once to a 100 packets/s port arrive spread over ~0.29 s."""
    rate_pps, count = 100, 30
    with Switch() as switch:
        switch.add_interface(0, "sw0", netns=netns)
        switch.add_interface(1, "sw1", netns=netns)
        switch.load_pipeline(program)
        switch.tables.table_add("ipv4_lpm", {"hdr.ipv4.dstAddr": ("10.0.1.0", 24)},
                                "ipv4_forward", [NEXT_HOP_MAC, 1])  # fmt: skip
        switch.set_queue_rate(rate_pps=rate_pps, port=1)
        switch.start()
        host0 = LinuxPort("h0", netns=netns)
        host1 = LinuxPort("h1", netns=netns)
        arrivals_s: list[float] = []
        frames = [tagged_frame(1, sequence) for sequence in range(count)]  # scapy is slow
        try:
            for frame in frames:
                host0.transmit(frame, 0.0)
            deadline_s = time.monotonic() + 10.0
            while len(arrivals_s) < count and time.monotonic() < deadline_s:
                select.select([host1], [], [], 0.05)
                arrivals_s += [time.monotonic()] * len(host1.receive(64))
        finally:
            host0.close()
            host1.close()
    assert len(arrivals_s) == count
    nominal_span_s = (count - 1) / rate_pps
    # Never faster than the line rate (reading jitter only shortens the span a little);
    # an unshaped port would deliver all 30 within a few milliseconds.
    assert arrivals_s[-1] - arrivals_s[0] >= 0.8 * nominal_span_s


def test_kernel_drops_of_an_unread_port_are_counted(netns: str) -> None:
    """A port nobody reads overflows its socket buffer; the loss is reported, not hidden."""
    reader = LinuxPort("sw0", netns=netns)
    writer = LinuxPort("h0", netns=netns)
    frame = tagged_frame(1, 0)
    sent = 15_000
    try:
        for _ in range(sent):
            writer.transmit(frame, 0.0)
        time.sleep(0.1)
        drops = reader.update_kernel_drops()
        received = 0
        while batch := reader.receive(1024):
            received += len(batch)
    finally:
        writer.close()
        reader.close()
    assert drops > 0
    assert received + drops == writer.counters.transmitted_frames == sent
