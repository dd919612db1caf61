"""The P4Runtime gRPC server of the embedded target, on a thread pool, loopback by default."""

from __future__ import annotations

from concurrent import futures
from types import TracebackType

import grpc

from control.errors import UserError
from softswitch.p4rt.arbitration import MAX_STREAMS_PER_ROLE
from softswitch.p4rt.pipeline_config import PipelineHost
from softswitch.p4rt.service import P4RuntimeServicer, add_to_server

DEFAULT_GRPC_ADDR = "127.0.0.1:9559"

# Large batches are the point of Write; 4 MiB (gRPC's default) holds only ~50k entries.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024

# Each open StreamChannel occupies a worker for its lifetime; keep room for unary RPCs.
WORKERS = MAX_STREAMS_PER_ROLE + 8


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
