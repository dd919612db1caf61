"""The per-receiver flow model: grouping, its allocators against the per-flow ones,
and whole runs against the per-flow model."""

from __future__ import annotations

import dataclasses
import statistics

import numpy as np
import pytest

from control.model import CoflowKey, Experiment, Flow, Stage, TrialStage, Workload
from control.policies import get_policy
from sim import allocate, allocate_grouped
from sim.allocate_grouped import GroupSenders
from sim.engine import SimConfig, simulate
from sim.grouped import group_flows
from workloads.coflow_benchmark import default_trace_path
from workloads.coflow_benchmark import read as read_trace

GBIT = 1e9
PER_RECEIVER = SimConfig(flow_model="per-receiver")
POLICIES = ("beamer", "sincronia", "varys", "aalo", "fifo-lm", "fair")


def senders_of(entries: tuple[np.ndarray, ...]) -> list[set[int]]:
    """Each group's sender hosts, read back from the base set and the lacking pairs."""
    _, _, _, _, lack_group, lack_port, base = entries
    groups = len(entries[1])
    senders = [set(np.flatnonzero(base).tolist()) for _ in range(groups)]
    for group, port in zip(lack_group.tolist(), lack_port.tolist(), strict=True):
        senders[group].discard(port)
    return senders


def test_a_shuffle_becomes_one_group_per_reducer() -> None:
    # Mappers on hosts 0, 1, 2; reducers on 1 (7 bytes each) and 3 (4 and 5 bytes: one
    # byte apart, an even split). The local flow 1→1 never reaches the fabric.
    flows = [Flow(0, 1, 7), Flow(2, 1, 7), Flow(0, 3, 4), Flow(1, 3, 5), Flow(2, 3, 4)]
    entries = group_flows(flows, num_hosts=4)
    _, recv, total, mult = entries[:4]
    assert recv.tolist() == [4 + 1, 4 + 3]
    assert total.tolist() == [14.0, 13.0]
    assert mult.tolist() == [2, 3]
    assert senders_of(entries) == [{0, 2}, {0, 1, 2}]


def test_uneven_sizes_and_repeated_pairs_split_groups() -> None:
    # Into host 2: 10 bytes from 0 and from 1, 10 more from 0 again, 30 from 3.
    flows = [Flow(0, 2, 10), Flow(1, 2, 10), Flow(0, 2, 10), Flow(3, 2, 30)]
    entries = group_flows(flows, num_hosts=4)
    _, recv, total, mult = entries[:4]
    assert set(recv.tolist()) == {4 + 2}
    groups = sorted(
        zip(total.tolist(), mult.tolist(), map(sorted, senders_of(entries)), strict=True)
    )
    assert groups == [(10.0, 1, [0]), (20.0, 2, [0, 1]), (30.0, 1, [3])]


def singleton_groups(
    rng: np.random.Generator, num_hosts: int, num_flows: int
) -> tuple[np.ndarray, np.ndarray, GroupSenders]:
    """Random one-flow groups: the grouped allocators must then equal the per-flow ones."""
    src = rng.integers(0, num_hosts, num_flows)
    dst = (src + rng.integers(1, num_hosts, num_flows)) % num_hosts
    base = np.zeros((num_flows, num_hosts))
    base[np.arange(num_flows), src] = 1.0
    empty = np.zeros(0, dtype=np.int64)
    senders = GroupSenders(np.arange(num_flows), base, empty, empty)
    return src, num_hosts + dst, senders


@pytest.mark.parametrize("seed", range(5))
def test_allocators_on_single_flow_groups_equal_the_per_flow_allocators(seed: int) -> None:
    rng = np.random.default_rng(seed)
    hosts, count = 6, 40
    src, recv, senders = singleton_groups(rng, hosts, count)
    capacity = rng.uniform(1.0, 3.0, 2 * hosts)
    ones = np.ones(count)
    classes = rng.integers(0, 3, count)
    expected = allocate.priority_maxmin(src, recv, classes, capacity)
    got = allocate_grouped.priority_maxmin(recv, ones, senders, classes, capacity)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)

    remaining = rng.uniform(1.0, 10.0, count)
    order = rng.permutation(count)
    expected = allocate.madd(src, recv, remaining, np.arange(count), order, classes, capacity)
    got = allocate_grouped.madd(recv, ones, senders, remaining, order, classes, capacity)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)

    expected = allocate.greedy(src, recv, order, capacity)
    got = allocate_grouped.greedy(recv, ones, senders, order, capacity)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_grouped_allocation_respects_every_port(seed: int) -> None:
    """Shuffle-shaped groups (shared senders, some lacking one): no port over capacity,
    and max-min leaves every group with a full port (nothing grows for free)."""
    rng = np.random.default_rng(100 + seed)
    hosts = 8
    recv_list, mult_list, coflow_list, lack_g, lack_p = [], [], [], [], []
    bases = []
    for coflow in range(4):
        mappers = rng.choice(hosts, size=int(rng.integers(2, 6)), replace=False)
        base = np.zeros(hosts)
        base[mappers] = 1.0
        bases.append(base)
        for reducer in rng.choice(hosts, size=int(rng.integers(1, 5)), replace=False).tolist():
            group = len(recv_list)
            recv_list.append(hosts + reducer)
            lacking = reducer in mappers.tolist()
            mult_list.append(len(mappers) - int(lacking))
            coflow_list.append(coflow)
            if lacking:
                lack_g.append(group)
                lack_p.append(reducer)
    keep = np.array(mult_list) > 0
    recv = np.array(recv_list)[keep]
    mult = np.array(mult_list, dtype=float)[keep]
    remap = np.cumsum(keep) - 1
    lack_kept = [(remap[g], p) for g, p in zip(lack_g, lack_p, strict=True) if keep[g]]
    senders = GroupSenders(
        np.array(coflow_list)[keep],
        np.array(bases),
        np.array([g for g, _ in lack_kept], dtype=np.int64),
        np.array([p for _, p in lack_kept], dtype=np.int64),
    )
    capacity = rng.uniform(1.0, 2.0, 2 * hosts)
    classes = rng.integers(0, 2, len(recv))
    rates = allocate_grouped.priority_maxmin(recv, mult, senders, classes, capacity)
    load = np.bincount(recv, rates * mult, 2 * hosts)
    load[:hosts] += senders.load(rates)
    assert (rates >= 0).all()
    assert (load <= capacity * (1 + 1e-9)).all()
    full = load >= capacity * (1 - 1e-9)
    assert (full[recv] | senders.touches(full[:hosts])).all()
    # Per coflow, the sender load adds up to the whole, and each coflow's row stays
    # on its own senders.
    by_coflow = senders.load_by_coflow(rates)
    np.testing.assert_allclose(by_coflow.sum(axis=0), senders.load(rates), atol=1e-12)
    assert (by_coflow[senders.base == 0] == 0).all()


def shuffle_coflow(
    experiment_id: int,
    arrival_s: float,
    mappers: tuple[int, ...],
    reducers: tuple[tuple[int, int], ...],
) -> Experiment:
    """Every mapper sends each (reducer, bytes) those bytes."""
    flows = tuple(Flow(m, r, size) for r, size in reducers for m in mappers if m != r)
    trial = TrialStage(0, 1, 0.0, flows)
    return Experiment(experiment_id, arrival_s, (Stage(0, (trial,)),))


def test_a_lone_shuffle_finishes_at_its_bottleneck_bound() -> None:
    # Mappers 0, 1; reducers 2 (2 × 125 MB) and 3 (2 × 62.5 MB): receiver port 2 carries
    # 250 MB at 1 Gbit/s, 2 s; each mapper sends 187.5 MB, 1.5 s.
    unit = 125_000_000
    coflow = shuffle_coflow(0, 0.0, (0, 1), ((2, unit), (3, unit // 2)))
    workload = Workload(4, GBIT, (coflow,))
    for name in POLICIES:
        result = simulate(workload, get_policy(name), PER_RECEIVER)
        assert result.cct_s[CoflowKey(0, 0, 0, 0)] == pytest.approx(2.0, rel=1e-9), name


def one_flow_per_receiver_workload(seed: int) -> Workload:
    """Random multi-stage experiments whose every trial sends at most one flow into each
    receiver (as ring all-reduce does), with random sizes so no two coflows tie."""
    rng = np.random.default_rng(seed)
    hosts = 6
    experiments = []
    for e in range(5):
        stages = []
        for s in range(2):
            trials = []
            for t in range(3):
                receivers = rng.permutation(hosts)[: int(rng.integers(2, 5))]
                flows = tuple(
                    Flow(
                        int(rng.integers(0, hosts)),
                        int(r),
                        int(rng.integers(1_000_000, 50_000_000)),
                    )
                    for r in receivers
                )
                trials.append(
                    TrialStage(t, int(rng.integers(1, 4)), float(rng.uniform(0, 0.1)), flows)
                )
            stages.append(Stage(s, tuple(trials)))
        experiments.append(Experiment(e, float(rng.uniform(0, 2)), tuple(stages)))
    return Workload(hosts, GBIT, tuple(experiments))


@pytest.mark.parametrize("policy", POLICIES)
def test_one_flow_groups_run_as_in_the_per_flow_model(policy: str) -> None:
    """When every group is a single flow the two models are the same model."""
    workload = one_flow_per_receiver_workload(11)
    exact = simulate(workload, get_policy(policy), SimConfig(num_classes=4))
    grouped = simulate(
        workload, get_policy(policy), SimConfig(num_classes=4, flow_model="per-receiver")
    )
    assert grouped.sct_s.keys() == exact.sct_s.keys()
    for key, sct_s in exact.sct_s.items():
        assert grouped.sct_s[key] == pytest.approx(sct_s, rel=1e-6, abs=1e-9)


@pytest.fixture(scope="module")
def fb2010_head() -> Workload:
    trace = read_trace(default_trace_path())
    return dataclasses.replace(trace, experiments=trace.experiments[:80])


@pytest.mark.parametrize("policy", ["beamer", "varys", "fair"])
def test_fb2010_head_close_to_the_per_flow_model(fb2010_head: Workload, policy: str) -> None:
    exact = simulate(fb2010_head, get_policy(policy))
    grouped = simulate(fb2010_head, get_policy(policy), PER_RECEIVER)
    total_bytes = sum(
        f.size_bytes
        for e in fb2010_head.experiments
        for f in e.stages[0].trials[0].sync_flows
        if f.src_host != f.dst_host
    )
    assert grouped.delivered_bytes == pytest.approx(total_bytes, rel=1e-9)
    assert grouped.events < exact.events
    exact_cct = statistics.fmean(exact.cct_s.values())
    grouped_cct = statistics.fmean(grouped.cct_s.values())
    assert grouped_cct == pytest.approx(exact_cct, rel=0.03)


def test_interval_recording_needs_the_per_flow_model() -> None:
    workload = Workload(4, GBIT, (shuffle_coflow(0, 0.0, (0, 1), ((2, 10),)),))
    with pytest.raises(ValueError, match="per-flow"):
        simulate(
            workload,
            get_policy("fair"),
            SimConfig(flow_model="per-receiver", record_intervals=True),
        )
