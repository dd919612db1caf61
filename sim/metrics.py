"""Summary figures of one simulation: SCT percentiles, slowdown, CCT, experiment time."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from control.model import Experiment, StageKey, Workload
from control.policies.varys import VarysPolicy
from sim.engine import SimResult, simulate

METRICS: tuple[str, ...] = (
    "avg_sct_s",
    "p50_sct_s",
    "p95_sct_s",
    "p99_sct_s",
    "avg_slowdown",
    "avg_cct_s",
    "avg_experiment_s",
)


def isolated_sct(workload: Workload) -> dict[StageKey, float]:
    """Each stage's SCT when it runs alone in the cluster (the slowdown's denominator).

    Alone, a stage is scheduled by Varys (SEBF + MADD): a lone coflow then
    finishes exactly at its bottleneck bound, and a stage's trials on shared
    hosts are ordered sensibly. Stages of one plan that repeat are simulated once.
    """
    cache: dict[object, float] = {}
    alone: dict[StageKey, float] = {}
    policy = VarysPolicy()
    for experiment in workload.experiments:
        for stage in experiment.stages:
            signature = stage.trials
            if signature not in cache:
                lone = Experiment(experiment.experiment_id, 0.0, (stage,))
                result = simulate(Workload(workload.num_hosts, workload.link_bps, (lone,)), policy)
                cache[signature] = next(iter(result.sct_s.values()))
            alone[StageKey(experiment.experiment_id, stage.stage_id)] = cache[signature]
    return alone


def summarize(result: SimResult, alone: Mapping[StageKey, float]) -> dict[str, float]:
    """The metrics of :data:`METRICS` (seconds, slowdown is a ratio) plus run statistics."""
    sct = np.array(list(result.sct_s.values()))
    slowdowns = [
        sct_s / alone[key] for key, sct_s in result.sct_s.items() if alone.get(key, 0.0) > 0
    ]
    cct = np.array(list(result.cct_s.values()))
    experiments = np.array(list(result.experiment_completion_s.values()))

    def mean(values: np.ndarray | list[float]) -> float:
        return float(np.mean(values)) if len(values) else float("nan")

    def percentile(q: float) -> float:
        return float(np.percentile(sct, q)) if len(sct) else float("nan")

    return {
        "avg_sct_s": mean(sct),
        "p50_sct_s": percentile(50),
        "p95_sct_s": percentile(95),
        "p99_sct_s": percentile(99),
        "avg_slowdown": mean(slowdowns),
        "avg_cct_s": mean(cct),
        "avg_experiment_s": mean(experiments),
        "stages": float(len(sct)),
        "coflows": float(len(cct)),
        "events": float(result.events),
        "wall_s": result.wall_s,
    }
