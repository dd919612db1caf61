"""The trainable under Ray Tune: reports, checkpoints, and a trial restored from its
stage-end checkpoint continues where it stopped (loopback hosts, no controller)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sim.executors import start_local_ray, stop_local_ray
from tuner.contract import (
    HostEndpoint,
    TrialAssignment,
    TuneNetwork,
    read_assignment,
    write_assignment,
)
from tuner.trainable import beamer_trainable, run_trial

tune = pytest.importorskip("ray.tune")

pytestmark = pytest.mark.slow

CONFIG = {"learning_rate": 0.1, "momentum": 0.5, "batch_size": 64, "hidden_width": 64, "seed": 9}


def test_a_failed_trial_resumes_from_its_stage_checkpoint_under_ray(tmp_path: Path) -> None:
    hosts = {f"h{i}": HostEndpoint(None, f"127.0.0.{i}") for i in range(1, 5)}
    network = TuneNetwork(hosts, str(tmp_path / "assign"), None, "ring", 2)

    recovered: list[str] = []

    class Driver(tune.Callback):  # type: ignore[misc]
        """Stage 0 on h1,h2; stage 1 first names a host that does not exist (the trial
        fails), then, once Ray recovers the trial, h3,h4."""

        def on_trial_start(
            self, iteration: int, trials: list[Any], trial: Any, **info: Any
        ) -> None:
            # Ray calls this again when it restarts a recovered trial: first start only.
            if read_assignment(network.assignments_dir, trial.trial_id) is not None:
                return
            write_assignment(
                network.assignments_dir,
                trial.trial_id,
                TrialAssignment(1, 0, 0, ("h1", "h2"), 0, 2),
            )

        def on_trial_result(
            self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
        ) -> None:
            if result["training_iteration"] == 2:
                write_assignment(
                    network.assignments_dir,
                    trial.trial_id,
                    TrialAssignment(1, 1, 0, ("h3", "nowhere"), 2, 2),
                )

        def on_trial_recover(
            self, iteration: int, trials: list[Any], trial: Any, **info: Any
        ) -> None:
            recovered.append(trial.trial_id)
            write_assignment(
                network.assignments_dir,
                trial.trial_id,
                TrialAssignment(1, 1, 0, ("h3", "h4"), 2, 2),
            )

    start_local_ray(num_cpus=1)  # private, on loopback, its own directory
    try:
        results = tune.Tuner(
            tune.with_parameters(beamer_trainable, network=network, assignment_timeout_s=20.0),
            param_space=CONFIG,
            run_config=tune.RunConfig(
                stop={"training_iteration": 4},
                callbacks=[Driver()],
                storage_path=str(tmp_path / "ray"),
                failure_config=tune.FailureConfig(max_failures=1),
                verbose=0,
            ),
        ).fit()
    finally:
        stop_local_ray()
    result = results[0]
    assert result.error is None
    assert len(recovered) == 1  # it did fail once, and went on from its checkpoint
    assert result.metrics["training_iteration"] == 4
    assert result.metrics["stage_id"] == 1

    # the same four iterations straight through, without Ray: the same metric, to the bit
    metrics: list[dict[str, Any]] = []
    write_assignment(network.assignments_dir, "x", TrialAssignment(1, 0, 0, ("h1", "h2"), 0, 4))
    run_trial(CONFIG, network, "x", lambda m, _: metrics.append(m), max_iterations=4)
    assert result.metrics["validation_loss"] == metrics[-1]["validation_loss"]
