"""Sweep executors on this machine: Ray against local processes, speed-up and overhead.

The same sweep runs (HP-tuning workloads of 4 jobs, the default mix otherwise:
two loads, three policies, two seeds; one to a few seconds each, of which
generating the workload is about a fifth) go through :func:`sim.executors.run_tasks` on

* ``serial``: one process, the reference measured in the same run;
* ``local``: two worker processes (``--executor local --jobs 2``);
* ``ray``: a local Ray instance with 2 CPUs (``--executor ray``), already
  started, so that the figure is the steady state of a long sweep; Ray's
  start and stop times are reported on their own.

Per-task overhead: ``noop_tasks`` trivial tasks (``abs``) through the same
paths; wall time / tasks is what each executor adds to every run. Each repeat
uses new seeds, so that no worker process has the workloads cached; the
figures are medians over repeats. Prints one JSON object. Ray must be
installed (the project's ``ray`` extra).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.common import at_least_one, emit
from control.cli import OneLineErrors
from sim.executors import Executor, TaskFailure, run_tasks, start_local_ray, stop_local_ray
from sim.grid import Point
from sim.sweep import SweepRun, sweep_run

POLICIES = ("beamer", "sincronia", "fair")
LOADS = (0.6, 1.0)


def sweep_items(seeds: Sequence[int]) -> list[SweepRun]:
    return [
        SweepRun(Point(load=load, jobs=4), seed, policy)
        for load in LOADS
        for seed in seeds
        for policy in POLICIES
    ]


def wall_s(fn: Callable[[Any], Any], items: Sequence[Any], executor: Executor) -> float:
    import sim.sweep

    sim.sweep._WORKLOADS.clear()  # the serial path runs in this process: start cold
    started = time.perf_counter()
    outcomes = list(run_tasks(fn, items, executor, desc="bench"))
    elapsed = time.perf_counter() - started
    failed = [outcome for _, outcome in outcomes if isinstance(outcome, TaskFailure)]
    if failed or len(outcomes) != len(items):
        raise RuntimeError(f"bench runs failed: {failed[:1]}")
    return elapsed


def main() -> None:
    parser = OneLineErrors(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one repeat, fewer runs")
    parser.add_argument("--repeats", type=at_least_one, default=3)
    args = parser.parse_args()
    repeats = 1 if args.quick else args.repeats
    seeds_per_repeat = 1 if args.quick else 2
    noop_tasks = 100 if args.quick else 400

    import ray

    load_before = os.getloadavg()
    started = time.perf_counter()
    start_local_ray(2)
    ray_start_s = time.perf_counter() - started
    samples: dict[str, list[float]] = {}
    try:
        # Warm-up: Ray starts its worker processes on the first tasks.
        wall_s(abs, list(range(-20, 0)), Executor("ray", 2))
        for repeat in range(repeats):
            seeds = [100 + repeat * seeds_per_repeat + k for k in range(seeds_per_repeat)]
            items = sweep_items(seeds)
            for name, executor in (
                ("serial", Executor("local", 1)),
                ("local", Executor("local", 2)),
                ("ray", Executor("ray", 2)),
            ):
                samples.setdefault(f"{name}_sweep_s", []).append(wall_s(sweep_run, items, executor))
            noops = list(range(-noop_tasks, 0))
            for name, executor in (("local", Executor("local", 2)), ("ray", Executor("ray", 2))):
                elapsed = wall_s(abs, noops, executor)
                samples.setdefault(f"{name}_per_task_overhead_ms", []).append(
                    1000 * elapsed / noop_tasks
                )
    finally:
        started = time.perf_counter()
        stop_local_ray()
        ray_stop_s = time.perf_counter() - started
    result: dict[str, Any] = {
        name: statistics.median(values) for name, values in sorted(samples.items())
    }
    result.update(
        {
            "runs_per_sweep": len(sweep_items(range(seeds_per_repeat))),
            "repeats": repeats,
            "noop_tasks": noop_tasks,
            "ray_version": ray.__version__,
            "ray_start_s": ray_start_s,
            "ray_stop_s": ray_stop_s,
            "speedup_local_2_over_serial": result["serial_sweep_s"] / result["local_sweep_s"],
            "speedup_ray_2_over_serial": result["serial_sweep_s"] / result["ray_sweep_s"],
            "ray_over_local_2": result["ray_sweep_s"] / result["local_sweep_s"],
            "cpus": os.cpu_count(),
            "load_average_before": load_before[0],
            "load_average_after": os.getloadavg()[0],
        }
    )
    emit(result)


if __name__ == "__main__":
    main()
