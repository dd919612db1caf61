"""Beamer's lookahead: the residual workload, the order search, and the online bench."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from dataclasses import replace

import numpy as np
import pytest

from bench import bench_arrivals
from bench.bench_headroom import instance
from bench.bench_rollout import EpochOrderPolicy, main, online_order
from bench.common import run_command
from bench.heldout import mix_workload
from control.errors import UserError
from control.model import CoflowKey, Experiment, Flow, Stage, StageKey, TrialStage, Workload
from control.policies import get_policy
from control.policies.background import BackgroundSearch
from control.policies.base import CoflowState, ExperimentState, Ranking, Snapshot
from control.policies.lookahead import (
    LookaheadPolicy,
    SearchJob,
    SearchSettings,
    improve,
    insert_best,
    residual_workload,
    rule_placement,
    search,
)
from control.policies.sincronia import SincroniaPolicy
from control.policies.spec import policy_from_spec
from control.policies.static_order import StaticOrderPolicy
from sim.engine import SimConfig, simulate


def one_flow_trial(trial_id: int, iterations: int, size: int) -> TrialStage:
    return TrialStage(trial_id, iterations, 0.5, (Flow(0, 1, size),))


def test_residual_workload_keeps_what_is_left_of_each_experiment() -> None:
    # Experiment 4 runs stage 1 of 3: trial 0 has 2 of 5 iterations done, trial 1 all 3.
    stages = (
        Stage(0, (one_flow_trial(0, 1, 100),)),
        Stage(1, (one_flow_trial(0, 5, 100), one_flow_trial(1, 3, 100))),
        Stage(2, (one_flow_trial(0, 2, 100),)),
    )
    plan = Experiment(4, 7.0, stages, kind="hyperband", weight=2.0)
    state = ExperimentState(plan, stage_index=1, stage_release_s=9.0, iterations_done={0: 2, 1: 3})
    snap = Snapshot(12.0, 2, (8e9, 8e9, 4e9, 8e9), (), {4: state})
    residual = residual_workload(snap)
    assert residual.num_hosts == 2 and residual.link_bps == 4e9
    (left,) = residual.experiments
    assert (left.experiment_id, left.arrival_s) == (4, 0.0)
    assert (left.kind, left.weight) == ("hyperband", 2.0)
    assert [s.stage_id for s in left.stages] == [1, 2]
    assert [(t.trial_id, t.iterations) for t in left.stages[0].trials] == [(0, 3)]
    assert left.stages[1] == stages[2]


def test_a_running_stage_with_every_trial_done_is_dropped() -> None:
    stages = (Stage(0, (one_flow_trial(0, 2, 100),)), Stage(1, (one_flow_trial(0, 1, 100),)))
    state = ExperimentState(Experiment(0, 0.0, stages), 0, 0.0, {0: 2})
    (left,) = residual_workload(Snapshot(1.0, 2, (8e9,) * 4, (), {0: state})).experiments
    assert left.stages == (stages[1],)


def test_insert_best_puts_each_new_experiment_where_the_cost_is_lowest() -> None:
    wanted = (5, 1, 4, 2, 3)

    def cost(order: tuple[int, ...]) -> float:
        return float(sum(abs(order.index(e) - wanted.index(e)) for e in order))

    assert insert_best(cost, (1, 2, 3), [5, 4]) == wanted
    # Only the new ones move: the previous order's own mistakes stay.
    assert insert_best(cost, (2, 1, 3), [5, 4]) == (5, 2, 1, 4, 3)


def test_improve_climbs_within_its_budget() -> None:
    target = (0, 1, 2, 3, 4, 5)
    calls: list[tuple[int, ...]] = []

    def cost(order: tuple[int, ...]) -> float:
        calls.append(order)
        return float(sum(i != e for i, e in enumerate(order)))

    start = (1, 0, 2, 3, 5, 4)
    assert improve(cost, start, budget=500, window=2, rng=random.Random(1)) == target
    calls.clear()
    stuck = improve(cost, start, budget=0, window=2, rng=random.Random(1))
    assert stuck == start and len(set(calls)) <= 1


def short_and_long() -> Workload:
    """Two experiments through one uplink, both at time 0; the short one has the higher id."""
    long_one = Experiment(0, 0.0, (Stage(0, (one_flow_trial(0, 4, 3 * 10**9),)),))
    short_one = Experiment(1, 0.0, (Stage(0, (one_flow_trial(0, 1, 10**9),)),))
    return Workload(2, 8e9, (long_one, short_one))


def test_lookahead_runs_the_short_experiment_first() -> None:
    workload = short_and_long()
    policy = LookaheadPolicy()
    result = simulate(workload, policy, SimConfig())
    short_first = simulate(workload, StaticOrderPolicy([1, 0]), SimConfig())
    long_first = simulate(workload, StaticOrderPolicy([0, 1]), SimConfig())
    mean = [np.mean(list(r.sct_s.values())) for r in (result, short_first, long_first)]
    assert mean[0] == pytest.approx(mean[1]) and mean[1] < mean[2]
    # Both orders of the two were scored at the one arrival, and no more afterwards.
    assert policy.simulations == 2


def test_lookahead_ranks_by_its_order_between_arrivals() -> None:
    policy = LookaheadPolicy()
    coflows = tuple(
        CoflowState(CoflowKey(e, 0, 0, 0), 0.0, 10.0, 0.0, {0: 10.0, 3: 10.0}, 1) for e in (0, 1)
    )
    states = {e.experiment_id: ExperimentState(e, 0, 0.0, {}) for e in short_and_long().experiments}
    snap = Snapshot(0.0, 2, (8e9,) * 4, coflows, states)
    first = policy.rank(snap)
    assert [g[0].experiment_id for g in first.groups] == [1, 0]
    spent = policy.simulations
    assert policy.rank(snap) == first and policy.simulations == spent


def test_lookahead_is_a_registered_policy() -> None:
    assert isinstance(get_policy("beamer-lookahead"), LookaheadPolicy)


@pytest.mark.parametrize(
    ("name", "spec"),
    [
        ("beamer-lookahead-p99", "evals=20;run_tail_weight=2;run_tail_stages=3"),
        (
            "beamer-lookahead-rival",
            "evals=20;run_tail_weight=2;run_tail_stages=3;sincronia_rival=true",
        ),
        (
            "beamer-lookahead-stages",
            "evals=60;run_tail_weight=1;run_tail_stages=3;sincronia_rival=true;stage_evals=10",
        ),
    ],
)
def test_the_registered_searches_are_their_held_out_specs(name: str, spec: str) -> None:
    named = get_policy(name)
    spelled = policy_from_spec(f"beamer-lookahead:{spec}")
    assert isinstance(named, LookaheadPolicy) and isinstance(spelled, LookaheadPolicy)
    assert named.name == name
    assert named.settings == spelled.settings != LookaheadPolicy().settings
    workload = instance(2)
    named_sct = simulate(workload, named, SimConfig(num_classes=8)).sct_s
    assert named_sct == simulate(workload, spelled, SimConfig(num_classes=8)).sct_s


def test_epoch_orders_switch_at_their_start() -> None:
    coflows = tuple(
        CoflowState(CoflowKey(e, 0, 0, 0), 0.0, 10.0, 0.0, {0: 10.0}, 1) for e in (0, 1)
    )
    policy = EpochOrderPolicy([(0.0, (0, 1)), (5.0, (1, 0))])
    early = policy.rank(Snapshot(4.9, 2, (1.0,) * 4, coflows))
    late = policy.rank(Snapshot(5.0, 2, (1.0,) * 4, coflows))
    assert [g[0].experiment_id for g in early.groups] == [0, 1]
    assert [g[0].experiment_id for g in late.groups] == [1, 0]


def test_online_order_never_loses_to_its_first_insertions() -> None:
    # Three experiments, the third arriving while the first two run: every epoch's order
    # was scored against the rest, and the run under the epochs is the last score.
    long_one, short_one = short_and_long().experiments
    late = Experiment(2, 1.0, (Stage(0, (one_flow_trial(0, 1, 10**9),)),))
    workload = Workload(2, 8e9, (long_one, short_one, late))
    epochs, score, spent = online_order(workload, SimConfig(), evals=4, window=2, seed=1)
    assert [start for start, _ in epochs] == [0.0, 1.0]
    assert epochs[0][1] == (1, 0)
    run = simulate(workload, EpochOrderPolicy(epochs), SimConfig())
    assert np.mean(list(run.sct_s.values())) == pytest.approx(score, rel=1e-12)
    # Every static order that agrees with the first epoch was a candidate at the second.
    for order in ((1, 0, 2), (1, 2, 0), (2, 1, 0)):
        static = simulate(workload, StaticOrderPolicy(order), SimConfig())
        assert score <= np.mean(list(static.sct_s.values())) + 1e-9
    assert spent >= 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--window", "0"], "--window: 0"),
        (["--evals", "-1"], "--evals: -1"),
        (
            ["--hindsight", "/nonexistent.json", "--seeds", "1"],
            "--hindsight /nonexistent.json: no such file",
        ),
    ],
)
def test_bad_rollout_options_are_one_line_and_exit_2(
    argv: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr("sys.argv", ["bench_rollout", *argv])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1


def test_a_reused_experiment_id_is_placed_again() -> None:
    # Experiment 1 was short and went first; it leaves, and comes back as the long one.
    policy = LookaheadPolicy()
    workload = short_and_long()

    def snap(plans: dict[int, Experiment]) -> Snapshot:
        coflows = tuple(
            CoflowState(CoflowKey(e, 0, 0, 0), 0.0, 10.0, 0.0, {0: 10.0, 3: 10.0}, 1) for e in plans
        )
        states = {e: ExperimentState(plan, 0, 0.0, {}) for e, plan in plans.items()}
        return Snapshot(0.0, 2, (8e9,) * 4, coflows, states)

    long_one, short_one = workload.experiments
    first = policy.rank(snap({0: long_one, 1: short_one}))
    assert [g[0].experiment_id for g in first.groups] == [1, 0]
    policy.rank(snap({0: long_one}))
    reused = replace(long_one, experiment_id=1)
    shorter = Experiment(0, 0.0, (Stage(0, (one_flow_trial(0, 1, 10**8),)),))
    again = policy.rank(snap({0: shorter, 1: reused}))
    assert [g[0].experiment_id for g in again.groups] == [0, 1]


def test_quick_rollout_run_reports_epochs_that_reproduce_its_score(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", ["bench_rollout", "--quick", "--workers", "1"])
    main()
    report = json.loads(capsys.readouterr().out)
    assert report["summary"]["seeds"] == 2
    for row in report["seeds"]:
        workload = instance(row["seed"], "small")
        assert row["epochs"] == len({e.arrival_s for e in workload.experiments})
        epochs = [(start, tuple(order)) for start, order in row["online_epochs"]]
        run = simulate(workload, EpochOrderPolicy(epochs), SimConfig())
        assert np.mean(list(run.sct_s.values())) == pytest.approx(row["online_avg_sct_s"])


def test_the_tail_objective_counts_each_stage_from_its_release() -> None:
    ages = {StageKey(0, 1): 10.0}
    residual = {StageKey(0, 1): 2.0, StageKey(1, 0): 5.0}
    assert SearchSettings().objective(residual, ages) == 7.0  # the default: Σ residual SCT
    assert SearchSettings(tail_power=2.0).objective(residual, ages) == 12.0**2 + 5.0**2
    assert SearchSettings(tail_weight=3.0).objective(residual, ages) == 17.0 + 3 * 12.0


def test_a_tail_weight_serves_the_stage_that_has_waited_long() -> None:
    # Experiment 0's stage was released 100 s ago and needs 3 s; experiment 1 needs 1 s.
    # The sum of SCTs wants 1 first; a weight on the largest SCT puts the old stage first.
    long_one, short_one = short_and_long().experiments
    states = {
        0: ExperimentState(long_one, 0, -100.0, {}),
        1: ExperimentState(short_one, 0, 0.0, {}),
    }
    coflows = tuple(
        CoflowState(CoflowKey(e, 0, 0, 0), 0.0, 10.0, 0.0, {0: 10.0, 3: 10.0}, 1) for e in (0, 1)
    )
    snap = Snapshot(0.0, 2, (8e9,) * 4, coflows, states)
    plain = LookaheadPolicy().rank(snap)
    tail = LookaheadPolicy(tail_weight=5.0).rank(snap)
    assert [g[0].experiment_id for g in plain.groups] == [1, 0]
    assert [g[0].experiment_id for g in tail.groups] == [0, 1]


def test_the_run_tail_term_is_the_mean_of_the_runs_largest_sct() -> None:
    ages = {StageKey(0, 1): 10.0}
    residual = {StageKey(0, 1): 2.0, StageKey(1, 0): 5.0}
    run_tail = SearchSettings(run_tail_weight=3.0, run_tail_stages=2)
    # Nothing finished yet: the two largest are 12 (10 s old + 2 s) and 5.
    assert run_tail.objective(residual, ages) == 7.0 + 3.0 * (12.0 + 5.0) / 2
    # Two finished stages of 20 s and 15 s: they are the run's two largest.
    assert run_tail.objective(residual, ages, None, (20.0, 15.0)) == 7.0 + 3.0 * 35.0 / 2
    assert SearchSettings().objective(residual, ages, None, (20.0, 15.0)) == 7.0


def old_and_short_snapshot(now_s: float) -> Snapshot:
    """Experiment 0's stage was released 100 s before ``now_s`` and needs 3 s; experiment
    1's needs 1 s (the workload of ``short_and_long``)."""
    long_one, short_one = short_and_long().experiments
    states = {
        0: ExperimentState(long_one, 0, now_s - 100.0, {}),
        1: ExperimentState(short_one, 0, now_s, {}),
    }
    coflows = tuple(
        CoflowState(CoflowKey(e, 0, 0, 0), now_s, 10.0, 0.0, {0: 10.0, 3: 10.0}, 1) for e in (0, 1)
    )
    return Snapshot(now_s, 2, (8e9,) * 4, coflows, states)


def test_the_run_tail_term_serves_an_old_stage_only_where_it_would_set_the_tail() -> None:
    # Alone, the old stage would be the run's largest SCT: the term puts it first, where
    # the plain sum puts the short one first.
    assert [
        g[0].experiment_id for g in LookaheadPolicy().rank(old_and_short_snapshot(0.0)).groups
    ] == [1, 0]
    fresh = LookaheadPolicy(run_tail_weight=5.0, run_tail_stages=1)
    assert [g[0].experiment_id for g in fresh.rank(old_and_short_snapshot(0.0)).groups] == [0, 1]
    # After a 250 s stage has finished, the old stage (about 104 s) cannot raise the run's
    # largest SCT, so the term leaves the order to the sum.
    seasoned = LookaheadPolicy(run_tail_weight=5.0, run_tail_stages=1)
    veteran = Experiment(9, 0.0, (Stage(0, (one_flow_trial(0, 1, 10**9),)),))
    running = Snapshot(0.0, 2, (8e9,) * 4, (), {9: ExperimentState(veteran, 0, -250.0, {})})
    seasoned.rank(running)
    ranking = seasoned.rank(old_and_short_snapshot(0.0))
    assert seasoned.finished_sct_s == (250.0,)
    assert [g[0].experiment_id for g in ranking.groups] == [1, 0]
    # A search handed to the controller's worker process carries the same history.
    job = seasoned._job(old_and_short_snapshot(1.0), (0, 1), ())
    assert job.finished_sct_s == (250.0,)


def test_the_policy_records_each_finished_stages_sct_as_the_simulator_measures_it() -> None:
    workload = mix_workload("default", 3)
    policy = LookaheadPolicy(run_tail_weight=1.0, run_tail_stages=1000)
    result = simulate(workload, policy, SimConfig())
    end_s = {key: result.stage_release_s[key] + sct for key, sct in result.sct_s.items()}
    # Every stage but the run's last (no ranking follows it), to the last bit.
    seen = sorted(sct for key, sct in result.sct_s.items() if end_s[key] < max(end_s.values()))
    assert len(seen) > 50
    assert sorted(policy.finished_sct_s) == seen


def test_the_guard_adds_each_stages_excess_over_the_reference() -> None:
    ages = {StageKey(0, 1): 10.0}
    residual = {StageKey(0, 1): 2.0, StageKey(1, 0): 5.0}
    reference = {StageKey(0, 1): 1.0, StageKey(1, 0): 4.0}
    guarded = SearchSettings(guard_weight=3.0, guard_slack=0.1)
    # Stage (0, 1): 12 against 1.1 * 11 = 12.1, within; stage (1, 0): 5 against 4.4.
    assert guarded.objective(residual, ages, reference) == pytest.approx(7.0 + 3 * 0.6)
    assert guarded.objective(residual, ages, None) == 7.0  # no reference, no guard
    assert SearchSettings().objective(residual, ages, reference) == 7.0  # off by default


def test_the_guard_keeps_a_stage_within_what_sincronia_gives_it() -> None:
    # Experiment 0: one 4 s coflow. Experiment 1: five stages of 1 s each. The sum of SCTs
    # is lowest with 0 first (4 + 5 + 4 * 1 = 13 s), which makes experiment 1's first
    # stage wait 5 s where Sincronia, shortest coflow first, gives it 1 s; with the guard
    # the search takes the order whose every stage is within 5 % of Sincronia's.
    def experiment(experiment_id: int, sizes_bytes: list[int]) -> Experiment:
        stages = (
            Stage(i, (TrialStage(0, 1, 0.0, (Flow(0, 1, size),)),))
            for i, size in enumerate(sizes_bytes)
        )
        return Experiment(experiment_id, 0.0, tuple(stages))

    workload = Workload(2, 8e9, (experiment(0, [4 * 10**9]), experiment(1, [10**9] * 5)))
    sincronia = simulate(workload, get_policy("sincronia"), SimConfig()).sct_s
    plain, guarded = LookaheadPolicy(), LookaheadPolicy(guard_weight=1.0)
    plain_sct = simulate(workload, plain, SimConfig()).sct_s
    guarded_sct = simulate(workload, guarded, SimConfig()).sct_s
    assert (plain.order, guarded.order) == ((0, 1), (1, 0))
    assert sum(plain_sct.values()) < sum(guarded_sct.values())
    assert plain_sct[StageKey(1, 0)] > 4 * sincronia[StageKey(1, 0)]
    assert all(guarded_sct[key] <= 1.05 * sincronia[key] for key in sincronia)
    assert guarded.simulations == plain.simulations + 1  # the reference run


def released_at_once(seed: int) -> Workload:
    """A small instance with every experiment released at 0: one search decides the run."""
    workload = instance(seed)
    return replace(
        workload, experiments=tuple(replace(e, arrival_s=0.0) for e in workload.experiments)
    )


@pytest.mark.parametrize(("num_classes", "follows"), [(None, True), (4, False)])
def test_the_search_follows_sincronia_only_where_it_scores_lower(
    num_classes: int | None, follows: bool
) -> None:
    workload = released_at_once(1)
    ids = tuple(e.experiment_id for e in workload.experiments)
    config = SimConfig(num_classes=num_classes)

    def job(settings: SearchSettings) -> SearchJob:
        return SearchJob(workload, {}, (), ids, num_classes, settings, random.Random(0).getstate())

    rivalled = search(job(SearchSettings(sincronia_rival=True)))
    plain = search(job(SearchSettings()))
    assert rivalled.order == plain.order and not plain.follow_sincronia
    assert rivalled.simulations == plain.simulations + 1
    sincronia_s = sum(simulate(workload, SincroniaPolicy(), config).sct_s.values())
    order_s = sum(simulate(workload, StaticOrderPolicy(plain.order), config).sct_s.values())
    assert rivalled.follow_sincronia is follows is (sincronia_s < order_s)


def test_a_lookahead_that_follows_sincronia_ranks_as_sincronia() -> None:
    workload = released_at_once(1)
    policy = LookaheadPolicy(sincronia_rival=True)
    result = simulate(workload, policy, SimConfig())
    assert policy.following_sincronia
    assert result.sct_s == simulate(workload, SincroniaPolicy(), SimConfig()).sct_s
    assert result.sct_s != simulate(workload, LookaheadPolicy(), SimConfig()).sct_s


def test_the_sincronia_rival_must_be_true_or_false() -> None:
    with pytest.raises(UserError, match="sincronia_rival=1 is not true or false"):
        policy_from_spec("beamer-lookahead:sincronia_rival=1")


def test_rule_placement_puts_arrivals_where_the_rule_ranks_them() -> None:
    rule = Ranking(tuple((CoflowKey(e, 0, 0, 0),) for e in (4, 2, 7, 1)))
    assert rule_placement((1, 2, 3), {4, 7}, rule) == (4, 7, 1, 2, 3)
    assert rule_placement((2, 1), {7}, rule) == (2, 7, 1)
    assert rule_placement((2, 1), {9}, rule) == (2, 1, 9)  # unranked: last


def two_experiment_snapshot() -> Snapshot:
    coflows = tuple(
        CoflowState(CoflowKey(e, 0, 0, 0), 0.0, 10.0, 0.0, {0: 10.0, 3: 10.0}, 1) for e in (0, 1)
    )
    states = {e.experiment_id: ExperimentState(e, 0, 0.0, {}) for e in short_and_long().experiments}
    return Snapshot(0.0, 2, (8e9,) * 4, coflows, states)


def test_a_background_search_is_ranked_once_it_returns() -> None:
    # The rule puts the long experiment first; the search, in a worker process, finds
    # the short one first. Until it returns, the ranking is the rule's; then the search's.
    snap = two_experiment_snapshot()
    returned = threading.Event()
    policy = LookaheadPolicy()
    policy.rule = StaticOrderPolicy((0, 1))
    policy.search_in_background(returned.set)
    try:
        first = policy.rank(snap)
        assert [g[0].experiment_id for g in first.groups] == [0, 1]
        assert returned.wait(60)
        after = policy.rank(snap)
        assert [g[0].experiment_id for g in after.groups] == [1, 0]
        # The same order and cost as the search run in place.
        in_place = LookaheadPolicy()
        assert after == in_place.rank(snap) and policy.simulations == in_place.simulations
        worker = policy._worker
        assert worker is not None
        process = worker._process
    finally:
        policy.close()
    assert not process.is_alive()


class FirstSnapshot(SincroniaPolicy):
    """Sincronia that keeps the first snapshot it is handed."""

    def __init__(self) -> None:
        self.first: Snapshot | None = None

    def rank(self, snapshot: Snapshot) -> Ranking:
        if self.first is None:
            self.first = snapshot
        return super().rank(snapshot)


def test_a_background_search_that_prefers_sincronia_hands_the_ranking_to_it() -> None:
    recorder = FirstSnapshot()
    simulate(released_at_once(1), recorder, SimConfig())
    snap = recorder.first
    assert snap is not None and len(snap.experiments) == 3
    returned = threading.Event()
    policy = LookaheadPolicy(sincronia_rival=True)
    policy.search_in_background(returned.set)
    try:
        before = policy.rank(snap)
        assert not policy.following_sincronia
        assert before.groups[0][0].experiment_id == policy.order[0]  # the rule's placement
        assert returned.wait(60)
        after = policy.rank(snap)
        assert policy.following_sincronia and after == SincroniaPolicy().rank(snap) != before
    finally:
        policy.close()


class Outcomes:
    """What a worker returned, and an event set at each return."""

    def __init__(self) -> None:
        self.outcomes: list[object] = []
        self.got = threading.Event()

    def add(self, outcome: object) -> None:
        self.outcomes.append(outcome)
        self.got.set()


def test_a_search_that_raises_in_the_worker_is_reported() -> None:
    returned = Outcomes()
    worker = BackgroundSearch(returned.add)
    try:
        snap = two_experiment_snapshot()
        bad = SearchJob(residual_workload(snap), {}, (0, 1), (1,), None, SearchSettings(), "x")
        worker.submit(bad)
        assert returned.got.wait(60)
    finally:
        worker.close()
    (outcome,) = returned.outcomes
    assert isinstance(outcome, RuntimeError) and "Random.setstate" in str(outcome)


def test_a_failed_background_search_keeps_the_rule_placement() -> None:
    snap = two_experiment_snapshot()
    returned = threading.Event()
    policy = LookaheadPolicy()
    policy.rule = StaticOrderPolicy((0, 1))
    policy.settings = replace(policy.settings, evals=None)  # type: ignore[arg-type]
    policy.search_in_background(returned.set)
    try:
        first = policy.rank(snap)
        assert returned.wait(60)
        assert policy.rank(snap) == first and policy.searches_failed == 1
    finally:
        policy.close()


def test_closing_ends_a_worker_in_the_middle_of_a_search() -> None:
    returned = Outcomes()
    worker = BackgroundSearch(returned.add)
    state = random.Random(0).getstate()
    small = SearchJob(short_and_long(), {}, (), (0, 1), None, SearchSettings(), state)
    worker.submit(small)
    assert returned.got.wait(60)  # the worker is up and has searched once
    # A whole HP-tuning workload, every experiment new: minutes of simulations.
    heavy = mix_workload("default", 1)
    everyone = tuple(e.experiment_id for e in heavy.experiments)
    worker.submit(SearchJob(heavy, {}, (), everyone, None, SearchSettings(), state))
    time.sleep(0.5)
    worker.close()
    assert not worker._process.is_alive() and len(returned.outcomes) == 1


@pytest.mark.parametrize(
    ("policy", "searches_at_stage_ends"),
    [("beamer-lookahead", False), ("beamer-lookahead:evals=4;stage_evals=3", True)],
)
def test_quick_arrival_bench_ends_with_the_same_order_in_the_background_and_in_place(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    policy: str,
    searches_at_stage_ends: bool,
) -> None:
    monkeypatch.setattr("sys.argv", ["bench_arrivals", "--quick", "--policy", policy])
    bench_arrivals.main()
    report = json.loads(capsys.readouterr().out)
    assert report["policy"] == policy
    assert report["arrivals"] == 4 and report["same_final_order"] is True
    assert report["stage_ends"] == 2
    for part in ("reference_beamer_reply", "background_reply", "in_place_reply"):
        assert 0 < report[part]["p50_ms"] <= report[part]["max_ms"]
        stage_end = report[f"stage_end_{part}"]
        assert 0 < stage_end["p50_ms"] <= stage_end["max_ms"]
    simulations = report["stage_end_simulations"]
    assert (simulations["background"] > 0) == searches_at_stage_ends
    assert (simulations["in_place"] > 0) == searches_at_stage_ends


def test_bad_arrival_count_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", ["bench_arrivals", "--arrivals", "0"])
    with pytest.raises(SystemExit) as exited:
        run_command(bench_arrivals.main)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--arrivals: 0 is not between 1 and" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ("fair", "--policy: 'fair' is not a beamer-lookahead variant"),
        ("beamer-lookahead:evals=nan", "evals=nan is not a whole number"),
    ],
)
def test_an_arrival_bench_policy_that_is_no_lookahead_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], policy: str, message: str
) -> None:
    monkeypatch.setattr("sys.argv", ["bench_arrivals", "--quick", "--policy", policy])
    with pytest.raises(SystemExit) as exited:
        run_command(bench_arrivals.main)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_killed_search_process_is_replaced_at_the_next_arrival() -> None:
    long_one, short_one = short_and_long().experiments
    third = replace(short_one, experiment_id=2)

    def snap(plans: tuple[Experiment, ...]) -> Snapshot:
        coflows = tuple(
            CoflowState(CoflowKey(e.experiment_id, 0, 0, 0), 0.0, 10.0, 0.0, {0: 10.0}, 1)
            for e in plans
        )
        states = {e.experiment_id: ExperimentState(e, 0, 0.0, {}) for e in plans}
        return Snapshot(0.0, 2, (8e9,) * 4, coflows, states)

    returned = threading.Event()
    policy = LookaheadPolicy()
    policy.search_in_background(returned.set)
    try:
        policy.rank(snap((long_one, short_one)))
        assert returned.wait(60)
        returned.clear()
        policy.rank(snap((long_one, short_one)))
        assert policy._worker is not None
        first = policy._worker
        assert first.pid is not None
        os.kill(first.pid, signal.SIGKILL)
        assert returned.wait(60)  # the reader saw the pipe close
        returned.clear()
        policy.rank(snap((long_one, short_one, third)))
        assert policy._worker is not first and policy._worker.alive
        assert returned.wait(60)
        ranked = policy.rank(snap((long_one, short_one, third)))
        in_place = LookaheadPolicy()
        in_place.rank(snap((long_one, short_one)))
        assert ranked == in_place.rank(snap((long_one, short_one, third)))
    finally:
        policy.close()
    assert not first.alive


def test_a_stage_end_without_an_arrival_searches_with_its_own_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import control.policies.lookahead as lookahead

    real_search = lookahead.search
    searches: list[tuple[tuple[int, ...], int]] = []

    def recording(job: SearchJob) -> lookahead.SearchResult:
        result = real_search(job)
        searches.append((job.new, result.simulations))
        return result

    monkeypatch.setattr(lookahead, "search", recording)
    workload = instance(4)
    policy = LookaheadPolicy(evals=5, stage_evals=2)
    simulate(workload, policy, SimConfig())
    at_stage_ends = [simulations for new, simulations in searches if not new]
    assert len(at_stage_ends) > 5
    assert max(at_stage_ends) == 3  # the present order's score and two moves
    assert policy.finished_sct_s == ()  # no run-tail term, so no SCTs kept for it
    searches.clear()
    simulate(workload, LookaheadPolicy(evals=5), SimConfig())
    assert searches and all(new for new, _ in searches)


def test_a_background_lookahead_searches_again_when_a_stage_ends() -> None:
    both = two_experiment_snapshot()
    one_left = replace(
        both,
        coflows=both.coflows[1:],
        experiments={1: both.experiments[1]},
    )
    for stage_evals, searches_again in ((2, True), (0, False)):
        returned = threading.Event()
        policy = LookaheadPolicy(stage_evals=stage_evals)
        policy.search_in_background(returned.set)
        try:
            policy.rank(both)
            assert returned.wait(60)
            returned.clear()
            policy.rank(both)
            assert not policy.pending
            policy.rank(one_left)  # experiment 0's stage, its last, has ended
            assert policy.pending == searches_again
            if searches_again:
                assert returned.wait(60)
                policy.rank(one_left)
                assert not policy.pending and policy.order == (1,)
        finally:
            policy.close()


@pytest.mark.parametrize("strategy", ["equal-demand", "exponential"])
def test_the_search_simulates_its_candidates_with_the_runs_class_mapping(
    strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sim.engine

    run = sim.engine.simulate
    inner: list[SimConfig] = []

    def recording(workload: Workload, policy: object, config: SimConfig | None = None) -> object:
        assert config is not None
        inner.append(config)
        return run(workload, policy, config)  # type: ignore[arg-type]

    monkeypatch.setattr(sim.engine, "simulate", recording)
    config = SimConfig(num_classes=2, strategy=strategy)  # type: ignore[arg-type]
    run(released_at_once(1), LookaheadPolicy(), config)
    assert inner
    assert {(c.num_classes, c.strategy) for c in inner} == {(2, strategy)}
