"""The trainable under Ray Tune: reports, checkpoints, and a trial restored from its
stage-end checkpoint continues where it stopped (loopback hosts, no controller)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tuner_ray_scenario import CONFIG, network

from tuner.contract import TrialAssignment, write_assignment
from tuner.trainable import run_trial

pytest.importorskip("ray")

pytestmark = pytest.mark.slow

SCENARIO = Path(__file__).with_name("tuner_ray_scenario.py")
REPO = SCENARIO.parents[1]


def test_a_failed_trial_resumes_from_its_stage_checkpoint_under_ray(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, str(SCENARIO), str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    outcome = json.loads(completed.stdout.strip().splitlines()[-1])
    assert outcome["error"] is None
    assert outcome["recovered"] == 1  # it did fail once, and went on from its checkpoint
    assert outcome["metrics"]["training_iteration"] == 4
    assert outcome["metrics"]["stage_id"] == 1

    # the same four iterations straight through, without Ray: the same metric, to the bit
    metrics: list[dict[str, Any]] = []
    net = network(tmp_path / "direct")
    write_assignment(net.assignments_dir, "x", TrialAssignment(1, 0, 0, ("h1", "h2"), 0, 4))
    run_trial(CONFIG, net, "x", lambda m, _: metrics.append(m), max_iterations=4)
    assert outcome["metrics"]["validation_loss"] == metrics[-1]["validation_loss"]
