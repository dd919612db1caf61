"""``beamer sweep GRIDFILE`` on the local executor: grid files, outputs, failures, resume."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sweep_helpers import records, write_grid

import sim.grid
import sim.sweep
import sim.sweep_report
from control.cli import main
from control.errors import UserError
from sim.grid import load_grid, run_key
from sim.sweep import SweepRun, read_records
from sim.sweep_report import aggregate, write_reports


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

    def counted(spec: SweepRun) -> dict[str, float]:
        calls.append(spec)
        return real(spec)

    monkeypatch.setattr(sim.sweep, "sweep_run", counted)
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


# --- limits and malformed input: one line, before anything runs or is expanded -----------


SEVEN_PARAMETERS = (
    "policies: [beamer, fair]\nseeds: [1, 2, 3]\nfigures:\n  - name: big\n    vary:\n"
    "      load: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]\n"
    "      queues: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
    "      eta: [2, 3, 4, 5, 6, 7, 8, 9, 10, 11]\n"
    "      max_trials: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
    "      jobs: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
    "      hosts: [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]\n"
    "      mix: [sha, hyperband, mixed]\n"
)


def _alias_bomb(levels: int) -> str:
    """A ``figures`` field whose last anchor is a list of 10**levels integers, in one line."""
    anchors = ["&x0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for level in range(1, levels):
        anchors.append(f"&x{level} [" + ", ".join([f"*x{level - 1}"] * 10) + "]")
    return "figures: [" + ", ".join(anchors) + "]\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            SEVEN_PARAMETERS,
            "small.yaml:5: figures[0].vary: 3,000,000 settings × 3 seeds × 2 policies = "
            "18,000,000 runs, over the limit of 100,000 runs per grid",
        ),
        (
            "policies: [beamer]\nseeds: [1]\nfigures:\n  - name: a\n    vary: {load: [1, 2]}\n"
            "  - name: b\n    vary:\n      load: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
            "      jobs: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
            "      eta: [2, 3, 4, 5, 6, 7, 8, 9, 10, 11]\n"
            "      hosts: [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]\n"
            "      max_trials: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n",
            "small.yaml:7: figures[1].vary: 100,000 settings (100,002 with the figures above) "
            "× 1 seed × 1 policy = 100,002 runs, over the limit",
        ),
        (
            "policies: " + "[" * 1000 + "]" * 1000 + "\n",
            "small.yaml:1: nested deeper than 32 levels of lists and mappings",
        ),
        (
            "policies: [beamer]\nseeds: [1" + "0" * 5000 + "]\nfigures: []\n",
            "small.yaml:2: seeds[0]: an integer of more than 4300 digits",
        ),
        (
            "policies: [beamer]\nseeds: [1]\ndefaults:\n  jobs: 1" + "0" * 5000 + "\nfigures: []\n",
            "small.yaml:4: defaults.jobs: an integer of more than 4300 digits",
        ),
        (
            "policies: [beamer]\nseeds: [1]\nfigures:\n  - name: a\n"
            "    vary: {jobs: [1, 0x" + "f" * 4000 + "]}\n",
            "small.yaml:5: figures[0].vary.jobs[1]: '0xffff",  # not decimal, however short
        ),
        (
            "policies: [beamer]\nseeds: [1]\ndefaults: {load: 1" + "0" * 400 + "}\nfigures: []\n",
            "small.yaml:3: defaults.load: must be a positive number, not 1000",
        ),
        (
            "policies: [beamer]\nseeds: [1]\ndefaults: {load: !!float x}\nfigures: []\n",
            "small.yaml:3: defaults.load: not a valid float: 'x'",
        ),
        (
            "policies: [beamer]\nseeds: [1]\ndefaults: {jobs: 0x_}\nfigures: []\n",
            "small.yaml:3: defaults.jobs: not a valid int: '0x_'",
        ),
        (
            "policies: [beamer]\nseeds: [1]\nfigures:\n  - name: a\n"
            "    vary: {load: [1], load: [2]}\n",
            "small.yaml:5: figures[0].vary.load: appears twice",
        ),
        (  # a setting run twice would count twice in the figure's table
            "policies: [beamer]\nseeds: [1]\nfigures:\n  - name: a\n"
            "    vary: {queues: [2, ideal, 2]}\n",
            "small.yaml:5: figures[0].vary.queues[2]: repeats a value",
        ),
        (
            _alias_bomb(6) + "policies: [beamer]\nseeds: [1]\ndefaults: {load: *x5}\n",
            "small.yaml:4: defaults.load: must be a positive number, not [[...], [...], [...], "
            "[...], ...]",
        ),
        (
            _alias_bomb(6) + "policies: [beamer]\nseeds: [1]\n? *x5\n: 1\n",
            "small.yaml:1: key [[...], [...], [...], [...], ...] is not a name",  # where x5 is
        ),
        (
            "policies: [beamer]\nseeds: [1]\nfigures:\n  - name: " + "a" * 300 + "\n"
            "    vary: {load: [1]}\n",
            "small.yaml:4: figures[0].name: 300 characters, more than the 100 a figure name "
            "may have",
        ),
        (
            'policies: [beamer]\nseeds: [1]\nfigures:\n  - name: "a\\n"\n    vary: {load: [1]}\n',
            "small.yaml:4: figures[0].name: must be a name of letters",
        ),
        (
            'policies: [beamer]\nseeds: [1]\n"a\\nb": 1\nfigures: []\n',
            "small.yaml:3: a\\nb: unknown field",
        ),
        (
            "policies: [beamer, " + "x" * 100_000 + "]\nseeds: [1]\nfigures: []\n",
            "small.yaml:1: policies[1]: unknown policy '"
            + "x" * 27
            + "..."
            + "x" * 28
            + "' (known",
        ),
        (
            "policies: [beamer]\nseeds: [1]\nfigures:\n  - name: Load\n    vary: {load: [1]}\n"
            "  - name: load\n    vary: {load: [2]}\n",
            "small.yaml:6: figures[1].name: 'load' differs from 'Load' only in case",
        ),
    ],
)
def test_grid_beyond_limits_is_one_line_before_expanding(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    text: str,
    message: str,
) -> None:
    made: list[object] = []
    real = sim.grid._point

    def counted(*args: Any) -> Any:  # without a limit the big grids never end: stop them
        made.append(None)
        if len(made) > 10_000:
            raise AssertionError("the grid is being expanded")
        return real(*args)

    monkeypatch.setattr(sim.grid, "_point", counted)
    grid = write_grid(tmp_path, text)
    out = tmp_path / "out"
    assert main(["sweep", str(grid), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"beamer: error: {tmp_path / message}"), err[:300]
    assert err.count("\n") == 1 and len(err) < 600, err[:300]
    assert len(made) <= 2  # at most the settings of a small figure above
    assert not out.exists()


def test_grid_at_the_run_limit_is_read(tmp_path: Path) -> None:
    values = ", ".join(str(0.01 * (index + 1)) for index in range(100))
    text = (
        "policies: [beamer, fair]\nseeds: [1, 2, 3, 4, 5]\n"
        f"figures:\n  - name: a\n    vary:\n      load: [{values}]\n"
        f"      queues: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
    )
    grid = load_grid(write_grid(tmp_path, text))
    assert len(grid.points()) * len(grid.seeds) * len(grid.policies) == 10_000


def test_a_grid_with_every_seed_of_the_run_limit_typed_out_is_read_and_a_larger_file_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seeds = ", ".join(str(seed) for seed in range(1, 100_001))  # 100,000 runs
    text = f"policies: [fair]\nseeds: [{seeds}]\nfigures:\n  - name: a\n    vary: {{load: [1]}}\n"
    assert len(text.encode()) < sim.grid.MAX_GRID_BYTES
    assert len(load_grid(write_grid(tmp_path, text)).seeds) == 100_000
    huge = write_grid(tmp_path, text + "#" * sim.grid.MAX_GRID_BYTES, "huge.yaml")
    assert main(["sweep", str(huge), "--out", str(tmp_path / "out")]) == 2
    assert "above the limit of 1,048,576 bytes for a grid file" in capsys.readouterr().err


# --- runs.jsonl written by someone else: every bad line is one line naming it ----------------


def _good_record(tmp_path: Path, seed: int = 1, policy: str = "beamer") -> dict[str, Any]:
    point = load_grid(write_grid(tmp_path)).points()[0]
    return {
        "key": run_key(point, seed, policy),
        "point": point.as_dict(),
        "seed": seed,
        "policy": policy,
        "metrics": {"avg_sct_s": 2.5, "avg_slowdown": 1.5, "stages": 4.0, "wall_s": 0.1},
    }


def _metric(name: str, value: object) -> Callable[[dict[str, Any]], object]:
    def change(record: dict[str, Any]) -> object:
        record["metrics"][name] = value
        return record

    return change


def _without(field: str) -> Callable[[dict[str, Any]], object]:
    def change(record: dict[str, Any]) -> object:
        del record[field]
        return record

    return change


def _field(field: str, value: object) -> Callable[[dict[str, Any]], object]:
    def change(record: dict[str, Any]) -> object:
        record[field] = value
        return record

    return change


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_field("metrics", {}), "metrics.avg_sct_s: missing"),
        (_without("metrics"), "metrics: missing"),
        (_field("metrics", [1.0]), "metrics: not a JSON object"),
        (_metric("avg_sct_s", "2.5"), "metrics.avg_sct_s: not a number"),
        (_metric("avg_sct_s", True), "metrics.avg_sct_s: not a number"),
        (_metric("avg_sct_s", float("nan")), "metrics.avg_sct_s: NaN, not a number of seconds"),
        (_metric("avg_sct_s", float("inf")), "metrics.avg_sct_s: infinite or too large"),
        (_metric("avg_slowdown", float("-inf")), "metrics.avg_slowdown: infinite or too large"),
        (_metric("avg_sct_s", 10**400), "metrics.avg_sct_s: infinite or too large"),
        (_metric("avg_sct_s", -2.5), "metrics.avg_sct_s: negative (-2.5)"),
        (_metric("stages", -1), "metrics.stages: negative (-1)"),
        (_metric("a\nb", "1"), 'metrics."a\\nb": not a number'),
        (_without("key"), "key: missing"),
        (_without("seed"), "seed: missing"),
        (_field("seed", "1"), "seed: not an integer"),
        (_field("policy", None), "policy: not a string"),
        (_field("point", {"load": {"deep": 1}}), "point.load: not a parameter value"),
        (_field("seed", 2), "key: does not match the record's point, seed and policy"),
        (lambda record: [record], "not a JSON object"),
        (lambda record: "[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (lambda record: '{"seed": 1' + "0" * 5000 + "}", "a number of more than 4300 digits"),
        (lambda record: '{"key": "cut', "invalid JSON at column 9"),
    ],
)
def test_bad_run_record_is_one_line_naming_file_and_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    change: Callable[[dict[str, Any]], object],
    message: str,
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    bad = change(_good_record(tmp_path))
    lines = [
        json.dumps(_good_record(tmp_path)),
        bad if isinstance(bad, str) else json.dumps(bad),
        json.dumps(_good_record(tmp_path, policy="fair")),
    ]
    runs = out / "runs.jsonl"
    runs.write_text("\n".join(lines) + "\n")

    def must_not_run(spec: SweepRun) -> dict[str, float]:
        raise AssertionError("a run started")

    monkeypatch.setattr(sim.sweep, "sweep_run", must_not_run)
    assert main(["sweep", str(write_grid(tmp_path)), "--out", str(out), "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"beamer: error: {runs}:2: not a run record: {message}"), err[:300]
    assert err.count("\n") == 1
    assert runs.read_text() == "\n".join(lines) + "\n"
    assert sorted(path.name for path in out.iterdir()) == ["runs.jsonl"]


def test_run_records_keep_nan_where_the_simulator_writes_it(tmp_path: Path) -> None:
    # summarize gives NaN for a mean over nothing (no slowdown when stages take no time)
    record = _good_record(tmp_path)
    record["metrics"]["avg_slowdown"] = float("nan")
    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps(record) + "\n")
    assert list(read_records(runs)) == [record["key"]]


def test_a_run_record_holding_a_raw_line_separator_is_one_line(tmp_path: Path) -> None:
    """JSON strings may hold U+2028 and U+2029 raw; only a newline ends a record."""
    named = tmp_path / "a\u2028b\u2029c\x85.json"
    named.write_bytes((Path(__file__).parent / "data" / "tiny_workload.json").read_bytes())
    grid = "policies: [fair]\nseeds: [1]\nfigures:\n  - name: f\n    vary: {workload: [W]}\n"
    point = load_grid(write_grid(tmp_path, grid.replace("W", json.dumps(str(named))))).points()[0]
    record = {
        "key": run_key(point, 1, "fair"),
        "point": point.as_dict(),
        "seed": 1,
        "policy": "fair",
        "metrics": {"avg_sct_s": 2.5, "avg_slowdown": 1.5, "stages": 4.0, "wall_s": 0.1},
    }
    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
    assert "\u2028" in runs.read_text(encoding="utf-8")
    assert list(read_records(runs)) == [record["key"]]


def test_complete_last_line_without_newline_is_checked_not_dropped(tmp_path: Path) -> None:
    runs = tmp_path / "runs.jsonl"
    good = json.dumps(_good_record(tmp_path))
    runs.write_text(good + "\n" + good.replace('"avg_sct_s": 2.5', '"avg_sct_s": NaN'))
    with pytest.raises(UserError, match=r"runs.jsonl:2: not a run record: metrics.avg_sct_s"):
        read_records(runs)
    runs.write_text(good + "\n" + good[:40])  # cut short by a kill: dropped
    assert len(read_records(runs)) == 1
    assert runs.read_text() == good + "\n"


def test_reference_without_sct_gives_no_ratio(tmp_path: Path) -> None:
    grid = load_grid(write_grid(tmp_path))
    setting = grid.figures[0].settings[0]
    records: dict[str, Any] = {}
    for seed, reference_sct in ((1, 0.0), (2, 2.0)):
        for policy, sct in (("beamer", reference_sct), ("sincronia", 3.0), ("fair", 4.0)):
            key = run_key(setting.point, seed, policy)
            records[key] = {"key": key, "metrics": {"avg_sct_s": sct}}
    rows = aggregate(grid, grid.figures[0], records)
    fair = next(row for row in rows if row["setting"] == setting.label and row["policy"] == "fair")
    assert fair["seeds"] == 1 and fair["avg_sct_rel"] == 2.0 and fair["per_seed"] == {2: 2.0}
    assert fair["avg_sct_s"] == 4.0


def test_workload_without_experiments_is_refused_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = tmp_path / "empty.json"
    workload.write_text(
        '{"format": "beamer-workload/1", "num_hosts": 2, "link_bps": 1e9, "experiments": []}'
    )
    text = (
        "policies: [beamer, fair]\nseeds: [1]\n"
        f"figures:\n  - name: a\n    vary: {{workload: [{workload}]}}\n"
    )
    out = tmp_path / "out"
    assert main(["sweep", str(write_grid(tmp_path, text)), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"beamer: error: {tmp_path / 'small.yaml'}:5: figures[0].vary.workload[0]: {workload}: "
        "no experiments, so no SCT to compare\n"
    )
    assert not out.exists()


def test_run_without_an_average_sct_fails_instead_of_being_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = sim.sweep.summarize

    def no_stage(*args: Any) -> dict[str, float]:
        return {**real(*args), "avg_sct_s": float("nan")}

    monkeypatch.setattr(sim.sweep, "summarize", no_stage)
    text = (
        "policies: [beamer]\nseeds: [1]\ndefaults: {jobs: 1, hosts: 10, mix: sha, max_trials: 2}\n"
        "figures:\n  - name: a\n    vary: {load: [0.5]}\n"
    )
    out = tmp_path / "out"
    assert main(["sweep", str(write_grid(tmp_path, text)), "--out", str(out), "--jobs", "1"]) == 1
    assert "no stage finished, so there is no average SCT" in capsys.readouterr().err
    assert not (out / "runs.jsonl").exists()
    assert "nan" not in (out / "table.md").read_text()


def test_plot_of_a_figure_with_many_settings_stays_bounded(tmp_path: Path) -> None:
    values = ", ".join(str(0.001 * (index + 1)) for index in range(600))
    text = (
        "policies: [beamer, fair]\nseeds: [1]\n"
        f"figures:\n  - name: a\n    vary: {{load: [{values}]}}\n"
    )
    grid = load_grid(write_grid(tmp_path, text))
    write_reports(tmp_path, grid, {})
    header = (tmp_path / "a.png").read_bytes()[:24]
    width = int.from_bytes(header[16:20], "big")  # the PNG's IHDR chunk
    assert width <= sim.sweep_report.MAX_PLOT_INCHES * 120


@pytest.mark.parametrize(
    ("in_the_way", "message"),
    [
        ("classes.png", "classes.png: cannot write: is a directory"),
        ("runs.jsonl", "runs.jsonl: cannot write: is a directory"),
        ("failures.jsonl", "failures.jsonl: cannot write: is a directory"),
    ],
)
def test_an_output_that_cannot_be_written_is_refused_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], in_the_way: str, message: str
) -> None:
    """Found after the runs, it would cost them (and leave some reports without the rest)."""
    out = tmp_path / "out"
    (out / in_the_way).mkdir(parents=True)
    argv = ["sweep", str(write_grid(tmp_path)), "--out", str(out), "--jobs", "1", "--restart"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert sorted(p.name for p in out.iterdir()) == [in_the_way]


@pytest.mark.parametrize(
    ("out", "message"),
    [("", "--out: an empty directory name"), ("/proc", "--out /proc: cannot write there")],
)
def test_an_unusable_out_directory_is_refused_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], out: str, message: str
) -> None:
    assert main(["sweep", str(write_grid(tmp_path)), "--out", out, "--jobs", "1"]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""
    assert not (tmp_path / "runs.jsonl").exists()


@pytest.mark.parametrize(
    ("defaults", "vary", "message"),
    [
        (
            "{jobs: 2, hosts: 10, mix: sha, max_trials: 4}",
            "{load: [0.5, 1.0e-300]}",
            "load=1e-300 quantize=rank mix=sha max_trials=4 jobs=2 hosts=10: load: 1e-300 spreads",
        ),
        (
            "{}",
            "{workload: [WORKLOAD], load: [0.5]}",
            "load=0.5 quantize=rank mix=mixed: load: cannot set the load",
        ),
    ],
    ids=["load", "load on a file"],
)
def test_a_setting_no_workload_can_satisfy_is_refused_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], defaults: str, vary: str, message: str
) -> None:
    """Not one failed run per seed and policy, each with its traceback in failures.jsonl."""
    workload = Path(__file__).parent / "data" / "tiny_workload.json"
    text = (
        f"policies: [fifo, fair]\nseeds: {'[1]' if 'WORKLOAD' in vary else '[1, 2]'}\n"
        f"defaults: {defaults}\n"
        f"figures:\n  - name: a\n    vary: {vary.replace('WORKLOAD', str(workload))}\n"
    )
    out = tmp_path / "out"
    assert main(["sweep", str(write_grid(tmp_path, text)), "--out", str(out), "--jobs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "small.yaml: the setting workload=" in err[0] and message in err[0]
    assert not out.exists()
