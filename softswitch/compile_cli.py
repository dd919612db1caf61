"""``beamer compile PROGRAM --out DIR``: P4Info and device config for the embedded target.

Writes ``<name>.p4info.txtpb`` (P4Info, protobuf text format) and
``<name>.softswitch.json`` (device config, see softswitch.frontend.program),
each atomically (temporary file, then rename), so a failed compile never
leaves a half-written output. When ``p4c`` is on PATH it also builds
``<name>.json`` for BMv2 and checks that p4c's P4Info
(``<name>.p4c.p4info.txtpb``) is ours: same objects, ids, order and annotations.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from control.errors import UserError
from control.files import atomic_write_bytes
from softswitch.frontend import CompiledProgram, compile_file
from softswitch.p4rt.pipeline_config import p4info_difference

P4INFO_TEXT_HEADER = (
    "# proto-file: p4/config/v1/p4info.proto\n# proto-message: p4.config.v1.P4Info\n\n"
)
"""The first lines p4c writes in a text P4Info (comments to the protobuf text parser)."""


def p4info_text(program: CompiledProgram) -> bytes:
    return (P4INFO_TEXT_HEADER + text_format.MessageToString(program.p4info)).encode()


def run_p4c(source: Path, out_dir: Path, ours: p4info_pb2.P4Info) -> list[str]:
    """Build the BMv2 JSON with p4c; return warnings (p4c missing is not an error)."""
    p4c = shutil.which("p4c")
    if p4c is None:
        return ["p4c not found on PATH: BMv2 JSON not built (the embedded target needs none)"]
    p4c_info = out_dir / f"{source.stem}.p4c.p4info.txtpb"
    command = [p4c, "--target", "bmv2", "--arch", "v1model", "-o", str(out_dir),
               "--p4runtime-files", str(p4c_info), str(source)]  # fmt: skip
    try:
        completed = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as error:
        raise UserError(f"cannot run {p4c}: {error.strerror or error}") from None
    if completed.returncode != 0:
        first = (completed.stderr.strip().splitlines() or ["(no output)"])[0]
        raise UserError(f"p4c failed on {source}: {first}")
    print(f"wrote {out_dir / (source.stem + '.json')} and {p4c_info} with {p4c}")
    theirs = p4info_pb2.P4Info()
    try:
        text_format.Parse(p4c_info.read_text(), theirs)
    except (OSError, text_format.ParseError) as error:
        return [f"could not read p4c's P4Info {p4c_info}: {error}"]
    if theirs == ours:
        return []
    difference = p4info_difference(theirs, ours)
    if difference:
        return [f"p4c's P4Info {p4c_info} describes another program: {difference}"]
    return [f"p4c's P4Info {p4c_info} means the same program but is written differently"]


def compile_command(args: argparse.Namespace) -> int:
    source = Path(args.program)
    if not source.is_file():
        raise UserError(f"{source}: no such P4 program")
    out_dir = Path(args.out)
    program = compile_file(source)
    stem = source.stem
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(out_dir / f"{stem}.p4info.txtpb", p4info_text(program))
        atomic_write_bytes(out_dir / f"{stem}.softswitch.json", program.device_config())
    except OSError as error:
        raise UserError(f"cannot write to {out_dir}: {error.strerror or error}") from None
    print(f"wrote {out_dir / (stem + '.p4info.txtpb')} and {out_dir / (stem + '.softswitch.json')}")
    if not args.no_p4c:
        for warning in run_p4c(source, out_dir, program.p4info):
            print(f"beamer compile: {warning}")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "compile",
        help="compile a P4-16 v1model program for the embedded target (and BMv2 if p4c exists)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("program", help="P4-16 source, e.g. p4src/beamer.p4")
    parser.add_argument("--out", default="build", help="output directory (default: build)")
    parser.add_argument("--no-p4c", action="store_true", help="do not run p4c even if found")
    parser.set_defaults(func=compile_command)
