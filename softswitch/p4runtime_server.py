"""The embedded target's P4Runtime server; the implementation lives in ``softswitch.p4rt``."""

from __future__ import annotations

from softswitch.p4rt.server import DEFAULT_GRPC_ADDR, P4RuntimeServer
from softswitch.p4rt.service import P4RUNTIME_API_VERSION

__all__ = ["DEFAULT_GRPC_ADDR", "P4RUNTIME_API_VERSION", "P4RuntimeServer"]
