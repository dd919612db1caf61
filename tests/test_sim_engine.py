"""The fluid simulator: capacity, conservation, bottleneck bounds, BSP and stage barriers."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from control.model import CoflowKey, Experiment, Flow, Stage, StageKey, TrialStage, Workload
from control.policies import POLICIES, get_policy, is_search
from sim.engine import FlowModel, SimConfig, simulate
from workloads import hp_tuning
from workloads.loader import load_workload

DATA = Path(__file__).resolve().parent / "data"

GBIT = 1e9
BYTES_PER_S = GBIT / 8  # one port at 1 Gbit/s


def one_stage(
    experiment_id: int,
    flows: tuple[Flow, ...],
    arrival_s: float = 0.0,
    iterations: int = 1,
    compute_s: float = 0.0,
) -> Experiment:
    trial = TrialStage(0, iterations, compute_s, flows)
    return Experiment(experiment_id, arrival_s, (Stage(0, (trial,)),))


def test_lone_coflow_finishes_at_its_bottleneck_bound() -> None:
    # Host 0 sends 3 units to host 1 and 1 unit to host 2: sender port 0 is the bottleneck.
    unit = 125_000_000
    flows = (Flow(0, 1, 3 * unit), Flow(0, 2, unit), Flow(3, 2, unit))
    workload = Workload(4, GBIT, (one_stage(0, flows),))
    for name in ("beamer", "sincronia", "varys", "fair", "fifo-lm", "aalo"):
        result = simulate(workload, get_policy(name))
        assert result.cct_s[CoflowKey(0, 0, 0, 0)] == pytest.approx(4.0, rel=1e-9), name


@pytest.mark.parametrize("flow_model", ["fast", "per-flow"])
def test_fifo_madd_holds_the_head_to_its_bottleneck_where_fifo_lets_it_flood(
    flow_model: FlowModel,
) -> None:
    """Coflow 0 (first in line) sends 10 units 0 -> 2 and 1 unit 1 -> 3; coflow 1 sends 1
    unit 1 -> 4. Under ``fifo`` the head's short flow takes all of sender 1 for 1 s and
    coflow 1 ends at 2 s. Under ``fifo-madd`` (CoflowSim's FIFO) MADD gives that flow a
    tenth of the port, just enough to end with the head's bottleneck at 10 s, so coflow 1
    gets the other 0.9 at once and ends at 1/0.9 s. The head ends at 10 s either way."""
    unit = 125_000_000  # 1 s at 1 Gbit/s
    workload = Workload(
        5,
        GBIT,
        (
            one_stage(0, (Flow(0, 2, 10 * unit), Flow(1, 3, unit))),
            one_stage(1, (Flow(1, 4, unit),)),
        ),
    )
    config = SimConfig(flow_model=flow_model)
    head, next_in_line = CoflowKey(0, 0, 0, 0), CoflowKey(1, 0, 0, 0)
    fifo = simulate(workload, get_policy("fifo"), config).cct_s
    madd = simulate(workload, get_policy("fifo-madd"), config).cct_s
    assert fifo[head] == pytest.approx(10.0, rel=1e-9)
    assert fifo[next_in_line] == pytest.approx(2.0, rel=1e-9)
    assert madd[head] == pytest.approx(10.0, rel=1e-9)
    assert madd[next_in_line] == pytest.approx(1 / 0.9, rel=1e-9)


@pytest.mark.parametrize("policy", ["beamer", "sincronia", "varys", "aalo", "fifo-lm", "fair"])
@pytest.mark.parametrize("classes", [None, 2])
def test_capacity_never_exceeded_and_every_byte_delivered(policy: str, classes: int | None) -> None:
    rng = np.random.default_rng(7)
    experiments = []
    for e in range(6):
        flows = tuple(
            Flow(int(a), int(b), int(rng.integers(1, 5)) * 10_000_000)
            for a, b in rng.integers(0, 5, size=(4, 2))
            if a != b
        )
        trial_a = TrialStage(0, 3, 0.05, flows)
        trial_b = TrialStage(1, 2, 0.02, flows[:2])
        stages = (Stage(0, (trial_a, trial_b)), Stage(1, (trial_a,)))
        experiments.append(Experiment(e, float(rng.uniform(0, 1)), stages))
    workload = Workload(5, GBIT, tuple(experiments))
    result = simulate(
        workload, get_policy(policy), SimConfig(num_classes=classes, record_intervals=True)
    )
    capacity = np.full(10, BYTES_PER_S)
    delivered: dict[int, float] = {}
    for interval in result.intervals:
        load = np.bincount(interval.src_ports, interval.rates_bytes_per_s, 10) + np.bincount(
            interval.dst_ports, interval.rates_bytes_per_s, 10
        )
        assert (load <= capacity * (1 + 1e-9)).all()
        span = interval.end_s - interval.start_s
        for flow_id, rate in zip(
            interval.flow_ids.tolist(), interval.rates_bytes_per_s.tolist(), strict=True
        ):
            delivered[flow_id] = delivered.get(flow_id, 0.0) + rate * span
    assert set(delivered) == set(result.flow_sizes)
    for flow_id, size in result.flow_sizes.items():
        assert delivered[flow_id] == pytest.approx(size, rel=1e-6)
    expected_coflows = sum(t.iterations for e in experiments for s in e.stages for t in s.trials)
    assert len(result.cct_s) == expected_coflows
    assert len(result.sct_s) == 12
    assert len(result.experiment_completion_s) == 6


def test_bulk_synchronous_iterations_and_stage_barrier() -> None:
    # Trial 0: 3 iterations of (0.5 s compute + 1 s sync); trial 1: 1 iteration, disjoint hosts.
    unit = 125_000_000
    slow = TrialStage(0, 3, 0.5, (Flow(0, 1, unit),))
    fast = TrialStage(1, 1, 0.5, (Flow(2, 3, unit),))
    second = TrialStage(0, 1, 0.0, (Flow(0, 1, 2 * unit),))
    experiment = Experiment(0, 1.0, (Stage(0, (slow, fast)), Stage(1, (second,))))
    result = simulate(Workload(4, GBIT, (experiment,)), get_policy("fair"))
    assert result.coflow_release_s[CoflowKey(0, 0, 0, 1)] == pytest.approx(1.0 + 1.5 + 0.5)
    assert result.sct_s[StageKey(0, 0)] == pytest.approx(4.5)
    assert result.stage_release_s[StageKey(0, 1)] == pytest.approx(5.5)
    assert result.sct_s[StageKey(0, 1)] == pytest.approx(2.0)
    assert result.experiment_completion_s[0] == pytest.approx(6.5)


def test_same_seed_gives_identical_results() -> None:
    from workloads.loader import load_workload

    def run(seed: int) -> tuple[dict[StageKey, float], dict[CoflowKey, float]]:
        workload = load_workload("hp-tuning", seed=seed)
        small = Workload(workload.num_hosts, workload.link_bps, workload.experiments[:4])
        result = simulate(small, get_policy("beamer"), SimConfig(num_classes=8))
        return result.sct_s, result.cct_s

    first, again, other = run(3), run(3), run(4)
    assert first == again
    assert first != other


@pytest.mark.parametrize("flow_model", ["fast", "per-flow"])
@pytest.mark.parametrize("fault", ["omits", "twice"])
def test_a_ranking_that_omits_or_repeats_a_coflow_stops_the_run(
    flow_model: str, fault: str
) -> None:
    # Two experiments, two coflows at once: a policy bug must not pass for a ranking.
    from control.policies.base import BasePolicy, Ranking, Snapshot

    class Faulty(BasePolicy):
        name = "faulty"

        def rank(self, snapshot: Snapshot) -> Ranking:
            keys = [c.key for c in snapshot.coflows]
            if len(keys) > 1:
                keys = keys[1:] if fault == "omits" else [*keys, keys[0]]
            return Ranking(tuple((key,) for key in keys))

    flows = (Flow(0, 1, 1_000_000),)
    workload = Workload(4, GBIT, (one_stage(0, flows), one_stage(1, (Flow(2, 3, 1_000_000),))))
    expected = "ranked 1 of 2 coflows" if fault == "omits" else "ranked 2 of 2 coflows .one twice"
    with pytest.raises(RuntimeError, match=expected):
        simulate(workload, Faulty(), SimConfig(flow_model=flow_model))  # type: ignore[arg-type]


@pytest.mark.parametrize("flow_model", ["fast", "per-flow"])
def test_a_workload_naming_two_things_by_one_id_is_refused_before_the_run(
    flow_model: str,
) -> None:
    """Coflows are named by their experiment, stage and trial ids: two of one name used
    to end the run blaming the policy ("ranked 1 of 2 coflows"). The readers refuse such
    files; a workload built in code is refused by the simulator, naming the id."""
    from control.errors import UserError

    flows = (Flow(0, 1, 1_000_000),)
    trial = TrialStage(0, 1, 0.0, flows)
    cases = [
        ((one_stage(3, flows), one_stage(3, flows)), "experiment_id 3 is used twice"),
        (
            (Experiment(4, 0.0, (Stage(0, (trial,)), Stage(0, (trial,)))),),
            "experiment 4: stage_id 0 is used twice",
        ),
        (
            (
                Experiment(
                    5, 0.0, (Stage(1, (trial, dataclasses.replace(trial, trial_id=2), trial)),)
                ),
            ),
            "experiment 5 stage 1: trial_id 0 is used twice",
        ),
    ]
    for experiments, message in cases:
        workload = Workload(4, GBIT, experiments)
        with pytest.raises(UserError, match=f"^workload: {message}$"):
            simulate(workload, get_policy("fair"), SimConfig(flow_model=flow_model))  # type: ignore[arg-type]


@pytest.mark.parametrize("flow_model", ["fast", "per-flow"])
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"arrival_s": float("nan")}, "experiment 7: arrival_s nan is not a finite time >= 0"),
        ({"arrival_s": float("inf")}, "experiment 7: arrival_s inf is not a finite time >= 0"),
        ({"arrival_s": -1.0}, "experiment 7: arrival_s -1.0 is not a finite time >= 0"),
        ({"weight": float("nan")}, "experiment 7: weight nan is not between 1e-06 and 1e+06"),
        ({"compute_s": float("nan")}, "experiment 7 stage 0 trial 0: compute_s nan is not"),
        ({"link_bps": 0.0}, "link_bps 0.0 is not a finite rate above 0"),
        ({"link_bps": float("inf")}, "link_bps inf is not a finite rate above 0"),
        ({"link_bps": float("nan")}, "link_bps nan is not a finite rate above 0"),
    ],
)
def test_a_workload_built_in_code_with_times_no_run_can_take_is_refused(
    flow_model: str, change: dict[str, float], message: str
) -> None:
    """The readers refuse these in files; built in code, a NaN arrival made the event loop
    wait for ever, and an infinite one or a link of no rate ended the run with "active
    flows with no rate and no event" (a RuntimeError, blaming the simulator)."""
    from control.errors import UserError

    experiment = one_stage(7, (Flow(0, 1, 1_000_000),), compute_s=change.get("compute_s", 0.0))
    fields = {key: value for key, value in change.items() if key in ("arrival_s", "weight")}
    workload = Workload(
        2, change.get("link_bps", GBIT), (dataclasses.replace(experiment, **fields),)
    )
    with _deadline(30), pytest.raises(UserError, match=f"^workload: {re.escape(message)}"):
        simulate(workload, get_policy("fair"), SimConfig(flow_model=flow_model))  # type: ignore[arg-type]


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Fail the test instead of hanging the suite if the run never ends."""

    def expire(*_: object) -> None:
        raise TimeoutError(f"the run did not end within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _arriving_at(arrival_s: float) -> Workload:
    workload = load_workload(str(DATA / "tiny_workload.json"))
    (experiment,) = workload.experiments
    return dataclasses.replace(
        workload, experiments=(dataclasses.replace(experiment, arrival_s=arrival_s),)
    )


@pytest.mark.parametrize("policy", [name for name in POLICIES if not is_search(name)])
def test_a_run_far_out_in_time_ends_with_the_same_stage_times(policy: str) -> None:
    """At 1e6 s a unit in the last place of the clock is 1.2e-10 s, more than the last
    bytes of a flow take at 1 Gbit/s: ``now + remaining / rate`` rounds back to now.
    Such a run used to step by zero for ever; it ends, and its stages take what they
    take near time zero."""
    near = simulate(_arriving_at(0.5), get_policy(policy), SimConfig(None, "rank"))
    for arrival_s in (1e6, 9.9e7):
        for model in ("per-flow", "fast"):
            with _deadline(30):
                far = simulate(
                    _arriving_at(arrival_s), get_policy(policy), SimConfig(flow_model=model)
                )
            assert far.sct_s.keys() == near.sct_s.keys()
            for key, sct_s in near.sct_s.items():
                assert far.sct_s[key] == pytest.approx(sct_s, rel=1e-6, abs=4 * arrival_s * 2**-52)


def test_aalo_thresholds_far_out_in_time_do_not_stall() -> None:
    """A queue threshold that a re-ranking does not move, closer to now than the
    clock can tell, re-ranked at the same instant for ever before; both flow models
    now end, with the same stage times to the last bit."""
    workload = hp_tuning.generate(hp_tuning.HpTuningConfig(seed=1, num_jobs=3, load=1e-5))
    results = []
    for model in ("per-flow", "fast"):
        with _deadline(60):
            results.append(simulate(workload, get_policy("aalo"), SimConfig(flow_model=model)))
    per_flow, fast = results
    assert per_flow.sct_s == fast.sct_s
    assert per_flow.end_s > 1e6
