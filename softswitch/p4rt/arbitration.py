"""Primary/backup arbitration per (device id, role) over StreamChannel (spec §5).

The primary is the live stream whose election id equals the highest one the server has
seen for its role; a primary that leaves leaves the role without one until a client
arbitrates with an id at least as high. Every change is announced on the streams'
outboxes; the servicer drains each outbox into its gRPC response stream.

Writes are accepted from the primary only: the request must carry the primary's
(device id, role, election id), as the spec requires, and must arrive over the gRPC
connection that carries the primary's stream. The spec lets a server trust the triple
alone; every backup is told the primary's election id, so that would let any local
client write in the primary's name without a stream of its own.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeAlias

import grpc
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2

from softswitch.p4rt.status import (
    P4RuntimeError,
    invalid,
    not_found,
    permission_denied,
    shorten,
)

# What one stream may have queued for its client before it is ended (see ClientStream.send).
MAX_OUTBOX_MESSAGES = 1024
MAX_OUTBOX_BYTES = 16 << 20

# How many roles the server remembers at once; a new one beyond is RESOURCE_EXHAUSTED.
# A role is forgotten when its last stream leaves unless an election id was seen for
# it: that highest id must outlive its streams (a returning client may not take over
# with a lower one), so such roles stay and only this limit bounds them.
MAX_ROLES = 256
# The default role ("") is never refused for that limit: named roles left behind by
# other clients must not lock the default role's controller out of its switch.

MAX_ROLE_NAME_BYTES = 1024
"""The longest role name accepted; a kept role keeps its name, so names are bounded too."""


def election_id_value(message: p4runtime_pb2.Uint128) -> int:
    return (message.high << 64) | message.low


def election_id_message(value: int) -> p4runtime_pb2.Uint128:
    return p4runtime_pb2.Uint128(high=value >> 64, low=value & ((1 << 64) - 1))


def same_connection(request_peer: str | None, stream_peer: str | None) -> bool:
    """Whether a unary request came over the connection of a stream.

    A TCP peer (``ipv4:ADDR:PORT``, ``ipv6:[ADDR]:PORT``) names one connection; other
    transports (Unix sockets) do not tell clients apart, so they are not compared.
    """
    if request_peer is None or stream_peer is None:
        return True
    if not stream_peer.startswith(("ipv4:", "ipv6:")):
        return True
    return request_peer == stream_peer


class StreamClosed:
    """Outbox marker: end the response stream, with an error status when ``error`` is set."""

    def __init__(self, error: P4RuntimeError | None = None) -> None:
        self.error = error


OutboxItem: TypeAlias = "p4runtime_pb2.StreamMessageResponse | StreamClosed"


@dataclass(eq=False)
class ClientStream:
    """One StreamChannel: what it arbitrated for and the messages waiting to be sent."""

    outbox: queue.Queue[OutboxItem] = field(default_factory=queue.Queue)
    role: str | None = None  # None until the first accepted arbitration
    election_id: int | None = None  # None: unset, never primary (spec §16.3.1)
    peer: str | None = None  # the gRPC peer (transport connection) the stream came on
    _queued_bytes: int = 0
    _closed: bool = False  # a StreamClosed is queued: nothing more goes out
    on_send: Callable[[], None] | None = field(default=None, repr=False)
    """Called after an item is queued, from the thread that queued it."""
    on_cut_off: Callable[[ClientStream], None] | None = field(default=None, repr=False)
    """Called with the stream once its client is cut off for not reading, from the thread
    that queued the item too many (it may hold the arbitrator's lock: defer the work).
    Given the stream rather than holding it, so that no cycle outlives the stream."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def send(self, item: OutboxItem) -> None:
        """Queue ``item``; a client that leaves too much unread is cut off.

        Replies to packet-outs carry the packet back, so a client that sends without
        reading would otherwise grow the outbox without bound: past MAX_OUTBOX_MESSAGES
        or MAX_OUTBOX_BYTES the queued messages are dropped and the stream ends with
        RESOURCE_EXHAUSTED.
        """
        queued, cut_off = self._enqueue(item)
        if queued:
            self._wake()
        if cut_off and self.on_cut_off is not None:
            self.on_cut_off(self)

    def _enqueue(self, item: OutboxItem) -> tuple[bool, bool]:
        """Whether ``item`` (or the cut-off it caused) was queued, and whether it cut the
        client off."""
        with self._lock:
            if self._closed:
                return False, False
            if isinstance(item, StreamClosed):
                self._closed = True
                self.outbox.put(item)
                return True, False
            size = item.ByteSize()
            if (
                self.outbox.qsize() >= MAX_OUTBOX_MESSAGES
                or self._queued_bytes + size > MAX_OUTBOX_BYTES
            ):
                self._discard()
                self._closed = True
                self.outbox.put(
                    StreamClosed(
                        P4RuntimeError(
                            grpc.StatusCode.RESOURCE_EXHAUSTED,
                            "the client does not read its stream: too many messages unsent",
                        )
                    )
                )
                return True, True
            self._queued_bytes += size
            self.outbox.put(item)
            return True, False

    @property
    def closed(self) -> bool:
        """Whether the stream is ending (cut off, or its RPC over): it arbitrates no more."""
        with self._lock:
            return self._closed

    def _wake(self) -> None:
        if self.on_send is not None:
            self.on_send()

    def poll(self) -> OutboxItem | None:
        """The next item to send to the client; None if there is none yet (``on_send``
        tells when one comes)."""
        try:
            item = self.outbox.get_nowait()
        except queue.Empty:
            return None
        if not isinstance(item, StreamClosed):
            with self._lock:
                self._queued_bytes -= item.ByteSize()
        return item

    def end(self) -> None:
        """The RPC is over: drop what was never sent and mark the stream closed.

        Queued replies can hold large packets; they must not wait for the garbage
        collector to find the stream.
        """
        with self._lock:
            self._discard()  # this may drop an earlier StreamClosed: queue a new one
            self._closed = True
            self.outbox.put(StreamClosed())
        self._wake()

    def _discard(self) -> None:
        while True:
            try:
                self.outbox.get_nowait()
            except queue.Empty:
                break
        self._queued_bytes = 0


@dataclass
class _RoleGroup:
    streams: list[ClientStream] = field(default_factory=list)
    highest_election_id: int | None = None
    primary: ClientStream | None = None
    term: int = 0
    """Counts the changes of primary (another stream, or none): what a primary did in
    one term (a saved pipeline config) is not the next primary's."""

    def set_primary(self, stream: ClientStream | None) -> None:
        if stream is not self.primary:
            self.primary = stream
            self.term += 1


class Arbitrator:
    """The live controllers of one device, grouped by role name ("" is the default role)."""

    def __init__(self, device_id: int) -> None:
        self.device_id = device_id
        self._lock = threading.Lock()
        self._groups: dict[str, _RoleGroup] = {}

    def arbitrate(
        self, stream: ClientStream, update: p4runtime_pb2.MasterArbitrationUpdate
    ) -> None:
        """Apply one MasterArbitrationUpdate; a raised error must terminate the stream."""
        if update.role.HasField("config"):
            raise invalid("role.config is not supported: roles here always have full access")
        role = update.role.name
        if len(role.encode()) > MAX_ROLE_NAME_BYTES:
            raise invalid(f"role name of {len(role.encode())} bytes: at most {MAX_ROLE_NAME_BYTES}")
        election_id = (
            election_id_value(update.election_id) if update.HasField("election_id") else None
        )
        with self._lock:
            if stream.closed:
                raise P4RuntimeError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED, "this stream is ending: open a new one"
                )
            if stream.role is None:
                if update.device_id != self.device_id:
                    raise not_found(f"unknown device id {update.device_id}")
                group = self._groups.get(role)
                if group is None:
                    named = len(self._groups) - ("" in self._groups)
                    if role and named >= MAX_ROLES:
                        raise P4RuntimeError(
                            grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"too many roles (limit {MAX_ROLES})",
                        )
                    group = self._groups[role] = _RoleGroup()
                self._check_unique(group, stream, election_id)
                group.streams.append(stream)
                stream.role = role
            else:
                if update.device_id != self.device_id:
                    raise P4RuntimeError(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        f"device id {update.device_id} differs from this stream's {self.device_id}",
                    )
                if role != stream.role:
                    raise P4RuntimeError(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        f"role '{shorten(role)}' differs from this stream's role "
                        f"'{shorten(stream.role)}'",
                    )
                group = self._groups[role]
                self._check_unique(group, stream, election_id)
            stream.election_id = election_id
            self._elect(group, stream)

    def remove(self, stream: ClientStream) -> None:
        """A closed stream gives up its place; losing the primary is announced to the rest.

        Called more than once per stream (reader end and RPC end); later calls do nothing.
        """
        with self._lock:
            if stream.role is None:
                return
            group = self._groups.get(stream.role)
            if group is None:
                return
            if stream in group.streams:
                group.streams.remove(stream)
            if group.primary is stream:
                group.set_primary(None)
                self._notify(group, stream.role, group.streams)
            if not group.streams and group.highest_election_id is None:
                del self._groups[stream.role]  # nothing left to remember of this role

    def check_primary(
        self, device_id: int, role: str, election_id: int | None, peer: str | None = None
    ) -> int:
        """Raise unless (device, role, election id) names the current primary and the
        request came over the primary's connection (``peer``; Write, SetConfig); the
        primary's term (:meth:`is_term`)."""
        if device_id != self.device_id:
            raise not_found(f"unknown device id {device_id}")
        with self._lock:
            group = self._groups.get(role)
            if group is None and role:
                raise not_found(f"unknown role '{shorten(role)}'")
            primary = group.primary if group is not None else None
            if primary is None:
                raise permission_denied(f"no primary client for role '{shorten(role)}'")
            if election_id is None or primary.election_id != election_id:
                raise permission_denied("election id does not match the primary client's")
            if not same_connection(peer, primary.peer):
                raise permission_denied(
                    "the request carries the primary's election id but did not come over "
                    "the primary's connection: write on the channel of your StreamChannel"
                )
            assert group is not None
            return group.term

    def is_primary_connection(self, peer: str | None, role: str = "") -> bool:
        """Whether a unary request came over the connection of ``role``'s primary (see
        :func:`same_connection`: on a Unix socket, every request did)."""
        with self._lock:
            group = self._groups.get(role)
            primary = group.primary if group is not None else None
            return primary is not None and same_connection(peer, primary.peer)

    def is_term(self, role: str, term: int) -> bool:
        """Whether the primary of ``role`` is still the one of ``term``."""
        with self._lock:
            group = self._groups.get(role)
            return group is not None and group.primary is not None and group.term == term

    def is_primary(self, stream: ClientStream) -> bool:
        with self._lock:
            group = self._groups.get(stream.role) if stream.role is not None else None
            return group is not None and group.primary is stream

    def close_all(self) -> None:
        """End every stream (server shutdown)."""
        with self._lock:
            for group in self._groups.values():
                for stream in group.streams:
                    stream.send(StreamClosed())
                group.streams.clear()
                group.set_primary(None)

    @staticmethod
    def _check_unique(group: _RoleGroup, stream: ClientStream, election_id: int | None) -> None:
        if election_id is None:
            return
        for other in group.streams:
            if other is not stream and other.election_id == election_id:
                raise invalid(f"election id {election_id} is already used by another client")

    def _elect(self, group: _RoleGroup, stream: ClientStream) -> None:
        role = stream.role or ""
        election_id = stream.election_id
        was_primary = group.primary is stream
        highest = group.highest_election_id
        if election_id is not None and (highest is None or election_id >= highest):
            group.highest_election_id = election_id
            group.set_primary(stream)
            self._notify(group, role, group.streams)
        elif was_primary:
            group.set_primary(None)
            self._notify(group, role, group.streams)
        else:
            self._notify(group, role, [stream])

    def _notify(self, group: _RoleGroup, role: str, streams: list[ClientStream]) -> None:
        for stream in streams:
            update = p4runtime_pb2.MasterArbitrationUpdate(device_id=self.device_id)
            if role:
                update.role.name = role
            if group.highest_election_id is not None:
                update.election_id.CopyFrom(election_id_message(group.highest_election_id))
            if group.primary is stream:
                update.status.CopyFrom(status_pb2.Status(code=code_pb2.OK))
            elif group.primary is not None:
                update.status.CopyFrom(
                    status_pb2.Status(
                        code=code_pb2.ALREADY_EXISTS, message="another client is primary"
                    )
                )
            else:
                update.status.CopyFrom(
                    status_pb2.Status(code=code_pb2.NOT_FOUND, message="no primary client")
                )
            stream.send(p4runtime_pb2.StreamMessageResponse(arbitration=update))
