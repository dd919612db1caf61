"""The compiled program: what the target loads, and its device-config file format."""

from __future__ import annotations

from pathlib import Path

from p4.config.v1 import p4info_pb2

from softswitch.runtime import RuntimeState


class CompiledProgram:
    """A type-checked program with its P4Info.

    ``device_config()`` serialises it (versioned JSON holding the preprocessed
    source and a P4Info fingerprint); ``from_device_config`` loads that back.
    """

    p4info: p4info_pb2.P4Info

    def device_config(self) -> bytes:
        raise NotImplementedError

    @classmethod
    def from_device_config(cls, data: bytes) -> CompiledProgram:
        raise NotImplementedError

    def new_runtime_state(self) -> RuntimeState:
        """Fresh control-plane state: initial defaults and const entries installed."""
        raise NotImplementedError


def compile_file(path: Path) -> CompiledProgram:
    """Preprocess, parse and check ``path``; raises CompileError with file:line:col."""
    raise NotImplementedError


def compile_source(source: str, filename: str = "<string>") -> CompiledProgram:
    raise NotImplementedError
