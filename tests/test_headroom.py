"""The offline reference of bench/bench_headroom.py: static orders, the search, the bound."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from bench.bench_headroom import (
    BEST,
    INSTANCES,
    experiment_profiles,
    instance,
    lower_bound,
    main,
    moves_from,
    one_seed,
    reversed_pairs,
    search,
)
from bench.heldout import mix_workload
from control.errors import UserError
from control.model import CoflowKey, Experiment, Flow, Stage, TrialStage, Workload
from control.policies import get_policy
from control.policies.base import CoflowState, Snapshot
from control.policies.beamer import BeamerPolicy
from control.policies.lookahead import LookaheadPolicy
from control.policies.spec import policy_from_spec
from control.policies.static_order import StaticOrderPolicy, neighbours
from sim.engine import SimConfig, simulate

GBPS = 1e9


def state(experiment: int, trial: int = 0) -> CoflowState:
    return CoflowState(CoflowKey(experiment, 0, trial, 0), 0.0, 10.0, 0.0, {0: 10.0, 5: 10.0}, 1)


def test_static_order_ranks_experiments_by_their_place_in_the_order() -> None:
    snap = Snapshot(0.0, 4, (GBPS,) * 8, (state(1), state(2, 1), state(2, 0), state(3)))
    ranking = StaticOrderPolicy([3, 2, 1]).rank(snap)
    assert ranking.groups == (
        (CoflowKey(3, 0, 0, 0),),
        (CoflowKey(2, 0, 0, 0), CoflowKey(2, 0, 1, 0)),
        (CoflowKey(1, 0, 0, 0),),
    )
    with pytest.raises(UserError, match="not in the static order"):
        StaticOrderPolicy([3, 2]).rank(snap)
    with pytest.raises(UserError, match="repeats"):
        StaticOrderPolicy([1, 1])


def chain(experiment_id: int, src: int, dst: int, size: int, iterations: int) -> Experiment:
    trial = TrialStage(0, iterations, 0.5, (Flow(src, dst, size),))
    return Experiment(experiment_id, 0.0, (Stage(0, (trial,)),))


def test_static_order_decides_who_goes_first_in_the_simulator() -> None:
    # Two one-flow experiments through the same uplink: the first in the order finishes
    # at its alone time, the other waits for it (its compute overlaps, its bytes do not).
    workload = Workload(2, 8e9, (chain(0, 0, 1, 10**9, 1), chain(1, 0, 1, 3 * 10**9, 1)))
    small_first = simulate(workload, StaticOrderPolicy([0, 1]))
    big_first = simulate(workload, StaticOrderPolicy([1, 0]))
    assert small_first.experiment_completion_s[0] == pytest.approx(1.5)
    assert small_first.experiment_completion_s[1] == pytest.approx(4.5)
    assert big_first.experiment_completion_s[1] == pytest.approx(3.5)
    assert big_first.experiment_completion_s[0] == pytest.approx(4.5)


def test_lower_bound_is_exact_alone_and_below_every_schedule_together() -> None:
    alone = Workload(2, 8e9, (chain(0, 0, 1, 10**9, 3),))
    result = simulate(alone, get_policy("beamer"))
    assert lower_bound(alone) == pytest.approx(3 * (0.5 + 1.0))
    assert lower_bound(alone) == pytest.approx(result.sct_s[(0, 0)])
    shared = Workload(2, 8e9, (chain(0, 0, 1, 10**9, 3), chain(1, 0, 1, 2 * 10**9, 2)))
    for name in ("beamer", "sincronia", "fair"):
        sct = np.mean(list(simulate(shared, get_policy(name)).sct_s.values()))
        assert lower_bound(shared) < sct


def test_reversed_pairs_say_what_the_experiment_moved_ahead_is_like() -> None:
    # Experiment 1 is longer alone than 0 (three iterations against one) and has two
    # stages; 2 arrives far later and is never counted.
    long_stages = (
        Stage(0, (TrialStage(0, 3, 0.5, (Flow(0, 1, 10**9),)),)),
        Stage(1, (TrialStage(0, 1, 0.5, (Flow(0, 1, 10**9),)),)),
    )
    workload = Workload(
        2,
        8e9,
        (
            chain(0, 0, 1, 10**9, 1),
            Experiment(1, 10.0, long_stages),
            Experiment(2, 500.0, (Stage(0, (TrialStage(0, 1, 0.1, ()),)),)),
        ),
    )
    profiles = experiment_profiles(workload)
    assert profiles[0]["alone_s"] == pytest.approx(1.5)
    assert profiles[1]["alone_s"] == pytest.approx(4.5 + 1.5)
    assert profiles[1]["busiest_port_s"] == pytest.approx(4.0)
    assert profiles[2]["duty_cycle"] == 0.0
    counts = reversed_pairs(workload, (0, 1, 2), (1, 0, 2))
    assert counts["pairs"] == {"reversed": 1}
    assert counts["alone_s"] == {"ahead_larger": 1, "ahead_smaller": 0}
    assert counts["stages"] == {"ahead_larger": 1, "ahead_smaller": 0}
    # Moving 2 (500 s later) ahead of both reverses two pairs that arrive too far apart.
    assert reversed_pairs(workload, (0, 1, 2), (2, 0, 1))["pairs"] == {"reversed": 0}
    assert reversed_pairs(workload, (0, 1, 2), (0, 1, 2))["pairs"] == {"reversed": 0}


def test_moves_from_refuses_a_file_that_is_not_a_headroom_run(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    with pytest.raises(UserError, match="not a bench_headroom JSON"):
        moves_from(str(bad), "beamer", "small")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"seeds": [{"seed": 1, "best_order": [0, 1, 2]}]}))
    with pytest.raises(UserError, match="no beamer_completion_order"):
        moves_from(str(other), "beamer", "small")


def test_neighbours_are_every_insertion_and_swap_once() -> None:
    order = (0, 1, 2, 3)
    found = neighbours(order)
    assert len(found) == len(set(found))
    assert order not in found
    # (n-1)^2 distinct insertions plus the swaps of non-adjacent pairs.
    assert len(found) == 9 + 3
    assert (3, 0, 1, 2) in found and (3, 1, 2, 0) in found


def test_a_window_keeps_only_the_moves_of_that_many_places() -> None:
    order = tuple(range(8))
    near = neighbours(order, window=2)
    assert set(near) < set(neighbours(order))
    for candidate in near:
        moved = [abs(candidate.index(e) - i) for i, e in enumerate(order)]
        assert max(moved) <= 2
    # Every move of at most two places is there: (2, 0, 1, ...) and the far swap of 5 and 7.
    assert (2, 0, 1, 3, 4, 5, 6, 7) in near and (0, 1, 2, 3, 4, 7, 6, 5) in near
    assert (3, 0, 1, 2, 4, 5, 6, 7) not in near
    assert set(neighbours(order, window=7)) == set(neighbours(order))


def test_the_default_instance_is_the_held_out_default_workload() -> None:
    assert instance(12, "default") == mix_workload("default", 12)
    assert instance(12, "sha-only") == mix_workload("sha-only", 12)
    assert instance(12, "hyperband-only") == mix_workload("hyperband-only", 12)
    assert {e.kind for e in instance(12, "sha-only").experiments} == {"sha"}
    assert len(instance(12, "default").experiments) > len(instance(12).experiments)
    with pytest.raises(UserError, match="--instance"):
        instance(12, "huge")


def test_search_finds_the_best_order_exhaustively_and_locally() -> None:
    target = (4, 2, 0, 5, 1, 3)

    def distance(order: tuple[int, ...]) -> float:
        # Pairs in the wrong relative order: insertion moves alone can reach zero.
        place = {e: i for i, e in enumerate(order)}
        return float(sum(1 for a, b in itertools.combinations(target, 2) if place[a] > place[b]))

    ids = sorted(target)
    best, how = search(distance, ids, [tuple(ids)], max_evals=10**6, max_exhaustive=720, seed=1)
    assert (best, how) == (target, "exhaustive")
    best, how = search(distance, ids, [tuple(ids)], max_evals=400, max_exhaustive=1, seed=1)
    assert (best, how) == (target, "local")


def test_policy_specs_build_beamer_variants_and_reject_bad_ones() -> None:
    policy = policy_from_spec("beamer:split_trials=true;future_weight=0.5;ordering=bottleneck")
    assert isinstance(policy, BeamerPolicy)
    assert (policy.split_trials, policy.future_weight, policy.ordering) == (True, 0.5, "bottleneck")
    assert policy_from_spec("beamer-v1").name == "beamer-v1"
    with pytest.raises(UserError, match="unknown beamer knob"):
        policy_from_spec("beamer:speed=3")
    with pytest.raises(UserError, match="not key=value"):
        policy_from_spec("beamer:split_trials")
    with pytest.raises(UserError, match="only beamer, beamer-lookahead take arguments"):
        policy_from_spec("sincronia:x=1")
    with pytest.raises(UserError, match="evals given more than once"):  # not: the last wins
        policy_from_spec("beamer-lookahead:evals=5;evals=6")
    for value in ("1_0", "\uff11\uff10"):  # int() reads both as 10
        with pytest.raises(UserError, match=f"evals={value} is not"):
            policy_from_spec(f"beamer-lookahead:evals={value}")


def test_policy_specs_build_lookahead_variants_and_refuse_bad_knobs() -> None:
    policy = policy_from_spec("beamer-lookahead:tail_power=2;evals=3")
    assert isinstance(policy, LookaheadPolicy)
    assert (policy.settings.tail_power, policy.settings.tail_weight) == (2, 0.0)
    assert policy.settings.evals == 3
    with pytest.raises(UserError, match="unknown beamer-lookahead knob 'speed'"):
        policy_from_spec("beamer-lookahead:speed=3")
    with pytest.raises(UserError, match=r"tail_power=0\.5 is not a number from 1 to 10"):
        policy_from_spec("beamer-lookahead:tail_power=0.5")
    with pytest.raises(UserError, match="tail_weight=nan is not a number from 0"):
        policy_from_spec("beamer-lookahead:tail_weight=nan")
    guarded = policy_from_spec("beamer-lookahead:guard_weight=1;guard_slack=0")
    assert isinstance(guarded, LookaheadPolicy)
    assert (guarded.settings.guard_weight, guarded.settings.guard_slack) == (1, 0)
    with pytest.raises(UserError, match=r"guard_slack=-0\.1 is not a number from 0"):
        policy_from_spec("beamer-lookahead:guard_slack=-0.1")
    run_tail = policy_from_spec("beamer-lookahead:run_tail_weight=2;run_tail_stages=3")
    assert isinstance(run_tail, LookaheadPolicy)
    assert (run_tail.settings.run_tail_weight, run_tail.settings.run_tail_stages) == (2, 3)
    with pytest.raises(UserError, match=r"run_tail_stages=2\.5 is not a whole number"):
        policy_from_spec("beamer-lookahead:run_tail_weight=1;run_tail_stages=2.5")
    with pytest.raises(UserError, match="run_tail_stages=0 is not a whole number from 1 to 1000"):
        policy_from_spec("beamer-lookahead:run_tail_stages=0")
    with pytest.raises(UserError, match="run_tail_weight=-1 is not a number from 0"):
        policy_from_spec("beamer-lookahead:run_tail_weight=-1")


def test_headroom_search_maps_orders_and_policies_onto_the_classes_given() -> None:
    # With one class every order and every policy is max-min over everything: the best
    # static order can be no better than Sincronia. With unlimited classes it is.
    one_class = one_seed(1, ("sincronia",), max_evals=6, max_exhaustive=6, classes=1)
    assert one_class["best_static_avg_sct_s"] == pytest.approx(one_class["sincronia_avg_sct_s"])
    ideal = one_seed(1, ("fair",), max_evals=6, max_exhaustive=6)
    assert ideal["best_static_avg_sct_s"] < ideal["fair_avg_sct_s"] * 0.99


def test_tails_from_sets_an_earlier_runs_best_orders_against_sincronia(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = instance(3)
    order = [e.experiment_id for e in reversed(workload.experiments)]
    earlier = tmp_path / "earlier.json"
    head = {"instances": INSTANCES["small"], "queues": "4"}
    earlier.write_text(json.dumps({**head, "seeds": [{"seed": 3, "best_order": order}]}))
    monkeypatch.setattr(
        "sys.argv", ["bench_headroom", "--tails-from", str(earlier), "--policies", "fair"]
    )
    main()
    report = json.loads(capsys.readouterr().out)
    assert (report["seeds"], report["queues"]) == ([3], "4")
    tails = report["tails"]
    config = SimConfig(num_classes=4)
    in_best = simulate(workload, StaticOrderPolicy(tuple(order)), config).sct_s
    fair = simulate(workload, get_policy("fair"), config).sct_s
    cut = np.percentile(list(fair.values()), 99)
    ((stages,),) = [list(seed.values()) for seed in report["per_seed_tail_stages"]]
    assert stages == [
        [key.experiment_id, key.stage_id, sct, in_best[key]]
        for key, sct in fair.items()
        if sct >= cut
    ]
    ratios = [sct / best for *_, sct, best in stages]
    best_s, fair_s = np.mean(list(in_best.values())), np.mean(list(fair.values()))
    sincronia_s = np.mean(list(simulate(workload, get_policy("sincronia"), config).sct_s.values()))
    expected_share = (sincronia_s - fair_s) / (sincronia_s - best_s)
    assert sincronia_s > best_s  # this order gains on Sincronia, so the share is defined
    assert report["share_of_gain"]["fair"] == pytest.approx(expected_share)
    assert report["tail_stages"]["fair"]["max_over_best"] == pytest.approx(max(ratios))
    for name, policy in ((BEST, StaticOrderPolicy(tuple(order))), ("fair", get_policy("fair"))):
        sct = list(simulate(workload, policy, config).sct_s.values())
        sincronia = list(simulate(workload, get_policy("sincronia"), config).sct_s.values())
        assert tails[name]["over_sincronia_mean"] == pytest.approx(
            np.mean(sct) / np.mean(sincronia)
        )
        assert tails[name]["p99_over_sincronia"] == pytest.approx(
            np.percentile(sct, 99) / np.percentile(sincronia, 99)
        )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--window", "0"], "--window: 0 is not a number of places"),
        (["--instance", "default", "--moves-from", "/nonexistent.json"], "not a bench_headroom"),
        (["--seeds", "1", "--start-from", "/nonexistent.json"], "--start-from /nonexistent.json"),
        (["--seeds", "1", "--start-from", "{seeds}"], "seed 1 has no best_order"),
        (["--tails-from", "/nonexistent.json"], "--tails-from /nonexistent.json"),
        (["--tails-from", "{odd}"], "its instances or queues are not known here"),
    ],
)
def test_bad_headroom_options_are_one_line_and_exit_2(
    argv: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps({"seeds": [{"seed": 1}]}))
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({"instances": "huge", "seeds": [{"seed": 1, "best_order": [0]}]}))
    argv = [arg.replace("{seeds}", str(earlier)).replace("{odd}", str(odd)) for arg in argv]
    monkeypatch.setattr("sys.argv", ["bench_headroom", *argv])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1
