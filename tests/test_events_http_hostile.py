"""The event API's HTTP/1.1 handling under clients that push the protocol's edges:
pipelined requests, bodies framed two ways at once, ``Expect: 100-continue``,
duplicated headers, request lines that h11 quotes back, a socket path that cannot be
used, and a second Ctrl-C while the server stops. Real sockets, real replies."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from controller_process import (
    REPO,
    ControllerProcess,
    controller_on_embedded_switch,
)
from test_events import _Recorder
from test_events_api import REQUEST_TIMEOUT_S, _applied, _raw, _read_reply, _release

from control.errors import UserError
from control.events import EventServer, ServerLimits


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    directory = tmp_path_factory.mktemp("http")
    with controller_on_embedded_switch(directory, REQUEST_TIMEOUT_S) as process:
        yield process


class _Replies:
    """Reads the replies on one connection one at a time, as bytes (a pipelining client
    gets several in one read)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError(f"closed; unparsed: {self.buffer[:200]!r}")
        self.buffer += data

    def next(self) -> tuple[int, bytes, bytes]:
        """The next reply's status, head (through the blank line) and body."""
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        head += b"\r\n\r\n"
        status = int(head.split()[1])
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        while len(self.buffer) < length:
            self._fill()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, head, body

    def closed(self) -> bool:
        """Whether the server closed the connection with nothing more to read."""
        return not self.buffer and self.sock.recv(100) == b""


def _connect(controller: ControllerProcess) -> socket.socket:
    return socket.create_connection((controller.host, controller.port), timeout=10)


def _post_head(length: int | None, extra: bytes = b"", version: bytes = b"1.1") -> bytes:
    framing = b"" if length is None else b"Content-Length: %d\r\n" % length
    return (
        b"POST /v1/events HTTP/" + version + b"\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\n" + framing + extra + b"\r\n"
    )


def _chunked(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


def _no_tracebacks(controller: ControllerProcess) -> None:
    log = "".join(controller.stderr_lines)
    assert "Traceback" not in log and "AssertionError" not in log, log[-2000:]


# --- pipelining ---------------------------------------------------------------------------


def test_pipelined_requests_are_answered_in_order(controller: ControllerProcess) -> None:
    before = _applied(controller)
    body = _release(40)
    requests = (
        b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        + _post_head(len(body))
        + body
        + b"GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    )
    with _connect(controller) as sock:
        sock.sendall(requests)  # all three before reading any reply
        replies = _Replies(sock)
        status, _, reply = replies.next()
        assert (status, json.loads(reply)) == (200, {"ok": True})
        status, _, reply = replies.next()
        assert status == 200 and json.loads(reply)["ok"] is True, reply
        status, _, reply = replies.next()
        assert status == 200 and json.loads(reply)["events_applied"] == before + 1, reply
        # A pipelined request that arrives in two parts, the first with the previous one.
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /v1/hea")
        assert replies.next()[0] == 200
        sock.sendall(b"lth HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        status, _, reply = replies.next()
        assert (status, json.loads(reply)) == (200, {"ok": True})
        assert replies.closed()
    _no_tracebacks(controller)


# --- framing and the large-body slots -----------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [
        b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
        b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
    ],
    ids=["length-first", "chunked-first"],
)
def test_content_length_with_transfer_encoding_is_refused_and_closed(
    controller: ControllerProcess, extra: bytes
) -> None:
    before = _applied(controller)
    body = _release(41)  # an event the controller would apply
    with _connect(controller) as sock:
        sock.sendall(_post_head(None, extra) + _chunked(body))
        replies = _Replies(sock)
        status, head, reply = replies.next()
        assert status == 400, reply
        assert b"Connection: close" in head
        assert json.loads(reply)["error"] == (
            "a request may not have both Content-Length and Transfer-Encoding"
        )
        assert replies.closed()
    assert _applied(controller) == before


def test_transfer_encoding_in_http_1_0_is_refused(controller: ControllerProcess) -> None:
    before = _applied(controller)
    body = _release(42)
    status, reply = _raw(
        controller, _post_head(None, b"Transfer-Encoding: chunked\r\n", b"1.0") + _chunked(body)
    )
    assert status == 400 and b"not allowed in an HTTP/1.0 request" in reply, reply
    assert _applied(controller) == before


class _Gate(_Recorder):
    """Holds the event of experiment 1 until the gate opens (with the large-body slot it
    was read in)."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = threading.Event()
        self.gate = threading.Event()

    def handle_event(self, raw: Any) -> dict[str, Any]:
        if isinstance(raw, dict) and raw.get("experiment_id") == 1:
            self.holding.set()
            assert self.gate.wait(30)
        return super().handle_event(raw)


def _stage(experiment_id: int, pad: int = 0) -> bytes:
    event = {"type": "stage_released", "experiment_id": experiment_id, "stage_id": 0}
    return json.dumps(event).encode() + b" " * pad


def test_every_framing_is_counted_against_the_large_body_slots() -> None:
    """With the only slot held: a chunked body and a Content-Length above the small-body
    size wait for it (and get 503 at the request deadline); a small Content-Length does
    not; a small Content-Length beside a chunked body no longer slips past the count:
    it is refused before any of the body is read."""
    handler = _Gate()
    limits = ServerLimits(large_bodies=1, request_timeout_s=0.5)
    server = EventServer(handler, tcp_addr="127.0.0.1:0", limits=limits)
    server.start()
    assert server.tcp_address is not None
    sockets: list[socket.socket] = []

    def send(data: bytes) -> _Replies:
        sock = socket.create_connection(server.tcp_address or ("", 0), timeout=10)
        sockets.append(sock)
        sock.sendall(data)
        return _Replies(sock)

    try:
        holder = send(_post_head(None, b"Transfer-Encoding: chunked\r\n") + _chunked(_stage(1)))
        assert handler.holding.wait(10)
        both = send(
            _post_head(None, b"Content-Length: 10\r\nTransfer-Encoding: chunked\r\n")
            + _chunked(_stage(2))
        )
        chunked = send(_post_head(None, b"Transfer-Encoding: chunked\r\n") + _chunked(_stage(3)))
        large = _stage(4, pad=100_000)
        announced = send(_post_head(len(large)) + large)
        waiting = send(_post_head(None, b"Transfer-Encoding: chunked\r\nExpect: 100-continue\r\n"))
        small = _stage(5)
        status, _, reply = send(_post_head(len(small)) + small).next()
        assert status == 200, reply
        status, _, reply = both.next()
        assert status == 400 and b"both Content-Length and Transfer-Encoding" in reply
        for replies in (chunked, announced, waiting):
            status, _, reply = replies.next()  # no 100 Continue before: no slot
            assert (status, json.loads(reply)["error"]) == (503, "busy: too many large requests")
        handler.gate.set()
        assert holder.next()[0] == 200
        assert sorted(e.experiment_id for e in handler.events) == [1, 5]
    finally:
        handler.gate.set()
        for sock in sockets:
            sock.close()
        server.stop()


# --- Expect: 100-continue -----------------------------------------------------------------


def test_expect_100_continue_is_answered_before_the_body(controller: ControllerProcess) -> None:
    before = _applied(controller)
    body = _release(43)
    with _connect(controller) as sock:
        sock.sendall(_post_head(len(body), b"Expect: 100-continue\r\n"))
        replies = _Replies(sock)
        status, head, _ = replies.next()  # what curl waits a second for
        assert (status, head) == (100, b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(body)
        status, _, reply = replies.next()
        assert status == 200 and json.loads(reply)["ok"] is True, reply
        # The connection stays usable.
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert replies.next()[0] == 200
    assert _applied(controller) == before + 1


def test_expectations_that_cannot_be_met(controller: ControllerProcess) -> None:
    before = _applied(controller)
    # A request refused from its headers gets its refusal, not an invitation to send.
    head = (
        b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
        b"Expect: 100-continue\r\nContent-Length: 10\r\n\r\n"
    )
    with _connect(controller) as sock:
        sock.sendall(head)
        status, reply = _read_reply(sock)
    assert status == 415 and b" 100 " not in reply, reply
    # An expectation other than 100-continue: 417.
    status, reply = _raw(controller, _post_head(2, b"Expect: 100-continue, x-fast\r\n") + b"{}")
    assert status == 417, reply
    assert json.loads(reply.partition(b"\r\n\r\n")[2])["error"] == (
        "the only expectation supported is Expect: 100-continue"
    )
    # HTTP/1.0 has no 100 Continue: the expectation is ignored and the body read.
    body = _release(44)
    status, reply = _raw(
        controller, _post_head(len(body), b"Expect: 100-continue\r\n", b"1.0") + body
    )
    assert status == 200 and b" 100 " not in reply, reply
    assert _applied(controller) == before + 1


# --- headers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "types",
    [
        (b"text/plain", b"application/json"),
        (b"application/json", b"application/json"),
    ],
    ids=["foreign-then-json", "json-twice"],
)
def test_a_duplicated_content_type_is_refused(
    controller: ControllerProcess, types: tuple[bytes, bytes]
) -> None:
    before = _applied(controller)
    body = _release(45)
    status, reply = _raw(
        controller,
        b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + b"".join(b"Content-Type: %s\r\n" % value for value in types)
        + b"Content-Length: %d\r\n\r\n%s" % (len(body), body),
    )
    assert status == 400, reply
    assert json.loads(reply.partition(b"\r\n\r\n")[2])["error"] == (
        "more than one Content-Type header"
    )
    assert _applied(controller) == before


@pytest.mark.parametrize(
    ("request_bytes", "expected", "message"),
    [
        (b"GET /" + b"A" * 300 + b" HTTP/1.1 x\r\n\r\n", 400, b"illegal request line"),
        (
            b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"A" * 300 + b"\r\n\r\n",
            400,
            b"illegal header line",
        ),
        (
            b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX: \x00" + b"A" * 300 + b"\r\n\r\n",
            400,
            b"illegal header line",
        ),
        (
            b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: "
            + b"A" * 300
            + b"\r\n\r\n",
            501,
            b"Only Transfer-Encoding: chunked is supported",
        ),
        (b"GET /" + b"A" * 1000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 404, b"no such"),
        (b"A" * 1000 + b" /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 405, b"not allowed"),
    ],
    ids=["request-line", "header-line", "nul-in-value", "coding", "path", "method"],
)
def test_replies_to_malformed_requests_quote_little_of_them(
    controller: ControllerProcess, request_bytes: bytes, expected: int, message: bytes
) -> None:
    status, reply = _raw(controller, request_bytes)
    assert status == expected, reply[:300]
    assert message in reply
    assert b"A" * 40 not in reply, reply  # at most a short, clipped quote


# --- the Unix socket ----------------------------------------------------------------------


def test_a_socket_path_that_cannot_be_used_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "missing" / "c.sock"
    with pytest.raises(UserError) as info:
        EventServer(_Recorder(), tcp_addr="127.0.0.1:0", unix_path=missing)
    assert str(info.value) == f"events API: cannot listen on {missing}: No such file or directory"
    long = tmp_path / ("s" * 120)
    with pytest.raises(UserError) as info:
        EventServer(_Recorder(), tcp_addr="127.0.0.1:0", unix_path=long)
    assert str(info.value) == f"events API: cannot listen on {long}: AF_UNIX path too long"


_SECOND_CTRL_C = """
import signal, sys, threading
from pathlib import Path
# Ctrl-C as at a terminal, also where this test runs with SIGINT ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)
from control.events import EventClient, EventServer
sys.path.insert(0, "tests")
from test_events import _Recorder

path = Path(sys.argv[1])
server = None
running, interrupted = threading.Event(), threading.Event()

class Slow(_Recorder):
    def handle_event(self, raw):
        running.set()
        # Once stop() has the event loop down it waits for this worker: a second Ctrl-C.
        while server._loop is not None:
            interrupted.wait(0.01)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        interrupted.wait(10)
        return super().handle_event(raw)

def send():
    try:
        EventClient(str(path), timeout_s=10).stage_released(1, 0)
    except Exception:
        pass

server = EventServer(Slow(), tcp_addr=None, unix_path=path)
server.start()
threading.Thread(target=send, daemon=True).start()
running.wait(10)
try:
    server.stop()  # the first Ctrl-C's clean-up, waiting for the event being applied
except KeyboardInterrupt:
    print("interrupted")
finally:
    interrupted.set()
print("left behind" if path.exists() else "removed")
"""


def test_a_second_ctrl_c_while_stopping_leaves_no_socket_file(tmp_path: Path) -> None:
    path = tmp_path / "c.sock"
    result = subprocess.run(
        [sys.executable, "-c", _SECOND_CTRL_C, str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout.split() == ["interrupted", "removed"], result.stdout + result.stderr
    assert not path.exists()
