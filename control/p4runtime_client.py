"""A small typed P4Runtime 1.x client: stream channel with arbitration, pipeline
config, batched writes, reads, P4Info name look-ups and canonical byte strings.

It speaks to any P4Runtime server (BMv2's ``simple_switch_grpc``, the embedded
target, hardware) and keeps no table state of its own: callers diff and decide.
Failures surface as :class:`P4RuntimeError` subclasses carrying the gRPC code
and, for writes, the per-update ``p4.v1.Error`` details the spec defines.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import grpc
from google.protobuf.message import DecodeError
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from control.addresses import is_decimal
from control.cli import shortened
from control.grpc_channels import wait_until_ready

STATUS_DETAILS_KEY = "grpc-status-details-bin"
"""Trailer carrying a serialised ``google.rpc.Status`` with per-update errors."""

DEFAULT_TIMEOUT_S = 10.0

# A failed batch reports one p4.v1.Error per update in its trailer, about 60 bytes each:
# gRPC's default limit (16 KiB) would hide the errors of any batch of 300 failed
# updates behind a transport error. The spec's advice is to raise it on the client.
MAX_METADATA_BYTES = 64 << 20
CHANNEL_OPTIONS = (
    ("grpc.max_metadata_size", MAX_METADATA_BYTES),
    ("grpc.absolute_max_metadata_size", MAX_METADATA_BYTES),
)

# --- canonical byte strings (P4Runtime spec §8.4) -----------------------------------------


def encode_uint(value: int, bitwidth: int) -> bytes:
    """Canonical form of an unsigned ``bit<bitwidth>``: the shortest big-endian string,
    zero as one zero byte. Raises ``ValueError`` when the value does not fit."""
    if value < 0 or value >> bitwidth:
        raise ValueError(f"{value} does not fit in bit<{bitwidth}>")
    if value == 0:
        return b"\x00"
    return value.to_bytes((value.bit_length() + 7) // 8, "big")


def decode_uint(data: bytes) -> int:
    """Any-length big-endian string → int (servers may send padded forms)."""
    return int.from_bytes(data, "big")


# --- P4Info look-ups ------------------------------------------------------------------


class P4NameError(KeyError):
    """A table/action/field/counter name that the P4Info does not define."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True, slots=True)
class MatchFieldRef:
    id: int
    name: str
    bitwidth: int
    match_type: int
    """``p4info_pb2.MatchField.MatchType`` value (EXACT, LPM, TERNARY, ...)."""


@dataclass(frozen=True, slots=True)
class TableRef:
    id: int
    name: str
    size: int
    match_fields: dict[str, MatchFieldRef]
    action_ids: frozenset[int]
    direct_counter_id: int | None

    def match_field(self, name: str) -> MatchFieldRef:
        try:
            return self.match_fields[name]
        except KeyError:
            raise P4NameError(
                f"table {self.name} has no match field {name!r} "
                f"(it has: {', '.join(self.match_fields)})"
            ) from None

    @property
    def needs_priority(self) -> bool:
        kinds = {p4info_pb2.MatchField.TERNARY, p4info_pb2.MatchField.RANGE}
        kinds.add(p4info_pb2.MatchField.OPTIONAL)
        return any(f.match_type in kinds for f in self.match_fields.values())


@dataclass(frozen=True, slots=True)
class ParamRef:
    id: int
    name: str
    bitwidth: int


@dataclass(frozen=True, slots=True)
class ActionRef:
    id: int
    name: str
    params: dict[str, ParamRef]

    def param(self, name: str) -> ParamRef:
        try:
            return self.params[name]
        except KeyError:
            raise P4NameError(
                f"action {self.name} has no parameter {name!r} (it has: {', '.join(self.params)})"
            ) from None


@dataclass(frozen=True, slots=True)
class CounterRef:
    id: int
    name: str
    size: int
    direct_table_id: int | None


@dataclass
class P4Names:
    """Name → id index of one P4Info; full names (``MyIngress.stage_class``) and
    unambiguous aliases or last components (``stage_class``) are both accepted."""

    p4info: p4info_pb2.P4Info
    tables: dict[str, TableRef] = field(default_factory=dict)
    actions: dict[str, ActionRef] = field(default_factory=dict)
    counters: dict[str, CounterRef] = field(default_factory=dict)
    tables_by_id: dict[int, TableRef] = field(default_factory=dict)
    actions_by_id: dict[int, ActionRef] = field(default_factory=dict)
    _aliases: dict[str, dict[str, str | None]] = field(default_factory=dict)

    @classmethod
    def build(cls, p4info: p4info_pb2.P4Info) -> P4Names:
        names = cls(p4info=p4info)
        direct: dict[int, int] = {}
        for counter in p4info.direct_counters:
            direct[counter.preamble.id] = counter.direct_table_id
            names.counters[counter.preamble.name] = CounterRef(
                counter.preamble.id, counter.preamble.name, 0, counter.direct_table_id
            )
        for counter in p4info.counters:
            names.counters[counter.preamble.name] = CounterRef(
                counter.preamble.id, counter.preamble.name, counter.size, None
            )
        for action in p4info.actions:
            ref = ActionRef(
                action.preamble.id,
                action.preamble.name,
                {p.name: ParamRef(p.id, p.name, p.bitwidth) for p in action.params},
            )
            names.actions[ref.name] = ref
            names.actions_by_id[ref.id] = ref
        for table in p4info.tables:
            direct_ids = [i for i in table.direct_resource_ids if i in direct]
            ref_t = TableRef(
                table.preamble.id,
                table.preamble.name,
                table.size,
                {
                    m.name: MatchFieldRef(m.id, m.name, m.bitwidth, m.match_type)
                    for m in table.match_fields
                },
                frozenset(r.id for r in table.action_refs),
                direct_ids[0] if direct_ids else None,
            )
            names.tables[ref_t.name] = ref_t
            names.tables_by_id[ref_t.id] = ref_t
        for kind, entities in (
            ("table", p4info.tables),
            ("action", p4info.actions),
            ("counter", [*p4info.counters, *p4info.direct_counters]),
        ):
            aliases: dict[str, str | None] = {}
            for entity in entities:
                full = entity.preamble.name
                for alias in {entity.preamble.alias, full.rsplit(".", 1)[-1]} - {"", full}:
                    # An alias shared by two entities is ambiguous: remember it as None.
                    aliases[alias] = full if aliases.get(alias, full) == full else None
            names._aliases[kind] = aliases
        return names

    def _resolve(self, kind: str, name: str, known: Mapping[str, object]) -> str:
        if name in known:
            return name
        full = self._aliases[kind].get(name)
        if full is None:
            reason = "is ambiguous" if name in self._aliases[kind] else "is not in the P4Info"
            raise P4NameError(f"{kind} {name!r} {reason}")
        return full

    def table(self, name: str) -> TableRef:
        return self.tables[self._resolve("table", name, self.tables)]

    def action(self, name: str) -> ActionRef:
        return self.actions[self._resolve("action", name, self.actions)]

    def counter(self, name: str) -> CounterRef:
        return self.counters[self._resolve("counter", name, self.counters)]

    def has_table(self, name: str) -> bool:
        try:
            self.table(name)
        except P4NameError:
            return False
        return True


# --- errors -----------------------------------------------------------------------------


class P4RuntimeError(Exception):
    """An RPC failed; ``code`` is the gRPC status code. The message quotes what the switch
    said, :func:`~control.cli.shortened`: a switch may send megabytes of error text, and
    the controller keeps and logs the message."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        message = shortened(message)
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


class NotPrimaryError(P4RuntimeError):
    """The switch refused an RPC with PERMISSION_DENIED. Mostly this client is not the
    primary controller of the device, but a switch says so for other reasons too (a role
    it does not allow to write, a permission of its own): whether arbitration made another
    client primary is for :attr:`P4RuntimeClient.is_primary` and
    :attr:`P4RuntimeClient.primary_election_id` to tell, not this error."""


class ConnectionLostError(P4RuntimeError):
    """The server cannot be reached or the stream channel broke."""


class ArbitrationRefusedError(P4RuntimeError):
    """The server ended the stream with a status instead of taking the arbitration: the
    election id is another live client's, the device or role is unknown, too many
    clients are connected."""


class ReadLimitError(P4RuntimeError):
    """A Read whose reply went past the client's limit of entities or bytes; the Read was
    cancelled and nothing of it is returned."""


_TRANSPORT_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED}
)
"""Codes that mean the connection went, not that the server said no."""


@dataclass(frozen=True, slots=True)
class UpdateError:
    """One failed update of a batch: its position, gRPC code and message."""

    index: int
    code: grpc.StatusCode
    message: str


class WriteError(P4RuntimeError):
    """A Write batch in which some updates failed; ``errors`` lists only the failures."""

    def __init__(self, code: grpc.StatusCode, message: str, errors: Sequence[UpdateError]) -> None:
        detail = "; ".join(f"update {e.index}: {e.code.name}: {e.message}" for e in errors[:3])
        more = f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""
        super().__init__(code, f"{message}: {detail}{more}" if detail else message)
        self.errors = list(errors)


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def _code_of(number: int) -> grpc.StatusCode:
    return _CODES.get(number, grpc.StatusCode.UNKNOWN)


def _translate(error: grpc.RpcError, what: str) -> P4RuntimeError:
    code: grpc.StatusCode = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = shortened((error.details() if hasattr(error, "details") else None) or str(error))
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return NotPrimaryError(code, f"{what}: {details}")
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return ConnectionLostError(code, f"{what}: {details}")
    return P4RuntimeError(code, f"{what}: {details}")


_STATUS_DETAILS_FIELD = 3
"""google.rpc.Status.details: field 3, length-delimited."""


def _update_errors(error: grpc.RpcError, updates_sent: int | None = None) -> list[UpdateError]:
    """Per-update errors from the status-details trailer (empty when absent).

    The spec gives one detail per update; a trailer with more than ``updates_sent`` is
    not read (parsing a million details of a 64 MiB trailer takes the better part of a
    minute in pure-Python protobuf)."""
    trailers = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in trailers or ():
        if key != STATUS_DETAILS_KEY:
            continue
        if updates_sent is not None and (
            field_count(value, _STATUS_DETAILS_FIELD, stop_after=updates_sent + 1) > updates_sent
        ):
            return []  # not one detail per update: the call's own status says it failed
        status = status_pb2.Status()
        failures = []
        try:
            status.ParseFromString(value)
            for index, packed in enumerate(status.details):
                detail = p4runtime_pb2.Error()
                if packed.Unpack(detail) and detail.canonical_code != code_pb2.OK:
                    failures.append(
                        UpdateError(
                            index, _code_of(detail.canonical_code), shortened(detail.message)
                        )
                    )
        except DecodeError:
            return []  # details a switch garbled: the call's own status still says it failed
        return failures
    return []


# --- the client -------------------------------------------------------------------------


def election_id_of(value: int) -> p4runtime_pb2.Uint128:
    return p4runtime_pb2.Uint128(high=value >> 64, low=value & (2**64 - 1))


# The controller's default election id, (high 2, low 0) = 2**65: above the defaults of
# the usual tools (p4runtime-shell's (1, 0) = 2**64, the P4 tutorials' 1), so a tool
# started with its defaults next to the controller is a backup and cannot write.
DEFAULT_ELECTION_ID = 2 << 64

MAX_ELECTION_ID = 2**128 - 1


def parse_election_id(text: str) -> int:
    """``N`` or ``HIGH,LOW`` (p4runtime-shell's form) → the 128-bit election id.

    Raises ValueError naming what is wrong; 0 is reserved by the spec.
    """
    parts = [part.strip() for part in text.split(",")]
    if len(parts) > 2 or not all(is_decimal(part) for part in parts):
        raise ValueError(f"{text!r} is not an integer or HIGH,LOW")
    if len(parts) == 2:
        high, low = (int(part) for part in parts)
        if high >= 2**64 or low >= 2**64:
            raise ValueError(f"{text!r}: HIGH and LOW must each fit 64 bits")
        value = (high << 64) | low
    else:
        if len(parts[0]) > 40:
            raise ValueError(f"{parts[0][:20]}...: above the 128-bit maximum")
        value = int(parts[0])
    if value == 0:
        raise ValueError("0 is reserved by P4Runtime; use a positive id")
    if value > MAX_ELECTION_ID:
        raise ValueError(f"{value} is above the 128-bit maximum")
    return value


def format_election_id(value: int) -> str:
    """``HIGH,LOW`` as p4runtime-shell takes it."""
    return f"{value >> 64},{value & (2**64 - 1)}"


class P4RuntimeClient:
    """One connection to one device: a stream channel (arbitration) plus unary RPCs.

    ``on_stream_lost`` runs on the stream's reader thread when the channel breaks
    (switch restart, network loss); ``on_arbitration`` whenever the server tells us
    who is primary. ``is_primary`` follows the latest arbitration update.

    With ``reclaim``, a client told that the device has no primary while the highest
    election id the server has seen is above its own (a client with a higher id was
    primary and left) arbitrates again with that highest id, which the spec makes the
    new primary (P4Runtime 1.4 §5.3: an id at least the highest seen wins; no live
    client holds it, or there would be a primary). It never takes the device from a
    live primary. :attr:`election_id` then holds the id it uses.
    """

    def __init__(
        self,
        address: str,
        device_id: int,
        election_id: int = 1,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        on_stream_lost: Callable[[P4RuntimeClient], None] | None = None,
        on_arbitration: Callable[[P4RuntimeClient, bool], None] | None = None,
        connect_timeout_s: float | None = None,
        reclaim: bool = False,
        max_read_entities: int | None = None,
        max_read_bytes: int | None = None,
    ) -> None:
        if not 0 < election_id <= MAX_ELECTION_ID:
            raise ValueError("election id must be in 1..2**128-1 (0 is reserved by the spec)")
        self.address = address
        self.device_id = device_id
        self.election_id = election_id
        self.timeout_s = timeout_s
        self.connect_timeout_s = timeout_s if connect_timeout_s is None else connect_timeout_s
        self.on_stream_lost = on_stream_lost
        self.on_arbitration = on_arbitration
        self.reclaim = reclaim
        self.reclaims = 0
        self.max_read_entities = max_read_entities
        self.max_read_bytes = max_read_bytes
        self.is_primary = False
        self.primary_election_id: int | None = None
        """The election id the latest arbitration update carried: the highest the switch
        has seen (P4Runtime 1.4 §5.3), the primary's while there is one."""
        self.arbitration_status: tuple[grpc.StatusCode, str] | None = None
        """Code and message of the latest arbitration update (OK: this client is primary;
        ALREADY_EXISTS: another client is; NOT_FOUND: none is)."""
        self._channel: grpc.Channel | None = None
        self._stub: p4runtime_pb2_grpc.P4RuntimeStub | None = None
        self._write_bytes: grpc.UnaryUnaryMultiCallable | None = None
        self._read_bytes: grpc.UnaryStreamMultiCallable | None = None
        self._requests: queue.Queue[p4runtime_pb2.StreamMessageRequest | None] = queue.Queue()
        self._arbitrated = threading.Event()
        self._stream_lost = threading.Event()
        self._closing = False
        self._reader: threading.Thread | None = None
        self.stream_error: str | None = None
        self.stream_error_code: grpc.StatusCode | None = None
        """The status the server ended the stream with (None: it has not, or no status)."""

    # -- connection --

    def connect(self, arbitrate: bool = True) -> bool:
        """Open the channel and stream, send arbitration; returns whether we are primary.

        ``arbitrate=False`` opens no stream: enough for reads, which need no election.
        Raises :class:`ConnectionLostError` when the server is not reachable in time.
        """
        channel = grpc.insecure_channel(self.address, options=CHANNEL_OPTIONS)
        try:
            wait_until_ready(channel, self.connect_timeout_s)
        except grpc.FutureTimeoutError:
            raise ConnectionLostError(
                grpc.StatusCode.UNAVAILABLE, f"no P4Runtime server at {self.address}"
            ) from None
        self._channel = channel
        self._stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
        self._write_bytes = channel.unary_unary(
            "/p4.v1.P4Runtime/Write",
            request_serializer=None,  # write() sends the request already serialised
            response_deserializer=p4runtime_pb2.WriteResponse.FromString,
        )
        self._read_bytes = channel.unary_stream(
            "/p4.v1.P4Runtime/Read",
            request_serializer=p4runtime_pb2.ReadRequest.SerializeToString,
            response_deserializer=None,  # read() counts a reply before it parses it
        )
        if not arbitrate:
            return False
        responses = self._stub.StreamChannel(self._request_iterator())
        self._reader = threading.Thread(
            target=self._read_stream, args=(responses,), name=f"p4rt-{self.address}", daemon=True
        )
        self._reader.start()
        self._send_arbitration()
        if not self._arbitrated.wait(self.timeout_s):
            reason = self.stream_error or "no arbitration reply"
            self.close()
            raise ConnectionLostError(
                grpc.StatusCode.UNAVAILABLE, f"{self.address}: arbitration failed: {reason}"
            )
        if self._stream_lost.is_set():
            reason = self.stream_error or "stream closed"
            code = self.stream_error_code
            self.close()
            if code is not None and code not in _TRANSPORT_CODES:
                raise ArbitrationRefusedError(
                    code, f"{self.address}: arbitration refused: {reason}"
                )
            raise ConnectionLostError(
                grpc.StatusCode.UNAVAILABLE, f"{self.address}: arbitration failed: {reason}"
            )
        return self.is_primary

    @property
    def connected(self) -> bool:
        return self._channel is not None and not self._stream_lost.is_set()

    def read_only(self) -> P4RuntimeClient:
        """Connect without arbitration (for readers such as status tools)."""
        self.connect(arbitrate=False)
        return self

    def close(self) -> None:
        """End the stream and the channel; safe to call twice."""
        self._closing = True
        self._requests.put(None)
        if self._channel is not None:
            self._channel.close()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout=self.timeout_s)
        self._channel = None
        self._stub = None
        self._write_bytes = None
        self._read_bytes = None

    def __enter__(self) -> P4RuntimeClient:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request_iterator(self) -> Iterator[p4runtime_pb2.StreamMessageRequest]:
        while True:
            item = self._requests.get()
            if item is None:
                return
            yield item

    def _read_stream(self, responses: Iterable[p4runtime_pb2.StreamMessageResponse]) -> None:
        try:
            for response in responses:
                if response.HasField("arbitration"):
                    self._on_arbitration(response.arbitration)
                elif response.HasField("error"):
                    self.stream_error = shortened(response.error.message)
        except grpc.RpcError as error:
            details = error.details() if hasattr(error, "details") else None
            self.stream_error = shortened(details or str(error))
            self.stream_error_code = error.code() if hasattr(error, "code") else None
        else:
            self.stream_error = self.stream_error or "stream ended by the server"
        self._stream_lost.set()
        self.is_primary = False
        self._arbitrated.set()
        if not self._closing and self.on_stream_lost is not None:
            self.on_stream_lost(self)

    def _send_arbitration(self) -> None:
        self._requests.put(
            p4runtime_pb2.StreamMessageRequest(
                arbitration=p4runtime_pb2.MasterArbitrationUpdate(
                    device_id=self.device_id, election_id=election_id_of(self.election_id)
                )
            )
        )

    def _on_arbitration(self, update: p4runtime_pb2.MasterArbitrationUpdate) -> None:
        primary = update.status.code == code_pb2.OK
        self.is_primary = primary
        self.arbitration_status = (_code_of(update.status.code), shortened(update.status.message))
        highest: int | None = None
        if update.HasField("election_id"):
            highest = (update.election_id.high << 64) | update.election_id.low
            self.primary_election_id = highest
        if (
            self.reclaim
            and update.status.code == code_pb2.NOT_FOUND
            and highest is not None
            and highest > self.election_id
            and not self._closing
        ):
            # The device has no primary: take it with the highest id seen. The answer
            # (OK, or the stream ended if another client took that id first) follows.
            self.election_id = highest
            self.reclaims += 1
            self._send_arbitration()
            return
        self._arbitrated.set()
        if self.on_arbitration is not None:
            self.on_arbitration(self, primary)

    def _rpc_stub(self) -> p4runtime_pb2_grpc.P4RuntimeStub:
        if self._stub is None:
            raise ConnectionLostError(grpc.StatusCode.UNAVAILABLE, f"{self.address}: not connected")
        return self._stub

    # -- pipeline --

    def set_pipeline(
        self,
        p4info: p4info_pb2.P4Info,
        device_config: bytes,
        cookie: int = 0,
        action: int = p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
    ) -> None:
        request = p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            election_id=election_id_of(self.election_id),
            action=action,
            config=p4runtime_pb2.ForwardingPipelineConfig(
                p4info=p4info,
                p4_device_config=device_config,
                cookie=p4runtime_pb2.ForwardingPipelineConfig.Cookie(cookie=cookie),
            ),
        )
        try:
            self._rpc_stub().SetForwardingPipelineConfig(request, timeout=self.timeout_s)
        except grpc.RpcError as error:
            raise _translate(error, f"{self.address}: SetForwardingPipelineConfig") from None

    def get_pipeline(
        self,
        response_type: int = p4runtime_pb2.GetForwardingPipelineConfigRequest.ALL,
    ) -> p4runtime_pb2.ForwardingPipelineConfig | None:
        """The device's pipeline, or ``None`` when it has none (FAILED_PRECONDITION)."""
        request = p4runtime_pb2.GetForwardingPipelineConfigRequest(
            device_id=self.device_id, response_type=response_type
        )
        try:
            response = self._rpc_stub().GetForwardingPipelineConfig(request, timeout=self.timeout_s)
        except grpc.RpcError as error:
            translated = _translate(error, f"{self.address}: GetForwardingPipelineConfig")
            if translated.code == grpc.StatusCode.FAILED_PRECONDITION:
                return None
            raise translated from None
        config: p4runtime_pb2.ForwardingPipelineConfig = response.config
        return config

    def pipeline_cookie(self) -> int | None:
        """The cookie of the installed pipeline, ``None`` when there is no pipeline."""
        config = self.get_pipeline(p4runtime_pb2.GetForwardingPipelineConfigRequest.COOKIE_ONLY)
        if config is None:
            return None
        cookie: int = config.cookie.cookie
        return cookie

    # -- write / read --

    def write(
        self,
        updates: Sequence[p4runtime_pb2.Update],
        atomicity: int = p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR,
    ) -> None:
        """One Write RPC with all ``updates``; raises :class:`WriteError` listing each failure."""
        if not updates:
            return
        request = write_request_bytes(self.device_id, self.election_id, atomicity, updates)
        self._rpc_stub()  # not connected: ConnectionLostError
        assert self._write_bytes is not None
        try:
            self._write_bytes(request, timeout=self.timeout_s)
        except grpc.RpcError as error:
            translated = _translate(error, f"{self.address}: Write")
            failures = _update_errors(error, len(updates))
            if failures:
                raise WriteError(translated.code, translated.message, failures) from None
            raise translated from None

    def read(
        self,
        entities: Sequence[p4runtime_pb2.Entity],
        max_entities: int | None = None,
        max_bytes: int | None = None,
    ) -> list[p4runtime_pb2.Entity]:
        """All entities matching the (wildcard) ``entities``, across the streamed replies.

        Past :attr:`max_read_entities` entities or :attr:`max_read_bytes` bytes of replies
        (or ``max_entities`` and ``max_bytes``, for this Read, where they are lower) the
        Read is cancelled and :class:`ReadLimitError` raised. Each reply is counted
        from its bytes before it is parsed (pure-Python protobuf parses an entity in about
        0.2 ms and holds it in about 8 KB), so a switch that sends millions costs no more
        than the limit."""
        request = p4runtime_pb2.ReadRequest(device_id=self.device_id)
        request.entities.extend(entities)
        self._rpc_stub()  # not connected: ConnectionLostError
        assert self._read_bytes is not None
        what = f"{self.address}: Read"
        entity_limit = _lowest(self.max_read_entities, max_entities)
        byte_limit = _lowest(self.max_read_bytes, max_bytes)
        call = self._read_bytes(request, timeout=self.timeout_s)
        result: list[p4runtime_pb2.Entity] = []
        received_bytes = 0
        try:
            for data in call:
                received_bytes += len(data)
                if byte_limit is not None and received_bytes > byte_limit:
                    call.cancel()
                    raise ReadLimitError(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"{what}: the switch sent more than {byte_limit:,} bytes "
                        "in one Read, more than this client accepts; the Read was cancelled",
                    )
                if entity_limit is not None:
                    room = entity_limit - len(result)
                    if entity_count(data, stop_after=room + 1) > room:
                        call.cancel()
                        raise ReadLimitError(
                            grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"{what}: the switch sent more than {entity_limit:,} "
                            "entities in one Read, more than this client accepts; "
                            "the Read was cancelled",
                        )
                try:
                    reply = p4runtime_pb2.ReadResponse.FromString(data)
                except DecodeError as error:
                    call.cancel()
                    raise P4RuntimeError(
                        grpc.StatusCode.INTERNAL, f"{what}: a reply that does not parse: {error}"
                    ) from None
                result.extend(reply.entities)
        except grpc.RpcError as error:
            raise _translate(error, what) from None
        return result

    def read_table(
        self,
        table_id: int = 0,
        with_counters: bool = False,
        max_entities: int | None = None,
        max_bytes: int | None = None,
    ) -> list[p4runtime_pb2.TableEntry]:
        """Every entry of one table (``0``: of all tables), optionally with direct counters;
        the limits as :meth:`read` takes them."""
        entity = p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=table_id))
        if with_counters:
            entity.table_entry.counter_data.SetInParent()
        return [e.table_entry for e in self.read([entity], max_entities, max_bytes)]

    def read_counter(self, counter_id: int) -> dict[int, tuple[int, int]]:
        """Index → (bytes, packets) for every cell of an indirect counter."""
        entity = p4runtime_pb2.Entity(
            counter_entry=p4runtime_pb2.CounterEntry(counter_id=counter_id)
        )
        cells: dict[int, tuple[int, int]] = {}
        for result in self.read([entity]):
            entry = result.counter_entry
            cells[entry.index.index] = (entry.data.byte_count, entry.data.packet_count)
        return cells

    def capabilities(self) -> str:
        try:
            reply = self._rpc_stub().Capabilities(
                p4runtime_pb2.CapabilitiesRequest(), timeout=self.timeout_s
            )
        except grpc.RpcError as error:
            raise _translate(error, f"{self.address}: Capabilities") from None
        version: str = reply.p4runtime_api_version
        return version


def write_request_bytes(
    device_id: int, election_id: int, atomicity: int, updates: Sequence[p4runtime_pb2.Update]
) -> bytes:
    """A serialised WriteRequest, byte for byte what ``SerializeToString`` gives.

    Built from each update's own bytes: with protobuf in pure Python, putting the
    updates into a WriteRequest message copies every one of them, which costs more than
    serialising them (see docs/p4runtime.md).
    """
    head = p4runtime_pb2.WriteRequest(
        device_id=device_id, election_id=election_id_of(election_id)
    ).SerializeToString()
    parts = [head]
    for update in updates:
        body = update.SerializeToString()
        parts.append(_UPDATES_KEY + varint_bytes(len(body)) + body)
    # Fields after ``updates`` (4) in number order, as protobuf writes them.
    parts.append(p4runtime_pb2.WriteRequest(atomicity=atomicity).SerializeToString())
    return b"".join(parts)


_UPDATES_KEY = bytes([4 << 3 | 2])  # WriteRequest.updates: field 4, length-delimited


_ENTITIES_FIELD = 1
"""ReadResponse.entities: field 1, length-delimited."""


def entity_count(data: bytes, stop_after: int | None = None) -> int:
    """How many ``entities`` a serialised ReadResponse holds (see :func:`field_count`)."""
    return field_count(data, _ENTITIES_FIELD, stop_after)


def field_count(data: bytes, field_number: int, stop_after: int | None = None) -> int:
    """How many length-delimited fields ``field_number`` the serialised message ``data``
    holds at its top level, read from the field headers without parsing the fields;
    counting stops at ``stop_after``. Bytes that are no message are counted as far as
    they go (parsing them then fails)."""
    count = 0
    position = 0
    end = len(data)
    while position < end and (stop_after is None or count < stop_after):
        key, position = _varint_at(data, position)
        wire_type = key & 7
        if wire_type == 0:
            _, position = _varint_at(data, position)
        elif wire_type == 1:
            position += 8
        elif wire_type == 2:
            length, position = _varint_at(data, position)
            position += length
        elif wire_type == 5:
            position += 4
        else:
            break  # groups and bad types: not a ReadResponse
        if position > end:
            break
        if key >> 3 == field_number and wire_type == 2:
            count += 1
    return count


def _varint_at(data: bytes, position: int) -> tuple[int, int]:
    """The varint at ``position`` and the position after it (past the end if cut short)."""
    value = 0
    shift = 0
    while position < len(data):
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
        if shift > 63:
            break
    return value, len(data) + 1


def varint_bytes(value: int) -> bytes:
    """``value`` as a protobuf varint (for requests assembled from encoded parts)."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def update(kind: int, entry: p4runtime_pb2.TableEntry) -> p4runtime_pb2.Update:
    """An Update of ``kind`` (``Update.INSERT`` / ``MODIFY`` / ``DELETE``) for one entry."""
    message = p4runtime_pb2.Update(type=kind)
    message.entity.table_entry.CopyFrom(entry)
    return message


def suppress_close_errors(client: P4RuntimeClient) -> None:
    """Close a client that may already be broken, ignoring what its channel says."""
    with contextlib.suppress(Exception):
        client.close()


def _lowest(*limits: int | None) -> int | None:
    """The lowest of the limits given (None: no limit)."""
    given = [limit for limit in limits if limit is not None]
    return min(given) if given else None
