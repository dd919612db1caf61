"""P4Info equivalence with p4c, and the server's acceptance of p4c's P4Info.

``beamer compile`` must write the P4Info p4c writes for the same program (same
bytes: ids, names, order, annotations), and the embedded P4Runtime server must
take a P4Info that means the same program in another order or with other
annotations together with its own device config. The p4c comparisons need p4c
(PATH or ``../shared/tools/p4/bin``) and skip without it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from bmv2_tools import REPO_ROOT, p4c_compile
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from softswitch.frontend import CompiledProgram, compile_file
from softswitch.p4rt.pipeline_config import PipelineConfigs, p4info_difference
from softswitch.p4rt.status import P4RuntimeError
from softswitch.switch import Switch

PROGRAMS = [
    REPO_ROOT / "p4src" / "beamer.p4",
    REPO_ROOT / "tests" / "p4progs" / "basic.p4",
    REPO_ROOT / "tests" / "p4progs" / "tunnel.p4",
    REPO_ROOT / "tests" / "p4progs" / "features.p4",
    REPO_ROOT / "tests" / "p4progs" / "l2_stats.p4",
]


def parse(path: Path) -> p4info_pb2.P4Info:
    message = p4info_pb2.P4Info()
    text_format.Parse(path.read_text(), message)
    return message


def set_request(
    program: CompiledProgram, p4info: p4info_pb2.P4Info
) -> p4runtime_pb2.SetForwardingPipelineConfigRequest:
    request = p4runtime_pb2.SetForwardingPipelineConfigRequest(
        device_id=0, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
    )
    request.config.p4info.CopyFrom(p4info)
    request.config.p4_device_config = program.device_config()
    return request


@pytest.mark.parametrize("source", PROGRAMS, ids=lambda p: p.name)
def test_beamer_compile_writes_p4cs_p4info_byte_for_byte(source: Path, tmp_path: Path) -> None:
    _json, theirs = p4c_compile(source)
    completed = subprocess.run(
        [sys.executable, "-m", "control.cli", "compile", str(source), "--out",
         str(tmp_path / "ours"), "--no-p4c"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=120, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    ours = tmp_path / "ours" / f"{source.stem}.p4info.txtpb"
    assert ours.read_text() == theirs.read_text()


@pytest.mark.parametrize("source", PROGRAMS, ids=lambda p: p.name)
def test_server_takes_p4cs_p4info_with_our_device_config(source: Path) -> None:
    _json, theirs = p4c_compile(source)
    program = compile_file(source)
    configs = PipelineConfigs(Switch(priority_queues=8))
    configs.set(set_request(program, parse(theirs)))
    committed = configs.committed()
    assert committed is not None
    # Get returns what the client sent, p4c's annotations included.
    assert committed.p4info == parse(theirs)


def reordered_and_annotated(p4info: p4info_pb2.P4Info) -> p4info_pb2.P4Info:
    other = p4info_pb2.P4Info()
    other.CopyFrom(p4info)
    tables = list(other.tables)[::-1]
    del other.tables[:]
    other.tables.extend(tables)
    actions = list(other.actions)[::-1]
    del other.actions[:]
    other.actions.extend(actions)
    other.actions[0].preamble.annotations.append('@brief("from another compiler")')
    other.tables[0].preamble.doc.brief = "documentation"
    other.ClearField("type_info")
    return other


def test_same_program_in_another_order_is_accepted_and_a_changed_one_refused() -> None:
    program = compile_file(REPO_ROOT / "p4src" / "beamer.p4")
    same = reordered_and_annotated(program.p4info)
    assert same != program.p4info
    assert p4info_difference(same, program.p4info) == ""
    PipelineConfigs(Switch(priority_queues=8)).set(set_request(program, same))

    resized = reordered_and_annotated(program.p4info)
    lpm = next(t for t in resized.tables if t.preamble.name == "MyIngress.ipv4_lpm")
    lpm.size += 1
    assert p4info_difference(resized, program.p4info) == (
        f"'tables' differs: MyIngress.ipv4_lpm (id {lpm.preamble.id})"
    )
    with pytest.raises(P4RuntimeError, match=r"'tables' differs: MyIngress\.ipv4_lpm"):
        PipelineConfigs(Switch(priority_queues=8)).set(set_request(program, resized))

    extra_param = reordered_and_annotated(program.p4info)
    extra_param.actions[0].params.add(id=9, name="extra", bitwidth=3)
    assert p4info_difference(extra_param, program.p4info).startswith("'actions' differs: ")


def test_p4info_lists_objects_in_declaration_order_with_core_annotations() -> None:
    """p4c's order without p4c: tables as declared, NoAction (used first) leading the
    actions with core.p4's @noWarn, and an empty type_info."""
    p4info = compile_file(REPO_ROOT / "p4src" / "beamer.p4").p4info
    assert [t.preamble.alias for t in p4info.tables] == [
        "ipv4_lpm", "default_class", "ack_class", "stage_class", "coflow_class",
    ]  # fmt: skip
    assert p4info.actions[0].preamble.name == "NoAction"
    assert list(p4info.actions[0].preamble.annotations) == ['@noWarn("unused")']
    assert p4info.HasField("type_info")
