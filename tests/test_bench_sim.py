"""bench/bench_sim.py's split of a run into the policy's ranking and the flow model."""

from __future__ import annotations

from bench.bench_sim import default_policies, offline_subset, timed, with_rank_timer
from control.policies import POLICIES, get_policy
from control.policies.lookahead import LookaheadPolicy
from sim.engine import SimConfig, simulate


def test_rank_timer_counts_the_ranking_and_changes_no_result() -> None:
    workload = offline_subset(400, 12)
    policy, spent_s = with_rank_timer(get_policy("sincronia"))
    assert spent_s() == 0.0
    timed_result = simulate(workload, policy, SimConfig())
    plain_result = simulate(workload, get_policy("sincronia"), SimConfig())
    assert timed_result.cct_s == plain_result.cct_s
    assert spent_s() > 0.0


def test_timing_splits_a_run_into_ranking_and_model() -> None:
    workload = offline_subset(400, 8)
    timing, result = timed(workload, "beamer", 1, "fast")
    assert result.cct_s
    assert 0.0 < timing.rank_cpu_s <= timing.cpu_s
    assert timing.model_cpu_s == timing.cpu_s - timing.rank_cpu_s


def test_the_default_policies_leave_out_only_the_searches() -> None:
    searches = {name for name in POLICIES if isinstance(get_policy(name), LookaheadPolicy)}
    assert "beamer-lookahead" in searches
    assert set(default_policies()) == set(POLICIES) - searches
    assert {"fair", "sincronia", "varys", "beamer"} <= set(default_policies())
