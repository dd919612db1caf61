"""Functions and exceptions the generated pipeline code calls at packet time."""

from __future__ import annotations

import random
import sys
import zlib
from array import array

from softswitch.runtime import CounterData


class _Reject(Exception):
    """The parser rejects the packet with an error code (v1model: parser_error)."""

    def __init__(self, code: int) -> None:
        self.code = code


class _Exit(Exception):
    """P4 ``exit``: leave the current control block at once."""


class _Locals:
    """Control-level variables of one control invocation."""


_LITTLE_ENDIAN = sys.byteorder == "little"


def _to_bytes(value: int, nbits: int) -> bytes:
    """Bits left-aligned in whole bytes, the last byte zero-padded (BMv2's field lists)."""
    pad = -nbits % 8
    return (value << pad).to_bytes((nbits + pad) // 8, "big")


def _hash_csum16(value: int, nbits: int) -> int:
    """Internet checksum (RFC 1071) of the bits, an odd trailing byte padded with zero."""
    data = _to_bytes(value, nbits)
    if len(data) & 1:
        data += b"\0"
    # One's-complement sums are byte-order independent: sum native words, swap once.
    total = sum(array("H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    total = ~total & 0xFFFF
    if _LITTLE_ENDIAN:
        total = ((total & 0xFF) << 8) | (total >> 8)
    return total


def _hash_crc32(value: int, nbits: int) -> int:
    return zlib.crc32(_to_bytes(value, nbits))


def _hash_identity(value: int, nbits: int) -> int:
    return value


def _hash_result(hashed: int, base: int, max_value: int) -> int:
    """v1model ``hash``: base + hash mod max (max 0 means no reduction)."""
    return base + (hashed % max_value if max_value else hashed)


def _lookahead(pkt: bytes, off: int, plen: int, nbits: int) -> int:
    nbytes = (nbits + 7) // 8
    if off + nbytes > plen:
        raise _Reject(_PACKET_TOO_SHORT)
    return int.from_bytes(pkt[off : off + nbytes], "big") >> (nbytes * 8 - nbits)


def _advance(off: int, plen: int, nbits: int) -> int:
    if nbits % 8:
        raise _Reject(_PARSER_INVALID_ARGUMENT)
    end = off + nbits // 8
    if end > plen:
        raise _Reject(_PACKET_TOO_SHORT)
    return end


def _count(cells: list[CounterData], index: int, length_bytes: int) -> None:
    """Indirect counter: an index out of range is ignored, as BMv2 logs and goes on."""
    if index < len(cells):
        cells[index].add(length_bytes)


def _reg_read(cells: list[int], index: int) -> int:
    return cells[index] if index < len(cells) else 0


def _reg_write(cells: list[int], index: int, value: int) -> None:
    if index < len(cells):
        cells[index] = value


def _random(low: int, high: int) -> int:
    return random.randint(low, high) if low <= high else low


# Error codes from core.p4's declaration order (checked when a program loads).
_PACKET_TOO_SHORT = 1
_PARSER_INVALID_ARGUMENT = 6

HELPERS = {
    "_Reject": _Reject,
    "_Exit": _Exit,
    "_Locals": _Locals,
    "_hash_csum16": _hash_csum16,
    "_hash_crc32": _hash_crc32,
    "_hash_identity": _hash_identity,
    "_hash_result": _hash_result,
    "_lookahead": _lookahead,
    "_advance": _advance,
    "_count": _count,
    "_reg_read": _reg_read,
    "_reg_write": _reg_write,
    "_random": _random,
}
