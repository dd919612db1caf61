"""The hosts' own TCP counters over a run: retransmission timeouts and retransmitted
segments, summed over the host namespaces.

A stage that ends far later than the simulator predicts is most often one flow that
lost its last segments and waited out a retransmission timeout, about a second behind
the switch's deep queues. The counters tell such a run apart from a scheduling effect
without a packet trace. Each namespace keeps its own counters (``/proc/net/netstat``
and ``/proc/net/snmp`` as its threads see them), so they are read from a thread that
has entered it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from bmv2_topos import netns

_COUNTER_FILES = (Path("/proc/thread-self/net/netstat"), Path("/proc/thread-self/net/snmp"))
_TIMEOUTS = ("TcpExt", "TCPTimeouts")
_RETRANSMITTED = ("Tcp", "RetransSegs")


class CountersUnreadable(RuntimeError):
    """A counter file lacks a field this module reads (a kernel without it)."""


@dataclass(frozen=True, slots=True)
class TcpCounters:
    timeouts: int
    """Retransmission timeouts that fired (TcpExt TCPTimeouts)."""
    retransmitted_segments: int
    """Segments sent again, by a timeout or a fast retransmit (Tcp RetransSegs)."""

    def __add__(self, other: TcpCounters) -> TcpCounters:
        return TcpCounters(
            self.timeouts + other.timeouts,
            self.retransmitted_segments + other.retransmitted_segments,
        )

    def __sub__(self, other: TcpCounters) -> TcpCounters:
        return TcpCounters(
            self.timeouts - other.timeouts,
            self.retransmitted_segments - other.retransmitted_segments,
        )


NO_COUNTS = TcpCounters(0, 0)


def parse_counters(text: str) -> TcpCounters:
    """The counters from the text of ``/proc/net/netstat`` and ``/proc/net/snmp``: each
    group is a line of names and a line of values, both starting with ``Group:``."""
    values: dict[tuple[str, str], int] = {}
    lines = text.splitlines()
    for names_line, values_line in pairwise(lines):
        group, _, names = names_line.partition(":")
        value_group, _, numbers = values_line.partition(":")
        counts = numbers.split()
        if not group or value_group != group or not all(_is_int(n) for n in counts):
            continue  # a values line and the next group's names line
        values.update(
            ((group, name), int(n)) for name, n in zip(names.split(), counts, strict=False)
        )
    missing = [
        f"{group} {name}"
        for group, name in (_TIMEOUTS, _RETRANSMITTED)
        if (group, name) not in values
    ]
    if missing:
        raise CountersUnreadable(f"no {' or '.join(missing)} in the kernel's TCP counters")
    return TcpCounters(values[_TIMEOUTS], values[_RETRANSMITTED])


def _is_int(text: str) -> bool:
    return text.removeprefix("-").isdigit()


def _read_here() -> TcpCounters:
    return parse_counters("\n".join(path.read_text() for path in _COUNTER_FILES))


def read_counters(namespaces: Iterable[str]) -> TcpCounters | None:
    """The counters of ``namespaces``, summed; None where a kernel does not keep them
    (the run goes on: they explain a result, they are not one)."""
    total = NO_COUNTS
    try:
        for namespace in namespaces:
            total += netns.run_in_netns(namespace, _read_here)
    except (OSError, CountersUnreadable):
        return None
    return total


def counted_between(before: TcpCounters | None, after: TcpCounters | None) -> TcpCounters | None:
    return None if before is None or after is None else after - before
