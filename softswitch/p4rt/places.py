"""The server's stream places: who may keep a StreamChannel open when many want one.

At most ``limit`` streams hold a place. ``spare`` more may open and wait: at their first
arbitration each must make room by displacing the backup with the lowest election id
below its own (a stream that never arbitrated, or a backup without an election id,
counts lowest), or it is refused. Streams left open by tools (p4runtime-shell sessions
are backups with a low id) then cannot lock a controller out of its switch, while a
client without an election id of its own cannot displace anyone.

A primary is never displaced, and any client that picks a role name no one uses is
that role's primary: so streams of named roles hold at most ``limit - default_places``
places together. A stream of a named role past that must displace a backup of a named
role below its own id, or it is refused; the places left are the default role's, where
the controller arbitrates.
"""

from __future__ import annotations

import threading

import grpc

from softswitch.p4rt.arbitration import Arbitrator, ClientStream, StreamClosed
from softswitch.p4rt.status import P4RuntimeError

DEFAULT_ROLE = ""


class StreamPlaces:
    def __init__(self, limit: int, spare: int, default_places: int = 0) -> None:
        self.limit = limit
        self.spare = spare
        self.named_limit = limit - default_places
        self._lock = threading.Lock()
        self._waiting: dict[ClientStream, bool] = {}  # stream -> still without a place
        self._roles: dict[ClientStream, str] = {}  # stream -> the role of its arbitration

    def enter(self, stream: ClientStream) -> bool:
        """Admit ``stream`` to a place, or to wait for one; False when even the spare
        room is taken."""
        with self._lock:
            live = sum(not other.closed for other in self._waiting)
            if live >= self.limit + self.spare:
                return False
            self._waiting[stream] = live >= self.limit
            return True

    def leave(self, stream: ClientStream) -> None:
        with self._lock:
            self._waiting.pop(stream, None)
            self._roles.pop(stream, None)

    def make_room(
        self,
        stream: ClientStream,
        election_id: int | None,
        arbitrator: Arbitrator,
        role: str = DEFAULT_ROLE,
    ) -> P4RuntimeError | None:
        """Before ``stream`` first arbitrates (for ``role``): if it waits for a place, or
        its role is named and the named roles' places are taken, end the lowest backup
        below ``election_id`` (of a named role, in the second case) and give ``stream``
        its place; else the refusal that ends ``stream`` (nothing is arbitrated then)."""
        with self._lock:
            waiting = self._waiting.get(stream)
            if waiting is None:
                return None  # gone already
            named = role != DEFAULT_ROLE
            named_full = named and self._named_holding() >= self.named_limit
            if not waiting and not named_full:
                self._roles[stream] = role
                return None
            victim = self._lowest_backup_below(election_id, arbitrator, named_only=named_full)
            if victim is None:
                reason = (
                    f"streams of named roles hold {self.named_limit} of the {self.limit} "
                    "places (the rest are the default role's), and none is a backup of a "
                    "named role"
                    if named_full
                    else f"too many open streams (limit {self.limit}), and none is a backup"
                )
                return P4RuntimeError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"{reason} with an election id below this one's; close one and try again",
                )
            self._waiting[stream] = False
            self._roles[stream] = role
            # Closed now (before another waiting stream looks), out of arbitration at once
            # (its call may wait behind replies its client does not read).
            victim.send(
                StreamClosed(
                    P4RuntimeError(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"displaced: all {self.limit} stream places are taken and a client "
                        "with a higher election id needs one",
                    )
                )
            )
            arbitrator.remove(victim)
            self._roles.pop(victim, None)
        return None

    def _named_holding(self) -> int:
        """Streams of named roles that hold a place."""
        return sum(
            role != DEFAULT_ROLE and not other.closed and not self._waiting.get(other, True)
            for other, role in self._roles.items()
        )

    def _lowest_backup_below(
        self, election_id: int | None, arbitrator: Arbitrator, named_only: bool = False
    ) -> ClientStream | None:
        if election_id is None:
            return None
        lowest: ClientStream | None = None
        for other, waiting in self._waiting.items():  # oldest first among equals
            if waiting or other.closed or arbitrator.is_primary(other):
                continue
            if named_only and self._roles.get(other, DEFAULT_ROLE) == DEFAULT_ROLE:
                continue
            if _rank(other) >= election_id:
                continue
            if lowest is None or _rank(other) < _rank(lowest):
                lowest = other
        return lowest


def _rank(stream: ClientStream) -> int:
    """A stream's election id for displacement: none counts lowest."""
    return -1 if stream.election_id is None else stream.election_id
