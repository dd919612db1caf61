"""Names a program writes are data, never code: an ``@name`` holding Python runs nothing,
and tables, actions, counters and registers named with any text p4c accepts load and
work under their P4Runtime names, which stay the names written."""

from __future__ import annotations

from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from test_frontend_errors import VALID

from softswitch.frontend import compile_source
from softswitch.frontend.errors import CompileError
from softswitch.pipeline import Pipeline
from softswitch.runtime import ActionCall, ExactMatch, LpmMatch, TableEntry

INGRESS = """\
control MyIngress(inout headers hdr, inout metadata meta,
                  inout standard_metadata_t standard_metadata) {
    @name("NAME/c") counter(4, CounterType.packets) hits;
    @name("NAME/r") register<bit<8>>(4) last_ttl;
    @name("NAME/drop") action drop() { mark_to_drop(standard_metadata); }
    @name("NAME/fwd") action ipv4_forward(bit<48> dstAddr, bit<9> port) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.dstAddr = dstAddr;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
    @name("NAME") table ipv4_lpm {
        key = { hdr.ipv4.dstAddr: lpm; }
        actions = { ipv4_forward; drop; NoAction; }
        default_action = drop();
    }
    @name("NAME/t2") table by_ttl {
        key = { hdr.ipv4.ttl: exact; }
        actions = { drop; NoAction; }
        default_action = NoAction();
    }
    apply {
        if (hdr.ipv4.isValid()) {
            hits.count(1);
            last_ttl.write(2, hdr.ipv4.ttl);
            switch (ipv4_lpm.apply().action_run) {
                ipv4_forward: { hits.count(3); }
                default: { }
            }
            by_ttl.apply();
        }
    }
}
"""


def program_named(name: str) -> str:
    """VALID with an ingress whose objects carry ``@name``s made from ``name``."""
    start = VALID.index("control MyIngress(")
    end = VALID.index("control MyEgress(")
    return VALID[:start] + INGRESS.replace("NAME", name) + "\n" + VALID[end:]


def frame(ttl: int = 30, dst: str = "10.0.2.2") -> bytes:
    return bytes(Ether(dst="02:00:00:00:00:01") / IP(dst=dst, ttl=ttl) / TCP())


# Each as written between the quotes of @name("...") (P4 strings keep escapes as written).
NAMES = {
    "dash": "ipv4-lpm",
    "space": "a b",
    "quote": "it's",
    "escaped double quote": r"say \"hi\"",
    "backslash": r"back\\slash",
    "escaped newline": r"line\nbreak",
    "unicode": "Tabelle-ü-表",
    "python keyword": "class",
    "python builtin": "__import__",
    "dots": "a.b-c.d",
}


@pytest.mark.parametrize("name", NAMES.values(), ids=list(NAMES))
def test_objects_named_with_any_text_load_and_work_under_their_names(name: str) -> None:
    program = compile_source(program_named(name), "named.p4")
    info = program.p4info
    full = f"MyIngress.{name}"
    assert {t.preamble.name for t in info.tables} == {full, f"{full}/t2"}
    assert {a.preamble.name for a in info.actions} == {f"{full}/fwd", f"{full}/drop", "NoAction"}
    assert [c.preamble.name for c in info.counters] == [f"{full}/c"]
    assert [r.preamble.name for r in info.registers] == [f"{full}/r"]
    assert f"{name}/fwd" not in program.lowered.source  # names are data, not code

    pipeline = Pipeline(program)
    pipeline.runtime.insert_entry(
        program.table_ids[full],
        TableEntry(
            {1: LpmMatch(0x0A000200, 24)},
            ActionCall(program.action_ids[f"{full}/fwd"], (0x020000000222, 2)),
        ),
    )
    [(port, _priority, data)] = pipeline.process(1, frame())
    assert port == 2
    assert Ether(data).dst == "02:00:00:00:02:22" and Ether(data)[IP].ttl == 29
    pipeline.runtime.insert_entry(
        program.table_ids[f"{full}/t2"],
        TableEntry({1: ExactMatch(9)}, ActionCall(program.action_ids[f"{full}/drop"])),
    )
    assert pipeline.process(1, frame(ttl=10)) == []  # forwarded with ttl 9, then dropped
    counter = pipeline.runtime.counters[program.counter_ids[f"{full}/c"]]
    assert [cell.packet_count for cell in counter.cells] == [0, 2, 0, 2]
    register = pipeline.runtime.registers[program.register_ids[f"{full}/r"]]
    assert register.cells[2] == 10
    assert pipeline.internal_errors == 0


def test_an_annotation_holding_python_runs_nothing(tmp_path: Path) -> None:
    """Each of these ran its command at load or per packet when names were code."""
    marker = tmp_path / "ran"
    command = f"getattr(__import__('os'),'system')('touch {marker}')"
    names = [
        f"q if 0 else {command} if 1 else q",
        rf"x\n{command}\n#",
        f"d(); {command}#",
        "x if 1/0 else x",  # raises if it is ever evaluated
    ]
    for name in names:
        program = compile_source(program_named(name), "injected.p4")
        assert "__import__" not in program.lowered.source and "1/0" not in program.lowered.source
        pipeline = Pipeline(program)
        pipeline.runtime.insert_entry(
            program.table_ids[f"MyIngress.{name}"],
            TableEntry(
                {1: LpmMatch(0x0A000200, 24)},
                ActionCall(program.action_ids[f"MyIngress.{name}/fwd"], (0x020000000222, 2)),
            ),
        )
        assert [port for port, _, _ in pipeline.process(1, frame())] == [2]
        assert pipeline.process(1, frame(dst="10.9.9.9")) == []  # a miss: the default drops
        assert pipeline.internal_errors == 0
        assert not marker.exists()


def test_objects_whose_names_differ_only_in_dots_and_underscores_stay_apart() -> None:
    """``a_b`` and ``@name("a.b")`` once made the same Python global: both tables looked
    up one of them."""
    source = VALID.replace(
        "    table ipv4_lpm {",
        '    @name("ipv4.lpm") table other {\n'
        "        key = { hdr.ipv4.dstAddr: lpm; }\n"
        "        actions = { ipv4_forward; drop; NoAction; }\n"
        "        default_action = NoAction();\n"
        "    }\n"
        "    table ipv4_lpm {",
    ).replace("ipv4_lpm.apply();", "ipv4_lpm.apply(); other.apply();")
    program = compile_source(source, "apart.p4")
    pipeline = Pipeline(program)
    pipeline.runtime.insert_entry(
        program.table_ids["MyIngress.ipv4_lpm"],
        TableEntry(
            {1: LpmMatch(0x0A000200, 24)},
            ActionCall(program.action_ids["MyIngress.ipv4_forward"], (0x020000000222, 2)),
        ),
    )
    # ipv4_lpm forwards; other (no entries) runs NoAction, so the TTL drops by one only.
    [(port, _priority, data)] = pipeline.process(1, frame())
    assert port == 2 and Ether(data)[IP].ttl == 29


@pytest.mark.parametrize(
    ("kind", "first", "written", "renamed"),
    [
        # Two tables of one name used to be refused as one table "applied more than once";
        # p4c refuses it as a P4Info name used twice.
        ("table", '@name("n") table', '@name("n/t2") table', '@name("n") table'),
        # Two actions of one name and different parameters used to share the first one's
        # entry: the second one's table then refused a call with its own arguments.
        ("action", '@name("n/drop") action', '@name("n/fwd") action', '@name("n/drop") action'),
        # Two counters or registers of one name used to compile into one P4Info entry.
        (
            "counter",
            '@name("n/c") counter',
            "hits;\n",
            'hits;\n    @name("n/c") counter(2, CounterType.packets) more_hits;\n',
        ),
        (
            "register",
            '@name("n/r") register',
            "last_ttl;\n",
            'last_ttl;\n    @name("n/r") register<bit<8>>(2) more_ttl;\n',
        ),
    ],
)
def test_a_name_given_to_two_objects_of_a_kind_is_refused_with_both_places(
    kind: str, first: str, written: str, renamed: str
) -> None:
    source = program_named("n")
    assert source.count(written) >= 1
    source = source.replace(written, renamed, 1)
    first_line = next(number for number, line in enumerate(source.splitlines(), 1) if first in line)
    with pytest.raises(CompileError) as refused:
        compile_source(source, "twice.p4")
    message = str(refused.value)
    assert f"is used for multiple {kind} objects" in message, message
    assert f"declared at line {first_line}" in message, message
    assert message.startswith("twice.p4:") and "\n" not in message


def test_actions_of_one_name_and_the_same_parameters_share_one_entry_as_in_p4c() -> None:
    # Translated programs repeat @name(".NoAction") on copies of an action; p4c gives
    # them one P4Info action, and so does this frontend.
    source = program_named("n").replace(
        '@name("n/drop") action drop()',
        '@name(".drop") action drop_too() { mark_to_drop(standard_metadata); }\n'
        '    @name(".drop") action drop()',
    )
    source = source.replace("actions = { drop; NoAction; }", "actions = { drop_too; NoAction; }")
    program = compile_source(source, "shared.p4")
    assert [name for name in program.action_ids if "drop" in name] == ["drop"]
