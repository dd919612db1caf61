"""Simulator speed: wall time and events per second for FB2010 under each policy and for
an HP-tuning workload of at least 2,000 coflows (goal: every FB2010 run under 10 s).

FB2010 runs in the per-receiver flow model (what ``beamer simulate --workload
fb2010`` uses). The reference, measured in the same run: the per-flow model on
the trace's first ``--head`` coflows (the whole trace is out of its reach),
against the per-receiver model on the same coflows, for the speed-up and for
the difference in average CCT that grouping costs.

``--quick`` runs the first 60 FB2010 coflows and a 4-job HP-tuning workload.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

from bench.common import emit
from control.model import Workload
from control.policies import POLICIES, get_policy
from sim.engine import FlowModel, SimConfig, SimResult, simulate
from workloads import hp_tuning
from workloads.loader import load_workload

FB_POLICIES = ("beamer", "sincronia", "varys", "aalo", "fifo-lm", "fair")


def timed(
    workload: Workload, policy: str, repeats: int, flow_model: FlowModel = "per-flow"
) -> tuple[dict[str, float], SimResult]:
    """Median wall time over ``repeats`` runs (results are identical run to run)."""
    walls = []
    result = None
    for _ in range(repeats):
        started = time.perf_counter()
        result = simulate(workload, get_policy(policy), SimConfig(flow_model=flow_model))
        walls.append(time.perf_counter() - started)
    assert result is not None
    wall = statistics.median(walls)
    figures = {"wall_s": wall, "events": result.events, "events_per_s": result.events / wall}
    return figures, result


def avg_cct_s(result: SimResult) -> float:
    return statistics.fmean(result.cct_s.values())


def model_reference(fb: Workload, head: int, repeats: int) -> dict[str, dict[str, float]]:
    """Per-flow against per-receiver on the first ``head`` coflows, per policy."""
    prefix = dataclasses.replace(fb, experiments=fb.experiments[:head])
    figures = {}
    for name in FB_POLICIES:
        exact, exact_result = timed(prefix, name, repeats, "per-flow")
        grouped, grouped_result = timed(prefix, name, repeats, "per-receiver")
        figures[name] = {
            "per_flow_wall_s": exact["wall_s"],
            "per_receiver_wall_s": grouped["wall_s"],
            "speedup": exact["wall_s"] / grouped["wall_s"],
            "avg_cct_ratio": avg_cct_s(grouped_result) / avg_cct_s(exact_result),
        }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--head", type=int, default=150, help="coflows for the model reference")
    parser.add_argument(
        "--part", choices=("all", "fb2010", "hp-tuning"), default="all", help="what to measure"
    )
    args = parser.parse_args()
    fb = load_workload("fb2010")
    if args.quick:
        fb = Workload(fb.num_hosts, fb.link_bps, fb.experiments[:60], fb.meta)
    config = hp_tuning.HpTuningConfig(num_jobs=4 if args.quick else 14)
    hp = hp_tuning.generate(dataclasses.replace(config, seed=1))
    hp_coflows = sum(t.iterations for e in hp.experiments for s in e.stages for t in s.trials)
    result: dict[str, object] = {"repeats": args.repeats}
    if args.part in ("all", "fb2010"):
        fb_figures = {}
        for name in FB_POLICIES:
            figures, outcome = timed(fb, name, args.repeats, "per-receiver")
            fb_figures[name] = {**figures, "avg_cct_s": avg_cct_s(outcome)}
        result |= {
            "fb2010_coflows": len(fb.experiments),
            "fb2010_flow_model": "per-receiver",
            "fb2010": fb_figures,
            "fb2010_max_wall_s": max(f["wall_s"] for f in fb_figures.values()),
            "goal_fb2010_wall_s": 10.0,
            "model_reference_coflows": min(args.head, len(fb.experiments)),
            "model_reference": model_reference(fb, args.head, args.repeats),
        }
    if args.part in ("all", "hp-tuning"):
        result |= {
            "hp_tuning_coflows": hp_coflows,
            "hp_tuning": {name: timed(hp, name, args.repeats)[0] for name in POLICIES},
        }
    emit(result)


if __name__ == "__main__":
    main()
