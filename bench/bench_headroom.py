"""Headroom: how far Beamer and Sincronia are from the best static experiment order.

``python -m bench.bench_headroom [--seeds 1-20] [--workers 2] [--evals 150]``
prints one JSON object (``--markdown`` adds the table for docs/results.md).

For each seed, a small HP-tuning instance from the generator (12 hosts at
10 Gbit/s, 3 jobs of the default mix, one iteration per budget unit, so
3–11 experiments and 128–334 coflows on seeds 1–20) is simulated under
each policy and under *static experiment orders* (:class:`StaticOrderPolicy`: one
strict-priority class per experiment, fixed for the whole run) in the same
fluid simulator. The best order is found by exhaustive search when there are
at most ``--exhaustive`` orders (n! ≤ 120 by default), otherwise by local
search: first-improvement over every insertion (move one experiment to
another position) and every swap, started from each policy's completion
order, the arrival order and random orders, until ``--evals`` simulations
are spent. The best static order is a reference, not the optimum: a dynamic
order may beat it (then the gap is negative).

The lower bound is cheap and valid: every stage lasts at least as long as
its longest trial alone, iterations × (compute + the iteration's coflow at
full link rate on its busiest port), and an experiment's time is the sum of
its stages'; the average SCT is at least the sum of these over the number of
stages.

Per seed: each policy's average SCT over the best static order's; over all
seeds, the *share of the gain* each policy takes: Σ (Sincronia − policy) /
Σ (Sincronia − best), in seconds of average SCT.

``--instance default`` runs on the held-out tables' default workload instead
(21–38 experiments), where ``--window`` keeps the local search to short moves;
``--instance sha-only`` and ``hyperband-only`` on their other two mixes.
``--tails-from`` reads an earlier run's JSON and sets the average and p99 SCT of its
best orders (and of ``--policies``) against Sincronia's, instance and classes as in it.
``--moves-from`` reads an earlier run's JSON and counts what its best orders
changed from a policy's completion order (see :func:`reversed_pairs`).

``--screen`` skips the search and reports each policy's average SCT over
Sincronia's on the same instances (how Beamer variants were screened on
the tuning seeds 1–10); a policy is a name or ``beamer:knob=value;...``.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import statistics
import sys
from collections.abc import Callable, Sequence
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
from bench.heldout import SHAPE_MIXES, mix_workload, sct_figures
from bench.heldout import summarize as summarize_against_sincronia
from control.cli import OneLineErrors
from control.errors import UserError
from control.files import read_json
from control.model import Stage, TrialStage, Workload
from control.options import integer, path_option, refuse_repeats
from control.policies.base import BasePolicy
from control.policies.spec import parse_policy_list, policy_from_spec
from control.policies.static_order import StaticOrderPolicy, neighbours
from sim.cli import parse_queues
from sim.engine import SimConfig, SimResult, simulate
from workloads import hp_tuning
from workloads.hp_tuning import HpTuningConfig

POLICIES = ("beamer", "beamer-v1", "sincronia")


INSTANCES = {
    "small": "12 hosts at 10 Gbit/s, 3 jobs, 1 iteration per budget unit",
    "default": "the held-out tables' default workload (bench.heldout's 'default' mix)",
    "sha-only": "the held-out tables' SHA-only workload (bench.heldout's 'sha-only' mix)",
    "hyperband-only": (
        "the held-out tables' Hyperband-only workload (bench.heldout's 'hyperband-only' mix)"
    ),
}
"""The instance kinds ``--instance`` accepts, as the JSON describes them."""


def instance(seed: int, kind: str = "small") -> Workload:
    """The instance of ``seed``: ``small`` (the generator's shapes with fewer hosts, jobs and
    iterations, where a search can see much of the space) or one of the held-out tables'
    mixes (``default``, ``sha-only``, ``hyperband-only``), where the search is a local one
    around the policies' orders."""
    if kind in SHAPE_MIXES:
        return mix_workload(kind, seed)
    if kind != "small":
        raise UserError(f"--instance: {kind!r} is not one of {', '.join(INSTANCES)}")
    return hp_tuning.generate(
        HpTuningConfig(seed=seed, num_hosts=12, num_jobs=3, iterations_per_unit=1)
    )


def avg_sct(result: SimResult) -> float:
    return float(np.mean(list(result.sct_s.values())))


def completion_order(workload: Workload, result: SimResult) -> tuple[int, ...]:
    """Experiment ids by the instant they finished (arrival + completion time)."""
    end = {
        e.experiment_id: e.arrival_s + result.experiment_completion_s[e.experiment_id]
        for e in workload.experiments
    }
    return tuple(sorted(end, key=lambda e: (end[e], e)))


def iteration_port_bytes(workload: Workload, trial: TrialStage) -> dict[int, float]:
    """Bytes one iteration of ``trial`` puts on each sender and receiver port."""
    ports: dict[int, float] = {}
    for flow in trial.sync_flows:
        if flow.src_host != flow.dst_host:
            ports[flow.src_host] = ports.get(flow.src_host, 0.0) + flow.size_bytes
            dst = workload.num_hosts + flow.dst_host
            ports[dst] = ports.get(dst, 0.0) + flow.size_bytes
    return ports


def stage_alone_s(workload: Workload, stage: Stage) -> float:
    """A stage's time with the network to itself: its longest trial's iterations of compute
    and synchronisation, the iteration's coflow at full link rate on its busiest port."""
    rate = workload.link_bps / 8.0
    longest = 0.0
    for trial in stage.trials:
        ports = iteration_port_bytes(workload, trial)
        sync_s = max(ports.values(), default=0.0) / rate
        longest = max(longest, trial.iterations * (trial.compute_s + sync_s))
    return longest


def lower_bound(workload: Workload) -> float:
    """Average SCT no schedule can beat: each stage's longest trial, run alone at full rate."""
    total = 0.0
    stages = 0
    for experiment in workload.experiments:
        for stage in experiment.stages:
            stages += 1
            total += stage_alone_s(workload, stage)
    return total / stages


PROFILE_FIELDS = ("alone_s", "stages", "busiest_port_s", "duty_cycle")


def experiment_profiles(workload: Workload) -> dict[int, dict[str, float]]:
    """Per experiment: its time alone (its stages' in sequence), its stages, its busiest
    port's bytes over all stages at line rate, and the ratio of the two (its duty cycle)."""
    rate = workload.link_bps / 8.0
    profiles = {}
    for experiment in workload.experiments:
        ports: dict[int, float] = {}
        for stage in experiment.stages:
            for trial in stage.trials:
                for port, size in iteration_port_bytes(workload, trial).items():
                    ports[port] = ports.get(port, 0.0) + trial.iterations * size
        alone_s = sum(stage_alone_s(workload, stage) for stage in experiment.stages)
        busiest_s = max(ports.values(), default=0.0) / rate
        profiles[experiment.experiment_id] = {
            "alone_s": alone_s,
            "stages": float(len(experiment.stages)),
            "busiest_port_s": busiest_s,
            "duty_cycle": busiest_s / alone_s if alone_s > 0 else 1.0,
        }
    return profiles


def reversed_pairs(
    workload: Workload,
    before: Sequence[int],
    after: Sequence[int],
    within_s: float = 60.0,
) -> dict[str, dict[str, int]]:
    """How ``after`` reorders ``before``: over the pairs of experiments arriving within
    ``within_s`` of each other whose order it reverses, how often the experiment it moves
    ahead has the larger or the smaller value of each profile field (what a better order
    does differently, as counts a reader can weigh)."""
    profiles = experiment_profiles(workload)
    arrival = {e.experiment_id: e.arrival_s for e in workload.experiments}
    place_before = {e: i for i, e in enumerate(before)}
    place_after = {e: i for i, e in enumerate(after)}
    counts = {name: {"ahead_larger": 0, "ahead_smaller": 0} for name in PROFILE_FIELDS}
    counts["pairs"] = {"reversed": 0}
    for a, b in itertools.combinations(sorted(place_before), 2):
        if abs(arrival[a] - arrival[b]) > within_s:
            continue
        if (place_before[a] - place_before[b]) * (place_after[a] - place_after[b]) >= 0:
            continue
        ahead, behind = (a, b) if place_after[a] < place_after[b] else (b, a)
        counts["pairs"]["reversed"] += 1
        for name in PROFILE_FIELDS:
            if profiles[ahead][name] > profiles[behind][name]:
                counts[name]["ahead_larger"] += 1
            elif profiles[ahead][name] < profiles[behind][name]:
                counts[name]["ahead_smaller"] += 1
    return counts


def headroom_file(option: str, path: str | Path, *fields: str) -> dict[str, Any]:
    """An earlier run's JSON whose per-seed rows each have a ``seed`` and ``fields`` (what
    ``--start-from``, ``--moves-from``, ``--tails-from`` and bench_rollout's ``--hindsight``
    read), each of its type: ``*_order`` a list of experiment ids, ``*_s`` a positive
    number. It is read with the bounds of every user file (a FIFO or ``/dev/zero`` is
    refused, not waited on or read without end), and anything wrong is one line naming
    the option, the file and the field, before any simulation."""
    where = f"{option} {path}"
    try:
        head = read_json(Path(path), what="regular file")
    except UserError as error:
        raise UserError(f"{option} {error} (not a bench_headroom JSON)") from None
    if not isinstance(head, dict) or not isinstance(head.get("seeds"), list):
        raise UserError(f"{where}: not a bench_headroom JSON (an object with a list 'seeds')")
    for name in ("instances", "queues"):
        if not isinstance(head.get(name, ""), str):
            raise UserError(f"{where}: {name}: {_shown(head[name])} is not a string")
    rows = head["seeds"]
    if not rows:
        raise UserError(f"{where}: seeds: an empty list (no seed to read)")
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise UserError(f"{where}: seeds[{index}]: {_shown(row)} is not an object")
        seed = row.get("seed")
        if not _is_whole(seed):
            raise UserError(
                f"{where}: seeds[{index}].seed: {_shown(seed)} is not a seed (a whole number >= 0)"
            )
        for name in fields:
            if name not in row:
                raise UserError(f"{where}: seeds[{index}]: seed {seed} has no {name}")
            value = row[name]
            if name.endswith("_order") and not (
                isinstance(value, list) and all(_is_whole(e) for e in value)
            ):
                raise UserError(
                    f"{where}: seeds[{index}].{name}: {_shown(value)} is not a list of "
                    "experiment ids (whole numbers >= 0)"
                )
            if name.endswith("_s") and not (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and math.isfinite(value)
                and value > 0
            ):
                raise UserError(
                    f"{where}: seeds[{index}].{name}: {_shown(value)} is not a number of "
                    "seconds above 0"
                )
    refuse_repeats((row["seed"] for row in rows), f"{where}: seeds", lambda s: f"seed {s}")
    return dict(head)


def _is_whole(value: object) -> bool:
    """A seed or an experiment id as JSON gives it: an integer >= 0 (``true`` is not 1)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _shown(value: object, width: int = 40) -> str:
    """``value`` as JSON, shortened to ``width`` characters for a one-line error."""
    text = json.dumps(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def check_orders(
    option: str, path: str | Path, rows: Sequence[dict[str, Any]], kind: str, *fields: str
) -> None:
    """Each row's ``fields`` (orders checked by :func:`headroom_file`) must order exactly
    the experiments of the row's seed's instance of ``kind``: an id the instance does not
    have, one left out or one twice would fail deep in a simulation (or a worker)."""
    for index, row in enumerate(rows):
        ids = {e.experiment_id for e in instance(row["seed"], kind).experiments}
        for name in fields:
            order = row[name]
            where = f"{option} {path}: seeds[{index}].{name}"
            refuse_repeats(order, where, lambda e: f"experiment {e}")
            unknown = sorted(set(order) - ids)
            if unknown:
                raise UserError(
                    f"{where}: experiment {unknown[0]} is not in seed {row['seed']}'s "
                    f"{kind} instance ({len(ids)} experiments)"
                )
            missing = sorted(ids - set(order))
            if missing:
                raise UserError(f"{where}: experiment {missing[0]} is left out")


def headroom_rows(option: str, path: str | Path, *fields: str) -> list[dict[str, Any]]:
    """The per-seed rows of :func:`headroom_file`."""
    return list(headroom_file(option, path, *fields)["seeds"])


def moves_from(path: str | Path, policy: str, kind: str) -> dict[str, Any]:
    """:func:`reversed_pairs` from ``policy``'s completion order to the best order found, summed
    over the seeds of an earlier run's JSON (its instances rebuilt from their seeds)."""
    key = f"{policy}_completion_order"
    rows = headroom_rows("--moves-from", path, key, "best_order")
    check_orders("--moves-from", path, rows, kind, key, "best_order")
    total: dict[str, dict[str, int]] = {}
    for row in rows:
        counts = reversed_pairs(instance(row["seed"], kind), row[key], row["best_order"])
        for name, cells in counts.items():
            for cell, value in cells.items():
                total.setdefault(name, {}).setdefault(cell, 0)
                total[name][cell] += value
    return {"from": policy, "seeds": [row["seed"] for row in rows], "reversed_pairs": total}


BEST = "best static order"

MAX_EXHAUSTIVE = 40_320
"""The most orders ``--exhaustive`` may search whole (8!): one simulation each."""
"""The best order found by an earlier run, as ``--tails-from`` names it."""


def tail_seed(
    seed: int, kind: str, classes: int | None, best_order: Sequence[int], policies: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Average and p99 SCT of Sincronia, ``policies`` and the best order on one instance."""
    workload = instance(seed, kind)
    config = SimConfig(num_classes=classes)
    chosen: dict[str, BasePolicy] = {
        name: policy_from_spec(name) for name in dict.fromkeys(("sincronia", *policies))
    }
    chosen[BEST] = StaticOrderPolicy(tuple(best_order))
    out: dict[str, dict[str, Any]] = {}
    stage_sct = {}
    for name, policy in chosen.items():
        result = simulate(workload, policy, config)
        stage_sct[name] = result.sct_s
        out[name] = dict(sct_figures(result))
    for name in policies:
        # The stages at or above the p99, and what the same stages took in the best order.
        out[name]["tail_stages"] = [
            [key.experiment_id, key.stage_id, sct_s, stage_sct[BEST][key]]
            for key, sct_s in stage_sct[name].items()
            if sct_s >= out[name]["p99_sct_s"]
        ]
    return out


def tail_stage_summary(runs: Sequence[dict[str, dict[str, Any]]], name: str) -> dict[str, Any]:
    """How much longer ``name``'s tail stages took than the same stages in the best order."""
    ratios = [sct / in_best for run in runs for *_, sct, in_best in run[name]["tail_stages"]]
    return {
        "stages": len(ratios),
        "longer_than_in_best": sum(1 for x in ratios if x > 1.0),
        "over_1_1_of_best": sum(1 for x in ratios if x > 1.1),
        "median_over_best": statistics.median(ratios),
        "max_over_best": max(ratios),
    }


def tails_from(path: str | Path, policies: Sequence[str], workers: int) -> dict[str, Any]:
    """The tail of the best orders an earlier run found: each seed's best order, Sincronia
    and ``policies`` simulated again on its instance with its classes, their average and
    p99 SCT set against Sincronia's as the held-out tables do. It says whether the orders
    that lower the mean most keep the tail within the goal, and, for each policy's stages
    at or above its p99 (``[experiment, stage, SCT, SCT in the best order]``), whether
    the policy made them wait longer than the best order does."""
    head = headroom_file("--tails-from", path, "best_order")
    rows = head["seeds"]
    kinds = {text: kind for kind, text in INSTANCES.items()}
    kind = kinds.get(head.get("instances", INSTANCES["small"]))
    modes = parse_queues(str(head.get("queues", "ideal")))
    if kind is None or len(modes) != 1:
        raise UserError(f"--tails-from {path}: its instances or queues are not known here")
    check_orders("--tails-from", path, rows, kind, "best_order")
    with worker_pool(workers) as pool:
        runs = list(
            pool.map(
                tail_seed,
                [row["seed"] for row in rows],
                [kind] * len(rows),
                [modes[0]] * len(rows),
                [row["best_order"] for row in rows],
                [policies] * len(rows),
            )
        )
    tails = summarize_against_sincronia(runs, [BEST, *policies])
    sincronia_s = tails["sincronia_avg_sct_s"]
    gain_s = sincronia_s - tails[BEST]["avg_sct_s"]
    return {
        "from": str(path),
        "instances": INSTANCES[kind],
        "queues": head.get("queues", "ideal"),
        "seeds": [row["seed"] for row in rows],
        "tails": tails,
        # Σ (Sincronia − policy) / Σ (Sincronia − best order), as the search's summary.
        "share_of_gain": {
            name: (sincronia_s - tails[name]["avg_sct_s"]) / gain_s if gain_s > 0 else math.nan
            for name in policies
        },
        "tail_stages": {name: tail_stage_summary(runs, name) for name in policies},
        "per_seed_tail_stages": [
            {name: run[name]["tail_stages"] for name in policies} for run in runs
        ],
    }


def search(
    evaluate: Callable[[tuple[int, ...]], float],
    ids: Sequence[int],
    starts: Sequence[tuple[int, ...]],
    *,
    max_evals: int,
    max_exhaustive: int,
    seed: int,
    window: int | None = None,
) -> tuple[tuple[int, ...], str]:
    """The best order found and how (``exhaustive`` or ``local``); ``evaluate`` is cached."""
    if math.factorial(len(ids)) <= max_exhaustive:
        return min(itertools.permutations(ids), key=lambda o: (evaluate(o), o)), "exhaustive"
    rng = random.Random(seed)
    seen: dict[tuple[int, ...], float] = {}

    def cost(order: tuple[int, ...]) -> float:
        if order not in seen:
            seen[order] = evaluate(order)
        return seen[order]

    queue = list(dict.fromkeys(starts))
    best = min(queue, key=cost)
    while len(seen) < max_evals:
        if queue:
            current = queue.pop(0)
        else:
            shuffled = list(ids)
            rng.shuffle(shuffled)
            current = tuple(shuffled)
        current_cost = cost(current)
        improved = True
        while improved and len(seen) < max_evals:
            improved = False
            candidates = neighbours(current, window)
            rng.shuffle(candidates)
            for candidate in candidates:
                if len(seen) >= max_evals:
                    break
                if cost(candidate) < current_cost - 1e-12:
                    current, current_cost, improved = candidate, cost(candidate), True
                    break
        if current_cost < cost(best):
            best = current
    return best, "local"


def one_seed(
    seed: int,
    policies: Sequence[str],
    max_evals: int,
    max_exhaustive: int,
    earlier: Sequence[tuple[int, ...]] = (),
    classes: int | None = None,
    kind: str = "small",
    window: int | None = None,
) -> dict:
    workload = instance(seed, kind)
    ids = [e.experiment_id for e in workload.experiments]
    config = SimConfig(num_classes=classes)

    def run(policy: BasePolicy) -> SimResult:
        return simulate(workload, policy, config)

    cache: dict[tuple[int, ...], float] = {}

    def evaluate(order: tuple[int, ...]) -> float:
        if order not in cache:
            cache[order] = avg_sct(run(StaticOrderPolicy(order)))
        return cache[order]

    results = {name: run(policy_from_spec(name)) for name in policies}
    starts = [*earlier, *(completion_order(workload, r) for r in results.values())]
    starts.append(tuple(sorted(ids, key=lambda e: (workload.experiments[e].arrival_s, e))))
    best, method = search(
        evaluate,
        ids,
        starts,
        max_evals=max_evals,
        max_exhaustive=max_exhaustive,
        seed=seed,
        window=window,
    )
    row: dict[str, Any] = {
        "seed": seed,
        "experiments": len(ids),
        "stages": sum(len(e.stages) for e in workload.experiments),
        "coflows": sum(
            t.iterations for e in workload.experiments for s in e.stages for t in s.trials
        ),
        "method": method,
        "orders_simulated": len(cache),
        "best_order": list(best),
        "best_static_avg_sct_s": cache[best],
        "lower_bound_avg_sct_s": lower_bound(workload),
    }
    for name, result in results.items():
        row[f"{name}_avg_sct_s"] = avg_sct(result)
        row[f"{name}_completion_order"] = list(completion_order(workload, result))
    print(f"seed {seed}: {row['experiments']} experiments, {method}", file=sys.stderr, flush=True)
    return row


def screen_seed(
    seed: int, policies: Sequence[str], classes: int | None, kind: str = "small"
) -> dict[str, float]:
    """Average SCT of each policy and of Sincronia on the instance (no search)."""
    workload = instance(seed, kind)
    config = SimConfig(num_classes=classes)
    return {
        name: avg_sct(simulate(workload, policy_from_spec(name), config))
        for name in dict.fromkeys(("sincronia", *policies))
    }


def screen_summary(rows: list[dict[str, float]], policies: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in policies:
        ratios = [r[name] / r["sincronia"] for r in rows]
        out[name] = {
            "over_sincronia_mean": statistics.fmean(ratios),
            "over_sincronia_worst": max(ratios),
            "seeds_lower": sum(1 for x in ratios if x < 1.0),
            "seeds": len(ratios),
        }
    return out


def summarize(rows: list[dict], policies: Sequence[str]) -> dict[str, Any]:
    best = [r["best_static_avg_sct_s"] for r in rows]
    summary: dict[str, Any] = {"seeds": len(rows)}
    for name in policies:
        ratios = [r[f"{name}_avg_sct_s"] / b for r, b in zip(rows, best, strict=True)]
        summary[f"{name}_over_best_mean"] = statistics.fmean(ratios)
        summary[f"{name}_over_best_max"] = max(ratios)
        summary[f"{name}_seeds_within_1pct"] = sum(1 for x in ratios if x <= 1.01)
    summary["lower_bound_over_best_mean"] = statistics.fmean(
        r["lower_bound_avg_sct_s"] / b for r, b in zip(rows, best, strict=True)
    )
    sinc = [r["sincronia_avg_sct_s"] for r in rows] if "sincronia" in policies else None
    if sinc is not None:
        gain = sum(s - b for s, b in zip(sinc, best, strict=True))
        summary["achievable_gain_over_sincronia_s_total"] = gain
        summary["achievable_gain_over_sincronia_mean_pct"] = 100 * statistics.fmean(
            (s - b) / s for s, b in zip(sinc, best, strict=True)
        )
        for name in policies:
            if name == "sincronia":
                continue
            taken = sum(s - r[f"{name}_avg_sct_s"] for s, r in zip(sinc, rows, strict=True))
            summary[f"{name}_share_of_gain"] = taken / gain if gain > 0 else float("nan")
    return summary


def markdown(rows: list[dict], policies: Sequence[str]) -> str:
    head = ["seed", "exps", "search", "best static s", "bound s"]
    head += [f"{name} / best" for name in policies]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        best = r["best_static_avg_sct_s"]
        cells = [
            str(r["seed"]),
            str(r["experiments"]),
            f"{r['method']} ({r['orders_simulated']})",
            f"{best:.2f}",
            f"{r['lower_bound_avg_sct_s']:.2f}",
        ]
        cells += [f"{r[f'{name}_avg_sct_s'] / best:.3f}" for name in policies]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    run_command(run_main)


def run_main() -> None:
    parser = OneLineErrors(description=__doc__)
    parser.add_argument("--seeds", default="1-20", help="e.g. 1-20 or 1,4,7")
    parser.add_argument("--workers", type=at_least_one, default=2)
    parser.add_argument("--evals", type=integer, default=150, help="simulations per seed (local)")
    parser.add_argument("--exhaustive", type=integer, default=120, help="largest n! searched whole")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--markdown", action="store_true", help="print the table after the JSON")
    parser.add_argument("--quick", action="store_true", help="2 seeds, 40 simulations each")
    parser.add_argument(
        "--start-from",
        type=path_option,
        default=None,
        help="JSON of an earlier run: its best orders start the search (a second pass)",
    )
    parser.add_argument(
        "--screen",
        action="store_true",
        help="no search: each policy over Sincronia only (screening policy variants)",
    )
    parser.add_argument(
        "--instance",
        default="small",
        choices=tuple(INSTANCES),
        help="small instances (the default) or one of the held-out tables' mixes",
    )
    parser.add_argument(
        "--moves-from",
        type=path_option,
        default=None,
        metavar="JSON",
        help="no search: what an earlier run's best orders changed from --moves-policy's",
    )
    parser.add_argument(
        "--tails-from",
        type=path_option,
        default=None,
        metavar="JSON",
        help="no search: the p99 of an earlier run's best orders and of --policies",
    )
    parser.add_argument(
        "--moves-policy", default="beamer", help="whose completion order --moves-from reads"
    )
    parser.add_argument(
        "--window",
        type=integer,
        default=None,
        help="local search moves an experiment at most this many places (default: any)",
    )
    parser.add_argument(
        "--queues",
        default="ideal",
        help="ideal or K classes: the policies and the static orders alike are quantised to K",
    )
    args = parser.parse_args()
    if args.window is not None and args.window < 1:
        raise UserError(f"--window: {args.window} is not a number of places of at least 1")
    if args.evals < 0:
        raise UserError(f"--evals: {args.evals} is not a number of simulations")
    if not 1 <= args.exhaustive <= MAX_EXHAUSTIVE:
        raise UserError(
            f"--exhaustive: {args.exhaustive} is not between 1 and {MAX_EXHAUSTIVE:,} (8!)"
        )
    seeds = [3, 5] if args.quick else parse_seed_ranges(args.seeds)
    evals = 40 if args.quick else args.evals
    policies = parse_policy_list(args.policies)
    modes = parse_queues(args.queues)
    if len(modes) != 1:
        raise UserError("--queues: one mode only (ideal or K classes)")
    classes = modes[0]
    if args.moves_from is not None:
        emit(moves_from(args.moves_from, args.moves_policy, args.instance))
        return
    if args.tails_from is not None:
        emit(tails_from(args.tails_from, policies, args.workers))
        return
    if args.screen:
        with worker_pool(args.workers) as pool:
            runs = list(
                pool.map(
                    screen_seed,
                    seeds,
                    [policies] * len(seeds),
                    [classes] * len(seeds),
                    [args.instance] * len(seeds),
                )
            )
        emit(
            {
                "instances": INSTANCES[args.instance],
                "queues": args.queues,
                "seeds": seeds,
                "screen": screen_summary(runs, policies),
            }
        )
        return
    earlier: dict[int, list[tuple[int, ...]]] = {}
    if args.start_from is not None:
        rows = headroom_rows("--start-from", args.start_from, "best_order")
        check_orders("--start-from", args.start_from, rows, args.instance, "best_order")
        for row in rows:
            earlier.setdefault(row["seed"], []).append(tuple(row["best_order"]))
    with worker_pool(args.workers) as pool:
        futures = [
            pool.submit(
                one_seed,
                s,
                policies,
                evals,
                args.exhaustive,
                earlier.get(s, []),
                classes,
                args.instance,
                args.window,
            )
            for s in seeds
        ]
        rows = [f.result() for f in futures]
    emit(
        {
            "instances": INSTANCES[args.instance],
            "window": args.window,
            "queues": args.queues,
            "summary": summarize(rows, policies),
            "seeds": rows,
        }
    )
    if args.markdown:
        print(markdown(rows, policies))


if __name__ == "__main__":
    main()
