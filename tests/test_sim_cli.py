"""``beamer simulate``: tables, JSON, output files, and one-line errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from control.cli import main
from control.model import Experiment, Flow, Stage, TrialStage, Workload
from workloads import json_format

UNIT = 125_000_000


def small_workload(path: Path) -> Path:
    """The chain example of test_sim_examples: Beamer 9 s of total SCT, Sincronia 10 s."""

    def stage(stage_id: int, units: int) -> Stage:
        return Stage(stage_id, (TrialStage(0, 1, 0.0, (Flow(0, 1, units * UNIT),)),))

    a = Experiment(0, 0.0, (stage(0, 1), stage(1, 4)))
    b = Experiment(1, 0.0, (stage(0, 2),))
    json_format.write(Workload(2, 1e9, (a, b)), path)
    return path


def test_json_output_has_every_metric_per_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = small_workload(tmp_path / "chain.json")
    status = main(
        ["simulate", "--workload", str(workload), "--policies", "beamer,sincronia,fair", "--json"]
    )
    assert status == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"beamer", "sincronia", "fair"}
    assert result["beamer"]["avg_sct_s"] == pytest.approx(3.0)
    assert result["sincronia"]["avg_sct_s"] == pytest.approx(10 / 3)
    assert result["sincronia"]["avg_sct_rel"] == pytest.approx(10 / 9)
    assert result["beamer"]["avg_experiment_s"] == pytest.approx((7 + 2) / 2)
    # Alone, A0 takes 1 s, A1 4 s, B 2 s: Beamer's slowdowns are 3, 1, 1.
    assert result["beamer"]["avg_slowdown"] == pytest.approx(5 / 3)
    for metric in ("p50_sct_s", "p95_sct_s", "p99_sct_s", "avg_cct_s"):
        assert metric in result["fair"]


def test_beamer_variants_are_simulated_by_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = small_workload(tmp_path / "chain.json")
    spec = "beamer:coflow_tail=0"  # no experiment group kept: every coflow in Sincronia's order
    status = main(
        ["simulate", "--workload", str(workload), "--policies", f"beamer,{spec}", "--json"]
    )
    assert status == 0
    result = json.loads(capsys.readouterr().out)
    assert result["beamer"]["avg_sct_s"] == pytest.approx(3.0)
    assert result[spec]["avg_sct_s"] == pytest.approx(10 / 3)


def test_table_and_files_for_two_queue_modes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = small_workload(tmp_path / "chain.json")
    out = tmp_path / "out"
    status = main(
        [
            "simulate",
            "--workload",
            str(workload),
            "--policies",
            "beamer,aalo",
            "--queues",
            "ideal,2",
            "--out",
            str(out),
        ]
    )
    assert status == 0
    text = capsys.readouterr().out
    assert "queues: ideal" in text and "queues: 2q" in text
    assert "aalo 2q" in text
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "avg_sct_vs_beamer_2q.png",
        "avg_sct_vs_beamer_ideal.png",
        "sct_cdf_2q.png",
        "sct_cdf_ideal.png",
        "stages.csv",
        "summary.csv",
    ]
    assert (out / "sct_cdf_ideal.png").read_bytes().startswith(b"\x89PNG")
    rows = (out / "stages.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 2 * 3  # header + modes × policies × stages


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policies", "beamer,srpt"], "unknown policy 'srpt'"),
        (["--policies", "beamer:future_weight=nan"], "future_weight=nan is not a number from 0"),
        (["--policies", "beamer:coflow_tail=1e300"], "coflow_tail=1e300 is not a whole number"),
        (["--policies", "beamer:coflow_tail=two"], "coflow_tail=two is not a whole number"),
        (
            ["--policies", "beamer:tail_order=sideways"],
            "tail_order=sideways is not 'subset' or 'global'",
        ),
        (["--policies", "beamer:ordering=random"], "ordering=random is not 'bssi' or 'bottleneck'"),
        (["--policies", "beamer:speed=3"], "unknown beamer knob 'speed'"),
        (["--queues", "ideal,x"], "--queues: 'x'"),
        (["--queues", "0"], "outside 1..64"),
        (["--queues", "8,2,8"], "--queues: 8 given more than once"),
        (["--queues", "ideal,ideal"], "--queues: ideal given more than once"),
        (["--policies", "beamer-lookahead:evals=5;evals=6"], "evals given more than once"),
        (["--seeds", "1,a"], "--seeds"),
        (["--seeds", "1,2,1"], "--seeds: seed 1 given more than once"),
        (["--load", "-1"], "--load"),
        (
            ["--workload", "fb2010", "--load", "5e-324"],
            "--load: fb2010: 4.94066e-324 stretches the arrivals to beyond any number of seconds",
        ),
        (["--workload", "no-such-file.json"], "no-such-file.json: no such file"),
        (["--policies", "sincronia,sincronia,beamer"], "'sincronia' given more than once"),
        (["--policies", "beamer,fair,beamer"], "'beamer' given more than once"),
        (["--out", ""], "--out: an empty directory name"),
        (["--jobs", "0"], "--jobs: 0 is out of range"),
        (["--jobs", "100000"], "--jobs: 100000 is out of range"),
    ],
)
def test_bad_arguments_are_one_line_errors(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = small_workload(tmp_path / "chain.json")
    status = main(["simulate", "--workload", str(workload), *argv])
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert len(err.splitlines()) == 1


def test_malformed_trace_names_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "bad.txt"
    trace.write_text("4 2\n1 0 1 0 1 1:2.0\n2 5 1 0 1 9:1.0\n")
    status = main(["simulate", "--workload", str(trace), "--policies", "fair"])
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert "bad.txt:3" in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("flag", "model"),
    [([], "fast"), (["--flow-model", "per-flow"], "per-flow"), (["--flow-model", "fast"], "fast")],
)
def test_every_workload_defaults_to_the_fast_flow_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: list[str], model: str
) -> None:
    # Two mappers (ports 0, 1) each send reducer port 2 half of 200 MB.
    trace = tmp_path / "shuffle.txt"
    trace.write_text("3 1\n1 0 2 0 1 1 2:200.0\n")
    status = main(["simulate", "--workload", str(trace), "--policies", "fair", *flag])
    assert status == 0
    out = capsys.readouterr().out
    assert f"flow model {model}" in out.splitlines()[0]
    # 200 MB through receiver port 2 at 1 Gbit/s, in either model (table: 3 decimals).
    row = next(line for line in out.splitlines() if line.startswith("fair"))
    assert float(row.split()[1]) == pytest.approx(200 * 1_048_576 * 8 / 1e9, abs=5e-4)


def test_json_workloads_use_the_fast_model_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = small_workload(tmp_path / "chain.json")
    assert main(["simulate", "--workload", str(workload), "--policies", "fair"]) == 0
    assert "flow model fast" in capsys.readouterr().out.splitlines()[0]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("4 1\n1 1e300 1 0 1 1:1\n", "arrival time 1e300 is above the limit of 1e+11 ms"),
        ("4 1\n1 0 1 0 1 1:1e30\n", "reducer 1 size (MB) 1e30 is above the limit"),
        ("1000000000 1\n1 0 1 0 1 1:1\n", "number of ports 1000000000 is out of range"),
        # Within each limit alone, but the coflows × ports matrix would take 10 GB.
        (
            "10000 65536\n"
            + "".join(f"{i} 0 1 {i % 10000} 1 {(i + 1) % 10000}:1\n" for i in range(65536)),
            "65,536 coflows on 10,000 ports exceed the limit of 2,000",
        ),
    ],
)
def test_absurd_trace_values_are_refused_up_front(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    trace = tmp_path / "absurd.txt"
    trace.write_text(text)
    assert main(["simulate", "--workload", str(trace), "--policies", "fair"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert "absurd.txt:" in lines[0]
    assert message in lines[0]


def test_the_packaged_fb2010_trace_runs_with_no_shared_folder(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("BEAMER_FB2010", raising=False)
    status = main(["workload", "show", "fb2010", "--json"])
    assert status == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["coflows"] == 526


def test_a_bad_workload_leaves_no_output_directory(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("4 1\n1 0 1 0 1 1:x\n")
    out = tmp_path / "out"
    assert main(["simulate", "--workload", str(bad), "--out", str(out)]) == 2
    assert not out.exists()


def test_a_workload_with_no_experiments_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.json"
    json_format.write(Workload(2, 1e9, ()), empty)
    assert main(["simulate", "--workload", str(empty), "--json"]) == 2
    assert "has no experiments to simulate" in capsys.readouterr().err


def test_stages_that_take_no_time_give_no_ratio_and_valid_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace whose only coflow has no bytes: every SCT is 0, so there is no ratio to
    Beamer and no slowdown. The JSON says null (NaN is not JSON), the table n/a."""
    trace = tmp_path / "zero.txt"
    trace.write_text("4 1\n1 0 1 0 1 1:0\n")
    argv = ["simulate", "--workload", str(trace), "--policies", "beamer,fifo", "--jobs", "1"]
    assert main([*argv, "--json", "--out", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    result = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))
    assert result["fifo"]["avg_sct_s"] == 0.0
    assert result["fifo"]["avg_slowdown"] is None
    assert "avg_sct_rel" not in result["fifo"]
    assert (tmp_path / "out" / "summary.csv").exists()
    assert main(argv) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    fifo = next(row for row in rows if row[:1] == ["fifo"])
    assert fifo[-1] == "n/a" and "nan" not in fifo


@pytest.mark.parametrize(
    "in_the_way", ["stages.csv", "sct_cdf_ideal.png", "avg_sct_vs_beamer_ideal.png"]
)
def test_outputs_are_checked_before_the_runs_and_written_all_or_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], in_the_way: str
) -> None:
    workload = small_workload(tmp_path / "chain.json")
    out = tmp_path / "out"
    (out / in_the_way).mkdir(parents=True)
    argv = ["simulate", "--workload", str(workload), "--policies", "beamer,fair", "--out", str(out)]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert f"{in_the_way}: cannot write: is a directory" in captured.err
    assert captured.out == ""  # refused before the runs, not after
    assert sorted(p.name for p in out.iterdir()) == [in_the_way]  # no partial set


def test_an_out_directory_that_cannot_be_written_is_refused_before_the_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = small_workload(tmp_path / "chain.json")
    assert main(["simulate", "--workload", str(workload), "--out", "/proc"]) == 2
    captured = capsys.readouterr()
    assert "--out /proc: cannot write there" in captured.err
    assert captured.out == ""


def test_a_set_of_outputs_that_fails_midway_leaves_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails after the first files (a full disk) takes them back."""
    import control.files

    workload = small_workload(tmp_path / "chain.json")
    out = tmp_path / "out"
    staged = control.files._staged

    def full_disk_at_the_plots(target: Path, write: object) -> Path:
        if target.suffix == ".png":
            raise control.files.UserError(f"{target}: cannot write: No space left on device")
        return staged(target, write)  # type: ignore[arg-type]

    monkeypatch.setattr(control.files, "_staged", full_disk_at_the_plots)
    argv = ["simulate", "--workload", str(workload), "--policies", "fair", "--out", str(out)]
    assert main(argv) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert not out.exists()  # made for the outputs, and left empty: removed again
