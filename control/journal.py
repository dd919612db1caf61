"""The controller's event journal: the accepted events of the active experiments, one
JSON line each, so a restarted controller rebuilds its schedule and finds the switches
already right.

A line is appended before its event is applied and taken back if the schedule refuses
the event, so the file holds exactly the accepted events. When an experiment ends, the
file is rewritten (temporary file, then rename) without its events. A controller that
dies while appending leaves a torn last line: the next start drops it with a warning
(its event was never answered) and keeps everything before it.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from control.errors import UserError
from control.events import Event, JSONError, decode_json, event_to_json
from control.files import atomic_write_text, output_file, read_bytes

log = logging.getLogger(__name__)


class JournalWriteError(Exception):
    """The journal could not be written; the event was not applied (HTTP 500)."""


def _line(event: Event) -> str:
    return json.dumps(event_to_json(event), sort_keys=True)


class EventJournal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._kept: list[tuple[int, str]] = []

    def check_writable(self) -> None:
        """Fail at start-up, not at the first event: the file must open for appending and
        its directory must take the temporary file of a rewrite."""
        if os.path.lexists(self.path):
            try:
                output_file(self.path)  # a FIFO would block the open, a device take no file
            except UserError as error:
                raise UserError(f"cannot keep the event journal: {error}") from None
        try:
            with self.path.open("a", encoding="utf-8"):
                pass
            with tempfile.NamedTemporaryFile(dir=self.path.parent, prefix=f".{self.path.name}."):
                pass
        except OSError as error:
            raise UserError(
                f"{self.path}: cannot write the event journal: {error.strerror or error}"
            ) from None

    def load(self) -> list[tuple[int, Any]]:
        """(line number, decoded event) of every journalled event; a missing file is empty.

        A last line without its end of line that does not decode is a record torn by a
        crash: it is cut off the file with a warning. Any other bad line is an error
        naming the file and line."""
        if not os.path.exists(self.path):  # nothing yet (a link may name a file to come)
            return []
        data = read_bytes(self.path, what="event journal")  # a regular file, bounded
        lines = data.split(b"\n")
        tail = lines.pop()  # what follows the last end of line (empty in a whole file)
        events = [
            (number, self._decode(line, number))
            for number, line in enumerate(lines, start=1)
            if line.strip()
        ]
        if tail.strip():
            number = len(lines) + 1
            try:
                events.append((number, self._decode(tail, number)))
            except UserError as error:
                log.warning(
                    "%s:%d: dropping a torn last record (%d bytes, no end of line: the "
                    "controller stopped while writing it): %s",
                    self.path,
                    number,
                    len(tail),
                    str(error).rpartition(": ")[2],
                )
                self._cut(len(data) - len(tail))
            else:
                # Whole but unterminated: end the line so the next append starts anew.
                self._write_tail(b"\n")
        return events

    def _decode(self, line: bytes, number: int) -> Any:
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as error:
            raise UserError(
                f"{self.path}:{number}: not UTF-8 text "
                f"(byte 0x{line[error.start]:02x} at column {error.start + 1})"
            ) from None
        try:
            return decode_json(line)
        except JSONError as error:
            raise UserError(f"{self.path}:{number}: not a JSON event: {error}") from None

    def _cut(self, size: int) -> None:
        try:
            os.truncate(self.path, size)
        except OSError as error:
            raise UserError(
                f"{self.path}: cannot drop the torn last record: {error.strerror}"
            ) from None

    def _write_tail(self, data: bytes) -> None:
        try:
            with self.path.open("ab") as handle:
                handle.write(data)
        except OSError as error:
            raise UserError(f"{self.path}: cannot write: {error.strerror}") from None

    def append(self, experiment_id: int, event: Event) -> int:
        """Write one event's line; returns the file's size before it, for :meth:`undo`."""
        line = _line(event)
        try:
            with self.path.open("a", encoding="utf-8") as handle:
                mark = handle.tell()
                handle.write(line + "\n")
        except OSError as error:
            raise JournalWriteError(
                f"{self.path}: cannot write the event journal: {error.strerror or error}"
            ) from None
        self._kept.append((experiment_id, line))
        return mark

    def undo(self, mark: int) -> None:
        """Take back the last :meth:`append` (its event was refused)."""
        self._kept.pop()
        try:
            os.truncate(self.path, mark)
        except OSError as error:
            # The line stays; a replay would refuse it, so say so loudly.
            log.error("%s: cannot take back a refused event: %s", self.path, error.strerror)

    def forget(self, experiment_id: int) -> None:
        """Drop an ended experiment's lines. If the rewrite fails the file keeps them,
        with the event that ended the experiment, so a replay still ends it."""
        self._kept = [(e, line) for e, line in self._kept if e != experiment_id]
        try:
            atomic_write_text(self.path, "".join(line + "\n" for _, line in self._kept))
        except UserError as error:
            log.warning("event journal not compacted: %s", error)

    def remember(self, experiment_id: int, event: Event) -> None:
        """Record a replayed event without writing it again."""
        self._kept.append((experiment_id, _line(event)))

    def drop(self, experiment_id: int) -> None:
        """Forget an experiment that ended during the replay (the file is compacted at
        the next rewrite)."""
        self._kept = [(e, line) for e, line in self._kept if e != experiment_id]
