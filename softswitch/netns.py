"""Run a function inside a named network namespace without moving the process.

A socket belongs to the network namespace of the thread that created it and
keeps it for life. So a short-lived thread enters the namespace with
``setns`` (per thread for network namespaces; Python 3.11 has no
``os.setns``, libc's is called), runs the function, and ends; the caller and
every other thread stay where they are. The switch opens its raw sockets this
way, and the emulation its hosts' sockets.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from control.errors import UserError

NETNS_DIR = Path("/run/netns")
"""Where ``ip netns add`` pins named namespaces (iproute2 convention)."""

CLONE_NEWNET = 0x40000000

ResultT = TypeVar("ResultT")


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def enter_netns(netns: str) -> None:
    """Move the calling thread (only it) into network namespace ``netns``."""
    path = NETNS_DIR / netns
    if not path.exists():
        raise UserError(f"network namespace {netns!r} does not exist ({path} missing)")
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc().setns(fd, CLONE_NEWNET) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"setns({netns}): {os.strerror(code)}")
    finally:
        os.close(fd)


def run_in_netns(netns: str | None, action: Callable[[], ResultT]) -> ResultT:
    """Run ``action`` in network namespace ``netns`` (``None``: the current one)."""
    if netns is None:
        return action()
    outcome: list[ResultT] = []
    failure: list[BaseException] = []

    def enter_and_run() -> None:
        try:
            enter_netns(netns)
            outcome.append(action())
        except BaseException as error:
            failure.append(error)

    thread = threading.Thread(target=enter_and_run, name=f"netns-{netns}", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]
