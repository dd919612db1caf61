"""Hyper-parameter tuning workload: successive-halving runs and Hyperband brackets.

A *job* is one tuning run submitted by a user: either one successive-halving
run (SHA, Jamieson & Talwalkar, AISTATS 2016) or one Hyperband run (Li et al.,
JMLR 18(185), 2018), which is a set of independent brackets submitted
together. Every SHA run and every bracket becomes one
:class:`~control.model.Experiment` whose stages are the halving rounds.

With maximum budget R and reduction factor η: s_max = ⌊log_η R⌋; bracket
s ∈ {s_max, …, 0} starts n = ⌈(s_max+1)·η^s/(s+1)⌉ trials at budget
r = R·η^(−s) (Li et al., Algorithm 1, with B = (s_max+1)·R; for R = 81, η = 3
this gives the paper's brackets of 81, 34, 15, 8 and 5 trials); its stage
i ∈ {0, …, s} runs n_i = ⌊n·η^(−i)⌋ trials for r_i = r·η^i budget units each,
and keeps the best ⌊n_i/η⌋ for stage i+1. An SHA run is the most exploratory
bracket, s = s_max (n = η^s_max trials at budget R·η^(−s_max)). Which trials
are "best" is drawn by the seed: the network workload does not depend on the
learning curves, only on how many trials survive. A promoted trial keeps its
id and its hosts.

The remaining modelling rules are documented in ``workloads/FORMAT.md``
(section "HP-tuning generator") and on :class:`HpTuningConfig`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from control.errors import UserError
from control.model import Experiment, Flow, Stage, TrialStage, Workload
from workloads import json_format
from workloads.limits import (
    MAX_COFLOW_HOSTS,
    MAX_COFLOWS,
    MAX_FLOW_BYTES,
    MAX_FLOWS,
    MAX_HOSTS,
    MAX_ITERATIONS,
    MAX_JOBS,
    MAX_LINK_BPS,
    MAX_TIME_S,
    MIN_LINK_BPS,
    SettingError,
    max_coflows,
)
from workloads.models import MODELS, DlModel, get_model

Pattern = Literal["ring", "ps"]
JobKind = Literal["sha", "hyperband"]

MAX_ID = 0xFFFF
"""Experiment and trial ids travel in 16-bit fields of the Beamer tag."""


@dataclass(frozen=True, slots=True)
class JobShape:
    """What a tuning job runs: SHA or Hyperband with maximum budget R and reduction η."""

    kind: JobKind
    max_budget: int
    eta: int

    def __post_init__(self) -> None:
        if self.kind not in ("sha", "hyperband"):
            raise UserError(f"job kind must be 'sha' or 'hyperband', not {self.kind!r}")
        if self.eta < 2:
            raise UserError(f"reduction factor eta must be >= 2, not {self.eta}")
        if self.max_budget < 1:
            raise UserError(f"maximum budget R must be >= 1, not {self.max_budget}")


@dataclass(frozen=True, slots=True)
class StagePlan:
    """One halving round: ``trials`` trials each get ``budget`` units (r_i, may be a fraction)."""

    trials: int
    budget: Fraction


DEFAULT_JOBS: tuple[JobShape, ...] = (
    # The fluid model behind the design used SHA with 8 trials, η = 2 and wider stages
    # with 16 trials, η = 4; Hyperband with η = 3 is the setting of Li et al.
    JobShape("sha", max_budget=8, eta=2),
    JobShape("sha", max_budget=16, eta=4),
    JobShape("hyperband", max_budget=9, eta=3),
    JobShape("hyperband", max_budget=8, eta=2),
)


@dataclass(frozen=True, slots=True)
class HpTuningConfig:
    """Everything that shapes a generated HP-tuning workload (same config → same workload).

    Defaults, and why:

    * 16 hosts at 10 Gbit/s: a small shared GPU cluster on commodity 10 GbE, where
      one VGG-16 ring synchronisation (about 0.8 GB per worker) takes longer
      than its iteration's compute, so network scheduling matters.
    * ``load`` 0.8: offered bytes per second over the hosts' total uplink
      capacity (see :func:`arrival_rate_per_s`).
    * 12 jobs drawn uniformly from :data:`DEFAULT_JOBS` (SHA runs and Hyperband
      brackets of mixed shapes): about 1,900 coflows with the default
      ``iterations_per_unit`` of 2.
    * every model of :data:`workloads.models.MODELS`, 2, 4 or 8 workers per trial,
      ring all-reduce or a parameter server, all drawn uniformly per job.
    * ``iterations_per_unit``: one budget unit is this many synchronised
      iterations. Real tuning spends hundreds of iterations per unit; a small
      number keeps the stage structure (barriers, relative stage sizes) while a
      run stays at a few thousand coflows.
    * ``bytes_scale`` multiplies every synchronisation size, ``time_scale``
      every compute time; arrivals always follow from ``load``. :func:`shrink`
      sets both so that a run keeps its shape on slower links.
    """

    seed: int = 1
    num_hosts: int = 16
    link_bps: float = 10e9
    load: float = 0.8
    num_jobs: int = 12
    jobs: tuple[JobShape, ...] = DEFAULT_JOBS
    models: tuple[str, ...] = field(default_factory=lambda: tuple(MODELS))
    workers: tuple[int, ...] = (2, 4, 8)
    patterns: tuple[Pattern, ...] = ("ring", "ps")
    iterations_per_unit: int = 2
    bytes_scale: float = 1.0
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        if not 2 <= self.num_hosts <= MAX_HOSTS:
            raise SettingError("num_hosts", f"must be 2..{MAX_HOSTS}, not {self.num_hosts}")
        _require_positive("link_bps", self.link_bps)
        if not MIN_LINK_BPS <= self.link_bps <= MAX_LINK_BPS:
            raise SettingError(
                "link_bps",
                f"{self.link_bps:g} bit/s is outside {MIN_LINK_BPS:g}..{MAX_LINK_BPS:g} bit/s",
            )
        _require_positive("load", self.load)
        _require_positive("bytes_scale", self.bytes_scale)
        _require_positive("time_scale", self.time_scale)
        if not 1 <= self.num_jobs <= MAX_JOBS:
            raise SettingError("num_jobs", f"must be 1..{MAX_JOBS}, not {self.num_jobs}")
        if not 1 <= self.iterations_per_unit <= MAX_ITERATIONS:
            raise SettingError(
                "iterations_per_unit",
                f"must be 1..{MAX_ITERATIONS}, not {self.iterations_per_unit}",
            )
        if not self.jobs or not self.models or not self.workers or not self.patterns:
            raise UserError("jobs, models, workers and patterns must each list at least one choice")
        for name in self.models:
            get_model(name)
        for pattern in self.patterns:
            if pattern not in ("ring", "ps"):
                raise UserError(f"pattern must be 'ring' or 'ps', not {pattern!r}")
        for workers in self.workers:
            if workers < 2:
                raise SettingError(
                    "workers", f"{workers} per trial, fewer than the 2 a trial needs"
                )
            # The bound of the pattern that needs most: a parameter server is one more host.
            server = "ps" in self.patterns
            hosts_needed = workers + server
            if hosts_needed > self.num_hosts:
                whom = f"{workers} workers per trial" + (
                    " and a parameter server" if server else ""
                )
                raise SettingError(
                    "num_hosts",
                    f"{whom} need {hosts_needed} distinct hosts, more than the "
                    f"{self.num_hosts} hosts",
                )
        _check_sizes(self)


def _require_positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise SettingError(name, f"must be a positive number, not {value}")


def shrink(config: HpTuningConfig, *, link_bps: float, time_scale: float) -> HpTuningConfig:
    """The same workload on ``link_bps`` links with every duration multiplied by ``time_scale``.

    Bytes shrink by ``time_scale × link_bps / config.link_bps`` so a transfer
    alone takes ``time_scale`` × its original time; compute times shrink by
    ``time_scale``; the load (hence arrival gaps, which scale likewise) is kept.
    The random draws do not depend on the scales, so structure and placement
    are identical.
    """
    changes = shrink_changes(config, link_bps, time_scale)
    return dataclasses.replace(
        config,
        link_bps=changes["link_bps"],
        bytes_scale=changes["bytes_scale"],
        time_scale=changes["time_scale"],
    )


def shrink_changes(config: HpTuningConfig, link_bps: float, time_scale: float) -> dict[str, float]:
    """The fields :func:`shrink` changes, to be set together with others in one step."""
    _require_positive("link_bps", link_bps)
    _require_positive("time_scale", time_scale)
    changes = {
        "link_bps": link_bps,
        "bytes_scale": config.bytes_scale * time_scale * link_bps / config.link_bps,
        "time_scale": config.time_scale * time_scale,
    }
    for name in ("bytes_scale", "time_scale"):
        if changes[name] == math.inf:  # each factor finite, their product not
            what = name.removesuffix("_scale")
            raise SettingError(
                "time_scale", f"{time_scale:g} scales the workload's {what} beyond any number"
            )
    return changes


def max_bracket(max_budget: int, eta: int) -> int:
    """s_max = ⌊log_η R⌋, in integers (floating logs misround exact powers)."""
    s_max = 0
    while eta ** (s_max + 1) <= max_budget:
        s_max += 1
    return s_max


def bracket_plan(max_budget: int, eta: int, s: int) -> tuple[StagePlan, ...]:
    """The stages of Hyperband bracket ``s``: n_i trials at r_i budget units, i = 0..s."""
    s_max = max_bracket(max_budget, eta)
    if not 0 <= s <= s_max:
        raise UserError(f"bracket s={s} outside 0..{s_max} for R={max_budget}, eta={eta}")
    n = -(-((s_max + 1) * eta**s) // (s + 1))  # ⌈(s_max+1)·η^s/(s+1)⌉ in integers
    r = Fraction(max_budget, eta**s)
    return tuple(StagePlan(trials=n // eta**i, budget=r * eta**i) for i in range(s + 1))


def job_brackets(shape: JobShape) -> tuple[int, ...]:
    """Brackets a job runs: SHA runs s_max only, Hyperband all of s_max..0."""
    s_max = max_bracket(shape.max_budget, shape.eta)
    return (s_max,) if shape.kind == "sha" else tuple(range(s_max, -1, -1))


def iterations_for(budget: Fraction, iterations_per_unit: int) -> int:
    """Iterations for a budget: the nearest whole number (halves up), at least one."""
    return max(1, math.floor(budget * iterations_per_unit + Fraction(1, 2)))


def sync_flows(pattern: Pattern, hosts: Sequence[int], model_bytes: int) -> tuple[Flow, ...]:
    """One iteration's synchronisation.

    ``ring``: all-reduce on the ring ``hosts`` in order; each worker sends
    2(w−1)/w × model bytes to its successor (reduce-scatter then all-gather).
    ``ps``: ``hosts[0]`` is the parameter server; every worker pushes its
    gradients (model bytes) to it and pulls the updated model back.
    """
    if pattern == "ring":
        w = len(hosts)
        size = round(2 * (w - 1) * model_bytes / w)
        return tuple(Flow(hosts[k], hosts[(k + 1) % w], size) for k in range(w))
    server, workers = hosts[0], hosts[1:]
    pushes = tuple(Flow(worker, server, model_bytes) for worker in workers)
    pulls = tuple(Flow(server, worker, model_bytes) for worker in workers)
    return pushes + pulls


@dataclass(frozen=True, slots=True)
class JobSize:
    """What one job of a shape holds, whatever the draws: it depends on R, η and the
    iterations per budget unit only (which trials survive is drawn, how many is not)."""

    experiments: int
    trial_stages: int
    coflows: int
    most_iterations: int


@functools.lru_cache(maxsize=256)
def job_size(shape: JobShape, iterations_per_unit: int) -> JobSize:
    """The :class:`JobSize` of ``shape``, from its bracket plans (nothing is built)."""
    brackets = job_brackets(shape)
    trial_stages = coflows = most_iterations = 0
    for s in brackets:
        for step in bracket_plan(shape.max_budget, shape.eta, s):
            iterations = iterations_for(step.budget, iterations_per_unit)
            trial_stages += step.trials
            coflows += step.trials * iterations
            most_iterations = max(most_iterations, iterations)
    return JobSize(len(brackets), trial_stages, coflows, most_iterations)


def _model_bytes(model: DlModel, bytes_scale: float) -> int:
    return max(1, round(model.sync_bytes * bytes_scale))


def _shape_name(shape: JobShape) -> str:
    run = "an SHA run" if shape.kind == "sha" else "a Hyperband run"
    return f"{run} (R={shape.max_budget}, eta={shape.eta})"


def _check_sizes(config: HpTuningConfig) -> None:
    """Refuse, before anything is drawn or built, a configuration whose every workload
    would break a limit of :mod:`workloads.limits` (what only some draws would break
    is refused while drawing, see :func:`generate`)."""
    for shape in config.jobs:
        # The widest bracket is s_max's, η^s_max trials: checked first, in O(log R),
        # so that the plans below are short even for an R of a hundred digits.
        widest = shape.eta ** max_bracket(shape.max_budget, shape.eta)
        if widest - 1 > MAX_ID:
            raise SettingError(
                "jobs",
                f"{_shape_name(shape)} starts a bracket of {widest:,} trials, more "
                f"than the {MAX_ID + 1:,} that 16-bit trial ids number",
            )
    sizes = {shape: job_size(shape, config.iterations_per_unit) for shape in config.jobs}
    for shape, size in sizes.items():
        if size.most_iterations > MAX_ITERATIONS:
            raise SettingError(
                "jobs",
                f"{_shape_name(shape)} runs a trial for {size.most_iterations:,} iterations "
                f"in one stage, above the limit of {MAX_ITERATIONS:,}",
            )
        if size.coflows > MAX_COFLOWS:
            raise SettingError(
                "jobs",
                f"{_shape_name(shape)} alone holds {size.coflows:,} coflows (trials × "
                f"iterations), above the limit of {MAX_COFLOWS:,} for a workload",
            )
    flows_per_iteration = [
        _flows_per_iteration(pattern, workers)
        for pattern in config.patterns
        for workers in config.workers
    ]
    fewest = min(sizes.values(), key=lambda size: size.coflows)
    least_flows = min(size.trial_stages for size in sizes.values()) * min(flows_per_iteration)
    least_experiments = min(size.experiments for size in sizes.values())
    for what, count, limit in (
        ("coflows (trials × iterations)", fewest.coflows, max_coflows(config.num_hosts)),
        ("synchronisation flows", least_flows, MAX_FLOWS),
        ("experiments (SHA runs and brackets)", least_experiments, MAX_ID + 1),
    ):
        if config.num_jobs * count > limit:
            raise SettingError(
                "num_jobs",
                f"{config.num_jobs:,} jobs hold at least {config.num_jobs * count:,} {what}, "
                f"above the limit of {limit:,}{_on_hosts(config, limit)}",
            )
    slowest = max((get_model(name) for name in config.models), key=lambda m: m.compute_s)
    compute_s = slowest.compute_s * config.time_scale
    if compute_s > MAX_TIME_S:
        raise SettingError(
            "time_scale",
            f"{config.time_scale:g} makes one {slowest.name} iteration compute {compute_s:.3g} s, "
            f"above the limit of {MAX_TIME_S:g} s",
        )
    largest = max(
        max(flow.size_bytes for flow in sync_flows(pattern, range(workers + 1), model_bytes))
        for model_bytes in {_model_bytes(get_model(n), config.bytes_scale) for n in config.models}
        for pattern in config.patterns
        for workers in config.workers
    )
    lightest = min((get_model(name) for name in config.models), key=lambda m: m.sync_bytes)
    if lightest.sync_bytes * config.bytes_scale < 1:
        # Every flow of it would be rounded up to one byte: the shape would be gone.
        raise SettingError(
            "bytes_scale",
            f"{config.bytes_scale:g} shrinks a whole {lightest.name} synchronisation "
            f"({lightest.sync_bytes:,} bytes) below one byte",
        )
    transfer_s = largest * 8 / config.link_bps
    if largest > MAX_FLOW_BYTES or transfer_s > MAX_TIME_S:
        raise SettingError(
            "bytes_scale",
            f"{config.bytes_scale:g} makes a synchronisation flow of {largest:,} bytes "
            f"({transfer_s:.3g} s alone on a link of {config.link_bps:g} bit/s), above the "
            f"limits of {MAX_FLOW_BYTES:g} bytes and {MAX_TIME_S:g} s",
        )
    if config.num_jobs > 1:
        # Arrivals span (K−1)/λ (see generate), and λ falls as the mean bytes per job
        # grow: even jobs of the fewest bytes must arrive within the limit.
        least_bytes = fewest.coflows * min(
            sum(flow.size_bytes for flow in sync_flows(pattern, range(workers + 1), model_bytes))
            for model_bytes in {
                _model_bytes(get_model(n), config.bytes_scale) for n in config.models
            }
            for pattern in config.patterns
            for workers in config.workers
        )
        span_s = _arrival_span_s(config, least_bytes)
        if not span_s <= MAX_TIME_S:
            raise SettingError("load", _arrivals_too_late(config, span_s))


def _arrival_span_s(config: HpTuningConfig, mean_job_bytes: float) -> float:
    """(K−1)/λ, the span of the arrivals (inf rather than a division by zero)."""
    capacity_bytes_per_s = config.num_hosts * config.link_bps / 8
    return (config.num_jobs - 1) * mean_job_bytes / capacity_bytes_per_s / config.load


def _arrivals_too_late(config: HpTuningConfig, span_s: float) -> str:
    return (
        f"{config.load:g} spreads the {config.num_jobs:,} jobs' arrivals over {span_s:.3g} s, "
        f"above the limit of {MAX_TIME_S:g} s (the gaps grow as the load falls and as "
        "the transfers lengthen)"
    )


def _flows_per_iteration(pattern: Pattern, workers: int) -> int:
    return workers if pattern == "ring" else 2 * workers


@dataclass(frozen=True, slots=True)
class _JobDraw:
    """The random choices of one job, made before arrival times are known."""

    shape: JobShape
    model: DlModel
    workers: int
    pattern: Pattern
    brackets: tuple[tuple[int, tuple[Stage, ...]], ...]

    @property
    def total_bytes(self) -> int:
        return sum(stage.total_bytes for _, stages in self.brackets for stage in stages)


def _draw_bracket(
    rng: random.Random, config: HpTuningConfig, job: tuple[JobShape, DlModel, int, Pattern], s: int
) -> tuple[Stage, ...]:
    shape, model, workers, pattern = job
    plan = bracket_plan(shape.max_budget, shape.eta, s)
    if plan[0].trials - 1 > MAX_ID:  # refused by HpTuningConfig already; nothing built yet
        raise UserError(f"bracket with {plan[0].trials} trials exceeds 16-bit trial ids")
    model_bytes = _model_bytes(model, config.bytes_scale)
    compute_s = model.compute_s * config.time_scale
    hosts_per_trial = workers + (1 if pattern == "ps" else 0)
    # Placement: each trial's hosts are drawn uniformly without replacement
    # (for "ps" the first one is the server); trials share hosts freely.
    hosts = {
        trial_id: tuple(rng.sample(range(config.num_hosts), hosts_per_trial))
        for trial_id in range(plan[0].trials)
    }
    flows = {trial_id: sync_flows(pattern, h, model_bytes) for trial_id, h in hosts.items()}
    running = list(range(plan[0].trials))
    stages = []
    for stage_id, step in enumerate(plan):
        iterations = iterations_for(step.budget, config.iterations_per_unit)
        trials = tuple(
            TrialStage(trial_id, iterations, compute_s, flows[trial_id], hosts[trial_id])
            for trial_id in running
        )
        stages.append(Stage(stage_id, trials))
        if stage_id + 1 < len(plan):
            running = sorted(rng.sample(running, plan[stage_id + 1].trials))
    return tuple(stages)


def _draw_job(rng: random.Random, config: HpTuningConfig) -> _JobDraw:
    shape = rng.choice(config.jobs)
    model = get_model(rng.choice(config.models))
    workers = rng.choice(config.workers)
    pattern = rng.choice(config.patterns)
    job = (shape, model, workers, pattern)
    brackets = tuple((s, _draw_bracket(rng, config, job, s)) for s in job_brackets(shape))
    return _JobDraw(shape, model, workers, pattern, brackets)


def arrival_rate_per_s(config: HpTuningConfig, mean_job_bytes: float) -> float:
    """Poisson job arrival rate λ giving offered load ``config.load``.

    offered load = λ × E[bytes per job] × 8 / (num_hosts × link_bps): bytes
    offered per second over the total host link capacity. Every byte leaves
    through one host uplink and enters through one downlink, so this is the
    average utilisation of the uplinks (and of the downlinks) once all is carried.
    """
    capacity_bytes_per_s = config.num_hosts * config.link_bps / 8
    return config.load * capacity_bytes_per_s / mean_job_bytes


def generate(config: HpTuningConfig | None = None) -> Workload:
    """A seeded HP-tuning workload; the same config always gives the same workload.

    A configuration whose workload would break a limit of :mod:`workloads.limits`
    is a :class:`~workloads.limits.SettingError` naming the setting: what every
    draw would break is refused before anything is drawn (:class:`HpTuningConfig`),
    what these draws break while drawing (so memory stays bounded), and the
    finished workload passes the JSON reader's own checks
    (:func:`workloads.json_format.check`) before it is returned.
    """
    config = config or HpTuningConfig()
    rng = random.Random(config.seed)
    draws: list[_JobDraw] = []
    sizes = {shape: job_size(shape, config.iterations_per_unit) for shape in config.jobs}
    totals = {"coflows": 0, "flows": 0, "experiments": 0}
    for _ in range(config.num_jobs):
        draw = _draw_job(rng, config)
        draws.append(draw)
        size = sizes[draw.shape]
        totals["coflows"] += size.coflows
        totals["flows"] += size.trial_stages * _flows_per_iteration(draw.pattern, draw.workers)
        totals["experiments"] += size.experiments
        for what, limit in (
            ("coflows", max_coflows(config.num_hosts)),
            ("flows", MAX_FLOWS),
            ("experiments", MAX_ID + 1),
        ):
            if totals[what] > limit:
                raise SettingError(
                    "num_jobs",
                    f"the first {len(draws):,} of {config.num_jobs:,} jobs drawn with seed "
                    f"{config.seed} already hold {totals[what]:,} {_WHAT[what]}, above the "
                    f"limit of {limit:,}{_on_hosts(config, limit)}",
                )
    # Poisson arrivals conditioned on the window: the first job arrives at 0 and
    # the K−1 exponential gaps are normalised to span exactly (K−1)/λ. Given
    # their number, Poisson arrivals in a window are uniformly spread, which the
    # normalised gaps reproduce; it removes the ±30 % load noise that a dozen
    # unconditioned arrivals carry. Gaps are drawn independently of the scales.
    unit_gaps = [rng.expovariate(1.0) for _ in range(config.num_jobs - 1)]
    mean_job_bytes = sum(draw.total_bytes for draw in draws) / len(draws)
    span_s = _arrival_span_s(config, mean_job_bytes)
    if not span_s <= MAX_TIME_S:
        raise SettingError("load", _arrivals_too_late(config, span_s))
    rate_per_s = arrival_rate_per_s(config, mean_job_bytes)
    gap_sum = sum(unit_gaps)
    gaps_s = [0.0] + [gap / gap_sum * len(unit_gaps) / rate_per_s for gap in unit_gaps]
    experiments: list[Experiment] = []
    jobs: list[dict[str, object]] = []
    arrival_s = 0.0
    for draw, gap_s in zip(draws, gaps_s, strict=True):
        arrival_s += gap_s
        first_id = len(experiments)
        for _, stages in draw.brackets:
            experiments.append(Experiment(len(experiments), arrival_s, stages, draw.shape.kind))
        jobs.append(
            {
                "experiments": list(range(first_id, len(experiments))),
                "brackets": [s for s, _ in draw.brackets],
                "kind": draw.shape.kind,
                "max_budget": draw.shape.max_budget,
                "eta": draw.shape.eta,
                "model": draw.model.name,
                "workers": draw.workers,
                "pattern": draw.pattern,
            }
        )
    # meta records how the workload was made; it does not change what runs.
    meta = {
        "generator": "hp-tuning",
        "seed": str(config.seed),
        "load": repr(config.load),
        "config": json.dumps(dataclasses.asdict(config), sort_keys=True),
        "jobs": json.dumps(jobs),
    }
    workload = Workload(config.num_hosts, config.link_bps, tuple(experiments), meta)
    _check_written_form(workload)
    return workload


_WHAT = {
    "coflows": "coflows (trials × iterations)",
    "flows": "synchronisation flows",
    "experiments": "experiments (SHA runs and brackets)",
}

_SETTING_OF_FIELD = {
    "link_bps": "link_bps",
    "num_hosts": "num_hosts",
    "arrival_s": "load",
    "compute_s": "time_scale",
    "iterations": "jobs",
    "trial_id": "jobs",
}


def _check_written_form(workload: Workload) -> None:
    """The JSON reader's checks on the workload, the setting to blame named.

    The checks before and while drawing should leave nothing for these to find;
    they are what guarantees that ``beamer workload generate`` never writes a
    file that ``beamer workload show`` refuses.
    """
    try:
        json_format.check(workload)
    except json_format.InvalidWorkload as invalid:
        names = [step for step in invalid.path if isinstance(step, str)]
        if "sync_flows" in names:
            setting = "bytes_scale"
        else:
            setting = _SETTING_OF_FIELD.get(names[-1] if names else "", "num_jobs")
        raise SettingError(setting, f"the workload would be refused: {invalid}") from None


def _on_hosts(config: HpTuningConfig, limit: int) -> str:
    """Why a coflow limit is lower than MAX_COFLOWS: the hosts (see :data:`MAX_COFLOW_HOSTS`)."""
    if limit >= MAX_COFLOWS or limit != max_coflows(config.num_hosts):
        return ""
    return f" on {config.num_hosts:,} hosts (coflows × hosts at most {MAX_COFLOW_HOSTS:,})"
