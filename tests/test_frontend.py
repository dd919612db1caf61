"""Frontend outputs: P4Info as p4c would write it, the device config, ``beamer compile``."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from control.cli import main as beamer_main
from softswitch.frontend import CompiledProgram, CompileError, compile_file, compile_source
from softswitch.frontend.p4info import aliases, jenkins_one_at_a_time
from softswitch.frontend.preprocess import Preprocessor

ROOT = Path(__file__).resolve().parent.parent
BEAMER_P4 = ROOT / "p4src" / "beamer.p4"
PROGRAMS = Path(__file__).resolve().parent / "p4progs"


@pytest.fixture(scope="module")
def beamer() -> CompiledProgram:
    return compile_file(BEAMER_P4)


def by_name(items: object) -> dict[str, object]:
    return {item.preamble.name: item for item in items}  # type: ignore[attr-defined]


def test_p4info_names_and_shapes_follow_p4c(beamer: CompiledProgram) -> None:
    info = beamer.p4info
    assert info.pkg_info.arch == "v1model"
    tables = by_name(info.tables)
    assert set(tables) == {
        "MyIngress.ipv4_lpm",
        "MyIngress.default_class",
        "MyIngress.ack_class",
        "MyIngress.stage_class",
        "MyIngress.coflow_class",
    }
    lpm = tables["MyIngress.ipv4_lpm"]
    assert [(m.id, m.name, m.bitwidth, m.match_type) for m in lpm.match_fields] == [  # type: ignore[attr-defined]
        (1, "hdr.ipv4.dstAddr", 32, p4info_pb2.MatchField.LPM)
    ]
    coflow = tables["MyIngress.coflow_class"]
    assert [m.name for m in coflow.match_fields] == [  # type: ignore[attr-defined]
        "hdr.beamer_tag.experiment_id",
        "hdr.beamer_tag.stage_id",
        "hdr.beamer_tag.coflow_id",
    ]
    assert coflow.size == 4096  # type: ignore[attr-defined]
    assert tables["MyIngress.default_class"].size == 1024  # type: ignore[attr-defined]
    actions = by_name(info.actions)
    forward = actions["MyIngress.ipv4_forward"]
    assert [(p.id, p.name, p.bitwidth) for p in forward.params] == [  # type: ignore[attr-defined]
        (1, "dstAddr", 48),
        (2, "port", 9),
    ]
    stage = tables["MyIngress.stage_class"]
    direct = by_name(info.direct_counters)["MyIngress.stage_counter"]
    assert direct.direct_table_id == stage.preamble.id  # type: ignore[attr-defined]
    assert list(stage.direct_resource_ids) == [direct.preamble.id]  # type: ignore[attr-defined]
    assert direct.spec.unit == p4info_pb2.CounterSpec.BOTH  # type: ignore[attr-defined]
    queue = by_name(info.counters)["MyEgress.queue_counter"]
    assert (queue.size, queue.spec.unit) == (8, p4info_pb2.CounterSpec.BOTH)  # type: ignore[attr-defined]


def test_ids_use_p4c_prefixes_and_its_name_hash(beamer: CompiledProgram) -> None:
    info = beamer.p4info
    groups = [
        (info.tables, 0x02),
        (info.actions, 0x01),
        (info.counters, 0x12),
        (info.direct_counters, 0x13),
    ]
    for items, prefix in groups:
        for item in items:
            expected = prefix << 24 | (jenkins_one_at_a_time(item.preamble.name) & 0xFFFFFF)
            assert item.preamble.id == expected, item.preamble.name
    # Ids p4c gives these names (published in p4lang tutorials' basic.p4info).
    assert beamer.table_ids["MyIngress.ipv4_lpm"] == 37375156
    assert beamer.action_ids["MyIngress.ipv4_forward"] == 28792405
    assert beamer.action_ids["NoAction"] == 21257015


def test_aliases_are_shortest_unique_suffixes() -> None:
    names = ["MyIngress.count", "MyEgress.count", "MyIngress.ipv4_lpm", "NoAction"]
    assert aliases(names) == {
        "MyIngress.count": "MyIngress.count",
        "MyEgress.count": "MyEgress.count",
        "MyIngress.ipv4_lpm": "ipv4_lpm",
        "NoAction": "NoAction",
    }


def test_register_and_const_table_in_p4info() -> None:
    program = compile_file(PROGRAMS / "features.p4")
    register = by_name(program.p4info.registers)["MyIngress.last_result"]
    assert register.preamble.id >> 24 == 0x16  # type: ignore[attr-defined]  # p4ids.h REGISTER
    assert (register.size, register.type_spec.bitstring.bit.bitwidth) == (16, 32)  # type: ignore[attr-defined]
    ops = by_name(program.p4info.tables)["MyIngress.ops"]
    assert ops.is_const_table and ops.has_initial_entries  # type: ignore[attr-defined]
    assert ops.match_fields[0].match_type == p4info_pb2.MatchField.TERNARY  # type: ignore[attr-defined]


def test_device_config_round_trip_and_fingerprint(beamer: CompiledProgram) -> None:
    config = beamer.device_config()
    document = json.loads(config)
    assert (document["format"], document["version"], document["program"]) == (
        "beamer-softswitch",
        1,
        "beamer.p4",
    )
    loaded = CompiledProgram.from_device_config(config, beamer.p4info)
    assert loaded.p4info == beamer.p4info
    other = compile_file(PROGRAMS / "basic.p4")
    with pytest.raises(CompileError, match="P4Info does not belong"):
        CompiledProgram.from_device_config(config, other.p4info)
    document["p4info_sha256"] = "0" * 64
    with pytest.raises(CompileError, match="fingerprint does not match"):
        CompiledProgram.from_device_config(json.dumps(document).encode())
    with pytest.raises(CompileError, match="not JSON"):
        CompiledProgram.from_device_config(b"\xff{")
    with pytest.raises(CompileError, match="not a beamer-softswitch config"):
        CompiledProgram.from_device_config(b'{"format": "bmv2"}')


def test_preprocessor_defines_ifdefs_and_include_once(tmp_path: Path) -> None:
    (tmp_path / "lib.p4").write_text("#define WIDTH 8\nconst bit<WIDTH> LIB = 1;\n")
    source = (
        '#include "lib.p4"\n#ifdef WIDTH\nconst bit<WIDTH> A = 2;\n#else\nbroken\n#endif\n'
        "#ifndef WIDTH\nbroken\n#endif\n/* #define WIDTH 16 */\n"
    )
    lines = Preprocessor().run_text(source, "main.p4", tmp_path, 0)
    text = "\n".join(line.text for line in lines)
    assert "const bit<8> A = 2;" in text and "broken" not in text
    assert "const bit<8> LIB = 1;" in text
    origin = next(line for line in lines if "LIB" in line.text)
    assert (Path(origin.file).name, origin.number) == ("lib.p4", 2)
    with pytest.raises(CompileError, match=r"main\.p4:1:1: unsupported preprocessor directive #if"):
        Preprocessor().run_text("#if 1\n#endif\n", "main.p4", tmp_path, 0)
    with pytest.raises(CompileError, match="function-like macros are not supported"):
        Preprocessor().run_text("#define F(x) x\n", "main.p4", tmp_path, 0)


def test_compile_command_writes_both_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "build"
    assert beamer_main(["compile", str(BEAMER_P4), "--out", str(out), "--no-p4c"]) == 0
    info = p4info_pb2.P4Info()
    text_format.Parse((out / "beamer.p4info.txtpb").read_text(), info)
    program = CompiledProgram.from_device_config(
        (out / "beamer.softswitch.json").read_bytes(), info
    )
    assert program.p4info == info
    assert sorted(path.name for path in out.iterdir()) == [
        "beamer.p4info.txtpb",
        "beamer.softswitch.json",
    ]


def test_compile_command_reports_errors_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = tmp_path / "wrong.p4"
    wrong.write_text("#include <v1model.p4>\nheader h_t { bit<8> a }\n")
    out = tmp_path / "build"
    assert beamer_main(["compile", str(wrong), "--out", str(out), "--no-p4c"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"beamer: error: {wrong}:2:23: expected ';', found '}}'"
    assert not out.exists() or list(out.iterdir()) == []


def test_compile_source_reports_its_own_file_name() -> None:
    with pytest.raises(CompileError, match=r"^x\.p4:1:5: expected a name, found end of input"):
        compile_source("junk", "x.p4")


def test_validity_and_slice_keys_are_named_like_p4c() -> None:
    source = (
        (PROGRAMS / "basic.p4")
        .read_text()
        .replace(
            "key = { hdr.ipv4.dstAddr: lpm; }",
            "key = { hdr.ipv4.dstAddr: lpm; hdr.ipv4.isValid(): exact; "
            "hdr.ipv4.ttl[7:4]: ternary; }",
        )
    )
    program = compile_source(source, "keys.p4")
    [table] = program.p4info.tables
    assert [(m.name, m.bitwidth) for m in table.match_fields] == [
        ("hdr.ipv4.dstAddr", 32),
        ("hdr.ipv4.$valid$", 1),
        ("hdr.ipv4.ttl[7:4]", 4),
    ]


def test_name_annotations_rename_control_plane_objects() -> None:
    source = (
        (PROGRAMS / "basic.p4")
        .read_text()
        .replace("    table ipv4_lpm {", '    @name("routes") table ipv4_lpm {')
        .replace("    action drop() {", '    @name(".global_drop") action drop() {')
    )
    program = compile_source(source, "named.p4")
    assert [t.preamble.name for t in program.p4info.tables] == ["MyIngress.routes"]
    assert "global_drop" in program.action_ids
    bad = source.replace('@name("routes")', "@name(routes)")
    with pytest.raises(CompileError, match="@name takes one string"):
        compile_source(bad, "named.p4")


def fake_p4c(directory: Path, p4info_text: str) -> None:
    """A stand-in ``p4c`` that checks its arguments and writes what p4c would."""
    script = directory / "p4c"
    script.write_text(
        "#!/usr/bin/env python3\n"
        "import sys, pathlib\n"
        "args = sys.argv[1:]\n"
        "assert args[:4] == ['--target', 'bmv2', '--arch', 'v1model'], args\n"
        "out = pathlib.Path(args[args.index('-o') + 1])\n"
        "info = pathlib.Path(args[args.index('--p4runtime-files') + 1])\n"
        "(out / (pathlib.Path(args[-1]).stem + '.json')).write_text('{}')\n"
        f"info.write_text({p4info_text!r})\n"
    )
    script.chmod(0o755)


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory first on PATH, for a stand-in p4c."""
    path = tmp_path / "bin"
    path.mkdir()
    monkeypatch.setenv("PATH", f"{path}:{os.environ['PATH']}")
    return path


def test_compile_runs_p4c_when_present_and_compares_p4info(
    tmp_path: Path, beamer: CompiledProgram, capsys: pytest.CaptureFixture[str], bin_dir: Path
) -> None:
    fake_p4c(bin_dir, text_format.MessageToString(beamer.p4info))
    out = tmp_path / "build"
    assert beamer_main(["compile", str(BEAMER_P4), "--out", str(out)]) == 0
    assert (out / "beamer.json").exists()
    assert "P4Info" not in capsys.readouterr().out.replace("p4info.txtpb", "")

    changed = p4info_pb2.P4Info()
    changed.CopyFrom(beamer.p4info)
    changed.tables[0].preamble.id += 1
    fake_p4c(bin_dir, text_format.MessageToString(changed))
    assert beamer_main(["compile", str(BEAMER_P4), "--out", str(out)]) == 0
    name = changed.tables[0].preamble.name
    assert f"describes another program: 'tables' differs: {name}" in capsys.readouterr().out


def compile_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line ``beamer compile ARGV`` fails with (exit status 2, no traceback)."""
    assert beamer_main(["compile", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip().removeprefix("beamer: error: ")


def test_compile_writes_no_output_when_one_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "build"
    out.mkdir()
    (out / "beamer.p4info.txtpb").write_text("old p4info\n")
    (out / "beamer.softswitch.json").mkdir()
    message = compile_error([str(BEAMER_P4), "--out", str(out), "--no-p4c"], capsys)
    assert message == f"{out / 'beamer.softswitch.json'}: cannot write: is a directory"
    assert (out / "beamer.p4info.txtpb").read_text() == "old p4info\n"
    assert sorted(path.name for path in out.iterdir()) == [
        "beamer.p4info.txtpb",
        "beamer.softswitch.json",
    ]


def test_compile_puts_back_outputs_renamed_before_another_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As when one output cannot be replaced (another user's file in a sticky directory,
    an immutable file): the outputs renamed before it get their old content back."""
    real_replace = os.replace

    def replace(source: str | Path, target: str | Path) -> None:
        if Path(target).name == "beamer.softswitch.json":
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace)
    out = tmp_path / "build"
    out.mkdir()
    old = {"beamer.p4info.txtpb": "old p4info\n", "beamer.softswitch.json": "old config\n"}
    for name, text in old.items():
        (out / name).write_text(text)
    message = compile_error([str(BEAMER_P4), "--out", str(out), "--no-p4c"], capsys)
    assert message == f"{out / 'beamer.softswitch.json'}: cannot write: Operation not permitted"
    assert {path.name: path.read_text() for path in out.iterdir()} == old
    # Nothing either where nothing was: not even the directories made for the outputs.
    fresh = tmp_path / "fresh" / "build"
    compile_error([str(BEAMER_P4), "--out", str(fresh), "--no-p4c"], capsys)
    assert not (tmp_path / "fresh").exists()


def test_compile_refuses_an_empty_out_and_one_that_is_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    message = compile_error([str(BEAMER_P4), "--out", "", "--no-p4c"], capsys)
    assert message == "--out: an empty directory name (write --out . for this directory)"
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "build").write_text("")
    message = compile_error([str(BEAMER_P4), "--out", "build", "--no-p4c"], capsys)
    assert message == "--out build: exists and is not a directory"


def test_compile_says_what_is_wrong_with_the_program_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["--out", str(tmp_path / "build"), "--no-p4c"]
    assert compile_error([str(PROGRAMS), *args], capsys) == (
        f"{PROGRAMS}: is a directory, not a P4 program"
    )
    missing = tmp_path / "missing.p4"
    assert compile_error([str(missing), *args], capsys) == f"{missing}: no such P4 program"
    latin1 = tmp_path / "latin1.p4"
    latin1.write_bytes(b"header h_t {\n  bit<8> caf\xe9;\n}\n")
    assert compile_error([str(latin1), *args], capsys) == (
        f"{latin1}:2:13: not UTF-8 text (byte 0xe9: invalid continuation byte)"
    )
    unreadable = tmp_path / "unreadable.p4"
    unreadable.write_bytes(BEAMER_P4.read_bytes())
    real_open = os.open

    def open_(path: str | Path, flags: int, *args: object, **kwargs: object) -> int:
        if Path(path) == unreadable:  # what chmod 000 does, for root too
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", open_)
    assert compile_error([str(unreadable), *args], capsys) == (
        f"{unreadable}: cannot read: Permission denied"
    )
    assert not (tmp_path / "build").exists()


def test_compile_refuses_a_fifo_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "program.p4"
    os.mkfifo(fifo)
    completed = subprocess.run(
        [sys.executable, "-m", "control.cli", "compile", str(fifo), "--out",
         str(tmp_path / "build"), "--no-p4c"],
        capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
    )  # fmt: skip
    assert completed.returncode == 2
    assert completed.stderr == f"beamer: error: {fifo}: is a FIFO (named pipe), not a P4 program\n"


def test_an_error_at_an_include_names_the_file_left_unfinished(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--out", str(tmp_path / "build"), "--no-p4c"]
    garbage = tmp_path / "g.p4"
    garbage.write_text("garbage\n#include <core.p4>\n")
    assert compile_error([str(garbage), *args], capsys) == (
        f"{garbage}:1:8: expected a name after 'garbage', found 'error' at core.p4:7:1, "
        "in another file"
    )
    # An included file that stops in the middle of a declaration is blamed where it stops,
    half = tmp_path / "half.p4"
    half.write_text("header h_t {\n  bit<8> a\n")
    main = tmp_path / "main.p4"
    main.write_text('#include "half.p4"\n}\n')
    assert compile_error([str(main), *args], capsys) == (
        f"{half}:2:11: expected ';' after 'a', found '}}' at {main}:2:1, in another file"
    )
    # and an included file whose first declaration is wrong is blamed for it.
    bad = tmp_path / "bad.p4"
    bad.write_text("123;\n")
    main.write_text('const bit<8> X = 1;\n#include "bad.p4"\n')
    assert compile_error([str(main), *args], capsys) == (
        f"{bad}:1:1: expected a declaration, found '123'"
    )
    assert not (tmp_path / "build").exists()


def failing_p4c(directory: Path) -> None:
    """A stand-in ``p4c`` that writes part of its outputs, then fails."""
    script = directory / "p4c"
    script.write_text(
        "#!/usr/bin/env python3\n"
        "import sys, pathlib\n"
        "out = pathlib.Path(sys.argv[sys.argv.index('-o') + 1])\n"
        "(out / (pathlib.Path(sys.argv[-1]).stem + '.json')).write_text('{')\n"
        "sys.exit('error: something p4c does not like')\n"
    )
    script.chmod(0o755)


def test_compile_writes_p4cs_outputs_with_ours_or_none_at_all(
    tmp_path: Path, beamer: CompiledProgram, capsys: pytest.CaptureFixture[str], bin_dir: Path
) -> None:
    failing_p4c(bin_dir)
    out = tmp_path / "build"
    assert compile_error([str(BEAMER_P4), "--out", str(out)], capsys) == (
        f"p4c failed on {BEAMER_P4}, nothing written (--no-p4c skips p4c): "
        "error: something p4c does not like"
    )
    assert not out.exists()
    fake_p4c(bin_dir, text_format.MessageToString(beamer.p4info))
    assert beamer_main(["compile", str(BEAMER_P4), "--out", str(out)]) == 0
    assert sorted(path.name for path in out.iterdir()) == [
        "beamer.json",
        "beamer.p4c.p4info.txtpb",
        "beamer.p4info.txtpb",
        "beamer.softswitch.json",
    ]
