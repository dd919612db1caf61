"""Where the fast flow model and the per-flow reference agree: every stage of the
HP-tuning workload, fast against per-flow, for each policy and queue setting.

For each seed, policy (a registered name or a ``beamer:key=value`` variant) and
queue setting (``ideal`` or a number of classes) it prints the average SCT of the
fast model over the reference's minus one, the worst stage's relative SCT
difference, the worst coflow's, and whether every stage and coflow time is equal to
the last bit. Wall times are not measured here (see :mod:`bench.bench_sim`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from bench.common import emit, parse_seed_ranges, run_command
from control.cli import OneLineErrors
from control.errors import UserError
from control.options import integer
from control.policies.spec import parse_policy_list, policy_from_spec
from sim.cli import parse_queues
from sim.engine import SimConfig, SimResult, simulate
from workloads import hp_tuning
from workloads.limits import MAX_JOBS

DEFAULT_POLICIES = "beamer,sincronia,varys,fifo,fair,aalo,fifo-lm,beamer:split_trials=true"


def relative_worst(fast: Mapping[Any, float], reference: Mapping[Any, float]) -> float:
    return max(
        (abs(fast[key] - value) / max(value, 1e-12) for key, value in reference.items()),
        default=0.0,
    )


def agreement(fast: SimResult, reference: SimResult) -> dict[str, float | bool]:
    return {
        "avg_sct_ratio_minus_1": statistics.fmean(fast.sct_s.values())
        / statistics.fmean(reference.sct_s.values())
        - 1.0,
        "worst_stage_rel_diff": relative_worst(fast.sct_s, reference.sct_s),
        "worst_coflow_rel_diff": relative_worst(fast.cct_s, reference.cct_s),
        "identical": fast.sct_s == reference.sct_s and fast.cct_s == reference.cct_s,
    }


def main() -> None:
    parser = OneLineErrors(description=__doc__)
    parser.add_argument("--seeds", default="1,2", help="comma-separated workload seeds")
    parser.add_argument("--jobs", type=integer, default=14, help="HP-tuning jobs per workload")
    parser.add_argument("--policies", default=DEFAULT_POLICIES, help="comma-separated")
    parser.add_argument("--queues", default="ideal,8", help="comma-separated: ideal or a count")
    args = parser.parse_args()
    seeds = parse_seed_ranges(args.seeds)
    if not 1 <= args.jobs <= MAX_JOBS:
        raise UserError(f"--jobs: {args.jobs} is not between 1 and {MAX_JOBS}")
    queues = parse_queues(args.queues)
    policies = parse_policy_list(args.policies)
    rows = []
    for seed in seeds:
        workload = hp_tuning.generate(hp_tuning.HpTuningConfig(seed=seed, num_jobs=args.jobs))
        for spec in policies:
            for num_classes in queues:
                fast = simulate(workload, policy_from_spec(spec), SimConfig(num_classes))
                reference = simulate(
                    workload, policy_from_spec(spec), SimConfig(num_classes, flow_model="per-flow")
                )
                rows.append(
                    {
                        "seed": seed,
                        "policy": spec,
                        "queues": "ideal" if num_classes is None else num_classes,
                        "stages": len(reference.sct_s),
                        **agreement(fast, reference),
                    }
                )
    emit(
        {
            "jobs": args.jobs,
            "rows": rows,
            "all_identical": all(row["identical"] for row in rows),
        }
    )


if __name__ == "__main__":
    run_command(main)
