"""The controller's schedule state: event rules, refusals that change nothing, snapshots."""

from __future__ import annotations

import copy

import pytest

from control import controller
from control.controller import ScheduleState
from control.events import (
    CoflowFinished,
    CoflowStarted,
    Event,
    EventError,
    ExperimentFinished,
    ExperimentReleased,
    StageCompleted,
    StageReleased,
    TrialStarted,
    TrialStopped,
)
from control.model import CoflowKey, Experiment, Flow, Stage, StageKey, TrialStage


def _experiment(experiment_id: int = 1) -> Experiment:
    flows = (Flow(0, 1, 600), Flow(1, 0, 400))
    stage0 = Stage(0, (TrialStage(0, 2, 0.1, flows), TrialStage(1, 2, 0.1, flows)))
    stage1 = Stage(1, (TrialStage(0, 4, 0.1, flows),))
    return Experiment(experiment_id, 0.0, (stage0, stage1))


def _state() -> ScheduleState:
    return ScheduleState(num_hosts=2, port_capacity_bps=(1e9,) * 4)


def _running() -> ScheduleState:
    state = _state()
    for event in (
        ExperimentReleased(_experiment()),
        StageReleased(1, 0),
        TrialStarted(1, 0, 0),
        TrialStarted(1, 0, 1),
    ):
        state.apply(event, 0.0)
    return state


def test_full_lifecycle_of_an_experiment() -> None:
    state = _running()
    reply = state.apply(CoflowStarted(1, 0, 0, 0), 1.0)
    assert reply == {"coflow_id": 0}
    assert state.apply(CoflowStarted(1, 0, 1, 0), 1.0) == {"coflow_id": 1 << 16}
    snapshot = state.snapshot(2.0)
    assert [c.key for c in snapshot.coflows] == [CoflowKey(1, 0, 0, 0), CoflowKey(1, 0, 1, 0)]
    first = snapshot.coflows[0]
    assert first.total_bytes == 1000
    # Big-switch ports: host h sends on port h, receives on port num_hosts + h.
    assert dict(first.remaining_by_port) == {0: 600, 3: 600, 1: 400, 2: 400}
    assert snapshot.experiments[1].stage_index == 0
    state.apply(CoflowFinished(1, 0, 0, 0), 3.0)
    state.apply(CoflowStarted(1, 0, 0, 1), 3.0)
    state.apply(CoflowFinished(1, 0, 0, 1), 4.0)
    state.apply(TrialStopped(1, 0, 1), 4.0)
    snapshot = state.snapshot(4.0)
    assert snapshot.coflows == ()
    # A stopped trial has no work left; a finished one has done all its iterations.
    assert dict(snapshot.experiments[1].iterations_done) == {0: 2, 1: 2}
    assert state.apply(StageCompleted(1, 0), 5.0) == {"experiment_finished": False}
    state.apply(StageReleased(1, 1), 5.0)
    assert state.running_stages() == [StageKey(1, 1)]
    state.apply(TrialStarted(1, 1, 0), 5.0)
    assert state.apply(StageCompleted(1, 1), 6.0) == {"experiment_finished": True}
    assert state.experiments == {}


REFUSALS: list[tuple[Event, str]] = [
    (ExperimentReleased(_experiment()), "experiment 1 is already active"),
    (
        ExperimentReleased(
            Experiment(2, 0.0, (Stage(0, (TrialStage(0, 1, 0.0, (Flow(0, 5, 1),)),)),))
        ),
        r"flows\[0\].dst: host 5 does not exist \(the topology has 2 hosts\)",
    ),
    (StageReleased(1, 1), "stage 0 is still running"),
    (StageReleased(9, 0), "experiment 9 is not active"),
    (TrialStarted(1, 1, 0), r"stage 1 of experiment 1 is not running \(stage 0 is running\)"),
    (TrialStarted(1, 0, 7), "trial 7 is not in the plan of stage 0"),
    (TrialStarted(1, 0, 0), "trial 0 has already started"),
    (CoflowStarted(1, 0, 1, 1), "the next iteration is 0, not 1"),
    (CoflowFinished(1, 0, 1, 0), "iteration 0 has no active coflow"),
    (StageCompleted(1, 0), r"still has active coflows \(trials 0\)"),
    (ExperimentFinished(4), "experiment 4 is not active"),
]


@pytest.mark.parametrize(("event", "message"), REFUSALS)
def test_refused_events_change_nothing(event: Event, message: str) -> None:
    state = _running()
    state.apply(CoflowStarted(1, 0, 0, 0), 1.0)
    before = (copy.deepcopy(state.experiments), copy.deepcopy(state.coflows))
    with pytest.raises(EventError, match=message):
        state.apply(event, 2.0)
    assert (state.experiments, state.coflows) == before


def test_iteration_rules() -> None:
    state = _running()
    with pytest.raises(EventError, match="has not started"):
        fresh = _state()
        fresh.apply(ExperimentReleased(_experiment()), 0.0)
        fresh.apply(StageReleased(1, 0), 0.0)
        fresh.apply(CoflowStarted(1, 0, 0, 0), 0.0)
    state.apply(CoflowStarted(1, 0, 0, 0), 0.0)
    with pytest.raises(EventError, match="the coflow of iteration 0 has not finished"):
        state.apply(CoflowStarted(1, 0, 0, 1), 0.0)
    state.apply(CoflowFinished(1, 0, 0, 0), 0.0)
    state.apply(CoflowStarted(1, 0, 0, 1), 0.0)
    state.apply(CoflowFinished(1, 0, 0, 1), 0.0)
    with pytest.raises(EventError, match="has only 2 iterations"):
        state.apply(CoflowStarted(1, 0, 0, 2), 0.0)
    state.apply(TrialStopped(1, 0, 1), 0.0)
    with pytest.raises(EventError, match="trial 1 has already stopped"):
        state.apply(TrialStopped(1, 0, 1), 0.0)
    with pytest.raises(EventError, match="trial 1 has stopped"):
        state.apply(CoflowStarted(1, 0, 1, 0), 0.0)


def test_stopping_a_trial_drops_its_active_coflow() -> None:
    state = _running()
    state.apply(CoflowStarted(1, 0, 1, 0), 0.0)
    state.apply(TrialStopped(1, 0, 1), 0.0)
    assert state.coflows == {}


def test_experiment_finished_removes_everything_of_it() -> None:
    state = _running()
    state.apply(ExperimentReleased(_experiment(2)), 0.0)
    state.apply(CoflowStarted(1, 0, 0, 0), 0.0)
    state.apply(ExperimentFinished(1), 0.0)
    assert list(state.experiments) == [2]
    assert state.coflows == {}
    # Released but no stage running yet: not in the policy's snapshot.
    assert state.snapshot(0.0).experiments == {}


def test_the_active_plans_are_bounded_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans are kept while their experiments are active: past a bound on all of them
    together, a release is refused and changes nothing; once one finishes, it fits."""
    state = _state()
    state.apply(ExperimentReleased(_experiment(1)), 0.0)
    one_plan = state.experiments[1].plan_items
    assert one_plan == 3 * (1 + 2)  # three trials of two flows each
    monkeypatch.setattr(controller, "MAX_ACTIVE_PLAN_ITEMS", 2 * one_plan - 1)
    before = copy.deepcopy(state.experiments)
    with pytest.raises(EventError, match=r"experiment 2: its plan holds 9 trials, flows and "):
        state.apply(ExperimentReleased(_experiment(2)), 0.0)
    assert state.experiments == before
    state.apply(ExperimentFinished(1), 1.0)
    state.apply(ExperimentReleased(_experiment(2)), 1.0)
    assert list(state.experiments) == [2]


def test_progress_is_spread_over_the_stage_s_active_coflows() -> None:
    state = _running()
    state.apply(CoflowStarted(1, 0, 0, 0), 0.0)
    state.apply(CoflowStarted(1, 0, 1, 0), 0.0)
    state.add_progress({StageKey(1, 0): 500.0, StageKey(9, 9): 1e6})
    snapshot = state.snapshot(1.0)
    assert [c.sent_bytes for c in snapshot.coflows] == [250.0, 250.0]
    assert dict(snapshot.coflows[0].remaining_by_port) == {0: 450, 3: 450, 1: 300, 2: 300}
    state.add_progress({StageKey(1, 0): 1e9})
    assert [c.remaining_bytes for c in state.snapshot(1.0).coflows] == [0.0, 0.0]
