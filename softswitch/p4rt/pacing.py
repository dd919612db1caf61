"""A stream's share of the event loop: what its messages cost is paid back in pauses.

Every StreamChannel message is parsed and handled on the event loop that serves every
RPC. Each is small (at most 16 KiB), but pure-Python protobuf takes ~10 ms for 16 KiB of
tiny fields, and eight streams sending such messages back to back used to hold the loop
so long that the primary's writes missed their deadlines. A stream whose messages cost
more than its share stops being read for a while (HTTP/2 flow control then holds its
client back): a flood slows only the stream that sends it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

STREAM_LOOP_SHARE = 0.02
"""The part of the loop's time one stream's messages may take in the long run: twenty
streams (every place and every spare) flooding together leave it 60 % for the rest."""

STREAM_BURST_S = 0.05
"""Loop time a stream may take at once before it is paced: thousands of arbitration
updates, at tens of microseconds each."""


@dataclass
class LoopShare:
    """A stream's debt of loop time: grows by what each message cost, shrinks at
    ``share`` seconds a second; past ``burst_s`` the stream pauses until it is back."""

    share: float = STREAM_LOOP_SHARE
    burst_s: float = STREAM_BURST_S
    clock: Callable[[], float] = time.monotonic
    _debt_s: float = 0.0
    _paid_at: float | None = field(default=None, repr=False)

    def pause_after(self, cost_s: float) -> float:
        """Seconds to stop reading the stream after a message that cost ``cost_s``."""
        now = self.clock()
        paid_s = 0.0 if self._paid_at is None else max(0.0, now - self._paid_at) * self.share
        self._debt_s = max(0.0, self._debt_s - paid_s) + cost_s
        self._paid_at = now
        excess_s = self._debt_s - self.burst_s
        return excess_s / self.share if excess_s > 0.0 else 0.0
