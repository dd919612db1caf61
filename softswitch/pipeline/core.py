"""The :class:`Pipeline` object and the :class:`Queued` hand-off to the traffic manager."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from control.errors import UserError
from softswitch.frontend.lowered import DROP_PORT
from softswitch.pipeline import helpers
from softswitch.runtime import RuntimeState

if TYPE_CHECKING:
    from softswitch.frontend import CompiledProgram


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


class PipelineError(UserError):
    """The generated code of a compiled program cannot be loaded: a frontend limit
    missed something the Python compiler refuses (a target bug, but one a switch and a
    P4Runtime client see as a one-line refusal of the program, not a crash)."""


class Pipeline:
    """One loaded P4 program with its control-plane state.

    The program's generated Python is compiled once here; its table,
    counter and register globals are bound to ``self.runtime``'s objects,
    so control-plane writes are visible to the next packet.
    """

    def __init__(self, program: CompiledProgram) -> None:
        self.program = program
        self.runtime: RuntimeState = program.new_runtime_state()
        # Packets the generated code failed on (a target bug, never the packet's fault),
        # and the last such failure, for a bug report.
        self.internal_errors = 0
        self.unknown_multicast_drops = 0
        self.last_internal_error = ""
        lowered = program.lowered
        if lowered.errors.get("PacketTooShort") != helpers._PACKET_TOO_SHORT:
            raise ValueError("core.p4 error codes changed; update pipeline.helpers")
        namespace: dict[str, Any] = dict(helpers.HELPERS)
        for name, action_global in lowered.action_globals.items():
            namespace[action_global] = program.action_ids[name]
        for table in lowered.tables:
            namespace[table.pyname] = self.runtime.tables[program.table_ids[table.name]]
        for counter in lowered.counters:
            namespace[counter.pyname] = self.runtime.counters[program.counter_ids[counter.name]]
        for register in lowered.registers:
            namespace[register.pyname] = self.runtime.registers[program.register_ids[register.name]]
        try:
            code = compile(lowered.source, f"<p4 {program.name}>", "exec")
            exec(code, namespace)
        except Exception as error:
            raise PipelineError(
                f"{program.name}: the generated code cannot be loaded "
                f"({type(error).__name__}: {str(error)[:200]})"
            ) from None
        for control, actions in lowered.action_tables.items():
            namespace["A_" + control] = {
                program.action_ids[name]: namespace[fn] for name, fn in actions.items()
            }
        self._namespace = namespace
        self._new_headers: Callable[[], Any] = namespace[lowered.headers_class]
        self._new_metadata: Callable[[], Any] = namespace[lowered.metadata_class]
        self._new_standard: Callable[[], Any] = namespace["S_standard_metadata_t"]
        self._parser = namespace["run_parser"]
        self._verify = namespace["run_verify_checksum"]
        self._ingress = namespace["run_ingress"]
        self._egress = namespace["run_egress"]
        self._compute = namespace["run_compute_checksum"]
        self._deparser = namespace["run_deparser"]

    def _internal_error(self, error: Exception) -> None:
        self.internal_errors += 1
        self.last_internal_error = f"{type(error).__name__}: {error}"

    @property
    def generated_source(self) -> str:
        """The Python the program was lowered to (for debugging a P4 program)."""
        return self.program.lowered.source

    def ingress(self, ingress_port: int, packet: bytes) -> list[Queued]:
        """Parser, checksum verification and ingress control; [] when dropped."""
        sm = self._new_standard()
        sm.f_ingress_port = ingress_port
        sm.f_packet_length = len(packet)
        hdr = self._new_headers()
        meta = self._new_metadata()
        try:
            offset = self._parser(sm, packet, hdr, meta, sm)
            self._verify(sm, hdr, meta)
            self._ingress(sm, hdr, meta, sm)
        except Exception as error:
            self._internal_error(error)
            return []
        port = sm.f_egress_spec
        if port == DROP_PORT:
            return []
        if sm.f_mcast_grp:
            # No multicast groups can be configured on this target; BMv2 drops
            # packets sent to a group it does not know.
            self.unknown_multicast_drops += 1
            return []
        return [
            Queued(port, sm.f_priority, len(packet), ingress_port, (hdr, meta, sm, packet, offset))
        ]

    def egress(self, queued: Queued, enq_qdepth: int = 0) -> bytes | None:
        """Egress control, checksum update and deparser; None when dropped."""
        hdr, meta, sm, packet, offset = queued.state
        sm.f_egress_port = queued.egress_port
        if enq_qdepth:
            sm.f_enq_qdepth = sm.f_deq_qdepth = enq_qdepth & 0x7FFFF
        out: list[bytes] = []
        try:
            self._egress(sm, hdr, meta, sm)
            if sm.f_egress_spec == DROP_PORT:
                return None
            self._compute(sm, hdr, meta)
            self._deparser(sm, out, hdr)
        except Exception as error:
            self._internal_error(error)
            return None
        out.append(packet[offset:])
        return b"".join(out)

    def process(self, ingress_port: int, packet: bytes) -> list[tuple[int, int, bytes]]:
        """Ingress then egress with no queue in between: ``(port, priority, bytes)`` out."""
        result: list[tuple[int, int, bytes]] = []
        for queued in self.ingress(ingress_port, packet):
            data = self.egress(queued)
            if data is not None:
                result.append((queued.egress_port, queued.priority, data))
        return result
