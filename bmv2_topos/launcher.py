"""Build a topology out of network namespaces and veth pairs; start switches and controller.

Layout of one run with id ``abcde`` (prefix ``bmabcde-``):

* one namespace per host, ``bmabcde-h1`` …, holding that host's ``eth0``;
* one namespace for the fabric, ``bmabcde-sw`` (so no host may be named
  ``sw``), holding every switch end (``s1-eth3`` is port 3 of switch s1; a
  long switch name is shortened, see :func:`switch_interface`), every switch
  process and the controller. Their P4Runtime and event ports live on that namespace's own
  loopback, so runs never collide with each other or with services of the
  machine on ``127.0.0.1:9559``. Host agents reach the controller through
  its Unix socket in the run directory (filesystem, not network).

Nothing is created in the root namespace: veths are born inside their
namespaces, and deleting the namespaces removes them. Every step is first
recorded in the run's state file (:mod:`bmv2_topos.state`); leaving the
context manager — normally, by exception, Ctrl-C or SIGTERM — removes it all,
and the run's guard (:mod:`bmv2_topos.guard`) does if this process is killed.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, Protocol

from bmv2_topos import bmv2, netns
from bmv2_topos.guard import start_run_guard
from bmv2_topos.state import OWNER_VARIABLE, RUN_ID_VARIABLE, RunState, runs_dir
from control.addresses import split_hostport
from control.errors import UserError
from control.guard import Guard
from control.interrupts import restore_handlers, signals_held, unwind_on_termination
from control.topology import Endpoint, Topology

TargetName = Literal["embedded", "bmv2"]
REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_P4 = REPO_ROOT / "p4src" / "beamer.p4"
EVENTS_ADDR = "127.0.0.1:9100"
"""The controller's HTTP port, on the fabric namespace's loopback."""
EVENTS_PORT = int(EVENTS_ADDR.rpartition(":")[2])
FABRIC_NAME = "sw"
"""The fabric namespace's suffix after the run's prefix; host namespaces use the host's name."""

DEFAULT_QUEUE_DEPTH_PACKETS = 256
READY_TIMEOUT_S = 60.0


class EmulationFailed(UserError):
    """A switch or the controller died, or set-up failed: one line, the run is torn down."""


@dataclass(frozen=True, slots=True)
class LinkEnd:
    namespace: str
    interface: str


@dataclass
class ManagedProcess:
    role: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]

    def log_tail(self, lines: int = 3) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(line.strip() for line in text[-lines:])


def switch_interface(switch: str, port: int, index: int = 0) -> str:
    """``s1-eth3`` for port 3 of switch s1, within 15 characters (the kernel's limit).

    A name too long for that becomes the switch name's first 4 characters, the
    switch's ``index`` in the topology and ``-p<port>``: unique per switch and
    port, and never equal to a long form, which always ends in ``-eth<port>``.
    """
    name = f"{switch}-eth{port}"
    return name if len(name) <= 15 else f"{switch[:4]}{index}-p{port}"


def switch_listen_address(grpc_addr: str, field: str) -> tuple[str, int]:
    """Host and port a switch's ``grpc_addr`` listens on (an IPv6 host in brackets)."""
    hostport = split_hostport(grpc_addr)
    if hostport is None:
        raise UserError(f"{field}: {grpc_addr!r} is not HOST:PORT")
    return hostport


def spawn_prefix(namespace: str, niceness: int) -> list[str]:
    """Commands that exec into each other before ``argv`` runs in ``namespace``.

    Children die with the run even when it is SIGKILLed (``setpriv
    --pdeathsig``; ``beamer clean`` does the rest), get their own session
    (``setsid``) and priority (``nice``). Doing this with exec'd commands
    instead of a ``preexec_fn`` lets Python start the child with
    ``posix_spawn``: no Python code and no fork handlers run in a copy of a
    process whose gRPC threads may be polling (a forked copy of such a
    process can abort inside gRPC before it reaches ``exec``).
    """
    setsid = shutil.which("setsid") or "/usr/bin/setsid"
    return [
        setsid,
        "setpriv",
        "--pdeathsig",
        "TERM",
        "nice",
        "-n",
        str(niceness),
        "ip",
        "netns",
        "exec",
        namespace,
    ]


class NetworkSettings(Protocol):
    """The network options a run's command line gives (``beamer emulate``, ``beamer tune``)."""

    @property
    def topology(self) -> Topology: ...
    @property
    def target(self) -> TargetName: ...
    @property
    def queues(self) -> int: ...
    @property
    def queue_depth_packets(self) -> int | None: ...
    @property
    def rto_min_ms(self) -> int: ...
    @property
    def congestion_control(self) -> str: ...
    @property
    def bmv2_json(self) -> Path | None: ...
    @property
    def p4info(self) -> Path | None: ...


DEFAULT_RTO_MIN_MS = 10
"""The hosts' minimum TCP retransmission timeout: a data-centre value (Vasudevan et al.,
SIGCOMM 2009), so that a flow starved in a low class does not sit out 200 ms+ backoffs
after the classes above it have finished."""

DEFAULT_CONGESTION_CONTROL = "cubic"
"""The hosts' TCP congestion control, set on their routes: Linux's default, so that a run
does not take whatever the machine's default happens to be (measured in
docs/emulation.md, "The hosts' congestion control")."""


@dataclass
class EmulatedNetwork:
    """Context manager: the whole emulated network of one run.

    ``with EmulatedNetwork(topology, policy="beamer") as net:`` builds it,
    starts switches and the controller, and waits until the controller has
    provisioned every switch. ``net.host_namespace("h1")`` and
    ``net.events_socket`` are what host agents need.
    """

    topology: Topology
    policy: str | None = "beamer"
    """``None``: start no controller (tests that program the switch themselves)."""
    target: TargetName = "embedded"
    queues: int = 8
    p4_source: Path = DEFAULT_P4
    queue_depth_packets: int | None = DEFAULT_QUEUE_DEPTH_PACKETS
    """Per priority queue. Deep enough that a starved low class waits in its queue
    instead of losing packets and backing its TCP timers off: when the port frees
    up, it resumes at once. ``None``: the switch's own default."""
    switch_niceness: int = -10
    """A software switch stands in for hardware that shares no CPU: when the
    machine is busy, the hosts should slow down, not the network."""
    rto_min_ms: int = DEFAULT_RTO_MIN_MS
    congestion_control: str = DEFAULT_CONGESTION_CONTROL
    mtu_bytes: int = 9000
    """Jumbo frames, as GPU clusters use: a sixth of the packets a 1500-byte MTU needs."""
    bmv2_json: Path | None = None
    p4info: Path | None = None
    """p4c's outputs, which the controller pushes to BMv2 switches."""
    runs_base: Path | None = None
    state: RunState | None = field(default=None, init=False)
    guard: Guard | None = field(default=None, init=False)
    """Removes the run if this process dies without doing so (see ``bmv2_topos.guard``)."""
    processes: dict[str, ManagedProcess] = field(default_factory=dict, init=False)
    _previous_handlers: dict[int, Any] = field(default_factory=dict, init=False)

    @classmethod
    def for_run(cls, settings: NetworkSettings, policy: str) -> EmulatedNetwork:
        """The network of one run of ``policy`` with the command line's network options."""
        return cls(
            settings.topology,
            policy=policy,
            target=settings.target,
            queues=settings.queues,
            queue_depth_packets=settings.queue_depth_packets,
            rto_min_ms=settings.rto_min_ms,
            congestion_control=settings.congestion_control,
            bmv2_json=settings.bmv2_json,
            p4info=settings.p4info,
        )

    # --- names -----------------------------------------------------------------------

    @property
    def prefix(self) -> str:
        assert self.state is not None
        return self.state.prefix

    @property
    def run_dir(self) -> Path:
        assert self.state is not None
        return self.state.directory

    @property
    def fabric_namespace(self) -> str:
        return f"{self.prefix}{FABRIC_NAME}"

    def host_namespace(self, host: str) -> str:
        return f"{self.prefix}{host}"

    @property
    def events_socket(self) -> Path:
        return self.run_dir / "events.sock"

    # --- lifecycle -------------------------------------------------------------------

    def check_topology(self) -> None:
        """Refuse, in one line, what would only fail once the network is built."""
        topology = self.topology
        for index, host in enumerate(topology.hosts):
            if host.name == FABRIC_NAME:
                raise UserError(
                    f"{topology.source}: hosts[{index}].name: {host.name!r} is reserved "
                    "(the fabric namespace's name); rename the host"
                )
        for index, switch in enumerate(topology.switches):
            field_name = f"{topology.source}: switches[{index}]"
            _, port = switch_listen_address(switch.grpc_addr, f"{field_name}.grpc_addr")
            target = switch.target or self.target
            clashes = [("grpc_addr", port)]
            if target == "bmv2" and switch.thrift_port is not None:
                clashes.append(("thrift_port", switch.thrift_port))
            for key, used in clashes:
                if used == EVENTS_PORT:
                    raise UserError(
                        f"{field_name}.{key}: port {used} is the controller's event port "
                        "in the fabric namespace; pick another port"
                    )
            if target != "bmv2":
                self._port_rate_bps(switch.name)

    def __enter__(self) -> EmulatedNetwork:
        self.check_topology()
        netns.require_root()
        netns.require_tools("ip", "ethtool", "tc")
        netns.require_congestion_control(self.congestion_control, "congestion control")
        if self.target == "bmv2":
            bmv2.require_simple_switch_grpc()
        self._install_signal_handlers()
        try:
            self.state = RunState.create(self.runs_base or runs_dir())
            self.guard = start_run_guard(self.state)
            self._build()
            self._start_switches()
            if self.policy is not None:
                self._start_controller()
                if self.target == "bmv2":
                    self._probe_data_path()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop processes, delete namespaces, remove the run directory; idempotent.

        Ctrl-C, SIGTERM and SIGHUP are held until everything is removed, then
        raised: teardown always finishes.
        """
        failure: BaseException | None = None
        try:
            with signals_held():
                for process in self.processes.values():
                    process.log_file.close()
                self.processes.clear()
                if self.state is not None:
                    run, self.state = self.state, None
                    try:
                        run.teardown()
                    except Exception as error:
                        failure = EmulationFailed(
                            f"run {run.run_id} not fully removed ({error}); "
                            "beamer clean removes the rest"
                        )
                if self.guard is not None:
                    guard, self.guard = self.guard, None
                    guard.stop()
        finally:
            self._restore_signal_handlers()
        if failure is not None:
            raise failure

    def _install_signal_handlers(self) -> None:
        self._previous_handlers = unwind_on_termination()

    def _restore_signal_handlers(self) -> None:
        restore_handlers(self._previous_handlers)

    # --- network ---------------------------------------------------------------------

    def _add_namespace(self, name: str) -> None:
        assert self.state is not None
        self.state.add_namespace(name)
        netns.run(["ip", "netns", "add", name])
        netns.run(["ip", "-n", name, "link", "set", "lo", "up"])

    def _build(self) -> None:
        topology = self.topology
        self._add_namespace(self.fabric_namespace)
        for host in topology.hosts:
            self._add_namespace(self.host_namespace(host.name))
        fabric_lines: list[str] = []
        offloads: list[LinkEnd] = []
        for link in topology.links:
            ends = [self._link_end(endpoint) for endpoint in (link.end1, link.end2)]
            netns.run(
                [
                    "ip",
                    "link",
                    "add",
                    ends[0].interface,
                    "netns",
                    ends[0].namespace,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    ends[1].interface,
                    "netns",
                    ends[1].namespace,
                ]
            )
            offloads.extend(ends)
            fabric_lines += [
                f"link set {end.interface} mtu {self.mtu_bytes} up"
                for end in ends
                if end.namespace == self.fabric_namespace
            ]
        tcp = f"rto_min {self.rto_min_ms}ms congctl {self.congestion_control}"
        for host in topology.hosts:
            lines = [
                f"link set eth0 address {host.mac}",
                f"link set eth0 mtu {self.mtu_bytes}",
                f"addr add {host.interface} dev eth0",
                "link set eth0 up",
                # Every peer is on-link: the switches route by IP and rewrite the
                # destination MAC, so hosts need no gateway, only their peers' MACs.
                # The minimum RTO and the congestion control, per route (a namespace's
                # sysctl accepts only the kernel's allowed list): see the DEFAULT_s.
                f"route replace {host.interface.network} dev eth0 src {host.ip} {tcp}",
                f"route replace default dev eth0 {tcp}",
            ]
            lines += [
                f"neigh replace {peer.ip} lladdr {peer.mac} dev eth0 nud permanent"
                for peer in topology.hosts
                if peer.name != host.name
            ]
            netns.ip_batch(self.host_namespace(host.name), lines)
        netns.ip_batch(self.fabric_namespace, fabric_lines)
        for host in topology.hosts:
            # Training connections idle during compute; keep their window across
            # iterations (as tuned clusters do) instead of slow-starting every time.
            netns.run(
                [
                    "ip",
                    "netns",
                    "exec",
                    self.host_namespace(host.name),
                    "sysctl",
                    "-q",
                    "-w",
                    "net.ipv4.tcp_slow_start_after_idle=0",
                ]
            )
        # A software switch reads frames through raw sockets: segmentation and
        # checksum offloads would hand it 64 KB super-frames and partial checksums.
        for offloaded in offloads:
            netns.run(
                [
                    "ip",
                    "netns",
                    "exec",
                    offloaded.namespace,
                    "ethtool",
                    "-K",
                    offloaded.interface,
                    "tso",
                    "off",
                    "gso",
                    "off",
                    "gro",
                    "off",
                    "tx",
                    "off",
                ]
            )
        if self.target == "bmv2":
            self._shape_bmv2_ports()

    def _link_end(self, endpoint: Endpoint) -> LinkEnd:
        if endpoint.port is None:
            return LinkEnd(self.host_namespace(endpoint.node), "eth0")
        return LinkEnd(self.fabric_namespace, self._interface(endpoint.node, endpoint.port))

    @functools.cached_property
    def _switch_indexes(self) -> dict[str, int]:
        return {spec.name: index for index, spec in enumerate(self.topology.switches)}

    def _interface(self, switch: str, port: int) -> str:
        return switch_interface(switch, port, self._switch_indexes[switch])

    def _shape_bmv2_ports(self) -> None:
        """Strict priority at one rate on every shaped BMv2 port (see bmv2.py), each
        class as deep as the embedded target's queues."""
        depth = self.queue_depth_packets or DEFAULT_QUEUE_DEPTH_PACKETS
        lines: list[str] = []
        for switch in self.topology.switches:
            for port, link in self.topology.switch_ports(switch.name).items():
                if link.rate_mbps is not None:
                    interface = self._interface(switch.name, port)
                    lines += bmv2.htb_commands(interface, link.rate_mbps, depth)
        if lines:
            netns.run(["tc", "-n", self.fabric_namespace, "-batch", "-"], stdin="\n".join(lines))

    # --- processes -------------------------------------------------------------------

    def _spawn(self, role: str, argv: list[str], niceness: int = 0) -> ManagedProcess:
        assert self.state is not None
        log_path = self.run_dir / f"{role}.log"
        log_file = log_path.open("wb")
        command = [*spawn_prefix(self.fabric_namespace, niceness), *argv]
        # The run id in the environment marks the process as ours for leftover checks.
        environment = {
            **os.environ,
            RUN_ID_VARIABLE: self.state.run_id,
            OWNER_VARIABLE: f"{self.state.owner_pid}:{self.state.owner_start_ticks}",
        }
        popen = subprocess.Popen(
            command,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            close_fds=False,  # descriptors are close-on-exec; this keeps posix_spawn usable
        )
        self.state.add_process(popen.pid, role)
        process = ManagedProcess(role, popen, log_path, log_file)
        self.processes[role] = process
        return process

    def _port_rate_bps(self, switch: str) -> float | None:
        rates = {link.rate_mbps for link in self.topology.switch_ports(switch).values()}
        rates.discard(None)
        if len(rates) > 1:
            raise UserError(
                f"{self.topology.source}: switch {switch}: links of different rates "
                f"({', '.join(f'{r:g}' for r in sorted(r for r in rates if r))} Mbit/s); "
                "the embedded switch takes one port rate"
            )
        rate = next(iter(rates), None)
        return None if rate is None else rate * 1e6

    def _start_switches(self) -> None:
        for switch in self.topology.switches:
            ports = [
                (port, self._interface(switch.name, port))
                for port in self.topology.switch_ports(switch.name)
            ]
            target = switch.target or self.target
            if target == "bmv2":
                argv = bmv2.switch_command(
                    bmv2.require_simple_switch_grpc(),
                    switch.device_id,
                    ports,
                    switch.grpc_addr,
                    switch.thrift_port,
                )
            else:
                argv = [sys.executable, "-m", "control.cli", "switch"]
                for port, interface in ports:
                    argv += ["-i", f"{port}@{interface}"]
                argv += [
                    "--priority-queues",
                    str(self.queues if self.queues > 1 else 8),
                    "--device-id",
                    str(switch.device_id),
                    "--grpc-server-addr",
                    switch.grpc_addr,
                    "--log-level",
                    "warning",
                ]
                rate_bps = self._port_rate_bps(switch.name)
                if rate_bps is not None:
                    argv += ["--queue-rate-bps", f"{rate_bps:g}"]
                if self.queue_depth_packets is not None:
                    argv += ["--queue-depth", str(self.queue_depth_packets)]
                argv.append("--no-p4")
            self._spawn(f"switch-{switch.name}", argv, niceness=self.switch_niceness)
        for switch in self.topology.switches:
            address, port = switch_listen_address(switch.grpc_addr, f"{switch.name}.grpc_addr")
            self._wait_listening(f"switch-{switch.name}", address, port)
            if (switch.target or self.target) == "bmv2" and switch.thrift_port is not None:
                has_thrift = netns.run_in_netns(
                    self.fabric_namespace,
                    functools.partial(bmv2.thrift_listening, switch.thrift_port),
                )
                if not has_thrift:
                    print(
                        f"note: {switch.name}: nothing listens on Thrift port "
                        f"{switch.thrift_port} (BMv2 built without --with-thrift); "
                        "simple_switch_CLI will not work, shaping uses HTB instead; "
                        "BMv2's egress queues keep their default depth",
                        file=sys.stderr,
                    )
                else:
                    self._set_bmv2_queue_depth(switch.name, switch.thrift_port)
            if (switch.target or self.target) == "bmv2":
                depth = self.queue_depth_packets or DEFAULT_QUEUE_DEPTH_PACKETS
                try:
                    widened = bmv2.widen_send_buffers(
                        self.processes[f"switch-{switch.name}"].popen.pid,
                        bmv2.PRIORITY_QUEUES * depth * bmv2.JUMBO_FRAME_TRUESIZE_BYTES,
                    )
                except OSError as error:
                    widened, reason = 0, f": {error.strerror or error}"
                else:
                    reason = ""
                if widened == 0:
                    print(
                        f"note: {switch.name}: could not widen BMv2's port send buffers"
                        f"{reason}; busy ports will block its transmit thread "
                        "(docs/emulation.md, BMv2)",
                        file=sys.stderr,
                    )

    def _probe_data_path(self, timeout_s: float = 10.0) -> None:
        """Wait until every host reaches the first host through the fabric and back.

        A frame lost while BMv2 settles after its pipeline is pushed costs the
        connection it belonged to a whole second (TCP's initial retransmission
        timeout for a SYN); a run starts only once each host's connect attempt to
        the first host comes back (refused: nothing listens on the probe port).
        """
        if not self.topology.hosts:
            return
        first, *others = self.topology.hosts
        deadline = time.monotonic() + timeout_s
        for host in others:
            probe = functools.partial(_reaches, str(first.ip), PROBE_PORT)
            while not netns.run_in_netns(self.host_namespace(host.name), probe):
                if time.monotonic() > deadline:
                    print(
                        f"note: {host.name} does not reach {first.name} through the fabric "
                        f"after {timeout_s:g} s; the run starts anyway",
                        file=sys.stderr,
                    )
                    return

    def _set_bmv2_queue_depth(self, switch: str, thrift_port: int) -> None:
        """Give BMv2's egress queues the run's depth (its default is 64 packets)."""
        depth = self.queue_depth_packets or DEFAULT_QUEUE_DEPTH_PACKETS
        netns.run_in_netns(
            self.fabric_namespace,
            functools.partial(
                bmv2.thrift_call, thrift_port, "set_all_egress_queue_depths", [(8, depth)]
            ),
        )

    def _start_controller(self) -> None:
        assert self.policy is not None
        argv = [
            sys.executable,
            "-m",
            "control.cli",
            "controller",
            "--topo",
            str(Path(self.topology.source).resolve()),
            "--policy",
            self.policy,
            "--queues",
            str(self.queues),
            "--events-addr",
            EVENTS_ADDR,
            "--events-socket",
            str(self.events_socket),
            "--target",
            self.target,
            "--p4",
            str(self.p4_source),
        ]
        if self.bmv2_json is not None and self.p4info is not None:
            argv += ["--bmv2-json", str(self.bmv2_json.resolve())]
            argv += ["--p4info", str(self.p4info.resolve())]
        self._spawn("controller", argv)
        self._wait_controller_ready()

    def _wait_listening(self, role: str, host: str, port: int) -> None:
        """Poll from inside the fabric namespace until ``host:port`` accepts."""

        def probe() -> bool:
            try:
                with contextlib.closing(socket.create_connection((host, port), 0.3)):
                    return True
            except OSError:
                return False

        deadline = time.monotonic() + READY_TIMEOUT_S
        while not netns.run_in_netns(self.fabric_namespace, probe):
            self.check_processes()
            if time.monotonic() > deadline:
                raise EmulationFailed(f"{role} did not listen on {host}:{port} in time")
            time.sleep(0.1)

    def _wait_controller_ready(self) -> None:
        from control.events import EventClient

        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            self.check_processes()
            if self.events_socket.exists():
                try:
                    with EventClient(str(self.events_socket), timeout_s=5.0) as client:
                        status = client.status()
                    problem = _provisioning_problem(status)
                    if problem is None:
                        return
                except (OSError, UserError) as error:
                    problem = str(error)
            else:
                problem = "no event socket yet"
            if time.monotonic() > deadline:
                raise EmulationFailed(f"controller not ready: {problem}")
            time.sleep(0.2)

    def check_processes(self, controller_required: bool = True) -> None:
        """Raise :class:`EmulationFailed` naming the first switch (or controller) that exited.

        During the workload the controller is optional: the switches keep the
        classes it installed, so a run survives its loss (``controller_required``
        False) and only a dead switch ends it.
        """
        for process in self.processes.values():
            status = process.popen.poll()
            if status is not None and (controller_required or process.role != "controller"):
                tail = process.log_tail()
                how = f"killed by signal {-status}" if status < 0 else f"exited with {status}"
                raise EmulationFailed(f"{process.role} {how}" + (f": {tail}" if tail else ""))

    def controller_exited(self) -> bool:
        process = self.processes.get("controller")
        return process is not None and process.popen.poll() is not None

    def kill_process(self, role: str, signum: int = signal.SIGKILL) -> None:
        """Fault injection for tests: signal one of our processes by its pid."""
        os.kill(self.processes[role].popen.pid, signum)
        self.processes[role].popen.wait(timeout=10)


def _provisioning_problem(status: dict[str, Any]) -> str | None:
    """None when the controller reports every switch ready, else what is still missing."""
    switches = status.get("switches")
    if not isinstance(switches, dict | list):
        return None
    items = switches.items() if isinstance(switches, dict) else enumerate(switches)
    for name, info in items:
        if isinstance(info, dict):
            state = str(info.get("state", "ready")).lower()
            if state != "ready":
                return f"switch {info.get('name', name)}: {state} {info.get('error') or ''}".strip()
    return None


@contextlib.contextmanager
def emulated_network(topology: Topology, **options: Any) -> Iterator[EmulatedNetwork]:
    with EmulatedNetwork(topology, **options) as network:
        yield network


PROBE_PORT = 9
"""The discard port: nothing listens on it in a host namespace, so a working path
answers a connect attempt with a reset."""


def _reaches(address: str, port: int, timeout_s: float = 0.5) -> bool:
    """Whether a TCP connect attempt to ``address`` is answered (accepted or refused)."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return True
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
