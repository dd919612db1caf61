"""P4-16 frontend for v1model programs: source → typed IR → P4Info + executable pipeline."""

from __future__ import annotations

from softswitch.frontend.errors import CompileError, SourceLocation
from softswitch.frontend.program import CompiledProgram, compile_file, compile_source

__all__ = ["CompileError", "CompiledProgram", "SourceLocation", "compile_file", "compile_source"]
