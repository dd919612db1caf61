"""The P4Runtime gRPC servicer: arbitration, pipeline config, Write, Read, Capabilities.

One state lock serialises writes, reads and pipeline changes, which gives the strict
serialisability the spec asks of concurrent requests (§12.2, §13.4) at the price of
parallel reads, which a software switch does not need.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import Executor
from typing import NoReturn, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message
from grpc import aio
from p4.v1 import p4runtime_pb2

from softswitch.p4rt import encode
from softswitch.p4rt.arbitration import (
    Arbitrator,
    ClientStream,
    StreamClosed,
    election_id_value,
)
from softswitch.p4rt.pacing import LoopShare
from softswitch.p4rt.pipeline_config import ActivePipeline, PipelineConfigs, PipelineHost
from softswitch.p4rt.places import StreamPlaces
from softswitch.p4rt.reads import ReplyBudget, ReplyTooLarge, read_entity
from softswitch.p4rt.rpc import (
    REQUEST_TIMEOUT_S,
    Aborted,
    RpcContext,
    end_with,
    one_request,
    run_blocking,
    send,
)
from softswitch.p4rt.status import (
    MESSAGE_LIMIT,
    P4RuntimeError,
    abort_with_batch_status,
    batch_aborted,
    internal,
    invalid,
    not_found,
    permission_denied,
    shorten,
    unimplemented,
)
from softswitch.p4rt.wire import (
    TooManyUpdates,
    WriteBatch,
    decode_write_request,
    first_field_number,
    parse_message,
    request_header,
)
from softswitch.p4rt.writes import DecodedUpdate, Undo, apply_decoded_update, decode_updates

log = logging.getLogger(__name__)

# The P4Runtime release whose protobufs this server is built on.
P4RUNTIME_API_VERSION = "1.4.1"

# Entities per ReadResponse message: keeps each reply well below gRPC's 4 MiB default.
READ_CHUNK_ENTITIES = 1000

# StreamChannels open at once, every role together. SPARE_STREAMS more may open and
# must make room at their first arbitration by displacing a backup with a lower election
# id (see ``places``); past those a new stream is refused.
MAX_STREAMS = 16
SPARE_STREAMS = 4
# Of those places, streams of named roles hold at most MAX_STREAMS - DEFAULT_ROLE_PLACES:
# a named role's client is its primary whatever its election id, and a primary is never
# displaced, so without this, sixteen of them would lock the controller out.
DEFAULT_ROLE_PLACES = 4

# A stream must arbitrate this soon after it opens, or it is ended: a connection that
# only holds a stream open must not keep a slot from a controller.
ARBITRATION_TIMEOUT_S = 10.0

# A Read holds the switch's state this long at most before it lets writes and packets in.
READ_LOCK_SLICE_S = 0.005

# The time a client has to take a Read's whole reply; a client that does not read it
# must not hold a read slot for ever.
READ_REPLY_TIMEOUT_S = 60.0

# Reads served at once. A client that takes its reply slowly holds the reply's bytes
# until it has it all; past this a Read is refused.
MAX_READS = 4
# One more for a Read on the connection of the default role's primary (the controller):
# any client may start Reads and leave their replies untaken, and without it four such
# clients kept the controller from reading (it could not provision its switch).
PRIMARY_READS = 1

# A refused packet-out is echoed back with at most this much of its payload, and at most
# this many of its metadata (a P4Info names a handful for packet-out).
ECHO_PAYLOAD_BYTES = 4096
ECHO_METADATA = 16

# The largest StreamChannel message read; a longer one is refused unparsed (see
# ``_refuse_oversized``). A packet-out needs at most a jumbo frame (9,216 bytes) and a
# few metadata, an arbitration a role name of at most 1 KiB. Messages are parsed on the
# event loop, every RPC's, and pure-Python protobuf takes ~10 ms for 16 KiB of tiny
# fields: a 6 MB message of a million empty metadata used to hold every RPC for 22 s.
MAX_STREAM_MESSAGE_BYTES = 16 * 1024

# The largest CapabilitiesRequest or GetForwardingPipelineConfigRequest read; a longer
# one is refused unparsed. Both hold a device id and an enum at most (a few bytes), and
# pure-Python protobuf parses ~1.6 s a MB on a worker thread: eight 16 MB requests of
# unknown fields used to hold every worker, and the primary's writes, for minutes.
MAX_SMALL_REQUEST_BYTES = 64 * 1024

# The largest ReadRequest read. Far above a read of 100,000 entries by key (~3 MB), and
# gRPC's own default for a message; a ReadRequest is parsed holding a read slot.
MAX_READ_REQUEST_BYTES = 4 * 1024 * 1024

# Updates one WriteRequest may hold; more is refused before any is decoded. Above the
# 100,000-entry batches clients send (the controller sends 1,000), and a bound on what
# one request costs: a batch takes up to ~1.5 KB per update while it is applied (a good
# table entry as much as a bad update that protobuf parses), so ~200 MB at most. A
# 256 MiB request of 2-byte updates holds 134 million.
MAX_WRITE_UPDATES = 1 << 17

# Distinct errors one failed batch keeps a single object of (see ``_kept_error``).
MAX_KEPT_ERRORS = 1024

# SetForwardingPipelineConfig verifications at once (compiling a device config takes a
# worker thread for up to seconds); one more is refused, so that the other workers stay
# free for writes and reads.
MAX_VERIFICATIONS = 2

_Request = TypeVar("_Request", bound=Message)
_Reply = TypeVar("_Reply")


class Slots:
    """At most ``limit`` RPCs of one kind at once, and ``reserved`` more for privileged
    callers once those are taken; one more is refused, not queued."""

    def __init__(self, limit: int, what: str, advice: str, reserved: int = 0) -> None:
        self._free = threading.BoundedSemaphore(limit)
        self._reserved = threading.BoundedSemaphore(reserved) if reserved else None
        self._refusal = f"too many {what} (limit {limit}); {advice}"

    async def take(
        self, context: aio.ServicerContext, privileged: bool = False
    ) -> Callable[[], None]:
        """A slot until the RPC is over, RESOURCE_EXHAUSTED if none is free. Over means
        the client has taken every reply or the call was cut off: gRPC buffers replies
        the client has not read, and a slot held only while they are written would let
        any number of unread replies pile up in memory. Returns what gives the slot back
        sooner (once, whichever comes first)."""
        semaphore = self._free
        if not semaphore.acquire(blocking=False):
            reserved = self._reserved if privileged else None
            if reserved is None or not reserved.acquire(blocking=False):
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, self._refusal)
            assert reserved is not None
            semaphore = reserved
        held = [True]
        lock = threading.Lock()

        def release() -> None:
            with lock:
                if not held[0]:
                    return
                held[0] = False
            semaphore.release()

        context.add_done_callback(lambda _: release())
        return release


class Permits:
    """At most ``limit`` holders at once, for work inside one worker thread; one more
    is refused with RESOURCE_EXHAUSTED, not queued."""

    def __init__(self, limit: int, what: str) -> None:
        self._free = threading.BoundedSemaphore(limit)
        self._refusal = f"too many {what} at once (limit {limit}); try again"

    @contextlib.contextmanager
    def taken(self) -> Iterator[None]:
        if not self._free.acquire(blocking=False):
            raise P4RuntimeError(grpc.StatusCode.RESOURCE_EXHAUSTED, self._refusal)
        try:
            yield
        finally:
            self._free.release()


WriteRequest = p4runtime_pb2.WriteRequest
SetAction = p4runtime_pb2.SetForwardingPipelineConfigRequest

# CONTINUE_ON_ERROR is required by the spec; ROLLBACK_ON_ERROR undoes a failed batch.
# DATAPLANE_ATOMIC is not offered: packets are processed while a batch is applied.
ATOMICITY_SUPPORTED = (WriteRequest.CONTINUE_ON_ERROR, WriteRequest.ROLLBACK_ON_ERROR)


class P4RuntimeServicer:
    """Serves one device (``device_id``) backed by ``switch``."""

    def __init__(
        self,
        switch: PipelineHost,
        device_id: int,
        arbitration_timeout_s: float = ARBITRATION_TIMEOUT_S,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        """Serve ``device_id``; register with :func:`add_to_server` (requests come as raw
        bytes, parsed here, so that bad ones get INVALID_ARGUMENT)."""
        self.device_id = device_id
        self.arbitrator = Arbitrator(device_id)
        self.configs = PipelineConfigs(switch, self.arbitrator.is_term)
        self.state_lock = threading.Lock()
        self.arbitration_timeout_s = arbitration_timeout_s
        self.request_timeout_s = request_timeout_s
        self._stream_places = StreamPlaces(MAX_STREAMS, SPARE_STREAMS, DEFAULT_ROLE_PLACES)
        self._read_slots = Slots(MAX_READS, "Reads in progress", "try again", PRIMARY_READS)
        self._verifications = Permits(MAX_VERIFICATIONS, "pipeline configs being verified")

    # ------------------------------------------------------------------ Write

    def Write(
        self, request: bytes | p4runtime_pb2.WriteRequest, context: RpcContext
    ) -> p4runtime_pb2.WriteResponse:
        """Apply a batch; the server hands the raw bytes here (see ``wire``)."""
        if isinstance(request, bytes):
            self.refuse_unless_primary(request, context, MAX_WRITE_UPDATES)
        data = request if isinstance(request, bytes) else request.SerializeToString()
        batch, updates = _decode_batch(data, context)
        errors: list[P4RuntimeError | None] = []
        failed = False
        try:
            self.arbitrator.check_primary(
                batch.device_id, batch.role, batch.election_id, context.peer()
            )
            if batch.atomicity not in ATOMICITY_SUPPORTED:
                names = dict(WriteRequest.Atomicity.items())
                name = next((k for k, v in names.items() if v == batch.atomicity), batch.atomicity)
                raise unimplemented(f"atomicity {name} is not supported by this target")
            rollback = batch.atomicity == WriteRequest.ROLLBACK_ON_ERROR
            kept: dict[tuple[grpc.StatusCode, str], P4RuntimeError] = {}
            with self.state_lock:
                active = self.configs.active()
                undos: list[Undo] = []
                with active.runtime.lock:
                    for update in updates:
                        try:
                            undos.append(apply_decoded_update(active, update))
                            errors.append(None)
                        except P4RuntimeError as error:
                            errors.append(_kept_error(error, kept))
                            failed = True
                        except Exception as error:  # a bug must not cost the batch
                            log.exception("internal error applying an update")
                            errors.append(internal(error))
                            failed = True
                        if failed and rollback:
                            errors = _roll_back(undos, errors, len(updates))
                            break
        except P4RuntimeError as error:
            context.abort(error.code, error.message)
        if failed:
            count = sum(error is not None for error in errors)
            abort_with_batch_status(context, f"{count} of {len(errors)} updates failed", errors)
        return p4runtime_pb2.WriteResponse()

    def refuse_unless_primary(
        self, data: bytes, context: RpcContext, max_updates: int | None = None
    ) -> None:
        """End the RPC unless the request's header names the primary, before the rest of
        it is parsed: a large request from a client that may not write must not hold a
        worker for a full parse (pure-Python protobuf: seconds per megabyte). Bytes whose
        header cannot be read are no valid request: INVALID_ARGUMENT, also before the
        parse. A WriteRequest of more than ``max_updates`` updates is refused first,
        whoever sends it. The parsed request is checked again."""
        try:
            header = request_header(data, max_updates)
        except DecodeError as error:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                shorten(f"the request cannot be parsed: {error}", MESSAGE_LIMIT),
            )
        except TooManyUpdates as error:
            _refuse_too_many(error, context)
        try:
            self.arbitrator.check_primary(
                header.device_id, header.role, header.election_id, context.peer()
            )
        except P4RuntimeError as error:
            context.abort(error.code, error.message)

    # ------------------------------------------------------------------ Read

    async def Read(self, context: aio.ServicerContext, executor: Executor) -> None:
        """Send the selected entities as wire bytes (see ``encode``), then any batch error.

        The entities are gathered on a worker thread under the state lock; the replies go
        out from the event loop, at the pace the client takes them."""
        data = await one_request(context, self.request_timeout_s)
        if len(data) > MAX_READ_REQUEST_BYTES:
            await context.abort(
                *_oversized(p4runtime_pb2.ReadRequest, data, MAX_READ_REQUEST_BYTES)
            )
        release_slot = await self._read_slots.take(
            context, privileged=self.arbitrator.is_primary_connection(context.peer())
        )

        def gather(blocking: RpcContext) -> tuple[list[bytes], Aborted | None]:
            request = parse_or_abort(p4runtime_pb2.ReadRequest, data, blocking)
            return self.read_replies(request, blocking)

        replies, failure = await run_blocking(executor, context, gather)
        stalled = False

        def give_up() -> None:
            # The client has not taken the reply in time: the slot goes to another Read,
            # and the replies not yet sent are dropped (gRPC holds at most the one being
            # written and what the connection's window took).
            nonlocal stalled
            stalled = True
            replies.clear()
            release_slot()

        timer = asyncio.get_running_loop().call_later(READ_REPLY_TIMEOUT_S, give_up)
        try:
            sent = 0
            while sent < len(replies):
                if not await send(context, replies[sent]):
                    return
                sent += 1
        finally:
            timer.cancel()
        if stalled:
            await context.abort(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"the reply was not taken within {READ_REPLY_TIMEOUT_S:g} s: it is incomplete",
            )
        if failure is not None:
            await end_with(context, failure)

    def read_replies(
        self, request: p4runtime_pb2.ReadRequest, context: RpcContext
    ) -> tuple[list[bytes], Aborted | None]:
        """The ReadResponse messages (wire bytes) for ``request``, and the batch status to
        end with when some of its entities failed."""
        results: list[bytes] = []
        errors: list[P4RuntimeError | None] = []
        kept: dict[tuple[grpc.StatusCode, str], P4RuntimeError] = {}
        budget = ReplyBudget()
        entities = request.entities
        try:
            if request.device_id != self.device_id:
                raise not_found(f"unknown device id {request.device_id}")
            first: ActivePipeline | None = None
            number = 0
            while number < len(entities):
                # The switch's state is held a slice at a time, so that a long Read does
                # not hold up the primary's writes (or packets) until it is done.
                with self.state_lock:
                    active = self.configs.active()
                    if first is None:
                        first = active
                    elif active.runtime is not first.runtime:
                        raise P4RuntimeError(
                            grpc.StatusCode.ABORTED,
                            "the forwarding pipeline changed during this Read: read again",
                        )
                    with active.runtime.lock:
                        slice_end_s = time.monotonic() + READ_LOCK_SLICE_S
                        while number < len(entities):
                            error = self._read_one(active, entities, number, budget, results)
                            errors.append(None if error is None else _kept_error(error, kept))
                            number += 1
                            if time.monotonic() >= slice_end_s:
                                break
                time.sleep(0)  # a write waiting for the locks takes them now
        except P4RuntimeError as error:
            context.abort(error.code, error.message)
        replies = [
            encode.read_response(results[start : start + READ_CHUNK_ENTITIES])
            for start in range(0, len(results), READ_CHUNK_ENTITIES)
        ]
        failure = None
        if any(error is not None for error in errors):
            count = sum(error is not None for error in errors)
            failure = batch_aborted(f"{count} of {len(errors)} read requests failed", errors)
        return replies, failure

    @staticmethod
    def _read_one(
        active: ActivePipeline,
        entities: Sequence[p4runtime_pb2.Entity],
        number: int,
        budget: ReplyBudget,
        results: list[bytes],
    ) -> P4RuntimeError | None:
        """Add what entity ``number`` selects to ``results``; its error, if any. A reply
        past the budget fails the whole Read."""
        try:
            results.extend(read_entity(active, entities[number], budget))
        except ReplyTooLarge as error:
            raise P4RuntimeError(
                error.code,
                f"{error.message} at entity {number} of "
                f"{len(entities)}: read fewer entities per request",
            ) from None
        except P4RuntimeError as error:
            return error
        except Exception as error:  # spec §13.3: INTERNAL for that request
            log.exception("internal error reading an entity")
            return internal(error)
        return None

    # ------------------------------------------------------------------ pipeline config

    def SetForwardingPipelineConfig(
        self,
        request: p4runtime_pb2.SetForwardingPipelineConfigRequest,
        context: RpcContext,
    ) -> p4runtime_pb2.SetForwardingPipelineConfigResponse:
        """Verify the config without the state lock (compiling takes seconds, and writes,
        reads and packets go on meanwhile), then take the lock only to apply it. The
        verification reads nothing of the switch's state; what depends on that state
        (the saved config, the state a reconcile keeps) is checked under the lock, and
        so is the primary: one replaced while its config was verified commits nothing."""
        election_id = (
            election_id_value(request.election_id) if request.HasField("election_id") else None
        )
        try:
            term = self.arbitrator.check_primary(
                request.device_id, request.role, election_id, context.peer()
            )
            if request.action == SetAction.COMMIT:
                verified = self.configs.prepare(request)
            else:
                with self._verifications.taken():
                    verified = self.configs.prepare(request)
            with self.state_lock:
                if not self.arbitrator.is_term(request.role, term):
                    raise permission_denied(
                        "the primary changed while the config was verified: nothing was applied"
                    )
                self.configs.apply(request, verified, (request.role, term))
        except P4RuntimeError as error:
            context.abort(error.code, error.message)
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(
        self,
        request: p4runtime_pb2.GetForwardingPipelineConfigRequest,
        context: RpcContext,
    ) -> p4runtime_pb2.GetForwardingPipelineConfigResponse:
        try:
            if request.device_id != self.device_id:
                raise not_found(f"unknown device id {request.device_id}")
            with self.state_lock:
                config = self.configs.get(request.response_type)
        except P4RuntimeError as error:
            context.abort(error.code, error.message)
        reply = p4runtime_pb2.GetForwardingPipelineConfigResponse()
        if config is not None:
            reply.config.CopyFrom(config)
        return reply

    # ------------------------------------------------------------------ Capabilities

    def Capabilities(
        self, request: p4runtime_pb2.CapabilitiesRequest, context: RpcContext
    ) -> p4runtime_pb2.CapabilitiesResponse:
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=P4RUNTIME_API_VERSION)

    # ------------------------------------------------------------------ StreamChannel

    async def StreamChannel(
        self, requests: AsyncIterator[bytes], context: aio.ServicerContext
    ) -> None:
        """Send what the stream's outbox holds while a task handles what the client sends.

        Arbitration changes on other streams must reach this client while it is silent,
        hence the outbox rather than answering request by request. Neither side holds a
        thread: a silent or slow client costs only its slot."""
        stream = ClientStream(peer=context.peer())
        if not self._stream_places.enter(stream):
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"too many open streams (limit {MAX_STREAMS}, and {SPARE_STREAMS} more "
                "waiting to arbitrate); close one and try again",
            )
        stream.on_cut_off = self._leave_arbitration_soon()
        reader = asyncio.create_task(self._read_stream(stream, requests))
        try:
            await self._send_stream(stream, context)
        finally:
            reader.cancel()
            self.arbitrator.remove(stream)
            stream.end()
            self._stream_places.leave(stream)

    def _leave_arbitration_soon(self) -> Callable[[ClientStream], None]:
        """For a client cut off for not reading: its stream stops counting in arbitration
        at once, not when its call ends. That end waits behind the reply its client does
        not take, and meanwhile a primary would keep writing and no other client could
        take over."""
        loop = asyncio.get_running_loop()

        def leave(stream: ClientStream) -> None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: the stream is gone
                # Deferred: the cut-off may come from a thread holding the arbitrator's lock.
                loop.call_soon_threadsafe(self.arbitrator.remove, stream)

        return leave

    async def _send_stream(self, stream: ClientStream, context: aio.ServicerContext) -> None:
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(ready.set)

        stream.on_send = wake
        arbitrate_by_s = loop.time() + self.arbitration_timeout_s
        while True:
            ready.clear()
            item = stream.poll()
            if item is None:
                wait_s = None if stream.role is not None else arbitrate_by_s - loop.time()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ready.wait(), wait_s)
                if stream.role is None and loop.time() >= arbitrate_by_s and not ready.is_set():
                    await context.abort(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        "no MasterArbitrationUpdate within "
                        f"{self.arbitration_timeout_s:g} s of opening the stream: "
                        "a client arbitrates first",
                    )
                continue
            if isinstance(item, StreamClosed):
                if item.error is not None:
                    await context.abort(item.error.code, item.error.message)
                return
            if not await send(context, item):
                return

    async def _read_stream(self, stream: ClientStream, requests: AsyncIterator[bytes]) -> None:
        ending = StreamClosed()
        share = LoopShare()
        try:
            async for data in requests:
                started = time.perf_counter()
                if len(data) > MAX_STREAM_MESSAGE_BYTES:
                    refusal = _refuse_oversized(stream, data)
                    if refusal is not None:
                        ending = StreamClosed(refusal)
                        return
                    continue
                try:
                    request = parse_message(p4runtime_pb2.StreamMessageRequest, data)
                except DecodeError as error:
                    ending = StreamClosed(
                        invalid(f"a StreamMessageRequest cannot be parsed: {error}")
                    )
                    return
                refusal = self._handle_stream_request(stream, request)
                if refusal is not None:
                    ending = StreamClosed(refusal)
                    return
                pause_s = share.pause_after(time.perf_counter() - started)
                if pause_s > 0.0:
                    await asyncio.sleep(pause_s)  # see ``pacing``
        except (grpc.RpcError, aio.AioRpcError, aio.UsageError):
            pass  # the client went away; StreamChannel cleans up
        finally:
            self.arbitrator.remove(stream)
            stream.send(ending)

    def _handle_stream_request(
        self, stream: ClientStream, request: p4runtime_pb2.StreamMessageRequest
    ) -> P4RuntimeError | None:
        """Handle one message; an arbitration error is returned to end the stream."""
        kind = request.WhichOneof("update")
        if kind == "arbitration":
            if stream.role is None:
                update = request.arbitration
                election_id = (
                    election_id_value(update.election_id)
                    if update.HasField("election_id")
                    else None
                )
                refusal = self._stream_places.make_room(
                    stream, election_id, self.arbitrator, update.role.name
                )
                if refusal is not None:
                    return refusal
            try:
                self.arbitrator.arbitrate(stream, request.arbitration)
            except P4RuntimeError as error:
                return error
            return None
        reply = p4runtime_pb2.StreamMessageResponse()
        error_message = reply.error
        if kind == "packet":
            if not self.arbitrator.is_primary(stream):
                error_message.canonical_code = grpc.StatusCode.PERMISSION_DENIED.value[0]
                error_message.message = "only the primary client may send packets"
            else:
                error_message.canonical_code = grpc.StatusCode.UNIMPLEMENTED.value[0]
                error_message.message = "packet-out is not supported by this target"
            error_message.message += _echo_packet(request.packet, error_message.packet_out)
        elif kind == "digest_ack":
            error_message.digest_list_ack.digest_list_ack.CopyFrom(request.digest_ack)
            error_message.canonical_code = grpc.StatusCode.UNIMPLEMENTED.value[0]
            error_message.message = "digests are not supported by this target"
        else:
            error_message.other.other.CopyFrom(request.other)
            error_message.canonical_code = grpc.StatusCode.UNIMPLEMENTED.value[0]
            error_message.message = f"stream message '{kind}' is not supported"
        stream.send(reply)
        return None


# StreamMessageRequest's oneof ``update`` by field number, and where its StreamError's
# ``details`` oneof names it.
_STREAM_KINDS = {2: "packet_out", 3: "digest_list_ack", 4: "other"}


def _refuse_oversized(stream: ClientStream, data: bytes) -> P4RuntimeError | None:
    """Refuse a stream message over MAX_STREAM_MESSAGE_BYTES without parsing it. What
    its first field says it is gets a StreamError, RESOURCE_EXHAUSTED, with that kind
    set in the details and nothing echoed (the spec's "Stream Error Reporting"). An
    arbitration, or bytes whose first field cannot be read, must end the stream, as
    arbitration errors do: the error to end it with is returned."""
    message = (
        f"a stream message of {len(data)} bytes is over the limit of "
        f"{MAX_STREAM_MESSAGE_BYTES} bytes: it was dropped unread"
    )
    kind = _STREAM_KINDS.get(first_field_number(data) or 0)
    if kind is None:
        return P4RuntimeError(grpc.StatusCode.RESOURCE_EXHAUSTED, message)
    reply = p4runtime_pb2.StreamMessageResponse()
    reply.error.canonical_code = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    reply.error.message = message
    getattr(reply.error, kind).SetInParent()
    stream.send(reply)
    return None


def _echo_packet(packet: p4runtime_pb2.PacketOut, error: p4runtime_pb2.PacketOutError) -> str:
    """Echo ``packet`` into ``error``, cut to ECHO_PAYLOAD_BYTES of payload and
    ECHO_METADATA metadata: the echo only identifies the packet, and a large one echoed
    whole could overflow the client's outbox and cost it its stream. What to add to the
    error message when something was cut."""
    echo = error.packet_out
    echo.payload = packet.payload[:ECHO_PAYLOAD_BYTES]
    echo.metadata.extend(packet.metadata[:ECHO_METADATA])
    notes = []
    if len(packet.payload) > ECHO_PAYLOAD_BYTES:
        notes.append(f"its first {ECHO_PAYLOAD_BYTES} of {len(packet.payload)} payload bytes")
    if len(packet.metadata) > ECHO_METADATA:
        notes.append(f"its first {ECHO_METADATA} of {len(packet.metadata)} metadata")
    return f" (the echo holds {' and '.join(notes)})" if notes else ""


def _roll_back(
    undos: list[Undo], errors: list[P4RuntimeError | None], total: int
) -> list[P4RuntimeError | None]:
    """Undo a batch's applied updates, newest first; every other update is ABORTED."""
    for undo in reversed(undos):
        try:
            undo()
        except Exception:
            log.exception("rolling back an update failed")
    failed_at = len(errors) - 1
    aborted = P4RuntimeError(
        grpc.StatusCode.ABORTED, f"rolled back: update {failed_at} of the batch failed"
    )
    outcome: list[P4RuntimeError | None] = [aborted] * total
    outcome[failed_at] = errors[failed_at]
    return outcome


def _decode_batch(data: bytes, context: RpcContext) -> tuple[WriteBatch, list[DecodedUpdate]]:
    """The batch's header and its decoded updates. Every update is decoded before any is
    applied: one that is no valid Update makes the request no valid WriteRequest
    (INVALID_ARGUMENT), and nothing of it is applied. More than MAX_WRITE_UPDATES is
    RESOURCE_EXHAUSTED (checked in the header scan for raw bytes, here for the rest)."""
    try:
        batch = decode_write_request(data)
        if len(batch.updates) > MAX_WRITE_UPDATES:
            raise TooManyUpdates(MAX_WRITE_UPDATES)
        updates = decode_updates(batch.updates)
    except DecodeError as error:
        context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            shorten(f"the WriteRequest cannot be parsed: {error}", MESSAGE_LIMIT),
        )
    except TooManyUpdates as error:
        _refuse_too_many(error, context)
    batch.updates = []  # the decoded updates replace the raw ones
    return batch, updates


def _refuse_too_many(error: TooManyUpdates, context: RpcContext) -> NoReturn:
    context.abort(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"the WriteRequest holds more than {error.limit} updates, the most one request may "
        "hold: split the batch",
    )


def _kept_error(
    error: P4RuntimeError, kept: dict[tuple[grpc.StatusCode, str], P4RuntimeError]
) -> P4RuntimeError:
    """``error`` as a failed batch keeps it until it reports: without the frames its
    traceback holds, and one object for every update that failed alike (up to
    MAX_KEPT_ERRORS kinds), so that a batch of failing updates costs a reference each."""
    key = (error.code, error.message)
    same = kept.get(key)
    if same is not None:
        return same
    error.__traceback__ = None
    error.__context__ = None
    if len(kept) < MAX_KEPT_ERRORS:
        kept[key] = error
    return error


def parse_or_abort(message_type: type[_Request], data: bytes, context: RpcContext) -> _Request:
    """``data`` as a ``message_type``; bytes that are none get INVALID_ARGUMENT (gRPC's own
    parsing would answer INTERNAL and log a traceback)."""
    try:
        return parse_message(message_type, data)
    except DecodeError as error:
        context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            shorten(f"the {message_type.DESCRIPTOR.name} cannot be parsed: {error}", MESSAGE_LIMIT),
        )


def _unary(
    servicer: P4RuntimeServicer,
    executor: Executor,
    method: Callable[[bytes, RpcContext], _Reply],
    reply_type: type[Message],
) -> grpc.RpcMethodHandler:
    """``method`` served from its request's raw bytes, read under the request deadline."""

    async def serve(requests: AsyncIterator[bytes], context: aio.ServicerContext) -> _Reply:
        data = await one_request(context, servicer.request_timeout_s)
        return await run_blocking(executor, context, lambda blocking: method(data, blocking))

    return grpc.stream_unary_rpc_method_handler(
        serve, request_deserializer=None, response_serializer=reply_type.SerializeToString
    )


def _oversized(message_type: type[Message], data: bytes, limit: int) -> tuple[grpc.StatusCode, str]:
    return (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"a {message_type.DESCRIPTOR.name} of {len(data):,} bytes: at most {limit:,} are read",
    )


def _parsed(
    message_type: type[_Request],
    method: Callable[[_Request, RpcContext], _Reply],
    check: Callable[[bytes, RpcContext], None] | None = None,
    max_bytes: int | None = None,
) -> Callable[[bytes, RpcContext], _Reply]:
    """``method`` taking a request's raw bytes (see :func:`parse_or_abort`), after
    ``check`` of those bytes (which ends the RPC to refuse it); past ``max_bytes`` the
    request is refused unparsed."""

    def handler(data: bytes, context: RpcContext) -> _Reply:
        if max_bytes is not None and len(data) > max_bytes:
            context.abort(*_oversized(message_type, data, max_bytes))
        if check is not None:
            check(data, context)
        return method(parse_or_abort(message_type, data, context), context)

    return handler


def add_to_server(servicer: P4RuntimeServicer, server: aio.Server, executor: Executor) -> None:
    """Register the P4Runtime service on an asyncio server; blocking work runs on
    ``executor``. Requests arrive as raw bytes (Write splits its own, the rest are
    parsed by :func:`parse_or_abort`); Read sends raw wire bytes."""
    pb = p4runtime_pb2

    async def read(requests: AsyncIterator[bytes], context: aio.ServicerContext) -> None:
        await servicer.Read(context, executor)

    handlers = {
        "Write": _unary(servicer, executor, servicer.Write, pb.WriteResponse),
        "Read": grpc.stream_stream_rpc_method_handler(
            read, request_deserializer=None, response_serializer=None
        ),
        "SetForwardingPipelineConfig": _unary(
            servicer,
            executor,
            _parsed(
                pb.SetForwardingPipelineConfigRequest,
                servicer.SetForwardingPipelineConfig,
                servicer.refuse_unless_primary,
            ),
            pb.SetForwardingPipelineConfigResponse,
        ),
        "GetForwardingPipelineConfig": _unary(
            servicer,
            executor,
            _parsed(
                pb.GetForwardingPipelineConfigRequest,
                servicer.GetForwardingPipelineConfig,
                max_bytes=MAX_SMALL_REQUEST_BYTES,
            ),
            pb.GetForwardingPipelineConfigResponse,
        ),
        "StreamChannel": grpc.stream_stream_rpc_method_handler(
            servicer.StreamChannel,
            request_deserializer=None,
            response_serializer=pb.StreamMessageResponse.SerializeToString,
        ),
        "Capabilities": _unary(
            servicer,
            executor,
            _parsed(
                pb.CapabilitiesRequest, servicer.Capabilities, max_bytes=MAX_SMALL_REQUEST_BYTES
            ),
            pb.CapabilitiesResponse,
        ),
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("p4.v1.P4Runtime", handlers),)
    )
