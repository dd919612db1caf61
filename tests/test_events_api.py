"""The event API of a running ``beamer controller`` under hostile and broken clients:
what a web page can send, malformed and oversized requests, slow clients, a thousand
half-open connections, and numbers that are not finite. Real HTTP clients, a real
controller process, an embedded switch. Also: an event whose journal line cannot be
written, and an API bound to more than loopback."""

from __future__ import annotations

import http.client
import json
import logging
import resource
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from controller_process import (
    ControllerProcess,
    controller_on_embedded_switch,
)

from control.events import (
    EventClient,
    EventHandler,
    EventServer,
    exposed_warning,
    raise_open_files_limit,
)
from control.journal import JournalWriteError

REQUEST_TIMEOUT_S = 3.0


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    directory = tmp_path_factory.mktemp("api")
    with controller_on_embedded_switch(directory, REQUEST_TIMEOUT_S) as process:
        yield process


def _plan(experiment_id: int, weight: Any = 1.0) -> dict[str, Any]:
    return {
        "experiment_id": experiment_id,
        "weight": weight,
        "stages": [
            {
                "stage_id": 0,
                "trials": [
                    {
                        "trial_id": 0,
                        "iterations": 3,
                        "flows": [{"src": "h1", "dst": "h2", "size_bytes": 10**6}],
                    }
                ],
            }
        ],
    }


def _release(experiment_id: int, weight: Any = 1.0) -> bytes:
    event = {"type": "experiment_released", "experiment": _plan(experiment_id, weight)}
    return json.dumps(event).encode()  # NaN and Infinity come out as JSON5-style literals


def _post(
    controller: ControllerProcess, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(controller.host, controller.port, timeout=10)
    try:
        connection.request(
            "POST",
            "/v1/events",
            body=body,
            headers={"Content-Type": "application/json"} if headers is None else headers,
        )
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _raw(controller: ControllerProcess, data: bytes, timeout_s: float = 10.0) -> tuple[int, bytes]:
    """Send bytes as they are; the reply's status and whole text (the server closes)."""
    with socket.create_connection((controller.host, controller.port), timeout=timeout_s) as sock:
        sock.sendall(data)
        return _read_reply(sock)


def _read_reply(sock: socket.socket) -> tuple[int, bytes]:
    received = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        lengths = [
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ]
        if lengths and len(body) >= lengths[0]:
            break
    assert received.startswith(b"HTTP/1.1 "), received[:100]
    return int(received.split()[1]), received


def _applied(controller: ControllerProcess) -> int:
    with EventClient(controller.address, timeout_s=10) as client:
        applied: int = client.status()["events_applied"]
    return applied


def _active(controller: ControllerProcess, experiment_id: int) -> bool:
    """Whether the controller knows the experiment (stage_released then says so)."""
    status, reply = _post(
        controller,
        json.dumps(
            {"type": "stage_released", "experiment_id": experiment_id, "stage_id": 9}
        ).encode(),
    )
    assert status == 400
    return b"is not active" not in reply


def test_requests_a_web_page_can_send_are_refused(controller: ControllerProcess) -> None:
    before = _applied(controller)
    # A form or fetch() without preflight: text/plain (the case), form encodings.
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
        status, reply = _post(controller, _release(10), {"Content-Type": content_type})
        assert status == 415, reply
    status, _ = _post(
        controller, _release(10), {"Content-Type": "application/json; charset=latin-1"}
    )
    assert status == 415
    own = f"http://127.0.0.1:{controller.port}"
    for origin in (
        "http://evil.example",
        "null",
        f"http://evil.example:{controller.port}",
        "http://[::1",  # not even a URL: refused like any foreign origin, not dropped
    ):
        headers = {"Content-Type": "application/json", "Origin": origin}
        status, reply = _post(controller, _release(10), headers)
        assert status == 403 and b"cross-origin" in reply
    # DNS rebinding: a name that resolves to 127.0.0.1 makes the page "same origin".
    status, _ = _raw(
        controller,
        b"GET /v1/status HTTP/1.1\r\nHost: rebind.evil.example:%d\r\n\r\n" % controller.port,
    )
    assert status == 403
    # A second, harmless Origin does not hide a foreign one.
    body = _release(10)
    status, _ = _raw(
        controller,
        b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Origin: http://evil.example\r\nOrigin: http://127.0.0.1:%d\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (controller.port, len(body), body),
    )
    assert status == 403
    connection = http.client.HTTPConnection(controller.host, controller.port, timeout=10)
    connection.request("GET", "/v1/status", headers={"Origin": "http://evil.example"})
    assert connection.getresponse().status == 403
    connection.close()
    assert _applied(controller) == before
    assert not _active(controller, 10)
    # The API's own origin, and clients that send no Origin (every non-browser client).
    status, _ = _post(controller, _release(10), {"Content-Type": "application/json", "Origin": own})
    assert status == 200
    assert _applied(controller) == before + 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"type": "experiment_finished", "experiment_id": ' + b"7" * 5000 + b"}", b"digits"),
        (
            b'{"type": "experiment_finished", "experiment_id": ' + b"7" * 4000 + b"}",
            b"experiment_id: an integer of 4000 digits is out of range",
        ),
        (b"[" * 100_000 + b"]" * 100_000, b"nested too deeply"),
        (b'{"type": "experiment_finished", "experiment_id": "\xff\xfe"}', b"not UTF-8"),
        (b'{"type": "experiment_finished", "experiment_id": NaN}', b"NaN is not a JSON number"),
        (b'{"type": "experiment_finished", "experiment_id": 1e999}', b"beyond the range"),
        (b"{" + b'"x": 1, ' * 200_000, b"body is not JSON"),
        (
            b'{"type": "stage_released", "experiment_id": 1, "stage_id": 0, "'
            + b"k" * 1_000_000
            + b'": 1}',
            b"unknown field",
        ),
        (b'{"type": "' + b"t" * 1_000_000 + b'"}', b"is not one of"),
        (
            b'{"type": "trial_started", "experiment_id": 1, "stage_id": 0, "trial_id": 0, '
            b'"trial_id": 1}',
            b"an object has the same key twice",
        ),
    ],
    ids=[
        "5000-digits",
        "4000-digits",
        "deep",
        "not-utf8",
        "nan",
        "1e999",
        "2MB",
        "key",
        "type",
        "duplicate-key",
    ],
)
def test_malformed_bodies_get_400_without_echo(
    controller: ControllerProcess, body: bytes, message: bytes
) -> None:
    before = _applied(controller)
    status, reply = _post(controller, body)
    assert status == 400, reply[:300]
    assert message in reply
    assert len(reply) < 1000  # never the body back
    assert _applied(controller) == before


def test_malformed_and_oversized_requests_get_4xx(controller: ControllerProcess) -> None:
    before = _applied(controller)
    cases = [
        (b"GARBAGE\r\n\r\n", 400),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),
        (b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX: " + b"a" * 20_000 + b"\r\n\r\n", 431),
        (b"PUT /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n", 405),
        (b"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 405),
        (b"GET /nope HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 404),
        (
            b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\n\r\n",
            411,
        ),
        (
            b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 12abc\r\n\r\n",
            400,
        ),
        # 60 MiB announced: refused from the headers alone, nothing of the body is read.
        (
            b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 62914560\r\n\r\n{",
            413,
        ),
        # A chunked body that grows past the cap is cut off as it arrives.
        (
            b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + (b"100000\r\n" + b" " * 0x100000 + b"\r\n") * 5,
            413,
        ),
    ]
    for data, expected in cases:
        try:
            status, reply = _raw(controller, data)
        except ConnectionResetError:
            pytest.fail(f"no reply to {data[:60]!r}")
        assert status == expected, (data[:60], reply[:300])
        assert len(reply) < 1000
    assert _applied(controller) == before


def test_slow_clients_are_answered_408_and_let_go(controller: ControllerProcess) -> None:
    partial = [
        # A body shorter than its Content-Length.
        b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b'Content-Length: 100\r\n\r\n{"type"',
        # A request line that never ends, and headers that never end.
        b"POST /v1/ev",
        b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n",
    ]
    sockets = [socket.create_connection((controller.host, controller.port)) for _ in partial]
    try:
        for sock, data in zip(sockets, partial, strict=True):
            sock.sendall(data)
            sock.settimeout(REQUEST_TIMEOUT_S + 20)
        with EventClient(controller.address, timeout_s=5) as client:
            assert client.health()  # not held up by them
        for sock in sockets:
            status, reply = _read_reply(sock)
            assert status == 408, reply
            assert sock.recv(10) == b""  # and the connection is closed
    finally:
        for sock in sockets:
            sock.close()


def test_health_and_events_answer_under_a_thousand_half_open_connections(
    controller: ControllerProcess,
) -> None:
    raise_open_files_limit(1200)  # the sockets below are this process's too
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 1200:
        pytest.skip("the hard limit on open files is below 1,200")
    threads_before = controller.threads()
    half_sent = (
        b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n{"
    )
    sockets: list[socket.socket] = []
    try:
        for _ in range(1000):
            sock = socket.create_connection((controller.host, controller.port), timeout=10)
            sock.sendall(half_sent)
            sockets.append(sock)
        with EventClient(controller.address, timeout_s=5) as client:
            assert client.health()
            assert client.status()["switches"][0]["state"] == "ready"
            assert client.experiment_released(_plan(11))["ok"]
        # No thread per connection: the server's threads do not grow with its clients.
        assert controller.threads() <= threads_before + 2
    finally:
        for sock in sockets:
            sock.close()


def test_numbers_must_be_finite_and_a_refused_event_changes_nothing(
    controller: ControllerProcess,
) -> None:
    before = _applied(controller)
    # NaN and Infinity are not JSON; the numbers JSON has must be in range.
    for weight in (float("nan"), float("inf"), float("-inf")):
        status, reply = _post(controller, _release(12, weight))
        assert status == 400 and b"is not a JSON number" in reply, reply
    for weight in (-1.0, 0, 1e300, 1e-300):
        status, reply = _post(controller, _release(12, weight))
        assert status == 400 and b"experiment.weight" in reply, reply
    status, reply = _post(controller, _release(12).replace(b'"weight": 1.0', b'"weight": 1e999'))
    assert status == 400
    assert _applied(controller) == before
    assert not _active(controller, 12)
    # Scheduling goes on for this and every other experiment (it stopped after a NaN).
    with EventClient(controller.address, timeout_s=10) as client:
        client.experiment_released(_plan(12, 2.5))
        client.stage_released(12, 0)
        client.trial_started(12, 0, 0)
        client.coflow_started(12, 0, 0, 0)
        status_now = client.status()
    assert status_now["events_applied"] == before + 4
    assert [12, 0, 0, 0] in [item["coflow"] for item in status_now["order"]]


def test_unix_socket_has_the_same_rules(controller: ControllerProcess) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(controller.socket_path))
        body = _release(13)
        sock.sendall(
            b"POST /v1/events HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Origin: http://evil.example\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        status, _ = _read_reply(sock)
    assert status == 403
    assert Path(controller.socket_path).stat().st_mode & 0o077 == 0
    with EventClient(str(controller.socket_path), timeout_s=10) as client:
        assert client.health()


def test_idle_keep_alive_connections_are_reused(controller: ControllerProcess) -> None:
    connection = http.client.HTTPConnection(controller.host, controller.port, timeout=10)
    try:
        for _ in range(3):
            connection.request("GET", "/v1/health")
            response = connection.getresponse()
            assert response.status == 200 and json.loads(response.read()) == {"ok": True}
    finally:
        connection.close()


class _FullDisk(EventHandler):
    """A controller whose journal is on a full disk."""

    def handle_event(self, raw: Any) -> dict[str, Any]:
        raise JournalWriteError(
            "events.jsonl: cannot write the event journal: No space left on device"
        )

    def status(self) -> dict[str, Any]:
        return {}


def test_an_event_the_journal_cannot_keep_gets_507_and_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A full disk is an operating condition: it used to be a 500 with a traceback in the
    log for each event."""
    server = EventServer(_FullDisk(), "127.0.0.1:0")
    server.start()
    try:
        assert server.tcp_address is not None
        connection = http.client.HTTPConnection(*server.tcp_address, timeout=10)
        with caplog.at_level(logging.WARNING, logger="control.events"):
            connection.request(
                "POST", "/v1/events", body=_release(1), headers={"Content-Type": "application/json"}
            )
            response = connection.getresponse()
            reply = json.loads(response.read())
        connection.close()
    finally:
        server.stop()
    reason = "events.jsonl: cannot write the event journal: No space left on device"
    assert (response.status, reply) == (
        507,
        {"ok": False, "error": f"event not applied: {reason}"},
    )
    assert [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records] == [
        ("WARNING", f"event not applied: {reason}", None)
    ]


@pytest.mark.parametrize("address", ["127.0.0.1:0", "localhost:0", "[::1]:0"])
def test_a_loopback_api_is_served_without_warning(
    address: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = EventServer(_FullDisk(), address)
    with caplog.at_level(logging.WARNING):
        server.start()
    try:
        assert caplog.records == []
        host, port = server.tcp_address or ("", 0)
        # An IPv6 host goes in brackets, as a URL takes it (it used to read ":::PORT").
        assert server.url == (f"[::1]:{port}" if host == "::1" else f"{host}:{port}")
        with EventClient(server.url, timeout_s=10) as client:
            assert client.health()
    finally:
        server.stop()


@pytest.mark.parametrize("address", ["0.0.0.0:0", "[::]:0"])
def test_an_api_on_every_network_is_served_with_a_warning(
    address: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Said as the P4Runtime server says it: the API has no authentication."""
    server = EventServer(_FullDisk(), address)
    with caplog.at_level(logging.WARNING):
        server.start()
    server.stop()
    host, port = server.tcp_address or ("", 0)
    url = f"[{host}]:{port}" if host == "::" else f"{host}:{port}"
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "WARNING",
            f"the events API on {url} serves every network this host is on: anyone who can "
            "reach it can send events and so reprogram the switches (the API has no "
            "authentication); bind 127.0.0.1 or use the Unix socket unless that is intended",
        )
    ]


def test_an_api_on_one_interface_is_said_to_be_reachable_from_other_hosts() -> None:
    assert exposed_warning("10.0.0.1:9100", "10.0.0.1").startswith(
        "the events API on 10.0.0.1:9100 is reachable from other hosts: anyone who can "
    )
