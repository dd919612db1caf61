"""The trial's gradient all-reduce on loopback (no root: untagged; see the root tests)."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import threading

import numpy as np
import pytest

from tuner.allreduce import (
    AllReduceError,
    GroupHost,
    WorkerGroup,
    plan_flows,
    receive_exactly,
    sync_model_bytes,
)
from tuner.contract import HostEndpoint, Pattern
from workloads.hp_tuning import sync_flows

TCP_INFO_BYTES_RECEIVED_OFFSET = 128
"""``tcpi_bytes_received`` (u64) in Linux's struct tcp_info (since 4.1)."""


def _bytes_received(sock: socket.socket) -> int:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    if len(info) < TCP_INFO_BYTES_RECEIVED_OFFSET + 8:
        pytest.skip("kernel's tcp_info has no tcpi_bytes_received")
    return int(struct.unpack_from("Q", info, TCP_INFO_BYTES_RECEIVED_OFFSET)[0])


def _hosts(count: int) -> list[GroupHost]:
    return [GroupHost(f"h{i}", HostEndpoint(None, f"127.0.0.{i + 1}")) for i in range(count)]


def _gradients(workers: int, parameters: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal(parameters) * 10.0 ** rng.integers(-3, 3)).astype(np.float32)
        for _ in range(workers)
    ]


def _ring_reference(gradients: list[np.ndarray], values: int) -> np.ndarray:
    """Chunk c summed along the ring from worker c: ((g[c] + g[c+1]) + ...) + g[c-1]."""
    w = len(gradients)
    padded = [np.concatenate([g, np.zeros(values - len(g), np.float32)]) for g in gradients]
    chunk = values // w
    total = np.empty(values, np.float32)
    for c in range(w):
        part = slice(c * chunk, (c + 1) * chunk)
        acc = padded[c][part].copy()
        for step in range(1, w):
            acc = padded[(c + step) % w][part] + acc
        total[part] = acc
    return total[: len(gradients[0])]


def _ps_reference(gradients: list[np.ndarray]) -> np.ndarray:
    total = gradients[0].copy()
    for gradient in gradients[1:]:
        total += gradient
    return total


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _loop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "allreduce-loop"]


@pytest.mark.parametrize(
    ("pattern", "workers"), [("ring", 2), ("ring", 3), ("ring", 4), ("ps", 1), ("ps", 3)]
)
@pytest.mark.parametrize("parameters", [1001, 300_001])
def test_sum_is_bit_equal_to_the_reference_on_every_worker_and_bytes_match_the_plan(
    pattern: Pattern, workers: int, parameters: int
) -> None:
    hosts = workers + (1 if pattern == "ps" else 0)
    fds = _open_fds()
    with WorkerGroup(_hosts(hosts), pattern, parameters) as group:
        plan = sync_flows(
            pattern, list(range(hosts)), sync_model_bytes(parameters, pattern, workers)
        )
        assert [(c.src, c.dst, c.size_bytes) for c in group.connections] == [
            (f.src_host, f.dst_host, f.size_bytes) for f in plan
        ]
        # Set-up is the handshake alone: nothing arrived before the first all-reduce.
        assert [_bytes_received(c.receiver) for c in group.connections] == [0] * len(plan)
        for round_ in range(2):
            gradients = _gradients(workers, parameters, seed=round_)
            before = [_bytes_received(c.receiver) for c in group.connections]
            results = group.allreduce(gradients)
            carried = [
                _bytes_received(c.receiver) - b
                for c, b in zip(group.connections, before, strict=True)
            ]
            assert carried == [flow.size_bytes for flow in plan]
            if pattern == "ring":
                reference = _ring_reference(gradients, group.values)
            else:
                reference = _ps_reference(gradients)
            assert len(results) == workers
            for result in results:
                assert result.dtype == np.float32
                assert result.tobytes() == reference.tobytes()
    assert _open_fds() <= fds
    assert not _loop_threads()


def test_ring_bytes_follow_two_w_minus_one_over_w_of_the_model() -> None:
    flows = plan_flows("ring", 3, 300_000)
    assert [f.size_bytes for f in flows] == [round(2 * 2 * 1_200_000 / 3)] * 3
    # 1001 values do not split in 3: padded to 1002, so every ring flow carries the same
    assert sync_model_bytes(1001, "ring", 3) == 4 * 1002
    assert sync_model_bytes(1001, "ps", 3) == 4 * 1001


def test_a_single_ring_worker_needs_no_network() -> None:
    with WorkerGroup(_hosts(1), "ring", 10) as group:
        assert group.connections == []
        gradient = _gradients(1, 10, 0)
        assert group.allreduce(gradient)[0].tobytes() == gradient[0].tobytes()


def test_a_peer_closing_early_is_a_clear_error_and_everything_is_closed() -> None:
    fds = _open_fds()
    group = WorkerGroup(_hosts(3), "ring", 30_000)
    group.connections[1].sender.shutdown(socket.SHUT_RDWR)
    with pytest.raises(AllReduceError, match=r"connection 1->2: .*(closed|failed)"):
        group.allreduce(_gradients(3, 30_000, 0))
    assert group.connections == []
    assert _open_fds() <= fds
    assert not _loop_threads()
    with pytest.raises(AllReduceError, match="closed"):
        group.allreduce(_gradients(3, 30_000, 0))


def test_bytes_out_of_step_are_detected() -> None:
    with WorkerGroup(_hosts(2), "ring", 1000) as group:
        group.connections[0].sender.sendall(b"\0" * 8)  # a stray message before the gradients
        with pytest.raises(AllReduceError, match="connection 0->1: 8 unexpected bytes"):
            group.allreduce(_gradients(2, 1000, 0))


def test_short_read_names_the_connection_and_the_counts() -> None:
    async def scenario() -> None:
        ours, theirs = socket.socketpair()
        with ours, theirs:
            ours.setblocking(False)
            theirs.sendall(b"x" * 10)
            theirs.close()
            await receive_exactly(ours, memoryview(bytearray(16)), "connection 0->1")

    with pytest.raises(AllReduceError, match=r"connection 0->1: peer closed .* after 10 of 16"):
        asyncio.run(scenario())


def test_gradients_of_the_wrong_shape_or_type_are_refused() -> None:
    with WorkerGroup(_hosts(2), "ring", 100) as group:
        with pytest.raises(ValueError, match="expected 2 gradients, got 1"):
            group.allreduce(_gradients(1, 100, 0))
        with pytest.raises(ValueError, match=r"worker 1: gradient of shape \(99,\)"):
            group.allreduce([np.zeros(100, np.float32), np.zeros(99, np.float32)])
        with pytest.raises(ValueError, match="dtype float64"):
            group.allreduce([np.zeros(100), np.zeros(100)])
        # still usable after refusing bad input
        assert group.allreduce(_gradients(2, 100, 1))[0].shape == (100,)


def test_a_host_address_not_on_this_machine_fails_set_up_without_leaking() -> None:
    fds = _open_fds()
    hosts = [*_hosts(1), GroupHost("ghost", HostEndpoint(None, "192.0.2.1"))]
    with pytest.raises(AllReduceError, match=r"connecting the workers failed: .*assign"):
        WorkerGroup(hosts, "ring", 10, timeout_s=5)
    assert _open_fds() <= fds
    assert not _loop_threads()
