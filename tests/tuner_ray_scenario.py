"""A Ray Tune run of the trainable, in a process of its own (``python tuner_ray_scenario.py
DIR``): Ray keeps per-process state (its authentication mode, its instance) that other
tests in the same process may have set. Prints the run's outcome as JSON.

One trial on loopback hosts, no controller. The driver (a callback) puts stage 0 on
h1,h2; stage 1 first names a host that does not exist, so the trial fails at the stage's
start; once Ray recovers it from its stage-0 checkpoint, stage 1 runs on h3,h4.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ray import tune

from sim.executors import start_local_ray, stop_local_ray
from tuner.contract import (
    HostEndpoint,
    TrialAssignment,
    TuneNetwork,
    read_assignment,
    write_assignment,
)
from tuner.trainable import beamer_trainable

CONFIG = {"learning_rate": 0.1, "momentum": 0.5, "batch_size": 64, "hidden_width": 64, "seed": 9}


def network(directory: Path) -> TuneNetwork:
    hosts = {f"h{i}": HostEndpoint(None, f"127.0.0.{i}") for i in range(1, 5)}
    return TuneNetwork(hosts, str(directory / "assign"), None, "ring", 2)


def main(directory: Path) -> dict[str, Any]:
    net = network(directory)
    recovered: list[str] = []

    class Driver(tune.Callback):  # type: ignore[misc]
        def on_trial_start(
            self, iteration: int, trials: list[Any], trial: Any, **info: Any
        ) -> None:
            # Ray calls this again when it restarts a recovered trial: first start only.
            if read_assignment(net.assignments_dir, trial.trial_id) is not None:
                return
            write_assignment(
                net.assignments_dir, trial.trial_id, TrialAssignment(1, 0, 0, ("h1", "h2"), 0, 2)
            )

        def on_trial_result(
            self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
        ) -> None:
            if result["training_iteration"] == 2:
                stage = TrialAssignment(1, 1, 0, ("h3", "nowhere"), 2, 2)
                write_assignment(net.assignments_dir, trial.trial_id, stage)

        def on_trial_recover(
            self, iteration: int, trials: list[Any], trial: Any, **info: Any
        ) -> None:
            recovered.append(trial.trial_id)
            stage = TrialAssignment(1, 1, 0, ("h3", "h4"), 2, 2)
            write_assignment(net.assignments_dir, trial.trial_id, stage)

    try:
        # private, on loopback, in a directory of its own that stop_local_ray removes
        # (also when the start fails half-way)
        start_local_ray(num_cpus=1)
        results = tune.Tuner(
            tune.with_parameters(beamer_trainable, network=net, assignment_timeout_s=20.0),
            param_space=CONFIG,
            run_config=tune.RunConfig(
                stop={"training_iteration": 4},
                callbacks=[Driver()],
                storage_path=str(directory / "ray"),
                failure_config=tune.FailureConfig(max_failures=1),
                verbose=0,
            ),
        ).fit()
    finally:
        stop_local_ray()
    result = results[0]
    return {
        "error": None if result.error is None else repr(result.error),
        "recovered": len(recovered),
        "metrics": {
            key: result.metrics.get(key)
            for key in ("training_iteration", "stage_id", "validation_loss")
        },
    }


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
