"""The BMv2 emulation path: the controller on simple_switch_grpc, and its pieces.

* Two experiments into one host on BMv2 (as in test_emulation_root.py): the
  controller classifies them over P4Runtime and the small one finishes near
  its alone time while the large one waits: strict priority at the HTB port.
* BMv2's port sockets get a send buffer that holds the HTB queues
  (``widen_send_buffers``), HTB leaves get the run's depth, and BMv2's egress
  queue depth is set over Thrift in its wire format.
Root and BMv2 are needed for the first two; the rest runs anywhere.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from bmv2_tools import REPO_ROOT, p4c_compile, require

from bmv2_topos import bmv2

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


def test_htb_leaves_get_the_given_depth() -> None:
    lines = bmv2.htb_commands("s1-eth3", 20, leaf_limit_packets=256)
    leaves = [line for line in lines if "pfifo" in line]
    assert len(leaves) == bmv2.PRIORITY_QUEUES
    assert leaves[0] == "qdisc add dev s1-eth3 parent 1:10 handle 10: pfifo limit 256"
    assert not any("pfifo" in line for line in bmv2.htb_commands("s1-eth3", 20))


def test_thrift_call_speaks_the_simple_switch_wire_format() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            received.append(conn.recv(4096))
            name = b"simple_switch:set_all_egress_queue_depths"
            reply = struct.pack("!iI", -0x7FFEFFFE, len(name)) + name + struct.pack("!i", 1)
            conn.sendall(reply + struct.pack("!bhi", 8, 0, 7) + b"\0")

    thread = threading.Thread(target=answer)
    thread.start()
    port = server.getsockname()[1]
    assert bmv2.thrift_call(port, "set_all_egress_queue_depths", [(8, 256)]) == 7
    thread.join(5)
    server.close()
    name = b"simple_switch:set_all_egress_queue_depths"
    expected = struct.pack("!II", 0x80010001, len(name)) + name
    expected += struct.pack("!i", 1) + struct.pack("!bhi", 8, 1, 256) + b"\0"
    assert received == [expected]


@ROOT_ONLY
def test_widen_send_buffers_reaches_another_processs_packet_sockets() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import socket, sys, time\n"
         "s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\n"
         "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
         "print(s.fileno(), flush=True)\n"
         "time.sleep(30)\n"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        fd = int(child.stdout.readline())
        assert bmv2.widen_send_buffers(child.pid, 8_000_000) == 1  # the UDP socket is left
        # The kernel doubles what SO_SNDBUFFORCE asks for; read it back through a copy.
        import ctypes

        pidfd = os.pidfd_open(child.pid)
        copy = ctypes.CDLL(None, use_errno=True).syscall(438, pidfd, fd, 0)
        os.close(pidfd)
        with socket.socket(fileno=copy) as borrowed:
            assert borrowed.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) >= 8_000_000
    finally:
        child.kill()
        child.wait(10)


@ROOT_ONLY
@pytest.mark.slow
def test_controller_on_bmv2_gives_the_small_experiment_the_port(tmp_path: Path) -> None:
    require("p4c", "simple_switch_grpc")
    bmv2_json, p4info = p4c_compile(REPO_ROOT / "p4src" / "beamer.p4")
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    import test_emulation_root as root_tests

    from bmv2_topos.agent import ControllerOptional, HostAddress
    from bmv2_topos.emulate import execute
    from bmv2_topos.launcher import EmulatedNetwork
    from control.events import EventClient
    from control.topology import load_topology

    topology = load_topology(root_tests.topology_path.__wrapped__(tmp_path))
    experiments = root_tests._contending()
    with EmulatedNetwork(
        topology, policy="beamer", target="bmv2", bmv2_json=bmv2_json, p4info=p4info
    ) as network:
        hosts = {
            index: HostAddress(network.host_namespace(host.name), str(host.ip))
            for index, host in enumerate(topology.hosts)
        }
        with EventClient(str(network.events_socket)) as client:
            sink = ControllerOptional(client)
            record = execute(
                hosts, experiments, sink, lambda: network.check_processes(controller_required=False)
            )
    assert sink.lost is None
    root_tests._assert_strict_priority(record, experiments)
