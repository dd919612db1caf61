"""Per-packet work a program can ask for is bounded at compile time: the header and
struct fields a block creates (locals) or copies (assignments) per packet, counting the
actions it runs and the parser states that can repeat (MAX_FIELDS_PER_BLOCK). Past
it a program is one line naming the construct; 10,000 locals of a 4,096-field struct
once took 3.5 GB and 6 s per packet."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_frontend_errors import VALID
from test_frontend_limits import nested_structs, with_statement

from control.cli import main
from softswitch.frontend import CompileError, SourceLocation, compile_file, compile_source
from softswitch.frontend.compiler_state import CompilerState
from softswitch.frontend.limits import (
    MAX_FIELDS_PER_BLOCK,
    MAX_TYPE_FIELDS,
    PARSER_BASE_TRANSITIONS,
)
from softswitch.pipeline import Pipeline

ROOT = Path(__file__).resolve().parent.parent
# s12_t holds MAX_TYPE_FIELDS fields; this many of them fill the budget exactly.
FIT = MAX_FIELDS_PER_BLOCK // MAX_TYPE_FIELDS


def with_big_struct(source: str) -> str:
    assert MAX_TYPE_FIELDS == 2**12 and FIT == 16
    return nested_structs(12) + source


def location_of(source: str, marker: str) -> str:
    """``line:column`` of the first ``marker`` in ``source``."""
    before = source[: source.index(marker)]
    return f"{before.count(chr(10)) + 1}:{len(before) - before.rfind(chr(10))}"


def test_locals_up_to_the_budget_compile_and_run_one_more_is_refused_at_it() -> None:
    fits = with_big_struct(with_statement(" ".join(f"s12_t v{i};" for i in range(FIT))))
    pipeline = Pipeline(compile_source(fits, "fits.p4"))
    assert pipeline.process(1, bytes(64)) != [] and pipeline.internal_errors == 0

    over = with_big_struct(with_statement(" ".join(f"s12_t v{i};" for i in range(FIT + 1))))
    with pytest.raises(CompileError) as caught:
        compile_source(over, "locals.p4")
    assert str(caught.value) == (
        f"locals.p4:{location_of(over, f's12_t v{FIT};')}: action ipv4_forward creates or "
        f"copies more than 65,536 header and struct fields per packet "
        f"(local v{FIT} of type s12_t makes 69,632)"
    )


def test_struct_copies_count_each_time() -> None:
    copies = " ".join(["x = y; y = x;"] * (FIT // 2))  # 16 copies, then one local more
    source = with_big_struct(with_statement("s12_t x; s12_t y; " + copies))
    with pytest.raises(CompileError) as caught:
        compile_source(source, "copies.p4")
    # The two locals take two shares: the copy that makes 17 is the 15th.
    position = source.index(copies) + len("x = y; y = x; ") * 7
    assert source[position:].startswith("x = y;")
    assert str(caught.value).startswith(f"copies.p4:{location_of(source, source[position:])}: ")
    assert str(caught.value).endswith("(assigning x makes 69,632)")


def test_a_header_copy_counts_its_fields_and_validity() -> None:
    copies = "hdr.ipv4 = hdr.ipv4; " * (MAX_FIELDS_PER_BLOCK // 13 + 1)  # 12 fields + _v
    with pytest.raises(CompileError, match=r"\(assigning hdr\.ipv4 makes 65,546\)"):
        compile_source(with_statement(copies), "headers.p4")


def test_actions_count_where_they_run_the_costliest_action_per_table() -> None:
    """An action's locals count in the action, then again wherever it is applied or
    called: once per table (a table runs one of its actions per packet)."""
    half = " ".join(f"s12_t v{i};" for i in range(FIT // 2))  # half the budget
    source = with_big_struct(
        VALID.replace(
            "    action drop() { mark_to_drop(standard_metadata); }",
            "    action drop() { mark_to_drop(standard_metadata); }\n"
            f"    action heavy() {{ {half} }}\n"
            f"    action heavy2() {{ {half} }}\n"
            "    table t1 { actions = { heavy; heavy2; } default_action = heavy(); }\n"
            "    table t2 { actions = { heavy; } default_action = heavy(); }\n",
        ).replace("ipv4_lpm.apply();", "t1.apply(); t2.apply(); @@heavy();")
    )
    clean = source.replace("@@", "")
    with pytest.raises(CompileError) as caught:
        compile_source(clean, "actions.p4")
    assert str(caught.value).startswith(f"actions.p4:{location_of(source, '@@')}: ")
    assert str(caught.value).endswith("(calling heavy makes 98,304)")
    # Two tables whose actions take half each fit: 65,536 exactly.
    fits = clean.replace("t2.apply(); heavy();", "t2.apply();")
    pipeline = Pipeline(compile_source(fits, "tables.p4"))
    assert pipeline.process(1, bytes(64)) != []

    inside = with_big_struct(
        VALID.replace(
            "    action drop() { mark_to_drop(standard_metadata); }",
            f"    action heavy() {{ {half} }}\n"
            f"    action drop() {{ heavy(); heavy(); s12_t one_more; }}",
        )
    )
    with pytest.raises(
        CompileError, match=r"action drop creates .* \(local one_more of type s12_t makes 69,632\)"
    ):
        compile_source(inside, "inside.p4")


def test_a_parser_state_that_can_repeat_counts_as_often_as_it_may_run() -> None:
    per_iteration = MAX_FIELDS_PER_BLOCK // PARSER_BASE_TRANSITIONS  # 64 fields
    struct = "struct small_t { " + " ".join(f"bit<8> f{i};" for i in range(per_iteration)) + " }\n"
    looping = (struct + VALID).replace(
        "    state parse_ipv4 {\n        packet.extract(hdr.ipv4);\n        transition accept;",
        "    state parse_ipv4 {\n        packet.extract(hdr.ipv4);\n        transition again;\n"
        "    }\n"
        "    state again {\n"
        "        small_t s; small_t t; s = t;\n"
        "        transition select(hdr.ipv4.ttl) { 0: again; default: accept; }",
    )
    with pytest.raises(CompileError) as caught:
        compile_source(looping, "loop.p4")
    assert str(caught.value).startswith(f"loop.p4:{location_of(looping, 'small_t t;')}: ")
    assert str(caught.value).endswith("(local t of type small_t makes 131,072)")
    # Once per packet, the same state is far within the budget.
    once = looping.replace("{ 0: again; default: accept; }", "{ default: accept; }")
    assert Pipeline(compile_source(once, "once.p4")).process(1, bytes(64)) != []


def test_beamer_p4_is_far_below_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    counted: list[int] = [0]
    count_fields = CompilerState.count_fields

    def recording(state: CompilerState, fields: int, loc: SourceLocation, what: str) -> None:
        count_fields(state, fields, loc, what)
        counted.append(state.block_fields)

    monkeypatch.setattr(CompilerState, "count_fields", recording)
    compile_file(ROOT / "p4src" / "beamer.p4")
    assert max(counted) <= MAX_FIELDS_PER_BLOCK // 100


def test_beamer_compile_refuses_with_one_line_and_exit_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "copies.p4"
    path.write_text(with_big_struct(with_statement("s12_t x; s12_t y; " + "x = y; " * 20_000)))
    assert main(["compile", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"{path}:" in err
    assert "header and struct fields per packet" in err and "Traceback" not in err
