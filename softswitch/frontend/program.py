"""The compiled program: what the target loads, and its device-config file format.

Device config (``*.softswitch.json``), version 1::

    {"format": "beamer-softswitch", "version": 1,
     "program": "beamer.p4",
     "p4info_sha256": "<hex digest of the deterministic P4Info serialisation>",
     "source": [[file, line, text], ...]}   # preprocessed non-blank lines, with origins

Loading recompiles the source (milliseconds) and refuses the config if the
fingerprint differs from the P4Info it produces, so a P4Info from another
program or another compiler version is never paired with it silently.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from p4.config.v1 import p4info_pb2

from control.errors import UserError
from control.files import parse_json
from softswitch.frontend.compiler import lower
from softswitch.frontend.errors import CompileError
from softswitch.frontend.lowered import LoweredProgram
from softswitch.frontend.p4info import build_p4info
from softswitch.frontend.parser import parse
from softswitch.frontend.preprocess import Line, Preprocessor
from softswitch.runtime import (
    ActionCall,
    ExactMatch,
    FieldMatch,
    LpmMatch,
    OptionalMatch,
    RangeMatch,
    RuntimeState,
    TableEntry,
    TernaryMatch,
)

DEVICE_CONFIG_FORMAT = "beamer-softswitch"
DEVICE_CONFIG_VERSION = 1


def p4info_fingerprint(p4info: p4info_pb2.P4Info) -> str:
    return hashlib.sha256(p4info.SerializeToString(deterministic=True)).hexdigest()


class CompiledProgram:
    """A type-checked program lowered to Python, with its P4Info."""

    def __init__(self, name: str, lines: list[Line], lowered: LoweredProgram) -> None:
        self.name = name
        self.lines = lines
        self.lowered = lowered
        self.p4info: p4info_pb2.P4Info = build_p4info(lowered)
        self.fingerprint = p4info_fingerprint(self.p4info)
        self.table_ids = {t.preamble.name: t.preamble.id for t in self.p4info.tables}
        self.action_ids = {a.preamble.name: a.preamble.id for a in self.p4info.actions}
        # Actions no table references still need an id for dispatch; use negative ones.
        for index, name_ in enumerate(sorted(set(lowered.actions) - set(self.action_ids))):
            self.action_ids[name_] = -(index + 1)
        self.counter_ids = {c.preamble.name: c.preamble.id for c in self.p4info.counters}
        self.register_ids = {r.preamble.name: r.preamble.id for r in self.p4info.registers}

    # ------------------------------------------------------------------ device config

    def device_config(self) -> bytes:
        document = {
            "format": DEVICE_CONFIG_FORMAT,
            "version": DEVICE_CONFIG_VERSION,
            "program": self.name,
            "p4info_sha256": self.fingerprint,
            "source": [
                [line.file, line.number, line.text] for line in self.lines if line.text.strip()
            ],
        }
        return json.dumps(document, separators=(",", ":")).encode()

    @classmethod
    def from_device_config(
        cls, data: bytes, p4info: p4info_pb2.P4Info | None = None
    ) -> CompiledProgram:
        """Load a device config; with ``p4info``, refuse it unless it matches."""
        try:
            document = parse_json(data.decode("utf-8"), "device config")
        except UnicodeDecodeError as error:
            raise CompileError(
                None, f"device config is not JSON: not UTF-8 ({error.reason})"
            ) from None
        except UserError as error:
            raise CompileError(None, f"device config is not JSON: {error}") from None
        if not isinstance(document, dict) or document.get("format") != DEVICE_CONFIG_FORMAT:
            raise CompileError(None, "device config is not a beamer-softswitch config")
        if document.get("version") != DEVICE_CONFIG_VERSION:
            raise CompileError(
                None, f"device config version {document.get('version')} is not supported"
            )
        lines = _source_lines(document.get("source"))
        name = document.get("program")
        fingerprint = document.get("p4info_sha256")
        if not isinstance(name, str) or not isinstance(fingerprint, str):
            raise CompileError(None, "device config: program and p4info_sha256 must be strings")
        # Before the compile, which takes seconds for a large program: the P4Info given
        # must be the one the config declares, whatever the source compiles to.
        if p4info is not None and p4info_fingerprint(p4info) != fingerprint:
            raise CompileError(None, "the P4Info does not belong to this device config")
        program = cls(name, lines, parse_and_lower(lines, name))
        if program.fingerprint != fingerprint:
            raise CompileError(None, "device config: its P4Info fingerprint does not match")
        return program

    # ------------------------------------------------------------------ runtime state

    def new_runtime_state(self) -> RuntimeState:
        """Fresh control-plane state: initial defaults and const entries installed."""
        defaults: dict[int, ActionCall] = {}
        const_entries: dict[int, list[TableEntry]] = {}
        for table in self.lowered.tables:
            table_id = self.table_ids[table.name]
            defaults[table_id] = ActionCall(
                self.action_ids[table.default_action], tuple(table.default_args)
            )
            if table.const_entries is None:
                continue
            entries: list[TableEntry] = []
            for matches, priority, action, args in table.const_entries:
                fields: dict[int, FieldMatch] = {}
                for field_id, (kind, a, b) in enumerate(matches, start=1):
                    width = table.keys[field_id - 1].bitwidth
                    if kind == "exact":
                        fields[field_id] = ExactMatch(a)
                    elif kind == "lpm" and b > 0:
                        fields[field_id] = LpmMatch(a & ~((1 << (width - b)) - 1), b)
                    elif kind == "ternary" and b != 0:
                        fields[field_id] = TernaryMatch(a & b, b)
                    elif kind == "range":
                        fields[field_id] = RangeMatch(a, b)
                    elif kind == "optional":
                        fields[field_id] = OptionalMatch(a)
                entries.append(
                    TableEntry(fields, ActionCall(self.action_ids[action], tuple(args)), priority)
                )
            const_entries[table_id] = entries
        return RuntimeState(self.p4info, defaults, const_entries)


def compile_lines(lines: list[Line], name: str) -> CompiledProgram:
    return CompiledProgram(name, lines, parse_and_lower(lines, name))


def parse_and_lower(lines: list[Line], name: str) -> LoweredProgram:
    """:func:`parse` then :func:`lower`. The parser bounds nesting (MAX_NESTING); a
    RecursionError past that would be a bug, still reported as one line."""
    try:
        return lower(parse(lines))
    except RecursionError:
        raise CompileError(None, f"{name}: the program is nested too deeply to compile") from None


def compile_file(path: Path) -> CompiledProgram:
    """Preprocess, parse and check ``path``; raises CompileError with file:line:col."""
    lines = Preprocessor([path.parent]).run_file(path)
    return compile_lines(lines, path.name)


def compile_source(source: str, filename: str = "<string>") -> CompiledProgram:
    lines = Preprocessor().run_text(source, filename, Path.cwd(), 0)
    return compile_lines(lines, filename)


def _source_lines(source: object) -> list[Line]:
    """The device config's preprocessed source: [file, line, text] triples, the line a
    whole number (a float such as 1e400 or 1.5 is no line number)."""
    if not isinstance(source, list):
        raise CompileError(None, "device config: source must be a list of [file, line, text]")
    lines = []
    for index, item in enumerate(source):
        if (
            not isinstance(item, list)
            or len(item) != 3
            or not isinstance(item[0], str)
            or type(item[1]) is not int
            or not isinstance(item[2], str)
        ):
            raise CompileError(
                None, f"device config: source[{index}] is not [file, line number, text]"
            )
        file_name, number, text = item
        lines.append(Line(text, file_name, number))
    return lines
