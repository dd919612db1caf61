"""The one interface every scheduling policy implements.

A policy sees a :class:`Snapshot` of what is active and returns a
:class:`Ranking`: groups of coflows from most to least urgent. The simulator
turns a ranking into rates, the controller into switch table entries, both
after :mod:`control.quantize` maps it onto the available priority classes.
Policies know nothing of sockets, P4Runtime or simulated time steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Literal, Protocol

from control.model import CoflowKey, Experiment, StageKey

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
