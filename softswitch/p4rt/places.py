"""The server's stream places: who may keep a StreamChannel open when many want one.

At most ``limit`` streams hold a place. ``spare`` more may open and wait: at their first
arbitration each must make room by displacing the backup with the lowest election id
below its own (a stream that never arbitrated, or a backup without an election id,
counts lowest), or it is refused. Streams left open by tools (p4runtime-shell sessions
are backups with a low id) then cannot lock a controller out of its switch, while a
client without an election id of its own cannot displace anyone.
"""

from __future__ import annotations

import threading

import grpc

from softswitch.p4rt.arbitration import Arbitrator, ClientStream, StreamClosed
from softswitch.p4rt.status import P4RuntimeError


class StreamPlaces:
    def __init__(self, limit: int, spare: int) -> None:
        self.limit = limit
        self.spare = spare
        self._lock = threading.Lock()
        self._waiting: dict[ClientStream, bool] = {}  # stream -> still without a place

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

    def make_room(
        self, stream: ClientStream, election_id: int | None, arbitrator: Arbitrator
    ) -> P4RuntimeError | None:
        """Before ``stream`` first arbitrates: if it waits for a place, end the lowest
        backup below ``election_id`` and give ``stream`` its place; else the refusal that
        ends ``stream`` (nothing is arbitrated then)."""
        with self._lock:
            if not self._waiting.get(stream, False):
                return None
            victim = self._lowest_backup_below(election_id, arbitrator)
            if victim is None:
                return P4RuntimeError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"too many open streams (limit {self.limit}), and none is a backup with "
                    "an election id below this one's; close one and try again",
                )
            self._waiting[stream] = False
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
        return None

    def _lowest_backup_below(
        self, election_id: int | None, arbitrator: Arbitrator
    ) -> ClientStream | None:
        if election_id is None:
            return None
        lowest: ClientStream | None = None
        for other, waiting in self._waiting.items():  # oldest first among equals
            if waiting or other.closed or arbitrator.is_primary(other):
                continue
            if _rank(other) >= election_id:
                continue
            if lowest is None or _rank(other) < _rank(lowest):
                lowest = other
        return lowest


def _rank(stream: ClientStream) -> int:
    """A stream's election id for displacement: none counts lowest."""
    return -1 if stream.election_id is None else stream.election_id
