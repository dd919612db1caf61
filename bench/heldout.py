"""Beamer against Sincronia per setting and seed: the tuning and the held-out tables.

``python -m bench.heldout --seeds 11-30 [--policies beamer,beamer-v1] [--workers 2]``
prints one JSON object and, with ``--markdown``, a table for docs/results.md.

Settings: the default HP-tuning workload, the SHA-only and the Hyperband-only
mixes (``workloads.shapes.Shape``'s ``mixed``, ``sha`` and ``hyperband``),
each with unlimited (ideal), 8 and 4 classes.
For each setting and policy: the mean over seeds of the policy's average SCT
over Sincronia's on the same seed and classes, the number of seeds where the
policy is lower, and the mean p99 SCT over Sincronia's mean p99 SCT.

``--quantize`` is how every run maps its ranking onto the classes (``rank``, as
the tables in docs/results.md); ``--sincronia-quantize`` gives Sincronia a mapping
of its own, to hold a policy against Sincronia at Sincronia's best mapping (a
per-coflow order keeps more of itself under ``exponential``). ``--reuse FILE`` takes
the policies' runs from an earlier report of this benchmark and runs only Sincronia
anew: a search's runs take minutes each, Sincronia's a second.

A policy is a registered name, or ``beamer:key=value;...`` for a Beamer
variant with those constructor arguments (floats, ints, true/false, words),
as the tuning on seeds 1–10 uses (a variant starts from the first design,
``beamer-v1``); the name ``beamer`` itself is whatever that tuning chose.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (
    at_least_one,
    emit,
    parse_seed_ranges,
    run_command,
    worker_pool,
)
from control.cli import OneLineErrors
from control.errors import UserError
from control.files import read_json
from control.model import Workload
from control.options import comma_items, path_option, refuse_repeats
from control.policies.spec import parse_policy_list, policy_from_spec
from control.quantize import STRATEGIES, Strategy
from sim.engine import SimConfig, SimResult, simulate
from workloads import hp_tuning
from workloads.hp_tuning import HpTuningConfig
from workloads.shapes import Mix, Shape

SHAPE_MIXES: dict[str, Mix] = {"default": "mixed", "sha-only": "sha", "hyperband-only": "hyperband"}
"""The held-out tables' mix names and the generator shapes they stand for."""

SETTINGS: dict[str, tuple[str, int | None]] = {
    f"{mix} {label}": (mix, classes)
    for mix in ("default", "sha-only", "hyperband-only")
    for label, classes in (("ideal", None), ("8q", 8), ("4q", 4))
}


def mix_workload(mix: str, seed: int) -> Workload:
    """The HP-tuning workload of a held-out mix (``default``, ``sha-only``, ...) and seed."""
    jobs = Shape(mix=SHAPE_MIXES[mix]).jobs()
    return hp_tuning.generate(HpTuningConfig(seed=seed, jobs=jobs))


def sct_figures(result: SimResult) -> dict[str, float]:
    """The average and p99 SCT of a run, as every table against Sincronia takes them."""
    sct = np.array(list(result.sct_s.values()))
    return {"avg_sct_s": float(sct.mean()), "p99_sct_s": float(np.percentile(sct, 99))}


def one_run(
    setting: str,
    seed: int,
    policies: Sequence[str],
    quantize: Strategy = "rank",
    sincronia_quantize: Strategy = "rank",
) -> dict[str, dict[str, float]]:
    """Sincronia (mapped by ``sincronia_quantize``) and ``policies`` (by ``quantize``)
    on one setting and seed."""
    mix, classes = SETTINGS[setting]
    workload = mix_workload(mix, seed)
    out = {}
    for spec in ("sincronia", *policies):
        strategy = sincronia_quantize if spec == "sincronia" else quantize
        config = SimConfig(num_classes=classes, strategy=strategy)
        result = simulate(workload, policy_from_spec(spec), config)
        out[spec] = {**sct_figures(result), "wall_s": result.wall_s}
    return out


RunKey = tuple[str, int]
"""A run's setting and seed."""


def earlier_runs(
    path: Path, policies: Sequence[str], quantize: Strategy, jobs: Sequence[RunKey]
) -> dict[RunKey, dict[str, dict[str, float]]]:
    """The ``policies``' runs of ``jobs`` in an earlier report, which must have mapped
    them onto the classes as ``quantize`` does (reports before the option: ``rank``)."""
    report = read_json(path, what="report")
    if not isinstance(report, dict) or not isinstance(report.get("runs"), list):
        raise UserError(f"{path}: not a report of this benchmark (no list 'runs')")
    mapped = report.get("quantize", "rank")
    if mapped != quantize:
        raise UserError(f"{path}: its policies were mapped with {mapped!r}, not {quantize!r}")
    found: dict[RunKey, dict[str, dict[str, float]]] = {}
    for run in report["runs"]:
        if isinstance(run, dict) and isinstance(run.get("setting"), str):
            seed = run.get("seed")
            if isinstance(seed, int):
                found[(run["setting"], seed)] = run
    out = {}
    for setting, seed in jobs:
        run = found.get((setting, seed), {})
        figures = {}
        for spec in policies:
            entry = run.get(spec)
            numbers = {
                name: float(value)
                for name, value in (entry.items() if isinstance(entry, dict) else ())
                if isinstance(value, int | float) and not isinstance(value, bool)
            }
            if not {"avg_sct_s", "p99_sct_s"} <= numbers.keys():
                raise UserError(f"{path}: no run of {spec} on {setting!r}, seed {seed}")
            figures[spec] = numbers
        out[(setting, seed)] = figures
    return out


def summarize(runs: list[dict[str, dict[str, float]]], policies: Sequence[str]) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "sincronia_avg_sct_s": statistics.fmean(r["sincronia"]["avg_sct_s"] for r in runs),
        "sincronia_p99_sct_s": statistics.fmean(r["sincronia"]["p99_sct_s"] for r in runs),
    }
    for spec in policies:
        ratios = [r[spec]["avg_sct_s"] / r["sincronia"]["avg_sct_s"] for r in runs]
        entry[spec] = {
            "avg_sct_s": statistics.fmean(r[spec]["avg_sct_s"] for r in runs),
            "over_sincronia_mean": statistics.fmean(ratios),
            "over_sincronia_worst": max(ratios),
            "seeds_lower": sum(1 for x in ratios if x < 1.0),
            "seeds": len(ratios),
            "p99_over_sincronia": statistics.fmean(r[spec]["p99_sct_s"] for r in runs)
            / entry["sincronia_p99_sct_s"],
        }
    return entry


def markdown(report: dict[str, Any], policies: Sequence[str]) -> str:
    head = "| setting | policy | avg SCT / sincronia | lower on | worst seed | p99 / sincronia |"
    lines = [head, "|---|---|---|---|---|---|"]
    for setting, entry in report["settings"].items():
        for spec in policies:
            e = entry[spec]
            lines.append(
                f"| {setting} | {spec} | {e['over_sincronia_mean']:.3f} | "
                f"{e['seeds_lower']} / {e['seeds']} | {e['over_sincronia_worst']:.3f} | "
                f"{e['p99_over_sincronia']:.3f} |"
            )
    return "\n".join(lines)


def main() -> None:
    run_command(run_main)


def run_main() -> None:
    parser = OneLineErrors(description=__doc__)
    parser.add_argument("--seeds", default="11-30", help="e.g. 11-30 (held out) or 1-10 (tuning)")
    parser.add_argument("--policies", default="beamer,beamer-v1", help="comma-separated")
    parser.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated names")
    parser.add_argument(
        "--workers", type=at_least_one, default=2, help="processes (at most the cores)"
    )
    parser.add_argument(
        "--quantize",
        choices=STRATEGIES,
        default="rank",
        help="how the runs map their ranking onto 8 or 4 classes (default rank)",
    )
    parser.add_argument(
        "--sincronia-quantize",
        choices=STRATEGIES,
        default=None,
        help="Sincronia's own mapping (default: as --quantize)",
    )
    parser.add_argument(
        "--reuse",
        type=path_option,
        default=None,
        help="take the policies' runs from this earlier report; run only Sincronia",
    )
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    sincronia_quantize = args.sincronia_quantize or args.quantize
    seeds = parse_seed_ranges(args.seeds)
    policies = parse_policy_list(args.policies)
    chosen = comma_items(args.settings, "--settings")
    unknown = [s for s in chosen if s not in SETTINGS]
    if unknown:
        raise UserError(f"unknown setting {unknown[0]!r} (known: {', '.join(SETTINGS)})")
    # Twice, a setting's seeds would run twice and count as twice as many.
    refuse_repeats(chosen, "--settings")
    jobs = [(s, seed) for s in chosen for seed in seeds]
    reused = None
    if args.reuse is not None:
        reused = earlier_runs(args.reuse, policies, args.quantize, jobs)
    to_run = [] if reused is not None else policies
    with worker_pool(args.workers) as pool:
        futures = [
            pool.submit(one_run, s, seed, to_run, args.quantize, sincronia_quantize)
            for s, seed in jobs
        ]
        runs = [f.result() for f in futures]
    if reused is not None:
        runs = [{**run, **reused[job]} for job, run in zip(jobs, runs, strict=True)]
    report: dict[str, Any] = {
        "seeds": seeds,
        "policies": policies,
        "quantize": args.quantize,
        "sincronia_quantize": sincronia_quantize,
        "settings": {},
        "runs": [],
    }
    for setting in chosen:
        mine = [run for (s, _), run in zip(jobs, runs, strict=True) if s == setting]
        report["settings"][setting] = summarize(mine, policies)
    for (setting, seed), run in zip(jobs, runs, strict=True):
        report["runs"].append({"setting": setting, "seed": seed, **run})
    emit(report)
    if args.markdown:
        print(markdown(report, policies))


if __name__ == "__main__":
    main()
