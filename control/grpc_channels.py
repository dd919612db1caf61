"""Waiting for a gRPC channel to connect, and closing it cleanly when it does not."""

from __future__ import annotations

import time

import grpc


def wait_until_ready(channel: grpc.Channel, timeout_s: float) -> None:
    """Return once ``channel`` is connected; on a timeout (``grpc.FutureTimeoutError``)
    or an interruption, close it before raising.

    gRPC watches the state for the pending ready-future on a thread of its own, which
    dies with a traceback ('Cannot monitor channel state: Channel closed!') when the
    channel closes under it. Cancelled, the future unsubscribes, and the watcher stops at
    its next wake-up (every 0.2 s): the channel is closed then (at the latest after 2 s,
    should a gRPC release watch otherwise)."""
    ready = grpc.channel_ready_future(channel)
    try:
        ready.result(timeout=timeout_s)
    except BaseException:
        ready.cancel()
        state = getattr(channel, "_connectivity_state", None)  # grpc's own channel
        deadline = time.monotonic() + 2.0
        while getattr(state, "polling", False) and time.monotonic() < deadline:
            time.sleep(0.01)
        channel.close()
        raise
