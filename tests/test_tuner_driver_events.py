"""Stops, failures and an interrupted run, with Ray's real scheduler but without Ray running.

A scripted stand-in for Ray Tune's trial loop drives
:class:`tuner.scheduler.BeamerHyperBandScheduler` the way Ray Tune's
controller calls it (the callback's ``on_trial_start`` when a trial starts,
``on_trial_error`` while the failed trial is still running, ``stop_trial`` on
paused trials); the trials read their assignments and report coflows like
the real trainable. Every event goes straight into the controller's schedule
state, which refuses any event the real controller would refuse.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from control.controller import ScheduleState
from control.events import Event, EventClient, event_to_json, parse_event
from tuner.contract import read_assignment
from tuner.sinks import NullSink, SinkBase

pytest.importorskip("ray.tune")

from ray import cloudpickle
from ray.tune.experiment import Trial
from ray.tune.schedulers import TrialScheduler

from tuner.scheduler import BeamerHyperBandScheduler, beamer_hyperband

HOSTS = ["h1", "h2", "h3", "h4", "h5"]


class StateSink(SinkBase):
    """Applies every event to the controller's schedule state (raises if refused)."""

    def __init__(self) -> None:
        self.state = ScheduleState(len(HOSTS), [1e9] * (2 * len(HOSTS)))
        self.events: list[dict[str, Any]] = []

    def send(self, event: Event) -> None:
        raw = event_to_json(event)
        self.state.apply(parse_event(raw), float(len(self.events)))
        self.events.append(raw)

    def of_type(self, kind: str) -> list[tuple[int, ...]]:
        return [
            tuple(v for k, v in e.items() if k not in ("type", "iteration"))
            for e in self.events
            if e["type"] == kind
        ]


class Script:
    """Ray Tune's trial loop, sequential: one trial runs at a time."""

    def __init__(self, tmp: Path, qs: list[float], max_t: int = 4, eta: float = 2) -> None:
        self.sink = StateSink()
        self.dir = tmp
        self.scheduler, self.callback = beamer_hyperband(
            controller=self.sink,
            max_t=max_t,
            reduction_factor=eta,
            num_samples=len(qs),
            hosts=HOSTS,
            workers=2,
            pattern="ring",
            gradient_bytes=500,
            compute_s=0.0,
            assignments_dir=tmp,
            seed=3,
            metric="score",
            mode="max",
        )
        self.trials = [Trial("__fake", stub=True, trial_id=f"t{i}") for i in range(len(qs))]
        self.q = {t.trial_id: q for t, q in zip(self.trials, qs, strict=True)}
        self.done = {t.trial_id: 0 for t in self.trials}
        for trial in self.trials:
            self.scheduler.on_trial_add(self, trial)  # type: ignore[arg-type]

    def get_trials(self) -> list[Trial]:
        return list(self.trials)

    def stop_trial(self, trial: Trial) -> None:
        if trial.status in (Trial.PENDING, Trial.PAUSED):
            trial.set_status(Trial.TERMINATED)
            self.scheduler.on_trial_remove(self, trial)  # type: ignore[arg-type]

    def run(
        self,
        fail: dict[str, int] | None = None,
        steps: int | None = None,
        drop_promoted: frozenset[str] = frozenset(),
    ) -> None:
        """``fail``: trial -> iteration during whose coflow it errors; ``steps``: stop the
        whole run (as Ctrl-C would) after that many iterations; ``drop_promoted``: trials
        stopped from outside right after Ray promoted them, before they resume."""
        fail = fail or {}
        count = 0
        while (trial := self.scheduler.choose_trial_to_run(self)) is not None:  # type: ignore[arg-type]
            self.callback.on_trial_start(iteration=0, trials=self.trials, trial=trial)
            trial.set_status(Trial.RUNNING)
            while True:
                tid = trial.trial_id
                a = read_assignment(self.dir, tid)
                assert a is not None
                assert a.first_iteration <= self.done[tid] < a.first_iteration + a.iterations
                key = (a.experiment_id, a.stage_id, a.trial_id, self.done[tid] - a.first_iteration)
                self.sink.coflow_started(*key)
                if fail.get(tid) == self.done[tid]:
                    self.scheduler.on_trial_error(self, trial)  # type: ignore[arg-type]
                    trial.set_status(Trial.ERROR)
                    break
                self.sink.coflow_finished(*key)
                self.done[tid] += 1
                count += 1
                result = {"training_iteration": self.done[tid], "score": self.q[tid]}
                action = self.scheduler.on_trial_result(self, trial, result)  # type: ignore[arg-type]
                trial.update_last_result(result)
                for other in self.trials:
                    # Peek at Ray's bookkeeping (tests only): promoted and paused.
                    bracket = self.scheduler._trial_info[other][0]
                    if other.trial_id in drop_promoted and other in bracket.trials_to_unpause:
                        self.stop_trial(other)
                if action == TrialScheduler.PAUSE:
                    trial.set_status(Trial.PAUSED)
                    break
                if action == TrialScheduler.STOP:
                    self.scheduler.on_trial_complete(self, trial, result)  # type: ignore[arg-type]
                    trial.set_status(Trial.TERMINATED)
                    break
                if steps is not None and count >= steps:
                    self.callback.on_experiment_end(trials=self.trials)
                    return
        self.callback.on_experiment_end(trials=self.trials)


# max_t=4, eta=2, 6 trials: bracket 1 (experiment 1) has t0..t2 in one rung to 4;
# bracket 2 (experiment 2) has t3..t5, rung 0 to 2 then the best 2 to 4.
QS = [0.1, 0.2, 0.3, 0.6, 0.5, 0.4]


def test_a_clean_run_ends_every_experiment(tmp_path: Path) -> None:
    script = Script(tmp_path, QS)
    script.run()
    assert script.sink.state.experiments == {}
    assert script.sink.of_type("trial_stopped") == []
    assert script.sink.of_type("experiment_finished") == []
    promoted = script.callback.promotions()
    assert sorted((p.ray_trial_id, p.experiment_id, p.stage_id) for p in promoted) == [
        ("t3", 2, 1),
        ("t4", 2, 1),
    ]
    assert sorted(p.slot for p in promoted) == [0, 1]
    rows = [t.as_row() for t in script.callback.stage_timings()]
    assert [(r["experiment_id"], r["stage_id"], r["trials"], r["iterations"]) for r in rows] == [
        (1, 0, 3, 4),
        (2, 0, 3, 2),
        (2, 1, 2, 2),
    ]
    assert all(r["sct_s"] == r["completed_s"] - r["released_s"] > 0 for r in rows)


def test_a_trial_left_paused_in_a_bracket_that_is_over_is_stopped(tmp_path: Path) -> None:
    """Ray's HyperBand can leave a trial paused for good when a rung's results arrive
    together (its pause had not begun when the bracket was processed); the scheduler
    stops such trials, or the search would never end."""
    script = Script(tmp_path, QS)
    script.run()
    left = script.trials[0]  # bracket 1: over
    left.set_status(Trial.PAUSED)
    running = script.trials[3]  # bracket 2: over too, but not paused
    assert script.scheduler.choose_trial_to_run(script) is None  # type: ignore[arg-type]
    assert left.status == Trial.TERMINATED
    assert running.status == Trial.TERMINATED


def test_a_paused_trial_of_a_bracket_still_running_is_left_alone(tmp_path: Path) -> None:
    script = Script(tmp_path, QS)  # nothing has run: no bracket is over
    waiting = script.trials[0]
    waiting.set_status(Trial.PAUSED)
    script.scheduler.choose_trial_to_run(script)  # type: ignore[arg-type]
    assert waiting.status == Trial.PAUSED


def test_a_trial_failing_inside_a_rung_is_stopped_and_the_rung_completes(
    tmp_path: Path,
) -> None:
    script = Script(tmp_path, QS)
    script.run(fail={"t1": 2, "t3": 1})  # t1 during its 3rd iteration, t3 during its 2nd
    sink = script.sink
    assert (1, 0, 1) in sink.of_type("trial_stopped")  # experiment 1, stage 0, slot 1
    assert (2, 0, 0) in sink.of_type("trial_stopped")
    # Ray promotes the two others of bracket 2; every stage still completes.
    assert sorted(p.ray_trial_id for p in script.callback.promotions()) == ["t4", "t5"]
    assert sorted(sink.of_type("stage_completed")) == [(1, 0), (2, 0), (2, 1)]
    assert sink.state.experiments == {}
    assert [t.sct_s is not None for t in script.callback.stage_timings()] == [True] * 3


def test_fewer_survivors_than_slots_leave_slots_started_and_stopped(tmp_path: Path) -> None:
    script = Script(tmp_path, QS)
    script.run(fail={"t3": 0, "t4": 1})  # bracket 2 keeps one trial of three
    sink = script.sink
    assert [p.ray_trial_id for p in script.callback.promotions()] == ["t5"]
    # Stage 1 of experiment 2 has two slots; slot 1 starts and stops at once.
    released = sink.events.index({"type": "stage_released", "experiment_id": 2, "stage_id": 1})
    assert sink.events[released + 1 : released + 3] == [
        {"type": "trial_started", "experiment_id": 2, "stage_id": 1, "trial_id": 1},
        {"type": "trial_stopped", "experiment_id": 2, "stage_id": 1, "trial_id": 1},
    ]
    assert sink.state.experiments == {}
    timing = {(t.experiment_id, t.stage_id): t for t in script.callback.stage_timings()}
    assert (timing[2, 1].trials, timing[2, 1].ran) == (2, 1)


def test_a_promoted_trial_failing_is_stopped_in_its_new_rung(tmp_path: Path) -> None:
    script = Script(tmp_path, QS)
    script.run(fail={"t3": 3})  # promoted to rung 1 (iterations 2..3), fails in it
    sink = script.sink
    slot = script.scheduler.driver.placement("t3")
    assert slot is not None and slot[:2] == (2, 1)
    assert (*slot,) in sink.of_type("trial_stopped")
    assert sink.state.experiments == {}


def test_an_interrupted_run_finishes_its_open_experiments(tmp_path: Path) -> None:
    script = Script(tmp_path, QS)
    script.run(steps=5)
    sink = script.sink
    assert sink.of_type("experiment_finished") != []
    assert sink.state.experiments == {}  # nothing left active on the controller


def test_a_trial_failing_before_it_starts(tmp_path: Path) -> None:
    script = Script(tmp_path, QS)
    first = script.trials[0]
    script.scheduler.on_trial_error(script, first)  # type: ignore[arg-type]
    first.set_status(Trial.ERROR)
    script.run()
    sink = script.sink
    assert (1, 0, 0) in sink.of_type("trial_stopped")
    assert sink.state.experiments == {}


def test_the_scheduler_pickles_with_a_controller_client(tmp_path: Path) -> None:
    scheduler, callback = beamer_hyperband(
        controller="127.0.0.1:9",
        max_t=4,
        num_samples=3,
        hosts=HOSTS,
        gradient_bytes=1,
        compute_s=0.0,
        assignments_dir=tmp_path,
    )
    # Ray Tune pickles its scheduler and callbacks with cloudpickle.
    copy = pickle.loads(cloudpickle.dumps((scheduler, callback)))
    assert isinstance(copy[0], BeamerHyperBandScheduler)
    assert copy[0].driver is copy[1].driver
    assert isinstance(copy[0].driver.sink, EventClient)
    assert copy[0].driver.sink.address == "127.0.0.1:9"


def test_more_trials_than_planned_are_refused(tmp_path: Path) -> None:
    from control.errors import UserError

    scheduler, _ = beamer_hyperband(
        controller=NullSink(),
        max_t=4,
        num_samples=1,
        hosts=HOSTS,
        gradient_bytes=1,
        compute_s=0.0,
        assignments_dir=None,
        metric="score",
        mode="max",
    )
    scheduler.on_trial_add(None, Trial("__fake", stub=True, trial_id="a"))
    with pytest.raises(UserError, match="num_samples=1"):
        scheduler.on_trial_add(None, Trial("__fake", stub=True, trial_id="b"))


def test_a_promoted_trial_stopped_before_it_resumes_leaves_its_slot(tmp_path: Path) -> None:
    script = Script(tmp_path, QS)
    script.run(drop_promoted=frozenset({"t3"}))  # t3 and t4 promoted; t3 stopped paused
    sink = script.sink
    assert [p.ray_trial_id for p in script.callback.promotions()] == ["t4"]
    slot = script.scheduler.driver.placement("t4")
    assert slot is not None and slot[:2] == (2, 1)
    # The other slot of stage 1 is started and stopped; the stage completes with t4.
    other = (2, 1, 1 - slot[2])
    assert sink.of_type("trial_stopped") == [other]
    assert sorted(sink.of_type("stage_completed")) == [(1, 0), (2, 0), (2, 1)]
    assert sink.state.experiments == {}


SEARCH = dict(
    controller=None,
    max_t=4,
    num_samples=10,
    hosts=HOSTS,
    gradient_bytes=1000,
    compute_s=0.1,
    assignments_dir=None,
)


@pytest.mark.parametrize(
    ("argument", "value", "says"),
    [
        ("num_samples", float("nan"), "num_samples=nan is not a whole number from 1 to 65536"),
        ("num_samples", 10**12, "num_samples=1000000000000 is not a whole number"),
        ("num_samples", 10.0, "num_samples=10.0 is not a whole number"),
        ("num_samples", "10", "num_samples='10' is not a whole number"),
        ("reduction_factor", float("inf"), "reduction_factor=inf is not a number above 1"),
        ("reduction_factor", "3", "reduction_factor='3' is not a number above 1"),
        ("workers", True, "workers=True is not a whole number"),
        ("gradient_bytes", 1e300, "gradient_bytes=1e+300 is not a whole number"),
        ("gradient_bytes", float("nan"), "gradient_bytes=nan is not a whole number"),
        ("compute_s", float("nan"), "compute_s=nan is not a number from 0 to 1e+09"),
        ("seed", "x", "seed='x' is not a whole number"),
        ("stop_last_trials", "no", "stop_last_trials='no' is not true or false"),
        ("gang_start", 0, "gang_start=0 is not true or false"),
        ("first_experiment_id", "1", "first_experiment_id='1' is not a whole number"),
        ("hosts", "h1h2h3", "hosts='h1h2h3' is not a list of host names"),
        ("hosts", ["h1", 2], "hosts: 2 is not a host name"),
        ("metric", 3, "metric=3 is not a metric's name"),
        ("mode", "up", "mode='up' is not 'min' or 'max'"),
        ("controller", 5, "controller: int is not 'HOST:PORT', a Unix socket path"),
    ],
)
def test_a_library_search_refuses_arguments_it_cannot_use_with_one_line(
    argument: str, value: object, says: str
) -> None:
    # A call from a script gets no command line's checks: NaN trials used to plan an empty
    # search, 10**12 trials to plan for ever, and a string to fail deep inside Ray or the
    # driver with a TypeError.
    from control.errors import UserError

    with pytest.raises(UserError) as refused:
        beamer_hyperband(**{**SEARCH, argument: value})  # type: ignore[arg-type]
    assert says in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_controller_object_needs_every_event_method() -> None:
    from control.errors import UserError

    class Partial:
        def experiment_released(self, experiment: object) -> None: ...

    with pytest.raises(UserError, match="lacks close, coflow_finished"):
        beamer_hyperband(**{**SEARCH, "controller": Partial()})  # type: ignore[arg-type]
    scheduler, _ = beamer_hyperband(**{**SEARCH, "controller": NullSink(), "seed": 10**300})
    assert isinstance(scheduler, BeamerHyperBandScheduler)
