"""Workload shapes by name: the knobs ``beamer workload generate`` and sweep grids share.

A :class:`Shape` picks which tuning jobs the HP-tuning generator draws from
and what they train, with the same names on the command line and in a sweep's
grid file:

* ``mix``: ``sha`` (the SHA shapes of :data:`~workloads.hp_tuning.DEFAULT_JOBS`),
  ``hyperband`` (its Hyperband shapes) or ``mixed`` (all of them, the default);
* ``models``: the models trials train (default: every model of
  :data:`~workloads.models.MODELS`);
* ``eta``: the reduction factor η of every job shape of the mix;
* ``max_trials``: the maximum budget R of every job shape of the mix, hence the
  widest first stage: an SHA run (and a Hyperband run's most exploratory
  bracket) starts η^⌊log_η R⌋ ≤ R trials, exactly R when R is a power of η;
* ``sync``: ``ring`` (all-reduce), ``ps`` (parameter server) or both (default).

``eta`` and ``max_trials`` replace the field in each shape of the mix; shapes
that become identical are kept once, so jobs are drawn uniformly over distinct
shapes. With every knob at its default the configuration is unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from control.errors import UserError
from control.options import comma_items, refuse_repeats
from workloads.hp_tuning import DEFAULT_JOBS, HpTuningConfig, JobShape, Pattern
from workloads.models import get_model

Mix = Literal["sha", "hyperband", "mixed"]
MIXES: tuple[Mix, ...] = ("sha", "hyperband", "mixed")
SYNC_PATTERNS: tuple[Pattern, ...] = ("ring", "ps")


@dataclass(frozen=True, slots=True)
class Shape:
    """Which jobs a generated workload holds; ``None`` keeps the generator's default."""

    mix: Mix = "mixed"
    models: tuple[str, ...] | None = None
    eta: int | None = None
    max_trials: int | None = None
    sync: tuple[Pattern, ...] | None = None

    def __post_init__(self) -> None:
        if self.mix not in MIXES:
            raise UserError(f"mix: {self.mix!r} is not one of {', '.join(MIXES)}")
        if self.models is not None:
            if not self.models:
                raise UserError("models: no model given")
            for name in self.models:
                get_model(name)
        if self.eta is not None and self.eta < 2:
            raise UserError(f"eta: the reduction factor must be >= 2, not {self.eta}")
        if self.max_trials is not None and self.max_trials < 1:
            raise UserError(f"max_trials: must be >= 1, not {self.max_trials}")
        if self.sync is not None:
            if not self.sync:
                raise UserError("sync: no pattern given")
            for pattern in self.sync:
                if pattern not in SYNC_PATTERNS:
                    raise UserError(f"sync: {pattern!r} is not one of ring, ps")

    def jobs(self) -> tuple[JobShape, ...]:
        """The job shapes of the mix with ``eta`` and ``max_trials`` applied, duplicates dropped."""
        chosen = [job for job in DEFAULT_JOBS if self.mix == "mixed" or job.kind == self.mix]
        found: list[JobShape] = []
        for job in chosen:
            shape = JobShape(
                job.kind,
                max_budget=job.max_budget if self.max_trials is None else self.max_trials,
                eta=job.eta if self.eta is None else self.eta,
            )
            if shape not in found:
                found.append(shape)
        return tuple(found)

    def apply(self, config: HpTuningConfig) -> HpTuningConfig:
        """``config`` with this shape's jobs, models and synchronisation patterns."""
        return dataclasses.replace(config, **self.changes())  # type: ignore[arg-type]

    def changes(self) -> dict[str, object]:
        """The configuration fields this shape sets, to be set together with others."""
        changes: dict[str, object] = {"jobs": self.jobs()}
        if self.models is not None:
            changes["models"] = self.models
        if self.sync is not None:
            changes["patterns"] = self.sync
        return changes


def parse_models(text: str | Sequence[str]) -> tuple[str, ...] | None:
    """A comma-separated list (or a list) of model names; ``all`` means every model."""
    names = comma_items(text, "models", "model") if isinstance(text, str) else list(text)
    if names == ["all"]:
        return None
    if not names:
        raise UserError("models: no model given")
    for name in names:
        if not isinstance(name, str):
            raise UserError(f"models: {name!r} is not a model name")
        try:
            get_model(name)
        except UserError as error:
            raise UserError(f"models: {error}") from None
    refuse_repeats(names, "models")  # a job draws from the list: twice, twice as often
    return tuple(names)


def parse_sync(text: str | Sequence[str]) -> tuple[Pattern, ...] | None:
    """``ring``, ``ps``, or both (``ring,ps`` or ``both``: the generator's default)."""
    names = comma_items(text, "sync", "pattern") if isinstance(text, str) else list(text)
    if names == ["both"]:
        return None
    patterns: list[Pattern] = []
    for name in names:
        if name == "ring":
            patterns.append("ring")
        elif name == "ps":
            patterns.append("ps")
        else:
            raise UserError(f"sync: {name!r} is not one of ring, ps, both")
    if not patterns:
        raise UserError("sync: no pattern given")
    refuse_repeats(patterns, "sync")
    return None if set(patterns) == set(SYNC_PATTERNS) else tuple(patterns)
