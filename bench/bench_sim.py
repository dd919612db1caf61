"""Simulator speed: wall time and events per second for FB2010 under each policy and for
an HP-tuning workload of at least 2,000 coflows (goal: every FB2010 run under 10 s).

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
from sim.engine import SimConfig, simulate
from workloads import hp_tuning
from workloads.loader import load_workload

FB_POLICIES = ("beamer", "sincronia", "varys", "aalo", "fifo-lm", "fair")


def timed(workload: Workload, policy: str, repeats: int) -> dict[str, float]:
    walls = []
    events = 0
    for _ in range(repeats):
        started = time.perf_counter()
        result = simulate(workload, get_policy(policy), SimConfig())
        walls.append(time.perf_counter() - started)
        events = result.events
    wall = statistics.median(walls)
    return {"wall_s": wall, "events": events, "events_per_s": events / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    fb = load_workload("fb2010")
    if args.quick:
        fb = Workload(fb.num_hosts, fb.link_bps, fb.experiments[:60], fb.meta)
    config = hp_tuning.HpTuningConfig(num_jobs=4 if args.quick else 14)
    hp = hp_tuning.generate(dataclasses.replace(config, seed=1))
    hp_coflows = sum(t.iterations for e in hp.experiments for s in e.stages for t in s.trials)
    result: dict[str, object] = {
        "fb2010_coflows": len(fb.experiments),
        "fb2010": {name: timed(fb, name, args.repeats) for name in FB_POLICIES},
        "hp_tuning_coflows": hp_coflows,
        "hp_tuning": {name: timed(hp, name, args.repeats) for name in POLICIES},
        "goal_fb2010_wall_s": 10.0,
    }
    emit(result)


if __name__ == "__main__":
    main()
