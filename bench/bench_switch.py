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

import multiprocessing
import os
import select
import shutil
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench.bench_pipeline import loaded_pipeline, median_cpu_seconds, packet_mix
from bench.common import emit, median_seconds
from control.cli import OneLineErrors
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
                run_command("ip", "-n", name, "link", "set", interface, "mtu", "9000", "up")
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


def veth_frames(count: int, frame_bytes: int = 256) -> list[bytes]:
    from scapy.layers.inet import IP, UDP, IPOption
    from scapy.layers.l2 import Ether

    tag = IPOption(bytes([0x9E, 12, 0x10, 0, 0, 1, 0, 2, 0, 0, 0, 9]))
    frames = []
    for index in range(count):
        packet = (
            Ether(src="02:00:00:00:00:aa", dst="02:00:00:00:00:fe")
            / IP(src="10.0.0.1", dst="10.0.1.2", options=[tag] if index % 2 else [])
            / UDP(sport=4000, dport=5000)
        )
        packet = packet / (b"\0" * max(0, frame_bytes - len(packet)))
        frames.append(bytes(packet))
    return frames


@dataclass
class Drive:
    seconds: float
    received: int
    lost: int


def drive(sender: LinuxPort, receiver: LinuxPort, frames: list[bytes], window: int) -> Drive:
    """Send with at most ``window`` frames in flight; time until the last one arrived.

    A switch that drops (BMv2 drops when its queues fill) would stall the window: frames
    not seen within ``LOSS_WAIT_S`` of the last arrival are counted lost and leave it.
    """
    sent = received = lost = 0
    start = last_arrival = time.perf_counter()
    deadline = start + 60.0
    while sent < len(frames) or sent - received - lost > 0:
        now = time.perf_counter()
        if now > deadline:
            break
        while sent < len(frames) and sent - received - lost < window:
            sender.transmit(frames[sent], 0.0)
            sent += 1
        got = len(receiver.receive(256))
        if got:
            received += got
            last_arrival = time.perf_counter()
        else:
            select.select([receiver], [], [], 0.001)
            if time.perf_counter() - last_arrival > LOSS_WAIT_S:
                lost = sent - received
                last_arrival = time.perf_counter()
    if received + lost < len(frames):
        raise RuntimeError(f"only {received} of {len(frames)} frames came through")
    return Drive(last_arrival - start, received, lost)


LOSS_WAIT_S = 0.05


def through_veth(
    program: CompiledProgram, count: int, repeats: int, frame_bytes: int = 256
) -> dict[str, Any]:
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
        frames = veth_frames(count, frame_bytes)
        window = 256
        drive(sender, receiver, frames[: min(500, count)], window)  # warm-up
        drives = [drive(sender, receiver, frames, window) for _ in range(repeats)]
        parent_end.send("stop")
        if not parent_end.poll(30):
            raise RuntimeError("the switch process did not report")
        forwarded, cpu_s, counters = parent_end.recv()
        return {
            "packets_per_run": count,
            "runs": repeats,
            "frame_bytes": len(frames[0]),
            "window_frames": window,
            "packets_per_second": round(statistics.median(d.received / d.seconds for d in drives)),
            "lost_packets": sum(d.lost for d in drives),
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


def bmv2_through_veth(count: int, repeats: int, frame_bytes: int) -> dict[str, Any]:
    """The same drive through BMv2's ``simple_switch_grpc`` running p4c's beamer.p4."""
    import tempfile

    from google.protobuf import text_format
    from p4.config.v1 import p4info_pb2
    from p4.v1 import p4runtime_pb2

    from bmv2_topos.bmv2 import SIMPLE_SWITCH_GRPC, Bmv2Process
    from control.entries import ActionCall, EntryKey, Exact, Lpm, to_table_entry
    from control.p4runtime_client import P4Names, P4RuntimeClient

    if os.geteuid() != 0 or shutil.which("ip") is None:
        return {"skipped": "needs root and iproute2 for a network namespace"}
    p4c = shutil.which("p4c")
    if p4c is None or shutil.which(SIMPLE_SWITCH_GRPC) is None:
        return {"skipped": "needs p4c and simple_switch_grpc on PATH"}
    with tempfile.TemporaryDirectory() as tmp:
        source = REPO_ROOT / "p4src" / "beamer.p4"
        p4info_path = Path(tmp) / "beamer.p4info.txtpb"
        subprocess.run(
            [p4c, "--target", "bmv2", "--arch", "v1model", "-o", tmp,
             "--p4runtime-files", str(p4info_path), str(source)],
            check=True, capture_output=True, timeout=300,
        )  # fmt: skip
        p4info = text_format.Parse(p4info_path.read_text(), p4info_pb2.P4Info())
        netns = make_namespace()
        sender = receiver = None
        address = f"unix:{tmp}/p4rt.sock"
        try:
            with Bmv2Process(netns, [(0, "sw0"), (1, "sw1")], address) as switch:
                client = P4RuntimeClient(address, 0, timeout_s=30)
                try:
                    client.connect()
                    client.set_pipeline(p4info, (Path(tmp) / "beamer.json").read_bytes())
                    names = P4Names.build(p4info)
                    entries = [
                        (EntryKey("ipv4_lpm", (("hdr.ipv4.dstAddr", Lpm(0x0A000100, 24)),)),
                         ActionCall("ipv4_forward", (("dstAddr", 0x0200000000BB), ("port", 1)))),
                        (EntryKey("stage_class", (("hdr.beamer_tag.experiment_id", Exact(1)),
                                                  ("hdr.beamer_tag.stage_id", Exact(2)))),
                         ActionCall("set_class", (("class_id", 5),))),
                    ]  # fmt: skip
                    client.write(
                        [
                            p4runtime_pb2.Update(
                                type=p4runtime_pb2.Update.INSERT,
                                entity=p4runtime_pb2.Entity(
                                    table_entry=to_table_entry(key, action, names)
                                ),
                            )
                            for key, action in entries
                        ]
                    )
                finally:
                    client.close()
                sender = LinuxPort("h0", netns=netns)
                receiver = LinuxPort("h1", netns=netns)
                frames = veth_frames(count, frame_bytes)
                window = 256
                cpu_before = _children_cpu_s(switch.process.pid)
                warm = drive(sender, receiver, frames[: min(500, count)], window)
                drives = [drive(sender, receiver, frames, window) for _ in range(repeats)]
                cpu_s = _children_cpu_s(switch.process.pid) - cpu_before
                forwarded = warm.received + sum(d.received for d in drives)
                return {
                    "packets_per_run": count,
                    "runs": repeats,
                    "frame_bytes": len(frames[0]),
                    "window_frames": window,
                    "packets_per_second": round(
                        statistics.median(d.received / d.seconds for d in drives)
                    ),
                    "lost_packets": sum(d.lost for d in drives),
                    "switch_cpu_packets_per_second": round(forwarded / cpu_s) if cpu_s else None,
                }
        finally:
            for port in (sender, receiver):
                if port is not None:
                    port.close()
            run_command("ip", "netns", "del", netns)


def _children_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def main() -> None:
    parser = OneLineErrors(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer packets and runs")
    parser.add_argument("--no-bmv2", action="store_true", help="skip the BMv2 comparison")
    args = parser.parse_args()
    count = 2_000 if args.quick else 20_000
    repeats = 3 if args.quick else 5
    program = compile_file(REPO_ROOT / "p4src" / "beamer.p4")
    result: dict[str, Any] = {
        "benchmark": "switch_beamer_p4",
        "in_process": in_process(program, count, repeats),
        "veth": through_veth(program, count // 2, repeats),
    }
    if not args.no_bmv2:
        # Side by side through veth, one run each, small and jumbo frames: the embedded
        # target against BMv2 (simple_switch_grpc) running p4c's build of beamer.p4.
        side: dict[str, Any] = {}
        for frame_bytes in (256, 9000):
            veth_count = count // 4
            embedded = through_veth(program, veth_count, 1, frame_bytes)
            bmv2 = bmv2_through_veth(veth_count, 1, frame_bytes)
            entry: dict[str, Any] = {"embedded": embedded, "bmv2": bmv2}
            if "packets_per_second" in embedded and "packets_per_second" in bmv2:
                entry["ratio_embedded_to_bmv2"] = round(
                    embedded["packets_per_second"] / bmv2["packets_per_second"], 3
                )
            side[f"frame_{frame_bytes}_bytes"] = entry
        result["veth_side_by_side"] = side
    result["load_average_1min"] = round(os.getloadavg()[0], 2)
    emit(result)


if __name__ == "__main__":
    main()
