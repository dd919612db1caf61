"""SIGTERM and SIGHUP unwind a command as Ctrl-C does, so that every ``finally`` runs
and what the command started is removed."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator, MutableMapping
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


@contextlib.contextmanager
def terminations_unwind() -> Iterator[None]:
    """SIGTERM and SIGHUP unwind the block as Ctrl-C does (see
    :func:`unwind_on_termination`), and find their old handlers again after it: a
    command's whole run, so that every ``finally`` of it runs."""
    previous = unwind_on_termination()
    try:
        yield
    finally:
        restore_handlers(previous)


HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP while the block runs, then raise the first one
    held to the handler it would have met: work that must not stop halfway (a
    teardown, writing files through temporaries) finishes first. A signal mask would
    not do: the kernel may hand the signal to another thread. Only the main thread
    may set handlers (and only it runs them); elsewhere nothing is held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, _frame: FrameType | None) -> None:
        held.append(signum)

    previous = {signum: signal.signal(signum, hold) for signum in HELD_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        if held:
            signal.raise_signal(held[0])
