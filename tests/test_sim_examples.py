"""Hand-worked schedules: completion times per policy on 2–4 coflows or stages.

Every example uses 1 Gbit/s links and ``UNIT`` = 125,000,000 bytes, so one
unit on an idle port takes exactly one second.
"""

from __future__ import annotations

import numpy as np
import pytest

from control.model import CoflowKey, Experiment, Flow, Stage, StageKey, TrialStage, Workload
from control.policies import get_policy
from control.policies.aalo import MIB
from sim.allocate import madd, priority_maxmin
from sim.engine import SimConfig, simulate

UNIT = 125_000_000
GBIT = 1e9


def single(experiment_id: int, units: float, arrival_s: float = 0.0, stage_id: int = 0) -> Stage:
    return Stage(stage_id, (TrialStage(0, 1, 0.0, (Flow(0, 1, int(units * UNIT)),)),))


def chain_workload() -> Workload:
    """A: stage 0 of 1 unit then stage 1 of 4 units; B: one stage of 2 units; one port pair."""
    a = Experiment(0, 0.0, (single(0, 1), single(0, 4, stage_id=1)))
    b = Experiment(1, 0.0, (single(1, 2),))
    return Workload(2, GBIT, (a, b))


def total_sct(policy: str, classes: int | None = None) -> dict[StageKey, float]:
    return simulate(chain_workload(), get_policy(policy), SimConfig(num_classes=classes)).sct_s


@pytest.mark.parametrize("classes", [None, 8, 2])
def test_beamer_serves_the_experiment_with_less_left_first(classes: int | None) -> None:
    # B owes 2 units, A 5 (1 now, 4 next stage): B [0,2], A0 [2,3], A1 [3,7].
    sct = total_sct("beamer", classes)
    assert sct == pytest.approx({StageKey(1, 0): 2.0, StageKey(0, 0): 3.0, StageKey(0, 1): 4.0})


@pytest.mark.parametrize("policy", ["sincronia", "varys", "beamer-stage", "fifo-lm"])
def test_stage_blind_orders_take_the_short_stage_first(policy: str) -> None:
    # A0 (1 unit) before B (2): A0 [0,1]; A1 (4) arrives at 1 behind B's 2: B [1,3], A1 [3,7].
    # Total SCT 1 + 3 + 6 = 10 against Beamer's 2 + 3 + 4 = 9.
    sct = total_sct(policy)
    assert sct == pytest.approx({StageKey(0, 0): 1.0, StageKey(1, 0): 3.0, StageKey(0, 1): 6.0})


def test_fair_sharing_interleaves_everything() -> None:
    # A0 and B share: A0 done at 2 (B has 1 left); A1 and B share: B done at 4; A1 at 7.
    sct = total_sct("fair")
    assert sct == pytest.approx({StageKey(0, 0): 2.0, StageKey(1, 0): 4.0, StageKey(0, 1): 5.0})


def test_fifo_lm_shares_once_the_head_turns_heavy() -> None:
    # Y (2 units) at 0, X (1 unit) at 0.5. Heavy threshold: 0.8-quantile of {2, 1} = 1.8 units.
    # Y alone until it has sent 1.8 at t = 1.8, then Y and X share: Y ends at 2.2, X has sent
    # 0.2 and ends at 2.2 + 0.8 = 3.0.
    y = Experiment(0, 0.0, (single(0, 2),))
    x = Experiment(1, 0.5, (single(1, 1),))
    result = simulate(Workload(2, GBIT, (y, x)), get_policy("fifo-lm"))
    assert result.cct_s[CoflowKey(0, 0, 0, 0)] == pytest.approx(2.2)
    assert result.cct_s[CoflowKey(1, 0, 0, 0)] == pytest.approx(2.5)


def test_aalo_demotes_a_coflow_after_its_first_threshold() -> None:
    # Y (40 MiB) alone crosses 10 MiB and drops to queue 1; X (5 MiB) arrives later in
    # queue 0 and preempts Y. Strict priority: X takes exactly its own transfer time.
    rate = GBIT / 8
    y = Experiment(0, 0.0, (Stage(0, (TrialStage(0, 1, 0.0, (Flow(0, 1, 40 * MIB),)),)),))
    x_arrival = 20 * MIB / rate
    x = Experiment(1, x_arrival, (Stage(0, (TrialStage(0, 1, 0.0, (Flow(0, 1, 5 * MIB),)),)),))
    result = simulate(Workload(2, GBIT, (y, x)), get_policy("aalo"))
    assert result.cct_s[CoflowKey(1, 0, 0, 0)] == pytest.approx(5 * MIB / rate)
    assert result.cct_s[CoflowKey(0, 0, 0, 0)] == pytest.approx(45 * MIB / rate)
    # Without the threshold (FIFO) X would wait for Y: check the event was what moved it.
    fifo = simulate(Workload(2, GBIT, (y, x)), get_policy("fifo-lm"))
    assert fifo.cct_s[CoflowKey(1, 0, 0, 0)] > 5 * MIB / rate * 1.5


def test_madd_finishes_a_coflows_flows_together_and_leaves_room() -> None:
    # Coflow 0: 0->h1 2 units, 2->h3 1 unit (bottleneck 2 s: the second flow needs only half
    # a port). Coflow 1: 2->h2 1 unit gets the other half. Priority max-min would starve it.
    capacity = np.full(8, 1.0)
    src = np.array([0, 2, 2])
    dst = np.array([4 + 1, 4 + 3, 4 + 2])
    remaining = np.array([2.0, 1.0, 1.0])
    owner = np.array([0, 0, 1])
    classes = np.array([1, 1, 0])
    rates = madd(src, dst, remaining, owner, np.array([0, 1]), classes, capacity)
    assert rates == pytest.approx([1.0, 0.5, 0.5])
    assert priority_maxmin(src, dst, classes, capacity) == pytest.approx([1.0, 1.0, 0.0])


def test_priority_maxmin_is_max_min_inside_a_class() -> None:
    # Three flows out of host 0 (to h1, h1, h2) and one from host 1 to h2, one class:
    # port 0 gives 1/3 each; h2's receiver then has 2/3 left for the flow from host 1.
    capacity = np.full(6, 1.0)
    src = np.array([0, 0, 0, 1])
    dst = np.array([3 + 1, 3 + 1, 3 + 2, 3 + 2])
    rates = priority_maxmin(src, dst, np.zeros(4, dtype=np.int64), capacity)
    assert rates == pytest.approx([1 / 3, 1 / 3, 1 / 3, 2 / 3])


def test_greedy_gives_each_flow_in_order_all_it_can() -> None:
    # Flow 1 (0->h1) first takes a whole port; flow 0 (0->h2) shares its sender: nothing left;
    # flow 2 (1->h2) still finds both its ports free.
    from sim.allocate import greedy

    capacity = np.full(6, 1.0)
    rates = greedy(np.array([0, 0, 1]), np.array([5, 4, 5]), np.array([1, 0, 2]), capacity)
    assert rates == pytest.approx([0.0, 1.0, 1.0])


def test_sincronia_with_greedy_rates_keeps_the_order() -> None:
    config = SimConfig(allocator="greedy")
    sct = simulate(chain_workload(), get_policy("sincronia"), config).sct_s
    assert sct == pytest.approx({StageKey(0, 0): 1.0, StageKey(1, 0): 3.0, StageKey(0, 1): 6.0})
