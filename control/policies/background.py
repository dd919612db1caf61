"""A worker process that runs lookahead searches one at a time, off the caller's thread.

The controller must answer an event in milliseconds, and a lookahead search takes
seconds of CPU. In a thread of the controller's process it would hold the
interpreter lock and slow every reply; in a process of its own it costs the
controller nothing but a pipe. The worker is started by ``spawn`` (the
controller runs gRPC threads, which a fork would copy in an undefined state),
is a daemon (it ends with its parent), and ends by itself when the pipe closes.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from control.policies.lookahead import SearchJob, SearchResult


def _serve(connection: Connection) -> None:
    """The worker's loop: a job in, its result (or the error it raised) out."""
    from control.policies.lookahead import search

    while True:
        try:
            job = connection.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        try:
            outcome: Any = search(job)
        except Exception as error:  # reported to the parent, which keeps its placement
            outcome = RuntimeError(f"{type(error).__name__}: {error}")
        try:
            connection.send(outcome)
        except (BrokenPipeError, OSError):
            return


class BackgroundSearch:
    """One worker process; ``on_return`` gets each job's outcome on a reader thread."""

    def __init__(self, on_return: Callable[[SearchResult | BaseException], None]) -> None:
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(child,), name="lookahead-search", daemon=True
        )
        self._process.start()
        child.close()
        self._on_return = on_return
        self._closed = False
        self._ended = False
        self._reader = threading.Thread(target=self._read, name="lookahead-results", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def alive(self) -> bool:
        """False once the pipe has closed (the process may not be reaped yet)."""
        return not self._ended and self._process.is_alive()

    def submit(self, job: SearchJob) -> None:
        """Queue ``job``; the worker runs jobs in the order they were submitted."""
        self._connection.send(job)

    def _read(self) -> None:
        while True:
            try:
                outcome = self._connection.recv()
            except (EOFError, OSError):
                self._ended = True
                if not self._closed:
                    self._on_return(RuntimeError("the lookahead search process ended"))
                return
            self._on_return(outcome)

    def close(self) -> None:
        """End the worker now, also in the middle of a search, and wait for it."""
        self._closed = True
        self._process.terminate()
        self._process.join(timeout=5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._connection.close()
        self._reader.join(timeout=5)
