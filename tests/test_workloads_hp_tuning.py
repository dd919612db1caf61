"""HP-tuning generator: bracket shapes worked by hand, flows, load, seeds, scaling."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from control.errors import UserError
from control.model import Flow, Workload
from workloads import hp_tuning, json_format
from workloads.hp_tuning import (
    HpTuningConfig,
    JobShape,
    arrival_rate_per_s,
    bracket_plan,
    generate,
    iterations_for,
    max_bracket,
    shrink,
    sync_flows,
)
from workloads.limits import SettingError
from workloads.loader import load_workload
from workloads.models import MODELS


def shape(max_budget: int, eta: int, s: int) -> list[tuple[int, Fraction]]:
    return [(step.trials, step.budget) for step in bracket_plan(max_budget, eta, s)]


@pytest.mark.parametrize(
    ("max_budget", "eta", "s_max"),
    [(81, 3, 4), (27, 3, 3), (26, 3, 2), (8, 2, 3), (16, 4, 2), (10, 3, 2), (1, 2, 0)],
)
def test_max_bracket_is_floor_log(max_budget: int, eta: int, s_max: int) -> None:
    assert max_bracket(max_budget, eta) == s_max


def test_hyperband_brackets_r81_eta3_are_the_papers_table() -> None:
    # Li et al. (JMLR 2018), R = 81, η = 3: brackets of 81, 34, 15, 8 and 5 trials.
    assert shape(81, 3, 4) == [(81, 1), (27, 3), (9, 9), (3, 27), (1, 81)]
    assert shape(81, 3, 3) == [(34, 3), (11, 9), (3, 27), (1, 81)]  # ⌈5·27/4⌉ = 34
    assert shape(81, 3, 2) == [(15, 9), (5, 27), (1, 81)]  # ⌈5·9/3⌉ = 15
    assert shape(81, 3, 1) == [(8, 27), (2, 81)]  # ⌈5·3/2⌉ = 8
    assert shape(81, 3, 0) == [(5, 81)]


def test_hyperband_brackets_r27_eta3_worked_by_hand() -> None:
    # s_max = 3. n = ⌈4·3^s/(s+1)⌉, r = 27/3^s; n_i = ⌊n/3^i⌋, r_i = r·3^i.
    assert shape(27, 3, 3) == [(27, 1), (9, 3), (3, 9), (1, 27)]
    assert shape(27, 3, 2) == [(12, 3), (4, 9), (1, 27)]  # n = ⌈36/3⌉ = 12
    assert shape(27, 3, 1) == [(6, 9), (2, 27)]  # n = ⌈12/2⌉ = 6
    assert shape(27, 3, 0) == [(4, 27)]  # n = 4


def test_hyperband_brackets_r8_eta2_worked_by_hand() -> None:
    assert shape(8, 2, 3) == [(8, 1), (4, 2), (2, 4), (1, 8)]
    assert shape(8, 2, 2) == [(6, 2), (3, 4), (1, 8)]  # n = ⌈4·4/3⌉ = 6
    assert shape(8, 2, 1) == [(4, 4), (2, 8)]  # n = ⌈4·2/2⌉ = 4
    assert shape(8, 2, 0) == [(4, 8)]


def test_brackets_with_fractional_budgets_r10_eta3() -> None:
    # s_max = 2; r = 10/9 for s = 2: budgets stay exact fractions.
    assert shape(10, 3, 2) == [(9, Fraction(10, 9)), (3, Fraction(10, 3)), (1, 10)]
    assert shape(10, 3, 1) == [(5, Fraction(10, 3)), (1, 10)]  # n = ⌈9/2⌉ = 5
    assert shape(10, 3, 0) == [(3, 10)]


def test_sha_r16_eta4_keeps_a_quarter() -> None:
    assert shape(16, 4, 2) == [(16, 1), (4, 4), (1, 16)]


def test_iterations_round_half_up_and_never_vanish() -> None:
    assert iterations_for(Fraction(10, 9), 2) == 2  # 2.22
    assert iterations_for(Fraction(5, 2), 1) == 3  # 2.5 rounds up
    assert iterations_for(Fraction(1, 9), 2) == 1  # 0.22, but a stage trains at least once
    assert iterations_for(Fraction(27), 2) == 54


def test_bracket_outside_range_is_rejected() -> None:
    with pytest.raises(UserError, match=r"outside 0\.\.3"):
        bracket_plan(27, 3, 4)


def test_ring_all_reduce_sends_2_w_minus_1_over_w_to_the_successor() -> None:
    flows = sync_flows("ring", (3, 7, 1, 9), 1000)
    assert flows == (Flow(3, 7, 1500), Flow(7, 1, 1500), Flow(1, 9, 1500), Flow(9, 3, 1500))


def test_parameter_server_push_and_pull_the_model() -> None:
    flows = sync_flows("ps", (5, 1, 2), 100)
    assert sorted(flows, key=lambda f: (f.src_host, f.dst_host)) == [
        Flow(1, 5, 100),
        Flow(2, 5, 100),
        Flow(5, 1, 100),
        Flow(5, 2, 100),
    ]


def test_model_table_bytes_and_compute() -> None:
    resnet50 = MODELS["resnet50"]
    assert resnet50.sync_bytes == 25_636_712 * 4
    assert resnet50.compute_s == pytest.approx(64 / 219)
    assert MODELS["vgg16"].sync_bytes == 138_357_544 * 4


def _jobs(workload: Workload) -> list[dict[str, object]]:
    jobs: list[dict[str, object]] = json.loads(workload.meta["jobs"])
    return jobs


def test_generated_experiments_follow_their_bracket_plans() -> None:
    config = HpTuningConfig(seed=4)
    workload = generate(config)
    by_id = {e.experiment_id: e for e in workload.experiments}
    checked = 0
    for job in _jobs(workload):
        for experiment_id, s in zip(job["experiments"], job["brackets"], strict=True):  # type: ignore[call-overload]
            experiment = by_id[experiment_id]
            assert experiment.kind == job["kind"]
            plan = bracket_plan(job["max_budget"], job["eta"], s)  # type: ignore[arg-type]
            assert len(experiment.stages) == len(plan)
            for stage, step in zip(experiment.stages, plan, strict=True):
                assert len(stage.trials) == step.trials
                expected_iterations = iterations_for(step.budget, config.iterations_per_unit)
                assert {t.iterations for t in stage.trials} == {expected_iterations}
            checked += 1
    assert checked == len(workload.experiments)


def test_promoted_trials_keep_ids_hosts_and_flows() -> None:
    workload = generate(HpTuningConfig(seed=2))
    for experiment in workload.experiments:
        for before, after in zip(experiment.stages, experiment.stages[1:], strict=False):
            previous = {trial.trial_id: trial for trial in before.trials}
            for trial in after.trials:
                assert trial.trial_id in previous
                assert trial.hosts == previous[trial.trial_id].hosts
                assert trial.sync_flows == previous[trial.trial_id].sync_flows


def test_trial_hosts_are_distinct_and_flows_stay_on_them() -> None:
    workload = generate(HpTuningConfig(seed=3))
    for experiment in workload.experiments:
        for trial in experiment.stages[0].trials:
            assert len(set(trial.hosts)) == len(trial.hosts)
            for flow in trial.sync_flows:
                assert flow.src_host in trial.hosts and flow.dst_host in trial.hosts
                assert flow.src_host != flow.dst_host


def test_arrival_rate_formula() -> None:
    # 0.8 × 16 hosts × 1.25e9 bytes/s / 1e9 bytes per job = 16 jobs per second.
    config = HpTuningConfig(num_hosts=16, link_bps=10e9, load=0.8)
    assert arrival_rate_per_s(config, 1e9) == pytest.approx(16.0)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("load", [0.5, 0.8])
def test_offered_load_matches_the_target(seed: int, load: float) -> None:
    workload = generate(HpTuningConfig(seed=seed, load=load))
    arrivals = sorted({e.arrival_s for e in workload.experiments})
    jobs = len(arrivals)
    total_bits = 8 * sum(e.total_bytes for e in workload.experiments)
    bits_per_job = total_bits / jobs
    mean_gap_s = (arrivals[-1] - arrivals[0]) / (jobs - 1)
    offered = bits_per_job / mean_gap_s / (workload.num_hosts * workload.link_bps)
    assert offered == pytest.approx(load, rel=1e-9)


def test_default_workload_size_and_mix() -> None:
    for seed in range(1, 6):
        workload = generate(HpTuningConfig(seed=seed))
        coflows = sum(
            t.iterations for e in workload.experiments for s in e.stages for t in s.trials
        )
        assert 300 <= coflows <= 5000
        assert {e.kind for e in workload.experiments} <= {"sha", "hyperband"}
        assert all(e.experiment_id <= 0xFFFF for e in workload.experiments)
        assert [e.arrival_s for e in workload.experiments] == sorted(
            e.arrival_s for e in workload.experiments
        )
    kinds = {
        e.kind for seed in range(1, 6) for e in generate(HpTuningConfig(seed=seed)).experiments
    }
    assert kinds == {"sha", "hyperband"}


def test_same_seed_same_workload_and_different_seed_different() -> None:
    assert generate(HpTuningConfig(seed=11)) == generate(HpTuningConfig(seed=11))
    assert (
        generate(HpTuningConfig(seed=11)).experiments
        != generate(HpTuningConfig(seed=12)).experiments
    )


def test_same_seed_same_file_in_another_process(tmp_path: Path) -> None:
    # A fresh interpreter with another hash seed must write the very same bytes.
    script = (
        "import sys; from workloads import json_format; "
        "from workloads.hp_tuning import HpTuningConfig, generate; "
        "json_format.write(generate(HpTuningConfig(seed=9)), sys.argv[1])"
    )
    out = tmp_path / "other.json"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", script, str(out)], check=True, env=env)
    assert out.read_text() == json_format.dumps(generate(HpTuningConfig(seed=9)))


def test_shrink_keeps_shape_and_scales_durations() -> None:
    config = HpTuningConfig(seed=5)
    small_config = shrink(config, link_bps=20e6, time_scale=0.1)
    big, small = generate(config), generate(small_config)
    assert small.link_bps == 20e6
    byte_factor = 0.1 * 20e6 / 10e9
    assert len(big.experiments) == len(small.experiments)
    for a, b in zip(big.experiments, small.experiments, strict=True):
        assert b.arrival_s == pytest.approx(0.1 * a.arrival_s, rel=1e-3)
        for sa, sb in zip(a.stages, b.stages, strict=True):
            for ta, tb in zip(sa.trials, sb.trials, strict=True):
                assert (ta.trial_id, ta.iterations, ta.hosts) == (
                    tb.trial_id,
                    tb.iterations,
                    tb.hosts,
                )
                assert tb.compute_s == pytest.approx(0.1 * ta.compute_s)
                for fa, fb in zip(ta.sync_flows, tb.sync_flows, strict=True):
                    assert (fa.src_host, fa.dst_host) == (fb.src_host, fb.dst_host)
                    assert fb.size_bytes == pytest.approx(fa.size_bytes * byte_factor, abs=2)


def test_scaling_knobs_act_alone() -> None:
    base = generate(HpTuningConfig(seed=6))
    doubled = generate(HpTuningConfig(seed=6, bytes_scale=2.0, time_scale=3.0))
    a, b = base.experiments[0].stages[0].trials[0], doubled.experiments[0].stages[0].trials[0]
    assert b.sync_bytes == pytest.approx(2 * a.sync_bytes, abs=len(a.sync_flows))
    assert b.compute_s == pytest.approx(3 * a.compute_s)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"num_hosts": 8},
            "8 workers per trial and a parameter server need 9 distinct hosts, more than the 8",
        ),
        ({"num_hosts": 7, "patterns": ("ring",)}, "8 workers per trial need 8 distinct hosts"),
        ({"models": ("resnet50", "gpt9")}, "unknown model 'gpt9'"),
        ({"load": 0.0}, "load: must be a positive number"),
        ({"workers": (1,)}, "workers: 1 per trial, fewer than the 2 a trial needs"),
        ({"jobs": (JobShape("sha", 8, 2),), "num_jobs": 0}, "num_jobs: must be 1..10000"),
    ],
)
def test_bad_config_is_a_user_error(changes: dict[str, object], message: str) -> None:
    with pytest.raises(UserError, match=message):
        dataclasses.replace(HpTuningConfig(), **changes)  # type: ignore[arg-type]


def test_bad_job_shape_is_a_user_error() -> None:
    with pytest.raises(UserError, match="eta must be >= 2"):
        JobShape("sha", max_budget=8, eta=1)


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        (
            {"jobs": (JobShape("sha", 10**9, 2),), "num_jobs": 1},
            "jobs",
            "an SHA run (R=1000000000, eta=2) starts a bracket of 536,870,912 trials",
        ),
        (
            {"jobs": (JobShape("sha", 600_000, 10**6),), "num_jobs": 1},
            "jobs",
            "runs a trial for 1,200,000 iterations in one stage, above the limit of 1,000,000",
        ),
        (
            {"jobs": (JobShape("sha", 2**13, 2),), "num_jobs": 10},
            "num_jobs",
            "10 jobs hold at least 2,293,760 coflows (trials × iterations), above the limit",
        ),
        ({"time_scale": 1e9}, "time_scale", "1e+09 makes one resnet152 iteration compute"),
        (
            {"bytes_scale": 1e7},
            "bytes_scale",
            "makes a synchronisation flow of 9,838,758,684,444,444 bytes",
        ),
        ({"link_bps": 5e-324}, "link_bps", "4.94066e-324 bit/s is outside 1000..1e+15 bit/s"),
        ({"load": 1e-300}, "load", "1e-300 spreads the 12 jobs' arrivals over 1.34e+301 s"),
        ({"load": 5e-324}, "load", "spreads the 12 jobs' arrivals over inf s"),
    ],
)
def test_impossible_sizes_are_refused_before_anything_is_drawn(
    monkeypatch: pytest.MonkeyPatch, changes: dict[str, object], field: str, message: str
) -> None:
    def no_drawing(*args: object) -> None:
        raise AssertionError("drew a job")

    monkeypatch.setattr(hp_tuning, "_draw_job", no_drawing)
    with pytest.raises(SettingError) as refused:
        generate(dataclasses.replace(HpTuningConfig(), **changes))  # type: ignore[arg-type]
    assert refused.value.field == field
    assert message in str(refused.value)
    assert str(refused.value).startswith(f"{field}: ")


def test_too_many_coflows_are_refused_while_drawing(monkeypatch: pytest.MonkeyPatch) -> None:
    # Ten jobs of 10,000 coflows (R=1) would do, so the configuration passes; drawn
    # with seed 1, jobs of 320,000 (R=8) come up often enough to cross the limit.
    one, eight = JobShape("sha", 1, 2), JobShape("sha", 8, 2)
    config = HpTuningConfig(num_jobs=10, jobs=(one, eight), iterations_per_unit=10_000)
    drawn: list[object] = []
    draw_job = hp_tuning._draw_job

    def counted(*args: Any) -> Any:
        drawn.append(None)
        return draw_job(*args)

    monkeypatch.setattr(hp_tuning, "_draw_job", counted)
    with pytest.raises(SettingError) as refused:
        generate(config)
    assert str(refused.value) == (
        "num_jobs: the first 7 of 10 jobs drawn with seed 1 already hold 1,310,000 coflows "
        "(trials × iterations), above the limit of 1,000,000"
    )
    assert len(drawn) == 7  # the rest are never drawn


def test_the_generated_workload_passes_the_readers_own_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With the reader's limit lowered (and the generator's kept), only the final
    # check, the reader's own, can find the late arrivals; it names the setting.
    monkeypatch.setattr(json_format, "MAX_TIME_S", 1.0)
    with pytest.raises(SettingError) as refused:
        generate(HpTuningConfig())
    assert refused.value.field == "load"
    assert "the workload would be refused: $.experiments[" in str(refused.value)
    assert "].arrival_s: " in str(refused.value)


def test_too_few_hosts_for_the_workers_names_the_hosts() -> None:
    with pytest.raises(SettingError) as refused:
        generate(HpTuningConfig(num_hosts=3, workers=(4,)))
    assert refused.value.field == "num_hosts"
    assert str(refused.value) == (
        "num_hosts: 4 workers per trial and a parameter server need 5 distinct hosts, "
        "more than the 3 hosts"
    )


def test_a_ring_only_workload_needs_no_host_for_a_server() -> None:
    """The bound stated is the pattern's: with ring only, 8 workers fit on 8 hosts."""
    assert HpTuningConfig(num_hosts=8, patterns=("ring",)).num_hosts == 8
    with pytest.raises(SettingError, match=r"^num_hosts: 8 workers per trial need 8 distinct"):
        HpTuningConfig(num_hosts=7, patterns=("ring",))


def test_coflows_on_many_hosts_are_limited_by_their_product() -> None:
    with pytest.raises(SettingError) as refused:
        generate(HpTuningConfig(num_hosts=10_000, num_jobs=400))
    assert refused.value.field == "num_jobs"
    assert "above the limit of 2,000 on 10,000 hosts (coflows × hosts at most 20,000,000)" in (
        str(refused.value)
    )


def test_workloads_near_the_limits_are_still_generated() -> None:
    # Four SHA runs of 32 budget units × 7,800 iterations: 998,400 coflows of the
    # 1,000,000 allowed, on the slowest link allowed.
    config = HpTuningConfig(
        num_jobs=4,
        jobs=(JobShape("sha", 8, 2),),
        iterations_per_unit=7800,
        link_bps=1e3,
        bytes_scale=1e-7,
    )
    workload = generate(config)
    coflows = sum(t.iterations for e in workload.experiments for s in e.stages for t in s.trials)
    assert coflows == 998_400
    assert workload.link_bps == 1e3
    json_format.check(workload)


def test_a_trace_stretched_too_far_is_refused() -> None:
    with pytest.raises(SettingError, match=r"^load: 1e-300 stretches the arrivals to 1.97e\+303"):
        load_workload("fb2010", load=1e-300)
