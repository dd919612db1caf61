"""Quiet events run in one compiled call (:mod:`sim.quiet`) give every number that the
event-by-event loop gives, bit for bit: every stop of a stretch (the heap's next event,
a coflow completing, the round log growing, the event cap, a re-ranking threshold) hands
Python the state it would have had."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import numpy as np
import pytest
from test_sim_incremental import crowded

from control.model import Experiment, Flow, Stage, TrialStage, Workload
from control.policies import POLICIES, get_policy, is_search
from sim import kernels, quiet
from sim.engine import SimConfig, SimResult, simulate
from sim.fast import FastSimulation

GBIT = 1e9
MB = 1_000_000

RESULT_FIELDS = [
    "stage_release_s",
    "sct_s",
    "coflow_release_s",
    "cct_s",
    "coflow_bytes",
    "experiment_completion_s",
    "delivered_bytes",
    "events",
    "reranks",
    "end_s",
]


def assert_same_run(batched: SimResult, single: SimResult, label: str) -> None:
    for name in RESULT_FIELDS:
        assert getattr(batched, name) == getattr(single, name), (label, name)
    assert list(batched.cct_s) == list(single.cct_s), label


class Stops:
    """Counts the events and the stop reasons of every batched stretch."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events = 0
        self.reasons: Counter[int] = Counter()
        compiled = quiet.quiet_events

        def counted(*args: Any) -> float:
            now_s = compiled(*args)
            state = args[4]
            self.events += int(state[quiet.EVENTS])
            self.reasons[int(state[quiet.STOP])] += 1
            return now_s

        monkeypatch.setattr(quiet, "quiet_events", counted)


def both(
    workload: Workload, policy: str, num_classes: int | None, **batched: Any
) -> tuple[SimResult, SimResult]:
    config = SimConfig(num_classes)
    one_by_one = FastSimulation(workload, get_policy(policy), config, batch_quiet=False).run()
    in_batches = FastSimulation(workload, get_policy(policy), config, **batched).run()
    return in_batches, one_by_one


PRIORITY_POLICIES = [
    name for name in POLICIES if not is_search(name) and get_policy(name).allocator == "priority"
]


@pytest.mark.parametrize("policy", PRIORITY_POLICIES)
def test_batched_quiet_events_equal_events_one_by_one(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stops = Stops(monkeypatch)
    for seed in range(3):
        for num_classes in (None, 3):
            batched, single = both(crowded(seed), policy, num_classes)
            assert_same_run(batched, single, f"{policy} seed {seed} classes {num_classes}")
    assert stops.events > 0
    assert stops.reasons[quiet.STOP_DUE] > 0 and stops.reasons[quiet.STOP_COFLOW_DONE] > 0


@pytest.mark.parametrize("policy", ["fair", "fifo", "sincronia", "aalo", "beamer"])
def test_batches_restart_logged_classes_as_events_one_by_one_do(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every class logged, and the log grown to the rows last wanted only: restarts inside
    # a class, and stretches that stop for more log rows.
    monkeypatch.setattr(kernels.RoundLog, "MIN_LOGGED", 1)

    def want_rows_exactly(log: kernels.RoundLog, rows: int) -> None:
        if rows > len(log.level) and len(log.level) < log.max_rows:
            log._grow(min(rows, log.max_rows), len(log.class_base), len(log.frozen_seq))

    monkeypatch.setattr(kernels.RoundLog, "want_rows", want_rows_exactly)
    stops = Stops(monkeypatch)
    restarts = 0
    for seed in range(3):
        for num_classes in (None, 3):
            workload = crowded(seed, count=60)
            config = SimConfig(num_classes)
            single = FastSimulation(workload, get_policy(policy), config, batch_quiet=False)
            batched = FastSimulation(workload, get_policy(policy), config)
            label = f"{policy} seed {seed} classes {num_classes}"
            assert_same_run(batched.run(), single.run(), label)
            assert list(batched._round_log.stats) == list(single._round_log.stats), label
            restarts += int(batched._round_log.stats[0])
    assert restarts > 0 and stops.events > 0
    assert stops.reasons[quiet.STOP_LOG_ROWS] > 0


def test_stretches_cut_short_by_the_event_cap_change_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stops = Stops(monkeypatch)
    for policy in ("fifo", "fair", "aalo"):
        for cap in (1, 2, 5):
            batched, single = both(crowded(1), policy, None, max_quiet_events=cap)
            assert_same_run(batched, single, f"{policy} cap {cap}")
    assert stops.reasons[quiet.STOP_MAX_EVENTS] > 0


def heavy(seed: int, count: int = 20, hosts: int = 8) -> Workload:
    """Shuffles of 3-30 MiB flows on a few hosts: Aalo's 10 MiB queue thresholds and
    FIFO-LM's heavy threshold cross while other flows finish."""
    rng = np.random.default_rng(seed)
    experiments = []
    for c in range(count):
        mappers = rng.choice(hosts, size=int(rng.integers(1, 4)), replace=False)
        reducers = rng.choice(hosts, size=int(rng.integers(1, 4)), replace=False)
        flows = tuple(
            Flow(int(m), int(r), int(rng.integers(3, 31)) << 20)
            for r in reducers
            for m in mappers
            if m != r
        ) or (Flow(0, 1, 5 << 20),)
        arrival_s = float(rng.choice([0.0, 0.05, 0.1]))
        experiments.append(Experiment(c, arrival_s, (Stage(0, (TrialStage(0, 1, 0.0, flows),)),)))
    return Workload(hosts, GBIT, tuple(experiments))


@pytest.mark.parametrize("policy", ["aalo", "fifo-lm"])
def test_threshold_policies_stop_a_stretch_for_their_re_ranking(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Queue thresholds cross inside stretches of flow completions: each crossing must end
    # the stretch before it, so that Python re-ranks at that instant.
    stops = Stops(monkeypatch)
    for seed in range(3):
        workload = heavy(seed)
        for num_classes in (None, 4):
            batched, single = both(workload, policy, num_classes)
            assert_same_run(batched, single, f"{policy} seed {seed} classes {num_classes}")
    assert stops.reasons[quiet.STOP_THRESHOLD] > 0 and stops.events > 0


def late_small_flows(seed: int) -> Workload:
    """Coflows released near 3e8 s with flows of a few bytes beside megabyte ones: a
    completion a few nanoseconds away rounds back onto the clock (ulp 6e-8 s), and the
    loop steps one unit in the last place instead. No receiver's sizes are one byte
    apart (the fast model gives those their mean)."""
    rng = np.random.default_rng(seed)
    experiments = []
    for c in range(12):
        flows = []
        for _ in range(int(rng.integers(2, 6))):
            src = int(rng.integers(0, 6))
            dst = (src + int(rng.integers(1, 6))) % 6
            size = int(rng.choice([1, 3, 7, MB, 2 * MB]))
            flows.append(Flow(src, dst, size))
        arrival_s = 3e8 + float(rng.integers(0, 3)) * 1e-3
        experiments.append(
            Experiment(c, arrival_s, (Stage(0, (TrialStage(0, 1, 0.0, tuple(flows)),)),))
        )
    return Workload(6, GBIT, tuple(experiments))


@pytest.mark.parametrize("seed", range(3))
def test_completions_that_round_onto_the_clock_batch_as_one_by_one(seed: int) -> None:
    workload = late_small_flows(seed)
    for policy in ("fifo", "fair", "sincronia"):
        batched, single = both(workload, policy, None)
        assert_same_run(batched, single, f"{policy} seed {seed}")
        reference = simulate(workload, get_policy(policy), SimConfig(flow_model="per-flow"))
        assert batched.cct_s == reference.cct_s


def test_a_policy_without_the_priority_allocator_runs_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stops = Stops(monkeypatch)
    workload = crowded(0)
    batched, single = both(workload, "varys", None)
    assert_same_run(batched, single, "varys")
    config = dataclasses.replace(SimConfig(), allocator="greedy")
    greedy = FastSimulation(workload, get_policy("fifo"), config).run()
    per_flow = dataclasses.replace(config, flow_model="per-flow")
    assert greedy.cct_s == simulate(workload, get_policy("fifo"), per_flow).cct_s
    assert stops.events == 0
