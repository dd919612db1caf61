"""The P4Runtime gRPC server of the embedded target, on a thread pool, loopback by default."""

from __future__ import annotations

import ipaddress
import logging
from concurrent import futures
from types import TracebackType

import grpc

from control.errors import UserError
from softswitch.p4rt.pipeline_config import PipelineHost
from softswitch.p4rt.service import MAX_STREAMS, P4RuntimeServicer, add_to_server

log = logging.getLogger(__name__)

DEFAULT_GRPC_ADDR = "127.0.0.1:9559"

# Large batches are the point of Write; 4 MiB (gRPC's default) holds only ~50k entries.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024

# Each open StreamChannel occupies a worker for its lifetime; keep room for unary RPCs.
WORKERS = MAX_STREAMS + 8

# RPCs accepted at once, running or waiting for a worker; one more is RESOURCE_EXHAUSTED
# at once rather than a wait without end.
MAX_CONCURRENT_RPCS = 4 * WORKERS


def serves_every_network(addr: str) -> bool:
    """Whether ``addr`` (HOST:PORT as gRPC takes it) binds every interface:
    ``0.0.0.0``, ``[::]`` (and ``::``, ``0``, ``*``) or no host at all."""
    if addr.startswith("unix:"):
        return False
    for scheme in ("ipv4:", "ipv6:", "dns:"):
        addr = addr.removeprefix(scheme)
    host = addr.rsplit(":", 1)[0] if ":" in addr else addr
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host in ("", "*", "0"):
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_unspecified
    except ValueError:
        return False  # a host name: it binds the addresses it resolves to


def every_network_warning(addr: str) -> str:
    return (
        f"the P4Runtime server on {addr} serves every network this host is on: "
        "anyone who can reach it can take and program the switch (P4Runtime has no "
        "authentication here); bind 127.0.0.1 or one interface's address unless that "
        "is intended"
    )


class P4RuntimeServer:
    """``P4RuntimeServer(switch, device_id, addr).start()``; ``stop()`` ends every stream.

    ``addr`` may use port 0 to bind a free port; :attr:`addr` then holds the real one.
    """

    def __init__(self, switch: PipelineHost, device_id: int, addr: str = DEFAULT_GRPC_ADDR) -> None:
        self.servicer = P4RuntimeServicer(switch, device_id)
        self.device_id = device_id
        self.addr = addr
        self._server: grpc.Server | None = None
        self._executor: futures.ThreadPoolExecutor | None = None

    def start(self) -> None:
        """Bind and serve; a UserError names an address that cannot be bound."""
        if self._server is not None:
            return
        executor = futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="p4rt")
        server = grpc.server(
            executor,
            maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS,
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
            ],
        )
        add_to_server(self.servicer, server)
        try:
            port = server.add_insecure_port(self.addr)
        except RuntimeError as error:
            server.stop(None)
            executor.shutdown(wait=False)
            raise UserError(f"cannot serve P4Runtime on {self.addr}: {error}") from None
        if port == 0:
            server.stop(None)
            executor.shutdown(wait=False)
            raise UserError(f"cannot serve P4Runtime on {self.addr}: address unavailable")
        host = self.addr.rsplit(":", 1)[0]
        self.addr = f"{host}:{port}"
        if serves_every_network(self.addr):
            log.warning("%s", every_network_warning(self.addr))
        server.start()
        self._server = server
        self._executor = executor

    def stop(self, grace_s: float | None = 1.0) -> None:
        """End every stream, then stop serving; waits for in-flight RPCs up to ``grace_s``."""
        server, self._server = self._server, None
        if server is None:
            return
        self.servicer.arbitrator.close_all()
        server.stop(grace_s).wait()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def __enter__(self) -> P4RuntimeServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
