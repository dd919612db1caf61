"""Loader (named workloads, format by content, load rescaling) and ``beamer workload``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from control.cli import main
from control.errors import UserError
from workloads import json_format
from workloads.hp_tuning import HpTuningConfig, generate
from workloads.loader import load_workload
from workloads.summary import offered_load, summarize

DATA = Path(__file__).parent / "data"


def test_hp_tuning_spec_uses_seed_and_load() -> None:
    workload = load_workload("hp-tuning", seed=4, load=0.5)
    assert workload == generate(HpTuningConfig(seed=4, load=0.5))
    assert offered_load(workload) == pytest.approx(0.5)


def test_format_is_detected_by_content_not_name(tmp_path: Path) -> None:
    json_named_txt = tmp_path / "workload.txt"
    shutil.copy(DATA / "tiny_workload.json", json_named_txt)
    trace_named_json = tmp_path / "trace.json"
    shutil.copy(DATA / "tiny_trace.txt", trace_named_json)
    assert load_workload(str(json_named_txt)).experiments[0].experiment_id == 7
    assert len(load_workload(str(trace_named_json)).experiments) == 3


def test_json_array_is_refused_as_json_not_as_a_trace(tmp_path: Path) -> None:
    listed = tmp_path / "workload.json"
    listed.write_text("  [1, 2, 3]\n")
    with pytest.raises(UserError, match=r"workload.json:1: \$: expected an object, got an array"):
        load_workload(str(listed))


def test_load_rescales_trace_arrivals() -> None:
    trace = str(DATA / "tiny_trace.txt")
    original = load_workload(trace)
    scaled = load_workload(trace, load=0.25)
    assert offered_load(scaled) == pytest.approx(0.25)
    factor = scaled.experiments[2].arrival_s / original.experiments[2].arrival_s
    assert offered_load(original) == pytest.approx(0.25 * factor)


def test_summary_counts() -> None:
    summary = summarize(load_workload(str(DATA / "tiny_workload.json")))
    assert (summary.experiments, summary.stages, summary.trial_stages) == (1, 2, 3)
    assert (summary.coflows, summary.flows, summary.total_bytes) == (5, 18, 10_000)
    assert summary.offered_load is None


def test_unknown_spec_is_a_user_error() -> None:
    with pytest.raises(UserError, match=r"no such file \(named workloads: hp-tuning, fb2010\)"):
        load_workload("hp-tunnig")


def test_cli_generate_then_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "w.json"
    assert main(["workload", "generate", "--seed", "2", "--load", "0.6", "--out", str(out)]) == 0
    assert json_format.read(out) == generate(HpTuningConfig(seed=2, load=0.6))
    capsys.readouterr()
    assert main(["workload", "show", str(out), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["offered_load"] == pytest.approx(0.6)
    assert shown["experiments"] == len(json_format.read(out).experiments)
    assert main(["workload", "show", str(out)]) == 0
    assert "offered load          0.600" in capsys.readouterr().out


def test_cli_generate_shrunk_workload(tmp_path: Path) -> None:
    out = tmp_path / "small.json"
    argv = ["workload", "generate", "--link-bps", "20e6", "--time-scale", "0.1", "--out", str(out)]
    assert main(argv) == 0
    small = json_format.read(out)
    assert small.link_bps == 20e6
    assert offered_load(small) == pytest.approx(0.8)


def test_cli_bad_file_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("4 1\n1 0 1 0 1 7:1\n")
    assert main(["workload", "show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == f"beamer: error: {bad}:2: unknown reducer port 7 (trace has ports 0..3)\n"


def test_cli_trace_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "trace.txt"
    assert main(["workload", "to-trace", str(DATA / "tiny_trace.txt"), "--out", str(out)]) == 0
    assert (
        load_workload(str(out)).experiments
        == load_workload(str(DATA / "tiny_trace.txt")).experiments
    )


def test_offline_command_writes_a_trace_simulate_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "offline.txt"
    status = main(["workload", "offline", "fb2010", "--max-flows", "400", "--out", str(out)])
    assert status == 0
    assert "439 coflows" in capsys.readouterr().out
    workload = load_workload(str(out))
    assert len(workload.experiments) == 439
    assert {e.arrival_s for e in workload.experiments} == {0.0}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["workload", "offline", "fb2010", "--max-flows", "0"], "--max-flows: must be at least 1"),
        (["workload", "offline", "absent.txt"], "absent.txt: no such file"),
        (["workload", "generate", "--jobs", "1000000000"], "num_jobs must be 1..10000"),
        (["workload", "generate", "--hosts", "1000000000"], "num_hosts must be 2..10000"),
    ],
)
def test_bad_workload_arguments_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    out = tmp_path / "out.txt"
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert message in err
    assert not out.exists()
