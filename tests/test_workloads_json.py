"""JSON workload format: lossless round trip, atomic writes, one-line errors with lines."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from control.errors import UserError
from control.model import Flow
from workloads import coflow_benchmark, json_format
from workloads.hp_tuning import HpTuningConfig, generate

DATA = Path(__file__).parent / "data"


def test_generated_workload_round_trips_exactly(tmp_path: Path) -> None:
    workload = generate(HpTuningConfig(seed=3))
    path = tmp_path / "w.json"
    json_format.write(workload, path)
    assert json_format.read(path) == workload
    assert os.listdir(tmp_path) == ["w.json"]


def test_trace_workload_round_trips_exactly() -> None:
    workload = coflow_benchmark.read(DATA / "tiny_trace.txt")
    assert json_format.loads(json_format.dumps(workload)) == workload


def test_sample_file_reads_as_documented() -> None:
    workload = json_format.read(DATA / "tiny_workload.json")
    (experiment,) = workload.experiments
    assert (workload.num_hosts, workload.link_bps) == (3, 1e9)
    assert (experiment.experiment_id, experiment.arrival_s) == (7, 0.5)
    assert [len(stage.trials) for stage in experiment.stages] == [2, 1]
    promoted = experiment.stages[1].trials[0]
    assert (promoted.trial_id, promoted.iterations, promoted.hosts) == (1, 3, (2, 0, 1))
    assert promoted.sync_flows[0] == Flow(0, 2, 500)
    assert experiment.total_bytes == 2000 + 2000 + 3 * 2000


def test_each_flow_is_on_its_own_line() -> None:
    text = json_format.dumps(json_format.read(DATA / "tiny_workload.json"))
    assert re.search(r"^\s*\[0, 2, 500\],?$", text, re.MULTILINE)


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "w.json"
    path.write_text("old")

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(UserError, match="cannot write: No space left on device"):
        json_format.write(generate(HpTuningConfig(seed=1, num_jobs=1)), path)
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["w.json"]


def _error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(UserError) as caught:
        json_format.read(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:")
    return message


def _sample() -> str:
    return (DATA / "tiny_workload.json").read_text()


def _line(text: str, number: int) -> str:
    return text.splitlines()[number - 1]


def _line_number(message: str) -> int:
    match = re.match(r"[^:]+:(\d+):", message)
    assert match, message
    return int(match.group(1))


def test_syntax_error_names_line_and_column(tmp_path: Path) -> None:
    message = _error(tmp_path, '{\n  "format": "beamer-workload/1",\n  "num_hosts": 3,,\n}')
    assert ":3:18: invalid JSON: Expecting property name" in message


@pytest.mark.parametrize(
    ("old", "new", "fragment", "expected"),
    [
        (
            '"iterations": 3',
            '"iterations": -3',
            '"iterations": -3',
            "trials[0].iterations: -3 is out of range (must be >= 1)",
        ),
        (
            '"sync_flows": [[0, 2, 500]',
            '"sync_flows": [[0, 2, -500]',
            "[0, 2, -500]",
            "stages[0].trials[1].sync_flows[0][2]: -500 is out of range (must be >= 1)",
        ),
        (
            "[1, 2, 500], [2, 0",
            "[1, 9, 500], [2, 0",
            "[1, 9, 500]",
            "sync_flows[1][1]: 9 is out of range (must be 0..2)",
        ),
        (
            '"compute_s": 0.25, "hosts": [2, 0, 1],\n             "sync_flows": [[0, 2, 500], [1',
            '"compute_s": "fast", "hosts": [2, 0, 1],\n             "sync_flows": [[0, 2, 500], [1',
            '"compute_s": "fast"',
            "stages[0].trials[1].compute_s: expected a number, got a string",
        ),
        (
            '"arrival_s": 0.5',
            '"arrival_s": true',
            '"arrival_s": true',
            "$.experiments[0].arrival_s: expected a number, got a boolean",
        ),
        (
            '"stage_id": 1,',
            '"stage_id": 1, "colour": "red",',
            '"colour"',
            "$.experiments[0].stages[1].colour: unknown field 'colour'",
        ),
        (
            '"format": "beamer-workload/1"',
            '"format": "beamer-workload/9"',
            '"format"',
            "$.format: unsupported format 'beamer-workload/9'",
        ),
        ('"stage_id": 1', '"stage_id": 0', '"stage_id": 0', "duplicate stage_id 0"),
        ("[[0, 1, 1000]", "[[1, 1, 1000]", "[1, 1, 1000]", "to itself"),
        ('"num_hosts": 3', '"num_hosts": 3.5', '"num_hosts"', "expected an integer, got a number"),
    ],
)
def test_semantic_errors_name_the_line_and_path(
    tmp_path: Path, old: str, new: str, fragment: str, expected: str
) -> None:
    text = _sample()
    assert text.count(old) >= 1
    bad = text.replace(old, new, 1)
    message = _error(tmp_path, bad)
    assert expected in message
    assert fragment in _line(bad, _line_number(message))


def test_missing_field_names_the_object(tmp_path: Path) -> None:
    bad = _sample().replace('"trial_id": 0, "iterations": 1, ', '"trial_id": 0, ', 1)
    message = _error(tmp_path, bad)
    assert "$.experiments[0].stages[0].trials[0]: missing field 'iterations'" in message
    assert '"trial_id": 0' in _line(bad, _line_number(message))


def test_wrong_top_level_type(tmp_path: Path) -> None:
    assert "$: expected an object, got an array" in _error(tmp_path, "[1, 2]")


def test_not_a_number_constant_is_rejected(tmp_path: Path) -> None:
    bad = _sample().replace('"arrival_s": 0.5', '"arrival_s": NaN', 1)
    message = _error(tmp_path, bad)
    assert "NaN is not a number in JSON" in message
    assert '"arrival_s": NaN' in _line(bad, _line_number(message))


def test_duplicate_experiment_ids(tmp_path: Path) -> None:
    workload = generate(HpTuningConfig(seed=1, num_jobs=2))
    text = json_format.dumps(workload).replace('"experiment_id": 1,', '"experiment_id": 0,', 1)
    message = _error(tmp_path, text)
    assert "$.experiments[1].experiment_id: duplicate experiment_id 0" in message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        json_format.read(tmp_path / "absent.json")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            b'{"format": "beamer-workload/1",\n"experiments": ' + b"[" * 200_000,
            r":2: invalid JSON: nested deeper",
        ),
        (b'{"format": "beamer-workload/1", "name": "\xfe"}', r":1: not UTF-8 text"),
        (
            b'{"format": "beamer-workload/1",\n"x": ' + b"1" * 6000 + b"}",
            r":2: .*more than \d+ digits",
        ),
    ],
)
def test_hostile_workload_files_are_one_line_errors(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "w.json"
    path.write_bytes(content)
    with pytest.raises(UserError, match=message) as refused:
        json_format.read(path)
    assert len(str(refused.value).splitlines()) == 1
