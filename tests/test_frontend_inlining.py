"""Code the frontend inlines keeps P4 semantics: statement applies, early return and exit.

A statement ``t.apply();`` runs its table's code inline in the control, and
actions without ``return`` run inline in it; actions that return are called.
These tests pin what a program can observe in each case, on real frames.
"""

from __future__ import annotations

import pytest
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from softswitch.frontend import CompiledProgram, compile_source
from softswitch.pipeline import Pipeline
from softswitch.runtime import ActionCall, ExactMatch, TableEntry

SOURCE = """
#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dst; bit<48> src; bit<16> type; }
struct headers { ethernet_t eth; }
struct meta_t { bit<8> steps; }

parser P(packet_in pkt, out headers hdr, inout meta_t meta,
         inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.eth); transition accept; }
}
control VC(inout headers hdr, inout meta_t meta) { apply { } }
control I(inout headers hdr, inout meta_t meta, inout standard_metadata_t sm) {
    action forward(bit<9> port) { sm.egress_spec = port; meta.steps = meta.steps + 1; }
    action forward_and_stop(bit<9> port) {
        sm.egress_spec = port;
        exit;
    }
    action returns_early(bit<9> port) {
        sm.egress_spec = port;
        if (hdr.eth.src == 0) {
            return;
        }
        hdr.eth.src = 0;
    }
    table by_type {
        key = { hdr.eth.type: exact; }
        actions = { forward; forward_and_stop; returns_early; NoAction; }
        default_action = forward(9);
    }
    table again {
        key = { hdr.eth.dst: exact; }
        actions = { forward; NoAction; }
        default_action = NoAction();
    }
    apply {
        by_type.apply();
        again.apply();
        hdr.eth.type = 0x9000 | (bit<16>)meta.steps;
    }
}
control E(inout headers hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout meta_t meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.eth); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""

DST = "02:00:00:00:00:01"


@pytest.fixture(scope="module")
def switch() -> tuple[CompiledProgram, Pipeline]:
    program = compile_source(SOURCE, "inlining.p4")
    pipeline = Pipeline(program)
    table = program.table_ids
    action = program.action_ids
    for ether_type, name, port in (
        (0x0801, "I.forward_and_stop", 3),
        (0x0802, "I.returns_early", 4),
    ):
        pipeline.runtime.insert_entry(
            table["I.by_type"],
            TableEntry({1: ExactMatch(ether_type)}, ActionCall(action[name], (port,))),
        )
    pipeline.runtime.insert_entry(
        table["I.again"],
        TableEntry({1: ExactMatch(0x020000000001)}, ActionCall(action["I.forward"], (5,))),
    )
    return program, pipeline


def send(pipeline: Pipeline, ether_type: int, src: str) -> tuple[int, Ether]:
    frame = Ether(dst=DST, src=src, type=ether_type) / Raw(b"payload")
    [(port, _priority, data)] = pipeline.process(1, bytes(frame))
    return port, Ether(data)


def test_both_inlined_tables_run_in_order(switch: tuple[CompiledProgram, Pipeline]) -> None:
    _program, pipeline = switch
    port, out = send(pipeline, 0x0800, "02:00:00:00:00:09")
    # Default forward(9) then the second table's forward(5): two steps, last port wins.
    assert port == 5
    assert out.type == 0x9002
    assert bytes(out.payload) == b"payload"


def test_exit_in_an_inlined_action_leaves_the_whole_control(
    switch: tuple[CompiledProgram, Pipeline],
) -> None:
    _program, pipeline = switch
    port, out = send(pipeline, 0x0801, "02:00:00:00:00:09")
    assert port == 3  # the second table never ran
    assert out.type == 0x0801  # nor did the statement after it


def test_return_leaves_only_the_action(switch: tuple[CompiledProgram, Pipeline]) -> None:
    _program, pipeline = switch
    port, out = send(pipeline, 0x0802, "00:00:00:00:00:00")
    assert port == 5  # the control went on to the second table
    assert out.type == 0x9001
    port, out = send(pipeline, 0x0802, "02:00:00:00:00:09")
    assert out.src == "00:00:00:00:00:00"  # no early return: the action's last line ran
    assert port == 5
