"""Packets per second through the whole embedded switch running beamer.p4.

Two measurements, one JSON object:

* ``in_process``: frames handed to ``Switch.send`` on in-memory ports —
  ingress, the strict-priority traffic manager, egress, port output — with the
  same tables and packet mix as ``bench_pipeline``. The reference measured in
  the same run is the bare pipeline (ingress + egress, no queues), so the
  ratio is the share of the pipeline's rate the switch keeps. Measured both
  with unlimited ports (every packet leaves at once) and with every packet
  queued behind a rate-limited port first (virtual time, then drained).
* ``veth``: the switch in its own process on two veth pairs inside a network
  namespace created for the run (root only). The driver keeps a window of
  frames in flight from ``h0`` and counts what arrives on ``h1``: the rate is
  what the switch forwards end to end through real sockets.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import select
import shutil
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench.bench_pipeline import loaded_pipeline, median_cpu_seconds, packet_mix
from bench.common import emit, median_seconds
from softswitch.frontend import CompiledProgram, compile_file
from softswitch.ports import LinuxPort
from softswitch.switch import Switch, VirtualClock

REPO_ROOT = Path(__file__).resolve().parent.parent
PORTS = range(8)
"""bench_pipeline's routes spread packets over ports 0..7."""


def in_process(program: CompiledProgram, count: int, repeats: int) -> dict[str, Any]:
    packets = packet_mix(count)
    reference = loaded_pipeline(program)

    def bare_pipeline() -> None:
        process = reference.process
        for packet in packets:
            process(1, packet)

    def through_switch(rate_limited: bool) -> Callable[[], None]:
        switch = Switch(clock=VirtualClock(), priority_queues=8, queue_depth_packets=count)
        for port in PORTS:
            switch.add_memory_port(port)
        switch.set_pipeline(loaded_pipeline(program))
        if rate_limited:
            switch.set_queue_rate(rate_pps=1e6)

        def run() -> None:
            send = switch.send
            for packet in packets:
                send(1, packet)
            switch.run_until_idle()
            for port in PORTS:
                switch.ports[port].take()  # type: ignore[attr-defined]

        return run

    bare_pipeline()  # warm-up
    unlimited = through_switch(rate_limited=False)
    queued = through_switch(rate_limited=True)
    unlimited()
    queued()
    result: dict[str, Any] = {"packets_per_run": count, "runs": repeats}
    # Wall clock, and process CPU time (which a busy shared machine distorts less).
    for clock, measure in (("", median_seconds), ("cpu_", median_cpu_seconds)):
        bare_s = measure(bare_pipeline, repeats)
        unlimited_s = measure(unlimited, repeats)
        queued_s = measure(queued, repeats)
        result |= {
            f"{clock}pipeline_only_packets_per_second": round(count / bare_s),
            f"{clock}switch_unlimited_packets_per_second": round(count / unlimited_s),
            f"{clock}switch_queued_packets_per_second": round(count / queued_s),
            f"{clock}ratio_unlimited_to_pipeline": round(bare_s / unlimited_s, 3),
            f"{clock}ratio_queued_to_pipeline": round(bare_s / queued_s, 3),
        }
    return result


# -- through veth ---------------------------------------------------------------------


def run_command(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


def make_namespace() -> str:
    name = f"bmbench-{uuid.uuid4().hex[:8]}"
    run_command("ip", "netns", "add", name)
    try:
        run_command("ip", "netns", "exec", name, "sysctl", "-qw",
                    "net.ipv6.conf.all.disable_ipv6=1",
                    "net.ipv6.conf.default.disable_ipv6=1")  # fmt: skip
        for index in (0, 1):
            run_command("ip", "-n", name, "link", "add", f"sw{index}", "type", "veth",
                        "peer", "name", f"h{index}")  # fmt: skip
            for interface in (f"sw{index}", f"h{index}"):
                if shutil.which("ethtool"):
                    subprocess.run(["ip", "netns", "exec", name, "ethtool", "-K", interface,
                                    "tso", "off", "gso", "off", "gro", "off"],
                                   capture_output=True, timeout=60, check=False)  # fmt: skip
                run_command("ip", "-n", name, "link", "set", interface, "up")
    except BaseException:
        run_command("ip", "netns", "del", name)
        raise
    return name


def serve_switch(netns: str, device_config: bytes, control: Connection) -> None:
    """Child process: beamer.p4 switch on sw0/sw1 until the parent says stop."""
    from softswitch.frontend import CompiledProgram

    with Switch(priority_queues=8, queue_depth_packets=1024) as switch:
        switch.add_interface(0, "sw0", netns=netns)
        switch.add_interface(1, "sw1", netns=netns)
        switch.load_pipeline(CompiledProgram.from_device_config(device_config))
        switch.tables.table_add(
            "ipv4_lpm", {"hdr.ipv4.dstAddr": ("10.0.1.0", 24)}, "ipv4_forward",
            ["02:00:00:00:00:bb", 1],
        )  # fmt: skip
        switch.tables.table_add(
            "stage_class",
            {"hdr.beamer_tag.experiment_id": 1, "hdr.beamer_tag.stage_id": 2},
            "set_class",
            [5],
        )
        switch.start()
        cpu_start_s = time.process_time()
        control.send("ready")
        control.recv()
        switch.stop()
        cpu_s = time.process_time() - cpu_start_s
        control.send((switch.counters.received_packets, cpu_s, str(switch.counters)))


def veth_frames(count: int) -> list[bytes]:
    from scapy.layers.inet import IP, UDP, IPOption
    from scapy.layers.l2 import Ether

    tag = IPOption(bytes([0x9E, 12, 0x10, 0, 0, 1, 0, 2, 0, 0, 0, 9]))
    frames = []
    for index in range(count):
        packet = (
            Ether(src="02:00:00:00:00:aa", dst="02:00:00:00:00:fe")
            / IP(src="10.0.0.1", dst="10.0.1.2", options=[tag] if index % 2 else [])
            / UDP(sport=4000, dport=5000)
            / (b"\0" * 200)
        )
        frames.append(bytes(packet))
    return frames


def drive(sender: LinuxPort, receiver: LinuxPort, frames: list[bytes], window: int) -> float:
    """Send with at most ``window`` frames in flight; returns the seconds until all arrived."""
    sent = received = 0
    start = time.perf_counter()
    deadline = start + 60.0
    while received < len(frames) and time.perf_counter() < deadline:
        while sent < len(frames) and sent - received < window:
            sender.transmit(frames[sent], 0.0)
            sent += 1
        got = len(receiver.receive(256))
        if got == 0:
            select.select([receiver], [], [], 0.001)
        received += got
    elapsed = time.perf_counter() - start
    if received < len(frames):
        raise RuntimeError(f"only {received} of {len(frames)} frames came through")
    return elapsed


def through_veth(program: CompiledProgram, count: int, repeats: int) -> dict[str, Any]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return {"skipped": "needs root and iproute2 for a network namespace"}
    netns = make_namespace()
    context = multiprocessing.get_context("fork")
    parent_end, child_end = context.Pipe()
    child = context.Process(
        target=serve_switch, args=(netns, program.device_config(), child_end), daemon=True
    )
    sender = receiver = None
    try:
        child.start()
        if not parent_end.poll(60) or parent_end.recv() != "ready":
            raise RuntimeError("the switch process did not start")
        sender = LinuxPort("h0", netns=netns)
        receiver = LinuxPort("h1", netns=netns)
        frames = veth_frames(count)
        window = 256
        drive(sender, receiver, frames[: min(500, count)], window)  # warm-up
        samples = [drive(sender, receiver, frames, window) for _ in range(repeats)]
        parent_end.send("stop")
        if not parent_end.poll(30):
            raise RuntimeError("the switch process did not report")
        forwarded, cpu_s, counters = parent_end.recv()
        seconds = statistics.median(samples)
        return {
            "packets_per_run": count,
            "runs": repeats,
            "frame_bytes": len(frames[0]),
            "window_frames": window,
            "packets_per_second": round(count / seconds),
            # The switch process's own CPU time: what one core would forward.
            "switch_cpu_packets_per_second": round(forwarded / cpu_s) if cpu_s else None,
            "switch_counters": counters,
        }
    finally:
        for port in (sender, receiver):
            if port is not None:
                port.close()
        if child.pid is not None and child.is_alive():
            child.terminate()
        child.join(10)
        run_command("ip", "netns", "del", netns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer packets and runs")
    args = parser.parse_args()
    count = 2_000 if args.quick else 20_000
    repeats = 3 if args.quick else 5
    program = compile_file(REPO_ROOT / "p4src" / "beamer.p4")
    emit(
        {
            "benchmark": "switch_beamer_p4",
            "in_process": in_process(program, count, repeats),
            "veth": through_veth(program, count // 2, repeats),
            "load_average_1min": round(os.getloadavg()[0], 2),
        }
    )


if __name__ == "__main__":
    main()
