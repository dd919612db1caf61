"""Programs that used to crash the compiler, or compile and then fail to load, are one
line naming the place: untyped ``?:`` values, odd ``#include`` names, const entries the
table would refuse when the program loads, action calls in a parser."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_frontend_errors import VALID, expected_location
from test_frontend_limits import TTL_LINE

from control.cli import main
from softswitch.frontend import CompileError, compile_file, compile_source
from softswitch.pipeline import Pipeline

FRAME = (
    bytes.fromhex("0200000000010000000000010800")
    + bytes.fromhex("45000020000000001e0600000a0000010a000202")
    + bytes(12)
)


def refused_at(source: str, message: str) -> None:
    """``source`` (``@@`` where the error is) is refused there with ``message``."""
    clean, line, column = expected_location(source)
    with pytest.raises(CompileError) as caught:
        compile_source(clean, "wrong.p4")
    assert str(caught.value) == f"wrong.p4:{line}:{column}: {message}"


# --------------------------------------------------------------------------- ?: of ints

VALID_IN = "hdr.ipv4.isValid()"
TERNARIES = {
    "assignment": f"hdr.ipv4.ttl = {VALID_IN} ? @@1 : 300;",
    "constant condition": "hdr.ipv4.ttl = true ? @@1 : 300;",
    "comparison": f"if (({VALID_IN} ? @@1 : 300) == hdr.ipv4.ttl) {{ }}",
    "addition": f"hdr.ipv4.ttl = hdr.ipv4.ttl + ({VALID_IN} ? @@1 : 300);",
    "cast": f"hdr.ipv4.ttl = (bit<8>)({VALID_IN} ? @@1 : 300);",
    "initialiser": f"bit<8> x = {VALID_IN} ? @@1 : 300;",
    "shift amount": f"hdr.ipv4.ttl = hdr.ipv4.ttl << ({VALID_IN} ? @@1 : 300);",
    "register index": f"r.write({VALID_IN} ? @@1 : 300, 8w1);",
    "action argument": f"drop2({VALID_IN} ? @@1 : 300);",
}


@pytest.mark.parametrize("statement", TERNARIES.values(), ids=list(TERNARIES))
def test_a_conditional_of_two_untyped_integers_needs_a_width(statement: str) -> None:
    """p4c's rule and words; it used to be a traceback (or, as a shift amount, accepted).
    With a width on one branch the same statement compiles and runs."""
    source = VALID.replace(TTL_LINE, statement).replace(
        "    action drop() {",
        "    register<bit<8>>(4) r;\n    action drop2(bit<8> v) { hdr.ipv4.ttl = v; }\n"
        "    action drop() {",
    )
    refused_at(source, "width must be specified for at least one of 1 or 300")
    typed = source.replace("@@1 : 300", "8w1 : 300").replace(
        "ipv4_lpm.apply();", "ipv4_lpm.apply(); drop2(3); ipv4_forward(1, 2);"
    )
    pipeline = Pipeline(compile_source(typed, "typed.p4"))
    assert [port for port, _, _ in pipeline.process(1, FRAME)] == [2]
    assert pipeline.internal_errors == 0


# --------------------------------------------------------------------------- #include


def test_an_include_name_with_a_nul_byte_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "nul.p4"
    path.write_text('#include "a\0b.p4"\n' + VALID)
    with pytest.raises(CompileError) as caught:
        compile_file(path)
    assert str(caught.value) == (f"{path}:1:1: an #include file name cannot hold a NUL character")


def test_an_include_of_a_symlink_loop_is_one_line(tmp_path: Path) -> None:
    os.symlink("b.p4", tmp_path / "a.p4")
    os.symlink("a.p4", tmp_path / "b.p4")
    path = tmp_path / "loop.p4"
    path.write_text('#include "a.p4"\n' + VALID)
    with pytest.raises(CompileError, match=r"^.*loop\.p4:1:1: cannot open include file a\.p4: "):
        compile_file(path)


# --------------------------------------------------------------------------- const entries


def with_entries(entries: str, key: str = "exact", extra: str = "") -> str:
    return VALID.replace(
        "key = { hdr.ipv4.dstAddr: lpm; }", f"key = {{ hdr.ipv4.dstAddr: {key}; }}"
    ).replace(
        "default_action = drop();",
        f"default_action = drop(); {extra}const entries = {{\n{entries}\n        }}",
    )


@pytest.mark.parametrize("size", [2, 1])
def test_const_entries_beyond_the_size_load_and_match_as_p4c_takes_them(size: int) -> None:
    # p4c warns of a size given with const entries and makes the table as large as its
    # entries; a const table takes no more.
    source = with_entries(
        "1 : NoAction();\n 0x0a000202 : ipv4_forward(9, 3);", extra=f"size = {size}; "
    )
    program = compile_source(source, "fits.p4")
    pipeline = Pipeline(program)
    assert [port for port, _, _ in pipeline.process(1, FRAME)] == [3]
    table = pipeline.runtime.tables_by_name["MyIngress.ipv4_lpm"]
    assert table.size == size and len(table.entries) == 2


def test_more_const_entries_than_the_default_size_load() -> None:
    entries = " ".join(f"{i} : drop();" for i in range(1024)) + "\n0x0a000202 : ipv4_forward(9, 3);"
    pipeline = Pipeline(compile_source(with_entries(entries), "many.p4"))
    assert [port for port, _, _ in pipeline.process(1, FRAME)] == [3]
    assert len(pipeline.runtime.tables_by_name["MyIngress.ipv4_lpm"].entries) == 1025


CONST_ENTRIES = {
    "duplicate exact": (
        with_entries("1 : drop();\n @@1 : NoAction();"),
        "table ipv4_lpm already has an entry with this key (the entry at line 43, column 1)",
    ),
    "duplicate lpm after masking": (
        with_entries(
            "0x0a000001 &&& 0xff000000 : drop();\n @@0x0a000002 &&& 0xff000000 : drop();", key="lpm"
        ),
        "table ipv4_lpm already has an entry with this key (the entry at line 43, column 1)",
    ),
    "duplicate ternary of one priority": (
        with_entries(
            "priority = 5: 1 &&& 3 : drop();\n @@priority = 5: 1 &&& 3 : drop();", key="ternary"
        ),
        "table ipv4_lpm already has an entry with this key (the entry at line 43, column 1)",
    ),
    "don't care on an exact key": (
        with_entries("@@_ : drop();"),
        "hdr.ipv4.dstAddr is an exact key: an entry needs a value for it, not _",
    ),
    "priority without a ternary key": (
        with_entries("@@priority = 3: 1 : drop();"),
        "entries of table ipv4_lpm take no priority (it has no ternary, range or optional key)",
    ),
    "priority 0": (
        with_entries("@@priority = 0: 1 &&& 1 : drop();", key="ternary"),
        "an entry priority must be > 0, not 0",
    ),
    "empty range": (
        with_entries("@@5 .. 3 : drop();", key="range"),
        "empty range 5 .. 3",
    ),
    "default-only action": (
        with_entries("1 : @@drop();").replace(
            "actions = { ipv4_forward; drop;", "actions = { ipv4_forward; @defaultonly drop;"
        ),
        "drop is @defaultonly in table ipv4_lpm: entries cannot use it",
    ),
}


@pytest.mark.parametrize(("source", "message"), CONST_ENTRIES.values(), ids=list(CONST_ENTRIES))
def test_const_entries_the_table_would_refuse_at_load_are_refused_at_compile_time(
    source: str, message: str
) -> None:
    """Each compiled, then loading the program raised (TableFullError, EntryExistsError,
    InvalidEntryError) with a traceback."""
    refused_at(source, message)


def test_const_entries_of_an_optional_key_match_a_value_or_anything() -> None:
    """They compiled to exact matches, which a table of an optional key refused when the
    program loaded; p4c takes them."""
    source = with_entries(
        "0x0a000202 : ipv4_forward(9, 3);\n _ : ipv4_forward(9, 4);", key="optional"
    )
    pipeline = Pipeline(compile_source(source, "optional.p4"))
    assert [port for port, _, _ in pipeline.process(1, FRAME)] == [3]
    other = FRAME[:30] + bytes.fromhex("0a000203") + FRAME[34:]
    assert [port for port, _, _ in pipeline.process(1, other)] == [4]


def test_entries_equal_only_once_masked_or_of_other_priorities_are_distinct() -> None:
    entries = (
        "1 &&& 3 : drop(); 1 &&& 1 : drop(); 5 &&& 1 : NoAction(); priority = 9: 1 &&& 3 : drop();"
    )
    Pipeline(compile_source(with_entries(entries, key="ternary"), "distinct.p4"))
    same = entries + " priority = 9: 5 &&& 3 : drop();"  # 5 &&& 3 is 1 &&& 3
    with pytest.raises(CompileError, match="already has an entry with this key"):
        compile_source(with_entries(same, key="ternary"), "same.p4")


def test_beamer_compile_refuses_a_const_table_with_a_repeated_key_with_exit_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "twice.p4"
    path.write_text(expected_location(CONST_ENTRIES["duplicate exact"][0])[0])
    assert main(["compile", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"{path}:44:2: table ipv4_lpm" in err


# --------------------------------------------------------------------------- parsers


def test_an_action_call_in_a_parser_is_refused() -> None:
    """p4c's words; it compiled to a call of a function the parser does not have."""
    refused_at(
        VALID.replace("packet.extract(hdr.ipv4);", "packet.extract(hdr.ipv4); @@NoAction();"),
        "action calls are not allowed within parsers",
    )


def test_an_action_parameter_is_read_only() -> None:
    """p4c: "Expression port cannot be the target of an assignment"; it was accepted."""
    refused_at(
        VALID.replace(TTL_LINE, "@@port = 3;"),
        "cannot assign to read-only port (an 'in' or directionless parameter, or a constant)",
    )


# --------------------------------------------------------------------------- else if


def frame_of_length(total_length: int) -> bytes:
    return FRAME[:16] + total_length.to_bytes(2, "big") + FRAME[18:]


@pytest.mark.parametrize("links", [100, 3000])
def test_an_else_if_chain_is_not_nesting_and_its_first_match_wins(links: int) -> None:
    """p4c takes a chain of any length; each else-if counted as two levels of nesting,
    so chains over 31 were refused (and the code nested in Python as deep)."""
    chain = " else ".join(
        f"if (hdr.ipv4.totalLen == {i}) {{ hdr.ipv4.ttl = {i % 250 + 1}; }}" for i in range(links)
    )
    chain += f" else if (hdr.ipv4.totalLen == {links // 2}) {{ hdr.ipv4.ttl = 251; }}"
    chain += " else { hdr.ipv4.ttl = 252; }"
    source = VALID.replace("ipv4_lpm.apply();", "ipv4_forward(1, 2); " + chain)
    pipeline = Pipeline(compile_source(source, "chain.p4"))
    for total_length, ttl in (
        (links // 2, links // 2 % 250 + 1),
        (links - 1, (links - 1) % 250 + 1),
        (0, 1),
        (links + 1, 252),
    ):
        [(_port, _priority, data)] = pipeline.process(1, frame_of_length(total_length))
        assert data[22] == ttl, total_length
    assert pipeline.internal_errors == 0
