"""`beamer status` against something on the port that is not a Beamer controller, or
one that misbehaves: one line, exit 2, within the client's timeout, whatever it sends."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from control.cli import main
from control.events import ControllerUnreachable, EventClient

Answer = Callable[[socket.socket], None]


def _reply(status: str, body: bytes, headers: str = "") -> Answer:
    def answer(conn: socket.socket) -> None:
        head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{headers}"
        if "Content-Length" not in headers:
            head += f"Content-Length: {len(body)}\r\n"
        conn.sendall(head.encode() + b"\r\n" + body)

    return answer


def _trickle(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
    for _ in range(100):  # one byte now and then: each wait is short, the whole is not
        time.sleep(0.2)
        conn.sendall(b" ")


@pytest.fixture
def fake_server() -> Iterator[Callable[[Answer], str]]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    answers: list[Answer] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)
                if answers:
                    with contextlib.suppress(OSError):  # the client gave up
                        answers[0](conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def address(answer: Answer) -> str:
        answers[:] = [answer]
        return f"127.0.0.1:{listener.getsockname()[1]}"

    yield address
    stop.set()
    thread.join(5)
    listener.close()


NESTED = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (_reply("200 OK", b"[]"), "JSON that is not an object"),
        (_reply("200 OK", b"{}"), "the status has no field 'policy'"),
        (_reply("200 OK", NESTED), "without valid JSON (nested too deeply)"),
        (_reply("400 Bad Request", b'"x"'), "JSON that is not an object"),
        (_reply("200 OK", b"not json"), "without valid JSON"),
        (
            _reply(
                "200 OK",
                b'{"policy": "p", "queues": 8, "election_id": [1, 2], "events_applied": 0,'
                b' "switches": [], "order": [], "stages": []}',
            ),
            "the status has a field of the wrong kind",
        ),
        (
            _reply("200 OK", b"{}", "Content-Length: 100000000000\r\n"),
            "announced a 100,000,000,000-byte answer, above the limit",
        ),
    ],
)
def test_a_stranger_on_the_port_gets_one_line_and_exit_2(
    fake_server: Callable[[Answer], str],
    capsys: pytest.CaptureFixture[str],
    answer: Answer,
    message: str,
) -> None:
    address = fake_server(answer)
    assert main(["status", "--events-addr", address]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], captured.err
    assert captured.out == ""


def test_a_server_that_trickles_its_answer_is_given_up_on_in_time(
    fake_server: Callable[[Answer], str],
) -> None:
    address = fake_server(_trickle)
    started = time.monotonic()
    with (
        EventClient(address, timeout_s=1.0) as client,
        pytest.raises(ControllerUnreachable) as gave_up,
    ):
        client.status()
    assert time.monotonic() - started < 5
    assert "no whole answer within 1 s" in str(gave_up.value)


def test_the_watchdog_thread_ends_when_idle_and_on_close(
    fake_server: Callable[[Answer], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One thread per client watches its calls' deadlines; a client never closed must not
    leave it behind for good."""
    import control.events

    monkeypatch.setattr(control.events, "WATCHDOG_IDLE_S", 0.2)

    def watchdogs() -> int:
        return sum(t.name == "event-client-watchdog" for t in threading.enumerate())

    address = fake_server(_reply("200 OK", b'{"ok": true}'))
    before = watchdogs()
    client = EventClient(address, timeout_s=5.0)
    assert client.health() is True
    assert watchdogs() == before + 1
    time.sleep(0.6)
    assert watchdogs() == before  # idle: gone
    assert client.health() is True  # and back for the next call
    client.close()
    assert watchdogs() == before


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # http.client refused these with an InvalidURL traceback.
        (["--events-addr", "a b:80"], "--events-addr: 'a b:80': the host 'a b' holds a space"),
        (["--events-addr", "a\x01b:80"], "the host 'a\\x01b' holds a space or a control"),
        # The name lookup's IDNA codec refused this with a UnicodeError traceback.
        (["--events-addr", "a" * 64 + ".example:80"], "is not a host name (label"),
        # Empty, each was taken as not given: the default address was asked instead.
        (["--events-addr", ""], "--events-addr: an empty controller address"),
        (["--events-socket", ""], "--events-socket: an empty controller address"),
        # Two places to ask: one was dropped without a word.
        (
            ["--events-socket", "/run/c.sock", "--events-addr", "127.0.0.1:9100"],
            "argument --events-addr: not allowed with argument --events-socket",
        ),
    ],
)
def test_a_bad_address_is_one_line_before_any_connection(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    def connects(*args: object, **kwargs: object) -> None:
        pytest.fail("beamer status connected: the address was not refused before")

    monkeypatch.setattr(socket, "create_connection", connects)
    monkeypatch.setattr(socket.socket, "connect", connects)
    try:
        status = main(["status", *argv])
    except SystemExit as exited:  # an argument error
        status = exited.code
    assert status == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], captured.err


def test_a_name_lookup_that_fails_on_the_name_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lookup's codec raises UnicodeError (a ValueError), not an OSError."""

    def lookup(*args: object, **kwargs: object) -> None:
        raise UnicodeError("encoding with 'idna' codec failed (UnicodeError: label too long)")

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    with (
        EventClient("controller.example:9100", timeout_s=5.0) as client,
        pytest.raises(ControllerUnreachable, match=r"controller at controller\.example:9100: "),
    ):
        client.status()
