"""The servicer's blocking work under the asyncio gRPC server.

The server receives every request on its event loop: a client that sends its request
slowly, or never finishes it, costs no thread, and is cut off after
``REQUEST_TIMEOUT_S``. Only a request that has arrived whole takes a worker thread, for
the work on the switch, which blocks (locks, table updates). Unary methods are served as
client-streaming ones for that reason: the handler starts when the call does and reads
the one request itself, under a deadline (a unary call and a one-message stream look the
same on the wire).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import NoReturn, Protocol, TypeVar

import grpc
from grpc import aio

# From a call's start to its request's last byte; a slower request gets DEADLINE_EXCEEDED.
# Generous: a 256 MiB Write crosses loopback in well under a second.
REQUEST_TIMEOUT_S = 30.0

_Reply = TypeVar("_Reply")

Metadata = Sequence[tuple[str, str | bytes]]


class RpcContext(Protocol):
    """What the servicer's blocking methods use of an RPC's context."""

    def peer(self) -> str: ...

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn: ...

    def set_trailing_metadata(self, trailing_metadata: Metadata) -> None: ...


class Aborted(Exception):
    """A blocking method ended its RPC with a status; the event loop sends it."""

    def __init__(self, code: grpc.StatusCode, details: str, trailing: Metadata | None) -> None:
        super().__init__(details)
        self.code = code
        self.details = details
        self.trailing = trailing


class BlockingContext:
    """An :class:`RpcContext` for a worker thread: ``abort`` raises :class:`Aborted`,
    which :func:`run_blocking` hands to the RPC's real context on the event loop."""

    def __init__(self, peer: str) -> None:
        self._peer = peer
        self._trailing: Metadata | None = None

    def peer(self) -> str:
        return self._peer

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        raise Aborted(code, details, self._trailing)

    def set_trailing_metadata(self, trailing_metadata: Metadata) -> None:
        self._trailing = trailing_metadata


async def end_with(context: aio.ServicerContext, aborted: Aborted) -> NoReturn:
    """End the RPC with ``aborted``'s status and trailing metadata."""
    if aborted.trailing is not None:
        context.set_trailing_metadata(tuple(aborted.trailing))
    await context.abort(aborted.code, aborted.details)
    raise AssertionError("unreachable: abort raises")  # pragma: no cover


async def send(context: aio.ServicerContext, message: object) -> bool:
    """Write one reply; False, quietly, when the client has cancelled or left (gRPC's
    failed write would end the handler with an error logged as a traceback, one per
    cancelled call, which any client can cause)."""
    if context.done():
        return False
    try:
        await context.write(message)
    except aio.InternalError:  # the batch that sends it failed: the call is over
        return False
    return True


async def one_request(context: aio.ServicerContext, timeout_s: float) -> bytes:
    """The call's request message, whole, within ``timeout_s`` of the call's start."""
    try:
        data = await asyncio.wait_for(context.read(), timeout_s)
    except TimeoutError:
        await context.abort(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            f"the request did not arrive whole within {timeout_s:g} s",
        )
    if data is aio.EOF:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call carried no request")
    assert isinstance(data, bytes)
    return data


async def run_blocking(
    executor: Executor,
    context: aio.ServicerContext,
    work: Callable[[RpcContext], _Reply],
) -> _Reply:
    """``work(context)`` on a worker thread; an abort there ends this RPC."""
    blocking = BlockingContext(context.peer())
    try:
        return await asyncio.get_running_loop().run_in_executor(executor, work, blocking)
    except Aborted as aborted:
        await end_with(context, aborted)
