"""Tutorial-style programs and the feature program run on the pipeline (v1model semantics)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from processes import unblocked_within
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from softswitch.frontend import CompiledProgram, compile_file, compile_source
from softswitch.pipeline import DROP_PORT, Pipeline
from softswitch.runtime import ActionCall, ExactMatch, LpmMatch, TableEntry

PROGRAMS = Path(__file__).resolve().parent / "p4progs"


def load(name: str) -> tuple[CompiledProgram, Pipeline]:
    program = compile_file(PROGRAMS / name)
    return program, Pipeline(program)


def checksum_is_valid(ip: IP) -> bool:
    copy = IP(bytes(ip))
    stored = copy.chksum
    del copy.chksum
    return IP(bytes(copy)).chksum == stored


# ----------------------------------------------------------------------------- basic.p4


@pytest.fixture(scope="module")
def basic() -> tuple[CompiledProgram, Pipeline]:
    program, pipeline = load("basic.p4")
    pipeline.runtime.insert_entry(
        program.table_ids["MyIngress.ipv4_lpm"],
        TableEntry(
            {1: LpmMatch(0x0A000200, 24)},
            ActionCall(program.action_ids["MyIngress.ipv4_forward"], (0x080000000222, 2)),
        ),
    )
    return program, pipeline


def test_basic_forwards_by_lpm_with_mac_rewrite_and_valid_checksum(
    basic: tuple[CompiledProgram, Pipeline],
) -> None:
    _program, pipeline = basic
    sent = (
        Ether(src="08:00:00:00:01:11", dst="08:00:00:00:02:00")
        / IP(src="10.0.1.1", dst="10.0.2.2", ttl=30)
        / TCP()
        / Raw(b"hello")
    )
    [(port, priority, data)] = pipeline.process(1, bytes(sent))
    out = Ether(data)
    assert (port, priority) == (2, 0)
    assert (out.src, out.dst) == ("08:00:00:00:02:00", "08:00:00:00:02:22")
    assert out[IP].ttl == 29
    assert checksum_is_valid(out[IP])
    assert bytes(out[TCP]) == bytes(sent[TCP])


def test_basic_drops_misses_and_non_ip(basic: tuple[CompiledProgram, Pipeline]) -> None:
    _program, pipeline = basic
    miss = Ether() / IP(dst="10.9.9.9") / TCP()
    assert pipeline.process(1, bytes(miss)) == []
    non_ip = bytes(Ether(type=0x88CC) / Raw(b"\0" * 50))
    assert pipeline.process(1, non_ip) == []


def test_ingress_returns_queued_and_egress_deparses(
    basic: tuple[CompiledProgram, Pipeline],
) -> None:
    _program, pipeline = basic
    sent = bytes(Ether() / IP(dst="10.0.2.9", ttl=5) / Raw(b"x" * 30))
    [queued] = pipeline.ingress(4, sent)
    assert (queued.egress_port, queued.priority, queued.length_bytes) == (2, 0, len(sent))
    assert queued.ingress_port == 4
    data = pipeline.egress(queued, enq_qdepth=3)
    assert data is not None and Ether(data)[IP].ttl == 4


# ----------------------------------------------------------------------------- tunnel.p4


@pytest.fixture(scope="module")
def tunnel() -> tuple[CompiledProgram, Pipeline]:
    program, pipeline = load("tunnel.p4")
    runtime = pipeline.runtime
    runtime.insert_entry(
        program.table_ids["MyIngress.tunnel_exact"],
        TableEntry(
            {1: ExactMatch(7)}, ActionCall(program.action_ids["MyIngress.tunnel_forward"], (5,))
        ),
    )
    runtime.insert_entry(
        program.table_ids["MyIngress.ipv4_lpm"],
        TableEntry(
            {1: LpmMatch(0x0A000000, 8)},
            ActionCall(program.action_ids["MyIngress.ipv4_forward"], (0x0A0A0A0A0A0A, 3)),
        ),
    )
    return program, pipeline


def tunnel_frame(dst_id: int, proto: int = 0x0800) -> bytes:
    inner = bytes(IP(src="10.0.0.1", dst="10.0.0.2", ttl=9) / Raw(b"inner"))
    return bytes(Ether(type=0x1212)) + struct.pack("!HH", proto, dst_id) + inner


def test_tunnel_switches_on_the_tunnel_id_and_leaves_the_inner_packet(
    tunnel: tuple[CompiledProgram, Pipeline],
) -> None:
    program, pipeline = tunnel
    sent = tunnel_frame(7)
    [(port, _prio, data)] = pipeline.process(1, sent)
    assert port == 5
    assert data == sent  # tunnel switching rewrites nothing
    counters = pipeline.runtime.read_counter(program.counter_ids["MyIngress.tunnel_counter"], 7)
    assert (counters[0].packet_count, counters[0].byte_count) == (1, len(sent))


def test_tunnel_unknown_id_dropped_and_plain_ipv4_routed(
    tunnel: tuple[CompiledProgram, Pipeline],
) -> None:
    _program, pipeline = tunnel
    assert pipeline.process(1, tunnel_frame(8)) == []
    plain = bytes(Ether() / IP(dst="10.1.2.3", ttl=3) / Raw(b"p"))
    [(port, _prio, data)] = pipeline.process(1, plain)
    assert port == 3
    assert Ether(data)[IP].ttl == 2 and checksum_is_valid(Ether(data)[IP])


def test_tunnel_with_non_ip_payload_is_still_switched(
    tunnel: tuple[CompiledProgram, Pipeline],
) -> None:
    _program, pipeline = tunnel
    sent = tunnel_frame(7, proto=0x86DD)
    assert pipeline.process(1, sent) == [(5, 0, sent)]


# ----------------------------------------------------------------------------- features.p4


def op_frame(opcode: int, a: int, b: int, flags: int = 0) -> bytes:
    return (
        bytes.fromhex("020202020202040404040404") + b"\x88\xb5"
        + struct.pack("!BBHHI", opcode, flags, a, b, 0) + b"tail"
    )  # fmt: skip


def op_fields(data: bytes) -> tuple[int, int, int, int, int]:
    opcode, flags, a, b, result = struct.unpack("!BBHHI", data[14:24])
    return opcode, flags, a, b, result


@pytest.fixture
def features() -> tuple[CompiledProgram, Pipeline]:
    return load("features.p4")


def test_ternary_const_entries_and_arithmetic(features: tuple[CompiledProgram, Pipeline]) -> None:
    _program, pipeline = features
    [(port, _prio, data)] = pipeline.process(6, op_frame(0x01, 0xFFF0, 0x0020))
    assert port == 7  # ingress_port ^ 1
    assert op_fields(data)[4] == 0x0010  # wraps at 16 bits
    [(_port, _prio, data)] = pipeline.process(6, op_frame(0x01, 0xFFF0, 0x0020, flags=1))
    assert op_fields(data)[4] == 0xFFFF  # saturating |+|
    assert data[6:12] == (1).to_bytes(6, "big")  # switch on action_run took the do_add arm
    assert data.endswith(b"tail")


def test_concat_slices_and_register_memory(features: tuple[CompiledProgram, Pipeline]) -> None:
    _program, pipeline = features
    [(_port, _prio, data)] = pipeline.process(0, op_frame(0x02, 0x1234, 0x5678))
    _op, _flags, a, b, result = op_fields(data)
    assert (a, b, result) == (0x1234, 0x3412, 0x12345678)
    # The register slot a[3:0] = 4 remembers the result; the next op in that slot reads it.
    [(_port, _prio, data)] = pipeline.process(0, op_frame(0x07, 0x0004, 0))
    assert int.from_bytes(data[6:12], "big") == 0x12345678


def test_hashes_match_their_definitions(features: tuple[CompiledProgram, Pipeline]) -> None:
    _program, pipeline = features
    a, b = 0xBEEF, 0x0102
    data_bytes = struct.pack("!HH", a, b)
    [(_p, _q, crc)] = pipeline.process(0, op_frame(0x11, a, b))
    assert op_fields(crc)[4] == zlib.crc32(data_bytes)
    csum = ~((a + b) % 0xFFFF) & 0xFFFF
    [(_p, _q, c16)] = pipeline.process(0, op_frame(0x12, a, b))
    assert op_fields(c16)[4] == 0x10000 + csum
    # 0x13 falls through the exact-looking entries to the 0x10 &&& 0xF0 entry.
    [(_p, _q, c16b)] = pipeline.process(0, op_frame(0x13, a, b))
    assert op_fields(c16b)[4] == csum


HASH_MAX_0 = """
#include <core.p4>
#include <v1model.p4>
header ipv4_t { bit<32> srcAddr; bit<32> dstAddr; bit<16> other; }
struct metadata { }
struct headers { ipv4_t ipv4; }
parser P(packet_in packet, out headers hdr, inout metadata meta,
         inout standard_metadata_t standard_metadata) {
    state start { packet.extract(hdr.ipv4); transition accept; }
}
control V(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t standard_metadata) {
    apply {
        hash(hdr.ipv4.srcAddr, HashAlgorithm.crc32, 32w7, { hdr.ipv4.dstAddr }, 32w0);
        hash(hdr.ipv4.other, HashAlgorithm.crc32, 16w3, { hdr.ipv4.dstAddr }, 32w1000);
        standard_metadata.egress_spec = 1;
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t standard_metadata) {
    apply { }
}
control C(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out packet, in headers hdr) { apply { packet.emit(hdr.ipv4); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def test_hash_with_max_0_writes_base() -> None:
    """v1model.p4: "If max=0, the value written to result will always be base" (BMv2
    writes 7 here); a max above 0 still gives base + hash mod max."""
    pipeline = Pipeline(compile_source(HASH_MAX_0, "hash.p4"))
    data = bytes.fromhex("12345678")
    [(_port, _prio, out)] = pipeline.process(0, bytes(4) + data + bytes(2))
    assert out[:4] == (7).to_bytes(4, "big")
    assert int.from_bytes(out[8:10], "big") == 3 + zlib.crc32(data) % 1000


def test_table_miss_hit_and_control_plane_entry(features: tuple[CompiledProgram, Pipeline]) -> None:
    program, pipeline = features
    [(_p, _q, data)] = pipeline.process(0, op_frame(0x30, 0x0009, 0))
    assert op_fields(data)[1] & 0x40 == 0  # marked_slots missed
    pipeline.runtime.insert_entry(
        program.table_ids["MyIngress.marked_slots"],
        TableEntry({1: ExactMatch(9)}, ActionCall(program.action_ids["NoAction"])),
    )
    [(_p, _q, data)] = pipeline.process(0, op_frame(0x30, 0x0009, 0))
    assert op_fields(data)[1] & 0x40 == 0x40


def test_exit_drop_setinvalid_and_parser_errors(features: tuple[CompiledProgram, Pipeline]) -> None:
    _program, pipeline = features
    assert pipeline.process(0, op_frame(0xFF, 1, 1)) == []  # mark_to_drop then exit
    [(_p, _q, stripped)] = pipeline.process(0, op_frame(0xEE, 1, 1))
    assert stripped == bytes.fromhex("020202020202040404040404") + b"\x08\x00tail"
    assert pipeline.process(0, op_frame(0x01, 1, 1, flags=0x80)) == []  # verify() failed
    assert pipeline.process(0, op_frame(0xF0, 1, 1)) == []  # lookahead<op_t>().opcode
    assert pipeline.process(0, op_frame(0x01, 1, 1)[:20]) == []  # truncated op header
    other = bytes.fromhex("020202020202040404040404") + b"\x08\x06" + b"\0" * 28
    assert pipeline.process(2, other) == [(3, 0, other)]  # no op header: forwarded unchanged


def test_drop_port_is_511() -> None:
    assert DROP_PORT == 511


def test_generated_source_is_exposed_for_debugging(
    features: tuple[CompiledProgram, Pipeline],
) -> None:
    _program, pipeline = features
    assert "def run_ingress(" in pipeline.generated_source


CHECKSUM_PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header ethernet_t { bit<48> dst; bit<48> src; bit<16> etherType; }
header odd_t { bit<3> a; bit<5> b; bit<13> c; bit<3> d; bit<16> sum16; bit<16> hashed; }
header opt_t { varbit<64> data; }
struct metadata { bit<7> m; }
struct headers { ethernet_t ethernet; odd_t odd; opt_t opt; }
parser P(packet_in packet, out headers hdr, inout metadata meta,
         inout standard_metadata_t sm) {
    state start {
        packet.extract(hdr.ethernet);
        meta.m = hdr.ethernet.src[6:0];
        transition select(hdr.ethernet.etherType) {
            0x1111: parse_odd;
            0x2222: parse_odd_and_opt;
            default: accept;
        }
    }
    state parse_odd { packet.extract(hdr.odd); transition accept; }
    state parse_odd_and_opt {
        packet.extract(hdr.odd);
        packet.extract(hdr.opt, (bit<32>)hdr.ethernet.dst[2:0] * 8);
        transition accept;
    }
}
control V(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply { sm.egress_spec = 1; }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers hdr, inout metadata meta) {
    apply {
        update_checksum(hdr.odd.isValid(),
            { hdr.odd.a, meta.m, hdr.odd.b, hdr.opt.data, hdr.odd.c, hdr.odd.d },
            hdr.odd.sum16, HashAlgorithm.csum16);
        hash(hdr.odd.hashed, HashAlgorithm.csum16, 16w0,
            { hdr.odd.a, meta.m, hdr.odd.b, hdr.opt.data, hdr.odd.c, hdr.odd.d }, 17w65536);
    }
}
control D(packet_out packet, in headers hdr) { apply { packet.emit(hdr); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def reference_csum16(bits: str) -> int:
    """RFC 1071 over a bit string, zero-padded to whole 16-bit words."""
    bits += "0" * (-len(bits) % 16)
    total = sum(int(bits[i : i + 16], 2) for i in range(0, len(bits), 16))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def test_csum16_over_odd_widths_metadata_varbit_and_invalid_headers() -> None:
    import random

    from softswitch.frontend import compile_source

    pipeline = Pipeline(compile_source(CHECKSUM_PROGRAM, "checksum.p4"))
    rng = random.Random(5)
    for case in range(400):
        with_opt = case % 2 == 1
        opt_bytes = rng.randrange(0, 8) if with_opt else 0
        dst = bytes(5) + bytes([rng.randrange(256) & 0xF8 | opt_bytes])
        src = rng.randbytes(6) if case % 7 else bytes(6)
        a, b, c, d = rng.randrange(8), rng.randrange(32), rng.randrange(8192), rng.randrange(8)
        if case % 11 == 0:
            a = b = c = d = 0
        odd = ((a << 21 | b << 16 | c << 3 | d) << 32).to_bytes(7, "big")
        option = rng.randbytes(opt_bytes) if case % 5 else bytes(opt_bytes)
        ether_type = b"\x22\x22" if with_opt else b"\x11\x11"
        [(_port, _prio, out)] = pipeline.process(0, dst + src + ether_type + odd + option + b"!")
        m = src[5] & 0x7F
        bits = f"{a:03b}{m:07b}{b:05b}"
        bits += "".join(f"{byte:08b}" for byte in option) if with_opt else ""
        bits += f"{c:013b}{d:03b}"
        expected = reference_csum16(bits)
        sum16, hashed = struct.unpack("!HH", out[17:21])
        assert (sum16, hashed) == (expected, expected), (case, bits)
        assert out.endswith(option + b"!")


CODEC_PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header wide_t {
    bit<3> a; bit<13> b; bit<128> address; bit<4> c; bit<20> flow; bit<48> mac;
    bit<1> d; bit<7> e; bit<64> cookie; bit<24> f;
}
struct metadata { }
struct headers { wide_t wide; }
parser P(packet_in packet, out headers hdr, inout metadata meta,
         inout standard_metadata_t sm) {
    state start { packet.extract(hdr.wide); transition accept; }
}
control V(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 2;
        if (hdr.wide.d == 1) {
            hdr.wide.address = hdr.wide.address + 1;
            hdr.wide.flow = hdr.wide.flow ^ 20w0xFFFFF;
        }
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out packet, in headers hdr) { apply { packet.emit(hdr.wide); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def test_header_codec_round_trips_odd_and_wide_fields() -> None:
    import random

    from softswitch.frontend import compile_source

    pipeline = Pipeline(compile_source(CODEC_PROGRAM, "codec.p4"))
    rng = random.Random(3)
    widths = [3, 13, 128, 4, 20, 48, 1, 7, 64, 24]
    total = sum(widths)
    assert total % 8 == 0
    for _ in range(300):
        data = rng.randbytes(total // 8) + rng.randbytes(rng.randrange(0, 5))
        value = int.from_bytes(data[: total // 8], "big")
        fields, shift = [], total
        for width in widths:
            shift -= width
            fields.append((value >> shift) & ((1 << width) - 1))
        if fields[6] == 1:
            fields[2] = (fields[2] + 1) % (1 << 128)
            fields[4] ^= 0xFFFFF
        expected = 0
        for width, field in zip(widths, fields, strict=True):
            expected = (expected << width) | field
        [(port, _prio, out)] = pipeline.process(0, data)
        assert port == 2
        assert out == expected.to_bytes(total // 8, "big") + data[total // 8 :]
    assert pipeline.process(0, bytes(total // 8 - 1)) == [(2, 0, bytes(total // 8 - 1))]


def test_packets_for_a_multicast_group_are_dropped_as_bmv2_drops_unknown_groups() -> None:
    from softswitch.frontend import compile_source

    source = CODEC_PROGRAM.replace("sm.egress_spec = 2;", "sm.mcast_grp = 1;")
    pipeline = Pipeline(compile_source(source, "mcast.p4"))
    assert pipeline.process(0, bytes(40)) == []
    assert pipeline.unknown_multicast_drops == 1


SPINNING_PARSER = """
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> spin; bit<8> timed_out; }
struct metadata { }
struct headers { h_t h; }
parser P(packet_in packet, out headers hdr, inout metadata meta,
         inout standard_metadata_t standard_metadata) {
    state start { packet.extract(hdr.h); transition spin; }
    state spin { transition select(hdr.h.spin) { 1: spin; default: accept; } }
}
control V(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t standard_metadata) {
    apply {
        if (standard_metadata.parser_error == error.ParserTimeout) { hdr.h.timed_out = 1; }
        standard_metadata.egress_spec = 1;
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t standard_metadata) {
    apply { }
}
control C(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out packet, in headers hdr) { apply { packet.emit(hdr.h); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def test_a_parser_that_loops_without_extracting_times_out() -> None:
    """A state that loops on itself would spin forever on its first packet; the parser
    stops with error.ParserTimeout, ingress sees it, and the next packet is parsed."""
    pipeline = Pipeline(compile_source(SPINNING_PARSER, "spin.p4"))
    with unblocked_within(20, "a parser loop without extract"):
        [(_port, _prio, spun)] = pipeline.process(0, bytes([1, 0]) + b"payload")
    assert spun == bytes([1, 1]) + b"payload"
    [(_port, _prio, plain)] = pipeline.process(0, bytes([2, 0]) + b"payload")
    assert plain == bytes([2, 0]) + b"payload"
