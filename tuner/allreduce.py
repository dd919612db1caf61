"""Gradient all-reduce of one trial's workers over real kernel TCP.

A :class:`WorkerGroup` is one trial's workers on topology hosts. Every worker
lives in the trainable's process, but each socket is created inside its
host's network namespace (:func:`bmv2_topos.netns.namespace_executor`), so
the bytes travel host → switch → host as ordinary TCP, exactly as the
emulation's host agents do (see :mod:`bmv2_topos.agent`):

* one connection per flow of the pattern's plan
  (:func:`workloads.hp_tuning.sync_flows`), kept for the group's life;
* set up without payload: listeners on ephemeral ports, the sender binds
  before connecting, so the accepted connection is told apart by the sender's
  address and port (no identifying message);
* the Beamer tag on both ends of every connection, replaced per coflow
  (:meth:`WorkerGroup.tag`), so data and ACKs share the coflow's class;
* nothing but the gradients on the wire: each connection carries exactly the
  plan's ``size_bytes`` per all-reduce, of little-endian float32 values.

``ring``: workers ``hosts[0..w-1]`` in order; reduce-scatter then all-gather
over w chunks (the vector is padded with zeros to a multiple of w values, see
:func:`sync_model_bytes`). Chunk ``c`` is summed along the ring starting at
worker ``c``: ``((g[c] + g[c+1]) + …) + g[c-1]`` (indices mod w), then copied
to every worker, so all receive the same bits.
``ps``: ``hosts[0]`` is the parameter server, ``hosts[1..w]`` the workers; each
worker pushes its gradient, the server sums them in worker order
``((g[0] + g[1]) + …)`` and every worker pulls the sum.

The group runs its transfers on an asyncio loop in a thread of its own; its
methods are called from one (any) thread and block. Any failure closes every
socket and raises :class:`AllReduceError`; :meth:`WorkerGroup.close` stops the
loop and the namespace threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from bmv2_topos import netns
from tuner.contract import HostEndpoint, Pattern
from workloads.hp_tuning import Flow, sync_flows

Array = npt.NDArray[np.float32]
WIRE_DTYPE = np.dtype("<f4")
T = TypeVar("T")


class AllReduceError(RuntimeError):
    """The all-reduce failed (peer closed, short read, timeout); the group is closed."""


def hosts_per_group(pattern: Pattern, workers: int) -> int:
    """Hosts a trial of ``workers`` data-parallel workers occupies (``ps``: one more)."""
    return workers + (1 if pattern == "ps" else 0)


def wire_values(parameters: int, pattern: Pattern, workers: int) -> int:
    """float32 values one worker's gradient occupies on the wire (ring: padded to a
    multiple of ``workers``, so every ring flow carries the same bytes)."""
    if pattern == "ring":
        return -(-parameters // workers) * workers
    return parameters


def sync_model_bytes(parameters: int, pattern: Pattern, workers: int) -> int:
    """The ``model_bytes`` to give :func:`workloads.hp_tuning.sync_flows` (and so the
    controller's plan) for a gradient of ``parameters`` float32 values."""
    return 4 * wire_values(parameters, pattern, workers)


def plan_flows(pattern: Pattern, workers: int, parameters: int) -> tuple[Flow, ...]:
    """The group's flows, hosts numbered by their position in the group."""
    hosts = list(range(hosts_per_group(pattern, workers)))
    return sync_flows(pattern, hosts, sync_model_bytes(parameters, pattern, workers))


@dataclass(slots=True)
class Connection:
    """One flow: the sender socket on ``src``'s host, the accepted one on ``dst``'s."""

    src: int
    dst: int
    size_bytes: int
    sender: socket.socket
    receiver: socket.socket

    def close(self) -> None:
        self.sender.close()
        self.receiver.close()


@dataclass(frozen=True, slots=True)
class GroupHost:
    name: str
    endpoint: HostEndpoint


class WorkerGroup:
    """The workers of one trial and their connections; a context manager."""

    def __init__(
        self,
        hosts: Sequence[GroupHost],
        pattern: Pattern,
        parameters: int,
        connect_option: bytes | None = None,
        timeout_s: float = 600.0,
    ) -> None:
        if pattern not in ("ring", "ps"):
            raise ValueError(f"unknown pattern {pattern!r} (ring or ps)")
        workers = len(hosts) - (1 if pattern == "ps" else 0)
        if workers < 1:
            raise ValueError(f"{pattern} needs at least {2 if pattern == 'ps' else 1} hosts")
        if parameters < 1:
            raise ValueError(f"parameters must be >= 1, got {parameters}")
        self.hosts = tuple(hosts)
        self.pattern: Pattern = pattern
        self.workers = workers
        self.parameters = parameters
        self.values = wire_values(parameters, pattern, workers)
        # A one-worker ring's only flow is to itself: no connection.
        plan = plan_flows(pattern, workers, parameters)
        self.flows = tuple(flow for flow in plan if flow.src_host != flow.dst_host)
        self.timeout_s = timeout_s
        self.connections: list[Connection] = []
        self._connect_option = connect_option
        self._executors: dict[str, ThreadPoolExecutor] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="allreduce-loop", daemon=True
        )
        self._closed = False
        self._thread.start()
        try:
            self._run(self._connect_all(), timeout_s, "connecting the workers")
        except BaseException:
            self.close()
            raise

    @property
    def host_names(self) -> tuple[str, ...]:
        return tuple(host.name for host in self.hosts)

    def __enter__(self) -> WorkerGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the loop thread --

    def _run(
        self, coroutine: Coroutine[Any, Any, T], timeout_s: float, what: str = "all-reduce"
    ) -> T:
        if self._closed:
            coroutine.close()
            raise AllReduceError("worker group is closed")
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout_s)
        except FutureTimeout:
            future.cancel()
            self.close()
            raise AllReduceError(f"{what} did not finish within {timeout_s:g} s") from None
        except AllReduceError:
            self.close()
            raise
        except (OSError, EOFError) as error:
            self.close()
            raise AllReduceError(f"{what} failed: {error}") from error
        except BaseException:
            future.cancel()
            self.close()
            raise

    def close(self) -> None:
        """Close every socket, stop the loop and the namespace threads (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():

            async def cancel_all() -> None:
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

            with contextlib.suppress(FutureTimeout, RuntimeError):
                asyncio.run_coroutine_threadsafe(cancel_all(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        for connection in self.connections:
            connection.close()
        self.connections.clear()
        if not self._thread.is_alive():
            self._loop.close()
        for executor in self._executors.values():
            executor.shutdown(wait=True, cancel_futures=True)
        self._executors.clear()

    # -- set-up --

    async def _socket_on(self, index: int) -> socket.socket:
        namespace = self.hosts[index].endpoint.namespace
        if namespace is None:
            return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        executor = self._executors.get(namespace)
        if executor is None:
            executor = self._executors[namespace] = netns.namespace_executor(namespace)
        return await asyncio.get_running_loop().run_in_executor(
            executor, socket.socket, socket.AF_INET, socket.SOCK_STREAM
        )

    async def _connect_all(self) -> None:
        listeners: dict[int, socket.socket] = {}
        try:
            for flow in self.flows:
                if flow.dst_host not in listeners:
                    listener = await self._socket_on(flow.dst_host)
                    listeners[flow.dst_host] = listener
                    listener.bind((self.hosts[flow.dst_host].endpoint.ip, 0))
                    listener.listen(16)
                    listener.setblocking(False)
            for flow in self.flows:
                self.connections.append(await self._connect(flow, listeners[flow.dst_host]))
        finally:
            for listener in listeners.values():
                listener.close()

    async def _connect(self, flow: Flow, listener: socket.socket) -> Connection:
        loop = asyncio.get_running_loop()
        src = self.hosts[flow.src_host].endpoint
        sender = await self._socket_on(flow.src_host)
        try:
            if self._connect_option is not None:
                sender.setsockopt(socket.IPPROTO_IP, socket.IP_OPTIONS, self._connect_option)
            sender.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sender.bind((src.ip, 0))
            sender.setblocking(False)
            expected = sender.getsockname()

            async def accept() -> socket.socket:
                while True:
                    conn, peer = await loop.sock_accept(listener)
                    if peer == expected:
                        conn.setblocking(False)
                        return conn
                    conn.close()  # not one of ours

            accepting = loop.create_task(accept())
            try:
                await loop.sock_connect(sender, listener.getsockname())
                receiver = await accepting
            finally:
                accepting.cancel()
        except BaseException:
            sender.close()
            raise
        connection = Connection(flow.src_host, flow.dst_host, flow.size_bytes, sender, receiver)
        if self._connect_option is not None:
            receiver.setsockopt(socket.IPPROTO_IP, socket.IP_OPTIONS, self._connect_option)
        return connection

    # -- per coflow --

    def tag(self, option: bytes | None) -> None:
        """Put ``option`` (e.g. :func:`bmv2_topos.agent.beamer_option`) on both ends of
        every connection; ``None`` removes it."""
        if self._closed:
            raise AllReduceError("worker group is closed")
        for connection in self.connections:
            for sock in (connection.sender, connection.receiver):
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_OPTIONS, option or b"")

    def allreduce(self, gradients: Sequence[npt.NDArray[Any]]) -> list[Array]:
        """Sum the workers' gradients over the network; what each worker received."""
        if len(gradients) != self.workers:
            raise ValueError(f"expected {self.workers} gradients, got {len(gradients)}")
        buffers = []
        for worker, gradient in enumerate(gradients):
            array = np.asarray(gradient)
            if array.shape != (self.parameters,) or array.dtype != np.float32:
                raise ValueError(
                    f"worker {worker}: gradient of shape {array.shape} and dtype {array.dtype}, "
                    f"expected ({self.parameters},) float32"
                )
            buffer = np.zeros(self.values, dtype=WIRE_DTYPE)
            buffer[: self.parameters] = array
            buffers.append(buffer)
        if self.pattern == "ring":
            results = self._run(self._ring(buffers), self.timeout_s)
        else:
            results = self._run(self._ps(buffers), self.timeout_s)
        return [result[: self.parameters].astype(np.float32, copy=False) for result in results]

    async def _ring(self, buffers: list[Array]) -> list[Array]:
        w = self.workers
        if w == 1:
            return buffers
        chunk = self.values // w
        out_of = {c.src: c for c in self.connections}  # worker k sends to k + 1

        def part(buffer: Array, index: int) -> Array:
            start = (index % w) * chunk
            return buffer[start : start + chunk]

        async def worker(k: int) -> None:
            send, receive = out_of[k], out_of[(k - 1) % w]
            incoming = np.empty(chunk, dtype=WIRE_DTYPE)
            for s in range(w - 1):  # reduce-scatter
                await asyncio.gather(
                    _send(send, part(buffers[k], k - s)), _receive(receive, incoming)
                )
                own = part(buffers[k], k - 1 - s)
                np.add(incoming, own, out=own)
            for s in range(w - 1):  # all-gather
                await asyncio.gather(
                    _send(send, part(buffers[k], k + 1 - s)),
                    _receive(receive, part(buffers[k], k - s)),
                )

        await asyncio.gather(*(worker(k) for k in range(w)))
        for connection in self.connections:
            _check_drained(connection)
        return buffers

    async def _ps(self, buffers: list[Array]) -> list[Array]:
        w = self.workers
        pushes, pulls = self.connections[:w], self.connections[w:]
        received = [np.empty(self.values, dtype=WIRE_DTYPE) for _ in range(w)]
        await asyncio.gather(
            *(
                asyncio.gather(_send(c, buffers[i]), _receive(c, received[i]))
                for i, c in enumerate(pushes)
            )
        )
        total = received[0]
        for gradient in received[1:]:
            total += gradient
        results = [np.empty(self.values, dtype=WIRE_DTYPE) for _ in range(w)]
        await asyncio.gather(
            *(asyncio.gather(_send(c, total), _receive(c, results[i])) for i, c in enumerate(pulls))
        )
        for connection in self.connections:
            _check_drained(connection)
        return results


def _flow_name(connection: Connection) -> str:
    return f"connection {connection.src}->{connection.dst}"


async def _send(connection: Connection, values: Array) -> None:
    try:
        await asyncio.get_running_loop().sock_sendall(connection.sender, values.view(np.uint8).data)
    except OSError as error:
        raise AllReduceError(f"{_flow_name(connection)}: send failed: {error}") from None


async def _receive(connection: Connection, into: Array) -> None:
    """Fill ``into`` from the connection; the peer closing first is an error."""
    view = into.view(np.uint8).data
    await receive_exactly(connection.receiver, view, _flow_name(connection))


async def receive_exactly(sock: socket.socket, into: memoryview, what: str) -> None:
    """Read exactly ``len(into)`` bytes; raise :class:`AllReduceError` on a short read."""
    loop = asyncio.get_running_loop()
    size = len(into)
    got = 0
    while got < size:
        try:
            n = await loop.sock_recv_into(sock, into[got:])
        except OSError as error:
            raise AllReduceError(
                f"{what}: receive failed after {got} of {size} bytes: {error}"
            ) from None
        if n == 0:
            raise AllReduceError(f"{what}: peer closed the connection after {got} of {size} bytes")
        got += n


def _check_drained(connection: Connection) -> None:
    """Bytes waiting after an all-reduce mean the two ends are out of step."""
    try:
        extra = connection.receiver.recv(65536, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return
    if extra:
        raise AllReduceError(
            f"{_flow_name(connection)}: {len(extra)} unexpected bytes after the all-reduce"
        )
    raise AllReduceError(f"{_flow_name(connection)}: peer closed the connection")
