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
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bmv2_topos import netns, state

REPO = Path(__file__).resolve().parents[1]
BEAMER = [sys.executable, "-m", "control.cli"]


def _beamer(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BEAMER, *args], capture_output=True, text=True, timeout=timeout_s, cwd=REPO
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trials", "1"], "--trials: 1 is out of range 2..32"),
        (["--eta", "nan"], "--eta: nan is out of range"),
        (["--queues", "9"], "--queues: 9 is out of range 1..8"),
        (["--policy", "nosuch"], "--policy: unknown policy 'nosuch'"),
        (["--workers", "9"], "--workers: 9 workers (ring) need 9 hosts"),
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
