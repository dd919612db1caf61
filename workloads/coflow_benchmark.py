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
import re
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from control.addresses import is_decimal, written_plainly
from control.errors import UserError
from control.files import atomic_write_text
from control.model import Experiment, Flow, Stage, TrialStage, Workload
from workloads.files import read_text
from workloads.limits import (
    MAX_COFLOWS,
    MAX_FILE_BYTES,
    MAX_FLOW_BYTES,
    MAX_FLOWS,
    MAX_HOSTS,
    MAX_TIME_S,
    coflows_above_limit,
)

BYTES_PER_MB = 1_048_576
LINK_BPS = 1e9
"""Rack uplink rate of the benchmark's own simulator."""
MAX_ID = 0xFFFF
DEFAULT_TRACE_NAME = "FB2010-1Hr-150-0.txt"
TRACE_ENV = "BEAMER_FB2010"
MAX_PORTS = MAX_HOSTS
MAX_LINE_CHARS = 1 << 20
"""The longest line: a coflow of every port as mapper and reducer (20,000 fields of a
few characters each) takes about 200 KB."""
MAX_ARRIVAL_MS = MAX_TIME_S * 1000.0
MAX_MB = MAX_FLOW_BYTES / BYTES_PER_MB
"""A reducer's MB may not exceed one flow's byte limit (its mappers split it further)."""
MAX_WHOLE_MB = int(MAX_FLOW_BYTES) // BYTES_PER_MB
"""The largest whole number of MB within :data:`MAX_MB`."""


def default_trace_path() -> Path:
    """``$BEAMER_FB2010`` if set, else the copy packaged in ``workloads/data/``."""
    override = os.environ.get(TRACE_ENV)
    if override:
        return Path(override)
    return Path(__file__).resolve().parent / "data" / DEFAULT_TRACE_NAME


class _LineError(Exception):
    """A problem on the current line; the reader adds ``file:line``."""


class TraceError(UserError):
    """Trace text the reader refuses: ``line`` (1-based) and ``detail`` say where and why."""

    def __init__(self, source: str, line: int, detail: str) -> None:
        super().__init__(f"{source}:{line}: {detail}")
        self.line = line
        self.detail = detail


_ODD_SPACE = re.compile(r"[^\S \t\n\r]|\r(?!\n)")
"""Whitespace other than spaces and tabs between fields and a newline (or CR LF) at
the end of a line: a form feed, a vertical tab, a lone carriage return, NEL,
U+2028, a no-break space, ..."""
_SPACE_NAMES = {
    "\v": "vertical tab",
    "\f": "form feed",
    "\r": "carriage return without a newline after it",
}


def read(path: str | os.PathLike[str]) -> Workload:
    """Read a Coflow-Benchmark trace; malformed content raises :class:`UserError`."""
    source = Path(path)
    text = read_text(source)
    return parse(text, str(source))


_CONTENT = re.compile(r"[^ \t\r\n][^\n]*")
"""A line from its first field to its end: one match per non-blank line (other
whitespace is refused before any line is read)."""


def _content_lines(text: str) -> Iterator[tuple[int, int, int]]:
    """(line number, start, end) of each non-blank line, blank ones skipped unread."""
    number, counted = 1, 0
    for match in _CONTENT.finditer(text):
        start = text.rfind("\n", 0, match.start()) + 1
        number += text.count("\n", counted, start)
        counted = start
        yield number, start, match.end()


def _header_and_body(text: str, source: str) -> tuple[int, list[tuple[int, list[str]]]]:
    """The port count and the numbered, split coflow lines; the header is checked.

    Lines end at ``\\n`` only (``\\r\\n`` too), so line numbers are those of
    ``wc -l`` and of editors; other line breaks and spaces are refused. A line is
    split into fields only once its length is checked and only while the header's
    count allows it: memory follows the coflows announced, not the file's lines
    (ten million lines of ``0`` under a header of one coflow took 3 GB).
    """
    odd = _ODD_SPACE.search(text)
    if odd:
        char = odd.group()
        name = _SPACE_NAMES.get(char) or unicodedata.name(char, "").lower() or "a control character"
        raise TraceError(
            source,
            text.count("\n", 0, odd.start()) + 1,
            f"character U+{ord(char):04X} ({name}) is not allowed: fields are separated by "
            "spaces or tabs, and lines end with a newline",
        )

    def fields(number: int, start: int, end: int) -> list[str]:
        if end - start > MAX_LINE_CHARS:  # split into fields: gigabytes
            raise TraceError(
                source, number, f"a line of {end - start:,} characters, above {MAX_LINE_CHARS:,}"
            )
        return text[start:end].split()

    lines = _content_lines(text)
    first = next(lines, None)
    if first is None:
        raise TraceError(source, 1, "empty trace (expected '<ports> <coflows>')")
    header_line = first[0]
    header = fields(*first)
    try:
        if len(header) != 2:
            raise _LineError(f"header has {len(header)} fields, expected '<ports> <coflows>'")
        num_ports = _int(header[0], "number of ports", low=1, high=MAX_PORTS)
        num_coflows = _int(header[1], "number of coflows", low=0, high=MAX_COFLOWS)
        too_many = coflows_above_limit(num_coflows, num_ports, "ports")
        if too_many is not None:
            raise _LineError(too_many)
    except _LineError as error:
        raise TraceError(source, header_line, str(error)) from None
    body: list[tuple[int, list[str]]] = []
    for number, start, end in lines:
        if len(body) == num_coflows:  # one line too many: the rest are counted, not split
            found = num_coflows + 1 + sum(1 for _ in _CONTENT.finditer(text, end))
            raise TraceError(
                source, number, f"header announces {num_coflows} coflows, file has {found}"
            )
        body.append((number, fields(number, start, end)))
    if len(body) != num_coflows:
        last_line = text.count("\n") + (not text.endswith("\n"))
        raise TraceError(
            source, last_line, f"header announces {num_coflows} coflows, file has {len(body)}"
        )
    return num_ports, body


def parse(text: str, source: str = "<string>") -> Workload:
    """Parse trace ``text``; ``source`` names it in error messages."""
    num_ports, body = _header_and_body(text, source)
    experiments: list[Experiment] = []
    seen: dict[int, int] = {}
    local_bytes = 0
    total_flows = 0
    for number, fields in body:
        try:
            experiment, local = _coflow(fields, num_ports)
            if experiment.experiment_id in seen:
                raise _LineError(
                    f"duplicate coflow id {experiment.experiment_id} "
                    f"(first on line {seen[experiment.experiment_id]})"
                )
        except _LineError as error:
            raise TraceError(source, number, str(error)) from None
        seen[experiment.experiment_id] = number
        experiments.append(experiment)
        local_bytes += local
        total_flows += len(experiment.stages[0].trials[0].sync_flows)
        if total_flows > MAX_FLOWS:
            raise TraceError(source, number, f"the trace's flows exceed the limit of {MAX_FLOWS:,}")
    meta = {
        "generator": "coflow-benchmark",
        "trace": Path(source).name,
        "local_bytes": str(local_bytes),
    }
    return Workload(num_ports, LINK_BPS, tuple(experiments), meta)


def _whole(token: str, what: str) -> int:
    """``token`` as an integer written in ASCII digits (a minus sign allowed, so that
    the range check names a negative value): ``int`` also reads '١', '1_0' and '+1'."""
    try:
        if not is_decimal(token.removeprefix("-")):
            raise ValueError(token)
        value = int(token)
    except ValueError:
        raise _LineError(f"{what} {token!r} is not an integer") from None
    if value == 0 and token.startswith("-"):  # ids, ports and counts have no sign
        raise _LineError(f"{what} {token!r} has a sign")
    return value


def _int(token: str, what: str, *, low: int, high: int | None = None) -> int:
    value = _whole(token, what)
    if value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise _LineError(f"{what} {value} is out of range (must be {bound})")
    return value


def _float(token: str, what: str, *, high: float, unit: str = "") -> float:
    try:
        if not written_plainly(token):
            raise ValueError(token)
        value = float(token)
    except ValueError:
        raise _LineError(f"{what} {token!r} is not a number") from None
    if not math.isfinite(value):
        raise _LineError(f"{what} {token!r} is not a finite number")
    if value < 0:
        raise _LineError(f"{what} {token} is negative")
    if value > high:
        raise _LineError(f"{what} {token} is above the limit of {high:g}{unit}")
    return value + 0.0  # -0 is 0: shown as -0.000 s, and written -0.0, otherwise


def _port(token: str, num_ports: int, role: str) -> int:
    port = _whole(token, f"{role} port")
    if not 0 <= port < num_ports:
        raise _LineError(f"unknown {role} port {port} (trace has ports 0..{num_ports - 1})")
    return port


@dataclass(frozen=True, slots=True)
class TraceCoflow:
    """One trace line as written: id, arrival, mapper ports, (reducer port, MB) pairs."""

    coflow_id: int
    arrival_ms: float
    mappers: tuple[int, ...]
    reducers: tuple[tuple[int, float], ...]

    @property
    def num_flows(self) -> int:
        """Mapper × reducer pairs (local pairs included), the usual size measure of a coflow."""
        return len(self.mappers) * len(self.reducers)


def _record(fields: list[str], num_ports: int) -> TraceCoflow:
    """One coflow line, checked field by field."""
    if len(fields) < 3:
        raise _LineError(f"{len(fields)} fields, expected '<id> <arrival ms> <#mappers> ...'")
    coflow_id = _int(fields[0], "coflow id", low=0, high=MAX_ID)
    arrival_ms = _float(fields[1], "arrival time", high=MAX_ARRIVAL_MS, unit=" ms")
    num_mappers = _int(fields[2], "number of mappers", low=1, high=MAX_PORTS)
    reducer_index = 3 + num_mappers
    if len(fields) <= reducer_index:
        raise _LineError(_missing_mappers(num_mappers, fields[3:]))
    mappers = tuple(_port(token, num_ports, "mapper") for token in fields[3:reducer_index])
    _refuse_repeated(mappers, "mapper")
    num_reducers = _int(fields[reducer_index], "number of reducers", low=1, high=MAX_PORTS)
    reducer_tokens = fields[reducer_index + 1 :]
    if len(reducer_tokens) != num_reducers:
        raise _LineError(
            f"{num_reducers} reducers announced, {len(reducer_tokens)} 'port:MB' fields follow"
        )
    reducers = []
    for token in reducer_tokens:
        port_text, colon, mb_text = token.partition(":")
        if not colon:
            raise _LineError(f"reducer {token!r} is not 'port:MB'")
        reducer = _port(port_text, num_ports, "reducer")
        mb = _float(mb_text, f"reducer {reducer} size (MB)", high=MAX_MB, unit=" MB")
        if 0 < mb * BYTES_PER_MB < 1:
            raise _LineError(
                f"reducer {reducer} size {mb_text} MB is less than one byte "
                f"({mb * BYTES_PER_MB:.3g} bytes; sizes are 0 or at least 1 byte)"
            )
        reducers.append((reducer, mb))
    _refuse_repeated([port for port, _ in reducers], "reducer")
    return TraceCoflow(coflow_id, arrival_ms, mappers, tuple(reducers))


def _refuse_repeated(ports: Sequence[int], role: str) -> None:
    """A port listed twice among a coflow's mappers or reducers: the reader would make
    its flows into one (the writer then refuses them as not an even shuffle), and which
    was meant, two shares or one, no reader can tell."""
    seen: set[int] = set()
    for port in ports:
        if port in seen:
            raise _LineError(f"{role} port {port} is listed twice")
        seen.add(port)


def _missing_mappers(num_mappers: int, following: list[str]) -> str:
    """Why the fields after ``<#mappers>`` cannot hold the mappers announced and the
    reducers. Mapper ports are the fields before ``<#reducers>``, which comes just
    before the first ``port:MB``; with no ``port:MB``, every field may be a port."""
    colon = next((i for i, token in enumerate(following) if ":" in token), None)
    ports = len(following) if colon is None else max(colon - 1, 0)
    if ports >= num_mappers:
        return f"{num_mappers} mappers given, then no '<#reducers> <port:MB> ...'"
    return f"{num_mappers} mappers announced but only {ports} given"


def _coflow(fields: list[str], num_ports: int) -> tuple[Experiment, int]:
    """One coflow line → its experiment and the bytes that stay on a local port."""
    record = _record(fields, num_ports)
    if record.num_flows > MAX_FLOWS:
        raise _LineError(
            f"{len(record.mappers)} mappers × {len(record.reducers)} reducers exceed "
            f"the limit of {MAX_FLOWS:,} flows"
        )
    mappers = record.mappers
    num_mappers = len(mappers)
    flows: list[Flow] = []
    local_bytes = 0
    for reducer, mb in record.reducers:
        reducer_bytes = round(mb * BYTES_PER_MB)
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
        experiment_id=record.coflow_id,
        arrival_s=record.arrival_ms / 1000.0,
        stages=(Stage(stage_id=0, trials=(trial,)),),
        kind="coflow",
    )
    return experiment, local_bytes


def records(text: str, source: str = "<string>") -> tuple[int, list[TraceCoflow]]:
    """The trace's port count and its coflow lines, checked as :func:`parse` checks them."""
    num_ports, body = _header_and_body(text, source)
    out: list[TraceCoflow] = []
    for number, fields in body:
        try:
            out.append(_record(fields, num_ports))
        except _LineError as error:
            raise TraceError(source, number, str(error)) from None
    return num_ports, out


def offline(
    text: str,
    source: str = "<string>",
    *,
    max_flows: int | None = None,
    whole_mb: bool = True,
) -> str:
    """The offline variant of a trace: every coflow released at time 0.

    ``max_flows`` keeps only the coflows of at most that many mapper × reducer
    pairs. With ``whole_mb`` each reducer's MB are split evenly over its
    mappers and every share rounded to whole MB (at least 1), so every flow of
    the result is a whole number of MB; the reducer's total becomes
    mappers × share (rounded down instead where rounding up would cross the
    reader's limit on a reducer's MB, :data:`MAX_MB`). (The offline setting of
    the Sincronia paper.)
    """
    num_ports, coflows = records(text, source)
    kept = [c for c in coflows if max_flows is None or c.num_flows <= max_flows]
    lines = [f"{num_ports} {len(kept)}"]
    for coflow in kept:
        reducers = []
        for port, mb in coflow.reducers:
            if whole_mb:
                num_mappers = len(coflow.mappers)
                share_mb = max(1, math.floor(mb / num_mappers + 0.5))
                # Within a mapper's MB of the reader's limit, rounding up would cross
                # it: the share is then the largest whole MB that stays within.
                share_mb = min(share_mb, MAX_WHOLE_MB // num_mappers)
                reducers.append(f"{port}:{share_mb * num_mappers}")
            else:
                reducers.append(f"{port}:{mb!r}")
        mappers = " ".join(str(port) for port in coflow.mappers)
        lines.append(
            f"{coflow.coflow_id} 0 {len(coflow.mappers)} {mappers} "
            f"{len(reducers)} {' '.join(reducers)}"
        )
    return "\n".join(lines) + "\n"


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
        trial = _single_coflow(experiment)
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


def _single_coflow(experiment: Experiment) -> TrialStage:
    """The experiment's one trial of one iteration: a trace line holds one coflow, and
    which of several it should keep no writer can tell (:class:`UserError`)."""
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
    return trial


def losses(workload: Workload, text: str | None = None) -> list[str]:
    """What a trace of ``workload`` would not carry, each in words, though a run depends
    on it: the format holds ports, arrivals and each coflow's mappers and reducers' MB,
    and the reader sets the rest (1 Gbit/s links, weight 1, no compute time, stage and
    trial 0, flows an even shuffle from every mapper). Several stages, trials or
    iterations are refused (:class:`UserError`), as :func:`dumps` refuses them.
    ``text`` is the workload's trace when the caller has it already."""
    lost: list[str] = []
    if workload.link_bps != LINK_BPS:
        lost.append(f"link rate {workload.link_bps:g} bit/s (a trace's links are 1 Gbit/s)")
    weights: list[str] = []
    computes: list[str] = []
    ids: list[str] = []
    for experiment in workload.experiments:
        trial = _single_coflow(experiment)
        name = f"experiment {experiment.experiment_id}"
        if experiment.weight != 1.0:
            weights.append(f"{name}: {experiment.weight:g}")
        if trial.compute_s != 0.0:
            computes.append(f"{name}: {trial.compute_s:g} s")
        stage_id = experiment.stages[0].stage_id
        if stage_id != 0 or trial.trial_id != 0:
            ids.append(f"{name}: stage {stage_id}, trial {trial.trial_id}")
    try:
        reread = parse(dumps(workload) if text is None else text)
    except TraceError:  # a trace the reader refuses: the writer refuses it, naming its line
        reread = workload
    shapes = [
        f"experiment {experiment.experiment_id}"
        for experiment, again in zip(workload.experiments, reread.experiments, strict=True)
        if not _same_flows(
            experiment.stages[0].trials[0].sync_flows, again.stages[0].trials[0].sync_flows
        )
    ]
    for what, items, why in (
        ("weight", weights, "a trace's coflows weigh 1"),
        ("compute time", computes, "a trace's coflows compute for 0 s"),
        ("stage and trial ids", ids, "the reader numbers them 0"),
        ("flows", shapes, "not an even shuffle from all the coflow's mappers"),
    ):
        if items:
            more = ", ..." if len(items) > 1 else ""
            lost.append(f"{what} of {_count(items)} ({items[0]}{more}; {why})")
    return lost


def _count(items: list[str]) -> str:
    return "1 experiment" if len(items) == 1 else f"{len(items):,} experiments"


def _same_flows(flows: tuple[Flow, ...], again: tuple[Flow, ...]) -> bool:
    """Whether a trace gives back ``flows``: the same pairs, each within the two bytes
    that restoring a reducer's local share may round away."""
    if flows == again:
        return True
    first = sorted(flows, key=lambda flow: (flow.src_host, flow.dst_host))
    second = sorted(again, key=lambda flow: (flow.src_host, flow.dst_host))
    return len(first) == len(second) and all(
        (a.src_host, a.dst_host) == (b.src_host, b.dst_host)
        and abs(a.size_bytes - b.size_bytes) <= 2
        for a, b in zip(first, second, strict=True)
    )


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
    write_text(Path(path), dumps(workload))


def write_text(path: Path, text: str) -> None:
    """Write trace ``text`` atomically, unless :func:`check_text` refuses it."""
    check_text(text, str(path))
    atomic_write_text(path, text)


def check_text(text: str, destination: str) -> None:
    """Refuse trace ``text`` that :func:`parse` would refuse (:class:`UserError` naming
    the ``destination`` it is not written to).

    Checking the text with the reader itself means no writer can produce a
    trace that the reader then refuses, whatever its rounding does.
    """
    try:
        parse(text, destination)
    except TraceError as error:
        raise UserError(
            f"{destination}: not written: its line {error.line} would be refused: {error.detail}"
        ) from None
    if len(text) > MAX_FILE_BYTES:  # digits, spaces and colons: characters are bytes
        raise UserError(
            f"{destination}: not written: {len(text):,} bytes, above the limit of "
            f"{MAX_FILE_BYTES:,} bytes for a workload file"
        )
