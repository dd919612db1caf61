"""A device config's fields are checked one by one: a P4Runtime client sends it, and a
wrong type must be one clear refusal, not a Python error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from softswitch.frontend import CompiledProgram, CompileError, compile_file

PROGRAMS = Path(__file__).resolve().parent / "p4progs"


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    config = compile_file(PROGRAMS / "basic.p4").device_config()
    loaded: dict[str, Any] = json.loads(config)
    return loaded


def _load(document: dict[str, Any]) -> CompiledProgram:
    return CompiledProgram.from_device_config(json.dumps(document).encode())


def test_a_well_formed_config_loads(document: dict[str, Any]) -> None:
    assert _load(document).name == document["program"]


@pytest.mark.parametrize(
    "entry",
    [
        ["basic.p4", 1e300, "header h_t { bit<8> f; }"],
        ["basic.p4", 1.5, ""],
        ["basic.p4", True, ""],
        ["basic.p4", "3", ""],
        ["basic.p4", 3],
        ["basic.p4", 3, "", "extra"],
        [None, 3, ""],
        ["basic.p4", 3, ["nested"]],
        "basic.p4:3",
    ],
)
def test_a_source_line_of_the_wrong_shape_is_refused_by_index(
    document: dict[str, Any], entry: object
) -> None:
    hostile = dict(document, source=[*document["source"][:2], entry, *document["source"][2:]])
    with pytest.raises(CompileError, match=r"device config: source\[2\] is not \[file, line"):
        _load(hostile)


def test_a_line_number_beyond_a_float_is_refused_not_overflowed(document: dict[str, Any]) -> None:
    text = json.dumps(document).replace('"source": [[', '"source": [["x.p4", 1e400, ""], [', 1)
    with pytest.raises(CompileError, match=r"source\[0\] is not \[file, line number, text\]"):
        CompiledProgram.from_device_config(text.encode())


@pytest.mark.parametrize("field", ["source", "program", "p4info_sha256"])
@pytest.mark.parametrize("value", [None, 7, {"a": 1}])
def test_the_other_fields_must_have_their_types(
    document: dict[str, Any], field: str, value: object
) -> None:
    hostile = dict(document)
    hostile[field] = value
    with pytest.raises(CompileError, match="device config: "):
        _load(hostile)
