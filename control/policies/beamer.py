"""Beamer: stage-aware ordering that follows each tuning experiment across its stages.

In successive halving an experiment's next stage starts the moment its
current stage ends, so the sum of its stage completion times is its
completion time, and minimising the average SCT means minimising the average
experiment completion time. Beamer therefore ranks *experiments* by the
demand they still have to put on the network — the running stage's
remaining iterations plus the stages successive halving will still run — with
Sincronia's BSSI on those per-port demand vectors, and gives each experiment
one priority group. Inside a group the critical trial (most remaining bytes
in the stage) comes first.

``beamer-stage`` (the ablation) ranks stages by their own remaining demand,
forgetting the future stages.
"""

from __future__ import annotations

from collections import defaultdict
from typing import ClassVar, Literal

import numpy as np

from control.model import CoflowKey, Experiment, TrialStage
from control.policies.base import BasePolicy, CoflowState, PortVector, Ranking, Snapshot
from control.policies.bssi import bssi_order

Ordering = Literal["bssi", "bottleneck"]


class BeamerPolicy(BasePolicy):
    """``future_stages``: count stages not yet released; ``ordering``: BSSI or busiest port."""

    name: ClassVar[str] = "beamer"

    def __init__(
        self,
        future_stages: bool = True,
        ordering: Ordering = "bssi",
        split_trials: bool = False,
        max_groups: int | None = None,
        future_weight: float = 1.0,
    ) -> None:
        self.future_weight = future_weight
        self.max_groups = max_groups
        self.future_stages = future_stages
        self.ordering = ordering
        self.split_trials = split_trials
        self._per_iteration: dict[tuple[int, int, int], np.ndarray] = {}
        self._sync_bytes: dict[tuple[int, int, int], int] = {}
        self._future: dict[tuple[int, int], np.ndarray] = {}

    # -- demand vectors --

    def _iteration_vector(
        self, experiment_id: int, stage_id: int, trial: TrialStage, num_hosts: int, ports: int
    ) -> np.ndarray:
        """Bytes one iteration's synchronisation puts on each port (cached: plans are fixed)."""
        key = (experiment_id, stage_id, trial.trial_id)
        vector = self._per_iteration.get(key)
        if vector is None:
            vector = np.zeros(ports)
            for flow in trial.sync_flows:
                if flow.src_host != flow.dst_host:
                    vector[flow.src_host] += flow.size_bytes
                    vector[num_hosts + flow.dst_host] += flow.size_bytes
            self._per_iteration[key] = vector
        return vector

    def _trial_sync_bytes(self, experiment_id: int, stage_id: int, trial: TrialStage) -> int:
        """Bytes of one iteration's synchronisation (cached: a sum over every flow)."""
        key = (experiment_id, stage_id, trial.trial_id)
        size = self._sync_bytes.get(key)
        if size is None:
            size = self._sync_bytes[key] = trial.sync_bytes
        return size

    def _future_vector(
        self, experiment: Experiment, stage_index: int, num_hosts: int, ports: int
    ) -> np.ndarray:
        """Bytes per port of every stage after ``stage_index`` (the plan's trials and hosts)."""
        key = (experiment.experiment_id, stage_index)
        vector = self._future.get(key)
        if vector is None:
            vector = np.zeros(ports)
            for stage in experiment.stages[stage_index + 1 :]:
                for trial in stage.trials:
                    vector += trial.iterations * self._iteration_vector(
                        experiment.experiment_id, stage.stage_id, trial, num_hosts, ports
                    )
            self._future[key] = vector
        return vector

    def _unit_of(self, key: CoflowKey) -> tuple[int, ...]:
        return (key.experiment_id,)

    def _demand(
        self, unit: tuple[int, ...], coflows: list[CoflowState], snapshot: Snapshot
    ) -> tuple[np.ndarray, dict[int, float]]:
        """Remaining per-port demand of ``unit`` and each running trial's remaining bytes."""
        ports = len(snapshot.port_capacity_bps)
        vector = np.zeros(ports)
        trial_bytes: dict[int, float] = defaultdict(float)
        active_trials: set[int] = set()
        for coflow in coflows:
            row = coflow.remaining_by_port
            if isinstance(row, PortVector):
                if len(row.array) == ports:
                    vector += row.array
                else:
                    vector[: len(row.array)] += row.array
            else:
                for port, size in row.items():
                    vector[port] += size
            trial_bytes[coflow.key.trial_id] += coflow.remaining_bytes
            active_trials.add(coflow.key.trial_id)
        state = snapshot.experiments.get(unit[0])
        if state is None:
            return vector, trial_bytes
        experiment = state.experiment
        stage = experiment.stages[state.stage_index]
        for trial in stage.trials:
            done = state.iterations_done.get(trial.trial_id, 0)
            left = trial.iterations - done - (1 if trial.trial_id in active_trials else 0)
            if left > 0:
                per_iteration = self._iteration_vector(
                    experiment.experiment_id, stage.stage_id, trial, snapshot.num_hosts, ports
                )
                vector += left * per_iteration
                trial_bytes[trial.trial_id] += left * self._trial_sync_bytes(
                    experiment.experiment_id, stage.stage_id, trial
                )
        if self.future_stages:
            vector += self.future_weight * self._future_vector(
                experiment, state.stage_index, snapshot.num_hosts, ports
            )
        return vector, trial_bytes

    # -- ranking --

    def rank(self, snapshot: Snapshot) -> Ranking:
        members: dict[tuple[int, ...], list[CoflowState]] = defaultdict(list)
        for coflow in snapshot.coflows:
            members[self._unit_of(coflow.key)].append(coflow)
        units = sorted(members)
        if not units:
            return Ranking(())
        demands = []
        trial_bytes = []
        weights = []
        for unit in units:
            vector, by_trial = self._demand(unit, members[unit], snapshot)
            demands.append(vector)
            trial_bytes.append(by_trial)
            state = snapshot.experiments.get(unit[0])
            weights.append(state.experiment.weight if state is not None else 1.0)
        demand = np.vstack(demands)
        if self.ordering == "bssi":
            order = bssi_order(demand, np.asarray(weights))
        else:
            capacity = np.asarray(snapshot.port_capacity_bps) / 8.0
            bottleneck_s = (demand / capacity).max(axis=1) / np.asarray(weights)
            order = [int(i) for i in np.lexsort((np.arange(len(units)), bottleneck_s))]
        groups: list[tuple[CoflowKey, ...]] = []
        for index in order:
            by_trial = trial_bytes[index]
            critical_first = sorted(
                members[units[index]], key=lambda c: (-by_trial[c.key.trial_id], c.key)
            )
            if self.split_trials:
                groups.extend((c.key,) for c in critical_first)
            else:
                groups.append(tuple(c.key for c in critical_first))
        if self.max_groups is not None and len(groups) > self.max_groups:
            tail = tuple(key for group in groups[self.max_groups - 1 :] for key in group)
            groups = [*groups[: self.max_groups - 1], tail]
        return Ranking(tuple(groups))


class BeamerStagePolicy(BeamerPolicy):
    """Ablation: rank stages by their own remaining demand, with no look at future stages."""

    name: ClassVar[str] = "beamer-stage"

    def __init__(self, ordering: Ordering = "bssi") -> None:
        super().__init__(future_stages=False, ordering=ordering)

    def _unit_of(self, key: CoflowKey) -> tuple[int, ...]:
        return (key.experiment_id, key.stage_id)
