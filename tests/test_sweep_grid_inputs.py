"""Grid values read as written: YAML 1.1's other numbers and booleans, seeds that change
nothing, Beamer variants as ``beamer simulate`` takes them, and workload files found,
checked and keyed by content where the grid names them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sweep_helpers import records, write_grid

import sim.sweep
from control.cli import main
from control.errors import UserError
from control.policies.spec import parse_policy_list
from sim.grid import Point, load_grid, run_key
from sim.sweep import SweepRun

DATA = Path(__file__).parent / "data"
TRACE = "3 2\n1 0 1 0 1 2:1\n2 10 2 0 1 1 2:2\n"


def _must_not_run(spec: SweepRun) -> dict[str, float]:
    raise AssertionError("a run started")


def _refused(
    tmp_path: Path,
    text: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> str:
    """The one line ``beamer sweep`` prints for the grid ``text``, without the prefix; a
    grid it does not refuse fails at its first run, which runs in this process."""
    monkeypatch.setattr(sim.sweep, "sweep_run", _must_not_run)
    out = tmp_path / "out"
    argv = ["sweep", str(write_grid(tmp_path, text)), "--out", str(out), "--jobs", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("beamer: error: "), err
    assert not out.exists()
    return err.removeprefix("beamer: error: ").removesuffix("\n")


# --- numbers and booleans: YAML 1.2's plain forms only --------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "policies: [fair]\nseeds: [1]\nfigures:\n  - name: a\n"
            "    vary: {queues: [010, 0b11]}\n",
            "small.yaml:5: figures[0].vary.queues[0]: '010' is not a plain decimal integer "
            "(YAML 1.1 reads it as 8): write decimal digits, or quote it for text",
        ),
        (
            "policies: [fair]\nseeds: [1]\nfigures:\n  - name: a\n    vary:\n"
            "      queues: [8,\n        0b11]\n",
            "small.yaml:7: figures[0].vary.queues[1]: '0b11' is not a plain decimal integer "
            "(YAML 1.1 reads it as 3)",
        ),
        (
            "policies: [fair]\nseeds: [1]\ndefaults: {load: 1:00}\nfigures: []\n",
            "small.yaml:3: defaults.load: '1:00' is not a plain decimal integer "
            "(YAML 1.1 reads it as 60)",
        ),
        (
            "policies: [fair]\nseeds: [1]\ndefaults: {load: 1:30.0}\nfigures: []\n",
            "small.yaml:3: defaults.load: '1:30.0' is not a plain decimal number "
            "(YAML 1.1 reads it as 90.0)",
        ),
        (
            "policies: [fair]\nseeds: [1]\ndefaults: {load: 1_0.5}\nfigures: []\n",
            "small.yaml:3: defaults.load: '1_0.5' is not a plain decimal number "
            "(YAML 1.1 reads it as 10.5)",
        ),
        (
            "policies: [fair]\nseeds: [1:30]\nfigures: []\n",
            "small.yaml:2: seeds[0]: '1:30' is not a plain decimal integer "
            "(YAML 1.1 reads it as 90)",
        ),
        (
            "policies: [fair]\nseeds: [1, 0x10]\nfigures: []\n",
            "small.yaml:2: seeds[1]: '0x10' is not a plain decimal integer "
            "(YAML 1.1 reads it as 16)",
        ),
        (
            "policies: [fair]\nseeds: [1_0]\nfigures: []\n",
            "small.yaml:2: seeds[0]: '1_0' is not a plain decimal integer "
            "(YAML 1.1 reads it as 10)",
        ),
        (
            "policies: [fair]\nseeds: [1]\ndefaults: {jobs: +2}\nfigures: []\n",
            "small.yaml:3: defaults.jobs: '+2' is not a plain decimal integer",
        ),
    ],
    ids=["octal", "binary", "sexagesimal", "sexagesimal float", "float with _", "seed 1:30",
         "hex seed", "seed with _", "plus sign"],
)  # fmt: skip
def test_yaml_1_1_numbers_are_refused_not_reinterpreted(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    message: str,
) -> None:
    """`queues: [010, 0b11]` ran as 8 and 3 classes, `load: 1:00` as 60."""
    assert _refused(tmp_path, text, capsys, monkeypatch).startswith(f"{tmp_path / message}")


def test_plain_decimal_numbers_are_read(tmp_path: Path) -> None:
    text = (
        "policies: [fair]\nseeds: [0, 10, 1000]\ndefaults: {jobs: 1, hosts: 9}\n"
        "figures:\n  - name: a\n    vary: {queues: [1, 10, 64], load: [2, 0.5, 1e-1, .25]}\n"
    )
    grid = load_grid(write_grid(tmp_path, text))
    assert grid.seeds == (0, 10, 1000)
    points = [setting.point for setting in grid.figures[0].settings]
    assert sorted({point.queues for point in points}) == [1, 10, 64]  # type: ignore[type-var]
    assert sorted({point.load for point in points}) == [0.1, 0.25, 0.5, 2.0]  # type: ignore[type-var]


def test_yes_no_on_off_and_dates_are_text(tmp_path: Path) -> None:
    """YAML 1.1 read them as booleans and a date: a figure named ``on`` was refused as not
    a name, a workload file named ``no`` as not a file."""
    (tmp_path / "no").write_text(TRACE)
    text = (
        "policies: [fifo, fair]\nseeds: [1]\ndefaults: {workload: no}\nfigures:\n"
        "  - name: on\n    vary: {queues: [2]}\n"
        "  - name: 2024-01-01\n    vary: {queues: [ideal]}\n"
    )
    grid = load_grid(write_grid(tmp_path, text))
    assert [figure.name for figure in grid.figures] == ["on", "2024-01-01"]
    assert grid.figures[0].settings[0].point.workload == str(tmp_path / "no")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "policies: [fair]\nseeds: [1]\ndefaults: {sync: no}\nfigures: []\n",
            "small.yaml:3: defaults.sync: 'no' is not one of ring, ps, both",
        ),
        (
            "policies: [fair]\nseeds: [1]\nfigures:\n  - name: a\n    vary: {queues: [off]}\n",
            "small.yaml:5: figures[0].vary.queues[0]: must be 'ideal' or a number of classes "
            "in 1..64, not 'off'",
        ),
        (  # true and false stay booleans, which no field takes
            "policies: [fair]\nseeds: [1]\nfigures:\n  - name: true\n    vary: {load: [1]}\n",
            "small.yaml:4: figures[0].name: must be a name of letters",
        ),
    ],
)
def test_words_yaml_1_1_took_for_booleans_are_refused_as_words(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    message: str,
) -> None:
    assert _refused(tmp_path, text, capsys, monkeypatch).startswith(f"{tmp_path / message}")


# --- seeds that change nothing ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("workload", "vary"),
    [
        ("fb2010", "{queues: [2, ideal]}"),
        ("TRACE", "{queues: [2, ideal]}"),
        ("hp-tuning", "{workload: [hp-tuning, fb2010]}"),
    ],
    ids=["fb2010", "a file", "one setting of a figure"],
)
def test_several_seeds_for_a_workload_that_takes_none_are_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    workload: str,
    vary: str,
) -> None:
    """Each run ran three times and was reported as ``1.000 (0/3)``, as if three seeds."""
    trace = tmp_path / "t.txt"
    trace.write_text(TRACE)
    shown = str(trace) if workload == "TRACE" else "fb2010"
    text = (
        f"policies: [fifo, fair]\nseeds:\n  [1, 2, 3]\n"
        f"defaults: {{workload: {workload.replace('TRACE', 't.txt')}}}\n"
        f"figures:\n  - name: a\n    vary: {vary}\n"
    )
    assert _refused(tmp_path, text, capsys, monkeypatch) == (
        f"{tmp_path / 'small.yaml'}:2: seeds: 3 seeds, but the workload {shown} (figure a) is "
        "the same on every seed (only hp-tuning is drawn from the seed): give one seed, or put "
        "that workload in a grid of its own"
    )
    one_seed = load_grid(write_grid(tmp_path, text.replace("[1, 2, 3]", "[7]")))
    assert one_seed.seeds == (7,)


# --- policies as beamer simulate takes them ---------------------------------------------------


def test_grid_policies_are_those_beamer_simulate_takes(tmp_path: Path) -> None:
    text = 'policies: [beamer, "beamer:split_trials=true", fair]\nseeds: [1]\nfigures: []\n'
    grid_text = text.replace("figures: []", "figures:\n  - name: a\n    vary: {load: [1]}")
    grid = load_grid(write_grid(tmp_path, grid_text))
    assert grid.policies == ("beamer", "beamer:split_trials=true", "fair")
    assert grid.policies == parse_policy_list("beamer,beamer:split_trials=true,fair")


@pytest.mark.parametrize(
    ("policies", "option", "message"),
    [
        (
            '[fair,\n  "beamer:split_trials=1"]',
            "fair,beamer:split_trials=1",
            "small.yaml:2: policies[1]: policy 'beamer:split_trials=1': split_trials=1 is not "
            "true or false",
        ),
        (
            '[fair, "fair:x=1"]',
            "fair,fair:x=1",
            "small.yaml:1: policies[1]: policy 'fair:x=1': only beamer, beamer-lookahead take "
            "arguments, not 'fair'",
        ),
        (
            '[beamer, "beamer:split_trials=false"]',
            "beamer,beamer:split_trials=false",
            "small.yaml:1: policies: 'beamer' and 'beamer:split_trials=false' are the same policy",
        ),
        (
            '"fair, beamer:nope=1"',
            "fair, beamer:nope=1",
            "small.yaml:1: policies[1]: policy 'beamer:nope=1': unknown beamer knob 'nope'",
        ),
    ],
    ids=["bad knob value", "no knobs", "one policy twice", "in a string"],
)
def test_a_policy_simulate_refuses_is_refused_at_its_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    policies: str,
    option: str,
    message: str,
) -> None:
    text = f"policies: {policies}\nseeds: [1]\nfigures: []\n"
    assert _refused(tmp_path, text, capsys, monkeypatch).startswith(f"{tmp_path / message}")
    with pytest.raises(UserError):  # as beamer simulate --policies refuses it
        parse_policy_list(option)


# --- workload files: where, checked at their line, keyed by content ---------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "{path}: no such file"),
        ("3 1\n1 0 2 0 0 1 2:1\n", "{path}:2: mapper port 0 is listed twice"),
        ('{"format": "beamer-workload/1"}', "{path}:1: $: missing field 'num_hosts'"),
    ],
    ids=["missing", "bad trace", "bad JSON"],
)
def test_a_bad_workload_file_is_refused_at_the_grid_line_that_names_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    content: str | None,
    message: str,
) -> None:
    """It was one line without the grid's line: ``rel.yaml: workload: t.txt: no such file``."""
    good, bad = tmp_path / "good.txt", tmp_path / "bad.txt"
    good.write_text(TRACE)
    if content is not None:
        bad.write_text(content)
    text = (
        "policies: [fifo, fair]\nseeds: [1]\nfigures:\n  - name: a\n"
        "    vary:\n      workload: [good.txt,\n        bad.txt]\n"
    )
    err = _refused(tmp_path, text, capsys, monkeypatch)
    where = f"{tmp_path / 'small.yaml'}:7: figures[0].vary.workload[1]: "
    assert err.startswith(where + message.format(path=bad)), err


def test_a_relative_workload_path_starts_at_the_grid_files_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not at the current directory, which depends on where the command is run."""
    (tmp_path / "grids" / "traces").mkdir(parents=True)
    (tmp_path / "grids" / "traces" / "t.txt").write_text(TRACE)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "traces").mkdir(parents=True)
    (elsewhere / "traces" / "t.txt").write_text("3 1\n9 0 1 0 1 2:1\n")  # not this one
    monkeypatch.chdir(elsewhere)
    text = (
        "policies: [fifo, fair]\nseeds: [1]\nfigures:\n  - name: a\n"
        "    vary: {workload: [traces/t.txt, ./traces/../traces/t.txt]}\n"
    )
    grid = load_grid(write_grid(tmp_path / "grids", text, "g.yaml"))
    first, second = (setting.point.workload for setting in grid.figures[0].settings)
    assert first == str(tmp_path / "grids" / "traces" / "t.txt")
    assert Path(second).resolve() == Path(first)
    assert grid.figures[0].settings[0].label == "traces/t.txt"  # as the grid writes it


def test_editing_a_workload_file_runs_its_settings_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Runs were found by the file's name: after an edit, resuming kept the old file's
    results and mixed them with the new file's."""
    workload = tmp_path / "w.json"
    shutil.copyfile(DATA / "tiny_workload.json", workload)
    grid = write_grid(
        tmp_path,
        "policies: [fifo, fair]\nseeds: [1]\nfigures:\n  - name: a\n"
        "    vary: {workload: [w.json]}\n",
    )
    out = tmp_path / "out"
    argv = ["sweep", str(grid), "--out", str(out), "--jobs", "1"]
    assert main(argv) == 0
    before = records(out / "runs.jsonl")
    assert len(before) == 2
    assert main(argv) == 0
    assert "resuming, 2 of 2 runs already" in capsys.readouterr().err
    workload.write_text(workload.read_text().replace("1000]", "4000]"))
    assert main(argv) == 0
    assert "resuming" not in capsys.readouterr().err
    after = records(out / "runs.jsonl")
    assert len(after) == 4
    new = [record for key, record in after.items() if key not in before]
    assert {record["point"]["workload_sha256"] for record in new} != {
        record["point"]["workload_sha256"] for record in before.values()
    }
    assert all(record["point"]["workload"] == str(workload) for record in after.values())


def test_hp_tuning_run_keys_hold_no_digest() -> None:
    """Runs of generated workloads are found as before the digest: a sweep resumes them."""
    assert "workload_sha256" not in run_key(Point(load=0.5), 1, "fair")


def test_a_run_of_a_beamer_variant_simulates_that_variant() -> None:
    """The grid takes what ``beamer simulate --policies`` takes, and so does each run."""
    point = Point(jobs=2)
    plain = sim.sweep.sweep_run(SweepRun(point, 1, "beamer"))
    variant = sim.sweep.sweep_run(SweepRun(point, 1, "beamer:split_trials=true"))
    assert plain["avg_sct_s"] > 0 and variant["avg_sct_s"] > 0
