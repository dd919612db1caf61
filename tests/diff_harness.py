"""One switch under test, BMv2 or embedded, on veth pairs in a namespace of its own.

Both targets run as processes inside a network namespace created for the test,
with ports ``sw0..swN-1`` whose peers ``h0..hN-1`` the test sends and receives
on (raw sockets opened inside the namespace). Both serve P4Runtime on a Unix
socket in a temporary directory, so the test's gRPC client needs no namespace.
The pipeline is pushed over P4Runtime with p4c's P4Info: the BMv2 JSON for
BMv2, our device config for the embedded target.
"""

from __future__ import annotations

import select
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bmv2_tools import REPO_ROOT, p4c_compile, require
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2
from processes import end_process

from bmv2_topos.bmv2 import switch_command
from control.entries import ActionCall, EntryKey, to_table_entry
from control.p4runtime_client import P4Names, P4RuntimeClient
from softswitch.frontend import compile_file
from softswitch.ports import LinuxPort


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@contextmanager
def veth_namespace(ports: int) -> Iterator[str]:
    """A fresh namespace with veth pairs swI/hI, IPv6 off (no stray frames), MTU 9000."""
    name = f"bmdiff-{uuid.uuid4().hex[:8]}"
    ip("netns", "add", name)
    try:
        for key in ("all", "default"):
            subprocess.run(
                ["ip", "netns", "exec", name, "sysctl", "-qw",
                 f"net.ipv6.conf.{key}.disable_ipv6=1"],
                check=True, capture_output=True, timeout=30,
            )  # fmt: skip
        for index in range(ports):
            ip("-n", name, "link", "add", f"sw{index}", "type", "veth", "peer", "name", f"h{index}")
            for interface in (f"sw{index}", f"h{index}"):
                ip("-n", name, "link", "set", interface, "mtu", "9000", "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30, check=False)


@dataclass
class SwitchUnderTest:
    target: str
    netns: str
    client: P4RuntimeClient
    names: P4Names
    hosts: dict[int, LinuxPort]
    p4info: p4info_pb2.P4Info
    device_config: bytes

    def insert(self, entries: Sequence[tuple[EntryKey, ActionCall]]) -> None:
        self.client.write([self.update(key, action) for key, action in entries])

    def update(
        self, key: EntryKey, action: ActionCall, kind: int = p4runtime_pb2.Update.INSERT
    ) -> p4runtime_pb2.Update:
        entity = p4runtime_pb2.Entity(table_entry=to_table_entry(key, action, self.names))
        return p4runtime_pb2.Update(type=kind, entity=entity)

    def exchange(
        self, frames: Sequence[tuple[int, bytes]], quiet_s: float = 0.4
    ) -> dict[int, list[bytes]]:
        """Send each (port, frame) in turn; every frame that comes out, per port, in order."""
        received: dict[int, list[bytes]] = {port: [] for port in self.hosts}
        for port, frame in frames:
            self.hosts[port].transmit(frame, 0.0)
            time.sleep(0.002)  # keep the order across ports: one frame at a time
        last = time.monotonic()
        while time.monotonic() - last < quiet_s:
            ready, _, _ = select.select(list(self.hosts.values()), [], [], 0.05)
            for host in ready:
                port = next(p for p, h in self.hosts.items() if h is host)
                got = host.receive(256)
                if got:
                    received[port].extend(got)
                    last = time.monotonic()
        return received


def _wait_for_socket(path: Path, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        if process.poll() is not None:
            raise RuntimeError(f"switch exited ({process.returncode}): {log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"switch did not listen on {path}")
        time.sleep(0.05)


@contextmanager
def switch_under_test(
    target: str, source: Path, ports: int = 3, set_pipeline: bool = True
) -> Iterator[SwitchUnderTest]:
    """``target`` ("bmv2" or "embedded") running ``source``, pipeline set, hosts open.

    With ``set_pipeline=False`` the switch starts empty; the test sets the pipeline
    (``SwitchUnderTest.p4info`` and ``device_config``) itself.
    """
    tools = require("p4c", "simple_switch_grpc")
    bmv2_json, p4info_path = p4c_compile(source)
    p4info = p4info_pb2.P4Info()
    text_format.Parse(p4info_path.read_text(), p4info)
    interfaces = [(index, f"sw{index}") for index in range(ports)]
    with veth_namespace(ports) as netns, tempfile.TemporaryDirectory() as tmp:
        sock = Path(tmp) / "p4rt.sock"
        address = f"unix:{sock}"
        if target == "bmv2":
            argv = switch_command(tools["simple_switch_grpc"], 0, interfaces, address, None)
            device_config = bmv2_json.read_bytes()
        else:
            argv = [sys.executable, "-m", "control.cli", "switch", "--device-id", "0",
                    "--grpc-server-addr", address, "--priority-queues", "8", "--no-p4",
                    "--log-level", "warning"]  # fmt: skip
            for index, interface in interfaces:
                argv += ["-i", f"{index}@{interface}"]
            device_config = compile_file(source).device_config()
        log = Path(tmp) / "switch.log"
        with log.open("wb") as log_file:
            process = subprocess.Popen(
                ["ip", "netns", "exec", netns, *argv],
                cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=log_file,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        hosts: dict[int, LinuxPort] = {}
        client = P4RuntimeClient(address, 0, election_id=1, timeout_s=20)
        try:
            _wait_for_socket(sock, process, log)
            client.connect()
            if set_pipeline:
                client.set_pipeline(p4info, device_config)
            for index in range(ports):
                hosts[index] = LinuxPort(f"h{index}", netns=netns)
            yield SwitchUnderTest(
                target, netns, client, P4Names.build(p4info), hosts, p4info, device_config
            )
        finally:
            client.close()
            for host in hosts.values():
                host.close()
            end_process(process)
