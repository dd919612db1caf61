"""The event journal: checked at start-up, a torn last record dropped with a warning,
bytes that are not UTF-8 named, refused or unwritable events never half-kept, a line
the disk takes only in part cut off again, one controller per journal, and a journal
written for other hosts refused."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from controller_process import REPO, controller_argv, write_topology

from control.controller import Controller, ControllerConfig, PipelineArtifacts
from control.controller_cli import DEFAULT_P4, embedded_artifacts, load_policy
from control.errors import UserError
from control.events import Event, EventError, parse_event
from control.journal import EventJournal, JournalWriteError
from control.model import CoflowKey
from control.topology import load_topology


@pytest.fixture(scope="module")
def artifacts() -> PipelineArtifacts:
    return embedded_artifacts(DEFAULT_P4)


def _controller(tmp_path: Path, artifacts: PipelineArtifacts, journal: Path) -> Controller:
    """A controller that is never started: events change its schedule, no switch is written."""
    topology = load_topology(write_topology(tmp_path, "127.0.0.1:1"))
    policy, assign = load_policy("beamer", 8)
    config = ControllerConfig(
        topology=topology,
        artifacts={"embedded": artifacts},
        policy_name="beamer",
        journal_path=journal,
    )
    return Controller(config, policy, assign)


def _events(experiment_id: int = 1) -> list[dict[str, Any]]:
    plan = {
        "experiment_id": experiment_id,
        "stages": [
            {
                "stage_id": 0,
                "trials": [
                    {
                        "trial_id": 0,
                        "iterations": 4,
                        "flows": [{"src": "h1", "dst": "h2", "size_bytes": 1000}],
                    }
                ],
            }
        ],
    }
    ids = {"experiment_id": experiment_id, "stage_id": 0}
    return [
        {"type": "experiment_released", "experiment": plan},
        {"type": "stage_released", **ids},
        {"type": "trial_started", **ids, "trial_id": 0},
        {"type": "coflow_started", **ids, "trial_id": 0, "iteration": 0},
    ]


def _coflows(controller: Controller) -> list[CoflowKey]:
    return sorted(controller.state.coflows)


FIRST_COFLOW_FINISHED = {
    "type": "coflow_finished",
    "experiment_id": 1,
    "stage_id": 0,
    "trial_id": 0,
    "iteration": 0,
}
"""Trial 0's first coflow ends: the event after :func:`_events` in every replay test."""


def _refused_at_start(tmp_path: Path, journal: Path, extra: Sequence[str] = ()) -> list[str]:
    """The error lines of a controller started with ``--journal journal`` and ``extra``
    (exit 2)."""
    topo = write_topology(tmp_path, "127.0.0.1:1")
    result = subprocess.run(
        controller_argv(topo, tmp_path / "c.sock", extra=["--journal", str(journal), *extra]),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    return result.stderr.splitlines()


def test_an_unwritable_journal_stops_the_controller_at_start(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    journal = blocker / "events.jsonl"
    assert _refused_at_start(tmp_path, journal) == [
        f"beamer: error: {journal}: cannot write the event journal: Not a directory"
    ]


def test_a_journal_that_is_no_regular_file_stops_the_controller_at_start(
    tmp_path: Path,
) -> None:
    """A FIFO would block the controller's start for ever; a device such as /dev/zero
    would be read until memory ran out (and, renamed over, replaced)."""
    fifo = tmp_path / "events.fifo"
    os.mkfifo(fifo)
    assert _refused_at_start(tmp_path, fifo) == [
        f"beamer: error: cannot keep the event journal: {fifo}: cannot write: "
        "is a FIFO (named pipe)"
    ]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_start_refused_for_its_events_address_leaves_no_journal_or_lock(
    tmp_path: Path,
) -> None:
    """The address is taken before the journal: a refused start has nothing to keep, and
    left an empty journal and its lock file behind."""
    journal = tmp_path / "events.jsonl"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        lines = _refused_at_start(tmp_path, journal, ["--events-addr", f"127.0.0.1:{port}"])
    assert lines == [
        f"beamer: error: events API: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["topo.json"]


def test_a_file_that_is_no_journal_is_refused_and_nothing_is_left_beside_it(
    tmp_path: Path,
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a journal\n")
    (line,) = _refused_at_start(tmp_path, notes)
    assert line.startswith(f"beamer: error: {notes}:1: ")
    assert notes.read_text() == "not a journal\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["notes.txt", "topo.json"]


def test_a_torn_last_record_is_dropped_with_a_warning(
    tmp_path: Path, artifacts: PipelineArtifacts, caplog: pytest.LogCaptureFixture
) -> None:
    journal = tmp_path / "events.jsonl"
    first = _controller(tmp_path, artifacts, journal)
    for event in _events():
        first.handle_event(event)
    whole = journal.read_bytes()
    # The controller died while writing the next line.
    torn = b'{"experiment_id": 1, "iteration": 0, "stage_id": 0, "trial_id": 0, "type": "cof'
    journal.write_bytes(whole + torn)
    with caplog.at_level(logging.WARNING):
        second = _controller(tmp_path, artifacts, journal)
    number = whole.count(b"\n") + 1
    assert f"{journal}:{number}: dropping a torn last record ({len(torn)} bytes" in caplog.text
    assert journal.read_bytes() == whole  # cut off; nothing before it lost
    assert _coflows(second) == [CoflowKey(1, 0, 0, 0)]
    assert second.events_applied == 4
    # It goes on, and a third start replays the lot.
    second.handle_event(dict(FIRST_COFLOW_FINISHED))
    third = _controller(tmp_path, artifacts, journal)
    assert _coflows(third) == [] and third.events_applied == 5


def test_a_whole_last_record_without_end_of_line_is_kept(
    tmp_path: Path, artifacts: PipelineArtifacts
) -> None:
    journal = tmp_path / "events.jsonl"
    lines = [json.dumps(event) for event in _events()]
    journal.write_text("\n".join(lines))  # no end of line after the last event
    second = _controller(tmp_path, artifacts, journal)
    assert _coflows(second) == [CoflowKey(1, 0, 0, 0)]
    assert journal.read_text().endswith("}\n")
    second.handle_event(dict(FIRST_COFLOW_FINISHED))
    assert _controller(tmp_path, artifacts, journal).events_applied == 5


def test_bad_bytes_inside_the_journal_are_named(
    tmp_path: Path, artifacts: PipelineArtifacts
) -> None:
    journal = tmp_path / "events.jsonl"
    lines = [json.dumps(event).encode() for event in _events()]
    journal.write_bytes(b"\n".join([lines[0], b'{"type": "\xff"}', *lines[1:]]) + b"\n")
    with pytest.raises(
        UserError, match=r"events\.jsonl:2: not UTF-8 text \(byte 0xff at column 11\)"
    ):
        _controller(tmp_path, artifacts, journal)
    # A broken line that is not the last is not a torn write: refused, not dropped.
    journal.write_bytes(b"\n".join([lines[0], b'{"type": ', *lines[1:]]) + b"\n")
    with pytest.raises(UserError, match=r"events\.jsonl:2: not a JSON event: Expecting value"):
        _controller(tmp_path, artifacts, journal)
    journal.write_bytes(b"\n".join([lines[0], b'{"weight": NaN}', *lines[1:]]) + b"\n")
    with pytest.raises(UserError, match=r"events\.jsonl:2: not a JSON event: NaN is not"):
        _controller(tmp_path, artifacts, journal)


def test_refused_and_unwritable_events_leave_state_and_journal_as_they_were(
    tmp_path: Path, artifacts: PipelineArtifacts
) -> None:
    journal = tmp_path / "events.jsonl"
    controller = _controller(tmp_path, artifacts, journal)
    for event in _events():
        controller.handle_event(event)
    kept = journal.read_bytes()
    with pytest.raises(EventError, match="iteration 3 has no active coflow"):
        controller.handle_event(
            {"type": "coflow_finished", "experiment_id": 1, "stage_id": 0, "trial_id": 0}
            | {"iteration": 3}
        )
    with pytest.raises(EventError, match="experiment 1 is already active"):
        controller.handle_event(_events()[0])
    assert journal.read_bytes() == kept
    assert controller.events_applied == 4
    # The disk refuses the next line: the event is not applied either.
    journal.unlink()
    journal.mkdir()
    with pytest.raises(JournalWriteError, match="cannot write the event journal"):
        controller.handle_event(_events(2)[0])
    assert controller.events_applied == 4
    assert sorted(controller.state.experiments) == [1]


FULL_DISK = """
import json, resource, signal, sys
from pathlib import Path
from control.controller import Controller, ControllerConfig
from control.controller_cli import DEFAULT_P4, embedded_artifacts, load_policy
from control.journal import JournalWriteError
from control.topology import load_topology

topo, journal = sys.argv[1], Path(sys.argv[2])
events, last = json.loads(sys.argv[3]), json.loads(sys.argv[4])


def controller():
    policy, assign = load_policy("beamer", 8)
    config = ControllerConfig(
        topology=load_topology(Path(topo)),
        artifacts={"embedded": embedded_artifacts(DEFAULT_P4)},
        policy_name="beamer",
        journal_path=journal,
    )
    return Controller(config, policy, assign)


first = controller()
for event in events:
    first.handle_event(event)
before, applied = journal.read_bytes(), first.events_applied
coflows = sorted(first.state.coflows)
# The file may grow by 10 bytes more: the next line is written in part, then refused
# (EFBIG, as ENOSPC on a full disk; the signal that would come with it is ignored).
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 10, hard))
try:
    first.handle_event(dict(last))
    refused = ""
except JournalWriteError as error:
    refused = str(error)
full = {
    "refused": refused,
    "unchanged": journal.read_bytes() == before,
    "applied": first.events_applied == applied and sorted(first.state.coflows) == coflows,
}
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space again
first.handle_event(dict(last))
print(json.dumps({**full, "replayed": controller().events_applied}))
"""


def test_a_line_the_disk_takes_in_part_is_cut_off_and_its_event_refused(tmp_path: Path) -> None:
    """A full disk used to leave half a line; the next event was written after it and a
    restart refused the whole journal. Now the file is as before, the event is not
    applied, the next one is kept whole and a restart replays them all."""
    topo = write_topology(tmp_path, "127.0.0.1:1")
    journal = tmp_path / "events.jsonl"
    events, last = json.dumps(_events()), json.dumps(FIRST_COFLOW_FINISHED)
    result = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(topo), str(journal), events, last],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout)
    assert outcome == {
        "refused": f"{journal}: cannot write the event journal: File too large",
        "unchanged": True,
        "applied": True,
        "replayed": 5,
    }


HOLD = """
import sys
from pathlib import Path
from control.errors import UserError
from control.journal import EventJournal

journal = EventJournal(Path(sys.argv[1]))
try:
    journal.check_writable()
except UserError as error:
    print(error, flush=True)
    sys.exit(2)
journal.forget(1)  # a compaction replaces the journal: the lock must hold all the same
print("held", flush=True)
sys.stdin.read()  # until the test closes its end
"""


def _take(journal: Path) -> subprocess.Popen[str]:
    """Another process that takes the journal (and holds it until its input closes)."""
    return subprocess.Popen(
        [sys.executable, "-c", HOLD, str(journal)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


@contextmanager
def _held(journal: Path) -> Iterator[int]:
    """The pid of another process holding the journal, for the ``with`` block."""
    process = _take(journal)
    assert process.stdout is not None and process.stdin is not None
    try:
        assert process.stdout.readline() == "held\n"
        yield process.pid
    finally:
        process.stdin.close()
        assert process.wait(timeout=30) == 0
        process.stdout.close()


def test_a_second_controller_on_the_journal_is_refused_at_start(tmp_path: Path) -> None:
    """Two controllers on one journal: each compaction wrote its own memory over the
    other's events."""
    journal = tmp_path / "events.jsonl"
    with _held(journal) as pid:
        assert _refused_at_start(tmp_path, journal) == [
            f"beamer: error: {journal}: another controller (pid {pid}) holds this event "
            "journal; stop it first or give this one another journal"
        ]
    # Gone, it leaves the journal free.
    free = EventJournal(journal)
    free.check_writable()
    free.close()


def test_the_journal_is_free_again_once_closed(tmp_path: Path) -> None:
    journal = tmp_path / "events.jsonl"
    holder = EventJournal(journal)
    holder.check_writable()
    refused = _take(journal)
    out, _ = refused.communicate(timeout=30)
    assert refused.returncode == 2
    assert out == (
        f"{journal}: another controller (pid {os.getpid()}) holds this event journal; "
        "stop it first or give this one another journal\n"
    )
    holder.close()
    with _held(journal):
        pass


def test_the_lock_file_is_not_taken_through_a_link(tmp_path: Path) -> None:
    """The controller writes its pid into the lock file: a link planted in its place
    must not make it truncate another file."""
    journal = tmp_path / "events.jsonl"
    victim = tmp_path / "victim"
    victim.write_text("kept\n")
    (tmp_path / "events.jsonl.lock").symlink_to(victim)
    with pytest.raises(
        UserError, match=r"events\.jsonl\.lock: cannot lock the event journal: Too many levels"
    ):
        EventJournal(journal).check_writable()
    assert victim.read_text() == "kept\n"


HOSTS = ["h1", "h2", "h3", "h4"]
"""The hosts of :func:`write_topology`'s topology, in index order."""


def _parsed(experiment_id: int = 1) -> list[Event]:
    def resolve(value: str | int) -> int:
        return HOSTS.index(value) if isinstance(value, str) else value

    return [parse_event(event, resolve) for event in _events(experiment_id)]


def test_the_journal_records_its_hosts_and_refuses_other_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Events name hosts by index: replayed onto reordered or other hosts, every flow
    would move. The first line says which hosts the indices mean."""
    path = tmp_path / "events.jsonl"
    journal = EventJournal(path, HOSTS)
    for experiment_id in (1, 2):
        for event in _parsed(experiment_id):
            journal.append(experiment_id, event)
    lines = path.read_text().splitlines()
    assert json.loads(lines[0]) == {"beamer_journal": 1, "hosts": HOSTS}
    assert [number for number, _ in EventJournal(path, HOSTS).load()] == list(range(2, 10))
    # A compaction keeps the record.
    journal.forget(2)
    assert path.read_text().splitlines() == lines[:5]
    with caplog.at_level(logging.WARNING):
        assert len(EventJournal(path, HOSTS).load()) == 4
    assert caplog.text == ""
    with pytest.raises(
        UserError,
        match=rf"^{re.escape(str(path))}:1: written for other hosts "
        r'\(host 1 of 4 is "h1", in the topology "h2"\): its events name hosts by index; '
        "start with the topology it was written for, or another journal$",
    ):
        EventJournal(path, ["h2", "h1", "h3", "h4"]).load()
    with pytest.raises(
        UserError, match=r":1: written for other hosts \(4 hosts, the topology has 5\)"
    ):
        EventJournal(path, [*HOSTS, "h5"]).load()
    # With no events left, the hosts no longer matter: it starts anew for the new ones.
    journal.forget(1)
    assert path.read_text().splitlines() == lines[:1]
    assert EventJournal(path, ["h2", "h1"]).load() == []
    assert path.read_bytes() == b""
    path.write_text(lines[0].replace(": 1,", ": 2,") + "\n" + "\n".join(lines[1:5]) + "\n")
    with pytest.raises(
        UserError, match=r":1: a journal of format 2; this controller reads format 1$"
    ):
        EventJournal(path, HOSTS).load()


def test_a_journal_written_before_hosts_were_recorded_still_replays(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(event) + "\n" for event in _events()))
    with caplog.at_level(logging.WARNING):
        assert [number for number, _ in EventJournal(path, HOSTS).load()] == [1, 2, 3, 4]
    assert caplog.messages == [
        f"{path}: written before journals recorded their hosts: its events are taken to "
        "name this topology's hosts by index"
    ]
