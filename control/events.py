"""The controller's event API: event types, their JSON form, the HTTP server, the client.

The tuning system reports what happens (an experiment with its plan arrives, a
stage is released, a trial starts or stops, an iteration's synchronisation
coflow starts or finishes, a stage completes); the controller answers once the
switches have acknowledged every write the event caused. One protocol, HTTP/1.1
with JSON bodies, is served on a loopback TCP port and on a Unix socket (which
hosts inside other network namespaces reach through the shared filesystem).
``docs/controller.md`` is the reference; the types below are the schema.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import ipaddress
import itertools
import json
import logging
import math
import os
import re
import resource
import socket
import stat
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any, ClassVar

import h11

from control.addresses import checked_hostport, is_decimal, split_hostport
from control.errors import UserError
from control.files import DuplicateKey, unique_keys
from control.model import WEIGHT_RANGE, Experiment, Flow, Stage, TrialStage, kind_problem

log = logging.getLogger(__name__)

API_PREFIX = "/v1"
ID16_MAX = 0xFFFF
MAX_SECONDS = 1e9
"""Upper bound of every duration or time in an event (about 31 years)."""


class EventError(UserError):
    """An event that is malformed or impossible in the current state; nothing changed."""


# --- event types ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExperimentReleased:
    experiment: Experiment
    type: ClassVar[str] = "experiment_released"


@dataclass(frozen=True, slots=True)
class StageReleased:
    experiment_id: int
    stage_id: int
    type: ClassVar[str] = "stage_released"


@dataclass(frozen=True, slots=True)
class TrialStarted:
    experiment_id: int
    stage_id: int
    trial_id: int
    type: ClassVar[str] = "trial_started"


@dataclass(frozen=True, slots=True)
class TrialStopped:
    experiment_id: int
    stage_id: int
    trial_id: int
    type: ClassVar[str] = "trial_stopped"


@dataclass(frozen=True, slots=True)
class CoflowStarted:
    experiment_id: int
    stage_id: int
    trial_id: int
    iteration: int
    type: ClassVar[str] = "coflow_started"


@dataclass(frozen=True, slots=True)
class CoflowFinished:
    experiment_id: int
    stage_id: int
    trial_id: int
    iteration: int
    type: ClassVar[str] = "coflow_finished"


@dataclass(frozen=True, slots=True)
class StageCompleted:
    experiment_id: int
    stage_id: int
    type: ClassVar[str] = "stage_completed"


@dataclass(frozen=True, slots=True)
class ExperimentFinished:
    experiment_id: int
    type: ClassVar[str] = "experiment_finished"


Event = (
    ExperimentReleased
    | StageReleased
    | TrialStarted
    | TrialStopped
    | CoflowStarted
    | CoflowFinished
    | StageCompleted
    | ExperimentFinished
)

_SIMPLE_EVENTS: dict[str, tuple[type, tuple[str, ...]]] = {
    "stage_released": (StageReleased, ("experiment_id", "stage_id")),
    "trial_started": (TrialStarted, ("experiment_id", "stage_id", "trial_id")),
    "trial_stopped": (TrialStopped, ("experiment_id", "stage_id", "trial_id")),
    "coflow_started": (CoflowStarted, ("experiment_id", "stage_id", "trial_id", "iteration")),
    "coflow_finished": (CoflowFinished, ("experiment_id", "stage_id", "trial_id", "iteration")),
    "stage_completed": (StageCompleted, ("experiment_id", "stage_id")),
    "experiment_finished": (ExperimentFinished, ("experiment_id",)),
}
EVENT_TYPES = ("experiment_released", *_SIMPLE_EVENTS)

_ID_LIMITS = {"experiment_id": ID16_MAX, "stage_id": ID16_MAX, "trial_id": ID16_MAX}

HostResolver = Callable[[str | int], int]
"""Maps a host name or index of the plan to the host's index (raises ``KeyError``)."""


# --- JSON → events ----------------------------------------------------------------------


def _short(name: str) -> str:
    """A field name as a message quotes it (a hostile key may be megabytes long)."""
    return name if len(name) <= SHOW_CHARS else name[: SHOW_CHARS - 3] + "..."


def _fail(field: str, message: str) -> EventError:
    return EventError(f"{field}: {message}" if field else message)


def _object(
    value: Any, field: str, allowed: Sequence[str], required: Sequence[str]
) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(field, "expected a JSON object")
    prefix = f"{field}." if field else ""
    for key in value:
        if key not in allowed:
            raise _fail(f"{prefix}{_short(key)}", f"unknown field (allowed: {', '.join(allowed)})")
    for key in required:
        if key not in value:
            raise _fail(f"{prefix}{key}", "missing required field")
    return value


def _int(value: Any, field: str, high: int = 2**63 - 1, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(field, f"expected an integer, got {_show(value)}")
    if not low <= value <= high:
        raise _fail(field, f"{_show(value)} is out of range {low}..{high}")
    return value


def _number(value: Any, field: str, low: float, high: float) -> float:
    """A finite JSON number in ``low..high`` (NaN and infinities never pass)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(field, f"expected a number, got {_show(value)}")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond the float range
        raise _fail(field, f"{_show(value)} is out of range {low:g}..{high:g}") from None
    if not math.isfinite(number) or not low <= number <= high:
        raise _fail(field, f"{_show(value)} is out of range {low:g}..{high:g}")
    return number


SHOW_CHARS = 40
"""How much of a refused value an error message quotes: replies never echo a body."""


def _show(value: Any) -> str:
    """A short JSON rendering of a (possibly huge or deeply nested) value for a message."""
    if isinstance(value, list | dict):
        return "a JSON list" if isinstance(value, list) else "a JSON object"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**SHOW_CHARS:
        return f"an integer of {len(str(abs(value)))} digits"
    text = json.dumps(value)
    return text if len(text) <= SHOW_CHARS else text[: SHOW_CHARS - 3] + "..."


def _list(value: Any, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(field, "expected a list")
    return value


def parse_event(raw: Any, resolve_host: HostResolver | None = None) -> Event:
    """Validate one decoded JSON event; raises :class:`EventError` naming the field."""
    if not isinstance(raw, dict):
        raise _fail("", "an event must be a JSON object with a 'type' field")
    kind = raw.get("type")
    if not isinstance(kind, str):  # a list or object would not even hash
        raise _fail("type", f"{_show(kind)} is not one of {', '.join(EVENT_TYPES)}")
    if kind == "experiment_released":
        body = _object(raw, "", ("type", "experiment"), ("experiment",))
        return ExperimentReleased(parse_experiment(body["experiment"], resolve_host))
    if kind not in _SIMPLE_EVENTS:
        raise _fail("type", f"{_show(kind)} is not one of {', '.join(EVENT_TYPES)}")
    cls, fields = _SIMPLE_EVENTS[kind]
    body = _object(raw, "", ("type", *fields), fields)
    values = [_int(body[name], name, _ID_LIMITS.get(name, 2**31 - 1)) for name in fields]
    event: Event = cls(*values)
    return event


def parse_experiment(raw: Any, resolve_host: HostResolver | None = None) -> Experiment:
    """An experiment plan: stages → trials (iterations, hosts, per-iteration flows)."""
    field = "experiment"
    body = _object(
        raw,
        field,
        ("experiment_id", "kind", "weight", "arrival_s", "stages"),
        ("experiment_id", "stages"),
    )
    experiment_id = _int(body["experiment_id"], f"{field}.experiment_id", ID16_MAX)
    kind = body.get("kind", "sha")
    if not isinstance(kind, str):
        raise _fail(f"{field}.kind", "expected a string")
    problem = kind_problem(kind)
    if problem is not None:
        raise _fail(f"{field}.kind", problem)
    weight = _number(body.get("weight", 1.0), f"{field}.weight", *WEIGHT_RANGE)
    arrival_s = _number(body.get("arrival_s", 0.0), f"{field}.arrival_s", 0.0, MAX_SECONDS)
    stages: list[Stage] = []
    stage_ids: set[int] = set()
    raw_stages = _list(body["stages"], f"{field}.stages")
    if not raw_stages:
        raise _fail(f"{field}.stages", "an experiment needs at least one stage")
    for s_index, raw_stage in enumerate(raw_stages):
        s_field = f"{field}.stages[{s_index}]"
        s_body = _object(raw_stage, s_field, ("stage_id", "trials"), ("stage_id", "trials"))
        stage_id = _int(s_body["stage_id"], f"{s_field}.stage_id", ID16_MAX)
        if stage_id in stage_ids:
            raise _fail(f"{s_field}.stage_id", f"duplicate stage id {stage_id}")
        stage_ids.add(stage_id)
        trials: list[TrialStage] = []
        trial_ids: set[int] = set()
        raw_trials = _list(s_body["trials"], f"{s_field}.trials")
        if not raw_trials:
            raise _fail(f"{s_field}.trials", "a stage needs at least one trial")
        for t_index, raw_trial in enumerate(raw_trials):
            t_field = f"{s_field}.trials[{t_index}]"
            trials.append(_parse_trial(raw_trial, t_field, trial_ids, resolve_host))
        stages.append(Stage(stage_id, tuple(trials)))
    return Experiment(experiment_id, arrival_s, tuple(stages), kind, weight)


def _parse_trial(
    raw: Any, field: str, trial_ids: set[int], resolve_host: HostResolver | None
) -> TrialStage:
    body = _object(
        raw,
        field,
        ("trial_id", "iterations", "compute_s", "hosts", "flows"),
        ("trial_id", "iterations", "flows"),
    )
    trial_id = _int(body["trial_id"], f"{field}.trial_id", ID16_MAX)
    if trial_id in trial_ids:
        raise _fail(f"{field}.trial_id", f"duplicate trial id {trial_id}")
    trial_ids.add(trial_id)
    iterations = _int(body["iterations"], f"{field}.iterations", 2**31 - 1, 1)
    compute_s = _number(body.get("compute_s", 0.0), f"{field}.compute_s", 0.0, MAX_SECONDS)
    hosts = tuple(
        _host(value, f"{field}.hosts[{i}]", resolve_host)
        for i, value in enumerate(_list(body.get("hosts", []), f"{field}.hosts"))
    )
    flows: list[Flow] = []
    for f_index, raw_flow in enumerate(_list(body["flows"], f"{field}.flows")):
        f_field = f"{field}.flows[{f_index}]"
        f_body = _object(
            raw_flow, f_field, ("src", "dst", "size_bytes"), ("src", "dst", "size_bytes")
        )
        src = _host(f_body["src"], f"{f_field}.src", resolve_host)
        dst = _host(f_body["dst"], f"{f_field}.dst", resolve_host)
        if src == dst:
            raise _fail(f_field, "a flow needs two different hosts")
        size = _int(f_body["size_bytes"], f"{f_field}.size_bytes", 2**62, 1)
        flows.append(Flow(src, dst, size))
    if not flows:
        raise _fail(f"{field}.flows", "a trial needs at least one flow per iteration")
    return TrialStage(trial_id, iterations, compute_s, tuple(flows), hosts)


def _host(value: Any, field: str, resolve_host: HostResolver | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise _fail(field, f"expected a host name or index, got {_show(value)}")
    if resolve_host is None:
        if isinstance(value, str):
            raise _fail(field, "host names need a topology; give the host index")
        return _int(value, field)
    try:
        return resolve_host(value)
    except KeyError:
        raise _fail(field, f"unknown host {_show(value)}") from None


def experiment_to_json(experiment: Experiment) -> dict[str, Any]:
    """The JSON plan of an experiment (hosts as indices), as :func:`parse_experiment` reads."""
    return {
        "experiment_id": experiment.experiment_id,
        "kind": experiment.kind,
        "weight": experiment.weight,
        "arrival_s": experiment.arrival_s,
        "stages": [
            {
                "stage_id": stage.stage_id,
                "trials": [
                    {
                        "trial_id": trial.trial_id,
                        "iterations": trial.iterations,
                        "compute_s": trial.compute_s,
                        "hosts": list(trial.hosts),
                        "flows": [
                            {"src": f.src_host, "dst": f.dst_host, "size_bytes": f.size_bytes}
                            for f in trial.sync_flows
                        ],
                    }
                    for trial in stage.trials
                ],
            }
            for stage in experiment.stages
        ],
    }


def event_to_json(event: Event) -> dict[str, Any]:
    if isinstance(event, ExperimentReleased):
        return {"type": event.type, "experiment": experiment_to_json(event.experiment)}
    _, fields = _SIMPLE_EVENTS[event.type]
    return {"type": event.type, **{name: getattr(event, name) for name in fields}}


# --- strict JSON ------------------------------------------------------------------------


class JSONError(ValueError):
    """Bytes that are not strict JSON; the message is short and quotes none of the input."""


def _refuse_constant(name: str) -> Any:
    raise JSONError(f"{name} is not a JSON number (numbers must be finite)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JSONError("a number is beyond the range of a 64-bit float")
    return value


def decode_json(data: bytes) -> Any:
    """Strict JSON (RFC 8259) from UTF-8 bytes.

    ``NaN``, ``Infinity`` and numbers that overflow a float, integers beyond Python's
    limit on digits, nesting deeper than the interpreter's recursion limit, an object
    with a key twice (which would silently keep the last value), and bytes that are not
    UTF-8 raise :class:`JSONError`, whose message quotes none of the input.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise JSONError(
            f"not UTF-8: byte 0x{data[error.start]:02x} at offset {error.start}"
        ) from None
    try:
        return json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            object_pairs_hook=unique_keys,
        )
    except JSONError:
        raise
    except DuplicateKey:
        raise JSONError("an object has the same key twice") from None
    except json.JSONDecodeError as error:
        raise JSONError(f"{error.msg} at line {error.lineno} column {error.colno}") from None
    except RecursionError:
        raise JSONError("nested too deeply") from None
    except ValueError:  # the interpreter's limit on the digits of an integer
        raise JSONError("an integer has too many digits") from None


# --- server -----------------------------------------------------------------------------


class EventNotStored(Exception):
    """An event the handler could not keep (its journal cannot be written, e.g. a full
    disk) and so did not apply: an operating condition, not a bug, so the reply is 507
    and the log gets one warning line, no traceback."""


class EventHandler:
    """What the server calls; the controller implements it."""

    def handle_event(self, raw: Any) -> dict[str, Any]:
        """Apply one decoded JSON event; raise :class:`EventError` to refuse it, or
        :class:`EventNotStored` when it cannot be kept."""
        raise NotImplementedError

    def status(self) -> dict[str, Any]:
        raise NotImplementedError


REQUEST_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """What one client may cost the event server (``docs/controller.md`` explains each)."""

    max_body_bytes: int = 4 * 1024 * 1024
    """Larger bodies get 413 before they are read."""
    small_body_bytes: int = 64 * 1024
    """Bodies announced up to this size are read at once; larger ones and chunked ones
    (of unknown length) wait for one of ``large_bodies`` slots, which bounds the memory
    that bodies in flight take."""
    large_bodies: int = 4
    max_header_bytes: int = 16 * 1024
    """Request line plus headers; more gets 431."""
    request_timeout_s: float = REQUEST_TIMEOUT_S
    """From a request's first byte to its last; a slower request gets 408."""
    idle_timeout_s: float = 60.0
    """A connection with no request in progress is closed after this long."""
    write_timeout_s: float = 10.0
    """A client that does not read its reply for this long is disconnected."""
    max_connections: int = 512
    """Open connections; a new one beyond this evicts another that has no request being
    handled: first the oldest that never completed a request, then the longest idle."""
    workers: int = 8
    """Threads that run events and status requests (the controller's own work)."""


API_PATHS = {
    f"{API_PREFIX}/events": "POST",
    "/events": "POST",
    f"{API_PREFIX}/status": "GET",
    "/status": "GET",
    f"{API_PREFIX}/health": "GET",
    "/health": "GET",
}
MAX_MESSAGE_CHARS = 300
"""Error messages in replies are cut to this length."""
_READ_CHUNK = 64 * 1024
LINGER_S = 1.0
"""How long a connection closed after an error reply is drained."""


class _Refuse(Exception):
    """Ends a request with an HTTP error reply and closes the connection."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(eq=False)
class _Client:
    """One open connection, as the eviction rule sees it."""

    task: asyncio.Task[None] | None
    idle_since: float
    busy: bool = False
    """A complete request of this connection is being handled: never evicted."""
    served: int = 0
    """Requests answered: connections that never completed one are evicted first."""


@dataclass(frozen=True, slots=True)
class _Listener:
    sock: socket.socket
    tcp: bool
    port: int = 0
    host: str = ""


def _clip(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 3] + "..."


_QUOTED_BYTES = re.compile(r"(?:bytearray\()?b['\"]")


def _protocol_error(error: h11.ProtocolError) -> str:
    """h11's reason for refusing a request, quoting at most SHOW_CHARS of the client's
    bytes (h11 quotes a whole bad request or header line)."""
    text = str(error)
    match = _QUOTED_BYTES.search(text)
    if match is None:
        return text
    return text[: match.start()] + _short(text[match.start() :])


def _host_is_literal(value: str) -> bool:
    """Whether a Host header names ``localhost`` or an IP address (with optional port):
    a name that DNS resolves could be rebound to this address by a web page."""
    host = value.strip()
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else ""
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    if host.lower() == "localhost":
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _is_loopback(address: str) -> bool:
    """Whether a bound IP address is reachable from this host alone."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def exposed_warning(url: str, address: str) -> str:
    """The warning for an events API bound to ``address``, which is not loopback (worded
    as the P4Runtime server's)."""
    reach = (
        "serves every network this host is on"
        if ipaddress.ip_address(address.split("%", 1)[0]).is_unspecified
        else "is reachable from other hosts"
    )
    return (
        f"the events API on {url} {reach}: anyone who can reach it can send events and "
        "so reprogram the switches (the API has no authentication); bind 127.0.0.1 or "
        "use the Unix socket unless that is intended"
    )


class EventServer:
    """Serves the event API on a TCP address and/or a Unix socket until :meth:`stop`.

    One asyncio event loop (its own thread) reads every connection, with the HTTP/1.1
    framing done by ``h11``; complete requests run on a small thread pool, since the
    controller's work blocks (locks, P4Runtime writes). Slow or hostile clients cost a
    coroutine and a socket each, within :class:`ServerLimits`, never a thread, so health
    checks answer while a thousand half-sent requests are open.
    """

    def __init__(
        self,
        handler: EventHandler,
        tcp_addr: str | None = "127.0.0.1:0",
        unix_path: str | Path | None = None,
        limits: ServerLimits | None = None,
    ) -> None:
        self.handler = handler
        self.limits = limits or ServerLimits()
        self.unix_path = Path(unix_path) if unix_path is not None else None
        self.tcp_address: tuple[str, int] | None = None
        self._listeners: list[_Listener] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._servers: list[asyncio.AbstractServer] = []
        self._clients: dict[int, _Client] = {}
        self._large: asyncio.Semaphore | None = None
        self._ids = itertools.count()
        self._unix_bound = False
        where = ""
        try:
            if tcp_addr is not None:
                where = tcp_addr
                self._listeners.append(self._listen_tcp(tcp_addr))
            if self.unix_path is not None:
                where = str(self.unix_path)
                self._listeners.append(self._listen_unix(self.unix_path))
        except OSError as error:
            self.stop()
            # strerror is None for some errors, e.g. "AF_UNIX path too long".
            reason = error.strerror or str(error)
            raise UserError(f"events API: cannot listen on {where}: {reason}") from None
        except UserError:  # a live or non-socket file at the socket path
            self.stop()
            raise

    def _listen_tcp(self, address: str) -> _Listener:
        host, port = parse_hostport(address)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(1024)
        except OSError:
            sock.close()
            raise
        self.tcp_address = (host, sock.getsockname()[1])
        return _Listener(sock, True, self.tcp_address[1], host)

    def _listen_unix(self, path: Path) -> _Listener:
        _remove_stale_socket(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
            self._unix_bound = True  # from here the socket file is this server's
            # Only the controller's user (and root) may send events over the socket.
            os.chmod(path, 0o600)
            sock.listen(1024)
        except OSError:
            sock.close()
            if self._unix_bound:
                self._unix_bound = False
                with contextlib.suppress(OSError):
                    path.unlink()
            raise
        return _Listener(sock, False)

    # -- lifecycle --

    def start(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._pool = ThreadPoolExecutor(self.limits.workers, thread_name_prefix="events")
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run_loop, args=(loop, ready), name="events", daemon=True
        )
        self._thread.start()
        ready.wait()
        for listener in self._listeners:
            if listener.tcp and not _is_loopback(listener.sock.getsockname()[0]):
                log.warning("%s", exposed_warning(self.url, listener.sock.getsockname()[0]))

    def _run_loop(self, loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        self._large = asyncio.Semaphore(self.limits.large_bodies)
        for listener in self._listeners:

            def serve(
                reader: asyncio.StreamReader,
                writer: asyncio.StreamWriter,
                listener: _Listener = listener,
            ) -> Coroutine[Any, Any, None]:
                return self._connection(reader, writer, listener)

            if listener.tcp:
                start = asyncio.start_server(serve, sock=listener.sock, limit=_READ_CHUNK)
            else:
                start = asyncio.start_unix_server(serve, sock=listener.sock, limit=_READ_CHUNK)
            self._servers.append(loop.run_until_complete(start))
        ready.set()
        try:
            loop.run_forever()
        finally:
            # Connections that did not end within the shutdown's wait (or came in
            # during it) are cancelled and given a moment; one still open is then
            # closed with the loop, not left to be finalised against a closed loop.
            with contextlib.suppress(Exception):
                pending = asyncio.all_tasks(loop)
                for task in pending:
                    task.cancel()
                if pending:
                    loop.run_until_complete(asyncio.wait(pending, timeout=1.0))
            loop.close()

    async def _shutdown(self) -> None:
        for server in self._servers:
            server.close()
        for client in list(self._clients.values()):
            if client.task is not None:
                client.task.cancel()
        tasks = [c.task for c in self._clients.values() if c.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=2)

    def stop(self) -> None:
        # The socket file goes first: the rest may wait (for an event being applied), and a
        # second Ctrl-C during that wait would otherwise leave the file behind.
        self._remove_socket_file()
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
        self._loop = None
        self._thread = None
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        for listener in self._listeners:
            listener.sock.close()
        self._listeners.clear()
        self._servers.clear()

    def _remove_socket_file(self) -> None:
        if self.unix_path is not None and self._unix_bound:
            # Only a socket this server bound: a start that failed (its TCP address taken
            # by another controller) must not remove that controller's live socket.
            self._unix_bound = False
            with contextlib.suppress(FileNotFoundError):
                self.unix_path.unlink()

    @property
    def url(self) -> str:
        """``HOST:PORT`` of the TCP listener, an IPv6 host in brackets (as URLs take it)."""
        assert self.tcp_address is not None
        host, port = self.tcp_address
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    # -- connections --

    def _admit(self, client: _Client) -> bool:
        """Make room for a new connection: evict the longest-idle one that has no request
        being handled. False when every connection is busy."""
        if len(self._clients) < self.limits.max_connections:
            return True
        idle = [c for c in self._clients.values() if not c.busy and c.task is not None]
        if not idle:
            return False
        victim = min(idle, key=lambda c: (c.served > 0, c.idle_since))
        assert victim.task is not None
        victim.task.cancel()
        for key, value in list(self._clients.items()):
            if value is victim:
                del self._clients[key]
        return True

    async def _connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, listener: _Listener
    ) -> None:
        loop = asyncio.get_running_loop()
        client = _Client(asyncio.current_task(), loop.time())
        if not self._admit(client):
            with contextlib.suppress(Exception):
                writer.write(_raw_reply(503, "too many requests in progress"))
                await asyncio.wait_for(writer.drain(), self.limits.write_timeout_s)
            writer.close()
            return
        key = next(self._ids)
        self._clients[key] = client
        connection = h11.Connection(
            h11.SERVER, max_incomplete_event_size=self.limits.max_header_bytes
        )
        try:
            while await self._one_request(connection, reader, writer, listener, client):
                client.served += 1
                connection.start_next_cycle()
                client.idle_since = loop.time()
        except (asyncio.CancelledError, ConnectionError, TimeoutError, h11.ProtocolError):
            pass
        finally:
            self._clients.pop(key, None)
            # RuntimeError: the loop is closed (the task is being finalised after stop).
            with contextlib.suppress(RuntimeError):
                writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def _linger(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Before closing after an early reply, end our side and read away what the client
        is still sending (briefly, boundedly): closing a socket with unread input resets
        the connection, and the client could lose the reply."""
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LINGER_S
        budget = self.limits.max_body_bytes
        with contextlib.suppress(OSError, TimeoutError):
            while budget > 0 and (remaining := deadline - loop.time()) > 0:
                data = await asyncio.wait_for(reader.read(_READ_CHUNK), remaining)
                if not data:
                    break
                budget -= len(data)

    async def _receive(
        self, connection: h11.Connection, reader: asyncio.StreamReader, deadline: float
    ) -> Any:
        loop = asyncio.get_running_loop()
        while True:
            event = connection.next_event()
            if event is not h11.NEED_DATA:
                return event
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise _Refuse(408, "request not complete in time")
            try:
                data = await asyncio.wait_for(reader.read(_READ_CHUNK), remaining)
            except TimeoutError:
                raise _Refuse(408, "request not complete in time") from None
            connection.receive_data(data)

    async def _one_request(
        self,
        connection: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        listener: _Listener,
        client: _Client,
    ) -> bool:
        """Serve one request; returns whether the connection may carry another."""
        loop = asyncio.get_running_loop()
        limits = self.limits
        release = False
        try:
            try:
                # A pipelined request may already be here whole, read with the previous one.
                event = connection.next_event()
                if event is h11.NEED_DATA and not connection.trailing_data[0]:
                    # Idle keep-alive: wait for the next request's first bytes.
                    try:
                        data = await asyncio.wait_for(
                            reader.read(_READ_CHUNK), limits.idle_timeout_s
                        )
                    except TimeoutError:
                        return False
                    connection.receive_data(data)
                deadline = loop.time() + limits.request_timeout_s
                if event is h11.NEED_DATA:
                    event = await self._receive(connection, reader, deadline)
                if isinstance(event, h11.ConnectionClosed):
                    return False
                if not isinstance(event, h11.Request):
                    raise _Refuse(400, "malformed request: expected a request line")
                request = event
                # h11 bounds only what arrives incomplete; a whole head can be larger.
                head_bytes = len(request.target) + sum(
                    len(name) + len(value) + 4 for name, value in request.headers
                )
                if head_bytes > limits.max_header_bytes:
                    raise _Refuse(431, "request headers too large")
                headers = {name.decode("latin-1"): value for name, value in request.headers}
                self._check_framing(request, headers)
                path = request.target.decode("latin-1").partition("?")[0]
                method = request.method.decode("latin-1")
                origins = [value for name, value in request.headers if name == b"origin"]
                self._check_origin(headers, origins, listener)
                if path not in API_PATHS:
                    raise _Refuse(404, f"no such resource {_short(path)}")
                if method != API_PATHS[path]:
                    raise _Refuse(405, f"{_short(method)} is not allowed on {path}")
                if method == "GET":
                    # Read to the end of the request; a body is read away, not kept.
                    await self._continue(connection, writer)
                    await self._body(connection, reader, deadline, keep=False)
                    if path.endswith("/health"):
                        status, payload = 200, {"ok": True}
                    else:
                        client.busy = True
                        status, payload = await loop.run_in_executor(self._pool, self._status)
                else:
                    types = [value for name, value in request.headers if name == b"content-type"]
                    length = self._check_post(headers, types)
                    if length is None or length > limits.small_body_bytes:
                        assert self._large is not None
                        remaining = max(deadline - loop.time(), 0.0)
                        try:
                            await asyncio.wait_for(self._large.acquire(), remaining)
                        except TimeoutError:
                            raise _Refuse(503, "busy: too many large requests") from None
                        release = True
                    # Every check passed and the body has room: a client that holds its
                    # body back for "Expect: 100-continue" is asked for it now.
                    await self._continue(connection, writer)
                    body = await self._body(connection, reader, deadline)
                    client.busy = True
                    status, payload = await loop.run_in_executor(self._pool, self._event, body)
            except h11.RemoteProtocolError as error:
                message = f"malformed request: {_protocol_error(error)}"
                raise _Refuse(error.error_status_hint, message) from None
        except _Refuse as refusal:
            await self._send(connection, writer, refusal.status, error_body(refusal.message), True)
            await self._linger(reader, writer)
            return False
        finally:
            if release:
                assert self._large is not None
                self._large.release()
        # Still busy while the reply goes out: an applied event's reply is never evicted.
        await self._send(connection, writer, status, payload, False)
        client.busy = False
        return connection.our_state is h11.DONE and connection.their_state is h11.DONE

    def _check_origin(
        self, headers: Mapping[str, bytes], origins: Sequence[bytes], listener: _Listener
    ) -> None:
        """Refuse what a web page could send: a foreign ``Origin`` (any, on the Unix
        socket), and on TCP a ``Host`` that is a DNS name (DNS rebinding)."""
        host = headers.get("host")
        if listener.tcp and host is not None and not _host_is_literal(host.decode("latin-1")):
            raise _Refuse(403, "Host must be localhost or an IP address")
        own = {"localhost", "127.0.0.1", "::1", listener.host}
        for origin in origins:
            try:
                parts = urllib.parse.urlsplit(origin.decode("latin-1").strip())
            except ValueError:  # e.g. "http://[::1": no origin of ours
                raise _Refuse(403, "cross-origin requests are refused") from None
            try:
                port = parts.port
            except ValueError:
                port = None
            if not (
                listener.tcp
                and parts.scheme == "http"
                and parts.hostname in own
                and port == listener.port
            ):
                raise _Refuse(403, "cross-origin requests are refused")

    @staticmethod
    def _check_framing(request: h11.Request, headers: Mapping[str, bytes]) -> None:
        """Refuse a body whose length two headers could tell differently (RFC 9112 §6.1,
        §6.3: a way to smuggle a request, or to slip a large body past the size that
        decides whether it needs one of the large-body slots), and expectations other
        than ``100-continue``. h11 has already refused transfer codings other than
        ``chunked``."""
        if "transfer-encoding" in headers:
            if "content-length" in headers:
                raise _Refuse(
                    400, "a request may not have both Content-Length and Transfer-Encoding"
                )
            if request.http_version == b"1.0":
                raise _Refuse(400, "Transfer-Encoding is not allowed in an HTTP/1.0 request")
        if request.http_version == b"1.0":
            return  # HTTP/1.0 has no expectations (RFC 9110 §10.1.1: ignored)
        expected = {
            token.strip().lower()
            for name, value in request.headers
            if name == b"expect"
            for token in value.split(b",")
        }
        if expected - {b"", b"100-continue"}:
            raise _Refuse(417, "the only expectation supported is Expect: 100-continue")

    async def _continue(self, connection: h11.Connection, writer: asyncio.StreamWriter) -> None:
        """Send ``100 Continue`` to a client waiting for it before it sends its body."""
        if connection.they_are_waiting_for_100_continue:
            data = connection.send(
                h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue")
            )
            writer.write(data or b"")
            await asyncio.wait_for(writer.drain(), self.limits.write_timeout_s)

    def _check_post(self, headers: Mapping[str, bytes], types: Sequence[bytes]) -> int | None:
        """The body's announced length (None when chunked) after the content-type check."""
        if len(types) > 1:
            raise _Refuse(400, "more than one Content-Type header")
        media, _, params = headers.get("content-type", b"").decode("latin-1").partition(";")
        charset = params.strip().lower().replace(" ", "")
        if media.strip().lower() != "application/json" or charset not in (
            "",
            "charset=utf-8",
            'charset="utf-8"',
        ):
            raise _Refuse(415, "events must be sent as Content-Type: application/json")
        if "transfer-encoding" in headers:
            # Chunked (the only coding h11 reads; never with Content-Length, see
            # _check_framing): a body of unknown length, counted as it arrives.
            return None
        if "content-length" not in headers:
            raise _Refuse(411, "Content-Length required")
        length = int(headers["content-length"])  # h11 has checked it is a number
        if length > self.limits.max_body_bytes:
            raise _Refuse(413, f"body larger than {self.limits.max_body_bytes} bytes")
        return length

    async def _body(
        self,
        connection: h11.Connection,
        reader: asyncio.StreamReader,
        deadline: float,
        keep: bool = True,
    ) -> bytes:
        parts: list[bytes] = []
        size = 0
        while True:
            event = await self._receive(connection, reader, deadline)
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > self.limits.max_body_bytes:
                    raise _Refuse(413, f"body larger than {self.limits.max_body_bytes} bytes")
                if keep:
                    parts.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(parts)
            else:
                raise _Refuse(400, "request ended before its body")

    async def _send(
        self,
        connection: h11.Connection,
        writer: asyncio.StreamWriter,
        status: int,
        payload: Mapping[str, Any],
        close: bool,
    ) -> None:
        data = json.dumps(payload, sort_keys=True).encode()
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
        if close:
            headers.append(("Connection", "close"))
        try:
            out = connection.send(
                h11.Response(status_code=status, headers=headers, reason=HTTPStatus(status).phrase)
            )
            out = (out or b"") + (connection.send(h11.Data(data=data)) or b"")
            out += connection.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError:
            # The request was too broken for h11 to frame a reply: answer it raw.
            if not close:
                raise
            out = _raw_reply(status, str(payload.get("error", "")))
        writer.write(out)
        await asyncio.wait_for(writer.drain(), self.limits.write_timeout_s)

    # -- the controller's side (worker threads) --

    def _status(self) -> tuple[int, dict[str, Any]]:
        try:
            return 200, self.handler.status()
        except Exception as error:  # the daemon must outlive a bug in one request
            log.exception("status failed")
            return 500, error_body(f"internal error: {error!r}")

    def _event(self, body: bytes) -> tuple[int, dict[str, Any]]:
        try:
            raw = decode_json(body)
        except JSONError as error:
            return 400, error_body(f"body is not JSON: {error}")
        try:
            result = self.handler.handle_event(raw)
        except UserError as error:
            return 400, error_body(str(error))
        except EventNotStored as error:
            log.warning("event not applied: %s", error)
            return 507, error_body(f"event not applied: {error}")
        except Exception as error:  # the daemon must outlive a bug in one request
            log.exception("event failed")
            return 500, error_body(f"internal error: {error!r}")
        return 200, {"ok": True, **result}


def error_body(message: str) -> dict[str, Any]:
    return {"ok": False, "error": _clip(message)}


def _raw_reply(status: int, message: str) -> bytes:
    data = json.dumps(error_body(message)).encode()
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + data


def _remove_stale_socket(path: Path) -> None:
    """Remove a socket file left by a crashed run, but never a live one or a non-socket."""
    if not path.exists():
        return
    if not path.is_socket():
        raise UserError(f"events API: {path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        path.unlink()
    else:
        raise UserError(f"events API: another controller is listening on {path}")
    finally:
        probe.close()


def parse_hostport(text: str) -> tuple[str, int]:
    address = split_hostport(text, allow_zero=True)
    if address is None:
        raise UserError(f"{text!r} is not HOST:PORT")
    return address


# --- client -----------------------------------------------------------------------------


class EventRejected(UserError):
    """The controller refused an event (HTTP 400); the message says why."""


class ControllerUnreachable(UserError):
    """No controller answers at the address or socket."""


def _is_socket_path(address: str) -> bool:
    return "/" in address or address.endswith(".sock")


def client_address(address: str | Path) -> str:
    """The controller address an :class:`EventClient` connects to, checked before any
    connection: a Unix socket path (anything with ``/`` or ending ``.sock``), or
    ``HOST:PORT`` with a host a name lookup takes. Left to ``http.client`` and the
    lookup, a space or control character (``InvalidURL``) or a label of the name over
    63 characters (the IDNA codec's ``UnicodeError``) would be a traceback."""
    text = str(address)
    if not text.strip():
        raise UserError("an empty controller address")
    if _is_socket_path(text):
        if "\0" in text:  # no socket has such a name: connect() would raise ValueError
            raise UserError(f"{text!r}: not a socket path (it holds a NUL character)")
        return text
    checked_hostport(text, allow_zero=True)
    return text


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


WATCHDOG_IDLE_S = 30.0


class _Watchdog:
    """Ends a call that outlives its deadline by shutting its connection's socket. The
    socket timeout bounds each wait, not the whole answer: a server that sends a byte now
    and then would hold the call for ever. One thread per client, started at its first
    call and stopped by :meth:`stop` (a timer per call cost a thread start, ~0.2 ms)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._call: tuple[http.client.HTTPConnection, float, threading.Event] | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False

    def arm(self, connection: http.client.HTTPConnection, timeout_s: float) -> threading.Event:
        """Watch a call on ``connection``; the event is set if it was cut off."""
        expired = threading.Event()
        with self._changed:
            self._call = (connection, time.monotonic() + timeout_s, expired)
            if self._thread is None:
                self._stopping = False
                self._thread = threading.Thread(
                    target=self._watch, name="event-client-watchdog", daemon=True
                )
                self._thread.start()
            self._changed.notify()
        return expired

    def disarm(self) -> None:
        with self._changed:
            self._call = None
            self._changed.notify()

    def stop(self) -> None:
        with self._changed:
            thread, self._thread = self._thread, None
            self._stopping = True
            self._changed.notify()
        if thread is not None:
            thread.join()

    def _watch(self) -> None:
        with self._changed:
            while not self._stopping:
                if self._call is None:
                    if not self._changed.wait(WATCHDOG_IDLE_S):
                        # Idle: end, so that a client never closed leaves no thread behind
                        # (the next call starts one again).
                        self._thread = None
                        return
                    continue
                connection, deadline, expired = self._call
                remaining = deadline - time.monotonic()
                if remaining > 0:
                    self._changed.wait(remaining)
                    continue
                expired.set()
                self._call = None
                sock = connection.sock
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)


MAX_RESPONSE_BYTES = 64 << 20
"""The largest answer the client reads: a status lists every entry of every switch."""


class EventClient:
    """Sends events to a controller over HTTP: ``EventClient("127.0.0.1:9100")`` or
    ``EventClient("/run/beamer.sock")`` (a path, i.e. anything containing ``/``).

    One keep-alive connection is reused; each call returns once the controller
    has applied the event and the switches have acknowledged the writes.
    """

    def __init__(self, address: str | Path, timeout_s: float = 30.0) -> None:
        self.address = client_address(address)
        self.timeout_s = timeout_s
        self._connection: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()
        self._watchdog = _Watchdog()

    def _connect(self) -> http.client.HTTPConnection:
        if _is_socket_path(self.address):
            return _UnixConnection(self.address, self.timeout_s)
        host, port = parse_hostport(self.address)
        return http.client.HTTPConnection(host, port, timeout=self.timeout_s)

    def _request(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        with self._lock:
            for attempt in (0, 1):
                if self._connection is None:
                    try:
                        self._connection = self._connect()
                    except ValueError as error:  # http.client refused the host
                        raise ControllerUnreachable(
                            f"controller at {self.address}: {error}"
                        ) from None
                connection = self._connection
                expired = self._watchdog.arm(connection, self.timeout_s)
                try:
                    connection.request(method, path, body=data, headers=headers)
                    response = connection.getresponse()
                    payload = self._read_body(response)
                    if expired.is_set():  # the body was cut off, not whole
                        raise TimeoutError
                    break
                except (ConnectionError, http.client.HTTPException, OSError, ValueError) as error:
                    # ValueError: a name lookup's UnicodeError (the IDNA codec), or
                    # http.client's own refusal of what it was given.
                    connection.close()
                    self._connection = None
                    if expired.is_set():
                        raise ControllerUnreachable(
                            f"controller at {self.address}: no whole answer within "
                            f"{self.timeout_s:g} s"
                        ) from None
                    # A kept-alive connection the server closed: retry once on a new one.
                    if attempt == 1 or not isinstance(
                        error, ConnectionError | http.client.RemoteDisconnected
                    ):
                        raise ControllerUnreachable(
                            f"controller at {self.address}: {error}"
                        ) from None
                finally:
                    self._watchdog.disarm()
        try:
            decoded = decode_json(payload)
        except JSONError as error:
            raise ControllerUnreachable(
                f"controller at {self.address} answered HTTP {response.status} without "
                f"valid JSON ({error})"
            ) from None
        if not isinstance(decoded, dict):
            raise ControllerUnreachable(
                f"controller at {self.address} answered HTTP {response.status} with JSON "
                "that is not an object"
            )
        result: dict[str, Any] = decoded
        if response.status == 400:
            raise EventRejected(f"controller refused the event: {result.get('error')}")
        if response.status != 200:
            raise ControllerUnreachable(
                f"controller at {self.address}: HTTP {response.status}: {result.get('error')}"
            )
        return result

    def _read_body(self, response: http.client.HTTPResponse) -> bytes:
        """The body, at most MAX_RESPONSE_BYTES (a stranger on the port could announce or
        send any amount)."""
        announced = response.getheader("Content-Length")
        size = int(announced) if announced is not None and is_decimal(announced.strip()) else 0
        if size > MAX_RESPONSE_BYTES:
            raise ControllerUnreachable(
                f"controller at {self.address} announced a {size:,}-byte answer, above the "
                f"limit of {MAX_RESPONSE_BYTES:,}"
            )
        payload = response.read(MAX_RESPONSE_BYTES + 1)
        if len(payload) > MAX_RESPONSE_BYTES:
            raise ControllerUnreachable(
                f"controller at {self.address}: an answer of more than {MAX_RESPONSE_BYTES:,} bytes"
            )
        return payload

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
        self._watchdog.stop()

    def __enter__(self) -> EventClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- API --

    def send(self, event: Event | Mapping[str, Any]) -> dict[str, Any]:
        raw = event_to_json(event) if not isinstance(event, Mapping) else dict(event)
        return self._request("POST", f"{API_PREFIX}/events", raw)

    def status(self) -> dict[str, Any]:
        return self._request("GET", f"{API_PREFIX}/status")

    def health(self) -> bool:
        return bool(self._request("GET", f"{API_PREFIX}/health").get("ok"))

    def experiment_released(self, experiment: Experiment | Mapping[str, Any]) -> dict[str, Any]:
        plan = experiment_to_json(experiment) if isinstance(experiment, Experiment) else experiment
        return self.send({"type": "experiment_released", "experiment": plan})

    def stage_released(self, experiment_id: int, stage_id: int) -> dict[str, Any]:
        return self.send(StageReleased(experiment_id, stage_id))

    def trial_started(self, experiment_id: int, stage_id: int, trial_id: int) -> dict[str, Any]:
        return self.send(TrialStarted(experiment_id, stage_id, trial_id))

    def trial_stopped(self, experiment_id: int, stage_id: int, trial_id: int) -> dict[str, Any]:
        return self.send(TrialStopped(experiment_id, stage_id, trial_id))

    def coflow_started(
        self, experiment_id: int, stage_id: int, trial_id: int, iteration: int
    ) -> int:
        """Returns the coflow id to put in the tag."""
        reply = self.send(CoflowStarted(experiment_id, stage_id, trial_id, iteration))
        coflow_id: int = reply["coflow_id"]
        return coflow_id

    def coflow_finished(
        self, experiment_id: int, stage_id: int, trial_id: int, iteration: int
    ) -> dict[str, Any]:
        return self.send(CoflowFinished(experiment_id, stage_id, trial_id, iteration))

    def stage_completed(self, experiment_id: int, stage_id: int) -> dict[str, Any]:
        return self.send(StageCompleted(experiment_id, stage_id))

    def experiment_finished(self, experiment_id: int) -> dict[str, Any]:
        return self.send(ExperimentFinished(experiment_id))


SOCKET_NAME = "beamer-controller.sock"


def default_socket_dir() -> Path:
    """Where ``beamer controller`` puts its Unix socket unless told otherwise: the
    user's ``$XDG_RUNTIME_DIR``, else ``beamer-UID`` in the temporary directory, a
    directory only this user may write (see :func:`ensure_private_dir`)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime)
    return Path(tempfile.gettempdir()) / f"beamer-{os.getuid()}"


def default_socket_path() -> str:
    return str(default_socket_dir() / SOCKET_NAME)


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` (mode 0700) if missing, and refuse it unless it is a real directory
    owned by this user that nobody else may write: in a world-writable parent another
    user could otherwise own the directory, or plant a file where the socket goes."""
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as error:
        raise UserError(
            f"events API: cannot create {path}: {error.strerror}; "
            "choose another socket with --events-socket PATH"
        ) from None
    info = path.lstat()
    problem = None
    if not stat.S_ISDIR(info.st_mode):
        problem = "is not a directory"
    elif info.st_uid != os.getuid():
        problem = f"belongs to user {info.st_uid}, not to this user ({os.getuid()})"
    elif info.st_mode & 0o022:
        problem = f"may be written by other users (mode {stat.S_IMODE(info.st_mode):04o})"
    if problem is not None:
        raise UserError(
            f"events API: {path} {problem}; choose another socket with --events-socket PATH"
        )


def raise_open_files_limit(needed: int) -> None:
    """Raise the soft limit on open files towards ``needed`` (within the hard limit), so
    the event server's connection cap, not the descriptor limit, decides."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
