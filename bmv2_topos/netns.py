"""Network-namespace primitives: run commands in a namespace, create sockets in it.

A socket belongs to the namespace of the thread that created it and keeps it for
its whole life, so the host agents can live in one process: each socket is made
on a short-lived thread that has entered the host's namespace with ``setns``,
then used from anywhere. Python 3.11 has no ``os.setns``; libc's is called.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from control.errors import UserError

NETNS_DIR = Path("/run/netns")
"""Where ``ip netns add`` pins named namespaces (iproute2 convention)."""

CLONE_NEWNET = 0x40000000

T = TypeVar("T")


class CommandError(RuntimeError):
    """A set-up command failed; the message carries the command and its stderr."""


def require_root() -> None:
    """Namespaces, veths and tagged sockets all need root: say so in one line."""
    if os.geteuid() != 0:
        raise UserError(
            "emulation needs root (network namespaces, veth pairs, IP options): "
            "run it as root, e.g. sudo make run"
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


@functools.cache
def _libc() -> ctypes.CDLL:
    """Loaded once: ``find_library`` runs helper programs, far too slow per socket."""
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _libc_setns(fd: int) -> None:
    if _libc().setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def call_in_netns(namespace: str, function: Callable[[], T]) -> T:
    """Run ``function`` on a fresh thread inside ``namespace`` and return its result.

    Only that thread changes namespace (``setns`` is per thread for network
    namespaces), so the caller and every other thread stay where they are.
    """
    outcome: list[T] = []
    failure: list[BaseException] = []

    def body() -> None:
        try:
            fd = os.open(NETNS_DIR / namespace, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _libc_setns(fd)
            finally:
                os.close(fd)
            outcome.append(function())
        except BaseException as error:
            failure.append(error)

    thread = threading.Thread(target=body, name=f"netns-{namespace}", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


def socket_in_netns(
    namespace: str, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM
) -> socket.socket:
    """A socket living in ``namespace`` (its traffic uses that namespace's interfaces)."""
    return call_in_netns(namespace, lambda: socket.socket(family, kind))
