"""Where the tuner's events go: the controller, a JSON-lines file, or nowhere.

Every sink has the methods of :class:`control.events.EventClient` that the
tuner uses, so the driver and the trainables talk to a controller and to a
recording file alike.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol

from bmv2_topos.agent import EventSink as AgentEventSink
from control.entries import coflow_tag
from control.errors import UserError
from control.events import (
    CoflowFinished,
    CoflowStarted,
    Event,
    EventClient,
    ExperimentFinished,
    ExperimentReleased,
    StageCompleted,
    StageReleased,
    TrialStarted,
    TrialStopped,
    event_to_json,
)
from control.model import CoflowKey, Experiment


class EventSink(AgentEventSink, Protocol):
    """The event methods of :class:`control.events.EventClient`: the agents' and the
    two a tuner adds (a trial stopped inside a rung, a bracket ended early)."""

    def trial_stopped(self, experiment_id: int, stage_id: int, trial_id: int) -> Any: ...
    def experiment_finished(self, experiment_id: int) -> Any: ...
    def close(self) -> None: ...


SINK_METHODS = tuple(
    sorted(
        {
            name
            for protocol in EventSink.__mro__
            if getattr(protocol, "_is_protocol", False)
            for name, member in vars(protocol).items()
            if callable(member) and not name.startswith("_")
        }
    )
)
"""The methods an object given as a controller must have (those of :class:`EventSink`)."""


class SinkBase:
    """The event methods over one :meth:`send`."""

    def send(self, event: Event) -> None:
        raise NotImplementedError

    def experiment_released(self, experiment: Experiment) -> None:
        self.send(ExperimentReleased(experiment))

    def stage_released(self, experiment_id: int, stage_id: int) -> None:
        self.send(StageReleased(experiment_id, stage_id))

    def trial_started(self, experiment_id: int, stage_id: int, trial_id: int) -> None:
        self.send(TrialStarted(experiment_id, stage_id, trial_id))

    def trial_stopped(self, experiment_id: int, stage_id: int, trial_id: int) -> None:
        self.send(TrialStopped(experiment_id, stage_id, trial_id))

    def coflow_started(
        self, experiment_id: int, stage_id: int, trial_id: int, iteration: int
    ) -> int:
        """The tag value the controller would answer."""
        self.send(CoflowStarted(experiment_id, stage_id, trial_id, iteration))
        return coflow_tag(CoflowKey(experiment_id, stage_id, trial_id, iteration))

    def coflow_finished(
        self, experiment_id: int, stage_id: int, trial_id: int, iteration: int
    ) -> None:
        self.send(CoflowFinished(experiment_id, stage_id, trial_id, iteration))

    def stage_completed(self, experiment_id: int, stage_id: int) -> None:
        self.send(StageCompleted(experiment_id, stage_id))

    def experiment_finished(self, experiment_id: int) -> None:
        self.send(ExperimentFinished(experiment_id))

    def close(self) -> None:
        return None


class NullSink(SinkBase):
    """No controller: events go nowhere (coflow ids are still the controller's tags)."""

    def send(self, event: Event) -> None:
        return None


class JsonlSink(SinkBase):
    """Appends each event, in the controller's JSON form, as one line of a file.

    Several processes may share the file (the driver and its trainables): each
    line is one ``write`` on a descriptor opened for appending, so lines do not
    interleave, and their order is the order the events happened in.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def send(self, event: Event) -> None:
        line = json.dumps(event_to_json(event), separators=(",", ":")) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The events a :class:`JsonlSink` wrote, in order."""
    text = Path(path).read_text(encoding="utf-8") if Path(path).exists() else ""
    return [json.loads(line) for line in text.splitlines() if line]


def connect(controller: str | Path | EventSink | None) -> EventSink:
    """A sink for ``controller``: ``None`` (no controller), ``"HOST:PORT"`` or a Unix
    socket path (the controller's event API), or any object with the event methods."""
    if controller is None:
        return NullSink()
    if isinstance(controller, str | Path):
        return EventClient(controller)
    missing = [name for name in SINK_METHODS if not callable(getattr(controller, name, None))]
    if missing:
        raise UserError(
            f"controller: {type(controller).__name__} is not 'HOST:PORT', a Unix socket "
            f"path, None or an object with the event methods (it lacks {', '.join(missing)})"
        )
    return controller
