"""The fast model's incremental allocation (refilling only from the highest class whose
entries changed, per-event work over the moving entries only) against a filling from
scratch at every event and against the per-flow model, on workloads made to break it:
many classes, idle ports, equal sizes (ties), completions in many classes at once."""

from __future__ import annotations

import numpy as np
import pytest

from control.model import Experiment, Flow, Stage, TrialStage, Workload
from control.policies import POLICIES, get_policy, is_search
from sim import kernels
from sim.engine import SimConfig, SimResult, _Coflow, simulate
from sim.fast import FastSimulation

GBIT = 1e9
MB = 1_000_000


def assert_identical(fast: SimResult, reference: SimResult, label: str) -> None:
    """Every stage's and every coflow's time equal to the last bit."""
    assert fast.sct_s == reference.sct_s, label
    assert fast.cct_s == reference.cct_s, label


def test_refilling_from_a_recorded_class_equals_a_filling_from_scratch() -> None:
    rng = np.random.default_rng(7)
    hosts, count, num_classes = 12, 400, 9
    src = rng.integers(0, hosts // 2, count)  # half the hosts never send: idle ports
    dst = hosts + (src + rng.integers(1, hosts, count)) % hosts
    capacity = np.full(2 * hosts, 125e6)
    saturated_below = capacity * 1e-9
    classes = rng.integers(0, num_classes, count)
    order, starts = kernels.class_order(classes)
    src_sorted, dst_sorted = src[order], dst[order]
    mult_sorted = rng.integers(1, 3, count)[order].astype(float)
    run_end = kernels.run_ends(dst_sorted, starts)
    bounds = np.empty((num_classes, 2 * hosts))
    moving_start = np.empty(num_classes, dtype=np.int64)
    scratch = kernels.Scratch()
    rates = np.zeros(count)
    moving, reached = kernels.maxmin_into(
        src_sorted, dst_sorted, mult_sorted, order, starts, run_end, capacity.copy(),
        saturated_below, rates, scratch, 0, 0, bounds, moving_start,
    )  # fmt: skip
    assert reached >= 2
    moving = moving.copy()
    refilled = 0
    for _ in range(30):
        # Some entries of one class finish; refill from that class only.
        first = int(rng.integers(0, reached))
        members = np.arange(starts[first], starts[first + 1])
        gone = rng.choice(members, size=min(3, len(members)), replace=False)
        mult_sorted[gone] = 0.0
        keep = int(moving_start[first])
        rates[moving[keep:]] = 0.0
        scratch.moving[:keep] = moving[:keep]
        moving, reached = kernels.maxmin_into(
            src_sorted, dst_sorted, mult_sorted, order, starts, run_end,
            bounds[first].copy(), saturated_below, rates, scratch, first, keep, bounds,
            moving_start,
        )  # fmt: skip
        moving = moving.copy()
        expected = kernels.maxmin_ordered(
            src_sorted, dst_sorted, mult_sorted, order, starts, capacity, saturated_below
        )
        np.testing.assert_array_equal(rates, expected)
        np.testing.assert_array_equal(np.sort(moving), np.flatnonzero(expected > 0))
        refilled += keep > 0
        if reached == 0:
            break
    assert refilled > 0


def one_class_instance(seed: int) -> tuple[np.ndarray, ...]:
    """Many entries of one class over few ports with uneven loads (many filling rounds)."""
    rng = np.random.default_rng(seed)
    hosts, count = 10, 300
    src = rng.integers(0, hosts, count)
    dst = hosts + (src + rng.integers(1, hosts, count)) % hosts
    capacity = rng.choice([1.0, 2.0, 3.0], 2 * hosts) * 125e6
    order, starts = kernels.class_order(rng.integers(0, 2, count))
    mult_sorted = rng.integers(1, 4, count)[order].astype(float)
    return src[order], dst[order], mult_sorted, order, starts, capacity


def fill_and_finish(seed: int, tamper: bool = False) -> tuple[kernels.RoundLog, list[int]]:
    """Fill, then finish a few of the fastest entries at a time and restart from the
    logged rounds, checking every allocation against a filling from scratch; with
    ``tamper``, the logged steps are made infinite so that every replay must refuse."""
    src_sorted, dst_sorted, mult_sorted, order, starts, capacity = one_class_instance(seed)
    count, num_classes, num_ports = len(order), len(starts) - 1, len(capacity)
    saturated_below = capacity * 1e-9
    run_end = kernels.run_ends(dst_sorted, starts)
    position = np.empty(count, dtype=np.int64)
    position[order] = np.arange(count)
    bounds = np.empty((num_classes, num_ports))
    moving_start = np.empty(num_classes, dtype=np.int64)
    scratch, log, rates = kernels.Scratch(), kernels.RoundLog(num_ports), np.zeros(count)
    log.reset(num_classes, count)
    log.want_rows(64)
    moving, reached = kernels.maxmin_into(
        src_sorted, dst_sorted, mult_sorted, order, starts, run_end, capacity.copy(),
        saturated_below, rates, scratch, 0, 0, bounds, moving_start, log,
    )  # fmt: skip
    moving = moving.copy()
    restart_rounds = []
    holes_seen = 0
    while (mult_sorted[position[moving]] > 0).any():
        # The entries with the highest rate finish first, as flows of equal size do.
        live = moving[mult_sorted[position[moving]] > 0]
        fastest = live[rates[live] == rates[live].max()][:3]
        done = position[fastest]
        first = int(np.searchsorted(starts, done.min(), side="right")) - 1
        done_mult = mult_sorted[done].copy()
        restart_rounds.append(int(log.freeze_round[done].min()))
        mult_sorted[done] = 0.0
        rates[fastest] = 0.0
        end = int(moving_start[first + 1]) if first + 1 < reached else len(moving)
        rates[moving[end:]] = 0.0
        scratch.moving[:end] = moving[:end]
        if tamper:
            log.step.fill(np.inf)
        moving, reached = kernels.maxmin_into(
            src_sorted, dst_sorted, mult_sorted, order, starts, run_end,
            bounds[first].copy(), saturated_below, rates, scratch, first,
            int(moving_start[first]), bounds, moving_start, log, done, done_mult,
        )  # fmt: skip
        moving = moving.copy()
        expected = kernels.maxmin_ordered(
            src_sorted, dst_sorted, mult_sorted, order, starts, capacity, saturated_below
        )
        np.testing.assert_array_equal(rates, expected)
        np.testing.assert_array_equal(moving, order[np.sort(position[moving])])
        # Finished entries may stay listed, as holes: no flows and no rate.
        holes = moving[mult_sorted[position[moving]] == 0]
        assert not rates[holes].any()
        holes_seen += len(holes)
        listed = moving[mult_sorted[position[moving]] > 0]
        np.testing.assert_array_equal(np.sort(listed), np.flatnonzero(expected > 0))
    assert tamper or holes_seen > 0
    return log, restart_rounds


@pytest.mark.parametrize("seed", range(4))
def test_restarting_a_class_at_a_logged_round_equals_a_filling_from_scratch(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kernels.RoundLog, "MIN_LOGGED", 1)
    log, restart_rounds = fill_and_finish(seed)
    restarts, refusals = log.stats
    assert restarts > 0 and refusals == 0
    # Restarts skip rounds: the fastest entries froze in a later round, not the first.
    assert max(restart_rounds) > 0


def test_a_replay_that_finds_a_port_filling_sooner_fills_the_class_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kernels.RoundLog, "MIN_LOGGED", 1)
    log, _ = fill_and_finish(0, tamper=True)
    assert log.stats[1] > 0  # replays refused, and every allocation was still exact


@pytest.mark.parametrize("policy", ["fair", "fifo", "sincronia", "aalo", "beamer"])
def test_simulations_restarting_inside_classes_equal_the_per_flow_answer(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kernels.RoundLog, "MIN_LOGGED", 1)
    restarts = 0
    for seed in range(3):
        workload = crowded(seed)
        for num_classes in (None, 3):
            simulation = FastSimulation(
                workload, get_policy(policy), SimConfig(num_classes), verify=True
            )
            fast = simulation.run()
            reference = simulate(
                workload, get_policy(policy), SimConfig(num_classes, flow_model="per-flow")
            )
            assert_identical(fast, reference, f"{policy} seed {seed} classes {num_classes}")
            restarts += int(simulation._round_log.stats[0])
    assert restarts > 0


def crowded(seed: int, count: int = 40, hosts: int = 16) -> Workload:
    """Small shuffles of equal whole-MB sizes on a few of many hosts (idle ports), released
    in bursts (many coflows, hence many classes, finishing at the same instants)."""
    rng = np.random.default_rng(seed)
    busy = rng.choice(hosts, size=hosts // 2, replace=False)
    experiments = []
    for c in range(count):
        mappers = rng.choice(busy, size=int(rng.integers(1, 4)), replace=False)
        reducers = rng.choice(busy, size=int(rng.integers(1, 4)), replace=False)
        size = int(rng.choice([1, 2, 4])) * MB
        flows = tuple(Flow(int(m), int(r), size) for r in reducers for m in mappers if m != r)
        if not flows:
            flows = (Flow(int(busy[0]), int(busy[1]), size),)
        arrival_s = float(rng.choice([0.0, 0.01, 0.02]))
        trial = TrialStage(0, int(rng.integers(1, 3)), 0.0, flows)
        experiments.append(Experiment(c, arrival_s, (Stage(0, (trial,)),)))
    return Workload(hosts, GBIT, tuple(experiments))


# The lookaheads rank by static orders between arrivals; their searches cost a minute a
# seed on these crowded arrivals, and test_sim_fast and test_sim_exact check them.
@pytest.mark.parametrize("policy", [name for name in POLICIES if not is_search(name)])
@pytest.mark.parametrize("seed", range(3))
def test_every_allocation_equals_one_from_scratch_and_the_per_flow_answer(
    policy: str, seed: int
) -> None:
    workload = crowded(seed)
    for num_classes in (None, 3):
        config = SimConfig(num_classes)
        fast = FastSimulation(workload, get_policy(policy), config, verify=True).run()
        reference = simulate(
            workload, get_policy(policy), SimConfig(num_classes, flow_model="per-flow")
        )
        assert_identical(fast, reference, f"{policy} seed {seed} classes {num_classes}")
        assert fast.events == reference.events


def test_the_check_catches_a_wrong_refill() -> None:
    # Refilling from below the class that changed must be caught: the check is live.
    workload = crowded(0)

    class Wrong(FastSimulation):
        def _allocate_priority(self, classes: tuple[np.ndarray, ...]) -> None:
            self._first_changed = max(self._first_changed, min(self._reached, 1))
            super()._allocate_priority(classes)

    with pytest.raises(RuntimeError, match="incremental allocation"):
        Wrong(workload, get_policy("fifo"), SimConfig(), verify=True).run()


def test_the_check_catches_madd_rates_left_from_the_last_allocation() -> None:
    # MADD writes only the entries it moves; those of the last allocation must be cleared
    # first, and a run that forgets some must be caught.
    workload = crowded(0)

    class Stale(FastSimulation):
        def _allocate_madd(self, classes: tuple[np.ndarray, ...]) -> None:
            if self._moving is not None:
                self._moving = self._moving[: len(self._moving) // 2]
            super()._allocate_madd(classes)

    with pytest.raises(RuntimeError, match="MADD"):
        Stale(workload, get_policy("varys"), SimConfig(), verify=True).run()


def test_the_check_catches_a_coflow_state_kept_after_its_flows_changed() -> None:
    # A snapshot rebuilds only the coflows marked changed: forgetting the mark that a
    # flow's completion sets must be caught.
    workload = crowded(0)

    class Forgetful(FastSimulation):
        def _finish_flows(self) -> bool:
            moved = set(self._moved_uids)
            finished = super()._finish_flows()
            self._moved_uids &= moved
            return finished

    with pytest.raises(RuntimeError, match="changed without being marked"):
        Forgetful(workload, get_policy("fifo"), SimConfig(), verify=True).run()


def test_the_check_catches_an_experiment_state_kept_after_its_run_changed() -> None:
    # Experiment states are rebuilt only for runs marked changed: an iteration counted
    # without the mark must be caught.
    workload = crowded(0)

    class Forgetful(FastSimulation):
        def _coflow_done(self, coflow: _Coflow) -> None:
            super()._coflow_done(coflow)
            self._changed_runs.discard(coflow.experiment)

    with pytest.raises(RuntimeError, match="changed without being marked"):
        Forgetful(workload, get_policy("fifo"), SimConfig(), verify=True).run()


def test_run_ends_mark_each_receiver_run_within_its_class() -> None:
    rng = np.random.default_rng(3)
    dst = rng.integers(0, 3, 200)
    starts = np.array([0, 17, 17, 90, 150, 200])
    ends = kernels.run_ends(dst, starts)
    for j in range(len(dst)):
        end = int(starts[np.searchsorted(starts, j, side="right")])
        expected = j + 1
        while expected < end and dst[expected] == dst[j]:
            expected += 1
        assert ends[j] == expected, j


@pytest.mark.parametrize("span", [1, 3, 50, 10**9])
def test_class_order_is_a_stable_sort_by_class_highest_first(span: int) -> None:
    # The counting sort (and, for classes spread wider than the entries, the merge
    # sort) against numpy's stable argsort; the starts against the class changes.
    rng = np.random.default_rng(span)
    for count in (0, 1, 2, 7, 300):
        classes = rng.integers(0, span, count)
        order, starts = kernels.class_order(classes)
        assert np.array_equal(order, np.argsort(-classes, kind="stable"))
        ordered = classes[order]
        changes = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
        expected = [0, *changes.tolist(), count] if count else [0]
        assert starts.tolist() == expected
    floats = kernels.class_order(np.array([0.0, 2.0, 1.0, 2.0]))
    assert floats[0].tolist() == [1, 3, 2, 0]


def test_finish_entries_retires_entries_and_names_the_highest_class_that_lost_one() -> None:
    rng = np.random.default_rng(11)
    count = 40
    remaining = rng.uniform(0.0, 5.0, count)
    rates = rng.uniform(1.0, 2.0, count)
    mult = rng.integers(1, 4, count)
    tolerance = np.full(count, 1e-3)
    owner = rng.integers(100, 110, count)
    classes = rng.integers(0, 6, count)
    order, starts = kernels.class_order(classes)
    position = np.empty(count, dtype=np.int64)
    position[order] = np.arange(count)
    mult_sorted = mult[order].astype(float)
    done = np.array([31, 4, 17, 0, 0, 0])  # three listed, unsorted, in a larger scratch
    before = (remaining.copy(), mult.copy())
    outs = [np.zeros(6, dtype=np.int64) for _ in range(3)]
    held, first = kernels.finish_entries(
        done, 3, remaining, rates, mult, tolerance, owner, position, mult_sorted, starts, *outs
    )
    retired = [4, 17, 31]
    assert done[:3].tolist() == retired
    assert held == pytest.approx(float((before[0][retired] * before[1][retired]).sum()))
    assert outs[0][:3].tolist() == owner[retired].tolist()
    assert outs[1][:3].tolist() == before[1][retired].tolist()
    assert outs[2][:3].tolist() == position[retired].tolist()
    for array in (remaining, rates, mult):
        assert not array[retired].any()
    assert (tolerance[retired] == -1.0).all()
    assert not mult_sorted[position[retired]].any()
    others = np.setdiff1d(np.arange(count), retired)
    assert (mult_sorted[position[others]] > 0).all()
    lowest = int(position[retired].min())
    assert first == int(np.searchsorted(starts, lowest, side="right")) - 1


def test_first_completion_equals_the_smallest_quotient_on_near_ties() -> None:
    # The scan skips divisions it can prove useless; the answer must stay numpy's
    # minimum of remaining / rate over the entries with a rate, to the last bit.
    rng = np.random.default_rng(19)
    for case in range(200):
        count = int(rng.integers(1, 400))
        rates = rng.uniform(1e3, 1e9, count) * (rng.random(count) < 0.9)
        base_s = rng.uniform(1e-6, 10.0)
        # Many entries a few ulps from the same completion time, some far from it.
        remaining = rates * base_s * (1.0 + rng.integers(-3, 4, count) * 2.0**-52)
        remaining[rng.random(count) < 0.3] *= rng.uniform(1.0, 5.0)
        moving = rng.permutation(count).astype(np.int64)
        with_rate = rates > 0
        expected = (
            float((remaining[with_rate] / rates[with_rate]).min()) if with_rate.any() else np.inf
        )
        assert kernels.first_completion_s(rates, remaining, moving) == expected, case
