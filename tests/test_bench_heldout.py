"""``python -m bench.heldout``: Ctrl-C is one line and status 130, and a setting named
twice is refused (it ran twice and counted its seeds twice)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import child_pids, interruptible
from test_bench_options import refused

from sim.executors import _running

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ("default ideal,default ideal", "--settings: 'default ideal' given more than once"),
        ("default ideal,,sha-only 8q", "--settings: 'default ideal,,sha-only 8q' has an empty"),
    ],
)
def test_a_setting_given_twice_or_an_empty_one_is_refused(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    settings: str,
    message: str,
) -> None:
    line = refused("bench.heldout", ["--seeds", "11", "--settings", settings], monkeypatch, capsys)
    assert line.startswith(f"error: {message}")


def test_ctrl_c_is_one_line_and_status_130_and_ends_the_workers() -> None:
    """Ctrl-C at a terminal reaches the whole process group: the bench and every worker
    printed a KeyboardInterrupt traceback, and the bench died of SIGINT (status -2)."""
    argv = ["--seeds", "11-14", "--settings", "default ideal", "--policies", "beamer-lookahead"]
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.heldout", *argv, "--workers", "2"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, as a terminal's job is
        preexec_fn=interruptible,
    )
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while len(workers) < 2 and time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()[1].decode()
            time.sleep(0.2)
            workers = child_pids(process.pid)
        assert len(workers) >= 2
        time.sleep(1.0)  # into the runs (minutes each: the lookahead search)
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, err.decode()
    assert err.decode() == "interrupted\n"
    assert out == b""
    deadline = time.monotonic() + 20
    while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in workers if _running(pid)]


def test_sincronia_can_be_held_to_a_class_mapping_of_its_own() -> None:
    """``--sincronia-quantize`` maps the rival's ranking its own way, as ``--quantize``
    would map any policy's: with 4 classes a per-coflow order fares differently under
    ``exponential`` than under ``rank``, which every table used."""
    from bench.heldout import one_run

    as_rank = one_run("default 4q", 11, ["beamer"])
    own = one_run("default 4q", 11, ["beamer"], sincronia_quantize="exponential")
    assert own["sincronia"]["avg_sct_s"] != as_rank["sincronia"]["avg_sct_s"]
    assert own["beamer"] == {**as_rank["beamer"], "wall_s": own["beamer"]["wall_s"]}
    both = one_run("default 4q", 11, ["beamer"], "exponential", "exponential")
    assert both["sincronia"] == {**own["sincronia"], "wall_s": both["sincronia"]["wall_s"]}
    assert both["beamer"]["avg_sct_s"] != as_rank["beamer"]["avg_sct_s"]


def _report(path: Path, quantize: str | None = "rank") -> Path:
    """An earlier report holding one made-up Beamer run: a figure no simulation gives."""
    run = {"setting": "default 4q", "seed": 11, "sincronia": {"avg_sct_s": 9.0, "p99_sct_s": 9.0}}
    run["beamer"] = {"avg_sct_s": 1.0, "p99_sct_s": 2.0, "wall_s": 0.5}
    report: dict[str, object] = {"seeds": [11], "policies": ["beamer"], "runs": [run]}
    if quantize is not None:
        report["quantize"] = quantize
    path.write_text(json.dumps(report), encoding="utf-8")
    return path


def test_reuse_takes_the_policies_runs_from_a_report_and_runs_sincronia_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench.heldout import main, one_run

    earlier = _report(tmp_path / "earlier.json", quantize=None)  # before the option: rank
    argv = ["--seeds", "11", "--settings", "default 4q", "--policies", "beamer"]
    argv += ["--sincronia-quantize", "exponential", "--reuse", str(earlier), "--workers", "1"]
    monkeypatch.setattr(sys, "argv", ["bench.heldout", *argv])
    main()
    report = json.loads(capsys.readouterr().out)
    (run,) = report["runs"]
    assert run["beamer"] == {"avg_sct_s": 1.0, "p99_sct_s": 2.0, "wall_s": 0.5}
    fresh = one_run("default 4q", 11, [], sincronia_quantize="exponential")["sincronia"]
    assert run["sincronia"]["avg_sct_s"] == fresh["avg_sct_s"]  # not the file's 9.0
    entry = report["settings"]["default 4q"]["beamer"]
    assert entry["over_sincronia_mean"] == 1.0 / fresh["avg_sct_s"]
    assert report["sincronia_quantize"] == "exponential" and report["quantize"] == "rank"


@pytest.mark.parametrize(
    ("quantize", "argv", "message"),
    [
        ("exponential", [], "its policies were mapped with 'exponential', not 'rank'"),
        ("rank", ["--seeds", "12"], "no run of beamer on 'default 4q', seed 12"),
        ("rank", ["--policies", "fair"], "no run of fair on 'default 4q', seed 11"),
    ],
)
def test_reuse_refuses_a_report_that_does_not_hold_the_runs_asked_for(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    quantize: str,
    argv: list[str],
    message: str,
) -> None:
    earlier = _report(tmp_path / "earlier.json", quantize)
    base = ["--seeds", "11", "--settings", "default 4q", "--policies", "beamer"]
    line = refused("bench.heldout", [*base, *argv, "--reuse", str(earlier)], monkeypatch, capsys)
    assert line == f"error: {earlier}: {message}"
