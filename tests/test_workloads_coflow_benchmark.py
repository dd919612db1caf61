"""Coflow-Benchmark reader/writer: hand-checked coflows, FB2010, and every error case."""

from __future__ import annotations

import math
import re
import tracemalloc
from pathlib import Path

import pytest

from control.errors import UserError
from control.model import Flow
from workloads import coflow_benchmark
from workloads.hp_tuning import HpTuningConfig, generate

DATA = Path(__file__).parent / "data"
MB = 1_048_576


def _flows(workload: coflow_benchmark.Workload, experiment_id: int) -> tuple[Flow, ...]:
    experiment = next(e for e in workload.experiments if e.experiment_id == experiment_id)
    (stage,) = experiment.stages
    (trial,) = stage.trials
    assert (trial.iterations, trial.compute_s) == (1, 0.0)
    return trial.sync_flows


def test_tiny_trace_worked_by_hand() -> None:
    workload = coflow_benchmark.read(DATA / "tiny_trace.txt")
    assert (workload.num_hosts, workload.link_bps, len(workload.experiments)) == (4, 1e9, 3)
    assert [e.arrival_s for e in workload.experiments] == [0.0, 1.5, 2.5]
    # 1 MB from mappers 0 and 1 to reducer 2: half each.
    assert _flows(workload, 1) == (Flow(0, 2, MB // 2), Flow(1, 2, MB // 2))
    # Mapper 3 sends 0.5 MB to reducer 0; its 2 MB to itself stay local.
    assert _flows(workload, 2) == (Flow(3, 0, MB // 2),)
    # 1 MB over three mappers: 349,526 + 349,525 + 349,525; mapper 1 is the reducer.
    assert _flows(workload, 3) == (Flow(0, 1, 349_526), Flow(2, 1, 349_525))
    assert workload.meta["local_bytes"] == str(2 * MB + 349_525)


@pytest.fixture(scope="module")
def fb2010() -> coflow_benchmark.Workload:
    path = coflow_benchmark.default_trace_path()
    if not path.exists():
        pytest.skip(f"FB2010 trace not present at {path}")
    return coflow_benchmark.read(path)


def test_fb2010_counts(fb2010: coflow_benchmark.Workload) -> None:
    assert len(fb2010.experiments) == 526
    assert fb2010.num_hosts == 150
    assert fb2010.link_bps == 1e9


def test_fb2010_hand_checked_coflow(fb2010: coflow_benchmark.Workload) -> None:
    # Line 3 of the trace: "2 10833 2 104 132 1 140:48.0".
    experiment = next(e for e in fb2010.experiments if e.experiment_id == 2)
    assert experiment.arrival_s == pytest.approx(10.833)
    assert _flows(fb2010, 2) == (Flow(104, 140, 24 * MB), Flow(132, 140, 24 * MB))
    assert experiment.total_bytes == 48 * MB


def test_fb2010_every_byte_is_on_the_fabric_or_local(fb2010: coflow_benchmark.Workload) -> None:
    text = coflow_benchmark.default_trace_path().read_text().splitlines()[1:]
    trace_bytes = sum(
        round(float(token.split(":")[1]) * MB)
        for line in text
        for token in line.split()
        if ":" in token
    )
    fabric_bytes = sum(e.total_bytes for e in fb2010.experiments)
    assert fabric_bytes + int(fb2010.meta["local_bytes"]) == trace_bytes
    assert all(
        f.src_host != f.dst_host
        for e in fb2010.experiments
        for f in _flows(fb2010, e.experiment_id)
    )


def test_writer_round_trips_fb2010(fb2010: coflow_benchmark.Workload) -> None:
    again = coflow_benchmark.parse(coflow_benchmark.dumps(fb2010))
    assert again.experiments == fb2010.experiments


def test_writer_round_trips_tiny_trace(tmp_path: Path) -> None:
    workload = coflow_benchmark.read(DATA / "tiny_trace.txt")
    path = tmp_path / "out.txt"
    coflow_benchmark.write(workload, path)
    assert coflow_benchmark.read(path).experiments == workload.experiments


def test_default_path_follows_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("BEAMER_FB2010", str(tmp_path / "trace.txt"))
    assert coflow_benchmark.default_trace_path() == tmp_path / "trace.txt"
    monkeypatch.delenv("BEAMER_FB2010")
    default = coflow_benchmark.default_trace_path()
    assert default.parts[-3:] == ("workloads", "data", "FB2010-1Hr-150-0.txt")
    assert default.is_file()


def test_the_packaged_trace_is_the_shared_copy() -> None:
    shared = Path(__file__).resolve().parents[2] / "shared" / "data" / "FB2010-1Hr-150-0.txt"
    if not shared.exists():
        pytest.skip("no shared data folder beside the repository")
    packaged = coflow_benchmark.default_trace_path()
    assert packaged.read_bytes() == shared.read_bytes()


def test_offline_variant_by_hand() -> None:
    # Coflow 1: 3 MB into reducer 2 over mappers 0, 1 (1.5 MB each, rounds to 2 MB);
    # coflow 2: 0.2 MB into reducer 0 from mapper 3 (rounds up to the 1 MB minimum);
    # coflow 3: 3 mappers x 1 reducer.
    text = "4 3\n1 100 2 0 1 1 2:3.0\n2 1500 1 3 1 0:0.2\n3 2500 3 0 1 2 1 1:7\n"
    offline = coflow_benchmark.offline(text)
    assert offline.splitlines() == [
        "4 3",
        "1 0 2 0 1 1 2:4",
        "2 0 1 3 1 0:1",
        "3 0 3 0 1 2 1 1:6",
    ]
    workload = coflow_benchmark.parse(offline)
    assert all(e.arrival_s == 0.0 for e in workload.experiments)
    assert _flows(workload, 1) == (Flow(0, 2, 2 * MB), Flow(1, 2, 2 * MB))
    assert _flows(workload, 3) == (Flow(0, 1, 2 * MB), Flow(2, 1, 2 * MB))
    # --max-flows keeps coflows of at most that many mapper x reducer pairs.
    kept = coflow_benchmark.offline(text, max_flows=2).splitlines()
    assert [line.split()[0] for line in kept[1:]] == ["1", "2"]
    assert kept[0] == "4 2"
    # Without rounding the sizes stay.
    assert coflow_benchmark.offline(text, whole_mb=False).splitlines()[1] == "1 0 2 0 1 1 2:3.0"


def test_offline_fb2010_subset_of_the_issue() -> None:
    text = coflow_benchmark.default_trace_path().read_text()
    offline = coflow_benchmark.parse(coflow_benchmark.offline(text, max_flows=400))
    assert len(offline.experiments) == 439
    sizes = {f.size_bytes for e in offline.experiments for f in _flows(offline, e.experiment_id)}
    assert all(size % MB == 0 and size >= MB for size in sizes)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("4 1\n1 1e300 1 0 1 1:1\n", "arrival time 1e300 is above the limit of 1e+11 ms"),
        ("4 1\n1 0 1 0 1 1:1e30\n", "size (MB) 1e30 is above the limit"),
        ("1000000000 1\n1 0 1 0 1 1:1\n", "number of ports 1000000000 is out of range"),
        ("4 1000000000000\n", "number of coflows 1000000000000 is out of range"),
        (
            "10000 65536\n",
            "65,536 coflows on 10,000 ports exceed the limit of 2,000 (coflows × ports at "
            "most 20,000,000",
        ),
    ],
)
def test_absurd_values_name_the_field_and_the_limit(text: str, message: str) -> None:
    with pytest.raises(UserError, match=re.escape(message)) as error:
        coflow_benchmark.parse(text, "absurd.txt")
    assert str(error.value).startswith("absurd.txt:")


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("", 1, "empty trace"),
        ("4\n", 1, "header has 1 fields"),
        ("four 1\n1 0 1 0 1 1:1\n", 1, "number of ports 'four' is not an integer"),
        ("4 2\n1 0 1 0 1 1:1\n", 2, "header announces 2 coflows, file has 1"),
        ("4 1\n1 0 1 0 1 1:1\n2 0 1 0 1 1:1\n", 3, "header announces 1 coflows, file has 2"),
        ("4 1\nx 0 1 0 1 1:1\n", 2, "coflow id 'x' is not an integer"),
        ("4 1\n-0 0 1 0 1 1:1\n", 2, "coflow id '-0' has a sign"),
        ("4 1\n1 0 1 -0 1 1:1\n", 2, "mapper port '-0' has a sign"),
        # int() and float() read these too; a trace's numbers are ASCII digits
        ("4 1\n\u0661 0 1 0 1 1:1\n", 2, "coflow id '\u0661' is not an integer"),
        ("4 1\n1 0 1 0 1 1:1_0\n", 2, "reducer 1 size (MB) '1_0' is not a number"),
        (
            "4 1\n1 0 1 0 1 1:\u0661\u0660\n",
            2,
            "reducer 1 size (MB) '\u0661\u0660' is not a number",
        ),
        ("4 1\n1 soon 1 0 1 1:1\n", 2, "arrival time 'soon' is not a number"),
        ("4 1\n1 -5 1 0 1 1:1\n", 2, "arrival time -5 is negative"),
        ("4 1\n1 0 1 0 1 1:-2.5\n", 2, "reducer 1 size (MB) -2.5 is negative"),
        ("4 1\n1 0 1 0 1 1:lots\n", 2, "reducer 1 size (MB) 'lots' is not a number"),
        ("4 1\n1 0 1 9 1 1:1\n", 2, "unknown mapper port 9 (trace has ports 0..3)"),
        ("4 1\n1 0 1 0 1 4:1\n", 2, "unknown reducer port 4"),
        ("4 1\n1 0 1 0 2 1:1\n", 2, "2 reducers announced, 1 'port:MB' fields follow"),
        ("4 1\n1 0 1 0 1 1:1 2:1\n", 2, "1 reducers announced, 2 'port:MB' fields follow"),
        ("4 1\n1 0 5 0 1\n", 2, "5 mappers announced but only 2 given"),
        # The count is of the mapper ports, not of every field that follows the count.
        ("4 1\n1 0 3 0 1 1:1\n", 2, "3 mappers announced but only 1 given"),
        ("4 1\n1 0 3 0 1\n", 2, "3 mappers announced but only 2 given"),
        ("4 1\n1 0 3 0 1 2\n", 2, "3 mappers given, then no '<#reducers> <port:MB> ...'"),
        # Ports are ASCII digits, as ids and counts: int() reads these too.
        ("12 1\n1 0 2 0 \u0661 1 2:1\n", 2, "mapper port '\u0661' is not an integer"),
        ("12 1\n2 10 1 3 1 1_0:2\n", 2, "reducer port '1_0' is not an integer"),
        ("12 1\n1 0 1 0 1 +1:2\n", 2, "reducer port '+1' is not an integer"),
        ("12 1\n1 0 1 +0 1 1:2\n", 2, "mapper port '+0' is not an integer"),
        ("12 1\n+1 0 1 0 1 1:2\n", 2, "coflow id '+1' is not an integer"),
        ("4 1\n1 0 1 -1 1 1:1\n", 2, "unknown mapper port -1 (trace has ports 0..3)"),
        ("4 1\n1 0 0 1 1:1\n", 2, "number of mappers 0 is out of range"),
        ("4 1\n1 0 1 0 1 1=1\n", 2, "reducer '1=1' is not 'port:MB'"),
        ("4 1\n1 0\n", 2, "2 fields, expected"),
        ("4 2\n1 0 1 0 1 1:1\n1 5 1 0 1 1:1\n", 3, "duplicate coflow id 1 (first on line 2)"),
        ("4 1\n70000 0 1 0 1 1:1\n", 2, "coflow id 70000 is out of range (must be 0..65535)"),
        # Lines are counted at "\n" only; other line breaks are refused on their line
        # (splitlines counted "\x0c" as one and put the bad size on line 3).
        ("4 1\x0c\n1 0 1 0 1 1:x\n", 1, "character U+000C (form feed) is not allowed"),
        ("4 1\n1 0 1 0\u2028 1 1:x\n", 2, "character U+2028 (line separator) is not allowed"),
        ("4 1\n1 0 1 0 1 1:1\x85\n", 2, "character U+0085 ("),
        ("4 1\n1 0 1 0\x0b1 1:1\n", 2, "character U+000B (vertical tab) is not allowed"),
        ("4 1\r1 0 1 0 1 1:1\r", 1, "character U+000D (carriage return without a newline"),
        ("4 1\n\n1 0 1 0 1\xa01:1\n", 3, "character U+00A0 (no-break space) is not allowed"),
        ("4 1\r\n\r\n1 0 1 0 1 1:x\r\n", 3, "reducer 1 size (MB) 'x' is not a number"),
        ("4 2\n1 0 1 0 1 1:1\n\n", 3, "header announces 2 coflows, file has 1"),
    ],
)
def test_malformed_trace(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(text.encode())
    with pytest.raises(UserError) as caught:
        coflow_benchmark.read(path)
    assert str(caught.value).startswith(f"{path}:{line}: {message}")
    assert "\n" not in str(caught.value)


def test_writer_refuses_multi_stage_workloads(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="single coflows only"):
        coflow_benchmark.write(generate(HpTuningConfig(num_jobs=1)), tmp_path / "t.txt")
    assert not list(tmp_path.iterdir())


def test_offline_rounding_stays_within_the_readers_limit() -> None:
    # 953,674,316.4 MB is within the limit (953,674,316.43 MB); split over 3 mappers and
    # rounded half up it was 3 × 317,891,439 = 953,674,317 MB, which the reader refused.
    text = "4 2\n1 0 3 0 1 2 1 3:953674316.4\n2 0 3 0 1 2 1 3:953674311.6\n"
    offline = coflow_benchmark.offline(text, "t.txt")
    assert offline == "4 2\n1 0 3 0 1 2 1 3:953674314\n2 0 3 0 1 2 1 3:953674311\n"
    sizes = [
        f.size_bytes
        for f in coflow_benchmark.parse(offline).experiments[0].stages[0].trials[0].sync_flows
    ]
    assert sizes == [coflow_benchmark.MAX_WHOLE_MB // 3 * MB] * 3
    # Away from the limit, shares still round half up.
    assert coflow_benchmark.offline("4 1\n1 0 3 0 1 2 1 3:7.5\n") == "4 1\n1 0 3 0 1 2 1 3:9\n"


def test_trace_writer_checks_its_text_with_the_reader(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    with pytest.raises(UserError) as refused:
        coflow_benchmark.write_text(path, "4 1\n1 0 1 0 1 1:1e30\n")
    assert str(refused.value) == (
        f"{path}: not written: its line 2 would be refused: reducer 1 size (MB) 1e30 is above "
        "the limit of 9.53674e+08 MB"
    )
    assert not list(tmp_path.iterdir())


def test_a_line_too_long_to_split_is_refused_before_it_is() -> None:
    """400 MB of ' 1' on one line split into 200 million strings: gigabytes."""
    text = "4 1\n1 0 2 0 1 1 2:10" + " 1" * (coflow_benchmark.MAX_LINE_CHARS // 2) + "\n"
    with pytest.raises(UserError) as caught:
        coflow_benchmark.parse(text, "long.txt")
    assert str(caught.value) == "long.txt:2: a line of 1,048,592 characters, above 1,048,576"


def test_lines_beyond_the_announced_coflows_are_counted_not_read() -> None:
    """The count is checked line by line: a line after the first one too many is never
    split (a long one is not even measured), so ten million lines of ``0`` no longer
    take gigabytes before the header's count refuses them."""
    long_line = "2 0 2 0 1 1 " + "1" * coflow_benchmark.MAX_LINE_CHARS + ":1"
    text = "4 1\n1 0 1 0 1 1:1\n" + "0\n" * 1000 + long_line + "\n"
    with pytest.raises(UserError) as caught:
        coflow_benchmark.parse(text, "many.txt")
    assert str(caught.value) == "many.txt:3: header announces 1 coflows, file has 1002"


def test_blank_lines_and_excess_lines_cost_no_memory_of_their_own() -> None:
    """What the reader allocates follows the coflows announced, not the file's lines: a
    million blank lines, or a million lines too many, allocate nothing per line (each
    was a string and a list of fields, over 100 MB here)."""
    blank = "4 1\n1 0 1 0 1 1:1\n" + "\n" * 1_000_000
    excess = "4 1\n1 0 1 0 1 1:1\n" + "0\n" * 1_000_000
    tracemalloc.start()
    try:
        assert len(coflow_benchmark.parse(blank).experiments) == 1
        blank_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        with pytest.raises(UserError, match="header announces 1 coflows, file has 1000001"):
            coflow_benchmark.parse(excess)
        excess_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert blank_peak < 1_000_000
    assert excess_peak < 1_000_000


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("1 0 2 0 0 1 2:1", "mapper port 0 is listed twice"),
        ("1 0 3 0 1 0 1 2:1", "mapper port 0 is listed twice"),
        ("1 0 1 0 2 2:1 2:1", "reducer port 2 is listed twice"),
        ("1 0 1 0 3 1:1 2:1 1:4", "reducer port 1 is listed twice"),
    ],
)
def test_a_port_listed_twice_in_a_coflow_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, message: str
) -> None:
    """The reader made the two into one port's flows, which ``workload to-trace`` then
    refused as not an even shuffle: what one tool reads, the other must write."""
    from control.cli import main

    path = tmp_path / "twice.txt"
    path.write_text(f"3 1\n{line}\n")
    with pytest.raises(UserError) as caught:
        coflow_benchmark.read(path)
    assert str(caught.value) == f"{path}:2: {message}"
    assert main(["workload", "show", str(path)]) == 2
    assert capsys.readouterr().err == f"beamer: error: {path}:2: {message}\n"


@pytest.mark.parametrize(
    ("size", "bytes_shown"),
    [("1e-300", "1.05e-294"), ("0.0000001", "0.105"), ("0.0000009", "0.944")],
)
def test_a_reducer_of_less_than_one_byte_is_refused(size: str, bytes_shown: str) -> None:
    """It became a coflow of 0 bytes, silently."""
    with pytest.raises(UserError) as caught:
        coflow_benchmark.parse(f"3 1\n1 0 1 0 1 2:{size}\n", "tiny.txt")
    assert str(caught.value) == (
        f"tiny.txt:2: reducer 2 size {size} MB is less than one byte ({bytes_shown} bytes; "
        "sizes are 0 or at least 1 byte)"
    )


def test_reducers_of_zero_and_of_one_byte_are_read() -> None:
    """The writer writes an all-local coflow as a reducer of 0 MB; one byte is the least
    a flow may carry."""
    one_byte = repr(1 / MB)
    workload = coflow_benchmark.parse(f"3 2\n1 0 1 0 1 2:0\n2 0 1 0 1 2:{one_byte}\n")
    assert _flows(workload, 1) == ()
    assert _flows(workload, 2) == (Flow(0, 2, 1),)


def test_an_arrival_of_minus_zero_is_zero() -> None:
    """-0 ms was kept as -0.0 s: shown as -0.000 s and written back as -0.0."""
    workload = coflow_benchmark.parse("3 1\n1 -0 1 0 1 2:1\n")
    arrival = workload.experiments[0].arrival_s
    assert arrival == 0.0 and math.copysign(1.0, arrival) == 1.0
    assert "-0" not in coflow_benchmark.dumps(workload)
