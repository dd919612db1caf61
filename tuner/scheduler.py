"""Ray Tune's synchronous HyperBand with Beamer's events: the scheduler hook and the entry point.

:class:`BeamerHyperBandScheduler` is Ray's ``HyperBandScheduler`` unchanged in
what it decides; it only tells a :class:`tuner.driver.TuneDriver` which trials
were added, what it decided on each result (CONTINUE / PAUSE / STOP), which
paused trial it resumes and which trials ended. It uses Ray's public scheduler
interface only. This module imports Ray; nothing outside :mod:`tuner` imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import AsyncHyperBandScheduler, HyperBandScheduler, TrialScheduler

from control.errors import UserError
from tuner.contract import Pattern
from tuner.driver import TuneDriver
from tuner.plan import check_search, hyperband_plan
from tuner.sinks import EventSink, connect

if TYPE_CHECKING:
    from ray.tune.execution.tune_controller import TuneController

    from tuner.callback import BeamerCallback

TIME_ATTR = "training_iteration"


class BeamerHyperBandScheduler(HyperBandScheduler):
    """``HyperBandScheduler`` over ``training_iteration`` that reports to ``driver``."""

    def __init__(
        self,
        driver: TuneDriver,
        *,
        metric: str | None = None,
        mode: str | None = None,
    ) -> None:
        plan = driver.plan
        super().__init__(
            time_attr=TIME_ATTR,
            metric=metric,
            mode=mode,
            max_t=plan.max_t,
            reduction_factor=plan.reduction_factor,
            stop_last_trials=plan.stop_last_trials,
        )
        self.driver = driver

    def on_trial_add(self, tune_controller: TuneController, trial: Trial) -> None:
        self.driver.trial_added(trial.trial_id)
        super().on_trial_add(tune_controller, trial)

    def on_trial_result(
        self, tune_controller: TuneController, trial: Trial, result: dict[str, Any]
    ) -> str:
        action: str = super().on_trial_result(tune_controller, trial, result)
        self.driver.trial_result(trial.trial_id, _iteration(result), action)
        return action

    def choose_trial_to_run(self, tune_controller: TuneController) -> Trial | None:
        self._stop_left_behind(tune_controller)
        trial: Trial | None = super().choose_trial_to_run(tune_controller)
        if trial is not None and trial.status == Trial.PAUSED:
            # Ray resumes a paused trial only when the rung behind it was promoted.
            self.driver.trial_starting(trial.trial_id)
        return trial

    def _stop_left_behind(self, tune_controller: TuneController) -> None:
        """Stop paused trials of brackets that are over.

        Ray's HyperBand stops the paused trials of a bracket when its last result comes
        in, but a trial it decided to pause whose pause had not begun yet (results that
        arrive together, as a synchronous rung's do) stays paused for good, and the
        search then never ends. The driver knows from the plan which brackets are over.
        """
        for trial in tune_controller.get_trials():
            if trial.status == Trial.PAUSED and self.driver.bracket_over(trial.trial_id):
                tune_controller.stop_trial(trial)

    # Ray's own bookkeeping first: the trials a halving drops are stopped inside it,
    # before the driver may see the rung complete.
    def on_trial_complete(
        self, tune_controller: TuneController, trial: Trial, result: dict[str, Any]
    ) -> None:
        super().on_trial_complete(tune_controller, trial, result)
        # A trial a stopper ended at its milestone has reached it.
        self.driver.trial_ended(trial.trial_id, _iteration(result))

    def on_trial_error(self, tune_controller: TuneController, trial: Trial) -> None:
        super().on_trial_error(tune_controller, trial)
        self.driver.trial_ended(trial.trial_id, _iteration(trial.last_result))

    def on_trial_remove(self, tune_controller: TuneController, trial: Trial) -> None:
        super().on_trial_remove(tune_controller, trial)
        self.driver.trial_ended(trial.trial_id, _iteration(trial.last_result))


def _iteration(result: Any) -> int | None:
    value = result.get(TIME_ATTR) if isinstance(result, dict) else None
    return int(value) if isinstance(value, int | float) else None


def require_stages(scheduler: TrialScheduler) -> None:
    """Refuse a scheduler whose rungs are not stages (ASHA) with one clear line."""
    if isinstance(scheduler, AsyncHyperBandScheduler):
        raise UserError(
            f"{type(scheduler).__name__} (ASHA) promotes each trial on its own, so its "
            "rungs never complete as stages and Beamer has no stage to report; use "
            "synchronous HyperBand (tuner.beamer_hyperband) for Beamer's stage-aware "
            "scheduling"
        )
    if not isinstance(scheduler, BeamerHyperBandScheduler):
        raise UserError(
            f"{type(scheduler).__name__}: Beamer reports stages only for the scheduler "
            "of tuner.beamer_hyperband (Ray's synchronous HyperBand)"
        )


def beamer_hyperband(
    *,
    controller: str | Path | EventSink | None,
    max_t: int,
    num_samples: int,
    hosts: Sequence[str],
    gradient_bytes: int,
    compute_s: float,
    assignments_dir: str | Path | None,
    reduction_factor: float = 3,
    workers: int = 2,
    pattern: Pattern = "ring",
    seed: int = 0,
    metric: str | None = None,
    mode: str | None = None,
    stop_last_trials: bool = True,
    first_experiment_id: int = 1,
    scheduler: str = "hyperband",
    gang_start: bool = False,
) -> tuple[BeamerHyperBandScheduler, BeamerCallback]:
    """Ray Tune's HyperBand with Beamer: pass the scheduler as
    ``TuneConfig(scheduler=..., num_samples=num_samples)`` and the callback in
    ``RunConfig(callbacks=[...])``.

    ``controller``: ``"HOST:PORT"`` or the Unix socket of ``beamer controller``, an
    object with the event methods, or ``None`` (no controller). ``hosts``: the
    topology's host names in topology order. ``scheduler="asha"`` is refused.
    ``gang_start``: release the brackets only when every trial of the search has
    started (stage times then leave out the tuner's pace of starting trials); only
    when the cluster can run all trials at once.
    """
    from tuner.callback import BeamerCallback

    check_search(
        {
            "num_samples": num_samples,
            "max_t": max_t,
            "reduction_factor": reduction_factor,
            "stop_last_trials": stop_last_trials,
            "workers": workers,
            "pattern": pattern,
            "gradient_bytes": gradient_bytes,
            "compute_s": compute_s,
            "seed": seed,
            "first_experiment_id": first_experiment_id,
            "gang_start": gang_start,
            "mode": mode,
            "hosts": hosts,
            "metric": metric,
        }
    )
    if scheduler != "hyperband":
        if scheduler.lower() in ("asha", "async_hyperband", "asynchyperband"):
            require_stages(AsyncHyperBandScheduler())
        raise UserError(f"scheduler: expected 'hyperband', got {scheduler!r}")
    plan = hyperband_plan(num_samples, max_t, reduction_factor, stop_last_trials)
    driver = TuneDriver(
        plan,
        connect(controller),
        hosts,
        workers=workers,
        pattern=pattern,
        gradient_bytes=gradient_bytes,
        compute_s=compute_s,
        assignments_dir=assignments_dir,
        seed=seed,
        first_experiment_id=first_experiment_id,
        gang_start=gang_start,
    )
    return BeamerHyperBandScheduler(driver, metric=metric, mode=mode), BeamerCallback(driver)
