"""The benchmarks' options: a bad earlier run's JSON or policy list is one line and exit
status 2, refused before any simulation, switch or worker starts."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import pytest
from processes import unblocked_within

from bench.common import run_command

WORK = ("simulate", "worker_pool", "run", "offline_subset", "switch_process")
"""What a benchmark module calls to start its work; each fails the test if reached."""


def refused(
    module_name: str,
    argv: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> str:
    """The one line a benchmark prints for ``argv`` (exit status 2, no work started)."""
    module = importlib.import_module(module_name)

    def started(*args: object, **kwargs: object) -> None:
        pytest.fail(f"{module_name} started its work: the input was not refused before")

    for name in WORK:
        if hasattr(module, name):
            monkeypatch.setattr(module, name, started)
    monkeypatch.setattr(sys, "argv", [module_name, *argv])
    with pytest.raises(SystemExit) as exited:
        run_command(module.main)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def run_file(seed: object = 3, **fields: object) -> str:
    return json.dumps({"seeds": [{"seed": seed, **fields}]})


ORDER = list(range(8))  # seed 3's small instance has experiments 0-7
MOVES = ["--moves-from"]


@pytest.mark.parametrize(
    ("module", "option", "text", "message"),
    [
        # 1e400 is infinite as a float: int() of it raised OverflowError.
        (
            "bench.bench_headroom",
            MOVES,
            '{"seeds": [{"seed": 1e400, "beamer_completion_order": [], "best_order": []}]}',
            "seeds[0].seed: Infinity is not a seed (a whole number >= 0)",
        ),
        (
            "bench.bench_headroom",
            MOVES,
            "[" * 100_000 + "]" * 100_000,
            "invalid JSON: nested deeper than 100 levels",
        ),
        (
            "bench.bench_headroom",
            ["--start-from"],
            run_file(best_order=5),
            "seeds[0].best_order: 5 is not a list of experiment ids",
        ),
        (
            "bench.bench_headroom",
            MOVES,
            run_file(beamer_completion_order=ORDER, best_order=[*ORDER[:-1], 99]),
            "seeds[0].best_order: experiment 99 is not in seed 3's small instance",
        ),
        (
            "bench.bench_headroom",
            ["--tails-from"],
            run_file(best_order=ORDER[:-1]),
            "seeds[0].best_order: experiment 7 is left out",
        ),
        (
            "bench.bench_headroom",
            ["--start-from"],
            run_file(best_order=[*ORDER, 0]),
            "seeds[0].best_order: experiment 0 given more than once",
        ),
        (
            "bench.bench_headroom",
            ["--tails-from"],
            json.dumps({"instances": ["small"], "seeds": [{"seed": 3, "best_order": ORDER}]}),
            'instances: ["small"] is not a string',
        ),
        (
            "bench.bench_rollout",
            ["--hindsight"],
            run_file(best_static_avg_sct_s="x"),
            'seeds[0].best_static_avg_sct_s: "x" is not a number of seconds above 0',
        ),
        # true is not seed 1, and -1 would draw seed 1's instance again.
        (
            "bench.bench_rollout",
            ["--hindsight"],
            run_file(True, best_static_avg_sct_s=2.0),
            "seeds[0].seed: true is not a seed",
        ),
        (
            "bench.bench_rollout",
            ["--hindsight"],
            run_file(-1, best_static_avg_sct_s=2.0),
            "seeds[0].seed: -1 is not a seed",
        ),
        (
            "bench.bench_rollout",
            ["--hindsight"],
            json.dumps({"seeds": [{"seed": 3, "best_static_avg_sct_s": 2.0}] * 2}),
            "seeds: seed 3 given more than once",
        ),
    ],
)
def test_an_earlier_runs_json_is_checked_field_by_field(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    module: str,
    option: list[str],
    text: str,
    message: str,
) -> None:
    path = tmp_path / "earlier.json"
    path.write_text(text)
    line = refused(module, [*option, str(path)], monkeypatch, capsys)
    assert line.startswith(f"error: {option[0]}")
    assert str(path) in line and message in line


def test_a_fifo_or_a_device_is_refused_without_being_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "earlier.json"
    os.mkfifo(fifo)

    with unblocked_within(20, "on the FIFO"):
        line = refused("bench.bench_headroom", ["--moves-from", str(fifo)], monkeypatch, capsys)
    assert line == (
        f"error: --moves-from {fifo}: is a FIFO (named pipe), not a regular file "
        "(not a bench_headroom JSON)"
    )
    # /dev/zero would be read until memory ran out; /dev/null is a device of the same kind.
    line = refused("bench.bench_rollout", ["--hindsight", os.devnull], monkeypatch, capsys)
    assert f"--hindsight {os.devnull}: is a character device, not a regular file" in line


@pytest.mark.parametrize("option", ["--moves-from", "--tails-from", "--start-from"])
def test_an_empty_file_name_is_refused_not_taken_as_not_given(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    line = refused("bench.bench_headroom", [option, ""], monkeypatch, capsys)
    assert f"argument {option}: an empty path" in line


@pytest.mark.parametrize(
    "module",
    [
        "bench.bench_sim",
        "bench.sim_agreement",
        "bench.bench_controller",
        "bench.bench_headroom",
        "bench.bench_rollout",
        "bench.heldout",
    ],
)
@pytest.mark.parametrize(
    ("policies", "message"),
    [
        ("", "--policies: no policy given"),
        (",", "--policies: no policy given"),
        # The first policy's runs must not happen before the unknown one is found.
        ("fair,nosuch", "--policies: unknown policy 'nosuch'"),
    ],
)
def test_a_policy_list_is_checked_before_any_run(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    module: str,
    policies: str,
    message: str,
) -> None:
    extra = ["--quick"] if module in ("bench.bench_controller", "bench.bench_sim") else []
    line = refused(module, [*extra, "--policies", policies], monkeypatch, capsys)
    assert line.startswith(f"error: {message}")


def test_the_controller_bench_says_an_unknown_policy_in_one_line() -> None:
    """Run as a module, as ``python -m bench`` runs it: a user error is one line and exit
    status 2, not a traceback after a switch process started."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    command = [sys.executable, "-m", "bench.bench_controller", "--quick", "--policies", "nosuch"]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("error: --policies: unknown policy 'nosuch'")
    assert len(done.stderr.strip().splitlines()) == 1
