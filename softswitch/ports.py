"""Switch ports: in-memory ports for tests and Linux interfaces through AF_PACKET.

A :class:`LinuxPort` is one raw ``AF_PACKET`` socket bound to one interface, in
promiscuous mode, that ignores the copies of frames the switch itself sends
(``PACKET_OUTGOING``). Linux strips the outer 802.1Q/802.1ad tag of a received
frame and hands it over beside the packet (``PACKET_AUXDATA``); the port puts
it back, as libpcap (and so BMv2) does, so the program parses the frame as it
was on the wire. Its socket can be opened inside a named network namespace
(``ip netns add NAME``) without moving the whole process there, so a test or a
benchmark can drive interfaces of several namespaces at once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import socket
import struct
from dataclasses import dataclass
from typing import Protocol

from control.addresses import is_decimal
from control.errors import UserError
from softswitch.netns import run_in_netns

DROP_PORT = 511
"""v1model's drop port (``egress_spec`` 511 drops); no real port may use it."""

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_AUXDATA = 8
PACKET_STATISTICS = 6
PACKET_IGNORE_OUTGOING = 23
SIOCGIFMTU = 0x8921
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
ETHERNET_OVERHEAD_BYTES = 18
"""Ethernet header plus one VLAN tag: what a frame adds to the interface MTU."""
SOCKET_BUFFER_BYTES = 4 * 1024 * 1024
"""Kernel buffer per socket, so short bursts wait in the kernel instead of being lost."""
TP_STATUS_VLAN_VALID = 0x10
TP_STATUS_VLAN_TPID_VALID = 0x40
ETH_P_8021Q = 0x8100
MAC_ADDRESSES_BYTES = 12
AUXDATA = struct.Struct("=I12xHH")
"""``struct tpacket_auxdata``: tp_status, (tp_len, tp_snaplen, tp_mac, tp_net), tp_vlan_tci,
tp_vlan_tpid."""
AUXDATA_SPACE = socket.CMSG_SPACE(AUXDATA.size)
VLAN_TAG = struct.Struct("!HH")


@dataclass(slots=True)
class Departure:
    """A frame a port emitted and when its transmission started (switch clock)."""

    time_s: float
    frame: bytes


class Port(Protocol):
    """What the switch needs from any port."""

    name: str

    def transmit(self, frame: bytes, time_s: float) -> bool:
        """Send ``frame``; False when the port could not take it."""
        ...

    def close(self) -> None: ...


class MemoryPort:
    """A port whose output is a list: tests read exact bytes and departure times."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.departures: list[Departure] = []

    def transmit(self, frame: bytes, time_s: float) -> bool:
        self.departures.append(Departure(time_s, frame))
        return True

    def take(self) -> list[Departure]:
        """Return what left the port since the last call, and forget it."""
        taken, self.departures = self.departures, []
        return taken

    def close(self) -> None:
        pass


@dataclass(slots=True)
class LinuxPortCounters:
    received_frames: int = 0
    received_bytes: int = 0
    oversize_frames: int = 0
    """Frames longer than the MTU buffer (offloads left on): dropped, never truncated."""
    transmitted_frames: int = 0
    transmit_errors: int = 0
    kernel_drops: int = 0
    """Frames the kernel dropped because the socket's receive buffer was full."""


@dataclass(frozen=True, slots=True)
class InterfaceSpec:
    """One ``-i PORT@IFACE`` option."""

    port: int
    interface: str
    netns: str | None = None


def parse_interface_spec(text: str) -> InterfaceSpec:
    """Parse ``PORT@IFACE`` as simple_switch does, e.g. ``1@veth1``."""
    port_text, at, interface = text.partition("@")
    if not at or not port_text or not interface:
        raise UserError(f"-i {text}: expected PORT@INTERFACE, e.g. 1@veth1")
    if not is_decimal(port_text) or len(port_text) > 3:
        raise UserError(f"-i {text}: port {port_text!r} is not a number from 0 to {DROP_PORT - 1}")
    port = int(port_text)
    if not 0 <= port < DROP_PORT:
        raise UserError(f"-i {text}: port must be between 0 and {DROP_PORT - 1} (511 drops)")
    if len(interface) >= 16 or "/" in interface or interface in {".", ".."}:
        raise UserError(f"-i {text}: {interface!r} is not a valid interface name")
    return InterfaceSpec(port, interface)


def _open_packet_socket(interface: str) -> tuple[socket.socket, int]:
    """Raw socket bound to ``interface`` in promiscuous mode; returns it and the MTU."""
    try:
        ifindex = socket.if_nametoindex(interface)
    except OSError:
        raise UserError(f"interface {interface!r} does not exist") from None
    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    except PermissionError:
        raise UserError(f"interface {interface!r}: raw sockets need root (CAP_NET_RAW)") from None
    try:
        sock.bind((interface, ETH_P_ALL))
        membership = struct.pack("iHH8s", ifindex, PACKET_MR_PROMISC, 0, b"")
        sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, membership)
        # The stripped VLAN tag arrives beside each frame; receive() puts it back.
        sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
        # Kernels before 4.20 lack the option: outgoing copies are filtered on receive.
        with contextlib.suppress(OSError):
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        for forced, plain in (
            (SO_RCVBUFFORCE, socket.SO_RCVBUF),
            (SO_SNDBUFFORCE, socket.SO_SNDBUF),
        ):
            try:  # root may exceed net.core.rmem_max / wmem_max
                sock.setsockopt(socket.SOL_SOCKET, forced, SOCKET_BUFFER_BYTES)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, plain, SOCKET_BUFFER_BYTES)
        request = struct.pack("16si", interface.encode(), 0)
        mtu = struct.unpack("16si", fcntl.ioctl(sock.fileno(), SIOCGIFMTU, request))[1]
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock, mtu


class LinuxPort:
    """One Linux interface, read and written through an AF_PACKET raw socket."""

    def __init__(self, interface: str, *, netns: str | None = None) -> None:
        self.name = interface
        self.netns = netns
        self._socket, self.mtu = run_in_netns(netns, lambda: _open_packet_socket(interface))
        self.buffer_bytes = self.mtu + ETHERNET_OVERHEAD_BYTES
        self.counters = LinuxPortCounters()
        self._closed = False

    def fileno(self) -> int:
        return self._socket.fileno()

    def receive(self, max_frames: int) -> list[bytes]:
        """Read up to ``max_frames`` waiting frames without blocking."""
        frames: list[bytes] = []
        counters = self.counters
        recvmsg = self._socket.recvmsg
        buffer_bytes = self.buffer_bytes
        while len(frames) < max_frames:
            try:
                data, ancillary, flags, address = recvmsg(buffer_bytes, AUXDATA_SPACE)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as error:
                if error.errno == errno.ENETDOWN:
                    break
                raise
            if address[2] == socket.PACKET_OUTGOING:
                continue
            if flags & socket.MSG_TRUNC:
                counters.oversize_frames += 1
                continue
            for level, kind, aux in ancillary:
                if kind == PACKET_AUXDATA and level == SOL_PACKET:
                    status, tci, tpid = AUXDATA.unpack_from(aux)
                    # libpcap's test: kernels before 3.0 set no VLAN_VALID, only the TCI.
                    if status & TP_STATUS_VLAN_VALID or tci:
                        if not status & TP_STATUS_VLAN_TPID_VALID:
                            tpid = ETH_P_8021Q
                        data = (
                            data[:MAC_ADDRESSES_BYTES]
                            + VLAN_TAG.pack(tpid, tci)
                            + data[MAC_ADDRESSES_BYTES:]
                        )
            counters.received_frames += 1
            counters.received_bytes += len(data)
            frames.append(data)
        return frames

    def transmit(self, frame: bytes, time_s: float) -> bool:
        try:
            self._socket.send(frame)
        except OSError:
            # ENOBUFS/EAGAIN under overload, EINVAL for runts, ENETDOWN: the frame is lost.
            self.counters.transmit_errors += 1
            return False
        self.counters.transmitted_frames += 1
        return True

    def update_kernel_drops(self) -> int:
        """Add the kernel's drop count since the last call (reading resets it) and return it."""
        if self._closed:
            return self.counters.kernel_drops
        stats = self._socket.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
        _, drops = struct.unpack("II", stats)
        self.counters.kernel_drops += drops
        return self.counters.kernel_drops

    def close(self) -> None:
        if not self._closed:
            with contextlib.suppress(OSError):
                self.update_kernel_drops()
            self._closed = True
            self._socket.close()
