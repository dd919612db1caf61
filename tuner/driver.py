"""The tuner's decisions as Beamer events: brackets, rungs, promotions and stops.

:class:`TuneDriver` knows nothing of Ray. The scheduler hook and the callback
(:mod:`tuner.scheduler`, :mod:`tuner.callback`) tell it what Ray Tune did with
each trial (added, (re)started, reported an iteration and got CONTINUE, PAUSE
or STOP, ended); it keeps the bracket plan of :mod:`tuner.plan`, sends the
controller the events that follow, and writes each trial's assignment once
the controller accepted them.

Rules, per bracket (one experiment):

* its first trial to start releases the experiment (the whole plan) and
  stage 0; each trial of rung 0 runs slot = its position in the bracket;
* a trial enters a rung (``trial_started``, then its assignment) when it starts
  for the first time, when Ray resumes it after a pause, or when Ray lets it
  continue past a milestone; a promoted trial takes the next free slot;
* rung ``k`` completes (``stage_completed``) when every slot has reached the
  milestone and reported, or stopped (``trial_stopped``: errored or stopped
  inside the rung); then stage ``k + 1`` is released at once with
  ``min(trials that reached the milestone, planned)`` trials, Ray's rule, and
  slots no trial will take (fewer survivors than planned) are started and
  stopped at once so that the policy sees no work left for them;
* at the end of the run, brackets not finished get ``experiment_finished``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from control.errors import UserError
from control.events import EventClient
from control.model import Experiment
from tuner.contract import Pattern, TrialAssignment, write_assignment
from tuner.plan import ID16_MAX, BracketPlan, HyperBandPlan, experiment_for
from tuner.sinks import EventSink

log = logging.getLogger(__name__)

CONTINUE, PAUSE, STOP = "CONTINUE", "PAUSE", "STOP"
"""The values of Ray Tune's ``TrialScheduler.CONTINUE`` / ``PAUSE`` / ``STOP``."""


@dataclass(frozen=True, slots=True)
class StageTiming:
    """One stage (rung) as it ran."""

    experiment_id: int
    stage_id: int
    bracket: int
    trials: int
    """Slots of the stage in the plan."""
    ran: int
    """Trials that entered the stage (slots filled by a Ray trial)."""
    iterations: int
    released_s: float
    """``time.monotonic()`` at ``stage_released``."""
    completed_s: float | None
    """``time.monotonic()`` at ``stage_completed``; ``None`` if it never completed."""

    @property
    def sct_s(self) -> float | None:
        """Stage completion time: release to completion."""
        return None if self.completed_s is None else self.completed_s - self.released_s

    def as_row(self) -> dict[str, Any]:
        """The fields and ``sct_s``, for a table or a CSV row."""
        return {**{name: getattr(self, name) for name in self.__slots__}, "sct_s": self.sct_s}


@dataclass(frozen=True, slots=True)
class Promotion:
    """A Ray trial that entered a rung after the first one."""

    ray_trial_id: str
    experiment_id: int
    stage_id: int
    slot: int
    at_s: float


@dataclass(slots=True)
class _Trial:
    bracket: int
    position: int
    rung: int = -1
    slot: int = -1
    reached: bool = False
    """Has reported the milestone of its rung."""
    eliminated: bool = False
    """Ray stopped it at its milestone (not promoted)."""
    ended: bool = False


@dataclass(slots=True)
class _Stage:
    released_s: float
    slots: list[str | None]
    """The Ray trial in each slot (``None``: not taken yet, or never)."""
    done: set[int] = field(default_factory=set)
    reached: int = 0
    completed_s: float | None = None


@dataclass(slots=True)
class _Bracket:
    plan: BracketPlan
    experiment: Experiment
    released: bool = False
    finished: bool = False
    stages: list[_Stage] = field(default_factory=list)
    lost_before_start: set[int] = field(default_factory=set)
    """Rung-0 positions whose trial ended before the bracket was released."""
    waiting: dict[int, str] = field(default_factory=dict)
    """Gang start: rung-0 positions whose trial has started, waiting for the others."""

    @property
    def rung(self) -> int:
        return len(self.stages) - 1


@dataclass(frozen=True, slots=True)
class _ClientAddress:
    address: str


class TuneDriver:
    """Turns Ray Tune's decisions on a HyperBand run into controller events."""

    def __init__(
        self,
        plan: HyperBandPlan,
        sink: EventSink,
        hosts: Sequence[str],
        *,
        workers: int,
        pattern: Pattern,
        gradient_bytes: int,
        compute_s: float,
        assignments_dir: str | Path | None,
        seed: int,
        first_experiment_id: int = 1,
        gang_start: bool = False,
    ) -> None:
        last_id = first_experiment_id + len(plan.brackets) - 1
        if first_experiment_id < 0 or last_id > ID16_MAX:
            raise UserError(
                f"experiment ids {first_experiment_id}..{last_id} outside 0..{ID16_MAX}"
            )
        self.plan = plan
        self.gang_start = gang_start
        """Release the brackets when every trial of the search runs, not each at its
        first trial: stages then measure the network and the training, not the tuner's
        pace of starting trials. Needs room for all trials at once."""
        self.sink = sink
        self.hosts = tuple(hosts)
        self.pattern = pattern
        self.workers = workers
        self.assignments_dir = None if assignments_dir is None else Path(assignments_dir)
        self._brackets = [
            _Bracket(
                bracket,
                experiment_for(
                    bracket,
                    first_experiment_id + bracket.index,
                    self.hosts,
                    workers=workers,
                    pattern=pattern,
                    gradient_bytes=gradient_bytes,
                    compute_s=compute_s,
                    seed=seed,
                ),
            )
            for bracket in plan.brackets
        ]
        self._trials: dict[str, _Trial] = {}
        self._promotions: list[Promotion] = []
        self._lock = threading.RLock()

    def __getstate__(self) -> dict[str, Any]:
        # Ray Tune pickles its scheduler and callbacks with the run's state: no lock,
        # and a controller client travels as its address.
        state = {k: v for k, v in self.__dict__.items() if k != "_lock"}
        if isinstance(self.sink, EventClient):
            state["sink"] = _ClientAddress(self.sink.address)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if isinstance(state.get("sink"), _ClientAddress):
            state["sink"] = EventClient(state["sink"].address)
        self.__dict__.update(state)
        self._lock = threading.RLock()

    # -- what the tuner did --

    def trial_added(self, ray_trial_id: str) -> None:
        """Ray added a trial (in add order: this decides its bracket)."""
        with self._lock:
            if ray_trial_id in self._trials:
                return
            index = len(self._trials)
            if index >= self.plan.num_trials:
                raise UserError(
                    f"the tuner added trial {index + 1}, but the plan has "
                    f"num_samples={self.plan.num_trials}; pass the same num_samples "
                    "to the scheduler and to TuneConfig"
                )
            bracket, position = self.plan.bracket_of(index)
            self._trials[ray_trial_id] = _Trial(bracket.index, position)

    def trial_starting(self, ray_trial_id: str) -> None:
        """Ray (re)starts the trial or resumes it: it enters its next rung if it has not
        entered one yet or has reached its rung's milestone."""
        with self._lock:
            trial = self._trials.get(ray_trial_id)
            if trial is None or trial.ended:
                return
            if trial.rung < 0:
                bracket = self._brackets[trial.bracket]
                if self.gang_start and not bracket.released:
                    bracket.waiting[trial.position] = ray_trial_id
                    self._start_gang(bracket)
                else:
                    self._enter(ray_trial_id, trial, 0)
            elif trial.reached:
                self._enter(ray_trial_id, trial, trial.rung + 1)

    def trial_result(self, ray_trial_id: str, iteration: int | None, action: str) -> None:
        """The trial reported ``training_iteration = iteration``; Ray decided ``action``."""
        with self._lock:
            trial = self._trials.get(ray_trial_id)
            if trial is None or trial.ended or trial.rung < 0 or iteration is None:
                return
            if not trial.reached:
                bracket = self._brackets[trial.bracket]
                if iteration >= bracket.plan.rungs[trial.rung].milestone:
                    self._reach(bracket, trial)
            if action == CONTINUE and trial.reached:
                # Promoted while running: Ray lets it go on to the next rung at once.
                self._enter(ray_trial_id, trial, trial.rung + 1)
            elif action == STOP and trial.reached:
                trial.eliminated = True

    def trial_ended(self, ray_trial_id: str, iteration: int | None = None) -> None:
        """The trial completed, was stopped or errored (``iteration``: its last
        ``training_iteration`` if known)."""
        with self._lock:
            trial = self._trials.get(ray_trial_id)
            if trial is None or trial.ended:
                return
            bracket = self._brackets[trial.bracket]
            if trial.rung < 0:
                trial.ended = True
                if not bracket.released:
                    bracket.lost_before_start.add(trial.position)
                    bracket.waiting.pop(trial.position, None)
                    if self.gang_start:
                        self._start_gang(bracket)
                elif bracket.rung == 0 and not bracket.finished:
                    self._fill_unused(bracket, [trial.position])
                    self._maybe_complete(bracket)
                return
            milestone = bracket.plan.rungs[trial.rung].milestone
            if not trial.reached and iteration is not None and iteration >= milestone:
                self._reach(bracket, trial)
            trial.ended = True
            if bracket.finished:
                return
            if trial.reached:
                if not trial.eliminated and bracket.rung == trial.rung + 1:
                    # Ray kept it in the halving (the trials it drops end before the
                    # rung is complete, or get STOP), but it ends before entering the
                    # next rung: one slot of that rung will not be taken.
                    stage = bracket.stages[-1]
                    free = [
                        s
                        for s, taken in enumerate(stage.slots)
                        if taken is None and s not in stage.done
                    ]
                    if free:
                        self._fill_unused(bracket, free[-1:])
                        self._maybe_complete(bracket)
                return
            # Stopped or failed inside its rung.
            stage = bracket.stages[trial.rung]
            self.sink.trial_stopped(bracket.experiment.experiment_id, trial.rung, trial.slot)
            stage.done.add(trial.slot)
            self._maybe_complete(bracket)

    def finish(self) -> None:
        """The run is over: end every released bracket that did not finish."""
        with self._lock:
            for bracket in self._brackets:
                if bracket.released and not bracket.finished:
                    bracket.finished = True
                    self.sink.experiment_finished(bracket.experiment.experiment_id)

    # -- what was measured --

    def stage_timings(self) -> list[StageTiming]:
        """Every released stage, in release order within each bracket."""
        with self._lock:
            return [
                StageTiming(
                    experiment_id=bracket.experiment.experiment_id,
                    stage_id=k,
                    bracket=bracket.plan.index,
                    trials=bracket.plan.rungs[k].trials,
                    ran=sum(slot is not None for slot in stage.slots),
                    iterations=bracket.plan.iterations(k),
                    released_s=stage.released_s,
                    completed_s=stage.completed_s,
                )
                for bracket in self._brackets
                for k, stage in enumerate(bracket.stages)
            ]

    def promotions(self) -> list[Promotion]:
        with self._lock:
            return list(self._promotions)

    def experiments(self) -> list[Experiment]:
        """The plan of every bracket, as sent (or to be sent) to the controller."""
        return [bracket.experiment for bracket in self._brackets]

    def bracket_over(self, ray_trial_id: str) -> bool:
        """Whether the trial's bracket has run its last stage (or was ended)."""
        with self._lock:
            trial = self._trials.get(ray_trial_id)
            return trial is not None and self._brackets[trial.bracket].finished

    def placement(self, ray_trial_id: str) -> tuple[int, int, int] | None:
        """``(experiment_id, stage_id, slot)`` the trial runs or ran last."""
        with self._lock:
            trial = self._trials.get(ray_trial_id)
            if trial is None or trial.rung < 0:
                return None
            return self._brackets[trial.bracket].experiment.experiment_id, trial.rung, trial.slot

    # -- internals --

    def _reach(self, bracket: _Bracket, trial: _Trial) -> None:
        trial.reached = True
        stage = bracket.stages[trial.rung]
        stage.reached += 1
        stage.done.add(trial.slot)
        self._maybe_complete(bracket)

    def _enter(self, ray_trial_id: str, trial: _Trial, rung: int) -> None:
        bracket = self._brackets[trial.bracket]
        experiment_id = bracket.experiment.experiment_id
        if bracket.finished or rung >= len(bracket.plan.rungs):
            return
        if rung == 0 and not bracket.released:
            bracket.released = True
            self.sink.experiment_released(bracket.experiment)
            self._release(bracket, 0)
            if bracket.lost_before_start:
                self._fill_unused(bracket, sorted(bracket.lost_before_start))
        if bracket.rung != rung:
            log.warning(
                "experiment %d: trial %s would enter stage %d while stage %d is the "
                "released one; not reported",
                experiment_id,
                ray_trial_id,
                rung,
                bracket.rung,
            )
            return
        stage = bracket.stages[rung]
        if rung == 0:
            slot = trial.position
        else:
            free = [
                s for s, taken in enumerate(stage.slots) if taken is None and s not in stage.done
            ]
            if not free:
                log.warning(
                    "experiment %d stage %d: no free slot for trial %s",
                    experiment_id,
                    rung,
                    ray_trial_id,
                )
                return
            slot = free[0]
        stage.slots[slot] = ray_trial_id
        trial.rung, trial.slot, trial.reached = rung, slot, False
        self.sink.trial_started(experiment_id, rung, slot)
        if rung > 0:
            self._promotions.append(
                Promotion(ray_trial_id, experiment_id, rung, slot, time.monotonic())
            )
        if self.assignments_dir is not None:
            planned = bracket.experiment.stages[rung].trials[slot]
            write_assignment(
                self.assignments_dir,
                ray_trial_id,
                TrialAssignment(
                    experiment_id=experiment_id,
                    stage_id=rung,
                    trial_id=slot,
                    hosts=tuple(self.hosts[h] for h in planned.hosts),
                    first_iteration=bracket.plan.first_iteration(rung),
                    iterations=bracket.plan.iterations(rung),
                ),
            )

    def _start_gang(self, bracket: _Bracket) -> None:
        """Release every bracket once every trial of the plan has started (or ended)."""
        del bracket
        unreleased = [b for b in self._brackets if not b.released]
        if any(len(b.waiting) + len(b.lost_before_start) < b.plan.trials for b in unreleased):
            return
        for waiting_bracket in unreleased:
            waiting = sorted(waiting_bracket.waiting.items())
            waiting_bracket.waiting.clear()
            for _, ray_trial_id in waiting:
                self._enter(ray_trial_id, self._trials[ray_trial_id], 0)

    def _release(self, bracket: _Bracket, rung: int) -> None:
        self.sink.stage_released(bracket.experiment.experiment_id, rung)
        slots: list[str | None] = [None] * bracket.plan.rungs[rung].trials
        bracket.stages.append(_Stage(time.monotonic(), slots))

    def _fill_unused(self, bracket: _Bracket, slots: Sequence[int]) -> None:
        """Slots of the running stage that no trial will take: started and stopped at once."""
        stage = bracket.stages[bracket.rung]
        for slot in slots:
            if slot in stage.done or stage.slots[slot] is not None:
                continue
            self.sink.trial_started(bracket.experiment.experiment_id, bracket.rung, slot)
            self.sink.trial_stopped(bracket.experiment.experiment_id, bracket.rung, slot)
            stage.done.add(slot)

    def _maybe_complete(self, bracket: _Bracket) -> None:
        rung = bracket.rung
        stage = bracket.stages[rung]
        if bracket.finished or stage.completed_s is not None:
            return
        if len(stage.done) < len(stage.slots):
            return
        experiment_id = bracket.experiment.experiment_id
        self.sink.stage_completed(experiment_id, rung)
        stage.completed_s = time.monotonic()
        if rung == len(bracket.plan.rungs) - 1:
            bracket.finished = True  # the controller ends the experiment with its last stage
            return
        survivors = min(stage.reached, bracket.plan.rungs[rung + 1].trials)
        if survivors == 0:
            bracket.finished = True
            self.sink.experiment_finished(experiment_id)
            return
        self._release(bracket, rung + 1)
        self._fill_unused(bracket, range(survivors, bracket.plan.rungs[rung + 1].trials))
