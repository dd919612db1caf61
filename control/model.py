"""Domain model shared by workloads, policies, simulator and controller.

A tuning *experiment* (one successive-halving run or one Hyperband bracket)
runs *stages*; a stage runs *trials*; each trial iterates, and every
iteration ends with a synchronisation *coflow* made of *flows* between hosts.
The description here is static (what will run); progress lives in
:mod:`control.policies.base` snapshots.

Ports follow the big-switch convention: host ``h`` has a sender port
``h`` (its uplink) and a receiver port ``num_hosts + h`` (its downlink).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


class CoflowKey(NamedTuple):
    """Identifies one iteration's synchronisation coflow of one trial."""

    experiment_id: int
    stage_id: int
    trial_id: int
    iteration: int


class StageKey(NamedTuple):
    """Identifies one stage of one experiment (the unit of SCT)."""

    experiment_id: int
    stage_id: int


@dataclass(frozen=True, slots=True)
class Flow:
    """Bytes one host sends to another within a coflow."""

    src_host: int
    dst_host: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class TrialStage:
    """What one trial runs in one stage: ``iterations`` × (compute, then sync)."""

    trial_id: int
    iterations: int
    compute_s: float
    sync_flows: tuple[Flow, ...]
    hosts: tuple[int, ...] = ()

    @property
    def sync_bytes(self) -> int:
        return sum(flow.size_bytes for flow in self.sync_flows)


@dataclass(frozen=True, slots=True)
class Stage:
    """A stage ends when all of its trials have finished their iterations."""

    stage_id: int
    trials: tuple[TrialStage, ...]

    @property
    def total_bytes(self) -> int:
        return sum(t.iterations * t.sync_bytes for t in self.trials)


WEIGHT_RANGE = (1e-6, 1e6)
"""An experiment's weight, wherever it is read (events, workload files): finite and
positive, and bounded so that the policies' weight arithmetic (ratios and differences
of weights and byte counts) stays finite; weights of 1e308 overflowed to infinity, and
infinity minus infinity left the Beamer ranking without an order."""

MAX_KIND_CHARS = 64
"""The longest experiment ``kind`` (a tuner's name: ``sha``, ``hyperband``), wherever it
is read: the controller keeps it, and journals it, for every experiment it is told of."""


def kind_problem(kind: str) -> str | None:
    """What is wrong with an experiment ``kind``, wherever it is read (None: nothing). It
    is printed as it is (``beamer workload show``): no control character, no mark that
    reorders text, no lone surrogate, which no output encoding can write."""
    if len(kind) > MAX_KIND_CHARS:
        return f"{len(kind):,} characters, more than {MAX_KIND_CHARS}"
    if not kind.isprintable():
        bad = next(c for c in kind if not c.isprintable())
        return f"U+{ord(bad):04X} is not a printable character"
    return None


@dataclass(frozen=True, slots=True)
class Experiment:
    """A tuning experiment; stage i+1 is released when stage i completes."""

    experiment_id: int
    arrival_s: float
    stages: tuple[Stage, ...]
    kind: str = "sha"
    weight: float = 1.0

    @property
    def total_bytes(self) -> int:
        return sum(stage.total_bytes for stage in self.stages)


@dataclass(frozen=True, slots=True)
class Workload:
    """A whole run: hosts with their link rate and the experiments that arrive."""

    num_hosts: int
    link_bps: float
    experiments: tuple[Experiment, ...]
    meta: dict[str, str] = field(default_factory=dict)

    @property
    def num_ports(self) -> int:
        return 2 * self.num_hosts

    def sender_port(self, host: int) -> int:
        return host

    def receiver_port(self, host: int) -> int:
        return self.num_hosts + host

    def duplicate_id(self) -> str | None:
        """An id used twice where it must name one thing (an experiment in the workload,
        a stage in its experiment, a trial in its stage), or None. The readers refuse
        such files; a workload built in code is checked by the simulator, whose coflows
        are named by these ids."""
        experiments: set[int] = set()
        for experiment in self.experiments:
            if experiment.experiment_id in experiments:
                return f"experiment_id {experiment.experiment_id} is used twice"
            experiments.add(experiment.experiment_id)
            stages: set[int] = set()
            for stage in experiment.stages:
                where = f"experiment {experiment.experiment_id}"
                if stage.stage_id in stages:
                    return f"{where}: stage_id {stage.stage_id} is used twice"
                stages.add(stage.stage_id)
                trials = [trial.trial_id for trial in stage.trials]
                if len(set(trials)) < len(trials):
                    twice = next(t for t in trials if trials.count(t) > 1)
                    return f"{where} stage {stage.stage_id}: trial_id {twice} is used twice"
        return None
