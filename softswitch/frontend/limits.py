"""What the frontend accepts at most, so that no program makes it recurse past Python's
limit, allocate gigabytes or run for minutes. Each limit is far above what a real
program needs; going past one is a one-line CompileError at the construct."""

from __future__ import annotations

# Widest bit<W>, int<W>, varbit<W> and width-prefixed literal: p4c's own limit.
MAX_BIT_WIDTH = 2048

# Largest compile-time integer (bits) that constant folding may build, e.g. by shifts.
MAX_CONSTANT_BITS = 2 * MAX_BIT_WIDTH

# Deepest nesting of expressions (each parenthesised or operand expression, unary
# operator and cast), statements (an if and the block it opens count one each) and type
# arguments, counted together. The lowered program is Python, which takes at most 200
# nested parentheses (two per level here at most) and 100 indentation levels.
MAX_NESTING = 64

# Most cells of a counter or register array (each is a Python object at run time).
MAX_EXTERN_CELLS = 1 << 20

# Most cells of all counter and register arrays of a program together: a few hundred
# megabytes of cell objects at most, where two dozen arrays at the per-array limit
# would take gigabytes.
MAX_TOTAL_EXTERN_CELLS = 1 << 22

# Largest table size a program may declare (the P4Info field is 64 bits; entries are
# only stored as they are inserted, but a size must stay a sane number).
MAX_TABLE_SIZE = 1 << 24

# Longest line after #define expansion (macros defined from macros can double a line's
# length per definition).
MAX_LINE_CHARS = 1 << 20
