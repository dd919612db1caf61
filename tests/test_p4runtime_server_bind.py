"""A P4Runtime server bound to every address (0.0.0.0, [::]) is started with a warning."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from softswitch.p4rt.server import serves_every_network


@pytest.mark.parametrize(
    "addr", ["0.0.0.0:9559", "[::]:9559", ":9559", "*:9559", "0:9559", "ipv4:0.0.0.0:1", "[::]:0"]
)
def test_wildcard_addresses_serve_every_network(addr: str) -> None:
    assert serves_every_network(addr)


@pytest.mark.parametrize(
    "addr",
    ["127.0.0.1:9559", "[::1]:9559", "localhost:9559", "10.0.0.1:9559", "unix:/run/p4rt.sock"],
)
def test_specific_addresses_do_not(addr: str) -> None:
    assert not serves_every_network(addr)


SWITCH = "import sys; from control.cli import main; sys.exit(main(sys.argv[1:]))"


def _switch_stderr(addr: str) -> str:
    """``beamer switch --no-p4 --grpc-server-addr ADDR`` in a network namespace of its
    own (only its loopback, gone with the process), stopped with Ctrl-C once ready."""
    script = f'ip link set lo up && exec "$0" -c "$1" switch --no-p4 --grpc-server-addr {addr}'
    process = subprocess.Popen(
        ["unshare", "--net", "sh", "-c", script, sys.executable, SWITCH],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    lines = []
    deadline = time.monotonic() + 30
    try:
        for line in process.stderr:
            lines.append(line)
            if " ready: " in line or time.monotonic() > deadline:
                break
        process.send_signal(signal.SIGINT)
        _, rest = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, "".join(lines) + rest
    return "".join(lines) + rest


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None,
    reason="needs root and unshare (a network namespace of its own)",
)
def test_beamer_switch_warns_when_the_server_serves_every_network() -> None:
    warned = _switch_stderr("0.0.0.0:0")
    assert "WARNING" in warned and "serves every network" in warned
    assert "0.0.0.0:" in warned
    quiet = _switch_stderr("127.0.0.1:0")
    assert "serves every network" not in quiet
