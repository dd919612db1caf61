"""What the frontend accepts at most, so that no program makes it recurse past Python's
limit, allocate gigabytes or run for minutes. Each limit is far above what a real
program needs; going past one is a one-line CompileError at the construct."""

from __future__ import annotations

# Widest bit<W>, int<W>, varbit<W> and width-prefixed literal: p4c's own limit.
MAX_BIT_WIDTH = 2048

# Largest compile-time integer (bits) that constant folding may build, e.g. by shifts.
MAX_CONSTANT_BITS = 2 * MAX_BIT_WIDTH

# Deepest nesting of expressions (each parenthesised or operand expression, binary
# operator, index or slice, unary operator and cast; a chain a - b - c is (a - b) - c,
# one level per operator), statements (an if and the block it opens count one each) and type
# arguments, counted together. The lowered program is Python, which takes at most 200
# nested parentheses (two per level here at most) and 100 indentation levels.
MAX_NESTING = 64

# Most fields of a header or struct, counting those of the headers and structs in it in
# full (and a header's validity as one): each is a Python attribute of every packet's
# headers or metadata, and structs of two structs each double per level of nesting.
MAX_TYPE_FIELDS = 4096

# Most header and struct fields one parser, control or action body creates (a local of
# a header or struct type) or copies (assigning a header or struct) per packet, counting
# the actions it calls and the costliest action of each table it applies, all branches
# together, and a parser state that can repeat PARSER_BASE_TRANSITIONS times. Each field
# costs a Python object per packet: 10,000 locals of a 4,096-field struct took 3.5 GB
# and 6 s per packet. 16 locals of the largest type fit; beamer.p4 creates and copies none.
MAX_FIELDS_PER_BLOCK = 1 << 16

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

# Largest P4 source file (a program or a file it includes). beamer.p4 and v1model.p4
# together are well under 100 KB; 16 MiB leaves room for generated programs.
MAX_SOURCE_BYTES = 16 << 20

# Most lines and characters of a whole program once #include and #define have done their
# work: includes nested ten deep, ten to a file, make a billion lines out of a few
# kilobytes, and a macro doubled eighteen times makes each line 256 K copies long.
MAX_PROGRAM_LINES = 1 << 20
MAX_PROGRAM_CHARS = 64 << 20

# Most tokens of a whole program (each is a Python object with its source location, a
# hundred-odd bytes): a real program, v1model.p4 included, has tens of thousands.
MAX_TOKENS = 1 << 20

# Most #include directives followed in one program (each reads a file): a real program
# follows a handful.
MAX_INCLUDES = 4096

# Most parser state transitions for one packet: a fixed allowance plus a few per byte
# of the packet. A parser that extracts makes at most one transition per byte; one
# that loops without extracting would otherwise spin forever on its first packet (it
# hangs BMv2 too). Past the bound the parser stops with error.ParserTimeout, the P4
# core library's error for a parser over its time, and ingress sees it in
# parser_error like any other parser error.
PARSER_BASE_TRANSITIONS = 1024
PARSER_TRANSITIONS_PER_BYTE = 4
