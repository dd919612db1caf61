"""The one interface every scheduling policy implements.

A policy sees a :class:`Snapshot` of what is active and returns a
:class:`Ranking`: groups of coflows from most to least urgent. The simulator
turns a ranking into rates, the controller into switch table entries, both
after :mod:`control.quantize` maps it onto the available priority classes.
Policies know nothing of sockets, P4Runtime or simulated time steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol, runtime_checkable

import numpy as np

from control.model import CoflowKey, Experiment, StageKey

if TYPE_CHECKING:
    from control.quantize import Strategy  # quantize imports this module

Allocator = Literal["priority", "madd", "greedy"]


@dataclass(frozen=True, slots=True)
class CoflowState:
    """An active coflow as a policy sees it (bytes remaining and sent so far)."""

    key: CoflowKey
    arrival_s: float
    total_bytes: float
    sent_bytes: float
    remaining_by_port: Mapping[int, float]
    num_flows: int

    @property
    def remaining_bytes(self) -> float:
        return self.total_bytes - self.sent_bytes

    @property
    def stage(self) -> StageKey:
        return StageKey(self.key.experiment_id, self.key.stage_id)


@dataclass(frozen=True, slots=True)
class ExperimentState:
    """Progress of an active experiment: its plan and where it stands in it."""

    experiment: Experiment
    stage_index: int
    stage_release_s: float
    iterations_done: Mapping[int, int]
    """Completed iterations per trial id of the running stage."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything active at ``now_s``; ports use the big-switch numbering."""

    now_s: float
    num_hosts: int
    port_capacity_bps: tuple[float, ...]
    coflows: tuple[CoflowState, ...]
    experiments: Mapping[int, ExperimentState] = field(default_factory=dict)
    num_classes: int | None = None
    """Priority classes the ranking will be mapped onto (None: one per group). Most
    policies ignore it; a policy may rank differently when classes are scarce."""
    class_strategy: Strategy = "rank"
    """How the groups are mapped onto those classes (:mod:`control.quantize`): a policy
    that simulates its candidates must map them as the run does."""


@dataclass(frozen=True, slots=True)
class Ranking:
    """Coflow groups, most urgent first; a group shares one priority."""

    groups: tuple[tuple[CoflowKey, ...], ...]

    def order(self) -> list[CoflowKey]:
        return [key for group in self.groups for key in group]


class Policy(Protocol):
    """Snapshot in, ranking out. ``allocator`` tells the simulator how to set rates."""

    name: ClassVar[str]
    clairvoyant: ClassVar[bool]
    allocator: ClassVar[Allocator]

    def rank(self, snapshot: Snapshot) -> Ranking: ...


@runtime_checkable
class SearchesInBackground(Protocol):
    """A policy whose ranking may wait on a long search (``beamer-lookahead``). A controller
    asks it to search off its thread and ranks again when ``notify`` is called."""

    def search_in_background(self, notify: Callable[[], None]) -> None: ...

    def close(self) -> None: ...


class PortVector(Mapping[int, float]):
    """A read-only port → bytes mapping over a dense array (zeros are absent).

    The simulator keeps per-port demand in numpy; wrapping the row spares it
    from building a dict per coflow on every re-ranking, and lets
    :func:`demand_matrix` stack rows without a Python loop over ports.
    """

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __getitem__(self, port: int) -> float:
        if not 0 <= port < len(self.array) or self.array[port] == 0:
            raise KeyError(port)
        return float(self.array[port])

    def __iter__(self) -> Iterator[int]:
        return iter(int(p) for p in np.flatnonzero(self.array))

    def __len__(self) -> int:
        return int(np.count_nonzero(self.array))


def add_port_bytes(vector: np.ndarray, ports: Mapping[int, float]) -> None:
    """``vector[port] += bytes`` for each port of ``ports`` (dense rows in one numpy add)."""
    if isinstance(ports, PortVector):
        if len(ports.array) == len(vector):
            vector += ports.array
        else:
            vector[: len(ports.array)] += ports.array
    else:
        for port, size in ports.items():
            vector[port] += size


def demand_matrix(coflows: Sequence[CoflowState], num_ports: int) -> np.ndarray:
    """Remaining bytes, one row per coflow and one column per port."""
    rows = [coflow.remaining_by_port for coflow in coflows]
    dense = [
        row.array for row in rows if isinstance(row, PortVector) and len(row.array) == num_ports
    ]
    if rows and len(dense) == len(rows):
        # Dense rows (the simulator's and the controller's), stacked in one copy.
        return np.array(dense, dtype=float)
    matrix = np.zeros((len(coflows), num_ports))
    for index, ports in enumerate(rows):
        add_port_bytes(matrix[index], ports)
    return matrix


class BasePolicy:
    """Defaults shared by the policies: clairvoyant, strict-priority rates, no progress hooks."""

    name: ClassVar[str] = ""
    clairvoyant: ClassVar[bool] = True
    allocator: ClassVar[Allocator] = "priority"

    def rank(self, snapshot: Snapshot) -> Ranking:
        raise NotImplementedError

    def next_rerank_sent_bytes(self, coflow: CoflowState) -> float | None:
        """Sent bytes at which ``coflow``'s rank may change by progress alone (None: never).

        Non-clairvoyant policies (Aalo) re-rank when a coflow crosses a
        threshold; the simulator schedules an event at that instant.
        """
        return None
