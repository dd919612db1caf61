"""Host agents: trials compute, then synchronise over real, Beamer-tagged kernel TCP.

All hosts' agents run in one process on one asyncio loop (robust: nothing to
coordinate across processes, one place to cancel on failure), but every
socket is created inside its host's network namespace (by a thread that
lives there, :func:`bmv2_topos.netns.namespace_executor`), so each byte
travels host ``eth0`` → veth → switch → veth → host ``eth0`` as ordinary TCP.

The receiver tells its accepted connections apart by the sender's address
and port, which the sender binds before connecting: setting a connection up
takes only the handshake, whose segments carry no payload and so travel in
the switch's ACK class. (An identifying first message would be data in the
coflow's class, or in the default class before the controller has a stage
entry, and would wait behind every higher class's backlog.)

A trial keeps one connection per flow of its synchronisation pattern for the
whole stage (as NCCL or a parameter server keeps its connections). Each
iteration: sleep the (scaled) compute time, announce the coflow to the
controller — which answers once the switches hold its class — put the
Beamer tag on *both* ends of every connection (``IP_OPTIONS``; ACKs then
share the class), send the bytes, and wait until every receiver has read its
last byte: completion times are taken at the receivers. Iteration i+1 starts
only after coflow i has finished.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from bmv2_topos import netns
from control.events import ControllerUnreachable as ControllerGone
from control.model import Experiment, Stage, TrialStage

TAG_TYPE = 0x9E
TAG_LENGTH = 12
TAG_VERSION = 1
AGENT_PORT = 5001
CHUNK_BYTES = 256 * 1024
_HEADER = struct.Struct("!IQ")
"""Per transfer: iteration, payload bytes (lets the receiver check it is in step)."""

T = TypeVar("T")


def beamer_option(experiment_id: int, stage_id: int, coflow_id: int) -> bytes:
    """The 12-byte Beamer IPv4 option (type 0x9E, length 12, version 1)."""
    return struct.pack(
        "!BBBBHHI",
        TAG_TYPE,
        TAG_LENGTH,
        TAG_VERSION << 4,
        0,
        experiment_id & 0xFFFF,
        stage_id & 0xFFFF,
        coflow_id & 0xFFFFFFFF,
    )


def local_coflow_id(trial_id: int, iteration: int) -> int:
    """The team's coflow id convention, for runs without a controller."""
    return (trial_id & 0xFFFF) << 16 | (iteration & 0xFFFF)


class CoflowEvents(Protocol):
    """What a trial's synchronisation tells the controller (the coflow id is the tag's)."""

    def coflow_started(
        self, experiment_id: int, stage_id: int, trial_id: int, iteration: int
    ) -> int: ...
    def coflow_finished(
        self, experiment_id: int, stage_id: int, trial_id: int, iteration: int
    ) -> object: ...


class EventSink(CoflowEvents, Protocol):
    """What the agents tell the controller; :class:`control.events.EventClient` is one."""

    def experiment_released(self, experiment: Experiment) -> object: ...
    def stage_released(self, experiment_id: int, stage_id: int) -> object: ...
    def trial_started(self, experiment_id: int, stage_id: int, trial_id: int) -> object: ...
    def stage_completed(self, experiment_id: int, stage_id: int) -> object: ...


class NoController:
    """An :class:`EventSink` that tells no one: tags follow the coflow id convention."""

    def experiment_released(self, experiment: Experiment) -> object:
        return None

    def stage_released(self, experiment_id: int, stage_id: int) -> object:
        return None

    def trial_started(self, experiment_id: int, stage_id: int, trial_id: int) -> object:
        return None

    def coflow_started(
        self, experiment_id: int, stage_id: int, trial_id: int, iteration: int
    ) -> int:
        return local_coflow_id(trial_id, iteration)

    def coflow_finished(
        self, experiment_id: int, stage_id: int, trial_id: int, iteration: int
    ) -> object:
        return None

    def stage_completed(self, experiment_id: int, stage_id: int) -> object:
        return None


class ControllerOptional:
    """Forwards events to ``sink``; once the controller is gone, carries on without it.

    The switches keep the classes last installed, so training traffic goes on
    (a real cluster must not stop because its scheduler did). Coflows started
    afterwards get the convention's ids; the stage-level entries still match them.
    """

    def __init__(self, sink: EventSink, on_lost: Callable[[str], None] | None = None) -> None:
        self.sink = sink
        self.lost: str | None = None
        self._on_lost = on_lost
        self._fallback = NoController()

    def _call(self, name: str, *args: Any) -> Any:
        if self.lost is None:
            try:
                return getattr(self.sink, name)(*args)
            except ControllerGone as error:
                self.lost = str(error)
                if self._on_lost is not None:
                    self._on_lost(self.lost)
        return getattr(self._fallback, name)(*args)

    def experiment_released(self, experiment: Experiment) -> object:
        return self._call("experiment_released", experiment)

    def stage_released(self, experiment_id: int, stage_id: int) -> object:
        return self._call("stage_released", experiment_id, stage_id)

    def trial_started(self, experiment_id: int, stage_id: int, trial_id: int) -> object:
        return self._call("trial_started", experiment_id, stage_id, trial_id)

    def coflow_started(
        self, experiment_id: int, stage_id: int, trial_id: int, iteration: int
    ) -> int:
        return int(self._call("coflow_started", experiment_id, stage_id, trial_id, iteration))

    def coflow_finished(
        self, experiment_id: int, stage_id: int, trial_id: int, iteration: int
    ) -> object:
        return self._call("coflow_finished", experiment_id, stage_id, trial_id, iteration)

    def stage_completed(self, experiment_id: int, stage_id: int) -> object:
        return self._call("stage_completed", experiment_id, stage_id)


@dataclass(frozen=True, slots=True)
class CoflowRecord:
    experiment_id: int
    stage_id: int
    trial_id: int
    iteration: int
    start_s: float
    end_s: float
    size_bytes: int


@dataclass(frozen=True, slots=True)
class StageRecord:
    experiment_id: int
    stage_id: int
    release_s: float
    end_s: float

    @property
    def sct_s(self) -> float:
        return self.end_s - self.release_s


@dataclass
class RunRecord:
    """What one emulation measured; times are seconds since the workload's time zero."""

    stages: list[StageRecord] = field(default_factory=list)
    coflows: list[CoflowRecord] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class HostAddress:
    namespace: str | None
    """``None``: the agent's own namespace (e.g. loopback addresses in tests)."""
    ip: str


class Connection:
    """One flow's TCP connection: a sender socket at ``src``, the accepted one at ``dst``."""

    def __init__(self, sender: socket.socket, receiver: socket.socket) -> None:
        self.sender = sender
        self.receiver = receiver

    def tag(self, option: bytes) -> None:
        for sock in (self.sender, self.receiver):
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_OPTIONS, option)

    def close(self) -> None:
        self.sender.close()
        self.receiver.close()


class AgentError(ConnectionError):
    """A host's socket failed (no file left, an address the kernel refuses): one line
    naming the host and the kernel's reason."""

    def __init__(self, what: str, error: OSError) -> None:
        super().__init__(error.errno, f"{what}: {error.strerror or error}")

    def __str__(self) -> str:
        return str(self.strerror)


ConnectionKey = tuple[int, str, int]
"""Receiving host index, sender IP, sender port: what tells accepted connections apart."""


class HostAgents:
    """Listeners and connections of every host; used inside a running event loop."""

    def __init__(self, hosts: Mapping[int, HostAddress], port: int = AGENT_PORT) -> None:
        self.hosts = dict(hosts)
        self.port = port
        self._listeners: dict[int, socket.socket] = {}
        self._accept_tasks: list[asyncio.Task[None]] = []
        self._pending: dict[ConnectionKey, asyncio.Future[socket.socket]] = {}
        self._executors: dict[int, ThreadPoolExecutor] = {}
        self._payload = memoryview(bytes(CHUNK_BYTES))
        self._accept_error: AgentError | None = None
        """Why a listener stopped accepting: every connection waiting, or to come, fails."""

    async def _socket_in(self, index: int) -> socket.socket:
        """A new TCP socket in host ``index``'s namespace, made without blocking the loop."""
        namespace = self.hosts[index].namespace
        try:
            if namespace is None:
                return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            executor = self._executors.get(index)
            if executor is None:
                executor = self._executors[index] = netns.namespace_executor(namespace)
            return await asyncio.get_running_loop().run_in_executor(
                executor, functools.partial(socket.socket, socket.AF_INET, socket.SOCK_STREAM)
            )
        except OSError as error:
            raise AgentError(f"host {self.hosts[index].ip}: cannot open a socket", error) from None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for index, host in self.hosts.items():
            listener = await self._socket_in(index)
            try:
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                listener.bind((host.ip, self.port))
                listener.listen(1024)
                listener.setblocking(False)
            except OSError as error:
                listener.close()
                what = f"host {host.ip}: cannot listen on port {self.port}"
                raise AgentError(what, error) from None
            self._listeners[index] = listener
            self._accept_tasks.append(loop.create_task(self._accept_loop(index, listener)))

    async def close(self) -> None:
        for task in self._accept_tasks:
            task.cancel()
        await asyncio.gather(*self._accept_tasks, return_exceptions=True)
        for listener in self._listeners.values():
            listener.close()
        for future in self._pending.values():
            if future.done() and not future.cancelled() and future.exception() is None:
                future.result().close()
            future.cancel()
        for executor in self._executors.values():
            executor.shutdown(wait=False, cancel_futures=True)

    def _waiter(self, key: ConnectionKey) -> asyncio.Future[socket.socket]:
        if key not in self._pending:
            future = asyncio.get_running_loop().create_future()
            if self._accept_error is not None:
                future.set_exception(self._accept_error)
            self._pending[key] = future
        return self._pending[key]

    async def _accept_loop(self, index: int, listener: socket.socket) -> None:
        """Hand each accepted connection to its waiter; if accepting fails (no file left),
        fail every waiter at once rather than let them wait for the run's timeout."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, (peer_ip, peer_port) = await loop.sock_accept(listener)
            except OSError as error:
                what = f"host {self.hosts[index].ip}: cannot accept a connection"
                self._accept_error = AgentError(what, error)
                for waiter in self._pending.values():
                    if not waiter.done():
                        waiter.set_exception(self._accept_error)
                return
            conn.setblocking(False)
            waiter = self._waiter((index, peer_ip, peer_port))
            if waiter.done():
                conn.close()
            else:
                waiter.set_result(conn)

    async def connect(self, src: int, dst: int, option: bytes) -> Connection:
        """A tagged connection from host ``src`` to host ``dst`` (SYN carries the tag)."""
        loop = asyncio.get_running_loop()
        sender = await self._socket_in(src)
        key: ConnectionKey | None = None
        try:
            sender.setsockopt(socket.IPPROTO_IP, socket.IP_OPTIONS, option)
            sender.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sender.bind((self.hosts[src].ip, 0))
            sender.setblocking(False)
            key = (dst, self.hosts[src].ip, sender.getsockname()[1])
            waiter = self._waiter(key)
            await loop.sock_connect(sender, (self.hosts[dst].ip, self.port))
            receiver = await waiter
            try:
                receiver.setsockopt(socket.IPPROTO_IP, socket.IP_OPTIONS, option)
            except BaseException:
                receiver.close()
                raise
        except AgentError:
            sender.close()
            raise
        except OSError as error:
            sender.close()
            what = f"host {self.hosts[src].ip}: cannot connect to {self.hosts[dst].ip}"
            raise AgentError(what, error) from None
        except BaseException:
            sender.close()
            raise
        finally:
            if key is not None:
                self._pending.pop(key, None)
        return Connection(sender, receiver)

    async def connect_all(self, pairs: list[tuple[int, int]], option: bytes) -> list[Connection]:
        """A tagged connection for each (src, dst) pair, in order. If one fails or the
        caller is cancelled, the connections already made are closed before the error
        propagates, rather than left open until their sockets are collected."""
        tasks = [asyncio.ensure_future(self.connect(src, dst, option)) for src, dst in pairs]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks)
            for task in tasks:
                if not task.cancelled() and task.exception() is None:
                    task.result().close()
            raise
        return [task.result() for task in tasks]

    async def transfer(self, connection: Connection, iteration: int, size_bytes: int) -> float:
        """Send ``size_bytes``; return when the receiver has read them (its clock)."""
        loop = asyncio.get_running_loop()

        async def send() -> None:
            await loop.sock_sendall(connection.sender, _HEADER.pack(iteration, size_bytes))
            remaining = size_bytes
            while remaining > 0:
                chunk = min(remaining, CHUNK_BYTES)
                await loop.sock_sendall(connection.sender, self._payload[:chunk])
                remaining -= chunk

        async def receive() -> float:
            header = await _recv_exactly(connection.receiver, _HEADER.size)
            got_iteration, got_size = _HEADER.unpack(header)
            if (got_iteration, got_size) != (iteration, size_bytes):
                raise RuntimeError(
                    f"transfer out of step: expected iteration {iteration} of {size_bytes} "
                    f"bytes, got iteration {got_iteration} of {got_size}"
                )
            await _drain(connection.receiver, size_bytes)
            return time.monotonic()

        _, finished_at = await asyncio.gather(send(), receive())
        return finished_at


async def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    loop = asyncio.get_running_loop()
    data = bytearray()
    while len(data) < size:
        chunk = await loop.sock_recv(sock, size - len(data))
        if not chunk:
            raise ConnectionError("connection closed by peer")
        data += chunk
    return bytes(data)


async def _drain(sock: socket.socket, size: int) -> None:
    loop = asyncio.get_running_loop()
    buffer = bytearray(CHUNK_BYTES)
    remaining = size
    while remaining > 0:
        got = await loop.sock_recv_into(sock, memoryview(buffer)[: min(remaining, CHUNK_BYTES)])
        if got == 0:
            raise ConnectionError("connection closed by peer before the coflow finished")
        remaining -= got


class WorkloadRunner:
    """Runs experiments against :class:`HostAgents`, reporting to an :class:`EventSink`."""

    def __init__(self, agents: HostAgents, sink: EventSink) -> None:
        self.agents = agents
        self.sink = sink
        self.record = RunRecord()
        # One thread: events reach the controller in the order they happened.
        self._events = ThreadPoolExecutor(max_workers=1, thread_name_prefix="events")
        self._zero = 0.0

    def now_s(self) -> float:
        return time.monotonic() - self._zero

    def _post(self, call: Callable[[], object]) -> asyncio.Future[object]:
        return asyncio.get_running_loop().run_in_executor(self._events, call)

    async def _report(self, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._events, call)

    async def run(self, experiments: tuple[Experiment, ...]) -> RunRecord:
        self._zero = time.monotonic()
        try:
            await asyncio.gather(*(self._experiment(e) for e in experiments))
        finally:
            self._events.shutdown(wait=False, cancel_futures=True)
        self.record.stages.sort(key=lambda s: (s.experiment_id, s.stage_id))
        return self.record

    async def _experiment(self, experiment: Experiment) -> None:
        delay_s = experiment.arrival_s - self.now_s()
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        await self._report(lambda: self.sink.experiment_released(experiment))
        for stage in experiment.stages:
            await self._stage(experiment.experiment_id, stage)

    async def _stage(self, experiment_id: int, stage: Stage) -> None:
        release_s = self.now_s()
        stage_id = stage.stage_id
        await self._report(lambda: self.sink.stage_released(experiment_id, stage_id))
        posted = [
            self._post(
                functools.partial(self.sink.trial_started, experiment_id, stage_id, trial.trial_id)
            )
            for trial in stage.trials
        ]
        finished = await asyncio.gather(
            *(self._trial(experiment_id, stage_id, t) for t in stage.trials)
        )
        end_s = self.now_s()
        self.record.stages.append(StageRecord(experiment_id, stage_id, release_s, end_s))
        # Surface any refusal of the events posted without waiting.
        await asyncio.gather(*posted, *(future for futures in finished for future in futures))
        await self._report(lambda: self.sink.stage_completed(experiment_id, stage_id))

    async def _trial(
        self, experiment_id: int, stage_id: int, trial: TrialStage
    ) -> list[asyncio.Future[object]]:
        """Run the trial's iterations; returns the events it posted without waiting."""
        posted: list[asyncio.Future[object]] = []
        flows = [flow for flow in trial.sync_flows if flow.src_host != flow.dst_host]
        first = beamer_option(experiment_id, stage_id, local_coflow_id(trial.trial_id, 0))
        connections: list[Connection] = []
        try:
            # Workers connect while the first iteration computes, as training
            # processes do at start-up: handshakes are not part of any coflow.
            connecting = asyncio.ensure_future(
                self.agents.connect_all([(flow.src_host, flow.dst_host) for flow in flows], first)
            )
            try:
                await asyncio.gather(connecting, asyncio.sleep(trial.compute_s))
            finally:
                if connecting.done() and not connecting.cancelled():
                    if connecting.exception() is None:
                        connections.extend(connecting.result())
                else:
                    connecting.cancel()
            for iteration in range(trial.iterations):
                if iteration > 0:
                    await asyncio.sleep(trial.compute_s)
                coflow_id = await self._report(
                    functools.partial(
                        self.sink.coflow_started, experiment_id, stage_id, trial.trial_id, iteration
                    )
                )
                option = beamer_option(experiment_id, stage_id, coflow_id)
                start_s = self.now_s()
                for connection in connections:
                    connection.tag(option)
                ends = await asyncio.gather(
                    *(
                        self.agents.transfer(connection, iteration, flow.size_bytes)
                        for connection, flow in zip(connections, flows, strict=True)
                    )
                )
                end_s = max(ends) - self._zero if ends else self.now_s()
                self.record.coflows.append(
                    CoflowRecord(
                        experiment_id,
                        stage_id,
                        trial.trial_id,
                        iteration,
                        start_s,
                        end_s,
                        sum(flow.size_bytes for flow in flows),
                    )
                )
                # Not awaited: the next event of this trial queues behind it anyway
                # (one events thread, in order), so the trial goes on computing.
                posted.append(
                    self._post(
                        functools.partial(
                            self.sink.coflow_finished,
                            experiment_id,
                            stage_id,
                            trial.trial_id,
                            iteration,
                        )
                    )
                )
        finally:
            for connection in connections:
                connection.close()
        return posted


async def run_workload(
    hosts: Mapping[int, HostAddress],
    experiments: tuple[Experiment, ...],
    sink: EventSink,
    watchdog: Callable[[], None] | None = None,
    watchdog_interval_s: float = 0.25,
) -> RunRecord:
    """Start the agents, run every experiment, stop; ``watchdog`` raising aborts the run."""
    agents = HostAgents(hosts)
    await agents.start()
    runner = WorkloadRunner(agents, sink)
    try:
        work = asyncio.ensure_future(runner.run(experiments))
        if watchdog is None:
            return await work
        return await _with_watchdog(work, watchdog, watchdog_interval_s)
    finally:
        await agents.close()


async def _with_watchdog(
    work: Awaitable[RunRecord], watchdog: Callable[[], None], interval_s: float
) -> RunRecord:
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=interval_s)
            if done:
                return task.result()
            watchdog()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
