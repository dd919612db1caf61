"""The Ray Tune callback that goes with :class:`tuner.scheduler.BeamerHyperBandScheduler`.

A trial that Ray starts for the first time (without the scheduler choosing
it) is seen here, before its first iteration runs; the end of the run ends
every bracket that did not finish.
"""

from __future__ import annotations

from typing import Any

from ray.tune import Callback
from ray.tune.experiment import Trial

from tuner.driver import Promotion, StageTiming, TuneDriver


class BeamerCallback(Callback):
    """Reports trial starts and the end of the run to the driver."""

    def __init__(self, driver: TuneDriver) -> None:
        super().__init__()
        self.driver = driver

    def on_trial_start(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self.driver.trial_starting(trial.trial_id)

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        self.driver.finish()

    def stage_timings(self) -> list[StageTiming]:
        """Every released stage with its release and completion time and ``sct_s``."""
        return self.driver.stage_timings()

    def promotions(self) -> list[Promotion]:
        """Which Ray trial entered which slot of which later rung."""
        return self.driver.promotions()

    def close(self) -> None:
        """End unfinished brackets (if the run stopped abnormally) and close the sink."""
        self.driver.finish()
        self.driver.sink.close()
