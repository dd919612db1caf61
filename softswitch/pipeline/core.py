"""The :class:`Pipeline` object and the :class:`Queued` hand-off to the traffic manager."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from softswitch.runtime import RuntimeState

if TYPE_CHECKING:
    from softswitch.frontend import CompiledProgram

# v1model: egress_spec 511 drops the packet (BMv2's default drop port with 9-bit ports).
DROP_PORT = 511


@dataclass(slots=True)
class Queued:
    """A packet between ingress and egress.

    ``egress_port`` and ``priority`` (0..7, 7 highest) pick the queue,
    ``length_bytes`` is what the port's bit rate is charged; ``state`` is the
    pipeline's own per-packet state (headers, metadata, payload), opaque to
    the traffic manager.
    """

    egress_port: int
    priority: int
    length_bytes: int
    ingress_port: int
    state: Any


class Pipeline:
    """One loaded P4 program with its control-plane state."""

    def __init__(self, program: CompiledProgram) -> None:
        self.program = program
        self.runtime: RuntimeState = program.new_runtime_state()
        raise NotImplementedError("pipeline execution is being built")

    def ingress(self, ingress_port: int, packet: bytes) -> list[Queued]:
        """Parser, checksum verification and ingress control; [] when dropped."""
        raise NotImplementedError

    def egress(self, queued: Queued, enq_qdepth: int = 0) -> bytes | None:
        """Egress control, checksum update and deparser; None when dropped."""
        raise NotImplementedError
