"""Policies on hand-built snapshots: orders worked out by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from control.errors import UserError
from control.model import CoflowKey, Experiment, Flow, Stage, TrialStage
from control.policies import POLICIES, get_policy
from control.policies.aalo import MIB, AaloPolicy
from control.policies.base import CoflowState, ExperimentState, PortVector, Snapshot, demand_matrix
from control.policies.beamer import BeamerPolicy
from control.policies.bssi import bssi_order, bssi_order_numpy, bssi_order_plain, pairwise_sum

GBPS = (1e9,) * 8  # 4 hosts: sender ports 0..3, receiver ports 4..7


def coflow(
    key: CoflowKey,
    by_port: dict[int, float],
    arrival_s: float = 0.0,
    sent_bytes: float = 0.0,
) -> CoflowState:
    remaining = sum(by_port.values()) / 2
    return CoflowState(
        key, arrival_s, remaining + sent_bytes, sent_bytes, by_port, len(by_port) // 2
    )


def snapshot(
    *coflows: CoflowState, experiments: dict[int, ExperimentState] | None = None
) -> Snapshot:
    return Snapshot(0.0, 4, GBPS, tuple(coflows), experiments or {})


def key(experiment: int, stage: int = 0, trial: int = 0, iteration: int = 0) -> CoflowKey:
    return CoflowKey(experiment, stage, trial, iteration)


def test_bssi_worked_example() -> None:
    # Port loads 5 and 3: port 0 is the bottleneck; row 0 has the least weight per byte
    # there (1/4), so it goes last; row 1's weight drops to 1 - 1/4 = 0.75. Then port 1
    # (load 3): row 2 has 1/2 < 0.75/1, so it goes second to last. Row 1 first.
    demand = np.array([[4.0, 0.0], [1.0, 1.0], [0.0, 2.0]])
    assert bssi_order(demand) == [1, 2, 0]
    # Weight 10 on row 0 (10/4 = 2.5 > 1/1): row 1 goes last, row 0's weight drops to
    # 10 - 4 = 6; port 0 (load 4) is then row 0's alone, so it goes before row 1; row 2 first.
    assert bssi_order(demand, np.array([10.0, 1.0, 1.0])) == [2, 0, 1]
    assert bssi_order(np.zeros((0, 3))) == []


def test_bssi_single_port_is_shortest_first() -> None:
    demand = np.array([[5.0], [1.0], [3.0], [0.0]])
    assert bssi_order(demand) == [3, 1, 2, 0]


def test_sincronia_orders_coflows_by_bssi() -> None:
    a = coflow(key(1), {0: 4.0, 4: 4.0})
    b = coflow(key(2), {0: 1.0, 5: 1.0})
    c = coflow(key(3), {1: 2.0, 5: 2.0})
    ranking = get_policy("sincronia").rank(snapshot(a, b, c))
    assert ranking.order() == [key(2), key(3), key(1)]
    assert all(len(group) == 1 for group in ranking.groups)


def test_varys_orders_by_effective_bottleneck() -> None:
    wide = coflow(key(1), {0: 1.0, 1: 1.0, 2: 1.0, 4: 3.0})  # bottleneck 3 bytes at port 4
    narrow = coflow(key(2), {3: 2.0, 5: 2.0})
    ranking = get_policy("varys").rank(snapshot(wide, narrow))
    assert ranking.order() == [key(2), key(1)]
    assert get_policy("varys").allocator == "madd"


def test_aalo_queues_by_bytes_sent_then_fifo() -> None:
    policy = AaloPolicy()
    assert policy.queue_of(0) == 0
    assert policy.queue_of(10 * MIB) == 1
    assert policy.queue_of(99 * MIB) == 1
    assert policy.queue_of(100 * MIB) == 2
    assert policy.queue_of(1e30) == policy.num_queues - 1
    old_big = coflow(key(1), {0: 1.0, 4: 1.0}, arrival_s=0.0, sent_bytes=50 * MIB)
    old_small = coflow(key(2), {0: 9.0, 4: 9.0}, arrival_s=1.0, sent_bytes=1 * MIB)
    new_small = coflow(key(3), {0: 1.0, 4: 1.0}, arrival_s=2.0)
    ranking = policy.rank(snapshot(new_small, old_big, old_small))
    # Remaining bytes do not matter (non-clairvoyant): queue first, then arrival.
    assert ranking.order() == [key(2), key(3), key(1)]
    assert policy.next_rerank_sent_bytes(old_small) == 10 * MIB
    assert policy.next_rerank_sent_bytes(old_big) == 100 * MIB


def test_fifo_lm_lets_a_heavy_head_share_with_the_next() -> None:
    policy = get_policy("fifo-lm")
    first = coflow(key(1), {0: 1.0, 4: 1.0}, arrival_s=0.0, sent_bytes=99.0)
    second = coflow(key(2), {0: 10.0, 4: 10.0}, arrival_s=1.0)
    third = coflow(key(3), {0: 1.0, 4: 1.0}, arrival_s=2.0)
    # Sizes 100, 10, 1: the 0.8-quantile is 82 bytes; only the first has sent that much.
    ranking = policy.rank(snapshot(third, second, first))
    assert ranking.groups == ((key(1), key(2)), (key(3),))
    light = coflow(key(1), {0: 1.0, 4: 1.0}, arrival_s=0.0, sent_bytes=0.0)
    assert policy.rank(snapshot(third, second, light)).groups == ((key(1),), (key(2),), (key(3),))


def test_fifo_lm_takes_its_heavy_threshold_from_every_coflow_seen() -> None:
    policy = get_policy("fifo-lm")
    # Five one-byte coflows come and go: the size distribution is mostly one byte.
    for k in range(10, 15):
        policy.rank(snapshot(coflow(key(k), {0: 1.0, 4: 1.0}, arrival_s=0.0)))
    big = coflow(key(1), {0: 95.0, 4: 95.0}, arrival_s=1.0, sent_bytes=5.0)  # 100 bytes
    small = coflow(key(2), {1: 1.0, 5: 1.0}, arrival_s=2.0)  # 1 byte
    # Over the seven seen (six of 1 byte, one of 100) the 0.8-quantile is 1 byte, so the
    # big head, 5 bytes sent, is heavy and shares with the next. The two active coflows
    # alone would put the threshold at 80.2 bytes and keep the small one waiting.
    assert policy.rank(snapshot(small, big)).groups == ((key(1), key(2)),)
    assert get_policy("fifo-lm").rank(snapshot(small, big)).groups == ((key(1),), (key(2),))


def test_fair_puts_everything_in_one_group() -> None:
    a = coflow(key(1), {0: 1.0, 4: 1.0})
    b = coflow(key(2), {1: 5.0, 5: 5.0})
    assert get_policy("fair").rank(snapshot(a, b)).groups == ((key(1), key(2)),)


def two_experiments() -> tuple[Snapshot, CoflowKey, CoflowKey, CoflowKey]:
    """A: a small running stage and a big future stage; B: one medium stage, no future."""
    unit = 1000
    small = TrialStage(0, 1, 0.0, (Flow(0, 0 + 1, unit),))
    big = TrialStage(0, 1, 0.0, (Flow(0, 1, 10 * unit),))
    a = Experiment(
        1, 0.0, (Stage(0, (small, TrialStage(1, 1, 0.0, (Flow(2, 3, unit),)))), Stage(1, (big,)))
    )
    medium = TrialStage(0, 1, 0.0, (Flow(0, 1, 3 * unit),))
    b = Experiment(2, 0.0, (Stage(0, (medium,)),))
    a0 = coflow(key(1, 0, 0), {0: unit, 5: unit})
    a1 = coflow(key(1, 0, 1), {2: unit / 2, 7: unit / 2}, sent_bytes=unit / 2)
    b0 = coflow(key(2), {0: 3.0 * unit, 5: 3.0 * unit})
    experiments = {
        1: ExperimentState(a, 0, 0.0, {0: 0, 1: 0}),
        2: ExperimentState(b, 0, 0.0, {0: 0}),
    }
    return snapshot(a0, a1, b0, experiments=experiments), a0.key, a1.key, b0.key


def test_beamer_ranks_experiments_by_remaining_demand_including_future_stages() -> None:
    state, a0, a1, b0 = two_experiments()
    # A still owes 11 units on port 0 (1 now, 10 in stage 1); B owes 3: B first.
    ranking = get_policy("beamer").rank(state)
    assert ranking.groups == ((b0,), (a0, a1))  # inside A the critical trial (more left) first
    # Sincronia and the stage-level ablation see only the running coflows: A's are smaller.
    assert get_policy("sincronia").rank(state).order()[-1] == b0
    assert get_policy("beamer-stage").rank(state).groups == ((a0, a1), (b0,))


def test_beamer_forgets_the_plans_of_experiments_that_left() -> None:
    """Beamer caches per-experiment plan vectors; once an experiment is in no snapshot
    they go (a controller sees experiments come and go for as long as it runs, and
    each one's vectors used to stay), and the ranking of the rest does not change."""
    state, _, _, b0 = two_experiments()
    policy = BeamerPolicy()
    policy.rank(state)
    caches = (policy._per_iteration, policy._future, policy._stage_plan, policy._sync_bytes)
    assert {k[0] for cache in caches for k in cache} == {1, 2}
    only_b = dataclasses.replace(
        state,
        coflows=tuple(c for c in state.coflows if c.key == b0),
        experiments={2: state.experiments[2]},
    )
    assert policy.rank(only_b).groups == BeamerPolicy().rank(only_b).groups == ((b0,),)
    assert {k[0] for cache in caches for k in cache} == {2}
    assert policy.rank(state).groups == BeamerPolicy().rank(state).groups  # A again


def test_beamer_counts_remaining_iterations_of_the_running_stage() -> None:
    unit = 1000
    many = TrialStage(0, 10, 0.0, (Flow(0, 1, unit),))
    once = TrialStage(0, 1, 0.0, (Flow(0, 1, 4 * unit),))
    a = Experiment(1, 0.0, (Stage(0, (many,)),))
    b = Experiment(2, 0.0, (Stage(0, (once,)),))
    a_now = coflow(key(1, 0, 0, 5), {0: unit, 5: unit})  # iteration 5 of 10: 5 more after it
    b_now = coflow(key(2), {0: 4.0 * unit, 5: 4.0 * unit})
    experiments = {1: ExperimentState(a, 0, 0.0, {0: 5}), 2: ExperimentState(b, 0, 0.0, {0: 0})}
    ranking = get_policy("beamer").rank(snapshot(a_now, b_now, experiments=experiments))
    assert ranking.order() == [b_now.key, a_now.key]
    experiments[1] = ExperimentState(a, 0, 0.0, {0: 8})  # only the last iteration left
    late = coflow(key(1, 0, 0, 9), {0: unit, 5: unit})
    assert get_policy("beamer").rank(snapshot(late, b_now, experiments=experiments)).order() == [
        late.key,
        b_now.key,
    ]


def test_every_registered_policy_ranks_every_coflow_once() -> None:
    state, *_ = two_experiments()
    for name in POLICIES:
        order = get_policy(name).rank(state).order()
        assert sorted(order) == sorted(c.key for c in state.coflows), name
        assert get_policy(name).rank(snapshot()).order() == []


def test_unknown_policy_is_a_user_error() -> None:
    with pytest.raises(UserError, match="unknown policy 'srpt'"):
        get_policy("srpt")


def test_vectorised_bssi_matches_the_plain_statement() -> None:
    rng = np.random.default_rng(5)
    for _ in range(20):
        rows, ports = int(rng.integers(1, 30)), int(rng.integers(1, 12))
        demand = rng.exponential(1e6, size=(rows, ports)) * (rng.random((rows, ports)) < 0.4)
        assert bssi_order(demand) == bssi_order_plain(demand.tolist())


def test_compiled_bssi_is_the_numpy_loop_bit_for_bit() -> None:
    rng = np.random.default_rng(11)
    for case in range(300):
        rows, ports = int(rng.integers(1, 40)), int(rng.integers(1, 14))
        if case % 2:  # whole numbers of MB: many exact ties between rows and ports
            demand = rng.integers(0, 4, size=(rows, ports)).astype(float) * 1e6
        else:
            demand = rng.exponential(1e6, size=(rows, ports)) * (rng.random((rows, ports)) < 0.4)
        weights = rng.uniform(0.1, 5.0, rows) if case % 3 == 0 else None
        assert bssi_order(demand, weights) == bssi_order_numpy(demand, weights)
    # Once rows 1, 3 and 2 are placed, port 0 keeps a rounding residue (1.4e-16) above
    # port 1's real load (3e-18) though no live row uses it: both versions must fall
    # back to the live rows' loads, and agree with the plain statement.
    rounding = np.array([[0.0, 3e-18], [0.3, 0.0], [0.1, 3e-18], [0.7, 0.0]])
    assert bssi_order(rounding) == bssi_order_numpy(rounding) == [0, 2, 1, 3]
    assert bssi_order_plain(rounding.tolist()) == [0, 2, 1, 3]


def test_demand_matrix_stacks_dense_rows_as_it_adds_sparse_ones() -> None:
    # The simulator hands dense PortVector rows (stacked in one copy), the controller
    # dicts (added port by port); both, and a mix of the two, give the same matrix.
    rng = np.random.default_rng(4)
    dense = rng.exponential(1e6, size=(5, 8)) * (rng.random((5, 8)) < 0.5)
    as_dicts = [{int(p): float(v) for p, v in enumerate(row) if v} for row in dense]
    by_dict = demand_matrix([coflow(key(i), d) for i, d in enumerate(as_dicts)], 8)
    by_rows = [coflow(key(i), PortVector(row.copy())) for i, row in enumerate(dense)]  # type: ignore[arg-type]
    assert np.array_equal(demand_matrix(by_rows, 8), dense)
    assert np.array_equal(by_dict, dense)
    mixed = [by_rows[0], coflow(key(9), as_dicts[1])]
    assert np.array_equal(demand_matrix(mixed, 8), dense[:2])
    short = [coflow(key(0), PortVector(dense[0, :6].copy()))]  # type: ignore[arg-type]
    assert np.array_equal(demand_matrix(short, 8)[0, :6], dense[0, :6])
    assert demand_matrix([], 8).shape == (0, 8)


def test_the_compiled_pairwise_sum_rounds_as_numpy_sums() -> None:
    # Every length up to past two halvings, values of mixed magnitude: numpy's sum of a
    # contiguous run, bit for bit (the compiled BSSI takes its port loads from it).
    rng = np.random.default_rng(3)
    for count in [*range(0, 140), 255, 256, 257, 300, 531, 1000]:
        values = rng.exponential(1e6, count) * rng.choice([1e-9, 1.0, 1e9], count)
        assert pairwise_sum(values, 0, count) == np.sum(values), count
        if count > 5:
            assert pairwise_sum(values, 3, count - 5) == np.sum(values[3:-2]), count


def test_compiled_bssi_equals_the_numpy_loop_on_many_rows_and_negative_demand() -> None:
    rng = np.random.default_rng(12)
    for rows in (8, 9, 64, 129, 300):
        demand = rng.exponential(1e6, size=(rows, 6)) * (rng.random((rows, 6)) < 0.5)
        assert bssi_order(demand) == bssi_order_numpy(demand)
    # A negative entry (never a remaining byte count) takes the numpy path.
    mixed = rng.normal(0.0, 1e6, size=(12, 5))
    assert bssi_order(mixed) == bssi_order_numpy(mixed)


def test_beamer_reranks_a_unit_whose_coflow_changed() -> None:
    state, a0, a1, b0 = two_experiments()
    policy = get_policy("beamer")
    assert policy.rank(state).groups == ((b0,), (a0, a1))
    # B's coflow grows to 30 units on port 0, A's states are the very same objects:
    # A (11 units) must now come first, as a policy that never saw the first snapshot says.
    b_big = coflow(b0, {0: 30_000.0, 5: 30_000.0})
    changed = dataclasses.replace(state, coflows=(*state.coflows[:2], b_big))
    assert policy.rank(changed).groups == ((a0, a1), (b0,))
    assert get_policy("beamer").rank(changed) == policy.rank(changed)
    assert policy.rank(state).groups == ((b0,), (a0, a1))  # and back


def test_beamer_reranks_an_experiment_whose_progress_changed() -> None:
    unit = 1000
    a = Experiment(1, 0.0, (Stage(0, (TrialStage(0, 10, 0.0, (Flow(0, 1, unit),)),)),))
    b = Experiment(2, 0.0, (Stage(0, (TrialStage(0, 1, 0.0, (Flow(0, 1, 4 * unit),)),)),))
    a_now = coflow(key(1, 0, 0, 5), {0: unit, 5: unit})
    b_now = coflow(key(2), {0: 4.0 * unit, 5: 4.0 * unit})
    b_state = ExperimentState(b, 0, 0.0, {0: 0})
    for name in ("beamer", "beamer-stage"):
        policy = get_policy(name)
        early = {1: ExperimentState(a, 0, 0.0, {0: 5}), 2: b_state}
        assert policy.rank(snapshot(a_now, b_now, experiments=early)).order() == [
            b_now.key,
            a_now.key,
        ], name
        # Same coflow objects, new progress: A has one iteration (2 units) left, B 4 units.
        late = {1: ExperimentState(a, 0, 0.0, {0: 8}), 2: b_state}
        assert policy.rank(snapshot(a_now, b_now, experiments=late)).order() == [
            a_now.key,
            b_now.key,
        ], name


def test_beamer_does_not_recompute_unchanged_units(monkeypatch: pytest.MonkeyPatch) -> None:
    state, *_, b0 = two_experiments()
    policy = BeamerPolicy()
    calls: list[tuple[int, ...]] = []
    compute = BeamerPolicy._demand

    def counted(self: BeamerPolicy, unit: tuple[int, ...], *args: object) -> object:
        calls.append(unit)
        return compute(self, unit, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(BeamerPolicy, "_demand", counted)
    first = policy.rank(state)
    b_new = coflow(b0, {0: 3000.0, 5: 3000.0})  # equal values, a new object: recomputed
    second = policy.rank(dataclasses.replace(state, coflows=(*state.coflows[:2], b_new)))
    assert first == second
    assert calls == [(1,), (2,), (2,)]


def test_beamer_v1_keeps_the_first_design() -> None:
    state, a0, a1, b0 = two_experiments()
    assert get_policy("beamer-v1").rank(state).groups == ((b0,), (a0, a1))
    assert get_policy("beamer-v1").name == "beamer-v1"


def test_beamer_variants_move_the_experiment_they_should() -> None:
    """Each knob, on the same two experiments (A owes 11 units on port 0, B owes 3)."""
    state, a0, a1, b0 = two_experiments()
    a_first = ((a0, a1), (b0,))
    # Two stages left for A, one for B: weight 2**2 = 4 makes 4/11 > 1/3, so B goes last.
    assert BeamerPolicy(stage_exponent=2.0).rank(state).groups == a_first
    assert BeamerPolicy(stage_exponent=1.0).rank(state).groups == ((b0,), (a0, a1))
    # Busiest-port times 11 and 3 units: within a ratio of 4 they share one group.
    assert BeamerPolicy(merge_ratio=4.0).rank(state).groups == ((b0, a0, a1),)
    assert len(BeamerPolicy(merge_ratio=3.0).rank(state).groups) == 2
    # A has waited 100 s and B 1 s: with aging every 10 s, A weighs 11 and B 1.1.
    experiments = dict(state.experiments)
    b_late = dataclasses.replace(experiments[2].experiment, arrival_s=99.0)
    experiments[2] = dataclasses.replace(experiments[2], experiment=b_late)
    later = dataclasses.replace(state, now_s=100.0, experiments=experiments)
    assert BeamerPolicy(aging_s=10.0).rank(later).groups == a_first
    assert BeamerPolicy().rank(later).groups == ((b0,), (a0, a1))


def test_beamer_compute_weight_counts_the_compute_left() -> None:
    unit = 1000
    quick = Experiment(1, 0.0, (Stage(0, (TrialStage(0, 1, 0.0, (Flow(0, 1, 2 * unit),)),)),))
    slow = Experiment(2, 0.0, (Stage(0, (TrialStage(0, 1, 1.0, (Flow(0, 1, unit),)),)),))
    a = coflow(key(1), {0: 2.0 * unit, 5: 2.0 * unit})
    b = coflow(key(2), {0: 1.0 * unit, 5: 1.0 * unit})
    experiments = {
        1: ExperimentState(quick, 0, 0.0, {0: 0}),
        2: ExperimentState(slow, 0, 0.0, {0: 0}),
    }
    state = snapshot(a, b, experiments=experiments)
    assert BeamerPolicy().rank(state).order() == [b.key, a.key]
    # One second of compute left is 1.25e8 byte-equivalents at 1 Gbit/s: B becomes the big one.
    assert BeamerPolicy(compute_weight=1.0).rank(state).order() == [a.key, b.key]


def test_beamer_coflow_tail_orders_the_experiments_behind_per_coflow() -> None:
    state, a0, a1, b0 = two_experiments()
    # Beamer: B, then A with its critical trial (a0: 1 unit left against a1's 0.5) first.
    assert BeamerPolicy().rank(state).groups == ((b0,), (a0, a1))
    # B keeps the first group; behind it, A's coflows go by per-coflow BSSI: a0 alone loads
    # port 0 (1 unit) more than a1 loads port 2 (0.5), so a0 goes last and a1 first.
    assert BeamerPolicy(coflow_tail=1).rank(state).groups == ((b0,), (a1,), (a0,))
    # With no experiment group kept it is Sincronia's order; with two, nothing changes.
    assert (
        BeamerPolicy(coflow_tail=0).rank(state).groups == get_policy("sincronia").rank(state).groups
    )
    assert BeamerPolicy(coflow_tail=2).rank(state).groups == ((b0,), (a0, a1))
    assert get_policy("beamer-tail").name == "beamer-tail"
    assert get_policy("beamer-tail").rank(state).groups == ((b0,), (a0, a1))


def test_beamer_tail_fits_keeps_experiment_groups_when_classes_are_scarce() -> None:
    state, a0, a1, b0 = two_experiments()
    fits = BeamerPolicy(coflow_tail=1, tail_fits=True)
    tail = ((b0,), (a1,), (a0,))
    # Unlimited classes, or enough for one group each (B, a1, a0): the per-coflow tail.
    assert fits.rank(state).groups == tail
    assert fits.rank(dataclasses.replace(state, num_classes=3)).groups == tail
    # Two classes: a0 and a1 would share the last class anyway; A stays one group.
    assert fits.rank(dataclasses.replace(state, num_classes=2)).groups == ((b0,), (a0, a1))
    # Without the knob the class count is ignored.
    scarce = dataclasses.replace(state, num_classes=2)
    assert BeamerPolicy(coflow_tail=1).rank(scarce).groups == tail


def test_beamer_global_tail_order_is_sincronias_order_of_the_waiting_coflows() -> None:
    # One coflow per experiment (as in FB2010): e2 is the head (BSSI puts it first).
    e1 = coflow(key(1), {1: 4.0, 3: 1.0, 4: 2.5, 5: 2.5})
    e2 = coflow(key(2), {0: 2.0, 6: 2.0})
    e3 = coflow(key(3), {0: 4.0, 4: 2.0, 5: 2.0})
    state = snapshot(e1, e2, e3)
    # Among all three, port 0 (load 6) is the bottleneck and e3 goes last; then port 1
    # puts e1 behind e2: e2, e1, e3, which is Sincronia's order.
    sincronia = get_policy("sincronia").rank(state).order()
    assert sincronia == [e2.key, e1.key, e3.key]
    glob = BeamerPolicy(coflow_tail=1, tail_order="global").rank(state)
    assert glob.groups == ((e2.key,), (e1.key,), (e3.key,))
    # Ranked among themselves, e1 and e3 meet at port 4 (4.5), where e1 weighs least per
    # byte and goes last: the subset order leaves Sincronia's.
    subset = BeamerPolicy(coflow_tail=1).rank(state)
    assert subset.groups == ((e2.key,), (e3.key,), (e1.key,))
    with pytest.raises(UserError, match="tail_order"):
        BeamerPolicy(tail_order="random")  # type: ignore[arg-type]


def test_beamer_starvation_guard_puts_a_stage_out_too_long_first() -> None:
    state, a0, a1, b0 = two_experiments()
    # A's stage alone: 1,000 bytes per trial and on port 0 at 1 Gbit/s, 8 us; B's: 24 us.
    experiments = dict(state.experiments)
    experiments[2] = dataclasses.replace(experiments[2], stage_release_s=90e-6)
    guard = BeamerPolicy(starvation_guard=4.0)
    # At 20 us A has been out 2.5× its alone time (guard 4×): Beamer's order, B first.
    early = dataclasses.replace(state, now_s=20e-6, experiments=experiments)
    assert guard.rank(early).groups == ((b0,), (a0, a1))
    # At 100 us A has been out 12.5× and B (released at 90 us) 0.4×: A goes first.
    late = dataclasses.replace(state, now_s=100e-6, experiments=experiments)
    assert guard.rank(late).groups == ((a0, a1), (b0,))
    assert BeamerPolicy().rank(late).groups == ((b0,), (a0, a1))
    # Both past the guard: they keep Beamer's order among themselves.
    both = dataclasses.replace(state, now_s=1.0)
    assert guard.rank(both).groups == ((b0,), (a0, a1))
    assert get_policy("beamer-guard").name == "beamer-guard"
    assert get_policy("beamer-guard").rank(late).groups == guard.rank(late).groups
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(UserError, match="starvation_guard"):
            BeamerPolicy(starvation_guard=bad)


def test_warm_up_compiles_the_kernels_a_controller_ranks_with() -> None:
    # A controller calls this before it serves: in a fresh install the first compile
    # took over a second and delayed its first reaction past a run's first coflow.
    from control.policies import warm_up
    from control.policies.beamer import add_iterations
    from control.policies.bssi import _bssi_compiled

    warm_up()
    # BSSI's whole ordering is one compiled call (its steps are compiled inside it).
    assert _bssi_compiled.signatures and add_iterations.signatures


def test_beamer_duty_exponent_puts_a_compute_bound_experiment_first() -> None:
    unit = 1000
    # A: 10 iterations of 1 unit each, 100 us of compute per iteration: 10 units of
    # network in 1.08 ms alone (duty 0.074). B: one iteration of 4 units, no compute.
    slow = TrialStage(0, 10, 100e-6, (Flow(0, 1, unit),))
    once = TrialStage(0, 1, 0.0, (Flow(0, 1, 4 * unit),))
    a = Experiment(1, 0.0, (Stage(0, (slow,)),))
    b = Experiment(2, 0.0, (Stage(0, (once,)),))
    a_now = coflow(key(1, 0, 0, 0), {0: unit, 5: unit})
    b_now = coflow(key(2), {0: 4.0 * unit, 5: 4.0 * unit})
    experiments = {1: ExperimentState(a, 0, 0.0, {0: 0}), 2: ExperimentState(b, 0, 0.0, {0: 0})}
    state = snapshot(a_now, b_now, experiments=experiments)
    # By bytes B owes less (4 against 10 units): B first.
    assert BeamerPolicy().rank(state).order() == [b_now.key, a_now.key]
    # Scaled by duty cycle A owes 10 x 0.074 against B's 4 x 1: A first.
    assert BeamerPolicy(duty_exponent=1.0).rank(state).order() == [a_now.key, b_now.key]
    # Without compute the duty cycle is 1 and the order is the bytes' order.
    fast = dataclasses.replace(
        experiments[1],
        experiment=Experiment(1, 0.0, (Stage(0, (dataclasses.replace(slow, compute_s=0.0),)),)),
    )
    no_compute = dataclasses.replace(state, experiments={**experiments, 1: fast})
    assert BeamerPolicy(duty_exponent=1.0).rank(no_compute).order() == [b_now.key, a_now.key]
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(UserError, match="duty_exponent"):
            BeamerPolicy(duty_exponent=bad)


def test_beamer_duty_cycle_is_one_for_coflows_without_compute() -> None:
    # FB2010 coflows are one-coflow experiments with no compute: each is network-bound
    # however much of it is sent, so the duty cycle changes no ranking. (It did while the
    # remaining time alone counted a whole iteration for a coflow already half sent.)
    from bench.bench_sim import offline_subset
    from sim.engine import simulate

    trace = offline_subset(400, 60)  # 60 coflows released together: heavy contention
    with_duty = simulate(trace, get_policy("beamer-duty"))
    without = simulate(trace, get_policy("beamer"))
    assert with_duty.cct_s == without.cct_s
