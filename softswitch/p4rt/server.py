"""The P4Runtime gRPC server of the embedded target, on an event loop, loopback by default."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import threading
from concurrent import futures
from types import TracebackType

from grpc import aio

from control.errors import UserError
from softswitch.p4rt.pipeline_config import PipelineHost
from softswitch.p4rt.service import P4RuntimeServicer, add_to_server

log = logging.getLogger(__name__)

DEFAULT_GRPC_ADDR = "127.0.0.1:9559"

# Large batches are the point of Write; 4 MiB (gRPC's default) holds only ~50k entries.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024

# Threads for the work on the switch; requests and streams wait on the event loop.
WORKERS = 8

# RPCs accepted at once, open streams and requests still arriving among them; one more is
# RESOURCE_EXHAUSTED at once rather than a wait without end. A waiting RPC costs memory,
# not a thread, and one whose request does not arrive is ended (``rpc.REQUEST_TIMEOUT_S``).
MAX_CONCURRENT_RPCS = 256


def serves_every_network(addr: str) -> bool:
    """Whether ``addr`` (HOST:PORT as gRPC takes it) binds every interface:
    ``0.0.0.0``, ``[::]`` (and ``::``, ``0``, ``*``) or no host at all."""
    if addr.startswith("unix:"):
        return False
    for scheme in ("ipv4:", "ipv6:", "dns:"):
        addr = addr.removeprefix(scheme)
    host = addr.rsplit(":", 1)[0] if ":" in addr else addr
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host in ("", "*", "0"):
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_unspecified
    except ValueError:
        return False  # a host name: it binds the addresses it resolves to


def every_network_warning(addr: str) -> str:
    return (
        f"the P4Runtime server on {addr} serves every network this host is on: "
        "anyone who can reach it can take and program the switch (P4Runtime has no "
        "authentication here); bind 127.0.0.1 or one interface's address unless that "
        "is intended"
    )


class P4RuntimeServer:
    """``P4RuntimeServer(switch, device_id, addr).start()``; ``stop()`` ends every stream.

    ``addr`` may use port 0 to bind a free port; :attr:`addr` then holds the real one.
    The gRPC server runs on an event loop in a thread of its own (see ``rpc``); the
    switch work runs on a pool of worker threads.
    """

    def __init__(self, switch: PipelineHost, device_id: int, addr: str = DEFAULT_GRPC_ADDR) -> None:
        self.servicer = P4RuntimeServicer(switch, device_id)
        self.device_id = device_id
        self.addr = addr
        self._server: aio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._executor: futures.ThreadPoolExecutor | None = None

    def start(self) -> None:
        """Bind and serve; a UserError names an address that cannot be bound."""
        if self._server is not None:
            return
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="p4rt-loop", daemon=True)
        executor = futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="p4rt")
        thread.start()
        self._loop, self._thread, self._executor = loop, thread, executor
        try:
            self._server = asyncio.run_coroutine_threadsafe(self._bind(executor), loop).result()
        except BaseException:
            self._end_loop()
            raise
        if serves_every_network(self.addr):
            log.warning("%s", every_network_warning(self.addr))

    async def _bind(self, executor: futures.Executor) -> aio.Server:
        server = aio.server(
            maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS,
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
            ],
        )
        add_to_server(self.servicer, server, executor)
        try:
            port = server.add_insecure_port(self.addr)
        except RuntimeError as error:
            await server.stop(None)
            raise UserError(f"cannot serve P4Runtime on {self.addr}: {error}") from None
        if port == 0:
            await server.stop(None)
            raise UserError(f"cannot serve P4Runtime on {self.addr}: address unavailable")
        host = self.addr.rsplit(":", 1)[0]
        self.addr = f"{host}:{port}"
        await server.start()
        return server

    def stop(self, grace_s: float | None = 1.0) -> None:
        """End every stream, then stop serving; waits for in-flight RPCs up to ``grace_s``."""
        server, self._server = self._server, None
        if server is None:
            return
        self.servicer.arbitrator.close_all()
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(server.stop(grace_s), self._loop).result()
        self._end_loop()

    def _end_loop(self) -> None:
        """Stop the event loop and its thread, then the workers (after their last task)."""
        loop, thread, executor = self._loop, self._thread, self._executor
        self._loop = self._thread = self._executor = None
        if loop is not None and thread is not None:
            asyncio.run_coroutine_threadsafe(_cancel_tasks(), loop).result()
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()
        if executor is not None:
            executor.shutdown(wait=True)

    def __enter__(self) -> P4RuntimeServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


async def _cancel_tasks() -> None:
    """Cancel what still runs on the loop (handlers of calls the server stop cut off)."""
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
