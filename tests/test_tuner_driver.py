"""The scheduler hook and callback in a real Ray Tune run (local Ray, no namespaces).

A tiny trainable, written here, reads its assignment like the real one does
(``tuner.contract.read_assignment``), reports one coflow per iteration to a
JSON-lines file the driver writes its events to as well, checkpoints through
Ray (HyperBand pauses and resumes trials), and reports a score that is a fixed
function of its config. The test then checks the recorded stream against the
events expected from the plan and the score order, feeds it to the
controller's schedule state, and checks the promotions.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray.tune")

import ray
from ray import tune

from control.controller import ScheduleState
from control.errors import UserError
from control.events import ExperimentReleased, parse_event
from sim.executors import start_local_ray, stop_local_ray
from tuner.contract import read_assignment
from tuner.plan import hyperband_plan
from tuner.scheduler import beamer_hyperband, require_stages
from tuner.sinks import JsonlSink, read_jsonl

HOSTS = ["h1", "h2", "h3", "h4"]
MAX_T, ETA = 4, 2


class TinyTrainable(tune.Trainable):  # type: ignore[misc]
    """One coflow per iteration, reported where its assignment says; score = q + i/100."""

    def setup(self, config: dict[str, Any]) -> None:
        self.q = float(config["q"])
        self.assignments = str(config["assignments"])
        self.sink = JsonlSink(config["events"])

    def step(self) -> dict[str, Any]:
        done = self.iteration  # iterations completed (restored from the checkpoint)
        deadline = time.monotonic() + 60
        while True:
            assignment = read_assignment(self.assignments, self.trial_id)
            if assignment is not None and (
                assignment.first_iteration
                <= done
                < assignment.first_iteration + assignment.iterations
            ):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"no assignment for iteration {done}: {assignment}")
            time.sleep(0.005)
        local = done - assignment.first_iteration
        key = (assignment.experiment_id, assignment.stage_id, assignment.trial_id, local)
        self.sink.coflow_started(*key)
        self.sink.coflow_finished(*key)
        return {"score": self.q + done / 100}

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        self.setup(new_config)  # a reused actor takes another trial
        return True

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any]:
        return {"q": self.q}

    def load_checkpoint(self, checkpoint: Any) -> None:
        return None


@pytest.fixture(scope="module")
def local_ray() -> Any:
    # An earlier Ray instance in this process (another test's) leaves its
    # authentication mode and token cached; start from what the environment says.
    from ray._private.authentication_test_utils import reset_auth_token_state

    reset_auth_token_state()
    try:
        start_local_ray(2)
        # The workers cannot import this test module: ship the trainable by value.
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        yield
    finally:
        stop_local_ray()


def _run(
    tmp: Path, qs: list[float], seed: int
) -> tuple[Any, list[dict[str, Any]], dict[str, float]]:
    events = tmp / "events.jsonl"
    scheduler, callback = beamer_hyperband(
        controller=JsonlSink(events),
        max_t=MAX_T,
        reduction_factor=ETA,
        num_samples=len(qs),
        hosts=HOSTS,
        workers=2,
        pattern="ring",
        gradient_bytes=1000,
        compute_s=0.01,
        assignments_dir=tmp / "assign",
        seed=seed,
        metric="score",
        mode="max",
    )
    tuner = tune.Tuner(
        TinyTrainable,
        param_space={
            "q": tune.grid_search(qs),
            "assignments": str(tmp / "assign"),
            "events": str(events),
        },
        tune_config=tune.TuneConfig(scheduler=scheduler, num_samples=1, reuse_actors=True),
        run_config=tune.RunConfig(
            storage_path=str(tmp / "ray"), name="run", callbacks=[callback], verbose=0
        ),
    )
    results = tuner.fit()
    assert not results.errors
    q_of = {r.metrics["trial_id"]: r.config["q"] for r in results}
    return callback, read_jsonl(events), q_of


def _expected_members(qs: list[float]) -> list[list[list[float]]]:
    """Per bracket, per rung, the q values of its trials: the best by score go on."""
    plan = hyperband_plan(len(qs), MAX_T, ETA)
    out = []
    for bracket in plan.brackets:
        members = qs[bracket.first_trial : bracket.first_trial + bracket.trials]
        rungs = []
        for rung in bracket.rungs:
            members = sorted(members, reverse=True)[: rung.trials]
            rungs.append(sorted(members))
        out.append(rungs)
    return out


def _check_stream(stream: list[dict[str, Any]], callback: Any, qs: list[float]) -> None:
    plan = hyperband_plan(len(qs), MAX_T, ETA)
    experiments = callback.driver.experiments()
    by_experiment: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for event in stream:
        eid = event.get("experiment_id", event.get("experiment", {}).get("experiment_id"))
        by_experiment[eid].append(event)
    assert sorted(by_experiment) == [e.experiment_id for e in experiments]
    for bracket, experiment in zip(plan.brackets, experiments, strict=True):
        events = by_experiment[experiment.experiment_id]
        released = parse_event(events[0])
        assert isinstance(released, ExperimentReleased) and released.experiment == experiment
        position = 1
        for k, rung in enumerate(bracket.rungs):
            assert events[position] == {
                "type": "stage_released",
                "experiment_id": experiment.experiment_id,
                "stage_id": k,
            }
            end = events.index(
                {
                    "type": "stage_completed",
                    "experiment_id": experiment.experiment_id,
                    "stage_id": k,
                }
            )
            block = events[position + 1 : end]
            for slot in range(rung.trials):
                own = [
                    (e["type"], e.get("iteration"))
                    for e in block
                    if e["trial_id"] == slot and e["stage_id"] == k
                ]
                coflows = [
                    (kind, i)
                    for i in range(bracket.iterations(k))
                    for kind in ("coflow_started", "coflow_finished")
                ]
                assert own == [("trial_started", None), *coflows], (k, slot)
            assert len(block) == rung.trials * (1 + 2 * bracket.iterations(k))
            position = end + 1
        assert position == len(events)
    # Every event is one the controller's schedule accepts, in this order.
    state = ScheduleState(len(HOSTS), [1e9] * (2 * len(HOSTS)))
    for now, raw in enumerate(stream):
        state.apply(parse_event(raw), float(now))
    assert state.experiments == {}  # every bracket ended with its last stage


def _promoted(callback: Any, q_of: dict[str, float], qs: list[float]) -> list[list[list[float]]]:
    plan = hyperband_plan(len(qs), MAX_T, ETA)
    first = callback.driver.experiments()[0].experiment_id
    seen: list[list[list[float]]] = [[[] for _ in bracket.rungs] for bracket in plan.brackets]
    for q in qs:  # rung 0: every trial of the bracket, in add order
        bracket, _ = plan.bracket_of(qs.index(q))
        seen[bracket.index][0].append(q)
    for promotion in callback.promotions():
        seen[promotion.experiment_id - first][promotion.stage_id].append(
            q_of[promotion.ray_trial_id]
        )
    return [[sorted(r) for r in b] for b in seen]


def test_event_stream_of_a_hyperband_run(local_ray: Any, tmp_path: Path) -> None:
    qs_a = [0.3, 0.9, 0.1, 0.5, 0.7, 0.2, 0.6]
    callback, stream, q_of = _run(tmp_path / "a", qs_a, seed=1)
    _check_stream(stream, callback, qs_a)
    promoted_a = _promoted(callback, q_of, qs_a)
    assert promoted_a == _expected_members(qs_a)
    timings = callback.stage_timings()
    assert [(t.experiment_id, t.stage_id) for t in timings] == [
        (e.experiment_id, s.stage_id) for e in callback.driver.experiments() for s in e.stages
    ]
    assert all(t.sct_s is not None and t.sct_s > 0 for t in timings)
    # Another config set: other trials are promoted.
    qs_b = [0.8, 0.4, 0.1, 0.2, 0.3, 0.9]
    callback_b, stream_b, q_of_b = _run(tmp_path / "b", qs_b, seed=2)
    _check_stream(stream_b, callback_b, qs_b)
    promoted_b = _promoted(callback_b, q_of_b, qs_b)
    assert promoted_b == _expected_members(qs_b)
    assert promoted_b[1] != promoted_a[1]


def test_asha_is_refused_with_one_line() -> None:
    from ray.tune.schedulers import AsyncHyperBandScheduler

    with pytest.raises(UserError, match=r"AsyncHyperBandScheduler.*synchronous HyperBand") as info:
        require_stages(AsyncHyperBandScheduler())
    assert "\n" not in str(info.value)
    with pytest.raises(UserError, match="ASHA"):
        beamer_hyperband(
            controller=None,
            max_t=4,
            num_samples=4,
            hosts=HOSTS,
            gradient_bytes=1,
            compute_s=0.0,
            assignments_dir=None,
            scheduler="asha",
        )
