"""HOST:PORT and decimal numbers on command lines and in files: ASCII digits only."""

from __future__ import annotations

import pytest

from control.addresses import checked_hostport, endpoint_keys, split_hostport
from control.errors import UserError
from control.events import parse_hostport
from control.p4runtime_client import parse_election_id
from sim.executors import _check_reachable


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9559", ("127.0.0.1", 9559)),
        ("[::1]:50051", ("::1", 50051)),
        ("localhost:65535", ("localhost", 65535)),
        ("127.0.0.1:0", None),
        ("127.0.0.1:65536", None),
        ("127.0.0.1:99999", None),
        ("127.0.0.1:²", None),  # str.isdigit() says yes, int() says no
        ("127.0.0.1:٩١٠٠", None),  # Arabic-Indic digits int() reads as 9100
        ("127.0.0.1:+80", None),
        ("127.0.0.1: 80", None),
        ("127.0.0.1:0000080", None),
        (":80", None),
        ("127.0.0.1", None),
        ("[fe80::1%eth0]:80", ("fe80::1%eth0", 80)),
        ("[]:80", None),  # brackets around nothing
        ("[[:80", None),
        ("[::1:80", None),
        ("::1]:80", None),
        ("[localhost]:80", None),  # brackets hold an IPv6 address only
        ("::1:80", None),  # an IPv6 host without brackets: where does it end?
    ],
)
def test_split_hostport_takes_ascii_ports_in_range(
    text: str, expected: tuple[str, int] | None
) -> None:
    assert split_hostport(text) == expected


def test_a_listener_may_ask_for_any_port_and_refusals_are_user_errors() -> None:
    assert parse_hostport("127.0.0.1:0") == ("127.0.0.1", 0)
    with pytest.raises(UserError, match="is not HOST:PORT"):
        parse_hostport("127.0.0.1:²")
    with pytest.raises(UserError, match=r"--ray-address: '127\.0\.0\.1:99999' is not HOST:PORT"):
        _check_reachable("127.0.0.1:99999")
    with pytest.raises(ValueError, match="is not an integer or HIGH,LOW"):
        parse_election_id("²")
    assert parse_election_id("1,2") == (1 << 64) | 2


def test_a_listener_that_is_not_a_ray_head_is_refused_quickly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ray itself would retry for minutes against a web server or a silent listener."""
    import socket
    import time

    import sim.executors

    monkeypatch.setattr(sim.executors, "RAY_PROBE_TIMEOUT_S", 1.0)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(UserError, match="does not speak gRPC within 1 s: not a Ray head"):
            _check_reachable(address)
        assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("scheme", "method", "what"),
    [
        ("", "/ray.rpc.NodeInfoGcsService/GetClusterId", "a Ray head"),
        ("ray://", "/ray.rpc.RayletDriver/ClusterInfo", "a Ray Client server"),
    ],
)
def test_a_grpc_server_that_is_not_ray_is_refused_in_one_line(
    scheme: str, method: str, what: str
) -> None:
    """Ray retried such a server for half a minute and logged twenty lines."""
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    server = grpc.server(ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        address = f"{scheme}127.0.0.1:{port}"
        with pytest.raises(UserError) as refused:
            _check_reachable(address)
        assert str(refused.value) == (
            f"--ray-address {address}: a gRPC server answers there, but it has no {method}: "
            f"not {what}"
        )
    finally:
        server.stop(grace=None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("127.0.0.1\n:19559", r"the host '127\.0\.0\.1\\n' holds a space or a control character"),
        ("127.0.0.1 :19559", r"the host '127\.0\.0\.1 ' holds a space"),
        ("a/b:19559", r"'a/b:19559' is not HOST:PORT"),
        ("x" * 64 + ".lab:19559", r"is not a host name \(label"),
        # The name codec drops a zero-width space: a second spelling of 'ab'.
        ("a\u200bb:19559", r"the host 'a\\u200bb' holds an invisible character U\+200B$"),
        ("a\xadb:19559", r"holds an invisible character U\+00AD$"),
        ("a\u3000b:19559", r"holds an invisible character U\+3000$"),
    ],
)
def test_a_host_no_connection_can_use_is_refused(text: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        checked_hostport(text)


def test_spellings_of_one_socket_have_a_key_in_common() -> None:
    def same(a: str, b: str) -> bool:
        first, second = split_hostport(a), split_hostport(b)
        assert first is not None and second is not None
        return bool(endpoint_keys(*first) & endpoint_keys(*second))

    assert same("127.0.0.1:9559", "localhost:9559")
    assert same("[::1]:9559", "LocalHost.:9559")
    assert same("[::ffff:127.0.0.1]:9559", "127.0.0.1:9559")
    assert same("[0:0::1]:9559", "[::1]:9559")
    assert same("Switch-1.Lab:9559", "switch-1.lab.:9559")
    assert not same("127.0.0.1:9559", "[::1]:9559")  # two sockets a server may hold apart
    assert not same("127.0.0.1:9559", "127.0.0.2:9559")
    assert not same("localhost:9559", "localhost:9560")
