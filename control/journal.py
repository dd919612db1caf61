"""The controller's event journal: the accepted events of the active experiments, one
JSON line each, so a restarted controller rebuilds its schedule and finds the switches
already right.

A line is appended before its event is applied and taken back if the schedule refuses
the event, so the file holds exactly the accepted events; a line that cannot be written
whole (a full disk) is cut off again, so the file is as it was and the event is refused.
When an experiment ends, the file is rewritten (temporary file, then rename) without its
events. A controller that dies while appending leaves a torn last line: the next start
drops it with a warning (its event was never answered) and keeps everything before it.

Events name hosts by their index in the topology, so the first line records the host
names in index order (:data:`FORMAT`), and a journal written for other hosts is refused
rather than replayed onto the wrong ones. A journal written before that line existed is
replayed as it is, with a warning. One controller at a time keeps a journal: it holds a
lock on ``JOURNAL.lock`` beside it for as long as it runs.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from control.errors import UserError
from control.events import Event, EventNotStored, JSONError, decode_json, event_to_json
from control.files import atomic_write_text, output_file, read_bytes

log = logging.getLogger(__name__)

FORMAT = 1
"""The journal's format, in its first line: ``{"beamer_journal": 1, "hosts": [...]}``."""
HEADER_KEY = "beamer_journal"


class JournalWriteError(EventNotStored):
    """The journal could not be written; the event was not applied (HTTP 507)."""


def _line(event: Event) -> str:
    return json.dumps(event_to_json(event), sort_keys=True)


def _header(hosts: Sequence[str]) -> str:
    return json.dumps({HEADER_KEY: FORMAT, "hosts": list(hosts)})


def _is_header(value: Any) -> bool:
    return isinstance(value, dict) and HEADER_KEY in value


class EventJournal:
    """``hosts``: the topology's host names in index order, recorded in the journal's
    first line and checked against it at :meth:`load` (``None``: neither)."""

    def __init__(self, path: Path, hosts: Sequence[str] | None = None) -> None:
        self.path = path
        self.hosts = list(hosts) if hosts is not None else None
        self.lock_path = Path(os.path.realpath(path) + ".lock")
        self._lock_fd: int | None = None
        self._made_lock = False
        """This controller made ``JOURNAL.lock`` (see :meth:`abandon`)."""
        self._kept: list[tuple[int, str]] = []
        self._torn_at: int | None = None
        """Where a line whose write failed began, when it could not be cut off then."""

    def check_writable(self) -> None:
        """Fail at start-up, not at the first event: the file must open for appending and
        its directory must take the temporary file of a rewrite. Then take the lock, so
        a second controller on this journal stops here. A journal not there yet is made
        by the first event, not here: a controller that stops before it leaves none."""
        try:
            if os.path.lexists(self.path):
                try:
                    output_file(self.path)  # a FIFO would block the open, a device take no file
                except UserError as error:
                    raise UserError(f"cannot keep the event journal: {error}") from None
                with self.path.open("a", encoding="utf-8"):
                    pass
            with tempfile.NamedTemporaryFile(dir=self.path.parent, prefix=f".{self.path.name}."):
                pass
        except OSError as error:
            raise UserError(
                f"{self.path}: cannot write the event journal: {error.strerror or error}"
            ) from None
        self._lock()

    def _lock(self) -> None:
        """Lock ``JOURNAL.lock`` for this process: another controller would compact the
        journal from its own memory and drop this one's events. The journal itself is
        replaced by each rewrite, so it cannot carry the lock. A POSIX record lock is the
        process's: it goes when the process ends, however it ends, and controllers in one
        process (tests) share it."""
        if self._lock_fd is not None:
            return
        try:
            # Not through a link, and only a regular file: the pid is written into it.
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
            try:
                fd = os.open(self.lock_path, flags | os.O_EXCL, 0o644)
                made = True
            except FileExistsError:
                fd = os.open(self.lock_path, flags, 0o644)
                made = False
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise OSError(errno.EINVAL, "not a regular file")
        except OSError as error:
            raise UserError(
                f"{self.lock_path}: cannot lock the event journal: {error.strerror or error}"
            ) from None
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = ""
            with contextlib.suppress(OSError):
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            if error.errno not in (errno.EACCES, errno.EAGAIN):
                raise UserError(
                    f"{self.lock_path}: cannot lock the event journal: {error.strerror}"
                ) from None
            who = (
                f"another controller (pid {holder})" if holder.isdecimal() else "another controller"
            )
            raise UserError(
                f"{self.path}: {who} holds this event journal; stop it first or give "
                "this one another journal"
            ) from None
        with contextlib.suppress(OSError):  # the pid only helps the message above
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd
        self._made_lock = made

    def abandon(self) -> None:
        """Release the lock of a controller that refuses to start, and remove the lock file
        if this controller made it: a refused start leaves nothing beside the user's file.
        The file goes while the lock is held, so no controller waits on it."""
        if self._lock_fd is not None and self._made_lock:
            with contextlib.suppress(OSError):
                os.unlink(self.lock_path)
        self.close()

    def close(self) -> None:
        """Release the lock (on stop); the lock file stays for the next controller."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the record lock
            self._lock_fd = None

    def load(self) -> list[tuple[int, Any]]:
        """(line number, decoded event) of every journalled event; a missing file is empty.

        A first line recording other hosts than :attr:`hosts` is an error. A last line
        without its end of line that does not decode is a record torn by a crash: it is
        cut off the file with a warning. Any other bad line is an error naming the file
        and line."""
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
                self._cut(len(data) - len(tail), "drop the torn last record")
            else:
                # Whole but unterminated: end the line so the next append starts anew.
                self._write_tail(b"\n")
        if events and events[0][0] == 1 and _is_header(events[0][1]):
            header = events.pop(0)[1]
            if not self._same_hosts(header, replaying=bool(events)):
                # Nothing to replay onto the wrong hosts: start anew, with this topology's.
                log.info("%s: no events kept; started anew for this topology", self.path)
                self._cut(0, "empty the journal")
        elif events and self.hosts is not None:
            log.warning(
                "%s: written before journals recorded their hosts: its events are "
                "taken to name this topology's hosts by index",
                self.path,
            )
        return events

    def _same_hosts(self, header: dict[str, Any], replaying: bool) -> bool:
        """Whether the journal was written for :attr:`hosts`; with events to replay, it
        must be (their host indices would name other hosts here), and of this format."""
        if header.get(HEADER_KEY) != FORMAT:
            raise UserError(
                f"{self.path}:1: a journal of format {_show(header.get(HEADER_KEY))}; "
                f"this controller reads format {FORMAT}"
            )
        hosts = header.get("hosts")
        if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
            raise UserError(f"{self.path}:1: the journal's hosts are not a list of names")
        if self.hosts is None or hosts == self.hosts:
            return True
        if not replaying:
            return False
        if len(hosts) != len(self.hosts):
            difference = f"{len(hosts)} hosts, the topology has {len(self.hosts)}"
        else:
            index = next(
                i for i, (a, b) in enumerate(zip(hosts, self.hosts, strict=True)) if a != b
            )
            ours = _show(self.hosts[index])
            difference = (
                f"host {index + 1} of {len(hosts)} is {_show(hosts[index])}, in the topology {ours}"
            )
        raise UserError(
            f"{self.path}:1: written for other hosts ({difference}): its events name "
            "hosts by index; start with the topology it was written for, or another journal"
        )

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

    def _cut(self, size: int, what: str) -> None:
        try:
            os.truncate(self.path, size)
        except OSError as error:
            raise UserError(f"{self.path}: cannot {what}: {error.strerror}") from None

    def _write_tail(self, data: bytes) -> None:
        try:
            with self.path.open("ab") as handle:
                handle.write(data)
        except OSError as error:
            raise UserError(f"{self.path}: cannot write: {error.strerror}") from None

    def append(self, experiment_id: int, event: Event) -> int:
        """Write one event's line; returns the file's size before it, for :meth:`undo`.

        Written unbuffered, so a failure is seen here; a line written in part (a full
        disk) is cut off again, and the file is as it was."""
        line = _line(event)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as error:
            raise self._write_error(error) from None
        try:
            if self._torn_at is not None:  # a line that failed earlier and stayed
                os.ftruncate(fd, self._torn_at)
                self._torn_at = None
            mark = os.lseek(fd, 0, os.SEEK_END)
            data = (line + "\n").encode("utf-8")
            if mark == 0 and self.hosts is not None:
                data = (_header(self.hosts) + "\n").encode("utf-8") + data
            try:
                _write_all(fd, data)
            except OSError as error:
                self._take_back(fd, mark)
                raise self._write_error(error) from None
        except OSError as error:  # the earlier line could not be cut off this time either
            raise self._write_error(error) from None
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._kept.append((experiment_id, line))
        return mark

    def _take_back(self, fd: int, mark: int) -> None:
        try:
            os.ftruncate(fd, mark)
        except OSError as error:
            self._torn_at = mark  # cut off before the next line is written
            log.error("%s: cannot cut off a line written in part: %s", self.path, error.strerror)

    def _write_error(self, error: OSError) -> JournalWriteError:
        return JournalWriteError(
            f"{self.path}: cannot write the event journal: {error.strerror or error}"
        )

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
        lines = [line for _, line in self._kept]
        if self.hosts is not None:
            lines.insert(0, _header(self.hosts))
        try:
            atomic_write_text(self.path, "".join(line + "\n" for line in lines))
        except UserError as error:
            log.warning("event journal not compacted: %s", error)

    def remember(self, experiment_id: int, event: Event) -> None:
        """Record a replayed event without writing it again."""
        self._kept.append((experiment_id, _line(event)))

    def drop(self, experiment_id: int) -> None:
        """Forget an experiment that ended during the replay (the file is compacted at
        the next rewrite)."""
        self._kept = [(e, line) for e, line in self._kept if e != experiment_id]


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` until all of ``data`` is written (a write may take only part)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _show(value: Any) -> str:
    return json.dumps(value)[:40]
