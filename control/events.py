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

import contextlib
import http.client
import http.server
import json
import os
import socket
import socketserver
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from control.errors import UserError
from control.model import Experiment, Flow, Stage, TrialStage

API_PREFIX = "/v1"
MAX_BODY_BYTES = 64 * 1024 * 1024
ID16_MAX = 0xFFFF


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
            raise _fail(f"{prefix}{key}", f"unknown field (allowed: {', '.join(allowed)})")
    for key in required:
        if key not in value:
            raise _fail(f"{prefix}{key}", "missing required field")
    return value


def _int(value: Any, field: str, high: int = 2**63 - 1, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(field, f"expected an integer, got {json.dumps(value)}")
    if not low <= value <= high:
        raise _fail(field, f"{value} is out of range {low}..{high}")
    return value


def _number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise _fail(field, f"expected a non-negative number, got {json.dumps(value)}")
    return float(value)


def _list(value: Any, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(field, "expected a list")
    return value


def parse_event(raw: Any, resolve_host: HostResolver | None = None) -> Event:
    """Validate one decoded JSON event; raises :class:`EventError` naming the field."""
    if not isinstance(raw, dict):
        raise _fail("", "an event must be a JSON object with a 'type' field")
    kind = raw.get("type")
    if kind == "experiment_released":
        body = _object(raw, "", ("type", "experiment"), ("experiment",))
        return ExperimentReleased(parse_experiment(body["experiment"], resolve_host))
    if kind not in _SIMPLE_EVENTS:
        raise _fail("type", f"{json.dumps(kind)} is not one of {', '.join(EVENT_TYPES)}")
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
    weight = _number(body.get("weight", 1.0), f"{field}.weight")
    if weight <= 0:
        raise _fail(f"{field}.weight", "must be positive")
    arrival_s = _number(body.get("arrival_s", 0.0), f"{field}.arrival_s")
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
    compute_s = _number(body.get("compute_s", 0.0), f"{field}.compute_s")
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
        raise _fail(field, f"expected a host name or index, got {json.dumps(value)}")
    if resolve_host is None:
        if isinstance(value, str):
            raise _fail(field, "host names need a topology; give the host index")
        return _int(value, field)
    try:
        return resolve_host(value)
    except KeyError:
        raise _fail(field, f"unknown host {json.dumps(value)}") from None


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


# --- server -----------------------------------------------------------------------------


class EventHandler:
    """What the server calls; the controller implements it."""

    def handle_event(self, raw: Any) -> dict[str, Any]:
        """Apply one decoded JSON event; raise :class:`EventError` to refuse it."""
        raise NotImplementedError

    def status(self) -> dict[str, Any]:
        raise NotImplementedError


class _RequestHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "beamer-controller"
    handler: EventHandler  # set on the per-server subclass

    def do_GET(self) -> None:
        if self.path in (f"{API_PREFIX}/status", "/status"):
            self._reply(200, self.handler.status())
        elif self.path in (f"{API_PREFIX}/health", "/health"):
            self._reply(200, {"ok": True})
        else:
            self._reply(404, {"ok": False, "error": f"no such resource {self.path}"})

    def do_POST(self) -> None:
        if self.path not in (f"{API_PREFIX}/events", "/events"):
            self._reply(404, {"ok": False, "error": f"no such resource {self.path}"})
            return
        length_text = self.headers.get("Content-Length")
        if length_text is None or not length_text.isdigit():
            self._reply(411, {"ok": False, "error": "Content-Length required"})
            return
        length = int(length_text)
        if length > MAX_BODY_BYTES:
            self._reply(413, {"ok": False, "error": f"body larger than {MAX_BODY_BYTES} bytes"})
            self.close_connection = True
            return
        body = self.rfile.read(length)
        try:
            raw = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            self._reply(400, {"ok": False, "error": f"body is not JSON: {error}"})
            return
        try:
            result = self.handler.handle_event(raw)
        except EventError as error:
            self._reply(400, {"ok": False, "error": str(error)})
            return
        except Exception as error:  # the daemon must outlive a bug in one request
            self._reply(500, {"ok": False, "error": f"internal error: {error!r}"})
            return
        self._reply(200, {"ok": True, **result})

    def _reply(self, status: int, payload: Mapping[str, Any]) -> None:
        data = json.dumps(payload, sort_keys=True).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def address_string(self) -> str:
        # Unix-socket peers have no (host, port).
        client = self.client_address
        return str(client[0]) if isinstance(client, tuple) and client else "unix"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the controller logs what matters itself."""


class _TcpRequestHandler(_RequestHandler):
    # Replies are written as headers then body; without this, Nagle's algorithm and the
    # peer's delayed ACK hold the body back ~40 ms on every keep-alive request.
    disable_nagle_algorithm = True


class _TcpServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class EventServer:
    """Serves the event API on a TCP address and/or a Unix socket until :meth:`stop`."""

    def __init__(
        self,
        handler: EventHandler,
        tcp_addr: str | None = "127.0.0.1:0",
        unix_path: str | Path | None = None,
    ) -> None:
        tcp_class = type("BoundTcpHandler", (_TcpRequestHandler,), {"handler": handler})
        unix_class = type("BoundUnixHandler", (_RequestHandler,), {"handler": handler})
        self._servers: list[socketserver.BaseServer] = []
        self._threads: list[threading.Thread] = []
        self.unix_path = Path(unix_path) if unix_path is not None else None
        self.tcp_address: tuple[str, int] | None = None
        try:
            if tcp_addr is not None:
                host, port = parse_hostport(tcp_addr)
                tcp = _TcpServer((host, port), tcp_class)
                self.tcp_address = (host, tcp.server_address[1])
                self._servers.append(tcp)
            if self.unix_path is not None:
                _remove_stale_socket(self.unix_path)
                self._servers.append(_UnixServer(str(self.unix_path), unix_class))
        except OSError as error:
            self.stop()
            where = unix_path if unix_path is not None and tcp_addr is None else tcp_addr
            raise UserError(f"events API: cannot listen on {where}: {error.strerror}") from None

    def start(self) -> None:
        for server in self._servers:
            thread = threading.Thread(target=server.serve_forever, name="events", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        for server in self._servers:
            if self._threads:
                server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._servers.clear()
        self._threads.clear()
        if self.unix_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.unix_path.unlink()

    @property
    def url(self) -> str:
        assert self.tcp_address is not None
        return f"{self.tcp_address[0]}:{self.tcp_address[1]}"


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
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise UserError(f"{text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


# --- client -----------------------------------------------------------------------------


class EventRejected(UserError):
    """The controller refused an event (HTTP 400); the message says why."""


class ControllerUnreachable(UserError):
    """No controller answers at the address or socket."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


class EventClient:
    """Sends events to a controller over HTTP: ``EventClient("127.0.0.1:9100")`` or
    ``EventClient("/run/beamer.sock")`` (a path, i.e. anything containing ``/``).

    One keep-alive connection is reused; each call returns once the controller
    has applied the event and the switches have acknowledged the writes.
    """

    def __init__(self, address: str | Path, timeout_s: float = 30.0) -> None:
        self.address = str(address)
        self.timeout_s = timeout_s
        self._connection: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()

    def _connect(self) -> http.client.HTTPConnection:
        if "/" in self.address or self.address.endswith(".sock"):
            return _UnixConnection(self.address, self.timeout_s)
        host, port = parse_hostport(self.address)
        return http.client.HTTPConnection(host, port, timeout=self.timeout_s)

    def _request(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        with self._lock:
            for attempt in (0, 1):
                if self._connection is None:
                    self._connection = self._connect()
                try:
                    self._connection.request(method, path, body=data, headers=headers)
                    response = self._connection.getresponse()
                    payload = response.read()
                    break
                except (ConnectionError, http.client.HTTPException, OSError) as error:
                    self._connection.close()
                    self._connection = None
                    # A kept-alive connection the server closed: retry once on a new one.
                    if attempt == 1 or not isinstance(
                        error, ConnectionError | http.client.RemoteDisconnected
                    ):
                        raise ControllerUnreachable(
                            f"controller at {self.address}: {error}"
                        ) from None
        try:
            result: dict[str, Any] = json.loads(payload)
        except json.JSONDecodeError:
            raise ControllerUnreachable(
                f"controller at {self.address} answered HTTP {response.status} without JSON"
            ) from None
        if response.status == 400:
            raise EventRejected(f"controller refused the event: {result.get('error')}")
        if response.status != 200:
            raise ControllerUnreachable(
                f"controller at {self.address}: HTTP {response.status}: {result.get('error')}"
            )
        return result

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

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


def default_socket_path() -> str:
    """Where ``beamer controller`` puts its Unix socket unless told otherwise."""
    runtime = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return str(Path(runtime) / "beamer-controller.sock")
