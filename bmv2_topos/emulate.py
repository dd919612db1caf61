"""Emulation runs: one HP-tuning workload, once per policy and seed, on real packets.

Each run gets a fresh network (:class:`bmv2_topos.launcher.EmulatedNetwork`:
namespaces, switches, controller with the run's policy), the host agents run
the workload (:mod:`bmv2_topos.agent`), and the measured stage completion
times (SCT) are set against the flow-level simulator's prediction for the
same workload, policy and number of classes.

Emulation scale. The default workload is the project's HP-tuning generator
with the cluster shrunk to fit a software switch: the topology's hosts,
``EMULATION_JOBS`` tuning jobs, one synchronised iteration per budget unit,
2 or 4 workers per trial. :func:`workloads.hp_tuning.shrink` then maps it
from 10 Gbit/s onto the topology's link rate: bytes shrink with the rate and
``time_scale``, compute times with ``time_scale``, so the run keeps the
shape (stage structure, load, compute/communication ratio) of the full-scale
workload; with ``time_scale`` 0.6 a run lasts 20–40 s on the default topology.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import math
import resource
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bmv2_topos.agent import (
    ControllerOptional,
    EventSink,
    HostAddress,
    RunRecord,
    StageRecord,
    run_workload,
)
from bmv2_topos.launcher import (
    DEFAULT_CONGESTION_CONTROL,
    DEFAULT_QUEUE_DEPTH_PACKETS,
    DEFAULT_RTO_MIN_MS,
    EmulatedNetwork,
    TargetName,
)
from bmv2_topos.tcp_counters import TcpCounters, counted_between, read_counters
from control.errors import UserError
from control.model import Experiment, Stage, Workload
from control.topology import Topology

EMULATION_JOBS = 3
EMULATION_WORKERS = (2, 4)
EMULATION_ITERATIONS_PER_UNIT = 1
DEFAULT_TIME_SCALE = 0.6
RUN_TIMEOUT_S = 180.0
"""A run that has not finished by then is stuck (e.g. a switch that stopped forwarding)."""
MIN_ITERATION_S = 0.5e-3
"""Less than any synchronisation can take: a controller event and a round trip through a
software switch each take longer, so iterations × this bounds a trial from below."""
FILE_MARGIN = 64
"""Open files the command needs besides the agents' sockets (controller socket, logs,
namespace handles, libraries)."""


@dataclass(frozen=True, slots=True)
class RunKey:
    policy: str
    seed: int


@dataclass
class RunResult:
    """One policy × seed: measured stages plus the simulator's prediction."""

    key: RunKey
    stages: list[StageRecord]
    alone_s: dict[tuple[int, int], float]
    wall_s: float
    predicted_sct_s: dict[tuple[int, int], float] | None = None
    """The simulator's SCT of each stage (experiment id, stage id); None: no simulator."""
    coflows: int = 0
    controller_lost: bool = False
    tcp: TcpCounters | None = None
    """The hosts' retransmission timeouts and retransmitted segments during the workload."""

    @property
    def scts_s(self) -> list[float]:
        return [stage.sct_s for stage in self.stages]

    @property
    def avg_sct_s(self) -> float:
        return statistics.fmean(self.scts_s)

    @property
    def p95_sct_s(self) -> float:
        return percentile(self.scts_s, 95)

    @property
    def avg_slowdown(self) -> float:
        return statistics.fmean(
            stage.sct_s / self.alone_s[stage.experiment_id, stage.stage_id] for stage in self.stages
        )

    @property
    def predicted_avg_sct_s(self) -> float | None:
        if not self.predicted_sct_s:
            return None
        return statistics.fmean(self.predicted_sct_s.values())

    @property
    def emu_over_sim(self) -> float | None:
        if self.predicted_avg_sct_s is None or self.predicted_avg_sct_s <= 0:
            return None
        return self.avg_sct_s / self.predicted_avg_sct_s


@dataclass
class EmulationReport:
    runs: list[RunResult] = field(default_factory=list)

    def policies(self) -> list[str]:
        return list(dict.fromkeys(run.key.policy for run in self.runs))

    def of(self, policy: str) -> list[RunResult]:
        return [run for run in self.runs if run.key.policy == policy]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation: a value that was measured)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


# --- workload -------------------------------------------------------------------------


def topology_link_bps(topology: Topology) -> float:
    """The host links' rate: the emulated workload is scaled to it."""
    rates = {topology.host_link(host.name).rate_mbps for host in topology.hosts}
    if None in rates or len(rates) != 1:
        raise UserError(
            f"{topology.source}: emulation needs every host link shaped at one rate_mbps "
            f"(found {sorted(str(r) for r in rates)})"
        )
    rate = next(iter(rates))
    assert rate is not None
    return rate * 1e6


def emulation_workload(
    spec: str, topology: Topology, seed: int, time_scale: float = DEFAULT_TIME_SCALE
) -> Workload:
    """The workload of one seed, sized for the topology (hosts by position in the file)."""
    from workloads.loader import read_file

    if not spec.strip():
        raise UserError("--workload: the option is empty (give hp-tuning or a workload file)")
    link_bps = topology_link_bps(topology)
    if spec == "hp-tuning":
        return _hp_tuning_workload(topology, seed, link_bps, time_scale)
    workload = read_file(Path(spec))
    if workload.num_hosts > len(topology.hosts):
        raise UserError(
            f"{spec}: the workload uses {workload.num_hosts} hosts but "
            f"{topology.source} has only {len(topology.hosts)}"
        )
    return dataclasses.replace(workload, link_bps=link_bps)


def _hp_tuning_workload(
    topology: Topology, seed: int, link_bps: float, time_scale: float
) -> Workload:
    """The generator's workload; its settings come from options, so are its errors named."""
    from workloads import hp_tuning
    from workloads.limits import SettingError

    try:
        config = hp_tuning.HpTuningConfig(
            seed=seed,
            num_hosts=len(topology.hosts),
            num_jobs=EMULATION_JOBS,
            workers=EMULATION_WORKERS,
            iterations_per_unit=EMULATION_ITERATIONS_PER_UNIT,
        )
        scaled = hp_tuning.shrink(config, link_bps=link_bps, time_scale=time_scale)
        return hp_tuning.generate(scaled)
    except SettingError as error:
        if error.field == "num_hosts":
            needed = max(EMULATION_WORKERS) + 1  # a parameter server takes one more host
            raise UserError(
                f"--topo {topology.source}: the hp-tuning workload needs at least {needed} "
                f"hosts, the topology has {len(topology.hosts)}"
            ) from None
        if error.field == "link_bps":
            raise UserError(
                f"--topo {topology.source}: the hp-tuning workload cannot run on its links: "
                f"{error.detail}"
            ) from None
        if error.field == "bytes_scale":
            raise UserError(
                f"--time-scale: {time_scale:g} shrinks the hp-tuning workload's "
                "synchronisations below one byte; give a larger --time-scale"
            ) from None
        if error.field == "time_scale":
            raise UserError(f"--time-scale: {time_scale:g}: {error.detail}") from None
        raise UserError(f"--workload hp-tuning: {error}") from None


def alone_sct_s(stage: Stage, link_bps: float) -> float:
    """A lower bound on the stage's SCT when it is alone in the network.

    The larger of two bounds: the slowest trial on its own (its iterations in
    sequence, each compute then sync at the coflow's busiest port), and the
    busiest port's bytes over the whole stage (its trials share the hosts).
    Ports follow the big-switch model: each host's uplink and downlink at
    ``link_bps``.
    """
    longest_trial_s = 0.0
    stage_load: dict[tuple[str, int], int] = {}
    for trial in stage.trials:
        load: dict[tuple[str, int], int] = {}
        for flow in trial.sync_flows:
            if flow.src_host == flow.dst_host:
                continue
            for port in (("up", flow.src_host), ("down", flow.dst_host)):
                load[port] = load.get(port, 0) + flow.size_bytes
                stage_load[port] = stage_load.get(port, 0) + trial.iterations * flow.size_bytes
        sync_s = max(load.values(), default=0) * 8 / link_bps
        longest_trial_s = max(longest_trial_s, trial.iterations * (trial.compute_s + sync_s))
    busiest_port_s = max(stage_load.values(), default=0) * 8 / link_bps
    return max(longest_trial_s, busiest_port_s)


def alone_times(workload: Workload) -> dict[tuple[int, int], float]:
    return {
        (experiment.experiment_id, stage.stage_id): alone_sct_s(stage, workload.link_bps)
        for experiment in workload.experiments
        for stage in experiment.stages
    }


# --- checks before any network is built -------------------------------------------------


def run_lower_bound_s(workload: Workload) -> float:
    """Less than any run of ``workload`` can take: each experiment's arrival, then its
    stages in sequence, each no shorter than alone (:func:`alone_sct_s`) nor than its
    longest trial's iterations at :data:`MIN_ITERATION_S`."""
    bound = 0.0
    for experiment in workload.experiments:
        total = experiment.arrival_s
        for stage in experiment.stages:
            iterations = max((trial.iterations for trial in stage.trials), default=0)
            total += max(alone_sct_s(stage, workload.link_bps), iterations * MIN_ITERATION_S)
        bound = max(bound, total)
    return bound


def peak_sockets(workload: Workload, hosts: int) -> int:
    """More TCP sockets than the agents ever hold open at once.

    Every flow of a trial keeps a sender and an accepted receiver for its stage; an
    experiment runs one stage at a time but all experiments may overlap, so the sum over
    experiments of their largest stage bounds the peak; plus one listener per host.
    """
    total = hosts
    for experiment in workload.experiments:
        total += max(
            (
                2 * sum(flow.src_host != flow.dst_host for t in s.trials for flow in t.sync_flows)
                for s in experiment.stages
            ),
            default=0,
        )
    return total


def check_workload(workload: Workload, source: str, hosts: int, time_scale_applies: bool) -> None:
    """Refuse what would fail only once the network is up: nothing to measure, a trial
    the controller refuses, a run longer than :data:`RUN_TIMEOUT_S`, too few files."""
    if not any(experiment.stages for experiment in workload.experiments):
        raise UserError(f"{source}: the workload has no experiments with stages to run")
    for experiment in workload.experiments:
        for stage in experiment.stages:
            for trial in stage.trials:
                if not trial.sync_flows:
                    raise UserError(
                        f"{source}: experiment {experiment.experiment_id}, stage "
                        f"{stage.stage_id}, trial {trial.trial_id} has no flows; the controller "
                        "needs at least one flow per iteration (leave the trial out)"
                    )
    bound_s = run_lower_bound_s(workload)
    if bound_s > RUN_TIMEOUT_S:
        change = "a smaller --time-scale" if time_scale_applies else "a shorter workload"
        raise UserError(
            f"{source}: a run takes at least {bound_s:.3g} s (arrivals, then stages at their "
            f"fastest), more than the {RUN_TIMEOUT_S:g} s limit of a run; use {change}"
        )
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    sockets = peak_sockets(workload, hosts)
    if soft != resource.RLIM_INFINITY and sockets > soft - FILE_MARGIN:
        raise UserError(
            f"{source}: the workload may hold {sockets} TCP sockets open at once, more than "
            f"the open-file limit of {soft} allows ({FILE_MARGIN} kept for the rest); "
            "raise it with ulimit -n or use a smaller workload"
        )


def prepare_workloads(options: EmulationOptions) -> dict[int, Workload]:
    """Every seed's workload, made and checked before the first network is built."""
    workloads: dict[int, Workload] = {}
    hp_tuning = options.workload == "hp-tuning"
    for seed in options.seeds:
        workload = emulation_workload(options.workload, options.topology, seed, options.time_scale)
        source = f"--workload hp-tuning (seed {seed})" if hp_tuning else options.workload
        check_workload(workload, source, len(options.topology.hosts), hp_tuning)
        workloads[seed] = workload
    return workloads


# --- simulator prediction ---------------------------------------------------------------


def predicted_scts_s(
    workload: Workload, policy: str, queues: int
) -> dict[tuple[int, int], float] | None:
    """The flow-level simulator's SCT per stage for the same workload, policy and classes.

    The rates are strict priority between the classes, what the switch's queues
    enforce, also for a policy whose simulator rates are MADD's (``varys``,
    ``fifo-madd``): the switch runs its order, not those rates. None when the
    simulator or the policy is not available (the table then says n/a).
    """
    try:
        from control.policies import get_policy
        from sim.engine import SimConfig, simulate
    except ImportError:
        return None
    config = SimConfig(num_classes=queues, allocator="priority")
    result = simulate(workload, get_policy(policy), config)
    if not result.sct_s:
        return None
    return {(key.experiment_id, key.stage_id): sct for key, sct in result.sct_s.items()}


# --- runs -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EmulationOptions:
    topology: Topology
    policies: tuple[str, ...]
    seeds: tuple[int, ...]
    workload: str = "hp-tuning"
    target: TargetName = "embedded"
    queues: int = 8
    time_scale: float = DEFAULT_TIME_SCALE
    queue_depth_packets: int | None = DEFAULT_QUEUE_DEPTH_PACKETS
    rto_min_ms: int = DEFAULT_RTO_MIN_MS
    congestion_control: str = DEFAULT_CONGESTION_CONTROL
    bmv2_json: Path | None = None
    p4info: Path | None = None


Progress = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_emulations(
    options: EmulationOptions,
    progress: Progress = _stderr,
    workloads: Mapping[int, Workload] | None = None,
) -> EmulationReport:
    """Every policy × seed, each on a fresh network; any failure stops with one clear error.

    ``workloads``: those of :func:`prepare_workloads`, when the caller checked them already.
    """
    if workloads is None:
        workloads = prepare_workloads(options)
    report = EmulationReport()
    for seed in options.seeds:
        workload = workloads[seed]
        for policy in options.policies:
            progress(f"emulate: policy {policy}, seed {seed}: starting")
            result = run_once(options, workload, policy, seed)
            progress(
                f"emulate: policy {policy}, seed {seed}: {len(result.stages)} stages, "
                f"average SCT {result.avg_sct_s:.2f} s ({result.wall_s:.1f} s wall)"
            )
            report.runs.append(result)
    return report


def run_once(options: EmulationOptions, workload: Workload, policy: str, seed: int) -> RunResult:
    from control.events import EventClient

    topology = options.topology
    started = time.monotonic()
    with EmulatedNetwork.for_run(options, policy) as network:
        hosts = {
            index: HostAddress(network.host_namespace(host.name), str(host.ip))
            for index, host in enumerate(topology.hosts)
        }
        deadline = time.monotonic() + RUN_TIMEOUT_S

        def watchdog() -> None:
            network.check_processes(controller_required=False)
            if time.monotonic() > deadline:
                raise UserError(
                    f"emulation of {policy} (seed {seed}) did not finish in {RUN_TIMEOUT_S:g} s"
                )

        namespaces = [address.namespace for address in hosts.values() if address.namespace]
        counted_before = read_counters(namespaces)
        with EventClient(str(network.events_socket)) as client:
            sink = ControllerOptional(client, on_lost=_warn_controller_lost)
            record = execute(hosts, workload.experiments, sink, watchdog)
        tcp = counted_between(counted_before, read_counters(namespaces))
        controller_lost = sink.lost is not None or network.controller_exited()
    return RunResult(
        key=RunKey(policy, seed),
        stages=record.stages,
        alone_s=alone_times(workload),
        wall_s=time.monotonic() - started,
        predicted_sct_s=predicted_scts_s(workload, policy, options.queues),
        coflows=len(record.coflows),
        controller_lost=controller_lost,
        tcp=tcp,
    )


def _warn_controller_lost(reason: str) -> None:
    _stderr(f"emulate: warning: {reason}; traffic continues with the installed classes")


def execute(
    hosts: dict[int, HostAddress],
    experiments: tuple[Experiment, ...],
    sink: EventSink,
    watchdog: Callable[[], None],
) -> RunRecord:
    """Run the agents on a fresh event loop; socket errors become one clear line."""
    try:
        return asyncio.run(run_workload(hosts, experiments, sink, watchdog))
    except OSError as error:  # ConnectionError and TimeoutError among them
        watchdog()  # a dead switch or controller explains the broken connection best
        raise UserError(f"emulation traffic failed: {_describe(error)}") from None


def _describe(error: OSError) -> str:
    """The error's own words, with the file limit's remedy when it ran out of files."""
    text = str(error) or type(error).__name__
    if error.errno in (errno.EMFILE, errno.ENFILE):
        text += " (the open-file limit is too low for this workload: raise it with ulimit -n)"
    return text
