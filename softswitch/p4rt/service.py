"""The P4Runtime gRPC servicer: arbitration, pipeline config, Write, Read, Capabilities.

One state lock serialises writes, reads and pipeline changes, which gives the strict
serialisability the spec asks of concurrent requests (§12.2, §13.4) at the price of
parallel reads, which a software switch does not need.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import grpc
from google.protobuf.message import DecodeError, Message
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from softswitch.p4rt import encode
from softswitch.p4rt.arbitration import (
    Arbitrator,
    ClientStream,
    StreamClosed,
    election_id_value,
)
from softswitch.p4rt.pipeline_config import PipelineConfigs, PipelineHost
from softswitch.p4rt.reads import ReplyBudget, ReplyTooLarge, read_entity
from softswitch.p4rt.status import (
    MESSAGE_LIMIT,
    P4RuntimeError,
    abort_with_batch_status,
    batch_status,
    internal,
    invalid,
    not_found,
    shorten,
    unimplemented,
)
from softswitch.p4rt.wire import decode_write_request, parse_message
from softswitch.p4rt.writes import Undo, apply_raw_update

log = logging.getLogger(__name__)

# The P4Runtime release whose protobufs this server is built on.
P4RUNTIME_API_VERSION = "1.4.1"

# Entities per ReadResponse message: keeps each reply well below gRPC's 4 MiB default.
READ_CHUNK_ENTITIES = 1000

# StreamChannels open at once, every role together. Each holds a server thread for its
# life: past this a new stream is refused at once, instead of waiting for a thread that
# the other RPCs need too.
MAX_STREAMS = 16

# A stream must arbitrate this soon after it opens, or it is ended: a connection that
# only holds a stream open must not keep a slot from a controller.
ARBITRATION_TIMEOUT_S = 10.0

# Reads served at once. A client that takes its reply slowly holds a thread until it has
# it all; past this a Read is refused, so that Writes always find a thread.
MAX_READS = 4

_Request = TypeVar("_Request", bound=Message)
_Reply = TypeVar("_Reply")


class Slots:
    """At most ``limit`` RPCs of one kind at once; one more is refused, not queued."""

    def __init__(self, limit: int, what: str, advice: str) -> None:
        self._free = threading.BoundedSemaphore(limit)
        self._refusal = f"too many {what} (limit {limit}); {advice}"

    def serve(self, context: grpc.ServicerContext, replies: Iterator[_Reply]) -> Iterator[_Reply]:
        """``replies``, holding a slot until they end; RESOURCE_EXHAUSTED if none is free."""
        if not self._free.acquire(blocking=False):
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, self._refusal)
        try:
            yield from replies
        finally:
            self._free.release()


WriteRequest = p4runtime_pb2.WriteRequest

# CONTINUE_ON_ERROR is required by the spec; ROLLBACK_ON_ERROR undoes a failed batch.
# DATAPLANE_ATOMIC is not offered: packets are processed while a batch is applied.
ATOMICITY_SUPPORTED = (WriteRequest.CONTINUE_ON_ERROR, WriteRequest.ROLLBACK_ON_ERROR)


class P4RuntimeServicer(p4runtime_pb2_grpc.P4RuntimeServicer):
    """Serves one device (``device_id``) backed by ``switch``."""

    def __init__(
        self,
        switch: PipelineHost,
        device_id: int,
        arbitration_timeout_s: float = ARBITRATION_TIMEOUT_S,
    ) -> None:
        """Serve ``device_id``; register with :func:`add_to_server` (requests come as raw
        bytes, parsed here, so that bad ones get INVALID_ARGUMENT)."""
        self.device_id = device_id
        self.arbitrator = Arbitrator(device_id)
        self.configs = PipelineConfigs(switch)
        self.state_lock = threading.Lock()
        self.arbitration_timeout_s = arbitration_timeout_s
        self._stream_slots = Slots(MAX_STREAMS, "open streams", "close one and try again")
        self._read_slots = Slots(MAX_READS, "Reads in progress", "try again")

    # ------------------------------------------------------------------ Write

    def Write(
        self, request: bytes | p4runtime_pb2.WriteRequest, context: grpc.ServicerContext
    ) -> p4runtime_pb2.WriteResponse:
        """Apply a batch; the server hands the raw bytes here (see ``wire``)."""
        try:
            batch = (
                decode_write_request(request)
                if isinstance(request, bytes)
                else decode_write_request(request.SerializeToString())
            )
        except DecodeError as error:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                shorten(f"the WriteRequest cannot be parsed: {error}", MESSAGE_LIMIT),
            )
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
            with self.state_lock:
                active = self.configs.active()
                undos: list[Undo] = []
                with active.runtime.lock:
                    for update in batch.updates:
                        try:
                            undos.append(apply_raw_update(active, update))
                            errors.append(None)
                        except P4RuntimeError as error:
                            errors.append(error)
                            failed = True
                        except Exception as error:  # a bug must not cost the batch
                            log.exception("internal error applying an update")
                            errors.append(internal(error))
                            failed = True
                        if failed and rollback:
                            errors = _roll_back(undos, errors, len(batch.updates))
                            break
        except P4RuntimeError as error:
            context.abort(error.code, error.message)
        if failed:
            count = sum(error is not None for error in errors)
            abort_with_batch_status(
                context, batch_status(f"{count} of {len(errors)} updates failed", errors)
            )
        return p4runtime_pb2.WriteResponse()

    # ------------------------------------------------------------------ Read

    def Read(
        self, request: p4runtime_pb2.ReadRequest, context: grpc.ServicerContext
    ) -> Iterator[bytes]:
        """Stream the selected entities; replies go out as wire bytes (see ``encode``)."""
        yield from self._read_slots.serve(context, self._read(request, context))

    def _read(
        self, request: p4runtime_pb2.ReadRequest, context: grpc.ServicerContext
    ) -> Iterator[bytes]:
        results: list[bytes] = []
        errors: list[P4RuntimeError | None] = []
        budget = ReplyBudget()
        try:
            if request.device_id != self.device_id:
                raise not_found(f"unknown device id {request.device_id}")
            with self.state_lock:
                active = self.configs.active()
                with active.runtime.lock:
                    for number, entity in enumerate(request.entities):
                        try:
                            results.extend(read_entity(active, entity, budget))
                            errors.append(None)
                        except ReplyTooLarge as error:
                            raise P4RuntimeError(
                                error.code,
                                f"{error.message} at entity {number} of "
                                f"{len(request.entities)}: read fewer entities per request",
                            ) from None
                        except P4RuntimeError as error:
                            errors.append(error)
                        except Exception as error:  # spec §13.3: INTERNAL for that request
                            log.exception("internal error reading an entity")
                            errors.append(internal(error))
        except P4RuntimeError as error:
            context.abort(error.code, error.message)
        for start in range(0, len(results), READ_CHUNK_ENTITIES):
            yield encode.read_response(results[start : start + READ_CHUNK_ENTITIES])
        if any(error is not None for error in errors):
            count = sum(error is not None for error in errors)
            abort_with_batch_status(
                context, batch_status(f"{count} of {len(errors)} read requests failed", errors)
            )

    # ------------------------------------------------------------------ pipeline config

    def SetForwardingPipelineConfig(
        self,
        request: p4runtime_pb2.SetForwardingPipelineConfigRequest,
        context: grpc.ServicerContext,
    ) -> p4runtime_pb2.SetForwardingPipelineConfigResponse:
        election_id = (
            election_id_value(request.election_id) if request.HasField("election_id") else None
        )
        try:
            self.arbitrator.check_primary(
                request.device_id, request.role, election_id, context.peer()
            )
            with self.state_lock:
                self.configs.set(request)
        except P4RuntimeError as error:
            context.abort(error.code, error.message)
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(
        self,
        request: p4runtime_pb2.GetForwardingPipelineConfigRequest,
        context: grpc.ServicerContext,
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
        self, request: p4runtime_pb2.CapabilitiesRequest, context: grpc.ServicerContext
    ) -> p4runtime_pb2.CapabilitiesResponse:
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=P4RUNTIME_API_VERSION)

    # ------------------------------------------------------------------ StreamChannel

    def StreamChannel(
        self,
        request_iterator: Iterator[p4runtime_pb2.StreamMessageRequest],
        context: grpc.ServicerContext,
    ) -> Iterator[p4runtime_pb2.StreamMessageResponse]:
        """Send what the stream's outbox holds; a reader thread handles what the client sends.

        Arbitration changes on other streams must reach this client while it is silent,
        hence the outbox rather than answering request by request.
        """
        yield from self._stream_slots.serve(context, self._serve_stream(request_iterator, context))

    def _serve_stream(
        self,
        request_iterator: Iterator[p4runtime_pb2.StreamMessageRequest],
        context: grpc.ServicerContext,
    ) -> Iterator[p4runtime_pb2.StreamMessageResponse]:
        stream = ClientStream(peer=context.peer())

        def on_rpc_done() -> None:
            self.arbitrator.remove(stream)
            stream.end()

        context.add_callback(on_rpc_done)
        reader = threading.Thread(
            target=self._read_stream,
            args=(stream, request_iterator),
            name="p4rt-stream-reader",
            daemon=True,
        )
        reader.start()
        arbitrate_by_s = time.monotonic() + self.arbitration_timeout_s
        try:
            while True:
                wait_s = None
                if stream.role is None:
                    wait_s = max(0.0, arbitrate_by_s - time.monotonic())
                item = stream.receive(wait_s)
                if item is None:
                    if stream.role is None:
                        context.abort(
                            grpc.StatusCode.FAILED_PRECONDITION,
                            "no MasterArbitrationUpdate within "
                            f"{self.arbitration_timeout_s:g} s of opening the stream: "
                            "a client arbitrates first",
                        )
                    continue
                if isinstance(item, StreamClosed):
                    if item.error is not None:
                        context.abort(item.error.code, item.error.message)
                    return
                yield item
        finally:
            stream.end()

    def _read_stream(
        self, stream: ClientStream, requests: Iterator[p4runtime_pb2.StreamMessageRequest]
    ) -> None:
        try:
            for request in requests:
                error = self._handle_stream_request(stream, request)
                if error is not None:
                    self.arbitrator.remove(stream)
                    stream.send(StreamClosed(error))
                    return
        except DecodeError as error:
            self.arbitrator.remove(stream)
            stream.send(StreamClosed(invalid(f"a StreamMessageRequest cannot be parsed: {error}")))
        except grpc.RpcError as error:
            # The client went away; the RPC-done callback cleans up. grpc's error sits in
            # a reference cycle: its traceback must not keep this frame and stream alive.
            error.__traceback__ = None
        finally:
            self.arbitrator.remove(stream)
            stream.send(StreamClosed())

    def _handle_stream_request(
        self, stream: ClientStream, request: p4runtime_pb2.StreamMessageRequest
    ) -> P4RuntimeError | None:
        """Handle one message; an arbitration error is returned to end the stream."""
        kind = request.WhichOneof("update")
        if kind == "arbitration":
            try:
                self.arbitrator.arbitrate(stream, request.arbitration)
            except P4RuntimeError as error:
                return error
            return None
        reply = p4runtime_pb2.StreamMessageResponse()
        error_message = reply.error
        if kind == "packet":
            error_message.packet_out.packet_out.CopyFrom(request.packet)
            if not self.arbitrator.is_primary(stream):
                error_message.canonical_code = grpc.StatusCode.PERMISSION_DENIED.value[0]
                error_message.message = "only the primary client may send packets"
            else:
                error_message.canonical_code = grpc.StatusCode.UNIMPLEMENTED.value[0]
                error_message.message = "packet-out is not supported by this target"
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


def _parsed(
    message_type: type[_Request], method: Callable[[_Request, grpc.ServicerContext], object]
) -> Callable[[bytes, grpc.ServicerContext], object]:
    """``method`` taking a request's raw bytes: bytes that are no ``message_type`` get
    INVALID_ARGUMENT (gRPC's own parsing would answer INTERNAL and log a traceback)."""

    def handler(data: bytes, context: grpc.ServicerContext) -> object:
        try:
            request = parse_message(message_type, data)
        except DecodeError as error:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                shorten(
                    f"the {message_type.DESCRIPTOR.name} cannot be parsed: {error}", MESSAGE_LIMIT
                ),
            )
        return method(request, context)

    return handler


def _parsed_stream(
    method: Callable[
        [Iterator[p4runtime_pb2.StreamMessageRequest], grpc.ServicerContext],
        Iterator[p4runtime_pb2.StreamMessageResponse],
    ],
) -> Callable[[Iterator[bytes], grpc.ServicerContext], object]:
    """``method`` taking the stream's raw messages; one that does not parse raises
    DecodeError in the stream's reader, which ends the stream with INVALID_ARGUMENT."""

    def handler(
        data: Iterator[bytes], context: grpc.ServicerContext
    ) -> Iterator[p4runtime_pb2.StreamMessageResponse]:
        requests = (parse_message(p4runtime_pb2.StreamMessageRequest, item) for item in data)
        return method(requests, context)

    return handler


def add_to_server(servicer: P4RuntimeServicer, server: grpc.Server) -> None:
    """Register the P4Runtime service: requests arrive as raw bytes (Write splits its
    own, the rest are parsed by :func:`_parsed`); Read sends raw wire bytes."""
    pb = p4runtime_pb2
    handlers = {
        "Write": grpc.unary_unary_rpc_method_handler(
            servicer.Write,
            request_deserializer=None,
            response_serializer=pb.WriteResponse.SerializeToString,
        ),
        "Read": grpc.unary_stream_rpc_method_handler(
            _parsed(pb.ReadRequest, servicer.Read),
            request_deserializer=None,
            response_serializer=None,
        ),
        "SetForwardingPipelineConfig": grpc.unary_unary_rpc_method_handler(
            _parsed(pb.SetForwardingPipelineConfigRequest, servicer.SetForwardingPipelineConfig),
            request_deserializer=None,
            response_serializer=pb.SetForwardingPipelineConfigResponse.SerializeToString,
        ),
        "GetForwardingPipelineConfig": grpc.unary_unary_rpc_method_handler(
            _parsed(pb.GetForwardingPipelineConfigRequest, servicer.GetForwardingPipelineConfig),
            request_deserializer=None,
            response_serializer=pb.GetForwardingPipelineConfigResponse.SerializeToString,
        ),
        "StreamChannel": grpc.stream_stream_rpc_method_handler(
            _parsed_stream(servicer.StreamChannel),
            request_deserializer=None,
            response_serializer=pb.StreamMessageResponse.SerializeToString,
        ),
        "Capabilities": grpc.unary_unary_rpc_method_handler(
            _parsed(pb.CapabilitiesRequest, servicer.Capabilities),
            request_deserializer=None,
            response_serializer=pb.CapabilitiesResponse.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("p4.v1.P4Runtime", handlers),)
    )
