"""Simulator speed and exactness: the fast flow model against the per-flow reference, in
one run.

Three workloads, every policy:

* ``offline``: the offline FB2010 subset (coflows of at most 400 mapper × reducer
  pairs, whole-MB flows, all released at 0; 439 coflows). The fast model's median
  wall time (goal: under 3 s per policy), the per-flow reference's, their ratio, and
  how far the fast model's CCTs are from the reference's (average and worst coflow).
* ``fb2010``: the whole trace with its arrivals, fast model (goal: under 10 s per
  policy); the reference runs on the first ``--head`` coflows only (the whole trace
  is out of its reach), for the ratio and the CCT check.
* ``hp-tuning``: an HP-tuning workload of 2,068 coflows; fast against per-flow (the
  model every HP-tuning run used before), goal: 4× faster.

Times are wall clock and CPU time of this process, median of ``--repeats`` runs for
the fast model and of ``--reference-repeats`` for the reference (default 1: it is the
slow one); on a shared machine the CPU time is the steadier figure. The first call
compiles the kernels (numba caches them on disk); a warm-up run comes first.
``--quick`` shrinks every workload.

Both models run the same policy code, and for the ranking-heavy policies (the Beamer
variants, Aalo's re-rankings) that shared ranking is much of a run, which bounds the
ratio of whole runs however fast the flow model gets. So the CPU time spent inside
``rank`` is measured too (``rank_cpu_s``), and ``model_cpu_speedup`` is the ratio of the
two runs less their ranking: the flow models against each other.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.common import emit, run_command
from control.cli import OneLineErrors
from control.errors import UserError
from control.model import Workload
from control.options import integer
from control.policies import POLICIES, get_policy, is_search
from control.policies.base import BasePolicy, Ranking, Snapshot
from control.policies.spec import parse_policy_list
from sim.engine import FlowModel, SimConfig, SimResult, simulate
from workloads import coflow_benchmark, hp_tuning
from workloads.files import read_text
from workloads.loader import load_workload

GOALS = {"offline_wall_s": 3.0, "fb2010_wall_s": 10.0, "hp_tuning_speedup": 4.0}


@dataclass(frozen=True, slots=True)
class Timing:
    """Medians over the repeats: wall and CPU time of the whole run, and the CPU time spent
    inside the policy's ``rank`` (both flow models run the same ranking, so the model's own
    share is the run less the ranking)."""

    wall_s: float
    cpu_s: float
    rank_cpu_s: float

    @property
    def model_cpu_s(self) -> float:
        return self.cpu_s - self.rank_cpu_s


def with_rank_timer(policy: BasePolicy) -> tuple[BasePolicy, Callable[[], float]]:
    """``policy`` with its ``rank`` timed, and a function that reads the CPU seconds spent
    in it so far."""
    spent_s = [0.0]
    inner = policy.rank

    def rank(snapshot: Snapshot) -> Ranking:
        started = time.process_time()
        try:
            return inner(snapshot)
        finally:
            spent_s[0] += time.process_time() - started

    policy.rank = rank  # type: ignore[method-assign]
    return policy, lambda: spent_s[0]


def timed(
    workload: Workload, policy: str, repeats: int, flow_model: FlowModel
) -> tuple[Timing, SimResult]:
    """Median times over ``repeats`` runs (results are identical run to run; on a shared
    machine the CPU time is the steadier figure)."""
    walls = []
    cpus = []
    ranks = []
    result = None
    for _ in range(repeats):
        instance, rank_cpu_s = with_rank_timer(get_policy(policy))
        started = time.perf_counter()
        started_cpu = time.process_time()
        result = simulate(workload, instance, SimConfig(flow_model=flow_model))
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - started_cpu)
        ranks.append(rank_cpu_s())
    assert result is not None
    timing = Timing(statistics.median(walls), statistics.median(cpus), statistics.median(ranks))
    return timing, result


def avg_cct_s(result: SimResult) -> float:
    return statistics.fmean(result.cct_s.values()) if result.cct_s else 0.0


def deviation(fast: SimResult, reference: SimResult) -> dict[str, float]:
    """Average-CCT ratio and the worst coflow's relative CCT difference."""
    worst = max(
        (abs(fast.cct_s[key] - cct) / max(cct, 1e-9) for key, cct in reference.cct_s.items()),
        default=0.0,
    )
    ratio = avg_cct_s(fast) / avg_cct_s(reference) if reference.cct_s else 1.0
    return {"avg_cct_ratio": ratio, "max_coflow_rel_diff": worst}


def compare(
    workload: Workload,
    reference_workload: Workload | None,
    repeats: int,
    reference_repeats: int,
    policies: list[str],
) -> dict[str, dict[str, float]]:
    """Per policy: the fast model's figures and, on ``reference_workload`` (None: skip),
    the per-flow reference's with the ratio and the CCT deviation."""
    figures: dict[str, dict[str, float]] = {}
    for name in policies:
        fast, result = timed(workload, name, repeats, "fast")
        row = {
            "wall_s": fast.wall_s,
            "cpu_s": fast.cpu_s,
            "rank_cpu_s": fast.rank_cpu_s,
            "events": float(result.events),
            "events_per_s": result.events / fast.wall_s,
            "avg_cct_s": avg_cct_s(result),
        }
        if reference_workload is not None:
            if reference_workload is not workload:
                fast, result = timed(reference_workload, name, repeats, "fast")
                row["reference_set_fast_wall_s"] = fast.wall_s
                row["reference_set_fast_cpu_s"] = fast.cpu_s
            per_flow, reference = timed(reference_workload, name, reference_repeats, "per-flow")
            row["per_flow_wall_s"] = per_flow.wall_s
            row["per_flow_cpu_s"] = per_flow.cpu_s
            row["per_flow_rank_cpu_s"] = per_flow.rank_cpu_s
            row["speedup"] = per_flow.wall_s / fast.wall_s
            row["cpu_speedup"] = per_flow.cpu_s / fast.cpu_s
            # The flow model alone: both runs less the ranking they share.
            row["model_cpu_speedup"] = per_flow.model_cpu_s / max(fast.model_cpu_s, 1e-9)
            row |= deviation(result, reference)
        figures[name] = row
    return figures


def summary(figures: dict[str, dict[str, float]]) -> dict[str, float]:
    out = {
        "max_wall_s": max(f["wall_s"] for f in figures.values()),
        "max_cpu_s": max(f["cpu_s"] for f in figures.values()),
    }
    if all("speedup" in f for f in figures.values()):
        out["min_speedup"] = min(f["speedup"] for f in figures.values())
        out["min_cpu_speedup"] = min(f["cpu_speedup"] for f in figures.values())
        out["min_model_cpu_speedup"] = min(f["model_cpu_speedup"] for f in figures.values())
        out["worst_avg_cct_ratio_deviation"] = max(
            abs(f["avg_cct_ratio"] - 1.0) for f in figures.values()
        )
        out["worst_coflow_rel_diff"] = max(f["max_coflow_rel_diff"] for f in figures.values())
    return out


def offline_subset(max_flows: int, head: int | None) -> Workload:
    """The offline subset of the FB2010 trace (``$BEAMER_FB2010`` or the packaged copy),
    read as ``beamer`` reads a workload: ``/dev/zero`` or a FIFO is one line, not a read
    that never ends."""
    text = read_text(coflow_benchmark.default_trace_path())
    workload = coflow_benchmark.parse(
        coflow_benchmark.offline(text, max_flows=max_flows), "offline"
    )
    if head is not None:
        workload = dataclasses.replace(workload, experiments=workload.experiments[:head])
    return workload


def default_policies() -> list[str]:
    """Every registered policy but the lookahead searches, which simulate the rest of
    the run at every arrival: hours on these workloads, asked for by name only."""
    return [name for name in POLICIES if not is_search(name)]


def main() -> None:
    parser = OneLineErrors(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small workloads (a smoke test)")
    parser.add_argument("--repeats", type=integer, default=3)
    parser.add_argument(
        "--reference-repeats", type=integer, default=1, help="0: skip the per-flow reference"
    )
    parser.add_argument(
        "--head", type=integer, default=150, help="FB2010 coflows for the reference"
    )
    parser.add_argument(
        "--part",
        choices=("all", "offline", "fb2010", "hp-tuning"),
        default="all",
        help="what to measure",
    )
    parser.add_argument(
        "--policies",
        default=",".join(default_policies()),
        help="comma-separated (default: all but the lookahead searches, which simulate at "
        "every arrival and take hours on these workloads)",
    )
    args = parser.parse_args()
    for option, value, low in (
        ("--repeats", args.repeats, 1),
        ("--reference-repeats", args.reference_repeats, 0),
        ("--head", args.head, 1),
    ):
        if value < low:
            raise UserError(f"{option}: {value} is below {low}")
    # Registered names only (timed() builds each run's policy by name), checked before
    # the warm-up: an unknown one found after the runs of the others would cost them.
    policies = list(parse_policy_list(args.policies, check=get_policy))
    # Warm-up: load (or compile) the kernels outside any timed run.
    tiny = offline_subset(400, 5)
    for name in ("fair", "varys"):
        simulate(tiny, get_policy(name), SimConfig(flow_model="fast"))
    result: dict[str, object] = {
        "repeats": args.repeats,
        "reference_repeats": args.reference_repeats,
        "goals": GOALS,
    }
    if args.part in ("all", "offline"):
        offline = offline_subset(400, 40 if args.quick else None)
        reference = offline if args.reference_repeats else None
        figures = compare(offline, reference, args.repeats, args.reference_repeats, policies)
        result["offline"] = {
            "coflows": len(offline.experiments),
            "policies": figures,
            **summary(figures),
        }
    if args.part in ("all", "fb2010"):
        fb = load_workload("fb2010")
        if args.quick:
            fb = dataclasses.replace(fb, experiments=fb.experiments[:60])
        head = dataclasses.replace(fb, experiments=fb.experiments[: args.head])
        reference = head if args.reference_repeats else None
        figures = compare(fb, reference, args.repeats, args.reference_repeats, policies)
        result["fb2010"] = {
            "coflows": len(fb.experiments),
            "reference_coflows": len(head.experiments),
            "policies": figures,
            **summary(figures),
        }
    if args.part in ("all", "hp-tuning"):
        config = hp_tuning.HpTuningConfig(num_jobs=4 if args.quick else 14)
        hp = hp_tuning.generate(dataclasses.replace(config, seed=1))
        coflows = sum(t.iterations for e in hp.experiments for s in e.stages for t in s.trials)
        reference = hp if args.reference_repeats else None
        figures = compare(hp, reference, args.repeats, args.reference_repeats, policies)
        result["hp_tuning"] = {"coflows": coflows, "policies": figures, **summary(figures)}
    emit(result)


if __name__ == "__main__":
    run_command(main)
