"""What the tuner's driver side and its trainables agree on.

Ray Tune runs the driver (scheduler hook and callback) in one process and
each trial in another. The driver decides which stage of which experiment a
trial runs and in which slot (the controller's trial id), and reports the
stage-level events; the trial then runs that stage's iterations on the hosts
of its slot and reports its coflows. The driver hands the decision over as
one small JSON file per trial, written atomically *after* the controller has
accepted the events that make the trial's coflows legal, so a trial that can
read its assignment may start its coflows at once.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

Pattern = Literal["ring", "ps"]


@dataclass(frozen=True, slots=True)
class TrialAssignment:
    """The stage a trial runs now, as the controller knows it."""

    experiment_id: int
    """The bracket."""
    stage_id: int
    """The rung, from 0."""
    trial_id: int
    """The trial's slot in this stage: the controller's trial id (0..n_k - 1)."""
    hosts: tuple[str, ...]
    """Topology host names of the slot's workers, in the plan's order (``ps``: server first)."""
    first_iteration: int
    """Training iterations the trial had completed before this stage."""
    iterations: int
    """Iterations the trial runs in this stage; the controller numbers them 0..iterations-1."""


@dataclass(frozen=True, slots=True)
class HostEndpoint:
    """Where a topology host lives in the running emulation."""

    namespace: str | None
    """Network namespace of the host (``None``: the trainable's own, for tests)."""
    ip: str


@dataclass(frozen=True, slots=True)
class TuneNetwork:
    """Everything a trainable needs to reach its hosts and the controller."""

    hosts: dict[str, HostEndpoint]
    assignments_dir: str
    events_socket: str | None
    """The controller's Unix socket (``None``: no controller; coflow ids follow the
    convention ``trial_id << 16 | iteration``)."""
    pattern: Pattern = "ring"
    workers: int = 2
    """Data-parallel workers per trial (``ps`` adds a server host)."""
    extra: dict[str, str] = field(default_factory=dict)


def assignment_path(directory: str | Path, ray_trial_id: str) -> Path:
    return Path(directory) / f"{ray_trial_id}.json"


def write_assignment(directory: str | Path, ray_trial_id: str, assignment: TrialAssignment) -> None:
    """Replace the trial's assignment atomically (a reader sees the old or the new one)."""
    path = assignment_path(directory, ray_trial_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".assign-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            json.dump(asdict(assignment), stream)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read_assignment(directory: str | Path, ray_trial_id: str) -> TrialAssignment | None:
    """The trial's current assignment, or ``None`` when the driver has written none yet."""
    try:
        raw = json.loads(assignment_path(directory, ray_trial_id).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return TrialAssignment(
        experiment_id=int(raw["experiment_id"]),
        stage_id=int(raw["stage_id"]),
        trial_id=int(raw["trial_id"]),
        hosts=tuple(str(host) for host in raw["hosts"]),
        first_iteration=int(raw["first_iteration"]),
        iterations=int(raw["iterations"]),
    )
