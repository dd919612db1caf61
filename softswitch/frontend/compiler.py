"""Type checking and lowering of a v1model program to Python source.

One pass over the syntax tree checks every construct and emits Python: a
class per header/struct type, an extract and an emit function per header
type, one function per parser, control, action and table. The pipeline
compiles that source once with ``compile()``; packets then run plain Python
functions over ints, with no tree walking at packet time.

Value representation: ``bit<W>`` is an int in [0, 2**W), ``bool`` a bool,
errors and enums small ints, a varbit field two attributes (value and
width in bits), a header an object with a ``_v`` validity flag.

The work is split by concern, each a layer that may use the ones below it:

=====================  =====================================================
``compiler_state``     symbol tables, types, the output being written
``references``         actions and tables named by a block
``expressions``        expressions: type rules, constant folding
``externs``            v1model externs, packet_in / packet_out
``calls``              method and function calls
``statements``         statements and local variables
``tables``             table declarations, const entries, apply functions
``parser_lowering``    parsers and their state machines
``control_lowering``   controls, their actions and extern instances
``declarations``       top-level declarations and the V1Switch package
=====================  =====================================================
"""

from __future__ import annotations

from softswitch.frontend import ast
from softswitch.frontend.codecs import emit_header_codec, emit_type_classes
from softswitch.frontend.control_lowering import ControlLowering
from softswitch.frontend.declarations import V1SWITCH_BLOCKS, DeclarationPass
from softswitch.frontend.errors import CompileError
from softswitch.frontend.lowered import LoweredProgram
from softswitch.frontend.parser_lowering import ParserLowering
from softswitch.frontend.types import HeaderT


class Compiler(ControlLowering, ParserLowering, DeclarationPass):
    """Checks one program and lowers it: declarations first, then the six V1Switch blocks."""

    def compile(self) -> LoweredProgram:
        for decl in self.program.decls:
            self.declare(decl)
        if self.main is None:
            raise CompileError(
                None, "the program has no 'main' package instance (V1Switch(...) main;)"
            )
        blocks = self.resolve_main(self.main)
        self.lowered.errors = dict(self.errors)
        self.emit_prelude()
        for name, block in zip(V1SWITCH_BLOCKS, blocks, strict=True):
            if isinstance(block, ast.ParserDecl):
                self.lower_parser(block, name)
            else:
                self.lower_control(block, name)
        self.lowered.source = self.out.text()
        return self.lowered

    def emit_prelude(self) -> None:
        """Header/struct classes and header codecs, which every block uses."""
        emit_type_classes(self.out, list(self.types.values()), self.type_locs)
        for t in self.types.values():
            if isinstance(t, HeaderT):
                emit_header_codec(self.out, t, self.errors)
        self.out("")


def lower(program: ast.Program) -> LoweredProgram:
    """Check ``program`` and lower it to Python; raises CompileError on the first problem."""
    return Compiler(program).compile()
