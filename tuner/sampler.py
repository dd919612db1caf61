"""What the switches held while a search ran, sampled from the controller's status."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any

from control.errors import UserError

_ENTRY_CLASS = re.compile(r"^(?:stage|coflow)_class\[.*\] -> set_class\(class_id=(\d+)\)$")
"""A stage or coflow entry as the status lists it (``control.entries`` formats them)."""


@dataclass
class SwitchSamples:
    """The most the switches held at once, and every class they were given."""

    samples: int = 0
    max_entries: int = 0
    classes: set[int] = field(default_factory=set)
    events_applied: int = 0

    def add(self, status: dict[str, Any]) -> None:
        self.samples += 1
        self.events_applied = max(self.events_applied, int(status.get("events_applied", 0)))
        for switch in status.get("switches", []):
            matches = [_ENTRY_CLASS.match(entry) for entry in switch.get("entries", [])]
            classes = [int(match.group(1)) for match in matches if match is not None]
            self.max_entries = max(self.max_entries, len(classes))
            self.classes.update(classes)


class StatusSampler:
    """Polls ``GET /v1/status`` every ``interval_s`` on its own thread until stopped."""

    def __init__(self, address: str, interval_s: float = 0.25) -> None:
        self.address = address
        self.interval_s = interval_s
        self.result = SwitchSamples()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-sampler", daemon=True)

    def __enter__(self) -> StatusSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        from control.events import EventClient

        with EventClient(self.address) as client:
            while not self._stop.wait(self.interval_s):
                try:
                    self.result.add(client.status())
                except UserError:
                    continue  # the controller is busy or gone: the watchdog says which
