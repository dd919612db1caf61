"""Shared pieces of the P4Runtime server tests: a raw gRPC client session and programs.

Not a test module itself; the server and shell tests import from it.
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc
from google.rpc import status_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from softswitch.frontend import CompiledProgram, compile_source
from softswitch.p4rt.pacing import LoopShare


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


# ----------------------------------------------------------------------------- test program
# A small v1model program, compiled by the real frontend and run by the real Switch,
# with every table shape the server must handle: LPM, exact with a direct counter and a
# default-only action, ternary with a const default action, an indexed counter and a
# register. beamer.p4 itself is exercised by the p4runtime-shell tests.

TEST_P4 = """
#include <core.p4>
#include <v1model.p4>
header ethernet_t { bit<48> dst; bit<48> src; bit<16> etherType; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> tos; bit<16> len; bit<16> id; bit<16> frag;
    bit<8> ttl; bit<8> proto; bit<16> csum; bit<32> src; bit<32> dst;
}
struct headers { ethernet_t ethernet; ipv4_t ipv4; }
struct metadata { bit<3> class_id; }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) { 0x0800: ipv4; default: accept; }
    }
    state ipv4 { pkt.extract(hdr.ipv4); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    direct_counter(CounterType.packets_and_bytes) class_hits;
    counter(8, CounterType.packets_and_bytes) stage_bytes;
    register<bit<32>>(4) scratch;
    action set_egress(bit<9> port) { sm.egress_spec = port; }
    action drop() { mark_to_drop(sm); }
    action set_class(bit<3> class_id) { meta.class_id = class_id; }
    table ipv4_lpm {
        key = { hdr.ipv4.dst: lpm; }
        actions = { set_egress; drop; }
        size = LPM_SIZE;
        default_action = drop();
    }
    table classify {
        key = { hdr.ipv4.src: exact; hdr.ipv4.tos: exact; }
        actions = { set_class; @defaultonly NoAction; }
        size = 4;
        counters = class_hits;
        default_action = NoAction();
    }
    table acl {
        key = { hdr.ipv4.proto: ternary; }
        actions = { drop; NoAction; }
        size = 8;
        const default_action = NoAction();
    }
    apply {
        ipv4_lpm.apply();
        classify.apply();
        acl.apply();
        stage_bytes.count((bit<32>)meta.class_id);
        sm.priority = meta.class_id;
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.ethernet); pkt.emit(hdr.ipv4); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


@functools.cache
def program_under_test(lpm_size: int = 16) -> CompiledProgram:
    """The test program; ``lpm_size`` makes a different program with the same ids."""
    return compile_source(TEST_P4.replace("LPM_SIZE", str(lpm_size)), "p4rt_test.p4")


def _ids(program: CompiledProgram) -> dict[str, int]:
    info = program.p4info
    named = [*info.tables, *info.actions, *info.counters, *info.direct_counters, *info.registers]
    return {item.preamble.name: item.preamble.id for item in named}


_IDS = _ids(program_under_test())
LPM_TABLE = _IDS["I.ipv4_lpm"]
CLASS_TABLE = _IDS["I.classify"]
ACL_TABLE = _IDS["I.acl"]
SET_EGRESS = _IDS["I.set_egress"]
DROP = _IDS["I.drop"]
SET_CLASS = _IDS["I.set_class"]
NO_ACTION = _IDS["NoAction"]
STAGE_BYTES = _IDS["I.stage_bytes"]
CLASS_HITS = _IDS["I.class_hits"]
SCRATCH = _IDS["I.scratch"]


def unpaced() -> LoopShare:
    """A stream's loop share that never pauses it: for tests of what a server does with
    many stream messages (the outbox bounds), not of how fast it reads them."""
    return LoopShare(share=1.0, burst_s=float("inf"))
