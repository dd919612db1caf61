"""``beamer tune`` runs: one Ray Tune HyperBand search per policy and seed, each on a
fresh emulated network, measured as Beamer stages.

Each run builds the network of :class:`bmv2_topos.launcher.EmulatedNetwork`
(namespaces, switches, the controller with the run's policy), starts the
search with :func:`tuner.scheduler.beamer_hyperband` and the trainable of
:mod:`tuner.trainable`, and takes the stage completion times the driver
measured (a rung's release to the last result of its last trial). The
search space is sampled with the seed, so every policy of a seed tunes the
same configurations; training is deterministic given a configuration, so
the promotions are the same too and the policies are compared on the same
stages. Ray is started once for all runs, on loopback, and removed at the end.
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bmv2_topos.agent import StageRecord
from bmv2_topos.emulate import (
    EmulationReport,
    RunKey,
    RunResult,
    alone_times,
    predicted_scts_s,
    topology_link_bps,
)
from bmv2_topos.launcher import (
    DEFAULT_CONGESTION_CONTROL,
    DEFAULT_QUEUE_DEPTH_PACKETS,
    DEFAULT_RTO_MIN_MS,
    EmulatedNetwork,
    TargetName,
)
from bmv2_topos.tcp_counters import counted_between, read_counters
from control.errors import UserError
from control.files import atomic_write_all_bytes, csv_bytes
from control.guard import directories_guarded
from control.model import Experiment, Workload
from control.topology import Topology
from tuner.contract import HostEndpoint, Pattern, TuneNetwork
from tuner.sampler import StatusSampler, SwitchSamples

if TYPE_CHECKING:
    from tuner.run_hooks import IterationRecord

METRIC = "validation_loss"
MODE = "min"
RUN_TIMEOUT_S = 900.0
"""A search that has not ended by then is stuck (e.g. a switch that stopped forwarding)."""
STALL_S = 120.0
"""No trial reported an iteration for this long: the search is stuck."""
RAY_CPUS = 2
ASSIGNMENT_TIMEOUT_S = 300.0
"""How long a started trial waits for the others before the search begins."""
SEARCH_NAME = "beamer-search"
"""Ray Tune's name of every search (a directory in the search's own temporary storage)."""


_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*")


def trial_error_line(error: BaseException) -> str:
    """One line for a failed trial: its exception's type and first line. The text of
    Ray's task error is the trial's whole traceback with colour codes; the exception
    that ended the trial is its ``cause``, or else the traceback's last line."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, BaseException):
        error = cause
    text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    lines = [line.strip() for line in _ANSI_ESCAPE.sub("", text).splitlines() if line.strip()]
    if len(lines) > 1:  # a traceback: the exception is on its last such line
        raised = [line for line in lines[1:] if _EXCEPTION_LINE.match(line)]
        if raised:
            return raised[-1]
    return lines[0]


def trial_cpus(trials: int) -> float:
    """Ray resources per trial: every trial of every bracket fits at once (a trial
    mostly waits on its all-reduce), as on a cluster with a GPU per trial."""
    return round(RAY_CPUS / trials, 4)


@dataclass(frozen=True, slots=True)
class TuneOptions:
    topology: Topology
    policies: tuple[str, ...]
    seeds: tuple[int, ...]
    queues: int = 8
    trials: int = 10
    max_t: int = 4
    reduction_factor: float = 2.0
    workers: int = 2
    pattern: Pattern = "ring"
    target: TargetName = "embedded"
    bmv2_json: Path | None = None
    p4info: Path | None = None
    queue_depth_packets: int | None = DEFAULT_QUEUE_DEPTH_PACKETS
    rto_min_ms: int = DEFAULT_RTO_MIN_MS
    congestion_control: str = DEFAULT_CONGESTION_CONTROL


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    """What the tuner decided in one run."""

    key: RunKey
    best_config: dict[str, Any]
    best_metric: float
    best_accuracy: float | None
    trials: int
    promotions: int
    stages_unfinished: int
    iterations: tuple[IterationRecord, ...] = ()
    origin_s: float = 0.0
    switch: SwitchSamples = field(default_factory=SwitchSamples)
    """What the switches held while the search ran (the controller's status, sampled)."""
    """``time.monotonic()`` of the first stage's release: time zero of the run's CSV files."""

    @property
    def mean_compute_s(self) -> float | None:
        values = [record.compute_s for record in self.iterations]
        return statistics.fmean(values) if values else None

    @property
    def mean_allreduce_s(self) -> float | None:
        values = [record.allreduce_s for record in self.iterations]
        return statistics.fmean(values) if values else None


TUNER_OUTPUT_NAMES = ("tuner.csv", "iterations.csv")
"""The files of :meth:`TuneReport.tuner_output_contents`."""


@dataclass
class TuneReport:
    emulation: EmulationReport = field(default_factory=EmulationReport)
    searches: list[SearchOutcome] = field(default_factory=list)

    def write_outputs(self, directory: Path) -> list[Path]:
        """The emulation's files (:data:`bmv2_topos.report.OUTPUT_NAMES`) and the tuner's
        in ``directory``, all six or none."""
        from bmv2_topos.report import output_contents

        contents = output_contents(self.emulation, directory) | self.tuner_output_contents(
            directory
        )
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write_all_bytes(contents)
        return list(contents)

    def tuner_output_contents(self, directory: Path) -> dict[Path, bytes]:
        """``tuner.csv`` and ``iterations.csv`` by path, written by the caller together
        with the emulation's files, all or none."""
        tuner = csv_bytes(
            [
                "policy",
                "seed",
                "trials",
                "promotions",
                METRIC,
                "validation_accuracy",
                "best_config",
            ],
            (
                [
                    search.key.policy,
                    search.key.seed,
                    search.trials,
                    search.promotions,
                    f"{search.best_metric:.6f}",
                    "" if search.best_accuracy is None else f"{search.best_accuracy:.4f}",
                    _config_text(search.best_config),
                ]
                for search in self.searches
            ),
        )
        iterations = csv_bytes(
            [
                "policy",
                "seed",
                "ray_trial_id",
                "experiment_id",
                "stage_id",
                "slot",
                "training_iteration",
                "compute_s",
                "allreduce_s",
                "sync_bytes",
                "reported_s",
            ],
            (
                [
                    search.key.policy,
                    search.key.seed,
                    record.ray_trial_id,
                    record.experiment_id,
                    record.stage_id,
                    record.slot,
                    record.iteration,
                    f"{record.compute_s:.6f}",
                    f"{record.allreduce_s:.6f}",
                    record.sync_bytes,
                    f"{record.reported_s - search.origin_s:.4f}",
                ]
                for search in self.searches
                for record in search.iterations
            ),
        )
        return dict(
            zip((directory / name for name in TUNER_OUTPUT_NAMES), (tuner, iterations), strict=True)
        )


Progress = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_searches(options: TuneOptions, progress: Progress = _stderr) -> TuneReport:
    """Every policy × seed, each on a fresh network, with one private Ray instance."""
    from sim.executors import start_local_ray, stop_local_ray

    # Training threads: one per worker is the parallelism a trial has; numpy's BLAS
    # pools on top would fight the software switch for the machine's cores.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # Ctrl-C ends the whole command (and removes the network), not just the search.
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    # Every trial is created at once (Ray Tune holds back pending trials past 16).
    os.environ["TUNE_MAX_PENDING_TRIALS_PG"] = str(max(options.trials, 16))
    report = TuneReport()
    progress("tune: starting a private Ray instance")
    start_local_ray(num_cpus=RAY_CPUS)
    try:
        compute_s = estimate_compute_s(options)
        for seed in options.seeds:
            for policy in options.policies:
                progress(f"tune: policy {policy}, seed {seed}: starting")
                result, outcome = run_search(options, policy, seed, compute_s)
                progress(
                    f"tune: policy {policy}, seed {seed}: {len(result.stages)} stages, "
                    f"average SCT {result.avg_sct_s:.2f} s ({result.wall_s:.1f} s wall); "
                    f"best {METRIC} {outcome.best_metric:.4f}"
                )
                report.emulation.runs.append(result)
                report.searches.append(outcome)
    finally:
        stop_local_ray()
    return report


def estimate_compute_s(options: TuneOptions) -> float:
    """One iteration's computation for the plan, measured here (median of 5)."""
    from tuner.training import DataParallelTraining, TrainingConfig

    training = DataParallelTraining(TrainingConfig(), options.workers)
    times = []
    for _ in range(5):
        started = time.perf_counter()
        training.compute()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def run_search(
    options: TuneOptions, policy: str, seed: int, compute_s: float
) -> tuple[RunResult, SearchOutcome]:
    """One HyperBand search on a fresh network with the controller running ``policy``."""
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    from tuner.run_hooks import IterationLog, Watchdog, warm_workers
    from tuner.scheduler import beamer_hyperband
    from tuner.trainable import beamer_trainable, model_bytes, search_space

    topology = options.topology
    warm_workers(options.trials, trial_cpus(options.trials))
    started = time.monotonic()
    with (
        EmulatedNetwork.for_run(options, policy) as network,
        tempfile.TemporaryDirectory(prefix="beamer-tune-") as storage,
        directories_guarded(storage),
    ):
        tune_network = TuneNetwork(
            hosts={
                host.name: HostEndpoint(network.host_namespace(host.name), str(host.ip))
                for host in topology.hosts
            },
            assignments_dir=str(network.run_dir / "assignments"),
            events_socket=str(network.events_socket),
            pattern=options.pattern,
            workers=options.workers,
        )
        scheduler, callback = beamer_hyperband(
            controller=str(network.events_socket),
            max_t=options.max_t,
            num_samples=options.trials,
            hosts=[host.name for host in topology.hosts],
            gradient_bytes=model_bytes(tune_network),
            compute_s=compute_s,
            assignments_dir=tune_network.assignments_dir,
            reduction_factor=options.reduction_factor,
            workers=options.workers,
            pattern=options.pattern,
            seed=seed,
            metric=METRIC,
            mode=MODE,
            gang_start=True,
        )
        iteration_log = IterationLog()
        deadline = time.monotonic() + RUN_TIMEOUT_S
        failure: list[BaseException] = []

        def stop_all() -> bool:
            try:
                network.check_processes(controller_required=True)
                now = time.monotonic()
                if now - iteration_log.last_progress_s > STALL_S:
                    raise UserError(
                        f"tune: the search of {policy} (seed {seed}) made no progress for "
                        f"{STALL_S:g} s (no trial reported an iteration)"
                    )
                if now > deadline:
                    raise UserError(
                        f"tune: the search of {policy} (seed {seed}) did not end in "
                        f"{RUN_TIMEOUT_S:g} s"
                    )
            except BaseException as error:  # reported after fit() returns
                failure.append(error)
                return True
            return False

        tuner = tune.Tuner(
            tune.with_resources(
                tune.with_parameters(
                    beamer_trainable,
                    network=tune_network,
                    assignment_timeout_s=ASSIGNMENT_TIMEOUT_S,
                ),
                {"cpu": trial_cpus(options.trials)},
            ),
            param_space=search_space(),
            tune_config=tune.TuneConfig(
                scheduler=scheduler,
                num_samples=options.trials,
                search_alg=BasicVariantGenerator(random_state=seed),
                reuse_actors=True,
            ),
            run_config=tune.RunConfig(
                # Not the policy or the seed: a name becomes a directory, and a long one
                # (a seed of 250 digits) is more than a file name may hold. The storage
                # is this search's own, so a fixed name is unique.
                name=SEARCH_NAME,
                storage_path=storage,
                callbacks=[callback, iteration_log],
                stop=Watchdog(stop_all),
                verbose=0,
            ),
        )
        namespaces = [network.host_namespace(host.name) for host in topology.hosts]
        counted_before = read_counters(namespaces)
        with StatusSampler(str(network.events_socket)) as sampler:
            try:
                grid = tuner.fit()
            finally:
                callback.close()
        tcp = counted_between(counted_before, read_counters(namespaces))
        if failure:
            raise failure[0]
        if grid.errors:
            raise UserError(
                f"tune: {len(grid.errors)} trial(s) failed; the first: "
                f"{trial_error_line(grid.errors[0])}"
            )
        best = grid.get_best_result(metric=METRIC, mode=MODE, scope="all")
        timings = callback.stage_timings()
        promotions = callback.promotions()
        controller_lost = network.controller_exited()
    origin = min(timing.released_s for timing in timings)
    stages = [
        StageRecord(t.experiment_id, t.stage_id, t.released_s - origin, t.completed_s - origin)
        for t in timings
        if t.completed_s is not None
    ]
    workload = _executed_workload(callback.driver.experiments(), timings, origin, topology)
    result = RunResult(
        key=RunKey(policy, seed),
        stages=stages,
        alone_s=alone_times(workload),
        wall_s=time.monotonic() - started,
        predicted_sct_s=predicted_scts_s(workload, policy, options.queues),
        coflows=sum(t.ran * t.iterations for t in timings if t.completed_s is not None),
        controller_lost=controller_lost,
        tcp=tcp,
    )
    metrics = best.metrics or {}
    outcome = SearchOutcome(
        key=RunKey(policy, seed),
        best_config={k: v for k, v in (best.config or {}).items()},
        best_metric=float(metrics.get(METRIC, float("nan"))),
        best_accuracy=(
            float(metrics["validation_accuracy"]) if "validation_accuracy" in metrics else None
        ),
        trials=len(grid),
        promotions=len(promotions),
        stages_unfinished=sum(t.completed_s is None for t in timings),
        iterations=tuple(iteration_log.records),
        origin_s=origin,
        switch=sampler.result,
    )
    return result, outcome


def _executed_workload(
    experiments: list[Experiment], timings: list[Any], origin: float, topology: Topology
) -> Workload:
    """The brackets as they ran, released when their first rung was, for the simulator."""
    first_release = {t.experiment_id: t.released_s - origin for t in timings if t.stage_id == 0}
    ran = [
        replace(experiment, arrival_s=first_release[experiment.experiment_id])
        for experiment in experiments
        if experiment.experiment_id in first_release
    ]
    return Workload(
        experiments=tuple(ran),
        num_hosts=len(topology.hosts),
        link_bps=topology_link_bps(topology),
    )


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _config_text(config: Mapping[str, Any]) -> str:
    return " ".join(
        f"{name}={value:.4g}" if isinstance(value, float) else f"{name}={value}"
        for name, value in sorted(config.items())
    )


def tuner_table(report: TuneReport) -> str:
    """The tuner's decisions per run: its best configuration and metric."""
    header = (
        f"{'policy':<12} {'seed':>4} {'trials':>6} {'promoted':>8} {'classes':>7} "
        f"{'compute s':>9} {'allreduce s':>11} {'best loss':>10}  best config"
    )
    lines = [header, "-" * len(header)]
    for search in report.searches:
        lines.append(
            f"{search.key.policy:<12} {search.key.seed:>4} {search.trials:>6} "
            f"{search.promotions:>8} {len(search.switch.classes):>7} "
            f"{_fmt(search.mean_compute_s):>9} "
            f"{_fmt(search.mean_allreduce_s):>11} {search.best_metric:>10.4f}  "
            f"{_config_text(search.best_config)}"
        )
    return "\n".join(lines)


def summary_json(report: TuneReport) -> dict[str, Any]:
    from bmv2_topos.report import summary

    result: dict[str, Any] = {"stages": summary(report.emulation), "tuner": []}
    for search in report.searches:
        result["tuner"].append(
            {
                "policy": search.key.policy,
                "seed": search.key.seed,
                "trials": search.trials,
                "promotions": search.promotions,
                METRIC: search.best_metric,
                "validation_accuracy": search.best_accuracy,
                "best_config": search.best_config,
                "events_applied": search.switch.events_applied,
                "max_class_entries": search.switch.max_entries,
                "classes_used": sorted(search.switch.classes),
            }
        )
    return result
