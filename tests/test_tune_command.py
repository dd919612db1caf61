"""``beamer tune`` from the command line: refusals, and one minimal search end to end.

The end-to-end run (root) trains 4 trials of Ray Tune's HyperBand (max_t 2,
eta 2: two brackets, three stages) on the single-switch topology with the
controller running Beamer, and checks what the issue asks: every stage of
the plan was reported and completed, the switch was given classes for them,
the tuner promoted trials, and nothing of the run is left behind.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bmv2_topos import netns, state
from control.errors import UserError

REPO = Path(__file__).resolve().parents[1]
BEAMER = [sys.executable, "-m", "control.cli"]


def _beamer(
    *args: str, timeout_s: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BEAMER, *args], capture_output=True, text=True, timeout=timeout_s, cwd=REPO, env=env
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trials", "1"], "--trials: 1 is out of range 2..32"),
        (["--eta", "nan"], "--eta: nan is out of range"),
        (["--queues", "9"], "--queues: 9 is out of range 1..8"),
        (["--policy", "nosuch"], "--policy: unknown policy 'nosuch'"),
        (["--workers", "9"], "--workers: 9 workers (ring) need 9 hosts"),
        (["--workers", "-1"], "--workers: -1: a trial needs at least 2 workers"),
        (["--scheduler", "asha"], "AsyncHyperBandScheduler (ASHA) promotes each trial"),
    ],
)
def test_bad_options_are_refused_with_one_line(args: list[str], message: str) -> None:
    result = _beamer("tune", *args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="checks the refusal without root")
def test_without_root_it_says_so() -> None:
    result = _beamer("tune")
    assert result.returncode == 2
    assert "root" in result.stderr


def _longest_sync_overlap_s(iterations: list[dict[str, str]]) -> float:
    """The longest time two experiments' all-reduce coflows were on the network at once
    (an iteration's sync ends when it reports and lasts ``allreduce_s``)."""
    spans = []
    for row in iterations:
        end_s = float(row["reported_s"])
        spans.append((row["experiment_id"], end_s - float(row["allreduce_s"]), end_s))
    return max(
        (
            min(end_a, end_b) - max(start_a, start_b)
            for i, (exp_a, start_a, end_a) in enumerate(spans)
            for exp_b, start_b, end_b in spans[i + 1 :]
            if exp_a != exp_b
        ),
        default=0.0,
    )


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")
def test_a_minimal_search_reports_every_stage_installs_classes_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    from tuner.plan import hyperband_plan

    namespaces_before = set(netns.list_namespaces())
    ray_dirs_before = set(Path(tempfile.gettempdir()).glob("beamer-ray-*"))
    out = tmp_path / "out"
    result = _beamer(
        "tune",
        "--policy",
        "beamer",
        "--seed",
        "1",
        "--trials",
        "4",
        "--max-t",
        "2",
        "--eta",
        "2",
        "--json",
        "--out",
        str(out),
        timeout_s=150,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)

    plan = hyperband_plan(4, 2, 2)
    expected = {
        (bracket.index + 1, rung) for bracket in plan.brackets for rung in range(len(bracket.rungs))
    }
    assert len(expected) == 3
    with (out / "stages.csv").open(encoding="utf-8") as stream:
        stages = list(csv.DictReader(stream))
    assert {(int(row["experiment_id"]), int(row["stage_id"])) for row in stages} == expected
    assert all(float(row["sct_s"]) > 0 for row in stages)
    assert summary["stages"]["beamer"]["stages"] == len(expected)

    (search,) = summary["tuner"]
    promoted = sum(rung.trials for bracket in plan.brackets for rung in bracket.rungs[1:])
    assert search["promotions"] == promoted
    assert search["trials"] == 4
    # The switch was given a class per coflow on the network, and the controller took
    # every event. Two brackets' coflows on the network at once get distinct classes
    # under Beamer; whether they overlap depends on the machine's load (Ray may run one
    # bracket's trials after the other's), so the iterations' own times say whether the
    # status sampler (every 0.25 s) must have seen two classes.
    with (out / "iterations.csv").open(encoding="utf-8") as stream:
        iterations = list(csv.DictReader(stream))
    assert search["max_class_entries"] >= 1
    if _longest_sync_overlap_s(iterations) >= 0.5:  # two of its samples
        assert len(search["classes_used"]) >= 2
    assert search["events_applied"] > 0
    assert 0 < search["validation_accuracy"] <= 1

    total = sum(
        rung.trials * bracket.iterations(k)
        for bracket in plan.brackets
        for k, rung in enumerate(bracket.rungs)
    )
    assert len(iterations) == total
    assert all(int(row["sync_bytes"]) > 0 for row in iterations)

    # Nothing left: namespaces, tagged processes, Ray's private directory.
    assert set(netns.list_namespaces()) - namespaces_before == set()
    assert [p for p in state.tagged_processes() if not p.owner_alive()] == []
    assert set(Path(tempfile.gettempdir()).glob("beamer-ray-*")) - ray_dirs_before == set()


def _refused_in_one_line(result: subprocess.CompletedProcess[str], message: str) -> None:
    assert result.returncode == 2, result.stderr
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("args", [["--trials", "2", "--max-t", "1"], ["--scheduler", "asha"]])
def test_a_ray_that_fails_on_import_is_refused_before_anything_starts(
    args: list[str], tmp_path: Path
) -> None:
    """Installed but broken: found by importlib, yet ``import ray`` raises."""
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text('raise ImportError("broken ray")\n')
    result = _beamer("tune", *args, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    _refused_in_one_line(result, "beamer tune needs Ray: install the project's ray extra")
    assert "broken ray" in result.stderr
    assert "--executor" not in result.stderr


@pytest.fixture(scope="module")
def beamer_artifacts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """P4Info and a device config of the Beamer program, as the BMv2 options take them."""
    out = tmp_path_factory.mktemp("build")
    compiled = _beamer("compile", str(REPO / "p4src" / "beamer.p4"), "--out", str(out), "--no-p4c")
    assert compiled.returncode == 0, compiled.stderr
    return out / "beamer.softswitch.json", out / "beamer.p4info.txtpb"


def test_bmv2_without_simple_switch_grpc_is_refused_before_ray_starts(
    beamer_artifacts: tuple[Path, Path], tmp_path: Path
) -> None:
    tools = tmp_path / "bin"  # PATH: the network's tools, and no simple_switch_grpc
    tools.mkdir()
    for name in ("ip", "ethtool", "tc"):
        found = shutil.which(name)
        if found is None:
            pytest.skip(f"{name} is not installed")
        (tools / name).symlink_to(found)
    bmv2_json, p4info = beamer_artifacts
    out = tmp_path / "new" / "out"
    bmv2 = ["--target", "bmv2", "--bmv2-json", str(bmv2_json), "--p4info", str(p4info)]
    result = _beamer(
        "tune", "--trials", "2", "--max-t", "1", *bmv2, "--out", str(out),
        env={**os.environ, "PATH": str(tools)},
    )  # fmt: skip
    _refused_in_one_line(result, "--target bmv2: simple_switch_grpc is not on PATH")
    assert not (tmp_path / "new").exists()


def test_a_refused_command_leaves_no_out_directory(tmp_path: Path) -> None:
    out = tmp_path / "new" / "deep" / "dir"
    result = _beamer("tune", "--out", str(out), "--congestion-control", "nosuch")
    _refused_in_one_line(result, "nosuch")
    assert not (tmp_path / "new").exists()


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")
def test_a_seed_of_hundreds_of_digits_runs_and_leaves_nothing() -> None:
    """Other commands take any whole number as a seed; the search's name in Ray's storage
    (a directory) must then not be made of it."""
    seed = "9" * 300
    namespaces_before = set(netns.list_namespaces())
    ray_dirs_before = set(Path(tempfile.gettempdir()).glob("beamer-ray-*"))
    result = _beamer(
        "tune", "--trials", "2", "--max-t", "1", "--seed", seed, "--json", timeout_s=150
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (search,) = json.loads(result.stdout)["tuner"]
    assert str(search["seed"]) == seed
    assert set(netns.list_namespaces()) - namespaces_before == set()
    assert set(Path(tempfile.gettempdir()).glob("beamer-ray-*")) - ray_dirs_before == set()


@pytest.mark.skipif(os.geteuid() != 0, reason="--out is made once root is checked")
@pytest.mark.parametrize("stop", [KeyboardInterrupt, UserError], ids=["ctrl-c", "failed"])
def test_a_run_stopped_before_its_outputs_leaves_no_out_directory(
    stop: type[BaseException], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tuner.run
    from control.cli import main

    def searches(*_args: object, **_kwargs: object) -> None:  # Ray and the network are up
        raise stop("stopped")

    monkeypatch.setattr(tuner.run, "run_searches", searches)
    out = tmp_path / "new" / "out"
    status = main(["tune", "--trials", "2", "--max-t", "1", "--out", str(out)])
    assert status in (2, 128 + signal.SIGINT)
    assert not (tmp_path / "new").exists()
