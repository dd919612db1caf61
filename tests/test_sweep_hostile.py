"""``beamer sweep`` against hostile input and surroundings: a refused command changes
nothing, outputs that cannot be written are found before any run, valid YAML and JSON
grids are read, errors point at the field that holds the value, and large figures are
written in time linear in their settings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sweep_helpers import FAST_GRID, write_grid, write_records

import sim.grid
import sim.sweep
import sim.sweep_report
from control.cli import main
from control.errors import UserError
from sim.executors import Executor
from sim.grid import Point, load_grid
from sim.sweep import SweepRun
from sim.sweep_report import write_reports

ROOT = Path(__file__).resolve().parent.parent


def _must_not_run(spec: SweepRun) -> dict[str, float]:
    raise AssertionError("a run started")


def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and err.startswith("beamer: error: "), err[:500]
    return err


def _listing(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


# --- a refused command changes nothing ---------------------------------------------------


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("x", "--ray-address: 'x' is not HOST:PORT"),
        ("http://127.0.0.1:1", "--ray-address: 'http://127.0.0.1:1' is not HOST:PORT"),
        ("x://", "--ray-address: 'x://' is not HOST:PORT"),
        ("ray://x", "--ray-address: 'ray://x' is not HOST:PORT"),
        ("127.0.0.1:1", "--ray-address 127.0.0.1:1: no Ray head answers there"),
    ],
)
def test_a_refused_ray_address_keeps_the_results_restart_would_replace(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    address: str,
    message: str,
) -> None:
    pytest.importorskip("ray")  # without it the command stops earlier, as it should
    monkeypatch.setattr(sim.sweep, "sweep_run", _must_not_run)
    grid = write_grid(tmp_path, FAST_GRID)
    out = tmp_path / "out"
    write_records(grid, out, {"fifo-lm": 1.0, "fair": 2.0})
    (out / "table.md").write_text("the table of those runs\n")
    before = _listing(out)
    argv = ["sweep", str(grid), "--out", str(out), "--restart", "--executor", "ray"]
    assert main([*argv, "--ray-address", address]) == 2
    assert message in _one_line(capsys.readouterr().err)
    assert _listing(out) == before


@pytest.mark.parametrize("address", ["x", "127.0.0.1:1"])
def test_a_refused_ray_address_leaves_no_out_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], address: str
) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "new"
    argv = ["sweep", str(write_grid(tmp_path, FAST_GRID)), "--out", str(out)]
    assert main([*argv, "--executor", "ray", "--ray-address", address]) == 2
    _one_line(capsys.readouterr().err)
    assert not out.exists()


@pytest.mark.parametrize("address", ["x", "http://127.0.0.1:1", "ray://", "127.0.0.1:99999"])
def test_the_form_of_a_ray_address_is_checked_when_the_executor_is_made(address: str) -> None:
    """Before ``beamer simulate`` or ``beamer sweep`` prepares or runs anything."""
    with pytest.raises(UserError, match=r"^--ray-address: .* is not HOST:PORT"):
        Executor("ray", 1, address)


def test_the_ray_head_is_checked_before_the_outputs_are_prepared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("ray")

    def too_early(*args: object) -> None:
        raise AssertionError("the outputs were prepared before the executor was checked")

    monkeypatch.setattr(sim.sweep, "outputs_ready", too_early)
    monkeypatch.setattr(sim.sweep, "read_records", too_early)
    argv = ["sweep", str(write_grid(tmp_path, FAST_GRID)), "--out", str(tmp_path / "out")]
    assert main([*argv, "--executor", "ray", "--ray-address", "127.0.0.1:1"]) == 2
    assert "no Ray head answers there" in _one_line(capsys.readouterr().err)


def test_an_unreachable_ray_client_address_is_one_line_and_does_not_import_ray(
    tmp_path: Path,
) -> None:
    """Ray's client retried for 30 s and wrote its log, a warning and the error."""
    pytest.importorskip("ray")
    grid = write_grid(tmp_path, FAST_GRID)
    code = f"""
import sys
from control.cli import main
status = main(["sweep", {str(grid)!r}, "--out", {str(tmp_path / "out")!r},
               "--executor", "ray", "--ray-address", "ray://127.0.0.1:1"])
print(status, sorted(name for name in sys.modules if name == "ray" or name.startswith("ray.")))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "2 []"
    assert done.stderr == (
        "beamer: error: --ray-address ray://127.0.0.1:1: no Ray head answers there "
        "(Connection refused)\n"
    )
    assert not (tmp_path / "out").exists()


def test_restart_replaces_the_runs_only_when_a_new_run_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped before its first run finished, a restarted sweep keeps the old runs (and
    the reports made from them); once one finishes, runs.jsonl holds the new runs only."""
    grid = write_grid(tmp_path, FAST_GRID)
    out = tmp_path / "out"
    runs = write_records(grid, out, {"fifo-lm": 1.0, "fair": 2.0})
    old = runs.read_text()

    def interrupted(spec: SweepRun) -> dict[str, float]:
        raise KeyboardInterrupt

    argv = ["sweep", str(grid), "--out", str(out), "--jobs", "1", "--restart"]
    monkeypatch.setattr(sim.sweep, "sweep_run", interrupted)
    assert main(argv) == 130
    assert runs.read_text() == old

    monkeypatch.setattr(sim.sweep, "sweep_run", lambda spec: {"avg_sct_s": 3.0})
    assert main(argv) == 0
    new = [json.loads(line) for line in runs.read_text().splitlines()]
    assert len(new) == 8 and all(r["metrics"] == {"avg_sct_s": 3.0} for r in new)

    def failing(spec: SweepRun) -> dict[str, float]:
        raise RuntimeError("no result")

    monkeypatch.setattr(sim.sweep, "sweep_run", failing)
    assert main(argv) == 1
    assert not runs.exists()  # every run failed: no run is left from before the restart


def test_a_sweep_stopped_before_any_run_finished_leaves_no_out_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(spec: SweepRun) -> dict[str, float]:
        raise KeyboardInterrupt

    monkeypatch.setattr(sim.sweep, "sweep_run", interrupted)
    out = tmp_path / "new"
    argv = ["sweep", str(write_grid(tmp_path, FAST_GRID)), "--out", str(out), "--jobs", "1"]
    assert main(argv) == 130
    assert not out.exists()


@pytest.mark.parametrize("name", ["runs.jsonl", "table.md", "f.csv"])
def test_an_output_linked_into_a_missing_directory_is_refused_before_any_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    monkeypatch.setattr(sim.sweep, "sweep_run", _must_not_run)
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(tmp_path / "missing" / "x")
    argv = ["sweep", str(write_grid(tmp_path, FAST_GRID)), "--out", str(out), "--jobs", "1"]
    assert main(argv) == 2
    err = _one_line(capsys.readouterr().err)
    missing = tmp_path / "missing"
    assert f"{out / name}: cannot write: it links into {missing}, which does not exist" in err
    assert [path.name for path in out.iterdir()] == [name]


def test_an_output_linked_into_a_directory_that_takes_no_file_is_refused_before_any_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sim.sweep, "sweep_run", _must_not_run)
    out = tmp_path / "out"
    out.mkdir()
    (out / "table.md").symlink_to("/proc/table.md")
    argv = ["sweep", str(write_grid(tmp_path, FAST_GRID)), "--out", str(out), "--jobs", "1"]
    assert main(argv) == 2
    err = _one_line(capsys.readouterr().err)
    assert (
        f"{out / 'table.md'}: cannot write: it links into /proc, where no file can be made" in err
    )


@pytest.mark.parametrize("name", ["...yaml", "..yaml"])
def test_a_grid_name_that_names_no_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """out/sweep/.. is out itself."""
    monkeypatch.setattr(sim.sweep, "sweep_run", _must_not_run)
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", str(write_grid(tmp_path, FAST_GRID, name)), "--jobs", "1"]) == 2
    assert "name one with --out" in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


# --- records at the edge of what a float holds --------------------------------------------


def test_reports_are_written_for_ratios_near_the_largest_float(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Matplotlib failed to scale such an axis and the sweep ended with a traceback."""
    monkeypatch.setattr(sim.sweep, "sweep_run", _must_not_run)
    grid = write_grid(tmp_path, FAST_GRID)
    out = tmp_path / "out"
    write_records(grid, out, {"fifo-lm": 1.0, "fair": 1.7e308})
    assert main(["sweep", str(grid), "--out", str(out), "--jobs", "1"]) == 0
    assert (out / "f.png").read_bytes()[:4] == b"\x89PNG"
    assert "| 0.5 | 1.00 | 1.700e+308 (2/2) |" in capsys.readouterr().out


# --- grids that are valid YAML or JSON ----------------------------------------------------


_JSON_GRID: dict[str, Any] = {
    "policies": ["fifo-lm", "fair"],
    "seeds": [1],
    "defaults": {"jobs": 1, "hosts": 9},
    "figures": [{"name": "f", "vary": {"load": [1e-05, 0.5, 1]}}],
}


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(_JSON_GRID),  # 1e-05, as Python writes it
        json.dumps(_JSON_GRID).replace("1e-05", "1E-5").replace("0.5", "5e-1"),
        json.dumps(_JSON_GRID).replace("1e-05", "0.1e-4").replace("0.5", "0.5e0"),
        json.dumps(_JSON_GRID, indent="\t"),
        json.dumps(_JSON_GRID, indent=1).replace("\n ", "\n\t \t"),
    ],
    ids=["exponent", "exponent without dot", "exponent without sign", "tabs", "tabs and spaces"],
)
def test_json_grids_are_read_as_json(tmp_path: Path, text: str) -> None:
    grid = load_grid(write_grid(tmp_path, text, "grid.json"))
    assert [setting.point.load for setting in grid.figures[0].settings] == [1e-05, 0.5, 1.0]


def test_yaml_floats_in_json_and_yaml_1_2_forms(tmp_path: Path) -> None:
    text = FAST_GRID.replace("[0.5, 0.9]", "[5e-1, 9.0E-1, 1e+0, 2.5e1, .25e1]")
    grid = load_grid(write_grid(tmp_path, text))
    assert [s.point.load for s in grid.figures[0].settings] == [0.5, 0.9, 1.0, 25.0, 2.5]
    text = FAST_GRID.replace("name: f", "name: 1e5")  # a number: YAML 1.2 and JSON agree
    with pytest.raises(UserError, match=r"small.yaml:5: figures\[0\].name: must be"):
        load_grid(write_grid(tmp_path, text))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda text: text.replace('"load"', '"lood"'), "grid.json:17: figures[0].vary.lood"),
        (lambda text: text.replace("0.5", "-0.5"), "grid.json:19: figures[0].vary.load[1]"),
        (
            lambda text: text.replace("\t1\n", "\tNaN\n", 1),  # the seed
            "grid.json:7: invalid JSON: NaN is not a number in JSON",
        ),
        (
            lambda text: text.replace('"seeds"', '"seeds": [2],\n\t"seeds"'),
            'grid.json:7: invalid JSON: the key "seeds" appears twice in one object',
        ),
        (
            lambda text: text.replace("]", "", 1),
            "grid.json:6:9: invalid JSON: Expecting ',' delimiter",
        ),
    ],
    ids=["unknown parameter", "bad value", "NaN", "duplicate key", "syntax"],
)
def test_json_grid_errors_name_the_line(
    tmp_path: Path, change: Any, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = change(json.dumps(_JSON_GRID, indent="\t"))
    out = tmp_path / "out"
    assert main(["sweep", str(write_grid(tmp_path, text, "grid.json")), "--out", str(out)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert err.startswith(f"beamer: error: {tmp_path / message}"), err


def test_a_yaml_merge_may_override_a_key_but_a_key_twice_is_refused(tmp_path: Path) -> None:
    text = (
        "policies: [fifo-lm, fair]\nseeds: [1]\nfigures:\n"
        "  - &f1 {name: a, vary: {load: [0.5]}}\n"
        "  - <<: *f1\n    name: b\n"
        "  - {<<: *f1, name: c, fixed: {queues: 4}}\n"
    )
    grid = load_grid(write_grid(tmp_path, text))
    assert [figure.name for figure in grid.figures] == ["a", "b", "c"]
    assert grid.figures[2].settings[0].point.queues == 4
    with pytest.raises(UserError, match=r"small.yaml:10: figures\[3\].name: appears twice"):
        load_grid(write_grid(tmp_path, text + "  - <<: *f1\n    name: d\n    name: e\n"))


# --- errors at the field that holds the value ---------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "policies: [fair]\nseeds: [1]\ndefaults: {hosts: 4}\nfigures:\n  - name: a\n"
            "    vary: {load: [0.5]}\n",
            "small.yaml:3: defaults.hosts: 4 workers per trial and a parameter server need 5 "
            "distinct hosts, more than the 4 hosts",
        ),
        (
            "policies: [fair]\nseeds: [1]\nfigures:\n  - name: a\n    vary:\n"
            "      hosts: [16,\n        4]\n",
            "small.yaml:7: figures[0].vary.hosts[1]: 4 workers per trial and a parameter",
        ),
        (
            "policies: [fair]\nseeds: [1]\ndefaults: {max_trials: 4}\nfigures:\n  - name: a\n"
            "    vary: {load: [0.5]}\n    fixed: {max_trials: 100000000}\n",
            "small.yaml:7: figures[0].fixed.max_trials: an SHA run (R=100000000, eta=2) starts",
        ),
        (
            "policies: [fair]\nseeds: [1]\ndefaults: {jobs: 10001}\nfigures:\n"
            "  - name: a\n    vary: {load: [0.5]}\n",
            "small.yaml:3: defaults.jobs: must be 1..10000, not 10001",
        ),
    ],
    ids=["defaults", "vary", "fixed", "a limit of the generator"],
)
def test_a_setting_the_generator_refuses_is_reported_where_its_value_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    assert main(["sweep", str(write_grid(tmp_path, text)), "--out", str(tmp_path / "out")]) == 2
    err = _one_line(capsys.readouterr().err)
    assert err.startswith(f"beamer: error: {tmp_path / message}"), err


# --- figures of many settings --------------------------------------------------------------


class _CountedRows(list[dict[str, Any]]):
    """A figure's rows that count how often they are gone through."""

    passes = 0

    def __iter__(self) -> Any:
        _CountedRows.passes += 1
        return super().__iter__()


def test_reports_go_through_a_figures_rows_a_fixed_number_of_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once per setting made 10,000 settings take a minute, 50,000 (the limit) an hour."""
    real = sim.sweep_report.aggregate
    monkeypatch.setattr(sim.sweep_report, "aggregate", lambda *args: _CountedRows(real(*args)))
    monkeypatch.setattr(_CountedRows, "passes", 0)
    values = ", ".join(str(0.01 * (index + 1)) for index in range(60))
    text = (
        "policies: [fifo-lm, fair]\nseeds: [1]\n"
        f"figures:\n  - name: a\n    vary: {{load: [{values}]}}\n"
    )
    grid_path = write_grid(tmp_path, text)
    write_records(grid_path, tmp_path, {"fifo-lm": 1.0, "fair": 2.0})
    result = write_reports(
        tmp_path, load_grid(grid_path), sim.sweep.read_records(tmp_path / "runs.jsonl")
    )
    assert _CountedRows.passes <= 3
    assert len(result["figures"]["a"]) == 120
    table = (tmp_path / "table.md").read_text().splitlines()
    assert table[-1] == "| 0.6 | 1.00 | 2.000 (1/1) |"


def test_a_plot_of_thousands_of_settings_names_some_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[Any] = []
    real = sim.sweep_report.png_bytes

    def kept(figure: Any) -> bytes:
        drawn.append([label.get_text() for label in figure.axes[0].get_xticklabels()])
        return real(figure)

    monkeypatch.setattr(sim.sweep_report, "png_bytes", kept)
    values = ", ".join(str(index + 1) for index in range(2000))
    text = (
        "policies: [fifo-lm, fair]\nseeds: [1]\nfigures:\n"
        "  - name: a\n    vary: {queues: [ideal]}\n"
        f"  - name: b\n    vary: {{load: [{values}]}}\n"
    )
    write_reports(tmp_path, load_grid(write_grid(tmp_path, text)), {})
    one, many = drawn
    assert one == ["ideal"]
    step = int(many[1]) - int(many[0])
    assert many == [str(n) for n in range(1, 2001, step)]
    assert len(many) <= sim.sweep_report.MAX_PLOT_INCHES / sim.sweep_report.INCHES_PER_SETTING


def test_a_figure_of_many_loads_checks_its_workload_shape_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The generator's check took a millisecond per setting, and repeated values were
    searched for among all those before: 50,000 loads took 90 s to read."""
    calls: list[None] = []
    real = Point.hp_config

    def counted(self: Point) -> Any:
        calls.append(None)
        return real(self)

    monkeypatch.setattr(Point, "hp_config", counted)
    sim.grid._check_shape.cache_clear()
    values = ", ".join(str(0.001 * (index + 1)) for index in range(500))
    text = f"policies: [fair]\nseeds: [1]\nfigures:\n  - name: a\n    vary: {{load: [{values}]}}\n"
    assert len(load_grid(write_grid(tmp_path, text)).points()) == 500
    assert len(calls) == 1
