"""Network-namespace primitives: run commands in a namespace, create sockets in it.

A socket belongs to the namespace of the thread that created it and keeps it for
its whole life, so the host agents can live in one process: each socket is made
on a thread that has entered the host's namespace with ``setns``, then used
from anywhere. Python 3.11 has no ``os.setns``; libc's is called.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from control.errors import UserError
from softswitch.netns import NETNS_DIR, enter_netns
from softswitch.netns import run_in_netns as run_in_netns


class CommandError(RuntimeError):
    """A set-up command failed; the message carries the command and its stderr."""


def require_root() -> None:
    """Namespaces, veths and tagged sockets all need root: say so in one line."""
    if os.geteuid() != 0:
        raise UserError(
            "emulation needs root (network namespaces, veth pairs, IP options): "
            "run it as root, e.g. sudo make run"
        )


CONGESTION_CONTROLS_FILE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
CONGESTION_CONTROL_NAME = re.compile(r"[a-z0-9_]{1,15}")
"""A kernel congestion-control module's name (TCP_CA_NAME_MAX is 16 with its NUL)."""


def require_congestion_control(name: str, option: str = "--congestion-control") -> None:
    """``name`` is a congestion control this kernel has loaded: say so in one line if not.
    The name goes into ``ip`` batch lines, so it must be a plain module name."""
    if CONGESTION_CONTROL_NAME.fullmatch(name) is None:
        raise UserError(f"{option}: {name!r} is not a congestion-control name")
    try:
        available = CONGESTION_CONTROLS_FILE.read_text().split()
    except OSError as error:
        raise UserError(f"{option}: cannot read {CONGESTION_CONTROLS_FILE}: {error}") from None
    if name not in available:
        raise UserError(
            f"{option}: {name!r} is not loaded in this kernel (available: {' '.join(available)}; "
            f"modprobe tcp_{name} may add it)"
        )


def require_tools(*names: str) -> None:
    missing = [name for name in names if shutil.which(name) is None]
    if missing:
        raise UserError(
            f"emulation needs {', '.join(missing)} on PATH "
            "(Debian: apt-get install iproute2 ethtool; or make system-deps)"
        )


def run(argv: Sequence[str], stdin: str | None = None) -> str:
    """Run one set-up command; failure raises :class:`CommandError` with its stderr."""
    completed = subprocess.run(
        list(argv), input=stdin, capture_output=True, text=True, check=False, timeout=60
    )
    if completed.returncode != 0:
        detail = completed.stderr.strip().splitlines()
        raise CommandError(f"{' '.join(argv)}: {detail[-1] if detail else 'failed'}")
    return completed.stdout


def ip_batch(namespace: str | None, commands: Sequence[str]) -> None:
    """Many ``ip`` commands in one process: hundreds of ARP entries take milliseconds."""
    if not commands:
        return
    argv = ["ip", "-batch", "-"] if namespace is None else ["ip", "-n", namespace, "-batch", "-"]
    run(argv, stdin="\n".join(commands) + "\n")


def list_namespaces() -> list[str]:
    """Names of the named network namespaces (``ip netns list``)."""
    try:
        return sorted(entry.name for entry in NETNS_DIR.iterdir())
    except FileNotFoundError:
        return []


def namespace_executor(namespace: str) -> ThreadPoolExecutor:
    """One thread that lives in ``namespace``: an event loop makes sockets there without
    blocking (a new thread per socket would stall every transfer of the loop meanwhile)."""
    return ThreadPoolExecutor(
        max_workers=1,
        thread_name_prefix=f"netns-{namespace}",
        initializer=enter_netns,
        initargs=(namespace,),
    )
