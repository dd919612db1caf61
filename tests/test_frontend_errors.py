"""Wrong programs are rejected with ``file:line:col: message`` at the right place.

Each case edits one spot of a small valid program. ``@@`` in the edit marks
where the error must be reported; it is removed before compiling and its
line and column become the expected location.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from softswitch.frontend import CompileError, compile_file, compile_source

VALID = """\
#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> totalLen;
    bit<16> identification; bit<3> flags; bit<13> fragOffset;
    bit<8> ttl; bit<8> protocol; bit<16> hdrChecksum;
    bit<32> srcAddr; bit<32> dstAddr;
}
struct metadata { bit<8> scratch; }
struct headers { ethernet_t ethernet; ipv4_t ipv4; }

parser MyParser(packet_in packet, out headers hdr, inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            0x0800: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers hdr, inout metadata meta) { apply { } }

control MyIngress(inout headers hdr, inout metadata meta,
                  inout standard_metadata_t standard_metadata) {
    action drop() { mark_to_drop(standard_metadata); }
    action ipv4_forward(bit<48> dstAddr, bit<9> port) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.dstAddr = dstAddr;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
    table ipv4_lpm {
        key = { hdr.ipv4.dstAddr: lpm; }
        actions = { ipv4_forward; drop; NoAction; }
        default_action = drop();
    }
    apply {
        if (hdr.ipv4.isValid()) {
            ipv4_lpm.apply();
        }
    }
}

control MyEgress(inout headers hdr, inout metadata meta,
                 inout standard_metadata_t standard_metadata) { apply { } }
control MyComputeChecksum(inout headers hdr, inout metadata meta) { apply { } }
control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
"""

# (case id, text to replace in VALID, replacement with @@ at the error, message fragment)
CASES = [
    (
        "undefined-name",
        "hdr.ipv4.ttl = hdr.ipv4.ttl - 1;",
        "hdr.ipv4.ttl = @@ttl_value - 1;",
        "undefined name ttl_value",
    ),
    (
        "unknown-field",
        "hdr.ipv4.ttl = hdr.ipv4.ttl - 1;",
        "hdr.ipv4.@@tll = 1;",
        "header ipv4_t has no field tll",
    ),
    (
        "assign-width-mismatch",
        "hdr.ipv4.ttl = hdr.ipv4.ttl - 1;",
        "hdr.ipv4.ttl = @@hdr.ipv4.totalLen;",
        "expected a value of type bit<8>, got bit<16>",
    ),
    (
        "operand-width-mismatch",
        "if (hdr.ipv4.isValid()) {",
        "if (hdr.ipv4.ttl @@== hdr.ipv4.totalLen) {",
        "operands have different types: bit<8> and bit<16>",
    ),
    (
        "unknown-parser-state",
        "0x0800: parse_ipv4;",
        "0x0800: @@parse_ipv6;",
        "unknown parser state parse_ipv6",
    ),
    (
        "no-start-state",
        "parser MyParser(packet_in packet, out headers hdr, inout metadata meta,\n"
        "                inout standard_metadata_t standard_metadata) {\n"
        "    state start {\n"
        "        packet.extract(hdr.ethernet);\n"
        "        transition select",
        "@@parser MyParser(packet_in packet, out headers hdr, inout metadata meta,\n"
        "                inout standard_metadata_t standard_metadata) {\n"
        "    state begin {\n"
        "        packet.extract(hdr.ethernet);\n"
        "        transition select",
        "parser MyParser has no 'start' state",
    ),
    (
        "unknown-match-kind",
        "key = { hdr.ipv4.dstAddr: lpm; }",
        "key = { @@hdr.ipv4.dstAddr: longest; }",
        "unknown match kind longest",
    ),
    (
        "undeclared-table-action",
        "actions = { ipv4_forward; drop; NoAction; }",
        "actions = { ipv4_forward; @@forward_v6; NoAction; }",
        "forward_v6 is not an action",
    ),
    (
        "action-argument-count",
        "ipv4_lpm.apply();",
        "@@ipv4_forward(1);",
        "action ipv4_forward takes 2 arguments, got 1",
    ),
    (
        "duplicate-declaration",
        "action drop() { mark_to_drop(standard_metadata); }",
        "action drop() { }\n    @@action drop() { }",
        "drop is declared twice",
    ),
    (
        "missing-semicolon",
        "hdr.ipv4.ttl = hdr.ipv4.ttl - 1;",
        "hdr.ipv4.ttl = hdr.ipv4.ttl - 1\n    @@}",
        "expected ';', found '}'",
    ),
    (
        "header-stack",
        "struct headers { ethernet_t ethernet; ipv4_t ipv4; }",
        "struct headers { ethernet_t@@[2] ethernet; ipv4_t ipv4; }",
        "header stacks are not supported by this target",
    ),
    (
        "assign-to-in-parameter",
        "packet.emit(hdr.ethernet);",
        "@@hdr.ethernet.etherType = 1;",
        "cannot assign to read-only hdr.ethernet.etherType",
    ),
    (
        "non-bool-condition",
        "if (hdr.ipv4.isValid()) {",
        "if (@@hdr.ipv4.ttl) {",
        "an if condition must be bool, not bit<8>",
    ),
    (
        "extract-non-header",
        "packet.extract(hdr.ipv4);",
        "packet.extract(@@meta);",
        "extract needs a header, not metadata",
    ),
    (
        "default-action-not-listed",
        "default_action = drop();",
        "default_action = @@ipv4_forward_v2();",
        "ipv4_forward_v2 is not an action",
    ),
    (
        "default-action-not-in-actions",
        "actions = { ipv4_forward; drop; NoAction; }\n        default_action = drop();",
        "actions = { ipv4_forward; NoAction; }\n        default_action = @@drop();",
        "default action drop is not in the actions of table ipv4_lpm",
    ),
    (
        "slice-out-of-range",
        "hdr.ipv4.ttl = hdr.ipv4.ttl - 1;",
        "hdr.ipv4.ttl = hdr.ipv4.ttl@@[8:1];",
        "slice [8:1] is out of range for bit<8>",
    ),
    (
        "signed-int",
        "struct metadata { bit<8> scratch; }",
        "struct metadata { @@int<8> scratch; }",
        "signed int<W> is not supported by this target",
    ),
    (
        "table-applied-twice",
        "ipv4_lpm.apply();",
        "ipv4_lpm.apply();\n            @@ipv4_lpm.apply();",
        "table ipv4_lpm is applied more than once",
    ),
    (
        "select-arity",
        "0x0800: parse_ipv4;",
        "@@(0x0800, 1): parse_ipv4;",
        "select case has 2 values for 1 keys",
    ),
    (
        "missing-include",
        "#include <v1model.p4>",
        "@@#include <v1modle.p4>",
        "cannot find include file v1modle.p4",
    ),
    (
        "unsupported-hash",
        "hdr.ipv4.ttl = hdr.ipv4.ttl - 1;",
        "hash(meta.scratch, @@HashAlgorithm.random, 8w0, { hdr.ipv4.ttl }, 9w256);",
        "HashAlgorithm.random is not supported",
    ),
    (
        "header-not-byte-aligned",
        "header ethernet_t {",
        "@@header odd_t { bit<3> x; }\nheader ethernet_t {",
        "header odd_t is 3 bits long",
    ),
    (
        # p4c: "drop: declaration not found"; a recursive action would never end.
        "recursive-action",
        "action drop() { mark_to_drop(standard_metadata); }",
        "action drop() { mark_to_drop(standard_metadata); @@drop(); }",
        "drop: declaration not found",
    ),
    (
        "action-declared-later",
        "action drop() { mark_to_drop(standard_metadata); }",
        "action drop() { mark_to_drop(standard_metadata); @@later(); }\n    action later() { }",
        "later: declaration not found",
    ),
    (
        "unterminated-comment",
        "         MyDeparser()) main;",
        "         MyDeparser()) main;\n// a /* in a line comment\n  @@/* never closed\n",
        "unterminated comment",
    ),
]


def expected_location(text: str) -> tuple[str, int, int]:
    index = text.index("@@")
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return text.replace("@@", "", 1), line, column


@pytest.mark.parametrize(
    ("old", "new", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_wrong_program_is_rejected_at_the_right_place(old: str, new: str, message: str) -> None:
    assert VALID.count(old) >= 1
    source, line, column = expected_location(VALID.replace(old, new, 1))
    with pytest.raises(CompileError) as caught:
        compile_source(source, "wrong.p4")
    error = caught.value
    assert message in error.message
    assert str(error).startswith(f"wrong.p4:{line}:{column}: "), str(error)


def test_the_valid_program_compiles() -> None:
    program = compile_source(VALID, "valid.p4")
    assert [t.preamble.name for t in program.p4info.tables] == ["MyIngress.ipv4_lpm"]


def test_cases_are_distinct() -> None:
    assert len({c[0] for c in CASES}) == len(CASES) >= 10
    assert len({c[3] for c in CASES}) == len(CASES)


def test_error_in_an_included_file_names_that_file(tmp_path: Path) -> None:
    (tmp_path / "defs.p4").write_text("header h_t {\n    bit<8> a\n}\n")
    main = tmp_path / "main.p4"
    main.write_text('#include <core.p4>\n#include "defs.p4"\n')
    with pytest.raises(CompileError) as caught:
        compile_file(main)
    assert str(caught.value).startswith(f"{tmp_path / 'defs.p4'}:3:1: expected ';'")


def test_missing_main_is_reported() -> None:
    source = VALID[: VALID.index("V1Switch(MyParser()")]
    with pytest.raises(CompileError, match="no 'main' package instance"):
        compile_source(source, "nomain.p4")


def test_compile_error_is_a_user_error() -> None:
    from control.errors import UserError

    assert issubclass(CompileError, UserError)


def test_mutated_programs_fail_only_with_compile_errors() -> None:
    """Token-level mutations of real programs: a CompileError or a working pipeline, no crash."""
    import random
    import re

    from softswitch.pipeline import Pipeline

    root = Path(__file__).resolve().parent
    sources = [
        (root.parent / "p4src" / "beamer.p4").read_text(),
        (root / "p4progs" / "features.p4").read_text(),
    ]
    rng = random.Random(7)
    outcomes = {"compiled": 0, "rejected": 0}
    for _ in range(60):
        tokens = re.findall(r"\w+|[^\w\s]|\s+", rng.choice(sources))
        for _ in range(rng.randint(1, 3)):
            index = rng.randrange(len(tokens))
            choice = rng.random()
            if choice < 0.4:
                del tokens[index]
            elif choice < 0.7:
                tokens.insert(index, rng.choice(tokens))
            else:
                tokens[index] = rng.choice(tokens)
        try:
            pipeline = Pipeline(compile_source("".join(tokens), "mutant.p4"))
        except CompileError:
            outcomes["rejected"] += 1
            continue
        pipeline.process(1, bytes(64))
        assert pipeline.internal_errors == 0
        outcomes["compiled"] += 1
    assert outcomes["rejected"] > 20 and outcomes["compiled"] > 2
