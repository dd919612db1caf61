"""``beamer sweep GRIDFILE`` on the local executor: grid files, outputs, failures, resume."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from sweep_helpers import records, write_grid

import sim.sweep
from control.cli import main
from sim.grid import load_grid
from sim.sweep import SweepRun


def test_grid_points_are_shared_between_figures(tmp_path: Path) -> None:
    grid = load_grid(write_grid(tmp_path))
    assert [figure.name for figure in grid.figures] == ["load", "classes"]
    assert [s.label for s in grid.figures[0].settings] == ["0.5", "1.0"]
    # "classes ideal at load 1.0" is "load 1.0": three distinct points, not four.
    assert len(grid.points()) == 3
    assert grid.figures[1].settings[0].point.queues == 2
    assert grid.figures[1].settings[1].point == grid.figures[0].settings[1].point


def test_json_grid_reads_like_yaml(tmp_path: Path) -> None:
    as_json = json.dumps(
        {
            "policies": ["beamer", "fair"],
            "seeds": [1],
            "figures": [{"name": "mix", "vary": {"mix": ["sha", "hyperband"]}}],
        },
        indent=2,
    )
    grid = load_grid(write_grid(tmp_path, as_json, "grid.json"))
    assert [s.point.mix for s in grid.figures[0].settings] == ["sha", "hyperband"]
    assert grid.figures[0].settings[0].point.load == 0.8


def test_sweep_writes_runs_csv_plot_and_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["sweep", str(write_grid(tmp_path)), "--out", str(out), "--jobs", "1"]) == 0
    stdout = capsys.readouterr().out
    found = records(out / "runs.jsonl")
    assert len(found) == 3 * 2 * 3  # points x seeds x policies
    for figure in ("load", "classes"):
        assert (out / f"{figure}.png").read_bytes()[:4] == b"\x89PNG"
    with (out / "load.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["setting"], row["policy"]) for row in rows][:3] == [
        ("0.5", "beamer"),
        ("0.5", "sincronia"),
        ("0.5", "fair"),
    ]
    fair = rows[2]
    ratios = []
    for seed in (1, 2):
        mine = [
            r["metrics"]["avg_sct_s"]
            for r in found.values()
            if r["seed"] == seed and r["point"]["load"] == 0.5 and r["policy"] == "fair"
        ]
        ref = [
            r["metrics"]["avg_sct_s"]
            for r in found.values()
            if r["seed"] == seed and r["point"]["load"] == 0.5 and r["policy"] == "beamer"
        ]
        ratios.append(mine[0] / ref[0])
    assert float(fair["avg_sct_rel"]) == pytest.approx(sum(ratios) / 2, rel=1e-5)
    assert float(fair["rel_min"]) == pytest.approx(min(ratios), rel=1e-5)
    assert int(fair["seeds"]) == 2
    assert "| figure `load` | beamer avg SCT s | sincronia / beamer | fair / beamer |" in stdout
    assert (out / "table.md").read_text() in stdout


def test_interrupted_sweep_resumes_without_rerunning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    grid = write_grid(tmp_path)
    complete = tmp_path / "complete"
    assert main(["sweep", str(grid), "--out", str(complete), "--jobs", "1"]) == 0

    real = sim.sweep.sweep_run
    calls: list[SweepRun] = []

    def interrupted(spec: SweepRun) -> dict[str, float]:
        if len(calls) == 4:
            raise KeyboardInterrupt
        calls.append(spec)
        return real(spec)

    out = tmp_path / "out"
    monkeypatch.setattr(sim.sweep, "sweep_run", interrupted)
    assert main(["sweep", str(grid), "--out", str(out), "--jobs", "1"]) == 130
    assert len((out / "runs.jsonl").read_text().splitlines()) == 4
    # A kill in the middle of writing a line leaves a partial last line: it is dropped.
    with (out / "runs.jsonl").open("a") as handle:
        handle.write('{"key": "cut sh')

    calls.clear()
    monkeypatch.setattr(sim.sweep, "sweep_run", lambda spec: calls.append(spec) or real(spec))
    assert main(["sweep", str(grid), "--out", str(out), "--jobs", "1"]) == 0
    assert len(calls) == 18 - 4
    assert "resuming, 4 of 18 runs already in" in capsys.readouterr().err
    assert records(out / "runs.jsonl") == records(complete / "runs.jsonl")
    assert (out / "load.csv").read_text() == (complete / "load.csv").read_text()


def test_failed_run_is_reported_with_its_grid_point_and_others_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = sim.sweep.sweep_run

    def flaky(spec: SweepRun) -> dict[str, float]:
        if spec.policy == "fair" and spec.seed == 2 and spec.point.queues == 2:
            raise RuntimeError("solver diverged")
        return real(spec)

    monkeypatch.setattr(sim.sweep, "sweep_run", flaky)
    out = tmp_path / "out"
    grid = write_grid(tmp_path)
    assert main(["sweep", str(grid), "--out", str(out), "--jobs", "1"]) == 1
    err = capsys.readouterr().err
    assert "run failed: workload=hp-tuning load=1.0 queues=2 " in err
    assert "seed=2 policy=fair: RuntimeError: solver diverged" in err
    assert "1 of 18 runs failed" in err
    assert len(records(out / "runs.jsonl")) == 17
    failure = json.loads((out / "failures.jsonl").read_text())
    assert (failure["seed"], failure["policy"], failure["point"]["queues"]) == (2, "fair", 2)
    assert "solver diverged" in failure["traceback"]
    with (out / "classes.csv").open() as handle:
        fair_2q = next(r for r in csv.DictReader(handle) if r["policy"] == "fair")
    assert fair_2q["setting"] == "2" and fair_2q["seeds"] == "1"

    # Run again: only the failed run runs, and the failures file goes away.
    monkeypatch.setattr(sim.sweep, "sweep_run", real)
    assert main(["sweep", str(grid), "--out", str(out), "--jobs", "1"]) == 0
    assert len(records(out / "runs.jsonl")) == 18
    assert not (out / "failures.jsonl").exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("policies: [beamer]\nseeds: [1]\n", "small.yaml:1: figures: missing"),
        (
            "policies: [beamer, nope]\nseeds: [1]\nfigures: []\n",
            "small.yaml:1: policies[1]: unknown policy 'nope'",
        ),
        (
            "policies: [beamer]\nseeds: [1, x]\nfigures: []\n",
            "small.yaml:2: seeds: must be a non-empty list of integers",
        ),
        (
            "policies: [beamer]\nseeds: [1]\nfigures:\n  - name: a\n    vary:\n"
            "      load: [0.5, -1]\n",
            "small.yaml:6: figures[0].vary.load[1]: must be a positive number, not -1",
        ),
        (
            "policies: [beamer]\nseeds: [1]\nfigures:\n  - name: a\n    vary: {eta: [1]}\n",
            "small.yaml:5: figures[0].vary.eta[0]: must be an integer >= 2, not 1",
        ),
        (
            "policies: [beamer]\nseeds: [1]\nfigures:\n  - name: a\n    vary: {mdoels: [x]}\n",
            "small.yaml:5: figures[0].vary.mdoels: unknown parameter",
        ),
        (
            "policies: [beamer]\nseeds: [1]\ndefaults: {models: [resnet50, bert]}\n"
            "figures:\n  - name: a\n    vary: {load: [1]}\n",
            "small.yaml:3: defaults.models: unknown model 'bert'",
        ),
        (
            "policies: [beamer]\nseeds: [1]\nfigures:\n  - name: a/b\n    vary: {load: [1]}\n",
            "small.yaml:4: figures[0].name: must be a name of letters",
        ),
        (
            "policies: [beamer]\nseeds: [1]\nfigures:\n  - name: a\n    vary: {load: [1]}\n"
            "  - name: a\n    vary: {load: [2]}\n",
            "small.yaml:6: figures[1].name: 'a' appears twice",
        ),
        ("policies: [beamer\nseeds: [1]\n", "small.yaml:2: not valid YAML or JSON"),
        (
            "policies: [beamer]\nseeds: [1]\nseeds: [2]\nfigures: []\n",
            "small.yaml:3: seeds: appears twice",
        ),
        (
            "policies: [beamer]\nseeds: [1]\nfigures:\n  - name: a\n"
            "    vary: {workload: [fb2010]}\n    fixed: {mix: sha}\n",
            "small.yaml:5: figures[0].vary: mix applies to the hp-tuning workload only",
        ),
    ],
)
def test_bad_grid_is_one_line_naming_file_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    grid = write_grid(tmp_path, text)
    out = tmp_path / "out"
    assert main(["sweep", str(grid), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"beamer: error: {tmp_path / message}"), err
    assert err.count("\n") == 1
    assert not out.exists()


def test_missing_grid_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", str(tmp_path / "none.yaml")]) == 2
    assert (
        capsys.readouterr().err == f"beamer: error: {tmp_path / 'none.yaml'}: no such grid file\n"
    )


def test_ray_address_needs_the_ray_executor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sweep", str(write_grid(tmp_path)), "--ray-address", "127.0.0.1:6379"]) == 2
    assert "--ray-address applies to --executor ray only" in capsys.readouterr().err


def test_unreachable_ray_address_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["sweep", str(write_grid(tmp_path)), "--out", str(out), "--executor", "ray"]
    assert main([*argv, "--ray-address", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.endswith(
        "--ray-address 127.0.0.1:1: no Ray head answers there (Connection refused)\n"
    )
    assert not (out / "runs.jsonl").exists()


def test_repository_grids_are_valid() -> None:
    root = Path(__file__).resolve().parent.parent / "sweeps"
    grids = sorted(root.glob("*.yaml"))
    assert grids, "the repository carries its sweep grids"
    for path in grids:
        grid = load_grid(path)
        assert grid.reference == "beamer"
