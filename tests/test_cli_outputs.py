"""What ``beamer simulate`` and ``beamer sweep`` leave behind: only this run's outputs,
no empty directories after an interrupt, a full standard output as one line; and seeds
and lists on the command line that could only be a mistake, refused in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest
from sweep_helpers import FAST_GRID, write_grid
from test_sim_cli import small_workload

import sim.cli
import sim.sweep
from control.cli import main

REPO = Path(__file__).resolve().parents[1]


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def _simulate(workload: Path, out: Path, *flags: str) -> list[str]:
    return ["simulate", "--workload", str(workload), "--jobs", "1", "--out", str(out), *flags]


def test_a_second_run_into_the_same_out_leaves_only_its_own_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The plots of queue modes (and of the comparison with Beamer) the second run does
    not have would sit beside its summary as if they were its own."""
    workload = small_workload(tmp_path / "chain.json")
    out = tmp_path / "out"
    out.mkdir()
    # Files the command does not make, some with names close to its own: kept.
    theirs = ["notes.txt", "sct_cdf_8q.png.bak", "sct_cdf_99q.png", "avg_sct_vs_fair_8q.png"]
    for name in theirs:
        (out / name).write_text("mine")
    (out / "sct_cdf_4q.png").mkdir()  # a directory is never removed
    first = _simulate(workload, out, "--policies", "beamer,fair", "--queues", "ideal,8")
    assert main(first) == 0
    assert {"avg_sct_vs_beamer_8q.png", "sct_cdf_8q.png"} <= {p.name for p in out.iterdir()}
    assert main(_simulate(workload, out, "--policies", "sincronia")) == 0
    capsys.readouterr()
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["sct_cdf_ideal.png", "stages.csv", "summary.csv", "sct_cdf_4q.png", *theirs]
    )
    assert all((out / name).read_text() == "mine" for name in theirs)


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing-parent"])
def test_simulate_interrupted_during_the_runs_leaves_no_empty_out(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    existing: bool,
) -> None:
    workload = small_workload(tmp_path / "chain.json")
    top = tmp_path / "a"
    if existing:
        top.mkdir()

    def interrupted(*_args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sim.cli, "_run_all", interrupted)
    assert main(_simulate(workload, top / "b" / "c", "--policies", "fair")) == 130
    assert _one_line(capsys.readouterr().err) == "beamer: interrupted"
    assert top.exists() == existing  # made by the command: removed; there before: kept
    if existing:
        assert list(top.iterdir()) == []


def test_a_sweep_interrupted_before_its_first_run_removes_every_directory_it_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(spec: object) -> dict[str, float]:
        raise KeyboardInterrupt

    monkeypatch.setattr(sim.sweep, "sweep_run", interrupted)
    grid = write_grid(tmp_path, FAST_GRID)
    out = tmp_path / "na" / "nb"
    assert main(["sweep", str(grid), "--out", str(out), "--jobs", "1"]) == 130
    assert _one_line(capsys.readouterr().err) == "beamer: interrupted"
    assert not (tmp_path / "na").exists()


@pytest.mark.parametrize(
    "flags",
    [["--seeds", "1,2"], ["--seeds", "3"], ["--seed", "2"]],
    ids=["seeds", "one-seed", "seed"],
)
@pytest.mark.parametrize("workload", ["fb2010", "file"])
def test_seeds_are_refused_for_a_workload_they_do_not_change(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    flags: list[str],
    workload: str,
) -> None:
    """fb2010 or a file is the same workload for every seed: seeds 1,2 ran it twice and
    reported two seeds (``workload generate --kind fb2010 --seed`` is refused alike)."""

    def started(*args: object, **kwargs: object) -> None:
        pytest.fail("the runs started: the seeds were not refused before")

    monkeypatch.setattr(sim.cli, "_run_all", started)
    name = workload if workload == "fb2010" else str(small_workload(tmp_path / "w.json"))
    out = tmp_path / "out"
    argv = ["simulate", "--workload", name, "--policies", "fair", "--out", str(out), *flags]
    assert main(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"beamer: error: {flags[0]}: the workload {name} is the same for")
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--seeds", "1,,2"], "--seeds: '1,,2' has an empty item"),
        (["simulate", "--seeds", "1,2,"], "--seeds: '1,2,' has an empty item"),
        (["simulate", "--policies", "fair,,beamer"], "--policies: 'fair,,beamer' has an empty"),
        (["simulate", "--queues", "ideal,,8"], "--queues: 'ideal,,8' has an empty item"),
        (["simulate", "--jobs", "+1"], "argument --jobs: invalid int value: '+1' (digits 0-9"),
        (["simulate", "--jobs", " 1"], "argument --jobs: invalid int value: ' 1' (digits 0-9"),
        (["simulate", "--jobs", "1 "], "argument --jobs: invalid int value: '1 ' (digits 0-9"),
        (["simulate", "--load", "+0.5"], "argument --load: invalid float value: '+0.5'"),
        (["simulate", "--load", " 0.5"], "argument --load: invalid float value: ' 0.5'"),
        (["simulate", "--seed", " 1"], "argument --seed: invalid int value: ' 1'"),
    ],
)
def test_empty_list_items_and_signed_or_spaced_numbers_are_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    try:
        status = main(argv)
    except SystemExit as exit_:
        status = int(exit_.code or 0)
    assert status == 2
    assert message in _one_line(capsys.readouterr().err)


def _beamer(argv: list[str], stdout: IO[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    code = "from control.cli import main; raise SystemExit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=cwd,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_full_standard_output_is_one_line_and_the_files_are_written(tmp_path: Path) -> None:
    workload = small_workload(tmp_path / "chain.json")
    with open("/dev/full", "w") as full:
        shown = _beamer(["workload", "show", "fb2010"], full, tmp_path)
        simulated = _beamer(_simulate(workload, tmp_path / "out", "--policies", "fair"), full, REPO)
    for done in (shown, simulated):
        assert done.returncode == 1, done.stderr
        assert _one_line(done.stderr) == "beamer: error: standard output: No space left on device"
    assert (tmp_path / "out" / "summary.csv").exists()  # written before the table


def test_a_file_name_standard_output_cannot_encode_is_printed_escaped(tmp_path: Path) -> None:
    """A file name of bytes that are not UTF-8 (Python holds them as lone surrogates)
    under a strict UTF-8 standard output: the name is escaped, the command succeeds."""
    import os

    workload = small_workload(tmp_path / "chain.json")
    odd = os.fsencode(tmp_path) + b"/\xff.json"
    os.rename(workload, odd)
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict", "PYTHONPATH": str(REPO)}
    argv = ["simulate", "--workload", os.fsdecode(odd), "--policies", "fifo", "--jobs", "1"]
    done = subprocess.run(
        [sys.executable, "-c", "from control.cli import main; raise SystemExit(main())", *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert b"Traceback" not in done.stderr
    assert b"\\udcff.json" in done.stdout
