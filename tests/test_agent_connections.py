"""Host agents' connections on loopback (root: the Beamer tag is an unknown IP option)."""

from __future__ import annotations

import asyncio
import os
import socket
import struct

import pytest

from bmv2_topos.agent import AgentError, Connection, HostAddress, HostAgents, beamer_option

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_NET_RAW for IP options)")

TCP_INFO_BYTES_RECEIVED_OFFSET = 128
"""``tcpi_bytes_received`` (u64) in Linux's struct tcp_info (since 4.1)."""


def _payload_bytes_received(sock: socket.socket) -> int:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    if len(info) < TCP_INFO_BYTES_RECEIVED_OFFSET + 8:
        pytest.skip("kernel's tcp_info has no tcpi_bytes_received")
    (received,) = struct.unpack_from("Q", info, TCP_INFO_BYTES_RECEIVED_OFFSET)
    return int(received)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _loopback_agents() -> HostAgents:
    hosts = {0: HostAddress(None, "127.0.0.1"), 1: HostAddress(None, "127.0.0.2")}
    return HostAgents(hosts, port=_free_port())


def test_connections_carry_no_data_before_the_first_coflow() -> None:
    """Set-up is the handshake alone: segments without payload, which the switch puts in
    the ACK class. Data before the coflow would wait in a data class behind others."""

    async def scenario() -> tuple[int, int]:
        agents = _loopback_agents()
        await agents.start()
        try:
            connection = await agents.connect(0, 1, beamer_option(1, 0, 0))
            await asyncio.sleep(0.05)  # anything sent would have arrived by now
            before = _payload_bytes_received(connection.receiver)
            await agents.transfer(connection, 0, 100_000)
            after = _payload_bytes_received(connection.receiver)
            connection.close()
            return before, after
        finally:
            await agents.close()

    before, after = asyncio.run(scenario())
    assert before == 0
    assert after >= 100_000


def test_concurrent_connections_pair_each_sender_with_its_own_receiver() -> None:
    async def scenario() -> list[tuple[object, object]]:
        agents = _loopback_agents()
        await agents.start()
        try:
            option = beamer_option(1, 0, 0)
            connections = await asyncio.gather(
                *(agents.connect(i % 2, 1 - i % 2, option) for i in range(40))
            )
            pairs = [(c.sender.getsockname(), c.receiver.getpeername()) for c in connections]
            for connection in connections:
                connection.close()
            return pairs
        finally:
            await agents.close()

    for sender_address, receiver_peer in asyncio.run(scenario()):
        assert sender_address == receiver_peer


class _RecordingAgents(HostAgents):
    """Keeps every connection ``connect`` made, and fails or stalls the ones to host 2."""

    def __init__(self, hosts: dict[int, HostAddress], port: int, stall: bool) -> None:
        super().__init__(hosts, port=port)
        self.made: list[Connection] = []
        self.stall = stall

    async def connect(self, src: int, dst: int, option: bytes) -> Connection:
        if dst == 2:
            await asyncio.sleep(0.1)  # after the others have connected
            if self.stall:
                await asyncio.Event().wait()
            raise AgentError("host 127.0.0.3: cannot connect", ConnectionRefusedError(111, "no"))
        connection = await super().connect(src, dst, option)
        self.made.append(connection)
        return connection


def _three_hosts() -> dict[int, HostAddress]:
    return {i: HostAddress(None, f"127.0.0.{i + 1}") for i in range(3)}


def test_connections_made_are_closed_when_another_connect_fails() -> None:
    async def scenario() -> tuple[str, list[Connection]]:
        agents = _RecordingAgents(_three_hosts(), _free_port(), stall=False)
        await agents.start()
        try:
            pairs = [(0, 1), (1, 0), (0, 2), (1, 0)]
            with pytest.raises(AgentError) as refused:
                await agents.connect_all(pairs, beamer_option(1, 0, 0))
            return str(refused.value), agents.made
        finally:
            await agents.close()

    message, made = asyncio.run(scenario())
    assert message == "host 127.0.0.3: cannot connect: no"
    assert len(made) == 3
    for connection in made:
        assert connection.sender.fileno() == -1
        assert connection.receiver.fileno() == -1


def test_connections_made_are_closed_when_the_trial_is_cancelled() -> None:
    async def scenario() -> list[Connection]:
        agents = _RecordingAgents(_three_hosts(), _free_port(), stall=True)
        await agents.start()
        try:
            task = asyncio.ensure_future(
                agents.connect_all([(0, 1), (0, 2), (1, 0)], beamer_option(1, 0, 0))
            )
            await asyncio.sleep(0.3)
            assert len(agents.made) == 2 and not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return agents.made
        finally:
            await agents.close()

    for connection in asyncio.run(scenario()):
        assert connection.sender.fileno() == -1
        assert connection.receiver.fileno() == -1


def test_connect_all_keeps_the_order_of_its_pairs() -> None:
    async def scenario() -> list[tuple[object, object]]:
        agents = _loopback_agents()
        await agents.start()
        try:
            connections = await agents.connect_all([(0, 1), (1, 0), (0, 1)], beamer_option(1, 0, 0))
            ends = [(c.sender.getsockname()[0], c.receiver.getsockname()[0]) for c in connections]
            for connection in connections:
                connection.close()
            return ends
        finally:
            await agents.close()

    assert asyncio.run(scenario()) == [
        ("127.0.0.1", "127.0.0.2"),
        ("127.0.0.2", "127.0.0.1"),
        ("127.0.0.1", "127.0.0.2"),
    ]
