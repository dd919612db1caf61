"""Where Beamer wins and where it does not: average SCT of Beamer against Sincronia,
FIFO-LM and fair sharing over loads, priority classes, experiment mixes and seeds.

``python -m bench.sweep [--quick] [--workers N]`` prints one JSON object:
for every setting, each policy's average SCT over Beamer's (mean over seeds, and
the number of seeds where Beamer's is lower). Not part of ``python -m bench``:
a full sweep takes tens of minutes.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from bench.common import emit
from control.policies import get_policy
from sim.engine import SimConfig, simulate
from workloads import hp_tuning
from workloads.hp_tuning import DEFAULT_JOBS, HpTuningConfig, JobShape

MIXES: dict[str, tuple[JobShape, ...]] = {
    "default": DEFAULT_JOBS,
    "sha-only": tuple(job for job in DEFAULT_JOBS if job.kind == "sha"),
    "hyperband-only": tuple(job for job in DEFAULT_JOBS if job.kind == "hyperband"),
}


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    load: float = 0.8
    classes: int | None = None
    mix: str = "default"
    models: tuple[str, ...] | None = None


def settings(quick: bool) -> list[Setting]:
    if quick:
        return [Setting("default ideal"), Setting("default 8q", classes=8)]
    found = [Setting(f"load {load}", load=load) for load in (0.5, 0.8, 1.0)]
    found += [Setting(f"load {load} 8q", load=load, classes=8) for load in (0.5, 1.0)]
    found += [Setting(f"{k}q", classes=k) for k in (2, 4, 8)]
    found += [Setting(f"mix {mix}", mix=mix) for mix in MIXES if mix != "default"]
    found += [Setting(f"mix {mix} 8q", mix=mix, classes=8) for mix in MIXES if mix != "default"]
    found += [Setting("one model (resnet50)", models=("resnet50",))]
    return found


def one_run(setting: Setting, seed: int, policies: tuple[str, ...]) -> dict[str, float]:
    config = HpTuningConfig(seed=seed, load=setting.load, jobs=MIXES[setting.mix])
    if setting.models is not None:
        config = dataclasses.replace(config, models=setting.models)
    workload = hp_tuning.generate(config)
    out = {}
    for name in policies:
        result = simulate(workload, get_policy(name), SimConfig(num_classes=setting.classes))
        out[name] = float(np.mean(list(result.sct_s.values())))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seeds", default=None, help="comma-separated (default 1..5, quick 1)")
    parser.add_argument(
        "--policies", default="beamer,sincronia,fifo-lm,fair", help="beamer first, then baselines"
    )
    parser.add_argument("--only", default=None, help="comma-separated setting names to run")
    args = parser.parse_args()
    seeds = (
        [int(s) for s in args.seeds.split(",")]
        if args.seeds
        else ([1] if args.quick else [1, 2, 3, 4, 5])
    )
    policies = tuple(args.policies.split(","))
    chosen = settings(args.quick)
    if args.only:
        wanted = set(args.only.split(","))
        chosen = [s for s in chosen if s.name in wanted]
    jobs = [(s, seed) for s in chosen for seed in seeds]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        futures = [pool.submit(one_run, s, seed, policies) for s, seed in jobs]
        runs = [future.result() for future in futures]
    report: dict[str, Any] = {"seeds": seeds, "policies": list(policies), "settings": {}}
    for setting in chosen:
        mine = [run for (s, _), run in zip(jobs, runs, strict=True) if s == setting]
        entry: dict[str, Any] = {"beamer_avg_sct_s": statistics.fmean(r["beamer"] for r in mine)}
        for name in policies[1:]:
            ratios = [r[name] / r["beamer"] for r in mine]
            entry[f"{name}_over_beamer"] = statistics.fmean(ratios)
            entry[f"{name}_seeds_beamer_lower"] = sum(1 for x in ratios if x > 1.0)
        report["settings"][setting.name] = entry
    emit(report)


if __name__ == "__main__":
    main()
