"""Online lookahead: the best experiment order a scheduler could find knowing only the present.

``python -m bench.bench_rollout [--seeds 1-10] [--workers 2] [--evals 20] [--queues ideal]``
prints one JSON object (``--markdown`` adds the table for docs/results.md).

``bench.bench_headroom`` searches one static order for the whole run, with every
arrival known in advance: a reference no online scheduler can use. This bench
asks the question between that reference and a ranking rule. At every arrival
instant it searches an order for the experiments present *then*, with their full
stage plans (what Beamer itself is told) but nothing of the experiments still to
come, and keeps that order until the next arrival. Each candidate is scored by
simulating, from time zero in the same fluid simulator, the experiments arrived
so far under the orders already chosen for earlier epochs and the candidate from
this arrival on; the score is their average SCT. The search inserts each new
experiment at its best position in the previous order, then improves by
first-improvement moves of at most ``--window`` places until ``--evals``
simulations are spent.

Per seed: this online order's average SCT, ``beamer``'s and the best static
(hindsight) order's from a ``bench_headroom`` run (``--hindsight JSON``), each over
Sincronia's. If the online search comes close to the hindsight order, the gap
between ``beamer`` and hindsight is a ranking rule's to take; if it stays near
``beamer``, the gap is the value of knowing the arrivals to come.
"""

from __future__ import annotations

import random
import statistics
import sys
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from bench.bench_headroom import INSTANCES, avg_sct, headroom_rows, instance
from bench.common import (
    at_least_one,
    emit,
    parse_seed_ranges,
    run_command,
    worker_pool,
)
from control.cli import OneLineErrors
from control.errors import UserError
from control.model import Workload
from control.options import integer, path_option
from control.policies.base import BasePolicy, Ranking, Snapshot
from control.policies.lookahead import improve, insert_best
from control.policies.spec import parse_policy_list, policy_from_spec
from control.policies.static_order import StaticOrderPolicy
from sim.cli import parse_queues
from sim.engine import SimConfig, SimResult, simulate

POLICIES = ("beamer", "sincronia")

Order = tuple[int, ...]


class EpochOrderPolicy(BasePolicy):
    """A static order per epoch: from each start instant on, rank by that epoch's order."""

    name: ClassVar[str] = "epoch-order"

    def __init__(self, epochs: Sequence[tuple[float, Order]]) -> None:
        if not epochs or list(s for s, _ in epochs) != sorted(s for s, _ in epochs):
            raise UserError("epoch orders need at least one epoch, by start time")
        self._starts = [start for start, _ in epochs]
        self._orders = [StaticOrderPolicy(order) for _, order in epochs]

    def rank(self, snapshot: Snapshot) -> Ranking:
        epoch = max(0, bisect_right(self._starts, snapshot.now_s) - 1)
        return self._orders[epoch].rank(snapshot)


def finished_by(workload: Workload, result: SimResult, now_s: float) -> set[int]:
    """Experiments of ``result``'s run whose last stage ended at or before ``now_s``."""
    return {
        e.experiment_id
        for e in workload.experiments
        if e.experiment_id in result.experiment_completion_s
        and e.arrival_s + result.experiment_completion_s[e.experiment_id] <= now_s
    }


@dataclass
class EpochScores:
    """Candidate orders for the epoch from ``now_s``, each scored by simulating the
    experiments of ``part`` from time zero under the earlier epochs and the candidate."""

    part: Workload
    epochs: tuple[tuple[float, Order], ...]
    now_s: float
    config: SimConfig
    results: dict[Order, tuple[float, SimResult]] = field(default_factory=dict)

    def __call__(self, candidate: Order) -> float:
        if candidate not in self.results:
            policy = EpochOrderPolicy([*self.epochs, (self.now_s, candidate)])
            result = simulate(self.part, policy, self.config)
            self.results[candidate] = (avg_sct(result), result)
        return self.results[candidate][0]


def online_order(
    workload: Workload, config: SimConfig, *, evals: int, window: int, seed: int
) -> tuple[list[tuple[float, Order]], float, int]:
    """The epochs an online order search chooses, their run's average SCT, and the
    simulations spent. Experiments must be numbered in arrival order (the generator's)."""
    rng = random.Random(seed)
    arrivals = sorted({e.arrival_s for e in workload.experiments})
    epochs: list[tuple[float, Order]] = []
    order: Order = ()
    done: set[int] = set()
    spent = 0
    last: SimResult | None = None
    for index, now_s in enumerate(arrivals):
        present = tuple(e for e in workload.experiments if e.arrival_s <= now_s)
        part = replace(workload, experiments=present)
        score = EpochScores(part, tuple(epochs), now_s, config)
        if last is not None:
            done = finished_by(part, last, now_s)
        new = [e.experiment_id for e in present if e.arrival_s == now_s]
        current = insert_best(score, tuple(e for e in order if e not in done), new)
        current = improve(score, current, budget=evals, window=window, rng=rng)
        score(current)
        spent += len(score.results)
        epochs.append((now_s, current))
        order, last = current, score.results[current][1]
        print(
            f"seed {seed}: arrival {index + 1}/{len(arrivals)} at {now_s:.1f} s, "
            f"{len(current)} active, {spent} simulations",
            file=sys.stderr,
            flush=True,
        )
    assert last is not None
    return epochs, avg_sct(last), spent


def one_seed(
    seed: int,
    policies: Sequence[str],
    evals: int,
    window: int,
    classes: int | None,
    kind: str,
) -> dict[str, Any]:
    workload = instance(seed, kind)
    ids = [e.experiment_id for e in workload.experiments]
    arrival = [e.arrival_s for e in workload.experiments]
    if ids != list(range(len(ids))) or arrival != sorted(arrival):
        raise UserError(f"seed {seed}: experiments are not numbered in arrival order")
    config = SimConfig(num_classes=classes)
    epochs, online_s, spent = online_order(workload, config, evals=evals, window=window, seed=seed)
    final = avg_sct(simulate(workload, EpochOrderPolicy(epochs), config))
    if abs(final - online_s) > 1e-9 * max(1.0, final):
        raise RuntimeError(f"seed {seed}: last epoch's score {online_s} is not the run's {final}")
    row: dict[str, Any] = {
        "seed": seed,
        "experiments": len(ids),
        "epochs": len(epochs),
        "simulations": spent,
        "online_avg_sct_s": final,
        "online_epochs": [[start, list(order)] for start, order in epochs],
    }
    for name in policies:
        row[f"{name}_avg_sct_s"] = avg_sct(simulate(workload, policy_from_spec(name), config))
    return row


def summarize(
    rows: list[dict[str, Any]], policies: Sequence[str], hindsight: dict[int, float]
) -> dict[str, Any]:
    """Each order's mean over Sincronia, seeds lower, and ``beamer``'s share of the gain."""
    names = ["online", *(p for p in policies if p != "sincronia")]
    base = {r["seed"]: r["sincronia_avg_sct_s"] for r in rows}
    values = {name: {r["seed"]: r[f"{name}_avg_sct_s"] for r in rows} for name in names}
    if hindsight and all(r["seed"] in hindsight for r in rows):
        names.append("hindsight")
        values["hindsight"] = {r["seed"]: hindsight[r["seed"]] for r in rows}
    out: dict[str, Any] = {"seeds": len(rows)}
    for name in names:
        ratios = [values[name][s] / base[s] for s in base]
        out[name] = {
            "over_sincronia_mean": statistics.fmean(ratios),
            "over_sincronia_worst": max(ratios),
            "seeds_lower": sum(1 for x in ratios if x < 1.0),
        }
    gain = sum(base[s] - values["online"][s] for s in base)
    for name in names:
        if name != "online":
            taken = sum(base[s] - values[name][s] for s in base)
            out[name]["over_online_gain"] = taken / gain if gain > 0 else float("nan")
    return out


def markdown(
    rows: list[dict[str, Any]], policies: Sequence[str], hindsight: dict[int, float]
) -> str:
    names = ["online", *(p for p in policies if p != "sincronia")]
    head = ["seed", "exps", "epochs", "sims", *(f"{n} / sincronia" for n in names)]
    if hindsight:
        head.append("hindsight / sincronia")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        sinc = r["sincronia_avg_sct_s"]
        cells = [str(r["seed"]), str(r["experiments"]), str(r["epochs"]), str(r["simulations"])]
        cells += [f"{r[f'{n}_avg_sct_s'] / sinc:.3f}" for n in names]
        if hindsight:
            best = hindsight.get(r["seed"])
            cells.append("" if best is None else f"{best / sinc:.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def read_hindsight(path: str | Path | None) -> dict[int, float]:
    """Seed → best static order's average SCT, from a ``bench_headroom`` JSON (each row
    checked by :func:`headroom_rows`: a seed and a positive number of seconds)."""
    if path is None:
        return {}
    rows = headroom_rows("--hindsight", path, "best_static_avg_sct_s")
    return {r["seed"]: float(r["best_static_avg_sct_s"]) for r in rows}


def main() -> None:
    run_command(run_main)


def run_main() -> None:
    parser = OneLineErrors(description=__doc__)
    parser.add_argument("--seeds", default="1-10", help="e.g. 1-10 or 11-30")
    parser.add_argument("--workers", type=at_least_one, default=2)
    parser.add_argument(
        "--evals", type=integer, default=20, help="improving simulations per arrival"
    )
    parser.add_argument("--window", type=integer, default=3, help="longest move, in places")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--instance", default="default", choices=tuple(INSTANCES))
    parser.add_argument("--queues", default="ideal", help="ideal or K classes")
    parser.add_argument(
        "--hindsight", type=path_option, default=None, metavar="JSON", help="a bench_headroom run"
    )
    parser.add_argument("--markdown", action="store_true", help="print the table after the JSON")
    parser.add_argument("--quick", action="store_true", help="2 small instances, 2 moves each")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.instance, args.evals = "3,5", "small", 2
    if args.window < 1:
        raise UserError(f"--window: {args.window} is not a number of places of at least 1")
    if args.evals < 0:
        raise UserError(f"--evals: {args.evals} is not a number of simulations")
    seeds = parse_seed_ranges(args.seeds)
    policies = tuple(dict.fromkeys(("sincronia", *parse_policy_list(args.policies))))
    modes = parse_queues(args.queues)
    if len(modes) != 1:
        raise UserError("--queues: one mode only (ideal or K classes)")
    hindsight = read_hindsight(args.hindsight)
    with worker_pool(args.workers) as pool:
        futures = [
            pool.submit(one_seed, s, policies, args.evals, args.window, modes[0], args.instance)
            for s in seeds
        ]
        rows = [f.result() for f in futures]
    emit(
        {
            "instances": INSTANCES[args.instance],
            "queues": args.queues,
            "evals_per_arrival": args.evals,
            "window": args.window,
            "summary": summarize(rows, policies, hindsight),
            "seeds": rows,
        }
    )
    if args.markdown:
        print(markdown(rows, policies, hindsight))


if __name__ == "__main__":
    main()
