"""Reader and writer for the Coflow-Benchmark trace format (e.g. FB2010-1Hr-150-0.txt).

Format: line 1 is ``<ports> <coflows>``; every further line is one coflow,
``<id> <arrival ms> <#mappers> <mapper port …> <#reducers> <reducer port:MB …>``,
ports 0-based, 1 MB = 1,048,576 bytes.

Mapping onto the domain model (each coflow is a one-stage job, so SCT = CCT):

* each coflow → an :class:`Experiment` (id = the trace id, arrival ms / 1000)
  with one stage, one trial, one iteration and no compute time;
* hosts = trace ports; link rate 1 Gbit/s, as in the benchmark's simulator;
* a reducer's bytes are shuffled evenly from all of the coflow's mappers: each
  mapper sends ⌊bytes/m⌋, and the first ``bytes mod m`` mappers (trace order)
  one byte more, so no byte is lost to rounding;
* a mapper on the reducer's own port sends nothing across the fabric (its
  bytes stay inside the rack), so that flow is left out. A coflow whose every
  flow is local keeps its experiment with no flows (it completes at arrival).
  The workload's ``meta["local_bytes"]`` records how many bytes were left out.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from control.errors import UserError
from control.files import atomic_write_text, read_text
from control.model import Experiment, Flow, Stage, TrialStage, Workload

BYTES_PER_MB = 1_048_576
LINK_BPS = 1e9
"""Rack uplink rate of the benchmark's own simulator."""
MAX_ID = 0xFFFF
DEFAULT_TRACE_NAME = "FB2010-1Hr-150-0.txt"
TRACE_ENV = "BEAMER_FB2010"


def default_trace_path() -> Path:
    """``$BEAMER_FB2010`` if set, else ``shared/data/`` beside the repository's folder."""
    override = os.environ.get(TRACE_ENV)
    if override:
        return Path(override)
    repository = Path(__file__).resolve().parent.parent
    return repository.parent / "shared" / "data" / DEFAULT_TRACE_NAME


class _LineError(Exception):
    """A problem on the current line; the reader adds ``file:line``."""


def read(path: str | os.PathLike[str]) -> Workload:
    """Read a Coflow-Benchmark trace; malformed content raises :class:`UserError`."""
    source = Path(path)
    text = read_text(source)
    return parse(text, str(source))


def parse(text: str, source: str = "<string>") -> Workload:
    """Parse trace ``text``; ``source`` names it in error messages."""
    lines = text.splitlines()
    numbered = [(number, line.split()) for number, line in enumerate(lines, 1) if line.strip()]
    if not numbered:
        raise UserError(f"{source}:1: empty trace (expected '<ports> <coflows>')")
    header_line, header = numbered[0]
    try:
        if len(header) != 2:
            raise _LineError(f"header has {len(header)} fields, expected '<ports> <coflows>'")
        num_ports = _int(header[0], "number of ports", low=1)
        num_coflows = _int(header[1], "number of coflows", low=0)
    except _LineError as error:
        raise UserError(f"{source}:{header_line}: {error}") from None
    body = numbered[1:]
    if len(body) != num_coflows:
        line = body[num_coflows][0] if len(body) > num_coflows else len(lines)
        raise UserError(
            f"{source}:{line}: header announces {num_coflows} coflows, file has {len(body)}"
        )
    experiments: list[Experiment] = []
    seen: dict[int, int] = {}
    local_bytes = 0
    for number, fields in body:
        try:
            experiment, local = _coflow(fields, num_ports)
            if experiment.experiment_id in seen:
                raise _LineError(
                    f"duplicate coflow id {experiment.experiment_id} "
                    f"(first on line {seen[experiment.experiment_id]})"
                )
        except _LineError as error:
            raise UserError(f"{source}:{number}: {error}") from None
        seen[experiment.experiment_id] = number
        experiments.append(experiment)
        local_bytes += local
    meta = {
        "generator": "coflow-benchmark",
        "trace": Path(source).name,
        "local_bytes": str(local_bytes),
    }
    return Workload(num_ports, LINK_BPS, tuple(experiments), meta)


def _int(token: str, what: str, *, low: int, high: int | None = None) -> int:
    try:
        value = int(token)
    except ValueError:
        raise _LineError(f"{what} {token!r} is not an integer") from None
    if value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise _LineError(f"{what} {value} is out of range (must be {bound})")
    return value


def _float(token: str, what: str) -> float:
    try:
        value = float(token)
    except ValueError:
        raise _LineError(f"{what} {token!r} is not a number") from None
    if not math.isfinite(value):
        raise _LineError(f"{what} {token!r} is not a finite number")
    if value < 0:
        raise _LineError(f"{what} {token} is negative")
    return value


def _port(token: str, num_ports: int, role: str) -> int:
    try:
        port = int(token)
    except ValueError:
        raise _LineError(f"{role} port {token!r} is not an integer") from None
    if not 0 <= port < num_ports:
        raise _LineError(f"unknown {role} port {port} (trace has ports 0..{num_ports - 1})")
    return port


def _coflow(fields: list[str], num_ports: int) -> tuple[Experiment, int]:
    """One coflow line → its experiment and the bytes that stay on a local port."""
    if len(fields) < 3:
        raise _LineError(f"{len(fields)} fields, expected '<id> <arrival ms> <#mappers> ...'")
    coflow_id = _int(fields[0], "coflow id", low=0, high=MAX_ID)
    arrival_ms = _float(fields[1], "arrival time")
    num_mappers = _int(fields[2], "number of mappers", low=1)
    reducer_index = 3 + num_mappers
    if len(fields) <= reducer_index:
        raise _LineError(
            f"{num_mappers} mappers announced but only {len(fields) - 3} fields follow"
        )
    mappers = [_port(token, num_ports, "mapper") for token in fields[3:reducer_index]]
    num_reducers = _int(fields[reducer_index], "number of reducers", low=1)
    reducer_tokens = fields[reducer_index + 1 :]
    if len(reducer_tokens) != num_reducers:
        raise _LineError(
            f"{num_reducers} reducers announced, {len(reducer_tokens)} 'port:MB' fields follow"
        )
    flows: list[Flow] = []
    local_bytes = 0
    for token in reducer_tokens:
        port_text, colon, mb_text = token.partition(":")
        if not colon:
            raise _LineError(f"reducer {token!r} is not 'port:MB'")
        reducer = _port(port_text, num_ports, "reducer")
        reducer_bytes = round(_float(mb_text, f"reducer {reducer} size (MB)") * BYTES_PER_MB)
        share, extra = divmod(reducer_bytes, num_mappers)
        sizes = [share + 1] * extra + [share] * (num_mappers - extra)
        flows.extend(
            [
                Flow(mapper, reducer, size)
                for mapper, size in zip(mappers, sizes, strict=True)
                if mapper != reducer and size > 0
            ]
        )
        if reducer in mappers:
            local_bytes += sum(
                size for mapper, size in zip(mappers, sizes, strict=True) if mapper == reducer
            )
    trial = TrialStage(trial_id=0, iterations=1, compute_s=0.0, sync_flows=tuple(flows))
    experiment = Experiment(
        experiment_id=coflow_id,
        arrival_s=arrival_ms / 1000.0,
        stages=(Stage(stage_id=0, trials=(trial,)),),
        kind="coflow",
    )
    return experiment, local_bytes


def dumps(workload: Workload) -> str:
    """Trace text for a workload of single-coflow experiments.

    Each coflow is written as its senders (mappers, first-seen order) and, per
    receiver, the bytes it receives in MB, plus the local share the reader left
    out when the receiver is itself a mapper. Reading the text again gives the
    same flows when they are an even shuffle from all mappers, as :func:`parse`
    produces them (to within a few bytes of rounding where a local share was
    restored).
    """
    lines = [f"{workload.num_hosts} {len(workload.experiments)}"]
    for experiment in workload.experiments:
        if len(experiment.stages) != 1 or len(experiment.stages[0].trials) != 1:
            raise UserError(
                f"experiment {experiment.experiment_id} has several stages or trials; "
                "the Coflow-Benchmark format holds single coflows only"
            )
        trial = experiment.stages[0].trials[0]
        if trial.iterations != 1:
            raise UserError(
                f"experiment {experiment.experiment_id} runs {trial.iterations} iterations; "
                "the Coflow-Benchmark format holds single coflows only"
            )
        mappers = _mapper_order(trial.sync_flows)
        received: dict[int, float] = {}
        senders: dict[int, int] = {}
        for flow in trial.sync_flows:
            received[flow.dst_host] = received.get(flow.dst_host, 0) + flow.size_bytes
            senders[flow.dst_host] = senders.get(flow.dst_host, 0) + 1
        for port, count in senders.items():
            if port in mappers and count == len(mappers) - 1:
                # The reader dropped this reducer's local share; restore it so
                # that reading the trace again drops it again.
                received[port] = received[port] * len(mappers) / count
        arrival_ms = experiment.arrival_s * 1000.0
        arrival_text = (
            str(round(arrival_ms))
            if abs(arrival_ms - round(arrival_ms)) < 1e-6
            else repr(arrival_ms)
        )
        if not mappers:
            # An all-local coflow: keep it (one idle mapper, a zero-byte reducer).
            mappers, received = [0], {0: 0}
        reducers = " ".join(f"{port}:{size / BYTES_PER_MB!r}" for port, size in received.items())
        mapper_text = " ".join(str(port) for port in mappers)
        lines.append(
            f"{experiment.experiment_id} {arrival_text} {len(mappers)} {mapper_text} "
            f"{len(received)} {reducers}"
        )
    return "\n".join(lines) + "\n"


def _mapper_order(flows: tuple[Flow, ...]) -> list[int]:
    """The mappers in trace order, merged from each reducer's sender sequence.

    Every reducer lists the mappers in trace order minus itself when it is a
    mapper too, so merging the sequences recovers the original order.
    """
    sequences: dict[int, list[int]] = {}
    for flow in flows:
        sequences.setdefault(flow.dst_host, []).append(flow.src_host)
    ranked = sorted(sequences.values(), key=len, reverse=True)
    distinct = {flow.src_host for flow in flows}
    if ranked and len(ranked[0]) == len(distinct):
        return list(ranked[0])  # a reducer that is no mapper saw every mapper in order
    order: list[int] = []
    for sequence in ranked:
        for index, mapper in enumerate(sequence):
            if mapper not in order:
                after = order.index(sequence[index - 1]) + 1 if index else 0
                order.insert(after, mapper)
    return order


def write(workload: Workload, path: str | os.PathLike[str]) -> None:
    """Write a Coflow-Benchmark trace atomically (temporary file, then rename)."""
    atomic_write_text(Path(path), dumps(workload))
