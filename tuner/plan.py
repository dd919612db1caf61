"""The brackets Ray Tune's ``HyperBandScheduler`` forms, and each one as a Beamer experiment.

Ray's synchronous HyperBand is deterministic once its public parameters
(``max_t``, ``reduction_factor``, ``stop_last_trials``, ``time_attr =
"training_iteration"``) and the number of trials are known: trials fill
brackets in the order they are added, bracket ``s = 0, 1, …`` of a band
takes ``n0(s)`` trials and first stops them at ``r0(s)`` iterations, and each
halving keeps ``ceil(n / eta)`` of them up to the next milestone. This module
computes that plan with Ray's own arithmetic (NumPy rounding included) but
without importing Ray, so that the controller gets every bracket's whole plan
before its first trial runs. Rung ``k`` of a bracket is stage ``k`` of one
experiment; its trials are *slots* ``0..n_k - 1`` (the controller's trial ids),
and a trial that is promoted takes a free slot of the next rung.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from control.errors import UserError
from control.events import MAX_SECONDS
from control.model import Experiment, Stage, TrialStage
from control.policies.knobs import KNOB_LIMIT, Knob, check_knobs
from tuner.contract import Pattern
from workloads.hp_tuning import sync_flows

ID16_MAX = 0xFFFF
"""Experiment, stage and trial ids travel in 16-bit tag fields."""

MAX_SAMPLES = ID16_MAX + 1
"""Trials of one search at most (as many as a bracket has 16-bit trial ids)."""

SEARCH_KNOBS: dict[str, Knob] = {
    "num_samples": Knob("int", 1, MAX_SAMPLES),
    # Iterations, compute time and bytes as the controller's event API takes them.
    "max_t": Knob("int", 1, 2**31 - 1),
    "reduction_factor": Knob("float", 1.0, KNOB_LIMIT, above_minimum=True),
    "stop_last_trials": Knob("bool"),
    "workers": Knob("int", 1, ID16_MAX),
    "pattern": Knob("word", words=("ring", "ps")),
    "gradient_bytes": Knob("int", 1, 2**62),
    "compute_s": Knob("float", 0.0, MAX_SECONDS),
    "first_experiment_id": Knob("int", 0, ID16_MAX),
    "gang_start": Knob("bool"),
    "mode": Knob("word", words=("min", "max"), optional=True),
}
"""What each argument of ``tuner.beamer_hyperband`` may be (a library call gets no
command line's checks)."""


def check_search(values: dict[str, object]) -> None:
    """Refuse, with one line naming it, the first argument of a search that
    :data:`SEARCH_KNOBS` does not admit, a ``seed`` that is not a whole number (any
    size: it seeds ``random.Random``), ``hosts`` that are not a list of names, or a
    ``metric`` that is not a name."""
    check_knobs(SEARCH_KNOBS, values)
    seed = values["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise UserError(f"seed={seed!r} is not a whole number")
    hosts = values["hosts"]
    if isinstance(hosts, str | bytes) or not isinstance(hosts, Sequence):
        raise UserError(f"hosts={hosts!r} is not a list of host names")
    for host in hosts:
        if not isinstance(host, str) or not host:
            raise UserError(f"hosts: {host!r} is not a host name")
    metric = values["metric"]
    if metric is not None and not isinstance(metric, str):
        raise UserError(f"metric={metric!r} is not a metric's name")


@dataclass(frozen=True, slots=True)
class RungPlan:
    """One rung: how many trials run it and the cumulative iteration they stop at."""

    trials: int
    milestone: int
    """``training_iteration`` every trial of the rung reaches before the rung ends."""


@dataclass(frozen=True, slots=True)
class BracketPlan:
    """One bracket Ray forms (skipped brackets, those with ``r0 == 0``, are not listed)."""

    index: int
    """Position among the formed brackets, in the order Ray creates them (from 0)."""
    band: int
    """Ray's HyperBand iteration ("band") the bracket belongs to."""
    s: int
    """Ray's bracket number within its band: ``s`` halvings after the first rung."""
    first_trial: int
    """Index, in trial-add order, of the bracket's first trial."""
    rungs: tuple[RungPlan, ...]

    @property
    def trials(self) -> int:
        """Trials added to the bracket (those of its first rung)."""
        return self.rungs[0].trials

    def iterations(self, rung: int) -> int:
        """Iterations a trial runs in ``rung``: its milestone minus the one before."""
        before = self.rungs[rung - 1].milestone if rung > 0 else 0
        return self.rungs[rung].milestone - before

    def first_iteration(self, rung: int) -> int:
        """Iterations a trial has completed when it enters ``rung``."""
        return self.rungs[rung - 1].milestone if rung > 0 else 0


@dataclass(frozen=True, slots=True)
class HyperBandPlan:
    """Every bracket of a run, in the order their trials are added."""

    max_t: int
    reduction_factor: float
    stop_last_trials: bool
    num_trials: int
    brackets: tuple[BracketPlan, ...]

    def bracket_of(self, trial_index: int) -> tuple[BracketPlan, int]:
        """The bracket of the ``trial_index``-th trial added and its position in it."""
        if not 0 <= trial_index < self.num_trials:
            raise IndexError(f"trial {trial_index} outside 0..{self.num_trials - 1}")
        for bracket in self.brackets:
            if trial_index < bracket.first_trial + bracket.trials:
                return bracket, trial_index - bracket.first_trial
        raise AssertionError("the brackets cover every trial")


def _s_max_1(max_t: int, eta: float) -> int:
    return int(np.round(np.log(max_t) / np.log(eta))) + 1


def _n0(s_max_1: int, eta: float, s: int) -> int:
    return int(np.ceil(s_max_1 / (s + 1) * eta**s))


def _r0(max_t: int, eta: float, s: int) -> int:
    return int(max_t * eta ** (-s))


def _rungs(
    trials: int, n0: int, r0: int, s: int, max_t: int, eta: float, stop_last: bool
) -> tuple[RungPlan, ...]:
    rungs = [RungPlan(trials, r0)]
    n, r, live = n0, r0, trials
    for _ in range(s):
        n = int(np.ceil(n / eta))
        r = int(min(r * eta, max_t))
        live = min(live, n)  # Ray keeps the best min(live, n) trials
        rungs.append(RungPlan(live, r))
    if not stop_last:
        # Ray no longer stops the last rung's trials; they run until the trial ends,
        # which the plan takes to be max_t (stop them there with a stopper).
        rungs[-1] = RungPlan(rungs[-1].trials, max_t)
    return tuple(rungs)


def hyperband_plan(
    num_trials: int,
    max_t: int,
    reduction_factor: float = 3,
    stop_last_trials: bool = True,
) -> HyperBandPlan:
    """The brackets Ray's ``HyperBandScheduler(max_t, reduction_factor, stop_last_trials)``
    forms for ``num_trials`` trials measured in ``training_iteration``.

    Assumes every trial is added before any bracket halves (Ray adds up to its
    pending-trial limit, at least 16, at once) and that no trial fails.
    """
    if isinstance(max_t, bool) or not isinstance(max_t, int) or max_t < 1:
        raise UserError(f"max_t: expected a whole number of iterations >= 1, got {max_t!r}")
    if not reduction_factor > 1:
        raise UserError(f"reduction_factor: expected a number > 1, got {reduction_factor!r}")
    if num_trials < 1:
        raise UserError(f"num_samples: expected at least one trial, got {num_trials}")
    eta = reduction_factor
    s_max_1 = _s_max_1(max_t, eta)
    brackets: list[BracketPlan] = []
    band, s, added = 0, 0, 0
    while added < num_trials:
        if s == s_max_1:  # the band is full: Ray starts a new one
            band, s = band + 1, 0
        r0 = _r0(max_t, eta, s)
        if r0 == 0:  # Ray skips a bracket whose first milestone would be 0
            s += 1
            continue
        n0 = _n0(s_max_1, eta, s)
        trials = min(n0, num_trials - added)
        rungs = _rungs(trials, n0, r0, s, max_t, eta, stop_last_trials)
        for k, rung in enumerate(rungs):
            before = rungs[k - 1].milestone if k else 0
            if rung.milestone <= before:
                raise UserError(
                    f"max_t={max_t}, reduction_factor={reduction_factor}: rung {k} of "
                    f"bracket s={s} would run no iteration (milestones {before} and "
                    f"{rung.milestone}); choose a larger max_t or reduction_factor"
                )
        brackets.append(BracketPlan(len(brackets), band, s, added, rungs))
        added += trials
        s += 1
    return HyperBandPlan(max_t, reduction_factor, stop_last_trials, num_trials, tuple(brackets))


def hosts_per_trial(pattern: Pattern, workers: int) -> int:
    """Hosts one trial occupies: its workers, and the server for ``ps``."""
    return workers + (1 if pattern == "ps" else 0)


def experiment_for(
    bracket: BracketPlan,
    experiment_id: int,
    hosts: Sequence[str],
    *,
    workers: int,
    pattern: Pattern,
    gradient_bytes: int,
    compute_s: float,
    seed: int,
    weight: float = 1.0,
) -> Experiment:
    """The bracket as the controller's experiment: stage ``k`` = rung ``k``, one trial
    slot per trial of the rung.

    ``hosts`` are the topology's host names in topology order (the plan's host
    indices are positions in it). Every slot gets its own hosts, drawn without
    replacement by a generator seeded with ``seed`` and the experiment id
    (``ps``: the first one is the server); ``gradient_bytes`` is what one worker
    synchronises per iteration, ``compute_s`` an estimate of one iteration's
    computation.
    """
    if not 0 <= experiment_id <= ID16_MAX:
        raise UserError(f"experiment id {experiment_id} outside 0..{ID16_MAX}")
    if pattern not in ("ring", "ps"):
        raise UserError(f"pattern: expected 'ring' or 'ps', got {pattern!r}")
    if workers < (2 if pattern == "ring" else 1):
        raise UserError(f"workers: {pattern} needs at least {2 if pattern == 'ring' else 1}")
    per_trial = hosts_per_trial(pattern, workers)
    if len(hosts) < per_trial:
        raise UserError(
            f"hosts: a {pattern} trial with {workers} workers needs {per_trial} hosts, "
            f"the topology has {len(hosts)}"
        )
    if len(set(hosts)) != len(hosts):
        raise UserError("hosts: a host name is listed twice")
    if gradient_bytes < 1:
        raise UserError(f"gradient_bytes: expected at least 1, got {gradient_bytes}")
    if not 0 <= compute_s <= 1e9:
        raise UserError(f"compute_s: expected 0..1e9 seconds, got {compute_s}")
    if bracket.trials - 1 > ID16_MAX:
        raise UserError(f"bracket with {bracket.trials} trials exceeds 16-bit trial ids")
    rng = random.Random(seed * (ID16_MAX + 1) + experiment_id)
    stages = []
    for k, rung in enumerate(bracket.rungs):
        trials = []
        for slot in range(rung.trials):
            placed = tuple(rng.sample(range(len(hosts)), per_trial))
            flows = sync_flows(pattern, placed, gradient_bytes)
            trials.append(TrialStage(slot, bracket.iterations(k), compute_s, flows, placed))
        stages.append(Stage(k, tuple(trials)))
    return Experiment(experiment_id, 0.0, tuple(stages), kind="hyperband", weight=weight)
