"""The event journal: checked at start-up, a torn last record dropped with a warning,
bytes that are not UTF-8 named, refused or unwritable events never half-kept."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from controller_process import REPO, controller_argv, write_topology

from control.controller import Controller, ControllerConfig, PipelineArtifacts
from control.controller_cli import DEFAULT_P4, embedded_artifacts, load_policy
from control.errors import UserError
from control.events import EventError
from control.journal import JournalWriteError
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


def _refused_at_start(tmp_path: Path, journal: Path) -> list[str]:
    """The error lines of a controller started with ``--journal journal`` (exit 2)."""
    topo = write_topology(tmp_path, "127.0.0.1:1")
    result = subprocess.run(
        controller_argv(topo, tmp_path / "c.sock", extra=["--journal", str(journal)]),
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
    assert f"{journal}:5: dropping a torn last record ({len(torn)} bytes" in caplog.text
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
