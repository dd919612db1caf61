"""SIGTERM and SIGHUP unwind a command as Ctrl-C does, so that every ``finally`` runs
and what the command started is removed."""

from __future__ import annotations

import signal
import threading
from collections.abc import MutableMapping
from types import FrameType
from typing import Any


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP: unwind like Ctrl-C so every ``finally`` runs."""


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


def unwind_on_termination() -> dict[int, Any]:
    """Make SIGTERM and SIGHUP raise :class:`Interrupted` (from the main thread only;
    elsewhere nothing changes). Returns the handlers to give back to
    :func:`restore_handlers`."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.signal(signum, _interrupt) for signum in (signal.SIGTERM, signal.SIGHUP)}


def restore_handlers(previous: MutableMapping[Any, Any]) -> None:
    """Give each signal in ``previous`` its handler back (and forget them)."""
    for signum, handler in previous.items():
        signal.signal(signum, handler)
    previous.clear()
