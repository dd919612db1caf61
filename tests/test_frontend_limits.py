"""Hostile programs: deep nesting and huge widths or sizes are one-line compile errors at
the construct, never a RecursionError, gigabytes of memory or a hang; programs up to
the limits still compile and load."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
from p4.v1 import p4runtime_pb2
from test_frontend_errors import VALID

from control.cli import main
from softswitch.frontend import CompiledProgram, CompileError, compile_source
from softswitch.frontend.limits import (
    MAX_BIT_WIDTH,
    MAX_EXTERN_CELLS,
    MAX_INCLUDES,
    MAX_LINE_CHARS,
    MAX_NESTING,
    MAX_PROGRAM_LINES,
    MAX_SOURCE_BYTES,
    MAX_TABLE_SIZE,
    MAX_TOKENS,
    MAX_TOTAL_EXTERN_CELLS,
    MAX_TYPE_FIELDS,
)
from softswitch.frontend.program import compile_file
from softswitch.p4rt.pipeline_config import PipelineConfigs
from softswitch.p4rt.status import P4RuntimeError
from softswitch.pipeline import Pipeline, PipelineError
from softswitch.switch import Switch

TTL_LINE = "hdr.ipv4.ttl = hdr.ipv4.ttl - 1;"


def with_statement(statement: str) -> str:
    assert VALID.count(TTL_LINE) == 1
    return VALID.replace(TTL_LINE, statement)


def chain(levels: int) -> str:
    """``(ttl - (ttl - (... ttl)))``: ``levels`` parenthesised operands."""
    expr = "hdr.ipv4.ttl"
    for _ in range(levels):
        expr = f"(hdr.ipv4.ttl - {expr})"
    return expr


HOSTILE = {
    "parentheses": with_statement("hdr.ipv4.ttl = " + "(" * 5000 + "8w1" + ")" * 5000 + ";"),
    "operators": with_statement(f"hdr.ipv4.ttl = {chain(3000)};"),
    "unary": with_statement("hdr.ipv4.ttl = " + "~" * 5000 + "hdr.ipv4.ttl;"),
    "casts": with_statement("hdr.ipv4.ttl = " + "(bit<8>)" * 3000 + "hdr.ipv4.ttl;"),
    "ifs": with_statement("if (true) { " * 3000 + "}" * 3000),
    "blocks": with_statement("{" * 5000 + "}" * 5000),
    "operator chain": with_statement("hdr.ipv4.ttl = " + " - ".join(["hdr.ipv4.ttl"] * 110) + ";"),
    "product chain": with_statement("hdr.ipv4.ttl = " + " * ".join(["hdr.ipv4.ttl"] * 110) + ";"),
    "shift chain": with_statement("hdr.ipv4.ttl = " + " << ".join(["hdr.ipv4.ttl"] * 110) + ";"),
    "concatenation chain": with_statement(
        "hdr.ipv4.ttl = (bit<8>)(" + " ++ ".join(["hdr.ipv4.ttl[0:0]"] * 110) + ");"
    ),
    "slice chain": with_statement("hdr.ipv4.ttl = hdr.ipv4.ttl" + "[7:0]" * 110 + ";"),
    "constant chain": "const bit<8> C = " + " + ".join(["8w1"] * 2000) + ";\n" + VALID,
    "type arguments": VALID.replace(
        "struct metadata { bit<8> scratch; }",
        "struct metadata { " + "T<" * 3000 + "bit<8>" + ">" * 3000 + " x; }",
    ),
}


@pytest.mark.parametrize("source", HOSTILE.values(), ids=list(HOSTILE))
def test_deep_nesting_is_a_compile_error_not_a_recursion_error(source: str) -> None:
    with pytest.raises(CompileError, match=f"nested more than {MAX_NESTING} levels") as caught:
        compile_source(source, "deep.p4")
    assert str(caught.value).startswith("deep.p4:")
    assert len(str(caught.value).splitlines()) == 1


HUGE = [
    ("bit<48> dstAddr;", "bit<99999999999> dstAddr;", "bit<99999999999>: widths above 2048"),
    ("bit<8> scratch;", "int<99999999999> scratch;", "int<99999999999>: widths above 2048"),
    ("bit<8> scratch;", "varbit<99999999999> scratch;", "varbit<99999999999>: widths above"),
    (TTL_LINE, "hdr.ipv4.ttl = (bit<8>)(99999999999w1);", "width 99999999999 is above"),
    (TTL_LINE, "hdr.ipv4.ttl = (bit<8>)(1 << 99999999999);", "more than 4096 bits"),
    (TTL_LINE, "hdr.ipv4.ttl = hdr.ipv4.ttl << -1;", "negative shift amount -1"),
    (
        "bit<8> scratch;",
        "bit<2048> a; bit<2048> b; bit<8> scratch;",
        "'++' gives bit<4096>",
    ),
    ("default_action = drop();", "default_action = drop(); size = 99999999999;", "table size"),
    (
        "action drop()",
        "counter(99999999999, CounterType.packets) c; action drop()",
        f"counter size 99999999999 is not between 1 and {MAX_EXTERN_CELLS}",
    ),
    (
        "action drop()",
        "register<bit<8>>(99999999999) r; action drop()",
        "register size 99999999999",
    ),
    (
        # Each within the per-array limit; together gigabytes of cells.
        "action drop()",
        " ".join(f"counter(1048576, CounterType.packets) c{i};" for i in range(4))
        + " register<bit<8>>(1) r; action drop()",
        f"hold {4 * 2**20 + 1} cells in all, more than {MAX_TOTAL_EXTERN_CELLS}",
    ),
]


@pytest.mark.parametrize(("old", "new", "message"), HUGE, ids=[h[2][:30] for h in HUGE])
def test_huge_widths_and_sizes_are_compile_errors(old: str, new: str, message: str) -> None:
    source = VALID.replace(old, new, 1)
    if "'++'" in message:
        source = source.replace(TTL_LINE, "meta.scratch = (meta.a ++ meta.b)[7:0];")
    with pytest.raises(CompileError) as caught:
        compile_source(source, "huge.p4")
    assert message in str(caught.value)


def nested_structs(levels: int) -> str:
    """``s{i}_t`` holds two ``s{i-1}_t``: 2**i fields from a few lines."""
    return "".join(
        f"struct s{i}_t {{ s{i - 1}_t a; s{i - 1}_t b; }}\n" for i in range(1, levels + 1)
    ).replace("s0_t", "bit<8>")


def test_structs_of_structs_are_refused_at_the_field_past_the_field_limit() -> None:
    """Without the limit s39_t compiles and the first packet takes 2**39 fields."""
    assert MAX_TYPE_FIELDS == 2**12
    source = VALID.replace(
        "struct metadata { bit<8> scratch; }",
        nested_structs(39) + "struct metadata { bit<8> scratch; s39_t big; }",
    )
    with pytest.raises(CompileError) as caught:
        compile_source(source, "nested.p4")
    line = source.splitlines().index("struct s13_t { s12_t a; s12_t b; }") + 1
    column = "struct s13_t { s12_t a; s12_t b; }".index(" b;") + 2
    assert str(caught.value) == (
        f"nested.p4:{line}:{column}: s13_t has more than 4,096 fields with those of the "
        "headers and structs in it (b makes 8,192)"
    )
    # A header counts its validity too.
    header = VALID.replace(
        "struct metadata { bit<8> scratch; }",
        "header big_t { " + " ".join(f"bit<8> f{i};" for i in range(MAX_TYPE_FIELDS)) + " }\n"
        "struct metadata { bit<8> scratch; }",
    )
    with pytest.raises(CompileError, match=r"big_t has more than 4,096 fields .*f4095 makes"):
        compile_source(header, "header.p4")


def test_macros_defined_from_macros_cannot_blow_a_line_up() -> None:
    defines = "#define A0 x\n" + "".join(f"#define A{i + 1} A{i} A{i}\n" for i in range(40))
    with pytest.raises(CompileError, match="macro expansion makes this line longer"):
        compile_source(defines + VALID, "macros.p4")


def test_includes_that_multiply_are_stopped_early(tmp_path: Path) -> None:
    """Nine levels of ten includes each: a billion lines from a few kilobytes."""
    (tmp_path / "inc0.p4").write_text("\n")
    for level in range(1, 10):
        text = f'#include "inc{level - 1}.p4"\n' * 10
        (tmp_path / f"inc{level}.p4").write_text(text)
    top = tmp_path / "top.p4"
    top.write_text('#include "inc9.p4"\n' + VALID)
    with pytest.raises(CompileError, match=f"more than {MAX_INCLUDES:,} #include directives"):
        compile_file(top)


def test_a_program_that_macros_multiply_is_stopped_at_the_program_limit() -> None:
    """Each line within the line limit; 6,000 of them make gigabytes."""
    defines = "#define A0 xx\n" + "".join(f"#define A{i} A{i - 1} A{i - 1}\n" for i in range(1, 19))
    with pytest.raises(CompileError, match=f"grows past {MAX_PROGRAM_LINES:,} lines or"):
        compile_source(defines + "A18\n" * 6000 + VALID, "macros.p4")


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        ("const bit<32> BIG = 0x" + "f" * 20000 + ";", "an integer literal wider than 4096 bits"),
        (
            "const bit<32> BIG = " + " * ".join(["(1 << 4000)"] * 20) + ";",
            "constant folding builds an integer wider than 4096 bits",
        ),
        ("const bit<32> BIG = 1" + "0" * 5000 + ";", "(5,001 characters)"),
        ('@name("' + "a" * (MAX_LINE_CHARS + 1) + '") const bit<32> BIG = 1;', "a line longer"),
    ],
    ids=["hex literal", "folded product", "decimal literal", "long line"],
)
def test_huge_constants_and_lines_are_compile_errors(declaration: str, message: str) -> None:
    with pytest.raises(CompileError) as caught:
        compile_source(declaration + "\n" + VALID, "big.p4")
    assert message in str(caught.value)
    assert len(str(caught.value)) < 300  # the input is not echoed whole


def test_continuation_lines_are_refused_at_the_line_that_crosses_the_line_limit() -> None:
    """Lines ending in '\\' join into one; its length is checked as each line joins, not
    once thousands more have been appended."""
    part = "x" * 100 + "\\"
    count = 3 * MAX_LINE_CHARS // len(part)
    source = VALID + (part + "\n") * count + "\n"
    with pytest.raises(CompileError, match="joined by '\\\\' continuations") as caught:
        compile_source(source, "joined.p4")
    first = VALID.count("\n") + 1
    crossing = first + MAX_LINE_CHARS // len(part)
    assert str(caught.value).startswith(f"joined.p4:{crossing}:1: a line longer than")


def test_a_program_of_too_many_tokens_is_refused_at_the_token_past_the_limit() -> None:
    """Tokens are counted as they are made: a 16 MB file of 1-character tokens would
    otherwise take gigabytes before its first error."""
    per_line = 1000
    source = ("@" * per_line + "\n") * (MAX_TOKENS // per_line + 100)
    with pytest.raises(CompileError) as caught:
        compile_source(source, "tokens.p4")
    line, column = MAX_TOKENS // per_line + 1, MAX_TOKENS % per_line + 1
    assert str(caught.value) == (
        f"tokens.p4:{line}:{column}: the program has more than {MAX_TOKENS:,} tokens"
    )


def test_a_source_file_above_the_size_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    source = tmp_path / "big.p4"
    with source.open("wb") as handle:
        handle.truncate(MAX_SOURCE_BYTES + 1)
    with pytest.raises(CompileError, match="above the limit of 16,777,216 bytes for a P4 program"):
        compile_file(source)


def test_a_chain_of_operators_is_refused_at_the_operator_past_the_limit() -> None:
    """``a - b - c`` nests its left operand one level per operator in the lowered code."""
    operands = ["hdr.ipv4.ttl"] * 110
    source = with_statement("hdr.ipv4.ttl = " + " - ".join(operands) + ";")
    with pytest.raises(CompileError, match=f"nested more than {MAX_NESTING} levels") as caught:
        compile_source(source, "chain.p4")
    assert caught.value.location is not None
    line = source.splitlines()[caught.value.location.line - 1]
    assert line[caught.value.location.column - 1] == "-"


def test_programs_at_the_limits_compile_and_load() -> None:
    sources = [
        with_statement(f"hdr.ipv4.ttl = {chain(MAX_NESTING // 2 - 1)};"),
        with_statement("hdr.ipv4.ttl = " + " - ".join(["hdr.ipv4.ttl"] * (MAX_NESTING - 1)) + ";"),
        with_statement("hdr.ipv4.ttl = " + " << ".join(["hdr.ipv4.ttl"] * (MAX_NESTING - 1)) + ";"),
        with_statement("hdr.ipv4.ttl = hdr.ipv4.ttl" + "[7:0]" * (MAX_NESTING - 3) + ";"),
        with_statement("if (hdr.ipv4.ttl > 1) { " * 30 + TTL_LINE + "}" * 30),
        VALID.replace("bit<8> scratch;", f"bit<{MAX_BIT_WIDTH}> scratch;").replace(
            TTL_LINE, "hdr.ipv4.ttl = hdr.ipv4.ttl << 99999999999;"
        ),
        VALID.replace(
            "default_action = drop();", f"size = {MAX_TABLE_SIZE}; default_action = drop();"
        ),
        VALID.replace(
            "struct metadata { bit<8> scratch; }",
            nested_structs(12) + "struct metadata { s12_t big; }",
        ),
    ]
    for source in sources:
        switch = Switch()
        try:
            switch.load_pipeline(compile_source(source, "limit.p4"))
        finally:
            switch.close()


def test_generated_code_that_cannot_load_is_a_one_line_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Should a frontend limit miss what Python's compiler refuses, loading the program
    is still a clear refusal: a UserError for the switch, INVALID_ARGUMENT for a client."""
    program = compile_source(VALID, "valid.p4")
    program.lowered.source = "x = " + "(" * 300 + "1" + ")" * 300 + "\n"
    with pytest.raises(PipelineError, match=r"^valid\.p4: the generated code cannot be loaded"):
        Pipeline(program)
    monkeypatch.setattr(CompiledProgram, "from_device_config", lambda _config: program)
    request = p4runtime_pb2.SetForwardingPipelineConfigRequest(
        device_id=0, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY
    )
    request.config.p4info.CopyFrom(program.p4info)
    request.config.p4_device_config = b"{}"
    switch = Switch()
    try:
        with pytest.raises(P4RuntimeError, match="generated code cannot be loaded") as caught:
            PipelineConfigs(switch).verify(request)
    finally:
        switch.close()
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_a_device_config_from_a_client_is_held_to_the_same_limits() -> None:
    """SetForwardingPipelineConfig hands a device config (with the source) to the frontend."""
    config = json.loads(compile_source(VALID, "valid.p4").device_config())
    deep = "hdr.ipv4.ttl = " + "(" * 5000 + "8w1" + ")" * 5000 + ";"
    lines = [line for line in config["source"] if TTL_LINE in line[2]]
    assert len(lines) == 1
    lines[0][2] = lines[0][2].replace(TTL_LINE, deep)
    with pytest.raises(CompileError, match="nested more than"):
        CompiledProgram.from_device_config(json.dumps(config).encode())


def test_beamer_compile_reports_one_line_and_exit_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, source in (
        ("deep.p4", HOSTILE["ifs"]),
        ("wide.p4", VALID.replace("bit<48> dstAddr;", "bit<99999999999> dstAddr;", 1)),
    ):
        path = tmp_path / name
        path.write_text(source)
        assert main(["compile", str(path), "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and str(path) in err
        assert "Traceback" not in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
