"""The trainable's loop without Ray or root: loopback hosts, a recording controller."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bmv2_topos.agent import beamer_option, local_coflow_id
from tuner.allreduce import sync_model_bytes
from tuner.contract import HostEndpoint, TrialAssignment, TuneNetwork, write_assignment
from tuner.trainable import (
    CHECKPOINT_FILE,
    TrainableError,
    beamer_coflow,
    model_bytes,
    read_checkpoint,
    run_trial,
)
from tuner.training import DataParallelTraining, TrainingConfig, local_sum, parameter_count

CONFIG = {"learning_rate": 0.1, "momentum": 0.5, "batch_size": 64, "hidden_width": 48, "seed": 5}
TRIAL = "trial_0001"


class RecordingController:
    """Answers coflow ids as a controller would and records what it was told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, int, int, int]] = []

    def coflow_started(
        self, experiment_id: int, stage_id: int, trial_id: int, iteration: int
    ) -> int:
        self.events.append(("started", experiment_id, stage_id, trial_id, iteration))
        return 1000 + len(self.events)

    def coflow_finished(
        self, experiment_id: int, stage_id: int, trial_id: int, iteration: int
    ) -> None:
        self.events.append(("finished", experiment_id, stage_id, trial_id, iteration))


class Reports:
    def __init__(self) -> None:
        self.metrics: list[dict[str, Any]] = []
        self.checkpoints: dict[int, dict[str, np.ndarray]] = {}

    def __call__(self, metrics: dict[str, Any], checkpoint: Path | None) -> None:
        self.metrics.append(metrics)
        if checkpoint is not None:
            assert (checkpoint / CHECKPOINT_FILE).is_file()
            self.checkpoints[len(self.metrics)] = read_checkpoint(checkpoint)


def _network(tmp_path: Path, pattern: str = "ps", workers: int = 2) -> TuneNetwork:
    hosts = {f"h{i}": HostEndpoint(None, f"127.0.0.{i}") for i in range(1, 7)}
    return TuneNetwork(hosts, str(tmp_path / "assign"), None, pattern, workers)  # type: ignore[arg-type]


def _assign(network: TuneNetwork, stage: int, hosts: tuple[str, ...], first: int, n: int) -> None:
    write_assignment(
        network.assignments_dir, TRIAL, TrialAssignment(4, stage, stage + 2, hosts, first, n)
    )


def test_two_stages_on_other_hosts_report_every_coflow_and_train_like_local_sums(
    tmp_path: Path,
) -> None:
    network = _network(tmp_path)
    controller = RecordingController()
    reports = Reports()
    _assign(network, 0, ("h1", "h2", "h3"), 0, 3)

    def promote() -> None:  # the driver, once stage 0's checkpoint is out
        _assign(network, 1, ("h4", "h5", "h6"), 3, 2)

    def report(metrics: dict[str, Any], checkpoint: Path | None) -> None:
        reports(metrics, checkpoint)
        if len(reports.metrics) == 3:
            threading.Timer(0.2, promote).start()

    training = run_trial(CONFIG, network, TRIAL, report, max_iterations=5, events=controller)

    # the server sums in worker order, as local_sum does: the same bits
    reference = DataParallelTraining(TrainingConfig.from_mapping(CONFIG), 2)
    for _ in range(5):
        reference.step(local_sum)
    assert training.parameters.tobytes() == reference.parameters.tobytes()

    expected = []
    for stage, iterations in ((0, 3), (1, 2)):
        for i in range(iterations):
            expected += [("started", 4, stage, stage + 2, i), ("finished", 4, stage, stage + 2, i)]
    assert controller.events == expected
    assert [(m["stage_id"], m["slot"]) for m in reports.metrics] == [(0, 2)] * 3 + [(1, 3)] * 2
    parameters = parameter_count(TrainingConfig.from_mapping(CONFIG))
    assert all(m["sync_bytes"] == 2 * 2 * 4 * parameters for m in reports.metrics)
    assert all(m["compute_s"] > 0 and m["allreduce_s"] > 0 for m in reports.metrics)
    assert set(reports.checkpoints) == {3, 5}  # last iteration of each stage only
    assert int(reports.checkpoints[3]["iteration"]) == 3


def test_a_restored_trial_continues_bit_for_bit(tmp_path: Path) -> None:
    network = _network(tmp_path, "ring", 3)
    _assign(network, 0, ("h1", "h2", "h3"), 0, 2)
    first = Reports()
    run_trial(CONFIG, network, TRIAL, first, max_iterations=2)
    _assign(network, 1, ("h2", "h4", "h6"), 2, 2)
    resumed = run_trial(
        CONFIG, network, TRIAL, Reports(), restore=first.checkpoints[2], max_iterations=4
    )
    _assign(network, 0, ("h1", "h2", "h3"), 0, 4)
    straight = run_trial(CONFIG, network, TRIAL, Reports(), max_iterations=4)
    assert resumed.iteration == straight.iteration == 4
    assert resumed.parameters.tobytes() == straight.parameters.tobytes()


def test_no_assignment_in_time_is_a_clear_error(tmp_path: Path) -> None:
    network = _network(tmp_path)
    _assign(network, 0, ("h1", "h2", "h3"), 0, 1)
    with pytest.raises(
        TrainableError,
        match=r"no assignment for iteration 1 within 0.2 s .*"
        r"found iterations 0..0 \(experiment 4, stage 0\)",
    ):
        run_trial(CONFIG, network, TRIAL, Reports(), max_iterations=3, assignment_timeout_s=0.2)


def test_an_assignment_naming_unknown_hosts_or_too_few_is_refused(tmp_path: Path) -> None:
    network = _network(tmp_path)
    _assign(network, 0, ("h1", "h2", "h9"), 0, 1)
    with pytest.raises(TrainableError, match="host\\(s\\) h9 the network does not have"):
        run_trial(CONFIG, network, TRIAL, Reports(), max_iterations=1)
    _assign(network, 0, ("h1", "h2"), 0, 1)
    with pytest.raises(TrainableError, match="2 hosts, a ps trial of 2 workers needs 3"):
        run_trial(CONFIG, network, TRIAL, Reports(), max_iterations=1)


def test_a_checkpoint_of_another_model_is_refused(tmp_path: Path) -> None:
    network = _network(tmp_path)
    _assign(network, 0, ("h1", "h2", "h3"), 0, 1)
    reports = Reports()
    run_trial(CONFIG, network, TRIAL, reports, max_iterations=1)
    with pytest.raises(TrainableError, match="checkpoint parameters"):
        run_trial(
            {**CONFIG, "hidden_width": 40},
            network,
            TRIAL,
            Reports(),
            restore=reports.checkpoints[1],
            max_iterations=2,
        )
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrainableError, match=f"{CHECKPOINT_FILE}: cannot read it"):
        read_checkpoint(tmp_path / "empty")


def test_beamer_coflow_tags_and_reports() -> None:
    with beamer_coflow(None, 3, 1, 7, 9) as tag:
        assert tag == beamer_option(3, 1, local_coflow_id(7, 9))
    controller = RecordingController()
    with beamer_coflow(controller, 3, 1, 7, 9) as tag:
        assert tag == beamer_option(3, 1, 1001)
        assert controller.events == [("started", 3, 1, 7, 9)]
    assert controller.events[-1] == ("finished", 3, 1, 7, 9)
    with pytest.raises(OSError), beamer_coflow(controller, 3, 1, 7, 10):
        raise OSError("transfer failed")
    assert controller.events[-1] == ("started", 3, 1, 7, 10)  # never reported finished


def test_plan_model_bytes_follow_the_model(tmp_path: Path) -> None:
    network = _network(tmp_path, "ring", 3)
    parameters = parameter_count(TrainingConfig(hidden_width=100))
    assert model_bytes(network, {"hidden_width": 100}) == sync_model_bytes(parameters, "ring", 3)


def test_only_the_ray_entry_points_import_ray() -> None:
    import subprocess
    import sys

    code = (
        "import sys, tuner.training, tuner.allreduce, tuner.trainable; "
        "assert 'ray' not in sys.modules, 'ray imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
