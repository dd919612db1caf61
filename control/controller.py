"""The Beamer controller daemon: events → policy → classes → table entries on every switch.

One lock serialises everything that changes state: an event is validated
against the schedule, applied, the policy re-ranks the active coflows (the same
code the simulator runs), :mod:`control.quantize` maps the ranking onto the K
strict-priority classes, and each switch gets only the difference between the
entries it should hold and those it holds, written make-before-break
(:mod:`control.entries`). The event's reply leaves once every switch has
acknowledged its writes, so "event in → reply" is the reaction time. A switch
that takes longer than the write budget is set ``lagging``: the reply leaves
without it (it is named in ``pending_switches``), its writes go on in the
background, and the supervisor catches it up once they are acknowledged, so
one slow switch does not slow every event down.

A supervisor thread keeps the switches in shape: it reconnects a switch whose
stream broke (restart), re-pushes the pipeline when the switch lost it, reads
the tables back and writes only what differs, and polls the stage counters
that non-clairvoyant policies use as progress. A switch it brings up is not
ready meanwhile, so events are not written to it, and its RPCs run outside
the lock and outside the supervisor's own loop (one attempt per switch in the
background): a slow switch holds up neither the others nor the status. It
becomes ready under the lock once its writes have caught up with the plan. A
controller that restarts does the same on its first connection, so it neither
duplicates nor leaves stale entries. A controller whose election id loses
arbitration never writes and says so in its status and log; when the client
that beat it leaves, it arbitrates again with the highest id the switch has
seen and takes the switch back (docs/p4runtime.md, "Who may write").
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import grpc
import numpy as np
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from control.cli import shortened
from control.entries import (
    ActionCall,
    Changes,
    ClassEntries,
    ClassPlan,
    EntryMap,
    PipelineLayout,
    batches,
    canonical_map,
    coflow_tag,
    default_action_update,
    diff,
    forwarding_entries,
    from_table_entry,
    plan_classes,
    plan_writes,
    resolve_layout,
)
from control.errors import UserError
from control.events import (
    CoflowFinished,
    CoflowStarted,
    Event,
    EventError,
    EventHandler,
    ExperimentFinished,
    ExperimentReleased,
    StageCompleted,
    StageReleased,
    TrialStarted,
    TrialStopped,
    parse_event,
)
from control.journal import EventJournal
from control.model import CoflowKey, Experiment, StageKey, TrialStage
from control.p4runtime_client import (
    DEFAULT_ELECTION_ID,
    ArbitrationRefusedError,
    NotPrimaryError,
    P4NameError,
    P4Names,
    P4RuntimeClient,
    P4RuntimeError,
    TableRef,
    suppress_close_errors,
)
from control.policies.base import (
    CoflowState,
    ExperimentState,
    PortVector,
    Ranking,
    SearchesInBackground,
    Snapshot,
)
from control.topology import SwitchSpec, Topology

log = logging.getLogger(__name__)

UNREADABLE_ENTRY = (KeyError, ValueError)
"""What reading back an entry raises when the switch holds one this controller's program
cannot describe (an unknown field or table, a value wider than its field): the switch is
then in error, named, and supervised as before."""


def unreadable_entry(error: Exception) -> str:
    """The reason a switch is in error when it holds an entry the controller cannot read
    (the error may quote the switch's bytes: shortened)."""
    return shortened(f"the switch holds an entry this controller cannot read: {error!r}")


READ_LIMIT_FACTOR = 2
MIN_READ_LIMIT_ENTITIES = 4096
READ_BYTES_PER_ENTITY = 1024
DEFAULT_TABLE_SIZE = 1024
"""What a table whose P4Info gives no size is taken to hold (p4c's default)."""


def read_limits(names: P4Names) -> tuple[int, int]:
    """Entities and reply bytes the controller accepts in one Read from a switch running
    this pipeline: twice what its tables and indirect counters are declared to hold
    (16,400 for beamer.p4: its tables hold 8,192 entries, of which the controller writes
    at most 6,144, and its queue counter 8 cells), at least MIN_READ_LIMIT_ENTITIES, and
    READ_BYTES_PER_ENTITY bytes per entity. A switch that sends more is in error; the Read
    is cancelled."""
    capacity = sum(table.size or DEFAULT_TABLE_SIZE for table in names.tables.values())
    capacity += sum(counter.size for counter in names.counters.values())
    entities = max(MIN_READ_LIMIT_ENTITIES, READ_LIMIT_FACTOR * capacity)
    return entities, entities * READ_BYTES_PER_ENTITY


def table_read_limits(table: TableRef) -> tuple[int, int]:
    """Entities and reply bytes the controller accepts in a Read of one table (the stage
    counters, every poll): twice what the table is declared to hold (2,048 for
    beamer.p4's stage table), at READ_BYTES_PER_ENTITY bytes per entity, where the whole
    pipeline's limit (:func:`read_limits`) would let a switch send 16,400 at each poll."""
    entities = READ_LIMIT_FACTOR * (table.size or DEFAULT_TABLE_SIZE)
    return entities, entities * READ_BYTES_PER_ENTITY


def not_primary_reason(client: P4RuntimeClient | None) -> str:
    """Why the switch did not make ``client`` primary, as its latest arbitration update
    said: a higher election id only when the update named another primary and an id
    above the client's (P4Runtime 1.4 §5.3), otherwise the update's own code and text."""
    status = client.arbitration_status if client is not None else None
    if client is None or status is None:
        return "the switch has not named this controller primary"
    code, message = status
    highest = client.primary_election_id
    higher = highest is not None and highest > client.election_id
    if code == grpc.StatusCode.ALREADY_EXISTS and higher:
        return f"another controller has a higher election id than {client.election_id}"
    said = f"{code.name}: {message}" if message else code.name
    return f"the switch's arbitration answered {said}"


CATCH_UP_ROUNDS = 3
"""Rounds of writes outside the schedule lock that bring a switch being provisioned up
to the plan before the last difference is written under it (see ``_catch_up``)."""

CONNECT_TIMEOUT_S = 1.0
"""How long one reconnection attempt waits for a switch's gRPC server."""
DEFAULT_LINK_BPS = 1e9
"""Port capacity the policies see for links the topology leaves unshaped."""

Target = Literal["embedded", "bmv2"]
ClassAssigner = Callable[[Ranking, int], Sequence[tuple[CoflowKey, int]]]
"""Ranking and K → (coflow, class) in rank order; class K−1 is the most urgent."""


# --- schedule state ---------------------------------------------------------------------


@dataclass(slots=True)
class _Trial:
    started: bool = False
    stopped: bool = False
    iterations_done: int = 0
    active_iteration: int | None = None


@dataclass(slots=True)
class _Experiment:
    plan: Experiment
    arrival_s: float
    stage_index: int = -1
    """Index in ``plan.stages`` of the released stage; -1 before the first release."""
    stage_running: bool = False
    stage_release_s: float = 0.0
    trials: dict[int, _Trial] = field(default_factory=dict)
    view: ExperimentState | None = None
    """The policy's view, rebuilt only after an event changed the running stage."""
    plan_items: int = 0
    """Trials, flows and hosts in its plan: what it costs to keep (MAX_ACTIVE_PLAN_ITEMS)."""

    @property
    def stage(self) -> int:
        return self.plan.stages[self.stage_index].stage_id

    def trial_plan(self, trial_id: int) -> TrialStage | None:
        for trial in self.plan.stages[self.stage_index].trials:
            if trial.trial_id == trial_id:
                return trial
        return None


@dataclass(slots=True)
class _Coflow:
    key: CoflowKey
    arrival_s: float
    total_bytes: float
    by_port: dict[int, float]
    num_flows: int
    sent_bytes: float = 0.0
    num_ports: int = 0
    view: CoflowState | None = None
    """The policy's view, rebuilt only when progress changes it."""

    def state(self) -> CoflowState:
        if self.view is None:
            left = 1.0 - self.sent_bytes / self.total_bytes if self.total_bytes else 0.0
            # A dense row, as the simulator passes it: policies stack rows without loops.
            row = np.zeros(self.num_ports)
            for port, size in self.by_port.items():
                row[port] = size * left
            self.view = CoflowState(
                key=self.key,
                arrival_s=self.arrival_s,
                total_bytes=self.total_bytes,
                sent_bytes=self.sent_bytes,
                remaining_by_port=PortVector(row),
                num_flows=self.num_flows,
            )
        return self.view


MAX_ACTIVE_PLAN_ITEMS = 1_000_000
"""Trials, flows and hosts in the plans of all active experiments together. A plan item
costs the controller about half a kilobyte (the plan, and the policy's per-trial
demand), so this bounds what the events of a long run, or a client, can make it hold;
one event body (4 MiB) holds at most about a tenth of it."""


class ScheduleState:
    """What is running, as the events told it. Every method validates fully before it
    changes anything, so a refused event leaves the state exactly as it was."""

    def __init__(self, num_hosts: int, port_capacity_bps: Sequence[float]) -> None:
        self.num_hosts = num_hosts
        self.port_capacity_bps = tuple(port_capacity_bps)
        self.experiments: dict[int, _Experiment] = {}
        self.coflows: dict[CoflowKey, _Coflow] = {}
        self._order: list[CoflowKey] = []
        """The keys of ``coflows``, kept sorted (snapshots list coflows in key order)."""

    # -- helpers --

    def _drop_coflow(self, key: CoflowKey) -> None:
        if self.coflows.pop(key, None) is not None:
            del self._order[bisect.bisect_left(self._order, key)]

    def _experiment(self, experiment_id: int) -> _Experiment:
        record = self.experiments.get(experiment_id)
        if record is None:
            raise EventError(f"experiment {experiment_id} is not active")
        return record

    def _running(self, experiment_id: int, stage_id: int) -> _Experiment:
        record = self._experiment(experiment_id)
        if not record.stage_running or record.stage != stage_id:
            running = f"stage {record.stage} is running" if record.stage_running else "none runs"
            raise EventError(
                f"stage {stage_id} of experiment {experiment_id} is not running ({running})"
            )
        return record

    def _trial(self, record: _Experiment, trial_id: int) -> tuple[TrialStage, _Trial]:
        plan = record.trial_plan(trial_id)
        if plan is None:
            raise EventError(
                f"trial {trial_id} is not in the plan of stage {record.stage} "
                f"of experiment {record.plan.experiment_id}"
            )
        return plan, record.trials[trial_id]

    # -- events --

    def apply(self, event: Event, now_s: float) -> dict[str, Any]:
        """Apply one event; returns extra reply fields (the coflow id for coflow_started)."""
        if isinstance(event, ExperimentReleased):
            return self._experiment_released(event, now_s)
        if isinstance(event, StageReleased):
            return self._stage_released(event, now_s)
        if isinstance(event, TrialStarted):
            return self._trial_started(event)
        if isinstance(event, TrialStopped):
            return self._trial_stopped(event)
        if isinstance(event, CoflowStarted):
            return self._coflow_started(event, now_s)
        if isinstance(event, CoflowFinished):
            return self._coflow_finished(event)
        if isinstance(event, StageCompleted):
            return self._stage_completed(event)
        return self._experiment_finished(event)

    def _experiment_released(self, event: ExperimentReleased, now_s: float) -> dict[str, Any]:
        plan = event.experiment
        if plan.experiment_id in self.experiments:
            raise EventError(f"experiment {plan.experiment_id} is already active")
        items = 0
        for s_index, stage in enumerate(plan.stages):
            for t_index, trial in enumerate(stage.trials):
                items += 1 + len(trial.sync_flows) + len(trial.hosts)
                where = f"experiment.stages[{s_index}].trials[{t_index}]"
                for f_index, flow in enumerate(trial.sync_flows):
                    for end, host in (("src", flow.src_host), ("dst", flow.dst_host)):
                        if host >= self.num_hosts:
                            raise EventError(
                                f"{where}.flows[{f_index}].{end}: host {host} does not exist "
                                f"(the topology has {self.num_hosts} hosts)"
                            )
                for h_index, host in enumerate(trial.hosts):
                    if host >= self.num_hosts:
                        raise EventError(f"{where}.hosts[{h_index}]: host {host} does not exist")
        held = sum(record.plan_items for record in self.experiments.values())
        if held + items > MAX_ACTIVE_PLAN_ITEMS:
            raise EventError(
                f"experiment {plan.experiment_id}: its plan holds {items:,} trials, flows and "
                f"hosts, and the {len(self.experiments)} active experiments' plans {held:,}: "
                f"above the limit of {MAX_ACTIVE_PLAN_ITEMS:,} together; finish experiments "
                "first"
            )
        self.experiments[plan.experiment_id] = _Experiment(plan, arrival_s=now_s, plan_items=items)
        return {}

    def _stage_released(self, event: StageReleased, now_s: float) -> dict[str, Any]:
        record = self._experiment(event.experiment_id)
        if record.stage_running:
            raise EventError(
                f"experiment {event.experiment_id}: stage {record.stage} is still running; "
                "send stage_completed first"
            )
        next_index = record.stage_index + 1
        if next_index >= len(record.plan.stages):
            raise EventError(f"experiment {event.experiment_id} has no stage left to release")
        expected = record.plan.stages[next_index].stage_id
        if event.stage_id != expected:
            raise EventError(
                f"experiment {event.experiment_id}: the next stage in the plan is {expected}, "
                f"not {event.stage_id}"
            )
        record.stage_index = next_index
        record.view = None
        record.stage_running = True
        record.stage_release_s = now_s
        record.trials = {t.trial_id: _Trial() for t in record.plan.stages[next_index].trials}
        return {}

    def _trial_started(self, event: TrialStarted) -> dict[str, Any]:
        record = self._running(event.experiment_id, event.stage_id)
        _, trial = self._trial(record, event.trial_id)
        if trial.started:
            raise EventError(f"trial {event.trial_id} has already started")
        trial.started = True
        return {}

    def _trial_stopped(self, event: TrialStopped) -> dict[str, Any]:
        record = self._running(event.experiment_id, event.stage_id)
        _, trial = self._trial(record, event.trial_id)
        if not trial.started or trial.stopped:
            state = "has already stopped" if trial.stopped else "has not started"
            raise EventError(f"trial {event.trial_id} {state}")
        trial.stopped = True
        record.view = None
        if trial.active_iteration is not None:
            key = CoflowKey(
                event.experiment_id, event.stage_id, event.trial_id, trial.active_iteration
            )
            self._drop_coflow(key)
            trial.active_iteration = None
        return {}

    def _coflow_started(self, event: CoflowStarted, now_s: float) -> dict[str, Any]:
        record = self._running(event.experiment_id, event.stage_id)
        plan, trial = self._trial(record, event.trial_id)
        if not trial.started or trial.stopped:
            state = "has stopped" if trial.stopped else "has not started (send trial_started)"
            raise EventError(f"trial {event.trial_id} {state}")
        if trial.active_iteration is not None:
            raise EventError(
                f"trial {event.trial_id}: the coflow of iteration {trial.active_iteration} "
                "has not finished"
            )
        if event.iteration != trial.iterations_done:
            raise EventError(
                f"trial {event.trial_id}: the next iteration is {trial.iterations_done}, "
                f"not {event.iteration}"
            )
        if event.iteration >= plan.iterations:
            raise EventError(
                f"trial {event.trial_id} has only {plan.iterations} iterations in this stage"
            )
        key = CoflowKey(event.experiment_id, event.stage_id, event.trial_id, event.iteration)
        by_port: dict[int, float] = {}
        for flow in plan.sync_flows:
            by_port[flow.src_host] = by_port.get(flow.src_host, 0.0) + flow.size_bytes
            down = self.num_hosts + flow.dst_host
            by_port[down] = by_port.get(down, 0.0) + flow.size_bytes
        trial.active_iteration = event.iteration
        bisect.insort(self._order, key)
        self.coflows[key] = _Coflow(
            key,
            now_s,
            float(plan.sync_bytes),
            by_port,
            len(plan.sync_flows),
            num_ports=len(self.port_capacity_bps),
        )
        return {"coflow_id": coflow_tag(key)}

    def _coflow_finished(self, event: CoflowFinished) -> dict[str, Any]:
        record = self._running(event.experiment_id, event.stage_id)
        _, trial = self._trial(record, event.trial_id)
        if trial.active_iteration != event.iteration:
            active = trial.active_iteration
            raise EventError(
                f"trial {event.trial_id}: iteration {event.iteration} has no active coflow"
                + (f" (iteration {active} is active)" if active is not None else "")
            )
        key = CoflowKey(event.experiment_id, event.stage_id, event.trial_id, event.iteration)
        self._drop_coflow(key)
        trial.active_iteration = None
        trial.iterations_done += 1
        record.view = None
        return {}

    def _stage_completed(self, event: StageCompleted) -> dict[str, Any]:
        record = self._running(event.experiment_id, event.stage_id)
        active = sorted(
            trial_id for trial_id, t in record.trials.items() if t.active_iteration is not None
        )
        if active:
            raise EventError(
                f"stage {event.stage_id} of experiment {event.experiment_id} still has active "
                f"coflows (trials {', '.join(map(str, active))}); send coflow_finished first"
            )
        record.stage_running = False
        finished = record.stage_index == len(record.plan.stages) - 1
        if finished:
            del self.experiments[event.experiment_id]
        return {"experiment_finished": finished}

    def _experiment_finished(self, event: ExperimentFinished) -> dict[str, Any]:
        self._experiment(event.experiment_id)
        del self.experiments[event.experiment_id]
        for key in [k for k in self.coflows if k.experiment_id == event.experiment_id]:
            self._drop_coflow(key)
        return {}

    # -- views --

    def running_stages(self) -> list[StageKey]:
        return [
            StageKey(e_id, record.stage)
            for e_id, record in sorted(self.experiments.items())
            if record.stage_running
        ]

    def add_progress(self, stage_bytes: Mapping[StageKey, float]) -> None:
        """Spread newly counted bytes of each stage over its active coflows."""
        by_stage: dict[StageKey, list[_Coflow]] = {}
        for coflow in self.coflows.values():
            by_stage.setdefault(StageKey(coflow.key.experiment_id, coflow.key.stage_id), []).append(
                coflow
            )
        for stage, new_bytes in stage_bytes.items():
            members = by_stage.get(stage)
            if not members or new_bytes <= 0:
                continue
            share = new_bytes / len(members)
            for coflow in members:
                coflow.sent_bytes = min(coflow.total_bytes, coflow.sent_bytes + share)
                coflow.view = None

    def snapshot(self, now_s: float, num_classes: int | None = None) -> Snapshot:
        coflows = [self.coflows[key].state() for key in self._order]
        experiments = {}
        for e_id, record in self.experiments.items():
            if record.stage_index < 0:
                continue
            if record.view is None:
                done = {}
                for plan in record.plan.stages[record.stage_index].trials:
                    trial = record.trials[plan.trial_id]
                    done[plan.trial_id] = (
                        plan.iterations if trial.stopped else trial.iterations_done
                    )
                record.view = ExperimentState(
                    experiment=record.plan,
                    stage_index=record.stage_index,
                    stage_release_s=record.stage_release_s,
                    iterations_done=done,
                )
            experiments[e_id] = record.view
        return Snapshot(
            now_s=now_s,
            num_hosts=self.num_hosts,
            port_capacity_bps=self.port_capacity_bps,
            coflows=tuple(coflows),
            experiments=experiments,
            num_classes=num_classes,
        )


# --- stable class numbers ---------------------------------------------------------------

DEMOTION_COST = 1.0
PROMOTION_COST = 2.0
"""Moving a group up costs more than moving it down: packets of the group already
queued in the lower queue are then overtaken by its own new packets, and TCP takes
the reordering for loss (spurious fast retransmits, a halved window)."""
_HIGHER_CLASS_BONUS = 1e-3
"""Among equally stable choices, higher classes (the plain rank mapping)."""


def stable_classes(
    groups: Sequence[Sequence[CoflowKey]],
    queues: int,
    previous: Callable[[Sequence[CoflowKey]], int | None],
) -> list[int] | None:
    """One distinct class per group, decreasing in rank order, moving as few as possible.

    Strict priority depends only on the order of the classes, not their numbers,
    so when the groups fit (one class each) any decreasing numbering schedules the
    same. The plain mapping (first group in the top class, and so on) renumbers
    every group below one that appears or goes idle between iterations; each such
    promotion reorders the promoted flows' packets. This picks the numbering that
    keeps ``previous(group)`` wherever the order allows, demoting rather than
    promoting where it does not. ``None`` when the groups do not fit.
    """
    count = len(groups)
    if count == 0:
        return []
    if count > queues:
        return None
    before = [previous(group) for group in groups]

    def cost(index: int, klass: int) -> float:
        old = before[index]
        bonus = _HIGHER_CLASS_BONUS * (queues - 1 - klass)
        if old is None or old == klass:
            return bonus
        return bonus + (DEMOTION_COST if klass < old else PROMOTION_COST)

    # best[i][c]: least cost of groups i.. when group i takes class c (the rest below c).
    inf = float("inf")
    best = [[inf] * queues for _ in range(count)]
    choice = [[-1] * queues for _ in range(count)]
    for klass in range(queues):
        best[count - 1][klass] = cost(count - 1, klass)
    for index in range(count - 2, -1, -1):
        running, argmin = inf, -1
        for klass in range(queues):
            # running = min over lower classes of best[index + 1][lower]
            if klass > 0 and best[index + 1][klass - 1] < running:
                running, argmin = best[index + 1][klass - 1], klass - 1
            if argmin >= 0:
                best[index][klass] = cost(index, klass) + running
                choice[index][klass] = argmin
    klass = min(range(queues), key=lambda c: (best[0][c], -c))
    classes = [klass]
    for index in range(count - 1):
        klass = choice[index][klass]
        classes.append(klass)
    return classes


def _changes_snapshot(event: Event) -> bool:
    """Whether the event can change what the policy sees. A released experiment enters
    the snapshot only with its first stage; a started trial only with its first coflow."""
    return not isinstance(event, ExperimentReleased | TrialStarted)


def _experiment_of(event: Event) -> int:
    if isinstance(event, ExperimentReleased):
        return event.experiment.experiment_id
    return event.experiment_id


# --- per-switch session ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PipelineArtifacts:
    """What is pushed to a switch: the P4Info plus the target's device config."""

    p4info: p4info_pb2.P4Info
    device_config: bytes

    @property
    def cookie(self) -> int:
        """Identifies this exact pipeline, so a reconnect can tell whether to push again."""
        digest = hashlib.sha256(self.p4info.SerializeToString(deterministic=True))
        digest.update(self.device_config)
        return int.from_bytes(digest.digest()[:8], "big") or 1


SessionState = Literal["down", "ready", "lagging", "backup", "error"]


@dataclass(slots=True)
class Backoff:
    """When to try bringing one switch up again: at once the first time, then after
    ``first_s``, doubling after each failed attempt up to ``max_s``.

    An attempt fails when it leaves the switch not ready, and also when the switch
    failed again less than ``max_s`` after it became ready (a stream that breaks right
    after each provisioning); a switch that stayed ready that long starts again from no
    wait (:meth:`trouble`). Times are the controller's clock."""

    first_s: float
    max_s: float
    failures: int = 0
    next_attempt_s: float = float("-inf")

    def due(self, now_s: float) -> bool:
        return now_s >= self.next_attempt_s

    def failed(self, now_s: float) -> None:
        self.failures += 1
        self.next_attempt_s = now_s + min(self.max_s, self.first_s * 2 ** (self.failures - 1))

    def reset(self) -> None:
        self.failures = 0
        self.next_attempt_s = float("-inf")

    def trouble(self, ready_since_s: float | None, now_s: float) -> None:
        """The switch needs an attempt again; it was ready since ``ready_since_s``."""
        if ready_since_s is None:
            return
        if now_s - ready_since_s >= self.max_s:
            self.reset()
        else:
            self.failed(now_s)

    def wait_s(self, now_s: float) -> float | None:
        """Seconds until the next attempt; None when one may run now."""
        return self.next_attempt_s - now_s if now_s < self.next_attempt_s else None


@dataclass(slots=True)
class _Said:
    at_s: float
    repeats: int = 0


class QuietLog:
    """Lines about switches, each logged at most once per ``interval_s``: said again
    sooner, a line is only counted, and the count is logged with it the next time. A
    switch that keeps failing the same way does not flood the log; its status shows
    each state as it comes."""

    MAX_LINES = 256
    """Lines remembered; past this, those older than the interval are forgotten."""

    def __init__(self, interval_s: float, clock: Callable[[], float]) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self._said: dict[tuple[str, str], _Said] = {}
        self._lock = threading.Lock()

    def log(self, level: int, switch: str, message: str) -> None:
        now_s = self.clock()
        key = (switch, message)
        with self._lock:
            said = self._said.get(key)
            if said is not None and now_s - said.at_s < self.interval_s:
                said.repeats += 1
                return
            if said is not None and said.repeats:
                message += (
                    f" (and {said.repeats} more time{'s' if said.repeats > 1 else ''} "
                    f"in the {now_s - said.at_s:.0f} s before)"
                )
            self._said[key] = _Said(now_s)
            if len(self._said) > self.MAX_LINES:
                self._said = {
                    k: v for k, v in self._said.items() if now_s - v.at_s < self.interval_s
                }
        log.log(level, "%s: %s", switch, message)


@dataclass(frozen=True, slots=True)
class _Connection:
    """Outcome of connecting to one switch: a client (None if unreachable), whether it
    won arbitration, and the error otherwise."""

    client: P4RuntimeClient | None
    primary: bool
    error: str | None
    refused: bool = False
    """The switch answered and refused the arbitration (see ``ArbitrationRefusedError``)."""


@dataclass
class SwitchSession:
    spec: SwitchSpec
    artifacts: PipelineArtifacts
    names: P4Names
    forwarding: EntryMap
    client: P4RuntimeClient | None = None
    state: SessionState = "down"
    installed: EntryMap = field(default_factory=dict)
    error: str | None = None
    provisions: int = 0
    """How many times the pipeline was pushed (1 normally; +1 per switch restart)."""
    reconciles: int = 0
    counter_bytes: dict[StageKey, int] = field(default_factory=dict)
    backoff: Backoff = field(default_factory=lambda: Backoff(0.5, 10.0))
    ready_since_s: float | None = None
    """When the switch last became ready (controller clock); None while it is not."""
    writing: Future[_Written] | None = None
    """The event writes still out on a ``lagging`` switch (None: none)."""
    slow: bool = False
    """Its last event writes took longer than the write budget: events no longer wait
    for its writes (it turns lagging at once) until a write of its is acknowledged
    within the budget, so that a switch that stays slow costs one event the budget, not
    one event after each catch-up."""
    attempt: Future[None] | None = None
    """The supervisor's attempt to bring the switch up or catch it up, running in the
    background (None: none since the last round looked)."""


@dataclass(frozen=True, slots=True)
class _Written:
    """One switch's writes for a reschedule: the updates per kind and the RPCs sent, what
    the switch holds after them (a copy of what it held, so that events and the status
    can read the session while the writes are out), and the failure that ended them."""

    counts: tuple[int, int, int, int]
    installed: EntryMap
    failure: P4RuntimeError | None
    took_s: float


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    topology: Topology
    artifacts: Mapping[Target, PipelineArtifacts]
    policy_name: str
    queues: int = 8
    election_id: int = DEFAULT_ELECTION_ID
    default_target: Target = "embedded"
    layout: PipelineLayout = field(default_factory=PipelineLayout)
    supervise_interval_s: float = 0.5
    counter_interval_s: float = 1.0
    rpc_timeout_s: float = 5.0
    journal_path: Path | None = None
    """Where accepted events are kept for a restart; ``None``: not kept."""
    retry_max_s: float = 10.0
    """The longest wait between two attempts to bring a failing switch up (see
    :class:`Backoff`); the first wait is ``supervise_interval_s``."""
    repeat_log_interval_s: float = 60.0
    """A line about a switch is logged at most once in this time (see :class:`QuietLog`)."""
    write_budget_s: float = 2.0
    """How long a reschedule waits for one ready switch's writes; a switch that takes
    longer is set ``lagging`` and caught up in the background."""


PHASES = ("snapshot", "rank", "plan", "diff", "encode", "rpc")


@dataclass(frozen=True, slots=True)
class Reaction:
    """What one event cost: writes per kind and the wall time until all were acknowledged."""

    inserts: int
    modifies: int
    deletes: int
    rpcs: int
    seconds: float


class Controller(EventHandler):
    """See the module docstring.

    ``policy_factory`` (optional) builds a fresh policy when the tuning system reuses
    an experiment id: policies may cache per-experiment plan data by id.
    """

    def __init__(
        self,
        config: ControllerConfig,
        policy: Any,
        assign_classes: ClassAssigner,
        clock: Callable[[], float] = time.monotonic,
        policy_factory: Callable[[], Any] | None = None,
    ) -> None:
        self.config = config
        self.policy_factory = policy_factory
        self._seen_experiments: set[int] = set()
        self.policy = policy
        self.assign_classes = assign_classes
        self.clock = clock
        self._start_s = clock()
        topology = config.topology
        capacities = []
        for host in topology.hosts:
            rate = topology.host_link(host.name).rate_mbps
            capacities.append(rate * 1e6 if rate is not None else DEFAULT_LINK_BPS)
        self.state = ScheduleState(len(topology.hosts), capacities + capacities)
        # Two locks, always taken in this order when both are needed:
        # ``_schedule_lock`` guards the plan, the sessions and what they hold (one
        # reschedule at a time; a switch being provisioned takes it only briefly, see
        # ``_provision``); ``_lock`` guards the schedule state and is held only
        # briefly, so events are applied while a reschedule runs.
        self._schedule_lock = threading.RLock()
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._rerank = threading.Event()
        """Set when the policy's background search has returned an order to rank by."""
        self._searching_policy: SearchesInBackground | None = None
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        self.ranked: list[tuple[CoflowKey, int]] = []
        self.plan = ClassPlan({}, {}, {}, (), ())
        self._stage_memory: dict[StageKey, int] = {}
        self._adopted_classes = False
        self.events_applied = 0
        self.last_reaction: Reaction | None = None
        self._changes = 0
        """Accepted events that can change the policy's snapshot, counted."""
        self._scheduled = 0
        """The value of ``_changes`` the last finished reschedule covered."""
        self.reschedules = 0
        self.phase_s: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        """Cumulative seconds per phase of rescheduling (for benchmarks and status)."""
        self.sessions: dict[str, SwitchSession] = {}
        routes = topology.routes()
        self.layout = config.layout
        for spec in topology.switches:
            target: Target = spec.target or config.default_target
            if target not in config.artifacts:
                raise UserError(f"switch {spec.name}: no pipeline given for target {target}")
            artifacts = config.artifacts[target]
            names = P4Names.build(artifacts.p4info)
            try:
                self.layout = resolve_layout(config.layout, names)
            except P4NameError as error:
                raise UserError(f"switch {spec.name}: the pipeline does not fit: {error}") from None
            class_bits = names.action(self.layout.stage_action).param(self.layout.class_param)
            if not 1 <= config.queues <= 2**class_bits.bitwidth:
                raise UserError(
                    f"{config.queues} classes do not fit the pipeline's "
                    f"{class_bits.bitwidth}-bit class parameter"
                )
            # Refused here, or the switch would stay in error for ever: its forwarding
            # table full before every host has its route.
            forward_table = names.table(self.layout.forward_table)
            capacity = forward_table.size or DEFAULT_TABLE_SIZE
            if len(routes[spec.name]) > capacity:
                raise UserError(
                    f"{topology.source}: switch {spec.name} needs {len(routes[spec.name]):,} "
                    f"routes (one per host), more than the pipeline's {forward_table.name} "
                    f"holds ({capacity:,} entries)"
                )
            forwarding = canonical_map(forwarding_entries(self.layout, routes[spec.name]), names)
            self.sessions[spec.name] = SwitchSession(
                spec,
                artifacts,
                names,
                forwarding,
                backoff=Backoff(config.supervise_interval_s, config.retry_max_s),
            )
        self._class_entries = ClassEntries(self.layout)
        self._quiet = QuietLog(config.repeat_log_interval_s, clock)
        self._writers = ThreadPoolExecutor(
            max_workers=max(1, len(self.sessions)), thread_name_prefix="writer"
        )
        self._attempts = ThreadPoolExecutor(
            max_workers=max(1, len(self.sessions)), thread_name_prefix="bring-up"
        )
        """One attempt per switch at a time (see :meth:`_supervise_once`)."""
        self._poller = ThreadPoolExecutor(max_workers=1, thread_name_prefix="poll")
        self._polling: Future[None] | None = None
        """The counter poll under way (see :meth:`_poll`); one at a time."""
        self._readers = ThreadPoolExecutor(
            max_workers=max(1, len(self.sessions)), thread_name_prefix="counters"
        )
        self.journal = (
            EventJournal(config.journal_path, [host.name for host in config.topology.hosts])
            if config.journal_path
            else None
        )
        if self.journal is not None:
            try:
                self.journal.check_writable()
                self._replay(self.journal)
            except BaseException:
                self.journal.abandon()
                raise

    def _replay(self, journal: EventJournal) -> None:
        """Rebuild the schedule from the journal before any switch is touched."""
        for number, raw in journal.load():
            try:
                event = parse_event(raw, self._resolve_host)
                self.state.apply(event, self.now_s())
            except EventError as error:
                raise UserError(f"{journal.path}:{number}: {error}") from None
            if isinstance(event, ExperimentReleased):
                self._seen_experiments.add(event.experiment.experiment_id)
            experiment_id = _experiment_of(event)
            if experiment_id in self.state.experiments:
                journal.remember(experiment_id, event)
            else:
                journal.drop(experiment_id)
            self.events_applied += 1
        self._replan()

    # -- lifecycle --

    def now_s(self) -> float:
        return self.clock() - self._start_s

    def start(self, wait: bool = True) -> None:
        """Connect and provision every switch (once, synchronously when ``wait``), then
        keep supervising them in the background. The switches are brought up at once:
        a start-up costs the slowest switch's time, not the sum of theirs."""
        if wait:
            bringing_up = [
                self._attempts.submit(self._bring_up, session, None)
                for session in self.sessions.values()
            ]
            for attempt in bringing_up:
                attempt.result()
        self._supervisor = threading.Thread(target=self._supervise, name="supervisor", daemon=True)
        self._supervisor.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._supervisor is not None:
            self._supervisor.join(timeout=10)
        # Closing the streams ends the RPCs still out on them (an attempt's, a poll's, a
        # lagging switch's writes) at once rather than at their timeouts; an attempt may
        # open a new stream meanwhile, so they are closed again once the attempts end.
        self._close_streams()
        self._attempts.shutdown(wait=True)
        self._poller.shutdown(wait=True)
        self._readers.shutdown(wait=True)
        self._close_streams()
        with self._schedule_lock:
            if self._searching_policy is not None:
                self._searching_policy.close()
                self._searching_policy = None
        self._writers.shutdown(wait=True)
        if self.journal is not None:
            self.journal.close()  # another controller may take the journal now

    def _close_streams(self) -> None:
        """On stop: every switch down, its stream closed."""
        with self._schedule_lock:
            clients = [s.client for s in self.sessions.values() if s.client is not None]
            for session in self.sessions.values():
                session.client = None
                session.state = "down"
        for client in clients:
            suppress_close_errors(client)  # may wait for its reader: not under the lock

    # -- event API --

    def handle_event(self, raw: Any) -> dict[str, Any]:
        """Apply one event, then make sure the switches reflect it before replying.

        Group commit: events that arrive while a reschedule runs are applied at once and
        wait; the next reschedule covers all of them together. Each reply still leaves
        only after the writes that reflect its event were acknowledged."""
        started = time.perf_counter()
        with self._lock:
            event = parse_event(raw, self._resolve_host)
            experiment_id = _experiment_of(event)
            # Journal first, so an event that cannot be kept is not applied either; a
            # refused event's line is taken back: the file holds the accepted events.
            mark = self.journal.append(experiment_id, event) if self.journal else None
            try:
                result = self.state.apply(event, self.now_s())
            except EventError:
                if self.journal is not None and mark is not None:
                    self.journal.undo(mark)
                raise
            self.events_applied += 1
            if isinstance(event, ExperimentReleased):
                self._note_experiment(event.experiment.experiment_id)
            if self.journal is not None and experiment_id not in self.state.experiments:
                self.journal.forget(experiment_id)
            ticket = 0
            if _changes_snapshot(event):
                self._changes += 1
                ticket = self._changes
        counts = (0, 0, 0, 0)
        folded = False
        if ticket:
            with self._schedule_lock:
                if self._scheduled < ticket:
                    counts = self._reschedule()
                else:
                    folded = True
        reaction = Reaction(*counts, seconds=time.perf_counter() - started)
        self.last_reaction = reaction
        pending = [s.spec.name for s in self.sessions.values() if s.state != "ready"]
        return {
            **result,
            "event": event.type,
            "writes": {
                "insert": reaction.inserts,
                "modify": reaction.modifies,
                "delete": reaction.deletes,
                "rpcs": reaction.rpcs,
            },
            "folded": folded,
            "reaction_ms": round(reaction.seconds * 1e3, 3),
            "pending_switches": pending,
        }

    def _note_experiment(self, experiment_id: int) -> None:
        """A reused experiment id gets a fresh policy, so no cached plan data is stale."""
        if experiment_id in self._seen_experiments and self.policy_factory is not None:
            log.info("experiment id %d reused; starting a fresh policy", experiment_id)
            self.policy = self.policy_factory()
        self._seen_experiments.add(experiment_id)

    def _resolve_host(self, value: str | int) -> int:
        topology = self.config.topology
        if isinstance(value, str):
            return topology.host_index(value)
        if not 0 <= value < len(topology.hosts):
            raise KeyError(value)
        return value

    def _search_in_background(self) -> None:
        """Let a policy with a long search (the lookahead) run it in a worker process, so
        an event's reply never waits for it; its order is ranked when it returns."""
        policy = self.policy
        if policy is self._searching_policy:
            return
        if self._searching_policy is not None:
            self._searching_policy.close()
            self._searching_policy = None
        if isinstance(policy, SearchesInBackground):
            policy.search_in_background(self._search_returned)
            self._searching_policy = policy

    def _search_returned(self) -> None:
        self._rerank.set()
        self._wake.set()

    def _replan(self) -> None:
        """Rank the active coflows, map them onto classes, and plan the class entries."""
        self._search_in_background()
        phase = self.phase_s
        started = time.perf_counter()
        with self._lock:
            snapshot = self.state.snapshot(self.now_s(), self.config.queues)
            running = self.state.running_stages()
            self._scheduled = self._changes
        ranked_at = time.perf_counter()
        phase["snapshot"] += ranked_at - started
        if snapshot.coflows:
            ranking = self.policy.rank(snapshot)
            assigned = list(self.assign_classes(ranking, self.config.queues))
            self.ranked = self._renumber_stably(ranking, assigned)
        else:
            self.ranked = []
        planned_at = time.perf_counter()
        phase["rank"] += planned_at - ranked_at
        self._stage_memory = {
            stage: klass for stage, klass in self._stage_memory.items() if stage in running
        }
        idle = {
            stage: self._stage_memory[stage] for stage in running if stage in self._stage_memory
        }
        names = next(iter(self.sessions.values())).names
        layout = self.layout
        self.plan = plan_classes(
            self.ranked,
            layout,
            coflow_table_size=names.table(layout.coflow_table).size or 1024,
            stage_table_size=names.table(layout.stage_table).size or 1024,
            idle_stage_classes=idle,
            factory=self._class_entries,
        )
        self._stage_memory.update(self.plan.stage_classes)
        phase["plan"] += time.perf_counter() - planned_at

    def _renumber_stably(
        self, ranking: Ranking, assigned: list[tuple[CoflowKey, int]]
    ) -> list[tuple[CoflowKey, int]]:
        """The assigner's classes, renumbered by :func:`stable_classes` when that changes
        nothing but the numbers: each group in one class of its own, in rank order."""
        class_of = dict(assigned)
        group_classes = []
        for group in ranking.groups:
            classes = {class_of[key] for key in group}
            if len(classes) != 1:
                return assigned
            group_classes.append(classes.pop())
        if any(a <= b for a, b in itertools.pairwise(group_classes)):
            return assigned
        before = dict(self.ranked)
        memory = self._stage_memory

        def previous(group: Sequence[CoflowKey]) -> int | None:
            counts: dict[int, int] = {}
            for key in group:
                klass = before.get(key)
                if klass is None:
                    klass = memory.get(StageKey(key.experiment_id, key.stage_id))
                if klass is not None:
                    counts[klass] = counts.get(klass, 0) + 1
            if not counts:
                return None
            return max(counts, key=lambda k: (counts[k], k))

        renumbered = stable_classes(ranking.groups, self.config.queues, previous)
        if renumbered is None:
            return assigned
        return [
            (key, klass)
            for group, klass in zip(ranking.groups, renumbered, strict=True)
            for key in group
        ]

    def _reschedule(self) -> tuple[int, int, int, int]:
        """Re-plan and bring every ready switch to the plan; returns write counts."""
        self.reschedules += 1
        self._replan()
        return self._write_ready([s for s in self.sessions.values() if s.state == "ready"])

    def _write_ready(self, sessions: list[SwitchSession]) -> tuple[int, int, int, int]:
        """Bring ready switches to the plan; returns write counts. Under the schedule lock.

        Switches are independent: their writes run at once, and this waits for every
        acknowledgement, up to ``write_budget_s``; for a switch already known to be slower
        than that (``slow``), not at all. A switch still writing then is set lagging
        (:meth:`_lagging`), and its writes are not counted here."""
        jobs: list[tuple[SwitchSession, Future[_Written]]] = []
        for session in sessions:
            started = time.perf_counter()
            changes = diff(self.desired(session), session.installed)
            self.phase_s["diff"] += time.perf_counter() - started
            if not changes.empty:
                jobs.append((session, self._writers.submit(self._write, session, changes)))
        if not jobs:
            return 0, 0, 0, 0
        waited = [future for session, future in jobs if not session.slow]
        if waited:
            wait(waited, timeout=self.config.write_budget_s)
        totals = [0, 0, 0, 0]
        for session, future in jobs:
            if not future.done():
                self._lagging(session, future)
                continue
            written = future.result()
            self._settle(session, written)
            totals = [a + b for a, b in zip(totals, written.counts, strict=True)]
        return totals[0], totals[1], totals[2], totals[3]

    def _write(self, session: SwitchSession, changes: Changes) -> _Written:
        """Write ``changes`` to a ready switch, on a copy of what it holds."""
        client = session.client
        assert client is not None
        installed = dict(session.installed)
        started = time.perf_counter()
        rpcs, failure = self._write_changes(session, client, changes, installed)
        took_s = time.perf_counter() - started
        counts = (len(changes.inserts), len(changes.modifies), len(changes.deletes), rpcs)
        return _Written(counts, installed, failure, took_s)

    def _settle(self, session: SwitchSession, written: _Written) -> None:
        """Take in a switch's acknowledged writes; on failure, mark the switch for
        reconciliation (read back, then diff again) by the supervisor. Under the
        schedule lock."""
        session.installed = written.installed
        session.slow = written.took_s > self.config.write_budget_s
        failure = written.failure
        if isinstance(failure, NotPrimaryError):
            self._refused(session, failure)
        elif failure is not None:
            # Said so: the failure may have come long after the event that sent the writes.
            when = " while lagging" if session.state == "lagging" else ""
            session.state = "error"
            session.error = f"write failed{when}: {failure}"
            self._say(session, logging.WARNING, f"{session.error}; will read back")
            self._wake.set()

    def _lagging(self, session: SwitchSession, writing: Future[_Written]) -> None:
        """A ready switch took longer than the write budget: events go on without it (it
        is in ``pending_switches``), its writes go on in the background, and once they
        are acknowledged the supervisor catches it up with the plan as it is then
        (:meth:`_resume`). Under the schedule lock."""
        budget = self.config.write_budget_s
        session.state = "lagging"
        if session.slow:
            session.error = (
                f"its last writes took longer than {budget:g} s; events do not wait for it "
                "until a write of its is acknowledged within that"
            )
        else:
            session.error = (
                f"its writes took longer than {budget:g} s; events go on without it, and it "
                "catches up once they are acknowledged"
            )
        session.ready_since_s = None
        session.writing = writing
        self._say(session, logging.WARNING, session.error)
        writing.add_done_callback(lambda _done: self._wake.set())

    def desired(self, session: SwitchSession) -> EntryMap:
        wanted = dict(session.forwarding)
        wanted.update(self.plan.entries)
        return wanted

    def _managed_tables(self, session: SwitchSession) -> set[str]:
        layout = self.layout
        return {
            session.names.table(name).name
            for name in (layout.forward_table, layout.stage_table, layout.coflow_table)
        }

    def _write_changes(
        self,
        session: SwitchSession,
        client: P4RuntimeClient,
        changes: Changes,
        installed: EntryMap,
        phases: bool = True,
    ) -> tuple[int, P4RuntimeError | None]:
        """Write ``changes`` make-before-break (:func:`plan_writes`), updating ``installed``
        after each acknowledged step; the RPCs sent and the failure that ended them, if
        any. ``phases``: count the time in :attr:`phase_s` (an event's writes)."""
        names = session.names
        table_size = {t.name: t.size for t in names.tables.values() if t.size}
        installed_count: dict[str, int] = {}
        for key in installed:
            installed_count[key.table] = installed_count.get(key.table, 0) + 1
        rpcs = 0
        try:
            for step in plan_writes(changes, installed_count, table_size):
                encode_start = time.perf_counter()
                rpc_batches = batches(step, names)
                rpc_start = time.perf_counter()
                for batch in rpc_batches:
                    client.write(batch)
                    rpcs += 1
                if phases:
                    self.phase_s["encode"] += rpc_start - encode_start
                    self.phase_s["rpc"] += time.perf_counter() - rpc_start
                for kind, key, action in step.updates:
                    if kind == p4runtime_pb2.Update.DELETE:
                        installed.pop(key, None)
                    else:
                        installed[key] = action
        except P4RuntimeError as error:
            return rpcs, error
        return rpcs, None

    def _refused(self, session: SwitchSession, error: NotPrimaryError) -> None:
        """A Write or pipeline push refused with PERMISSION_DENIED. Another controller is
        the reason only when arbitration says so; otherwise the refusal is the switch's own
        (a role or a permission it does not grant) and is reported as the switch said it:
        the switch is in error and the supervisor tries again."""
        client = session.client
        if client is not None and not client.is_primary:
            self._not_primary(session)
            return
        session.state = "error"
        session.error = f"refused by the switch, which names this controller primary: {error}"
        self._say(session, logging.WARNING, f"{session.error}; will try again")
        self._wake.set()

    def _not_primary(self, session: SwitchSession) -> None:
        """Arbitration did not make this controller primary: it stays a backup, never
        writes, and says why as the switch told it."""
        spec = session.spec
        error = (
            f"not primary for device {spec.device_id} at {spec.grpc_addr}: "
            f"{not_primary_reason(session.client)}; "
            "this controller will not write"
        )
        if (session.state, session.error) != ("backup", error):
            self._say(session, logging.ERROR, error)  # not at every round
        session.state = "backup"
        session.error = error

    def _say(self, session: SwitchSession, level: int, message: str) -> None:
        """Log a line about a switch, once per ``repeat_log_interval_s`` (:class:`QuietLog`)."""
        self._quiet.log(level, session.spec.name, message)

    # -- provisioning and recovery --

    def _connect(self, session: SwitchSession) -> _Connection:
        """Open a client and arbitrate; slow when the switch is down, so callers run it
        without holding the controller's lock."""
        spec = session.spec
        max_read_entities, max_read_bytes = read_limits(session.names)
        client = P4RuntimeClient(
            spec.grpc_addr,
            spec.device_id,
            self.config.election_id,
            timeout_s=self.config.rpc_timeout_s,
            # A switch that is down should not hold the supervisor long per attempt.
            connect_timeout_s=min(self.config.rpc_timeout_s, CONNECT_TIMEOUT_S),
            on_stream_lost=lambda _c: self._wake.set(),
            on_arbitration=lambda _c, _primary: self._wake.set(),
            # Take the switch back when a client with a higher id was primary and left.
            reclaim=True,
            max_read_entities=max_read_entities,
            max_read_bytes=max_read_bytes,
        )
        try:
            primary = client.connect()
        except ArbitrationRefusedError as error:
            reason = error.message.removeprefix(f"{spec.grpc_addr}: ")
            return _Connection(None, False, f"{error.code.name}: {reason}", refused=True)
        except P4RuntimeError as error:
            return _Connection(None, False, str(error))
        return _Connection(client, primary, None)

    def _provision(self, session: SwitchSession, connection: _Connection) -> None:
        """Win arbitration, push the pipeline if the switch lacks ours, read the tables
        back and write only the difference (:meth:`_catch_up`); ``connection`` is a fresh
        :meth:`_connect` result, or the stream the session holds.

        Called without the schedule lock, by :meth:`start` or by the supervisor's one
        attempt for this switch (:meth:`_attempt`), on a switch that is not ready: events and
        polls leave such a switch alone (it is in ``pending_switches``), so its RPCs,
        however slow, hold up neither events for the other switches nor the status. The
        lock is taken for what the switches share (the session's client and state, the
        plan) and to make the switch ready."""
        spec = session.spec
        client = connection.client
        with self._schedule_lock:
            stale = session.client if session.client is not client else None
            if session.client is not client:
                session.slow = False  # a new stream, maybe to a restarted switch
            session.client = client
        if stale is not None:
            suppress_close_errors(stale)  # may wait for its reader: not under the lock
        with self._schedule_lock:
            if client is None and connection.refused:
                # The switch is up and said no (another controller holds our election id):
                # this controller stays off it, and asks again while it runs.
                error = (
                    f"not primary for device {spec.device_id} at {spec.grpc_addr}: "
                    f"{connection.error}; this controller will not write"
                )
                if (session.state, session.error) != ("backup", error):
                    self._say(session, logging.ERROR, error)  # not at every retry
                session.state = "backup"
                session.error = error
                return
            if client is None:
                session.state = "down"
                session.error = connection.error
                return
            if not connection.primary:
                self._not_primary(session)
                return
            assert session.state != "ready", "provisioning a switch events write to"
        try:
            self._push_pipeline(session, client)
            self._point_acks_at_top_class(session, client)
            installed = self._read_back(session, client)
            with self._schedule_lock:
                session.installed = installed
                self._adopt_installed_classes(session)
            self._catch_up(session, client)
        except (P4RuntimeError, *UNREADABLE_ENTRY) as error:
            self._bringing_up_failed(session, error)

    def _bringing_up_failed(self, session: SwitchSession, error: Exception) -> None:
        """Provisioning or a catch-up ended in ``error``: the switch is in error (or a
        backup, if another controller refused it), and the supervisor tries again."""
        with self._schedule_lock:
            if isinstance(error, NotPrimaryError):
                self._refused(session, error)
                return
            session.state = "error"
            session.error = (
                str(error) if isinstance(error, P4RuntimeError) else unreadable_entry(error)
            )
        self._say(session, logging.WARNING, f"provisioning failed: {session.error}")

    def _resume(self, session: SwitchSession) -> None:
        """A lagging switch's writes have ended: take them in, then catch it up with the
        plan off the schedule lock, as provisioning does (:meth:`_catch_up`). Writes that
        failed leave it in error, to be read back."""
        with self._schedule_lock:
            writing, session.writing = session.writing, None
            if writing is not None:
                try:
                    written = writing.result()
                except Exception as error:  # a bug: what the switch holds is unknown
                    session.state = "error"
                    session.error = shortened(f"writes failed: {error!r}")
                    self._wake.set()
                    return
                self._settle(session, written)
            client = session.client
            if session.state != "lagging":
                return
            if client is None or not client.connected or not client.is_primary:
                session.state = "error"
                session.error = "lost while lagging; reconnecting"
                self._wake.set()
                return
        try:
            self._catch_up(session, client)
        except (P4RuntimeError, *UNREADABLE_ENTRY) as error:
            self._bringing_up_failed(session, error)

    def _catch_up(self, session: SwitchSession, client: P4RuntimeClient) -> None:
        """Write what the switch lacks of the plan, then make it ready.

        The writes run outside the schedule lock, on a copy of what the switch holds;
        events meanwhile change the plan, so the difference is taken again under the
        lock: when nothing is left, the switch is made ready there, and from then on
        events write to it. After CATCH_UP_ROUNDS rounds (events kept changing the plan)
        the last difference is written under the lock, as an event's writes are (for at
        most the write budget; a switch slower than that is lagging, and caught up again
        when they end). So one switch's writes never overlap and are sent in the order
        they were planned."""
        for round_number in range(CATCH_UP_ROUNDS):
            with self._schedule_lock:
                if self._stopping.is_set():
                    return
                changes = diff(self.desired(session), session.installed)
                if changes.empty or round_number == CATCH_UP_ROUNDS - 1:
                    session.state = "ready"
                    session.error = None
                    session.reconciles += 1
                    self._write_ready([session])
                    if session.state == "ready":
                        session.ready_since_s = self.clock()
                    return
                installed = dict(session.installed)
            try:
                _, failure = self._write_changes(session, client, changes, installed, False)
            finally:
                with self._schedule_lock:
                    session.installed = installed
            if failure is not None:
                raise failure

    def _push_pipeline(self, session: SwitchSession, client: P4RuntimeClient) -> None:
        """Make the switch run our pipeline, keeping its table state where it can.

        Same cookie: nothing to do. No pipeline: VERIFY_AND_COMMIT. Another cookie (a
        different program, or ours built elsewhere, e.g. from another path spelling):
        RECONCILE_AND_COMMIT, which keeps the entries, so a restarted controller never
        wipes a running switch; a target that cannot reconcile gets VERIFY_AND_COMMIT
        and the tables are written again after the read-back."""
        artifacts = session.artifacts
        installed = client.pipeline_cookie()
        if installed == artifacts.cookie:
            return
        actions = p4runtime_pb2.SetForwardingPipelineConfigRequest
        if installed is not None:
            try:
                client.set_pipeline(
                    artifacts.p4info,
                    artifacts.device_config,
                    cookie=artifacts.cookie,
                    action=actions.RECONCILE_AND_COMMIT,
                )
            except NotPrimaryError:
                raise
            except P4RuntimeError as error:
                self._say(
                    session, logging.INFO, f"cannot reconcile ({error}); replacing the pipeline"
                )
            else:
                session.provisions += 1
                self._say(session, logging.INFO, "pipeline reconciled, forwarding state kept")
                return
        client.set_pipeline(artifacts.p4info, artifacts.device_config, cookie=artifacts.cookie)
        session.provisions += 1
        self._say(session, logging.INFO, "pipeline pushed")

    def _point_acks_at_top_class(self, session: SwitchSession, client: P4RuntimeClient) -> None:
        """Class payload-less TCP segments into the top class of the switch's queues.

        The program's default is class 7, the top of eight queues; a switch run with fewer
        (``--queues 4``) has no queue 7, drops what is classed there, and every handshake
        and ACK of the run would be lost. Written on every provisioning: a pipeline push
        resets defaults, and another controller may have left another class."""
        layout = self.layout
        if layout.ack_table is None:
            return
        action = ActionCall(layout.ack_action, ((layout.class_param, self.config.queues - 1),))
        update = default_action_update(layout.ack_table, action, session.names)
        wanted = update.entity.table_entry
        query = p4runtime_pb2.TableEntry(table_id=wanted.table_id, is_default_action=True)
        held = client.read([p4runtime_pb2.Entity(table_entry=query)])
        if any(e.table_entry.action == wanted.action for e in held):
            return  # already so: a restarted controller writes nothing
        client.write([update])

    def _read_back(self, session: SwitchSession, client: P4RuntimeClient) -> EntryMap:
        """What the switch says it holds of the tables this controller manages."""
        managed = self._managed_tables(session)
        installed: EntryMap = {}
        for entry in client.read_table(0):
            if entry.is_default_action or session.names.tables_by_id.get(entry.table_id) is None:
                continue
            key, action = from_table_entry(entry, session.names)
            if key.table in managed:
                installed[key] = action
        return installed

    def _adopt_installed_classes(self, session: SwitchSession) -> None:
        """On this controller's first read-back, take the class numbers the switch holds
        for the running stages as their history (a restart after a journal replay): the
        stable numbering then keeps them instead of rewriting equivalent ones."""
        if self._adopted_classes:
            return
        self._adopted_classes = True
        with self._lock:
            running = self.state.running_stages()
        adopted: dict[StageKey, int] = {}
        for stage in running:
            key, _ = self._class_entries.stage(stage, 0)
            action = session.installed.get(key)
            if action is not None:
                adopted[stage] = dict(action.params)[self.layout.class_param]
        if adopted:
            self._stage_memory = adopted
            self.ranked = []
            self._replan()

    def _supervise(self) -> None:
        last_counters = time.monotonic()
        while not self._stopping.is_set():
            try:
                last_counters = self._supervise_once(last_counters)
            except Exception:  # a bug must not end supervision, which nothing would restart
                log.exception("supervision round failed; the next one runs as usual")

    def _supervise_once(self, last_counters: float) -> float:
        """One round of :meth:`_supervise`; returns when the counters were last read."""
        self._wake.wait(self.config.supervise_interval_s)
        self._wake.clear()
        if self._stopping.is_set():
            return last_counters
        if self._rerank.is_set():
            self._rerank.clear()
            with self._schedule_lock:
                self._reschedule()
        with self._schedule_lock:
            todo = [(s, self._needs_provisioning(s)) for s in self.sessions.values()]
        for session, need in todo:
            if session.attempt is not None:
                if not session.attempt.done():
                    continue  # one attempt per switch at a time
                session.attempt = None
                with self._schedule_lock:
                    need = self._needs_provisioning(session)  # the attempt changed it
            if need in ("reconnect", "reprovision"):
                now_s = self.clock()
                with self._schedule_lock:
                    session.backoff.trouble(session.ready_since_s, now_s)
                    session.ready_since_s = None
            if need == "reconnect":
                if session.state == "ready":
                    self._say(session, logging.WARNING, "connection lost; reconnecting")
                with self._schedule_lock:
                    # Its stream is gone. Detached under the lock, so no event writes
                    # through it while it closes (the switch waits in pending_switches);
                    # closing it tells the switch, which frees our election id.
                    stale, session.client = session.client, None
                    if session.state == "ready":
                        session.state = "down"
                        session.error = "connection lost; reconnecting"
                if stale is not None:
                    suppress_close_errors(stale)
                if session.backoff.due(now_s):
                    self._attempt(session, self._bring_up, session, None)
            elif need == "reprovision":
                # Our stream is alive and primary: provision over it. A second stream
                # with our election id would be refused, and closing this one would
                # leave the switch without a primary.
                client = session.client
                alive = client is not None and client.connected and client.is_primary
                if alive and session.backoff.due(now_s):
                    self._attempt(session, self._bring_up, session, client)
            elif need == "resume":
                self._attempt(session, self._resume, session)
            elif need == "demoted":
                with self._schedule_lock:
                    if session.state in ("ready", "error"):
                        self._not_primary(session)
        polled = self._polling is None or self._polling.done()
        if polled and time.monotonic() - last_counters >= self.config.counter_interval_s:
            last_counters = time.monotonic()
            self._polling = self._poller.submit(self._poll_logged)
        return last_counters

    def _poll_logged(self) -> None:
        try:
            self._poll()
        except Exception:  # a bug must not go unseen; the next poll runs as usual
            log.exception("counter poll failed")

    def _attempt(self, session: SwitchSession, work: Callable[..., None], *args: Any) -> None:
        """Run ``work`` for one switch in the background: a switch whose RPCs are slow
        (each within the RPC timeout) then delays neither the supervision of the others
        (their reconnects, catch-ups, counter reads) nor its own next round's look."""

        def attempt() -> None:
            try:
                work(*args)
            except Exception:  # a bug must not go unseen; the next round tries again
                log.exception("bringing up switch %s failed", session.spec.name)
            finally:
                self._wake.set()

        session.attempt = self._attempts.submit(attempt)

    def _bring_up(self, session: SwitchSession, client: P4RuntimeClient | None) -> None:
        """Connect (``client`` None) or take the stream held, and provision the switch."""
        connection = self._connect(session) if client is None else _Connection(client, True, None)
        self._provision(session, connection)
        with self._schedule_lock:
            self._attempted(session)

    def _attempted(self, session: SwitchSession) -> None:
        """After an attempt to bring ``session`` up: one that left it neither ready nor a
        backup on a live stream (which waits for the switch to name it primary, and tries
        nothing meanwhile) makes the next attempt wait longer."""
        if session.state == "ready" or (session.state == "backup" and session.client is not None):
            return
        session.backoff.failed(self.clock())

    @staticmethod
    def _needs_provisioning(session: SwitchSession) -> str | None:
        """What the supervisor does for a switch: nothing, provision over the stream it
        holds (``reprovision``: promoted from backup, or an RPC failed), record that another
        client took the switch (``demoted``), open a new stream (``reconnect``), or catch
        up a lagging switch whose writes have ended (``resume``; while they are out, it is
        left alone: an RPC ends within its timeout, also on a broken stream)."""
        if session.state == "lagging":
            writing = session.writing
            return "resume" if writing is None or writing.done() else None
        client = session.client
        if client is None or not client.connected or session.state == "down":
            return "reconnect"
        if session.state == "backup":
            return "reprovision" if client.is_primary else None
        if not client.is_primary:
            return "demoted"
        return None if session.state == "ready" else "reprovision"

    def _poll(self) -> None:
        """Check each ready switch still runs our pipeline, and read the stage counters.

        Runs in the background, off the supervisor's loop (:meth:`_supervise_once`), with
        the switches read at once and outside the lock: a slow switch holds up neither
        events nor the supervision of the others, and delays the others' readings only
        until its RPCs' timeout. A reading is taken in only if its switch is still ready
        on the same stream (an event may have set it lagging meanwhile)."""
        with self._schedule_lock:
            targets = [
                (s, s.client)
                for s in self.sessions.values()
                if s.state == "ready" and s.client is not None
            ]
        readings = list(self._readers.map(lambda target: self._reading(*target), targets))
        progress: dict[StageKey, float] = {}
        with self._schedule_lock:
            for (session, client), (pipeline_ok, counted, failure) in zip(
                targets, readings, strict=True
            ):
                if session.state != "ready" or session.client is not client:
                    continue
                if not pipeline_ok:
                    # Provisioned again by the supervisor, over the stream it holds.
                    self._say(session, logging.WARNING, "pipeline gone; re-provisioning")
                    session.state = "error"
                    session.error = "the switch lost this controller's pipeline; re-provisioning"
                    self._wake.set()
                    continue
                if failure is not None:
                    session.state = "error"
                    session.error = failure
                    self._wake.set()
                    continue
                assert counted is not None
                for stage, total in counted.items():
                    before = session.counter_bytes.get(stage, 0)
                    # Bytes cross several switches: count each stage's largest increase once.
                    increase = float(max(total - before, 0))
                    progress[stage] = max(progress.get(stage, 0.0), increase)
                session.counter_bytes = counted
            if progress:
                with self._lock:
                    self.state.add_progress(progress)
                if not getattr(self.policy, "clairvoyant", True):
                    self._reschedule()

    def _reading(
        self, session: SwitchSession, client: P4RuntimeClient | None
    ) -> tuple[bool, dict[StageKey, int] | None, str | None]:
        """One switch's part of a poll: whether it runs our pipeline, its stage counters,
        and the error that ended the reading."""
        assert client is not None
        try:
            if client.pipeline_cookie() != session.artifacts.cookie:
                return False, None, None
            return True, self._read_stage_bytes(session, client), None
        except P4RuntimeError as error:
            return True, None, str(error)
        except UNREADABLE_ENTRY as error:
            return True, None, unreadable_entry(error)

    def _read_stage_bytes(
        self, session: SwitchSession, client: P4RuntimeClient
    ) -> dict[StageKey, int]:
        """Bytes counted per stage entry (direct counter of the stage table)."""
        layout = self.layout
        table = session.names.table(layout.stage_table)
        if table.direct_counter_id is None:
            return {}
        counted: dict[StageKey, int] = {}
        exp_field = layout.stage_fields["experiment_id"]
        stage_field = layout.stage_fields["stage_id"]
        max_entities, max_bytes = table_read_limits(table)
        for entry in client.read_table(table.id, True, max_entities, max_bytes):
            key, _ = from_table_entry(entry, session.names)
            values = {name: getattr(value, "value", 0) for name, value in key.match}
            counted[StageKey(values[exp_field], values[stage_field])] = (
                entry.counter_data.byte_count
            )
        return counted

    # -- status --

    def status(self) -> dict[str, Any]:
        now_s = self.clock()
        with self._schedule_lock:
            classes = dict(self.ranked)
            return {
                "policy": self.config.policy_name,
                "queues": self.config.queues,
                "election_id": self.config.election_id,
                "events_applied": self.events_applied,
                "reschedules": self.reschedules,
                "phase_ms": {name: round(v * 1e3, 3) for name, v in self.phase_s.items()},
                "last_reaction_ms": (
                    round(self.last_reaction.seconds * 1e3, 3) if self.last_reaction else None
                ),
                "order": [
                    {
                        "coflow": list(key),
                        "coflow_id": coflow_tag(key),
                        "class": klass,
                        "override": key in self.plan.overrides,
                    }
                    for key, klass in self.ranked
                ],
                "stages": [
                    {
                        "experiment_id": stage.experiment_id,
                        "stage_id": stage.stage_id,
                        "class": klass,
                        "fallback": stage in self.plan.fallback_stages,
                    }
                    for stage, klass in self.plan.stage_classes.items()
                ],
                "dropped_stages": [list(s) for s in self.plan.dropped_stages],
                "switches": [
                    {
                        "name": s.spec.name,
                        "address": s.spec.grpc_addr,
                        "device_id": s.spec.device_id,
                        "state": s.state,
                        "error": s.error,
                        "provisions": s.provisions,
                        "retry_in_s": (
                            None
                            if s.state in ("ready", "lagging")
                            else _rounded(s.backoff.wait_s(now_s))
                        ),
                        "election_id": s.client.election_id if s.client is not None else None,
                        "entries": sorted(f"{k} -> {a}" for k, a in s.installed.items()),
                    }
                    for s in self.sessions.values()
                ],
                "classes": classes_summary(classes),
            }


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)


def classes_summary(classes: Mapping[CoflowKey, int]) -> dict[str, int]:
    """Number of active coflows per class (as strings for JSON)."""
    counts: dict[str, int] = {}
    for klass in classes.values():
        counts[str(klass)] = counts.get(str(klass), 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -int(item[0])))
