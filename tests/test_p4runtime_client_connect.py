"""``P4RuntimeClient.connect`` that finds no server: its channel is closed only once gRPC
has stopped watching it, so no gRPC thread dies with a traceback."""

from __future__ import annotations

import socket
from typing import Any

import grpc
import pytest

from control.p4runtime_client import ConnectionLostError, P4RuntimeClient


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class _Watched:
    """What a channel's close and its ready future saw: whether gRPC was still polling
    the channel's state when it was closed, and whether the future was cancelled."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.polling_at_close: list[bool] = []
        self.futures: list[grpc.Future] = []
        make_channel, make_future = grpc.insecure_channel, grpc.channel_ready_future

        def channel(*args: Any, **kwargs: Any) -> grpc.Channel:
            made = make_channel(*args, **kwargs)
            close = made.close

            def recorded_close() -> None:
                self.polling_at_close.append(made._connectivity_state.polling)
                close()

            made.close = recorded_close
            return made

        def future(channel: grpc.Channel) -> grpc.Future:
            self.futures.append(make_future(channel))
            return self.futures[-1]

        monkeypatch.setattr(grpc, "insecure_channel", channel)
        monkeypatch.setattr(grpc, "channel_ready_future", future)


def test_a_connect_timeout_closes_the_channel_once_grpc_stopped_polling_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Closed under gRPC's poller, the channel made that thread print 'ValueError:
    Cannot monitor channel state: Channel closed!' (29 times in 3,000 connects)."""
    watched = _Watched(monkeypatch)
    client = P4RuntimeClient(f"127.0.0.1:{_closed_port()}", 0, connect_timeout_s=0.2)
    with pytest.raises(ConnectionLostError, match=r"no P4Runtime server at 127\.0\.0\.1:"):
        client.connect()
    assert watched.polling_at_close == [False]
    assert [future.cancelled() for future in watched.futures] == [True]


def test_a_connect_interrupted_while_waiting_closes_its_channel_the_same_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    watched = _Watched(monkeypatch)
    make_future = grpc.channel_ready_future

    def interrupted(channel: grpc.Channel) -> grpc.Future:
        future = make_future(channel)

        def result(timeout: float | None = None) -> None:
            raise KeyboardInterrupt

        future.result = result
        return future

    monkeypatch.setattr(grpc, "channel_ready_future", interrupted)
    client = P4RuntimeClient(f"127.0.0.1:{_closed_port()}", 0, connect_timeout_s=5)
    with pytest.raises(KeyboardInterrupt):
        client.connect()
    assert watched.polling_at_close == [False]
    assert [future.cancelled() for future in watched.futures] == [True]
