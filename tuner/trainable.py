"""The Ray Tune trainable: data-parallel training whose all-reduce crosses the switch.

:func:`beamer_trainable` is a Ray Tune function trainable; give it the
network with ``tune.with_parameters(beamer_trainable, network=network)``.
Each training iteration it

1. reads the trial's assignment (:mod:`tuner.contract`), waiting until the
   driver has written one that covers this iteration;
2. (re)connects its worker group when the assignment's hosts changed (a
   promoted trial may run its next rung elsewhere);
3. computes every worker's gradient (the real elapsed time is the compute phase);
4. reports ``coflow_started`` (the controller answers the coflow id once the
   switches hold its class), tags every connection, all-reduces, reports
   ``coflow_finished``;
5. applies the update, evaluates on the validation split and calls
   ``ray.tune.report``, with a checkpoint at the last iteration of each stage
   (HyperBand pauses trials only there).

The loop itself (:func:`run_trial`) does not need Ray: tests and other
drivers call it with their own ``report``. Ray is imported only by
:func:`beamer_trainable` and :func:`search_space`.

A user with a trainable of their own needs :func:`wait_for_assignment`,
:class:`tuner.allreduce.WorkerGroup` (or their own tagged sockets) and
:func:`beamer_coflow`, which reports a coflow's start and finish and yields
the Beamer tag to put on its sockets.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from bmv2_topos.agent import CoflowEvents, beamer_option, local_coflow_id
from tuner.allreduce import GroupHost, WorkerGroup, hosts_per_group, sync_model_bytes
from tuner.contract import TrialAssignment, TuneNetwork, read_assignment
from tuner.training import DataParallelTraining, TrainingConfig, parameter_count

CHECKPOINT_FILE = "training.npz"
ASSIGNMENT_TIMEOUT_S = 60.0
ASSIGNMENT_POLL_S = 0.02

Report = Callable[[dict[str, Any], Path | None], None]
"""Receives one iteration's metrics and, at a stage's end, a checkpoint directory
(valid only during the call)."""


class TrainableError(RuntimeError):
    """The trial cannot go on (no assignment in time, an unknown host, a bad checkpoint)."""


@contextlib.contextmanager
def beamer_coflow(
    events: CoflowEvents | None,
    experiment_id: int,
    stage_id: int,
    trial_id: int,
    iteration: int,
) -> Iterator[bytes]:
    """One coflow: report its start, yield the 12-byte Beamer tag (set it with
    ``IP_OPTIONS`` on both ends of every connection before sending), report its
    finish when the block completes. ``iteration`` counts from 0 within the stage.

    Without a controller (``events=None``) the tag follows the coflow id
    convention ``trial_id << 16 | iteration``. If the block raises, no finish
    is reported: the coflow did not complete.
    """
    if events is None:
        coflow_id = local_coflow_id(trial_id, iteration)
    else:
        coflow_id = events.coflow_started(experiment_id, stage_id, trial_id, iteration)
    yield beamer_option(experiment_id, stage_id, coflow_id)
    if events is not None:
        events.coflow_finished(experiment_id, stage_id, trial_id, iteration)


def covers(assignment: TrialAssignment, iteration: int) -> bool:
    """Whether ``iteration`` (completed iterations so far) falls in the assignment's stage."""
    return (
        assignment.first_iteration <= iteration < assignment.first_iteration + assignment.iterations
    )


def wait_for_assignment(
    network: TuneNetwork,
    ray_trial_id: str,
    iteration: int,
    timeout_s: float = ASSIGNMENT_TIMEOUT_S,
) -> TrialAssignment:
    """The trial's assignment covering ``iteration``, once the driver has written it."""
    deadline = time.monotonic() + timeout_s
    while True:
        assignment = read_assignment(network.assignments_dir, ray_trial_id)
        if assignment is not None and covers(assignment, iteration):
            return assignment
        if time.monotonic() >= deadline:
            seen = (
                "none"
                if assignment is None
                else f"iterations {assignment.first_iteration}.."
                f"{assignment.first_iteration + assignment.iterations - 1} "
                f"(experiment {assignment.experiment_id}, stage {assignment.stage_id})"
            )
            raise TrainableError(
                f"trial {ray_trial_id}: no assignment for iteration {iteration} within "
                f"{timeout_s:g} s in {network.assignments_dir} (found {seen})"
            )
        time.sleep(ASSIGNMENT_POLL_S)


def model_bytes(network: TuneNetwork, config: Mapping[str, Any] | None = None) -> int:
    """The ``model_bytes`` of the trials' plan (``sync_flows``) for this network and
    the model fields of ``config`` (``hidden_width``, ``hidden_layers``; defaults else)."""
    training = TrainingConfig.from_mapping(config or {})
    return sync_model_bytes(parameter_count(training), network.pattern, network.workers)


def _group_hosts(network: TuneNetwork, assignment: TrialAssignment) -> list[GroupHost]:
    expected = hosts_per_group(network.pattern, network.workers)
    if len(assignment.hosts) != expected:
        raise TrainableError(
            f"assignment of experiment {assignment.experiment_id} stage {assignment.stage_id} "
            f"trial {assignment.trial_id}: {len(assignment.hosts)} hosts, a {network.pattern} "
            f"trial of {network.workers} workers needs {expected}"
        )
    unknown = [host for host in assignment.hosts if host not in network.hosts]
    if unknown:
        raise TrainableError(
            f"assignment names host(s) {', '.join(unknown)} the network does not have "
            f"(hosts: {', '.join(sorted(network.hosts))})"
        )
    return [GroupHost(host, network.hosts[host]) for host in assignment.hosts]


def _connect_events(network: TuneNetwork) -> Any:
    if network.events_socket is None:
        return None
    from control.events import EventClient

    return EventClient(network.events_socket)


def save_checkpoint(training: DataParallelTraining, directory: Path) -> Path:
    path = directory / CHECKPOINT_FILE
    state: dict[str, Any] = training.state()
    np.savez(path, **state)
    return path


def read_checkpoint(directory: Path) -> dict[str, np.ndarray]:
    """The training state saved in ``directory`` (read at once: Ray's directory may be
    a temporary copy)."""
    path = directory / CHECKPOINT_FILE
    try:
        with np.load(path) as stored:
            state = {name: stored[name] for name in stored.files}
    except (OSError, ValueError) as error:
        raise TrainableError(f"checkpoint {path}: cannot read it: {error}") from None
    missing = {"parameters", "velocity", "iteration"} - set(state)
    if missing:
        raise TrainableError(f"checkpoint {path}: missing {', '.join(sorted(missing))}")
    return state


def run_trial(
    config: Mapping[str, Any],
    network: TuneNetwork,
    ray_trial_id: str,
    report: Report,
    restore: Mapping[str, np.ndarray] | None = None,
    max_iterations: int | None = None,
    assignment_timeout_s: float = ASSIGNMENT_TIMEOUT_S,
    events: CoflowEvents | None = None,
) -> DataParallelTraining:
    """Train until ``max_iterations`` (``None``: until stopped from outside, as Ray
    does). ``events``: where coflows are reported (default: the network's controller,
    if any). Returns the training state (for tests)."""
    training = DataParallelTraining(TrainingConfig.from_mapping(config), network.workers)
    if restore is not None:
        try:
            training.load_state(restore)
        except ValueError as error:
            raise TrainableError(f"trial {ray_trial_id}: {error}") from None
    owned_events = _connect_events(network) if events is None else None
    sink: CoflowEvents | None = events if events is not None else owned_events
    group: WorkerGroup | None = None
    try:
        while max_iterations is None or training.iteration < max_iterations:
            iteration = training.iteration
            assignment = wait_for_assignment(network, ray_trial_id, iteration, assignment_timeout_s)
            if group is None or group.host_names != assignment.hosts:
                if group is not None:
                    group.close()
                    group = None
                group = WorkerGroup(
                    _group_hosts(network, assignment),
                    network.pattern,
                    training.model.count,
                    # Handshakes carry no payload; tagged, they share the stage's ACK class.
                    connect_option=beamer_option(
                        assignment.experiment_id,
                        assignment.stage_id,
                        local_coflow_id(assignment.trial_id, 0),
                    ),
                )
            started = time.perf_counter()
            gradients = training.compute()
            compute_s = time.perf_counter() - started
            in_stage = iteration - assignment.first_iteration
            with beamer_coflow(
                sink,
                assignment.experiment_id,
                assignment.stage_id,
                assignment.trial_id,
                in_stage,
            ) as tag:
                group.tag(tag)
                started = time.perf_counter()
                summed = group.allreduce(gradients)
                allreduce_s = time.perf_counter() - started
            step = training.apply(summed)
            metrics: dict[str, Any] = {
                **training.evaluate(),
                "train_loss": step.train_loss,
                "compute_s": compute_s,
                "allreduce_s": allreduce_s,
                "sync_bytes": sum(connection.size_bytes for connection in group.connections),
                "experiment_id": assignment.experiment_id,
                "stage_id": assignment.stage_id,
                "slot": assignment.trial_id,
            }
            if in_stage == assignment.iterations - 1:
                with tempfile.TemporaryDirectory(prefix="beamer-ckpt-") as directory:
                    save_checkpoint(training, Path(directory))
                    report(metrics, Path(directory))
            else:
                report(metrics, None)
    finally:
        if group is not None:
            group.close()
        if owned_events is not None:
            owned_events.close()
    return training


def beamer_trainable(
    config: dict[str, Any],
    network: TuneNetwork,
    assignment_timeout_s: float = ASSIGNMENT_TIMEOUT_S,
) -> None:
    """Ray Tune function trainable (``tune.with_parameters(beamer_trainable, network=…)``)."""
    from ray import tune

    def report(metrics: dict[str, Any], checkpoint_dir: Path | None) -> None:
        if checkpoint_dir is None:
            tune.report(metrics)
        else:
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(str(checkpoint_dir)))

    restore = None
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            restore = read_checkpoint(Path(directory))
    run_trial(
        config,
        network,
        tune.get_context().get_trial_id(),
        report,
        restore=restore,
        assignment_timeout_s=assignment_timeout_s,
    )


def search_space() -> dict[str, Any]:
    """The hyper-parameters a tuner searches (Ray Tune distributions). The model's
    size is not searched: the plan's bytes per iteration must be known up front."""
    from ray import tune

    return {
        "learning_rate": tune.loguniform(1e-3, 0.5),
        "momentum": tune.uniform(0.0, 0.95),
        "weight_decay": tune.loguniform(1e-6, 1e-2),
        "batch_size": tune.choice([32, 64, 128, 256]),
        "seed": tune.randint(0, 2**31 - 1),
    }
