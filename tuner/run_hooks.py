"""Ray Tune hooks of ``beamer tune``: a stopper that ends a search when the network
under it fails, and a log of every iteration's timings."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ray import tune


def _never() -> bool:
    return False


class Watchdog(tune.Stopper):
    """Ends the search when ``stop_all()`` says so (a switch died, the deadline passed)."""

    def __init__(self, stop_all: Callable[[], bool]) -> None:
        self._stop_all = stop_all

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        return self._stop_all()

    def __getstate__(self) -> dict[str, Any]:
        # Ray Tune pickles its run configuration for resuming; the check only makes
        # sense in this process, so a copy never stops anything.
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._stop_all = _never


@dataclass(frozen=True, slots=True)
class IterationRecord:
    """One training iteration as the trial reported it."""

    ray_trial_id: str
    experiment_id: int
    stage_id: int
    slot: int
    iteration: int
    compute_s: float
    allreduce_s: float
    sync_bytes: int
    reported_s: float
    """``time.monotonic()`` when the driver received the result."""


class IterationLog(tune.Callback):
    """Keeps every iteration's timings: where a stage's time went (compute, all-reduce,
    or the tuner between them)."""

    def __init__(self) -> None:
        self.records: list[IterationRecord] = []
        self.last_progress_s = time.monotonic()
        """When the last result came in (or the log was made)."""

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        try:
            record = IterationRecord(
                ray_trial_id=str(trial.trial_id),
                experiment_id=int(result["experiment_id"]),
                stage_id=int(result["stage_id"]),
                slot=int(result["slot"]),
                iteration=int(result["training_iteration"]),
                compute_s=float(result["compute_s"]),
                allreduce_s=float(result["allreduce_s"]),
                sync_bytes=int(result["sync_bytes"]),
                reported_s=time.monotonic(),
            )
        except (KeyError, TypeError, ValueError):
            return  # not a result of the Beamer trainable
        self.records.append(record)
        self.last_progress_s = record.reported_s

    def __getstate__(self) -> dict[str, Any]:
        return {"records": [], "last_progress_s": self.last_progress_s}


def warm_workers(count: int, cpus_per_worker: float) -> float:
    """Start ``count`` Ray worker processes with the trainable's modules and data loaded;
    returns the seconds it took.

    Ray creates each trial's actor on an idle worker of its pool: warmed there, a
    trial starts in a fraction of a second, as on a cluster with a worker per trial,
    instead of paying seconds of imports inside the first stage it runs.
    """
    import ray

    @ray.remote(num_cpus=cpus_per_worker)
    def warm() -> int:
        import os

        from tuner import trainable, training

        training.digits()
        del trainable
        return os.getpid()

    started = time.monotonic()
    ray.get([warm.remote() for _ in range(count)])
    return time.monotonic() - started
