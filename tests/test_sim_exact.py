"""The fast flow model gives the per-flow model's answer exactly, also where a policy
turns a quantity into a decision at an exact tie or threshold: Aalo's queue thresholds,
FIFO-LM's heavy threshold, and twin trials under ``beamer:split_trials``.

Merged entries (identical flows kept once) must not change the order or the float
operations of any sum a policy reads; these workloads are the ones where they did."""

from __future__ import annotations

import numpy as np
import pytest

from control.errors import UserError
from control.model import Experiment, Flow, Stage, TrialStage, Workload
from control.policies import POLICIES, is_search
from control.policies.spec import policy_from_spec
from sim.engine import SimConfig, SimResult, simulate
from workloads import hp_tuning

GBIT = 1e9
MB = 1_000_000


def assert_identical(fast: SimResult, reference: SimResult, label: str) -> None:
    """Every stage's and every coflow's time equal to the last bit."""
    assert fast.sct_s.keys() == reference.sct_s.keys(), label
    assert fast.cct_s.keys() == reference.cct_s.keys(), label
    stages = [k for k, v in reference.sct_s.items() if fast.sct_s[k] != v]
    coflows = [k for k, v in reference.cct_s.items() if fast.cct_s[k] != v]
    worst = max(
        (abs(fast.cct_s[k] - reference.cct_s[k]) / reference.cct_s[k] for k in coflows),
        default=0.0,
    )
    assert not stages and not coflows, (label, len(stages), len(coflows), worst)


def both(workload: Workload, spec: str, num_classes: int | None) -> tuple[SimResult, SimResult]:
    fast = simulate(workload, policy_from_spec(spec), SimConfig(num_classes, flow_model="fast"))
    reference = simulate(
        workload, policy_from_spec(spec), SimConfig(num_classes, flow_model="per-flow")
    )
    return fast, reference


# Small HP-tuning runs where merged arithmetic used to part from the reference: twin
# trials that tie under split_trials (a coflow 12x slower at seed 1), Aalo and FIFO-LM
# threshold crossings computed in the last bits differently.
HP_CASES = [
    (3, 1, "beamer:split_trials=true", None),
    (3, 2, "beamer:split_trials=true", None),
    (3, 1, "fifo-lm", 8),
    (4, 2, "aalo", 8),
    (4, 5, "aalo", 4),
]


@pytest.mark.parametrize(("jobs", "seed", "spec", "num_classes"), HP_CASES)
def test_hp_tuning_gives_the_per_flow_answer_bit_for_bit(
    jobs: int, seed: int, spec: str, num_classes: int | None
) -> None:
    workload = hp_tuning.generate(hp_tuning.HpTuningConfig(seed=seed, num_jobs=jobs))
    fast, reference = both(workload, spec, num_classes)
    assert_identical(fast, reference, f"{spec} jobs {jobs} seed {seed} classes {num_classes}")


def twin_trials(seed: int, hosts: int = 6, count: int = 6) -> Workload:
    """Experiments whose stages run identical (twin) trials, each trial's flows listed with
    repeats interleaved (A, B, A, B: merged entries whose flows are not adjacent), whole
    MiB sizes so that Aalo's 10 MiB thresholds and equal remainders are hit exactly."""
    rng = np.random.default_rng(seed)
    experiments = []
    for e in range(count):
        stages = []
        for s in range(int(rng.integers(1, 3))):
            pairs = []
            for _ in range(int(rng.integers(1, 4))):
                src = int(rng.integers(0, hosts))
                dst = (src + int(rng.integers(1, hosts))) % hosts
                pairs.append((src, dst, int(rng.choice([1, 2, 5, 10, 20])) << 20))
            repeats = int(rng.integers(1, 4))
            flows = tuple(Flow(*pair) for _ in range(repeats) for pair in pairs)
            iterations = int(rng.integers(1, 3))
            compute_s = float(rng.choice([0.0, 0.01]))
            trials = tuple(
                TrialStage(t, iterations, compute_s, flows) for t in range(int(rng.integers(2, 4)))
            )
            stages.append(Stage(s, trials))
        experiments.append(Experiment(e, float(rng.choice([0.0, 0.05, 0.1])), tuple(stages)))
    return Workload(hosts, GBIT, tuple(experiments))


SPECS = [*POLICIES, "beamer:split_trials=true"]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("seed", range(4))
def test_twin_trials_and_exact_thresholds_give_the_per_flow_answer(spec: str, seed: int) -> None:
    workload = twin_trials(seed)
    for num_classes in (None, 4, 8):
        fast, reference = both(workload, spec, num_classes)
        assert_identical(fast, reference, f"{spec} seed {seed} classes {num_classes}")


def one_stage_experiments(
    num_hosts: int, trials_of: list[list[list[tuple[int, int, int]]]], link_bps: float
) -> Workload:
    """An experiment per item, all at time 0, each one stage of one iteration per trial."""
    experiments = tuple(
        Experiment(
            e,
            0.0,
            (
                Stage(
                    0,
                    tuple(
                        TrialStage(t, 1, 0.0, tuple(Flow(*flow) for flow in flows))
                        for t, flows in enumerate(trials)
                    ),
                ),
            ),
        )
        for e, trials in enumerate(trials_of)
    )
    return Workload(num_hosts, link_bps, experiments)


def test_equal_flows_past_2_to_the_53_bytes_keep_their_size() -> None:
    """Eleven equal flows into one receiver used to take their total over their count,
    which rounds past 2**53 bytes (X - 0.125): Varys then broke the reference's exact tie
    between the two coflows the other way, and their times swapped."""
    size, count = 999_999_999_999_999, 11
    equal = [(i, count, size) for i in range(count)]
    spread = [(i, count, size + (1 if i == 0 else -1 if i == 1 else 0)) for i in range(count)]
    workload = one_stage_experiments(count + 1, [[spread], [equal]], 1e15)
    fast, reference = both(workload, "varys", None)
    assert_identical(fast, reference, "varys")


@pytest.mark.parametrize("spec", SPECS)
def test_flows_one_byte_apart_keep_their_sizes(spec: str) -> None:
    """Flows of a coflow into one receiver one byte apart (an uneven split) used to take
    their mean size: a coflow of 2- and 1-byte flows whose larger flow's sender is shared
    ended a quarter earlier under fair sharing, and on a slow link with a busy sender the
    coflows' times moved by milliseconds under every policy."""
    tiny = one_stage_experiments(5, [[[(4, 0, 2), (3, 0, 1)]], [[(4, 2, 5 << 20)]]], 1e12)
    split = Workload(
        7,
        1e3,
        (
            Experiment(
                1, 0.0, (Stage(0, (TrialStage(0, 2, 0.0, (Flow(4, 1, 363), Flow(3, 1, 362))),)),)
            ),
            Experiment(5, 0.0, (Stage(0, (TrialStage(0, 1, 0.0, (Flow(4, 0, 21_165),)),)),)),
        ),
    )
    for label, workload in (("tiny", tiny), ("slow link", split)):
        for num_classes in (None, 3):
            fast, reference = both(workload, spec, num_classes)
            assert_identical(fast, reference, f"{spec} {label} classes {num_classes}")


def test_a_coflow_total_past_2_to_the_53_bytes_is_the_per_flow_sum() -> None:
    """Twin trials of one stage, one with merged entries: their totals were summed over
    entries, rounded apart from the per-flow sum, and the twins (ranked by remaining
    bytes under split_trials) swapped their times."""
    a, b, k = 657_809_384_024_969, 606_083_559_763_780, 10
    merged = [(0, 1, a), (0, 2, b)] * k
    apart = [(0, 3 + 2 * j + i, (a, b)[i]) for j in range(k) for i in range(2)]
    workload = one_stage_experiments(3 + 2 * k, [[apart, merged]], 1e12)
    for classes in (None, 2, 8):
        fast, reference = both(workload, "beamer:split_trials=true", classes)
        assert_identical(fast, reference, f"split trials, classes {classes}")


def test_an_equal_demand_class_cut_sees_the_per_flow_totals() -> None:
    a, b, k = 805_546_213_310_275, 438_928_132_427_867, 11
    merged = [(0, 1, a), (0, 2, b)] * k
    apart = [(0, 3 + i, (a, b)[i % 2]) for i in range(2 * k)]
    workload = one_stage_experiments(3 + 2 * k, [[merged], [apart], [apart], [apart]], 1e12)
    config = SimConfig(2, strategy="equal-demand", flow_model="fast")
    fast = simulate(workload, policy_from_spec("fifo"), config)
    reference = simulate(
        workload,
        policy_from_spec("fifo"),
        SimConfig(2, strategy="equal-demand", flow_model="per-flow"),
    )
    assert_identical(fast, reference, "fifo, 2 classes, equal demand")


@pytest.mark.parametrize("size", [1000.7, 1000.0, 1 << 63])
@pytest.mark.parametrize("flow_model", ["fast", "per-flow"])
def test_a_size_that_is_no_64_bit_whole_number_is_refused(size: float, flow_model: str) -> None:
    """The fast model keeps sizes as 64-bit integers: 1000.7 became 1000 there and stayed
    1000.7 in the per-flow model, and 2**63 overflowed. A workload built through the API
    gets the refusal the file readers give."""
    workload = one_stage_experiments(2, [[[(0, 1, size)]]], 1e9)  # type: ignore[list-item]
    with pytest.raises(UserError, match="is not a whole number of bytes below 2\\*\\*63"):
        simulate(workload, policy_from_spec("fair"), SimConfig(None, flow_model=flow_model))


def coinciding_events(seed: int) -> Workload:
    """Arrivals and compute ends on whole multiples of one flow's time alone, so that they
    fall on completions; a hot sender in about half the flows; repeats of a flow listed
    apart and next to ones a byte larger or smaller; flows of 0 bytes; a link rate
    that is no round number."""
    rng = np.random.default_rng(seed)
    hosts = int(rng.integers(3, 7))
    link_bps = float(rng.choice([GBIT, 3.14159e9, 7.3e8, 999_999_937.0]))
    size = int(rng.choice([1_000, 1 << 20, 12_345, 10 * MB]))
    quantum_s = size / (link_bps / 8)
    experiments = []
    for e in range(int(rng.integers(3, 7))):
        stages = []
        for s in range(int(rng.integers(1, 3))):
            trials = []
            for t in range(int(rng.integers(1, 4))):
                flows = []
                for _ in range(int(rng.integers(1, 5))):
                    src = 0 if rng.random() < 0.5 else int(rng.integers(0, hosts))
                    dst = (src + int(rng.integers(1, hosts))) % hosts
                    bytes_ = size + int(rng.choice([0, 0, 0, 1, -1])) if rng.random() > 0.05 else 0
                    flows += [Flow(src, dst, bytes_)] * int(rng.choice([1, 1, 2, 3]))
                flows = [flows[i] for i in rng.permutation(len(flows))]
                compute_s = quantum_s * float(rng.choice([0, 0, 0.5, 1, 2]))
                trials.append(TrialStage(t, int(rng.integers(1, 3)), compute_s, tuple(flows)))
            stages.append(Stage(s, tuple(trials)))
        arrival_s = quantum_s * int(rng.choice([0, 0, 1, 2, 3]))
        experiments.append(Experiment(e, arrival_s, tuple(stages)))
    return Workload(hosts, link_bps, tuple(experiments))


@pytest.mark.parametrize(
    "spec", [*(name for name in POLICIES if not is_search(name)), "beamer:split_trials=true"]
)
@pytest.mark.parametrize("seed", range(3))
def test_events_that_coincide_give_the_per_flow_answer(spec: str, seed: int) -> None:
    """Where an arrival, a compute end and a completion fall on one instant, the order in
    which the models take them, and the ties they break, must be the same."""
    workload = coinciding_events(seed)
    for num_classes in (None, 2, 1):
        fast, reference = both(workload, spec, num_classes)
        assert_identical(fast, reference, f"{spec} seed {seed} classes {num_classes}")
