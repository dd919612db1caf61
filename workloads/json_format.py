"""The JSON workload format ``beamer-workload/1`` (documented in ``workloads/FORMAT.md``).

Every run can be reproduced from such a file: :func:`write` and :func:`read`
round-trip a :class:`~control.model.Workload` without loss. Reading is strict:
any wrong type, range or unknown field is a :class:`UserError` naming
``file:line``, the JSON path of the offending value and what is wrong.

Line numbers cost nothing on the happy path: the document is parsed by the
standard ``json`` module, and only when a value is rejected is the text walked
again, along the value's JSON path, to find where that value starts.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from control.errors import UserError
from control.files import atomic_write_text, parse_json
from control.json_positions import JsonPath, line_of_path, steps_name
from control.model import Experiment, Flow, Stage, TrialStage, Workload, kind_problem
from workloads.files import read_text
from workloads.limits import (
    MAX_COFLOWS,
    MAX_FILE_BYTES,
    MAX_FLOW_BYTES,
    MAX_FLOWS,
    MAX_HOSTS,
    MAX_ITERATIONS,
    MAX_LINK_BPS,
    MAX_TIME_S,
    MAX_WEIGHT,
    MIN_LINK_BPS,
    MIN_WEIGHT,
    coflows_above_limit,
)

FORMAT_ID = "beamer-workload/1"
MAX_ID = 0xFFFF
"""Experiment, stage and trial ids travel in 16-bit fields of the Beamer tag."""

T = TypeVar("T")


# ---------------------------------------------------------------- writing


def to_document(workload: Workload) -> dict[str, Any]:
    """The JSON document (plain dicts and lists) for ``workload``."""
    return {
        "format": FORMAT_ID,
        "num_hosts": workload.num_hosts,
        "link_bps": workload.link_bps,
        "meta": dict(workload.meta),
        "experiments": [
            {
                "experiment_id": experiment.experiment_id,
                "arrival_s": experiment.arrival_s,
                "kind": experiment.kind,
                "weight": experiment.weight,
                "stages": [
                    {
                        "stage_id": stage.stage_id,
                        "trials": [
                            {
                                "trial_id": trial.trial_id,
                                "iterations": trial.iterations,
                                "compute_s": trial.compute_s,
                                "hosts": list(trial.hosts),
                                "sync_flows": [
                                    [flow.src_host, flow.dst_host, flow.size_bytes]
                                    for flow in trial.sync_flows
                                ],
                            }
                            for trial in stage.trials
                        ],
                    }
                    for stage in experiment.stages
                ],
            }
            for experiment in workload.experiments
        ],
    }


def dumps(workload: Workload) -> str:
    """The file text: containers one item per line, lists of plain values on one line.

    So each flow ``[src, dst, bytes]`` sits on its own line and error messages
    can point at it. A workload :func:`read` would refuse is an
    :class:`InvalidWorkload` error (see :func:`check`).
    """
    document = to_document(workload)
    _check_document(document)
    return _dump_document(document)


def _dump_document(document: dict[str, Any]) -> str:
    parts: list[str] = []
    _dump_value(document, 0, parts)
    parts.append("\n")
    return "".join(parts)


def _dump_value(value: Any, depth: int, parts: list[str]) -> None:
    inner = "  " * (depth + 1)
    if isinstance(value, dict) and value:
        parts.append("{")
        for index, (key, item) in enumerate(value.items()):
            parts.append(("," if index else "") + "\n" + inner + json.dumps(key) + ": ")
            _dump_value(item, depth + 1, parts)
        parts.append("\n" + "  " * depth + "}")
    elif isinstance(value, list) and any(isinstance(item, dict | list) for item in value):
        parts.append("[")
        for index, item in enumerate(value):
            parts.append(("," if index else "") + "\n" + inner)
            _dump_value(item, depth + 1, parts)
        parts.append("\n" + "  " * depth + "]")
    else:
        parts.append(json.dumps(value, allow_nan=False))


def write(workload: Workload, path: str | os.PathLike[str]) -> None:
    """Write ``workload`` to ``path`` atomically (temporary file beside it, then rename).

    A workload that :func:`read` would refuse is not written: :class:`UserError`
    naming the file, the JSON path and the limit.
    """
    target = Path(path)
    atomic_write_text(target, text_to_write(workload, str(target)))


def text_to_write(workload: Workload, destination: str) -> str:
    """``workload``'s JSON text, if :func:`read` would take it back; else
    :class:`UserError` naming the ``destination`` it is not written to."""
    try:
        text = dumps(workload)
    except InvalidWorkload as invalid:
        raise UserError(f"{destination}: not written: {invalid}") from None
    if len(text) > MAX_FILE_BYTES:  # json.dumps writes ASCII: characters are bytes
        raise UserError(
            f"{destination}: not written: {len(text):,} bytes, above the limit of "
            f"{MAX_FILE_BYTES:,} bytes for a workload file"
        )
    return text


class InvalidWorkload(UserError):
    """A workload :func:`read` would refuse: ``path`` (JSON path) and ``message`` say why."""

    def __init__(self, path: JsonPath, message: str) -> None:
        super().__init__(f"{_path_name(path)}: {message}")
        self.path = path
        self.message = message


def check(workload: Workload) -> None:
    """Refuse a workload that :func:`read` would refuse once written.

    The reader's own checks run on the document :func:`write` would write
    (every field's type and range, unique ids, and the limits of
    :mod:`workloads.limits`), so writers and readers cannot disagree.
    Raises :class:`InvalidWorkload`.
    """
    _check_document(to_document(workload))


def _check_document(document: dict[str, Any]) -> None:
    try:
        _workload(document)
    except _Invalid as invalid:
        raise InvalidWorkload(invalid.path, invalid.message) from None


# ---------------------------------------------------------------- reading


class _Invalid(Exception):
    """A rejected value: where it is (JSON path) and what is wrong."""

    def __init__(self, path: JsonPath, message: str, *, of_key: bool = False) -> None:
        super().__init__(message)
        self.path = path
        self.message = message
        self.of_key = of_key
        """The key at ``path`` is refused (its line is the error's), not its value."""


def read(path: str | os.PathLike[str]) -> Workload:
    """Read a ``beamer-workload/1`` file; bad content raises :class:`UserError`."""
    source = Path(path)
    text = read_text(source)
    return loads(text, str(source))


def loads(text: str, source: str = "<string>") -> Workload:
    """Parse workload JSON ``text``; ``source`` names it in error messages."""
    document = parse_json(text, source)
    try:
        return _workload(document)
    except _Invalid as invalid:
        line = line_of_path(text, invalid.path, of_key=invalid.of_key)
        raise UserError(f"{source}:{line}: {_path_name(invalid.path)}: {invalid.message}") from None


def _path_name(path: JsonPath) -> str:
    """``$.a[0].b``; a key that is not a plain name (``meta`` takes any) is quoted
    (:func:`control.json_positions.member_name`)."""
    return "$" + steps_name(path)


# -- validation -------------------------------------------------------------


def _fields(
    value: Any, path: JsonPath, required: Sequence[str], optional: Sequence[str] = ()
) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _Invalid(path, f"expected an object, got {_type_name(value)}")
    for name in required:
        if name not in value:
            raise _Invalid(path, f"missing field {name!r}")
    for name in value:
        if name not in required and name not in optional:
            raise _Invalid((*path, name), f"unknown field {name!r}", of_key=True)
    return value


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _integer(value: Any, path: JsonPath, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(path, f"expected an integer, got {_type_name(value)}")
    if value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise _Invalid(path, f"{value} is out of range (must be {bound})")
    return value


def _number(value: Any, path: JsonPath, *, positive: bool, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Invalid(path, f"expected a number, got {_type_name(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise _Invalid(path, "expected a finite number")
    if high is not None and number > high:
        raise _Invalid(path, f"{value} is above the limit of {high:g}")
    if positive and number <= 0:
        raise _Invalid(path, f"{value} must be positive")
    if number < 0:
        raise _Invalid(path, f"{value} must not be negative")
    return number + 0.0  # -0.0 is 0.0: shown as -0.000 s, and written -0.0, otherwise


def _string(value: Any, path: JsonPath) -> str:
    if not isinstance(value, str):
        raise _Invalid(path, f"expected a string, got {_type_name(value)}")
    return value


def _array(
    value: Any, path: JsonPath, item: Callable[[Any, JsonPath], T], *, non_empty: bool = False
) -> tuple[T, ...]:
    if not isinstance(value, list):
        raise _Invalid(path, f"expected an array, got {_type_name(value)}")
    if non_empty and not value:
        raise _Invalid(path, "must not be empty")
    return tuple(item(element, (*path, index)) for index, element in enumerate(value))


def _unique_ids(ids: Sequence[int], path: JsonPath, item_path: Sequence[str]) -> None:
    seen: set[int] = set()
    for index, identifier in enumerate(ids):
        if identifier in seen:
            raise _Invalid((*path, index, *item_path), f"duplicate {item_path[-1]} {identifier}")
        seen.add(identifier)


class _Network(NamedTuple):
    """What the checks of a flow need: the hosts, the link rate and the largest flow."""

    num_hosts: int
    link_bps: float
    max_flow_bytes: int


def _workload(document: Any) -> Workload:
    top = _fields(document, (), ("format", "num_hosts", "link_bps", "experiments"), ("meta",))
    if top["format"] != FORMAT_ID:
        raise _Invalid(
            ("format",), f"unsupported format {top['format']!r} (expected {FORMAT_ID!r})"
        )
    num_hosts = _integer(top["num_hosts"], ("num_hosts",), 1, MAX_HOSTS)
    link_bps = _number(top["link_bps"], ("link_bps",), positive=True, high=MAX_LINK_BPS)
    if link_bps < MIN_LINK_BPS:
        raise _Invalid(
            ("link_bps",), f"{top['link_bps']} is below the limit of {MIN_LINK_BPS:g} bit/s"
        )
    # One flow alone on its link finishes within MAX_TIME_S.
    net = _Network(
        num_hosts, link_bps, min(int(MAX_FLOW_BYTES), math.floor(MAX_TIME_S * link_bps / 8))
    )
    meta_value = top.get("meta", {})
    if not isinstance(meta_value, dict):
        raise _Invalid(("meta",), f"expected an object, got {_type_name(meta_value)}")
    meta = {key: _string(item, ("meta", key)) for key, item in meta_value.items()}

    def experiment(value: Any, path: JsonPath) -> Experiment:
        return _experiment(value, path, net)

    experiments = _array(top["experiments"], ("experiments",), experiment)
    _unique_ids([e.experiment_id for e in experiments], ("experiments",), ("experiment_id",))
    trials = [t for e in experiments for s in e.stages for t in s.trials]
    coflows = sum(t.iterations for t in trials)
    if coflows > MAX_COFLOWS:
        raise _Invalid(
            ("experiments",),
            f"{coflows:,} coflows (trials × iterations) exceed the limit of {MAX_COFLOWS:,}",
        )
    too_many = coflows_above_limit(coflows, num_hosts)
    if too_many is not None:
        raise _Invalid(("experiments",), f"{too_many} (coflows: trials × iterations)")
    flows = sum(len(t.sync_flows) for t in trials)
    if flows > MAX_FLOWS:
        raise _Invalid(
            ("experiments",), f"{flows:,} synchronisation flows exceed the limit of {MAX_FLOWS:,}"
        )
    return Workload(num_hosts, link_bps, experiments, meta)


def _experiment(value: Any, path: JsonPath, net: _Network) -> Experiment:
    fields = _fields(value, path, ("experiment_id", "arrival_s", "stages"), ("kind", "weight"))
    experiment_id = _integer(fields["experiment_id"], (*path, "experiment_id"), 0, MAX_ID)
    arrival_s = _number(fields["arrival_s"], (*path, "arrival_s"), positive=False, high=MAX_TIME_S)
    kind = _string(fields.get("kind", "sha"), (*path, "kind"))
    problem = kind_problem(kind)
    if problem is not None:
        raise _Invalid((*path, "kind"), problem)
    weight = _number(fields.get("weight", 1.0), (*path, "weight"), positive=True, high=MAX_WEIGHT)
    if weight < MIN_WEIGHT:
        raise _Invalid(
            (*path, "weight"), f"{fields['weight']} is below the limit of {MIN_WEIGHT:g}"
        )

    def stage(value: Any, stage_path: JsonPath) -> Stage:
        return _stage(value, stage_path, net)

    stages = _array(fields["stages"], (*path, "stages"), stage, non_empty=True)
    _unique_ids([s.stage_id for s in stages], (*path, "stages"), ("stage_id",))
    return Experiment(experiment_id, arrival_s, stages, kind, weight)


def _stage(value: Any, path: JsonPath, net: _Network) -> Stage:
    fields = _fields(value, path, ("stage_id", "trials"))
    stage_id = _integer(fields["stage_id"], (*path, "stage_id"), 0, MAX_ID)

    def trial(value: Any, trial_path: JsonPath) -> TrialStage:
        return _trial(value, trial_path, net)

    trials = _array(fields["trials"], (*path, "trials"), trial, non_empty=True)
    _unique_ids([t.trial_id for t in trials], (*path, "trials"), ("trial_id",))
    return Stage(stage_id, trials)


def _trial(value: Any, path: JsonPath, net: _Network) -> TrialStage:
    fields = _fields(value, path, ("trial_id", "iterations", "compute_s", "sync_flows"), ("hosts",))
    trial_id = _integer(fields["trial_id"], (*path, "trial_id"), 0, MAX_ID)
    iterations = _integer(fields["iterations"], (*path, "iterations"), 1, MAX_ITERATIONS)
    compute_s = _number(fields["compute_s"], (*path, "compute_s"), positive=False, high=MAX_TIME_S)

    def host(value: Any, host_path: JsonPath) -> int:
        return _integer(value, host_path, 0, net.num_hosts - 1)

    def flow(value: Any, flow_path: JsonPath) -> Flow:
        return _flow(value, flow_path, net)

    hosts = _array(fields.get("hosts", []), (*path, "hosts"), host)
    flows = _array(fields["sync_flows"], (*path, "sync_flows"), flow)
    return TrialStage(trial_id, iterations, compute_s, flows, hosts)


def _flow(value: Any, path: JsonPath, net: _Network) -> Flow:
    if not isinstance(value, list) or len(value) != 3:
        raise _Invalid(path, "expected [src_host, dst_host, size_bytes]")
    src = _integer(value[0], (*path, 0), 0, net.num_hosts - 1)
    dst = _integer(value[1], (*path, 1), 0, net.num_hosts - 1)
    if src == dst:
        raise _Invalid(path, f"flow from host {src} to itself does not cross the network")
    size = _integer(value[2], (*path, 2), 1, int(MAX_FLOW_BYTES))
    if size > net.max_flow_bytes:
        raise _Invalid(
            (*path, 2),
            f"{size} bytes take {size * 8 / net.link_bps:.4g} s alone on a link of "
            f"{net.link_bps:g} bit/s, more than the limit of {MAX_TIME_S:g} s allows "
            f"(at most {net.max_flow_bytes:,} bytes)",
        )
    return Flow(src, dst, size)
