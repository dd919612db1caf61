"""JSON workload format: lossless round trip, atomic writes, one-line errors with lines."""

from __future__ import annotations

import dataclasses
import math
import os
import re
from pathlib import Path

import pytest

from control.errors import UserError
from control.model import Experiment, Flow, Stage, TrialStage, Workload
from workloads import coflow_benchmark, json_format
from workloads.hp_tuning import HpTuningConfig, generate
from workloads.limits import (
    MAX_COFLOWS,
    MAX_FILE_BYTES,
    MAX_FLOW_BYTES,
    MAX_FLOWS,
    MAX_HOSTS,
    MAX_LINK_BPS,
)

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
            "trials[0].iterations: -3 is out of range (must be 1..1000000)",
        ),
        (
            '"sync_flows": [[0, 2, 500]',
            '"sync_flows": [[0, 2, -500]',
            "[0, 2, -500]",
            "stages[0].trials[1].sync_flows[0][2]: -500 is out of range (must be 1..",
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
            # An unknown key is refused, not its value: the line is the key's.
            '"stage_id": 1,',
            '"stage_id": 1, "tint":\n\n "red",',
            '"tint"',
            "$.experiments[0].stages[1].tint: unknown field 'tint'",
        ),
        (
            # A key that is an identifier but blank to the eye (HANGUL FILLER) is quoted.
            '"stage_id": 1,',
            '"stage_id": 1, "\u3164": 0,',
            '"\u3164"',
            '$.experiments[0].stages[1]["\\u3164"]: unknown field',
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


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ('"arrival_s": 0.5', '"arrival_s": 1e300', "arrival_s: 1e+300 is above the limit of 1e+08"),
        ('"iterations": 3', '"iterations": 1000000000000', "iterations: 1000000000000 is out"),
        (
            "[0, 2, 500]",
            "[0, 2, 1000000000000000000000000000000]",
            "sync_flows[0][2]: 1000000000000000000000000000000 is out of range",
        ),
        ('"num_hosts": 3', '"num_hosts": 1000000000', "num_hosts: 1000000000 is out of range"),
        ('"link_bps": 1000000000.0', '"link_bps": 1e30', "link_bps: 1e+30 is above the limit"),
        # Weights of 1e308 overflowed in the policies' arithmetic and broke a run midway;
        # the bounds are the event API's.
        ('"weight": 1.0', '"weight": 1e308', "$.experiments[0].weight: 1e+308 is above the limit"),
        ('"weight": 1.0', '"weight": 1000001', "weight: 1000001 is above the limit of 1e+06"),
        ('"weight": 1.0', '"weight": 5e-324', "weight: 5e-324 is below the limit of 1e-06"),
        ('"kind": "sha"', f'"kind": "{"k" * 65}"', "$.experiments[0].kind: 65 characters, more"),
        # Printed as it is by `beamer workload show`: a lone surrogate was a traceback
        # there, and escape sequences reached the terminal.
        ('"kind": "sha"', '"kind": "\\ud800"', "kind: U+D800 is not a printable character"),
        ('"kind": "sha"', '"kind": "\\u001b[2J"', "kind: U+001B is not a printable character"),
    ],
)
def test_absurd_values_are_refused_with_their_limit(
    tmp_path: Path, old: str, new: str, expected: str
) -> None:
    text = _sample()
    assert old in text
    assert expected in _error(tmp_path, text.replace(old, new, 1))


def test_too_many_coflows_are_refused_before_any_run(tmp_path: Path) -> None:
    # 1,000 trials × 1,000,000 iterations: each value within its own limit, the product not.
    trials = ", ".join(
        f'{{"trial_id": {t}, "iterations": 1000000, "compute_s": 0, "sync_flows": [[0, 1, 1]]}}'
        for t in range(1000)
    )
    stage = f'{{"stage_id": 0, "trials": [{trials}]}}'
    text = (
        '{"format": "beamer-workload/1", "num_hosts": 2, "link_bps": 1e9, "experiments": ['
        f'{{"experiment_id": 0, "arrival_s": 0, "stages": [{stage}]}}'
        "]}"
    )
    assert "exceed the limit of 1,000,000" in _error(tmp_path, text)


def test_coflows_times_hosts_is_limited(tmp_path: Path) -> None:
    """Within each limit alone (hosts, coflows), but every coflow may be active at once and
    the simulator keeps their remaining bytes by port."""
    many_hosts = _sample().replace('"num_hosts": 3', '"num_hosts": 10000', 1)
    fits = many_hosts.replace('"iterations": 3', '"iterations": 1998', 1)  # 2,000 coflows
    assert json_format.loads(fits).num_hosts == 10_000
    message = _error(tmp_path, many_hosts.replace('"iterations": 3', '"iterations": 1999', 1))
    assert (
        "$.experiments: 2,001 coflows on 10,000 hosts exceed the limit of 2,000 (coflows × "
        "hosts at most 20,000,000" in message
    )


def test_the_largest_workload_the_limits_allow_fits_the_file_limit() -> None:
    # The longest text per coflow: one-iteration trial stages (as many as there may be
    # coflows) of five flows (then as many flows as there may be), every id and number
    # at its longest. A thousandth of it, scaled up, must fit MAX_FILE_BYTES.
    hosts = tuple(range(9995, 10_000))
    flows = tuple(Flow(h, hosts[(k + 1) % 5], int(MAX_FLOW_BYTES)) for k, h in enumerate(hosts))
    assert len(flows) * MAX_COFLOWS == MAX_FLOWS
    stages = tuple(
        Stage(60_000 + s, (TrialStage(65_535, 1, 1.2345678901234567e-05, flows, hosts),))
        for s in range(100)
    )
    experiments = tuple(
        Experiment(60_000 + e, 1.2345678901234567e-05, stages, "hyperband", 1.2345678901234567)
        for e in range(MAX_COFLOWS // 100_000)
    )
    workload = Workload(MAX_HOSTS, MAX_LINK_BPS, experiments, {"generator": "hp-tuning"})
    largest = len(json_format.dumps(workload)) * 1000
    assert 500e6 < largest < MAX_FILE_BYTES / 1.8


@pytest.mark.parametrize(
    ("rate", "expected"),
    [
        ("5e-324", "$.link_bps: 5e-324 is below the limit of 1000 bit/s"),
        ("999.9", "$.link_bps: 999.9 is below the limit of 1000 bit/s"),
    ],
)
def test_a_link_too_slow_is_refused(tmp_path: Path, rate: str, expected: str) -> None:
    assert expected in _error(tmp_path, _sample().replace("1000000000.0", rate, 1))


def test_one_flow_alone_on_its_link_finishes_within_the_time_limit(tmp_path: Path) -> None:
    slow = _sample().replace("1000000000.0", "1e3", 1)
    assert json_format.loads(slow).link_bps == 1e3  # 1,000 bytes take 8 s
    too_big = slow.replace("[[0, 1, 1000]", "[[0, 1, 12500000001]", 1)
    assert _error(tmp_path, too_big).endswith(
        ":17: $.experiments[0].stages[0].trials[0].sync_flows[0][2]: 12500000001 bytes take "
        "1e+08 s alone on a link of 1000 bit/s, more than the limit of 1e+08 s allows "
        "(at most 12,500,000,000 bytes)"
    )
    assert json_format.loads(too_big.replace("12500000001", "12500000000", 1))


def test_the_writer_refuses_what_the_reader_would_refuse(tmp_path: Path) -> None:
    workload = json_format.read(DATA / "tiny_workload.json")
    late = dataclasses.replace(
        workload,
        experiments=(dataclasses.replace(workload.experiments[0], arrival_s=2e8),),
    )
    path = tmp_path / "late.json"
    with pytest.raises(UserError) as refused:
        json_format.write(late, path)
    assert str(refused.value) == (
        f"{path}: not written: $.experiments[0].arrival_s: 200000000.0 is above the limit of 1e+08"
    )
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(json_format.InvalidWorkload, match=r"\$.experiments\[0\].arrival_s"):
        json_format.check(late)


def test_the_writer_refuses_a_file_above_the_size_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(json_format, "MAX_FILE_BYTES", 1000)
    path = tmp_path / "w.json"
    with pytest.raises(UserError, match=r"w.json: not written: 1,\d{3} bytes, above the limit"):
        json_format.write(json_format.read(DATA / "tiny_workload.json"), path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("field", ["arrival_s", "compute_s"])
def test_minus_zero_times_are_read_as_zero(tmp_path: Path, field: str) -> None:
    """-0.0 was kept: ``workload show`` printed arrivals of -0.000 s and the JSON written
    back held -0.0."""
    text = re.sub(rf'"{field}": [0-9.]+', f'"{field}": -0.0', _sample())
    assert f'"{field}": -0.0' in text
    path = tmp_path / "w.json"
    path.write_text(text)
    workload = json_format.read(path)
    values = [workload.experiments[0].arrival_s] + [
        trial.compute_s for stage in workload.experiments[0].stages for trial in stage.trials
    ]
    assert all(math.copysign(1.0, value) == 1.0 for value in values)
    assert "-0.0" not in json_format.dumps(workload)
