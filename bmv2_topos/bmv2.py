"""The BMv2 target: ``simple_switch_grpc`` command line, Thrift detection, HTB shaping.

BMv2 rate-limits each priority queue on its own (``set_queue_rate R port``
gives every class of the port its own R), so it has no port-level line rate
and two backlogged classes would both get R. A Beamer bottleneck must drain
all classes of a port at one rate, strictly by priority. We therefore leave
BMv2's queues unshaped and build the bottleneck on the switch's egress veth
with Linux HTB: a root class at the link rate, one child per class with a
tiny guaranteed rate, ``ceil`` = link rate and HTB ``prio`` 7 − class (HTB
serves lower ``prio`` first), and u32 filters on the DSCP that ``beamer.p4``
writes (DSCP = 8 × class, i.e. TOS = class << 5). Spare bandwidth goes to the
child with the lowest ``prio`` that has packets: strict priority at one rate.

For that queue to be the bottleneck, BMv2 must never wait on it: its port
sockets get send buffers that hold every class's queue
(:func:`widen_send_buffers`), and its own egress queues the same depth over
Thrift (:func:`thrift_call`). docs/emulation.md says what was measured.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import struct
import time
from collections.abc import Sequence

from control.errors import UserError
from softswitch.ports import SO_SNDBUFFORCE

SIMPLE_SWITCH_GRPC = "simple_switch_grpc"
PRIORITY_QUEUES = 8
GUARANTEED_KBIT = 8
"""Each class's guaranteed rate: small enough that order, not share, decides."""


def require_simple_switch_grpc() -> str:
    path = shutil.which(SIMPLE_SWITCH_GRPC)
    if path is None:
        raise UserError(
            f"--target bmv2: {SIMPLE_SWITCH_GRPC} is not on PATH "
            "(install BMv2, or use the default --target embedded)"
        )
    return path


def switch_command(
    executable: str,
    device_id: int,
    ports: Sequence[tuple[int, str]],
    grpc_addr: str,
    thrift_port: int | None,
    log_console: bool = False,
) -> list[str]:
    """``simple_switch_grpc`` with 8 priority queues; target options go after ``--``."""
    argv = [executable, "--device-id", str(device_id)]
    for port, interface in ports:
        argv += ["-i", f"{port}@{interface}"]
    if thrift_port is not None:
        argv += ["--thrift-port", str(thrift_port)]
    if log_console:
        argv.append("--log-console")
    argv += ["--no-p4", "--", "--grpc-server-addr", grpc_addr]
    argv += ["--priority-queues", str(PRIORITY_QUEUES)]
    return argv


def thrift_listening(port: int, host: str = "127.0.0.1", timeout_s: float = 3.0) -> bool:
    """True when something accepts on the Thrift port: BMv2 built ``--with-thrift``.

    Call it from inside the switch's namespace (the port is on its loopback).
    Our shaping never needs Thrift; it is reported so users know whether
    ``simple_switch_CLI`` will work on this build.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)


def tos_of_class(priority: int) -> int:
    """TOS byte of class ``priority``: DSCP = 8 × class, ECN bits zero."""
    return (8 * priority) << 2


def htb_commands(
    interface: str, rate_mbps: float, leaf_limit_packets: int | None = None
) -> list[str]:
    """``tc -batch`` lines making ``interface`` one strict-priority port of ``rate_mbps``.

    Class 1:1 is the port (rate = ceil = link rate); 1:1c (c = 10 + class) holds
    class c with HTB prio 7 − c. Unmatched traffic (ARP, untagged DSCP 0)
    falls into class 0's child, like the switch's default class.
    """
    rate = f"{rate_mbps:g}mbit"
    lines = [
        f"qdisc replace dev {interface} root handle 1: htb default {10 + 0}",
        f"class add dev {interface} parent 1: classid 1:1 htb rate {rate} ceil {rate}",
    ]
    for priority in range(PRIORITY_QUEUES):
        minor = 10 + priority
        lines.append(
            f"class add dev {interface} parent 1:1 classid 1:{minor} htb "
            f"rate {GUARANTEED_KBIT}kbit ceil {rate} prio {PRIORITY_QUEUES - 1 - priority}"
        )
        if leaf_limit_packets is not None:
            lines.append(
                f"qdisc add dev {interface} parent 1:{minor} handle {minor}: "
                f"pfifo limit {leaf_limit_packets}"
            )
        lines.append(
            f"filter add dev {interface} parent 1: protocol ip prio 1 u32 "
            f"match ip tos {tos_of_class(priority):#04x} 0xfc flowid 1:{minor}"
        )
    return lines


class Bmv2Process:
    """One ``simple_switch_grpc`` on interfaces of a network namespace (benchmarks):
    8 priority queues, P4Runtime on ``grpc_addr`` (a ``unix:`` socket path works from
    any namespace). Leaving the ``with`` ends it and waits for it.
    """

    def __init__(
        self,
        netns: str,
        ports: Sequence[tuple[int, str]],
        grpc_addr: str,
        device_id: int = 0,
    ) -> None:
        import subprocess

        self.grpc_addr = grpc_addr
        argv = switch_command(
            require_simple_switch_grpc(), device_id, ports, grpc_addr, thrift_port=None
        )
        self.process = subprocess.Popen(
            ["ip", "netns", "exec", netns, *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Until the Unix socket exists; UserError if the switch exits or never listens."""
        from pathlib import Path

        path = Path(self.grpc_addr.removeprefix("unix:"))
        deadline = time.monotonic() + timeout_s
        while not path.exists():
            if self.process.poll() is not None:
                raise UserError(f"simple_switch_grpc exited with status {self.process.returncode}")
            if time.monotonic() > deadline:
                raise UserError(f"simple_switch_grpc did not listen on {self.grpc_addr}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except Exception:
                self.process.kill()
                self.process.wait(10)

    def __enter__(self) -> Bmv2Process:
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def thrift_call(
    port: int, method: str, args: Sequence[tuple[int, int]], host: str = "127.0.0.1"
) -> int:
    """Call one ``SimpleSwitch`` Thrift method taking integer arguments; its i32 result.

    ``args`` are (Thrift type, value) pairs, fields numbered from 1: type 8 is i32,
    10 is i64. Speaks Thrift's strict binary protocol over a buffered transport
    with the ``simple_switch`` service multiplexed, as ``simple_switch_CLI`` does;
    written out here so that no Thrift bindings are needed. UserError on failure.
    """
    name = f"simple_switch:{method}".encode()
    body = struct.pack("!iI", -0x7FFEFFFF, len(name)) + name + struct.pack("!i", 1)
    for field_id, (kind, value) in enumerate(args, start=1):
        body += struct.pack("!bh", kind, field_id)
        body += struct.pack("!i" if kind == 8 else "!q", value)
    body += b"\0"
    try:
        with socket.create_connection((host, port), timeout=5.0) as conn:
            conn.sendall(body)
            reply = b""
            while len(reply) < 12 or not reply.endswith(b"\0"):
                chunk = conn.recv(4096)
                if not chunk:
                    break
                reply += chunk
    except OSError as error:
        raise UserError(f"Thrift {method} on port {port}: {error}") from None
    # version|type, name, seqid, then field 0 (i32 success) and STOP.
    (version_type, name_length) = struct.unpack("!iI", reply[:8])
    if version_type & 0xFF != 2:
        raise UserError(f"Thrift {method} on port {port}: the call failed")
    fields = reply[8 + name_length + 4 :]
    if len(fields) >= 7 and fields[0] == 8:
        result: int = struct.unpack("!i", fields[3:7])[0]
        return result
    return 0


def widen_send_buffers(pid: int, send_buffer_bytes: int) -> int:
    """Raise the send buffer of every packet socket of process ``pid``; how many.

    BMv2 writes each port's frames through a blocking ``AF_PACKET`` socket from a
    single transmit thread, and a frame waiting in the port's qdisc (our HTB
    bottleneck) still counts against that socket's send buffer, whose default
    (``net.core.wmem_default``, 208 KiB) holds about 12 jumbo frames. Past that the
    thread blocks and every port and class waits behind it in BMv2's FIFO output
    buffer: the strict-priority queue is no longer at the bottleneck. Each socket is
    borrowed from the process (``pidfd_getfd``, Linux 5.6+, needs root) and given
    ``SO_SNDBUFFORCE``; the machine's defaults stay as they are.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    widened = 0
    try:
        for entry in os.listdir(f"/proc/{pid}/fd"):
            try:
                if not os.readlink(f"/proc/{pid}/fd/{entry}").startswith("socket:"):
                    continue
            except OSError:
                continue
            fd = libc.syscall(_SYS_PIDFD_GETFD, pidfd, int(entry), 0)
            if fd < 0:
                continue
            borrowed = socket.socket(fileno=fd)
            try:
                if borrowed.family == socket.AF_PACKET:
                    borrowed.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, send_buffer_bytes)
                    widened += 1
            finally:
                borrowed.close()
    finally:
        os.close(pidfd)
    return widened


_SYS_PIDFD_GETFD = 438
JUMBO_FRAME_TRUESIZE_BYTES = 20_000
"""Kernel memory one 9000-byte frame holds while queued (payload, slab rounding, skb)."""
