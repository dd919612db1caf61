"""Generated classes for header/struct types and their extract/emit functions.

A header type ``T`` becomes class ``H_T`` (validity in ``_v``, fields as
attributes) and ``x_T(h, pkt, off, plen[, nbits]) -> new offset``; a
varbit header also ``e_T(h) -> bytes``. A fixed-size header's extract and
emit code is inlined where the parser and the deparser use it (one call
less per header and packet); a struct type becomes ``S_T``.
"""

from __future__ import annotations

from softswitch.frontend.emitter import Emitter, field_attr, py_name
from softswitch.frontend.errors import CompileError, SourceLocation
from softswitch.frontend.types import Bits, Bool, HeaderT, P4Type, StructT, Varbit


def emit_type_classes(
    out: Emitter, types: list[P4Type], type_locs: dict[str, SourceLocation]
) -> None:
    """Classes for every header and struct type, in declaration order."""
    emitted: set[str] = set()
    for t in types:
        if isinstance(t, HeaderT | StructT) and t.name not in emitted:
            emit_type_class(out, t, emitted, type_locs)


def class_name(t: HeaderT | StructT) -> str:
    """Generated class of a header (H_) or struct (S_) type."""
    return py_name("H_" if isinstance(t, HeaderT) else "S_", t.name)


def extract_fn(t: HeaderT) -> str:
    """Generated extract function of a header type, ``x_T``."""
    return py_name("x_", t.name)


def emit_fn(t: HeaderT) -> str:
    """Generated emit function of a header type with a varbit field, ``e_T``."""
    return py_name("e_", t.name)


def width_attr(name: str) -> str:
    """Attribute holding the current width in bits of varbit field ``name``."""
    return py_name("w_", name)


def emit_type_class(
    out: Emitter, t: HeaderT | StructT, emitted: set[str], type_locs: dict[str, SourceLocation]
) -> None:
    """A class per header/struct type.

    Scalar fields are class attributes holding zero, so a new instance
    costs one empty dict rather than one store per field; only nested
    headers/structs are created in ``__init__``.
    """
    emitted.add(t.name)
    defaults: list[str] = []
    nested: list[tuple[str, str]] = []
    if isinstance(t, HeaderT):
        defaults.append("_v = False")
    for name, ft in t.fields:
        if isinstance(ft, HeaderT | StructT):
            if ft.name not in emitted:
                raise CompileError(
                    type_locs.get(t.name), f"{t.name} uses {ft.name} before it is declared"
                )
            nested.append((field_attr(name), class_name(ft)))
        else:
            defaults.append(f"{field_attr(name)} = {zero_code(ft)}")
        if isinstance(ft, Varbit):
            defaults.append(f"{width_attr(name)} = 0")
    cls = class_name(t)
    out(f"class {cls}:")
    out.indent()
    for line in defaults:
        out(line)
    if nested:
        out("def __init__(self):")
        out.indent()
        for attr, nested_cls in nested:
            out(f"self.{attr} = {nested_cls}()")
        out.dedent()
    out("def copy(self):")
    out.indent()
    out(f"c = {cls}.__new__({cls})")
    out("c.__dict__.update(self.__dict__)")
    for attr, _ in nested:
        out(f"c.{attr} = self.{attr}.copy()")
    out("return c")
    out.dedent()
    if not defaults and not nested:
        out("pass")
    out.dedent()


def zero_code(t: P4Type) -> str:
    if isinstance(t, Bool):
        return "False"
    return "0"


def struct_name(t: HeaderT) -> str:
    """Global holding the precompiled ``struct.Struct`` of a fixed-size header."""
    return py_name("_ST_", t.name)


def fixed_layout(t: HeaderT) -> tuple[list[list[tuple[str, int]]], list[list[int]], str]:
    """Fields grouped into byte-aligned chunks, each chunk's word sizes, the struct format.

    Each chunk is read as 1/2/4/8-byte big-endian words (most significant
    first), so field splitting works on small ints.
    """
    chunks: list[list[tuple[str, int]]] = []
    current: list[tuple[str, int]] = []
    bits = 0
    for name, ft in t.fields:
        assert isinstance(ft, Bits)
        current.append((name, ft.width))
        bits += ft.width
        if bits % 8 == 0:
            chunks.append(current)
            current, bits = [], 0
    formats: list[str] = []
    chunk_words: list[list[int]] = []
    for chunk in chunks:
        remaining = sum(w for _, w in chunk) // 8
        words: list[int] = []
        for size in (8, 4, 2, 1):
            while remaining >= size:
                words.append(size)
                remaining -= size
        chunk_words.append(words)
        formats.extend({8: "Q", 4: "I", 2: "H", 1: "B"}[size] for size in words)
    return chunks, chunk_words, "!" + "".join(formats)


def fixed_extract_lines(
    t: HeaderT, header: str, pkt: str, off: str, plen: str, too_short: int
) -> list[str]:
    """Code that fills ``header`` from ``pkt`` at byte ``off`` (the offset is left unmoved).

    Used for the ``x_T`` function and inlined into parsers, which saves a
    call per extracted header.
    """
    chunks, chunk_words, _ = fixed_layout(t)
    lines = [f"if {off} + {t.fixed_bits // 8} > {plen}: raise _Reject({too_short})"]
    names = [f"_c{i}" for i in range(sum(len(words) for words in chunk_words))]
    targets = ", ".join(names) + ("," if len(names) == 1 else "")
    lines.append(f"{targets} = {struct_name(t)}.unpack_from({pkt}, {off})")
    index = 0
    for chunk, words in zip(chunks, chunk_words, strict=True):
        parts = names[index : index + len(words)]
        index += len(words)
        value = parts[0]
        if len(parts) > 1:
            terms = []
            shift = sum(words) * 8
            for part, size in zip(parts, words, strict=True):
                shift -= size * 8
                terms.append(f"({part} << {shift})" if shift else part)
            value = f"({' | '.join(terms)})"
            if len(chunk) > 1:
                lines.append(f"_c = {value}")
                value = "_c"
        shift = sum(w for _, w in chunk)
        for name, width in chunk:
            shift -= width
            expr = f"{value} >> {shift}" if shift else value
            if shift + width < sum(w for _, w in chunk):
                expr = f"({expr}) & {(1 << width) - 1}"
            lines.append(f"{header}.{field_attr(name)} = {expr}")
    lines.append(f"{header}._v = True")
    return lines


def fixed_emit_lines(t: HeaderT, header: str, out: str) -> list[str]:
    """Code that appends the bytes of (valid) ``header`` to the list ``out``.

    Used for the ``e_T`` function and inlined into deparsers.
    """
    chunks, chunk_words, _ = fixed_layout(t)
    lines: list[str] = []
    args: list[str] = []
    for number, (chunk, words) in enumerate(zip(chunks, chunk_words, strict=True)):
        shift = sum(w for _, w in chunk)
        terms = []
        for name, width in chunk:
            shift -= width
            attr = f"{header}.{field_attr(name)}"
            terms.append(f"({attr} << {shift})" if shift else attr)
        if len(words) == 1:
            args.append(" | ".join(terms))
            continue
        lines.append(f"_w{number} = {' | '.join(terms)}")
        shift = sum(words) * 8
        for size in words:
            shift -= size * 8
            word = f"_w{number} >> {shift}" if shift else f"_w{number}"
            args.append(f"({word}) & {(1 << (size * 8)) - 1}")
    lines.append(f"{out}.append({struct_name(t)}.pack({', '.join(args)}))")
    return lines


def emit_fixed_header_codec(out: Emitter, t: HeaderT, too_short: int) -> None:
    """The header's precompiled ``struct.Struct`` and its extract function.

    Parsers and deparsers inline the code of :func:`fixed_extract_lines` and
    :func:`fixed_emit_lines`; ``x_T`` serves ``lookahead<T>()``.
    """
    out(f"{struct_name(t)} = _Struct('{fixed_layout(t)[2]}')")
    out(f"def {extract_fn(t)}(h, pkt, off, plen):")
    out.indent()
    for line in fixed_extract_lines(t, "h", "pkt", "off", "plen", too_short):
        out(line)
    out(f"return off + {t.fixed_bits // 8}")
    out.dedent()


def emit_header_codec(out: Emitter, t: HeaderT, errors: dict[str, int]) -> None:
    """``x_T(h, pkt, off, plen[, nbits]) -> new off`` and ``e_T(h) -> bytes``."""
    varbit = t.varbit_field
    fixed = t.fixed_bits
    nbytes = fixed // 8
    too_short = errors["PacketTooShort"]
    if varbit is None:
        emit_fixed_header_codec(out, t, too_short)
        return
    vname, vtype = varbit
    bad_arg = errors["ParserInvalidArgument"]
    header_too_short = errors["HeaderTooShort"]
    out(f"def {extract_fn(t)}(h, pkt, off, plen, nbits):")
    out.indent()
    out(f"if nbits > {vtype.max_width}: raise _Reject({header_too_short})")
    out(f"if nbits < 0 or nbits % 8: raise _Reject({bad_arg})")
    out(f"end = off + {nbytes} + nbits // 8")
    out(f"if end > plen: raise _Reject({too_short})")
    out("v = int.from_bytes(pkt[off:end], 'big')")
    # Shifts are measured from the end; fields before the varbit move by nbits.
    after = 0
    seen_varbit = False
    shifts: dict[str, str] = {}
    for name, ft in reversed(t.fields):
        if isinstance(ft, Varbit):
            shifts[name] = str(after)
            seen_varbit = True
            continue
        assert isinstance(ft, Bits)
        shifts[name] = f"{after} + nbits" if seen_varbit else str(after)
        after += ft.width
    for name, ft in t.fields:
        if isinstance(ft, Varbit):
            out(f"h.{field_attr(name)} = (v >> {shifts[name]}) & ((1 << nbits) - 1)")
            out(f"h.{width_attr(name)} = nbits")
        else:
            assert isinstance(ft, Bits)
            out(f"h.{field_attr(name)} = (v >> ({shifts[name]})) & {(1 << ft.width) - 1}")
    out("h._v = True")
    out("return end")
    out.dedent()
    out(f"def {emit_fn(t)}(h):")
    out.indent()
    out(f"nbits = h.{width_attr(vname)}")
    out("v = 0")
    for name, ft in t.fields:
        if isinstance(ft, Varbit):
            out(f"v = (v << nbits) | h.{field_attr(name)}")
        else:
            assert isinstance(ft, Bits)
            out(f"v = (v << {ft.width}) | h.{field_attr(name)}")
    out(f"return v.to_bytes({nbytes} + nbits // 8, 'big')")
    out.dedent()
