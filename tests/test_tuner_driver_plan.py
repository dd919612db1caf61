"""The HyperBand plan against Ray's own scheduler, and each bracket as a controller experiment.

Ray's ``HyperBandScheduler`` is driven here by a scripted stand-in for Ray
Tune's trial loop (one trial runs at a time; the scheduler's CONTINUE / PAUSE /
STOP and ``choose_trial_to_run`` decide everything), without starting Ray. The
test then reads which bracket Ray put each trial in and where each trial
stopped, and compares with :func:`tuner.plan.hyperband_plan`.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from control.controller import ScheduleState
from control.errors import UserError
from control.events import ExperimentReleased, event_to_json, parse_event
from tuner.plan import experiment_for, hyperband_plan
from workloads.hp_tuning import sync_flows

pytest.importorskip("ray.tune")

from ray.tune.experiment import Trial
from ray.tune.schedulers import HyperBandScheduler, TrialScheduler


class _ScriptedController:
    """What Ray Tune's controller does with a scheduler's decisions, sequentially."""

    def __init__(self, scheduler: HyperBandScheduler) -> None:
        self.scheduler = scheduler

    def stop_trial(self, trial: Trial) -> None:
        # Ray: a paused or pending trial is removed, a running one completed.
        if trial.status in (Trial.PENDING, Trial.PAUSED):
            trial.set_status(Trial.TERMINATED)
            self.scheduler.on_trial_remove(self, trial)  # type: ignore[arg-type]


def _ray_run(
    num_trials: int, max_t: int, eta: float, stop_last: bool, seed: int
) -> tuple[list[list[int]], dict[str, int]]:
    """Run Ray's scheduler on scripted trials; returns the trial indices of each bracket
    (in Ray's bracket order) and the iteration each trial ended at."""
    scheduler = HyperBandScheduler(
        metric="score", mode="max", max_t=max_t, reduction_factor=eta, stop_last_trials=stop_last
    )
    controller = _ScriptedController(scheduler)
    trials = [Trial("__fake", stub=True, trial_id=f"t{i}") for i in range(num_trials)]
    rng = random.Random(seed)
    score = {trial.trial_id: rng.random() for trial in trials}
    for added in trials:
        scheduler.on_trial_add(controller, added)  # type: ignore[arg-type]
    iteration = {added.trial_id: 0 for added in trials}
    while (trial := scheduler.choose_trial_to_run(controller)) is not None:  # type: ignore[arg-type]
        trial.set_status(Trial.RUNNING)
        while True:
            iteration[trial.trial_id] += 1
            result: dict[str, Any] = {
                "training_iteration": iteration[trial.trial_id],
                "score": score[trial.trial_id],
            }
            if not stop_last and iteration[trial.trial_id] >= max_t:
                action = TrialScheduler.STOP  # the run's stopper, before the scheduler
            else:
                action = scheduler.on_trial_result(controller, trial, result)  # type: ignore[arg-type]
            if action == TrialScheduler.CONTINUE:
                continue
            if action == TrialScheduler.PAUSE:
                trial.set_status(Trial.PAUSED)
            else:
                scheduler.on_trial_complete(controller, trial, result)  # type: ignore[arg-type]
                trial.set_status(Trial.TERMINATED)
            break
    assert all(trial.status == Trial.TERMINATED for trial in trials)
    # Peek at Ray's bookkeeping (tests only): which bracket holds which trial.
    order: list[Any] = []
    members: dict[int, list[int]] = {}
    for index, trial in enumerate(trials):
        bracket = scheduler._trial_info[trial][0]
        if id(bracket) not in members:
            order.append(bracket)
            members[id(bracket)] = []
        members[id(bracket)].append(index)
    return [members[id(b)] for b in order], iteration


CASES = [
    (9, 9, 3, True),  # one full band of s = 0, 1, 2
    (16, 9, 3, True),  # a partly filled last bracket
    (8, 4, 2, True),
    (30, 9, 3, True),  # a second band
    (5, 2, 3, True),  # bracket s = 1 skipped (r0 == 0)
    (12, 10, 3, True),  # milestones 1, 3, 9 under max_t 10
    (10, 8, 2, False),  # last rung runs to max_t
    (7, 27, 3, True),
]


@pytest.mark.parametrize(("num_trials", "max_t", "eta", "stop_last"), CASES)
def test_plan_matches_what_rays_scheduler_does(
    num_trials: int, max_t: int, eta: float, stop_last: bool
) -> None:
    plan = hyperband_plan(num_trials, max_t, eta, stop_last_trials=stop_last)
    for seed in (1, 2):
        brackets, ended = _ray_run(num_trials, max_t, eta, stop_last, seed)
        assert [b.trials for b in plan.brackets] == [len(m) for m in brackets]
        for bracket, members in zip(plan.brackets, brackets, strict=True):
            assert members == list(range(bracket.first_trial, bracket.first_trial + bracket.trials))
            milestones = [rung.milestone for rung in bracket.rungs]
            # Every trial ends exactly at a milestone; rung k holds those that reach it.
            assert {ended[f"t{i}"] for i in members} <= set(milestones)
            for rung in bracket.rungs:
                assert sum(ended[f"t{i}"] >= rung.milestone for i in members) == rung.trials
            for i in members:
                assert plan.bracket_of(i) == (bracket, i - bracket.first_trial)


@settings(max_examples=40, deadline=None)
@given(
    num_trials=st.integers(1, 40),
    max_t=st.integers(1, 40),
    eta=st.sampled_from([2, 3, 4, 2.5]),
    stop_last=st.booleans(),
)
def test_plan_matches_ray_on_random_parameters(
    num_trials: int, max_t: int, eta: float, stop_last: bool
) -> None:
    try:
        plan = hyperband_plan(num_trials, max_t, eta, stop_last_trials=stop_last)
    except UserError:
        return  # a rung without iterations: refused, nothing to compare
    brackets, ended = _ray_run(num_trials, max_t, eta, stop_last, seed=num_trials)
    assert [b.trials for b in plan.brackets] == [len(m) for m in brackets]
    for bracket, members in zip(plan.brackets, brackets, strict=True):
        for rung in bracket.rungs:
            assert sum(ended[f"t{i}"] >= rung.milestone for i in members) == rung.trials


def test_plan_of_a_known_configuration() -> None:
    plan = hyperband_plan(13, max_t=9, reduction_factor=3)
    shapes = [[(r.trials, r.milestone) for r in b.rungs] for b in plan.brackets]
    # s_max + 1 = 3: s=0 takes 3 trials to 9; s=1 takes 5 to 3 then 2 to 9; s=2 takes 5 (of 9)
    assert shapes == [[(3, 9)], [(5, 3), (2, 9)], [(5, 1), (3, 3), (1, 9)]]
    assert [b.s for b in plan.brackets] == [0, 1, 2]
    assert plan.brackets[2].iterations(1) == 2 and plan.brackets[2].first_iteration(2) == 3


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_trials": 4, "max_t": 0}, "max_t"),
        ({"num_trials": 4, "max_t": 9, "reduction_factor": 1}, "reduction_factor"),
        ({"num_trials": 0, "max_t": 9}, "num_samples"),
        ({"num_trials": 40, "max_t": 3, "reduction_factor": 1.5}, "rung"),
    ],
)
def test_bad_parameters_are_named(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(UserError, match=field):
        hyperband_plan(**kwargs)


HOSTS = [f"h{i}" for i in range(1, 7)]


def _experiment(pattern: str = "ring", workers: int = 2, seed: int = 1) -> Any:
    bracket = hyperband_plan(9, max_t=9, reduction_factor=3).brackets[2]
    return bracket, experiment_for(
        bracket,
        7,
        HOSTS,
        workers=workers,
        pattern=pattern,  # type: ignore[arg-type]
        gradient_bytes=1000,
        compute_s=0.05,
        seed=seed,
    )


@pytest.mark.parametrize(("pattern", "workers"), [("ring", 2), ("ring", 3), ("ps", 2)])
def test_experiment_has_one_stage_per_rung_and_one_slot_per_trial(
    pattern: str, workers: int
) -> None:
    bracket, experiment = _experiment(pattern, workers)
    assert experiment.experiment_id == 7
    assert [s.stage_id for s in experiment.stages] == [0, 1, 2]
    for k, (stage, rung) in enumerate(zip(experiment.stages, bracket.rungs, strict=True)):
        assert [t.trial_id for t in stage.trials] == list(range(rung.trials))
        for trial in stage.trials:
            assert trial.iterations == bracket.iterations(k)
            assert trial.compute_s == 0.05
            per_trial = workers + (pattern == "ps")
            assert len(trial.hosts) == len(set(trial.hosts)) == per_trial
            assert all(0 <= h < len(HOSTS) for h in trial.hosts)
            assert trial.sync_flows == sync_flows(pattern, trial.hosts, 1000)  # type: ignore[arg-type]
    assert [t.iterations for s in experiment.stages for t in s.trials[:1]] == [1, 2, 6]


def test_placement_follows_the_seed() -> None:
    _, one = _experiment(seed=1)
    _, again = _experiment(seed=1)
    _, other = _experiment(seed=2)
    hosts = [[t.hosts for t in s.trials] for s in one.stages]
    assert hosts == [[t.hosts for t in s.trials] for s in again.stages]
    assert hosts != [[t.hosts for t in s.trials] for s in other.stages]


def test_controller_accepts_the_plan() -> None:
    _, experiment = _experiment("ps", 2)
    state = ScheduleState(len(HOSTS), [1e9] * (2 * len(HOSTS)))
    event = parse_event(event_to_json(ExperimentReleased(experiment)))
    assert isinstance(event, ExperimentReleased) and event.experiment == experiment
    state.apply(event, 0.0)
    assert 7 in state.experiments


def test_experiment_refuses_what_cannot_run() -> None:
    bracket = hyperband_plan(3, max_t=3).brackets[0]
    common: dict[str, Any] = {"gradient_bytes": 10, "compute_s": 0.0, "seed": 1}
    with pytest.raises(UserError, match="needs 4 hosts"):
        experiment_for(bracket, 1, ["a", "b", "c"], workers=3, pattern="ps", **common)
    with pytest.raises(UserError, match="experiment id"):
        experiment_for(bracket, 70000, HOSTS, workers=2, pattern="ring", **common)
    with pytest.raises(UserError, match="pattern"):
        experiment_for(bracket, 1, HOSTS, workers=2, pattern="tree", **common)  # type: ignore[arg-type]


def test_plan_driver_and_sinks_do_not_import_ray() -> None:
    import subprocess
    import sys

    code = (
        "import sys, tuner.plan, tuner.driver, tuner.sinks, tuner.contract\n"
        "print(sorted(n for n in sys.modules if n == 'ray' or n.startswith('ray.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"
