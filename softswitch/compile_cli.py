"""``beamer compile PROGRAM --out DIR``: P4Info and device config for the embedded target.

Writes ``<name>.p4info.txtpb`` (P4Info, protobuf text format) and
``<name>.softswitch.json`` (device config, see softswitch.frontend.program).
When ``p4c`` is on PATH it also builds ``<name>.json`` for BMv2 and checks that
p4c's P4Info (``<name>.p4c.p4info.txtpb``) is ours: same objects, ids, order and
annotations. All outputs of one compile appear together or not at all: each is
written to a temporary file beside it, and they are renamed into place only once
all were written, so a failed compile leaves every file in DIR as it was.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import NamedTuple

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from control.errors import UserError
from control.files import atomic_write_all_bytes, output_directory
from control.options import path_option
from softswitch.frontend import CompiledProgram, compile_file
from softswitch.p4rt.pipeline_config import p4info_difference

P4INFO_TEXT_HEADER = (
    "# proto-file: p4/config/v1/p4info.proto\n# proto-message: p4.config.v1.P4Info\n\n"
)
"""The first lines p4c writes in a text P4Info (comments to the protobuf text parser)."""


def p4info_text(program: CompiledProgram) -> bytes:
    return (P4INFO_TEXT_HEADER + text_format.MessageToString(program.p4info)).encode()


class P4cBuild(NamedTuple):
    outputs: dict[Path, bytes]  # every file p4c wrote, by where it goes in --out
    notes: list[str]  # what was built
    warnings: list[str]


def run_p4c(source: Path, out_dir: Path, ours: p4info_pb2.P4Info) -> P4cBuild:
    """Build the BMv2 JSON with p4c in a scratch directory, to be written to ``out_dir``
    with the other outputs (p4c missing is not an error, a warning)."""
    p4c = shutil.which("p4c")
    if p4c is None:
        return P4cBuild(
            {}, [], ["p4c not found on PATH: BMv2 JSON not built (the embedded target needs none)"]
        )
    info_name = f"{source.stem}.p4c.p4info.txtpb"
    with tempfile.TemporaryDirectory(prefix="beamer-p4c-") as scratch:
        command = [p4c, "--target", "bmv2", "--arch", "v1model", "-o", scratch,
                   "--p4runtime-files", str(Path(scratch) / info_name), str(source)]  # fmt: skip
        try:
            completed = subprocess.run(command, capture_output=True, text=True, check=False)
        except OSError as error:
            raise UserError(f"cannot run {p4c}: {error.strerror or error}") from None
        if completed.returncode != 0:
            first = (completed.stderr.strip().splitlines() or ["(no output)"])[0]
            raise UserError(
                f"p4c failed on {source}, nothing written (--no-p4c skips p4c): {first}"
            )
        try:
            outputs = {
                out_dir / path.name: path.read_bytes()
                for path in sorted(Path(scratch).iterdir())
                if path.is_file()
            }
        except OSError as error:
            raise UserError(f"cannot read what p4c wrote: {error.strerror or error}") from None
    p4c_info = out_dir / info_name
    notes = [f"wrote {out_dir / (source.stem + '.json')} and {p4c_info} with {p4c}"]
    return P4cBuild(outputs, notes, compare_p4info(outputs.get(p4c_info), p4c_info, ours))


def compare_p4info(text: bytes | None, p4c_info: Path, ours: p4info_pb2.P4Info) -> list[str]:
    """Warnings when p4c's P4Info (``text``, to be written to ``p4c_info``) is not ours."""
    if text is None:
        return [f"p4c wrote no P4Info {p4c_info}"]
    theirs = p4info_pb2.P4Info()
    try:
        text_format.Parse(text.decode(), theirs)
    except (UnicodeDecodeError, text_format.ParseError) as error:
        return [f"could not read p4c's P4Info {p4c_info}: {error}"]
    if theirs == ours:
        return []
    difference = p4info_difference(theirs, ours)
    if difference:
        return [f"p4c's P4Info {p4c_info} describes another program: {difference}"]
    return [f"p4c's P4Info {p4c_info} means the same program but is written differently"]


def compile_command(args: argparse.Namespace) -> int:
    out_dir = output_directory(args.out)
    source: Path = args.program
    program = compile_file(source)
    stem = source.stem
    outputs = {
        out_dir / f"{stem}.p4info.txtpb": p4info_text(program),
        out_dir / f"{stem}.softswitch.json": program.device_config(),
    }
    notes = [f"wrote {' and '.join(str(path) for path in outputs)}"]
    warnings: list[str] = []
    if not args.no_p4c:
        p4c = run_p4c(source, out_dir, program.p4info)
        for path, data in p4c.outputs.items():
            outputs.setdefault(path, data)
        notes += p4c.notes
        warnings += p4c.warnings
    # All outputs appear together or none does (nor a directory made for them).
    created = make_directories(out_dir)
    try:
        atomic_write_all_bytes(outputs)
    except BaseException:
        remove_directories(created)
        raise
    for note in notes:
        print(note)
    for warning in warnings:
        print(f"beamer compile: {warning}")
    return 0


def make_directories(directory: Path) -> list[Path]:
    """Create ``directory`` and missing parents; return those created, outermost first."""
    missing: list[Path] = []
    while not os.path.lexists(directory) and directory != directory.parent:
        missing.append(directory)
        directory = directory.parent
    created: list[Path] = []
    for path in reversed(missing):
        try:
            path.mkdir()
        except OSError as error:
            remove_directories(created)
            raise UserError(f"cannot create {path}: {error.strerror or error}") from None
        created.append(path)
    return created


def remove_directories(created: list[Path]) -> None:
    """Undo :func:`make_directories` (directories something else filled stay)."""
    for path in reversed(created):
        with contextlib.suppress(OSError):
            path.rmdir()


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "compile",
        help="compile a P4-16 v1model program for the embedded target (and BMv2 if p4c exists)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("program", type=path_option, help="P4-16 source, e.g. p4src/beamer.p4")
    parser.add_argument("--out", default="build", help="output directory (default: build)")
    parser.add_argument("--no-p4c", action="store_true", help="do not run p4c even if found")
    parser.set_defaults(func=compile_command)
