"""Shifts whose amount a packet carries: v1model semantics, bounded cost.

A program may shift by a header field; a hostile packet then sets the amount to
2^32 - 1. The result is 0 (every bit shifted out), and the switch must not build
an integer of billions of bits to find that out.
"""

from __future__ import annotations

import resource
import struct

import pytest

from softswitch.frontend import compile_source
from softswitch.pipeline import Pipeline

PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header shift_t { bit<32> value; bit<32> amount; bit<8> left; bit<8> right; }
struct headers_t { shift_t s; }
struct meta_t { }
parser P(packet_in pkt, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(h.s); transition accept; }
}
control V(inout headers_t h, inout meta_t m) { apply { } }
control I(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    apply {
        h.s.left = (bit<8>)(h.s.value << h.s.amount);
        h.s.right = (bit<8>)(h.s.value >> h.s.amount);
        sm.egress_spec = 2;
    }
}
control E(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t h, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t h) { apply { pkt.emit(h.s); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


@pytest.fixture(scope="module")
def pipeline() -> Pipeline:
    return Pipeline(compile_source(PROGRAM, "shifts.p4"))


def _shifted(pipeline: Pipeline, value: int, amount: int) -> tuple[int, int]:
    [(_port, _priority, data)] = pipeline.process(1, struct.pack("!IIBB", value, amount, 0, 0))
    _value, _amount, left, right = struct.unpack("!IIBB", data[:10])
    return left, right


@pytest.mark.parametrize("amount", [0, 1, 7, 31])
def test_shifts_within_the_width_keep_v1model_semantics(pipeline: Pipeline, amount: int) -> None:
    value = 0x89ABCDEF
    left, right = _shifted(pipeline, value, amount)
    assert left == ((value << amount) & 0xFFFFFFFF) & 0xFF
    assert right == (value >> amount) & 0xFF


@pytest.mark.parametrize("amount", [32, 33, 1 << 20, 0xFFFFFFFF])
def test_a_packet_borne_amount_past_the_width_gives_zero_at_no_cost(
    pipeline: Pipeline, amount: int
) -> None:
    before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert _shifted(pipeline, 0xFFFFFFFF, amount) == (0, 0)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kib
    # Without the cap, 2^32 - 1 builds a 512 MiB integer; 64 MiB is far above the cost of a packet.
    assert grown_kib < 64 * 1024
