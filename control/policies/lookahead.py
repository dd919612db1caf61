"""Beamer's lookahead: at each experiment arrival, choose the order by simulating the present.

A ranking rule (BSSI on demands, stage weights) decides from a few numbers per
experiment; the static-order search of ``bench/bench_headroom.py`` showed that
orders chosen by simulation do much better. This policy does what such a search
can do online. When an experiment arrives, it builds the *residual* workload of
the experiments present (the stages still to run, the running stage's trials with
the iterations they have not finished, everything released now) and scores
candidate experiment orders by simulating it in the fluid simulator: the new
experiment at each position of the previous order, then moves of at most
``window`` places while they lower the average SCT, ``evals`` simulations at most.
The order holds until the next arrival, as a static order does; between arrivals
a ranking costs what :class:`~control.policies.static_order.StaticOrderPolicy`'s does.

It knows what Beamer knows (each experiment's stage plan) and nothing of the
experiments to come. The residual model starts an unfinished iteration from its
compute phase, so it is approximate where an iteration is under way;
``bench/bench_rollout.py`` runs the same search on the exact state.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from typing import ClassVar

from control.model import Experiment, Workload
from control.policies.base import BasePolicy, Ranking, Snapshot
from control.policies.beamer import chosen_beamer
from control.policies.static_order import StaticOrderPolicy, neighbours

Order = tuple[int, ...]


def insert_best(
    cost: Callable[[Order], float],
    order: Order,
    new: Sequence[int],
    budget: int | None = None,
) -> Order:
    """``order`` with each of ``new`` moved, one after another, to its lowest-cost position
    (the ones not placed yet wait at the end); with ``budget``, placing stops before the
    orders tried would exceed it, and the rest stay at the end."""
    current = (*(e for e in order if e not in new), *new)
    tried = 0
    for experiment in new:
        rest = tuple(e for e in current if e != experiment)
        slots = [(*rest[:i], experiment, *rest[i:]) for i in range(len(rest) + 1)]
        tried += len(slots)
        if budget is not None and tried > budget:
            break
        current = min(slots, key=lambda o: (cost(o), o))
    return current


def improve(
    cost: Callable[[Order], float], start: Order, *, budget: int, window: int, rng: random.Random
) -> Order:
    """First-improvement search from ``start`` over moves of at most ``window`` places,
    scoring at most ``budget`` orders besides the ones scored before."""
    current, spent = start, 0
    improved = True
    while improved and spent < budget:
        improved = False
        candidates = neighbours(current, window)
        rng.shuffle(candidates)
        for candidate in candidates:
            if spent >= budget:
                break
            spent += 1
            if cost(candidate) < cost(current) - 1e-12:
                current, improved = candidate, True
                break
    return current


def residual_workload(snapshot: Snapshot) -> Workload:
    """What the experiments of ``snapshot`` still have to run, all released now: the
    stages from the running one on, the running stage's trials cut to the iterations
    they have not finished. Ids are kept, so a ranking of it ranks the snapshot. Every
    port runs at the slowest port's rate, which is exact on the one-rate big switch of
    the HP-tuning workloads and an approximation elsewhere."""
    experiments = []
    for experiment_id in sorted(snapshot.experiments):
        state = snapshot.experiments[experiment_id]
        plan = state.experiment
        running = plan.stages[state.stage_index]
        trials = tuple(
            replace(trial, iterations=left)
            for trial in running.trials
            if (left := trial.iterations - state.iterations_done.get(trial.trial_id, 0)) > 0
        )
        later = plan.stages[state.stage_index + 1 :]
        stages = ((replace(running, trials=trials),) if trials else ()) + tuple(later)
        if stages:
            experiments.append(
                Experiment(experiment_id, 0.0, stages, kind=plan.kind, weight=plan.weight)
            )
    return Workload(
        num_hosts=snapshot.num_hosts,
        link_bps=min(snapshot.port_capacity_bps),
        experiments=tuple(experiments),
    )


class LookaheadPolicy(BasePolicy):
    """``beamer-lookahead``: experiment order by simulating the present at each arrival.

    The search costs a residual simulation per order tried, and inserting k new
    experiments among n tries about k·n orders. ``max_simulations`` caps the insertions
    tried at one arrival (new experiments it leaves unplaced wait at the end), and with
    more than ``max_present`` experiments present (a coflow trace, where every coflow is
    an experiment) the policy ranks as ``beamer`` does instead of searching. Neither
    binds on the HP-tuning workloads of docs/results.md (their heaviest held-out run,
    Hyperband-only seed 29 with 4 classes, had at most 22 experiments present and tried
    at most 88 insertions at one arrival).
    """

    name: ClassVar[str] = "beamer-lookahead"

    def __init__(
        self,
        evals: int = 5,
        window: int = 3,
        max_simulations: int = 200,
        max_present: int = 64,
        seed: int = 0,
    ) -> None:
        self.evals = evals
        self.window = window
        self.max_simulations = max_simulations
        self.max_present = max_present
        self._rule = chosen_beamer()
        self._rng = random.Random(seed)
        self._order: Order = ()
        self._ranker = StaticOrderPolicy(())
        """Ranks by ``_order``; rebuilt only when the order changes, not at every event."""
        self._present: set[int] = set()
        """Experiments of the last ranking: one absent then is new now (a reused id too)."""
        self.simulations = 0
        """Residual simulations run so far (what the lookahead has cost)."""

    def rank(self, snapshot: Snapshot) -> Ranking:
        present = set(snapshot.experiments) | {c.key.experiment_id for c in snapshot.coflows}
        if len(present) > self.max_present:
            self._present = set()
            return self._rule.rank(snapshot)
        new = sorted(present - self._present)
        self._present = present
        if new:
            self._order = self._choose(snapshot, present, new)
            self._ranker = StaticOrderPolicy(self._order)
        return self._ranker.rank(snapshot)

    def _choose(self, snapshot: Snapshot, present: Collection[int], new: Sequence[int]) -> Order:
        from sim.engine import SimConfig, simulate  # the simulator imports the policies

        previous = tuple(e for e in self._order if e in present)
        residual = residual_workload(snapshot)
        if not residual.experiments:
            return (*previous, *new)
        config = SimConfig(num_classes=snapshot.num_classes)
        scores: dict[Order, float] = {}

        def cost(order: Order) -> float:
            if order not in scores:
                self.simulations += 1
                result = simulate(residual, StaticOrderPolicy(order), config)
                scores[order] = sum(result.sct_s.values())
            return scores[order]

        placed = insert_best(cost, previous, new, self.max_simulations)
        return improve(cost, placed, budget=self.evals, window=self.window, rng=self._rng)
