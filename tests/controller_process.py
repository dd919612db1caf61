"""A real ``beamer controller`` process on an in-process embedded switch, for the tests
that talk to the event API as clients do (HTTP over loopback TCP and the Unix socket)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from softswitch.p4runtime_server import P4RuntimeServer
from softswitch.switch import Switch, VirtualClock

REPO = Path(__file__).resolve().parents[1]
HOSTS = 4


def write_topology(directory: Path, grpc_addr: str, hosts: int = HOSTS) -> Path:
    path = directory / "topo.json"
    path.write_text(
        json.dumps(
            {
                "name": "api",
                "switches": [{"name": "s1", "device_id": 0, "grpc_addr": grpc_addr}],
                "hosts": [
                    {"name": f"h{i}", "ip": f"10.0.0.{i}", "mac": f"02:00:00:00:00:0{i}"}
                    for i in range(1, hosts + 1)
                ],
                "links": [
                    {"node1": f"h{i}", "node2": "s1", "port2": i} for i in range(1, hosts + 1)
                ],
            }
        )
    )
    return path


def controller_argv(
    topo: Path, socket_path: Path | None, policy: str = "beamer", extra: Sequence[str] = ()
) -> list[str]:
    """The ``beamer controller`` command line with its event API on a free loopback port;
    ``socket_path`` None leaves the event socket at its default place."""
    socket_args = [] if socket_path is None else ["--events-socket", str(socket_path)]
    return [
        sys.executable,
        "-m",
        "control.cli",
        "controller",
        "--topo",
        str(topo),
        "--policy",
        policy,
        "--events-addr",
        "127.0.0.1:0",
        *socket_args,
        *extra,
    ]


@dataclass
class ControllerProcess:
    process: subprocess.Popen[str]
    host: str
    port: int
    socket_path: Path
    stderr_lines: list[str] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def threads(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
        raise AssertionError("no thread count")


@contextmanager
def embedded_switch() -> Iterator[P4RuntimeServer]:
    switch = Switch(clock=VirtualClock())
    server = P4RuntimeServer(switch, 0, "127.0.0.1:0")
    server.start()
    try:
        yield server
    finally:
        server.stop(0)
        switch.close()


@dataclass
class StartedController:
    """A ``beamer controller`` process whose standard error is read into ``lines``;
    ``announced`` is set with ``address`` and ``socket`` once it logs its events API."""

    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    announced: threading.Event = field(default_factory=threading.Event)
    address: tuple[str, int] = ("", 0)
    socket: Path = Path()

    def read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            match = re.search(r"events API on http://([\d.]+):(\d+) and unix:(\S+)", line)
            if match and not self.announced.is_set():
                self.address = (match.group(1), int(match.group(2)))
                self.socket = Path(match.group(3))
                self.announced.set()


@contextmanager
def started_controller(
    argv: Sequence[str], env: dict[str, str] | None = None
) -> Iterator[StartedController]:
    """Run ``argv`` (a controller command line); at exit, SIGTERM and a clean exit are
    expected of a process still running, and whatever is left is killed."""
    process = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    started = StartedController(process)
    reader = threading.Thread(target=started.read_stderr, daemon=True)
    reader.start()
    try:
        yield started
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, "".join(started.lines)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        reader.join(timeout=5)
        if process.stderr is not None:
            process.stderr.close()


@contextmanager
def controller_process(
    directory: Path,
    grpc_addr: str,
    extra: Sequence[str] = (),
    policy: str = "beamer",
    default_socket: bool = False,
    env: dict[str, str] | None = None,
) -> Iterator[ControllerProcess]:
    """Start ``beamer controller`` and wait until its event API answers; SIGTERM at exit.
    Its socket is ``directory/controller.sock`` unless ``default_socket`` (then give an
    ``env`` whose temporary directory is the test's own)."""
    topo = write_topology(directory, grpc_addr)
    socket_path = None if default_socket else directory / "controller.sock"
    argv = controller_argv(topo, socket_path, policy, extra)
    with started_controller(argv, env) as started:
        lines = started.lines
        deadline = time.monotonic() + 90
        while not started.announced.wait(0.1):
            assert started.process.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "controller did not start: " + "".join(lines)
        host, port = started.address
        yield ControllerProcess(started.process, host, port, started.socket, lines)


@contextmanager
def controller_on_embedded_switch(
    directory: Path, events_timeout_s: float
) -> Iterator[ControllerProcess]:
    """A controller process driving one embedded switch, with the given events timeout."""
    with (
        embedded_switch() as switch,
        controller_process(
            directory, switch.addr, ["--events-timeout", str(events_timeout_s)]
        ) as process,
    ):
        yield process
