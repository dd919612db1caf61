"""Shared pieces of the P4Runtime server tests: a raw gRPC client session and programs.

Not a test module itself; the server and shell tests import from it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc
from google.rpc import status_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc


@dataclass
class StreamSession:
    """One StreamChannel: requests are queued in, responses collected by a thread."""

    stub: p4runtime_pb2_grpc.P4RuntimeStub
    outgoing: queue.Queue[p4runtime_pb2.StreamMessageRequest | None] = field(
        default_factory=queue.Queue
    )
    incoming: queue.Queue[p4runtime_pb2.StreamMessageResponse] = field(default_factory=queue.Queue)
    final_error: grpc.RpcError | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        def requests() -> Iterator[p4runtime_pb2.StreamMessageRequest]:
            while True:
                item = self.outgoing.get()
                if item is None:
                    return
                yield item

        self.call = self.stub.StreamChannel(requests())
        self.thread = threading.Thread(target=self._receive, daemon=True)
        self.thread.start()

    def _receive(self) -> None:
        try:
            for response in self.call:
                self.incoming.put(response)
        except grpc.RpcError as error:
            self.final_error = error
        finally:
            self.done.set()

    def arbitrate(
        self, device_id: int, election_id: tuple[int, int] | None, role: str = ""
    ) -> None:
        update = p4runtime_pb2.MasterArbitrationUpdate(device_id=device_id)
        if election_id is not None:
            update.election_id.high, update.election_id.low = election_id
        if role:
            update.role.name = role
        self.outgoing.put(p4runtime_pb2.StreamMessageRequest(arbitration=update))

    def next(self, timeout_s: float = 5.0) -> p4runtime_pb2.StreamMessageResponse:
        return self.incoming.get(timeout=timeout_s)

    def close(self) -> None:
        self.outgoing.put(None)
        self.done.wait(5.0)


def write_error_details(error: grpc.RpcError) -> list[p4runtime_pb2.Error]:
    """The per-update ``p4.v1.Error`` list carried by a failed batch's status details."""
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            errors = []
            for detail in status.details:
                one = p4runtime_pb2.Error()
                assert detail.Unpack(one)
                errors.append(one)
            return errors
    raise AssertionError("no grpc-status-details-bin trailer")


# ----------------------------------------------------------------------------- stand-in target
# Until the frontend executes beamer.p4, the server runs on a small program described by
# P4Info alone, with the real RuntimeState behind it.

from p4.config.v1 import p4info_pb2  # noqa: E402

from control.errors import UserError  # noqa: E402
from softswitch.runtime import RuntimeState  # noqa: E402

LPM_TABLE = 0x02000001
CLASS_TABLE = 0x02000002
ACL_TABLE = 0x02000003
SET_EGRESS = 0x01000001
DROP = 0x01000002
SET_CLASS = 0x01000003
NO_ACTION = 0x01000004
STAGE_BYTES = 0x12000001
CLASS_COUNTER = 0x13000001


def standin_p4info(lpm_size: int = 16) -> p4info_pb2.P4Info:
    info = p4info_pb2.P4Info()
    info.pkg_info.arch = "v1model"
    for action_id, name, params in (
        (SET_EGRESS, "set_egress", [(1, "port", 9)]),
        (DROP, "drop", []),
        (SET_CLASS, "set_class", [(1, "class_id", 3)]),
        (NO_ACTION, "NoAction", []),
    ):
        action = info.actions.add()
        action.preamble.id, action.preamble.name = action_id, name
        for param_id, param_name, width in params:
            action.params.add(id=param_id, name=param_name, bitwidth=width)

    lpm = info.tables.add()
    lpm.preamble.id, lpm.preamble.name = LPM_TABLE, "ingress.ipv4_lpm"
    lpm.match_fields.add(
        id=1, name="hdr.ipv4.dst", bitwidth=32, match_type=p4info_pb2.MatchField.LPM
    )
    lpm.action_refs.add(id=SET_EGRESS)
    lpm.action_refs.add(id=DROP)
    lpm.initial_default_action.action_id = DROP
    lpm.size = lpm_size

    classify = info.tables.add()
    classify.preamble.id, classify.preamble.name = CLASS_TABLE, "ingress.classify"
    classify.match_fields.add(
        id=1, name="tag.experiment", bitwidth=16, match_type=p4info_pb2.MatchField.EXACT
    )
    classify.match_fields.add(
        id=2, name="tag.stage", bitwidth=16, match_type=p4info_pb2.MatchField.EXACT
    )
    classify.action_refs.add(id=SET_CLASS)
    classify.action_refs.add(id=NO_ACTION, scope=p4info_pb2.ActionRef.DEFAULT_ONLY)
    classify.direct_resource_ids.append(CLASS_COUNTER)
    classify.size = 4

    acl = info.tables.add()
    acl.preamble.id, acl.preamble.name = ACL_TABLE, "ingress.acl"
    acl.match_fields.add(
        id=1, name="hdr.ipv4.proto", bitwidth=8, match_type=p4info_pb2.MatchField.TERNARY
    )
    acl.action_refs.add(id=DROP)
    acl.action_refs.add(id=NO_ACTION)
    acl.const_default_action_id = NO_ACTION
    acl.size = 8

    counter = info.counters.add()
    counter.preamble.id, counter.preamble.name = STAGE_BYTES, "ingress.stage_bytes"
    counter.spec.unit = p4info_pb2.CounterSpec.BOTH
    counter.size = 8

    direct = info.direct_counters.add()
    direct.preamble.id, direct.preamble.name = CLASS_COUNTER, "ingress.class_hits"
    direct.spec.unit = p4info_pb2.CounterSpec.BOTH
    direct.direct_table_id = CLASS_TABLE
    return info


class StandInProgram:
    """A program known by its P4Info only; its device config is the serialised P4Info."""

    MAGIC = b"standin-p4info:"

    def __init__(self, p4info: p4info_pb2.P4Info) -> None:
        self.p4info = p4info

    def device_config(self) -> bytes:
        return self.MAGIC + self.p4info.SerializeToString(deterministic=True)

    @classmethod
    def from_device_config(cls, data: bytes) -> StandInProgram:
        if not data.startswith(cls.MAGIC):
            raise UserError("device config: not a stand-in program")
        return cls(p4info_pb2.P4Info.FromString(data[len(cls.MAGIC) :]))

    def new_runtime_state(self) -> RuntimeState:
        return RuntimeState(self.p4info)


class StandInPipeline:
    def __init__(self, program: StandInProgram) -> None:
        self.program = program
        self.runtime = program.new_runtime_state()


class StandInSwitch:
    def __init__(self) -> None:
        self.pipeline: StandInPipeline | None = None
        self.swaps = 0

    def set_pipeline(self, pipeline: StandInPipeline) -> None:
        self.pipeline = pipeline
        self.swaps += 1
