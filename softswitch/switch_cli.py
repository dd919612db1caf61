"""``beamer switch``: run the embedded P4 target on Linux interfaces.

Options follow simple_switch_grpc's names so that launch scripts read the same:
``beamer switch -i 0@veth0 -i 1@veth1 --priority-queues 8 --device-id 0
--grpc-server-addr 127.0.0.1:9559 build/beamer.softswitch.json``. The program is
either a device config written by ``beamer compile`` (or a ``.p4`` file,
compiled on start), or ``--no-p4``: then every packet is dropped until a
controller pushes a pipeline over P4Runtime.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import signal
import socket
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from control.addresses import checked_hostport, is_decimal, split_hostport
from control.errors import UserError
from control.files import read_bytes
from control.interrupts import restore_handlers
from control.options import integer, number, path_option
from softswitch.ports import InterfaceSpec, LinuxPort, parse_interface_spec
from softswitch.switch import Switch
from softswitch.traffic_manager import (
    DEFAULT_PRIORITY_QUEUES,
    DEFAULT_QUEUE_DEPTH_PACKETS,
    RATE_BPS_RANGE,
    RATE_PPS_RANGE,
)

if TYPE_CHECKING:
    from softswitch.frontend import CompiledProgram

log = logging.getLogger("beamer.switch")

LOG_LEVELS = ("debug", "info", "warning", "error")
HEALTH_CHECK_S = 0.5


class Server(Protocol):
    addr: str
    """Where it serves: with port 0 asked, the port bound."""

    def start(self) -> None: ...
    def stop(self) -> None: ...


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "switch",
        help="run the embedded P4 target on Linux interfaces",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-i",
        "--interface",
        dest="interfaces",
        action="append",
        default=[],
        metavar="PORT@IFACE",
        help="attach interface IFACE as port PORT (repeat for each port)",
    )
    parser.add_argument(
        "--priority-queues",
        type=_int_in(1, 8),
        default=DEFAULT_PRIORITY_QUEUES,
        metavar="N",
        help=f"strict-priority queues per port, queue 0 lowest (default {DEFAULT_PRIORITY_QUEUES};"
        " simple_switch's default is 1)",
    )
    parser.add_argument("--device-id", type=_int_in(0, 2**64 - 1), default=0, metavar="N")
    parser.add_argument(
        "--grpc-server-addr",
        metavar="HOST:PORT",
        help="serve P4Runtime on this address (e.g. 127.0.0.1:9559); none without it",
    )
    rate = parser.add_mutually_exclusive_group()
    rate.add_argument(
        "--queue-rate-pps",
        type=_float_in(*RATE_PPS_RANGE),
        metavar="R",
        help="line rate of every port in packets/s (default: unlimited)",
    )
    rate.add_argument(
        "--queue-rate-bps",
        type=_float_in(*RATE_BPS_RANGE),
        metavar="R",
        help="line rate of every port in bits/s (default: unlimited)",
    )
    parser.add_argument(
        "--queue-depth",
        type=_int_in(1, 1_000_000),
        default=DEFAULT_QUEUE_DEPTH_PACKETS,
        metavar="PACKETS",
        help=f"depth of each queue in packets (default {DEFAULT_QUEUE_DEPTH_PACKETS})",
    )
    parser.add_argument(
        "--per-queue-shaping",
        action="store_true",
        help="shape each priority queue at the rate on its own, as BMv2 does, instead of"
        " draining all queues of a port at one line rate",
    )
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="info")
    program = parser.add_mutually_exclusive_group(required=True)
    program.add_argument(
        "--no-p4", action="store_true", help="start without a program (push one over P4Runtime)"
    )
    program.add_argument(
        "config",
        nargs="?",
        type=path_option,
        metavar="CONFIG",
        help="device config from `beamer compile` (or a .p4 source file)",
    )
    parser.set_defaults(func=run)


def _int_in(low: int, high: int) -> Any:
    def parse(text: str) -> int:
        value = integer(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not between {low} and {high}")
        return value

    return parse


def _float_in(low: float, high: float) -> Any:
    def parse(text: str) -> float:
        value = number(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be a number in {low:g}..{high:g}, got {text}")
        return value

    return parse


def load_program(path: Path) -> CompiledProgram:
    """A device config from ``beamer compile``, or P4 source compiled on the spot."""
    from softswitch.frontend import CompiledProgram, compile_file

    if path.suffix == ".p4":
        return compile_file(path)
    try:
        return CompiledProgram.from_device_config(read_bytes(path, what="device config"))
    except UserError as error:
        if str(path) in str(error):
            raise
        raise UserError(f"{path}: {error}") from None
    except (ValueError, KeyError, TypeError) as error:
        raise UserError(
            f"{path}: not a device config written by `beamer compile`: {error}"
        ) from None


EVERY_INTERFACE = "[::]"
"""What ``:PORT`` (and ``*:PORT``, ``0:PORT``) serves on: gRPC binds its wildcard on IPv6
and IPv4 (IPv4 alone on a host without IPv6), and refuses these hosts itself ("host must
not be empty", "address lookup failed")."""


def check_server_address(text: str) -> str:
    """``--grpc-server-addr`` as gRPC takes it (``HOST:PORT``, ``ipv4:``/``ipv6:``/``dns:``
    forms, ``unix:PATH``), its port checked here: gRPC reads a port above 65535 modulo
    65536 (``:99999`` served on 34463) and an empty address would quietly mean none.
    Returns the address to serve: ``:PORT`` becomes every interface's."""
    if text.startswith("unix:") and len(text) > len("unix:"):
        return text
    host, colon, port = text.rpartition(":")
    if not colon or not is_decimal(port) or len(port) > 5 or int(port) > 65535:
        raise UserError(f"--grpc-server-addr: {text!r} is not HOST:PORT with a port in 0..65535")
    return f"{EVERY_INTERFACE}:{port}" if host in ("", "*", "0") else text


def check_bindable(addr: str) -> None:
    """Bind a ``HOST:PORT`` as gRPC will (``SO_REUSEADDR``, not ``SO_REUSEPORT``), before
    anything starts, to say why it cannot be served: gRPC says only "Failed to bind" and
    logs a line of its own before it. gRPC's other forms (``ipv4:``, ``dns:``, ``unix:``)
    are left to it. Like gRPC, one address of a name that binds is enough."""
    if split_hostport(addr, allow_zero=True) is None:
        return
    try:
        host, port = checked_hostport(addr, allow_zero=True)
        # The wildcard as gRPC binds it: both families, one is enough.
        name = None if _is_unspecified(host) else host
        infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except UserError as error:
        raise UserError(f"--grpc-server-addr: {error}") from None
    except OSError as error:
        raise UserError(f"--grpc-server-addr: {addr}: {error.strerror or error}") from None
    failures: list[OSError] = []
    for family, kind, protocol, _, sockaddr in infos:
        with socket.socket(family, kind, protocol) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(sockaddr)
            except OSError as error:
                failures.append(error)
            else:
                return
    reason = (failures[0].strerror or str(failures[0])) if failures else "nothing to bind"
    raise UserError(f"--grpc-server-addr: cannot serve P4Runtime on {addr}: {reason}")


def _is_unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def check_interfaces(specs: list[InterfaceSpec]) -> None:
    ports: dict[int, str] = {}
    interfaces: dict[str, int] = {}
    for spec in specs:
        if spec.port in ports:
            raise UserError(
                f"-i {spec.port}@{spec.interface}: port {spec.port} is already {ports[spec.port]}"
            )
        if spec.interface in interfaces:
            raise UserError(
                f"-i {spec.port}@{spec.interface}: {spec.interface} is already "
                f"port {interfaces[spec.interface]}"
            )
        ports[spec.port] = spec.interface
        interfaces[spec.interface] = spec.port


def start_p4runtime_server(switch: Switch, device_id: int, addr: str) -> Server:
    try:
        from softswitch.p4runtime_server import P4RuntimeServer
    except ModuleNotFoundError as error:
        if error.name != "softswitch.p4runtime_server":
            raise
        raise UserError("--grpc-server-addr: the P4Runtime server is not available yet") from None
    server: Server = P4RuntimeServer(switch, device_id, addr)
    server.start()
    return server


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    specs = [parse_interface_spec(text) for text in args.interfaces]
    check_interfaces(specs)
    grpc_addr = None
    if args.grpc_server_addr is not None:
        grpc_addr = check_server_address(args.grpc_server_addr)
        check_bindable(grpc_addr)
    program = None if args.no_p4 else load_program(args.config)
    if not specs and grpc_addr is None:
        # No port to forward on and no server to be reached through: it would run for
        # ever doing nothing.
        raise UserError(
            "no port (-i PORT@IFACE) and no --grpc-server-addr: the switch would have nothing to do"
        )

    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        log.info("%s received, stopping", signal.Signals(signum).name)
        stop.set()

    stop_signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP: its terminal closed
    previous = {sig: signal.signal(sig, request_stop) for sig in stop_signals}
    started = False
    switch = Switch(
        priority_queues=args.priority_queues,
        queue_depth_packets=args.queue_depth,
        per_queue_shaping=args.per_queue_shaping,
        device_id=args.device_id,
    )
    server: Server | None = None
    try:
        for spec in specs:
            switch.add_interface(spec.port, spec.interface)
        if args.queue_rate_pps is not None or args.queue_rate_bps is not None:
            switch.set_queue_rate(rate_pps=args.queue_rate_pps, rate_bps=args.queue_rate_bps)
        if program is not None:
            switch.load_pipeline(program)
        switch.start()
        started = True
        if grpc_addr:
            server = start_p4runtime_server(switch, args.device_id, grpc_addr)
        log.info(
            "ready: ports %s, %d queues per port, program %s, P4Runtime %s",
            ", ".join(f"{s.port}@{s.interface}" for s in specs) or "none",
            args.priority_queues,
            "none (--no-p4)" if program is None else args.config,
            server.addr if server is not None else "off",
        )
        while not stop.wait(HEALTH_CHECK_S):
            if switch.failure is not None:
                log.error("the pipeline thread failed: %s", switch.failure)
                return 1
        return 0
    finally:
        if server is not None:
            server.stop()
        switch.close()
        restore_handlers(previous)
        if started:
            log.info("stopped; counters: %s", switch.counters)
            for number, port in sorted(switch.ports.items()):
                if isinstance(port, LinuxPort):
                    log.info("port %d (%s): %s", number, port.name, port.counters)
