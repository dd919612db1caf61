"""What a workload amounts to: counts, bytes and the network load it offers.

Offered load = (bytes offered per second) × 8 / (num_hosts × link_bps), the
average utilisation of the host uplinks (and, equally, of the downlinks) if
every offered byte is carried. Bytes per second are estimated from the
arrivals: jobs are the distinct arrival times (a Hyperband run submits all its
brackets at once), and with K jobs over the span T between the first and the
last arrival the rate is (K − 1)/T, each job bringing on average total/K bytes.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass

from control.model import Workload
from workloads.limits import MAX_TIME_S, SettingError


@dataclass(frozen=True, slots=True)
class WorkloadSummary:
    """Counts and sizes of a workload (``offered_load`` is None with fewer than two jobs)."""

    num_hosts: int
    link_bps: float
    experiments: int
    jobs: int
    stages: int
    trial_stages: int
    coflows: int
    flows: int
    total_bytes: int
    first_arrival_s: float
    last_arrival_s: float
    offered_load: float | None
    kinds: dict[str, int]


def offered_load(workload: Workload) -> float | None:
    """Offered load as defined in the module docstring; None when it is undefined."""
    arrivals = sorted({experiment.arrival_s for experiment in workload.experiments})
    if len(arrivals) < 2 or arrivals[-1] <= arrivals[0]:
        return None
    span_s = arrivals[-1] - arrivals[0]
    jobs = len(arrivals)
    total_bytes = sum(experiment.total_bytes for experiment in workload.experiments)
    bytes_per_s = (jobs - 1) / span_s * total_bytes / jobs
    return bytes_per_s * 8 / (workload.num_hosts * workload.link_bps)


def summarize(workload: Workload) -> WorkloadSummary:
    """Counts, bytes, arrival span and offered load of ``workload``."""
    experiments = workload.experiments
    trial_stages = [trial for e in experiments for stage in e.stages for trial in stage.trials]
    arrivals = [experiment.arrival_s for experiment in experiments]
    return WorkloadSummary(
        num_hosts=workload.num_hosts,
        link_bps=workload.link_bps,
        experiments=len(experiments),
        jobs=len(set(arrivals)),
        stages=sum(len(experiment.stages) for experiment in experiments),
        trial_stages=len(trial_stages),
        coflows=sum(trial.iterations for trial in trial_stages),
        flows=sum(trial.iterations * len(trial.sync_flows) for trial in trial_stages),
        total_bytes=sum(experiment.total_bytes for experiment in experiments),
        first_arrival_s=min(arrivals, default=0.0),
        last_arrival_s=max(arrivals, default=0.0),
        offered_load=offered_load(workload),
        kinds=dict(sorted(Counter(experiment.kind for experiment in experiments).items())),
    )


def rescale_to_load(workload: Workload, load: float) -> Workload:
    """The same workload with arrival times stretched so that its offered load is ``load``.

    Arrivals are scaled about the first one; sizes and compute times are kept.
    """
    if not (math.isfinite(load) and load > 0):
        raise SettingError("load", f"must be a positive number, not {load}")
    current = offered_load(workload)
    if current is None:
        raise SettingError(
            "load", "cannot set the load of a workload with fewer than two arrival times"
        )
    if not any(experiment.total_bytes for experiment in workload.experiments):
        # Its load is 0 whatever the arrivals: stretching them by 0 stacked them all at 0.
        raise SettingError(
            "load",
            "cannot set the load of a workload that moves no bytes across the network "
            "(it has no flows, or every flow stays on its own host)",
        )
    factor = current / load
    start_s = min(experiment.arrival_s for experiment in workload.experiments)
    arrivals = [start_s + (e.arrival_s - start_s) * factor for e in workload.experiments]
    last_s = max(arrivals)
    if not last_s <= MAX_TIME_S:  # also catches inf and nan
        # A load so small that the stretch factor overflows gives inf or nan: say so.
        reach = f"{last_s:.3g} s" if math.isfinite(last_s) else "beyond any number of seconds"
        raise SettingError(
            "load",
            f"{load:g} stretches the arrivals to {reach}, above the limit of "
            f"{MAX_TIME_S:g} s (offered load {current:.3g} before)",
        )
    experiments = tuple(
        dataclasses.replace(e, arrival_s=arrival_s)
        for e, arrival_s in zip(workload.experiments, arrivals, strict=True)
    )
    meta = dict(workload.meta)
    meta["arrivals_scaled_by"] = repr(factor)
    return dataclasses.replace(workload, experiments=experiments, meta=meta)
